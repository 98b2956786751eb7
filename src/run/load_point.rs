//! One round of an open-loop `load:` point: the schedule computed up front, the pacer releasing
//! each planned request (drawn, calibrated and given its nonce by the point runner, as in a
//! closed loop) at its deadline, each record marked with its scheduled time, lag and phase.
//! Warm-up and cool-down requests are recorded and dropped; measured ones are folded into the
//! point's summary as they finish, so memory does not grow with their count (only requests
//! judged with their shared-prefix group wait for the point's end).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::catalog::FlagKind;
use crate::client::Client;
use crate::load::{Pacer, Schedule};
use crate::measure::summary::PointFold;
use crate::measure::system::Observed;
use crate::results::records::{Flag, Phase, ProfileCapture, RequestRecord, RequestRole};
use crate::spec::Point;

use super::point::{Planned, PointRunner, fill_omitted_cached, generation_request, prepare};
use super::profiler::Capture;

/// How long after the schedule is made its first request is due: the pacer thread starts and
/// the first connections are settled before the clock runs.
const LEAD: Duration = Duration::from_millis(20);

/// Fewest connections opened ahead of a load point (when it has that many requests).
const PREPARED_CONNECTIONS: usize = 256;

/// Connections are opened ahead for every request due within this span of the schedule at its
/// busiest: a request of the fast simulator profile ends within it, so the pool's connections
/// are reused after that. `rate: inf` (every request due at once) gets one per request.
const AHEAD_WINDOW_S: f64 = 0.1;

/// Descriptors left to the rest of the process (run directory files, logs, the server's
/// pipes) when connections are opened ahead up to the open-file limit.
const RESERVED_FILES: u64 = 256;

