//! The experiment spec as Rust types. These types are the single source of the JSON Schema
//! (`servebench schema`, `schemas/experiment.schema.json`): doc comments become descriptions.
//!
//! A spec is validated in its raw form (where any scalar may be a `{{ var }}` template) and then
//! expanded into one fully typed `Experiment` per sweep point.

use std::path::PathBuf;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Durations as `humantime` 2.4 reads them: `90s`, `20m`, `20 minutes`, `1h 30m`, `1.5h`.
pub const DURATION_PATTERN: &str = r"^\s*([0-9]+(\.[0-9]+)?\s*(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)\s*)+$";

/// The only host supported so far.
pub const LOCAL_HOST_PATTERN: &str = "^local$";

/// One experiment: which server to run, what to send it, how to measure, and what to sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Short name, used for the run directory `runs/<name>/<UTC timestamp>/`.
    /// Letters, digits, `-`, `_` and `.` only.
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]+$"), length(min = 1, max = 100))]
    pub name: String,
    /// What the experiment is for; shown at the top of the report.
    #[serde(default)]
    pub description: String,
    /// Where the server runs. `local` (the default) starts it on this machine; SSH hosts
    /// (`ssh://user@host`) are planned but not supported yet.
    #[serde(default = "default_host")]
    #[schemars(regex(pattern = LOCAL_HOST_PATTERN))]
    pub host: String,
    /// The inference server: the engine to launch and its flags, or the URL of one already running.
    pub server: Server,
    /// What each request sends: API, prompt generator and output length.
    pub workload: Workload,
    /// Whether measured requests may reuse the server's prefix (radix) cache, and whether to verify it.
    #[serde(default)]
    pub cache: CacheSpec,
    /// How a point is measured. `streaming` (the default): one streaming request per sample gives
    /// both TTFT (prefill) and the token stream (decode) from a single prefill.
    #[serde(default)]
    pub method: Method,
    /// Sweep dimensions; the points are their cartesian product, in the order written.
    /// A bare name (`ctx`) is a variable used elsewhere as `"{{ ctx }}"`; a dotted path
    /// (`server.args.chunked-prefill-size`) or a top-level field (`concurrency`, `requests`)
    /// sets that field directly. Dimensions under `server.` group points into server launches.
    #[serde(default)]
    pub sweep: IndexMap<String, Vec<SweepValue>>,
    /// Rounds per point: each round flushes (cold) or primes (warm) anew and sends `requests`
    /// requests; a point's numbers cover all its rounds.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1000))]
    pub repeat: u32,
    /// Measured requests per point and round.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 100000))]
    pub requests: u32,
    /// Most requests in flight at once within a point (closed loop).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 4096))]
    pub concurrency: u32,
    /// Per-request timeout, e.g. `10m`, `90s`. A request past it is recorded as a timeout error.
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    #[schemars(with = "String", regex(pattern = DURATION_PATTERN))]
    pub request_timeout: std::time::Duration,
    /// How the report is rendered.
    #[serde(default)]
    pub report: ReportSpec,
}

/// A value a sweep dimension takes: a number, string or boolean.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SweepValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

/// The server under test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// `sim`: servebench's built-in SGLang-compatible simulator (no GPU needed).
    /// `sglang`: `python -m sglang.launch_server` (see `launcher`).
    #[serde(default)]
    pub engine: Engine,
    /// Model path or name passed as `--model-path`; also the `model` field of OpenAI requests.
    #[serde(default)]
    pub model: Option<String>,
    /// Port to listen on. Omit it to pick a free port.
    #[serde(default)]
    pub port: Option<u16>,
    /// Launch flags without the leading `--`, e.g. `{ tp-size: 8, chunked-prefill-size: 4096,
    /// enable-metrics: true }`. `true` is a bare flag, `false` omits it.
    #[serde(default)]
    pub args: IndexMap<String, ArgValue>,
    /// Environment variables for the server process.
    #[serde(default)]
    pub env: IndexMap<String, String>,
    /// How long to wait for the server to become ready (`/health` 200), e.g. `20m`, `90s`.
    #[serde(default = "default_ready_timeout", with = "humantime_serde")]
    #[schemars(with = "String", regex(pattern = DURATION_PATTERN))]
    pub ready_timeout: std::time::Duration,
    /// The command that starts the engine, before its flags. Default for `sglang`:
    /// `[python, -m, sglang.launch_server]`; for `sim`: servebench's own `sim` subcommand.
    #[serde(default)]
    pub launcher: Option<Vec<String>>,
    /// URL of a server that is already running (`http://host:port`). servebench neither starts
    /// nor stops it; it records its `/server_info` when it answers.
    #[serde(default)]
    pub url: Option<String>,
}

