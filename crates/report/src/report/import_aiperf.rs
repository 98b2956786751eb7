//! AIPerf 0.13's artifacts read into servebench's metrics: the aggregate
//! `profile_export_aiperf.json` (`JsonExportData`: each metric's `unit`, `avg`, `p50`, `p90`,
//! `p99`, `min`, `max`, `std` (population), `count`; its `input_config` and `aiperf_version`),
//! else the per-request `profile_export.jsonl` (`MetricRecordInfo`: `metadata`,
//! `metrics.{tag: {value, unit}}`, `error`), whose profiling records that succeeded are
//! summarised as servebench does. Units are converted from the `unit` each value carries.
//!
//! AIPerf's `inter_token_latency` is (request latency - TTFT) / (output tokens - 1), what
//! servebench calls `tpot_s`; its `inter_chunk_latency` is servebench's `icl_s`.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::{Value, json};

use servebench_model::results::meta::ImportedFrom;
use servebench_model::results::records::{RequestRecord, Stat};

use super::import_common::{ImportError, Imported, json_error, point, read_bounded, stat_of};

pub(crate) const RECORDS: &str = "profile_export.jsonl";
pub(crate) const AGGREGATE: &str = "profile_export_aiperf.json";

/// AIPerf's metric tag, servebench's metric. Rates are one value per run.
const TAGS: &[(&str, &str)] = &[
    ("time_to_first_token", "ttft_s"),
    ("request_latency", "e2e_s"),
    ("inter_token_latency", "tpot_s"),
    ("inter_chunk_latency", "icl_s"),
    ("input_sequence_length", "prompt_tokens"),
    ("output_sequence_length", "completion_tokens"),
    ("usage_prompt_cache_read_tokens", "cached_tokens"),
    ("request_throughput", "throughput_req_s"),
    ("output_token_throughput", "output_tok_s"),
    ("total_token_throughput", "total_tok_s"),
];

/// A value in `unit` as servebench stores it (seconds, tokens, per second); None for a unit
/// servebench has no conversion for.
fn to_servebench(x: f64, unit: &str) -> Option<f64> {
    match unit {
        "ms" => Some(x / 1e3),
        "us" => Some(x / 1e6),
        "ns" => Some(x / 1e9),
        "s" | "sec" | "tokens" | "requests" | "requests/sec" | "tokens/sec" => Some(x),
        _ => None,
    }
}

/// The artifact files under `path` (a folder, or either file beside the other).
fn files(path: &Path) -> (Option<PathBuf>, Option<PathBuf>) {
    let dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let pick = |name: &str| {
        let p = dir.join(name);
        let given = !path.is_dir() && path.file_name().is_some_and(|n| n == name);
        (given || p.is_file()).then_some(p)
    };
    (pick(AGGREGATE), pick(RECORDS))
}

pub(crate) fn read(path: &Path) -> Result<Imported, ImportError> {
    let (aggregate, records) = files(path);
    let (metrics, ok, errors, agg) = match (&aggregate, &records) {
        (Some(a), _) => {
            let agg = parse_aggregate(a)?;
            let (metrics, ok, errors) = from_aggregate(a, &agg)?;
            (metrics, ok, errors, Some(agg))
        }
        (None, Some(r)) => {
            let (metrics, ok, errors) = from_records(r)?;
            (metrics, ok, errors, None)
        }
        (None, None) => {
            return Err(ImportError::File {
                path: path.to_path_buf(),
                message: format!(
                    "neither {AGGREGATE} nor {RECORDS} here: give AIPerf's artifact folder"
                ),
            });
        }
    };
    let requests = match &records {
        Some(r) => request_records(r, max_tokens(agg.as_ref()))?,
        None => Vec::new(),
    };
    let files: Vec<String> = [aggregate, records]
        .into_iter()
        .flatten()
        .map(|p| p.display().to_string())
        .collect();
    let mut imported = imported(files, agg.as_ref(), point(ok, errors, metrics));
    imported.requests = requests;
    Ok(imported)
}

/// The output length AIPerf asked for: its synthetic `osl` when drawn with no spread.
fn max_tokens(agg: Option<&Value>) -> Option<u64> {
    let osl = agg?.pointer("/input_config/datasets/0/prompts/osl")?;
    (osl.get("stddev").and_then(Value::as_f64) == Some(0.0))
        .then(|| osl.get("mean").and_then(Value::as_f64))
        .flatten()
        .filter(|n| n.fract() == 0.0 && *n >= 0.0)
        .map(|n| n as u64)
}

