//! `servebench import` on files the real tools wrote (tests/fixtures/import, README there for
//! the commands): each number checked against the file's own value, units converted; an
//! imported run compared beside a servebench run of the same simulator, the method differences
//! said before any number.

use std::path::{Path, PathBuf};

use crate::common::*;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(rel)
}

/// `servebench import PATH [ARGS]` into a fresh run directory under `ws`: its point.
fn import(ws: &Workspace, path: &Path, args: &[&str]) -> (PathBuf, serde_json::Value) {
    let out = ws.path().join(format!("imported-{}", args.len()));
    let o = servebench()
        .arg("import")
        .arg(path)
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let points = read_jsonl(&out.join("points.jsonl"));
    assert_eq!(points.len(), 1);
    (out, points[0].clone())
}

#[track_caller]
fn close(a: &serde_json::Value, b: f64) {
    let a = a.as_f64().unwrap_or(f64::NAN);
    assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{a} != {b}");
}

#[test]
fn aiperf_s_aggregate_is_imported_in_seconds_with_its_config_and_method() {
    let ws = Workspace::new();
    let agg = read_json(&fixture("aiperf/profile_export_aiperf.json"));
    let (dir, p) = import(&ws, &fixture("aiperf"), &[]);
    let m = &p["metrics"];
    for (tag, name, scale) in [
        ("time_to_first_token", "ttft_s", 1e-3),
        ("request_latency", "e2e_s", 1e-3),
        ("inter_token_latency", "tpot_s", 1e-3),
        ("inter_chunk_latency", "icl_s", 1e-3),
        ("output_sequence_length", "completion_tokens", 1.0),
    ] {
        for (theirs, ours) in [
            ("avg", "mean"),
            ("p50", "p50"),
            ("p90", "p90"),
            ("p99", "p99"),
            ("min", "min"),
            ("max", "max"),
        ] {
            close(&m[name][ours], agg[tag][theirs].as_f64().unwrap() * scale);
        }
        assert_eq!(m[name]["count"], agg[tag]["count"], "{name}");
    }
    close(
        &m["throughput_req_s"]["mean"],
        agg["request_throughput"]["avg"].as_f64().unwrap(),
    );
    close(
        &m["output_tok_s"]["mean"],
        agg["output_token_throughput"]["avg"].as_f64().unwrap(),
    );
    assert_eq!(p["ok"].as_f64(), agg["request_count"]["avg"].as_f64());
    assert_eq!(p["values"]["concurrency"], 2);
    // AIPerf records no decode speed as servebench defines it: absent, not invented.
    assert!(m.get("decode_tok_s").is_none() && m.get("itl_s").is_none());
    let meta = read_json(&dir.join("meta.json"));
    let imported = &meta["imported"];
    assert_eq!(imported["tool"], "aiperf");
    assert_eq!(imported["version"], "0.13.0");
    assert_eq!(imported["config"]["phases"][1]["concurrency"], 2);
    assert_eq!(
        imported["method"]["warm-up"],
        "2 requests before profiling, not counted"
    );
    assert_eq!(meta["experiment"]["requests"], 8);
}

#[test]
fn aiperf_s_records_alone_are_summarised_from_the_profiling_successes() {
    let ws = Workspace::new();
    let (_, p) = import(
        &ws,
        &fixture("aiperf/profile_export.jsonl"),
        &["--from", "aiperf"],
    );
    let ws2 = Workspace::new();
    std::fs::copy(
        fixture("aiperf/profile_export.jsonl"),
        ws2.path().join("profile_export.jsonl"),
    )
    .unwrap();
    let (_, alone) = import(&ws2, &ws2.path().join("profile_export.jsonl"), &[]);
    // Beside its aggregate the aggregate is read; alone, the 8 profiling records (2 warm-up
    // left out) give the same TTFT statistics by the same linear percentiles.
    assert_eq!(alone["ok"], 8);
    for k in ["mean", "p50", "p90", "min", "max"] {
        close(
            &alone["metrics"]["ttft_s"][k],
            p["metrics"]["ttft_s"][k].as_f64().unwrap(),
        );
    }
    assert_eq!(
        alone["metrics"]["icl_s"]["count"],
        p["metrics"]["icl_s"]["count"]
    );
}

const VLLM_RESULT: &str =
    "vllm-bench/openai-chat-infqps-concurrency2-test-model-20261206-192236.json";

