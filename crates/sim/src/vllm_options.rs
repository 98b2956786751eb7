//! What `vllm serve`'s command line set beyond the timing model: the surface's own settings
//! (names, keys, usage and logging switches, dev mode, blocks), which the HTTP surface reads.

use std::time::Duration;

use indexmap::IndexMap;
use serde_json::Value;

/// vLLM's own settings, beyond what the timing model uses.
#[derive(Debug, Clone)]
pub struct VllmOptions {
    /// The model as given (positional or `--model`).
    pub model: String,
    /// `--served-model-name` (the first names the model in responses and metrics).
    pub served_names: Vec<String>,
    /// `--api-key` values (or `VLLM_API_KEY`); empty = no authentication.
    pub api_keys: Vec<String>,
    /// `--enable-prompt-tokens-details`: `usage.prompt_tokens_details.cached_tokens`.
    pub prompt_tokens_details: bool,
    /// `--enable-force-include-usage`: usage (and continuous usage) on every stream.
    pub force_include_usage: bool,
    /// `--enable-log-requests` (`--disable-log-requests` turns it off; off by default).
    pub log_requests: bool,
    /// Periodic stats lines (`--disable-log-stats` turns them off).
    pub log_stats: bool,
    /// Seconds between stats lines (`VLLM_LOG_STATS_INTERVAL`, default 10).
    pub stats_interval: Duration,
    /// `VLLM_SERVER_DEV_MODE=1`: `/reset_prefix_cache`, `/server_info` and the other dev routes.
    pub dev_mode: bool,
    /// `VLLM_SKIP_MODEL_NAME_VALIDATION=1`: any request `model` is served.
    pub skip_model_validation: bool,
    /// Uvicorn's access log lines (`--disable-uvicorn-access-log` turns them off).
    pub access_log: bool,
    /// KV cache block size in tokens (`--block-size`, 16 by default on CUDA).
    pub block_size: u64,
    /// `--gpu-memory-utilization` (0.92 in 0.33).
    pub gpu_memory_utilization: f64,
    /// `--tensor-parallel-size`.
    pub tensor_parallel_size: u64,
    /// GiB of KV cache the memory model leaves (<= 0: none).
    pub kv_cache_gib: f64,
    /// The flags given, by argparse destination, for `non-default args` and `/server_info`.
    pub non_default: IndexMap<String, Value>,
    /// How the bind address is logged (`0.0.0.0` when `--host` is not given).
    pub host_display: String,
    /// `--profiler-config`'s `torch_profiler_dir` when it names a profiler: the
    /// `/start_profile` and `/stop_profile` routes exist, their traces written there.
    pub profiler_dir: Option<String>,
    /// `--per-request-spec-decode-metrics summary|detailed` (0.34): the final usage chunk
    /// carries `metrics.speculative_decoding`.
    pub per_request_spec_metrics: bool,
}
