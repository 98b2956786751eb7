//! `servebench export` and `report.export` on real simulator runs: an agent-session run and a
//! closed-loop sweep exported with every report, llm-d's reports validated against llm-d's
//! published schema (the report crate's fixture, `crates/report/tests/fixtures/llm-d`), AIPerf's
//! artifacts one folder per point. AIPerf's own models load them in the real-engine tier
//! (`real_engine::aiperf`).

use std::path::{Path, PathBuf};

use crate::common::*;

/// llm-d's v0.2.1 schema (v0.2 with its `session_performance` section), compiled.
pub fn llmd_schema() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/report/tests/fixtures/llm-d/br_v0_2_1_json_schema.json");
    jsonschema::validator_for(&read_json(&path)).expect("llm-d's schema compiles")
}

/// An agent-session run on the simulator (4 sessions, 2 live) and a two-point sweep, both
/// with `report: { export: [llm-d, aiperf] }`: their run directories.
pub fn exported_runs(ws: &Workspace) -> Vec<PathBuf> {
    let trace =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/data/agentic-sessions.jsonl");
    let agentic = ws.write(
        "agentic.yaml",
        &format!(
            "name: agentic\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 4096 }}\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 8\nload:\n  kind: agentic\n  agentic: {{ file: {}, live: 2, sessions: 4, think_scale: 0.01 }}\nreport: {{ export: [llm-d, aiperf] }}\n",
            trace.display()
        ),
    );
    let sweep = ws.write(
        "sweep.yaml",
        &sim_spec(
            "sweep",
            "  prompt: { kind: random, tokens: 128 }\n  output_tokens: 16",
            "requests: 4\nsweep: { concurrency: [1, 2] }\nreport: { export: [llm-d, aiperf] }",
        ),
    );
    [agentic, sweep]
        .iter()
        .map(|spec| ws.run_ok(spec).0)
        .collect()
}

#[test]
fn every_run_writes_its_exports_and_llm_d_s_schema_accepts_them() {
    let ws = Workspace::new();
    let schema = llmd_schema();
    let mut agent_points = 0;
    for dir in exported_runs(&ws) {
        let points = read_jsonl(&dir.join("points.jsonl"));
        for p in &points {
            let id = p["id"].as_str().unwrap();
            let report = read_json(&dir.join(format!("export/llm-d/{id}.json")));
            let errors: Vec<String> = schema
                .iter_errors(&report)
                .map(|e| format!("{e} at {}", e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{}: {errors:#?}", dir.display());
            let sessions = &report["results"]["session_performance"]["sessions"];
            if p["jobs"].is_null() {
                assert!(sessions.is_null());
            } else {
                agent_points += 1;
                assert_eq!(sessions["total"], p["jobs"]["started"], "{report}");
                assert_eq!(sessions["succeeded"], p["jobs"]["completed"]);
            }
            let records = read_jsonl(&dir.join(format!("export/aiperf/{id}/profile_export.jsonl")));
            let profiling = records
                .iter()
                .filter(|r| r["metadata"]["benchmark_phase"] == "profiling")
                .count() as u64;
            assert_eq!(
                profiling,
                p["ok"].as_u64().unwrap() + p["errors"].as_u64().unwrap(),
                "{}",
                dir.display()
            );
            let agg =
                read_json(&dir.join(format!("export/aiperf/{id}/profile_export_aiperf.json")));
            assert_eq!(agg["request_count"]["avg"], p["ok"]);
        }
    }
    assert_eq!(
        agent_points, 1,
        "the agentic run's point has its session section"
    );
}

#[test]
fn export_writes_a_chosen_format_where_asked_and_refuses_an_unknown_one() {
    let ws = Workspace::new();
    let spec = ws.write(
        "one.yaml",
        &sim_spec(
            "one",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 8",
            "requests: 3",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert!(
        !dir.join("export").exists(),
        "no export unless the spec asks"
    );
    let out = ws.path().join("llmd");
    let done = servebench()
        .args(["export"])
        .arg(&dir)
        .args(["--format", "llm-d", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", show(&done));
    assert!(
        String::from_utf8_lossy(&done.stdout).contains("llm-d: 1 file in"),
        "{}",
        show(&done)
    );
    let id = points[0]["id"].as_str().unwrap();
    assert_eq!(read_json(&out.join(format!("{id}.json")))["version"], "0.2");
    let bad = servebench()
        .args(["export"])
        .arg(&dir)
        .args(["--format", "mlflow"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("use one of llm-d, aiperf"),
        "{}",
        show(&bad)
    );
}

/// Issue 47, item 0: what the report grades against the hardware is data: each point's
/// `bound` in points.jsonl (its figures, the GPU, what was assumed) and the same figures in
/// points.csv, equal to the report's grades over the whole run (which the exports carry).
#[test]
fn the_bound_per_point_is_in_points_jsonl_and_points_csv_as_the_report_grades_it() {
    let ws = Workspace::new();
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.yaml"),
    )
    .unwrap()
    .replace("ctx: [1024, 4096, 16384]", "ctx: [1024, 4096]")
    .replace("concurrency: [1, 4]", "concurrency: [1]")
    .replace("requests: 4", "requests: 2");
    let spec = ws.write("quickstart.yaml", &text);
    let (dir, points) = ws.run_ok(&spec);
    let done = servebench()
        .args(["export"])
        .arg(&dir)
        .args(["--format", "llm-d"])
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", show(&done));
    let mut csv = csv::Reader::from_path(dir.join("points.csv")).unwrap();
    let header = csv.headers().unwrap().clone();
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    assert_eq!(points.len(), 2);
    for (p, row) in points.iter().zip(&rows) {
        let bound = &p["bound"];
        assert_eq!(bound["gpu"], "NVIDIA H100 SXM", "{p}");
        assert!(bound["assumptions"].is_array());
        let id = p["id"].as_str().unwrap();
        let report = read_json(&dir.join(format!("export/llm-d/{id}.json")));
        let graded = &report["results"]["observability"]["servebench"]["bound"]["figures"];
        for name in [
            "step_s",
            "step_floor_s",
            "effective_bandwidth_gbs",
            "decode_bw_fraction",
        ] {
            let x = bound["figures"][name].as_f64().unwrap();
            assert!(x > 0.0, "{name}: {bound}");
            assert_eq!(graded[name].as_f64(), Some(x), "{name}: the report's grade");
            let column = header.iter().position(|h| h == name).unwrap();
            let cell: f64 = row[column].parse().unwrap();
            assert_eq!(cell, x, "points.csv {name}");
        }
        let gpu = header.iter().position(|h| h == "bound_gpu").unwrap();
        assert_eq!(&row[gpu], "NVIDIA H100 SXM");
    }
}
