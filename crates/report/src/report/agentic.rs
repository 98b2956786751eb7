//! The report's trace sections: for points made of a trace's blocks, the prefix-cache hits
//! their blocks promised (the leading blocks already sent) against the server's own
//! `cached_tokens`; for agent sessions, jobs per hour, live sessions, completion times and
//! each turn's TTFT against its context.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::agentx::AgentxVerdict;
use servebench_model::results::jobs::ContextBand;
use servebench_model::results::records::PointRecord;

/// The section; None when no point replayed blocks or sessions.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct TraceSection {
    /// Points whose requests were made of blocks, in point order.
    pub cache: Vec<TraceCacheRow>,
    /// Agent-session points, in point order.
    pub jobs: Vec<JobsRow>,
    /// Points replayed under the `agentx` preset, each judged against its rules.
    pub agentx: Vec<AgentxRow>,
}

/// One point's verdict against the `agentx` preset.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct AgentxRow {
    pub point: String,
    pub label: String,
    pub verdict: AgentxVerdict,
    /// The rules it broke, by name.
    pub broken: Vec<String>,
}

/// One point's theoretical against reported cache hits.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct TraceCacheRow {
    pub point: String,
    pub label: String,
    /// Successful requests whose server reported cached tokens.
    pub requests: usize,
    pub prompt_tokens: u64,
    /// Share of prompt tokens the leading blocks already sent could serve (0-1).
    pub theoretical_hit_rate: f64,
    /// Share of prompt tokens the server reported cached (0-1).
    pub server_hit_rate: f64,
    /// Server's cached tokens over the theoretical (None when nothing could be cached).
    pub of_theoretical: Option<f64>,
    /// Requests that found less, and more, than their theoretical hit (by over a block of the
    /// trace, at least 64 tokens, plus the request's own length error).
    pub below: usize,
    /// The block part of the tolerance, tokens.
    pub tolerance_tokens: u64,
    /// The requests' length errors (server's prompt tokens less the trace's): smallest to
    /// largest (`-133 to +47`), and the largest as a share of the trace's length; None
    /// without both counts.
    pub length_error: Option<String>,
    pub length_error_share_max: Option<f64>,
    pub above: usize,
    /// Requests that found more than their theoretical hit, within what siblings made after
    /// them and sent before their first token could have left: served in the other order,
    /// kept.
    pub reordered: usize,
    /// Requests without a cached count.
    pub unreported: usize,
}

/// One agent-session point.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct JobsRow {
    pub point: String,
    pub label: String,
    /// Sessions asked to be live, and the mean live over the window.
    pub live: u32,
    pub live_mean: f64,
    pub started: usize,
    pub completed: usize,
    pub stopped: usize,
    /// Of `stopped`, those the point's end cut short (`stop.duration`, an interrupt).
    pub truncated: usize,
    pub jobs_per_hour: f64,
    pub window_s: f64,
    /// Completed sessions' completion time, seconds: median and 90th percentile.
    pub completion_p50_s: Option<f64>,
    pub completion_p90_s: Option<f64>,
    /// Turns sent, over the sessions kept one by one (every session up to `JOBS_KEPT`).
    pub turns: u64,
    /// Mean turns sent per session.
    pub turns_mean: f64,
    /// Every session's duration (first send to last end, however it ended), seconds:
    /// median and 90th percentile; None when no session sent a turn.
    pub duration_p50_s: Option<f64>,
    pub duration_p90_s: Option<f64>,
    /// Mean output tokens of a session's successful turns, as the server counted them.
    pub completion_tokens_mean: f64,
    /// The stop reasons (what comes before a reason's first `: `), each with how many
    /// sessions it stopped.
    pub stop_reasons: IndexMap<String, usize>,
    pub bands: Vec<ContextBand>,
}

