//! Messages between the HTTP side and the scheduler thread.

use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// A tokenized, validated generation request on its way to the scheduler.
#[derive(Debug)]
pub(crate) struct GenRequest {
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
    /// Per-request cache options (llama.cpp's `cache_prompt` and `id_slot`).
    pub opts: ReqOptions,
    /// Its part in prefill-decode disaggregation (None: an ordinary request).
    pub disagg: Option<Disagg>,
}

/// A request's part in prefill-decode disaggregation (`sim::disagg`).
#[derive(Debug)]
pub(crate) enum Disagg {
    /// On a prefill worker: after its prefill the KV moves to the decode side (the modelled
    /// transfer), and the handoff goes here.
    Prefill(oneshot::Sender<crate::disagg::Handoff>),
    /// On a decode worker: its KV has arrived; it continues from the prefill's handoff
    /// without a prefill of its own.
    Decode(crate::disagg::Handoff),
}

/// Per-request options beyond SGLang's (defaults: SGLang's behaviour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReqOptions {
    /// Reuse a cached prompt prefix (llama.cpp's `cache_prompt`, default true).
    pub cache_prompt: bool,
    /// Run in this llama.cpp slot (`id_slot`); None = the server picks.
    pub id_slot: Option<usize>,
    /// Counted in `/metrics` (SGLang's `log_metrics`; false for its `/health` generation).
    pub log_metrics: bool,
}

impl Default for ReqOptions {
    fn default() -> Self {
        ReqOptions {
            cache_prompt: true,
            id_slot: None,
            log_metrics: true,
        }
    }
}

/// A finished request's timings, as llama.cpp reports them (`timings`, `print_timing`).
/// Model time, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Timings {
    /// Prompt tokens served from the cache.
    pub cache_n: u64,
    /// Prompt tokens evaluated (not cached).
    pub prompt_n: u64,
    /// From the start of the prompt's evaluation to the first token.
    pub prompt_ms: f64,
    /// Tokens generated.
    pub predicted_n: u64,
    /// From the first token to the last.
    pub predicted_ms: f64,
    /// The server's task id.
    pub task: u64,
}

/// Why a request finished.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Finish {
    /// Reached `max_new_tokens` (the count).
    Length(u64),
    /// Aborted (message, HTTP-style status code).
    Abort(String, u16),
}

/// Speculative decoding counters of one request, sent on its final output.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SpecStats {
    /// Verify (decode) steps run.
    pub verify_ct: u64,
    /// Draft tokens accepted.
    pub num_correct_drafts: u64,
    /// Draft tokens proposed.
    pub num_proposed_drafts: u64,
}

/// One engine output for one request: the tokens produced since the previous output.
#[derive(Debug)]
pub(crate) struct Output {
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
    /// The llama.cpp slot the request runs in (None outside llama.cpp mode).
    pub slot: Option<usize>,
    /// Timings, on the final output.
    pub timings: Option<Timings>,
}

/// A command to the scheduler thread.
#[derive(Debug)]
pub(crate) enum Command {
    /// Queue a request.
    Generate(GenRequest),
    /// Flush the radix cache; answers whether it was flushed.
    Flush(oneshot::Sender<bool>),
    /// Abort one request by id, or all.
    Abort {
        /// The request id; None = all.
        rid: Option<String>,
    },
    /// vLLM's `/reset_prefix_cache`: empties the prefix cache when no KV block is held by a
    /// running request; with `reset_running` running requests are preempted first (they go back
    /// to the queue and recompute). Answers whether the cache was reset.
    ResetPrefixCache {
        /// `?reset_running_requests=true`.
        reset_running: bool,
        /// Whether the reset happened.
        reply: oneshot::Sender<bool>,
    },
    /// llama.cpp's `POST /slots/{id}?action=erase`: empties one slot's cache, waiting for the
    /// slot to go idle first. Answers the tokens erased.
    EraseSlot {
        /// The slot.
        id: usize,
        /// Tokens erased.
        reply: oneshot::Sender<u64>,
    },
    /// Stop the loop.
    Shutdown,
}
