//! GuideLLM 0.8.1's benchmark report (`benchmarks.json`, `GenerativeBenchmarksReport`
//! `metadata.version` 2, as `guidellm run --output kind=json` saves it; `kind=yaml`'s
//! `benchmarks.yaml` is the same dump in YAML) read into servebench's
//! metrics. Each of its `benchmarks` (one per strategy: `concurrent@2`, a sweep's rates) is a
//! point. GuideLLM's aggregates weight some distributions by token (`inter_token_latency_ms`)
//! or by time (`requests_per_second`), so the point is computed from its per-request records
//! (`requests.successful`, `errored`, `incomplete`: Unix seconds in `info.timings`, token
//! counts in `input_metrics` / `output_metrics`) in servebench's way, over the requests that
//! ended inside GuideLLM's measured window (`scheduler_metrics.measure_start_time` to
//! `measure_end_time`; warm-up and cool-down outside it). Where GuideLLM kept only a sample
//! of the records (`config.sample_size`), the point takes GuideLLM's own per-request
//! distributions instead (TTFT, latency, token counts; its percentiles) and says so.
//!
//! GuideLLM's TTFT runs from `request_start` (stamped before the HTTP stream is opened) to
//! the first streamed line carrying tokens; its ITL is (last token − first token) / (output
//! tokens − 1), which is neither of servebench's: `tpot_s` here is servebench's (latency −
//! TTFT) / (output tokens − 1) on GuideLLM's stamps.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::{Value, json};

use servebench_model::results::meta::ImportedFrom;
use servebench_model::results::records::{PointRecord, RequestRecord, Stat};

use super::import_common::{ImportError, Imported, json_error, point_n, read_bounded, stat_of};

/// The file GuideLLM writes in an output folder.
pub(crate) const FILE: &str = "benchmarks.json";

/// The same report as `--output kind=yaml` writes it.
pub(crate) const YAML_FILE: &str = "benchmarks.yaml";

/// `path` itself, or GuideLLM's file inside a folder (its JSON, else its YAML).
fn file(path: &Path) -> PathBuf {
    match path.is_dir() {
        true if !path.join(FILE).is_file() && path.join(YAML_FILE).is_file() => {
            path.join(YAML_FILE)
        }
        true => path.join(FILE),
        false => path.to_path_buf(),
    }
}

/// Whether GuideLLM wrote `path` as YAML (by its extension, as GuideLLM chooses).
fn is_yaml(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml"))
}

pub(crate) fn read(path: &Path) -> Result<Imported, ImportError> {
    let path = file(path);
    let bytes = read_bounded(&path)?;
    let v: Value = if is_yaml(&path) {
        serde_saphyr::from_str(&String::from_utf8_lossy(&bytes)).map_err(|e| ImportError::File {
            path: path.clone(),
            message: format!("not the YAML GuideLLM writes: {e}"),
        })?
    } else {
        serde_json::from_slice(&bytes).map_err(|e| json_error(&path, 0, &e))?
    };
    let refuse = |message: String| ImportError::File {
        path: path.clone(),
        message,
    };
    let Some(benchmarks) = v.get("benchmarks").and_then(Value::as_array) else {
        return Err(refuse(
            "not GuideLLM's benchmark report (no `benchmarks`): give the file `guidellm run --output kind=json` saved".into(),
        ));
    };
    match v.pointer("/metadata/version").and_then(Value::as_u64) {
        Some(2) => {}
        other => {
            return Err(refuse(format!(
                "GuideLLM report schema version {}: servebench reads version 2 (GuideLLM 0.8)",
                other.map_or("missing".to_string(), |n| n.to_string())
            )));
        }
    }
    let api = api_of(&v);
    let mut points = Vec::new();
    let mut requests = Vec::new();
    let mut notes = Vec::new();
    for (i, b) in benchmarks.iter().enumerate() {
        let (p, reqs, note) = benchmark(i + 1, b, api);
        points.push(p);
        requests.extend(reqs);
        notes.extend(note);
    }
    if points.is_empty() {
        return Err(refuse(
            "GuideLLM's report holds no benchmark: nothing to import".into(),
        ));
    }
    Ok(imported(&path, &v, points, requests, notes))
}

