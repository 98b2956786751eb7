//! The server's own view of a point: each `/metrics` scrape (`metrics.jsonl`) and what the
//! point's record keeps of them (`PointRecord::server`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One scrape of the server's `/metrics` during a point: a line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsScrape {
    /// The point's id.
    pub point: String,
    /// The round within the point.
    pub round: u32,
    /// Unix seconds when the answer arrived.
    pub t: f64,
    /// `start` (before the round's first measured request), `tick` (every interval while
    /// requests run) or `end` (after the last one finished).
    pub at: String,
    /// Metric name -> value, summed over label sets; histogram buckets left out.
    pub values: BTreeMap<String, f64>,
}

/// A gauge over a point's scrapes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GaugeStat {
    /// Mean over the scrapes of the measured window.
    pub mean: f64,
    /// Largest scraped value.
    pub max: f64,
}

/// What the server reported over a point's measured window (its rounds' start-to-end
/// scrapes), in servebench's words whatever the engine's names.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ServerView {
    /// Whose names were read: `sglang`, `vllm` or `llamacpp`.
    pub engine: String,
    /// Scrapes taken within the window.
    pub scrapes: usize,
    /// Requests running (`sglang:num_running_reqs`, `vllm:num_requests_running`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<GaugeStat>,
    /// Requests waiting (`sglang:num_queue_reqs`, `vllm:num_requests_waiting`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<GaugeStat>,
    /// KV pool use, 0..1 (`sglang:token_usage`, `vllm:kv_cache_usage_perc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_usage: Option<GaugeStat>,
    /// Generated tokens per second as the server counts them: the generation counter's
    /// increase over the window's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gen_tok_s: Option<f64>,
    /// Prompt tokens served from the cache / prompt tokens, over the window (counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_hit_rate: Option<f64>,
    /// Prompt tokens the server counted in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<f64>,
    /// Cached prompt tokens the server counted in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<f64>,
    /// Generated tokens the server counted in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_tokens: Option<f64>,
    /// Requests the server finished in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<f64>,
}
