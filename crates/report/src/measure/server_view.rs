//! The server's own view of a point, from its `/metrics` scrapes: gauges over the window
//! (running, queued, KV use), counter increases (prompt, cached and generated tokens,
//! finished requests), and where those counters contradict what the client measured.

use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, RequestRecord};
use servebench_model::results::server_view::{GaugeStat, MetricsScrape, ServerView};

/// Counters further apart than this (relative to the client's count) contradict it.
pub(crate) const DISAGREE_PCT: f64 = 2.0;

/// One engine's names for what servebench reads.
struct Names {
    engine: &'static str,
    prefix: &'static str,
    running: &'static str,
    queued: &'static str,
    kv_usage: Option<&'static str>,
    prompt: &'static str,
    cached: Option<&'static str>,
    /// The counter of cached tokens by cache tier and its tier label, where the engine has
    /// one (the scrape keeps each tier under `NAME{label="tier"}`).
    tiers: Option<(&'static str, &'static str)>,
    generated: &'static str,
    requests: Option<&'static str>,
    /// Speculative decoding's verify steps (drafts) and accepted draft tokens, where the
    /// engine counts them.
    spec: Option<(&'static str, &'static str)>,
    /// Counters appear only once first counted (a Prometheus counter with labels has no
    /// sample before its first `inc`): absent from a scrape that shows the family, one is 0.
    lazy: bool,
    /// `prompt` counts only the prompt tokens the server computed; `cached` the rest.
    prompt_excludes_cached: bool,
}

/// SGLang's (`srt/metrics/collector.py`: the token and request counters are created by the
/// first finished request, `cached_tokens_total` by the first cache hit), vLLM's
/// (`v1/metrics/loggers.py`; counters carry `_total`) and llama.cpp's (`tools/server`,
/// `--metrics`: `prompt_tokens_total` counts processed tokens, the cached ones are
/// `prompt_tokens_cached_total`).
const ENGINES: &[Names] = &[
    Names {
        engine: "sglang",
        prefix: "sglang:",
        running: "sglang:num_running_reqs",
        queued: "sglang:num_queue_reqs",
        kv_usage: Some("sglang:token_usage"),
        prompt: "sglang:prompt_tokens_total",
        cached: Some("sglang:cached_tokens_total"),
        tiers: Some(("sglang:cached_tokens_total", "cache_source")),
        generated: "sglang:generation_tokens_total",
        requests: Some("sglang:num_requests_total"),
        spec: None,
        lazy: true,
        prompt_excludes_cached: false,
    },
    Names {
        engine: "vllm",
        prefix: "vllm:",
        running: "vllm:num_requests_running",
        queued: "vllm:num_requests_waiting",
        kv_usage: Some("vllm:kv_cache_usage_perc"),
        prompt: "vllm:prompt_tokens_total",
        cached: Some("vllm:prompt_tokens_cached_total"),
        tiers: Some(("vllm:prompt_tokens_cached_by_source_total", "source")),
        generated: "vllm:generation_tokens_total",
        requests: Some("vllm:request_success_total"),
        // v1/spec_decode/metrics.py `SpecDecodingProm`: created when a speculative config is
        // given, advanced once per scheduler step per request drafted for.
        spec: Some((
            "vllm:spec_decode_num_drafts_total",
            "vllm:spec_decode_num_accepted_tokens_total",
        )),
        lazy: false,
        prompt_excludes_cached: false,
    },
    Names {
        engine: "llamacpp",
        prefix: "llamacpp:",
        running: "llamacpp:requests_processing",
        queued: "llamacpp:requests_deferred",
        kv_usage: None,
        prompt: "llamacpp:prompt_tokens_total",
        cached: Some("llamacpp:prompt_tokens_cached_total"),
        tiers: None,
        generated: "llamacpp:tokens_predicted_total",
        requests: None,
        spec: None,
        lazy: false,
        prompt_excludes_cached: true,
    },
];

/// The name of the process's start time (Python's and Go's Prometheus clients): a change
/// between two scrapes is a restarted server.
const START_TIME: &str = "process_start_time_seconds";

impl Names {
    /// The engine whose names `s` holds.
    fn of(s: &MetricsScrape) -> Option<&'static Names> {
        ENGINES
            .iter()
            .find(|n| s.values.keys().any(|k| k.starts_with(n.prefix)))
    }

    /// Counter `name` in scrape `s`: its value, 0 for a lazy engine's counter not yet
    /// created (the scrape shows the family), None when unknown.
    fn counter_at(&self, s: &MetricsScrape, name: &str) -> Option<f64> {
        match s.values.get(name) {
            Some(v) => Some(*v),
            None if self.lazy && s.values.keys().any(|k| k.starts_with(self.prefix)) => Some(0.0),
            None => None,
        }
    }
}

