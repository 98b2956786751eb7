//! `SimConfig`: the parsed flags resolved against the profile.

use super::api::Api;
use super::args::{self, ParsedArgs, SimArgError};
use super::llamacpp_options::LlamaOptions;
use super::log::SimLog;
use super::profile::{MemoryModel, Profile, SpecModel};
use super::trace::ChunkTrace;
use super::vllm_options::VllmOptions;
use std::sync::Arc;

/// Everything the simulator needs to run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The flags as given, with defaults (every key appears in `/server_info`).
    pub args: ParsedArgs,
    /// The timing profile (with `--sim-time-scale` applied).
    pub profile: Profile,
    /// `--model-path`.
    pub model_path: String,
    /// `--served-model-name`, defaulting to the model path.
    pub served_model_name: String,
    /// `--host`.
    pub host: String,
    /// `--port` (0 = any free port).
    pub port: u16,
    /// Context length in tokens.
    pub context_length: u64,
    /// KV pool capacity in tokens; <= 0 means the memory model left no room (start-up fails).
    pub max_total_tokens: i64,
    /// `--mem-fraction-static`, defaulting to the profile's.
    pub mem_fraction_static: f64,
    /// PyTorch's allocator grows segments in place (`PYTORCH_CUDA_ALLOC_CONF=
    /// expandable_segments:True` in the environment): no fragmented reserve between spikes.
    pub expandable_segments: bool,
    /// Most requests running at once.
    pub max_running_requests: usize,
    /// Most new tokens per prefill iteration; None = chunking disabled.
    pub chunked_prefill_size: Option<u64>,
    /// Most new tokens per prefill batch when chunking is disabled.
    pub max_prefill_tokens: u64,
    /// `--disable-radix-cache`.
    pub disable_radix_cache: bool,
    /// `--schedule-conservativeness`: scales SGLang's admission estimate of the output tokens
    /// running requests will still need (`new_token_ratio` starts at 0.7 x this).
    pub schedule_conservativeness: f64,
    /// A prefill chunk shares its iteration with the running requests' decode step
    /// (SGLang's `--enable-mixed-chunk`; vLLM's V1 scheduler always does).
    pub mixed_chunk: bool,
    /// `--incremental-streaming-output` (0.5.23 has no `--stream-output`): deltas instead of cumulative text.
    pub incremental_output: bool,
    /// `--enable-metrics`.
    pub enable_metrics: bool,
    /// `--enable-cache-report`.
    pub enable_cache_report: bool,
    /// Decode steps between Decode log lines.
    pub decode_log_interval: u64,
    /// Decode steps between streamed outputs.
    pub stream_interval: u64,
    /// Speculative decoding model; None = off.
    pub speculative: Option<SpecModel>,
    /// Seed for generated tokens and accept lengths.
    pub seed: u64,
    /// `--skip-server-warmup`.
    pub skip_warmup: bool,
    /// Whether Decode lines say `cuda graph: True` (batch size up to this).
    pub cuda_graph_max_bs: Option<u64>,
    /// Where log lines go.
    pub log: SimLog,
    /// The chunk-timing trace, when a test or bench wants one.
    pub trace: Option<ChunkTrace>,
    /// The engine whose surface is served (`--api`).
    pub api: Api,
    /// vLLM's own settings (`--api vllm`).
    pub vllm: Option<Arc<VllmOptions>>,
    /// llama.cpp's own settings (`--api llama.cpp`).
    pub llama: Option<Arc<LlamaOptions>>,
    /// Prefill-decode disaggregation (`--disaggregation-mode` and its flags).
    pub disagg: super::disagg::PdConfig,
    /// Chat streams carry the model's thinking in the engine's own field (SGLang's and
    /// vLLM's `--reasoning-parser`, llama.cpp's `--reasoning-format` other than `none`):
    /// see `crate::thinking`.
    pub reasoning_split: bool,
    /// vLLM's `--reasoning-parser`, checked against its registry at start-up.
    pub reasoning_parser: Option<String>,
    /// The engine splits tool calls from text, so chat streams carry them in
    /// `delta.tool_calls` (`crate::tools`): SGLang's `--tool-call-parser`, vLLM's
    /// `--enable-auto-tool-choice` with its `--tool-call-parser`, llama.cpp's `--jinja`.
    pub tool_call_parser: bool,
    /// vLLM's `--tool-call-parser` under `--enable-auto-tool-choice`, checked against its
    /// registry at start-up.
    pub tool_parser: Option<String>,
    /// The fault `--sim-broken-tool-calls-above-batch N`.
    pub broken_tool_calls_above: Option<u64>,
    /// `--sim-repeat-tool-call-names`: every piece of a call repeats its `id` and
    /// `function.name` (MiniMax through NVIDIA NIM, Fireworks).
    pub repeat_tool_call_names: bool,
    /// The fault `--sim-no-prefix-hits`: prefix caching stays on in name (`/server_info`,
    /// cache reports) and matches nothing.
    pub no_prefix_hits: bool,
    /// Chat requests calling a tool now (`crate::tools`).
    pub live_tool_calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// KV pool tokens the memory model leaves at `frac` of each GPU with `tp` ranks (<= 0: none).