impl PointRunner {
    /// Sends one round of an open-loop point on its schedule: the `i`-th of `planned` when
    /// `schedule.requests[i]` is due, made then (the cache was prepared already).
    /// Folds each measured record into `fold` as it finishes (written to the sink first).
    /// Returns whether an interrupt stopped it, and what the client observed.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn send_scheduled(
        &self,
        client: &Client,
        point: &Point,
        round: u32,
        schedule: &Schedule,
        mut planned: impl Iterator<Item = Planned>,
        model: &Option<String>,
        flags: &mut Vec<Flag>,
        fold: &mut PointFold,
        mut capture: Option<Capture>,
    ) -> (bool, (Observed, Option<ProfileCapture>)) {
        let exp = &point.experiment;
        let mut observed = Observed::default();
        let omitted_is_zero = self.cached_omitted_is_zero();
        let measured_total = schedule.measured();
        fold.expect(measured_total);
        observed.offered_req_s = offered_rate(schedule);
        prepare(client, connections_ahead(schedule)).await;

        let slots = schedule
            .max_in_flight
            .map(|n| Arc::new(Semaphore::new(n as usize)));
        let cpu_before = cpu_seconds();
        let wall = Instant::now();
        let start = Instant::now() + LEAD;
        let start_unix = crate::client::unix_now() + LEAD.as_secs_f64();
        let (mut pacer, mut due) = Pacer::start(start, schedule.iter().map(|s| s.at_s));
        // The schedule made again beside the pacer's copy, taken in the same order.
        let mut scheduled = schedule.iter();

        let mut tasks: JoinSet<Option<RequestRecord>> = JoinSet::new();
        let (mut finished, mut failed) = (0usize, 0usize);
        let mut stopped = false;
        let mut releasing = true;
        // Requests made so far (the next one made is this index).
        let mut made = 0usize;
        let budget = exp.stop.as_ref().and_then(|s| s.errors.clone());
        let mut stopping: Option<tokio::task::JoinHandle<ProfileCapture>> = None;
        let gone = super::point::ServerGone::default();
        // Checked at every turn (a `continue` included): with nothing left to release or to
        // join, every branch below would be disabled.
        while releasing || !tasks.is_empty() {
            tokio::select! {
                next = due.recv(), if releasing => match next {
                    Some(i) => {
                        // The pacer releases in order: the next one made is request i.
                        let Some(skip) = i.checked_sub(made) else { continue };
                        // Both iterators moved past i whatever they gave: they stay in step.
                        let taken = (scheduled.nth(skip), planned.nth(skip));
                        made = i + 1;
                        let (Some(s), Some(p)) = taken else { continue };
                        // The profiler starts beside the measured window's first request.
                        if s.phase == Phase::Measure
                            && let Some(c) = capture.as_mut()
                        {
                            c.start();
                        }
                        let mut req = generation_request(exp, p.text, model);
                        req.max_tokens = s.max_tokens.unwrap_or(p.max_tokens);
                        let (client, writer, progress, slots) =
                            (client.clone(), self.writer.clone(), self.progress.clone(), slots.clone());
                        let (pid, api, timeout, requested) = (
                            point.id.clone(),
                            exp.workload.api,
                            exp.request_timeout,
                            p.requested,
                        );
                        let (share, mix, theoretical) = (p.share, p.mix, p.theoretical_cached);
                        let scheduled_at = start_unix + s.at_s;
                        let gone = gone.clone();
                        tasks.spawn(async move {
                            // A request due while the cap is reached waits here: its lag says so.
                            let _permit = match &slots {
                                Some(sem) => sem.clone().acquire_owned().await.ok(),
                                None => None,
                            };
                            progress.request_started();
                            let m = client.stream(&req, timeout).await;
                            drop(_permit);
                            let max_tokens = req.max_tokens;
                            let mut rec = m.into_record(&pid, round, i as u32, RequestRole::Measure, api, max_tokens, requested);
                            rec.scheduled_at = Some(scheduled_at);
                            rec.lag_s = Some(rec.sent_at - scheduled_at);
                            rec.phase = Some(s.phase);
                            rec.share = share;
                            rec.theoretical_cached_tokens = theoretical;
                            rec.mix = mix;
                            fill_omitted_cached(&mut rec, omitted_is_zero);
                            let mut written = writer.write(rec).await;
                            progress.request_finished();
                            if let Some(rec) = written.as_mut() {
                                gone.judge(&client, rec).await;
                                rec.drop_detail();
                            }
                            written
                        });
                    }
                    None => releasing = false,
                },
                done = tasks.join_next(), if !tasks.is_empty() => {
                    let rec = match done {
                        Some(Ok(Some(rec))) => rec,
                        // Not written (the sink has stopped the run), or aborted by an interrupt.
                        Some(Ok(None)) | None => continue,
                        Some(Err(e)) => {
                            if let Some(flag) = super::point::task_died(e) {
                                flags.push(flag);
                                let _ = pacer.stop();
                                releasing = false;
                            }
                            continue;
                        }
                    };
                    match rec.phase {
                        Some(Phase::Measure) => {
                            finished += 1;
                            failed += usize::from(rec.error.is_some());
                            fold.add(&rec);
                            // The window's last request ended: the profiler stops before the
                            // cool-down's requests are traced, on a task (it writes the trace
                            // first) so the pacer's releases are not held up.
                            if finished == measured_total
                                && let Some(c) = capture.take()
                            {
                                stopping = Some(tokio::spawn(c.stop()));
                            }
                        }
                        Some(Phase::Warmup) => {
                            observed.warmup += 1;
                            observed.unmeasured.add(&rec);
                            fold.add_routed(&rec);
                        }
                        _ => {
                            observed.cooldown += 1;
                            observed.unmeasured.add(&rec);
                            fold.add_routed(&rec);
                        }
                    }
                    if releasing && gone.is_set() {
                        let _ = pacer.stop();
                        releasing = false;
                        flags.push(gone.flag(made, schedule.len()));
                    }
                    if releasing
                        && let Some(b) = &budget
                        && !b.allows(failed, measured_total.max(finished))
                    {
                        let _ = pacer.stop();
                        releasing = false;
                        observed.stopped_on_errors = true;
                        flags.push(Flag::new(
                            FlagKind::StoppedOnErrors,
                            format!("{failed} of {finished} measured requests failed, past `stop.errors`; no more requests were sent"),
                        ));
                    }
                },
                _ = self.interrupt.wait(), if !stopped => {
                    stopped = true;
                    let _ = pacer.stop();
                    releasing = false;
                    tasks.abort_all();
                },
            }
        }
        // The pacer thread ended: by its schedule's end, a stop, or by dying. A dead pacer
        // released only part of the schedule: that is no measurement of it.
        if let Err(died) = pacer.stop() {
            flags.push(Flag::new(
                FlagKind::ClientFailed,
                format!("the pacer thread died ({died}) after releasing {made} of {} requests; the rest were never sent", schedule.len()),
            ));
        }
        let elapsed = wall.elapsed().as_secs_f64();
        if let (Some(a), Some(b)) = (cpu_before, cpu_seconds())
            && elapsed > 0.0
        {
            observed.client_cpu = Some((b - a) / elapsed);
        }
        // A window cut short (errors, an interrupt) stops the profiler here.
        let profiled = match (stopping, capture) {
            (Some(task), _) => task.await.ok(),
            (None, Some(c)) => Some(c.stop().await),
            (None, None) => None,
        };
        (stopped, (observed, profiled))
    }
}

