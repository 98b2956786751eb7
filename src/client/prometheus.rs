//! The Prometheus text exposition format, read into one number per metric name: what
//! servebench keeps of a server's `/metrics` while a point runs.
//!
//! A small bounded parser rather than a crate: `prometheus-parse` drops every name with a
//! colon (`sglang:...`, `vllm:...`), the names that matter here (docs/research/load-peers.md
//! section 9). A sample line is `name{labels} value [timestamp]`; `#` lines are comments.
//! Samples of one name with different labels (tensor-parallel ranks, finished reasons) are
//! summed. Histogram buckets (`_bucket`) and `_created` samples are left out; a histogram's
//! `_sum` and `_count` are kept.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Client, ClientError};

/// The most bytes one scrape reads: a real engine's `/metrics` is 10-300 KB.
pub(crate) const MAX_SCRAPE_BYTES: usize = 4 << 20;
/// Most distinct names kept from one scrape (an engine has a few hundred).
pub(crate) const MAX_NAMES: usize = 1024;
/// Longest name kept, in bytes (an engine's are under 80).
pub(crate) const MAX_NAME_BYTES: usize = 200;
/// How long one scrape may take.
pub(crate) const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// One scrape: metric name -> value (summed over label sets).
pub(crate) type Values = BTreeMap<String, f64>;

/// What one scrape kept, and what its budget left out.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Scrape {
    pub values: Values,
    /// What the budget left out, in words (None when nothing was).
    pub cut: Option<String>,
}

/// Why a scrape gave nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScrapeError {
    /// The request failed (or its body passed [`MAX_SCRAPE_BYTES`]).
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The server answered with another status.
    #[error("/metrics answered HTTP {0}")]
    Status(u16),
    /// The body is not the text format.
    #[error("/metrics line {line}: {message}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Reads the text format. Fails on a sample line it cannot read (a server that sends
/// something else entirely), never panics; keeps at most [`MAX_NAMES`] names of at most
/// [`MAX_NAME_BYTES`] and says what it left out.
pub(crate) fn parse(text: &str) -> Result<Scrape, ScrapeError> {
    let mut out = Values::new();
    let (mut past_names, mut long_names) = (0usize, 0usize);
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |message: &str| ScrapeError::Parse {
            line: i + 1,
            message: message.to_string(),
        };
        let name_end = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(line.len());
        let name = &line[..name_end];
        if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(bad("expected a metric name"));
        }
        let mut rest = &line[name_end..];
        if rest.starts_with('{') {
            rest = &rest[label_end(rest).ok_or_else(|| bad("unclosed labels"))?..];
        }
        let value = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| bad("no value"))?;
        let value = parse_value(value).ok_or_else(|| bad("the value is not a number"))?;
        if name.ends_with("_bucket") || name.ends_with("_created") {
            continue;
        }
        if name.len() > MAX_NAME_BYTES {
            long_names += 1;
            continue;
        }
        if out.len() >= MAX_NAMES && !out.contains_key(name) {
            past_names += 1;
            continue;
        }
        *out.entry(name.to_string()).or_insert(0.0) += value;
    }
    let mut cut = Vec::new();
    if past_names > 0 {
        cut.push(format!(
            "{} past the first {MAX_NAMES} names",
            crate::text::count_s(past_names, "sample")
        ));
    }
    if long_names > 0 {
        cut.push(format!(
            "{} with names longer than {MAX_NAME_BYTES} bytes",
            crate::text::count_s(long_names, "sample")
        ));
    }
    Ok(Scrape {
        values: out,
        cut: (!cut.is_empty()).then(|| format!("left out {}", cut.join(" and "))),
    })
}

/// The byte just past the closing `}` of a label set starting at `s[0] == '{'`; quoted
/// values may hold `}` and escaped quotes.
fn label_end(s: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in s.char_indices().skip(1) {
        match (quoted, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => quoted = !quoted,
            (false, _, '}') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// Scrapes `/metrics` once, reading at most [`MAX_SCRAPE_BYTES`].
pub(crate) async fn scrape(client: &Client) -> Result<Scrape, ScrapeError> {
    let (status, body) = client
        .get_bounded("/metrics", SCRAPE_TIMEOUT, MAX_SCRAPE_BYTES)
        .await?;
    if status != 200 {
        return Err(ScrapeError::Status(status));
    }
    parse(&String::from_utf8_lossy(&body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_colon_names_sums_label_sets_and_skips_buckets() {
        let text = "# HELP sglang:num_running_reqs The number of running requests.\n\
            # TYPE sglang:num_running_reqs gauge\n\
            sglang:num_running_reqs{model_name=\"m\",tp_rank=\"0\"} 3\n\
            sglang:num_running_reqs{model_name=\"m\",tp_rank=\"1\"} 4.5\n\
            vllm:request_success_total{finished_reason=\"length\"} 7\n\
            vllm:request_success_total{finished_reason=\"stop\"} 2 1700000000000\n\
            sglang:ttft_seconds_bucket{le=\"0.1\"} 5\n\
            sglang:ttft_seconds_bucket{le=\"+Inf\"} 9\n\
            sglang:ttft_seconds_sum{model_name=\"a}b \\\"q\\\"\"} 1.25\n\
            sglang:ttft_seconds_count 9\n\
            process_start_time_seconds 1.7e9\n\
            x_created 12\n\
            nan_metric NaN\n";
        let v = parse(text).unwrap().values;
        assert_eq!(v["sglang:num_running_reqs"], 7.5);
        assert_eq!(v["vllm:request_success_total"], 9.0);
        assert_eq!(v["sglang:ttft_seconds_sum"], 1.25);
        assert_eq!(v["sglang:ttft_seconds_count"], 9.0);
        assert_eq!(v["process_start_time_seconds"], 1.7e9);
        assert!(v["nan_metric"].is_nan());
        assert!(!v.contains_key("sglang:ttft_seconds_bucket"));
        assert!(!v.contains_key("x_created"));
    }

    #[test]
    fn garbage_is_an_error_with_its_line() {
        let e = parse("ok 1\n<html>\n").unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        assert!(parse("m{a=\"1\" 2").is_err(), "unclosed labels");
        assert!(parse("m notanumber").is_err());
        assert!(parse("m").is_err());
    }

    #[test]
    fn names_are_bounded_and_what_is_left_out_is_said() {
        let text: String = (0..MAX_NAMES + 50).map(|i| format!("m{i} 1\n")).collect();
        let s = parse(&text).unwrap();
        assert_eq!(s.values.len(), MAX_NAMES);
        assert_eq!(
            s.cut.as_deref(),
            Some("left out 50 samples past the first 1024 names")
        );
        let long = format!("{} 1\nshort 2\n", "n".repeat(MAX_NAME_BYTES + 1));
        let s = parse(&long).unwrap();
        assert_eq!(s.values.len(), 1);
        assert!(
            s.cut
                .unwrap()
                .contains("1 sample with names longer than 200 bytes")
        );
        assert_eq!(parse("a 1\n").unwrap().cut, None);
    }
}
