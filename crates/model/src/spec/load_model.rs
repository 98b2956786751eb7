//! The spec's load model: how requests arrive (`load:`), when a point stops (`stop:`), its
//! warm-up and cool-down, and the SLOs its requests are judged by (`slo:`, `percentiles:`).
//! Without `load:` a point is today's closed loop of `concurrency`.
//!
//! Every field is a plain value of the point, so a sweep (`load.rate`) or a capacity search
//! sets it like any other.

use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error_budget::ErrorBudget;
use super::patterns::DURATION_PATTERN;
use super::validate::{Problem, Target};

/// How requests arrive at the server: one variant per load shape, each with only the fields
/// that shape reads. Written in a spec as one mapping with a `kind` (the wire form,
/// [`LoadFields`], whose schema the spec's is): the raw checks name a field that does not
/// belong to its kind at its line and column before the spec is typed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "LoadFields", into = "LoadFields")]
pub enum LoadSpec {
    /// `kind: rate`: a fixed rate with an arrival process.
    Rate {
        rate: Rate,
        arrivals: Arrivals,
        open: OpenLoop,
    },
    /// `kind: ramp`: a rising rate.
    Ramp {
        ramp: RampSpec,
        arrivals: Arrivals,
        open: OpenLoop,
    },
    /// `kind: trace`: arrivals replayed from a file.
    Trace { trace: TraceSpec, open: OpenLoop },
    /// `kind: sessions`: simulated users in multi-turn conversations.
    Sessions {
        sessions: super::workload::SessionsSpec,
        headers: SessionHeaders,
    },
    /// `kind: agentic`: agent sessions replayed from a session trace.
    Agentic {
        agentic: AgenticSpec,
        headers: SessionHeaders,
    },
}

/// How a rate's or a ramp's arrivals are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrivals {
    pub arrival: Arrival,
    pub burstiness: f64,
    pub seed: u64,
}

/// What every open loop (rate, ramp, trace) has: a cap on requests in flight and the lag
/// beyond which its client is the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpenLoop {
    pub max_in_flight: Option<u32>,
    pub lag_limit: Duration,
}

impl LoadSpec {
    /// The load's kind.
    pub fn kind(&self) -> LoadKind {
        match self {
            LoadSpec::Rate { .. } => LoadKind::Rate,
            LoadSpec::Ramp { .. } => LoadKind::Ramp,
            LoadSpec::Trace { .. } => LoadKind::Trace,
            LoadSpec::Sessions { .. } => LoadKind::Sessions,
            LoadSpec::Agentic { .. } => LoadKind::Agentic,
        }
    }

    /// An open loop's cap and lag limit (None for sessions and agents).
    pub fn open_loop(&self) -> Option<&OpenLoop> {
        match self {
            LoadSpec::Rate { open, .. }
            | LoadSpec::Ramp { open, .. }
            | LoadSpec::Trace { open, .. } => Some(open),
            LoadSpec::Sessions { .. } | LoadSpec::Agentic { .. } => None,
        }
    }

    /// A SageMaker capture's trace (`format: sagemaker-capture`), whose requests send their
    /// captured messages and no prompt of the workload's; None for every other load.
    pub fn capture(&self) -> Option<&TraceSpec> {
        match self {
            LoadSpec::Trace { trace, .. } if trace.format == TraceFormat::SagemakerCapture => {
                Some(trace)
            }
            _ => None,
        }
    }

    /// A rate's or a ramp's arrival process (None for the others, which have none).
    pub fn arrivals(&self) -> Option<&Arrivals> {
        match self {
            LoadSpec::Rate { arrivals, .. } | LoadSpec::Ramp { arrivals, .. } => Some(arrivals),
            _ => None,
        }
    }

    /// A rate load's rate (None for the other kinds).
    pub fn rate(&self) -> Option<&Rate> {
        match self {
            LoadSpec::Rate { rate, .. } => Some(rate),
            _ => None,
        }
    }

    /// A ramp load's ramp (None for the other kinds).
    pub fn ramp(&self) -> Option<&RampSpec> {
        match self {
            LoadSpec::Ramp { ramp, .. } => Some(ramp),
            _ => None,
        }
    }

    /// The headers naming a conversation's session (None for loads without sessions).
    pub fn session_headers(&self) -> Option<&SessionHeaders> {
        match self {
            LoadSpec::Sessions { headers, .. } | LoadSpec::Agentic { headers, .. } => Some(headers),
            _ => None,
        }
    }
}

impl JsonSchema for LoadSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "LoadSpec".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        LoadFields::json_schema(generator)
    }
}

/// The fields each kind reads besides its own block; any other is refused.
const KIND_FIELDS: [(&str, &[&str]); 5] = [
    (
        "rate",
        &[
            "arrival",
            "burstiness",
            "seed",
            "max_in_flight",
            "lag_limit",
        ],
    ),
    (
        "ramp",
        &[
            "arrival",
            "burstiness",
            "seed",
            "max_in_flight",
            "lag_limit",
        ],
    ),
    ("trace", &["max_in_flight", "lag_limit"]),
    ("sessions", &["session_headers"]),
    ("agentic", &["session_headers"]),
];

/// The kinds that read `field` (empty for the kind blocks themselves).
fn kinds_reading(field: &str) -> Vec<&'static str> {
    KIND_FIELDS
        .iter()
        .filter(|(_, fields)| fields.contains(&field))
        .map(|(kind, _)| *kind)
        .collect()
}

/// Why a typed load could not be made from its fields: its kind's own block is missing (the raw
/// checks say it first, with its line and column). A field its kind does not read is dropped
/// here, not refused: the raw checks refuse it in a spec, and a run's `meta.json` written
/// before they did must still read.
#[derive(Debug, thiserror::Error)]
#[error("`load.kind: {kind}` needs `load.{field}`")]
pub struct MissingBlock {
    kind: LoadKind,
    field: &'static str,
}

fn shape_error(kind: LoadKind, field: &'static str) -> MissingBlock {
    MissingBlock { kind, field }
}

impl TryFrom<LoadFields> for LoadSpec {
    type Error = MissingBlock;

    fn try_from(f: LoadFields) -> Result<LoadSpec, MissingBlock> {
        let arrivals = Arrivals {
            arrival: f.arrival,
            burstiness: f.burstiness,
            seed: f.seed,
        };
        let open = OpenLoop {
            max_in_flight: f.max_in_flight,
            lag_limit: f.lag_limit,
        };
        let kind = f.kind;
        Ok(match kind {
            LoadKind::Rate => LoadSpec::Rate {
                rate: f.rate.ok_or_else(|| shape_error(kind, "rate"))?,
                arrivals,
                open,
            },
            LoadKind::Ramp => LoadSpec::Ramp {
                ramp: f.ramp.ok_or_else(|| shape_error(kind, "ramp"))?,
                arrivals,
                open,
            },
            LoadKind::Trace => LoadSpec::Trace {
                trace: f.trace.ok_or_else(|| shape_error(kind, "trace"))?,
                open,
            },
            LoadKind::Sessions => LoadSpec::Sessions {
                sessions: f.sessions.ok_or_else(|| shape_error(kind, "sessions"))?,
                headers: f.session_headers,
            },
            LoadKind::Agentic => LoadSpec::Agentic {
                agentic: f.agentic.ok_or_else(|| shape_error(kind, "agentic"))?,
                headers: f.session_headers,
            },
        })
    }
}