/// The servebench API of GuideLLM's `request_format`.
fn api_of(v: &Value) -> &'static str {
    match v
        .pointer("/config/spec/backend/request_format")
        .and_then(Value::as_str)
    {
        Some(f) if f.contains("chat") => "openai-chat",
        Some(f) if f.contains("completions") => "openai-completions",
        _ => "openai-chat",
    }
}

/// A number at `ptr` in `v`.
fn num(v: &Value, ptr: &str) -> Option<f64> {
    v.pointer(ptr).and_then(Value::as_f64)
}

/// One GuideLLM request as servebench reads it: its times (Unix seconds), tokens, status.
struct Req<'a> {
    raw: &'a Value,
    status: &'static str,
    start: f64,
    end: Option<f64>,
    first: Option<f64>,
    last: Option<f64>,
    iterations: u64,
    prompt: Option<u64>,
    output: Option<u64>,
    cached: Option<u64>,
}

impl<'a> Req<'a> {
    fn of(raw: &'a Value, status: &'static str) -> Option<Req<'a>> {
        let t = |k: &str| num(raw, &format!("/info/timings/{k}"));
        let tokens = |ptr: &str| raw.pointer(ptr).and_then(Value::as_u64);
        Some(Req {
            raw,
            status,
            start: t("request_start").or_else(|| t("resolve_start"))?,
            end: t("request_end").or_else(|| t("resolve_end")),
            first: t("first_token_iteration"),
            last: t("last_token_iteration"),
            iterations: tokens("/info/timings/token_iterations").unwrap_or(0),
            prompt: tokens("/input_metrics/total_tokens"),
            output: tokens("/output_metrics/total_tokens"),
            cached: tokens("/input_metrics/cached_tokens"),
        })
    }

    fn ttft(&self) -> Option<f64> {
        self.first.map(|f| f - self.start)
    }

    fn latency(&self) -> Option<f64> {
        self.end.map(|e| e - self.start)
    }
}

/// Benchmark `n`'s point, its requests as servebench records, and a note where the point
/// could not be computed from every request.
fn benchmark(n: usize, b: &Value, api: &str) -> (PointRecord, Vec<RequestRecord>, Option<String>) {
    let window = (
        num(b, "/scheduler_metrics/measure_start_time"),
        num(b, "/scheduler_metrics/measure_end_time"),
    );
    let mut reqs: Vec<Req> = Vec::new();
    for (key, status) in [
        ("successful", "successful"),
        ("errored", "errored"),
        ("incomplete", "incomplete"),
    ] {
        if let Some(list) = b
            .pointer(&format!("/requests/{key}"))
            .and_then(Value::as_array)
        {
            reqs.extend(list.iter().filter_map(|r| Req::of(r, status)));
        }
    }
    reqs.sort_by(|a, b| a.start.total_cmp(&b.start));
    // Counted as GuideLLM counts: ended after the measured window opened, by its close.
    let measured = |r: &Req| match (window, r.end) {
        ((Some(s), Some(e)), Some(end)) => end > s && end <= e,
        _ => true,
    };
    let ok: Vec<&Req> = reqs
        .iter()
        .filter(|r| r.status == "successful" && measured(r))
        .collect();
    let errors = reqs
        .iter()
        .filter(|r| r.status == "errored" && measured(r))
        .count();
    let totals = |k: &str| num(b, &format!("/metrics/request_totals/{k}")).map(|x| x as usize);
    let complete = b.pointer("/config/sample_size").is_none_or(Value::is_null)
        && totals("successful").is_none_or(|t| t == ok.len());
    let (metrics, note) = if complete {
        (from_requests(&ok), None)
    } else {
        (
            from_aggregate(b),
            Some(format!(
                "benchmark {n}: GuideLLM kept a sample of its requests ({} of {} successes), so the point takes GuideLLM's own distributions (its percentiles) and no rates",
                ok.len(),
                totals("successful").unwrap_or(0)
            )),
        )
    };
    let (ok_n, err_n) = match complete {
        true => (ok.len(), errors),
        false => (
            totals("successful").unwrap_or(ok.len()),
            totals("errored").unwrap_or(errors),
        ),
    };
    let mut p = point_n(n, ok_n, err_n, metrics);
    p.values = values(b);
    let id = p.id.clone();
    let records = reqs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| record(&id, i, r, window, api))
        .collect();
    (p, records, note)
}

