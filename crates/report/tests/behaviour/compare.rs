//! Comparing runs (`report::compare`): synthetic runs with known differences, and the fixture
//! runs. The `servebench compare` command and simulator runs are servebench's own tests
//! (`tests/compare.rs`).

use std::path::Path;

use serde_json::json;
use servebench_model::results::RunDir;
use servebench_model::results::records::Stat;
use servebench_report::report::compare::{self, LoadedRun, Verdict};
use testkit::runs::{point, run, stat, verdicts};

use crate::fixtures;

#[test]
fn compare_report_snapshot() {
    let model = compare::build(&fixtures().chunk_runs(), None);
    insta::assert_snapshot!("compare_report", compare::render(&model, None).unwrap());
}

#[test]
fn changes_are_judged_by_direction_and_noise() {
    let model = compare::build(&fixtures().chunk_runs(), None);
    assert_eq!(
        verdicts(&model, "ttft_s"),
        vec![
            ("ctx=1024".to_string(), Some(Verdict::Regression)),
            ("ctx=8192".to_string(), Some(Verdict::NotCompared)),
        ]
    );
    assert_eq!(
        verdicts(&model, "decode_tok_s")[0].1,
        Some(Verdict::WithinNoise)
    );
    let ttft = &model.metrics[0].rows[0].cells[1];
    assert!((ttft.change_pct.unwrap() - 50.0).abs() < 1e-9);
    assert_eq!(ttft.change, "+50.0%");
    assert_eq!(
        (model.summary.regressions, model.summary.improvements),
        (1, 0)
    );
    assert_eq!(model.summary.not_compared, 1);
    // The flag is shown, with the run and point it came from.
    let problem = &model.points[1].problems[0];
    assert_eq!(
        (problem.run.as_str(), problem.kind.as_str()),
        ("B", "cold-cache-hit")
    );

    // Swapped, the same change is an improvement.
    let mut swapped = fixtures().chunk_runs();
    swapped.reverse();
    let model = compare::build(&swapped, None);
    assert_eq!(verdicts(&model, "ttft_s")[0].1, Some(Verdict::Improvement));
}

#[test]
fn server_flags_that_differ_are_listed_first() {
    let model = compare::build(&fixtures().chunk_runs(), None);
    let first = &model.differences[0];
    assert_eq!(first.name, "server.args.chunked-prefill-size");
    assert_eq!(first.values, vec!["8192", "4096"]);
    assert!(
        !model.differences.iter().any(|d| d.name.contains("tp-size")),
        "equal settings are not differences: {:?}",
        model.differences
    );
}

#[test]
fn different_sweeps_compare_shared_points_and_list_the_rest() {
    let model = compare::build(&fixtures().chunk_runs(), None);
    let shared: Vec<&str> = model.points.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(shared, vec!["ctx=1024", "ctx=8192"]);
    let only: Vec<(&str, Vec<Option<&str>>)> = model
        .unmatched
        .iter()
        .map(|u| {
            (
                u.label.as_str(),
                u.ids.iter().map(|i| i.as_deref()).collect(),
            )
        })
        .collect();
    assert_eq!(
        only,
        vec![
            ("ctx=32768", vec![Some("p003"), None]),
            ("ctx=16384", vec![None, Some("p003")]),
        ]
    );
    let text = compare::render(&model, None).unwrap();
    assert!(text.contains("## Points not in every run"), "{text}");
}

#[test]
fn a_server_dimension_swept_in_both_runs_matches_point_for_point() {
    // Both runs sweep the chunk size; B runs a newer server. Points match on (chunk, ctx).
    let swept = |name: &str, version: &str, ttft: f64| {
        let mut m = fixtures().meta(
            name,
            json!({}),
            &["server.args.chunked-prefill-size", "ctx"],
        );
        m.servers[0].server_info = Some(json!({ "version": version }));
        let points = [4096, 8192]
            .into_iter()
            .enumerate()
            .map(|(i, chunk)| {
                let mut p = point(
                    &format!("p00{}", i + 1),
                    1024,
                    (ttft, ttft * 0.95, ttft * 1.05),
                    (100.0, 99.0, 101.0),
                );
                p.values
                    .insert_before(0, "server.args.chunked-prefill-size".into(), json!(chunk));
                p
            })
            .collect();
        run(&format!("runs/{name}"), m, points)
    };
    let model = compare::build(
        &[swept("old", "0.5.9", 0.1), swept("new", "0.6.0", 0.1)],
        None,
    );
    // ctx takes one value, so only the chunk size tells points apart.
    assert_eq!(model.dimensions, vec!["server.args.chunked-prefill-size"]);
    assert_eq!(model.points.len(), 2);
    assert!(model.unmatched.is_empty());
    let version = model
        .differences
        .iter()
        .find(|d| d.name == "server version")
        .unwrap();
    assert_eq!(version.values, vec!["0.5.9", "0.6.0"]);
    assert_eq!(model.summary.within_noise, 4);
}