/// A launch flag's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ArgValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// The server engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// servebench's built-in SGLang-compatible simulator.
    #[default]
    Sim,
    /// SGLang (`python -m sglang.launch_server`).
    Sglang,
}

/// What each request sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The HTTP API used for requests.
    #[serde(default)]
    pub api: Api,
    /// The prompt generator.
    pub prompt: PromptSpec,
    /// Output tokens per request (`max_new_tokens` / `max_tokens`).
    #[schemars(range(min = 1, max = 1000000))]
    pub output_tokens: u32,
    /// Keep generating past end-of-sequence so every request yields exactly `output_tokens`.
    #[serde(default = "yes")]
    pub ignore_eos: bool,
    /// Sampling temperature; 0 is greedy.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 10.0))]
    pub temperature: f64,
}

/// The HTTP API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// SGLang's native `/generate` (token counts and `cached_tokens` in `meta_info`).
    #[default]
    SglangGenerate,
    /// OpenAI-compatible `/v1/completions`.
    OpenaiCompletions,
    /// OpenAI-compatible `/v1/chat/completions`.
    OpenaiChat,
}

/// A prompt generator. Lengths are in tokens as the server counts them: without a tokenizer,
/// servebench calibrates the text against the server's reported `prompt_tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PromptSpec {
    /// A sentence repeated to the target length (the classic long-context benchmark prompt).
    Repeat {
        /// The text that is repeated.
        #[serde(default = "default_repeat_text")]
        text: String,
        /// Target prompt length in tokens.
        #[schemars(range(min = 1, max = 10000000))]
        tokens: u64,
        /// Scale the text until the server's `prompt_tokens` is within `tolerance` of the target.
        #[serde(default = "yes")]
        calibrate: bool,
    },
    /// Seeded random words to the target length (no accidental shared prefixes).
    Random {
        /// Target prompt length in tokens.
        #[schemars(range(min = 1, max = 10000000))]
        tokens: u64,
        /// Seed of the word sequence; the same seed gives the same prompt.
        #[serde(default)]
        seed: u64,
        /// Scale the text until the server's `prompt_tokens` is within tolerance of the target.
        #[serde(default = "yes")]
        calibrate: bool,
    },
    /// Prompts read from a file: one per line (`.txt`) or a JSON list of strings (`.json`).
    /// Requests take them in order, wrapping around.
    File {
        /// Path to the file, relative to the spec file.
        path: PathBuf,
    },
}

/// Cache policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    /// `cold`: a unique nonce starts every measured prompt and the cache is flushed before each
    /// point. `warm`: each prompt is sent once to prime the cache, then measured. `as-is`: no
    /// intervention.
    #[serde(default)]
    pub policy: CachePolicy,
    /// Check the server's own `cached_tokens`: a cold point with cache hits, or a warm point
    /// without them, is flagged as contaminated.
    #[serde(default = "yes")]
    pub verify: bool,
    /// Start every cold prompt with a unique nonce (the default). `false` reproduces what naive
    /// benchmark scripts do (the same prompt again hits the radix cache); `verify` then flags it.
    #[serde(default = "yes")]
    pub nonce: bool,
}

impl Default for CacheSpec {
    fn default() -> Self {
        CacheSpec {
            policy: CachePolicy::Cold,
            verify: true,
            nonce: true,
        }
    }
}

/// How measured requests relate to the server's prefix cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CachePolicy {
    /// Nonce-prefixed prompts and a flush before each point: every request pays a full prefill.
    #[default]
    Cold,
    /// Prime each prompt once, then measure it: prefill is served from the cache.
    Warm,
    /// No nonce, no flush; cached tokens are still recorded.
    AsIs,
}

/// The measurement method.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// One streaming request per sample: TTFT, then the token stream.
    #[default]
    Streaming,
}

/// Report options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportSpec {
    /// `default`, or a path (relative to the spec) to a minijinja Markdown template (`.md.j2`).
    #[serde(default = "default_template")]
    pub template: String,
}

impl Default for ReportSpec {
    fn default() -> Self {
        ReportSpec {
            template: default_template(),
        }
    }
}

fn default_host() -> String {
    "local".into()
}
fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}
fn default_template() -> String {
    "default".into()
}
fn default_repeat_text() -> String {
    "The quick brown fox jumps over the lazy dog. ".into()
}
fn default_ready_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(600)
}
fn default_request_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(600)
}
