//! The report's "Workers behind the router" section (`server.workers`): what each worker's
//! own counters say it served at each point (requests, prompt, cached and generated tokens),
//! and how evenly the router spread the requests.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::records::PointRecord;

/// One worker at one point.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct WorkerRow {
    /// `p003 (concurrency=8)`.
    pub point: String,
    pub worker: String,
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
            out.rows.push(WorkerRow {
                point: point.clone(),
                worker: w.url.clone(),
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
    (!out.rows.is_empty()).then_some(out)
}
