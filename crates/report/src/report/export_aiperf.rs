//! AIPerf 0.13's export artifacts, as its writers make them (`RecordExportJSONLWriter` and
//! `MetricsJsonExporter`, with the pydantic models `MetricRecordInfo` and `JsonExportData`): per
//! point, `profile_export.jsonl` (one record per request: its metadata, its metrics in
//! AIPerf's display units, its error) and `profile_export_aiperf.json` (each metric's
//! statistics over the profiling records). A pure function from the run's records to bytes.
//!
//! Units are AIPerf's: times in milliseconds (`ms`), timestamps in integer nanoseconds since
//! the Unix epoch, token counts in `tokens`, rates in `requests/sec`, `tokens/sec` and
//! `tokens/sec/user`. Metrics follow AIPerf's definitions where they differ from servebench's:
//! `inter_token_latency` is (request latency - TTFT) / (output tokens - the first token
//! chunk's tokens, 1 where the server does not count them per chunk), AIPerf's formula; its
//! statistics use NumPy's linear percentiles and the population standard deviation, as
//! AIPerf's do. Token counts are the server's (as AIPerf's `--use-server-token-count`).
//! What servebench measured that AIPerf has no field for travels in `servebench` keys (AIPerf's
//! models allow extra keys), and what AIPerf would have measured that servebench did not
//! (`worker_id` is servebench's own, HTTP traces, GPU telemetry) is absent.

use indexmap::IndexMap;
use serde_json::{Map, Value, json};

use crate::measure::metrics::{RequestMetrics, request_metrics};
use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::{
    ChunkTokens, Phase, PointRecord, RequestRecord, RequestRole,
};

use super::bound_section;

/// The per-request file's name.
pub(crate) const RECORDS_FILE: &str = "profile_export.jsonl";
/// The aggregate file's name.
pub(crate) const AGGREGATE_FILE: &str = "profile_export_aiperf.json";
/// `JsonExportData.SCHEMA_VERSION` in AIPerf 0.13.
const SCHEMA_VERSION: &str = "1.4";

/// Seconds to AIPerf's milliseconds.
fn ms(s: f64) -> f64 {
    s * 1000.0
}

/// Unix seconds to AIPerf's integer nanoseconds.
fn ns(unix_s: f64) -> i64 {
    (unix_s * 1e9).round() as i64
}

/// Which AIPerf phase a request is in; None for requests AIPerf has no phase for (a load
/// point's cool-down, validity canaries and consistency prompts), which are counted in the
/// aggregate's `servebench.left_out`.
fn phase(r: &RequestRecord) -> Result<&'static str, &'static str> {
    match (r.role, r.phase) {
        (RequestRole::Prime, _) => Ok("warmup"),
        (_, Some(Phase::Warmup)) if r.role.is_measured() => Ok("warmup"),
        (_, Some(Phase::Cooldown)) => Err("cool-down"),
        (role, _) if role.is_measured() => Ok("profiling"),
        (role, _) => Err(role.into()),
    }
}

