//! `servebench export`: llm-d Benchmark Reports validated against llm-d's published JSON
//! Schemas (`tests/fixtures/llm-d`, see its README), and AIPerf's artifacts held to the shape
//! and units AIPerf 0.13's writers give them (the real-engine tier loads them with AIPerf's own
//! models: `tests/real_engine/aiperf.rs` in the root).

use serde_json::{Value, json};

use super::fixtures;
use servebench_model::results::records::{Phase, PointRecord, RequestRole};
use servebench_report::report::exports;

/// Every fixture run whose files are whole (`contaminated` holds a cut line on purpose).
const RUNS: &[&str] = &[
    "bound-sweep",
    "capacity-search",
    "clean-sweep",
    "load-pareto",
    "load-rate",
    "shared-prefix",
    "two-point-crash",
    "validity",
];

fn schema(name: &str) -> jsonschema::Validator {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llm-d")
        .join(name);
    let schema: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).expect("llm-d's schema compiles")
}

fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

fn llmd(name: &str) -> (Vec<PointRecord>, Vec<(String, Value)>) {
    let dir = fixtures().open(name);
    let meta = dir.read_meta().unwrap();
    let points = dir.read_points().unwrap();
    let reports = exports::llmd_reports(&meta, &points);
    (points, reports)
}

#[test]
fn llm_d_reports_of_every_fixture_run_validate_against_llm_d_s_published_schemas() {
    let v02 = schema("br_v0_2_json_schema.json");
    let v021 = schema("br_v0_2_1_json_schema.json");
    for name in RUNS {
        let (points, reports) = llmd(name);
        assert_eq!(reports.len(), points.len(), "{name}: one report per point");
        for ((file, doc), p) in reports.iter().zip(&points) {
            assert_eq!(file, &format!("{}.json", p.id));
            assert_eq!(doc["version"], "0.2");
            assert!(
                errors(&v02, doc).is_empty(),
                "{name} {file}: {:#?}",
                errors(&v02, doc)
            );
            assert!(
                errors(&v021, doc).is_empty(),
                "{name} {file}: {:#?}",
                errors(&v021, doc)
            );
        }
        let uids: std::collections::HashSet<&Value> =
            reports.iter().map(|(_, d)| &d["run"]["uid"]).collect();
        assert_eq!(uids.len(), reports.len(), "{name}: each report its own uid");
    }
    // The schema is strict enough to catch a misspelt field.
    let (_, reports) = llmd("clean-sweep");
    let mut doc = reports[0].1.clone();
    doc["results"]["request_performance"]["aggregate"]["latency"]["ttft"] = json!({});
    assert!(!errors(&v02, &doc).is_empty());
}

/// The units llm-d's validators (`schema_v0_2.py`'s `check_units`) allow per field.
fn allowed(field: &str) -> &'static [&'static str] {
    match field {
        "time_to_first_token" | "request_latency" | "session_duration" => &["ms", "s"],
        "time_per_output_token" | "inter_token_latency" | "normalized_time_per_output_token" => {
            &["ms/token", "s/token"]
        }
        "input_token_rate" | "output_token_rate" | "total_token_rate" => &["tokens/s"],
        "request_rate" | "session_rate" => &["queries/s"],
        _ => &["count", "pixels"],
    }
}

/// Every statistic below `v` with its field name.
fn statistics<'a>(field: &'a str, v: &'a Value, out: &mut Vec<(&'a str, &'a Value)>) {
    if let Some(m) = v.as_object() {
        if m.contains_key("units") && m.contains_key("mean") {
            out.push((field, v));
            return;
        }
        for (k, x) in m {
            if k != "observability" {
                statistics(k, x, out);
            }
        }
    }
}

