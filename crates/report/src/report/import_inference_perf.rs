//! inference-perf 0.7's local report folder read into servebench's metrics
//! (inference_perf/reportgen/base.py): `stage_N_lifecycle_metrics.json` per load stage (else
//! `summary_lifecycle_metrics.json`), each a point: `successes.latency.{time_to_first_token,
//! request_latency}` (seconds: `mean`, `min`, `max`, `median`, `p90`, `p99`, ...),
//! `successes.prompt_tokens`, `output_tokens` (the server's counts, its tokenizer's where the
//! server gave none) and `successes.throughput` (per second over the first start to the last
//! end), `failures.count`; the stage's concurrency or rate from `config.yaml`. With one stage
//! and `per_request_lifecycle_metrics.json` (`report.request_lifecycle.per_request`), the
//! point is computed from the requests in servebench's way instead: each one's `start_time`,
//! `end_time` and `info.response_metrics.chunk_times` (a monotonic clock, seconds), the
//! server's `server_usage`.
//!
//! inference-perf's `time_per_output_token` is (last token − first token) / (output
//! tokens − 1) and its `inter_token_latency` the gaps between the tokens its tokenizer splits
//! each chunk into (a chunk's tokens share its time), neither of servebench's: not imported.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::{Value, json};

use servebench_model::results::meta::ImportedFrom;
use servebench_model::results::records::{PointRecord, Stat};

use super::import_common::{ImportError, Imported, json_error, point_n, read_bounded, stat_of};

pub(crate) const SUMMARY: &str = "summary_lifecycle_metrics.json";
pub(crate) const PER_REQUEST: &str = "per_request_lifecycle_metrics.json";
const CONFIG: &str = "config.yaml";

/// The report folder: `path`, or the folder of a file given.
fn folder(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    }
}

fn parse(path: &Path) -> Result<Value, ImportError> {
    let bytes = read_bounded(path)?;
    serde_json::from_slice(&bytes).map_err(|e| json_error(path, 0, &e))
}

/// `stage_N_lifecycle_metrics.json` files under `dir`, by stage.
fn stages(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name
                .strip_prefix("stage_")?
                .strip_suffix("_lifecycle_metrics.json")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    found
}

pub(crate) fn read(path: &Path) -> Result<Imported, ImportError> {
    let dir = folder(path);
    let config_path = dir.join(CONFIG);
    let config: Option<Value> = if config_path.is_file() {
        let bytes = read_bounded(&config_path)?;
        let text = String::from_utf8_lossy(&bytes);
        let c: Value = serde_saphyr::from_str(&text).map_err(|e| ImportError::File {
            path: config_path.clone(),
            message: format!("not the YAML inference-perf writes: {e}"),
        })?;
        // Credentials it may hold are redacted where every import is written (`import::write`).
        Some(c)
    } else {
        None
    };
    let mut files = stages(&dir);
    if files.is_empty() && dir.join(SUMMARY).is_file() {
        files.push((0, dir.join(SUMMARY)));
    }
    if files.is_empty() {
        return Err(ImportError::File {
            path: path.to_path_buf(),
            message: format!(
                "no stage_N_lifecycle_metrics.json nor {SUMMARY} here: give inference-perf's report folder (storage.local_storage.path)"
            ),
        });
    }
    let per_request = dir.join(PER_REQUEST);
    let mut points = Vec::new();
    let mut notes = Vec::new();
    let mut read_files = Vec::new();
    for (i, (stage, file)) in files.iter().enumerate() {
        let v = parse(file)?;
        if v.get("successes").is_none() {
            return Err(ImportError::File {
                path: file.clone(),
                message: "not inference-perf's lifecycle report (no `successes`)".into(),
            });
        }
        read_files.push(file.display().to_string());
        let failed = v
            .pointer("/failures/count")
            .and_then(Value::as_u64)
            .unwrap_or(0) as usize;
        let (metrics, ok) = if files.len() == 1 && per_request.is_file() {
            let records = parse(&per_request)?;
            read_files.push(per_request.display().to_string());
            from_requests(&records)
        } else {
            if per_request.is_file() {
                notes.push(format!("stage {stage}: {PER_REQUEST} does not say which stage each request was in, so the point takes the stage's own statistics"));
            }
            from_stage(&v)
        };
        let mut p = point_n(i + 1, ok, failed, metrics);
        p.values = values(config.as_ref(), *stage);
        points.push(p);
    }
    Ok(imported(read_files, config, points, notes))
}

