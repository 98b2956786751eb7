//! The report's data model: everything a template sees, derived only from a run directory's
//! files so that re-rendering is reproducible. Field docs become the published schema. Types
//! only: `build` fills them from a run's records, `charts` and the templates read them.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use super::chart_link::ChartLink;
use super::metric_def::MetricDef;
use servebench_model::results::records::Stat;

/// Version of this data model; bumped when a field changes meaning or is removed.
pub(crate) const MODEL_VERSION: u32 = 1;

/// Everything a report template sees.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ReportModel {
    /// Version of this data model (`MODEL_VERSION`).
    pub model_version: u32,
    /// The experiment's name.
    pub title: String,
    /// The experiment's description (may be empty).
    pub description: String,
    /// Status and timing of the run.
    pub run: RunInfo,
    /// What was measured and how (from the resolved experiment).
    pub setup: Setup,
    /// One entry per server launch, in launch order.
    pub servers: Vec<ServerInfo>,
    /// Where the numbers came from.
    pub provenance: Provenance,
    /// Every sweep dimension, in spec order.
    pub dimensions: Vec<String>,
    /// Sweep dimensions that change the server (`server.…`): they split points into groups.
    pub server_dimensions: Vec<String>,
    /// Sweep dimensions that vary within a server group: the first columns of each table.
    pub point_dimensions: Vec<String>,
    /// The values each dimension took, formatted, in order of first appearance.
    pub sweep: Vec<SweepDimension>,
    /// One results table per server group, in the order the groups first appear.
    pub tables: Vec<ResultTable>,
    /// Points that have requests in `requests.jsonl` but no line in `points.jsonl` (the run
    /// stopped while they were measured).
    pub unfinished_points: Vec<UnfinishedPoint>,
    /// Definitions of the metrics, by metric name (`ttft_s`, ...), in report order.
    pub metric_defs: IndexMap<String, MetricDef>,
    /// The spec's `expect:` entries checked against this run (empty without expectations).
    pub reproduction: super::reproduction::Reproduction,
    /// Run-wide counts.
    pub totals: Totals,
    /// Problems found reading the run's files (e.g. a truncated line skipped); empty when clean.
    pub data_notes: Vec<String>,
    /// Charts drawn beside the report (`charts/*.svg`), in report order; empty when no swept
    /// dimension changes the context length or too few points were measured.
    pub charts: Vec<ChartLink>,
    /// A run made by `servebench import` from another tool's files: only what those files
    /// recorded is stated (None for servebench's own runs).
    pub imported: Option<ImportedSetup>,
    /// Expected against observed prefix-cache hits, for points whose requests share prefixes
    /// by design (shared-prefix groups, sessions); empty otherwise.
    pub prefix_cache: Vec<PrefixCacheSection>,
    /// Points replayed from a trace's blocks (theoretical against reported cache hits) and
    /// agent sessions (jobs per hour, live sessions, TTFT against context). None without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<super::agentic::TraceSection>,
    /// Load points (open-loop `load:`, or points judged against `slo:`): offered load,
    /// throughput, goodput, SLO verdicts and the client's self-check. None without any.
    pub load: Option<super::load::LoadSection>,
    /// Capacity searches (`search:`): each answer with its uncertainty, its probes and chart.
    /// None without a search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<super::capacity::CapacitySection>,
    /// Speculative decoding: accept lengths per point and, for a run with speculation on and
    /// off, the speed-up and its crossover (absent without either).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative: Option<super::speculative::SpeculativeSection>,
    /// What each point's server reported in its own `/metrics`, beside the client's numbers;
    /// empty when nothing was scraped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server_view: Vec<super::server_view::ServerViewRow>,
    /// Each scraped point's time series (`charts/timeline-<point>.svg`): requests in flight,
    /// running and queued; empty when nothing was scraped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timelines: Vec<ChartLink>,
    /// Every closed-loop point's decode step and prefill against the GPU's peak bandwidth and
    /// FLOP/s, and what a context sweep's line means. None without a point with a decode
    /// speed (open-loop runs); with `missing` set when the model config or the GPU is not
    /// known.
    pub bound: Option<super::bound_section::BoundSection>,
    /// GPU telemetry and cost (`telemetry:`, `cost:`): headroom, throttling, energy and cost
    /// per token at each point and at a search's capacity. None without either.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<super::gpu::GpuSection>,
    /// The engine's profiler captures (`profiler:`): one row per point captured or meant to be.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<super::profiles::ProfileRow>,
    /// The workers behind a router (`server.workers`): what each served, and the spread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<super::workers::WorkersSection>,
    /// Output validity (`validity:`): what each point's canaries and consistency check found.
    /// None without checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validity: Option<super::validity::ValiditySection>,
    /// Tool calls (`workload.tools`): at each point sent tools, the calls made and valid
    /// beside its TTFT. None when no point was sent tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<super::tool_calls::ToolCallsSection>,
}

