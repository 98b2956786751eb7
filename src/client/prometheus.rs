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

/// One sample line, `name{labels} value [timestamp]`, its labels still as written (`{...}` or
/// empty); None for a comment or a blank line.
struct Line<'a> {
    name: &'a str,
    labels: &'a str,
    value: f64,
}

fn sample_line(i: usize, line: &str) -> Result<Option<Line<'_>>, ScrapeError> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
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
    let mut labels = "";
    if rest.starts_with('{') {
        let end = label_end(rest).ok_or_else(|| bad("unclosed labels"))?;
        labels = &rest[..end];
        rest = &rest[end..];
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or_else(|| bad("no value"))?;
    let value = parse_value(value).ok_or_else(|| bad("the value is not a number"))?;
    Ok(Some(Line {
        name,
        labels,
        value,
    }))
}

/// Histograms whose `stage` label is kept (see [`parse`]).
const STAGED: &[&str] = &["sglang:per_stage_req_latency_seconds"];

/// Counters whose label says which cache tier served a prompt's cached tokens: each tier is
/// kept apart too, under `NAME{label="..."}`, beside the sum over tiers. SGLang 0.5.23's
/// `sglang:cached_tokens_total{cache_source}` (`device`, `host`, `storage`; `total` where a
/// request came without its breakdown: `observability/metrics_collector.py`), vLLM's
/// `vllm:prompt_tokens_cached_by_source_total{source}` (vllm PR 56318).
pub(crate) const TIERED: &[(&str, &str)] = &[
    ("sglang:cached_tokens_total", "cache_source"),
    ("vllm:prompt_tokens_cached_by_source_total", "source"),
];

/// Reads the text format. Fails on a sample line it cannot read (a server that sends
/// something else entirely), never panics; keeps at most [`MAX_NAMES`] names of at most
/// [`MAX_NAME_BYTES`] and says what it left out.
pub(crate) fn parse(text: &str) -> Result<Scrape, ScrapeError> {
    let mut out = Values::new();
    let (mut past_names, mut long_names) = (0usize, 0usize);
    for (i, line) in text.lines().enumerate() {
        let Some(Line {
            name,
            value,
            labels,
        }) = sample_line(i, line)?
        else {
            continue;
        };
        if name.ends_with("_bucket") || name.ends_with("_created") {
            continue;
        }
        // SGLang's per-stage latency (a PD request's bootstrap, forward, transfer, ...) is
        // one histogram with a `stage` label: each stage is kept apart too, under
        // `NAME{stage="..."}`, beside the sum over stages.
        if let Some(base) = STAGED.iter().find(|b| name.starts_with(**b))
            && (name.ends_with("_sum") || name.ends_with("_count"))
            && let Some((_, stage)) = self::labels(labels).into_iter().find(|(k, _)| k == "stage")
            && out.len() < MAX_NAMES
        {
            let key = format!("{name}{{stage=\"{stage}\"}}");
            if key.len() <= MAX_NAME_BYTES && base.len() < name.len() {
                *out.entry(key).or_insert(0.0) += value;
            }
        }
        if let Some((_, label)) = TIERED.iter().find(|(n, _)| *n == name)
            && let Some((_, tier)) = self::labels(labels).into_iter().find(|(k, _)| k == label)
            && out.len() < MAX_NAMES
        {
            let key = format!("{name}{{{label}=\"{tier}\"}}");
            if key.len() <= MAX_NAME_BYTES {
                *out.entry(key).or_insert(0.0) += value;
            }
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
            servebench_model::text::count_s(past_names, "sample")
        ));
    }
    if long_names > 0 {
        cut.push(format!(
            "{} with names longer than {MAX_NAME_BYTES} bytes",
            servebench_model::text::count_s(long_names, "sample")
        ));
    }
    Ok(Scrape {
        values: out,
        cut: (!cut.is_empty()).then(|| format!("left out {}", cut.join(" and "))),
    })
}

/// One sample with its labels kept apart, for an exporter whose series are one per device
/// (a DCGM exporter's `gpu="0"`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Series {
    pub name: String,
    /// The labels in their order, values unescaped.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Series {
    /// The value of label `key`, if the series has it.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Longest label value kept, in bytes (a GPU's UUID or model name is under 100); longer ones
/// are cut.
const MAX_LABEL_BYTES: usize = 256;

