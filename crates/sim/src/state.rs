//! State shared between the scheduler thread and the HTTP handlers.

use super::api::Api;
use super::metrics::SchedStats;
use super::slots::SlotView;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

/// Readiness, live statistics, and the crash signal.
#[derive(Debug)]
pub(crate) struct Shared {
    ready: AtomicBool,
    /// Gauges, histograms and counters, updated by the scheduler every iteration.
    pub stats: Mutex<SchedStats>,
    /// llama.cpp's slots as `/slots` shows them (empty in other modes).
    pub slots: Mutex<Vec<SlotView>>,
    crash: watch::Sender<Option<String>>,
    /// The profiler endpoints' capture, stepped by the scheduler.
    pub profiler: crate::profiler::Profiler,
}

impl Default for Shared {
    fn default() -> Self {
        Self::new(Api::Sglang)
    }
}

impl Shared {
    /// State for a simulator speaking `api` (its histograms use that engine's buckets).
    pub(crate) fn new(api: Api) -> Self {
        Shared {
            ready: AtomicBool::new(false),
            stats: Mutex::new(SchedStats::for_api(api)),
            slots: Mutex::new(Vec::new()),
            crash: watch::channel(None).0,
            profiler: crate::profiler::Profiler::default(),
        }
    }

    /// Whether the engine crashed.
    pub(crate) fn crashed(&self) -> bool {
        self.crash.borrow().is_some()
    }

    /// Whether warmup is done (`/health` answers 200).
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Marks warmup done.
    pub(crate) fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Signals a simulated crash; the server shuts down and `serve` returns the message.
    pub(crate) fn crash(&self, message: String) {
        self.ready.store(false, Ordering::Release);
        self.crash.send_replace(Some(message));
    }

    /// Watches for a crash.
    pub(crate) fn crash_watch(&self) -> watch::Receiver<Option<String>> {
        self.crash.subscribe()
    }

    /// A copy of the statistics.
    pub(crate) fn stats(&self) -> SchedStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }
}
