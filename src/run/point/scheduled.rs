//! One round of an open-loop `load:` point: the schedule computed up front, the pacer releasing
//! each planned request (drawn, calibrated and given its nonce by the point runner, as in a
//! closed loop) at its deadline, each record marked with its scheduled time, lag and phase.
//! Warm-up and cool-down requests are recorded and dropped; measured ones are folded into the
//! point's summary as they finish, so memory does not grow with their count (only requests
//! judged with their shared-prefix group wait for the point's end).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::load::{Pacer, Schedule, Scheduled};
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, Phase, RequestRole};
use servebench_model::spec::types::Experiment;
use servebench_report::measure::system::Observed;

use super::planned::{Planned, RequestTarget, generation_request, prepare, task_died};
use super::sender::{SendEnd, Sender};
use crate::run::probe::Window;
use crate::run::request::{BlockMarks, Outgoing, RequestPath, Sent};

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

/// One round of an open-loop point: the `i`-th of `requests` sent when `schedule.requests[i]`
/// is due, made then (the cache was prepared already).
pub(super) struct ScheduledRound<'p> {
    pub exp: &'p Experiment,
    pub schedule: &'p Schedule,
    pub requests: Box<dyn Iterator<Item = Planned> + Send + 'p>,
    pub target: &'p RequestTarget,
}

impl<'p> Sender<'p> for ScheduledRound<'p> {
    /// Opens `window` as the first measured request is released and closes it when the last
    /// one ended (a cut-short window is closed by the round).
    fn send<'s>(
        self: Box<Self>,
        path: &'s RequestPath,
        window: &'s Window,
    ) -> BoxFuture<'s, SendEnd>
    where
        'p: 's,
    {
        Box::pin(async move {
            let ScheduledRound {
                exp,
                schedule,
                mut requests,
                target,
            } = *self;
            let measured_total = schedule.measured();
            let mut end = SendEnd::planned(schedule.len(), Some(measured_total));
            path.plan_measured(measured_total);
            let mut observed = Observed {
                offered_req_s: offered_rate(schedule),
                ..Observed::default()
            };
            prepare(path.client(), connections_ahead(schedule)).await;
            let cap = InFlightCap::of(schedule);

            let cpu_before = cpu_seconds();
            let wall = Instant::now();
            let start = Instant::now() + LEAD;
            let mut release = Release::new(path, exp, target, &cap);
            release.captured = schedule.captured().cloned();
            let (mut pacer, mut due) = Pacer::start(start, schedule.iter().map(|s| s.at_s));
            // The schedule made again beside the pacer's copy, taken in the same order.
            let mut scheduled = schedule.iter();

            let mut tasks: JoinSet<Option<Phase>> = JoinSet::new();
            let mut releasing = true;
            // Requests made so far (the next one made is this index).
            let mut made = 0usize;
            // Checked at every turn (a `continue` included): with nothing left to release or
            // to join, every branch below would be disabled.
            while releasing || !tasks.is_empty() {
                tokio::select! {
                    next = due.recv(), if releasing => match next {
                        Some(i) => {
                            // The pacer releases in order: the next one made is request i.
                            let Some(skip) = i.checked_sub(made) else { continue };
                            // Both iterators moved past i whatever they gave: they stay in step.
                            let taken = (scheduled.nth(skip), requests.nth(skip));
                            made = i + 1;
                            let (Some(s), Some(p)) = taken else { continue };
                            // The measured window opens with its first request.
                            if s.phase == Phase::Measure {
                                path.open(window);
                            }
                            tasks.spawn(release.request(i, s, p));
                        }
                        None => releasing = false,
                    },
                    done = tasks.join_next(), if !tasks.is_empty() => {
                        match done {
                            Some(Ok(Some(Phase::Measure))) => {}
                            // Not measured, not written (the sink has stopped the run), or
                            // abandoned by an interrupt.
                            Some(Ok(_)) | None => continue,
                            Some(Err(e)) => {
                                if let Some(flag) = task_died(e) {
                                    end.flags.push(flag);
                                    let _ = pacer.stop();
                                    releasing = false;
                                }
                                continue;
                            }
                        }
                        measured_one(path, window, measured_total);
                    },
                    _ = path.interrupt().wait(), if releasing => {
                        let _ = pacer.stop();
                        releasing = false;
                    },
                }
                // A lost server, or measured requests failed past `stop.errors` (the path
                // judges both, and says why in its flags).
                if releasing && !path.may_send() {
                    let _ = pacer.stop();
                    releasing = false;
                }
            }
            end.flags
                .extend(pacer_died(pacer.stop(), made, schedule.len()));
            observed.client_cpu = cpu_share(cpu_before, wall);
            observed.stopped_on_errors = path.stopped_on_errors();
            end.flags.extend(cap.flag());
            end.observed = Some(observed);
            end
        })
    }
}