/// The stage's sweep value: its concurrency, else its rate.
fn values(config: Option<&Value>, stage: u64) -> IndexMap<String, Value> {
    let s = config.and_then(|c| c.pointer(&format!("/load/stages/{stage}")));
    let mut values = IndexMap::new();
    if let Some(c) = s
        .and_then(|s| s.get("concurrency_level"))
        .filter(|c| c.is_u64())
    {
        values.insert("concurrency".to_string(), c.clone());
    } else if let Some(r) = s.and_then(|s| s.get("rate")).filter(|r| r.is_number()) {
        values.insert("rate".to_string(), r.clone());
    }
    values
}

/// A stage's own statistics: seconds and tokens as written, its median as p50. No standard
/// deviation (inference-perf writes none).
fn from_stage(v: &Value) -> (IndexMap<String, Stat>, usize) {
    let ok = v
        .pointer("/successes/count")
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize;
    let mut metrics = IndexMap::new();
    for (ptr, name) in [
        ("/successes/latency/time_to_first_token", "ttft_s"),
        ("/successes/latency/request_latency", "e2e_s"),
        ("/successes/prompt_tokens", "prompt_tokens"),
        ("/successes/output_tokens", "completion_tokens"),
    ] {
        let Some(d) = v.pointer(ptr).filter(|d| d.is_object()) else {
            continue;
        };
        let f = |k: &str| d.get(k).and_then(Value::as_f64);
        let (Some(mean), Some(p50), Some(p90), Some(p99), Some(min), Some(max)) = (
            f("mean"),
            f("median"),
            f("p90"),
            f("p99"),
            f("min"),
            f("max"),
        ) else {
            continue;
        };
        metrics.insert(
            name.to_string(),
            Stat {
                count: ok,
                mean,
                p50,
                p90,
                p99,
                min,
                max,
                ..Stat::default()
            },
        );
    }
    for (key, name) in [
        ("requests_per_sec", "throughput_req_s"),
        ("input_tokens_per_sec", "input_tok_s"),
        ("output_tokens_per_sec", "output_tok_s"),
        ("total_tokens_per_sec", "total_tok_s"),
    ] {
        if let Some(s) = v
            .pointer(&format!("/successes/throughput/{key}"))
            .and_then(Value::as_f64)
            .and_then(|x| stat_of(&[x]))
        {
            metrics.insert(name.to_string(), s);
        }
    }
    (metrics, ok)
}