#[test]
fn vllm_bench_s_detailed_result_is_imported_per_request_and_failures_left_out() {
    let ws = Workspace::new();
    let theirs = read_json(&fixture(VLLM_RESULT));
    let f = |k: &str| theirs[k].as_f64().unwrap_or(f64::NAN);
    let (dir, p) = import(&ws, &fixture(VLLM_RESULT), &[]);
    let m = &p["metrics"];
    // The sixth of 8 requests was refused by the simulator (its prompt past --max-model-len).
    assert_eq!((p["ok"].as_u64(), p["errors"].as_u64()), (Some(7), Some(1)));
    // vLLM's own summary (ms) of the same per-request values: the failure's 0 s left out by
    // both, TPOT as (latency - TTFT) / (output tokens - 1), ITL as the chunk gaps.
    for (key, name) in [("ttft", "ttft_s"), ("tpot", "tpot_s"), ("itl", "icl_s")] {
        for (stat, ours) in [("mean", "mean"), ("median", "p50"), ("p99", "p99")] {
            close(&m[name][ours], f(&format!("{stat}_{key}_ms")) * 1e-3);
        }
    }
    assert_eq!(m["ttft_s"]["count"], 7);
    assert_eq!(m["icl_s"]["count"], 7 * 15);
    let latencies = theirs["latencies"].as_array().unwrap();
    let e2e_max = latencies
        .iter()
        .filter_map(|x| x.as_f64())
        .fold(0.0, f64::max);
    close(&m["e2e_s"]["max"], e2e_max);
    // The successes' prompt lengths are the server's usage counts; the failure's (the
    // client tokenizer's count of a prompt the server refused) is left out.
    close(&m["prompt_tokens"]["max"], 68.0);
    close(&m["completion_tokens"]["mean"], 16.0);
    close(&m["throughput_req_s"]["mean"], f("request_throughput"));
    close(&m["output_tok_s"]["mean"], f("output_throughput"));
    close(&m["total_tok_s"]["mean"], f("total_token_throughput"));
    assert_eq!(p["values"]["concurrency"], 2);
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["imported"]["tool"], "vllm-bench");
    assert_eq!(meta["imported"]["config"]["model_id"], "test-model");
}

#[test]
fn a_file_no_tool_wrote_is_refused_with_the_choices_and_bad_json_with_its_place() {
    let ws = Workspace::new();
    let other = ws.write("other.json", "{\"hello\": 1}");
    let o = servebench().arg("import").arg(&other).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("--from (aiperf, vllm-bench, guidellm, inference-perf)"),
        "{err}"
    );
    let bad = ws.write(
        "bad.json",
        "{\n  \"completed\": 1,\n  \"request_throughput\": oops\n}",
    );
    let o = servebench()
        .args(["import", "--from", "vllm-bench"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.json:3:25: not the JSON the tool writes"),
        "{err}"
    );
}

#[test]
fn compare_says_how_the_methods_differ_before_any_number() {
    let ws = Workspace::new();
    let spec = ws.write(
        "sim-c2.yaml",
        &sim_spec(
            "sim-c2",
            "  api: openai-chat\n  prompt: { kind: random, tokens: 64 }\n  output_tokens: 16",
            "requests: 8\nconcurrency: 2",
        ),
    );
    let (run, _) = ws.run_ok(&spec);
    let (imported, _) = import(&ws, &fixture("aiperf"), &[]);
    let o = servebench()
        .arg("compare")
        .arg(&run)
        .arg(&imported)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let first_number = text.find("## Results").expect("results");
    for line in [
        "TTFT origin: servebench: request sent → first content chunk",
        "ITL: servebench:",
        "warm-up: servebench: none → aiperf: 2 requests before profiling, not counted",
        "cache state: servebench: cache.policy cold → aiperf: not controlled",
        "client placement: servebench: local → aiperf: not recorded",
    ] {
        let at = text.find(line).unwrap_or_else(|| panic!("{line}\n{text}"));
        assert!(at < first_number, "{line} after the numbers");
    }
    // What the import did not record is not stated as a setting.
    assert!(text.contains("| `tool` | — | aiperf 0.13.0 |"), "{text}");
    assert!(!text.contains("| `repeat` | 1 | 1 |"));
    assert!(text.contains("| `repeat` | 1 | — |"), "{text}");
    // `history` sets it beside the servebench run when it joins its experiment, unjudged.
    let joined = run.parent().unwrap().join("imported");
    let o = servebench()
        .arg("import")
        .arg(fixture("aiperf"))
        .args(["--name", "sim-c2", "--out"])
        .arg(&joined)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = ws.path().join("history");
    let o = servebench()
        .arg("history")
        .arg(run.parent().unwrap())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let md = std::fs::read_to_string(out.join("history.md")).unwrap();
    assert!(md.contains("2 runs of 1 experiment"), "{md}");
    assert!(
        md.contains("**not comparable** (TTFT origin: aiperf:"),
        "{md}"
    );
}