/// What every request of a scheduled round is released with.
struct Release<'r> {
    path: RequestPath,
    exp: &'r Experiment,
    target: &'r RequestTarget,
    /// When the schedule's clock starts, in unix seconds.
    start_unix: f64,
    /// `max_in_flight`: a request due while the cap is reached waits for a slot.
    slots: Option<Arc<Semaphore>>,
    /// Set when a request due found every slot taken.
    cap_reached: Arc<std::sync::atomic::AtomicBool>,
    /// A SageMaker capture's requests: request `i` sends `captured[i]`'s literal messages.
    captured: Option<Arc<Vec<crate::load::capture::CapturedRequest>>>,
}

impl<'r> Release<'r> {
    /// Requests released on `path` from now on, [`LEAD`] ahead of the clock, under `cap`.
    fn new(
        path: &RequestPath,
        exp: &'r Experiment,
        target: &'r RequestTarget,
        cap: &InFlightCap,
    ) -> Release<'r> {
        Release {
            path: path.clone(),
            exp,
            target,
            start_unix: crate::client::unix_now() + LEAD.as_secs_f64(),
            slots: cap.slots(),
            cap_reached: cap.reached.clone(),
            captured: None,
        }
    }

    /// Request `i` of the schedule (`s`, made from `p`), sent on the path with its scheduled
    /// time and phase; its phase once written, None when it was not.
    fn request(
        &self,
        i: usize,
        s: Scheduled,
        p: Planned,
    ) -> impl std::future::Future<Output = Option<Phase>> + Send + 'static {
        let mut req = generation_request(self.exp, p.text, self.target);
        req.max_tokens = s.max_tokens.unwrap_or(p.max_tokens);
        if let Some(c) = self.captured.as_ref().and_then(|c| c.get(i)) {
            req.messages = Some(c.messages.clone());
            req.tools = c.tools.clone();
        }
        let mut out = Outgoing::new(req, i as u32, RequestRole::Measure);
        out.captured = self.captured.as_ref().and_then(|c| c.get(i)).map(|c| {
            servebench_model::results::records::Captured {
                prompt_tokens: c.prompt_tokens,
            }
        });
        out.requested = p.requested;
        out.share = p.share;
        out.mix = p.mix;
        out.theoretical = p.theoretical_cached;
        out.scheduled_at = Some(self.start_unix + s.at_s);
        out.phase = Some(s.phase);
        let (path, slots, cap_reached) = (
            self.path.clone(),
            self.slots.clone(),
            self.cap_reached.clone(),
        );
        let mut entry = p.ledger;
        async move {
            // A request due while the cap is reached waits here: its lag says so.
            out.slot = match &slots {
                Some(sem) => match sem.clone().try_acquire_owned() {
                    Ok(p) => Some(p),
                    Err(_) => {
                        cap_reached.store(true, std::sync::atomic::Ordering::Relaxed);
                        sem.clone().acquire_owned().await.ok()
                    }
                },
                None => None,
            };
            let phase = out.phase;
            match path
                .send(out, entry.as_mut().map(|e| e as &mut dyn BlockMarks))
                .await
            {
                Sent::Answered(_) => phase,
                Sent::NotWritten | Sent::Interrupted => None,
            }
        }
    }
}

/// The pacer thread ended (`stopped`): by its schedule's end, a stop, or by dying. A dead
/// pacer released only `made` of the schedule's `len` requests: that is no measurement of it.
fn pacer_died<E: std::fmt::Display>(
    stopped: Result<(), E>,
    made: usize,
    len: usize,
) -> Option<Flag> {
    let died = stopped.err()?;
    Some(Flag::new(
        FlagKind::ClientFailed,
        format!(
            "the pacer thread died ({died}) after releasing {made} of {len} requests; the rest were never sent"
        ),
    ))
}

/// A measured request of the round was written: once it is the window's last, the window
/// closes (what watches it, the profiler, stops before the cool-down's requests).
fn measured_one(path: &RequestPath, window: &Window, measured_total: usize) {
    if path.measured().0 == measured_total {
        window.close();
    }
}

/// This process's CPU time since `before` over the wall time since `wall` (1.0 = one core).
fn cpu_share(before: Option<f64>, wall: Instant) -> Option<f64> {
    let elapsed = wall.elapsed().as_secs_f64();
    match (before, cpu_seconds()) {
        (Some(a), Some(b)) if elapsed > 0.0 => Some((b - a) / elapsed),
        _ => None,
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
