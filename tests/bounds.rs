//! Every input has a budget (the guide's "Limits", docs/guide/limits.md): past it, a clear error that names the budget,
//! found fast and in bounded memory. Memory is checked by running the binary under an
//! address-space limit (`ulimit -v`) far below what the unbounded versions took.

use std::path::Path;
use std::process::Output;

use servebench_model::spec;

use crate::common::*;

/// Address space the binary gets in these tests: a small spec validates in well under it, and
/// each case below took gigabytes before it had a budget.
const MEMORY_CAP_KIB: u64 = 512 * 1024;

/// `servebench ARGS` with at most [`MEMORY_CAP_KIB`] of address space.
fn capped(args: &[&str], dir: &Path) -> Output {
    let bin = assert_cmd::cargo::cargo_bin("servebench");
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {MEMORY_CAP_KIB} && exec \"$0\" \"$@\""))
        .arg(bin)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("sh runs")
}

#[track_caller]
fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const BASE: &str = "name: t
server:
  engine: sim
workload:
  prompt: { kind: repeat, tokens: 64 }
  output_tokens: 8
";

/// About 100 KB: a 90 KB string, then five levels of ten aliases each (10^5 copies, 9 GB).
fn string_alias_bomb() -> String {
    let mut s = format!("{BASE}description: &a \"{}\"\n", "x".repeat(90_000));
    let mut prev = 'a';
    for next in ['b', 'c', 'd', 'e', 'f'] {
        let items = vec![format!("*{prev}"); 10].join(", ");
        s.push_str(&format!("x{next}: &{next} [{items}]\n"));
        prev = next;
    }
    s
}

#[test]
fn string_aliases_stop_at_the_expanded_size_budget() {
    let source = string_alias_bomb();
    assert!(source.len() < 100_000);
    let e = spec::load_str("bomb.yaml", &source).unwrap_err();
    let d = &e.diagnostics[0];
    assert!(
        d.message.contains("32 MiB") && d.message.contains("once aliases are expanded"),
        "{d:#?}"
    );
    assert_eq!(d.line, 10, "the first alias past the budget: {d:#?}");

    let ws = Workspace::new();
    ws.write("bomb.yaml", &source);
    let out = capped(&["validate", "bomb.yaml"], ws.path());
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(stderr(&out).contains("32 MiB"), "{}", show(&out));
}

#[test]
fn a_long_key_in_every_path_stops_at_the_expanded_size_budget() {
    // A 4 MB explicit key above 100,000 values: each value's path repeats the key.
    let source = format!(
        "? {}\n: [{}]\n",
        "k".repeat(4_000_000),
        vec!["1"; 100_000].join(",")
    );
    let ws = Workspace::new();
    ws.write("key.yaml", &source);
    let out = capped(&["validate", "key.yaml"], ws.path());
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let text = stderr(&out);
    assert!(text.contains("32 MiB"), "{}", show(&out));
    assert!(
        text.len() < 2_000,
        "the error echoes the input: {} bytes",
        text.len()
    );
}

#[test]
fn an_error_on_a_5_mb_line_is_shown_cut_around_its_column() {
    let source = format!("{BASE}request_timeout: {}\n", "y".repeat(5_000_000));
    let ws = Workspace::new();
    ws.write("long.yaml", &source);
    let out = capped(&["validate", "long.yaml"], ws.path());
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let text = stderr(&out);
    assert!(text.len() < 2_000, "{} bytes of error", text.len());
    assert!(text.contains(" --> long.yaml:7:18"), "{text}");
    assert!(text.contains("is not a duration"), "{text}");
    assert!(
        text.contains("line 7 is 5000017 bytes long; 4999817 of them are not shown"),
        "{text}"
    );
    // The key stays in view, and the value is quoted cut.
    assert!(text.contains("7 | request_timeout: yyy"), "{text}");
    assert!(text.contains("`yyyyyyyyyy"), "{text}");
}

