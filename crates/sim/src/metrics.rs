//! Scheduler state shared with the HTTP side: live gauges for `/server_info` and the
//! Prometheus histograms and counters for `/metrics`.

use std::fmt::Write;

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// A Prometheus histogram with fixed buckets.
#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    buckets: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::with_buckets(LATENCY_BUCKETS)
    }
}

impl Histogram {
    /// An empty histogram over these upper bounds (ascending, without +Inf).
    pub(crate) fn with_buckets(buckets: &'static [f64]) -> Self {
        Histogram {
            buckets,
            counts: vec![0; buckets.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one observation in seconds.
    pub(crate) fn observe(&mut self, x: f64) {
        if let Some(i) = self.buckets.iter().position(|b| x <= *b) {
            self.counts[i] += 1;
        }
        self.sum += x;
        self.count += 1;
    }

    /// Upper bounds with their cumulative counts (without +Inf).
    pub(crate) fn cumulative(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.buckets
            .iter()
            .zip(&self.counts)
            .scan(0, |cum, (b, c)| {
                *cum += c;
                Some((*b, *cum))
            })
    }

    /// Sum of the observations.
    pub(crate) fn sum(&self) -> f64 {
        self.sum
    }

    /// Number of observations.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The family's samples without its `# HELP` and `# TYPE` lines.
    fn render_samples(&self, out: &mut String, name: &str, labels: &str) {
        let mut cum = 0;
        for (b, c) in self.buckets.iter().zip(&self.counts) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {cum}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// Everything the scheduler publishes, updated every iteration.
#[derive(Debug, Clone, Default)]
pub(crate) struct SchedStats {
    /// Requests decoding or being prefilled.
    pub num_running_reqs: u64,
    /// Requests waiting to be scheduled.
    pub num_queue_reqs: u64,
    /// KV tokens in use (running requests plus locked cache).
    pub num_used_tokens: u64,
    /// num_used_tokens / pool capacity.
    pub token_usage: f64,
    /// Generated tokens per second over the last decode log interval.
    pub gen_throughput: f64,
    /// Mean speculative accept length over the last decode log interval (0 when off).
    pub spec_accept_length: f64,
    /// Prompt tokens served from the cache / all prompt tokens, since start.
    pub cache_hit_rate: f64,
    /// Time to first token, seconds (server side: receipt to the first output's deadline).
    pub ttft: Histogram,
    /// Seconds between consecutive tokens (a multi-token output splits its gap evenly).
    pub itl: Histogram,
    /// Seconds from receipt to the final output.
    pub e2e: Histogram,
    /// Prompt tokens of finished requests.
    pub prompt_tokens_total: u64,
    /// Generated tokens.
    pub generation_tokens_total: u64,
    /// Prompt tokens served from the cache.
    pub cached_tokens_total: u64,
    /// Finished requests.
    pub num_requests_total: u64,
    /// Generated tokens of finished requests (SGLang counts a request's output when it
    /// finishes).
    pub finished_generation_tokens: u64,
    /// Requests the latest retraction sent back to the queue (SGLang's gauge).
    pub num_retracted_reqs: u64,
    /// Requests retracted since start.
    pub num_retracted_requests_total: u64,
    /// The engine surfaces' extra counters (vLLM's and llama.cpp's metrics and log lines).
    pub engine: EngineStats,
    /// Prefill-decode disaggregation's queues and transfers (SGLang's PD families).
    pub pd: PdStats,
}

/// sglang 0.5.23's PD families (observability/metrics_collector.py, "PD disaggregation"),
/// exported by a prefill or decode worker; the simulator exports them only in those roles.
#[derive(Debug, Clone, Default)]
pub(crate) struct PdStats {
    /// `engine_type` of the worker (`prefill`, `decode`); None = not disaggregated.
    pub role: Option<&'static str>,
    /// Prefill requests waiting for their decode side's handshake.
    pub bootstrap_queue: u64,
    /// Prefill requests whose KV is moving.
    pub inflight_queue: u64,
    /// Decode requests fetching their prefill's layout.
    pub prealloc_queue: u64,
    /// Decode requests waiting for their KV.
    pub transfer_queue: u64,
    /// Milliseconds from the end of a prefill to the end of its transfer (prefill side).
    pub transfer_latency_ms: Histogram,
    /// MB (2^20 bytes) a transfer moved (prefill side).
    pub transfer_total_mb: Histogram,
    /// total_mb / 1024 / latency seconds (prefill side).
    pub transfer_speed_gb_s: Histogram,
    /// Milliseconds a request waited for the other side's handshake.
    pub bootstrap_ms: Histogram,
    /// Milliseconds from the handshake to a KV reservation.
    pub alloc_ms: Histogram,
    /// Requests whose handshake failed.
    pub bootstrap_failed: u64,
    /// Requests whose transfer failed.
    pub transfer_failed: u64,
    /// `sglang:per_stage_req_latency_seconds` by `stage`, in the order first observed.
    pub stages: Vec<(&'static str, Histogram)>,
}

/// Buckets of `sglang:kv_transfer_latency_ms`.
const TRANSFER_LATENCY_MS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0,
];
/// Buckets of `sglang:kv_transfer_total_mb`.
const TRANSFER_MB: &[f64] = &[1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 5000.0, 10000.0];
/// Buckets of `sglang:kv_transfer_speed_gb_s`.
const TRANSFER_SPEED: &[f64] = &[0.1, 0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 400.0];
/// Buckets of `sglang:kv_transfer_bootstrap_ms` and `sglang:kv_transfer_alloc_ms`.
const BOOTSTRAP_MS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0,
];

/// `exponential_buckets(start=0.001, width=1.62, length=30)`: the per-stage histogram's.
fn stage_buckets() -> &'static [f64] {
    static B: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    B.get_or_init(|| {
        let mut v = Vec::with_capacity(30);
        let mut x = 0.001;
        for _ in 0..30 {
            v.push(x);
            x *= 1.62;
        }
        v
    })
}

impl PdStats {
    /// Statistics of a worker in `role`.
    pub(crate) fn new(role: &'static str) -> Self {
        PdStats {
            role: Some(role),
            transfer_latency_ms: Histogram::with_buckets(TRANSFER_LATENCY_MS),
            transfer_total_mb: Histogram::with_buckets(TRANSFER_MB),
            transfer_speed_gb_s: Histogram::with_buckets(TRANSFER_SPEED),
            bootstrap_ms: Histogram::with_buckets(BOOTSTRAP_MS),
            alloc_ms: Histogram::with_buckets(BOOTSTRAP_MS),
            ..PdStats::default()
        }
    }

    /// Records `seconds` in the `stage` of `sglang:per_stage_req_latency_seconds`.
    pub(crate) fn stage(&mut self, stage: &'static str, seconds: f64) {
        match self.stages.iter_mut().find(|(s, _)| *s == stage) {
            Some((_, h)) => h.observe(seconds),
            None => {
                let mut h = Histogram::with_buckets(stage_buckets());
                h.observe(seconds);
                self.stages.push((stage, h));
            }
        }
    }

    /// Records one transfer as SGLang's prefill does.
    pub(crate) fn transfer(&mut self, latency_ms: f64, total_mb: f64, speed_gb_s: f64) {
        self.transfer_latency_ms.observe(latency_ms);
        self.transfer_total_mb.observe(total_mb);
        self.transfer_speed_gb_s.observe(speed_gb_s);
    }

    /// The families, with their `# HELP` and `# TYPE` lines, under `labels`.
    fn render(&self, s: &mut String, labels: &str) {
        let gauges = [
            (
                "sglang:num_prefill_bootstrap_queue_reqs",
                "The number of requests in the prefill bootstrap queue.",
                self.bootstrap_queue,
            ),
            (
                "sglang:num_prefill_inflight_queue_reqs",
                "The number of requests in the prefill inflight queue.",
                self.inflight_queue,
            ),
            (
                "sglang:num_decode_prealloc_queue_reqs",
                "The number of requests in the decode prealloc queue.",
                self.prealloc_queue,
            ),
            (
                "sglang:num_decode_transfer_queue_reqs",
                "The number of requests in the decode transfer queue.",
                self.transfer_queue,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v}"
            );
        }
        for (h, name, help) in [
            (
                &self.transfer_speed_gb_s,
                "sglang:kv_transfer_speed_gb_s",
                "Histogram of KV cache transfer speed in GB/s.",
            ),
            (
                &self.transfer_latency_ms,
                "sglang:kv_transfer_latency_ms",
                "Histogram of KV cache transfer latency in ms.",
            ),
            (
                &self.bootstrap_ms,
                "sglang:kv_transfer_bootstrap_ms",
                "Histogram of KV transfer bootstrap time in ms.",
            ),
            (
                &self.alloc_ms,
                "sglang:kv_transfer_alloc_ms",
                "Histogram of KV transfer allocation waiting time in ms.",
            ),
            (
                &self.transfer_total_mb,
                "sglang:kv_transfer_total_mb",
                "Histogram of KV cache transfer size in MB.",
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} histogram");
            if h.count() > 0 {
                h.render_samples(s, name, labels);
            }
        }
        for (name, help, v) in [
            (
                "sglang:num_bootstrap_failed_reqs_total",
                "The number of bootstrap failed requests.",
                self.bootstrap_failed,
            ),
            (
                "sglang:num_transfer_failed_reqs_total",
                "The number of transfer failed requests.",
                self.transfer_failed,
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            if v > 0 {
                let _ = writeln!(s, "{name}{{{labels}}} {v}");
            }
        }
        let name = "sglang:per_stage_req_latency_seconds";
        let _ = writeln!(
            s,
            "# HELP {name} The latency of each stage of requests.\n# TYPE {name} histogram"
        );
        for (stage, h) in &self.stages {
            h.render_samples(s, name, &format!("{labels},stage=\"{stage}\""));
        }
    }
}

/// Counters and histograms the vLLM and llama.cpp surfaces report (all kept in every mode).
#[derive(Debug, Clone, Default)]
pub(crate) struct EngineStats {
    /// Seconds from receipt to the first scheduling (vLLM's queue time).
    pub queue_time: Histogram,
    /// Prompt tokens of requests whose prefill completed (cached ones included).
    pub prompt_tokens: u64,
    /// Prompt tokens actually computed (not served from the cache).
    pub prompt_tokens_computed: u64,
    /// Prompt tokens served from the cache, of requests whose prefill completed.
    pub prompt_tokens_cached: u64,
    /// Prompt tokens of finished requests served from the cache (llama.cpp's
    /// `prompt_tokens_cached_total`, beside `prompt_tokens_computed`).
    pub prompt_tokens_cache_n: u64,
    /// Prefix-cache lookups in tokens (each admitted request's prompt length).
    pub prefix_queries: u64,
    /// Prefix-cache hits in tokens.
    pub prefix_hits: u64,
    /// Lookups and hits since the last prefix-cache reset (vLLM's log line).
    pub prefix_queries_since_reset: u64,
    /// Hits since the last prefix-cache reset.
    pub prefix_hits_since_reset: u64,
    /// Running requests sent back to the queue.
    pub preemptions: u64,
    /// Requests finished by reaching their length limit.
    pub finished_length: u64,
    /// Requests aborted (client gone or asked).
    pub finished_abort: u64,
    /// Model seconds spent evaluating prompts (llama.cpp `prompt_seconds_total`).
    pub prompt_seconds: f64,
    /// Model seconds spent generating (llama.cpp `tokens_predicted_seconds_total`).
    pub predicted_seconds: f64,
    /// Forward passes (llama.cpp `n_decode_total`).
    pub n_decode: u64,
    /// Requests in the batch, summed over forward passes (for busy slots per decode).
    pub n_busy_slots: u64,
    /// Largest context (prompt + output) seen.
    pub n_tokens_max: u64,
    /// Requests waiting for a slot or for room (llama.cpp `requests_deferred`).
    pub deferred: u64,
    /// Prompt throughput of the last finished request's prompt, tokens/s (llama.cpp gauge).
    pub last_prompt_tok_s: f64,
    /// Generation throughput of the last finished request, tokens/s (llama.cpp gauge).
    pub last_predicted_tok_s: f64,
    /// Draft tokens proposed by speculative decoding, of finished requests (llama.cpp
    /// `spec_decode_num_draft_tokens_total`).
    pub spec_draft_tokens: u64,
    /// Draft tokens the target model accepted, of finished requests
    /// (`spec_decode_num_accepted_tokens_total`).
    pub spec_accepted_tokens: u64,
    /// Verification steps, of finished requests (`spec_decode_num_drafts_total`).
    pub spec_verify_steps: u64,
    /// Accepted draft tokens by their position in the draft, of finished requests
    /// (`spec_decode_num_accepted_tokens_per_pos_total{position}`; empty until a speculative
    /// request finished).
    pub spec_accepted_per_pos: Vec<u64>,
}

/// vLLM's bucket bounds (v1/metrics/loggers.py `PrometheusStatLogger`; quoted from memory of
/// its source, not checked against 0.33).
pub(crate) const VLLM_TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's inter-token latency buckets.
pub(crate) const VLLM_ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's request latency buckets (E2E, queue).
pub(crate) const VLLM_REQUEST_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

impl SchedStats {
    /// Empty statistics whose histograms use `api`'s buckets.
    pub(crate) fn for_api(api: super::api::Api) -> Self {
        let mut s = SchedStats::default();
        if api == super::api::Api::Vllm {
            s.ttft = Histogram::with_buckets(VLLM_TTFT_BUCKETS);
            s.itl = Histogram::with_buckets(VLLM_ITL_BUCKETS);
            s.e2e = Histogram::with_buckets(VLLM_REQUEST_BUCKETS);
            s.engine.queue_time = Histogram::with_buckets(VLLM_REQUEST_BUCKETS);
        }
        s
    }

    /// Prometheus text exposition, as SGLang 0.5's `prometheus_client` writes it: every
    /// family and metric carries labels, so a counter or histogram has no sample until it is
    /// first counted (`srt/metrics/collector.py`): the prompt, generation and request counters
    /// appear with the first finished request, `cached_tokens_total` with the first cache hit,
    /// a histogram with its first observation; until then only its `# HELP` and `# TYPE`.
    pub(crate) fn render(&self, model: &str, max_total_num_tokens: u64) -> String {
        let mut labels = format!("model_name=\"{}\"", model.replace('"', "'"));
        if let Some(role) = self.pd.role {
            // SGLang labels every family with `engine_type` (`unified` when not disaggregated,
            // which the simulator leaves out).
            let _ = write!(labels, ",engine_type=\"{role}\"");
        }
        let mut s = String::new();
        self.render_histograms(&mut s, &labels);
        self.render_counters(&mut s, &labels);
        self.render_gauges(&mut s, &labels, max_total_num_tokens);
        if self.pd.role.is_some() {
            self.pd.render(&mut s, &labels);
        }
        s
    }

    /// The latency histograms, each with samples once it has an observation.
    fn render_histograms(&self, s: &mut String, labels: &str) {
        for (h, name, help) in [
            (
                &self.ttft,
                "sglang:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
            ),
            (
                &self.itl,
                "sglang:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
            ),
            (
                &self.e2e,
                "sglang:e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
            ),
            (
                &self.engine.queue_time,
                "sglang:queue_time_seconds",
                "Histogram of queueing time in seconds.",
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} histogram");
            if h.count() > 0 {
                h.render_samples(s, name, labels);
            }
        }
    }

    /// The token and request counters, each with a sample once it is first counted.
    fn render_counters(&self, s: &mut String, labels: &str) {
        let finished = self.num_requests_total > 0;
        let counters = [
            (
                "sglang:prompt_tokens_total",
                "Number of prefill tokens processed.",
                self.prompt_tokens_total,
                finished,
            ),
            (
                "sglang:generation_tokens_total",
                "Number of generation tokens processed.",
                self.finished_generation_tokens,
                finished,
            ),
            (
                "sglang:cached_tokens_total",
                "Number of cached prompt tokens by source (device/host/storage).",
                self.cached_tokens_total,
                self.cached_tokens_total > 0,
            ),
            (
                "sglang:num_requests_total",
                "Number of requests processed.",
                self.num_requests_total,
                finished,
            ),
            (
                "sglang:num_retracted_requests_total",
                "Number of retracted requests.",
                self.num_retracted_requests_total,
                self.num_retracted_requests_total > 0,
            ),
        ];
        for (name, help, v, created) in counters {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            // SGLang 0.5.23 counts a request's cached tokens by the tier that served them
            // (`scheduler_components/output_streamer.py`); without HiCache every hit is the
            // device's.
            let tier = match name {
                "sglang:cached_tokens_total" => ",cache_source=\"device\"",
                _ => "",
            };
            if created {
                let _ = writeln!(s, "{name}{{{labels}{tier}}} {v}");
            }
        }
    }

    /// The gauges, always with a sample.
    fn render_gauges(&self, s: &mut String, labels: &str, max_total_num_tokens: u64) {
        let gauges = [
            (
                "sglang:num_running_reqs",
                "The number of running requests.",
                self.num_running_reqs as f64,
            ),
            (
                "sglang:num_queue_reqs",
                "The number of requests in the waiting queue.",
                self.num_queue_reqs as f64,
            ),
            (
                "sglang:num_used_tokens",
                "The number of used tokens.",
                self.num_used_tokens as f64,
            ),
            ("sglang:token_usage", "The token usage.", self.token_usage),
            (
                "sglang:num_retracted_reqs",
                "The number of retracted requests.",
                self.num_retracted_reqs as f64,
            ),
            (
                "sglang:cache_hit_rate",
                "The prefix cache hit rate.",
                self.cache_hit_rate,
            ),
            (
                "sglang:gen_throughput",
                "The generation throughput (token/s).",
                self.gen_throughput,
            ),
            (
                "sglang:max_total_num_tokens",
                "Maximum total number of tokens in the KV pool.",
                max_total_num_tokens as f64,
            ),
            (
                "sglang:spec_accept_length",
                "The average acceptance length of speculative decoding.",
                self.spec_accept_length,
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {v}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family() {
        let mut st = SchedStats::default();
        st.ttft.observe(0.003);
        let text = st.render("m", 1000);
        assert!(text.contains(
            "sglang:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.005\"} 1"
        ));
        assert!(text.contains("sglang:max_total_num_tokens{model_name=\"m\"} 1000"));
        assert!(text.contains("# TYPE sglang:num_requests_total counter"));
    }

    /// SGLang 0.5.23's labelled counters have no sample before their first `inc`.
    #[test]
    fn counters_appear_with_the_first_finished_request_and_the_cached_one_with_a_hit() {
        let sample = |text: &str, name: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{name}{{")))
                .map(|l| l.rsplit(' ').next().unwrap().to_string())
        };
        let mut st = SchedStats::default();
        let fresh = st.render("m", 1000);
        for name in [
            "sglang:prompt_tokens_total",
            "sglang:generation_tokens_total",
            "sglang:num_requests_total",
            "sglang:cached_tokens_total",
            "sglang:num_retracted_requests_total",
            "sglang:e2e_request_latency_seconds_count",
        ] {
            assert_eq!(
                sample(&fresh, name),
                None,
                "{name} in a fresh server:\n{fresh}"
            );
        }
        assert!(fresh.contains("# TYPE sglang:prompt_tokens_total counter"));
        assert_eq!(
            sample(&fresh, "sglang:num_running_reqs").as_deref(),
            Some("0")
        );
        // Decoding counts nothing until the request finishes.
        st.generation_tokens_total = 5;
        assert_eq!(
            sample(&st.render("m", 1000), "sglang:generation_tokens_total"),
            None
        );
        st.prompt_tokens_total = 64;
        st.finished_generation_tokens = 8;
        st.num_requests_total = 1;
        let one = st.render("m", 1000);
        assert_eq!(
            sample(&one, "sglang:prompt_tokens_total").as_deref(),
            Some("64")
        );
        assert_eq!(
            sample(&one, "sglang:generation_tokens_total").as_deref(),
            Some("8")
        );
        assert_eq!(
            sample(&one, "sglang:num_requests_total").as_deref(),
            Some("1")
        );
        assert_eq!(
            sample(&one, "sglang:cached_tokens_total"),
            None,
            "no hit yet"
        );
        st.cached_tokens_total = 63;
        let hit = st.render("m", 1000);
        assert_eq!(
            sample(&hit, "sglang:cached_tokens_total").as_deref(),
            Some("63")
        );
        assert!(
            hit.contains("sglang:cached_tokens_total{model_name=\"m\",cache_source=\"device\"} 63"),
            "the tier that served the hit, as SGLang labels it:\n{hit}"
        );
    }

    /// A PD worker's families: SGLang's names, `engine_type` on every family, the queues as
    /// gauges, the transfer histograms and the per-stage one only once observed.
    #[test]
    fn pd_families_carry_engine_type() {
        let mut st = SchedStats {
            pd: PdStats::new("prefill"),
            ..SchedStats::default()
        };
        let fresh = st.render("m", 10);
        assert!(
            fresh.contains("sglang:num_running_reqs{model_name=\"m\",engine_type=\"prefill\"} 0")
        );
        for g in [
            "sglang:num_prefill_bootstrap_queue_reqs",
            "sglang:num_prefill_inflight_queue_reqs",
            "sglang:num_decode_prealloc_queue_reqs",
            "sglang:num_decode_transfer_queue_reqs",
        ] {
            assert!(
                fresh.contains(&format!(
                    "{g}{{model_name=\"m\",engine_type=\"prefill\"}} 0"
                )),
                "{g}\n{fresh}"
            );
        }
        assert!(fresh.contains("# TYPE sglang:kv_transfer_latency_ms histogram"));
        assert!(!fresh.contains("sglang:kv_transfer_latency_ms_count"));
        assert!(!fresh.contains("stage=\""));
        st.pd.transfer(6.0, 125.0, 19.5);
        st.pd.stage("prefill_transfer_kv_cache", 0.006);
        st.pd.bootstrap_queue = 2;
        let text = st.render("m", 10);
        assert!(text.contains(
            "sglang:kv_transfer_latency_ms_bucket{model_name=\"m\",engine_type=\"prefill\",le=\"10\"} 1"
        ));
        assert!(text.contains(
            "sglang:kv_transfer_total_mb_sum{model_name=\"m\",engine_type=\"prefill\"} 125"
        ));
        assert!(text.contains(
            "sglang:per_stage_req_latency_seconds_count{model_name=\"m\",engine_type=\"prefill\",stage=\"prefill_transfer_kv_cache\"} 1"
        ));
        assert!(text.contains(
            "sglang:num_prefill_bootstrap_queue_reqs{model_name=\"m\",engine_type=\"prefill\"} 2"
        ));
        // Not disaggregated: none of it, and no engine_type.
        let plain = SchedStats::default().render("m", 10);
        assert!(!plain.contains("engine_type") && !plain.contains("kv_transfer"));
    }
}
