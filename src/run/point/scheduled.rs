//! One round of an open-loop `load:` point: the schedule computed up front, the pacer releasing
//! each planned request (drawn, calibrated and given its nonce by the point runner, as in a
//! closed loop) at its deadline, each record marked with its scheduled time, lag and phase.
//! Warm-up and cool-down requests are recorded and dropped; measured ones are folded into the
//! point's summary as they finish, so memory does not grow with their count (only requests
//! judged with their shared-prefix group wait for the point's end).

use super::RequestTarget;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::client::Client;
use crate::load::{Pacer, Schedule, Scheduled};
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, Phase, RequestRecord, RequestRole};
use servebench_model::spec::Point;
use servebench_report::measure::summary::PointFold;
use servebench_report::measure::system::Observed;

use super::{Planned, PointRunner, fill_omitted_cached, generation_request, prepare};
use crate::run::probe::Window;

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
    /// Opens `window` as the first measured request is released and closes it when the last
    /// one ended (a cut-short window is closed by the round). Returns whether an interrupt
    /// stopped it, and what the client observed.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn send_scheduled(
        &self,
        client: &Client,
        point: &Point,
        round: u32,
        schedule: &Schedule,
        mut planned: impl Iterator<Item = Planned>,
        target: &RequestTarget,
        (flags, fold): (&mut Vec<Flag>, &mut PointFold),
        window: &Window,
    ) -> (bool, Observed) {
        let exp = &point.experiment;
        let mut tally = Tally::new(schedule, exp.stop.as_ref().and_then(|s| s.errors.clone()));
        fold.expect(tally.measured_total);
        prepare(client, connections_ahead(schedule)).await;
        let cap = InFlightCap::of(schedule);

        let cpu_before = cpu_seconds();
        let wall = Instant::now();
        let start = Instant::now() + LEAD;
        let release = Release {
            client: client.clone(),
            runner: self,
            point,
            round,
            target,
            start_unix: crate::client::unix_now() + LEAD.as_secs_f64(),
            slots: cap.slots(),
            cap_reached: cap.reached.clone(),
            gone: super::ServerGone::default(),
        };
        let (mut pacer, mut due) = Pacer::start(start, schedule.iter().map(|s| s.at_s));
        // The schedule made again beside the pacer's copy, taken in the same order.
        let mut scheduled = schedule.iter();

        let mut tasks: JoinSet<Option<RequestRecord>> = JoinSet::new();
        let mut stopped = false;
        let mut releasing = true;
        // Requests made so far (the next one made is this index).
        let mut made = 0usize;
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
                        // The measured window opens with its first request.
                        if s.phase == Phase::Measure {
                            window.open();
                        }
                        tasks.spawn(release.request(i, s, p));
                    }
                    None => releasing = false,
                },
                done = tasks.join_next(), if !tasks.is_empty() => {
                    let rec = match done {
                        Some(Ok(Some(rec))) => rec,
                        // Not written (the sink has stopped the run), or aborted by an interrupt.
                        Some(Ok(None)) | None => continue,
                        Some(Err(e)) => {
                            if let Some(flag) = super::task_died(e) {
                                flags.push(flag);
                                let _ = pacer.stop();
                                releasing = false;
                            }
                            continue;
                        }
                    };
                    if tally.add(&rec, fold) {
                        // The window's last request ended: what watches the window (the
                        // profiler) stops before the cool-down's requests.
                        window.close();
                    }
                    if releasing {
                        let stop = match release.gone.is_set() {
                            true => Some(release.gone.flag(made, schedule.len())),
                            false => tally.past_error_budget(),
                        };
                        if let Some(flag) = stop {
                            let _ = pacer.stop();
                            releasing = false;
                            flags.push(flag);
                        }
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
        let mut observed = tally.observed;
        let elapsed = wall.elapsed().as_secs_f64();
        if let (Some(a), Some(b)) = (cpu_before, cpu_seconds())
            && elapsed > 0.0
        {
            observed.client_cpu = Some((b - a) / elapsed);
        }
        flags.extend(cap.flag());
        (stopped, observed)
    }
}

/// What every request of a scheduled round is released with.
struct Release<'r> {
    client: Client,
    runner: &'r PointRunner,
    point: &'r Point,
    round: u32,
    target: &'r RequestTarget,
    /// When the schedule's clock starts, in unix seconds.
    start_unix: f64,
    /// `max_in_flight`: a request due while the cap is reached waits for a slot.
    slots: Option<Arc<Semaphore>>,
    /// Set when a request due found every slot taken.
    cap_reached: Arc<std::sync::atomic::AtomicBool>,
    gone: super::ServerGone,
}

