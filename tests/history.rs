//! `servebench history`: synthetic runs with known steps, flagged points and changes of
//! construction; damaged run directories; three simulator runs with one flag changed in the
//! middle.

use std::path::{Path, PathBuf};

use serde_json::json;
use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::{CiMethod, Flag, PointRecord, Stat};
use servebench_report::history::{self, HistoryModel};
use servebench_report::report::compare::{self, LoadedRun, Verdict};

use crate::common::*;

/// The clean-sweep fixture's meta with a name, a start time and server args.
fn meta(name: &str, started: &str, args: serde_json::Value) -> RunMeta {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/report/tests/fixtures/runs/clean-sweep/meta.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["experiment"]["name"] = json!(name);
    v["experiment"]["server"]["args"] = args;
    v["dimensions"] = json!(["ctx"]);
    v["started_at"] = json!(started);
    serde_json::from_value(v).expect("meta")
}

/// Three rounds' statistic: mean and 95% interval.
fn stat(mean: f64, low: f64, high: f64) -> Stat {
    Stat {
        count: 3,
        mean,
        p50: mean,
        p90: high,
        p99: high,
        min: low,
        max: high,
        std: Some((high - low) / 4.0),
        ci95_low: Some(low),
        ci95_high: Some(high),
        ci_method: Some(CiMethod::Repeats),
        ..Stat::default()
    }
}

/// A point at `ctx` whose decode speed is `decode` tok/s (interval ±2%).
fn point(id: &str, ctx: u64, decode: f64) -> PointRecord {
    let mut p: PointRecord = serde_json::from_value(json!({
        "id": id, "values": { "ctx": ctx }, "group": "g1", "ok": 9, "errors": 0,
        "metrics": {}, "flags": [], "incomplete": false
    }))
    .expect("point");
    p.metrics.insert(
        "decode_tok_s".into(),
        stat(decode, decode * 0.98, decode * 1.02),
    );
    p
}

fn run(started: &str, args: serde_json::Value, points: Vec<PointRecord>) -> LoadedRun {
    LoadedRun {
        path: PathBuf::from(format!("runs/h/{started}")),
        meta: meta("h", started, args),
        points,
        truncated_lines: vec![],
        part: None,
        searches: None,
    }
}

fn build(runs: Vec<LoadedRun>) -> HistoryModel {
    history::build(
        runs,
        vec![],
        vec!["runs".into()],
        None,
        &history::default_metrics(),
    )
}

fn decode_series<'a>(m: &'a HistoryModel, point: &str) -> &'a history::Series {
    m.experiments[0]
        .series
        .iter()
        .find(|s| s.metric == "decode_tok_s" && s.point == point)
        .unwrap_or_else(|| panic!("no decode series at {point}"))
}

#[test]
fn a_step_is_a_change_point_attributed_to_the_flag_that_changed() {
    // Given out of order: the history sorts by start time.
    let runs = vec![
        run(
            "2026-12-03T00:00:00Z",
            json!({ "chunked-prefill-size": 4096 }),
            vec![point("p001", 1024, 80.0), point("p002", 8192, 60.0)],
        ),
        run(
            "2026-12-01T00:00:00Z",
            json!({ "chunked-prefill-size": 8192 }),
            vec![point("p001", 1024, 100.0), point("p002", 8192, 70.0)],
        ),
        run(
            "2026-12-02T00:00:00Z",
            json!({ "chunked-prefill-size": 8192 }),
            vec![point("p001", 1024, 100.5), point("p002", 8192, 70.2)],
        ),
    ];
    let m = build(runs);
    let e = &m.experiments[0];
    assert_eq!(e.name, "h");
    let started: Vec<&str> = e.runs.iter().map(|r| r.started_at.as_str()).collect();
    assert_eq!(
        started,
        [
            "2026-12-01T00:00:00Z",
            "2026-12-02T00:00:00Z",
            "2026-12-03T00:00:00Z"
        ]
    );
    assert_eq!(e.runs[0].changes.summary, "first run");
    assert_eq!(e.runs[1].changes.summary, "nothing changed");
    assert_eq!(e.runs[2].changes.summary, "one setting changed");
    assert_eq!(
        e.runs[2].changes.settings[0].to_string(),
        "server.args.chunked-prefill-size: 8192 → 4096"
    );
    let s = decode_series(&m, "ctx=1024");
    let v: Vec<(Option<Verdict>, bool)> = s
        .entries
        .iter()
        .map(|x| (x.verdict, x.change_point))
        .collect();
    assert_eq!(
        v,
        [
            (None, false),
            (Some(Verdict::WithinNoise), false),
            (Some(Verdict::Regression), true)
        ]
    );
    let cp = e.change_points();
    assert_eq!(cp.len(), 2, "both points stepped down in #3");
    assert!(cp.iter().all(|(_, x)| x.run == 2 && x.against == Some(1)));
    // The gate: #3 against the last good level (#2).
    assert_eq!(
        history::regressions(&m).len(),
        2,
        "{:?}",
        history::regressions(&m)
    );
    let md = history::markdown::render(&m, Some("charts")).unwrap();
    assert!(
        md.contains(
            "Attributed to #3: one setting changed (`server.args.chunked-prefill-size` 8192 → 4096)"
        ),
        "{md}"
    );
    assert!(
        md.contains("![h: decode across runs](charts/h-decode_tok_s.svg)"),
        "{md}"
    );
    let charts = history::charts::charts(e);
    assert_eq!(
        charts.len(),
        1,
        "decode only: the points measured nothing else"
    );
    let svg = history::charts::render_svg(&charts[0]).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("ctx=8192"), "{svg}");
}

#[test]
fn a_flagged_point_is_shown_never_judged_and_never_a_level() {
    let mut flagged = point("p001", 1024, 50.0);
    flagged.flags.push(Flag {
        kind: "cold-cache-hit".into(),
        message: "2 of 9 requests hit the prefix cache".into(),
    });
    let runs = vec![
        run(
            "2026-12-01T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 100.0)],
        ),
        run("2026-12-02T00:00:00Z", json!({}), vec![flagged]),
        run(
            "2026-12-03T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 99.0)],
        ),
    ];
    let m = build(runs);
    let s = decode_series(&m, "all");
    let second = &s.entries[1];
    assert_eq!(second.verdict, None);
    assert!(!second.change_point);
    assert!(
        second.problems[0].starts_with("cold-cache-hit"),
        "{second:?}"
    );
    // The third run is judged against the first: the flagged one is no level.
    assert_eq!(s.entries[2].against, Some(0));
    assert_eq!(s.entries[2].verdict, Some(Verdict::WithinNoise));
    assert!(m.experiments[0].change_points().is_empty());
    let md = history::markdown::render(&m, None).unwrap();
    assert!(md.contains("50.0 (flagged)"), "{md}");
}

