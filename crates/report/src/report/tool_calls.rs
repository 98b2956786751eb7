//! The report's "Tool calls" section: at each point whose requests were sent tools, how many
//! made a call and how many calls were valid, beside the point's TTFT, so a server that
//! breaks its calls under load shows where it does.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::catalog::{FlagKind, Metric};
use servebench_model::results::records::PointRecord;

/// The section; None when no point's requests were sent tools.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ToolCallsSection {
    /// One row per point sent tools, in run order.
    pub rows: Vec<ToolCallsRow>,
    /// Points flagged `invalid-tool-calls`, by label.
    pub flagged: Vec<String>,
}

/// One point's tool calls.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ToolCallsRow {
    /// `p003 (concurrency=8)`.
    pub point: String,
    /// Successful measured requests sent tools.
    pub sent: usize,
    /// Of them, requests that made a call.
    pub called: usize,
    /// Of those, requests whose every call was valid, and those whose were not.
    pub valid: usize,
    pub invalid: usize,
    /// `tool_call_valid_rate`: valid / called (None when no request called).
    pub valid_rate: Option<f64>,
    /// The first invalid call, `request 3: arguments of `f` are not JSON: ...` (None when
    /// every call was valid).
    pub first_invalid: Option<String>,
    /// The point's TTFT median and 99th percentile, seconds (None when not measured).
    pub ttft_p50_s: Option<f64>,
    pub ttft_p99_s: Option<f64>,
    /// The point is flagged `invalid-tool-calls`.
    pub flagged: bool,
}

pub(crate) fn section(
    points: &[PointRecord],
    labels: &indexmap::IndexMap<String, String>,
) -> Option<ToolCallsSection> {
    let rows: Vec<ToolCallsRow> = points
        .iter()
        .filter_map(|p| {
            let t = p.tool_calls.as_ref()?;
            let ttft = p.metrics.get(Metric::Ttft.name()).filter(|s| s.count > 0);
            Some(ToolCallsRow {
                point: labels.get(&p.id).cloned().unwrap_or_else(|| p.id.clone()),
                sent: t.sent,
                called: t.called,
                valid: t.valid,
                invalid: t.invalid(),
                valid_rate: (t.called > 0).then(|| t.valid as f64 / t.called as f64),
                first_invalid: t
                    .first_invalid
                    .as_ref()
                    .map(|c| format!("request {}: {}", c.request, c.reason)),
                ttft_p50_s: ttft.map(|s| s.p50),
                ttft_p99_s: ttft.map(|s| s.p99),
                flagged: p.has_flag(&FlagKind::InvalidToolCalls),
            })
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let flagged = rows
        .iter()
        .filter(|r| r.flagged)
        .map(|r| r.point.clone())
        .collect();
    Some(ToolCallsSection { rows, flagged })
}