#[test]
fn a_line_of_duplicate_keys_stops_at_the_diagnostic_limit() {
    let keys: String = (0..20_000).map(|_| "k: 1, ").collect();
    let source = format!("{BASE}description: x\nx: {{ {keys} }}\n");
    let e = spec::load_str("dup.yaml", &source).unwrap_err();
    assert_eq!(
        e.diagnostics.len(),
        spec::diagnostics::MAX_DIAGNOSTICS,
        "{:#?}",
        &e.diagnostics[..3]
    );
    assert!(e.to_string().len() < 200_000);
}

/// A spec whose one dimension has 10,000 values: the most points a spec may have.
fn sweep_of(n: usize) -> String {
    let values: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
    format!(
        "{BASE}sweep:\n  workload.output_tokens: [{}]\n",
        values.join(", ")
    )
}

#[test]
fn ten_thousand_points_share_one_sweep() {
    let spec = spec::load_str("s.yaml", &sweep_of(10_000)).unwrap();
    assert_eq!(spec.points.len(), 10_000);
    let (first, last) = (&spec.points[0].experiment, &spec.points[9_999].experiment);
    assert!(std::sync::Arc::ptr_eq(&first.sweep, &last.sweep));
    assert_eq!(first.sweep["workload.output_tokens"].len(), 10_000);
}

#[test]
fn ten_thousand_points_validate_and_plan_in_bounded_memory() {
    // Before the sweep was shared: 2.4 GB to validate, 4.7 GB to plan.
    let ws = Workspace::new();
    ws.write("s.yaml", &sweep_of(10_000));
    let out = capped(&["validate", "s.yaml"], ws.path());
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ok (10000 points)"),
        "{}",
        show(&out)
    );
    let out = capped(&["plan", "s.yaml"], ws.path());
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn points_that_copy_a_large_spec_stop_at_the_points_budget() {
    let source = format!(
        "{}description: \"{}\"\n",
        sweep_of(10_000),
        "d".repeat(100_000)
    );
    let e = spec::load_str("s.yaml", &source).unwrap_err();
    let d = &e.diagnostics[0];
    assert!(
        d.message.contains("10000 points are too large") && d.message.contains("256 MiB"),
        "{d:#?}"
    );
    assert_eq!((d.line, d.snippet.as_str()), (7, "sweep"));
    assert!(hint_of(d).contains("description"), "{d:#?}");

    // Substituted values can make points larger than the spec: caught as they are expanded.
    // 500 values of 40 KB (behind aliases), each used 100 times: 4 MB a point, 2 GB in all.
    let big = "v".repeat(40_000);
    let values = vec!["*v"; 499].join(", ");
    let uses = "{{ a }}".repeat(100);
    let source = format!("{BASE}description: \"{uses}\"\nsweep:\n  a: [&v \"{big}\", {values}]\n");
    let e = spec::load_str("s.yaml", &source).unwrap_err();
    assert!(
        e.diagnostics[0].message.contains("the first "),
        "{:#?}",
        e.diagnostics[0]
    );
}

#[track_caller]
fn hint_of(d: &spec::Diagnostic) -> &str {
    d.hint
        .as_deref()
        .unwrap_or_else(|| panic!("no hint: {d:#?}"))
}