/// The strategy's sweep value: its streams (concurrency) or rate.
fn values(b: &Value) -> IndexMap<String, Value> {
    let s = b.pointer("/config/strategy");
    let mut values = IndexMap::new();
    if let Some(c) = s.and_then(|s| s.get("streams")).filter(|c| c.is_u64()) {
        values.insert("concurrency".to_string(), c.clone());
    } else if let Some(r) = s.and_then(|s| s.get("rate")).filter(|r| r.is_number()) {
        values.insert("rate".to_string(), r.clone());
    }
    values
}

/// servebench's statistics of the measured successes, and its rates over their span (the
/// first one's start to the last one's end, as servebench's closed loop counts a round).
fn from_requests(ok: &[&Req]) -> IndexMap<String, Stat> {
    let col =
        |f: &dyn Fn(&Req) -> Option<f64>| -> Vec<f64> { ok.iter().filter_map(|r| f(r)).collect() };
    let tpot = |r: &Req| {
        let out = r.output? as f64;
        let (l, t) = (r.latency()?, r.ttft()?);
        (out > 1.0).then(|| (l - t) / (out - 1.0))
    };
    let mut metrics = IndexMap::new();
    for (name, xs) in [
        ("ttft_s", col(&|r| r.ttft())),
        ("e2e_s", col(&|r| r.latency())),
        ("tpot_s", col(&tpot)),
        ("prompt_tokens", col(&|r| r.prompt.map(|t| t as f64))),
        ("completion_tokens", col(&|r| r.output.map(|t| t as f64))),
        ("cached_tokens", col(&|r| r.cached.map(|t| t as f64))),
    ] {
        if let Some(s) = stat_of(&xs) {
            metrics.insert(name.to_string(), s);
        }
    }
    let first = ok.iter().map(|r| r.start).min_by(f64::total_cmp);
    let last = ok.iter().filter_map(|r| r.end).max_by(f64::total_cmp);
    if let (Some(first), Some(last)) = (first, last) {
        let span = last - first;
        let sum =
            |f: &dyn Fn(&Req) -> Option<u64>| ok.iter().filter_map(|r| f(r)).sum::<u64>() as f64;
        if span > 0.0 {
            for (name, total) in [
                ("throughput_req_s", ok.len() as f64),
                ("input_tok_s", sum(&|r| r.prompt)),
                ("output_tok_s", sum(&|r| r.output)),
                ("total_tok_s", sum(&|r| Some(r.prompt? + r.output?))),
            ] {
                if let Some(s) = stat_of(&[total / span]) {
                    metrics.insert(name.to_string(), s);
                }
            }
        }
    }
    metrics
}

/// GuideLLM's own per-request distributions of the successes (`metrics.X.successful`), in
/// seconds and tokens; its percentiles and its standard deviation as it computed them.
fn from_aggregate(b: &Value) -> IndexMap<String, Stat> {
    let mut metrics = IndexMap::new();
    for (key, name, scale) in [
        ("time_to_first_token_ms", "ttft_s", 1e-3),
        ("request_latency", "e2e_s", 1.0),
        ("prompt_token_count", "prompt_tokens", 1.0),
        ("output_token_count", "completion_tokens", 1.0),
    ] {
        let Some(d) = b
            .pointer(&format!("/metrics/{key}/successful"))
            .filter(|d| d.is_object())
        else {
            continue;
        };
        let f = |ptr: &str| num(d, ptr).map(|x| x * scale);
        let (Some(mean), Some(p50), Some(p90), Some(p99), Some(min), Some(max)) = (
            f("/mean"),
            f("/percentiles/p50"),
            f("/percentiles/p90"),
            f("/percentiles/p99"),
            f("/min"),
            f("/max"),
        ) else {
            continue;
        };
        let count = num(d, "/count").map_or(0, |c| c as usize);
        if count == 0 {
            continue;
        }
        let std = f("/std_dev");
        metrics.insert(
            name.to_string(),
            Stat {
                count,
                mean,
                p50,
                p90,
                p99,
                min,
                max,
                std,
                cv: std.filter(|_| mean != 0.0).map(|s| s / mean),
                ..Stat::default()
            },
        );
    }
    metrics
}