pub(crate) fn kv_pool_tokens(m: &MemoryModel, frac: f64, tp: f64) -> i64 {
    let free_gb = m.gpu_gb * frac - m.weight_gb / tp;
    (free_gb * 1e9 / (m.kv_bytes_per_token / tp)).floor() as i64
}

/// The speculative model in use: the profile's when it is on by default or `requested`, else
/// the default one when `requested`; `max_tokens` caps the tokens one step emits.
pub(crate) fn speculative_model(
    profile: &Profile,
    requested: bool,
    max_tokens: Option<i64>,
) -> Option<SpecModel> {
    match (&profile.speculative, requested) {
        (Some(s), true) => Some(s.clone()),
        (Some(s), false) if s.enabled => Some(s.clone()),
        (None, true) => Some(SpecModel::default()),
        _ => None,
    }
    .map(|mut s| {
        if let Some(n) = max_tokens.filter(|n| *n > 0) {
            s.num_draft_tokens = n as u32;
            s.accept_length_mean = s.accept_length_mean.min(n as f64);
        }
        s
    })
}

/// The timing profile, with the simulator's own flags (`--profile`, `--sim-*`) applied.
fn sim_profile(a: &ParsedArgs) -> Result<Profile, SimArgError> {
    let mut profile = Profile::load(a.str("profile").unwrap_or("fast"))?;
    if let Some(s) = a.float("sim-time-scale") {
        if s <= 0.0 {
            return Err(SimArgError::Invalid(
                "--sim-time-scale must be positive".into(),
            ));
        }
        profile.time_scale = s;
    }
    if let Some(n) = a.int("sim-thinking-tokens") {
        profile.thinking.tokens = u64::try_from(n).map_err(|_| {
            SimArgError::Invalid("--sim-thinking-tokens must not be negative".into())
        })?;
    }
    Ok(profile)
}

/// An integer flag `--name` that must be above zero when given.
fn positive(name: &str, v: Option<i64>) -> Result<Option<u64>, SimArgError> {
    match v {
        Some(x) if x <= 0 => Err(SimArgError::Invalid(format!(
            "--{name} must be positive, got {x}"
        ))),
        x => Ok(x.map(|x| x as u64)),
    }
}

/// `--chunked-prefill-size` (the profile's by default): positive, or -1 for none.
fn chunked_prefill_size(a: &ParsedArgs, profile: &Profile) -> Result<Option<u64>, SimArgError> {
    match a
        .int("chunked-prefill-size")
        .unwrap_or(profile.chunked_prefill_size)
    {
        -1 => Ok(None),
        x if x > 0 => Ok(Some(x as u64)),
        x => Err(SimArgError::Invalid(format!(
            "--chunked-prefill-size must be positive or -1, got {x}"
        ))),
    }
}

/// The prefill-decode disaggregation flags, resolved as SGLang's hook resolves them.
fn disagg_flags(a: &ParsedArgs, time_scale: f64) -> Result<super::disagg::Resolved, SimArgError> {
    super::disagg::resolve(
        &super::disagg::PdFlags {
            mode: a.str("disaggregation-mode"),
            bootstrap_port: a.int("disaggregation-bootstrap-port"),
            backend: a.str("disaggregation-transfer-backend"),
            decode_radix: a.flag("disaggregation-decode-enable-radix-cache"),
            gbps: a.float("sim-kv-transfer-gbps"),
            latency_ms: a.float("sim-kv-transfer-latency-ms"),
        },
        time_scale,
    )
    .map_err(|e| match e {
        super::disagg::PdError::Flag(m) => SimArgError::Invalid(m),
        raised => SimArgError::Raised(raised.traceback()),
    })
}

