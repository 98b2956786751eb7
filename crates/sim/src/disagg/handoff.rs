//! What a prefill worker hands the decode worker that continues a request.

/// What a prefill worker hands its decode side once the room's KV has moved: the first
/// output token (None: a fake transfer, the decode side makes one up), the prompt tokens the
/// prefill found cached, and the transfer's size and time.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Handoff {
    /// The token the prefill's forward pass sampled.
    pub first_token: Option<u32>,
    /// Prompt tokens served from the prefill's radix cache (SGLang's `cached_tokens`, which
    /// the decode worker reports as its own).
    pub cached_tokens: u64,
    /// The prompt's length as the prefill saw it.
    pub prompt_tokens: u64,
    /// Bytes of KV the transfer moved (one rank's share).
    pub bytes: u64,
    /// Milliseconds from the end of the prefill to the end of the transfer.
    pub transfer_ms: f64,
}

impl Handoff {
    /// A fake transfer's: nothing moved, nothing cached.
    pub(crate) fn fake() -> Self {
        Handoff::default()
    }
}
