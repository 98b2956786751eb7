//! llm-d's Benchmark Report v0.2 (llm-d-benchmark, `br_v0_2_json_schema.json` and its pydantic
//! models `schema_v0_2.py`): one report per point, a pure function from the run's records to
//! JSON. Each figure goes in the field whose definition is servebench's (TTFT, TPOT, ITL and
//! request latency in seconds, token rates in tokens/s, lengths in tokens), with the units the
//! schema's validators allow for it; an agent-session point has its `session_performance`
//! section. What servebench measured that the format has no field for (every metric of the
//! point with its statistics, the point's flags and status, the graded figures against the
//! hardware with their assumptions) is under `results.observability.servebench`, the one
//! place the schema leaves open (`Observability` allows extra keys); what the format asks for
//! that servebench did not measure is left out, never made up.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::{PointRecord, Stat};

use super::bound_section;

/// The version this writer follows (the `version` field).
pub(crate) const VERSION: &str = "0.2";

/// One report per point, each with its file name (`<point id>.json`), in record order.
pub(crate) fn reports(meta: &RunMeta, points: &[PointRecord]) -> Vec<(String, Value)> {
    let section = bound_section::section(meta, points, &indexmap::IndexMap::new());
    let graded = bound_section::graded_values(section.as_ref());
    points
        .iter()
        .map(|p| {
            let mut bound = Map::new();
            if let (Some(s), Some(figures)) = (&section, graded.get(&p.id)) {
                bound.insert("figures".into(), json!(figures));
                bound.insert("gpu".into(), json!(s.gpu));
                bound.insert("assumptions".into(), json!(s.assumptions));
            }
            (format!("{}.json", p.id), report(meta, p, bound))
        })
        .collect()
}