/// Each AIPerf record as servebench's request record: sent at `request_start_ns`, its first
/// chunk at TTFT and the next ones `inter_chunk_latency` apart (one token each: AIPerf keeps
/// no count per chunk), ending at `request_latency`; warm-up records in phase `warmup`.
fn request_records(
    path: &Path,
    max_tokens: Option<u64>,
) -> Result<Vec<RequestRecord>, ImportError> {
    let bytes = read_bounded(path)?;
    let mut out = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let r: Value = serde_json::from_slice(line).map_err(|e| json_error(path, i, &e))?;
        let md = |k: &str| r.pointer(&format!("/metadata/{k}"));
        let Some(start) = md("request_start_ns").and_then(Value::as_f64) else {
            continue;
        };
        let metric = |tag: &str| -> Option<f64> {
            let m = r.pointer(&format!("/metrics/{tag}"))?;
            let unit = m.get("unit").and_then(Value::as_str).unwrap_or("");
            to_servebench(m.get("value")?.as_f64()?, unit)
        };
        let mut chunks = Vec::new();
        if let Some(ttft) = metric("time_to_first_token") {
            chunks.push(json!({ "t_s": ttft, "tokens": 1 }));
            let m = r.pointer("/metrics/inter_chunk_latency");
            let unit = m
                .and_then(|m| m.get("unit"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let mut t = ttft;
            for gap in m
                .and_then(|m| m.get("value"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_f64)
                .filter_map(|g| to_servebench(g, unit))
            {
                t += gap;
                chunks.push(json!({ "t_s": t, "tokens": 1 }));
            }
        }
        let tokens = |usage: &str, length: &str| metric(usage).or_else(|| metric(length));
        let completion = tokens("usage_completion_tokens", "output_sequence_length");
        let phase = match md("benchmark_phase").and_then(Value::as_str) {
            Some("warmup") => "warmup",
            _ => "measure",
        };
        let mut rec = json!({
            "point": "p001", "round": 0, "index": out.len(), "role": "measure",
            "api": "openai-chat",
            "sent_at": start / 1e9,
            "max_tokens": max_tokens.unwrap_or(0),
            "chunks": chunks,
            "token_source": if metric("usage_completion_tokens").is_some() { "usage" } else { "chunk-count" },
            "chunk_tokens": "assumed-one",
            "phase": phase,
        });
        if let Some(t) = md("credit_issued_ns").and_then(Value::as_f64) {
            rec["scheduled_at"] = json!(t / 1e9);
        }
        if let Some(e) = metric("request_latency") {
            rec["end_s"] = json!(e);
        }
        if let Some(p) = tokens("usage_prompt_tokens", "input_sequence_length") {
            rec["prompt_tokens"] = json!(p as u64);
        }
        if let Some(c) = completion {
            rec["completion_tokens"] = json!(c as u64);
        }
        if let Some(c) = metric("usage_prompt_cache_read_tokens") {
            rec["cached_tokens"] = json!(c as u64);
        }
        if let Some(id) = md("x_request_id").filter(|v| v.is_string()) {
            rec["request_id"] = id.clone();
        }
        if let Some(e) = r.get("error").filter(|e| !e.is_null()) {
            let code = e.get("code").and_then(Value::as_u64);
            let message = e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("AIPerf recorded no message");
            rec["error"] = json!({ "kind": "http", "message": format!("AIPerf: {message}") });
            if let Some(c) = code.filter(|c| (100..600).contains(c)) {
                rec["error"]["status"] = json!(c);
            }
        }
        let rec: RequestRecord = serde_json::from_value(rec).map_err(|e| ImportError::At {
            path: path.to_path_buf(),
            line: i + 1,
            column: 1,
            message: format!("a record servebench cannot keep: {e}"),
        })?;
        out.push(rec);
    }
    Ok(out)
}

fn parse_aggregate(path: &Path) -> Result<Value, ImportError> {
    let bytes = read_bounded(path)?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| json_error(path, 0, &e))?;
    if !v.is_object() || v.get("schema_version").is_none() {
        return Err(ImportError::File {
            path: path.to_path_buf(),
            message:
                "not AIPerf's aggregate (no `schema_version`): give profile_export_aiperf.json"
                    .into(),
        });
    }
    Ok(v)
}

type Summary = (IndexMap<String, Stat>, usize, usize);

/// The aggregate's statistics in servebench's units; AIPerf's population deviation made the
/// sample one servebench keeps.
fn from_aggregate(path: &Path, agg: &Value) -> Result<Summary, ImportError> {
    let mut metrics = IndexMap::new();
    for (tag, name) in TAGS {
        let Some(m) = agg.get(*tag).filter(|m| m.is_object()) else {
            continue;
        };
        let unit = m.get("unit").and_then(Value::as_str).unwrap_or("");
        let field = |k: &str| m.get(k).and_then(Value::as_f64);
        let conv = |k: &str| field(k).and_then(|x| to_servebench(x, unit));
        let Some(avg) = conv("avg") else {
            return Err(ImportError::File {
                path: path.to_path_buf(),
                message: format!("`{tag}` has no `avg` in a unit servebench reads (`{unit}`)"),
            });
        };
        let count = field("count").map_or(1, |c| c as usize);
        let or_avg = |k: &str| conv(k).unwrap_or(avg);
        let complete = ["p50", "p90", "p99", "min", "max"]
            .iter()
            .all(|k| conv(k).is_some());
        if !complete && count > 1 {
            continue; // a distribution without its percentiles: absent, not invented
        }
        let std = conv("std")
            .filter(|_| count >= 2)
            .map(|s| s * (count as f64 / (count - 1) as f64).sqrt());
        let stat = Stat {
            count,
            mean: avg,
            p50: or_avg("p50"),
            p90: or_avg("p90"),
            p99: or_avg("p99"),
            min: or_avg("min"),
            max: or_avg("max"),
            std,
            cv: std.filter(|_| avg != 0.0).map(|s| s / avg),
            ..Stat::default()
        };
        metrics.insert(name.to_string(), stat);
    }
    let int = |tag: &str| {
        agg.get(tag)
            .and_then(|m| m.get("avg"))
            .and_then(Value::as_f64)
            .map_or(0, |x| x as usize)
    };
    Ok((metrics, int("request_count"), int("error_request_count")))
}

/// The per-request file, line by line: profiling records that succeeded, summarised.
fn from_records(path: &Path) -> Result<Summary, ImportError> {
    let bytes = read_bounded(path)?;
    let mut values: IndexMap<&str, Vec<f64>> = IndexMap::new();
    let (mut ok, mut errors) = (0, 0);
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let r: Value = serde_json::from_slice(line).map_err(|e| json_error(path, i, &e))?;
        let phase = r
            .pointer("/metadata/benchmark_phase")
            .and_then(Value::as_str);
        if phase != Some("profiling") {
            continue;
        }
        if !r.get("error").is_none_or(Value::is_null) {
            errors += 1;
            continue;
        }
        ok += 1;
        for (tag, name) in TAGS {
            let Some(m) = r.pointer(&format!("/metrics/{tag}")) else {
                continue;
            };
            let unit = m.get("unit").and_then(Value::as_str).unwrap_or("");
            let xs: Vec<f64> = match m.get("value") {
                Some(Value::Array(a)) => a.iter().filter_map(Value::as_f64).collect(),
                Some(v) => v.as_f64().into_iter().collect(),
                None => Vec::new(),
            };
            let entry = values.entry(*name).or_default();
            entry.extend(xs.into_iter().filter_map(|x| to_servebench(x, unit)));
        }
    }
    let metrics = values
        .into_iter()
        .filter_map(|(name, xs)| stat_of(&xs).map(|s| (name.to_string(), s)))
        .collect();
    Ok((metrics, ok, errors))
}