#[test]
fn llm_d_figures_are_the_point_s_own_in_units_llm_d_allows_and_the_rest_travels_with_them() {
    for name in RUNS {
        let (points, reports) = llmd(name);
        for ((file, doc), p) in reports.iter().zip(&points) {
            let mut stats = Vec::new();
            statistics("", &doc["results"], &mut stats);
            for (field, s) in stats {
                assert!(
                    allowed(field).contains(&s["units"].as_str().unwrap()),
                    "{name} {file}: {field} in {}",
                    s["units"]
                );
            }
            let agg = &doc["results"]["request_performance"]["aggregate"];
            assert_eq!(agg["requests"]["total"], json!(p.ok + p.errors));
            assert_eq!(agg["requests"]["failures"], json!(p.errors));
            for (field, metric) in [
                ("time_to_first_token", "ttft_s"),
                ("time_per_output_token", "tpot_s"),
                ("inter_token_latency", "itl_s"),
                ("request_latency", "e2e_s"),
            ] {
                let shown = &agg["latency"][field];
                match p.metrics.get(metric).filter(|s| s.count > 0) {
                    Some(s) => {
                        assert_eq!(shown["mean"], json!(s.mean), "{name} {file} {field}");
                        assert_eq!(shown["p99"], json!(s.p99), "{name} {file} {field}");
                    }
                    // Not measured: absent, never made up.
                    None => assert!(shown.is_null(), "{name} {file}: {field} {shown}"),
                }
            }
            // Everything servebench measured travels in the extension, every metric included.
            let ext = &doc["results"]["observability"]["servebench"]["point"];
            let names: Vec<&String> = ext["metrics"].as_object().unwrap().keys().collect();
            assert_eq!(names, p.metrics.keys().collect::<Vec<_>>(), "{name} {file}");
        }
    }
}

#[test]
fn llm_d_reports_carry_the_graded_figures_with_their_assumptions() {
    let (_, reports) = llmd("bound-sweep");
    let graded: Vec<&Value> = reports
        .iter()
        .map(|(_, d)| &d["results"]["observability"]["servebench"]["bound"])
        .filter(|b| !b.is_null())
        .collect();
    assert!(!graded.is_empty(), "bound-sweep's points are graded");
    for b in graded {
        assert!(b["figures"]["step_floor_s"].as_f64().unwrap() > 0.0, "{b}");
        assert!(b["figures"]["decode_bw_fraction"].as_f64().is_some(), "{b}");
        assert!(b["gpu"]["bandwidth_gb_s"].as_f64().unwrap() > 0.0, "{b}");
        assert!(b["assumptions"].is_array(), "{b}");
    }
}

/// A fixture point made an agent-session point: 3 sessions, one stopped by a failed turn.
fn agentic_point() -> (servebench_model::results::meta::RunMeta, Vec<PointRecord>) {
    let dir = fixtures().open("clean-sweep");
    let meta = dir.read_meta().unwrap();
    let mut points = dir.read_points().unwrap();
    points.truncate(1);
    let session = |i: u32, sent: u32, failed: u32, d: f64, stopped: Option<&str>| {
        json!({
            "session": i, "trace_id": format!("t{i}"), "turns": 4, "sent": sent,
            "failed": failed, "completion_s": if stopped.is_none() { json!(d) } else { Value::Null },
            "stopped": stopped, "duration_s": d, "prompt_tokens": 1000 * u64::from(sent),
            "completion_tokens": 10 * u64::from(sent), "cached_tokens": 0,
        })
    };
    points[0].jobs = Some(
        serde_json::from_value(json!({
            "live": 2, "live_mean": 1.5, "window_s": 20.0, "started": 3, "completed": 2,
            "stopped": 1, "truncated": 0, "jobs_per_hour": 360.0, "ttft_by_context": [],
            "sessions": [
                session(0, 4, 0, 8.0, None),
                session(1, 4, 0, 10.0, None),
                session(2, 2, 1, 3.0, Some("a turn failed: 500")),
            ],
        }))
        .unwrap(),
    );
    (meta, points)
}

#[test]
fn an_agent_session_point_has_its_session_performance_section() {
    let (meta, points) = agentic_point();
    let reports = exports::llmd_reports(&meta, &points);
    let doc = &reports[0].1;
    let s = &doc["results"]["session_performance"]["sessions"];
    assert_eq!(s["total"], 3);
    assert_eq!(s["succeeded"], 2);
    assert_eq!(s["failed"], 1);
    assert_eq!(s["total_events"], 10);
    assert_eq!(s["total_events_completed"], 9);
    assert_eq!(
        s["session_rate"],
        json!({ "units": "queries/s", "mean": 0.1 })
    );
    assert_eq!(s["session_duration"]["mean"], 7.0);
    assert_eq!(s["session_duration"]["p50"], 8.0);
    assert_eq!(s["session_duration"]["units"], "s");
    assert_eq!(s["events_per_session"]["max"], 4.0);
    assert_eq!(
        doc["scenario"]["load"]["standardized"]["multi_turn"],
        json!({ "enabled": true })
    );
    let v021 = schema("br_v0_2_1_json_schema.json");
    assert!(errors(&v021, doc).is_empty(), "{:#?}", errors(&v021, doc));
    // The published v0.2 file predates the section its own models write (fixtures' README):
    // without it the report is valid v0.2 as published.
    let v02 = schema("br_v0_2_json_schema.json");
    let mut without = doc.clone();
    without["results"]
        .as_object_mut()
        .unwrap()
        .remove("session_performance");
    assert!(
        errors(&v02, &without).is_empty(),
        "{:#?}",
        errors(&v02, &without)
    );
    // Other points have no session section.
    let (_, plain) = llmd("clean-sweep");
    assert!(plain[0].1["results"]["session_performance"].is_null());
}