/// One point's prefix-cache verification: a row per shared-prefix group or session turn.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PrefixCacheSection {
    /// Point id (`p003`).
    pub point: String,
    /// Human label, as in the results tables.
    pub label: String,
    /// `group` or `turn`: what each row is.
    pub by: String,
    pub rows: Vec<servebench_model::results::records::PrefixCacheRow>,
    /// True when the router's log named each request's worker: hits are owed per worker,
    /// and the rows count workers and requests routed away from the prefix.
    pub per_worker: bool,
}

/// Status and timing of the run.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RunInfo {
    /// `running`, `complete`, `degraded` (every point measured, some with failed requests
    /// beyond the error budget), `incomplete` (stopped early, or a point failed) or `failed`.
    pub status: String,
    /// True only when the status is `complete`.
    pub complete: bool,
    /// Why the run is not complete (None when it is, or when no reason was recorded).
    pub status_reason: Option<String>,
    /// RFC 3339 UTC start time, as recorded.
    pub started_at: String,
    /// RFC 3339 UTC end time (None while running or after a hard crash).
    pub ended_at: Option<String>,
    /// Seconds from start to end (None without an end time).
    pub duration_s: Option<f64>,
}

/// What was measured and how.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Setup {
    /// Engine named in the spec: `sim` or `sglang`; `external` for a server given by URL.
    pub engine: String,
    /// Model path or name (None when the spec did not name one).
    pub model: Option<String>,
    /// Where the server ran (`local` or an SSH URL).
    pub host: String,
    /// URL of an already running server (None when servebench launched it).
    pub external_url: Option<String>,
    /// HTTP API: `sglang-generate`, `openai-completions` or `openai-chat`.
    pub api: String,
    /// The prompt generator.
    pub prompt: PromptInfo,
    /// A SageMaker capture replayed (its `load.trace.file`): each request sent its captured
    /// messages and `max_tokens`, no prompt of `prompt`'s; None for every other load.
    pub captured: Option<String>,
    /// An agentic load's session trace (its `load.agentic.file`): each turn's prompt made of
    /// its blocks at its `in` tokens and its `max_tokens` its `out`, no prompt of `prompt`'s;
    /// None for every other load.
    pub agent_sessions: Option<String>,
    /// A trace replayed with its blocks (`load.trace.file` in Mooncake's or Bailian's format,
    /// `hash_ids` not ignored): a line with `hash_ids` sends its blocks, no nonce, at its
    /// `input_length`; the others the workload's prompt. None for every other load.
    pub trace_blocks: Option<String>,
    /// `max_new_tokens` / `max_tokens` per request (a distribution's mean).
    pub output_tokens: u64,
    /// How output lengths vary (`uniform 64-256`); None when every request asks the same.
    pub output_tokens_dist: Option<String>,
    /// Whether generation continued past end-of-sequence.
    pub ignore_eos: bool,
    /// Sampling temperature.
    pub temperature: f64,
    /// Cache policy: `cold`, `warm` or `as-is`.
    pub cache_policy: String,
    /// Whether the server's `cached_tokens` were checked against the policy.
    pub cache_verify: bool,
    /// How the prefix cache was reset before cold points, when every server offered the same
    /// way (`/flush_cache`, `/reset_prefix_cache`, ...); None when unknown or mixed.
    pub cache_reset: Option<String>,
    /// True when some server offered no way to reset its cache (cold points then rely on
    /// nonces, checked by `verify`).
    pub cache_reset_missing: bool,
    /// Measurement method: `streaming` or `two-point`.
    pub method: String,
    /// Two-point method: `max_tokens` of the first request of a pair (None for streaming).
    pub method_a: Option<u32>,
    /// Two-point method: `max_tokens` of the second request of a pair (None for streaming).
    pub method_b: Option<u32>,
    /// Measured requests per point and round.
    pub requests: u32,
    /// Most requests in flight at once within a point.
    pub concurrency: u32,
    /// Rounds per point (each flushes or primes anew).
    pub repeat: u32,
    /// Per-request timeout in seconds.
    pub request_timeout_s: f64,
    /// Where token counts came from, over all measured requests: `meta-info`, `usage`,
    /// `chunk-count` (empty without requests).
    pub token_sources: Vec<String>,
    /// Template named in the spec: a built-in name (`default`, `long-context`) or a path.
    pub template: String,
}

