//! End to end: output validity (`validity:`) on the simulator, healthy and with its output
//! faults (`faults:` in a profile): canaries at each position, consistency under load, a
//! failing point flagged, degraded (exit 3), shown in the report and kept out of a capacity
//! search's answer and of `compare` verdicts.

use std::path::{Path, PathBuf};

use crate::common::*;

/// The `fast` profile with `faults` added (empty: a healthy copy).
fn profile(ws: &Workspace, faults: &str) -> PathBuf {
    let fast = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/sim/profiles/fast.yaml"),
    )
    .unwrap();
    ws.write("profile.yaml", &format!("{fast}\n{faults}\n"))
}

fn sim(name: &str, profile: &Path, body: &str) -> String {
    format!(
        "name: {name}\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: {}, context-length: 16384 }}\n  ready_timeout: 30s\n{body}\n",
        profile.display()
    )
}

fn roles(dir: &Path) -> Vec<(String, String)> {
    read_jsonl(&dir.join("requests.jsonl"))
        .iter()
        .map(|r| {
            (
                r["point"].as_str().unwrap().to_string(),
                r["role"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn flag_kinds(point: &serde_json::Value) -> Vec<String> {
    point["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

fn verdicts(point: &serde_json::Value) -> Vec<(String, String)> {
    point["validity"]["canaries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["position"].as_str().unwrap().to_string(),
                c["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_healthy_server_passes_canaries_and_consistency_and_they_are_not_measured() {
    let ws = Workspace::new();
    let p = profile(&ws, "");
    let spec = ws.write(
        "ok.yaml",
        &sim(
            "valid",
            &p,
            "workload:\n  prompt: { kind: repeat, tokens: 1024 }\n  output_tokens: 16\nrequests: 8\nconcurrency: 4\nvalidity: { canaries: true, consistency: true }",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    assert_eq!(
        verdicts(p),
        [
            ("start".to_string(), "passed".to_string()),
            ("middle".into(), "passed".into()),
            ("end".into(), "passed".into())
        ],
        "{p}"
    );
    for c in p["validity"]["canaries"].as_array().unwrap() {
        // At the point's length (1024 asked), the fact's digits answered.
        let tokens = c["prompt_tokens"].as_u64().unwrap();
        assert!((900..=1100).contains(&tokens), "{c}");
        assert!(
            c["answer"]
                .as_str()
                .unwrap()
                .starts_with(c["expected"].as_str().unwrap()),
            "{c}"
        );
    }
    let c = &p["validity"]["consistency"];
    assert_eq!(c["verdict"], "passed", "{c}");
    assert_eq!(c["under_load"], 2, "{c}");
    assert!(!flag_kinds(p).iter().any(|k| k.contains("valid")), "{p}");
    assert_eq!(p["status"], "ok");
    // 3 canaries, 2 solo and 2 loaded consistency requests recorded apart; 8 measured.
    let roles = roles(&dir);
    let count = |role: &str| roles.iter().filter(|(_, r)| r == role).count();
    assert_eq!(
        (count("canary"), count("consistency"), count("measure")),
        (3, 4, 8)
    );
    assert_eq!(p["ok"], 8, "the checks are not in the point's numbers");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Output validity"), "{report}");
    assert!(report.contains("Every judged check passed."), "{report}");
}

#[test]
fn garbage_past_a_context_length_fails_the_long_point_only_and_exits_3() {
    let ws = Workspace::new();
    let p = profile(&ws, "faults: { garbage_past_tokens: 3000 }");
    let spec = ws.write(
        "ctx.yaml",
        &sim(
            "ctx",
            &p,
            "workload:\n  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 8\nrequests: 2\nsweep:\n  ctx: [1024, 6000]\nvalidity: { canaries: true }",
        ),
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let (short, long) = (&points[0], &points[1]);
    assert!(
        verdicts(short).iter().all(|(_, v)| v == "passed"),
        "{short}"
    );
    assert_eq!(short["status"], "ok");
    assert!(!flag_kinds(short).contains(&"invalid-output".to_string()));
    assert_eq!(
        verdicts(long)
            .iter()
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>(),
        ["failed", "failed", "failed"],
        "{long}"
    );
    assert!(
        long["validity"]["canaries"][0]["answer"]
            .as_str()
            .unwrap()
            .starts_with("!!!!")
    );
    assert_eq!(long["status"], "degraded");
    let flag = long["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "invalid-output")
        .unwrap_or_else(|| panic!("{long}"));
    assert!(
        flag["message"]
            .as_str()
            .unwrap()
            .contains("start, middle, end"),
        "{flag}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid output"), "{}", show(&out));
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("The output was wrong at p002 (ctx=6000)"),
        "{report}"
    );
    assert!(report.contains("| **invalid** |"), "{report}");
}

#[test]
fn garbage_above_a_batch_size_fails_consistency_at_high_concurrency_only() {
    let ws = Workspace::new();
    let p = profile(&ws, "faults: { garbage_above_batch: 4 }");
    let spec = ws.write(
        "batch.yaml",
        &sim(
            "batch",
            &p,
            "workload:\n  prompt: { kind: repeat, tokens: 512 }\n  output_tokens: 32\nrequests: 16\nsweep:\n  concurrency: [1, 8]\nvalidity: { canaries: true, consistency: { requests: 1 } }",
        ),
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let points = read_jsonl(&run_dir(&out).join("points.jsonl"));
    let (one, eight) = (&points[0], &points[1]);
    // Canaries run alone, before the load: both points answer them.
    for p in [one, eight] {
        assert!(verdicts(p).iter().all(|(_, v)| v == "passed"), "{p}");
    }
    assert_eq!(one["validity"]["consistency"]["verdict"], "passed", "{one}");
    assert_eq!(one["status"], "ok");
    let c = &eight["validity"]["consistency"];
    assert_eq!(
        (c["verdict"].as_str(), c["differed"].as_u64()),
        (Some("failed"), Some(1)),
        "{c}"
    );
    assert!(c["differing"].as_str().unwrap().contains('!'), "{c}");
    assert!(!c["solo"].as_str().unwrap().contains('!'), "{c}");
    assert!(flag_kinds(eight).contains(&"invalid-output".to_string()));
    assert_eq!(eight["status"], "degraded");
}

#[test]
fn a_search_answer_leaves_out_probes_whose_output_is_invalid() {
    let ws = Workspace::new();
    let p = profile(&ws, "faults: { garbage_above_batch: 4 }");
    let body = "workload:\n  prompt: { kind: repeat, tokens: 256 }\n  output_tokens: 32\nrequests: 8\nslo: { targets: { e2e_p90: 30s } }\nsearch: { over: concurrency, start: 1, max: 16, resolution: 5% }\nvalidity: { consistency: { requests: 1 } }";
    let spec = ws.write("search.yaml", &sim("search", &p, body));
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let dir = run_dir(&out);
    let s = &read_json(&dir.join("search.json"))["searches"][0];
    // Concurrency 3 and the one consistency request make a batch of 4, the fault's limit.
    assert_eq!(
        (s["capacity"].as_f64(), s["above"].as_f64()),
        (Some(3.0), Some(4.0)),
        "{s}"
    );
    let points = read_jsonl(&dir.join("points.jsonl"));
    let failing = points
        .iter()
        .find(|p| p["search"]["value"].as_f64() == Some(4.0))
        .unwrap();
    assert_eq!(failing["search"]["passes"], false, "{failing}");
    assert!(
        failing["search"]["why"]
            .as_str()
            .unwrap_or_default()
            .contains("output is invalid"),
        "{failing}"
    );
    // The same search on a healthy profile reaches the top.
    let healthy = Workspace::new();
    let hp = profile(&healthy, "");
    let spec = healthy.write("search.yaml", &sim("search", &hp, body));
    let (dir, _) = healthy.run_ok(&spec);
    let s = &read_json(&dir.join("search.json"))["searches"][0];
    assert_eq!(s["capacity"].as_f64(), Some(16.0), "{s}");
}

#[test]
fn compare_leaves_an_invalid_point_out_of_its_verdicts() {
    let ws = Workspace::new();
    let body = "workload:\n  prompt: { kind: repeat, tokens: 4096 }\n  output_tokens: 8\nrequests: 3\nvalidity: { canaries: { positions: [middle] } }";
    let good = profile(&ws, "");
    let good_spec = ws.write("a.yaml", &sim("cmp", &good, body));
    let (a, _) = ws.run_ok(&good_spec);
    let bad = ws.write(
        "bad-profile.yaml",
        &std::fs::read_to_string(&good)
            .unwrap()
            .replace("seed: 0", "seed: 0\nfaults: { garbage_past_tokens: 2000 }"),
    );
    let bad_spec = ws.write("b.yaml", &sim("cmp", &bad, body));
    let out = ws.run(&bad_spec);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let b = run_dir(&out);
    let cmp = servebench()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(cmp.status.code(), Some(0), "{}", show(&cmp));
    let text = String::from_utf8_lossy(&cmp.stdout);
    assert!(
        text.contains("(1 not compared: failed or flagged)"),
        "{text}"
    );
    assert!(
        text.contains("**invalid-output**: canary at middle not answered"),
        "{text}"
    );
    assert!(text.contains("0 regressions, 0 improvements"), "{text}");
}