/// The per-request file's successes in servebench's way: TTFT to the first chunk, chunk gaps
/// as `icl_s`, (latency − TTFT) / (output tokens − 1) as `tpot_s` with the server's count,
/// rates over the first start to the last end.
fn from_requests(records: &Value) -> (IndexMap<String, Stat>, usize) {
    let ok: Vec<&Value> = records
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|r| r.get("error").is_none_or(Value::is_null))
                .collect()
        })
        .unwrap_or_default();
    let mut cols: IndexMap<&str, Vec<f64>> = IndexMap::new();
    let (mut first_start, mut last_end) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut prompt_sum, mut output_sum) = (0.0, 0.0);
    for r in &ok {
        let (Some(start), Some(end)) = (
            r.get("start_time").and_then(Value::as_f64),
            r.get("end_time").and_then(Value::as_f64),
        ) else {
            continue;
        };
        first_start = first_start.min(start);
        last_end = last_end.max(end);
        let rm = r.pointer("/info/response_metrics");
        let chunks: Vec<f64> = rm
            .and_then(|m| m.get("chunk_times"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default();
        let usage = |k: &str| {
            rm.and_then(|m| m.pointer(&format!("/server_usage/{k}")))
                .and_then(Value::as_f64)
        };
        let latency = end - start;
        cols.entry("e2e_s").or_default().push(latency);
        let ttft = chunks.first().map(|t| t - start);
        if let Some(t) = ttft {
            cols.entry("ttft_s").or_default().push(t);
        }
        cols.entry("icl_s")
            .or_default()
            .extend(chunks.windows(2).map(|w| w[1] - w[0]));
        if let Some(p) = usage("prompt_tokens") {
            cols.entry("prompt_tokens").or_default().push(p);
            prompt_sum += p;
        }
        if let Some(o) = usage("completion_tokens") {
            cols.entry("completion_tokens").or_default().push(o);
            output_sum += o;
            if let (Some(t), true) = (ttft, o > 1.0) {
                cols.entry("tpot_s")
                    .or_default()
                    .push((latency - t) / (o - 1.0));
            }
        }
    }
    let mut metrics: IndexMap<String, Stat> = IndexMap::new();
    for name in [
        "ttft_s",
        "e2e_s",
        "tpot_s",
        "icl_s",
        "prompt_tokens",
        "completion_tokens",
    ] {
        if let Some(s) = cols.get(name).and_then(|xs| stat_of(xs)) {
            metrics.insert(name.to_string(), s);
        }
    }
    let span = last_end - first_start;
    if span.is_finite() && span > 0.0 {
        for (name, total) in [
            ("throughput_req_s", ok.len() as f64),
            ("input_tok_s", prompt_sum),
            ("output_tok_s", output_sum),
            ("total_tok_s", prompt_sum + output_sum),
        ] {
            if let Some(s) = stat_of(&[total / span]) {
                metrics.insert(name.to_string(), s);
            }
        }
    }
    (metrics, ok.len())
}

/// The run's provenance: its `config.yaml` and method.
fn imported(
    files: Vec<String>,
    config: Option<Value>,
    points: Vec<PointRecord>,
    mut notes: Vec<String>,
) -> Imported {
    let find = |ptr: &str| config.as_ref().and_then(|c| c.pointer(ptr)).cloned();
    let mut experiment = json!({});
    if let Some(m) = find("/server/model_name").filter(Value::is_string) {
        experiment["server"] = json!({ "model": m });
    }
    if let Some(url) = find("/server/base_url").filter(Value::is_string) {
        experiment["server"]["url"] = url;
    }
    if points.len() == 1 {
        if let Some(c) = points[0].values.get("concurrency") {
            experiment["concurrency"] = c.clone();
        }
        if let Some(n) = find("/load/stages/0/num_requests").filter(Value::is_u64) {
            experiment["requests"] = n;
        }
    }
    if find("/data/output_distribution/type").and_then(|t| t.as_str().map(str::to_string))
        == Some("fixed".into())
        && let Some(n) = find("/data/output_distribution/mean")
            .and_then(|m| m.as_f64())
            .filter(|m| m.fract() == 0.0)
    {
        experiment["workload"] = json!({ "output_tokens": n as u64 });
    }
    match find("/api/type").as_ref().and_then(Value::as_str) {
        Some("completion") => experiment["workload"]["api"] = json!("openai-completions"),
        Some("chat") => experiment["workload"]["api"] = json!("openai-chat"),
        _ => {}
    }
    if find("/report/request_lifecycle/use_server_output_tokens") != Some(Value::Bool(true)) {
        notes.push("run without report.request_lifecycle.use_server_output_tokens: its output token counts and throughputs are its own tokenizer's, not the server's".into());
    }
    notes.push("inference-perf records no start time on the wall clock (its times are a monotonic clock's), so the run is dated at its import and writes no requests.jsonl".into());
    let api = find("/api/type").and_then(|t| t.as_str().map(str::to_string));
    let method = [
        ("TTFT origin", "dispatch (before the POST: connecting and any retry included) → first streamed token (inference-perf `time_to_first_token`, client clock)".to_string()),
        ("ITL", "inference-perf's per-token gaps (its tokenizer's split of each chunk) and TPOT (last − first token) / (output tokens − 1) not imported; with per-request records, chunk gaps as `icl_s` and (latency − TTFT) / (output tokens − 1) as `tpot_s`".to_string()),
        ("warm-up", "none (inference-perf has no warm-up phase)".to_string()),
        ("cache state", "not controlled: no flush, no per-request nonce".to_string()),
        ("client placement", "not recorded".to_string()),
        ("prompts", format!("inference-perf's data generator (`data.type` {}), API `{}`", find("/data/type").and_then(|t| t.as_str().map(str::to_string)).unwrap_or_else(|| "?".into()), api.unwrap_or_else(|| "?".into()))),
    ];
    Imported {
        from: ImportedFrom {
            tool: "inference-perf".into(),
            version: None,
            files,
            config,
            method: method
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            recorded: Vec::new(),
            notes,
        },
        points,
        requests: Vec::new(),
        experiment,
        started_at: None,
        name: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(ttft: f64, rps: f64) -> Value {
        let d = |x: f64| json!({ "mean": x, "median": x, "p90": x, "p99": x, "min": x, "max": x });
        json!({
            "successes": { "count": 4,
                "latency": { "time_to_first_token": d(ttft), "request_latency": d(0.5),
                    "time_per_output_token": d(0.01) },
                "prompt_tokens": d(64.0), "output_tokens": d(16.0),
                "throughput": { "requests_per_sec": rps } },
            "failures": { "count": 1 },
        })
    }

    #[test]
    fn each_stage_is_a_point_at_its_rate_with_its_own_statistics() {
        let dir = tempfile::tempdir().unwrap();
        let w = |name: &str, text: String| std::fs::write(dir.path().join(name), text).unwrap();
        w(
            "stage_0_lifecycle_metrics.json",
            stage(0.1, 2.0).to_string(),
        );
        w(
            "stage_1_lifecycle_metrics.json",
            stage(0.3, 3.9).to_string(),
        );
        w(SUMMARY, stage(0.2, 3.0).to_string());
        w(CONFIG, "server:\n  model_name: m\n  api_key: secret\nload:\n  type: constant\n  stages:\n    - rate: 2\n      duration: 10\n    - rate: 4\n      duration: 10\n".into());
        let imp = read(dir.path()).unwrap();
        assert_eq!(imp.points.len(), 2);
        let (a, b) = (&imp.points[0], &imp.points[1]);
        assert_eq!((a.id.as_str(), b.id.as_str()), ("p001", "p002"));
        assert_eq!(
            (a.values["rate"].clone(), b.values["rate"].clone()),
            (json!(2), json!(4))
        );
        assert_eq!((b.ok, b.errors), (4, 1));
        assert!((b.metrics["ttft_s"].mean - 0.3).abs() < 1e-12);
        assert!(b.metrics["ttft_s"].std.is_none());
        assert!((b.metrics["throughput_req_s"].mean - 3.9).abs() < 1e-12);
        // TPOT as (last − first) / (n − 1) is not servebench's: absent.
        assert!(b.metrics.get("tpot_s").is_none());
        // The key is redacted where the run is written (`tests/import.rs`).
        assert_eq!(
            imp.from.config.as_ref().unwrap()["server"]["api_key"],
            "secret"
        );
        assert!(imp.requests.is_empty());
    }

    #[test]
    fn per_request_records_give_servebench_s_statistics_failures_left_out() {
        let records = json!([
            { "start_time": 10.0, "end_time": 10.5, "error": null, "info": { "response_metrics": {
                "chunk_times": [10.1, 10.2, 10.5], "server_usage": { "prompt_tokens": 8, "completion_tokens": 3 } } } },
            { "start_time": 10.2, "end_time": 11.0, "error": null, "info": { "response_metrics": {
                "chunk_times": [10.5, 11.0], "server_usage": { "prompt_tokens": 8, "completion_tokens": 2 } } } },
            { "start_time": 10.3, "end_time": 10.4, "error": { "error_type": "x", "error_msg": "y" }, "info": {} },
        ]);
        let (m, ok) = from_requests(&records);
        assert_eq!(ok, 2);
        assert!((m["ttft_s"].mean - 0.2).abs() < 1e-9);
        assert_eq!(m["icl_s"].count, 3);
        // (0.5 - 0.1) / 2 and (0.8 - 0.3) / 1.
        assert!((m["tpot_s"].mean - (0.2 + 0.5) / 2.0).abs() < 1e-9);
        assert!((m["throughput_req_s"].mean - 2.0).abs() < 1e-9);
        assert!((m["output_tok_s"].mean - 5.0).abs() < 1e-9);
    }

    #[test]
    fn a_folder_without_its_files_is_refused_with_what_to_give() {
        let dir = tempfile::tempdir().unwrap();
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("give inference-perf's report folder"), "{e}");
    }
}
