//! The table of `sglang.launch_server` flags the simulator accepts, with what it does with each.

/// How a flag's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A bare flag: present = true.
    Bool,
    /// A signed integer.
    Int,
    /// A floating-point number.
    Float,
    /// Any string.
    Str,
}

/// One accepted flag.
#[derive(Debug)]
pub(crate) struct Flag {
    /// Long name without the leading `--`.
    pub name: &'static str,
    /// Other exact names (without `--`).
    pub aliases: &'static [&'static str],
    /// Value kind.
    pub kind: Kind,
    /// Default shown in `/server_info` (JSON text; `null` = none).
    pub default: &'static str,
    /// What the flag means and what the simulator does with it.
    pub help: &'static str,
}

/// Help-section headings, by the first flag of each section.
pub(crate) const SECTIONS: &[(&str, &str)] = &[
    ("model-path", "Model and server"),
    (
        "tp-size",
        "Parallelism (accepted; the profile's timing does not change)",
    ),
    ("mem-fraction-static", "Memory and scheduling (modelled)"),
    ("speculative-algorithm", "Speculative decoding (modelled)"),
    (
        "disaggregation-mode",
        "Prefill-decode disaggregation (modelled; see sim::disagg)",
    ),
    ("enable-metrics", "Observability and output"),
    (
        "dtype",
        "Accepted for compatibility, no effect in the simulator",
    ),
    ("profile", "Simulator only"),
];

macro_rules! f {
    ($name:literal, $kind:ident, $default:literal, $help:literal) => {
        Flag { name: $name, aliases: &[], kind: Kind::$kind, default: $default, help: $help }
    };
    ($name:literal [$($alias:literal),*], $kind:ident, $default:literal, $help:literal) => {
        Flag { name: $name, aliases: &[$($alias),*], kind: Kind::$kind, default: $default, help: $help }
    };
}