#[test]
fn the_gate_holds_against_the_last_good_level_not_the_run_before() {
    // #2 regressed; #3 stays as low: within noise of #2, still a regression against #1.
    let runs = vec![
        run(
            "2026-12-01T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 100.0)],
        ),
        run(
            "2026-12-02T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 80.0)],
        ),
        run(
            "2026-12-03T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 80.5)],
        ),
    ];
    let m = build(runs);
    let s = decode_series(&m, "all");
    assert_eq!(s.entries[2].verdict, Some(Verdict::WithinNoise));
    let latest = s.latest.as_ref().unwrap();
    assert_eq!(
        (latest.good, latest.verdict),
        (Some(0), Some(Verdict::Regression))
    );
    // An improvement back to the level clears it.
    let runs = vec![
        run(
            "2026-12-01T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 100.0)],
        ),
        run(
            "2026-12-02T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 80.0)],
        ),
        run(
            "2026-12-03T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 100.5)],
        ),
    ];
    assert!(history::regressions(&build(runs)).is_empty());
}

#[test]
fn runs_that_differ_by_construction_are_not_judged_and_compare_says_so_first() {
    let mut warm = run(
        "2026-12-02T00:00:00Z",
        json!({}),
        vec![point("p001", 1024, 150.0)],
    );
    warm.meta.experiment.cache.policy = serde_json::from_value(json!("warm")).unwrap();
    let cold = run(
        "2026-12-01T00:00:00Z",
        json!({}),
        vec![point("p001", 1024, 100.0)],
    );
    let m = build(vec![cold.clone(), warm.clone()]);
    let e = &m.experiments[0];
    assert_eq!(
        e.runs[1].changes.not_comparable,
        ["cache policy (`cache.policy`): cold → warm"]
    );
    let s = decode_series(&m, "all");
    assert_eq!(s.entries[1].verdict, None, "{:?}", s.entries[1]);
    assert!(e.change_points().is_empty());
    let md = history::markdown::render(&m, None).unwrap();
    assert!(md.contains("**not comparable** (cache policy"), "{md}");

    let cmp = compare::build(&[cold, warm], None);
    assert_eq!(
        cmp.not_comparable,
        ["B against A: cache policy (`cache.policy`): cold → warm"]
    );
    let text = compare::render(&cmp, None).unwrap();
    let caution = text.find("Not comparable by construction").expect(&text);
    let summary = text.find("regression").expect(&text);
    assert!(caution < summary, "said before any speed: {text}");
}

/// A run directory written from parts.
fn write_run(root: &Path, name: &str, meta: &str, points: &str) -> PathBuf {
    let dir = root.join("runs/h").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("meta.json"), meta).unwrap();
    std::fs::write(dir.join("points.jsonl"), points).unwrap();
    dir
}

#[test]
fn damaged_and_half_written_run_directories_are_named_and_left_out() {
    let ws = Workspace::new();
    let good = serde_json::to_string(&meta("h", "2026-12-01T00:00:00Z", json!({}))).unwrap();
    let line = serde_json::to_string(&point("p001", 1024, 100.0)).unwrap();
    write_run(ws.path(), "a-good", &good, &format!("{line}\n"));
    // Cut off mid-record at the end (a crash while writing): kept, the line skipped.
    let mut later = meta("h", "2026-12-02T00:00:00Z", json!({}));
    later.tool_version = "0.1.0".into();
    let later = serde_json::to_string(&later).unwrap();
    write_run(
        ws.path(),
        "b-cut",
        &later,
        &format!("{line}\n{}", &line[..line.len() / 2]),
    );
    write_run(ws.path(), "c-bad-meta", "{\"tool_version\": ", "");
    write_run(
        ws.path(),
        "d-bad-line",
        &good,
        &format!("not json\n{line}\n"),
    );
    let out = servebench()
        .arg("history")
        .arg(ws.path().join("runs"))
        .arg("--stdout")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(md.contains("2 runs of 1 experiment"), "{md}");
    assert!(md.contains("c-bad-meta` | meta.json:1:"), "{md}");
    assert!(md.contains("d-bad-line` | points.jsonl:1:"), "{md}");
    assert!(err.contains("c-bad-meta: left out"), "{err}");
}