/// The fixture's GuideLLM requests that ended in its measured window, as GuideLLM counts them.
fn guidellm_measured(report: &serde_json::Value) -> Vec<serde_json::Value> {
    let b = &report["benchmarks"][0];
    let (start, end) = (
        b["scheduler_metrics"]["measure_start_time"]
            .as_f64()
            .unwrap(),
        b["scheduler_metrics"]["measure_end_time"].as_f64().unwrap(),
    );
    b["requests"]["successful"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            let e = r["request_end_time"].as_f64().unwrap();
            e > start && e <= end
        })
        .cloned()
        .collect()
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let xs: Vec<f64> = xs.collect();
    xs.iter().sum::<f64>() / xs.len() as f64
}

#[test]
fn guidellm_s_report_is_imported_from_its_measured_requests_with_its_method() {
    let ws = Workspace::new();
    let report = read_json(&fixture("guidellm/benchmarks.json"));
    let (dir, p) = import(&ws, &fixture("guidellm"), &[]);
    let measured = guidellm_measured(&report);
    // As many as GuideLLM counted in its window: the warm-up requests left out.
    let totals = &report["benchmarks"][0]["metrics"]["request_totals"];
    assert_eq!(p["ok"], totals["successful"]);
    assert_eq!(measured.len(), 7);
    assert_eq!(
        (p["errors"].as_u64(), p["values"]["concurrency"].as_u64()),
        (Some(0), Some(2))
    );
    let m = &p["metrics"];
    // GuideLLM's own per-request values, in seconds.
    close(
        &m["ttft_s"]["mean"],
        mean(
            measured
                .iter()
                .map(|r| r["time_to_first_token_ms"].as_f64().unwrap() / 1e3),
        ),
    );
    close(
        &m["e2e_s"]["mean"],
        mean(
            measured
                .iter()
                .map(|r| r["request_latency"].as_f64().unwrap()),
        ),
    );
    assert_eq!(m["completion_tokens"]["mean"], 16.0);
    let span = measured
        .iter()
        .map(|r| r["request_end_time"].as_f64().unwrap())
        .fold(f64::MIN, f64::max)
        - measured
            .iter()
            .map(|r| r["request_start_time"].as_f64().unwrap())
            .fold(f64::MAX, f64::min);
    close(&m["throughput_req_s"]["mean"], 7.0 / span);
    // GuideLLM's ITL (last − first token) is none of servebench's: absent.
    assert!(m.get("itl_s").is_none() && m.get("icl_s").is_none());
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["imported"]["tool"], "guidellm");
    assert_eq!(meta["imported"]["version"], "0.8.1");
    assert!(
        meta["imported"]["method"]["warm-up"]
            .as_str()
            .unwrap()
            .contains("before the measured window, not counted"),
        "{}",
        meta["imported"]["method"]
    );
    assert_eq!(meta["experiment"]["workload"]["output_tokens"], 16);
    // Every request GuideLLM kept, warm-up included and marked, in servebench's records.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(requests.len(), 10);
    let measure: Vec<_> = requests
        .iter()
        .filter(|r| r["phase"] == "measure")
        .collect();
    assert_eq!(measure.len(), 7);
    assert_eq!(
        requests.iter().filter(|r| r["phase"] == "warmup").count(),
        3
    );
    let first = &measure[0];
    let theirs = &measured[0];
    close(
        &first["sent_at"],
        theirs["request_start_time"].as_f64().unwrap(),
    );
    close(&first["end_s"], theirs["request_latency"].as_f64().unwrap());
    close(
        &first["chunks"][0]["t_s"],
        theirs["time_to_first_token_ms"].as_f64().unwrap() / 1e3,
    );
    assert_eq!(first["max_tokens"], 16);
    // The streamed lines between the first and the last token have no time in the file.
    assert_eq!(first["chunks_folded"], 14);
}