/// The point's server view from its scrapes (every round's), or None when no scrape holds a
/// name servebench knows and none failed. A round's counters are read between its `start`
/// and `end` scrapes; a round without both answered, or whose server restarted between
/// them (a counter went back, a new process start time), leaves the counters unknown.
pub fn summarize(scrapes: &[MetricsScrape]) -> Option<ServerView> {
    let answered: Vec<&MetricsScrape> = scrapes.iter().filter(|s| s.answered()).collect();
    let failed: Vec<&MetricsScrape> = scrapes.iter().filter(|s| !s.answered()).collect();
    let names = answered.iter().find_map(|s| Names::of(s));
    if names.is_none() && failed.is_empty() {
        return None;
    }
    let mut view = ServerView {
        engine: names.map_or_else(String::new, |n| n.engine.to_string()),
        scrapes: answered.len(),
        failed_scrapes: failed.len(),
        scrape_error: failed.first().and_then(|s| s.error.clone()),
        ..ServerView::default()
    };
    if let Some(cut) = answered.iter().find_map(|s| s.cut.as_ref()) {
        view.notes.push(format!(
            "the scrapes' budget {cut} (every scrape's cut is in metrics.jsonl)"
        ));
    }
    let Some(names) = names else {
        return Some(view);
    };
    let w = Windows::of(scrapes, names);
    if w.restarted || w.went_back() {
        view.notes.push(
            "the server restarted during the point (its start time changed, or a counter went back): its counters are not compared with the client's".into(),
        );
    }
    if w.windows.iter().any(Option::is_none) && failed.iter().any(|s| s.at != "tick") {
        view.notes.push(
            "a round's first or last scrape failed: the server's counters over it are unknown"
                .into(),
        );
    }
    fill_counters(&mut view, &w, &answered);
    fill_stages(&mut view, &w);
    Some(view)
}

/// A gauge's mean and maximum over the answered scrapes, None where none holds it.
fn gauge(answered: &[&MetricsScrape], name: &str) -> Option<GaugeStat> {
    let xs: Vec<f64> = answered
        .iter()
        .filter_map(|s| s.values.get(name).copied())
        .filter(|x| x.is_finite())
        .collect();
    (!xs.is_empty()).then(|| GaugeStat {
        mean: xs.iter().sum::<f64>() / xs.len() as f64,
        max: xs.iter().copied().fold(f64::MIN, f64::max),
    })
}

/// Fills the view's gauges and the counters' increases over the rounds' windows.
fn fill_counters(view: &mut ServerView, w: &Windows, answered: &[&MetricsScrape]) {
    let names = w.names;
    let seconds: f64 = w.windows.iter().flatten().map(|(a, b)| b.t - a.t).sum();
    let counter = |name: &str| w.counter(name);
    let processed = counter(names.prompt);
    let cached = names.cached.and_then(counter);
    // Where the prompt counter leaves the cached tokens out, the prompt is both; without
    // the cached counter (an older build) the server's prompt tokens are unknown.
    let prompt = if names.prompt_excludes_cached {
        processed.zip(cached).map(|(p, c)| p + c)
    } else {
        processed
    };
    let generated = counter(names.generated);
    view.running = gauge(answered, names.running);
    view.queued = gauge(answered, names.queued);
    view.kv_usage = names.kv_usage.and_then(|n| gauge(answered, n));
    view.gen_tok_s = generated.filter(|_| seconds > 0.0).map(|g| g / seconds);
    view.cache_hit_rate = match (cached, prompt) {
        (Some(c), Some(p)) if p > 0.0 => Some(c / p),
        _ => None,
    };
    view.prompt_tokens = prompt;
    view.cached_tokens = cached;
    view.generation_tokens = generated;
    view.requests = names.requests.and_then(counter);
    view.cached_by_tier = cached_by_tier(w);
    // vLLM's mean acceptance length: 1 + accepted / drafts ("conventionally including the
    // bonus token", v1/spec_decode/metrics.py).
    view.spec_accept_length = names.spec.and_then(|(drafts, accepted)| {
        let (d, a) = (counter(drafts)?, counter(accepted)?);
        (d > 0.0).then(|| 1.0 + a / d)
    });
}

