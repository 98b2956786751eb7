//! Agent sessions' roll-ups: each session's duration (first send to last end, however it
//! ended), its successful turns' tokens, and the sessions the point's end cut short, in
//! points.jsonl, sessions.csv and the report, recomputed here from requests.jsonl.

use std::collections::BTreeMap;

use crate::common::*;

#[test]
fn session_durations_tokens_and_truncation_are_recomputed_from_the_records() {
    let ws = Workspace::new();
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/data");
    let spec = ws.write(
        "rollups.yaml",
        &format!(
            "name: rollups\nserver:\n  engine: sim\n  model: demo-model\n  args: {{ profile: fast, context-length: 4096 }}\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 32\nload:\n  kind: agentic\n  agentic: {{ file: {}/agentic-sessions.jsonl, live: 4, think_scale: 0.25 }}\nstop: {{ duration: 2s }}\n",
            data.display()
        ),
    );
    let out = ws.run(&spec);
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let jobs = &points[0]["jobs"];
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    // Per session from its turns: first send, last end, successful turns' tokens.
    let mut by: BTreeMap<u64, (f64, f64, u64, u64, u64)> = BTreeMap::new();
    for r in requests.iter().filter(|r| r["job"].is_object()) {
        let e = by.entry(r["job"]["session"].as_u64().unwrap()).or_insert((
            f64::INFINITY,
            0.0,
            0,
            0,
            0,
        ));
        let sent = r["sent_at"].as_f64().unwrap();
        e.0 = e.0.min(sent);
        e.1 = e.1.max(sent + r["end_s"].as_f64().unwrap_or(0.0));
        if r["error"].is_null() {
            e.2 += r["prompt_tokens"].as_u64().unwrap_or(0);
            e.3 += r["completion_tokens"].as_u64().unwrap_or(0);
            e.4 += r["cached_tokens"].as_u64().unwrap_or(0);
        }
    }
    let sessions = jobs["sessions"].as_array().unwrap();
    assert!(sessions.len() >= 4, "{jobs}");
    let mut truncated = 0;
    for s in sessions {
        let n = s["session"].as_u64().unwrap();
        match by.get(&n) {
            Some((first, last, prompt, completion, cached)) => {
                let d = s["duration_s"].as_f64().unwrap();
                assert!((d - (last - first)).abs() < 1e-6, "{s}");
                assert_eq!(s["prompt_tokens"].as_u64(), Some(*prompt), "{s}");
                assert_eq!(s["completion_tokens"].as_u64(), Some(*completion), "{s}");
                assert_eq!(s["cached_tokens"].as_u64(), Some(*cached), "{s}");
                assert!(*completion > 0, "{s}");
            }
            None => assert!(s["duration_s"].is_null(), "{s}"),
        }
        if let Some(r) = s["stopped"].as_str()
            && (r.starts_with("`stop.duration` ended the point") || r.starts_with("interrupted"))
        {
            truncated += 1;
        }
    }
    // Two seconds end sessions that take longer: some are cut short, and said so.
    assert!(truncated > 0, "{jobs}");
    assert_eq!(jobs["truncated"], truncated, "{jobs}");
    // One row per session in sessions.csv, its figures the point's (times in ms).
    let mut csv = csv::Reader::from_path(dir.join("sessions.csv")).unwrap();
    let header = csv.headers().unwrap().clone();
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), sessions.len());
    for (row, s) in rows.iter().zip(sessions) {
        assert_eq!(row[col("session")], s["session"].to_string());
        assert_eq!(
            row[col("completion_tokens")],
            s["completion_tokens"].to_string()
        );
        assert_eq!(
            row[col("truncated")] == *"true",
            s["stopped"]
                .as_str()
                .is_some_and(|r| r.starts_with("`stop.duration`") || r.starts_with("interrupted"))
        );
        if let Some(d) = s["duration_s"].as_f64() {
            let ms: f64 = row[col("duration_ms")].parse().unwrap();
            assert!((ms - d * 1000.0).abs() < 1e-6, "{row:?}");
        }
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("| truncated | jobs/h |"), "{report}");
    assert!(
        report.contains("**Truncated** are the stopped sessions"),
        "{report}"
    );
}
