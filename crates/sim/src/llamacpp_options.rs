//! What `llama-server`'s command line set beyond the timing model: slots, context per slot,
//! aliases, keys, endpoints switched on, batch sizes, which the HTTP surface reads.

/// llama.cpp's own settings, beyond what the timing model uses.
#[derive(Debug, Clone)]
pub struct LlamaOptions {
    /// `-m/--model` as given.
    pub model_path: String,
    /// `-a/--alias` names (comma-separated); empty = the model path names the model.
    pub aliases: Vec<String>,
    /// Slots (`-np`).
    pub n_slots: usize,
    /// `-np` was not given: llama.cpp's auto choice (4 slots, unified KV).
    pub auto_parallel: bool,
    /// Total KV context (`-c`).
    pub n_ctx: u64,
    /// Context of one slot: `n_ctx` with a unified KV buffer, else `n_ctx / n_slots`.
    pub n_ctx_slot: u64,
    /// `--kv-unified`.
    pub kv_unified: bool,
    /// `--metrics`: `/metrics` is served.
    pub metrics: bool,
    /// `GET /slots` is served (`--slots`, on by default; `--no-slots`).
    pub slots_endpoint: bool,
    /// `--slot-save-path`: `POST /slots/{id}?action=...` is served.
    pub slot_save_path: Option<String>,
    /// `--api-key` values (comma-separated, or `--api-key-file`); empty = open.
    pub api_keys: Vec<String>,
    /// `-b/--batch-size`.
    pub n_batch: u64,
    /// `-ub/--ubatch-size`.
    pub n_ubatch: u64,
    /// `-n/--predict`: server-wide output cap (-1 = until the slot's context is full).
    pub n_predict: i64,
    /// `--cache-prompt` / `--no-cache-prompt`: the default of each request's `cache_prompt`.
    pub cache_prompt: bool,
    /// The model's training context (the profile's context length), `/v1/models` `n_ctx_train`.
    pub n_ctx_train: u64,
}