/// The server log, with the lines flag resolution wrote and `--log-level`'s quiet batches.
fn startup_log(
    a: &ParsedArgs,
    pd_log: &[(&'static str, String)],
    spec_warning: Option<&str>,
) -> SimLog {
    let log = SimLog::stderr();
    for (_, line) in pd_log {
        log.info(line);
    }
    if let Some(w) = spec_warning {
        log.info(&format!("WARNING speculative_hook.py:1259: {w}"));
    }
    log.set_quiet_batches(matches!(
        a.str("log-level").map(str::to_ascii_lowercase).as_deref(),
        Some("warning" | "error" | "critical")
    ));
    log
}

/// `--schedule-conservativeness`: at least 0, 1 by default.
fn schedule_conservativeness(a: &ParsedArgs) -> Result<f64, SimArgError> {
    match a.float("schedule-conservativeness") {
        Some(x) if x < 0.0 || !x.is_finite() => Err(SimArgError::Invalid(format!(
            "--schedule-conservativeness must be >= 0, got {x}"
        ))),
        x => Ok(x.unwrap_or(1.0)),
    }
}

/// The largest CUDA-graph decode batch, none with `--disable-cuda-graph`.
fn cuda_graph_max_bs(a: &ParsedArgs) -> Option<u64> {
    if a.flag("disable-cuda-graph") {
        None
    } else {
        Some(
            a.int("cuda-graph-max-bs-decode")
                .map(|x| x.max(0) as u64)
                .unwrap_or(256),
        )
    }
}

impl SimConfig {
    /// Parses `servebench sim` arguments (`--help` is ignored here; see [`args::parse`]).
    pub fn from_args(args: &[String]) -> Result<SimConfig, SimArgError> {
        Self::from_parsed(args::parse(args)?)
    }

    /// Resolves parsed flags against the profile they name.
    pub(crate) fn from_parsed(a: ParsedArgs) -> Result<SimConfig, SimArgError> {
        let profile = sim_profile(&a)?;
        let port = a.int("port").unwrap_or(30000);
        let port = u16::try_from(port)
            .map_err(|_| SimArgError::Invalid(format!("--port must be 0..65535, got {port}")))?;
        let model_path = a.str("model-path").unwrap_or("sim-model").to_string();
        let served_model_name = a
            .str("served-model-name")
            .unwrap_or(&model_path)
            .to_string();
        let context_length =
            positive("context-length", a.int("context-length"))?.unwrap_or(profile.context_length);
        let tp = positive("tp-size", a.int("tp-size"))?.unwrap_or(1) as f64;
        let frac = a
            .float("mem-fraction-static")
            .unwrap_or(profile.memory.mem_fraction_static);
        let max_total_tokens = match positive("max-total-tokens", a.int("max-total-tokens"))? {
            Some(n) => n as i64,
            None => kv_pool_tokens(&profile.memory, frac, tp),
        };
        let max_running_requests = positive("max-running-requests", a.int("max-running-requests"))?
            .unwrap_or(profile.max_running_requests) as usize;
        let chunked_prefill_size = chunked_prefill_size(&a, &profile)?;
        let spec = super::sglang_spec::resolve(
            &profile,
            a.str("speculative-algorithm"),
            super::sglang_spec::DraftFlags {
                num_steps: a.int("speculative-num-steps"),
                eagle_topk: a.int("speculative-eagle-topk"),
                num_draft_tokens: a.int("speculative-num-draft-tokens"),
            },
        )?;
        let speculative = spec.model;
        let pd = disagg_flags(&a, profile.time_scale)?;
        let mut disagg = pd.config;
        disagg.page_size = a.int("page-size").unwrap_or(1);
        disagg.kv_cache_dtype = a.str("kv-cache-dtype").unwrap_or("auto").to_string();
        disagg.tp = tp as u64;
        let log = startup_log(&a, &pd.log, spec.warning);
        Ok(SimConfig {
            profile: profile.clone(),
            model_path,
            served_model_name,
            host: a.str("host").unwrap_or("127.0.0.1").to_string(),
            port,
            context_length,
            max_total_tokens,
            mem_fraction_static: frac,
            expandable_segments: super::memory::expandable_segments_from_env(),
            max_running_requests,
            chunked_prefill_size,
            max_prefill_tokens: positive("max-prefill-tokens", a.int("max-prefill-tokens"))?
                .unwrap_or(16384),
            disable_radix_cache: pd
                .disable_radix_cache
                .unwrap_or(a.flag("disable-radix-cache")),
            schedule_conservativeness: schedule_conservativeness(&a)?,
            mixed_chunk: a.flag("enable-mixed-chunk") && chunked_prefill_size.is_some(),
            incremental_output: a.flag("incremental-streaming-output"),
            enable_metrics: a.flag("enable-metrics"),
            enable_cache_report: a.flag("enable-cache-report"),
            decode_log_interval: positive("decode-log-interval", a.int("decode-log-interval"))?
                .unwrap_or(40),
            stream_interval: positive("stream-interval", a.int("stream-interval"))?.unwrap_or(1),
            speculative,
            seed: a
                .int("random-seed")
                .map(|s| s as u64)
                .unwrap_or(profile.seed),
            skip_warmup: a.flag("skip-server-warmup"),
            cuda_graph_max_bs: cuda_graph_max_bs(&a),
            log,
            trace: None,
            reasoning_split: a.str("reasoning-parser").is_some(),
            reasoning_parser: None,
            tool_call_parser: a.str("tool-call-parser").is_some(),
            tool_parser: None,
            broken_tool_calls_above: a
                .int("sim-broken-tool-calls-above-batch")
                .map(|n| n.max(0) as u64),
            repeat_tool_call_names: a.flag("sim-repeat-tool-call-names"),
            no_prefix_hits: a.flag("sim-no-prefix-hits"),
            live_tool_calls: Default::default(),
            args: a,
            api: Api::Sglang,
            vllm: None,
            llama: None,
            disagg,
        })
    }

    /// The settings of an engine launched with no flags on `profile`: the base the vLLM and
    /// llama.cpp command lines are resolved onto.
    pub(crate) fn engine_defaults(api: Api, profile: Profile) -> SimConfig {
        let frac = profile.memory.mem_fraction_static;
        SimConfig {
            args: ParsedArgs::default(),
            model_path: "sim-model".into(),
            served_model_name: "sim-model".into(),
            host: "127.0.0.1".into(),
            port: 30000,
            context_length: profile.context_length,
            max_total_tokens: kv_pool_tokens(&profile.memory, frac, 1.0),
            mem_fraction_static: frac,
            expandable_segments: super::memory::expandable_segments_from_env(),
            max_running_requests: profile.max_running_requests as usize,
            chunked_prefill_size: u64::try_from(profile.chunked_prefill_size).ok(),
            max_prefill_tokens: 16384,
            disable_radix_cache: false,
            schedule_conservativeness: 1.0,
            mixed_chunk: false,
            incremental_output: false,
            enable_metrics: false,
            enable_cache_report: false,
            decode_log_interval: 40,
            stream_interval: 1,
            speculative: speculative_model(&profile, false, None),
            seed: profile.seed,
            skip_warmup: false,
            cuda_graph_max_bs: Some(256),
            log: SimLog::stderr(),
            trace: None,
            profile,
            api,
            vllm: None,
            llama: None,
            disagg: super::disagg::PdConfig::default(),
            reasoning_split: false,
            reasoning_parser: None,
            tool_call_parser: false,
            tool_parser: None,
            broken_tool_calls_above: None,
            repeat_tool_call_names: false,
            no_prefix_hits: false,
            live_tool_calls: Default::default(),
        }
    }

    /// Pool capacity as a count (0 when the memory model left no room).
    pub(crate) fn pool_tokens(&self) -> u64 {
        self.max_total_tokens.max(0) as u64
    }

    /// SGLang's `max_req_input_len` (tp_worker.py): min(context - 1, pool - 1) - 5; a prompt
    /// of this many tokens or more is refused.
    pub(crate) fn max_req_input_len(&self) -> u64 {
        (self.context_length.saturating_sub(1))
            .min(self.pool_tokens().saturating_sub(1))
            .saturating_sub(5)
    }
}
