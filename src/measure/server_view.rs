//! The server's own view of a point, from its `/metrics` scrapes: gauges over the window
//! (running, queued, KV use), counter increases (prompt, cached and generated tokens,
//! finished requests), and where those counters contradict what the client measured.

use crate::catalog::FlagKind;
use crate::results::records::{Flag, RequestRecord};
use crate::results::server_view::{GaugeStat, MetricsScrape, ServerView};

/// Counters further apart than this (relative to the client's count) contradict it.
pub const DISAGREE_PCT: f64 = 2.0;

/// One engine's names for what servebench reads.
struct Names {
    engine: &'static str,
    prefix: &'static str,
    running: &'static str,
    queued: &'static str,
    kv_usage: Option<&'static str>,
    prompt: &'static str,
    cached: Option<&'static str>,
    generated: &'static str,
    requests: Option<&'static str>,
}

/// SGLang's (`srt/metrics/collector.py`), vLLM's (`v1/metrics/loggers.py`; counters carry
/// `_total`) and llama.cpp's (`tools/server`, `--metrics`).
const ENGINES: &[Names] = &[
    Names {
        engine: "sglang",
        prefix: "sglang:",
        running: "sglang:num_running_reqs",
        queued: "sglang:num_queue_reqs",
        kv_usage: Some("sglang:token_usage"),
        prompt: "sglang:prompt_tokens_total",
        cached: Some("sglang:cached_tokens_total"),
        generated: "sglang:generation_tokens_total",
        requests: Some("sglang:num_requests_total"),
    },
    Names {
        engine: "vllm",
        prefix: "vllm:",
        running: "vllm:num_requests_running",
        queued: "vllm:num_requests_waiting",
        kv_usage: Some("vllm:kv_cache_usage_perc"),
        prompt: "vllm:prompt_tokens_total",
        cached: Some("vllm:prompt_tokens_cached_total"),
        generated: "vllm:generation_tokens_total",
        requests: Some("vllm:request_success_total"),
    },
    Names {
        engine: "llamacpp",
        prefix: "llamacpp:",
        running: "llamacpp:requests_processing",
        queued: "llamacpp:requests_deferred",
        kv_usage: None,
        prompt: "llamacpp:prompt_tokens_total",
        cached: None,
        generated: "llamacpp:tokens_predicted_total",
        requests: None,
    },
];

/// The point's server view from its scrapes (every round's), or None when no scrape holds a
/// name servebench knows.
pub fn summarize(scrapes: &[MetricsScrape]) -> Option<ServerView> {
    let names = ENGINES.iter().find(|n| {
        scrapes
            .iter()
            .any(|s| s.values.keys().any(|k| k.starts_with(n.prefix)))
    })?;
    let gauge = |name: &str| -> Option<GaugeStat> {
        let xs: Vec<f64> = scrapes
            .iter()
            .filter_map(|s| s.values.get(name).copied())
            .filter(|x| x.is_finite())
            .collect();
        (!xs.is_empty()).then(|| GaugeStat {
            mean: xs.iter().sum::<f64>() / xs.len() as f64,
            max: xs.iter().copied().fold(f64::MIN, f64::max),
        })
    };
    // Counters: each round's end minus its start, summed; a round whose counter went back
    // (a restarted server) leaves the counter unknown.
    let mut rounds: Vec<u32> = scrapes.iter().map(|s| s.round).collect();
    rounds.sort_unstable();
    rounds.dedup();
    let window = |round: u32| {
        let of_round = scrapes.iter().filter(move |s| s.round == round);
        let first = of_round.clone().min_by(|a, b| a.t.total_cmp(&b.t));
        let last = of_round.max_by(|a, b| a.t.total_cmp(&b.t));
        first.zip(last).filter(|(a, b)| b.t > a.t)
    };
    let counter = |name: &str| -> Option<f64> {
        let mut total = 0.0;
        for &r in &rounds {
            let (a, b) = window(r)?;
            let d = b.values.get(name)? - a.values.get(name)?;
            if d.is_nan() || d < 0.0 {
                return None;
            }
            total += d;
        }
        Some(total)
    };
    let seconds: f64 = rounds
        .iter()
        .filter_map(|&r| window(r))
        .map(|(a, b)| b.t - a.t)
        .sum();
    let prompt = counter(names.prompt);
    let cached = names.cached.and_then(counter);
    let generated = counter(names.generated);
    Some(ServerView {
        engine: names.engine.to_string(),
        scrapes: scrapes.len(),
        running: gauge(names.running),
        queued: gauge(names.queued),
        kv_usage: names.kv_usage.and_then(gauge),
        gen_tok_s: generated.filter(|_| seconds > 0.0).map(|g| g / seconds),
        cache_hit_rate: match (cached, prompt) {
            (Some(c), Some(p)) if p > 0.0 => Some(c / p),
            _ => None,
        },
        prompt_tokens: prompt,
        cached_tokens: cached,
        generation_tokens: generated,
        requests: names.requests.and_then(counter),
    })
}

/// Finished requests the server counted between two scrapes, when it reports them.
pub fn requests_counted(start: &MetricsScrape, end: &MetricsScrape) -> Option<f64> {
    ENGINES.iter().find_map(|n| {
        let name = n.requests?;
        Some(end.values.get(name)? - start.values.get(name)?)
    })
}