/// The prompt generator.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PromptInfo {
    /// `repeat`, `random` or `file`.
    pub kind: String,
    /// Target prompt length in tokens when the same for every point (None for file prompts or
    /// when it varies; see `varies`).
    pub target_tokens: Option<u64>,
    /// True when points asked for different prompt lengths (see each row's `ctx_req`).
    pub varies: bool,
    /// Whether the text was scaled until the server's `prompt_tokens` matched the target
    /// (None for file prompts).
    pub calibrate: Option<bool>,
    /// The repeated sentence (`repeat` only).
    pub text: Option<String>,
    /// Seed of the word sequence (`random` only).
    pub seed: Option<u64>,
    /// Prompt file, relative to the spec (`file` only).
    pub path: Option<String>,
    /// How prompt lengths are drawn per request (`lognormal mean 1024 ...`), or what a
    /// shared-prefix prompt is made of; None for one length.
    pub lengths: Option<String>,
}

/// One server launch (or the external server).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ServerInfo {
    /// Server group id (`g1`, ...).
    pub group: String,
    /// `sim`, `sglang` or `external`.
    pub engine: String,
    /// Base URL the client used.
    pub url: String,
    /// The launch command as one shell-quoted line, secrets redacted (None for external).
    pub command: Option<String>,
    /// Launch flags as given in the spec (redacted), values formatted.
    pub args: Vec<NameValue>,
    /// Environment given to the server (redacted).
    pub env: Vec<NameValue>,
    /// The server's version, from whichever identity endpoint gave one.
    pub server_version: Option<String>,
    /// Identity endpoints that answered (`/server_info`, `/v1/models`, `/props`, `/version`).
    pub identity: Vec<String>,
    /// How its prefix cache was reset (None: it offered no way, or was not probed).
    pub cache_reset: Option<String>,
    /// Its tokenize endpoint, when it has one (calibration then needs no prefill).
    pub tokenize: Option<String>,
    /// Whether it serves Prometheus `/metrics`.
    pub metrics: bool,
    /// What servebench noticed about it and what that means for the numbers.
    pub notes: Vec<String>,
    /// Seconds from launch to ready.
    pub ready_after_s: Option<f64>,
    /// How the server ended: `stopped`, `crashed: ...`, `external`.
    pub outcome: Option<String>,
    /// Server log file inside the run directory.
    pub log_file: Option<String>,
    /// Values of the server sweep dimensions for this group, formatted.
    pub dimension_values: Vec<NameValue>,
    /// The Slurm job it ran in, in words (None off Slurm): `Slurm job 12 (name) on vm,
    /// partition debug, step 12.0, 2 s in the queue; state CANCELLED, exit 0:15 (scontrol)`.
    pub slurm: Option<String>,
}