// ---- AIPerf ----

/// AIPerf 0.13's display unit per metric tag servebench writes (each metric class's
/// `display_unit or unit` in `aiperf/metrics/types/`).
fn aiperf_unit(tag: &str) -> Option<&'static str> {
    Some(match tag {
        "request_latency"
        | "time_to_first_token"
        | "inter_token_latency"
        | "inter_chunk_latency" => "ms",
        "output_token_throughput_per_user" => "tokens/sec/user",
        "input_sequence_length"
        | "output_sequence_length"
        | "usage_prompt_tokens"
        | "usage_completion_tokens"
        | "usage_prompt_cache_read_tokens"
        | "reasoning_token_count" => "tokens",
        "request_throughput" => "requests/sec",
        "output_token_throughput" | "total_token_throughput" | "input_token_throughput" => {
            "tokens/sec"
        }
        "request_count" | "error_request_count" => "requests",
        _ => return None,
    })
}

fn aiperf(name: &str) -> (Vec<PointRecord>, Vec<exports::AiperfPoint>) {
    let dir = fixtures().open(name);
    let meta = dir.read_meta().unwrap();
    let points = dir.read_points().unwrap();
    let requests = dir.read_requests().unwrap();
    let out = exports::aiperf_exports(&meta, &points, &requests);
    (points, out)
}

#[test]
fn aiperf_records_are_the_requests_in_aiperf_s_units_and_shape() {
    for name in RUNS {
        let dir = fixtures().open(name);
        let requests = dir.read_requests().unwrap();
        let (points, out) = aiperf(name);
        assert_eq!(out.len(), points.len());
        for ((id, lines, agg), p) in out.iter().zip(&points) {
            assert_eq!(id, &p.id);
            let mine: Vec<_> = requests.iter().filter(|r| r.point == p.id).collect();
            let mut profiling_ok = 0;
            let mut by_request = mine.iter().filter(|r| {
                r.role == RequestRole::Prime
                    || (r.role.is_measured() && r.phase != Some(Phase::Cooldown))
            });
            for line in lines {
                let r = by_request
                    .next()
                    .expect("one line per request AIPerf has a phase for");
                let meta = &line["metadata"];
                for key in [
                    "session_num",
                    "request_start_ns",
                    "request_end_ns",
                    "worker_id",
                ] {
                    assert!(!meta[key].is_null(), "{name} {id}: {key} in {line}");
                }
                let start = meta["request_start_ns"].as_i64().unwrap();
                assert_eq!(start, (r.sent_at * 1e9).round() as i64);
                let phase = meta["benchmark_phase"].as_str().unwrap();
                assert!(["warmup", "profiling"].contains(&phase));
                for (tag, m) in line["metrics"].as_object().unwrap() {
                    assert_eq!(
                        Some(m["unit"].as_str().unwrap()),
                        aiperf_unit(tag),
                        "{name} {id}: {tag}"
                    );
                }
                if let Some(e2e) = r.end_s.filter(|_| r.error.is_none()) {
                    // Seconds to milliseconds, and the timestamps span the same time.
                    assert_eq!(
                        line["metrics"]["request_latency"]["value"],
                        json!(e2e * 1000.0)
                    );
                    let end = meta["request_end_ns"].as_i64().unwrap();
                    assert_eq!(end - start, (e2e * 1e9).round() as i64);
                }
                if let Some(first) = r.chunks.iter().find(|c| c.tokens > 0)
                    && r.error.is_none()
                {
                    assert_eq!(
                        line["metrics"]["time_to_first_token"]["value"],
                        json!(first.t_s * 1000.0)
                    );
                }
                if let Some(n) = r.completion_tokens.filter(|_| r.error.is_none()) {
                    assert_eq!(line["metrics"]["output_sequence_length"]["value"], json!(n));
                }
                match &r.error {
                    Some(e) => assert_eq!(line["error"]["message"], json!(e.message)),
                    None => assert!(line["error"].is_null()),
                }
                if phase == "profiling" && r.error.is_none() {
                    profiling_ok += 1;
                }
            }
            assert!(
                by_request.next().is_none(),
                "{name} {id}: a request left out"
            );
            assert_eq!(agg["schema_version"], "1.4");
            assert_eq!(agg["request_count"]["avg"], json!(profiling_ok));
            for (tag, m) in agg.as_object().unwrap() {
                if m.get("unit").is_some() {
                    assert_eq!(Some(m["unit"].as_str().unwrap()), aiperf_unit(tag), "{tag}");
                }
            }
            if profiling_ok > 0 && agg.get("time_to_first_token").is_some() {
                assert_eq!(agg["time_to_first_token"]["count"], json!(profiling_ok));
            }
            // servebench's own record travels with it.
            assert_eq!(agg["servebench"]["point"]["id"], json!(p.id));
        }
    }
}