/// Every flag the simulator understands, in help order.
pub(crate) const FLAGS: &[Flag] = &[
    f!(
        "model-path"["model"],
        Str,
        "null",
        "Model name; echoed in /model_info, /v1/models and /server_info. Nothing is loaded. Default: \"sim-model\"."
    ),
    f!(
        "tokenizer-path",
        Str,
        "null",
        "Echoed in /model_info; the simulator always uses its built-in deterministic tokenizer."
    ),
    f!(
        "served-model-name",
        Str,
        "null",
        "Name reported by /v1/models and in OpenAI responses. Default: the model path."
    ),
    f!("host", Str, "\"127.0.0.1\"", "Address to listen on."),
    f!(
        "port",
        Int,
        "30000",
        "Port to listen on (0 = any free port; the chosen one is logged)."
    ),
    f!(
        "api-key",
        Str,
        "null",
        "Accepted; requests are not authenticated."
    ),
    f!(
        "context-length",
        Int,
        "null",
        "Model context length in tokens; longer prompts are rejected with SGLang's error. Default: the profile's."
    ),
    f!(
        "skip-server-warmup",
        Bool,
        "false",
        "Skip the profile's warmup delay: /health is 200 at once."
    ),
    f!(
        "tp-size"["tensor-parallel-size"],
        Int,
        "1",
        "Tensor parallelism; splits weights and KV bytes per token in the KV pool size estimate."
    ),
    f!(
        "dp-size"["data-parallel-size"],
        Int,
        "1",
        "Accepted; no effect."
    ),
    f!(
        "pp-size"["pipeline-parallel-size"],
        Int,
        "1",
        "Accepted; no effect."
    ),
    f!(
        "ep-size"["expert-parallel-size", "ep"],
        Int,
        "1",
        "Accepted; no effect."
    ),
    f!(
        "nnodes",
        Int,
        "1",
        "Ranks of a multi-node server (see sim::ranks)."
    ),
    f!(
        "node-rank",
        Int,
        "0",
        "This rank; 0 serves HTTP once all ranks joined."
    ),
    f!(
        "dist-init-addr",
        Str,
        "null",
        "HOST:PORT where rank 0 waits for the others."
    ),
    f!("enable-dp-attention", Bool, "false", "Accepted; no effect."),
    f!(
        "mem-fraction-static",
        Float,
        "null",
        "Fraction of GPU memory for weights + KV pool; sizes the pool from the profile's memory model. Too small a pool fails start-up with SGLang's 'Not enough memory' error; with the profile's activation model, what is left bounds prefill activation spikes (out of memory past it)."
    ),
    f!(
        "max-total-tokens",
        Int,
        "null",
        "KV pool capacity in tokens (overrides the memory model)."
    ),
    f!(
        "max-running-requests",
        Int,
        "null",
        "Most requests decoding at once; the rest wait in the queue. Default: the profile's."
    ),
    f!(
        "max-queued-requests",
        Int,
        "null",
        "Accepted; the queue is unbounded."
    ),
    f!(
        "chunked-prefill-size",
        Int,
        "null",
        "Most new prompt tokens per prefill iteration; longer prompts prefill over several iterations, each with its own activation spike. -1 disables. Default: the profile's."
    ),
    f!(
        "max-prefill-tokens",
        Int,
        "16384",
        "Most new tokens in one prefill batch (when chunking is disabled, a single longer prompt still runs alone)."
    ),
    f!(
        "disable-radix-cache",
        Bool,
        "false",
        "No prefix caching: cached_tokens is always 0."
    ),
    f!(
        "page-size",
        Int,
        "1",
        "Accepted; the simulator caches at token granularity."
    ),
    f!(
        "schedule-policy",
        Str,
        "\"fcfs\"",
        "Accepted; the simulator schedules first come, first served."
    ),
    f!(
        "schedule-conservativeness",
        Float,
        "1.0",
        "Scales the admission estimate of output tokens (new_token_ratio starts at 0.7 x this); lower admits more and retracts more."
    ),
    f!(
        "enable-mixed-chunk",
        Bool,
        "false",
        "A prefill chunk shares its iteration with the running requests' decode step."
    ),
    f!(
        "disable-overlap-schedule",
        Bool,
        "false",
        "Accepted; no effect."
    ),
    f!(
        "cuda-graph-max-bs-decode",
        Int,
        "null",
        "Accepted; Decode log lines report 'cuda graph: True' up to this batch size (default 256). (0.5.23 split --cuda-graph-max-bs into -decode and -prefill: the old name is ambiguous there.)"
    ),
    f!(
        "disable-cuda-graph",
        Bool,
        "false",
        "Decode log lines report 'cuda graph: False'."
    ),
    f!(
        "attention-backend",
        Str,
        "null",
        "Accepted; echoed in /server_info."
    ),
    f!(
        "random-seed",
        Int,
        "null",
        "Seed for generated tokens and speculative accept lengths. Default: the profile's seed."
    ),
    f!(
        "speculative-algorithm",
        Str,
        "null",
        "EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM: turns on speculative decoding: each verify step emits 1..num-steps+1 tokens per request (the profile's accept length at the request's context) and costs the profile's verify overhead; stats in the final meta_info and Decode log lines."
    ),
    f!(
        "speculative-draft-model-path",
        Str,
        "null",
        "Accepted; echoed in /server_info."
    ),
    f!(
        "speculative-num-steps",
        Int,
        "null",
        "Draft steps per verify: at most this + 1 tokens per step. Needed when topk or draft tokens are given (SGLang asserts it)."
    ),
    f!(
        "speculative-eagle-topk",
        Int,
        "null",
        "Draft branches per step; 1 forces num-draft-tokens to num-steps + 1 (SGLang's warning)."
    ),
    f!(
        "speculative-num-draft-tokens",
        Int,
        "null",
        "Tokens verified per request per step: the verify cost grows with it (default: the profile's, else 4)."
    ),
    f!(
        "disaggregation-mode",
        Str,
        "\"null\"",
        "null, prefill or decode. A prefill worker opens the bootstrap server on --host:--disaggregation-bootstrap-port, waits for each room's decode side, prefills one token and moves the KV (the modelled transfer); a decode worker fetches a room's KV from the prefill named by bootstrap_host:bootstrap_port, then decodes. A request without bootstrap_room is refused (400)."
    ),
    f!(
        "disaggregation-bootstrap-port",
        Int,
        "8998",
        "Where a prefill worker's bootstrap server listens; a decode worker's default for a null bootstrap_port."
    ),
    f!(
        "disaggregation-transfer-backend",
        Str,
        "\"mooncake\"",
        "mooncake, nixl, ascend, mori, mooncake_tcp (as mooncake): all the same modelled transfer; fake moves nothing (decode only: a prefill refuses it, as SGLang asserts)."
    ),
    f!(
        "disaggregation-decode-enable-radix-cache",
        Bool,
        "false",
        "A decode worker keeps its radix cache (off by default in the decode role); refused with the fake backend."
    ),
    f!(
        "enable-metrics",
        Bool,
        "false",
        "Serve Prometheus metrics at /metrics (404 otherwise)."
    ),
    f!(
        "enable-cache-report",
        Bool,
        "false",
        "Report usage.prompt_tokens_details.cached_tokens in OpenAI responses (when > 0)."
    ),
    f!(
        "log-level",
        Str,
        "\"info\"",
        "'warning' or 'error' hides batch log lines."
    ),
    f!("log-requests", Bool, "false", "Accepted; no effect."),
    f!(
        "decode-log-interval",
        Int,
        "40",
        "Log a Decode batch line every this many decode steps."
    ),
    f!(
        "stream-interval",
        Int,
        "1",
        "Send a streaming chunk every this many decode steps (plus the first and last)."
    ),
    f!(
        "incremental-streaming-output",
        Bool,
        "false",
        "/generate streams text and output_ids as deltas instead of cumulative."
    ),
    f!("show-time-cost", Bool, "false", "Accepted; no effect."),
    f!(
        "dtype",
        Str,
        "\"auto\"",
        "Accepted; echoed in /server_info."
    ),
    f!(
        "kv-cache-dtype",
        Str,
        "\"auto\"",
        "Accepted; echoed in /server_info."
    ),
    f!(
        "quantization",
        Str,
        "null",
        "Accepted; echoed in /server_info."
    ),
    f!("load-format", Str, "\"auto\"", "Accepted; no effect."),
    f!("trust-remote-code", Bool, "false", "Accepted; no effect."),
    f!("revision", Str, "null", "Accepted; no effect."),
    f!("device", Str, "null", "Accepted; no effect."),
    f!(
        "chat-template",
        Str,
        "null",
        "Accepted; chat messages are rendered with a fixed simple template."
    ),
    f!(
        "tool-call-parser",
        Str,
        "null",
        "Chat streams carry tool calls in delta.tool_calls (see the simulator's tools)."
    ),
    f!(
        "reasoning-parser",
        Str,
        "null",
        "Chat streams carry the model's thinking in `reasoning_content` (the profile's `thinking`)."
    ),
    f!("grammar-backend", Str, "null", "Accepted; no effect."),
    f!("sampling-backend", Str, "null", "Accepted; no effect."),
    f!(
        "enable-torch-compile",
        Bool,
        "false",
        "Accepted; no effect."
    ),
    f!("enable-p2p-check", Bool, "false", "Accepted; no effect."),
    f!("watchdog-timeout", Float, "300", "Accepted; no effect."),
    f!(
        "allow-auto-truncate",
        Bool,
        "false",
        "Accepted; over-long prompts are still rejected."
    ),
    f!(
        "is-embedding",
        Bool,
        "false",
        "Accepted; the simulator only generates."
    ),
    f!("skip-tokenizer-init", Bool, "false", "Accepted; no effect."),
    f!(
        "profile",
        Str,
        "\"fast\"",
        "Timing profile: a built-in name or a path to a YAML file."
    ),
    f!(
        "sim-time-scale",
        Float,
        "null",
        "Multiply every modelled duration by this (overrides the profile's time_scale; 0.1 = ten times faster)."
    ),
    f!(
        "sim-thinking-tokens",
        Int,
        "null",
        "Thinking tokens the model writes before each answer (overrides the profile's thinking.tokens)."
    ),
    f!(
        "sim-broken-tool-calls-above-batch",
        Int,
        "null",
        "A fault: a tool call made while more than N chat requests are live streams broken arguments (not JSON)."
    ),
    f!(
        "sim-repeat-tool-call-names",
        Bool,
        "false",
        "Every piece of a streamed tool call repeats its id and function.name, as MiniMax through NVIDIA NIM and Fireworks do."
    ),
    f!(
        "sim-no-prefix-hits",
        Bool,
        "false",
        "A fault: the prefix cache is on and reported, and finds nothing (every cached_tokens 0), as vLLM's hybrid sliding-window models did (vllm #42948)."
    ),
    f!(
        "sim-kv-transfer-gbps",
        Float,
        "null",
        "Prefill-decode KV transfer bandwidth in GB/s (1e9 bytes), per rank. Default 25."
    ),
    f!(
        "sim-kv-transfer-latency-ms",
        Float,
        "null",
        "Fixed time of each prefill-decode KV transfer, in milliseconds. Default 1. A transfer takes latency + prompt tokens x kv_bytes_per_token / tp / bandwidth, times the profile's time_scale."
    ),
];

/// The `/server_info` key of a flag (`tp-size` -> `tp_size`).
pub(crate) fn dest(name: &str) -> String {
    name.replace('-', "_")
}