/// Each cache tier's cached tokens over the windows, for the tiers the engine labelled in a
/// round's last scrape (SGLang creates a tier's series with its first hit there).
fn cached_by_tier(w: &Windows) -> std::collections::BTreeMap<String, f64> {
    let Some((family, label)) = w.names.tiers else {
        return Default::default();
    };
    let open = format!("{family}{{{label}=\"");
    let mut tiers: Vec<String> = w
        .windows
        .iter()
        .flatten()
        .flat_map(|(_, end)| end.values.keys())
        .filter_map(|k| {
            k.strip_prefix(&open)?
                .strip_suffix("\"}")
                .map(str::to_string)
        })
        .collect();
    tiers.sort();
    tiers.dedup();
    // A tier's series is created by its first hit: missing from a round's scrape, it had
    // counted none yet.
    let increase = |key: &str| -> Option<f64> {
        let mut total = 0.0;
        for (a, b) in w.windows.iter().copied().collect::<Option<Vec<_>>>()? {
            let at = |s: &MetricsScrape| s.values.get(key).copied().unwrap_or(0.0);
            let d = at(b) - at(a);
            if !d.is_finite() || d < 0.0 {
                return None;
            }
            total += d;
        }
        Some(total)
    };
    if w.restarted {
        return Default::default();
    }
    tiers
        .into_iter()
        .filter_map(|tier| Some((tier.clone(), increase(&format!("{open}{tier}\"}}"))?)))
        .collect()
}

/// Fills a disaggregated deployment's per-stage latencies, its prefill queue and its KV
/// transfers (SGLang's histograms).
fn fill_stages(view: &mut ServerView, w: &Windows) {
    let ends: Vec<&MetricsScrape> = w.windows.iter().flatten().map(|(_, b)| *b).collect();
    let mut stage_names: Vec<String> = ends
        .iter()
        .flat_map(|s| s.values.keys())
        .filter_map(|k| {
            k.strip_prefix(STAGES)?
                .strip_prefix("_count{stage=\"")?
                .strip_suffix("\"}")
                .map(str::to_string)
        })
        .collect();
    stage_names.sort();
    stage_names.dedup();
    for stage in stage_names {
        if let Some((sum, count)) = w.stage(&stage) {
            view.stages.insert(
                stage,
                servebench_model::results::server_view::StageStat {
                    requests: count,
                    mean_s: sum / count,
                },
            );
        }
    }
    // A prefill worker's queue: SGLang's per-stage histogram has no stage for the wait
    // between the bootstrap and the forward (`sglang:queue_time_seconds`), so the split
    // would leave it out while calling `prefill_forward` the prefill.
    if view.stages.keys().any(|k| k.starts_with("prefill_"))
        && let Some((sum, n)) = w.histogram(QUEUE_TIME)
    {
        view.stages.insert(
            "queue".to_string(),
            servebench_model::results::server_view::StageStat {
                requests: n,
                mean_s: sum / n,
            },
        );
    }
    if let Some((latency, n)) = w.histogram("sglang:kv_transfer_latency_ms") {
        view.kv_transfer = Some(servebench_model::results::server_view::KvTransferStat {
            transfers: n,
            latency_ms: Some(latency / n),
            mb: w
                .histogram("sglang:kv_transfer_total_mb")
                .map(|(s, c)| s / c),
            gb_s: w
                .histogram("sglang:kv_transfer_speed_gb_s")
                .map(|(s, c)| s / c),
        });
    }
}

/// The rounds' windows (each round's `start` and `end` scrapes) the counters are read over.
struct Windows<'a> {
    names: &'static Names,
    /// Each round's window, when both its ends answered; None for a round without one.
    windows: Vec<Option<(&'a MetricsScrape, &'a MetricsScrape)>>,
    /// The server's process start time changed within a window.
    restarted: bool,
}

impl<'a> Windows<'a> {
    /// Every round's window among the scrapes.
    fn of(scrapes: &'a [MetricsScrape], names: &'static Names) -> Self {
        let mut rounds: Vec<u32> = scrapes.iter().map(|s| s.round).collect();
        rounds.sort_unstable();
        rounds.dedup();
        let at = |round: u32, at: &str| {
            scrapes
                .iter()
                .rfind(|s| s.round == round && s.at == at)
                .filter(|s| s.answered())
        };
        let windows: Vec<Option<(&MetricsScrape, &MetricsScrape)>> = rounds
            .iter()
            .map(|&r| at(r, "start").zip(at(r, "end")).filter(|(a, b)| b.t > a.t))
            .collect();
        let restarted = windows.iter().flatten().any(|(a, b)| {
            matches!((a.values.get(START_TIME), b.values.get(START_TIME)), (Some(x), Some(y)) if x != y)
        });
        Self {
            names,
            windows,
            restarted,
        }
    }