#[test]
fn aiperf_statistics_are_numpy_s_linear_percentiles_and_population_std() {
    // clean-sweep's first point: TTFTs from its requests, checked by hand.
    let dir = fixtures().open("clean-sweep");
    let requests = dir.read_requests().unwrap();
    let (points, out) = aiperf("clean-sweep");
    let p = &points[0];
    let mut ttft: Vec<f64> = requests
        .iter()
        .filter(|r| r.point == p.id && r.error.is_none())
        .filter_map(|r| {
            r.chunks
                .iter()
                .find(|c| c.tokens > 0)
                .map(|c| c.t_s * 1000.0)
        })
        .collect();
    ttft.sort_by(f64::total_cmp);
    let n = ttft.len() as f64;
    assert!(n >= 2.0);
    let avg = ttft.iter().sum::<f64>() / n;
    let std = (ttft.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / n).sqrt();
    let agg = &out[0].2["time_to_first_token"];
    assert_eq!(agg["avg"], json!(avg));
    assert_eq!(agg["std"], json!(std));
    assert_eq!(agg["min"], json!(ttft[0]));
    // p25 between the ranks (n - 1) * 0.25 apart.
    let r = 0.25 * (n - 1.0);
    let (lo, hi) = (r.floor() as usize, r.ceil() as usize);
    assert_eq!(
        agg["p25"],
        json!(ttft[lo] + (ttft[hi] - ttft[lo]) * (r - lo as f64))
    );
}

#[test]
fn aiperf_export_counts_the_requests_aiperf_has_no_phase_for() {
    // validity: canaries and consistency prompts; load-rate: a cool-down.
    let (_, out) = aiperf("validity");
    let left: u64 = out
        .iter()
        .map(|(_, _, a)| {
            a["servebench"]["left_out"]
                .as_object()
                .map_or(0, |m| m.values().map(|v| v.as_u64().unwrap()).sum())
        })
        .sum();
    assert_eq!(left, 24, "12 canaries and 12 consistency prompts");
    let (_, out) = aiperf("load-rate");
    let cool: u64 = out
        .iter()
        .filter_map(|(_, _, a)| a["servebench"]["left_out"]["cool-down"].as_u64())
        .sum();
    assert_eq!(cool, 4);
    let warm: usize = out
        .iter()
        .flat_map(|(_, lines, _)| lines)
        .filter(|l| l["metadata"]["benchmark_phase"] == "warmup")
        .count();
    assert_eq!(warm, 6);
}

#[test]
fn aiperf_export_names_failed_requests_as_aiperf_does() {
    let (_, out) = aiperf("two-point-crash");
    let failed: Vec<&Value> = out
        .iter()
        .flat_map(|(_, lines, _)| lines)
        .filter(|l| !l["error"].is_null())
        .collect();
    assert_eq!(failed.len(), 1);
    assert!(failed[0]["error"]["message"].as_str().is_some());
    assert!(failed[0]["metrics"].as_object().unwrap().is_empty());
    let summary: Vec<&Value> = out
        .iter()
        .filter_map(|(_, _, a)| a.get("error_summary"))
        .collect();
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0][0]["count"], 1);
}