/// `field` is set on a load of `kind`, which does not read it.
fn misplaced_message(kind: LoadKind, field: &str) -> String {
    let readers = kinds_reading(field);
    let which = if readers.is_empty() {
        format!("`load.{field}` belongs to `kind: {field}`")
    } else {
        let kinds: Vec<String> = readers.iter().map(|k| format!("`kind: {k}`")).collect();
        format!("`load.{field}` applies to {}", kinds.join(" and "))
    };
    format!("{which}, and this load is `kind: {kind}`: it would be ignored")
}

impl From<LoadSpec> for LoadFields {
    fn from(load: LoadSpec) -> LoadFields {
        let kind = load.kind();
        let mut f = LoadFields {
            kind,
            rate: None,
            arrival: Arrival::default(),
            burstiness: 1.0,
            max_in_flight: None,
            seed: 0,
            ramp: None,
            trace: None,
            sessions: None,
            agentic: None,
            lag_limit: default_lag_limit(),
            session_headers: SessionHeaders::default(),
        };
        if let Some(a) = load.arrivals() {
            (f.arrival, f.burstiness, f.seed) = (a.arrival, a.burstiness, a.seed);
        }
        if let Some(o) = load.open_loop() {
            (f.max_in_flight, f.lag_limit) = (o.max_in_flight, o.lag_limit);
        }
        match load {
            LoadSpec::Rate { rate, .. } => f.rate = Some(rate),
            LoadSpec::Ramp { ramp, .. } => f.ramp = Some(ramp),
            LoadSpec::Trace { trace, .. } => f.trace = Some(trace),
            LoadSpec::Sessions { sessions, headers } => {
                f.sessions = Some(sessions);
                f.session_headers = headers;
            }
            LoadSpec::Agentic { agentic, headers } => {
                f.agentic = Some(agentic);
                f.session_headers = headers;
            }
        }
        f
    }
}

// A load as written: a kind plus the fields of every kind (the schema's form).
/// How requests arrive at the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoadFields {
    /// `rate`: open loop at `rate` requests/s with an `arrival` process. `ramp`: the rate
    /// rises from `ramp.from` to `ramp.to` over `ramp.over` (linearly, or in `ramp.steps`
    /// steps). `trace`: arrival times (and output lengths) replayed from a JSONL file.
    pub kind: LoadKind,
    /// Requests per second (`kind: rate`); `inf` sends every request at once.
    #[serde(default)]
    pub rate: Option<Rate>,
    /// The arrival process: `constant` (evenly spaced), `poisson` (exponential gaps, the
    /// default) or `gamma` (gaps with shape `burstiness`).
    #[serde(default)]
    pub arrival: Arrival,
    /// Gamma shape of the gaps: 1 is Poisson, larger is more regular, smaller is burstier
    /// (vLLM's `--burstiness`). Only with `arrival: gamma`.
    #[serde(default = "one_f64")]
    #[schemars(range(min = 0.01, max = 1000.0))]
    pub burstiness: f64,
    /// At most this many requests in flight: a request due while the cap is reached waits for a
    /// slot, and the wait counts in its latency (measured from its scheduled time).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100000))]
    pub max_in_flight: Option<u32>,
    /// Seed of the arrival schedule: the same seed gives the same schedule.
    #[serde(default)]
    pub seed: u64,
    /// `kind: ramp`: the rates and how long the ramp lasts.
    #[serde(default)]
    pub ramp: Option<RampSpec>,
    /// `kind: trace`: the file of arrivals and its time scale.
    #[serde(default)]
    pub trace: Option<TraceSpec>,
    /// `kind: sessions`: the users, their turns and think time.
    #[serde(default)]
    pub sessions: Option<super::workload::SessionsSpec>,
    /// `kind: agentic`: the session trace replayed and how many of its sessions run at once.
    #[serde(default)]
    pub agentic: Option<AgenticSpec>,
    /// A point whose client sent its requests later than their schedule by more than this (lag
    /// p99) is flagged `client-limited`: its latencies describe the client, not the server.
    /// Default 10ms.
    #[serde(default = "default_lag_limit", with = "humantime_serde")]
    #[schemars(with = "String", regex(pattern = DURATION_PATTERN))]
    pub lag_limit: Duration,
    /// `kind: sessions` and `kind: agentic`: the headers that name each request's session to
    /// a router (session affinity). Left out: AIPerf's set, `X-Correlation-ID`,
    /// `X-SMG-Routing-Key` and `X-Dynamo-Session-ID` with the session's id, and on a
    /// subagent's requests its own id there and its parent's in `X-Dynamo-Parent-Session-ID`.
    /// `off`: none. `{ session: [X-My-Key], parent: [X-My-Parent] }`: these instead.
    #[serde(default, skip_serializing_if = "SessionHeaders::is_default")]
    pub session_headers: SessionHeaders,
}

/// The headers a session's requests carry (`load.session_headers`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SessionHeaders {
    /// `off`: no session headers.
    Off(#[schemars(regex(pattern = r"^off$"))] String),
    /// The headers named.
    Named(SessionHeaderNames),
}

/// Header names: each of `session` carries the request's session id (a subagent's own), each
/// of `parent` a subagent's parent session id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionHeaderNames {
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub session: Vec<String>,
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub parent: Vec<String>,
}

/// AIPerf's session-routing headers (its `session_routing` plugins: the correlation id on
/// every request, `smg_routing_key`, `dynamo_headers`).
const AIPERF_SESSION: [&str; 3] = [
    "X-Correlation-ID",
    "X-SMG-Routing-Key",
    "X-Dynamo-Session-ID",
];
const AIPERF_PARENT: [&str; 1] = ["X-Dynamo-Parent-Session-ID"];

impl Default for SessionHeaders {
    fn default() -> SessionHeaders {
        SessionHeaders::Named(SessionHeaderNames {
            session: AIPERF_SESSION.map(String::from).to_vec(),
            parent: AIPERF_PARENT.map(String::from).to_vec(),
        })
    }
}

impl SessionHeaders {
    /// The default set (left out when a spec is written back).
    pub fn is_default(&self) -> bool {
        *self == SessionHeaders::default()
    }

    /// The names carrying the session's own id and those carrying a parent's (both empty
    /// when `off`).
    pub fn names(&self) -> (&[String], &[String]) {
        match self {
            SessionHeaders::Off(_) => (&[], &[]),
            SessionHeaders::Named(n) => (&n.session, &n.parent),
        }
    }
}

/// Headers servebench sets itself or that carry credentials: a session header may not
/// replace them.
const RESERVED_HEADERS: [&str; 15] = [
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "expect",
    "accept",
    "user-agent",
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-request-id",
];

