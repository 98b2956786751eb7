//! The two-point method's sender: per prompt, request a, then (cold) a cache flush, then
//! request b with the same prompt, one pair at a time.

use super::RequestTarget;
use crate::client::Client;
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, RequestRecord, RequestRole};
use servebench_model::spec::Point;
use servebench_model::spec::types::CachePolicy;

use super::{Planned, PointRunner, fill_omitted_cached, generation_request, prepare};

impl PointRunner {
    /// Two-point method: per prompt, request a (`max_tokens` a), then, under the cold policy,
    /// a cache flush, then request b with the same prompt. One pair at a time: a flush is
    /// refused while requests run. Returns the records (both of each pair) and whether an
    /// interrupt stopped it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn send_pairs(
        &self,
        client: &Client,
        point: &Point,
        round: u32,
        (a, b): (u32, u32),
        prompts: impl Iterator<Item = Planned>,
        target: &RequestTarget,
        flags: &mut Vec<Flag>,
    ) -> (Vec<RequestRecord>, bool) {
        let exp = &point.experiment;
        let mut records = Vec::new();
        prepare(client, 1).await;
        for (i, planned) in prompts.enumerate() {
            let (prompt, requested) = (planned.text, planned.requested);
            for (role, max_tokens) in [(RequestRole::TwoPointA, a), (RequestRole::TwoPointB, b)] {
                if role == RequestRole::TwoPointB
                    && exp.cache.policy == CachePolicy::Cold
                    && let Err(e) = self.reset_cache(client).await
                {
                    flags.push(Flag {
                        kind: FlagKind::FlushFailed,
                        message: format!("{e}; the point ran without a cache reset"),
                    });
                }
                let mut req = generation_request(exp, prompt.clone(), target);
                req.max_tokens = max_tokens;
                self.progress.request_started();
                let m = tokio::select! {
                    m = client.stream(&req, exp.request_timeout) => m,
                    _ = self.interrupt.wait() => return (records, true),
                };
                let mut rec = m.into_record(
                    &point.id,
                    round,
                    i as u32,
                    role,
                    exp.workload.api,
                    max_tokens,
                    requested,
                );
                fill_omitted_cached(&mut rec, self.cached_omitted_is_zero());
                rec.mix = planned.mix.clone();
                let written = self.append(&rec);
                self.progress.request_finished();
                if !written {
                    return (records, true);
                }
                let failed = rec.error.is_some();
                records.push(rec);
                if failed {
                    // Without its first request a pair has no t_a; move on to the next prompt.
                    break;
                }
            }
        }
        (records, false)
    }
}