/// A GuideLLM request as servebench's record: sent at GuideLLM's `request_start`, its first
/// token chunk at TTFT (one token, as GuideLLM assumes), the rest folded into one chunk at
/// its last token (`chunks_folded`: GuideLLM keeps no time for the streamed lines between).
fn record(
    point: &str,
    index: usize,
    r: &Req,
    window: (Option<f64>, Option<f64>),
    api: &str,
) -> Option<RequestRecord> {
    let rel = |t: Option<f64>| t.map(|t| t - r.start);
    let mut chunks = Vec::new();
    let mut folded = None;
    if let Some(first) = rel(r.first) {
        chunks.push(json!({ "t_s": first, "tokens": 1 }));
        let rest = r.output.unwrap_or(r.iterations).saturating_sub(1);
        if let Some(last) = rel(r.last).filter(|_| r.iterations > 1 && rest > 0) {
            chunks.push(json!({ "t_s": last, "tokens": rest }));
            folded = Some(r.iterations.saturating_sub(2)).filter(|n| *n > 0);
        }
    }
    let phase = match (window, r.end) {
        ((Some(s), _), Some(end)) if end <= s => "warmup",
        ((_, Some(e)), Some(end)) if end > e => "cooldown",
        _ => "measure",
    };
    let args: Option<Value> = r
        .raw
        .get("request_args")
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str(s).ok());
    let max_tokens = args
        .as_ref()
        .and_then(|a| {
            a.pointer("/body/max_completion_tokens")
                .or_else(|| a.pointer("/body/max_tokens"))
        })
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let error = match r.status {
        "errored" => Some(error_of(r.raw)),
        "incomplete" => Some(json!({
            "kind": "incomplete",
            "message": "GuideLLM: cancelled before it completed (status incomplete)",
        })),
        _ => None,
    };
    let mut rec = json!({
        "point": point, "round": 0, "index": index, "role": "measure", "api": api,
        "sent_at": r.start,
        "max_tokens": max_tokens,
        "chunks": chunks,
        "token_source": if r.output.is_some() { "usage" } else { "chunk-count" },
        "chunk_tokens": "assumed-one",
        "phase": phase,
    });
    let set = |rec: &mut Value, k: &str, v: Option<Value>| {
        if let Some(v) = v {
            rec[k] = v;
        }
    };
    set(
        &mut rec,
        "scheduled_at",
        num(r.raw, "/info/timings/targeted_start").map(Value::from),
    );
    set(&mut rec, "end_s", r.latency().map(Value::from));
    set(&mut rec, "prompt_tokens", r.prompt.map(Value::from));
    set(&mut rec, "completion_tokens", r.output.map(Value::from));
    set(&mut rec, "cached_tokens", r.cached.map(Value::from));
    set(&mut rec, "chunks_folded", folded.map(Value::from));
    set(&mut rec, "error", error);
    set(
        &mut rec,
        "request_id",
        r.raw.get("request_id").filter(|v| v.is_string()).cloned(),
    );
    serde_json::from_value(rec).ok()
}

/// GuideLLM's error text as servebench's error: an HTTP status where the text names one.
fn error_of(raw: &Value) -> Value {
    let text = raw
        .pointer("/info/error")
        .and_then(Value::as_str)
        .unwrap_or("GuideLLM recorded no message");
    let lower = text.to_lowercase();
    let kind = if lower.contains("timeout") || lower.contains("timed out") {
        "timeout"
    } else if lower.contains("connect") {
        "connect"
    } else {
        "http"
    };
    json!({ "kind": kind, "message": format!("GuideLLM: {text}") })
}

