//! The pacer: releases each request of a schedule at its absolute deadline from a thread of
//! its own. tokio's timer has a 1 ms grain and shares its thread with response parsing, so the
//! pacer sleeps on its own thread with the kernel's timer slack set to the least (Linux: 50 µs
//! by default, which a sleep may overshoot by), and neither spins nor yields: both burned a
//! core of the two the client is benchmarked on (at 2,000 requests/s, 57 `sched_yield` calls
//! per request) that the client and a local server needed.
//!
//! The schedule is never shifted: a request released late (the thread was preempted, the
//! machine is saturated) goes out as soon as it can with its lateness recorded by the runner
//! as `lag_s`, and the requests after it keep their own deadlines. Nothing is slowed down to
//! match the server (that would be coordinated omission).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

/// A running pacer. Dropping it (or [`Pacer::stop`]) stops releasing.
pub struct Pacer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<(), PacerError>>>,
    /// How the thread ended, once joined.
    ended: Option<Result<(), PacerError>>,
}

/// Why the pacer thread ended before its schedule did.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PacerError {
    /// An offset no clock can wait for (past what `Instant` holds, or not a number).
    #[error("request {index} is due {at_s} s after the start, which cannot be waited for")]
    Unwaitable { index: usize, at_s: f64 },
    /// The thread panicked.
    #[error("it panicked: {0}")]
    Panicked(String),
}

impl Pacer {
    /// Releases index `i` on the returned channel at `start + offsets[i]` (offsets in
    /// seconds, non-decreasing). The channel closes after the last one, on `stop`, or when
    /// the thread ends early ([`Pacer::stop`] then says why).
    pub(crate) fn start(
        start: Instant,
        offsets: impl Iterator<Item = f64> + Send + 'static,
    ) -> (Pacer, mpsc::UnboundedReceiver<usize>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("servebench-pacer".into())
            .spawn(move || {
                precise_sleeps();
                for (index, at_s) in offsets.enumerate() {
                    let deadline = Duration::try_from_secs_f64(at_s.max(0.0))
                        .ok()
                        .and_then(|d| start.checked_add(d))
                        .ok_or(PacerError::Unwaitable { index, at_s })?;
                    if !wait_until(deadline, &stopped) || tx.send(index).is_err() {
                        return Ok(());
                    }
                }
                Ok(())
            })
            .expect("the OS starts a thread");
        (
            Pacer {
                stop,
                thread: Some(thread),
                ended: None,
            },
            rx,
        )
    }

    /// Stops releasing (requests already released are the caller's) and says how the thread
    /// ended: Err when it died or gave up before its schedule's end. Called again, it says
    /// the same.
    pub(crate) fn stop(&mut self) -> Result<(), PacerError> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            self.ended = Some(t.join().unwrap_or_else(|panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                Err(PacerError::Panicked(message))
            }));
        }
        self.ended.clone().unwrap_or(Ok(()))
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Sleeps until `deadline`; false when stopped first. Long sleeps are cut into slices so a
/// stop is seen within 50 ms. A deadline already passed returns at once: requests due
/// together (a burst, `rate: inf`) go out back to back.
fn wait_until(deadline: Instant, stopped: &AtomicBool) -> bool {
    loop {
        if stopped.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

/// Makes this thread's sleeps end when asked: the timer slack (how late the kernel may wake a
/// sleeper to batch wake-ups, 50 µs by default) set to 1 ns. Where that cannot be set, sleeps
/// keep the default slack and the lag records it.
fn precise_sleeps() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_timerslack(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn releases_every_index_in_order_not_before_its_deadline() {
        let start = Instant::now();
        let offsets: Vec<f64> = (0..20).map(|i| f64::from(i) * 0.002).collect();
        let (_pacer, mut rx) = Pacer::start(start, offsets.clone().into_iter());
        let mut got = Vec::new();
        while let Some(i) = rx.recv().await {
            // Never early; how late is the runner's to record, not asserted here.
            assert!(start.elapsed().as_secs_f64() >= offsets[i]);
            got.push(i);
        }
        assert_eq!(got, (0..20).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn stop_ends_the_release() {
        let (mut pacer, mut rx) = Pacer::start(Instant::now(), [0.0, 3600.0].into_iter());
        assert_eq!(rx.recv().await, Some(0));
        assert_eq!(pacer.stop(), Ok(()));
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn an_offset_past_every_clock_ends_the_release_and_says_so() {
        // 1e19 s is past what a Duration holds: once, it panicked the thread.
        let (mut pacer, mut rx) = Pacer::start(Instant::now(), [0.0, 1e19, 2e19].into_iter());
        assert_eq!(rx.recv().await, Some(0));
        assert_eq!(rx.recv().await, None);
        assert_eq!(
            pacer.stop(),
            Err(PacerError::Unwaitable {
                index: 1,
                at_s: 1e19
            })
        );
    }

    #[tokio::test]
    async fn a_thread_that_panics_is_reported() {
        let offsets = (0..3).map(|i| if i < 2 { 0.0 } else { panic!("made to fail") });
        let (mut pacer, mut rx) = Pacer::start(Instant::now(), offsets);
        while rx.recv().await.is_some() {}
        assert_eq!(
            pacer.stop(),
            Err(PacerError::Panicked("made to fail".into()))
        );
    }
}
