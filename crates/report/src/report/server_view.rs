//! The report's "server's view" table: what the server's own `/metrics` said over each point,
//! beside what the client measured.

use schemars::JsonSchema;
use serde::Serialize;

use super::digest::{PointDigest, RequestDigest};
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::PointRecord;

/// One point's row.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ServerViewRow {
    /// `p003 (concurrency=8)`.
    pub point: String,
    /// Whose metric names were read (`sglang`, `vllm`, `llamacpp`).
    pub engine: String,
    /// Scrapes in the window.
    pub scrapes: usize,
    /// Requests the client saw finish / the server counted.
    pub client_requests: usize,
    pub server_requests: Option<f64>,
    /// Prompt tokens of those requests, by the client's usage records / the server's counter.
    pub client_prompt_tokens: Option<u64>,
    pub server_prompt_tokens: Option<f64>,
    /// Cached prompt tokens, both sides.
    pub client_cached_tokens: Option<u64>,
    pub server_cached_tokens: Option<f64>,
    /// Running and waiting requests, KV use (0..1): mean and max over the scrapes.
    pub running_mean: Option<f64>,
    pub running_max: Option<f64>,
    pub queued_mean: Option<f64>,
    pub queued_max: Option<f64>,
    pub kv_usage_mean: Option<f64>,
    pub kv_usage_max: Option<f64>,
    /// Generated tokens per second by the server's counter over the window.
    pub gen_tok_s: Option<f64>,
    /// Cached / prompt tokens by the server's counters.
    pub cache_hit_rate: Option<f64>,
    /// The server's cached tokens by the cache tier that served them, in words
    /// (`device 1200 (94.9%), host 64 (5.06%)`), of the tiers the engine labelled; None where
    /// it counts no tiers.
    pub cached_by_tier: Option<String>,
    /// True when the point carries `server-disagrees`.
    pub disagrees: bool,
    /// Scrapes the server did not answer, and why the first failed.
    pub failed_scrapes: usize,
    pub scrape_error: Option<String>,
    /// What the scrapes' budget cut, and why counters were not compared.
    pub notes: Vec<String>,
}

/// A row per point whose server was scraped.
pub(crate) fn rows(points: &[PointRecord], requests: &RequestDigest) -> Vec<ServerViewRow> {
    points
        .iter()
        .filter_map(|p| {
            let v = p.server.as_ref()?;
            // A point without a measured request saw none finish, and summed no tokens.
            let none = PointDigest::default();
            let client = requests.point(&p.id).unwrap_or(&none);
            let label = super::format::values_text(&p.values);
            Some(ServerViewRow {
                point: if label.is_empty() {
                    p.id.clone()
                } else {
                    format!("{} ({label})", p.id)
                },
                engine: v.engine.clone(),
                scrapes: v.scrapes,
                client_requests: client.done,
                server_requests: v.requests,
                client_prompt_tokens: client.done_prompt_tokens,
                server_prompt_tokens: v.prompt_tokens,
                client_cached_tokens: client.done_cached_tokens,
                server_cached_tokens: v.cached_tokens,
                running_mean: v.running.map(|g| g.mean),
                running_max: v.running.map(|g| g.max),
                queued_mean: v.queued.map(|g| g.mean),
                queued_max: v.queued.map(|g| g.max),
                kv_usage_mean: v.kv_usage.map(|g| g.mean),
                kv_usage_max: v.kv_usage.map(|g| g.max),
                gen_tok_s: v.gen_tok_s,
                cache_hit_rate: v.cache_hit_rate,
                cached_by_tier: tiers_text(&v.cached_by_tier, v.cached_tokens),
                disagrees: p.has_flag(&FlagKind::ServerDisagrees),
                failed_scrapes: v.failed_scrapes,
                scrape_error: v.scrape_error.clone(),
                notes: v.notes.clone(),
            })
        })
        .collect()
}

/// The cached tokens by tier in words, each with its share of the server's cached tokens.
fn tiers_text(
    tiers: &std::collections::BTreeMap<String, f64>,
    cached: Option<f64>,
) -> Option<String> {
    if tiers.is_empty() {
        return None;
    }
    let parts: Vec<String> = tiers
        .iter()
        .map(|(tier, n)| match cached.filter(|c| *c > 0.0) {
            Some(c) => format!(
                "{tier} {} ({}%)",
                servebench_model::text::tokens(*n),
                servebench_model::text::sig3(n / c * 100.0)
            ),
            None => format!("{tier} {}", servebench_model::text::tokens(*n)),
        })
        .collect();
    Some(parts.join(", "))
}