    /// Counter `name`'s increase summed over the windows; None when the server restarted, a
    /// window is missing, or the counter is unknown or went back in one.
    fn counter(&self, name: &str) -> Option<f64> {
        if self.restarted {
            return None;
        }
        let mut total = 0.0;
        for w in &self.windows {
            let (a, b) = (*w)?;
            let d = self.names.counter_at(b, name)? - self.names.counter_at(a, name)?;
            if !d.is_finite() || d < 0.0 {
                return None;
            }
            total += d;
        }
        Some(total)
    }

    /// True when (without a restart) a prompt, generated or request counter went back.
    fn went_back(&self) -> bool {
        let names = self.names;
        !self.restarted
            && self.windows.iter().flatten().any(|(a, b)| {
                [Some(names.prompt), Some(names.generated), names.requests]
                    .into_iter()
                    .flatten()
                    .any(|n| {
                        matches!((names.counter_at(a, n), names.counter_at(b, n)), (Some(x), Some(y)) if y < x)
                    })
            })
    }

    /// A histogram's (sum, count) increase over the windows (SGLang shows a histogram only
    /// once observed: absent at the start is 0); None without observations.
    fn histogram(&self, base: &str) -> Option<(f64, f64)> {
        if self.restarted {
            return None;
        }
        let (mut sum, mut count) = (0.0, 0.0);
        for w in &self.windows {
            let (a, b) = (*w)?;
            let at =
                |s: &MetricsScrape, suffix: &str| s.values.get(&format!("{base}{suffix}")).copied();
            let (s1, c1) = (at(b, "_sum")?, at(b, "_count")?);
            sum += s1 - at(a, "_sum").unwrap_or(0.0);
            count += c1 - at(a, "_count").unwrap_or(0.0);
        }
        (count > 0.0 && sum.is_finite()).then_some((sum, count))
    }

    /// The per-stage histogram's (sum, count) increase for `stage`; None when the server
    /// restarted, a window is missing, or nothing was observed.
    fn stage(&self, stage: &str) -> Option<(f64, f64)> {
        let base_sum = format!("{STAGES}_sum{{stage=\"{stage}\"}}");
        let base_count = format!("{STAGES}_count{{stage=\"{stage}\"}}");
        if self.restarted {
            return None;
        }
        let (mut sum, mut count) = (0.0, 0.0);
        for w in &self.windows {
            let (a, b) = (*w)?;
            let get = |s: &MetricsScrape, k: &str| s.values.get(k).copied();
            if let (Some(s1), Some(c1)) = (get(b, &base_sum), get(b, &base_count)) {
                sum += s1 - get(a, &base_sum).unwrap_or(0.0);
                count += c1 - get(a, &base_count).unwrap_or(0.0);
            }
        }
        (count > 0.0).then_some((sum, count))
    }
}

/// SGLang's per-stage latency histogram of a disaggregated request.
const STAGES: &str = "sglang:per_stage_req_latency_seconds";
/// SGLang's histogram of the time a request waits in the scheduler's queue.
const QUEUE_TIME: &str = "sglang:queue_time_seconds";

/// Finished requests the server counted between two scrapes, when it reports them.
pub fn requests_counted(start: &MetricsScrape, end: &MetricsScrape) -> Option<f64> {
    let names = Names::of(end).or_else(|| Names::of(start))?;
    let name = names.requests?;
    Some(names.counter_at(end, name)? - names.counter_at(start, name)?)
}