#[test]
fn inference_perf_s_report_is_imported_per_request_and_agrees_with_its_own_summary() {
    let ws = Workspace::new();
    let summary = read_json(&fixture("inference-perf/summary_lifecycle_metrics.json"));
    let (dir, p) = import(&ws, &fixture("inference-perf"), &[]);
    let s = &summary["successes"];
    assert_eq!(p["ok"], s["count"]);
    assert_eq!(p["values"]["concurrency"], 2);
    let m = &p["metrics"];
    // The same requests, the same definitions: its mean TTFT and latency, its rates.
    close(
        &m["ttft_s"]["mean"],
        s["latency"]["time_to_first_token"]["mean"]
            .as_f64()
            .unwrap(),
    );
    close(
        &m["e2e_s"]["mean"],
        s["latency"]["request_latency"]["mean"].as_f64().unwrap(),
    );
    close(
        &m["e2e_s"]["max"],
        s["latency"]["request_latency"]["max"].as_f64().unwrap(),
    );
    for (theirs, ours) in [
        ("requests_per_sec", "throughput_req_s"),
        ("output_tokens_per_sec", "output_tok_s"),
        ("input_tokens_per_sec", "input_tok_s"),
    ] {
        let a = m[ours]["mean"].as_f64().unwrap();
        let b = s["throughput"][theirs].as_f64().unwrap();
        assert!((a - b).abs() <= 1e-9 * b, "{ours}: {a} != {b}");
    }
    assert_eq!(m["completion_tokens"]["mean"], 16.0);
    // 8 requests of 16 one-token chunks: 15 gaps each.
    assert_eq!(m["icl_s"]["count"], 120);
    assert!(m.get("itl_s").is_none());
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["imported"]["tool"], "inference-perf");
    assert_eq!(meta["experiment"]["workload"]["api"], "openai-completions");
    assert_eq!(meta["experiment"]["requests"], 8);
    // Its times are a monotonic clock's: no requests.jsonl, and the notes say why.
    assert!(!dir.join("requests.jsonl").exists());
    assert!(meta["imported"]["notes"].to_string().contains("monotonic"));
}

#[test]
fn aiperf_s_records_become_servebench_request_records() {
    let ws = Workspace::new();
    let (dir, _) = import(&ws, &fixture("aiperf"), &[]);
    let theirs: Vec<serde_json::Value> = read_jsonl(&fixture("aiperf/profile_export.jsonl"));
    let ours = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(ours.len(), theirs.len());
    for (a, r) in theirs.iter().zip(&ours) {
        let md = &a["metadata"];
        close(
            &r["sent_at"],
            md["request_start_ns"].as_f64().unwrap() / 1e9,
        );
        close(
            &r["end_s"],
            a["metrics"]["request_latency"]["value"].as_f64().unwrap() / 1e3,
        );
        close(
            &r["chunks"][0]["t_s"],
            a["metrics"]["time_to_first_token"]["value"]
                .as_f64()
                .unwrap()
                / 1e3,
        );
        let gaps = a["metrics"]["inter_chunk_latency"]["value"]
            .as_array()
            .unwrap();
        assert_eq!(r["chunks"].as_array().unwrap().len(), gaps.len() + 1);
        assert_eq!(
            r["completion_tokens"],
            a["metrics"]["usage_completion_tokens"]["value"]
        );
        let phase = if md["benchmark_phase"] == "warmup" {
            "warmup"
        } else {
            "measure"
        };
        assert_eq!(r["phase"], phase);
    }
}

#[test]
fn compare_sets_guidellm_and_inference_perf_runs_beside_servebench_s_methods_first() {
    let ws = Workspace::new();
    let spec = ws.write(
        "sim-c2.yaml",
        &sim_spec(
            "sim-c2",
            "  api: openai-chat\n  prompt: { kind: random, tokens: 64 }\n  output_tokens: 16",
            "requests: 8\nconcurrency: 2",
        ),
    );
    let (run, _) = ws.run_ok(&spec);
    // Each into its own directory (`import` names it by the count of arguments).
    for (tool, args, warmup) in [
        (
            "guidellm",
            &["--from", "guidellm"][..],
            "guidellm: 2 (requests or seconds",
        ),
        (
            "inference-perf",
            &[][..],
            "inference-perf: none (inference-perf has no warm-up phase)",
        ),
    ] {
        let (imported, _) = import(&ws, &fixture(tool), args);
        let o = servebench()
            .arg("compare")
            .arg(&run)
            .arg(&imported)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        let first_number = text.find("## Results").expect("results");
        for line in [
            "TTFT origin: servebench: request sent → first content chunk".to_string(),
            format!("warm-up: servebench: none → {warmup}"),
            "cache state: servebench: cache.policy cold →".to_string(),
        ] {
            let at = text.find(&line).unwrap_or_else(|| panic!("{line}\n{text}"));
            assert!(at < first_number, "{line} after the numbers");
        }
    }
}