/// Why `name` cannot be a session header (None: it can): an HTTP token (RFC 9110 `tchar`) of
/// at most 64 bytes, not one servebench sets or one that carries credentials.
pub fn session_header_problem(name: &str) -> Option<String> {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || name.len() > 64 || !name.chars().all(tchar) {
        return Some(format!(
            "`{name}` is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~, 1 to 64 of them)"
        ));
    }
    let lower = name.to_ascii_lowercase();
    RESERVED_HEADERS.contains(&lower.as_str()).then(|| {
        format!("`{name}` is a header servebench sets itself or one that carries credentials")
    })
}

/// The kinds of load.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum LoadKind {
    /// A fixed rate with an arrival process.
    Rate,
    /// A rising rate.
    Ramp,
    /// Arrivals replayed from a file.
    Trace,
    /// Simulated users holding multi-turn conversations (`load.sessions`): each turn is sent
    /// when the user's previous reply has ended and they have thought; a closed loop per user.
    Sessions,
    /// Agent sessions (jobs) replayed from a session trace (`load.agentic`): each session's
    /// turns in order with the trace's think and tool time between them, its subagents beside
    /// it, `live` sessions at once.
    Agentic,
}

/// A request rate: requests per second, or `inf` (all at once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Rate {
    /// Requests per second.
    PerSecond(#[schemars(range(min = 0.0001, max = 10000000.0))] f64),
    /// `inf`: every request is due at the start.
    Unbounded(#[schemars(regex(pattern = r"^inf$"))] String),
}

impl Rate {
    /// Requests per second; infinite for `inf`.
    pub fn per_second(&self) -> f64 {
        match self {
            Rate::PerSecond(r) => *r,
            Rate::Unbounded(_) => f64::INFINITY,
        }
    }
}

/// How arrivals are spaced.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Arrival {
    /// Evenly spaced: one every 1/rate seconds.
    Constant,
    /// Exponential gaps (a Poisson process), mean 1/rate.
    #[default]
    Poisson,
    /// Gamma gaps with shape `burstiness`, mean 1/rate.
    Gamma,
}

/// A rate rising over time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RampSpec {
    /// Requests per second at the start.
    #[schemars(range(min = 0.0, max = 10000000.0))]
    pub from: f64,
    /// Requests per second at the end.
    #[schemars(range(min = 0.0001, max = 10000000.0))]
    pub to: f64,
    /// How long the ramp lasts, e.g. `60s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", regex(pattern = DURATION_PATTERN))]
    pub over: Duration,
    /// In this many equal steps (each at a fixed rate, the first `from`, the last `to`);
    /// absent: a linear rise.
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
    pub steps: Option<u32>,
}

/// A trace of arrivals, one request a line: in `format: mooncake` (the default) JSONL,
/// `{"at": seconds}` or Mooncake's `{"timestamp": milliseconds}`, with an optional
/// `output_tokens` (or `output_length`), `input_tokens` (or `input_length`) and Mooncake's
/// `hash_ids` (prefix blocks); in `format: burstgpt` BurstGPT's CSV.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    /// The trace file, relative to the spec file.
    pub file: PathBuf,
    /// Times in the trace are multiplied by this: 0.5 replays it twice as fast.
    #[serde(default = "one_f64")]
    #[schemars(range(min = 0.000001, max = 1000000.0))]
    pub time_scale: f64,
    /// Tokens each of a line's `hash_ids` stands for (Mooncake's traces: 512). The last
    /// block holds what the line's input length leaves: `input_length - (n - 1) *
    /// block_size`, between 1 and `block_size`.
    #[serde(default = "default_block_size")]
    #[schemars(range(min = 1, max = 1048576))]
    pub block_size: u32,
    /// `auto` (the default): a line's prompt is made of its `hash_ids` blocks where it has
    /// them, else generated at its input length. `required`: every line must have them.
    /// `ignore`: prompts are generated at each line's input length, sharing nothing.
    #[serde(default)]
    pub hash_ids: HashIds,
    /// How the file is written: `mooncake` (the default; JSONL, as Mooncake publishes its
    /// traces and AIPerf's `mooncake_trace` and SGLang's `mooncake` read them), `burstgpt`
    /// (BurstGPT's CSV: `Timestamp` in seconds, `Request tokens`, `Response tokens`) or
    /// `bailian` (Alibaba's Qwen Bailian traces: `timestamp` in seconds, 16-token blocks) or
    /// `sagemaker-capture` (SageMaker Data Capture files: each captured chat request replayed
    /// at its time with its literal messages; `file` may be a folder of `.jsonl` files).
    #[serde(default, skip_serializing_if = "TraceFormat::is_default")]
    pub format: TraceFormat,
}

/// The file format of a `load.trace`.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum TraceFormat {
    /// JSONL, one object a line: `timestamp` (milliseconds) or `at` (seconds),
    /// `input_length`, `output_length`, `hash_ids` (ids of `block_size`-token blocks).
    #[default]
    Mooncake,
    /// CSV with a header naming `Timestamp` (seconds), `Request tokens` and `Response
    /// tokens` (BurstGPT's `Model`, `Total tokens` and `Log Type` are ignored). It records no
    /// blocks: prompts are generated at each row's length, sharing nothing.
    Burstgpt,
    /// Alibaba's Bailian (Qwen) traces, JSONL: `timestamp` in seconds, `input_length`,
    /// `output_length`, `hash_ids` of 16-token blocks, and the chat's `chat_id`,
    /// `parent_chat_id`, `turn` and `type` (checked, not replayed: each line goes at its time).
    Bailian,
    /// Amazon SageMaker Data Capture files (JSONL, as AIPerf 0.13's `sagemaker_data_capture`
    /// reads them; `file` a file or a folder of `.jsonl` files): each record one request sent
    /// at its `eventMetadata.inferenceTime` with the captured request's literal `messages`,
    /// `tools` and `max_tokens` (or `max_completion_tokens`); `workload.api: openai-chat` only.
    SagemakerCapture,
}

/// Tokens a Bailian trace's block id stands for (its README: 16-token SipHash blocks).
pub const BAILIAN_BLOCK_SIZE: u32 = 16;

impl TraceFormat {
    fn is_default(&self) -> bool {
        *self == TraceFormat::Mooncake
    }
}

/// How a trace's `hash_ids` are used.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum HashIds {
    /// Used where a line has them.
    #[default]
    Auto,
    /// Every line must have them (a line without is refused at `validate`).
    Required,
    /// Not used: prompts generated at each line's input length.
    Ignore,
}

fn default_block_size() -> u32 {
    512
}

