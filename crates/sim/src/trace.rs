//! An in-process trace of when the model says each chunk is due, for the drift bench and tests.
//! Not exposed over HTTP.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One streamed output: which request, which of its outputs, and its model deadline.
#[derive(Debug, Clone)]
pub struct TraceEntry {
    /// Request id.
    pub rid: Arc<str>,
    /// 0 for the request's first output, then 1, 2, ...
    pub chunk_index: u32,
    /// The scheduler step's deadline: when the model says this output exists.
    pub model_time: Instant,
    /// Tokens the output carries.
    pub tokens: u32,
}

/// When the HTTP layer handed an output's bytes to the connection (the simulator's emission).
#[derive(Debug, Clone)]
pub struct EmitEntry {
    pub rid: Arc<str>,
    pub chunk_index: u32,
    pub emitted: Instant,
}

/// A shared, append-only list of [`TraceEntry`] (model times, from the scheduler) and
/// [`EmitEntry`] (emission times, from `/generate` streams); clone it into `SimConfig::trace`
/// and read it after the run.
#[derive(Debug, Clone, Default)]
pub struct ChunkTrace(Arc<Mutex<Vec<TraceEntry>>>, Arc<Mutex<Vec<EmitEntry>>>);

impl ChunkTrace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends entries (the scheduler calls this once per step).
    pub(crate) fn extend(&self, entries: impl IntoIterator<Item = TraceEntry>) {
        if let Ok(mut v) = self.0.lock() {
            v.extend(entries);
        }
    }

    /// Records that output `chunk_index` of `rid` was handed to the connection now.
    pub(crate) fn emitted(&self, rid: &Arc<str>, chunk_index: u32) {
        let emitted = Instant::now();
        if let Ok(mut v) = self.1.lock() {
            v.push(EmitEntry {
                rid: rid.clone(),
                chunk_index,
                emitted,
            });
        }
    }

    /// A copy of every emission so far.
    pub fn emissions(&self) -> Vec<EmitEntry> {
        self.1.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// A copy of every entry so far.
    pub fn entries(&self) -> Vec<TraceEntry> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}
