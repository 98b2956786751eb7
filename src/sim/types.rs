//! Messages between the HTTP side and the scheduler thread.

use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// A tokenized, validated generation request on its way to the scheduler.
#[derive(Debug)]
pub struct GenRequest {
    /// Request id (the client's `rid`, or a fresh uuid4 hex).
    pub rid: Arc<str>,
    /// Prompt token ids.
    pub input_ids: Vec<u32>,
    /// Tokens to generate (already clamped to the context and the pool).
    pub max_new_tokens: u64,
    /// When the HTTP handler received the request.
    pub received: Instant,
    /// Where the scheduler sends this request's outputs; closed = the client went away.
    pub events: mpsc::UnboundedSender<Output>,
}

/// Why a request finished.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// Reached `max_new_tokens` (the count).
    Length(u64),
    /// Aborted (message, HTTP-style status code).
    Abort(String, u16),
}

/// Speculative decoding counters of one request, sent on its final output.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpecStats {
    /// Verify (decode) steps run.
    pub verify_ct: u64,
    /// Draft tokens accepted.
    pub num_correct_drafts: u64,
    /// Draft tokens proposed.
    pub num_proposed_drafts: u64,
}

/// One engine output for one request: the tokens produced since the previous output.
#[derive(Debug)]
pub struct Output {
    /// New token ids since the previous output of this request.
    pub new_ids: Vec<u32>,
    /// Tokens generated so far (cumulative).
    pub completion_tokens: u64,
    /// Prompt length in tokens.
    pub prompt_tokens: u64,
    /// Prompt tokens served from the radix cache.
    pub cached_tokens: u64,
    /// Set on the final output.
    pub finish: Option<Finish>,
    /// Speculative counters on the final output when speculative decoding is on.
    pub spec: Option<SpecStats>,
}

/// A command to the scheduler thread.
#[derive(Debug)]
pub enum Command {
    /// Queue a request.
    Generate(GenRequest),
    /// Flush the radix cache; answers whether it was flushed.
    Flush(oneshot::Sender<bool>),
    /// Abort one request by id, or all.
    Abort {
        /// The request id; None = all.
        rid: Option<String>,
    },
    /// Stop the loop.
    Shutdown,
}
