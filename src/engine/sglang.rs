//! SGLang: `python -m sglang.launch_server --model-path M` (2026 also `sglang serve`).
//! Facts: docs/reference/sglang-facts.md (sections 4-5), docs/reference/sglang-extra.md.

use super::adapter::{Adapter, FalseFlag, ModelArg, common_hint};
use servebench_model::catalog::Failure;

pub(crate) static SGLANG: Adapter = Adapter {
    display: "SGLang",
    launcher: &["python", "-m", "sglang.launch_server"],
    model_arg: ModelArg::Flag("--model-path"),
    reserved: &["model-path", "model", "port", "host"],
    false_flag: FalseFlag::Omit,
    // Printed after the warm-up generation, like /health's first 200 (http_server.py).
    ready_lines: &["The server is fired up and ready to roll!"],
    flags: Some((sim::SGLANG_FLAGS, "SGLang 0.5.23")),
    crash_lines: &[
        // torch.OutOfMemoryError while serving (scheduler traceback).
        ("CUDA out of memory", Failure::OutOfMemory),
        ("OutOfMemoryError", Failure::OutOfMemory),
        // model_runner: the KV pool does not fit at start-up.
        (
            "Not enough memory. Please try to increase --mem-fraction-static",
            Failure::KvPoolTooSmall,
        ),
        // uvicorn's bind error, or SGLang's own wait for its derived ports.
        ("Address already in use", Failure::PortInUse),
        ("address already in use", Failure::PortInUse),
        ("is not available in 30 seconds", Failure::PortInUse),
        // Hugging Face errors re-raised from config loading (hf_transformers/config.py).
        ("is not a valid model identifier", Failure::ModelNotFound),
        ("Repo id must be in the form", Failure::ModelNotFound),
        (
            "does not appear to have a file named config.json",
            Failure::ModelNotFound,
        ),
        // A multi-node rank whose peer died: gloo's TCP pair, NCCL's remote error.
        ("Connection closed by peer", Failure::RankLost),
        (
            "remote process exited or there was a network error",
            Failure::RankLost,
        ),
        ("ModuleNotFoundError", Failure::StartupError),
        ("ImportError", Failure::StartupError),
        ("error: unrecognized arguments", Failure::StartupError),
        ("error: argument", Failure::StartupError),
    ],
    hint,
    sim_api: "sglang",
    profiler: Ok(super::profiler::ProfilerApi::Sglang),
};

fn hint(f: Failure) -> &'static str {
    match f {
        Failure::OutOfMemory => {
            "CUDA out of memory while serving: lower --mem-fraction-static, or use a smaller --chunked-prefill-size"
        }
        Failure::KvPoolTooSmall => {
            "not enough memory for the KV cache pool at start-up: increase --mem-fraction-static"
        }
        other => common_hint(other),
    }
}