/// Agent sessions replayed from a session trace: JSONL, one session (job) a line, in the
/// kv-cache-tester format SemiAnalysis's AgentX traces and AIPerf's `weka` loader use
/// (`{"id", "block_size", "requests": [{"t", "type": "n"|"s", "in", "out", "hash_ids",
/// "think_time"}, {"type": "subagent", "agent_id", "requests": [...]}]}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgenticSpec {
    /// The session trace, relative to the spec file.
    pub file: PathBuf,
    /// Sessions live at once: when one ends the next starts (the capacity search's
    /// `search.over: load.agentic.live`).
    #[schemars(range(min = 1, max = 100000))]
    pub live: u32,
    /// Sessions run in all (default: each of the trace's once). More than the trace holds
    /// replays it again, each replay's blocks salted apart.
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000000))]
    pub sessions: Option<u32>,
    /// Think and tool time between turns is multiplied by this: 0 sends each turn as soon as
    /// the one before it ended.
    #[serde(default = "one_f64")]
    #[schemars(range(min = 0.0, max = 1000.0))]
    pub think_scale: f64,
    /// Tokens a block id stands for, over the trace's own `block_size` (default: the trace's,
    /// else 512; for `format: tracelab`, the size its blocks are made at: 64, AIPerf's).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1048576))]
    pub block_size: Option<u32>,
    /// How the file is written: `kv-cache-tester` (the default; SemiAnalysis's AgentX
    /// sessions, AIPerf's `weka` trace) or `tracelab` (TraceLab's agentic-coding corpus, one
    /// LLM round a line, read as AIPerf 0.13's `tracelab` loader reads it: rounds grouped by
    /// `session_id`, blocks made from `prefix_tokens`, subagents linked by timing).
    #[serde(default, skip_serializing_if = "AgenticFormat::is_default")]
    pub format: AgenticFormat,
    /// A named set of replay rules another tool locks, applied to the point and judged after
    /// it: `agentx` is AIPerf 0.13's `inferencex-agentx-mvp` scenario (InferenceX's agentic
    /// benchmark; the guide's "AgentX-comparable runs"). A spec that contradicts a rule is
    /// refused at `validate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<AgenticPreset>,
    /// Runs a preset's point although the spec breaks its rules (a short smoke run), as
    /// AIPerf's `--unsafe-override`: the point's verdict then never says it conforms.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preset_override: bool,
}

/// The file format of a `load.agentic` trace.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum AgenticFormat {
    /// One session a line (or a folder of one session a file): `{"id", "block_size",
    /// "requests": [{"t", "in", "out", "hash_ids", ...}, {"type": "subagent", ...}]}`.
    #[default]
    KvCacheTester,
    /// TraceLab (uw-syfi/TraceLab) JSONL, one LLM round a line: `session_id`, `round_index`,
    /// `input_tokens_total`, `prefix_tokens`, `output_tokens`, `timing_events`, `tools`.
    Tracelab,
}

impl AgenticFormat {
    fn is_default(&self) -> bool {
        *self == AgenticFormat::KvCacheTester
    }
}

/// A named set of replay rules (`load.agentic.preset`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum AgenticPreset {
    /// AIPerf 0.13's `inferencex-agentx-mvp` scenario: a duration of at least 900 s (1800 s
    /// when unset) over sessions replayed again and again, streaming, `ignore_eos`, the
    /// trace's think and tool time as recorded, a fresh prompt text per session replay, no
    /// turn skipped, at most 1% of responses refused for context.
    Agentx,
}

/// When a load point's measured phase ends: the first limit reached.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopSpec {
    /// Measured requests (after warm-up).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000000))]
    pub requests: Option<u32>,
    /// Measured time (after warm-up), e.g. `60s`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>", regex(pattern = DURATION_PATTERN))]
    pub duration: Option<Duration>,
    /// Stop sending once more measured requests failed than this: a count (`10`) or a share of
    /// those finished (`10%`). The point is then flagged `stopped-on-errors`.
    #[serde(default)]
    pub errors: Option<ErrorBudget>,
}

/// A warm-up or cool-down phase: requests sent and recorded (with their phase) but not counted.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    /// This many requests.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10000000))]
    pub requests: Option<u32>,
    /// Requests due within this long, e.g. `10s`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>", regex(pattern = DURATION_PATTERN))]
    pub duration: Option<Duration>,
}

/// Service-level objectives, declared once. A request is *good* when it meets every
/// per-request threshold given; a point *meets its SLO* when every target holds.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SloSpec {
    /// Largest time to first token (counted from the request's scheduled time under `load`).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>", regex(pattern = DURATION_PATTERN))]
    pub ttft: Option<Duration>,
    /// Largest time to the first answer token, after any thinking (counted from the
    /// request's scheduled time under `load`); a request that never answered misses it. For a
    /// request that did not think it is its TTFT.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>", regex(pattern = DURATION_PATTERN))]
    pub ttfa: Option<Duration>,
    /// Largest time per output token after the first.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>", regex(pattern = DURATION_PATTERN))]
    pub tpot: Option<Duration>,
    /// Largest end-to-end time (counted from the scheduled time under `load`).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>", regex(pattern = DURATION_PATTERN))]
    pub e2e: Option<Duration>,
    /// Point-level targets: `attainment: 99%` (share of good requests), and percentile bounds
    /// named `<metric>_p<percentile>` (`ttft_p99: 1s`, `tpot_p50: 20ms`, `e2e_p99.9: 30s`) over
    /// `ttft`, `ttfa` (first answer token), `tpot`, `e2e` and `itl`.
    #[serde(default)]
    pub targets: IndexMap<String, String>,
    /// Per-agent targets (`load: { kind: agentic }`): each session judged on its own turns,
    /// and the point on the share of its sessions that meet them (as AgentPerf judges each
    /// agent against a TTFT and an output speed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSlo>,
}

/// `slo: { agent: { ttft: 2s, percentile: 90, output_tok_s: 20, share: 100% } }`: an agent
/// (session) meets its SLO when the `percentile` of its successful turns' TTFT (or first answer)
/// is within the bound and its output speed over the session is at least `output_tok_s`, with
/// no turn failed; a point meets it when at least `share` of its sessions that sent a turn do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentSlo {
    /// Largest time to first token at `percentile` of the agent's turns (counted from each
    /// turn's due time).
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>", regex(pattern = DURATION_PATTERN))]
    pub ttft: Option<Duration>,
    /// Largest time to the first answer token (after any thinking) at `percentile` of the
    /// agent's turns; a turn that never answered counts beyond any bound.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>", regex(pattern = DURATION_PATTERN))]
    pub ttfa: Option<Duration>,
    /// The percentile of the agent's turns the `ttft` / `ttfa` bound holds at (default 90;
    /// 100 is the agent's slowest turn).
    #[serde(default = "default_agent_percentile")]
    #[schemars(range(min = 1.0, max = 100.0))]
    pub percentile: f64,
    /// Least output speed over the session, tokens/s: its successful turns' output tokens
    /// (the server's count) over their summed generation time (first token to end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1000000.0))]
    pub output_tok_s: Option<f64>,
    /// The share of the point's agents that must meet it: `100%` (the default) or e.g. `95%`.
    #[serde(default = "default_agent_share")]
    #[schemars(regex(pattern = r"^\s*[0-9.]+\s*%\s*$"))]
    pub share: String,
}

fn default_agent_percentile() -> f64 {
    90.0
}

fn default_agent_share() -> String {
    "100%".into()
}

impl AgentSlo {
    /// `share` as a fraction (1.0 for `100%`); NaN when it does not parse (validation says).
    pub fn share_fraction(&self) -> f64 {
        parse_percent(&self.share).map_or(f64::NAN, |p| p / 100.0)
    }

    /// The latency bound, as `(metric, seconds)`: `ttfa` when given, else `ttft`.
    pub fn latency(&self) -> Option<(&'static str, f64)> {
        match (self.ttfa, self.ttft) {
            (Some(d), _) => Some(("ttfa", d.as_secs_f64())),
            (None, Some(d)) => Some(("ttft", d.as_secs_f64())),
            (None, None) => None,
        }
    }
}

