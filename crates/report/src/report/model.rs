//! The report's data model: everything a template sees, derived only from a run directory's
//! files so that re-rendering is reproducible. Field docs become the published schema.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use super::chart_link::ChartLink;
use super::charts;
use super::digest::RequestDigest;
use super::format::value_text;
use super::metric_def::MetricDef;
use servebench_model::catalog::{FlagKind, Method, Metric};
use servebench_model::results::meta::{RunMeta, RunStatus, ServerLaunch};
use servebench_model::results::records::{PointRecord, PointStatus, RequestRecord, Stat};
use servebench_model::spec::types::PromptSpec;

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
    /// Expected against observed prefix-cache hits, for points whose requests share prefixes
    /// by design (shared-prefix groups, sessions); empty otherwise.
    pub prefix_cache: Vec<PrefixCacheSection>,
    /// Load points (open-loop `load:`, or points judged against `slo:`): offered load,
    /// throughput, goodput, SLO verdicts and the client's self-check. None without any.
    pub load: Option<super::load::LoadSection>,
    /// Capacity searches (`search:`): each answer with its uncertainty, its probes and chart.
    /// None without a search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<super::capacity::CapacitySection>,
    /// What each point's server reported in its own `/metrics`, beside the client's numbers;
    /// empty when nothing was scraped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub server_view: Vec<super::server_view::ServerViewRow>,
    /// Each scraped point's time series (`charts/timeline-<point>.svg`): requests in flight,
    /// running and queued; empty when nothing was scraped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timelines: Vec<ChartLink>,
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
}