/// One request's record and its metrics by tag (display units), or why AIPerf has no phase
/// for it.
struct Row {
    record: Value,
    /// Tag to value, for the aggregate (profiling records that succeeded only).
    values: Vec<(&'static str, Vec<f64>)>,
    profiling_ok: bool,
}

/// Tag to values, for the aggregate.
type TagValues = Vec<(&'static str, Vec<f64>)>;

fn metric(m: &mut Map<String, Value>, tag: &str, value: Value, unit: &str) {
    m.insert(tag.into(), json!({ "value": value, "unit": unit }));
}

fn row(r: &RequestRecord, session_num: usize, phase: &'static str) -> Row {
    let rm = request_metrics(r);
    let ok = r.error.is_none();
    let (metrics, values) = if ok {
        aiperf_metrics(r, &rm)
    } else {
        (Map::new(), Vec::new())
    };
    let mut record = Map::new();
    record.insert(
        "metadata".into(),
        Value::Object(metadata(r, session_num, phase)),
    );
    record.insert("metrics".into(), Value::Object(metrics));
    record.insert(
        "error".into(),
        r.error.as_ref().map_or(
            Value::Null,
            |e| json!({ "code": e.status, "type": e.kind.to_string(), "message": e.message }),
        ),
    );
    record.insert("servebench".into(), Value::Object(extension(r, &rm)));
    Row {
        record: Value::Object(record),
        values,
        profiling_ok: ok && phase == "profiling",
    }
}

/// A succeeded request's AIPerf metrics (token counts as the integers AIPerf's records hold)
/// and each one's value for the aggregate.
fn aiperf_metrics(r: &RequestRecord, rm: &RequestMetrics) -> (Map<String, Value>, TagValues) {
    let tokens = |t: Option<u64>| t.map(|t| (json!(t), t as f64));
    let millis = |s: Option<f64>| s.map(|s| (json!(ms(s)), ms(s)));
    let reasoning = rm
        .reasoning_tokens
        .filter(|t| *t > 0.0)
        .map(|t| t.round() as u64);
    let itl_s = aiperf_itl_s(r, rm);
    let per_user = itl_s
        .filter(|i| *i > 0.0)
        .map(|i| (json!(1.0 / i), 1.0 / i));
    let entries = [
        ("request_latency", millis(rm.e2e_s), "ms"),
        ("time_to_first_token", millis(rm.ttft_s), "ms"),
        ("input_sequence_length", tokens(r.prompt_tokens), "tokens"),
        ("usage_prompt_tokens", tokens(r.prompt_tokens), "tokens"),
        (
            "output_sequence_length",
            tokens(r.completion_tokens),
            "tokens",
        ),
        (
            "usage_completion_tokens",
            tokens(r.completion_tokens),
            "tokens",
        ),
        (
            "usage_prompt_cache_read_tokens",
            tokens(r.cached_tokens),
            "tokens",
        ),
        ("reasoning_token_count", tokens(reasoning), "tokens"),
        ("inter_token_latency", millis(itl_s), "ms"),
        (
            "output_token_throughput_per_user",
            per_user,
            "tokens/sec/user",
        ),
    ];
    let mut metrics = Map::new();
    let mut values: Vec<(&'static str, Vec<f64>)> = Vec::new();
    for (tag, value, unit) in entries {
        if let Some((shown, x)) = value
            && x.is_finite()
        {
            metric(&mut metrics, tag, shown, unit);
            values.push((tag, vec![x]));
        }
    }
    if !rm.icl_s.is_empty() {
        let gaps: Vec<f64> = rm.icl_s.iter().map(|g| ms(*g)).collect();
        metric(&mut metrics, "inter_chunk_latency", json!(gaps), "ms");
        values.push(("inter_chunk_latency", gaps));
    }
    (metrics, values)
}

/// AIPerf's ITL, in seconds: the decode window over the tokens after the first content chunk
/// (None under two output tokens).
fn aiperf_itl_s(r: &RequestRecord, rm: &RequestMetrics) -> Option<f64> {
    let (e2e, ttft, osl) = (rm.e2e_s?, rm.ttft_s?, r.completion_tokens?);
    if osl < 2 {
        return None;
    }
    let first = r
        .chunks
        .iter()
        .find(|c| c.tokens > 0)
        .map_or(1, |c| u64::from(c.tokens));
    let first = match r.chunk_tokens {
        Some(ChunkTokens::Exact) if first < osl => first,
        _ => 1,
    };
    Some((e2e - ttft) / (osl - first) as f64)
}

/// A record's `metadata`: its session and turn, its credit, start and end in ns, its phase.
fn metadata(r: &RequestRecord, session_num: usize, phase: &'static str) -> Map<String, Value> {
    let end_s = r
        .end_s
        .or_else(|| r.chunks.last().map(|c| c.t_s))
        .unwrap_or(0.0);
    let mut meta = Map::new();
    meta.insert(
        "session_num".into(),
        json!(
            r.job
                .as_ref()
                .map_or(session_num as u64, |j| u64::from(j.session))
        ),
    );
    if let Some(s) = &r.session_id {
        meta.insert("x_correlation_id".into(), json!(s));
    }
    if let Some(j) = &r.job {
        meta.insert("turn_index".into(), json!(j.turn));
    }
    if let Some(s) = &r.parent_session_id {
        meta.insert("parent_correlation_id".into(), json!(s));
    }
    if let Some(s) = r.scheduled_at {
        meta.insert("credit_issued_ns".into(), json!(ns(s)));
    }
    meta.insert("request_start_ns".into(), json!(ns(r.sent_at)));
    // The end as the start plus the measured span, so the span keeps its nanoseconds.
    meta.insert(
        "request_end_ns".into(),
        json!(ns(r.sent_at) + (end_s * 1e9).round() as i64),
    );
    meta.insert("worker_id".into(), json!("servebench"));
    meta.insert("record_processor_id".into(), json!("servebench"));
    meta.insert("benchmark_phase".into(), json!(phase));
    meta
}

/// What servebench measured of a request that AIPerf's record has no field for.
fn extension(r: &RequestRecord, rm: &RequestMetrics) -> Map<String, Value> {
    let mut ext = Map::new();
    ext.insert("point".into(), json!(r.point));
    ext.insert("round".into(), json!(r.round));
    ext.insert("index".into(), json!(r.index));
    ext.insert(
        "role".into(),
        serde_json::to_value(r.role).unwrap_or(Value::Null),
    );
    for (k, v) in [
        ("tpot_s", rm.tpot_s),
        ("decode_tok_s", rm.decode_tok_s),
        ("prefill_tok_s", rm.prefill_tok_s),
        ("ttfa_s", rm.ttfa_s),
        ("accept_length", rm.accept_length),
        ("server_ttft_s", r.server_ttft_s),
        ("connect_s", r.connect_s),
    ] {
        if let Some(x) = v.filter(|x| x.is_finite()) {
            ext.insert(k.into(), json!(x));
        }
    }
    if let Some(f) = &r.finish_reason {
        ext.insert("finish_reason".into(), json!(f));
    }
    ext
}

/// NumPy's `percentile` (linear) of sorted `xs`.
fn percentile(xs: &[f64], q: f64) -> f64 {
    let r = q / 100.0 * (xs.len() - 1) as f64;
    let (lo, hi) = (r.floor() as usize, r.ceil() as usize);
    xs[lo] + (xs[hi] - xs[lo]) * (r - lo as f64)
}

/// A record metric's statistics as AIPerf's `JsonMetricResult`.
fn record_stats(mut xs: Vec<f64>, unit: &str) -> Value {
    xs.sort_by(f64::total_cmp);
    let n = xs.len() as f64;
    let sum: f64 = xs.iter().sum();
    let avg = sum / n;
    let std = (xs.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / n).sqrt();
    let mut m = Map::new();
    m.insert("unit".into(), json!(unit));
    m.insert("avg".into(), json!(avg));
    for q in [1, 5, 10, 25, 50, 75, 90, 95, 99] {
        m.insert(format!("p{q}"), json!(percentile(&xs, f64::from(q))));
    }
    m.insert("min".into(), json!(xs[0]));
    m.insert("max".into(), json!(xs[xs.len() - 1]));
    m.insert("std".into(), json!(std));
    m.insert("count".into(), json!(xs.len()));
    m.insert("sum".into(), json!(sum));
    Value::Object(m)
}

/// Units of the record metrics, by tag.
fn unit(tag: &str) -> &'static str {
    match tag {
        "request_latency"
        | "time_to_first_token"
        | "inter_token_latency"
        | "inter_chunk_latency" => "ms",
        "output_token_throughput_per_user" => "tokens/sec/user",
        _ => "tokens",
    }
}

/// One point's two files: the JSONL's bytes and the aggregate's JSON.
pub(crate) struct PointExport {
    pub(crate) point: String,
    pub(crate) records: Vec<u8>,
    pub(crate) aggregate: Value,
}

/// Each point's export, in record order; `requests` is the run's `requests.jsonl`.
pub(crate) fn export(
    meta: &RunMeta,
    points: &[PointRecord],
    requests: &[RequestRecord],
) -> Vec<PointExport> {
    let section = bound_section::section(meta, points, &IndexMap::new());
    let graded = bound_section::graded_values(section.as_ref());
    points
        .iter()
        .map(|p| {
            let mut records = Vec::new();
            let mut by_tag: IndexMap<&'static str, Vec<f64>> = IndexMap::new();
            let mut left_out: IndexMap<&'static str, usize> = IndexMap::new();
            let (mut ok, mut errors) = (0usize, Vec::new());
            for (i, r) in requests.iter().filter(|r| r.point == p.id).enumerate() {
                let phase = match phase(r) {
                    Ok(phase) => phase,
                    Err(why) => {
                        *left_out.entry(why).or_default() += 1;
                        continue;
                    }
                };
                let row = row(r, i, phase);
                serde_json::to_writer(&mut records, &row.record).expect("a Value serialises");
                records.push(b'\n');
                if phase == "profiling" {
                    match &r.error {
                        None => ok += 1,
                        Some(e) => errors.push(e),
                    }
                }
                if row.profiling_ok {
                    for (tag, xs) in row.values {
                        by_tag.entry(tag).or_default().extend(xs);
                    }
                }
            }
            let mut agg = Map::new();
            agg.insert("schema_version".into(), json!(SCHEMA_VERSION));
            agg.insert(
                "benchmark_id".into(),
                json!(format!(
                    "{}/{}/{}",
                    meta.experiment.name, meta.started_at, p.id
                )),
            );
            agg.insert(
                "request_count".into(),
                json!({ "unit": "requests", "avg": ok }),
            );
            if !errors.is_empty() {
                agg.insert(
                    "error_request_count".into(),
                    json!({ "unit": "requests", "avg": errors.len() }),
                );
            }
            for (tag, xs) in by_tag {
                agg.insert(tag.into(), record_stats(xs, unit(tag)));
            }
            for (tag, name, unit) in [
                ("request_throughput", "throughput_req_s", "requests/sec"),
                ("output_token_throughput", "output_tok_s", "tokens/sec"),
                ("total_token_throughput", "total_tok_s", "tokens/sec"),
                ("input_token_throughput", "input_tok_s", "tokens/sec"),
            ] {
                if let Some(s) = p
                    .metrics
                    .get(name)
                    .filter(|s| s.count > 0 && s.mean.is_finite())
                {
                    agg.insert(tag.into(), json!({ "unit": unit, "avg": s.mean }));
                }
            }
            if let Some(w) = &p.wall {
                agg.insert("start_time".into(), json!(naive(w.started_at)));
                agg.insert("end_time".into(), json!(naive(w.ended_at)));
            }
            agg.insert("was_cancelled".into(), json!(p.incomplete));
            agg.insert("is_complete".into(), json!(!p.incomplete));
            if !errors.is_empty() {
                agg.insert("error_summary".into(), error_summary(&errors));
            }
            let ext = aggregate_extension(meta, p, left_out, (section.as_ref(), &graded));
            agg.insert("servebench".into(), Value::Object(ext));
            PointExport {
                point: p.id.clone(),
                records,
                aggregate: Value::Object(agg),
            }
        })
        .collect()
}

/// AIPerf's `error_summary`: each distinct error with how many requests had it.
fn error_summary(errors: &[&servebench_model::results::records::RequestError]) -> Value {
    let mut counts: IndexMap<(Option<u16>, String, String), usize> = IndexMap::new();
    for e in errors {
        *counts
            .entry((e.status, e.kind.to_string(), e.message.clone()))
            .or_default() += 1;
    }
    let summary: Vec<Value> = counts
        .into_iter()
        .map(|((code, kind, message), count)| {
            json!({
                "error_details": { "code": code, "type": kind, "message": message },
                "count": count,
            })
        })
        .collect();
    json!(summary)
}

/// What servebench knows of a point that AIPerf's aggregate has no field for: its own record,
/// its bound, the requests AIPerf has no phase for.
fn aggregate_extension(
    meta: &RunMeta,
    p: &PointRecord,
    left_out: IndexMap<&'static str, usize>,
    (section, graded): (
        Option<&bound_section::BoundSection>,
        &IndexMap<String, IndexMap<&'static str, f64>>,
    ),
) -> Map<String, Value> {
    let mut ext = Map::new();
    ext.insert("tool_version".into(), json!(meta.tool_version));
    ext.insert(
        "note".into(),
        json!(
            "servebench's own record of the point (points.jsonl), in servebench's stored units (seconds, tokens/s, tokens); AIPerf's statistics above are over the profiling requests that succeeded; `bound`: the point graded against the GPU's datasheet, with what was assumed"
        ),
    );
    if !left_out.is_empty() {
        ext.insert("left_out".into(), json!(left_out));
    }
    ext.insert(
        "point".into(),
        serde_json::to_value(p).unwrap_or(Value::Null),
    );
    if let (Some(s), Some(figures)) = (section, graded.get(&p.id)) {
        ext.insert(
            "bound".into(),
            json!({ "figures": figures, "gpu": s.gpu, "assumptions": s.assumptions }),
        );
    }
    ext
}

/// Unix seconds as an RFC 3339 UTC time (AIPerf writes a `datetime`; the offset keeps it
/// unambiguous where AIPerf's own is the writer's local time).
fn naive(unix_s: f64) -> String {
    chrono::DateTime::from_timestamp_nanos(ns(unix_s))
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
