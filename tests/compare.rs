//! `servebench compare`: the command on synthetic runs with known differences, and two
//! simulator runs. How runs are compared is the report crate's
//! (`crates/report/tests/behaviour/compare.rs`).

use std::path::{Path, PathBuf};

use chrono::{TimeZone, Utc};
use serde_json::json;
use servebench_model::results::RunDir;
use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::{CiMethod, Flag, PointRecord, Stat};
use servebench_report::report::compare::{self, CompareModel, LoadedRun, Verdict};

use crate::common::*;

/// The clean-sweep fixture's meta with a new name, server args and sweep dimensions.
fn meta(name: &str, args: serde_json::Value, dims: &[&str]) -> RunMeta {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/report/tests/fixtures/runs/clean-sweep/meta.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["experiment"]["name"] = json!(name);
    v["experiment"]["server"]["args"] = args;
    v["dimensions"] = json!(dims);
    serde_json::from_value(v).expect("meta")
}

/// A statistic with a mean and a 95% interval.
fn stat(mean: f64, low: f64, high: f64) -> Stat {
    Stat {
        count: 8,
        mean,
        p50: mean,
        p90: high,
        p99: high,
        min: low,
        max: high,
        ci95_low: Some(low),
        ci95_high: Some(high),
        ci_method: Some(CiMethod::BootstrapRequests),
        ..Stat::default()
    }
}

/// A point at `ctx` with TTFT and decode speed as (mean, low, high).
fn point(id: &str, ctx: u64, ttft: (f64, f64, f64), decode: (f64, f64, f64)) -> PointRecord {
    PointRecord {
        id: id.to_string(),
        values: [("ctx".to_string(), json!(ctx))].into_iter().collect(),
        group: "g1".to_string(),
        requested_prompt_tokens: Some(ctx),
        ok: 8,
        errors: 0,
        error_kinds: Default::default(),
        metrics: [
            ("ttft_s".to_string(), stat(ttft.0, ttft.1, ttft.2)),
            (
                "decode_tok_s".to_string(),
                stat(decode.0, decode.1, decode.2),
            ),
        ]
        .into_iter()
        .collect(),
        flags: vec![],
        incomplete: false,
        failure: None,
        calibration: None,
        status: None,
        wall: None,
        prefix_cache: Vec::new(),
        load: None,
        server: None,
        host: None,
        search: None,
        gpu: None,
        profiler: None,
        workers: Vec::new(),
        validity: None,
        trace_cache: None,
        jobs: None,
        tool_calls: None,
    }
}

fn run(path: &str, meta: RunMeta, points: Vec<PointRecord>) -> LoadedRun {
    LoadedRun {
        path: PathBuf::from(path),
        meta,
        points,
        truncated_lines: vec![],
        part: None,
        searches: None,
    }
}

/// A: chunked prefill 8192 at ctx 1024, 8192, 32768. B: 4096 at ctx 1024, 8192, 16384; TTFT at
/// 1024 is clearly slower, decode the same within noise; B flagged its 8192 point.
fn chunk_runs() -> Vec<LoadedRun> {
    let a = run(
        "runs/chunk/2026-11-29T10-00-00Z",
        meta(
            "chunk",
            json!({ "chunked-prefill-size": 8192, "tp-size": 1 }),
            &["ctx"],
        ),
        vec![
            point("p001", 1024, (0.100, 0.095, 0.105), (100.0, 96.0, 104.0)),
            point("p002", 8192, (0.400, 0.390, 0.410), (95.0, 92.0, 98.0)),
            point("p003", 32768, (1.600, 1.550, 1.650), (80.0, 78.0, 82.0)),
        ],
    );
    let mut flagged = point("p002", 8192, (0.200, 0.190, 0.210), (95.5, 92.0, 99.0));
    flagged.flags.push(Flag {
        kind: "cold-cache-hit".into(),
        message: "2 of 8 requests hit the prefix cache".into(),
    });
    let b = run(
        "runs/chunk/2026-11-29T11-00-00Z",
        meta(
            "chunk",
            json!({ "chunked-prefill-size": 4096, "tp-size": 1 }),
            &["ctx"],
        ),
        vec![
            point("p001", 1024, (0.150, 0.145, 0.155), (101.0, 97.0, 105.0)),
            flagged,
            point("p003", 16384, (0.800, 0.780, 0.820), (88.0, 86.0, 90.0)),
        ],
    );
    vec![a, b]
}

fn verdicts(model: &CompareModel, metric: &str) -> Vec<(String, Option<Verdict>)> {
    let table = model.metrics.iter().find(|m| m.name == metric).unwrap();
    table
        .rows
        .iter()
        .map(|r| (r.point.clone(), r.cells[1].verdict))
        .collect()
}

// ---- the command ----

/// Writes a loaded run to disk as a run directory under `root`.
fn write_run(root: &Path, name: &str, hour: u32, r: &LoadedRun) -> PathBuf {
    let started = Utc.with_ymd_and_hms(2026, 11, 29, hour, 0, 0).unwrap();
    let dir = RunDir::create(root, name, "name: x\n", started).unwrap();
    dir.write_meta(&r.meta).unwrap();
    for p in &r.points {
        dir.append_point(p).unwrap();
    }
    dir.path
}