#[test]
fn changes_without_intervals_are_not_enough_evidence() {
    let mut runs = fixtures().chunk_runs();
    for r in &mut runs {
        for p in &mut r.points {
            for s in p.metrics.values_mut() {
                (s.ci95_low, s.ci95_high, s.ci_method) = (None, None, None);
            }
        }
    }
    // One sample per run says nothing about noise: a +50% TTFT is not called a regression.
    let model = compare::build(&runs, None);
    assert_eq!(model.summary.regressions, 0);
    assert_eq!(
        verdicts(&model, "ttft_s")[0].1,
        Some(Verdict::NotEnoughEvidence)
    );
    // Decode +1% stays under the default 5% minimum effect: noise, whatever the evidence.
    assert_eq!(
        verdicts(&model, "decode_tok_s")[0].1,
        Some(Verdict::WithinNoise)
    );
    assert!(model.summary.not_enough_evidence >= 1);
}

#[test]
fn compare_models_validate_against_the_schema() {
    let schema = servebench_report::report::schema::compare_model_schema();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let fixture = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/runs")
            .join(name)
    };
    // Synthetic runs with verdicts, and stored runs with failed points and different sweeps.
    let stored: Vec<LoadedRun> = ["contaminated", "two-point-crash"]
        .iter()
        .map(|n| compare::load(&fixture(n)).unwrap())
        .collect();
    for (what, model) in [
        (
            "synthetic",
            compare::build(&fixtures().chunk_runs(), Some(5.0)),
        ),
        ("fixtures", compare::build(&stored, None)),
    ] {
        assert!(!model.metrics.is_empty(), "{what}: something was compared");
        assert!(
            model.points.iter().any(|p| !p.problems.is_empty()) && !model.unmatched.is_empty(),
            "{what}: failed and unmatched points are covered"
        );
        let value = serde_json::to_value(&model).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{what}: {errors:#?}");
    }
    let mut value = serde_json::to_value(compare::build(&fixtures().chunk_runs(), None)).unwrap();
    value["metrics"][0]["rows"][0]["cells"][1]["verdict"] = json!("worse");
    assert!(!validator.is_valid(&value), "an unknown verdict is refused");
}

/// Two capacity searches: the recorded one against itself (the same bracket: not enough
/// evidence) and against one whose capacity passed where it failed (higher), rendered.
#[test]
fn capacities_are_compared_by_their_brackets() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/capacity-search");
    let a = compare::load(&dir).unwrap();
    let same = a.clone();
    let mut higher = a.clone();
    let s = &mut higher.searches.as_mut().unwrap().searches[0];
    (s.capacity, s.above) = (Some(12.0), Some(12.5));
    let model = compare::build(&[a, same, higher], None);
    assert_eq!(model.capacities.len(), 1);
    let cells = &model.capacities[0].runs;
    assert_eq!(cells[0].bracket, "[11.6, 12.0)");
    assert_eq!(cells[0].verdict, None);
    assert_eq!(cells[1].verdict, Some(Verdict::NotEnoughEvidence));
    assert_eq!(cells[2].verdict, Some(Verdict::Improvement));
    let text = compare::render(&model, None).unwrap();
    assert!(text.contains("## Capacity"), "{text}");
    assert!(
        text.contains("| **B** | 11.6 | [11.6, 12.0) | not enough evidence: the brackets [11.6, 12.0) and [11.6, 12.0) overlap"),
        "{text}"
    );
    assert!(
        text.contains("| **C** | 12.0 | [12.0, 12.5) | **higher**: 12.0 passed, at or above where the baseline failed (12.0) |"),
        "{text}"
    );
}

