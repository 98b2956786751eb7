//! The closed loop: a round's requests sent with at most `concurrency` in flight, the next one
//! released as one ends.

use super::RequestTarget;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::Client;
use servebench_model::results::records::{ErrorKind, Flag, RequestRecord, RequestRole};
use servebench_model::spec::Point;

use super::{
    Planned, PointRunner, ServerGone, fill_omitted_cached, generation_request, prepare, task_died,
};

impl PointRunner {
    /// Sends the `count` prompts with at most `concurrency` in flight; records each as it
    /// completes. Returns the records and whether an interrupt stopped it.
    pub(super) async fn send_closed_loop(
        &self,
        client: &Client,
        point: &Point,
        round: u32,
        (count, prompts): (usize, impl Iterator<Item = Planned>),
        target: &RequestTarget,
        flags: &mut Vec<Flag>,
    ) -> (Vec<RequestRecord>, bool) {
        let exp = &point.experiment;
        let concurrency = exp.concurrency.max(1) as usize;
        // The connections the round needs are opened before its first request is released, so
        // no measured request shares the client's time with the others' handshakes.
        prepare(client, concurrency.min(count)).await;
        let sem = Arc::new(Semaphore::new(concurrency));
        // A task's record, or None when it could not be written (and so does not count).
        let mut tasks: JoinSet<Option<RequestRecord>> = JoinSet::new();
        let mut records = Vec::new();
        let mut stopped = false;
        let gone = ServerGone::default();
        let mut sent = 0usize;
        for (i, planned) in prompts.enumerate() {
            let permit = tokio::select! {
                p = sem.clone().acquire_owned() => p,
                _ = self.interrupt.wait() => { stopped = true; break; }
            };
            let Ok(permit) = permit else { break };
            if gone.is_set() {
                break;
            }
            sent += 1;
            let mut req = generation_request(exp, planned.text, target);
            req.max_tokens = planned.max_tokens;
            let (client, writer, progress) =
                (client.clone(), self.writer.clone(), self.progress.clone());
            let omitted_is_zero = self.cached_omitted_is_zero();
            let (pid, api, timeout) = (point.id.clone(), exp.workload.api, exp.request_timeout);
            let (requested, share, mix) = (planned.requested, planned.share, planned.mix);
            let (theoretical, mut entry) = (planned.theoretical_cached, planned.ledger);
            let gone = gone.clone();
            tasks.spawn(async move {
                progress.request_started();
                if let Some(e) = &mut entry {
                    e.mark_sent();
                }
                let m = client.stream(&req, timeout).await;
                // A request that could not connect keeps its slot until the server is judged,
                // so no request follows a lost server; any other frees it now.
                let mut permit = Some(permit);
                if m.error
                    .as_ref()
                    .is_none_or(|e| e.kind != ErrorKind::Connect)
                {
                    permit = None;
                }
                let mut rec = m.into_record(
                    &pid,
                    round,
                    i as u32,
                    RequestRole::Measure,
                    api,
                    req.max_tokens,
                    requested,
                );
                fill_omitted_cached(&mut rec, omitted_is_zero);
                rec.share = share;
                rec.theoretical_cached_tokens = theoretical;
                rec.reachable_cached_tokens = super::reachable(entry.as_ref(), &rec);
                rec.mix = mix;
                let written = writer.write(rec).await;
                progress.request_finished();
                if let Some(rec) = &written {
                    gone.judge(&client, rec).await;
                }
                drop(permit);
                written
            });
        }
        loop {
            tokio::select! {
                next = tasks.join_next() => match next {
                    Some(Ok(Some(rec))) => records.push(rec),
                    Some(Ok(None)) => {}
                    Some(Err(e)) => flags.extend(task_died(e)),
                    None => break,
                },
                _ = self.interrupt.wait(), if !stopped => {
                    // Requests still in flight are abandoned: they never finished, so they are
                    // not measurements. The server aborts them when the connection drops.
                    stopped = true;
                    tasks.abort_all();
                }
            }
        }
        if gone.is_set() {
            flags.push(gone.flag(sent, count));
        }
        records.sort_by_key(|r| r.index);
        (records, stopped)
    }
}