#[test]
fn the_command_prints_fails_on_regression_and_rejects_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let runs = chunk_runs();
    let a = write_run(tmp.path(), "chunk", 10, &runs[0]);
    let b = write_run(tmp.path(), "chunk", 11, &runs[1]);

    let out = servebench()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("+50.0% **regression**"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 regression, 0 improvements over "),
        "{}",
        show(&out)
    );

    let out = servebench()
        .args(["compare", "--fail-on-regression"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    // The other way round B -> A is an improvement: nothing to fail on.
    let out = servebench()
        .args(["compare", "--fail-on-regression"])
        .arg(&b)
        .arg(&a)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));

    let file = tmp.path().join("diff.md");
    let template = tmp.path().join("short.md.j2");
    std::fs::write(&template, "{{ summary.regressions }} {{ runs[1].label }}\n").unwrap();
    let out = servebench()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .arg("--out")
        .arg(&file)
        .arg("--template")
        .arg(&template)
        .arg("--threshold")
        .arg("5%")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "1 B\n");

    let missing = tmp.path().join("nope");
    let out = servebench()
        .arg("compare")
        .arg(&a)
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a run directory"),
        "{}",
        show(&out)
    );
    let out = servebench()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["--threshold", "lots"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("5%"),
        "{}",
        show(&out)
    );
    let out = servebench().arg("compare").arg(&a).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "one run is not a comparison");
}

// ---- end to end on the simulator ----

#[test]
fn a_slower_simulator_is_a_regression() {
    let ws = Workspace::new();
    let spec = |name: &str, scale: u32| {
        ws.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 8192, sim-time-scale: {scale} }}\n  ready_timeout: 30s\nworkload:\n  prompt: {{ kind: repeat, tokens: 2048 }}\n  output_tokens: 24\nrequests: 6\n"
            ),
        )
    };
    // The two runs' timings are compared: nothing timing-sensitive runs between them.
    let turn = exclusive();
    let fast = ws.run_in_turn(&spec("base", 2), &[], &turn);
    assert!(fast.status.success(), "{}", show(&fast));
    let slow = ws.run_in_turn(&spec("slow", 4), &[], &turn);
    assert!(slow.status.success(), "{}", show(&slow));
    let (a, b) = (run_dir(&fast), run_dir(&slow));

    let model = compare::build(
        &[compare::load(&a).unwrap(), compare::load(&b).unwrap()],
        None,
    );
    assert_eq!(model.points.len(), 1, "one point each, matched");
    let scale = model
        .differences
        .iter()
        .find(|d| d.name == "server.args.sim-time-scale")
        .expect("the changed flag is listed");
    assert_eq!(scale.values, vec!["2", "4"]);
    for metric in ["ttft_s", "decode_tok_s"] {
        let v = verdicts(&model, metric);
        assert_eq!(v[0].1, Some(Verdict::Regression), "{metric}: {v:?}");
    }
    // TTFT roughly doubles (HTTP overhead makes it a little less).
    let ttft = model.metrics.iter().find(|m| m.name == "ttft_s").unwrap();
    let change = ttft.rows[0].cells[1].change_pct.unwrap();
    assert!(change > 40.0 && change < 130.0, "{change}");

    let out = servebench()
        .args(["compare", "--fail-on-regression"])
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
}

#[test]
fn checked_in_compare_model_schema_is_current() {
    use servebench_report::report::schema;
    assert_schema_current(
        schema::COMPARE_MODEL_SCHEMA_PATH,
        &schema::to_json(&schema::compare_model_schema()),
        "compare-model",
    );
}

/// A CI gate on the simulator: reruns of an unchanged spec give no verdict at all, and a 10%
/// slowdown (the simulator's time scale raised by a tenth) is caught, each with three rounds
/// per point (five) so the intervals stand for run-to-run noise. One request at a time: queued
/// requests also measure the machine's load at that moment, which rounds within one run do not
/// see (a gate on queued points needs a quiet machine).
#[test]
fn unchanged_reruns_give_no_verdict_and_a_ten_percent_slowdown_is_caught() {
    let ws = Workspace::new();
    let spec = |name: &str, scale: &str| {
        ws.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: h100-llama8b, context-length: 8192, sim-time-scale: {scale}, skip-server-warmup: true }}\n  ready_timeout: 60s\nworkload:\n  prompt: {{ kind: repeat, tokens: 2048 }}\n  output_tokens: 16\nrequests: 2\nrepeat: 5\n"
            ),
        )
    };
    // Model time, not the machine's: at full scale a prefill is ~0.1 s and a decode step ~7 ms,
    // so scheduling jitter on a busy 2-core machine stays around a percent.
    let base = spec("base", "1.0");
    // The four runs' timings are compared: nothing timing-sensitive runs between them.
    let turn = exclusive();
    let runs: Vec<PathBuf> = [&base, &base, &base, &spec("slower", "1.1")]
        .iter()
        .map(|s| {
            let out = ws.run_in_turn(s, &[], &turn);
            assert!(out.status.success(), "{}", show(&out));
            run_dir(&out)
        })
        .collect();
    let gate = |a: &Path, b: &Path| {
        servebench()
            .args(["compare", "--fail-on-regression"])
            .arg(a)
            .arg(b)
            .output()
            .unwrap()
    };
    for rerun in &runs[1..3] {
        let model = compare::build(
            &[
                compare::load(&runs[0]).unwrap(),
                compare::load(rerun).unwrap(),
            ],
            None,
        );
        let s = &model.summary;
        assert_eq!(
            (s.regressions, s.improvements),
            (0, 0),
            "an unchanged rerun: {}",
            compare::render(&model, None).unwrap()
        );
        assert!(s.judged() > 0, "the cells were judged, not skipped");
        let out = gate(&runs[0], rerun);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    }
    let model = compare::build(
        &[
            compare::load(&runs[0]).unwrap(),
            compare::load(&runs[3]).unwrap(),
        ],
        None,
    );
    let ttft = verdicts(&model, "ttft_s");
    assert_eq!(
        ttft[0].1,
        Some(Verdict::Regression),
        "{}",
        compare::render(&model, None).unwrap()
    );
    assert!(
        model.summary.improvements == 0,
        "a slowdown improves nothing"
    );
    let out = gate(&runs[0], &runs[3]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
}