/// How many connections to open before the clock starts: one for each request due within
/// [`AHEAD_WINDOW_S`] of the schedule's busiest stretch (at least [`PREPARED_CONNECTIONS`]),
/// never more than may be in flight at once, than there are requests, or than the open-file
/// limit leaves room for (raised to its hard limit at start; more are opened when due).
fn connections_ahead(schedule: &Schedule) -> usize {
    let files = crate::client::raise_open_file_limit()
        .map_or(usize::MAX, |n| n.saturating_sub(RESERVED_FILES) as usize);
    busiest(schedule.iter().map(|r| r.at_s), AHEAD_WINDOW_S)
        .max(PREPARED_CONNECTIONS)
        .min(schedule.max_in_flight.map_or(usize::MAX, |m| m as usize))
        .min(schedule.len())
        .min(files)
}

/// The most offsets (seconds, non-decreasing) within any span of `window` seconds; holds only
/// the offsets of one window.
fn busiest(at: impl Iterator<Item = f64>, window: f64) -> usize {
    let mut within = std::collections::VecDeque::new();
    let mut most = 0;
    for t in at {
        while within.front().is_some_and(|&f: &f64| t - f > window) {
            within.pop_front();
        }
        within.push_back(t);
        most = most.max(within.len());
    }
    most
}

/// Measured requests per second of the schedule's measured phase (None when they are all due
/// at once, or fewer than two).
fn offered_rate(schedule: &Schedule) -> Option<f64> {
    let (mut first, mut last, mut n) = (None, 0.0, 0usize);
    for r in schedule.iter().filter(|r| r.phase == Phase::Measure) {
        first.get_or_insert(r.at_s);
        last = r.at_s;
        n += 1;
    }
    let span = last - first?;
    (n >= 2 && span > 0.0).then(|| (n - 1) as f64 / span)
}

/// This process's CPU time so far (user + system), seconds.
fn cpu_seconds() -> Option<f64> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Some(secs(u.user_time()) + secs(u.system_time()))
}

#[cfg(test)]
mod tests {
    use super::busiest;

    #[test]
    fn busiest_counts_the_most_offsets_within_a_window() {
        assert_eq!(busiest(std::iter::empty(), 0.1), 0);
        // All due at once (`rate: inf`): every one.
        assert_eq!(busiest([0.0; 5].into_iter(), 0.1), 5);
        // 1,024/s for a second: 103 within 0.1 s (both ends included).
        let steady: Vec<f64> = (0..1024).map(|i| f64::from(i) / 1024.0).collect();
        assert_eq!(busiest(steady.into_iter(), 0.1), 103);
        // A burst late in the schedule is found.
        assert_eq!(
            busiest([0.0, 1.0, 2.0, 2.01, 2.02, 2.5].into_iter(), 0.1),
            3
        );
    }
}
