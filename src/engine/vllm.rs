//! vLLM: `vllm serve MODEL` (the model is positional). Facts: docs/reference/vllm-facts.md.

use super::adapter::{Adapter, FalseFlag, ModelArg, common_hint};
use servebench_model::catalog::Failure;

pub(crate) static VLLM: Adapter = Adapter {
    display: "vLLM",
    launcher: &["vllm", "serve"],
    model_arg: ModelArg::Positional,
    reserved: &["model", "port", "host"],
    // Booleans are BooleanOptionalAction: `false` must turn a default-on feature off
    // (`--no-enable-prefix-caching`). (utils/argparse_utils.py)
    false_flag: FalseFlag::NoPrefix,
    // 0.33 `Starting vLLM server on`, older `Starting vLLM API server[ N] on`, then uvicorn's
    // `Application startup complete.` (launchers/api_server/entry.py, uvicorn lifespan/on.py).
    ready_lines: &["Application startup complete."],
    flags: Some((include_str!("flags/vllm.txt"), "vLLM 0.34.0")),
    crash_lines: &[
        ("CUDA out of memory", Failure::OutOfMemory),
        ("OutOfMemoryError", Failure::OutOfMemory),
        // v1/worker/utils.py: the GPU is busy at start-up.
        (
            "is less than desired GPU memory utilization",
            Failure::OutOfMemory,
        ),
        // v1/core/kv_cache_planning.py `_check_enough_kv_cache_memory`.
        (
            "No available memory for the cache blocks",
            Failure::KvPoolTooSmall,
        ),
        (
            "larger than the available KV cache memory",
            Failure::KvPoolTooSmall,
        ),
        (
            "is larger than the maximum number of tokens that can be stored in KV cache",
            Failure::KvPoolTooSmall,
        ),
        // launchers/launcher.py `create_server_socket`, before the model loads.
        ("Address already in use", Failure::PortInUse),
        // transformers_utils/config.py `get_config`.
        (
            "Invalid repository ID or local directory specified",
            Failure::ModelNotFound,
        ),
        ("is not a valid model identifier", Failure::ModelNotFound),
        // A multi-node rank whose peer died: gloo's TCP pair, NCCL's remote error.
        ("Connection closed by peer", Failure::RankLost),
        (
            "remote process exited or there was a network error",
            Failure::RankLost,
        ),
        ("error: unrecognized arguments", Failure::StartupError),
        ("error: argument", Failure::StartupError),
        ("Engine core initialization failed", Failure::StartupError),
        ("ModuleNotFoundError", Failure::StartupError),
    ],
    hint,
    sim_api: "vllm",
    profiler: Ok(super::profiler::ProfilerApi::Vllm),
};

fn hint(f: Failure) -> &'static str {
    match f {
        Failure::OutOfMemory => {
            "CUDA out of memory: lower --gpu-memory-utilization, --max-num-seqs or --max-num-batched-tokens (or free the GPU)"
        }
        Failure::KvPoolTooSmall => {
            "the KV cache does not fit at start-up: increase --gpu-memory-utilization or decrease --max-model-len"
        }
        other => common_hint(other),
    }
}
