//! A capacity search in the run directory: the tag each probe's point record carries, and
//! `search.json`, each search's answer (written when a search ends, rewritten on resume).

use serde::{Deserialize, Serialize};

/// `search.json`: one entry per search of the run, in plan order.
pub const SEARCH_FILE: &str = "search.json";

/// What makes a point a probe of a capacity search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchTag {
    /// Which search: the other sweep dimensions' values (`tp=2`), or `all` when nothing else
    /// is swept. `compare` matches searches of two runs by it.
    pub label: String,
    /// The dimension searched: `load.rate` or `concurrency`.
    pub over: String,
    /// The probe's place in its search, from 1.
    pub probe: usize,
    /// The value probed (requests/s, or requests in flight).
    pub value: f64,
    /// Whether the point met every SLO target (a failed or crashed point does not).
    pub passes: bool,
    /// The achieved request throughput (requests/s) the saturation check compares.
    pub throughput_req_s: f64,
    /// Why the probe does not pass, in words (None when it passes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// Every search of a run and its answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SearchFile {
    pub searches: Vec<SearchRecord>,
}

/// One search: what it searched and what it found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchRecord {
    /// As in [`SearchTag::label`].
    pub label: String,
    /// The id of the plan point the search started from (probes are `<seed>-s1`, `-s2`, ...).
    pub seed: String,
    /// `load.rate` or `concurrency`.
    pub over: String,
    /// The search's bounds and resolution, as the spec gave them (resolution a fraction).
    pub start: f64,
    pub max: f64,
    pub resolution: f64,
    /// The highest passing value (None when even the lowest probe failed).
    pub capacity: Option<f64>,
    /// The lowest value known not to do better: a failing probe or a saturated one (None
    /// when `max` passed: the capacity is at least `max`).
    pub above: Option<f64>,
    /// The probe where throughput stopped growing, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturated_at: Option<f64>,
    /// Probes run.
    pub probes: usize,
    /// False when the search stopped before its answer (an interrupt, a crash beyond the
    /// failure policy): `capacity` and `above` are then the bracket so far.
    pub complete: bool,
    /// Requests/s the server completed over the window of the probe that set `capacity`
    /// (what it sustained, as against the value offered). None without a capacity, and in
    /// runs that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_req_s: Option<f64>,
    /// Verdicts that contradict each other, `[failed, passed]`: a value that failed below one
    /// that passed. Empty when the verdicts fall with load, as they should; otherwise the
    /// answer (the highest pass below the lowest failure) rests on noise or a server that
    /// changed between probes, and the report and console say so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inversions: Vec<[f64; 2]>,
    /// A search over `load.agentic.live`: its answer as agents at the SLO, per GPU and per
    /// megawatt (None for other searches, without a capacity, and in older runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<AgentsAtSlo>,
}

/// The figures of [`AgentsAtSlo`] an expectation (`expect:`) may name: judged on the probe
/// that set its search's capacity.
pub use crate::catalog::AGENTS_FIGURES;

/// The most live agents whose point met the SLO, normalised as AgentPerf normalises them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AgentsAtSlo {
    /// The search's capacity: live agent sessions.
    pub agents_at_slo: f64,
    /// The GPUs they ran on, and where that count comes from (`telemetry`: the GPUs the
    /// answer point's GPU readings covered; `server`: the server's tp x pp; `cost.gpus`: the
    /// spec's); None when the run knows no count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    pub gpus_source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents_at_slo_per_gpu: Option<f64>,
    /// The mean power of all GPUs over the answer point's measured window (watts, from its
    /// GPU readings), and agents per megawatt of it; None when power was not measured, and
    /// `power_source` says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents_at_slo_per_mw: Option<f64>,
    pub power_source: String,
}

impl SearchRecord {
    /// True when every probe that failed lies above every one that passed.
    pub fn monotonic(&self) -> bool {
        self.inversions.is_empty()
    }
}
