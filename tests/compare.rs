//! `servebench compare`: the command on synthetic runs with known differences, and two
//! simulator runs. How runs are compared is the report crate's
//! (`crates/report/tests/behaviour/compare.rs`).

use std::path::{Path, PathBuf};

use chrono::{TimeZone, Utc};
use servebench_model::results::RunDir;
use servebench_report::report::compare::{self, LoadedRun, Verdict};
use testkit::runs::verdicts;

use crate::common::*;

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
    let runs = report_fixtures().chunk_runs();
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