/// Requests the client finished without error, counted as they finish: the measured ones, and
/// those inside the scraped window outside the measured phase (a load point's warm-up and
/// cool-down requests: the server counted them too, so they count on the client's side of the
/// comparison, though not in the point's numbers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    /// Requests finished without error.
    pub requests: u64,
    /// Their prompt tokens (None once one of them had no count).
    pub prompt_tokens: Option<u64>,
    /// Their cached tokens (None once one of them had no count).
    pub cached_tokens: Option<u64>,
}

impl Default for Finished {
    fn default() -> Finished {
        Finished {
            requests: 0,
            prompt_tokens: Some(0),
            cached_tokens: Some(0),
        }
    }
}

impl Finished {
    /// Counts `r` when it finished without error.
    pub fn add(&mut self, r: &RequestRecord) {
        if r.error.is_some() {
            return;
        }
        self.requests += 1;
        self.prompt_tokens = self.prompt_tokens.zip(r.prompt_tokens).map(|(a, b)| a + b);
        self.cached_tokens = self.cached_tokens.zip(r.cached_tokens).map(|(a, b)| a + b);
    }
}

/// `server-disagrees` flags: where the server's counters over the window differ from the
/// client's records of the same requests (`done`: measured, finished without error, plus
/// `unmeasured` ones sent inside the window) by more than [`DISAGREE_PCT`]. A count either side does not
/// have is not compared.
pub fn contradictions(view: &ServerView, done: &Finished, unmeasured: &Finished) -> Vec<Flag> {
    let sum = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| (a + b) as f64);
    let checks = [
        (
            "prompt tokens",
            view.prompt_tokens,
            sum(done.prompt_tokens, unmeasured.prompt_tokens),
        ),
        (
            "cached tokens",
            view.cached_tokens,
            sum(done.cached_tokens, unmeasured.cached_tokens),
        ),
        (
            "completed requests",
            view.requests,
            Some((done.requests + unmeasured.requests) as f64),
        ),
    ];
    let mut out = Vec::new();
    for (what, server, client) in checks {
        let (Some(server), Some(client)) = (server, client) else {
            continue;
        };
        let off = (server - client).abs() / client.max(1.0) * 100.0;
        if off > DISAGREE_PCT {
            out.push(Flag::new(
                FlagKind::ServerDisagrees,
                format!(
                    "the server counted {server} {what} over the point, the client {client}{} ({off:.1}% apart, more than {DISAGREE_PCT}%)",
                    if unmeasured.requests > 0 { " (warm-up and cool-down included)" } else { "" }
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn scrape(round: u32, t: f64, values: &[(&str, f64)]) -> MetricsScrape {
        MetricsScrape {
            point: "p001".into(),
            round,
            t,
            at: "tick".into(),
            values: values
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn gauges_average_and_counters_add_per_round() {
        let s = [
            scrape(
                0,
                10.0,
                &[
                    ("sglang:num_running_reqs", 0.0),
                    ("sglang:prompt_tokens_total", 100.0),
                    ("sglang:cached_tokens_total", 0.0),
                    ("sglang:generation_tokens_total", 0.0),
                ],
            ),
            scrape(
                0,
                11.0,
                &[
                    ("sglang:num_running_reqs", 4.0),
                    ("sglang:prompt_tokens_total", 300.0),
                    ("sglang:cached_tokens_total", 50.0),
                    ("sglang:generation_tokens_total", 40.0),
                ],
            ),
            scrape(
                1,
                20.0,
                &[
                    ("sglang:num_running_reqs", 2.0),
                    ("sglang:prompt_tokens_total", 300.0),
                    ("sglang:cached_tokens_total", 50.0),
                    ("sglang:generation_tokens_total", 40.0),
                ],
            ),
            scrape(
                1,
                21.0,
                &[
                    ("sglang:num_running_reqs", 2.0),
                    ("sglang:prompt_tokens_total", 500.0),
                    ("sglang:cached_tokens_total", 150.0),
                    ("sglang:generation_tokens_total", 100.0),
                ],
            ),
        ];
        let v = summarize(&s).unwrap();
        assert_eq!(v.engine, "sglang");
        assert_eq!(
            v.running,
            Some(GaugeStat {
                mean: 2.0,
                max: 4.0
            })
        );
        assert_eq!(v.prompt_tokens, Some(400.0));
        assert_eq!(v.cached_tokens, Some(150.0));
        assert_eq!(v.cache_hit_rate, Some(150.0 / 400.0));
        assert_eq!(v.gen_tok_s, Some(100.0 / 2.0));
        assert_eq!(v.requests, None, "not scraped");
        assert!(summarize(&[scrape(0, 1.0, &[("process_cpu", 1.0)])]).is_none());
    }

    #[test]
    fn a_counter_that_goes_back_is_unknown() {
        let s = [
            scrape(0, 1.0, &[("vllm:prompt_tokens_total", 500.0)]),
            scrape(0, 2.0, &[("vllm:prompt_tokens_total", 20.0)]),
        ];
        assert_eq!(summarize(&s).unwrap().prompt_tokens, None);
    }
}
