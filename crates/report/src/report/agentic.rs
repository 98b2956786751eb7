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
    /// Points behind a launched router whose sessions' workers are known or whose router's
    /// counters were read, in point order.
    pub routing: Vec<RoutingRow>,
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

/// One point's conversations behind the router: how whole each session stayed on one worker,
/// the cache hits against the theoretical, and the router's own counters beside them.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RoutingRow {
    pub point: String,
    pub label: String,
    /// Sessions with at least one turn whose worker the router's log names; of them, those
    /// whose every such turn went to one worker.
    pub sessions: usize,
    pub kept_whole: usize,
    /// The share of a session's routed turns its busiest worker served: mean and least over
    /// those sessions (None without any).
    pub share_mean: Option<f64>,
    pub share_min: Option<f64>,
    /// The trace's theoretical hits and the server's, as shares of prompt tokens, and their
    /// ratio (None when the point's requests were not made of a trace's blocks).
    pub theoretical_hit_rate: Option<f64>,
    pub server_hit_rate: Option<f64>,
    pub of_theoretical: Option<f64>,
    /// The router's counters that grew, as `name{labels} +increase`; the cache-aware match
    /// ratio's mean over the point; the names it does not export; None/empty when its
    /// counters were not read (`router_read` false).
    pub router_read: bool,
    pub counters: Vec<String>,
    pub match_ratio: Option<f64>,
    pub absent: Vec<String>,
    pub router_error: Option<String>,
}

