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
    /// Measured requests the router retried elsewhere after sending them here.
    pub rerouted: usize,
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

/// A disaggregated worker's stages at one point (SGLang's per-stage latency histogram and
/// its KV transfer histograms, from the worker's own `/metrics`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PdRow {
    pub point: String,
    pub worker: String,
    pub role: String,
    /// `stage mean` in the order a request passes them, in words (`prefill_forward 12.1 ms`).
    pub stages: Vec<String>,
    /// Its KV transfers: mean latency (ms), size (MiB) and speed (GiB/s), in words.
    pub kv_transfer: Option<String>,
}

/// One point's TTFT beside the stages that make it up.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PdSplit {
    pub point: String,
    /// The client's mean TTFT, ms.
    pub ttft_ms: Option<f64>,
    /// Mean per stage over the role's workers (requests weighted), the prefill's first, in
    /// words: `prefill_forward 12.1 ms`.
    pub parts: Vec<String>,
    /// Where most of a request's time before its first token went, of the prefill workers
    /// (`queue`: waiting to be scheduled, `prefill_forward`: prefilling), the KV transfer and the decode batch
    /// (`decode_waiting`: a request with its KV waiting for a decode slot), in words.
    pub bottleneck: Option<String>,
}

/// The order a disaggregated request passes SGLang's stages (others after, by name).
const STAGE_ORDER: &[&str] = &[
    "prefill_bootstrap",
    "queue",
    "prefill_forward",
    "chunked_prefill",
    "prefill_transfer_kv_cache",
    "decode_prepare",
    "decode_bootstrap",
    "decode_transferred",
    "decode_waiting",
];