/// A point-level SLO target, parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SloTarget {
    /// The share of good requests must be at least this (0-1).
    Attainment(f64),
    /// The metric's percentile must be at most `limit_s` seconds.
    Percentile {
        metric: SloMetric,
        percentile: f64,
        limit_s: f64,
    },
}

/// The per-request latencies SLO targets name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum SloMetric {
    Ttft,
    Ttfa,
    Tpot,
    E2e,
    Itl,
}

impl SloSpec {
    /// True when a per-request threshold is set (goodput is then defined).
    pub fn has_thresholds(&self) -> bool {
        self.ttft.is_some() || self.ttfa.is_some() || self.tpot.is_some() || self.e2e.is_some()
    }

    /// The targets, parsed; an entry that does not parse is left out (validation reports it).
    pub fn parsed_targets(&self) -> Vec<(String, SloTarget)> {
        self.targets
            .iter()
            .filter_map(|(k, v)| parse_target(k, v).ok().map(|t| (k.clone(), t)))
            .collect()
    }
}

/// Why an SLO target (`slo.targets`) does not parse; each message says what to write.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum SloTargetError {
    #[error("`attainment` takes a percentage like `99%`, found `{value}`")]
    Attainment { value: String },
    #[error(
        "`{key}` is not a target: write `attainment` or `<metric>_p<percentile>` like `ttft_p99`"
    )]
    NotATarget { key: String },
    #[error("`{name}` in `{key}` is not one of ttft, ttfa, tpot, e2e, itl")]
    Metric { name: String, key: String },
    #[error("`p{pct}` in `{key}` is not a percentile between 0 and 100")]
    Percentile { pct: String, key: String },
    #[error("`{key}` takes a duration like `500ms`, found `{value}`")]
    Duration { key: String, value: String },
}

/// Parses one target: `attainment: 99%` or `<metric>_p<pct>: <duration>`.
pub(crate) fn parse_target(key: &str, value: &str) -> Result<SloTarget, SloTargetError> {
    if key == "attainment" {
        let pct = parse_percent(value).ok_or_else(|| SloTargetError::Attainment {
            value: value.to_string(),
        })?;
        return Ok(SloTarget::Attainment(pct / 100.0));
    }
    let (name, pct) = key
        .rsplit_once("_p")
        .ok_or_else(|| SloTargetError::NotATarget {
            key: key.to_string(),
        })?;
    let metric = match name {
        "ttft" => SloMetric::Ttft,
        "ttfa" => SloMetric::Ttfa,
        "tpot" => SloMetric::Tpot,
        "e2e" => SloMetric::E2e,
        "itl" => SloMetric::Itl,
        _ => {
            return Err(SloTargetError::Metric {
                name: name.to_string(),
                key: key.to_string(),
            });
        }
    };
    let percentile: f64 = pct
        .parse()
        .ok()
        .filter(|p: &f64| *p > 0.0 && *p < 100.0)
        .ok_or_else(|| SloTargetError::Percentile {
            pct: pct.to_string(),
            key: key.to_string(),
        })?;
    let limit = humantime::parse_duration(value.trim()).map_err(|_| SloTargetError::Duration {
        key: key.to_string(),
        value: value.to_string(),
    })?;
    Ok(SloTarget::Percentile {
        metric,
        percentile,
        limit_s: limit.as_secs_f64(),
    })
}

/// `99%` -> 99.0.
pub(crate) fn parse_percent(s: &str) -> Option<f64> {
    s.trim()
        .strip_suffix('%')?
        .trim()
        .parse()
        .ok()
        .filter(|p: &f64| (0.0..=100.0).contains(p))
}

/// The percentiles reports and `points.jsonl` carry besides p50, p90 and p99 (which are always
/// there), e.g. `[50, 90, 95, 99, 99.9]`.
pub(crate) fn default_percentiles() -> Vec<f64> {
    vec![50.0, 90.0, 99.0]
}

/// True for the default set (left out when a spec is written back).
pub(crate) fn is_default_percentiles(p: &[f64]) -> bool {
    p == default_percentiles().as_slice()
}

fn one_f64() -> f64 {
    1.0
}
fn default_lag_limit() -> Duration {
    Duration::from_millis(10)
}

/// Checks the schema cannot express, on one point's raw value: each load kind has its
/// parameters, an open loop has a stop, SLO targets parse.
pub(crate) fn checks(raw: &Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(load) = raw.get("load").and_then(Value::as_object) {
        let kind = load.get("kind").and_then(Value::as_str);
        load_shape_checks(raw, load, kind, &mut problems);
        load_stop_checks(raw, kind, &mut problems);
    } else {
        closed_loop_checks(raw, &mut problems);
    }
    slo_target_checks(raw, &mut problems);
    percentile_checks(raw, &mut problems);
    session_header_checks(raw, &mut problems);
    problems
}