fn count_status(points: &[PointRecord], status: PointStatus) -> usize {
    points.iter().filter(|p| p.status() == status).count()
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

fn server_host(v: &serde_json::Value) -> ServerHost {
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
    let cpu = match (s("cpu_model"), v.get("cpu_count").and_then(|c| c.as_u64())) {
        (Some(m), Some(n)) => Some(format!("{m} ({n} CPUs)")),
        (m, n) => m.or(n.map(|n| format!("{n} CPUs"))),
    };
    let gpus = v
        .get("gpus")
        .and_then(|g| g.as_array())
        .map(|list| {
            list.iter()
                .map(|g| {
                    let f = |k: &str| {
                        g.get(k)
                            .map(|x| x.to_string().trim_matches('"').to_string())
                            .unwrap_or_default()
                    };
                    format!(
                        "{}, driver {}, {} MiB",
                        f("name"),
                        f("driver_version"),
                        f("memory_total_mib")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    ServerHost {
        hostname: s("hostname"),
        os: s("os"),
        cpu,
        gpus,
        sglang_version: s("sglang_version"),
    }
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

/// Builds the model from a run's stored records held in memory: [`build_model_from`] with
/// their [`RequestDigest`].
pub fn build_model(
    meta: &RunMeta,
    points: &[PointRecord],
    requests: &[RequestRecord],
) -> ReportModel {
    build_model_from(meta, points, &RequestDigest::of(requests))
}

/// Builds the model from a run's points and the digest of its requests (folded line by line
/// from `requests.jsonl`, so the model's memory does not grow with the requests).
pub(crate) fn build_model_from(
    meta: &RunMeta,
    points: &[PointRecord],
    requests: &RequestDigest,
) -> ReportModel {
    let exp = &meta.experiment;
    let server_dimensions: Vec<String> = meta
        .dimensions
        .iter()
        .filter(|d| is_server_dim(d))
        .cloned()
        .collect();
    let point_dimensions: Vec<String> = meta
        .dimensions
        .iter()
        .filter(|d| !is_server_dim(d))
        .cloned()
        .collect();

    let tables = build_tables(points, requests, &server_dimensions, &point_dimensions);
    let totals = Totals {
        points: points.len(),
        ok: points.iter().map(|p| p.ok).sum(),
        errors: points.iter().map(|p| p.errors).sum(),
        requests_recorded: requests.recorded,
        prime_requests: requests.prime,
        warnings: tables.iter().map(|t| t.warnings.len()).sum(),
        points_ok: count_status(points, PointStatus::Ok),
        points_degraded: count_status(points, PointStatus::Degraded),
        points_failed: count_status(points, PointStatus::Failed),
    };

    let engine = engines_run(meta, &exp.server);
    let token_sources = requests.token_sources.clone();

    let mut model = ReportModel {
        model_version: MODEL_VERSION,
        title: exp.name.clone(),
        description: exp.description.trim().to_string(),
        run: RunInfo {
            status: meta.status.to_string(),
            complete: meta.status == RunStatus::Complete,
            status_reason: meta.status_reason.clone(),
            started_at: meta.started_at.clone(),
            ended_at: meta.ended_at.clone(),
            duration_s: meta
                .ended_at
                .as_deref()
                .and_then(|end| seconds_between(&meta.started_at, end)),
        },
        setup: Setup {
            engine,
            model: exp.server.model.clone(),
            host: exp.host.label(),
            external_url: exp.server.url.clone(),
            api: exp.workload.api.to_string(),
            prompt: prompt_info(&exp.workload.prompt, points),
            output_tokens: exp.workload.output_tokens.nominal(),
            output_tokens_dist: exp
                .workload
                .output_tokens
                .fixed()
                .is_none()
                .then(|| exp.workload.output_tokens.describe()),
            ignore_eos: exp.workload.ignore_eos,
            temperature: exp.workload.temperature,
            cache_policy: exp.cache.policy.to_string(),
            cache_verify: exp.cache.verify,
            cache_reset: {
                let ways: Vec<String> = meta
                    .servers
                    .iter()
                    .filter_map(|s| s.surface.as_ref()?.cache_reset.as_ref())
                    .map(ToString::to_string)
                    .collect();
                let probed = meta.servers.iter().filter(|s| s.surface.is_some()).count();
                (probed > 0 && ways.len() == probed && ways.iter().all(|w| w == &ways[0]))
                    .then(|| ways[0].clone())
            },
            cache_reset_missing: meta
                .servers
                .iter()
                .any(|s| s.surface.as_ref().is_some_and(|x| x.cache_reset.is_none())),
            method: exp.method.name().to_string(),
            method_a: match exp.method.resolve() {
                servebench_model::spec::types::Measure::TwoPoint { a, .. } => Some(a),
                _ => None,
            },
            method_b: match exp.method.resolve() {
                servebench_model::spec::types::Measure::TwoPoint { b, .. } => Some(b),
                _ => None,
            },
            requests: exp.requests,
            concurrency: exp.concurrency,
            repeat: exp.repeat,
            request_timeout_s: exp.request_timeout.as_secs_f64(),
            token_sources,
            template: exp.report.template.clone(),
        },
        servers: meta
            .servers
            .iter()
            .map(|s| server_info(s, points, &server_dimensions))
            .collect(),
        provenance: Provenance {
            tool_version: meta.tool_version.clone(),
            git_commit: meta.git.as_ref().map(|g| g.commit.clone()),
            git_dirty: meta.git.as_ref().map(|g| g.dirty),
            spec_file: meta.spec_file.clone(),
            spec_sha256: meta.spec_sha256.clone(),
            client_hostname: meta.client_host.hostname.clone(),
            client_os: meta.client_host.os.clone(),
            client_cpus: meta.client_host.cpus,
            client_placement: meta.client_placement.clone(),
            server_host: meta.server_host.as_ref().map(server_host),
            pool_hosts: super::hardware::pool_hosts(meta, points),
        },
        sweep: sweep_dimensions(&meta.dimensions, points),
        dimensions: meta.dimensions.clone(),
        server_dimensions,
        point_dimensions,
        tables,
        unfinished_points: unfinished_points(points, requests),
        metric_defs: metric_defs(exp.method.resolve()),
        reproduction: super::reproduction::evaluate(meta, points),
        totals,
        data_notes: Vec::new(),
        charts: Vec::new(),
        prefix_cache: Vec::new(),
        load: None,
        capacity: None,
        server_view: super::server_view::rows(points, requests),
        timelines: Vec::new(),
    };
    model.prefix_cache = points
        .iter()
        .filter(|p| !p.prefix_cache.is_empty())
        .map(|p| PrefixCacheSection {
            point: p.id.clone(),
            label: model
                .tables
                .iter()
                .flat_map(|t| &t.rows)
                .find(|r| r.id == p.id)
                .map_or_else(|| p.id.clone(), |r| r.label.clone()),
            by: if p.prefix_cache[0].turn.is_some() {
                "turn".into()
            } else {
                "group".into()
            },
            rows: p.prefix_cache.clone(),
        })
        .collect();
    let labels: IndexMap<String, String> = model
        .tables
        .iter()
        .flat_map(|t| t.rows.iter().map(|r| (r.id.clone(), r.label.clone())))
        .collect();
    let variants: IndexMap<String, String> = model
        .tables
        .iter()
        .flat_map(|t| t.rows.iter().map(|r| (r.id.clone(), t.title.clone())))
        .collect();
    model.load = super::load::section(points, &labels, &variants);
    // The links come from the same selection that draws the files, so they always agree.
    model.charts = charts::charts(&model).iter().map(|c| c.link()).collect();
    model
}

fn is_server_dim(name: &str) -> bool {
    name.starts_with("server.")
}

fn dimension_values(p: &PointRecord, dims: &[String]) -> Vec<NameValue> {
    dims.iter()
        .map(|d| NameValue {
            name: d.clone(),
            value: p
                .values
                .get(d)
                .map(value_text)
                .unwrap_or_else(|| "—".to_string()),
        })
        .collect()
}

fn build_tables(
    points: &[PointRecord],
    requests: &RequestDigest,
    server_dims: &[String],
    point_dims: &[String],
) -> Vec<ResultTable> {
    let mut tables: Vec<ResultTable> = Vec::new();
    for p in points {
        let idx = match tables.iter().position(|t| t.group == p.group) {
            Some(i) => i,
            None => {
                let server_values = dimension_values(p, server_dims);
                let title = if server_values.is_empty() {
                    p.group.clone()
                } else {
                    server_values
                        .iter()
                        .map(|nv| format!("{}={}", nv.name, nv.value))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                tables.push(ResultTable {
                    group: p.group.clone(),
                    title,
                    server_values,
                    rows: Vec::new(),
                    warnings: Vec::new(),
                });
                tables.len() - 1
            }
        };
        let table = &mut tables[idx];
        let row = point_row(p, requests, point_dims, &mut table.warnings);
        table.rows.push(row);
    }
    tables
}

fn point_row(
    p: &PointRecord,
    requests: &RequestDigest,
    point_dims: &[String],
    warnings: &mut Vec<Warning>,
) -> PointRow {
    let values: Vec<String> = dimension_values(p, point_dims)
        .into_iter()
        .map(|nv| nv.value)
        .collect();
    let label = if point_dims.is_empty() {
        p.id.clone()
    } else {
        let dims: Vec<String> = point_dims
            .iter()
            .zip(&values)
            .map(|(d, v)| format!("{d}={v}"))
            .collect();
        format!("{} ({})", p.id, dims.join(", "))
    };

    // Every streaming metric has a row, measured or not (shown as `—`).
    let mut stats: IndexMap<String, Option<Stat>> = Metric::of_method(Method::Streaming)
        .map(|m| (m.name().to_string(), usable(p.metrics.get(m.name()))))
        .collect();
    // Queue delay only matters for load runs; show it when recorded. Unknown metrics follow.
    let queue = Metric::QueueDelay.name();
    if let Some(q) = usable(p.metrics.get(queue)) {
        stats.insert(queue.to_string(), Some(q));
    }
    for (name, stat) in &p.metrics {
        if !stats.contains_key(name) {
            stats.insert(name.clone(), usable(Some(stat)));
        }
    }

    let error_summary = error_summary(p, requests);

    // Flags from the record, plus warnings the record implies but did not flag itself.
    let mut point_warnings: Vec<(FlagKind, String)> = p
        .flags
        .iter()
        .map(|f| (f.kind.clone(), f.message.clone()))
        .collect();
    let has = |kind: &FlagKind, ws: &[(FlagKind, String)]| ws.iter().any(|(k, _)| k == kind);
    if p.errors > 0 && !has(&FlagKind::Errors, &point_warnings) {
        let kinds: Vec<String> = error_summary
            .iter()
            .map(|e| format!("{} ×{}", e.kind, e.count))
            .collect();
        let total = p.ok + p.errors;
        let mut msg = format!("{} of {} requests failed", p.errors, total);
        if !kinds.is_empty() {
            msg.push_str(&format!(" ({})", kinds.join(", ")));
        }
        msg.push_str("; the statistics cover the successful ones only.");
        point_warnings.push((FlagKind::Errors, msg));
    }
    if p.incomplete && !has(&FlagKind::Incomplete, &point_warnings) {
        point_warnings.push((
            FlagKind::Incomplete,
            "The point did not run to completion; its statistics cover fewer requests than \
             planned."
                .to_string(),
        ));
    }

    let mut marks: IndexMap<String, Vec<usize>> =
        ["prompt_tok", "cached", "ttft", "decode", "itl", "ok_err"]
            .iter()
            .map(|c| (c.to_string(), Vec::new()))
            .collect();
    for (kind, message) in &point_warnings {
        let n = warnings.len() + 1;
        let cell = kind.cell();
        marks.entry(cell.to_string()).or_default().push(n);
        warnings.push(Warning {
            n,
            point: p.id.clone(),
            label: label.clone(),
            kind: kind.to_string(),
            message: message.clone(),
            cell: cell.to_string(),
        });
    }
    let marks = marks
        .into_iter()
        .map(|(cell, ns)| {
            let text = if ns.is_empty() {
                String::new()
            } else {
                let ns: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
                format!(" ⚠{}", ns.join(","))
            };
            (cell, text)
        })
        .collect();

    PointRow {
        id: p.id.clone(),
        group: p.group.clone(),
        label,
        values,
        ctx_req: p.requested_prompt_tokens,
        ok: p.ok,
        errors: p.errors,
        incomplete: p.incomplete,
        status: p.status().to_string(),
        failure: p.failure.clone(),
        stats,
        marks,
        itl_per_chunk: p.has_flag(&FlagKind::ItlPerChunk),
        warning_count: point_warnings.len(),
        doubted: point_warnings.iter().any(|(k, _)| !k.is_informational()),
        error_summary,
        duration_s: p.wall.map(|w| w.ended_at - w.started_at),
    }
}

/// The definitions the report states, for the method that produced the numbers.
fn metric_defs(method: servebench_model::spec::types::Measure) -> IndexMap<String, MetricDef> {
    let (method, a, b) = match method {
        servebench_model::spec::types::Measure::TwoPoint { a, b } => (Method::TwoPoint, a, b),
        servebench_model::spec::types::Measure::Streaming => (Method::Streaming, 0, 0),
    };
    Metric::shown_for(method)
        .map(|m| (m.name().to_string(), MetricDef::of(m, method, a, b)))
        .collect()
}

/// A stat with no samples is "not measured", not a row of zeros.
fn usable(stat: Option<&Stat>) -> Option<Stat> {
    stat.filter(|s| s.count > 0).cloned()
}

fn error_summary(p: &PointRecord, requests: &RequestDigest) -> Vec<ErrorSummary> {
    let failed = requests
        .point(&p.id)
        .map(|d| &d.error_kinds)
        .filter(|kinds| !kinds.is_empty());
    // The point's own counts are authoritative; requests.jsonl supplies the sample messages.
    let kinds: IndexMap<String, usize> = if p.error_kinds.is_empty() {
        failed
            .into_iter()
            .flatten()
            .map(|(kind, first)| (kind.clone(), first.count))
            .collect()
    } else {
        p.error_kinds.clone()
    };
    kinds
        .into_iter()
        .map(|(kind, count)| {
            let sample = failed.and_then(|f| f.get(&kind));
            ErrorSummary {
                kind,
                count,
                sample: sample.map(|e| e.message.clone()),
                status: sample.and_then(|e| e.status),
            }
        })
        .collect()
}

/// Points with measured requests but no line in `points.jsonl`, in the order of their first
/// measured request.
fn unfinished_points(points: &[PointRecord], requests: &RequestDigest) -> Vec<UnfinishedPoint> {
    let finished: std::collections::HashSet<&str> = points.iter().map(|p| p.id.as_str()).collect();
    requests
        .points
        .iter()
        .filter(|(id, _)| !finished.contains(id.as_str()))
        .map(|(id, d)| UnfinishedPoint {
            id: id.clone(),
            requests: d.measured,
            errors: d.errors,
        })
        .collect()
}

fn sweep_dimensions(dims: &[String], points: &[PointRecord]) -> Vec<SweepDimension> {
    dims.iter()
        .map(|d| {
            let mut values: Vec<String> = Vec::new();
            for p in points {
                if let Some(v) = p.values.get(d) {
                    let v = value_text(v);
                    if !values.contains(&v) {
                        values.push(v);
                    }
                }
            }
            SweepDimension {
                name: d.clone(),
                server: is_server_dim(d),
                values,
            }
        })
        .collect()
}

/// The engines that served the run, each with the version it reported (`sglang (simulated)
/// 0.5.2, vllm 0.33.0`), in launch order; the spec's engine when nothing was launched yet.
fn engines_run(meta: &RunMeta, server: &servebench_model::spec::types::Server) -> String {
    let mut seen: Vec<String> = Vec::new();
    for s in &meta.servers {
        let version = s
            .server_info
            .as_ref()
            .and_then(|i| i.get("version"))
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .or_else(|| s.surface.as_ref().and_then(|x| x.version.clone()));
        let name = match version {
            Some(v) => format!("{} {v}", s.engine),
            None => s.engine.clone(),
        };
        if !seen.contains(&name) {
            seen.push(name);
        }
    }
    if seen.is_empty() {
        return if server.url.is_some() {
            "external".to_string()
        } else {
            server.engine.to_string()
        };
    }
    seen.join(", ")
}

/// A launch command as the report shows it: the program by its name, not the absolute path
/// it ran from on this machine (`servebench sim ...`, not `/home/me/.../target/debug/servebench
/// sim ...`), so a report says what ran without the runner's directory layout.
fn shown_command(argv: &[String]) -> String {
    let mut argv = argv.to_vec();
    if let Some(program) = argv.first_mut()
        && program.starts_with('/')
        && let Some(name) = std::path::Path::new(program.as_str())
            .file_name()
            .and_then(|n| n.to_str())
    {
        *program = name.to_string();
    }
    servebench_model::text::shell_join(&argv)
}

fn server_info(s: &ServerLaunch, points: &[PointRecord], server_dims: &[String]) -> ServerInfo {
    let dimension_values = points
        .iter()
        .find(|p| p.group == s.group)
        .map(|p| dimension_values(p, server_dims))
        .unwrap_or_default();
    ServerInfo {
        group: s.group.clone(),
        engine: s.engine.clone(),
        url: s.url.clone(),
        command: s.command.as_ref().map(|argv| shown_command(argv)),
        args: s
            .args
            .iter()
            // As the engine's command line spells it: `--name`, or a short flag verbatim.
            .map(|(k, v)| NameValue {
                name: if k.starts_with('-') {
                    k.clone()
                } else {
                    format!("--{k}")
                },
                value: value_text(v),
            })
            .collect(),
        env: s
            .env
            .iter()
            .map(|(k, v)| NameValue {
                name: k.clone(),
                value: v.clone(),
            })
            .collect(),
        server_version: s
            .server_info
            .as_ref()
            .and_then(|i| i.get("version"))
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .or_else(|| s.surface.as_ref().and_then(|x| x.version.clone())),
        identity: s
            .surface
            .as_ref()
            .map(|x| x.identity.clone())
            .unwrap_or_default(),
        cache_reset: s
            .surface
            .as_ref()
            .and_then(|x| x.cache_reset.as_ref())
            .map(ToString::to_string),
        tokenize: s
            .surface
            .as_ref()
            .and_then(|x| x.tokenize.as_ref())
            .map(|t| match t {
                servebench_model::results::meta::Tokenize::V1Prompt => "/v1/tokenize".to_string(),
                _ => "/tokenize".to_string(),
            }),
        metrics: s.surface.as_ref().is_some_and(|x| x.metrics),
        notes: s
            .notes
            .iter()
            .chain(s.surface.iter().flat_map(|x| x.notes.iter()))
            .cloned()
            .collect(),
        ready_after_s: s.ready_after_s,
        outcome: s.outcome.clone(),
        log_file: s.log_file.clone(),
        dimension_values,
        slurm: s.slurm.as_ref().map(slurm_words),
    }
}

/// A Slurm job's accounting as one sentence for the report.
fn slurm_words(j: &servebench_model::results::meta::SlurmJob) -> String {
    let mut parts = vec![format!("Slurm job {} (`{}`)", j.job_id, j.job_name)];
    if let Some(n) = &j.node_list {
        parts.push(format!("on {n}"));
    }
    if let Some(p) = &j.partition {
        parts.push(format!("partition {p}"));
    }
    if let Some(st) = &j.step {
        parts.push(format!("step {st}"));
    }
    if let Some(q) = j.queued_s {
        parts.push(format!(
            "{} in the queue",
            servebench_model::text::duration(q)
        ));
    }
    let mut text = parts.join(", ");
    if let Some(state) = &j.state {
        text.push_str(&format!("; state {state}"));
        if let Some(r) = &j.reason {
            text.push_str(&format!(" ({r})"));
        }
        if let Some(c) = &j.exit_code {
            text.push_str(&format!(", exit {c}"));
        }
        if let Some(a) = &j.accounting {
            text.push_str(&format!(" (from {a})"));
        }
    }
    text
}

fn prompt_info(prompt: &PromptSpec, points: &[PointRecord]) -> PromptInfo {
    let mut requested: Vec<u64> = points
        .iter()
        .filter_map(|p| p.requested_prompt_tokens)
        .collect();
    requested.dedup();
    let varies = {
        let first = requested.first();
        requested.iter().any(|r| Some(r) != first)
    };
    let target = |spec_tokens: u64| {
        if varies {
            None
        } else {
            Some(requested.first().copied().unwrap_or(spec_tokens))
        }
    };
    match prompt {
        PromptSpec::Repeat {
            text,
            tokens,
            calibrate,
        } => PromptInfo {
            kind: "repeat".to_string(),
            target_tokens: target(*tokens),
            varies,
            calibrate: Some(*calibrate),
            text: Some(text.clone()),
            seed: None,
            path: None,
            lengths: None,
        },
        PromptSpec::Random {
            tokens,
            seed,
            calibrate,
        } => PromptInfo {
            kind: "random".to_string(),
            target_tokens: target(tokens.nominal()),
            varies: varies || tokens.fixed().is_none(),
            calibrate: Some(*calibrate),
            text: None,
            seed: Some(*seed),
            path: None,
            lengths: tokens.fixed().is_none().then(|| tokens.describe()),
        },
        PromptSpec::Dataset { format, file } => PromptInfo {
            kind: format!("dataset ({format})"),
            target_tokens: None,
            varies: true,
            calibrate: None,
            text: None,
            seed: None,
            path: Some(file.display().to_string()),
            lengths: None,
        },
        PromptSpec::SharedPrefix {
            groups,
            prefix_tokens,
            suffix_tokens,
            seed,
        } => PromptInfo {
            kind: "shared-prefix".to_string(),
            target_tokens: Some(prefix_tokens + suffix_tokens),
            varies: false,
            calibrate: Some(true),
            text: None,
            seed: Some(*seed),
            path: None,
            lengths: Some(format!(
                "{groups} groups x {prefix_tokens} prefix tokens + {suffix_tokens} unique tokens"
            )),
        },
        PromptSpec::File { path } => PromptInfo {
            kind: "file".to_string(),
            target_tokens: None,
            varies: false,
            calibrate: None,
            text: None,
            seed: None,
            path: Some(path.display().to_string()),
            lengths: None,
        },
    }
}

fn seconds_between(start: &str, end: &str) -> Option<f64> {
    let start = chrono::DateTime::parse_from_rfc3339(start).ok()?;
    let end = chrono::DateTime::parse_from_rfc3339(end).ok()?;
    let ms = (end - start).num_milliseconds();
    (ms >= 0).then(|| ms as f64 / 1000.0)
}