#[test]
fn resolved_yaml_holds_the_sweep_once() {
    let ws = Workspace::new();
    let spec = ws.write(
        "r.yaml",
        &sim_spec(
            "r",
            "  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2",
            "sweep:\n  workload.output_tokens: [2, 3, 4]",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points.len(), 3);
    let text = std::fs::read_to_string(dir.join("resolved.yaml")).unwrap();
    let resolved = servebench_model::spec::yaml::parse(&text).unwrap().value;
    assert_eq!(
        resolved["sweep"],
        serde_json::json!({ "workload.output_tokens": [2, 3, 4] })
    );
    let listed = resolved["points"].as_array().unwrap();
    assert_eq!(listed.len(), 3);
    for (p, tokens) in listed.iter().zip([2, 3, 4]) {
        assert_eq!(p["experiment"]["workload"]["output_tokens"], tokens);
        assert_eq!(p["experiment"]["sweep"], serde_json::json!({}), "{p}");
    }
}

/// The issue's case: a custom template with a huge loop hung the end of a run. It now stops
/// at the step budget, and the run ends with the error; the measurements are on disk.
#[test]
fn a_template_that_loops_stops_at_its_step_budget() {
    let ws = Workspace::new();
    ws.write(
        "loop.md.j2",
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}\n",
    );
    let spec = ws.write(
        "t.yaml",
        &sim_spec(
            "t",
            "  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2",
            "report: { template: loop.md.j2 }",
        ),
    );
    let started = std::time::Instant::now();
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let text = stderr(&out);
    assert!(
        text.contains("loop.md.j2, line 1: the template used up its budget of 50000000 steps"),
        "{}",
        show(&out)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(100));
    let dir = run_dir(&out);
    assert_eq!(read_jsonl(&dir.join("points.jsonl")).len(), 1);
}

#[test]
fn a_spec_that_never_ends_is_read_to_its_budget_only() {
    let e = spec::load(Path::new("/dev/zero")).unwrap_err();
    let message = &e.diagnostics[0].message;
    assert!(
        message.contains("more than 8388608 bytes; specs are limited to 8388608 bytes (8 MiB)"),
        "{message}"
    );
}

/// A model config whose facts no model has (the issue's `num_hidden_layers: 1000000000000`
/// aborted `validate`, `run` and `bound` with "memory allocation of 1000000000000 bytes
/// failed"): refused at its field, in bounded memory, before anything runs.
#[test]
fn model_facts_past_their_bounds_are_refused_at_their_field() {
    let ws = Workspace::new();
    let spec = BASE.replace(
        "  engine: sim\n",
        "  engine: sim\n  model: m\n  gpu: h100-sxm\n  model_facts:\n    hidden_size: 4096\n    num_hidden_layers: 1000000000000\n    num_attention_heads: 32\n    vocab_size: 128256\n",
    );
    ws.write("huge.yaml", &spec);
    for command in ["validate", "run"] {
        let out = capped(&[command, "huge.yaml"], ws.path());
        assert_eq!(out.status.code(), Some(2), "{command}: {}", show(&out));
        let text = stderr(&out);
        assert!(
            text.contains("the config's `num_hidden_layers` is 1000000000000: a whole number from 1 to 1024 is needed"),
            "{command}: {text}"
        );
        assert!(text.contains(" --> huge.yaml:8:24"), "{command}: {text}");
    }
    assert!(!ws.path().join("runs").exists(), "nothing ran");
    // A spec GPU's figure no GPU has names its field.
    ws.write(
        "gpu.yaml",
        &BASE.replace(
            "  engine: sim\n",
            "  engine: sim\n  gpu: { name: x, bandwidth_gb_s: 100, bf16_tflops: 10, fp8_tflops: -1000, source: me }\n",
        ),
    );
    let out = capped(&["validate", "gpu.yaml"], ws.path());
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let text = stderr(&out);
    assert!(text.contains("-1000 is no GPU's peak"), "{text}");
    assert!(text.contains(" --> gpu.yaml:4:69"), "{text}");
    // A mapping with a wrong key is named by it, not "expected nothing".
    ws.write(
        "gpu2.yaml",
        &BASE.replace(
            "  engine: sim\n",
            "  engine: sim\n  gpu: { name: x, bandwidth_gb_s: 100, bf16_tflops: 10, source: me, tflops: 3 }\n",
        ),
    );
    let out = capped(&["validate", "gpu2.yaml"], ws.path());
    let text = stderr(&out);
    assert!(text.contains("unknown field `tflops`"), "{text}");
    assert!(!text.contains("expected nothing"), "{text}");
}