/// `load.session_headers`: on a sessions or agentic load only, each name a header servebench
/// may send, none twice.
fn session_header_checks(raw: &Value, problems: &mut Vec<Problem>) {
    let Some(load) = raw.get("load") else { return };
    let Some(headers) = load.get("session_headers").filter(|v| !v.is_null()) else {
        return;
    };
    let kind = load.get("kind").and_then(Value::as_str);
    if !matches!(kind, Some("sessions" | "agentic")) {
        problems.push(problem(
            "/load/session_headers",
            Target::Key,
            format!(
                "`load.session_headers` applies to `kind: sessions` and `kind: agentic`, and this load is `{}`",
                kind.unwrap_or("")
            ),
            "remove it: only a conversation's requests carry a session id",
        ));
        return;
    }
    if let Some(text) = headers.as_str().filter(|t| *t != "off") {
        problems.push(problem(
            "/load/session_headers",
            Target::Value,
            format!("`load.session_headers: {text}` is neither `off` nor a set of header names"),
            "write `off`, or `{ session: [X-Session-ID], parent: [X-Parent-Session-ID] }`; leave it out for AIPerf's set",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for field in ["session", "parent"] {
        let Some(names) = headers.get(field).and_then(Value::as_array) else {
            continue;
        };
        for (i, name) in names.iter().enumerate() {
            let Some(name) = name.as_str() else { continue };
            let pointer = format!("/load/session_headers/{field}/{i}");
            if let Some(why) = session_header_problem(name) {
                problems.push(problem(
                    &pointer,
                    Target::Value,
                    why,
                    "name another header, e.g. `X-Session-ID`",
                ));
            } else if !seen.insert(name.to_ascii_lowercase()) {
                problems.push(problem(
                    &pointer,
                    Target::Value,
                    format!("`{name}` is named twice in `load.session_headers`"),
                    "name each header once",
                ));
            }
        }
    }
}

/// One problem; an empty `hint` is none.
fn problem(pointer: &str, target: Target, message: String, hint: &str) -> Problem {
    Problem {
        pointer: pointer.into(),
        target,
        message,
        hint: (!hint.is_empty()).then(|| hint.to_string()),
    }
}

/// A `format: sagemaker-capture` trace: its literal chat messages go only to the chat API, as
/// captured (no warm prime of generated text, no tools of the spec's beside the capture's,
/// no blocks).
fn capture_checks(
    raw: &Value,
    trace: &serde_json::Map<String, Value>,
    problems: &mut Vec<Problem>,
) {
    let api = raw.pointer("/workload/api").and_then(Value::as_str);
    if api != Some("openai-chat") {
        let (pointer, target) = match api {
            Some(_) => ("/workload/api", Target::Value),
            None => ("/workload", Target::Parent),
        };
        problems.push(problem(
            pointer,
            target,
            format!(
                "a SageMaker capture replays captured chat messages, which only `openai-chat` sends (not `{}`)",
                api.unwrap_or("sglang-generate")
            ),
            "set `workload.api: openai-chat`",
        ));
    }
    if raw.pointer("/cache/policy").and_then(Value::as_str) == Some("warm") {
        problems.push(problem(
            "/cache/policy",
            Target::Value,
            "`cache.policy: warm` primes generated prompts; a capture's literal messages are sent once, as recorded".into(),
            "set `cache.policy: cold` (the cache emptied, then the capture's own sharing) or `as-is`",
        ));
    }
    if raw.pointer("/workload/tools").is_some_and(|v| !v.is_null()) {
        problems.push(problem(
            "/workload/tools",
            Target::Value,
            "a SageMaker capture sends each request's captured `tools`; the spec's would replace them".into(),
            "remove `workload.tools`",
        ));
    }
    for field in ["hash_ids", "block_size"] {
        if trace.get(field).is_some_and(|v| !v.is_null()) {
            problems.push(problem(
                &format!("/load/trace/{field}"),
                Target::Value,
                format!("a SageMaker capture has literal prompts, no blocks: `{field}` means nothing to it"),
                "remove it",
            ));
        }
    }
}

/// An open-loop point's load: its kind's parameters are there, a ramp sends something, and
/// it is neither repeated nor measured two-point.
fn load_shape_checks(
    raw: &Value,
    load: &serde_json::Map<String, Value>,
    kind: Option<&str>,
    problems: &mut Vec<Problem>,
) {
    let needs = match kind {
        Some("rate") => Some(("rate", "add `rate: 8` (requests/s) or `rate: inf`")),
        Some("ramp") => Some(("ramp", "add `ramp: { from: 1, to: 32, over: 60s }`")),
        Some("trace") => Some(("trace", "add `trace: { file: trace.jsonl }`")),
        Some("sessions") => Some((
            "sessions",
            "add `sessions: { users: 16, turns: 4, think: 2s }`",
        )),
        Some("agentic") => Some((
            "agentic",
            "add `agentic: { file: sessions.jsonl, live: 8 }`",
        )),
        _ => None,
    };
    // Bailian's blocks are 16 tokens: another size would replay other prompts.
    if let Some(trace) = load.get("trace").and_then(Value::as_object)
        && trace.get("format").and_then(Value::as_str) == Some("bailian")
        && let Some(bs) = trace.get("block_size").filter(|v| !v.is_null())
        && bs.as_u64() != Some(u64::from(BAILIAN_BLOCK_SIZE))
    {
        problems.push(problem(
            "/load/trace/block_size",
            Target::Value,
            format!(
                "a Bailian trace's blocks are {BAILIAN_BLOCK_SIZE} tokens (its README), not {bs}"
            ),
            "remove `block_size`: `format: bailian` reads 16-token blocks",
        ));
    }
    if let Some(trace) = load.get("trace").and_then(Value::as_object)
        && trace.get("format").and_then(Value::as_str) == Some("sagemaker-capture")
    {
        capture_checks(raw, trace, problems);
    }
    if let Some((field, hint)) = needs
        && load.get(field).is_none_or(Value::is_null)
    {
        problems.push(problem(
            "/load",
            Target::Parent,
            format!("`load.kind: {}` needs `load.{field}`", kind.unwrap_or("")),
            hint,
        ));
    }
    if let Some(kind) = kind {
        misplaced_field_checks(raw, load, kind, problems);
    }
    if let Some(ramp) = load.get("ramp").and_then(Value::as_object)
        && let (Some(from), Some(to)) = (
            ramp.get("from").and_then(Value::as_f64),
            ramp.get("to").and_then(Value::as_f64),
        )
        && from <= 0.0
        && to <= 0.0
    {
        problems.push(problem(
            "/load/ramp/to",
            Target::Value,
            "a ramp from 0 to 0 sends nothing".into(),
            "",
        ));
    }
    if raw
        .get("repeat")
        .and_then(Value::as_u64)
        .is_some_and(|r| r > 1)
    {
        problems.push(problem(
            "/repeat",
            Target::Value,
            "a `load:` point runs its schedule once: `repeat` must be 1".into(),
            "lengthen `stop` for more requests, or sweep `load.seed` for independent schedules",
        ));
    }
    if raw.get("method").is_some_and(|m| {
        m.as_str() == Some("two-point")
            || m.get("kind").and_then(Value::as_str) == Some("two-point")
    }) {
        problems.push(problem(
            "/method",
            Target::Value,
            "the two-point method sends pairs one at a time: it has no open-loop form".into(),
            "use `method: streaming` (the default) with `load:`",
        ));
    }
}

/// A field of `load` (or a sweep of `load.FIELD`) that its kind does not read: refused, as
/// it would be ignored. `session_headers` has its own check.
fn misplaced_field_checks(
    raw: &Value,
    load: &serde_json::Map<String, Value>,
    kind: &str,
    problems: &mut Vec<Problem>,
) {
    let Ok(typed) = serde_json::from_value::<LoadKind>(Value::String(kind.into())) else {
        return;
    };
    // A sweep of `load.kind` runs each kind swept: a field belongs when one of them reads it.
    let swept_kinds = raw
        .get("sweep")
        .and_then(|s| s.get("load.kind"))
        .and_then(Value::as_array);
    let kinds: Vec<&str> = std::iter::once(kind)
        .chain(swept_kinds.into_iter().flatten().filter_map(Value::as_str))
        .collect();
    let belongs = |field: &str| {
        field == "kind"
            || kinds.iter().any(|k| {
                *k == field
                    || KIND_FIELDS
                        .iter()
                        .any(|(kk, reads)| kk == k && reads.contains(&field))
            })
    };
    for field in load.keys() {
        if !belongs(field) && field != "session_headers" && load[field] != Value::Null {
            problems.push(problem(
                &format!("/load/{field}"),
                Target::Key,
                misplaced_message(typed, field),
                "remove it, or change `load.kind`",
            ));
        }
    }
    let swept = raw.get("sweep").and_then(Value::as_object);
    for key in swept.into_iter().flat_map(|m| m.keys()) {
        let Some(field) = key
            .strip_prefix("load.")
            .map(|f| f.split('.').next().unwrap_or(f))
        else {
            continue;
        };
        if !belongs(field) && field != "session_headers" {
            problems.push(problem(
                &format!("/sweep/{}", key.replace('~', "~0").replace('/', "~1")),
                Target::Key,
                misplaced_message(typed, field),
                "sweep a field of this load's kind, or change `load.kind`",
            ));
        }
    }
}

/// What ends an open-loop point: a rate needs a stop; sessions and agentic points refuse the
/// phase and stop fields their drivers would ignore.
fn load_stop_checks(raw: &Value, kind: Option<&str>, problems: &mut Vec<Problem>) {
    let stop = raw.get("stop").and_then(Value::as_object);
    let bounded = stop.is_some_and(|s| {
        s.get("requests").is_some_and(|v| !v.is_null())
            || s.get("duration").is_some_and(|v| !v.is_null())
    });
    // Sessions end when every user has sent every turn; their driver has no phases and no
    // stop rule, so these would be silently ignored.
    if kind == Some("agentic") {
        if stop.is_some_and(|s| s.get("requests").is_some_and(|v| !v.is_null())) {
            problems.push(problem(
                "/stop/requests",
                Target::Key,
                "`stop.requests` does not apply to `load.kind: agentic`".into(),
                "remove it: an agentic point runs `load.agentic.sessions` sessions (each of the trace's by default); `stop.duration` ends it early, `stop.errors` on failed turns",
            ));
        }
        for field in ["warmup", "cooldown"] {
            if raw.get(field).is_some_and(|v| !v.is_null()) {
                problems.push(problem(
                    &format!("/{field}"),
                    Target::Key,
                    format!("`{field}` does not apply to `load.kind: agentic`"),
                    "remove it: every turn of every session is measured; `stop.duration` ends the point early",
                ));
            }
        }
    }
    if kind == Some("sessions") {
        only_stop_errors(
            raw,
            "`load.kind: sessions`",
            "a sessions point ends when each of `sessions.users` has sent `sessions.turns` turns (or every conversation of `sessions.file` is sent), and every turn is measured; only `stop.errors` applies",
            problems,
        );
        if let Some(Value::Object(s)) = raw.get("load").and_then(|l| l.get("sessions")) {
            sessions_checks(s, problems);
        }
    }
    // A ramp ends with its duration, a trace with its last line.
    if kind == Some("rate") && !bounded {
        problems.push(problem(
            "/load",
            Target::Key,
            "an open-loop rate needs a `stop:` with `requests` or `duration`".into(),
            "add `stop: { requests: 500 }` or `stop: { duration: 60s }`",
        ));
    }
}

/// A closed-loop point (no `load:`) has no phases, and of `stop:` only `errors` (its
/// `requests` say how many it sends).
fn closed_loop_checks(raw: &Value, problems: &mut Vec<Problem>) {
    only_stop_errors(
        raw,
        "a closed-loop point (no `load:`)",
        "a closed loop sends `requests` requests, every one measured; only `stop.errors` applies (add a `load:` block for phases, a duration or a request count)",
        problems,
    );
}

/// Refuses phases and every `stop` field but `errors` (judged for every sender as its
/// measured requests are written) on points of `what`.
/// Generated conversations give their `turns`; a file's conversations bring their turns and
/// their pauses, so `turns`, `think` and `think_dist` would be ignored beside it.
fn sessions_checks(s: &serde_json::Map<String, Value>, problems: &mut Vec<Problem>) {
    let set = |f: &str| s.get(f).is_some_and(|v| !v.is_null());
    if !set("file") {
        for field in ["format", "max_turns"] {
            if set(field) {
                problems.push(problem(
                    &format!("/load/sessions/{field}"),
                    Target::Key,
                    format!("`sessions.{field}` reads `sessions.file`, and there is no file"),
                    &format!(
                        "add `file: trace.json`, or remove `{field}` for generated conversations"
                    ),
                ));
            }
        }
        if !set("turns") {
            problems.push(problem(
                "/load/sessions",
                Target::Key,
                "`load.sessions` needs `turns` (generated conversations) or `file` (conversations from a file)".into(),
                "add `turns: 4`, or `file: conversations.jsonl` (AIPerf's multi_turn)",
            ));
        }
        return;
    }
    let agentic_trace = s.get("format").and_then(Value::as_str) == Some("sglang-agentic-trace");
    if set("max_turns") && !agentic_trace {
        problems.push(problem(
            "/load/sessions/max_turns",
            Target::Key,
            "`sessions.max_turns` cuts an SGLang agentic-trace's conversations (its `--agentic-max-turns`), and this file is AIPerf's multi_turn".into(),
            "remove it, or add `format: sglang-agentic-trace` if the file is SGLang's",
        ));
    }
    for field in ["turns", "think", "think_dist"] {
        if set(field) {
            problems.push(problem(
                &format!("/load/sessions/{field}"),
                Target::Key,
                format!("`sessions.{field}` does not apply with `sessions.file`"),
                "remove it: the file's conversations have their own turns and pauses (an AIPerf turn's `delay`; none between an SGLang agentic-trace's rounds)",
            ));
        }
    }
}

fn only_stop_errors(raw: &Value, what: &str, why: &str, problems: &mut Vec<Problem>) {
    for field in ["warmup", "cooldown"] {
        if raw.get(field).is_some_and(|v| !v.is_null()) {
            problems.push(problem(
                &format!("/{field}"),
                Target::Key,
                format!("`{field}` does not apply to {what}"),
                &format!("remove it: {why}"),
            ));
        }
    }
    match raw.get("stop") {
        None | Some(Value::Null) => {}
        Some(Value::Object(stop)) => {
            for (field, v) in stop {
                if field != "errors" && !v.is_null() {
                    problems.push(problem(
                        &format!("/stop/{field}"),
                        Target::Key,
                        format!("`stop.{field}` does not apply to {what}"),
                        &format!("remove it: {why}"),
                    ));
                }
            }
        }
        // Its type is the schema's to refuse.
        Some(_) => {}
    }
}

/// `slo.agent` names what it judges (one latency at most, or a speed), a share that parses,
/// and an agentic load whose sessions it judges.
fn agent_slo_checks(raw: &Value, problems: &mut Vec<Problem>) {
    let Some(agent) = raw
        .get("slo")
        .and_then(|s| s.get("agent"))
        .and_then(Value::as_object)
    else {
        return;
    };
    let has = |k: &str| agent.get(k).is_some_and(|v| !v.is_null());
    let mut say = |key: &str, target: Target, message: &str, hint: &str| {
        problems.push(problem(
            &format!("/slo/agent{key}"),
            target,
            message.into(),
            hint,
        ));
    };
    if has("ttft") && has("ttfa") {
        say(
            "/ttfa",
            Target::Key,
            "`slo.agent` takes `ttft` or `ttfa`, not both",
            "keep the one the agent waits on: `ttfa` for a thinking model",
        );
    }
    if !has("ttft") && !has("ttfa") && !has("output_tok_s") {
        say(
            "",
            Target::Key,
            "`slo.agent` judges nothing: it needs `ttft`, `ttfa` or `output_tok_s`",
            "e.g. `agent: { ttft: 2s, output_tok_s: 20 }`",
        );
    }
    if let Some(text) = agent.get("share").and_then(Value::as_str)
        && !text.contains("{{")
        && !parse_percent(text).is_some_and(|p| p > 0.0)
    {
        say(
            "/share",
            Target::Value,
            &format!("`share` takes a percentage above 0 like `95%`, found `{text}`"),
            "e.g. `share: 100%` (every agent) or `share: 95%`",
        );
    }
    let agentic = raw
        .get("load")
        .and_then(|l| l.get("kind"))
        .and_then(Value::as_str)
        == Some("agentic");
    if !agentic {
        say(
            "",
            Target::Key,
            "`slo.agent` judges agent sessions, and this point has no `load: { kind: agentic }`",
            "replay agent sessions (`load: { kind: agentic, ... }`), or use `slo.targets`",
        );
    }
}

/// Each literal SLO target parses (templated ones are checked once rendered).
fn slo_target_checks(raw: &Value, problems: &mut Vec<Problem>) {
    agent_slo_checks(raw, problems);
    if let Some(targets) = raw
        .get("slo")
        .and_then(|s| s.get("targets"))
        .and_then(Value::as_object)
    {
        for (k, v) in targets {
            let Some(text) = v.as_str() else { continue };
            if text.contains("{{") {
                continue;
            }
            if let Err(e) = parse_target(k, text) {
                problems.push(problem(
                    &format!("/slo/targets/{k}"),
                    Target::Value,
                    e.to_string(),
                    "e.g. `targets: { ttft_p99: 1s, attainment: 99% }`",
                ));
            }
        }
    }
}

/// Each percentile lies strictly between 0 and 100.
fn percentile_checks(raw: &Value, problems: &mut Vec<Problem>) {
    if let Some(list) = raw.get("percentiles").and_then(Value::as_array) {
        for (i, p) in list.iter().enumerate() {
            if p.as_f64().is_some_and(|p| !(p > 0.0 && p < 100.0)) {
                problems.push(problem(
                    &format!("/percentiles/{i}"),
                    Target::Value,
                    format!("a percentile is between 0 and 100, found {p}"),
                    "e.g. `percentiles: [50, 90, 99, 99.9]`",
                ));
            }
        }
    }
}

#[cfg(test)]
mod session_header_tests {
    use super::*;
    use serde_json::json;

    fn messages(load: Value) -> Vec<String> {
        checks(&json!({ "load": load }))
            .into_iter()
            .map(|p| format!("{} {}", p.pointer, p.message))
            .collect()
    }

    #[test]
    fn session_headers_default_to_aiperfs_set_and_are_checked() {
        let d = SessionHeaders::default();
        let (session, parent) = d.names();
        assert_eq!(
            session,
            [
                "X-Correlation-ID",
                "X-SMG-Routing-Key",
                "X-Dynamo-Session-ID"
            ]
        );
        assert_eq!(parent, ["X-Dynamo-Parent-Session-ID"]);
        let off: SessionHeaders = serde_json::from_value(json!("off")).unwrap();
        assert_eq!(off.names(), (&[][..], &[][..]));
        let agentic = |h: Value| json!({"kind": "agentic", "agentic": {"file": "s.jsonl", "live": 1}, "session_headers": h});
        assert!(messages(agentic(json!("off"))).is_empty());
        assert!(messages(agentic(json!({"session": ["X-Key"], "parent": ["X-Up"]}))).is_empty());
        let bad = messages(agentic(
            json!({"session": ["Authorization", "bad name", "X-K", "x-k"]}),
        ));
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(
            bad[0].starts_with("/load/session_headers/session/0 ")
                && bad[0].contains("credentials")
        );
        assert!(bad[1].contains("not an HTTP header name"), "{bad:?}");
        assert!(bad[2].contains("named twice"), "{bad:?}");
        assert_eq!(messages(agentic(json!("on"))).len(), 1);
        let rate = messages(json!({"kind": "rate", "rate": 1, "session_headers": "off"}));
        assert!(
            rate.iter()
                .any(|m| m.contains("applies to `kind: sessions`")),
            "{rate:?}"
        );
    }

    #[test]
    fn the_agent_slo_judges_something_of_an_agentic_load_at_a_share_that_parses() {
        let agentic = json!({"kind": "agentic", "agentic": {"file": "s.jsonl", "live": 1}});
        let with = |load: &Value, agent: Value| {
            checks(&json!({ "load": load, "slo": { "agent": agent } }))
                .into_iter()
                .map(|p| format!("{} {}", p.pointer, p.message))
                .collect::<Vec<_>>()
        };
        assert!(with(&agentic, json!({"ttft": "2s", "output_tok_s": 20})).is_empty());
        let both = with(&agentic, json!({"ttft": "2s", "ttfa": "3s"}));
        assert_eq!(
            both,
            ["/slo/agent/ttfa `slo.agent` takes `ttft` or `ttfa`, not both"]
        );
        let nothing = with(&agentic, json!({"share": "95%"}));
        assert!(nothing[0].contains("judges nothing"), "{nothing:?}");
        let share = with(&agentic, json!({"ttft": "2s", "share": "0%"}));
        assert!(share[0].starts_with("/slo/agent/share "), "{share:?}");
        let rate = with(&json!({"kind": "rate", "rate": 1}), json!({"ttft": "2s"}));
        assert!(
            rate.iter()
                .any(|m| m.contains("no `load: { kind: agentic }`")),
            "{rate:?}"
        );
        let parsed: AgentSlo = serde_json::from_value(json!({"ttfa": "2s"})).unwrap();
        assert_eq!(
            (parsed.latency(), parsed.percentile, parsed.share_fraction()),
            (Some(("ttfa", 2.0)), 90.0, 1.0)
        );
    }
}

#[cfg(test)]
mod shape_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_kind_is_its_own_variant_with_only_its_fields_and_writes_back_the_same() {
        let rate: LoadSpec =
            serde_json::from_value(json!({"kind": "rate", "rate": 4, "arrival": "gamma", "burstiness": 2.0, "seed": 7, "max_in_flight": 3}))
                .unwrap();
        let LoadSpec::Rate {
            rate: r,
            arrivals,
            open,
        } = &rate
        else {
            panic!("{rate:?}")
        };
        assert_eq!(r.per_second(), 4.0);
        assert_eq!(
            (arrivals.arrival, arrivals.burstiness, arrivals.seed),
            (Arrival::Gamma, 2.0, 7)
        );
        assert_eq!(open.max_in_flight, Some(3));
        assert_eq!(open.lag_limit, default_lag_limit());
        let back: LoadSpec = serde_json::from_value(serde_json::to_value(&rate).unwrap()).unwrap();
        assert_eq!(back, rate);

        let trace: LoadSpec =
            serde_json::from_value(json!({"kind": "trace", "trace": {"file": "t.jsonl"}})).unwrap();
        assert_eq!(trace.kind(), LoadKind::Trace);
        assert!(trace.arrivals().is_none(), "a trace has no arrival process");
        assert!(trace.session_headers().is_none());
        assert!(trace.open_loop().is_some());

        let agents: LoadSpec = serde_json::from_value(
            json!({"kind": "agentic", "agentic": {"file": "s.jsonl", "live": 2}, "session_headers": "off"}),
        )
        .unwrap();
        assert!(agents.open_loop().is_none());
        assert_eq!(agents.session_headers().map(|h| h.names().0.len()), Some(0));

        let missing = serde_json::from_value::<LoadSpec>(json!({"kind": "sessions"}));
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("`load.kind: sessions` needs `load.sessions`")
        );
    }
}
