//! A point's verdict against the `agentx` preset (`load.agentic.preset: agentx`): each rule
//! AIPerf 0.13 locks for InferenceX's AgentX benchmark, what the point did, and whether that
//! met it (`points.jsonl`'s `agentx`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The point judged against each rule of the preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentxVerdict {
    /// The scenario the rules are AIPerf's for (`inferencex-agentx-mvp`) and where they were
    /// read.
    pub scenario: String,
    pub source: String,
    /// Every rule servebench judges was met and none was overridden; the rules it cannot
    /// judge (`met: null`, the corpus's identity) are said beside, never counted as met.
    pub conforms: bool,
    /// The spec broke the rules under `preset_override` (AIPerf's `--unsafe-override`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overridden: bool,
    pub rules: Vec<AgentxRule>,
}

/// One rule: what AgentX requires, what the point did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentxRule {
    pub rule: AgentxRuleKind,
    /// What the rule requires, in words.
    pub required: String,
    /// What the point did, in words, with the measured value.
    pub measured: String,
    /// Met or not; None when servebench cannot judge it.
    pub met: Option<bool>,
}

/// The rules of the preset, in the order they are judged.
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
pub enum AgentxRuleKind {
    /// The point ran at least 900 s (`min_benchmark_duration_seconds`).
    Duration,
    /// Every turn streamed (`require_streaming`).
    Streaming,
    /// Every turn asked for its whole output (`require_ignore_eos`).
    IgnoreEos,
    /// The trace's think and tool time as recorded (`forbid_ignore_trace_delays`, no delay
    /// caps).
    TraceDelays,
    /// The system never idle over 10 s (`system_idle_gap_cap_seconds`).
    SystemIdle,
    /// Each play's text fresh (`require_cache_bust: first_turn_prefix`).
    CacheBust,
    /// No turn skipped or cut by the client (`forbid_input_truncation`).
    NoTruncation,
    /// At most 1% of responses refused for context (`CONTEXT_OVERFLOW_RATE_LIMIT`).
    ContextOverflow,
    /// The run was not interrupted (`run_cancelled`).
    NotCancelled,
    /// The pinned with-subagents corpus (`require_loader`).
    Corpus,
}