/// The run's provenance: GuideLLM's version, its `config` (the run's arguments), its method.
fn imported(
    path: &Path,
    v: &Value,
    points: Vec<PointRecord>,
    requests: Vec<RequestRecord>,
    mut notes: Vec<String>,
) -> Imported {
    let spec = v.pointer("/config/spec");
    let find = |ptr: &str| spec.and_then(|s| s.pointer(ptr)).cloned();
    let mut experiment = json!({});
    if let Some(m) = find("/backend/model").filter(Value::is_string) {
        experiment["server"] = json!({ "model": m });
    }
    if let Some(url) = find("/backend/target").filter(Value::is_string) {
        experiment["server"]["url"] = url;
    }
    if points.len() == 1
        && let Some(c) = points[0].values.get("concurrency")
    {
        experiment["concurrency"] = c.clone();
    }
    if let Some(n) = find("/data/0/output_tokens").filter(Value::is_u64) {
        let fixed = find("/data/0/output_tokens_stdev").is_none_or(|s| s.is_null());
        if fixed {
            experiment["workload"] = json!({ "output_tokens": n });
        }
    }
    if v.pointer("/config/spec/backend/request_format").is_some() {
        experiment["workload"]["api"] = json!(api_of(v));
    }
    let warmup = match find("/profile/warmup") {
        Some(w) => match (
            w.get("value").and_then(Value::as_f64),
            w.get("percent").and_then(Value::as_f64),
        ) {
            (_, Some(p)) => format!(
                "the first {:.0}% of the run (GuideLLM `warmup.percent`, mode {}), not counted",
                p * 100.0,
                w.get("mode").and_then(Value::as_str).unwrap_or("?")
            ),
            (Some(n), None) => format!(
                "{n} (requests or seconds: GuideLLM `warmup.value`, mode {}) before the measured window, not counted",
                w.get("mode").and_then(Value::as_str).unwrap_or("?")
            ),
            (None, None) => "none".to_string(),
        },
        None => "none recorded".to_string(),
    };
    notes.push("GuideLLM's own aggregates weight ITL and throughput by token and by time; the points are computed from its per-request timings in servebench's way (linear percentiles, sample deviation) over the requests that ended in its measured window".into());
    let method = [
        ("TTFT origin", "request start (stamped before the HTTP stream is opened) → first streamed line with tokens (GuideLLM `time_to_first_token_ms`, client clock)".to_string()),
        ("ITL", "GuideLLM's (last token − first token) / (output tokens − 1) is not imported; (latency − TTFT) / (output tokens − 1) on its stamps as `tpot_s`; no chunk gaps recorded".to_string()),
        ("warm-up", warmup),
        ("cache state", "not controlled: no flush, no per-request nonce".to_string()),
        ("client placement", "not recorded".to_string()),
        ("prompts", "GuideLLM's dataset (`--data`)".to_string()),
    ];
    Imported {
        from: ImportedFrom {
            tool: "guidellm".into(),
            version: v
                .pointer("/metadata/guidellm_version")
                .and_then(Value::as_str)
                .map(str::to_string),
            files: vec![path.display().to_string()],
            config: v.get("config").cloned(),
            method: method
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            recorded: Vec::new(),
            notes,
        },
        points,
        requests,
        experiment,
        started_at: v
            .pointer("/benchmarks/0/start_time")
            .and_then(Value::as_f64)
            .and_then(|t| chrono::DateTime::from_timestamp(t as i64, 0))
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        name: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GuideLLM request started at `start` (s after 1000), first token `ttft` later, ended
    /// `latency` after its start, with 16 output tokens in `iters` streamed lines.
    fn req(start: f64, ttft: f64, latency: f64, iters: u64) -> Value {
        let s = 1000.0 + start;
        json!({
            "request_id": format!("r{start}"),
            "request_args": "{\"body\": {\"max_tokens\": 16}}",
            "info": { "status": "completed", "error": null, "timings": {
                "targeted_start": s, "request_start": s, "first_token_iteration": s + ttft,
                "last_token_iteration": s + latency - 0.001, "token_iterations": iters,
                "request_end": s + latency,
            }},
            "input_metrics": { "total_tokens": 32, "cached_tokens": null },
            "output_metrics": { "total_tokens": 16 },
        })
    }

    fn report(successful: Vec<Value>, errored: Vec<Value>, sample_size: Value) -> Value {
        json!({
            "metadata": { "version": 2, "guidellm_version": "0.8.1" },
            "config": { "spec": { "backend": { "model": "m", "request_format": "/v1/completions" },
                "profile": { "warmup": { "percent": null, "value": null, "mode": "prefer_duration" } } } },
            "benchmarks": [{
                "config": { "strategy": { "type_": "constant", "rate": 4.0 }, "sample_size": sample_size },
                "scheduler_metrics": { "measure_start_time": 1001.0, "measure_end_time": 1010.0 },
                "metrics": {
                    "request_totals": { "successful": 2, "errored": 1, "incomplete": 0, "total": 3 },
                    "time_to_first_token_ms": { "successful": {
                        "mean": 50.0, "median": 50.0, "min": 40.0, "max": 60.0, "std_dev": 10.0, "count": 2,
                        "percentiles": { "p50": 50.0, "p90": 60.0, "p99": 60.0 } } },
                },
                "requests": { "successful": successful, "errored": errored, "incomplete": [] },
            }],
        })
    }

    fn read_value(v: &Value) -> Result<Imported, ImportError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        std::fs::write(&path, v.to_string()).unwrap();
        read(dir.path())
    }

    #[test]
    fn the_measured_window_leaves_warm_up_out_and_counts_errors_inside_it() {
        let mut failed = req(3.0, 0.0, 0.5, 0);
        failed["info"]["error"] = json!("HTTP 500: boom");
        let v = report(
            vec![
                req(0.0, 0.1, 0.5, 16),
                req(2.0, 0.04, 1.0, 16),
                req(4.0, 0.06, 1.5, 1),
            ],
            vec![failed],
            Value::Null,
        );
        let imp = read_value(&v).unwrap();
        let p = &imp.points[0];
        // The first request ended (1000.5) before the window opened (1001): warm-up.
        assert_eq!((p.ok, p.errors), (2, 1));
        assert_eq!(p.values["rate"], json!(4.0));
        let ttft = &p.metrics["ttft_s"];
        assert!((ttft.mean - 0.05).abs() < 1e-9 && ttft.count == 2);
        // servebench's TPOT on GuideLLM's stamps: (1.0 - 0.04) / 15 and (1.5 - 0.06) / 15.
        assert!((p.metrics["tpot_s"].mean - (0.96 + 1.44) / 30.0).abs() < 1e-9);
        // Two successes from 1002 to 1005.5.
        assert!((p.metrics["throughput_req_s"].mean - 2.0 / 3.5).abs() < 1e-9);
        let phases: Vec<_> = imp
            .requests
            .iter()
            .map(|r| r.phase.map(|p| p.to_string()))
            .collect();
        assert_eq!(phases[0].as_deref(), Some("warmup"));
        let r = &imp.requests[1];
        assert_eq!(
            (r.chunks.len(), r.chunks_folded, r.max_tokens),
            (2, Some(14), 16)
        );
        assert_eq!(r.chunks[1].tokens, 15);
        // One streamed line: the first chunk alone, nothing folded.
        let one = &imp.requests[3];
        assert_eq!((one.chunks.len(), one.chunks_folded), (1, None));
        let err = imp.requests[2].error.as_ref().unwrap();
        assert_eq!(err.message, "GuideLLM: HTTP 500: boom");
        assert_eq!(
            imp.requests[0].api,
            servebench_model::spec::types::Api::OpenaiCompletions
        );
    }

    #[test]
    fn a_sampled_report_takes_guidellm_s_own_distributions_and_says_so() {
        let v = report(vec![req(2.0, 0.04, 1.0, 16)], vec![], json!(1));
        let imp = read_value(&v).unwrap();
        let p = &imp.points[0];
        assert_eq!(p.ok, 2);
        let ttft = &p.metrics["ttft_s"];
        assert!((ttft.mean - 0.05).abs() < 1e-12 && (ttft.p90 - 0.06).abs() < 1e-12);
        assert!(p.metrics.get("throughput_req_s").is_none());
        assert!(imp.from.notes.iter().any(|n| n.contains("kept a sample")));
    }

    #[test]
    fn another_schema_version_or_no_benchmarks_is_refused_with_what_to_give() {
        let mut v = report(vec![], vec![], Value::Null);
        v["metadata"]["version"] = json!(3);
        let e = read_value(&v).unwrap_err().to_string();
        assert!(
            e.contains("schema version 3: servebench reads version 2"),
            "{e}"
        );
        let e = read_value(&json!({ "metadata": {} }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not GuideLLM's benchmark report"), "{e}");
    }
}
