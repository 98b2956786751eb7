//! The two-point method's sender: per prompt, request a, then (cold) a cache flush, then
//! request b with the same prompt, one pair at a time.

use futures_util::future::BoxFuture;

use servebench_model::catalog::FlagKind;
use servebench_model::results::meta::CacheReset;
use servebench_model::results::records::{Flag, RequestRole};
use servebench_model::spec::types::{CachePolicy, Experiment};

use super::planned::{Planned, RequestTarget, generation_request, prepare, reset_cache_with};
use super::sender::{SendEnd, Sender};
use crate::run::probe::Window;
use crate::run::request::{Outgoing, RequestPath, Sent};

/// A two-point round: per prompt, request a (`max_tokens` a), then, under the cold policy, a
/// cache flush, then request b with the same prompt. One pair at a time: a flush is refused
/// while requests run.
pub(super) struct TwoPoint<'p> {
    pub exp: &'p Experiment,
    pub count: usize,
    pub lengths: (u32, u32),
    pub requests: Box<dyn Iterator<Item = Planned> + Send + 'p>,
    pub target: &'p RequestTarget,
    /// How the server's cache is emptied between a pair's requests (None: it has no way).
    pub reset: Option<CacheReset>,
}

impl<'p> Sender<'p> for TwoPoint<'p> {
    fn send<'s>(
        self: Box<Self>,
        path: &'s RequestPath,
        window: &'s Window,
    ) -> BoxFuture<'s, SendEnd>
    where
        'p: 's,
    {
        Box::pin(async move {
            let TwoPoint {
                exp,
                count,
                lengths: (a, b),
                requests,
                target,
                reset,
            } = *self;
            let mut end = SendEnd {
                planned: 2 * count,
                ..SendEnd::default()
            };
            path.plan_measured(end.planned);
            prepare(path.client(), 1).await;
            path.open(window);
            'prompts: for (i, planned) in requests.enumerate() {
                for (role, max_tokens) in [(RequestRole::TwoPointA, a), (RequestRole::TwoPointB, b)]
                {
                    if !path.may_send() {
                        break 'prompts;
                    }
                    if role == RequestRole::TwoPointB
                        && exp.cache.policy == CachePolicy::Cold
                        && let Some(how) = &reset
                        && let Err(e) = reset_cache_with(path.client(), how, path.interrupt()).await
                    {
                        end.flags.push(Flag::new(
                            FlagKind::FlushFailed,
                            format!("{e}; the point ran without a cache reset"),
                        ));
                    }
                    let mut req = generation_request(exp, planned.text.clone(), target);
                    req.max_tokens = max_tokens;
                    let mut out = Outgoing::new(req, i as u32, role);
                    out.requested = planned.requested;
                    out.mix = planned.mix.clone();
                    match path.send(out, None).await {
                        Sent::Answered(a) if a.record.error.is_none() => {}
                        // Without its first request a pair has no t_a; on to the next prompt.
                        Sent::Answered(_) => break,
                        Sent::NotWritten | Sent::Interrupted => break 'prompts,
                    }
                }
            }
            end
        })
    }
}