/// The run's provenance: AIPerf's version and configuration, its method.
fn imported(
    files: Vec<String>,
    agg: Option<&Value>,
    point: servebench_model::results::records::PointRecord,
) -> Imported {
    let config = agg.and_then(|a| a.get("input_config")).cloned();
    let find = |ptr: &str| config.as_ref().and_then(|c| c.pointer(ptr)).cloned();
    // AIPerf 0.13's `input_config`: its phases (warm-up, profiling) and models.
    let phase = |kind: &str| {
        config
            .as_ref()
            .and_then(|c| c.get("phases"))
            .and_then(Value::as_array)
            .and_then(|ps| {
                ps.iter()
                    .find(|p| p.get("kind").and_then(Value::as_str) == Some(kind))
            })
            .cloned()
    };
    let profiling = phase("profiling");
    let concurrency = profiling
        .as_ref()
        .and_then(|p| p.get("concurrency"))
        .filter(|c| c.is_u64())
        .cloned();
    let rate = profiling
        .as_ref()
        .and_then(|p| p.get("rate"))
        .filter(|r| r.is_number())
        .cloned();
    let warmup = phase("warmup")
        .and_then(|w| w.get("requests").and_then(Value::as_u64))
        .map_or("none recorded".to_string(), |n| {
            format!("{n} requests before profiling, not counted")
        });
    let mut values = IndexMap::new();
    if let Some(c) = &concurrency {
        values.insert("concurrency".to_string(), c.clone());
    } else if let Some(r) = &rate {
        values.insert("rate".to_string(), r.clone());
    }
    let model = find("/models/items/0/name");
    let mut experiment = json!({});
    if let Some(m) = model {
        experiment["server"] = json!({ "model": m });
    }
    if let Some(url) = find("/endpoint/urls/0").filter(Value::is_string) {
        experiment["server"]["url"] = url;
    }
    if let Some(c) = concurrency {
        experiment["concurrency"] = c;
    }
    if let Some(n) = profiling
        .as_ref()
        .and_then(|p| p.get("requests"))
        .filter(|n| n.is_u64())
    {
        experiment["requests"] = n.clone();
    }
    // Synthetic lengths: a fixed output length when AIPerf drew it with no spread.
    let osl = find("/datasets/0/prompts/osl");
    let fixed = |l: &Value| {
        (l.get("stddev").and_then(Value::as_f64) == Some(0.0))
            .then(|| l.get("mean").and_then(Value::as_f64))
            .flatten()
    };
    if let Some(n) = osl.as_ref().and_then(fixed).filter(|n| n.fract() == 0.0) {
        experiment["workload"] = json!({ "output_tokens": n as u64 });
    }
    let from = ImportedFrom {
        tool: "aiperf".into(),
        version: agg
            .and_then(|a| a.get("aiperf_version"))
            .and_then(Value::as_str)
            .map(str::to_string),
        files,
        config,
        method: method(warmup),
        recorded: Vec::new(),
        notes: vec![
            "AIPerf's standard deviations are population ones; servebench's sample deviation is derived from them and the count".into(),
        ],
    };
    let mut point = point;
    point.values = values;
    Imported {
        from,
        points: vec![point],
        requests: Vec::new(),
        experiment,
        started_at: start_time(agg),
        name: None,
    }
}