/// A name and its formatted value.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct NameValue {
    /// Flag, variable or dimension name.
    pub name: String,
    /// Its value, formatted.
    pub value: String,
}

/// Where the numbers came from.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Provenance {
    /// servebench version.
    pub tool_version: String,
    /// Git commit of the repository holding the spec (None outside git).
    pub git_commit: Option<String>,
    /// Whether that repository had uncommitted changes.
    pub git_dirty: Option<bool>,
    /// The spec file as given on the command line.
    pub spec_file: String,
    /// SHA-256 of the spec file.
    pub spec_sha256: String,
    /// Host name of the client machine.
    pub client_hostname: String,
    /// Operating system of the client machine.
    pub client_os: String,
    /// CPU count of the client machine.
    pub client_cpus: usize,
    /// Where the measuring client ran: `local` (this machine; through an SSH port forward for
    /// SSH hosts) or `host` (servebench's agent on the GPU host, against localhost). None for
    /// runs recorded before this was stored.
    pub client_placement: Option<String>,
    /// Whether the measuring client reached a server through an SSH port forward (a server
    /// launched on an SSH host, measured from this machine), as the run recorded it.
    pub client_through_forward: bool,
    /// The GPU host, read over SSH (None for local runs).
    pub server_host: Option<ServerHost>,
    /// A host pool's hosts, what each is and which points it measured (empty on one host).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pool_hosts: Vec<super::hardware::PoolHost>,
}

/// The GPU host of an SSH run, as read over SSH.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ServerHost {
    pub hostname: Option<String>,
    /// `PRETTY_NAME` of /etc/os-release.
    pub os: Option<String>,
    pub cpu: Option<String>,
    /// One line per GPU: `NVIDIA H100 80GB HBM3, driver 550.54, 81559 MiB`.
    pub gpus: Vec<String>,
    /// `sglang.__version__` from the host's python, when it imports.
    pub sglang_version: Option<String>,
}

/// A sweep dimension and the values it took.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SweepDimension {
    /// Dimension name as in the spec's `sweep:` (`ctx`, `server.args.tp`).
    pub name: String,
    /// True for `server.…` dimensions.
    pub server: bool,
    /// Formatted values, in order of first appearance.
    pub values: Vec<String>,
}

/// The results of one server group.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ResultTable {
    /// Server group id.
    pub group: String,
    /// Heading for the table: the server dimension values (`server.args.tp=8`), or the group id
    /// when there are no server dimensions.
    pub title: String,
    /// Values of the server sweep dimensions for this group.
    pub server_values: Vec<NameValue>,
    /// One row per point, in `points.jsonl` order.
    pub rows: Vec<PointRow>,
    /// Warnings for this table's rows, numbered from 1; rows refer to them by number.
    pub warnings: Vec<Warning>,
}