#[test]
fn three_simulator_runs_with_one_flag_changed_in_the_middle() {
    let ws = Workspace::new();
    let spec = |scale: u32| {
        ws.write(
            "spec.yaml",
            &format!(
                "name: hist\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 8192, sim-time-scale: {scale} }}\n  ready_timeout: 30s\nworkload:\n  prompt: {{ kind: repeat, tokens: 1024 }}\n  output_tokens: 24\nrequests: 4\nrepeat: 3\n"
            ),
        )
    };
    let turn = exclusive();
    for scale in [2, 8, 8] {
        let out = ws.run_in_turn(&spec(scale), &[], &turn);
        assert!(out.status.success(), "{}", show(&out));
        // Start times are whole seconds: the next run starts in a later one.
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    drop(turn);
    let out_dir = ws.path().join("history");
    let out = servebench()
        .arg("history")
        .arg(ws.path().join("runs"))
        .arg("--out")
        .arg(&out_dir)
        .arg("--fail-on-regression")
        .output()
        .unwrap();
    // The newest run is still slower than the last good level (#1): the gate fails.
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let md = std::fs::read_to_string(out_dir.join("history.md")).unwrap();
    assert!(
        md.contains("| **#2** |")
            && md.contains("one setting changed: `server.args.sim-time-scale` 2 → 8"),
        "{md}"
    );
    assert!(
        md.contains("**#2**, decode at all: ")
            && md.contains("Attributed to #2: one setting changed"),
        "{md}"
    );
    assert!(!md.contains("**#3**, decode"), "no step in #3: {md}");
    for chart in ["hist-ttft_s.svg", "hist-decode_tok_s.svg"] {
        assert!(out_dir.join("charts").join(chart).is_file(), "{chart}");
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("regression: hist #3: decode at all"), "{err}");
}

#[test]
fn one_run_cannot_pass_the_gate_and_a_bad_metric_is_refused() {
    let ws = Workspace::new();
    let m = serde_json::to_string(&meta("h", "2026-12-01T00:00:00Z", json!({}))).unwrap();
    let line = serde_json::to_string(&point("p001", 1024, 100.0)).unwrap();
    write_run(ws.path(), "a", &m, &format!("{line}\n"));
    let out = servebench()
        .arg("history")
        .arg(ws.path().join("runs"))
        .args(["--stdout", "--fail-on-regression"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("gate fails"));
    let out = servebench()
        .arg("history")
        .arg(ws.path().join("runs"))
        .args(["--stdout", "--metric", "speed"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

#[test]
fn history_follows_the_figures_the_bound_grades_a_point_with() {
    // Each run's point carries its bound's figures under the catalogue's names.
    let ws = Workspace::new();
    for (name, day, fraction, gbs) in [
        ("a", 1, 0.62, 2080.0),
        ("b", 2, 0.61, 2046.0),
        ("c", 3, 0.41, 1375.0),
    ] {
        let m = serde_json::to_string(&meta("h", &format!("2026-12-0{day}T00:00:00Z"), json!({})))
            .unwrap();
        let mut p = point("p001", 1024, 100.0);
        p.bound = Some(servebench_model::results::records::PointBound {
            figures: [
                ("decode_bw_fraction", fraction),
                ("effective_bandwidth_gbs", gbs),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            gpu: "H100 SXM".into(),
            peak_bandwidth_gb_s: 3350.0,
            ..Default::default()
        });
        let line = serde_json::to_string(&p).unwrap();
        write_run(ws.path(), name, &m, &format!("{line}\n"));
    }
    let out = servebench()
        .arg("history")
        .arg(ws.path().join("runs"))
        .args(["--stdout", "--no-index", "--metric", "decode_bw_fraction"])
        .args([
            "--metric",
            "effective_bandwidth_gbs",
            "--metric",
            "decode_tok_s",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    // The catalogue's labels and units, every run's figure.
    for want in [
        "of peak bandwidth",
        "effective bandwidth",
        "GB/s",
        "0.62",
        "0.41",
        "2080",
        "1375",
    ] {
        assert!(md.contains(want), "{want} in {md}");
    }
    // Shown, not judged (compare sets them side by side without a verdict): no change point.
    assert!(!md.contains("**regression**"), "{md}");
    let runs = history::source::load_dirs(
        &[ws.path().join("runs")],
        &history::source::Budget::default(),
    )
    .0;
    let m = history::build_names(runs, vec![], vec![], None, &["decode_bw_fraction"]);
    let s = &m.experiments[0].series[0];
    assert_eq!(
        (s.label.as_str(), s.unit.as_str()),
        ("of peak bandwidth", "fraction")
    );
    let values: Vec<f64> = s
        .entries
        .iter()
        .map(|e| e.stat.as_ref().unwrap().mean)
        .collect();
    assert_eq!(values, [0.62, 0.61, 0.41]);
    assert!(s.entries.iter().all(|e| e.verdict.is_none() && !e.level));
    assert!(
        s.entries[2].reason.contains("a graded figure"),
        "{}",
        s.entries[2].reason
    );
}

/// Three rounds' statistic from the round means (Student's t, two degrees of freedom), as a
/// point with `repeat: 3` records it.
fn rounds_stat(rounds: [f64; 3]) -> Stat {
    let mean = rounds.iter().sum::<f64>() / 3.0;
    let sd = (rounds.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / 2.0).sqrt();
    let half = 4.303 * sd / 3f64.sqrt();
    Stat {
        count: 24,
        mean,
        p50: mean,
        p90: rounds.iter().cloned().fold(f64::MIN, f64::max),
        p99: rounds.iter().cloned().fold(f64::MIN, f64::max),
        min: rounds.iter().cloned().fold(f64::MAX, f64::min),
        max: rounds.iter().cloned().fold(f64::MIN, f64::max),
        std: Some(sd),
        cv: Some(sd / mean),
        ci95_low: Some(mean - half),
        ci95_high: Some(mean + half),
        ci_method: Some(CiMethod::Repeats),
        ..Stat::default()
    }
}

/// A point at concurrency 8 with its TTFT rounds (seconds) and request throughput rounds.
fn loaded_point(ttft: [f64; 3], req_s: [f64; 3]) -> PointRecord {
    let mut p: PointRecord = serde_json::from_value(json!({
        "id": "p001", "values": { "concurrency": 8 }, "group": "g1", "ok": 24, "errors": 0,
        "metrics": {}, "flags": [], "incomplete": false
    }))
    .expect("point");
    p.metrics.insert("ttft_s".into(), rounds_stat(ttft));
    p.metrics
        .insert("throughput_req_s".into(), rounds_stat(req_s));
    p
}

/// The stored runs of issue 45's regression: `max-running-requests` 8 -> 2 at concurrency 8.
/// Two good runs (TTFT 150-165 ms); the regressed run's rounds 816, 929 and 465 ms (a wide
/// interval: its step is unresolved); then a clearly slower run (484 ms).
fn laundering_runs(root: &Path) -> Vec<PathBuf> {
    let runs = [
        (
            "a",
            "2026-12-01T00:00:00Z",
            8,
            [0.150, 0.152, 0.155],
            [9.0, 9.1, 9.2],
        ),
        (
            "b",
            "2026-12-02T00:00:00Z",
            8,
            [0.160, 0.165, 0.158],
            [9.1, 9.0, 9.2],
        ),
        (
            "c",
            "2026-12-03T00:00:00Z",
            2,
            [0.816, 0.929, 0.465],
            [2.1, 1.9, 3.6],
        ),
        (
            "d",
            "2026-12-04T00:00:00Z",
            2,
            [0.470, 0.490, 0.492],
            [2.9, 3.0, 2.95],
        ),
    ];
    runs.iter()
        .map(|(name, started, mrr, ttft, req_s)| {
            let mut m = meta("h", started, json!({ "max-running-requests": mrr }));
            m.dimensions = vec!["concurrency".into()];
            let line = serde_json::to_string(&loaded_point(*ttft, *req_s)).unwrap();
            write_run(
                root,
                name,
                &serde_json::to_string(&m).unwrap(),
                &format!("{line}\n"),
            )
        })
        .collect()
}

#[test]
fn a_regression_cannot_be_laundered_by_a_noisy_run_and_compare_agrees() {
    let ws = Workspace::new();
    let dirs = laundering_runs(ws.path());
    let out = servebench()
        .arg("history")
        .arg(ws.path().join("runs"))
        .args(["--stdout", "--fail-on-regression", "--no-index"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let md = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    // The noisy run's step is unresolved: no level; the newest run is judged against the
    // good runs before it.
    assert!(md.contains("(+383.6% unresolved)"), "{md}");
    // The step that stood out only at #4 is attributed to the change in #3, since its level.
    assert!(
        md.contains("**#4**, TTFT at all: +217.7% **regression** against #1")
            && md.contains(
                "Attributed to #3: one setting changed (`server.args.max-running-requests` 8 → 2)"
            ),
        "{md}"
    );
    let ttft = err
        .lines()
        .find(|l| l.starts_with("regression: h #4: TTFT at all"))
        .unwrap_or_else(|| panic!("{err}"));
    // #2 moved +5.7% with overlapping intervals (unresolved too): #1 is the level.
    assert!(ttft.contains("against the last good level, #1"), "{ttft}");
    let req = err
        .lines()
        .find(|l| l.starts_with("regression: h #4: req/s at all"))
        .unwrap_or_else(|| panic!("throughput is a default series: {err}"));
    // `compare` on the same two runs says the same change, and fails its gate too.
    let cmp = servebench()
        .arg("compare")
        .arg(&dirs[0])
        .arg(&dirs[3])
        .arg("--fail-on-regression")
        .output()
        .unwrap();
    assert_eq!(cmp.status.code(), Some(1), "{}", show(&cmp));
    let text = String::from_utf8_lossy(&cmp.stdout);
    for line in [ttft, req] {
        let pct = line
            .split(": ")
            .nth(3)
            .and_then(|x| x.split(' ').next())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(text.contains(pct), "{pct} in {text}");
    }
    assert!(text.contains("regression"), "{text}");
}

#[test]
fn a_large_unresolved_step_of_the_newest_run_fails_the_gate_unless_accepted() {
    // Issue 45's runs up to the regressed one (TTFT 150-165 ms, then rounds of 816, 929 and
    // 465 ms): its step is +383.6% but its interval overlaps, so it is neither a regression
    // nor within noise, and the gate must not pass it unjudged.
    let ws = Workspace::new();
    let dirs = laundering_runs(ws.path());
    std::fs::remove_dir_all(&dirs[3]).unwrap();
    let gate = |extra: &[&str]| {
        servebench()
            .arg("history")
            .arg(ws.path().join("runs"))
            .args([
                "--stdout",
                "--fail-on-regression",
                "--no-index",
                "--metric",
                "ttft_s",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = gate(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(!err.contains("regression:"), "not a regression: {err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("unresolved: h #3: TTFT at all: +383.6% against #1, unresolved"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("#1"), "{line}");
    assert!(
        err.contains("1 series of the newest run moved the wrong way")
            && err.contains("--accept-unresolved"),
        "{err}"
    );
    // Accepted knowingly: it passes, and says what it let through.
    let out = gate(&["--accept-unresolved"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        err.contains("warning: accepted (--accept-unresolved): h #3: TTFT at all: +383.6%"),
        "{err}"
    );
    // Only with the gate.
    let out = servebench()
        .args(["history", "--stdout", "--accept-unresolved"])
        .arg(ws.path().join("runs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

#[test]
fn a_starved_client_is_shown_and_named_never_judged_as_a_server_change() {
    let starved = |mut p: PointRecord| {
        p.flags.push(Flag {
            kind: "client-read-late".into(),
            message: "bytes waited 40 ms in the kernel".into(),
        });
        p.flags.push(Flag {
            kind: "high-variance".into(),
            message: "TTFT cv 0.6".into(),
        });
        p
    };
    let runs = vec![
        run(
            "2026-12-01T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 100.0)],
        ),
        run(
            "2026-12-02T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 100.5)],
        ),
        run(
            "2026-12-03T00:00:00Z",
            json!({}),
            vec![starved(point("p001", 1024, 68.0))],
        ),
        run(
            "2026-12-04T00:00:00Z",
            json!({}),
            vec![point("p001", 1024, 99.5)],
        ),
        run(
            "2026-12-05T00:00:00Z",
            json!({}),
            vec![starved(point("p001", 1024, 66.0))],
        ),
    ];
    let m = build(runs);
    let s = decode_series(&m, "all");
    let third = &s.entries[2];
    assert_eq!(third.client_flags, ["client-read-late", "high-variance"]);
    assert_eq!(
        third.verdict,
        Some(Verdict::Regression),
        "compare's verdict kept"
    );
    assert!(
        !third.change_point && third.client_step && !third.level,
        "{third:?}"
    );
    assert!(m.experiments[0].change_points().is_empty());
    // #4 is judged against #2 (the starved run is no level): within noise.
    assert_eq!(s.entries[3].against, Some(1));
    assert_eq!(s.entries[3].verdict, Some(Verdict::WithinNoise));
    // The newest run is starved too: not judged, and not a regression at the gate.
    let latest = s.latest.as_ref().unwrap();
    assert_eq!(latest.verdict, None);
    assert!(latest.reason.contains("client-read-late"), "{latest:?}");
    assert!(history::regressions(&m).is_empty());
    let md = history::markdown::render(&m, None).unwrap();
    assert!(
        md.contains("68.0 (client: client-read-late, high-variance)"),
        "{md}"
    );
    assert!(
        md.contains("### Steps not judged as server changes")
            && md.contains(
                "**#3**, decode at all: -32.3% regression against #2: attributed to #3: the client, more likely than the server: the point carries `client-read-late`, `high-variance`"
            ),
        "{md}"
    );
    assert!(!md.contains("noise beyond the intervals"), "{md}");
}

/// Runs `cmd` to its end or for at most 20 s (then it is killed and the test fails: a
/// reader hung).
#[track_caller]
fn output_within(cmd: &mut assert_cmd::Command) -> std::process::Output {
    cmd.timeout(std::time::Duration::from_secs(20))
        .output()
        .unwrap_or_else(|e| panic!("hung on a hostile run file: {e}"))
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(ok.success());
}

#[test]
fn hostile_run_files_are_refused_by_name_never_followed_or_waited_on() {
    use servebench_model::results::rundir::{MAX_POINTS, POINTS_MAX_VALUES};
    let ws = Workspace::new();
    let m = serde_json::to_string(&meta("h", "2026-12-01T00:00:00Z", json!({}))).unwrap();
    let line = serde_json::to_string(&point("p001", 1024, 100.0)).unwrap();
    let good = write_run(ws.path(), "a-good", &m, &format!("{line}\n"));
    // Small records past the count a run can hold (a 250 MB file of them cost gigabytes).
    let small = "{\"id\":\"p\",\"values\":{},\"group\":\"g\",\"ok\":1,\"errors\":0,\"metrics\":{},\"flags\":[],\"incomplete\":false}\n";
    let many = write_run(ws.path(), "b-many", &m, &small.repeat(MAX_POINTS + 1));
    // One record of more values than the file's budget.
    let values = format!(
        "{{\"id\":\"p\",\"values\":{{\"x\":[{}1]}},\"group\":\"g\",\"ok\":1,\"errors\":0,\"metrics\":{{}},\"flags\":[],\"incomplete\":false}}\n",
        "1,".repeat(POINTS_MAX_VALUES)
    );
    write_run(ws.path(), "c-values", &m, &values);
    // A link to another run's points, and FIFOs nobody writes to.
    let linked = write_run(ws.path(), "d-link", &m, "");
    std::fs::remove_file(linked.join("points.jsonl")).unwrap();
    std::os::unix::fs::symlink(good.join("points.jsonl"), linked.join("points.jsonl")).unwrap();
    let fifo = write_run(ws.path(), "e-fifo", &m, "");
    mkfifo(&fifo.join("points.jsonl"));
    let fifo_meta = write_run(ws.path(), "f-fifo-meta", &m, "");
    mkfifo(&fifo_meta.join("meta.json"));

    let out = output_within(
        servebench()
            .arg("history")
            .arg(ws.path().join("runs"))
            .args(["--stdout", "--no-index"]),
    );
    assert!(out.status.success(), "{}", show(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("1 run of 1 experiment"), "{md}");
    for (dir, why) in [
        (
            "b-many",
            "points.jsonl: line 20001: more than 20000 point records, over the budget of one run",
        ),
        (
            "c-values",
            "points.jsonl: line 1: over its budget of 8000000 JSON values",
        ),
        (
            "d-link",
            "points.jsonl: a symbolic link: run files are read only as regular files",
        ),
        (
            "e-fifo",
            "points.jsonl: a FIFO (named pipe), not a regular file",
        ),
        (
            "f-fifo-meta",
            "meta.json: a FIFO (named pipe), not a regular file",
        ),
    ] {
        assert!(md.contains(&format!("{dir}` | {why}")), "{dir}: {md}");
    }
    // compare and report refuse the same files by name, at once.
    for dir in [&many, &linked, &fifo] {
        let out = output_within(servebench().arg("compare").arg(&good).arg(dir));
        assert_ne!(out.status.code(), Some(0), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("points.jsonl"), "{err}");
        let out = output_within(servebench().arg("report").arg(dir));
        assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    }
}

#[test]
fn the_index_and_the_charts_folder_follow_no_link_and_remove_only_what_history_wrote() {
    let ws = Workspace::new();
    let line = serde_json::to_string(&point("p001", 1024, 100.0)).unwrap();
    let started = [("a", "2026-12-01T00:00:00Z"), ("b", "2026-12-02T00:00:00Z")];
    for (dir, at) in started {
        let m = serde_json::to_string(&meta("h", at, json!({}))).unwrap();
        write_run(ws.path(), dir, &m, &format!("{line}\n"));
    }
    let runs = ws.path().join("runs");
    // An index that is a link to /dev/zero, and a planted link where its temporary file goes.
    let index = runs.join(".servebench-history-index.jsonl");
    std::os::unix::fs::symlink("/dev/zero", &index).unwrap();
    let victim = ws.write("victim.txt", "keep me");
    std::os::unix::fs::symlink(&victim, runs.join(".servebench-history-index.jsonl.tmp")).unwrap();
    // A chart history did not draw, in the folder it writes its charts to.
    let out_dir = ws.path().join("out");
    std::fs::create_dir_all(out_dir.join("charts")).unwrap();
    std::fs::write(out_dir.join("charts/mine.svg"), "<svg/>").unwrap();
    let history = || {
        output_within(
            servebench()
                .arg("history")
                .arg(&runs)
                .arg("--out")
                .arg(&out_dir),
        )
    };
    let out = history();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    assert!(
        std::fs::symlink_metadata(&index).unwrap().is_file(),
        "rebuilt in place of the link"
    );
    assert!(
        out_dir.join("charts/mine.svg").is_file(),
        "not history's: kept"
    );
    assert!(out_dir.join("charts/h-decode_tok_s.svg").is_file());
    // A chart history drew and no longer draws is removed: the experiment is renamed.
    for (dir, at) in started {
        let m = serde_json::to_string(&meta("h2", at, json!({}))).unwrap();
        std::fs::write(runs.join("h").join(dir).join("meta.json"), m).unwrap();
    }
    let out = history();
    assert!(out.status.success(), "{}", show(&out));
    assert!(!out_dir.join("charts/h-decode_tok_s.svg").exists());
    assert!(out_dir.join("charts/h2-decode_tok_s.svg").is_file());
    assert!(out_dir.join("charts/mine.svg").is_file());
}

fn git(repo: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", show(&out));
}

#[test]
fn runs_committed_in_a_git_history_are_read_without_a_checkout() {
    let ws = Workspace::new();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    let line = |decode: f64| serde_json::to_string(&point("p001", 1024, decode)).unwrap();
    let m = |day: u32, chunk: u32| {
        serde_json::to_string(&meta(
            "h",
            &format!("2026-12-0{day}T00:00:00Z"),
            json!({ "chunked-prefill-size": chunk }),
        ))
        .unwrap()
    };
    write_run(&work, "one", &m(1, 8192), &format!("{}\n", line(100.0)));
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "run one"]);
    // Committed while it ran (half its points), then finished.
    write_run(&work, "two", &m(2, 8192), "");
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "run two, running"]);
    write_run(&work, "two", &m(2, 8192), &format!("{}\n", line(100.4)));
    write_run(&work, "three", &m(3, 4096), &format!("{}\n", line(70.0)));
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "run two done, run three"]);
    // Run one leaves the tree: it stays in the history.
    std::fs::remove_dir_all(work.join("runs/h/one")).unwrap();
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "drop run one"]);
    // A bare clone: nothing is checked out anywhere.
    let bare = ws.path().join("bare.git");
    let out = std::process::Command::new("git")
        .args(["clone", "-q", "--bare"])
        .arg(&work)
        .arg(&bare)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));

    let out = servebench()
        .args(["history", "--stdout", "--git"])
        .arg(&bare)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("3 runs of 1 experiment"), "{md}");
    // Run two as its newest commit holds it (finished, with its point), and said.
    assert!(md.contains(":runs/h/two`"), "{md}");
    assert!(
        md.contains("- Note: runs/h/two: changed by 2 commits of the range"),
        "{md}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("note: runs/h/two: changed by 2 commits"),
        "{}",
        show(&out)
    );
    assert!(md.contains("| all | 100 | 100 | **70.0**"), "{md}");
    assert!(
        md.contains(
            "Attributed to #3: one setting changed (`server.args.chunked-prefill-size` 8192 → 4096)"
        ),
        "{md}"
    );
    // A range: only the runs its commits added or changed (two finished, three), not the
    // whole tree of each commit (run one, committed before the range and removed in it).
    let out = servebench()
        .args(["history", "--stdout", "--git"])
        .arg(&bare)
        .args(["--rev", "main~2..main"])
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("2 runs of 1 experiment"), "{md}");
    assert!(!md.contains("runs/h/one"), "{md}");
    assert!(!md.contains("Note:"), "two changed once in the range: {md}");
    // Bad revisions are named.
    for rev in ["--output=x", "no-such-branch"] {
        let out = servebench()
            .args(["history", "--stdout", "--git"])
            .arg(&bare)
            .args(["--rev", rev])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    }
}

#[test]
fn under_git_meta_json_keeps_its_own_budget_of_16_mib() {
    let ws = Workspace::new();
    let work = ws.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    let line = serde_json::to_string(&point("p001", 1024, 100.0)).unwrap();
    let m = serde_json::to_string(&meta("h", "2026-12-01T00:00:00Z", json!({}))).unwrap();
    write_run(&work, "small", &m, &format!("{line}\n"));
    // Valid JSON, padded past 16 MiB (points.jsonl's 256 MiB budget was applied before).
    let big = format!("{m}{}", " ".repeat(17 << 20));
    let m2 = serde_json::to_string(&meta("h", "2026-12-02T00:00:00Z", json!({}))).unwrap();
    write_run(
        &work,
        "big",
        &big.replacen(&m, &m2, 1),
        &format!("{line}\n"),
    );
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "two runs"]);
    let out = servebench()
        .args(["history", "--stdout", "--git"])
        .arg(&work)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("1 run of 1 experiment"), "{md}");
    assert!(
        md.contains(":runs/h/big` | meta.json: 17 MiB, over the budget of 16 MiB for one file"),
        "{md}"
    );
}

fn model_of(runs: Vec<LoadedRun>) -> HistoryModel {
    build(runs)
}

#[test]
fn the_index_is_reused_refreshed_and_rebuilt_never_a_wrong_history() {
    use history::index;
    let ws = Workspace::new();
    let runs = ws.path().join("runs");
    let line = |id: &str, ctx: u64, decode: f64| {
        serde_json::to_string(&point(id, ctx, decode)).unwrap() + "\n"
    };
    for (day, decode) in [(1, 100.0), (2, 100.5), (3, 80.0)] {
        let m = serde_json::to_string(&meta("h", &format!("2026-12-0{day}T00:00:00Z"), json!({})))
            .unwrap();
        write_run(
            ws.path(),
            &format!("r{day}"),
            &m,
            &line("p001", 1024, decode),
        );
    }
    let budget = history::source::Budget::default();
    let idx = runs.join(index::INDEX_FILE);
    let truth = || model_of(history::source::load_dirs(std::slice::from_ref(&runs), &budget).0);
    let through_index = || {
        let (r, s, usage) = index::load_dirs(std::slice::from_ref(&runs), &budget, &idx);
        assert!(s.is_empty(), "{s:?}");
        (model_of(r), usage)
    };
    let (m, usage) = through_index();
    assert_eq!(usage.rebuilt.as_deref(), Some("missing"));
    assert_eq!((usage.reused, usage.read), (0, 3));
    assert_eq!(m, truth());
    let (m, usage) = through_index();
    assert_eq!((usage.reused, usage.read, usage.rebuilt), (3, 0, None));
    assert_eq!(m, truth());

    // A run directory that changed is read again: its new point is in the history.
    let r3 = runs.join("h/r3/points.jsonl");
    let mut text = std::fs::read_to_string(&r3).unwrap();
    text.push_str(&line("p002", 2048, 50.0));
    std::fs::write(&r3, text).unwrap();
    let (m, usage) = through_index();
    assert_eq!((usage.reused, usage.read), (2, 1));
    assert_eq!(m, truth());
    assert_eq!(m.experiments[0].runs.len(), 3);

    // A run directory that is gone leaves the index.
    std::fs::remove_dir_all(runs.join("h/r1")).unwrap();
    let (m, usage) = through_index();
    assert_eq!((usage.reused, usage.read), (2, 0));
    assert_eq!(m, truth());
    assert!(!std::fs::read_to_string(&idx).unwrap().contains("h/r1"));

    // An index an older servebench wrote, and a damaged one: rebuilt.
    let text = std::fs::read_to_string(&idx).unwrap();
    let older = text.replacen("\"version\":1", "\"version\":0", 1);
    assert_ne!(older, text);
    std::fs::write(&idx, older).unwrap();
    let (m, usage) = through_index();
    assert!(
        usage
            .rebuilt
            .as_deref()
            .unwrap_or("")
            .contains("index version 0"),
        "{usage:?}"
    );
    assert_eq!(m, truth());
    let text = std::fs::read_to_string(&idx).unwrap();
    std::fs::write(&idx, &text[..text.len() - 40]).unwrap();
    let (m, usage) = through_index();
    assert!(
        usage.rebuilt.as_deref().unwrap_or("").contains("damaged"),
        "{usage:?}"
    );
    assert_eq!(m, truth());

    // The command uses the index in the runs folder by default.
    std::fs::remove_file(&idx).unwrap();
    let out = servebench()
        .arg("history")
        .arg(&runs)
        .arg("--stdout")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(idx.is_file());
}

#[test]
fn a_shared_postgres_history_covers_every_machine_and_fails_loudly_when_down() {
    use crate::pgserver::PgServer;
    let server = PgServer::start();
    let url = server.url();
    // Two machines' run folders: one experiment each.
    let ws = Workspace::new();
    let line = |decode: f64| serde_json::to_string(&point("p001", 1024, decode)).unwrap() + "\n";
    let machine = |name: &str, experiment: &str| {
        let root = ws.path().join(name);
        for (day, decode) in [(1, 100.0), (2, 70.0)] {
            let m = serde_json::to_string(&meta(
                experiment,
                &format!("2026-12-0{day}T00:00:00Z"),
                json!({}),
            ))
            .unwrap();
            let dir = root.join("runs").join(experiment).join(format!("r{day}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("meta.json"), m).unwrap();
            std::fs::write(dir.join("points.jsonl"), line(decode)).unwrap();
        }
        root.join("runs")
    };
    let (a, b) = (machine("a", "exp-a"), machine("b", "exp-b"));
    let budget = history::source::Budget::default();
    let (runs, skipped, usage) =
        history::db::load_dirs(std::slice::from_ref(&a), &budget, &url).expect("first machine");
    assert!(skipped.is_empty());
    assert_eq!(usage.rebuilt.as_deref(), Some("missing"));
    assert_eq!((usage.read, runs.len()), (2, 2));
    // The database's history equals the run directories'.
    let truth = build(history::source::load_dirs(std::slice::from_ref(&a), &budget).0);
    assert_eq!(build(runs), truth);
    let (runs, _, usage) =
        history::db::load_dirs(std::slice::from_ref(&b), &budget, &url).expect("second machine");
    assert_eq!((usage.read, usage.reused, runs.len()), (2, 0, 4));
    let m = build(runs);
    let names: Vec<&str> = m.experiments.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    // Unchanged directories are not written again.
    let (_, _, usage) =
        history::db::load_dirs(std::slice::from_ref(&a), &budget, &url).expect("again");
    assert_eq!((usage.read, usage.reused), (0, 2));

    // Tables an older servebench wrote are rebuilt.
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    client
        .execute("UPDATE servebench_history SET version = 0", &[])
        .unwrap();
    let (runs, _, usage) =
        history::db::load_dirs(std::slice::from_ref(&a), &budget, &url).expect("rebuilt");
    assert!(usage.rebuilt.unwrap().contains("version 0"));
    assert_eq!(build(runs), truth, "only what was brought in again");
    // Dashboards read the metrics view.
    let n: i64 = client
        .query_one(
            "SELECT count(*) FROM metrics WHERE metric = 'decode_tok_s' AND experiment = 'exp-a'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 2);

    // The command, then a refused login and a server that is down: named, exit 1, no history.
    let out_dir = ws.path().join("history");
    // (the rebuilt tables hold machine a's runs; machine b brings its own back)
    let out = servebench()
        .arg("history")
        .arg(&b)
        .args(["--db", &url, "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let md = std::fs::read_to_string(out_dir.join("history.md")).unwrap();
    assert!(md.contains("## exp-a") && md.contains("## exp-b"), "{md}");
    std::fs::remove_dir_all(&out_dir).unwrap();
    let wrong = url.replace(pgserver_password(), "wrong-password");
    let port = server.port;
    drop(client);
    let refused = |bad: &str, says: &str| {
        let out = servebench()
            .arg("history")
            .arg(&a)
            .args(["--db", bad, "--out"])
            .arg(&out_dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
        assert!(
            !err.contains("wrong-password"),
            "the password is not shown: {err}"
        );
        assert!(!out_dir.join("history.md").exists());
    };
    refused(&wrong, "password authentication failed");
    refused(
        &wrong,
        "the server said: FATAL: password authentication failed for user \"sbtest\" [SQLSTATE 28P01]",
    );
    drop(server);
    refused(
        &format!("postgres://sbtest:x@127.0.0.1:{port}/postgres"),
        "Connection refused",
    );
}

#[test]
fn four_concurrent_writers_share_a_fresh_database_one_run_per_identity() {
    use crate::pgserver::{PASSWORD, PgServer};
    let server = PgServer::start();
    let url = server.url_without_password("sbtest");
    let ws = Workspace::new();
    // Four machines' folders of runs; each also lists its runs by a second path.
    let mut roots = Vec::new();
    for machine in 0..4 {
        for day in 1..=3 {
            let m = serde_json::to_string(&meta(
                &format!("exp-{machine}"),
                &format!("2026-12-0{day}T00:00:00Z"),
                json!({}),
            ))
            .unwrap();
            let dir = ws.path().join(format!("m{machine}/runs/exp/r{day}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("meta.json"), m).unwrap();
            let line = serde_json::to_string(&point("p001", 1024, 100.0 + day as f64)).unwrap();
            std::fs::write(dir.join("points.jsonl"), line + "\n").unwrap();
        }
        roots.push(ws.path().join(format!("m{machine}")));
    }
    // A copy of machine 0's first run elsewhere: the same run.
    let copy = ws.path().join("m0/copies/r1");
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["meta.json", "points.jsonl"] {
        std::fs::copy(ws.path().join("m0/runs/exp/r1").join(f), copy.join(f)).unwrap();
    }
    let writers: Vec<_> = roots
        .iter()
        .map(|root| {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_servebench"));
            cmd.current_dir(root)
                .args(["history", "runs"])
                .arg(root.join("runs"))
                .arg(root.join("copies"))
                .args(["--stdout", "--db", &url])
                .env("PGPASSWORD", PASSWORD)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            cmd.spawn().unwrap()
        })
        .collect();
    for w in writers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains(PASSWORD), "{err}");
    }
    let mut client = postgres::Client::connect(&server.url(), postgres::NoTls).unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM runs", &[])
        .unwrap()
        .get(0);
    // 12 runs and the copy (a directory of its own), never a path typed twice.
    assert_eq!(n, 13);
    let out = servebench()
        .args(["history", "--stdout", "--db", &url])
        .arg(roots[0].join("runs"))
        .env("PGPASSWORD", PASSWORD)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("12 runs of 4 experiments"), "{md}");
    assert!(
        md.contains("the same run as"),
        "the copy is counted once: {md}"
    );

    // A read-only login: the error says what the server said.
    client
        .batch_execute("CREATE ROLE reader LOGIN PASSWORD 'reader-pw'; REVOKE CREATE ON SCHEMA public FROM PUBLIC; GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
        .unwrap();
    let out = servebench()
        .args([
            "history",
            "--stdout",
            "--db",
            &server.url_without_password("reader"),
        ])
        .arg(roots[0].join("runs"))
        .env("PGPASSWORD", "reader-pw")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the server said: ERROR: permission denied"),
        "{err}"
    );
    // Without a password anywhere, the login fails and says so.
    let out = servebench()
        .args(["history", "--stdout", "--db", &url])
        .arg(roots[0].join("runs"))
        .env_remove("PGPASSWORD")
        .env("PGPASSFILE", ws.path().join("none"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    // A .pgpass only its owner reads gives it.
    let pgpass = ws.write(
        "pgpass",
        &format!("127.0.0.1:*:postgres:sbtest:{PASSWORD}\n"),
    );
    std::fs::set_permissions(&pgpass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let out = servebench()
        .args(["history", "--stdout", "--db", &url])
        .arg(roots[0].join("runs"))
        .env_remove("PGPASSWORD")
        .env("PGPASSFILE", &pgpass)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
}

fn pgserver_password() -> &'static str {
    crate::pgserver::PASSWORD
}

#[track_caller]
fn assert_page_draws(page: &Path, at_least: usize) {
    use crate::browser;
    let html = std::fs::read_to_string(page).unwrap();
    assert!(
        !html.contains("<script src") && !html.contains("<link ") && !html.contains("<img "),
        "everything inline"
    );
    let png = page.with_extension("png");
    let p = browser::open(page, &png);
    assert_eq!(
        browser::console_errors(&p.log),
        Vec::<&str>::new(),
        "{}",
        p.log
    );
    let drawn = browser::charts_drawn(&p.dom);
    assert!(drawn.is_some_and(|n| n >= at_least), "drawn {drawn:?}");
    assert!(p.dom.contains("charts drawn: "), "marker");
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "a screenshot with something on it: {size} bytes"
    );
}

#[test]
fn the_report_and_history_pages_load_in_chromium_and_draw() {
    let ws = Workspace::new();
    let spec = ws.write(
        "spec.yaml",
        "name: page\nserver:\n  engine: sim\n  model: test-model\n  args: { profile: fast, context-length: 8192 }\n  ready_timeout: 30s\nworkload:\n  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 16\nsweep:\n  ctx: [512, 2048]\nrequests: 4\nconcurrency: 2\n",
    );
    let (dir, _) = ws.run_ok(&spec);
    let page = dir.join("report.html");
    assert!(page.is_file(), "report.html beside report.md");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Per-request timeline") && html.contains("Point details"));
    // The report's content is there, its charts inlined.
    assert!(
        html.contains("<figure class=\"sb-figure\"><svg"),
        "charts inlined"
    );
    // The headline charts the points measured (TTFT, decode: prefill speed needs one request
    // at a time) and the timeline.
    assert_page_draws(&page, 3);
    // Above the rows, every request of the point (the density view), the last time label
    // inside the plot.
    let p = crate::browser::open(&page, &page.with_extension("png"));
    assert!(
        p.dom.contains("class=\"sb-density\"") && p.dom.contains("all 4 requests in flight"),
        "{}",
        p.dom
    );

    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (_, _) = ws.run_ok(&spec);
    let out_dir = ws.path().join("history");
    let out = servebench()
        .arg("history")
        .arg(ws.path().join("runs"))
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    // TTFT and decode across the two runs.
    assert_page_draws(&out_dir.join("history.html"), 2);
}

#[test]
fn a_server_value_that_opens_a_comment_and_a_script_cannot_stop_the_page() {
    let ws = Workspace::new();
    // A server flag's value, in the change point's note the chart's data carries.
    for (dir, at, decode, value) in [
        ("a", "2026-12-01T00:00:00Z", 100.0, "x"),
        ("b", "2026-12-02T00:00:00Z", 70.0, "<!--<script>"),
    ] {
        let p = point("p001", 1024, decode);
        let m =
            serde_json::to_string(&meta("h", at, json!({ "served-model-name": value }))).unwrap();
        write_run(
            ws.path(),
            dir,
            &m,
            &format!("{}\n", serde_json::to_string(&p).unwrap()),
        );
    }
    let out_dir = ws.path().join("history");
    let out = servebench()
        .arg("history")
        .arg(ws.path().join("runs"))
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let page = out_dir.join("history.html");
    let html = std::fs::read_to_string(&page).unwrap();
    let data = &html[html.find("id=\"sb-data\">").unwrap()..];
    assert!(
        data.contains("\\u003c!--\\u003cscript\\u003e"),
        "in the data, escaped"
    );
    // The title and summary come before the charts.
    assert!(html.find("<h1>History</h1>").unwrap() < html.find("sb-interactive").unwrap());
    assert_page_draws(&page, 1);
}

#[test]
fn a_history_of_100_runs_draws_legible_axes_in_chromium() {
    let ws = Workspace::new();
    for i in 0..100u32 {
        let at = format!("2026-{:02}-{:02}T00:00:00Z", 1 + i / 28, 1 + i % 28);
        // Wide intervals on a small mean: whiskers that would reach below the axis.
        let mut p = point("p001", 1024, 6.31 + (i % 7) as f64 * 0.9);
        p.metrics
            .insert("decode_tok_s".into(), stat(6.31, -3.0, 15.6));
        let m = serde_json::to_string(&meta("h", &at, json!({}))).unwrap();
        write_run(
            ws.path(),
            &format!("r{i:03}"),
            &m,
            &format!("{}\n", serde_json::to_string(&p).unwrap()),
        );
    }
    let out_dir = ws.path().join("history");
    let out = servebench()
        .arg("history")
        .arg(ws.path().join("runs"))
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let page = out_dir.join("history.html");
    let png = page.with_extension("png");
    let p = crate::browser::open(&page, &png);
    assert!(
        crate::browser::charts_drawn(&p.dom).is_some_and(|n| n >= 1),
        "{}",
        p.log
    );
    let chart = &p.dom[p.dom.find("sb-charts").unwrap()..];
    let chart = &chart[..chart.find("</svg>").unwrap()];
    let x_labels = regex::Regex::new(r">#\d+</text>")
        .unwrap()
        .find_iter(chart)
        .count();
    assert!(
        (5..=25).contains(&x_labels),
        "thinned: {x_labels} of 100 labels"
    );
    assert!(chart.contains(">#100</text>"), "the last run labelled");
    // In the static chart too, the last label (centred on the plot's right edge) is not cut
    // off by the picture's edge (760 wide): half of `#100` fits beside it.
    let svg = std::fs::read_to_string(out_dir.join("charts/h-decode_tok_s.svg")).unwrap();
    let last_x: f64 = regex::Regex::new(r#"<text x="([0-9.]+)"[^>]*>\s*#100\s*</text>"#)
        .unwrap()
        .captures(&svg)
        .unwrap_or_else(|| panic!("no #100 label: {svg}"))[1]
        .parse()
        .unwrap();
    assert!(
        last_x <= 740.0,
        "the last x label at {last_x} is cut off at 760"
    );
    let y_ticks: Vec<f64> = regex::Regex::new(r#"text-anchor="end"[^>]*>([0-9.]+)</text>"#)
        .unwrap()
        .captures_iter(chart)
        .map(|c| c[1].parse().unwrap())
        .collect();
    assert!(y_ticks.len() >= 4, "{y_ticks:?}");
    let step = y_ticks[1] - y_ticks[0];
    for (k, t) in y_ticks.iter().enumerate() {
        assert!(
            (t - k as f64 * step).abs() < 1e-9,
            "round ticks: {y_ticks:?}"
        );
    }
    assert!(
        [1.0, 2.0, 2.5, 5.0].iter().any(|m| {
            let r = step / m;
            (r.log10() - r.log10().round()).abs() < 1e-9
        }),
        "a round step: {step}"
    );
    // Whiskers stay inside the plot: none below the x axis (y = 330).
    for c in regex::Regex::new(r#"<line x1="[0-9.]+" x2="[0-9.]+" y1="([0-9.]+)" y2="([0-9.]+)""#)
        .unwrap()
        .captures_iter(chart)
    {
        let (a, b): (f64, f64) = (c[1].parse().unwrap(), c[2].parse().unwrap());
        assert!(a <= 330.001 && b <= 330.001, "below the axis: {a} {b}");
    }
}

#[test]
fn the_browser_check_catches_a_page_whose_script_fails() {
    use crate::browser;
    let ws = Workspace::new();
    let page = ws.write(
        "bad.html",
        "<html><body><p id=\"sb-ready\"></p><script>console.error(\"boom\"); null.x; document.body.setAttribute(\"data-charts-drawn\", \"1\");</script></body></html>",
    );
    let p = browser::open(&page, &ws.path().join("bad.png"));
    let errors = browser::console_errors(&p.log);
    assert!(errors.iter().any(|l| l.contains("boom")), "{}", p.log);
    assert!(
        errors.iter().any(|l| l.contains("Uncaught TypeError")),
        "{}",
        p.log
    );
    assert_eq!(
        browser::charts_drawn(&p.dom),
        None,
        "the script stopped before the marker"
    );
}
