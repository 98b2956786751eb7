//! The report's "Workers behind the router" section (`server.workers`, or a launched
//! `server.deployment`'s workers): what each worker's own counters say it served at each
//! point (requests, prompt, cached and generated tokens), how evenly the router spread the
//! requests, and, for a launched deployment, what the router's log says it sent each one
//! (checked against the worker's own count).

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::records::PointRecord;

/// One worker at one point.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct WorkerRow {
    /// `p003 (concurrency=8)`.
    pub point: String,
    /// Its name and URL (`decode0 http://127.0.0.1:30002`), or its URL.
    pub worker: String,
    /// `regular`, `prefill`, `decode` (a launched deployment's), else None.
    pub role: Option<String>,
    /// Measured requests the router's log says it sent here, and of them the failed ones;
    /// None where no router log names workers.
    pub routed: Option<usize>,
    pub routed_failed: Option<usize>,
    /// Requests the worker finished over the point's rounds, its prompt, cached and
    /// generated tokens (its counters' increases); None where it did not say.
    pub requests: Option<f64>,
    pub prompt_tokens: Option<f64>,
    pub cached_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
    /// Its share of the point's requests, percent (of those the workers counted).
    pub share_pct: Option<f64>,
    /// Why its counters are unknown (its scrapes failed), in words.
    pub note: Option<String>,
}

/// One point's spread over its workers.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct WorkerBalance {
    pub point: String,
    /// Most requests on one worker / fewest on one (1 = even); None when a worker's count is
    /// unknown or one served none.
    pub max_over_min: Option<f64>,
    /// The workers' requests together against the requests the client saw succeed: the router
    /// sent them to the workers listed, or to others too.
    pub counted: Option<f64>,
    pub client_ok: usize,
}

/// The section: its rows and each point's balance; empty without `server.workers`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
pub struct WorkersSection {
    pub rows: Vec<WorkerRow>,
    pub balance: Vec<WorkerBalance>,
    /// True when any row has a role (a launched deployment).
    pub roles: bool,
    /// True when any row has the router's word.
    pub routed: bool,
    /// Where the router's word and a worker's own count of the same requests differ, in
    /// words (a request counted by one and not the other).
    pub disagreements: Vec<String>,
}

/// The section of `points`, None when none names workers.
pub(crate) fn section(
    points: &[PointRecord],
    labels: &indexmap::IndexMap<String, String>,
) -> Option<WorkersSection> {
    let mut out = WorkersSection::default();
    for p in points.iter().filter(|p| !p.workers.is_empty()) {
        let point = match labels.get(&p.id) {
            Some(l) if l.starts_with(p.id.as_str()) => l.clone(),
            Some(l) if !l.is_empty() => format!("{} ({l})", p.id),
            _ => p.id.clone(),
        };
        let counts: Vec<Option<f64>> = p
            .workers
            .iter()
            .map(|w| w.view.as_ref().and_then(|v| v.requests))
            .collect();
        let total: Option<f64> = counts.iter().copied().sum();
        for (w, n) in p.workers.iter().zip(&counts) {
            let v = w.view.as_ref();
            let name = match &w.name {
                Some(n) => format!("{n} {}", w.url),
                None => w.url.clone(),
            };
            // A regular worker finishes each request it is sent; a prefill worker finishes
            // its prefill half too (SGLang counts it), so the two counts are comparable.
            if let (Some((ok, failed)), Some(counted)) = (w.routed, *n)
                && (counted - ok as f64).abs() >= 0.5
                && (counted - (ok + failed) as f64).abs() >= 0.5
            {
                out.disagreements.push(format!(
                    "{point}, {}: the router's log sent it {ok} measured requests that succeeded{}, its own counters finished {}",
                    w.name.as_deref().unwrap_or(&w.url),
                    if failed > 0 {
                        format!(" and {failed} that failed")
                    } else {
                        String::new()
                    },
                    counted.round()
                ));
            }
            out.rows.push(WorkerRow {
                point: point.clone(),
                worker: name,
                role: w.role.clone(),
                routed: w.routed.map(|r| r.0 + r.1),
                routed_failed: w.routed.map(|r| r.1),
                requests: *n,
                prompt_tokens: v.and_then(|v| v.prompt_tokens),
                cached_tokens: v.and_then(|v| v.cached_tokens),
                generation_tokens: v.and_then(|v| v.generation_tokens),
                share_pct: n
                    .zip(total.filter(|t| *t > 0.0))
                    .map(|(n, t)| 100.0 * n / t),
                note: match v {
                    None => Some("no scrape of its /metrics answered".into()),
                    Some(v) if v.requests.is_none() => Some(
                        v.scrape_error
                            .clone()
                            .unwrap_or_else(|| "its counters could not be read".into()),
                    ),
                    Some(_) => None,
                },
            });
        }
        let known: Option<Vec<f64>> = counts.iter().copied().collect();
        out.balance.push(WorkerBalance {
            point,
            max_over_min: known.and_then(|k| {
                let max = k.iter().copied().fold(f64::MIN, f64::max);
                let min = k.iter().copied().fold(f64::MAX, f64::min);
                (min > 0.0).then(|| max / min)
            }),
            counted: total,
            client_ok: p.ok,
        });
    }
    out.roles = out.rows.iter().any(|r| r.role.is_some());
    out.routed = out.rows.iter().any(|r| r.routed.is_some());
    (!out.rows.is_empty()).then_some(out)
}