/// The samples whose name `wanted` keeps, each with its labels, at most `max` of them (the
/// rest dropped): the same reading of the text format as [`parse`], failing on the same lines.
pub(crate) fn series(
    text: &str,
    wanted: impl Fn(&str) -> bool,
    max: usize,
) -> Result<Vec<Series>, ScrapeError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(l) = sample_line(i, line)? else {
            continue;
        };
        if out.len() >= max || !wanted(l.name) {
            continue;
        }
        out.push(Series {
            name: l.name.to_string(),
            labels: labels(l.labels),
            value: l.value,
        });
    }
    Ok(out)
}

/// `{a="x", b="y\"z"}` into its pairs; a pair it cannot read ends the list.
fn labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let inner = s
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or("");
    let mut rest = inner;
    loop {
        rest = rest.trim_start_matches([',', ' ', '\t']);
        let Some(eq) = rest.find('=') else {
            break;
        };
        let key = rest[..eq].trim();
        let Some(after) = rest[eq + 1..].trim_start().strip_prefix('"') else {
            break;
        };
        let (mut value, mut escaped, mut end) = (String::new(), false, None);
        for (j, c) in after.char_indices() {
            let ch = match (escaped, c) {
                (false, '\\') => {
                    escaped = true;
                    continue;
                }
                (false, '"') => {
                    end = Some(j + 1);
                    break;
                }
                (true, 'n') => '\n',
                (_, c) => c,
            };
            escaped = false;
            if value.len() < MAX_LABEL_BYTES {
                value.push(ch);
            }
        }
        let Some(end) = end else {
            break;
        };
        out.push((key.to_string(), value));
        rest = &after[end..];
    }
    out
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
    parse(&fetch(client, "/metrics", SCRAPE_TIMEOUT).await?)
}

/// The text at `path`, at most [`MAX_SCRAPE_BYTES`] read within `timeout`.
pub(crate) async fn fetch(
    client: &Client,
    path: &str,
    timeout: Duration,
) -> Result<String, ScrapeError> {
    let (status, body) = client.get_bounded(path, timeout, MAX_SCRAPE_BYTES).await?;
    if status != 200 {
        return Err(ScrapeError::Status(status));
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
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

    /// SGLang 0.5.23 labels its cached tokens by the tier that served them (and vLLM by
    /// source): each tier is kept apart beside the sum, which stays the engine's total.
    #[test]
    fn cached_tokens_are_kept_by_tier_beside_their_sum() {
        let text = "sglang:cached_tokens_total{model_name=\"m\",cache_source=\"device\"} 300\n\
            sglang:cached_tokens_total{model_name=\"m\",cache_source=\"host\"} 64\n\
            vllm:prompt_tokens_cached_by_source_total{engine=\"0\",source=\"disk\"} 7\n\
            vllm:prompt_tokens_cached_by_source_total{engine=\"1\",source=\"disk\"} 5\n\
            sglang:num_requests_total{is_streaming=\"true\"} 4\n";
        let v = parse(text).unwrap().values;
        assert_eq!(v["sglang:cached_tokens_total"], 364.0);
        assert_eq!(
            v["sglang:cached_tokens_total{cache_source=\"device\"}"],
            300.0
        );
        assert_eq!(v["sglang:cached_tokens_total{cache_source=\"host\"}"], 64.0);
        assert_eq!(
            v["vllm:prompt_tokens_cached_by_source_total{source=\"disk\"}"],
            12.0
        );
        assert_eq!(v.len(), 6, "{v:?}");
    }

    #[test]
    fn series_keep_their_labels_unescaped_and_are_bounded() {
        let text = "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n\
            DCGM_FI_DEV_GPU_TEMP{gpu=\"0\", UUID=\"GPU-a\",modelName=\"NVIDIA \\\"X\\\", 80GB\"} 45\n\
            DCGM_FI_DEV_GPU_TEMP{gpu=\"1\",UUID=\"GPU-b\"} 47\n\
            other 3\n\
            DCGM_FI_DEV_GPU_TEMP 9\n";
        let s = series(text, |n| n.starts_with("DCGM_"), 10).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].label("gpu"), Some("0"));
        assert_eq!(s[0].label("UUID"), Some("GPU-a"));
        assert_eq!(s[0].label("modelName"), Some("NVIDIA \"X\", 80GB"));
        assert_eq!(s[1].value, 47.0);
        assert!(s[2].labels.is_empty());
        assert_eq!(series(text, |_| true, 2).unwrap().len(), 2);
        assert!(series("x{a=\"1\" 2", |_| true, 9).is_err());
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