/// A short, stable hex id of `parts` (llm-d's ids are 32 hex digits).
fn id(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn report(meta: &RunMeta, p: &PointRecord, bound: Map<String, Value>) -> Value {
    let name = &meta.experiment.name;
    let mut run = Map::new();
    run.insert("uid".into(), json!(id(&[name, &meta.started_at, &p.id])));
    run.insert("eid".into(), json!(id(&[name, &meta.started_at])));
    if let Some(w) = &p.wall {
        run.insert(
            "time".into(),
            json!({
                "start": iso(w.started_at),
                "end": iso(w.ended_at),
                "duration": format!("PT{}S", w.ended_at - w.started_at),
            }),
        );
    }
    if !meta.experiment.description.is_empty() {
        run.insert("description".into(), json!(meta.experiment.description));
    }
    run.insert("keywords".into(), json!(["servebench", name, p.id]));

    let mut results = Map::new();
    results.insert(
        "request_performance".into(),
        json!({ "aggregate": aggregate(p) }),
    );
    if let Some(s) = sessions(p) {
        results.insert(
            "session_performance".into(),
            json!({ "sessions": Value::Object(s) }),
        );
    }
    let mut ext = Map::new();
    ext.insert("tool_version".into(), json!(meta.tool_version));
    ext.insert(
        "note".into(),
        json!(
            "servebench's own record of the point (points.jsonl): every metric with its statistics in servebench's stored units (seconds, tokens/s, tokens), flags, status; `bound`: the point graded against the GPU's datasheet, with what was assumed"
        ),
    );
    ext.insert(
        "point".into(),
        serde_json::to_value(p).unwrap_or(Value::Null),
    );
    if !bound.is_empty() {
        ext.insert("bound".into(), Value::Object(bound));
    }
    results.insert("observability".into(), json!({ "servebench": ext }));

    let mut doc = Map::new();
    doc.insert("version".into(), json!(VERSION));
    doc.insert("run".into(), Value::Object(run));
    doc.insert("scenario".into(), scenario(meta, p));
    doc.insert("results".into(), Value::Object(results));
    Value::Object(doc)
}

/// Unix seconds as RFC 3339 UTC.
fn iso(unix_s: f64) -> String {
    let nanos = (unix_s * 1e9).round() as i64;
    chrono::DateTime::from_timestamp_nanos(nanos)
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A servebench statistic in llm-d's shape; None when it has no finite mean.
fn stat(s: Option<&Stat>, units: &str) -> Option<Value> {
    let s = s.filter(|s| s.count > 0 && s.mean.is_finite())?;
    let mut m = Map::new();
    m.insert("units".into(), json!(units));
    m.insert("mean".into(), json!(s.mean));
    if let Some(sd) = s.std.filter(|x| x.is_finite()) {
        m.insert("stddev".into(), json!(sd));
    }
    for (k, v) in [
        ("min", s.min),
        ("p50", s.p50),
        ("p90", s.p90),
        ("p99", s.p99),
        ("max", s.max),
    ] {
        if v.is_finite() {
            m.insert(k.into(), json!(v));
        }
    }
    Some(Value::Object(m))
}

/// Inserts `key: value` when there is a value.
fn put(m: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        m.insert(key.into(), v);
    }
}

fn aggregate(p: &PointRecord) -> Value {
    let metric = |name: &str| p.metrics.get(name);
    let mut requests = Map::new();
    requests.insert("total".into(), json!(p.ok + p.errors));
    requests.insert("failures".into(), json!(p.errors));
    put(
        &mut requests,
        "input_length",
        stat(metric("prompt_tokens"), "count"),
    );
    put(
        &mut requests,
        "output_length",
        stat(metric("completion_tokens"), "count"),
    );
    let mut latency = Map::new();
    put(
        &mut latency,
        "time_to_first_token",
        stat(metric("ttft_s"), "s"),
    );
    put(
        &mut latency,
        "time_per_output_token",
        stat(metric("tpot_s"), "s/token"),
    );
    put(
        &mut latency,
        "inter_token_latency",
        stat(metric("itl_s"), "s/token"),
    );
    put(&mut latency, "request_latency", stat(metric("e2e_s"), "s"));
    let mut throughput = Map::new();
    put(
        &mut throughput,
        "input_token_rate",
        stat(metric("input_tok_s"), "tokens/s"),
    );
    put(
        &mut throughput,
        "output_token_rate",
        stat(metric("output_tok_s"), "tokens/s"),
    );
    put(
        &mut throughput,
        "total_token_rate",
        stat(metric("total_tok_s"), "tokens/s"),
    );
    put(
        &mut throughput,
        "request_rate",
        stat(metric("throughput_req_s"), "queries/s"),
    );
    json!({ "requests": requests, "latency": latency, "throughput": throughput })
}

/// Mean, min, max and linearly interpolated percentiles of `xs` in llm-d's shape.
fn dist(mut xs: Vec<f64>, units: &str) -> Option<Value> {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    let q = |f: f64| {
        let r = f * (n - 1) as f64;
        let (lo, hi) = (r.floor() as usize, r.ceil() as usize);
        xs[lo] + (xs[hi] - xs[lo]) * (r - lo as f64)
    };
    Some(json!({
        "units": units,
        "mean": xs.iter().sum::<f64>() / n as f64,
        "min": xs[0],
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "max": xs[n - 1],
    }))
}

/// An agent-session point's sessions (`load: { kind: agentic }`); None for other points.
fn sessions(p: &PointRecord) -> Option<Map<String, Value>> {
    let jobs = p.jobs.as_ref()?;
    let mut s = Map::new();
    s.insert("total".into(), json!(jobs.started));
    s.insert("succeeded".into(), json!(jobs.completed));
    // Stopped by their own course (a failed turn, the server's context), not by the point's end.
    s.insert("failed".into(), json!(jobs.stopped - jobs.truncated));
    if jobs.window_s > 0.0 {
        s.insert(
            "session_rate".into(),
            json!({ "units": "queries/s", "mean": jobs.completed as f64 / jobs.window_s }),
        );
    }
    // Per-session figures only when every session is kept one by one (the first 10,000 are).
    if jobs.sessions.len() == jobs.started {
        let kept = &jobs.sessions;
        s.insert(
            "total_events".into(),
            json!(kept.iter().map(|j| u64::from(j.sent)).sum::<u64>()),
        );
        s.insert(
            "total_events_completed".into(),
            json!(
                kept.iter()
                    .map(|j| u64::from(j.sent - j.failed))
                    .sum::<u64>()
            ),
        );
        put(
            &mut s,
            "session_duration",
            dist(kept.iter().filter_map(|j| j.duration_s).collect(), "s"),
        );
        put(
            &mut s,
            "events_per_session",
            dist(kept.iter().map(|j| f64::from(j.sent)).collect(), "count"),
        );
        put(
            &mut s,
            "input_tokens_per_session",
            dist(
                kept.iter().map(|j| j.prompt_tokens as f64).collect(),
                "count",
            ),
        );
        put(
            &mut s,
            "output_tokens_per_session",
            dist(
                kept.iter().map(|j| j.completion_tokens as f64).collect(),
                "count",
            ),
        );
    }
    Some(s)
}

fn scenario(meta: &RunMeta, p: &PointRecord) -> Value {
    let stack: Vec<Value> = meta
        .servers
        .iter()
        .filter(|s| s.group == p.group)
        .map(|s| {
            let version = s
                .server_info
                .as_ref()
                .and_then(|i| i.get("version"))
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            json!({
                "metadata": {
                    "schema_version": "0.0.1",
                    "label": format!("{} ({})", s.group, s.engine),
                    "cfg_id": id(&[&serde_json::to_string(&s.args).unwrap_or_default()]),
                },
                // servebench does not always know the GPU model and count a server ran on,
                // which `inference_engine` requires: a generic component says what is known.
                "standardized": {
                    "kind": "generic",
                    "tool": s.engine,
                    "tool_version": version,
                    "url": s.url,
                },
                "native": { "args": s.args, "envars": s.env },
            })
        })
        .collect();
    let mut sc = Map::new();
    sc.insert("stack".into(), json!(stack));
    if let Some(load) = load(meta, p) {
        sc.insert("load".into(), load);
    }
    Value::Object(sc)
}

/// The workload; None without a prompt length (the schema requires one).
fn load(meta: &RunMeta, p: &PointRecord) -> Option<Value> {
    let input = match p.requested_prompt_tokens {
        Some(n) => json!({ "distribution": "fixed", "value": n }),
        None => {
            let mean = p.metrics.get("prompt_tokens").filter(|s| s.count > 0)?.mean;
            json!({ "distribution": "other", "value": mean })
        }
    };
    let mut std = Map::new();
    std.insert("tool".into(), json!("servebench"));
    std.insert("tool_version".into(), json!(meta.tool_version));
    std.insert("source".into(), json!("unknown"));
    std.insert("input_seq_len".into(), input);
    if let Some(c) = p.values.get("concurrency").and_then(Value::as_f64)
        && c >= 1.0
    {
        std.insert("concurrency".into(), json!(c));
    }
    if p.jobs.is_some() {
        std.insert("multi_turn".into(), json!({ "enabled": true }));
    }
    let config = serde_json::to_value(&meta.experiment).unwrap_or(Value::Null);
    Some(json!({
        "metadata": {
            "schema_version": "0.0.1",
            "cfg_id": id(&[&config.to_string()]),
            "description": format!("servebench point {} of {}", p.id, meta.experiment.name),
        },
        "standardized": std,
        "native": { "args": p.values, "config": config },
    }))
}
