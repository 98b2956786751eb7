//! Scheduler state shared with the HTTP side: live gauges for `/server_info` and the
//! Prometheus histograms and counters for `/metrics`.

use std::fmt::Write;

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0,
];

/// A Prometheus histogram with fixed buckets.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; LATENCY_BUCKETS.len()],
            sum: 0.0,
            count: 0,
        }
    }
}

impl Histogram {
    /// Records one observation in seconds.
    pub fn observe(&mut self, x: f64) {
        if let Some(i) = LATENCY_BUCKETS.iter().position(|b| x <= *b) {
            self.counts[i] += 1;
        }
        self.sum += x;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in LATENCY_BUCKETS.iter().zip(&self.counts) {
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
pub struct SchedStats {
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
}

impl SchedStats {
    /// Prometheus text exposition.
    pub fn render(&self, model: &str, max_total_num_tokens: u64) -> String {
        let labels = format!("model_name=\"{}\"", model.replace('"', "'"));
        let mut s = String::new();
        self.ttft.render(
            &mut s,
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &labels,
        );
        self.itl.render(
            &mut s,
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &labels,
        );
        self.e2e.render(
            &mut s,
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            &labels,
        );
        let counters = [
            (
                "sglang:prompt_tokens_total",
                "Number of prefill tokens processed.",
                self.prompt_tokens_total,
            ),
            (
                "sglang:generation_tokens_total",
                "Number of generation tokens processed.",
                self.generation_tokens_total,
            ),
            (
                "sglang:cached_tokens_total",
                "Number of cached prompt tokens.",
                self.cached_tokens_total,
            ),
            (
                "sglang:num_requests_total",
                "Number of requests processed.",
                self.num_requests_total,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                s,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {v}"
            );
        }
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
        s
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
}