impl Release<'_> {
    /// Request `i` of the schedule (`s`, made from `p`), sent and recorded with its
    /// scheduled time, lag and phase; None when it could not be written.
    fn request(
        &self,
        i: usize,
        s: Scheduled,
        p: Planned,
    ) -> impl std::future::Future<Output = Option<RequestRecord>> + Send + 'static {
        let exp = &self.point.experiment;
        let mut req = generation_request(exp, p.text, self.target);
        req.max_tokens = s.max_tokens.unwrap_or(p.max_tokens);
        let (client, writer, progress, slots) = (
            self.client.clone(),
            self.runner.writer.clone(),
            self.runner.progress.clone(),
            self.slots.clone(),
        );
        let cap_reached = self.cap_reached.clone();
        let (pid, api, timeout, requested) = (
            self.point.id.clone(),
            exp.workload.api,
            exp.request_timeout,
            p.requested,
        );
        let (share, mix, round) = (p.share, p.mix, self.round);
        let (theoretical, mut entry) = (p.theoretical_cached, p.ledger);
        let omitted_is_zero = self.runner.cached_omitted_is_zero();
        let scheduled_at = self.start_unix + s.at_s;
        let gone = self.gone.clone();
        async move {
            // A request due while the cap is reached waits here: its lag says so.
            let _permit = match &slots {
                Some(sem) => match sem.clone().try_acquire_owned() {
                    Ok(p) => Some(p),
                    Err(_) => {
                        cap_reached.store(true, std::sync::atomic::Ordering::Relaxed);
                        sem.clone().acquire_owned().await.ok()
                    }
                },
                None => None,
            };
            progress.request_started();
            if let Some(e) = &mut entry {
                e.mark_sent();
            }
            let m = client.stream(&req, timeout).await;
            drop(_permit);
            let max_tokens = req.max_tokens;
            let mut rec = m.into_record(
                &pid,
                round,
                i as u32,
                RequestRole::Measure,
                api,
                max_tokens,
                requested,
            );
            rec.scheduled_at = Some(scheduled_at);
            rec.lag_s = Some(rec.sent_at - scheduled_at);
            rec.phase = Some(s.phase);
            rec.share = share;
            rec.theoretical_cached_tokens = theoretical;
            rec.reachable_cached_tokens = super::reachable(entry.as_ref(), &rec);
            rec.mix = mix;
            fill_omitted_cached(&mut rec, omitted_is_zero);
            let mut written = writer.write(rec).await;
            progress.request_finished();
            if let Some(rec) = written.as_mut() {
                gone.judge(&client, rec).await;
                rec.drop_detail();
            }
            written
        }
    }
}

/// A scheduled round's count of finished requests by phase, and what the client observed.
struct Tally {
    observed: Observed,
    measured_total: usize,
    finished: usize,
    failed: usize,
    budget: Option<servebench_model::spec::types::ErrorBudget>,
}

impl Tally {
    fn new(
        schedule: &Schedule,
        budget: Option<servebench_model::spec::types::ErrorBudget>,
    ) -> Tally {
        let observed = Observed {
            offered_req_s: offered_rate(schedule),
            ..Observed::default()
        };
        Tally {
            observed,
            measured_total: schedule.measured(),
            finished: 0,
            failed: 0,
            budget,
        }
    }

    /// Counts a finished request: a measured one folded into `fold`, a warm-up or cool-down
    /// one among the unmeasured (the server's counters include it). Returns whether it was
    /// the measured window's last.
    fn add(&mut self, rec: &RequestRecord, fold: &mut PointFold) -> bool {
        match rec.phase {
            Some(Phase::Measure) => {
                self.finished += 1;
                self.failed += usize::from(rec.error.is_some());
                fold.add(rec);
                return self.finished == self.measured_total;
            }
            Some(Phase::Warmup) => self.observed.warmup += 1,
            _ => self.observed.cooldown += 1,
        }
        self.observed.unmeasured.add(rec);
        fold.add_routed(rec);
        false
    }

    /// The flag that stops the round once its measured requests failed past `stop.errors`.
    fn past_error_budget(&mut self) -> Option<Flag> {
        let b = self.budget.as_ref()?;
        if b.allows(self.failed, self.measured_total.max(self.finished)) {
            return None;
        }
        self.observed.stopped_on_errors = true;
        Some(Flag::new(
            FlagKind::StoppedOnErrors,
            format!(
                "{} of {} measured requests failed, past `stop.errors`; no more requests were sent",
                self.failed, self.finished
            ),
        ))
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

/// How many requests may be in flight at once: `max_in_flight`, and never more connections
/// than the open-file limit leaves room for beside the run's own files. Past the descriptors a
/// connection cannot open, and a request that fails so would say nothing of the server; one
/// that waits for room says, in its lag, that the client held it.
struct InFlightCap {
    slots: Option<usize>,
    /// The open-file limit, when it is what bounds the requests in flight.
    by_files: Option<u64>,
    /// The limit was reached: some request due waited for a slot.
    reached: Arc<std::sync::atomic::AtomicBool>,
}

impl InFlightCap {
    fn of(schedule: &Schedule) -> InFlightCap {
        let asked = schedule.max_in_flight.map(|m| m as usize);
        let files = crate::client::raise_open_file_limit();
        let room = files.map(|n| n.saturating_sub(RESERVED_FILES).max(1) as usize);
        let by_files = match (room, asked) {
            (Some(r), Some(a)) if r < a && r < schedule.len() => files,
            (Some(r), None) if r < schedule.len() => files,
            _ => None,
        };
        InFlightCap {
            slots: [asked, by_files.and(room)].into_iter().flatten().min(),
            by_files,
            reached: Arc::default(),
        }
    }

    fn slots(&self) -> Option<Arc<Semaphore>> {
        self.slots.map(|n| Arc::new(Semaphore::new(n)))
    }

    /// The point's flag when the open-file limit held requests back.
    fn flag(&self) -> Option<Flag> {
        let files = self.by_files?;
        if !self.reached.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        Some(Flag::new(
            FlagKind::ClientLimited,
            format!(
                "at most {} requests were in flight: the client's open-file limit ({files}, `ulimit -n`) leaves room for that many connections beside its own files, so requests due past it waited (their lag is the client's); raise the limit to offer the whole load",
                self.slots.unwrap_or(1)
            ),
        ))
    }
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