/// The section from the points' records.
pub(crate) fn section(
    points: &[PointRecord],
    labels: &IndexMap<String, String>,
) -> Option<TraceSection> {
    let label = |id: &str| labels.get(id).cloned().unwrap_or_else(|| id.to_string());
    let cache: Vec<TraceCacheRow> = points
        .iter()
        .filter_map(|p| {
            let t = p.trace_cache.as_ref()?;
            let prompt = t.prompt_tokens.max(1) as f64;
            Some(TraceCacheRow {
                point: p.id.clone(),
                label: label(&p.id),
                requests: t.requests,
                prompt_tokens: t.prompt_tokens,
                theoretical_hit_rate: t.theoretical_cached_tokens as f64 / prompt,
                server_hit_rate: t.cached_tokens as f64 / prompt,
                of_theoretical: (t.theoretical_cached_tokens > 0)
                    .then(|| t.cached_tokens as f64 / t.theoretical_cached_tokens as f64),
                below: t.below,
                tolerance_tokens: t.tolerance_tokens,
                length_error: t
                    .length_error_min
                    .zip(t.length_error_max)
                    .map(|(lo, hi)| format!("{lo:+} to {hi:+}")),
                length_error_share_max: t.length_error_share_max,
                above: t.above,
                reordered: t.reordered,
                unreported: t.unreported,
            })
        })
        .collect();
    let jobs: Vec<JobsRow> = points
        .iter()
        .filter_map(|p| {
            let j = p.jobs.as_ref()?;
            let mut done: Vec<f64> = j.sessions.iter().filter_map(|s| s.completion_s).collect();
            done.sort_by(f64::total_cmp);
            let at = |q: f64| {
                (!done.is_empty()).then(|| crate::measure::percentile_sorted(&done, q * 100.0))
            };
            let mut lasted: Vec<f64> = j.sessions.iter().filter_map(|s| s.duration_s).collect();
            lasted.sort_by(f64::total_cmp);
            let lasted_at = |q: f64| {
                (!lasted.is_empty())
                    .then(|| lasted[((lasted.len() - 1) as f64 * q).round() as usize])
            };
            let mut stop_reasons = IndexMap::new();
            for s in &j.sessions {
                if let Some(r) = &s.stopped {
                    // A reason is `kind: details`: counted by its kind.
                    let kind = r.split_once(": ").map_or(r.as_str(), |(k, _)| k);
                    *stop_reasons.entry(kind.to_string()).or_insert(0) += 1;
                }
            }
            Some(JobsRow {
                point: p.id.clone(),
                label: label(&p.id),
                live: j.live,
                live_mean: j.live_mean,
                started: j.started,
                completed: j.completed,
                stopped: j.stopped,
                truncated: j.truncated,
                jobs_per_hour: j.jobs_per_hour,
                window_s: j.window_s,
                completion_p50_s: at(0.5),
                completion_p90_s: at(0.9),
                turns: j.sessions.iter().map(|s| u64::from(s.sent)).sum(),
                turns_mean: if j.sessions.is_empty() {
                    0.0
                } else {
                    j.sessions.iter().map(|s| f64::from(s.sent)).sum::<f64>()
                        / j.sessions.len() as f64
                },
                duration_p50_s: lasted_at(0.5),
                duration_p90_s: lasted_at(0.9),
                completion_tokens_mean: if j.sessions.is_empty() {
                    0.0
                } else {
                    j.sessions
                        .iter()
                        .map(|s| s.completion_tokens as f64)
                        .sum::<f64>()
                        / j.sessions.len() as f64
                },
                stop_reasons,
                bands: j.ttft_by_context.clone(),
            })
        })
        .collect();
    let agentx: Vec<AgentxRow> = points
        .iter()
        .filter_map(|p| {
            let v = p.agentx.as_ref()?;
            Some(AgentxRow {
                point: p.id.clone(),
                label: label(&p.id),
                broken: v
                    .rules
                    .iter()
                    .filter(|r| r.met == Some(false))
                    .map(|r| r.rule.to_string())
                    .collect(),
                verdict: v.clone(),
            })
        })
        .collect();
    (!cache.is_empty() || !jobs.is_empty()).then_some(TraceSection {
        cache,
        jobs,
        agentx,
    })
}