/// `p`'s sweep values as `policy=round_robin, ...` (each dimension by its last part); None
/// without any. A sweep of the server alone gives each point a table of its own, whose row
/// label is the point's id: the policy is what tells the routing rows apart.
fn values_label(p: &PointRecord) -> Option<String> {
    let parts: Vec<String> = p
        .values
        .iter()
        .map(|(k, v)| {
            let short = k.rsplit('.').next().unwrap_or(k);
            match v {
                serde_json::Value::String(s) => format!("{short}={s}"),
                v => format!("{short}={v}"),
            }
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// The routing row of `p`; None when neither its sessions' workers nor its router's counters
/// are known.
fn routing_row(p: &PointRecord, label: String) -> Option<RoutingRow> {
    let shares: Vec<f64> = p
        .jobs
        .iter()
        .flat_map(|j| &j.sessions)
        .filter_map(|s| s.affinity)
        .collect();
    if shares.is_empty() && p.router.is_none() {
        return None;
    }
    let t = p.trace_cache.as_ref();
    let prompt = t.map(|t| t.prompt_tokens.max(1) as f64);
    let r = p.router.as_ref();
    let counter = |name: &str| {
        r.into_iter()
            .flat_map(|r| &r.counters)
            .filter(|c| c.name == name)
            .map(|c| c.increase)
            .sum::<f64>()
    };
    let ratio_count = counter("smg_cache_aware_match_ratio_count");
    Some(RoutingRow {
        point: p.id.clone(),
        label,
        sessions: shares.len(),
        kept_whole: shares.iter().filter(|s| **s >= 1.0).count(),
        share_mean: (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64),
        share_min: shares.iter().copied().reduce(f64::min),
        theoretical_hit_rate: t
            .zip(prompt)
            .map(|(t, n)| t.theoretical_cached_tokens as f64 / n),
        server_hit_rate: t.zip(prompt).map(|(t, n)| t.cached_tokens as f64 / n),
        of_theoretical: t
            .filter(|t| t.theoretical_cached_tokens > 0)
            .map(|t| t.cached_tokens as f64 / t.theoretical_cached_tokens as f64),
        router_read: r.is_some_and(|r| r.scrapes > 0),
        counters: r
            .into_iter()
            .flat_map(|r| &r.counters)
            .filter(|c| c.increase > 0.0 && !c.name.starts_with("smg_cache_aware_match_ratio"))
            .map(|c| {
                let labels = if c.labels.is_empty() {
                    String::new()
                } else {
                    format!("{{{}}}", c.labels)
                };
                format!("{}{labels} +{}", c.name, c.increase)
            })
            .collect(),
        match_ratio: (ratio_count > 0.0)
            .then(|| counter("smg_cache_aware_match_ratio_sum") / ratio_count),
        absent: r.map(|r| r.absent.clone()).unwrap_or_default(),
        router_error: r.and_then(|r| r.scrape_error.clone()),
    })
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

/// An agent-session point's row: its sessions' completion and duration percentiles (the one
/// interpolating rule every percentile here follows), turns, tokens and why sessions stopped.
fn jobs_row(p: &PointRecord, label: String) -> Option<JobsRow> {
    let j = p.jobs.as_ref()?;
    let mut done: Vec<f64> = j.sessions.iter().filter_map(|s| s.completion_s).collect();
    done.sort_by(f64::total_cmp);
    let at =
        |q: f64| (!done.is_empty()).then(|| crate::measure::percentile_sorted(&done, q * 100.0));
    let mut lasted: Vec<f64> = j.sessions.iter().filter_map(|s| s.duration_s).collect();
    lasted.sort_by(f64::total_cmp);
    let lasted_at = |q: f64| {
        (!lasted.is_empty()).then(|| crate::measure::percentile_sorted(&lasted, q * 100.0))
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
        label,
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
            j.sessions.iter().map(|s| f64::from(s.sent)).sum::<f64>() / j.sessions.len() as f64
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
        .filter_map(|p| jobs_row(p, label(&p.id)))
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
    let routing: Vec<RoutingRow> = points
        .iter()
        .filter_map(|p| routing_row(p, values_label(p).unwrap_or_else(|| label(&p.id))))
        .collect();
    (!cache.is_empty() || !jobs.is_empty() || !routing.is_empty()).then_some(TraceSection {
        cache,
        jobs,
        agentx,
        routing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::jobs::{JobRecord, JobsView, TraceCache};
    use servebench_model::results::records::{RouterCounter, RouterView};

    fn point(id: &str, shares: &[(u32, u32)], router: Option<RouterView>) -> PointRecord {
        PointRecord {
            id: id.into(),
            jobs: Some(JobsView {
                sessions: shares
                    .iter()
                    .enumerate()
                    .map(|(i, (a, b))| {
                        let mut s = JobRecord {
                            session: i as u32,
                            ..JobRecord::default()
                        };
                        s.workers.insert("worker0".into(), *a);
                        s.workers.insert("worker1".into(), *b);
                        s.workers.retain(|_, n| *n > 0);
                        s.affinity = s.worker_share();
                        s
                    })
                    .collect(),
                ..JobsView::default()
            }),
            trace_cache: Some(TraceCache {
                prompt_tokens: 1000,
                theoretical_cached_tokens: 600,
                cached_tokens: 300,
                ..TraceCache::default()
            }),
            router,
            ..PointRecord::default()
        }
    }

    fn c(name: &str, labels: &str, increase: f64) -> RouterCounter {
        RouterCounter {
            name: name.into(),
            labels: labels.into(),
            increase,
        }
    }

    #[test]
    fn a_routing_row_has_each_sessions_share_the_hits_and_the_router_s_counters() {
        let router = RouterView {
            url: "http://127.0.0.1:9/metrics".into(),
            scrapes: 2,
            counters: vec![
                c(
                    "smg_cache_aware_policy_branch_total",
                    "branch=tree_match",
                    3.0,
                ),
                c(
                    "smg_cache_aware_policy_branch_total",
                    "branch=expected_wait_fallback",
                    0.0,
                ),
                c("smg_cache_aware_match_ratio_sum", "", 1.5),
                c("smg_cache_aware_match_ratio_count", "", 3.0),
            ],
            absent: vec!["smg_worker_requests_total".into()],
            ..RouterView::default()
        };
        let mut p = point("p001", &[(4, 0), (3, 1), (2, 2)], Some(router));
        p.values.insert(
            "server.deployment.router.policy".into(),
            serde_json::json!("cache_aware"),
        );
        assert_eq!(
            values_label(&p).as_deref(),
            Some("policy=cache_aware"),
            "the sweep's values tell the rows apart"
        );
        let r = routing_row(&p, "cache_aware".into()).unwrap();
        assert_eq!((r.sessions, r.kept_whole), (3, 1));
        assert_eq!(r.share_mean, Some((1.0 + 0.75 + 0.5) / 3.0));
        assert_eq!(r.share_min, Some(0.5));
        assert_eq!(
            (r.theoretical_hit_rate, r.server_hit_rate, r.of_theoretical),
            (Some(0.6), Some(0.3), Some(0.5))
        );
        // What grew, the match ratio's mean, and what the router does not export.
        assert_eq!(
            r.counters,
            ["smg_cache_aware_policy_branch_total{branch=tree_match} +3"]
        );
        assert_eq!(r.match_ratio, Some(0.5));
        assert_eq!(r.absent, ["smg_worker_requests_total"]);
        assert!(r.router_read);
        // Without the router's counters, nothing of them is said; without either, no row.
        let r = routing_row(&point("p002", &[(1, 1)], None), String::new()).unwrap();
        assert!(!r.router_read && r.absent.is_empty() && r.match_ratio.is_none());
        assert!(routing_row(&point("p003", &[], None), String::new()).is_none());
    }
}