#[test]
fn open_loop_points_pair_by_offered_rate_not_by_label() {
    use servebench_model::results::records::LoadSummary;
    // A swept 10, 20, 40 req/s; B wrote 10.2, 19.6, 30. Their schedules offered 10.1, 19.9
    // and 39.6 (A) and 10.3, 19.5 and 30.2 (B): the first two pairs are within 5% of A's,
    // 39.6 against 30.2 is not, so A's 40 and B's 30 are reported as unmatched.
    let load_run = |name: &str, rates: [(f64, f64); 3], ttft: f64| {
        let points = rates
            .iter()
            .enumerate()
            .map(|(i, &(rate, offered))| {
                let mut p = point(
                    &format!("p00{}", i + 1),
                    1024,
                    (ttft, ttft * 0.95, ttft * 1.05),
                    (100.0, 99.0, 101.0),
                );
                p.values = [("load.rate".to_string(), json!(rate))]
                    .into_iter()
                    .collect();
                p.metrics
                    .insert("concurrency_max".into(), stat(4.0, 4.0, 4.0));
                p.load = Some(LoadSummary {
                    kind: "rate".into(),
                    offered_req_s: Some(offered),
                    ..LoadSummary::default()
                });
                p
            })
            .collect();
        run(
            &format!("runs/{name}"),
            fixtures().meta(name, json!({}), &["load.rate"]),
            points,
        )
    };
    let a = load_run("a", [(10.0, 10.1), (20.0, 19.9), (40.0, 39.6)], 0.1);
    let b = load_run("b", [(10.2, 10.3), (19.6, 19.5), (30.0, 30.2)], 0.2);
    let model = compare::build(&[a, b], None);
    assert_eq!(model.offered_tolerance_pct, Some(5.0));
    let shared: Vec<(&str, Vec<&str>)> = model
        .points
        .iter()
        .map(|p| (p.label.as_str(), p.ids.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(
        shared,
        [
            (
                "load.rate=10.0 / 10.2 (offered 10.1 / 10.3 req/s)",
                vec!["p001", "p001"]
            ),
            (
                "load.rate=20.0 / 19.6 (offered 19.9 / 19.5 req/s)",
                vec!["p002", "p002"]
            ),
        ]
    );
    let unmatched: Vec<(&str, Vec<Option<&str>>)> = model
        .unmatched
        .iter()
        .map(|u| {
            (
                u.label.as_str(),
                u.ids.iter().map(|i| i.as_deref()).collect(),
            )
        })
        .collect();
    assert_eq!(
        unmatched,
        [
            (
                "load.rate=40.0 (offered 39.6 / — req/s)",
                vec![Some("p003"), None]
            ),
            (
                "load.rate=30.0 (offered — / 30.2 req/s)",
                vec![None, Some("p003")]
            ),
        ]
    );
    // Requests of an open loop overlap: their spread is not evidence of run-to-run noise, so
    // B's doubled TTFT is not called a regression from one round.
    let ttft = model.metrics.iter().find(|m| m.name == "ttft_s").unwrap();
    assert_eq!(
        ttft.rows[0].cells[1].verdict,
        Some(Verdict::NotEnoughEvidence)
    );
    let text = compare::render(&model, None).unwrap();
    assert!(
        text.contains("| load.rate | offered req/s | A | B | B vs A |"),
        "{text}"
    );
    assert!(text.contains("| 10.0 / 10.2 | 10.1 / 10.3 |"), "{text}");
    assert!(
        text.contains("paired by the rate they were offered"),
        "{text}"
    );
    assert!(text.contains("within 5.0% of its own"), "{text}");
}

/// Two runs on the same machine whose server is `engine` at `version` (as `/server_info`
/// reported it), TTFT at 1024 as (mean, low, high).
fn engine_run(label: &str, engine: &str, version: &str, ttft: (f64, f64, f64)) -> LoadedRun {
    let mut m = fixtures().meta("engines", json!({ "tp-size": 1 }), &["ctx"]);
    m.server_host = Some(json!({"gpus": [{"name": "NVIDIA L4", "driver_version": "550.54"}]}));
    for s in &mut m.servers {
        s.engine = engine.to_string();
        s.surface = Some(servebench_model::results::meta::ServerSurface {
            version: Some(version.to_string()),
            ..Default::default()
        });
    }
    run(
        &format!("runs/engines/{label}"),
        m,
        vec![point("p001", 1024, ttft, (100.0, 96.0, 104.0))],
    )
}

/// `compare --by server.engine`: the engines differ by design, the machine does not, so no
/// "different hardware"; the same engine at two versions is named as such, not as hardware.
#[test]
fn different_engines_on_one_machine_are_not_different_hardware() {
    let runs = [
        engine_run("sglang", "sglang", "0.5.23", (0.1, 0.099, 0.101)),
        engine_run("vllm", "vllm", "0.33.0", (0.1, 0.099, 0.101)),
    ];
    let model = compare::build(&runs, None);
    assert!(
        model.hardware_notes.is_empty(),
        "{:?}",
        model.hardware_notes
    );
    let runs = [
        engine_run("old", "sglang", "0.5.22", (0.1, 0.099, 0.101)),
        engine_run("new", "sglang", "0.5.23", (0.1, 0.099, 0.101)),
    ];
    let notes = compare::build(&runs, None).hardware_notes;
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with("different engine versions: 1 point"),
        "{notes:?}"
    );
    assert!(notes[0].contains("sglang 0.5.22") && notes[0].contains("sglang 0.5.23"));
    assert!(!notes[0].contains("different hardware"), "{notes:?}");
}

/// +3.7% TTFT with intervals far apart is a real change below the 5% threshold, not noise.
#[test]
fn a_real_change_below_the_threshold_is_not_called_noise() {
    let runs = [
        engine_run("a", "sglang", "0.5.23", (0.100, 0.0995, 0.1005)),
        engine_run("b", "sglang", "0.5.23", (0.1037, 0.1032, 0.1042)),
    ];
    let model = compare::build(&runs, None);
    assert_eq!(
        verdicts(&model, "ttft_s")[0].1,
        Some(Verdict::BelowThreshold)
    );
    assert_eq!(model.summary.below_threshold, 1);
    let text = compare::render(&model, None).unwrap();
    assert!(text.contains("+3.7% real, below the threshold"), "{text}");
    assert!(!text.contains("+3.7% within noise"), "{text}");
}

#[test]
fn compare_shows_each_points_grades_against_the_hardware() {
    let fixture = |name: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/runs")
            .join(name)
    };
    // The graded fixture against the same points without a model config.
    let a = servebench_report::report::compare::load(&fixture("bound-sweep")).unwrap();
    let b = servebench_report::report::compare::load(&fixture("clean-sweep")).unwrap();
    let report = servebench_report::report::build_model(
        &a.meta,
        &a.points,
        &RunDir::open(&fixture("bound-sweep"))
            .unwrap()
            .read_requests()
            .unwrap(),
    );
    let graded = report.bound.as_ref().unwrap();
    let model = servebench_report::report::compare::build(&[a, b], None);
    assert_eq!(model.bound.len(), model.points.len());
    assert!(!model.bound.is_empty());
    for (row, shared) in model.bound.iter().zip(&model.points) {
        let (ra, rb) = (&row.runs[0], &row.runs[1]);
        // B kept no config: nothing graded, and the note says why.
        assert_eq!(rb.decode_bw_fraction, None);
        // A's figures are its report's.
        let want = graded
            .rows
            .iter()
            .find(|r| r.point == shared.ids[0])
            .unwrap();
        assert_eq!(
            ra.decode_bw_fraction,
            Some(want.decode_bw_fraction),
            "{row:?}"
        );
        assert_eq!(
            ra.effective_bandwidth_gbs,
            Some(want.effective_bandwidth_gbs)
        );
        assert_eq!(ra.step_floor_s, Some(want.step_floor_s));
        assert_eq!(ra.prefill_flops_fraction, want.prefill_flops_fraction);
    }
    assert!(
        model
            .bound_notes
            .iter()
            .any(|n| n.starts_with("B: ") && n.contains("server.model_facts")),
        "{:?}",
        model.bound_notes
    );
    let text = servebench_report::report::compare::render(&model, None).unwrap();
    assert!(text.contains("## Against the hardware"), "{text}");
    assert!(text.contains("- not graded: B: "), "{text}");
}

