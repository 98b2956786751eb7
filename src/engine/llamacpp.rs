//! llama.cpp's `llama-server -m MODEL`. Facts: docs/reference/llama-cpp-facts.md and
//! docs/reference/llama-cpp-observed.md.

use super::adapter::{Adapter, FalseFlag, ModelArg, common_hint};
use servebench_model::catalog::Failure;

pub(crate) static LLAMA_CPP: Adapter = Adapter {
    display: "llama.cpp",
    launcher: &["llama-server"],
    model_arg: ModelArg::Flag("-m"),
    // It rejects `--model-path`; `-m`/`--model`, `--host`, `--port` are servebench's.
    reserved: &["m", "model", "port", "host"],
    // Boolean pairs are separate spellings (`--kv-unified` / `--no-kv-unified`): write them.
    false_flag: FalseFlag::Omit,
    // Newer `srv  llama_server: server is listening on http://...`, older `main: server is
    // listening on ... - starting the main loop`; the listener starts before the model loads,
    // but /health answers 503 until it has (server.cpp, server-http.cpp).
    ready_lines: &["all slots are idle", "starting the main loop"],
    flags: Some((
        include_str!("flags/llamacpp.txt"),
        "llama-server of llama-cpp-python 0.3.36 (common/arg.cpp)",
    )),
    crash_lines: &[
        // ggml-cuda.cu, ggml-alloc.c, Vulkan, CPU.
        ("cudaMalloc failed: out of memory", Failure::OutOfMemory),
        ("CUDA error: out of memory", Failure::OutOfMemory),
        ("ErrorOutOfDeviceMemory", Failure::OutOfMemory),
        ("insufficient memory", Failure::OutOfMemory),
        // src/llama-kv-cache.cpp, via llama_init_from_model (before "failed to load model").
        (
            "failed to allocate buffer for kv cache",
            Failure::KvPoolTooSmall,
        ),
        ("failed to initialize the context", Failure::KvPoolTooSmall),
        // server-http.cpp `start`: the bind happens before the model loads.
        ("couldn't bind HTTP server socket", Failure::PortInUse),
        // ggml/src/gguf.cpp, src/llama.cpp.
        ("failed to open GGUF file", Failure::ModelNotFound),
        ("error loading model", Failure::ModelNotFound),
        ("failed to load model", Failure::ModelNotFound),
        ("error: invalid argument", Failure::StartupError),
    ],
    hint,
    sim_api: "llama.cpp",
    profiler: Err("llama.cpp's server has no profiler endpoint"),
};

fn hint(f: Failure) -> &'static str {
    match f {
        Failure::OutOfMemory => {
            "out of (GPU) memory: offload fewer layers (-ngl) or use a smaller context (-c)"
        }
        Failure::KvPoolTooSmall => {
            "the KV cache does not fit: lower -c/--ctx-size or -np/--parallel, or offload fewer layers"
        }
        other => common_hint(other),
    }
}