/// One point: the row in its table and its detail section.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PointRow {
    /// Point id (`p003`).
    pub id: String,
    /// Server group id.
    pub group: String,
    /// Human label: `p003 (ctx=1024)`.
    pub label: String,
    /// Values of `point_dimensions`, formatted, in the same order.
    pub values: Vec<String>,
    /// Requested prompt tokens (None for file prompts).
    pub ctx_req: Option<u64>,
    /// Measured requests that succeeded.
    pub ok: usize,
    /// Measured requests that failed.
    pub errors: usize,
    /// True when the point did not run to completion.
    pub incomplete: bool,
    /// `ok`, `degraded` or `failed` (see the run's `points_*` totals).
    pub status: String,
    /// Why the server failed during (or before) this point, classified from its log:
    /// `out-of-memory`, `kv-pool-too-small`, `port-in-use`, `startup-error`, `unknown`. None
    /// when the server did not fail.
    pub failure: Option<String>,
    /// Statistics by metric name: every name in `metric_defs` except `queue_delay_s` is present
    /// (None when not measured); `queue_delay_s` and any other metric follow when recorded.
    pub stats: IndexMap<String, Option<Stat>>,
    /// Warning markers by cell: keys `prompt_tok`, `cached`, `ttft`, `decode`, `itl`, `ok_err`;
    /// each value is empty or a marker such as ` ⚠1,2` naming entries of the table's `warnings`.
    pub marks: IndexMap<String, String>,
    /// True when the point's ITL is a gap per chunk rather than per token (the stream gave no
    /// per-chunk token counts and its chunks held several tokens: flag `itl-per-chunk`).
    pub itl_per_chunk: bool,
    /// Number of warnings on this point.
    pub warning_count: usize,
    /// True when a warning casts doubt on the point's numbers (not only on their spread):
    /// its chart marker is drawn hollow.
    pub doubted: bool,
    /// Failed requests by kind, with a sample message from `requests.jsonl`.
    pub error_summary: Vec<ErrorSummary>,
    /// Seconds the point took, calibration and flushes included (None in runs that predate
    /// point spans).
    pub duration_s: Option<f64>,
}

/// A warning about a point, listed under its table.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Warning {
    /// Number within the table, from 1.
    pub n: usize,
    /// Point id.
    pub point: String,
    /// Point label.
    pub label: String,
    /// `cold-cache-hit`, `warm-cache-miss`, `errors`, `calibration`, `incomplete`, ...
    pub kind: String,
    /// What happened and what it means for the numbers.
    pub message: String,
    /// The cell the marker sits in: `prompt_tok`, `cached`, `ttft`, `decode`, `itl` or `ok_err`.
    pub cell: String,
}

/// Failed requests of one kind in a point.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ErrorSummary {
    /// `http`, `stream-error`, `malformed`, `connect`, `reset` (the server broke the
    /// connection), `timeout`, `incomplete`. A stale connection is the client's, not an error:
    /// such requests are sent again and counted by the `stale-connections` warning.
    pub kind: String,
    /// How many measured requests failed this way.
    pub count: usize,
    /// The first such request's message (None when requests.jsonl holds none).
    pub sample: Option<String>,
    /// Its HTTP status, when one arrived.
    pub status: Option<u16>,
}

/// A point with recorded requests but no aggregate.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct UnfinishedPoint {
    /// Point id.
    pub id: String,
    /// Measured requests recorded.
    pub requests: usize,
    /// Of which failed.
    pub errors: usize,
}

/// Run-wide counts.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Totals {
    /// Points with a line in `points.jsonl`.
    pub points: usize,
    /// Measured requests that succeeded, summed over points.
    pub ok: usize,
    /// Measured requests that failed, summed over points.
    pub errors: usize,
    /// Lines in `requests.jsonl` (measured and priming).
    pub requests_recorded: usize,
    /// Priming requests (warm policy), not measured.
    pub prime_requests: usize,
    /// Warnings over all tables.
    pub warnings: usize,
    /// Points whose every planned request was measured within the error budget.
    pub points_ok: usize,
    /// Points with numbers, but more failed requests than the budget allows, or cut short.
    pub points_degraded: usize,
    /// Points without a successful request (no numbers).
    pub points_failed: usize,
}

/// What another tool's files recorded of a run imported from them.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ImportedSetup {
    /// The tool (`aiperf`, `guidellm`, ...) and its version where the files say.
    pub tool: String,
    pub version: Option<String>,
    /// The files read.
    pub files: Vec<String>,
    /// The settings the files recorded, as `path = value`, in the resolved spec's order.
    pub recorded: Vec<(String, String)>,
    /// How the tool measured, aspect by aspect (TTFT origin, ITL, warm-up, ...).
    pub method: Vec<(String, String)>,
    /// What the files hold that servebench has no place for, or lack.
    pub notes: Vec<String>,
}