/// A run at ctx 1024 and concurrency 1, 8, 32 whose decode speeds are `decode`; `spec` sets
/// `--speculative-algorithm EAGLE` on its server and gives its points an accept length.
fn spec_run(path: &str, spec: bool, decode: [f64; 3]) -> LoadedRun {
    let mut meta = fixtures().meta("spec", json!({ "tp-size": 1 }), &["ctx", "concurrency"]);
    for s in &mut meta.servers {
        s.args.clear();
        if spec {
            s.args
                .insert("speculative-algorithm".into(), json!("EAGLE"));
        }
    }
    let points = [1, 8, 32]
        .iter()
        .zip(decode)
        .enumerate()
        .map(|(i, (c, d))| {
            let mut p = point(
                &format!("p00{}", i + 1),
                1024,
                (0.1, 0.095, 0.105),
                (d, d * 0.98, d * 1.02),
            );
            p.values.insert("concurrency".into(), json!(c));
            if spec {
                p.metrics
                    .insert("accept_length".into(), stat(2.7, 2.6, 2.8));
            }
            p
        })
        .collect();
    run(path, meta, points)
}

#[test]
fn speculation_on_against_off_shows_the_speedup_and_the_crossover() {
    let runs = vec![
        spec_run("runs/spec/off", false, [100.0, 90.0, 80.0]),
        spec_run("runs/spec/on", true, [200.0, 117.0, 48.0]),
    ];
    let model = compare::build(&runs, None);
    let s = model
        .speculative
        .as_ref()
        .expect("an on/off pair was compared");
    let rows: Vec<(&str, &str, f64)> = s
        .pairs
        .iter()
        .map(|r| (r.on.as_str(), r.off.as_str(), r.speedup))
        .collect();
    assert_eq!(
        rows,
        [
            ("B p001", "A p001", 2.0),
            ("B p002", "A p002", 1.3),
            ("B p003", "A p003", 0.6)
        ]
    );
    assert_eq!(s.pairs[0].accept_length, Some(2.7));
    assert_eq!(
        s.crossovers,
        [
            "At ctx=1024, speculation pays up to concurrency 8 (1.30x) and stops paying by concurrency 32 (0.60x): the crossover lies between concurrency 8 and 32."
        ]
    );
    let text = compare::render(&model, None).unwrap();
    assert!(
        text.contains("## Speculative decoding: on against off"),
        "{text}"
    );
    assert!(
        text.contains(
            "| ctx=1024, concurrency=32 | B p003 | A p003 | 48.0 | 80.0 | 0.60x ⚠ | 2.70 |"
        ),
        "{text}"
    );
    assert!(text.contains(&s.crossovers[0]));
    // Runs that do not differ in speculation show no such section.
    let model = compare::build(&fixtures().chunk_runs(), None);
    assert!(model.speculative.is_none());
    assert!(
        !compare::render(&model, None)
            .unwrap()
            .contains("Speculative")
    );
}

/// The tool-call shares are compared like any point metric, as the catalogue labels them:
/// one value per point, so a change says how much, and that one run cannot tell noise.
#[test]
fn tool_call_shares_are_compared() {
    let mut runs = fixtures().chunk_runs();
    for (run, valid) in runs.iter_mut().zip([1.0, 0.9]) {
        let p = &mut run.points[0];
        for (name, share) in [("tool_call_rate", 1.0), ("tool_call_valid_rate", valid)] {
            p.metrics.insert(
                name.into(),
                Stat {
                    count: 8,
                    mean: share,
                    p50: share,
                    p90: share,
                    p99: share,
                    min: share,
                    max: share,
                    ..Stat::default()
                },
            );
        }
    }
    let model = compare::build(&runs, None);
    let table = model
        .metrics
        .iter()
        .find(|m| m.name == "tool_call_valid_rate")
        .expect("a tool_call_valid_rate table");
    assert_eq!(table.label, "calls valid");
    let cell = &table.rows[0].cells[1];
    assert_eq!(cell.change, "-10.0%");
    assert_eq!(cell.verdict, Some(Verdict::NotEnoughEvidence));
    assert!(model.metrics.iter().any(|m| m.name == "tool_call_rate"));
}
