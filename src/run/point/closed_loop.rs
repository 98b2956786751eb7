//! The closed loop: a round's requests sent with at most `concurrency` in flight, the next one
//! released as one ends.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use servebench_model::results::records::RequestRole;
use servebench_model::spec::types::Experiment;

use super::planned::{Planned, RequestTarget, generation_request, prepare, task_died};
use super::sender::{SendEnd, Sender};
use crate::run::probe::Window;
use crate::run::request::{BlockMarks, Outgoing, RequestPath};

/// A closed-loop round: its requests, made as they are taken.
pub(super) struct ClosedLoop<'p> {
    pub exp: &'p Experiment,
    pub count: usize,
    pub requests: Box<dyn Iterator<Item = Planned> + Send + 'p>,
    pub target: &'p RequestTarget,
}

impl<'p> Sender<'p> for ClosedLoop<'p> {
    fn send<'s>(
        self: Box<Self>,
        path: &'s RequestPath,
        window: &'s Window,
    ) -> BoxFuture<'s, SendEnd>
    where
        'p: 's,
    {
        Box::pin(async move {
            let ClosedLoop {
                exp,
                count,
                requests,
                target,
            } = *self;
            let mut end = SendEnd {
                planned: count,
                ..SendEnd::default()
            };
            path.plan_measured(count);
            let concurrency = exp.concurrency.max(1) as usize;
            // The connections the round needs are opened before its first request is
            // released, so no measured request shares the client's time with the others'
            // handshakes.
            prepare(path.client(), concurrency.min(count)).await;
            // The closed loop's measured window is the whole round.
            path.open(window);
            let sem = Arc::new(Semaphore::new(concurrency));
            let mut tasks: JoinSet<()> = JoinSet::new();
            for (i, planned) in requests.enumerate() {
                let permit = tokio::select! {
                    p = sem.clone().acquire_owned() => p,
                    _ = path.interrupt().wait() => break,
                };
                let Ok(permit) = permit else { break };
                if !path.may_send() {
                    break;
                }
                let mut req = generation_request(exp, planned.text, target);
                req.max_tokens = planned.max_tokens;
                let mut out = Outgoing::new(req, i as u32, RequestRole::Measure);
                out.requested = planned.requested;
                out.share = planned.share;
                out.mix = planned.mix;
                out.theoretical = planned.theoretical_cached;
                out.slot = Some(permit);
                let (path, mut entry) = (path.clone(), planned.ledger);
                tasks.spawn(async move {
                    path.send(out, entry.as_mut().map(|e| e as &mut dyn BlockMarks))
                        .await;
                });
            }
            while let Some(done) = tasks.join_next().await {
                if let Err(e) = done {
                    end.flags.extend(task_died(e));
                }
            }
            end
        })
    }
}