/// What a point keeps in memory of a scrape: the names the server view reads, plus one
/// name of the engine's family (which tells a lazy counter's 0 from unknown). Every name is
/// in `metrics.jsonl`; a server that publishes thousands of series costs the runner no more.
pub fn retained(
    values: &std::collections::BTreeMap<String, f64>,
) -> std::collections::BTreeMap<String, f64> {
    let read = |k: &str| {
        k == START_TIME
            || ENGINES.iter().any(|n| {
                [n.running, n.queued, n.prompt, n.generated]
                    .into_iter()
                    .chain([n.kv_usage, n.cached, n.requests].into_iter().flatten())
                    .chain(n.spec.into_iter().flat_map(|(d, a)| [d, a]))
                    .any(|x| x == k)
            })
    };
    // A disaggregated worker's stages and KV transfers (histogram sums and counts).
    let pd = |k: &str| {
        (k.starts_with(STAGES) || k.starts_with(QUEUE_TIME) || k.starts_with("sglang:kv_transfer_"))
            && (k.contains("_sum") || k.contains("_count"))
    };
    // Each cache tier's series (`NAME{label="tier"}`).
    let tier = |k: &str| {
        ENGINES
            .iter()
            .filter_map(|n| n.tiers)
            .any(|(family, label)| {
                k.strip_prefix(family)
                    .is_some_and(|rest| rest.starts_with(&format!("{{{label}=\"")))
            })
    };
    let mut out: std::collections::BTreeMap<String, f64> = values
        .iter()
        .filter(|(k, _)| read(k) || pd(k) || tier(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    for n in ENGINES {
        if !out.keys().any(|k| k.starts_with(n.prefix))
            && let Some((k, v)) = values.iter().find(|(k, _)| k.starts_with(n.prefix))
        {
            out.insert(k.clone(), *v);
        }
    }
    out
}

/// Requests the client finished without error, counted as they finish: the measured ones, and
/// those inside the scraped window outside the measured phase (a load point's warm-up and
/// cool-down requests: the server counted them too, so they count on the client's side of the
/// comparison, though not in the point's numbers); and how many failed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finished {
    /// Requests finished without error.
    pub requests: u64,
    /// Their prompt tokens (None once one of them had no count).
    pub prompt_tokens: Option<u64>,
    /// Their cached tokens (None once one of them had no count).
    pub cached_tokens: Option<u64>,
    /// Requests that ended with an error (the server may have counted part of them).
    pub failed: u64,
}

impl Default for Finished {
    fn default() -> Finished {
        Finished {
            requests: 0,
            prompt_tokens: Some(0),
            cached_tokens: Some(0),
            failed: 0,
        }
    }
}

impl Finished {
    /// Counts `r`: finished without error, or failed.
    pub fn add(&mut self, r: &RequestRecord) {
        if r.error.is_some() {
            self.failed += 1;
            return;
        }
        self.requests += 1;
        self.prompt_tokens = self.prompt_tokens.zip(r.prompt_tokens).map(|(a, b)| a + b);
        self.cached_tokens = self.cached_tokens.zip(r.cached_tokens).map(|(a, b)| a + b);
    }
}

/// `server-disagrees` flags: where the server's counters over the window differ from the
/// client's records of the same requests (`done`: measured, finished without error, plus
/// `unmeasured` ones sent inside the window) by more than [`DISAGREE_PCT`]. A count either
/// side does not have is not compared; nor is anything when a request of the window failed
/// (the server counts part of a request it was cut off from: the point's failure is the
/// requests' own), which `view` then says.
pub fn contradictions(view: &mut ServerView, done: &Finished, unmeasured: &Finished) -> Vec<Flag> {
    let failed = done.failed + unmeasured.failed;
    if failed > 0 {
        view.notes.push(format!(
            "{} of the window failed: the server's counters are not compared with the client's",
            servebench_model::text::count_s(failed as usize, "request")
        ));
        return Vec::new();
    }
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

    fn scrape(round: u32, t: f64, at: &str, values: &[(&str, f64)]) -> MetricsScrape {
        MetricsScrape {
            point: "p001".into(),
            round,
            t,
            at: at.into(),
            values: values
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<BTreeMap<_, _>>(),
            error: None,
            cut: None,
            worker: None,
        }
    }

    fn failed(round: u32, t: f64, at: &str, why: &str) -> MetricsScrape {
        MetricsScrape {
            error: Some(why.into()),
            ..scrape(round, t, at, &[])
        }
    }

    fn finished(requests: u64, prompt: u64, cached: u64) -> Finished {
        Finished {
            requests,
            prompt_tokens: Some(prompt),
            cached_tokens: Some(cached),
            failed: 0,
        }
    }

    /// A prefill worker's split includes its queue (`sglang:queue_time_seconds`): SGLang's
    /// stages leave it out (350 ms missing at a loaded point while the split read "queued and
    /// prefilling"). A worker with no prefill stage (a regular one) gets none.
    #[test]
    fn a_prefill_worker_s_queue_is_a_stage_of_its_split() {
        let stage =
            |s: &str, k: &str| format!("sglang:per_stage_req_latency_seconds_{k}{{stage=\"{s}\"}}");
        let (fs, fc) = (
            stage("prefill_forward", "sum"),
            stage("prefill_forward", "count"),
        );
        let at = |t: f64, at: &str, n: f64, queue_s: f64| {
            scrape(
                0,
                t,
                at,
                &[
                    ("sglang:num_requests_total", n),
                    (fs.as_str(), 0.1 * n),
                    (fc.as_str(), n),
                    ("sglang:queue_time_seconds_sum", queue_s),
                    ("sglang:queue_time_seconds_count", n),
                ],
            )
        };
        let view = summarize(&[at(10.0, "start", 0.0, 0.0), at(12.0, "end", 4.0, 1.4)]).unwrap();
        let queue = &view.stages["queue"];
        assert_eq!(queue.requests, 4.0);
        assert!((queue.mean_s - 0.35).abs() < 1e-9, "{queue:?}");
        assert!((view.stages["prefill_forward"].mean_s - 0.1).abs() < 1e-9);
        let regular = |t: f64, at: &str, n: f64| {
            scrape(
                0,
                t,
                at,
                &[
                    ("sglang:num_requests_total", n),
                    ("sglang:queue_time_seconds_sum", n),
                    ("sglang:queue_time_seconds_count", n),
                ],
            )
        };
        let view = summarize(&[regular(10.0, "start", 0.0), regular(12.0, "end", 4.0)]).unwrap();
        assert!(!view.stages.contains_key("queue"));
    }

    /// Cached tokens by tier over two rounds: a tier first labelled in the second round (its
    /// series created by its first hit) counts from 0; a tier the engine never labelled is
    /// absent, not 0; an engine without tiers has none.
    #[test]
    fn cached_tokens_by_tier_add_per_round_and_an_unlabelled_tier_is_absent() {
        let device = "sglang:cached_tokens_total{cache_source=\"device\"}";
        let host = "sglang:cached_tokens_total{cache_source=\"host\"}";
        let s = [
            scrape(0, 10.0, "start", &[("sglang:prompt_tokens_total", 0.0)]),
            scrape(
                0,
                11.0,
                "end",
                &[("sglang:prompt_tokens_total", 100.0), (device, 40.0)],
            ),
            scrape(
                1,
                20.0,
                "start",
                &[("sglang:prompt_tokens_total", 100.0), (device, 40.0)],
            ),
            scrape(
                1,
                21.0,
                "end",
                &[
                    ("sglang:prompt_tokens_total", 300.0),
                    (device, 100.0),
                    (host, 64.0),
                ],
            ),
        ];
        let v = summarize(&s).unwrap();
        assert_eq!(v.cached_by_tier.len(), 2, "{:?}", v.cached_by_tier);
        assert_eq!(v.cached_by_tier["device"], 100.0);
        assert_eq!(v.cached_by_tier["host"], 64.0);
        assert!(!v.cached_by_tier.contains_key("storage"));
        let llama = [
            scrape(0, 10.0, "start", &[("llamacpp:prompt_tokens_total", 0.0)]),
            scrape(0, 11.0, "end", &[("llamacpp:prompt_tokens_total", 9.0)]),
        ];
        assert!(summarize(&llama).unwrap().cached_by_tier.is_empty());
    }

    #[test]
    fn gauges_average_and_counters_add_per_round() {
        let s = [
            scrape(
                0,
                10.0,
                "start",
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
                "end",
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
                "start",
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
                "end",
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
        assert_eq!(
            v.requests,
            Some(0.0),
            "SGLang's lazy counter, not yet created"
        );
        assert!(v.notes.is_empty(), "{:?}", v.notes);
        assert!(summarize(&[scrape(0, 1.0, "start", &[("process_cpu", 1.0)])]).is_none());
    }

    /// 40 drafts with 60 accepted draft tokens over the round: 1 + 60 / 40 = 2.5 tokens per
    /// verify step; no drafts, no figure.
    #[test]
    fn vllms_spec_decode_counters_give_the_mean_accept_length() {
        let names = |drafts: f64, accepted: f64| {
            vec![
                ("vllm:prompt_tokens_total", 0.0),
                ("vllm:spec_decode_num_drafts_total", drafts),
                ("vllm:spec_decode_num_accepted_tokens_total", accepted),
            ]
        };
        let view = summarize(&[
            scrape(0, 1.0, "start", &names(10.0, 5.0)),
            scrape(0, 2.0, "end", &names(50.0, 65.0)),
        ])
        .unwrap();
        assert_eq!(view.spec_accept_length, Some(2.5));
        let idle = summarize(&[
            scrape(0, 1.0, "start", &names(10.0, 5.0)),
            scrape(0, 2.0, "end", &names(10.0, 5.0)),
        ])
        .unwrap();
        assert_eq!(idle.spec_accept_length, None);
    }

    #[test]
    fn a_counter_that_goes_back_is_unknown_and_said() {
        let s = [
            scrape(0, 1.0, "start", &[("vllm:prompt_tokens_total", 500.0)]),
            scrape(0, 2.0, "end", &[("vllm:prompt_tokens_total", 20.0)]),
        ];
        let v = summarize(&s).unwrap();
        assert_eq!(v.prompt_tokens, None);
        assert!(v.notes[0].contains("restarted"), "{:?}", v.notes);
    }

    #[test]
    fn a_new_process_start_time_is_a_restarted_server_whose_counters_are_not_used() {
        let s = [
            scrape(
                0,
                1.0,
                "start",
                &[("vllm:prompt_tokens_total", 10.0), (START_TIME, 1.7e9)],
            ),
            scrape(
                0,
                2.0,
                "end",
                &[
                    ("vllm:prompt_tokens_total", 600.0),
                    (START_TIME, 1.7e9 + 30.0),
                ],
            ),
        ];
        let v = summarize(&s).unwrap();
        assert_eq!(v.prompt_tokens, None);
        assert!(
            contradictions(&mut v.clone(), &finished(1, 64, 0), &Finished::default()).is_empty()
        );
        assert!(
            v.notes.iter().any(|n| n.contains("restarted")),
            "{:?}",
            v.notes
        );
    }

    /// A fresh SGLang 0.5 server has no token or request counters until its first request
    /// finishes, and no cached-token counter until its first cache hit.
    #[test]
    fn sglang_counters_not_yet_created_are_zero_where_the_family_shows() {
        let s = [
            scrape(
                0,
                1.0,
                "start",
                &[
                    ("sglang:num_running_reqs", 0.0),
                    ("sglang:token_usage", 0.0),
                ],
            ),
            scrape(
                0,
                2.0,
                "end",
                &[
                    ("sglang:num_running_reqs", 0.0),
                    ("sglang:prompt_tokens_total", 256.0),
                    ("sglang:generation_tokens_total", 8.0),
                    ("sglang:num_requests_total", 2.0),
                ],
            ),
        ];
        let mut v = summarize(&s).unwrap();
        assert_eq!(v.prompt_tokens, Some(256.0));
        assert_eq!(
            v.cached_tokens,
            Some(0.0),
            "no cache hit yet: the counter is 0"
        );
        assert_eq!(v.requests, Some(2.0));
        assert_eq!(v.generation_tokens, Some(8.0));
        assert!(contradictions(&mut v, &finished(2, 256, 0), &Finished::default()).is_empty());
        assert_eq!(
            contradictions(&mut v, &finished(3, 256, 0), &Finished::default()).len(),
            1,
            "a real difference is still one"
        );
        // vLLM creates its counters at start: one missing is unknown, not 0.
        let s = [
            scrape(0, 1.0, "start", &[("vllm:num_requests_running", 0.0)]),
            scrape(0, 2.0, "end", &[("vllm:num_requests_running", 0.0)]),
        ];
        assert_eq!(summarize(&s).unwrap().prompt_tokens, None);
    }

    /// llama.cpp's `prompt_tokens_total` counts the tokens it computed; the cached ones are
    /// `prompt_tokens_cached_total`: the client's prompt tokens are their sum.
    #[test]
    fn llama_cpp_prompt_tokens_are_its_processed_and_cached_counters_together() {
        let s = [
            scrape(
                0,
                1.0,
                "start",
                &[
                    ("llamacpp:prompt_tokens_total", 130.0),
                    ("llamacpp:prompt_tokens_cached_total", 0.0),
                    ("llamacpp:tokens_predicted_total", 4.0),
                ],
            ),
            scrape(
                0,
                2.0,
                "end",
                &[
                    ("llamacpp:prompt_tokens_total", 134.0),
                    ("llamacpp:prompt_tokens_cached_total", 508.0),
                    ("llamacpp:tokens_predicted_total", 20.0),
                ],
            ),
        ];
        let mut v = summarize(&s).unwrap();
        assert_eq!(v.engine, "llamacpp");
        assert_eq!(v.prompt_tokens, Some(512.0));
        assert_eq!(v.cached_tokens, Some(508.0));
        // Four warm requests of 128 tokens, 127 of each cached.
        let flags = contradictions(&mut v, &finished(4, 512, 508), &Finished::default());
        assert!(flags.is_empty(), "{flags:?}");
        // A build without the cached counter: its prompt count is not the client's.
        let old: Vec<MetricsScrape> = s
            .iter()
            .map(|x| {
                let mut x = x.clone();
                x.values.remove("llamacpp:prompt_tokens_cached_total");
                x
            })
            .collect();
        assert_eq!(summarize(&old).unwrap().prompt_tokens, None);
    }

    #[test]
    fn a_point_whose_requests_failed_is_not_judged_by_the_server_counters() {
        let s = [
            scrape(0, 1.0, "start", &[("vllm:prompt_tokens_total", 0.0)]),
            scrape(0, 2.0, "end", &[("vllm:prompt_tokens_total", 513.0)]),
        ];
        let mut v = summarize(&s).unwrap();
        let done = Finished {
            requests: 0,
            prompt_tokens: Some(0),
            cached_tokens: Some(0),
            failed: 3,
        };
        assert!(contradictions(&mut v, &done, &Finished::default()).is_empty());
        assert!(
            v.notes[0].starts_with("3 requests of the window failed"),
            "{:?}",
            v.notes
        );
    }

    #[test]
    fn failed_scrapes_are_counted_with_their_cause_and_a_failed_end_leaves_counters_unknown() {
        let s = [
            scrape(
                0,
                1.0,
                "start",
                &[
                    ("sglang:num_running_reqs", 1.0),
                    ("sglang:prompt_tokens_total", 5.0),
                ],
            ),
            scrape(0, 1.5, "tick", &[("sglang:num_running_reqs", 3.0)]),
            failed(
                0,
                2.0,
                "end",
                "/metrics: request failed: connection refused",
            ),
        ];
        let v = summarize(&s).unwrap();
        assert_eq!(v.scrapes, 2);
        assert_eq!(v.failed_scrapes, 1);
        assert_eq!(
            v.scrape_error.as_deref(),
            Some("/metrics: request failed: connection refused")
        );
        assert_eq!(v.prompt_tokens, None);
        assert_eq!(v.running.unwrap().max, 3.0);
        assert!(
            v.notes.iter().any(|n| n.contains("last scrape failed")),
            "{:?}",
            v.notes
        );
        // Only failures: the view still says so.
        let v = summarize(&[failed(0, 1.0, "start", "HTTP 500")]).unwrap();
        assert_eq!((v.engine.as_str(), v.failed_scrapes), ("", 1));
    }

    #[test]
    fn non_finite_values_never_reach_the_point_record() {
        let s = [
            scrape(
                0,
                1.0,
                "start",
                &[
                    ("sglang:num_running_reqs", f64::NAN),
                    ("sglang:prompt_tokens_total", 0.0),
                    ("sglang:generation_tokens_total", 0.0),
                ],
            ),
            scrape(
                0,
                2.0,
                "end",
                &[
                    ("sglang:num_running_reqs", 2.0),
                    ("sglang:prompt_tokens_total", f64::INFINITY),
                    ("sglang:generation_tokens_total", f64::NAN),
                ],
            ),
        ];
        let v = summarize(&s).unwrap();
        assert_eq!(v.running.unwrap().mean, 2.0);
        assert_eq!((v.prompt_tokens, v.generation_tokens), (None, None));
        let back: ServerView = serde_json::from_str(&serde_json::to_string(&v).unwrap()).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn a_point_keeps_in_memory_only_the_names_it_reads() {
        let mut values: BTreeMap<String, f64> = (0..4096)
            .map(|i| (format!("junk_{i}_{}", "x".repeat(100)), 1.0))
            .collect();
        values.insert("sglang:num_running_reqs".into(), 2.0);
        values.insert("sglang:spec_accept_length".into(), 0.0);
        let kept = retained(&values);
        assert_eq!(kept.len(), 1);
        let mut family_only = BTreeMap::new();
        family_only.insert("sglang:spec_accept_length".to_string(), 0.0);
        assert_eq!(retained(&family_only).len(), 1, "the family's sign is kept");
    }
}