#[test]
fn guidellm_s_yaml_report_is_read_like_its_json() {
    let ws = Workspace::new();
    let path = fixture("guidellm-yaml/benchmarks.yaml");
    let report: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let (dir, p) = import(&ws, &fixture("guidellm-yaml"), &[]);
    // A synchronous run without warm-up: every request measured, one at a time, no sweep value.
    let reqs = report["benchmarks"][0]["requests"]["successful"]
        .as_array()
        .unwrap();
    assert_eq!(p["ok"].as_u64(), Some(reqs.len() as u64));
    assert_eq!(
        p["ok"],
        report["benchmarks"][0]["metrics"]["request_totals"]["successful"]
    );
    assert_eq!(p["values"], serde_json::json!({}));
    close(
        &p["metrics"]["ttft_s"]["mean"],
        mean(
            reqs.iter()
                .map(|r| r["time_to_first_token_ms"].as_f64().unwrap() / 1e3),
        ),
    );
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert!(
        requests
            .iter()
            .all(|r| r["api"] == "openai-completions" && r["max_tokens"] == 8)
    );
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["imported"]["version"], "0.8.1");
}

/// `servebench report` on an imported run states only what the tool's files recorded: the
/// tool, its files and method, and the settings they gave; never servebench's own defaults
/// that fill the run directory (a cold cache, calibrated random prompts, a duration of 0 s).
#[test]
fn an_imported_run_s_report_states_only_what_the_files_recorded() {
    let ws = Workspace::new();
    let (dir, _) = import(&ws, &fixture("aiperf"), &["--from", "aiperf"]);
    let out = servebench().arg("report").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("Imported by `servebench import` from aiperf 0.13.0's result files"),
        "{report}"
    );
    assert!(report.contains("`concurrency` = 2"), "{report}");
    assert!(
        report.contains("  - cache state: not controlled: no flush, no per-request nonce"),
        "{report}"
    );
    for never in [
        "- **Cache:**",
        "- **Prompt:**",
        "- **Duration:**",
        "- **Client:**",
        "sha256",
    ] {
        assert!(!report.contains(never), "{never} in {report}");
    }
}

/// What a tool recorded of its command is written without its credentials: an AIPerf
/// endpoint's `api_key` and `Authorization` header, an inference-perf server's `api_key` and
/// tokenizer `token`, each redacted by the rule every writer follows, wherever they stand.
#[test]
fn credentials_a_tool_recorded_are_redacted_in_the_imported_run() {
    let ws = Workspace::new();
    let aiperf = ws.path().join("aiperf");
    std::fs::create_dir_all(&aiperf).unwrap();
    std::fs::copy(
        fixture("aiperf/profile_export.jsonl"),
        aiperf.join("profile_export.jsonl"),
    )
    .unwrap();
    let mut agg: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("aiperf/profile_export_aiperf.json")).unwrap(),
    )
    .unwrap();
    let endpoint = &mut agg["input_config"]["endpoint"];
    endpoint["api_key"] = "sk-aiperf-0123456789".into();
    endpoint["headers"] =
        serde_json::json!(["Authorization: Bearer tok-hdr-0123456789", "X-Trace: on"]);
    std::fs::write(aiperf.join("profile_export_aiperf.json"), agg.to_string()).unwrap();
    let ip = ws.path().join("inference-perf");
    std::fs::create_dir_all(&ip).unwrap();
    for f in std::fs::read_dir(fixture("inference-perf")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, ip.join(f.file_name().unwrap())).unwrap();
    }
    let config = std::fs::read_to_string(ip.join("config.yaml")).unwrap();
    std::fs::write(
        ip.join("config.yaml"),
        format!(
            "{config}\nsecrets_probe:\n  api_key: sk-ip-0123456789\n  token: hf_ip0123456789\n"
        ),
    )
    .unwrap();
    for (dir, from, secrets) in [
        (
            &aiperf,
            "aiperf",
            &["sk-aiperf-0123456789", "tok-hdr-0123456789"][..],
        ),
        (
            &ip,
            "inference-perf",
            &["sk-ip-0123456789", "hf_ip0123456789"][..],
        ),
    ] {
        let out = ws.path().join(format!("run-{from}"));
        let o = servebench()
            .arg("import")
            .arg(dir)
            .args(["--from", from, "--out"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        let meta = std::fs::read_to_string(out.join("meta.json")).unwrap();
        for s in secrets {
            assert!(!meta.contains(s), "{s} in {from}'s meta.json");
        }
        assert!(meta.contains("<redacted>"), "{meta}");
    }
    // What is not a credential stays: the header that holds none, the tool's other settings.
    let meta = std::fs::read_to_string(ws.path().join("run-aiperf/meta.json")).unwrap();
    assert!(
        meta.contains("X-Trace: on") && meta.contains("\"streaming\": true"),
        "{meta}"
    );
}