/// AIPerf's `start_time`, read as UTC where it names no zone (AIPerf 0.13 writes none).
fn start_time(agg: Option<&Value>) -> Option<String> {
    let s = agg?.get("start_time")?.as_str()?;
    Some(match s.ends_with('Z') || s.contains('+') {
        true => s.to_string(),
        false => format!("{s}Z"),
    })
}

/// How AIPerf measured, aspect by aspect (`comparable`'s terms); `warmup` as its config says.
fn method(warmup: String) -> IndexMap<String, String> {
    let method = [
        ("TTFT origin", "request start → first response chunk with content (AIPerf `time_to_first_token`, client clock)".to_string()),
        ("ITL", "(latency − TTFT) / (output tokens − 1) per request (AIPerf `inter_token_latency`, imported as `tpot_s`); chunk gaps as `icl_s`".to_string()),
        ("warm-up", warmup),
        ("cache state", "not controlled: no flush, no per-request nonce".to_string()),
        ("client placement", "not recorded".to_string()),
        ("prompts", "AIPerf's own dataset or synthetic prompts".to_string()),
    ];
    method
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_keep_their_chunk_times_phase_and_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RECORDS);
        let ok = json!({ "metadata": { "request_start_ns": 2_000_000_000u64, "credit_issued_ns": 1_999_000_000u64,
                "benchmark_phase": "profiling", "x_request_id": "a" },
            "metrics": { "time_to_first_token": { "value": 10.0, "unit": "ms" },
                "inter_chunk_latency": { "value": [2.0, 3.0], "unit": "ms" },
                "request_latency": { "value": 20.0, "unit": "ms" },
                "usage_completion_tokens": { "value": 3, "unit": "tokens" } }, "error": null });
        let failed = json!({ "metadata": { "request_start_ns": 3_000_000_000u64, "benchmark_phase": "warmup" },
            "metrics": {}, "error": { "code": 503, "type": "Service Unavailable", "message": "busy" } });
        std::fs::write(&path, format!("{ok}\n{failed}\n")).unwrap();
        let recs = request_records(&path, Some(3)).unwrap();
        let r = &recs[0];
        assert!((r.sent_at - 2.0).abs() < 1e-12 && (r.scheduled_at.unwrap() - 1.999).abs() < 1e-12);
        let ts: Vec<f64> = r.chunks.iter().map(|c| c.t_s).collect();
        assert!(
            (ts[0] - 0.010).abs() < 1e-12
                && (ts[1] - 0.012).abs() < 1e-12
                && (ts[2] - 0.015).abs() < 1e-12
        );
        assert_eq!((r.completion_tokens, r.max_tokens), (Some(3), 3));
        assert_eq!(r.phase.map(|p| p.to_string()).as_deref(), Some("measure"));
        let f = &recs[1];
        assert_eq!(f.phase.map(|p| p.to_string()).as_deref(), Some("warmup"));
        let e = f.error.as_ref().unwrap();
        assert_eq!((e.status, e.message.as_str()), (Some(503), "AIPerf: busy"));
        assert!(f.chunks.is_empty());
    }

    #[test]
    fn a_bad_record_is_named_by_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RECORDS);
        std::fs::write(&path, "{}\n{oops\n").unwrap();
        let e = request_records(&path, None).unwrap_err().to_string();
        assert!(e.contains("profile_export.jsonl:2:2"), "{e}");
    }
}