fn stage_rank(s: &str) -> usize {
    STAGE_ORDER
        .iter()
        .position(|x| *x == s)
        .unwrap_or(STAGE_ORDER.len())
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
    /// A disaggregated deployment's stages, per worker and point.
    pub pd: Vec<PdRow>,
    /// And per point, the client's TTFT beside the stages' means.
    pub pd_split: Vec<PdSplit>,
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
        // Shares and spread within a role: a disaggregated request is counted by a prefill
        // and a decode worker both.
        let role_total = |role: &Option<String>| -> Option<f64> {
            p.workers
                .iter()
                .zip(&counts)
                .filter(|(w, _)| &w.role == role)
                .map(|(_, n)| *n)
                .sum()
        };
        stage_rows(p, &point, &mut out);
        for (w, n) in p.workers.iter().zip(&counts) {
            let v = w.view.as_ref();
            let mut name = match &w.name {
                Some(n) => format!("{n} {}", w.url),
                None => w.url.clone(),
            };
            if let Some(host) = &w.host {
                name.push_str(&format!(" on {host}"));
            }
            // A regular worker finishes each request it is sent; a prefill worker finishes
            // its prefill half too (SGLang counts it), so the two counts are comparable.
            if let (Some((ok, failed)), Some(counted)) = (w.routed, *n)
                && (counted - ok as f64).abs() >= 0.5
                && (counted - (ok + failed) as f64).abs() >= 0.5
            {
                out.disagreements.push(format!(
                    "{point}, {}: the router's log sent it {ok} requests that succeeded{}, its own counters finished {}",
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
                rerouted: w.rerouted,
                requests: *n,
                prompt_tokens: v.and_then(|v| v.prompt_tokens),
                cached_tokens: v.and_then(|v| v.cached_tokens),
                generation_tokens: v.and_then(|v| v.generation_tokens),
                share_pct: n
                    .zip(role_total(&w.role).filter(|t| *t > 0.0))
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
        let mut roles: Vec<Option<String>> = p.workers.iter().map(|w| w.role.clone()).collect();
        roles.dedup();
        let disaggregated = roles.len() > 1;
        for role in roles {
            let known: Option<Vec<f64>> = p
                .workers
                .iter()
                .zip(&counts)
                .filter(|(w, _)| w.role == role)
                .map(|(_, n)| *n)
                .collect();
            out.balance.push(WorkerBalance {
                point: match (&role, disaggregated) {
                    (Some(r), true) => format!("{point} ({r} workers)"),
                    _ => point.clone(),
                },
                max_over_min: known.and_then(|k| {
                    let max = k.iter().copied().fold(f64::MIN, f64::max);
                    let min = k.iter().copied().fold(f64::MAX, f64::min);
                    (min > 0.0).then(|| max / min)
                }),
                counted: role_total(&role),
                client_ok: p.ok,
            });
        }
    }
    out.roles = out.rows.iter().any(|r| r.role.is_some());
    out.pd
        .sort_by_key(|r| (r.role != "prefill", r.point.clone()));
    out.routed = out.rows.iter().any(|r| r.routed.is_some());
    (!out.rows.is_empty()).then_some(out)
}

/// A disaggregated point's stage rows (a worker whose view has stages) and its TTFT split.
fn stage_rows(p: &PointRecord, point: &str, out: &mut WorkersSection) {
    use std::collections::BTreeMap;
    // (role, stage) -> (requests, seconds): the role's workers together.
    let mut by_role: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for w in &p.workers {
        let Some(v) = &w.view else { continue };
        if v.stages.is_empty() && v.kv_transfer.is_none() {
            continue;
        }
        let role = w.role.clone().unwrap_or_else(|| "worker".into());
        let mut stages: Vec<(&String, &servebench_model::results::server_view::StageStat)> =
            v.stages.iter().collect();
        stages.sort_by_key(|(s, _)| (stage_rank(s), (*s).clone()));
        for (s, st) in &stages {
            let e = by_role.entry((role.clone(), (*s).clone())).or_default();
            e.0 += st.requests;
            e.1 += st.requests * st.mean_s;
        }
        out.pd.push(PdRow {
            point: point.to_string(),
            worker: w.name.clone().unwrap_or_else(|| w.url.clone()),
            role: role.clone(),
            stages: stages
                .iter()
                .filter(|(_, st)| st.mean_s > 0.0)
                .map(|(s, st)| format!("{s} {}", ms(st.mean_s * 1000.0)))
                .collect(),
            kv_transfer: v.kv_transfer.map(|k| {
                let mut parts = vec![format!("{} transfers", k.transfers.round())];
                if let Some(l) = k.latency_ms {
                    parts.push(format!("{} each", ms(l)));
                }
                if let Some(mb) = k.mb {
                    parts.push(format!("{} MiB", sig3(mb)));
                }
                if let Some(g) = k.gb_s {
                    parts.push(format!("{} GiB/s", sig3(g)));
                }
                parts.join(", ")
            }),
        });
    }
    if by_role.is_empty() {
        return;
    }
    let mut parts: Vec<(String, String, f64)> = by_role
        .into_iter()
        .filter(|(_, (n, s))| *n > 0.0 && *s > 0.0)
        .map(|((role, stage), (n, s))| (role, stage, 1000.0 * s / n))
        .collect();
    parts.sort_by_key(|(role, stage, _)| (role != "prefill", stage_rank(stage), stage.clone()));
    // `decode_transferred` holds the prefill side's whole time (the decode waits for it):
    // it is not a place of its own.
    let bottleneck = parts
        .iter()
        .filter_map(|(_, stage, x)| {
            let what = match stage.as_str() {
                "queue" => "the prefill workers' queue",
                "prefill_forward" => "the prefill workers (prefilling)",
                "prefill_transfer_kv_cache" => "the KV transfer",
                "decode_waiting" => {
                    "the decode batch (requests with their KV wait for a decode slot)"
                }
                _ => return None,
            };
            Some((*x, stage.clone(), what))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(x, stage, what)| format!("{what}: {stage} {}", ms(x)));
    out.pd_split.push(PdSplit {
        bottleneck,
        point: point.to_string(),
        ttft_ms: p.metrics.get("ttft_s").map(|s| s.mean * 1000.0),
        parts: parts
            .into_iter()
            .map(|(_, stage, x)| format!("{stage} {}", ms(x)))
            .collect(),
    });
}

fn ms(x: f64) -> String {
    format!("{} ms", sig3(x))
}

fn sig3(x: f64) -> String {
    servebench_model::text::sig3(x)
}
