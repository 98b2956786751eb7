//! The `agentx` preset (`load.agentic.preset: agentx`, AIPerf 0.13's `inferencex-agentx-mvp`
//! rules): `validate` refuses what contradicts it where it stands, and a run is judged rule by
//! rule, each measured value recomputed here from the records. A conforming point needs 900 s:
//! `measure::agentx`'s unit tests judge one, and the guide gives a 900 s run on the simulator.

use crate::common::*;

/// Sessions of four turns, 0.1 s apart, 8 output tokens each; with `over`, the last session's
/// third turn needs more than an 8,192-token context.
fn sessions(n: usize, over: bool) -> String {
    (0..n)
        .map(|s| {
            let turns: Vec<String> = (0..4)
                .map(|t| {
                    let tokens = if over && s == n - 1 && t == 2 {
                        9000
                    } else {
                        64 + 64 * t
                    };
                    format!(
                        "{{\"t\": {}, \"in\": {tokens}, \"out\": 8}}",
                        f64::from(t) * 0.1
                    )
                })
                .collect();
            format!(
                "{{\"id\": \"a{s}\", \"requests\": [{}]}}\n",
                turns.join(", ")
            )
        })
        .collect()
}

fn spec(agentic: &str, rest: &str) -> String {
    format!(
        "name: agentx\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 8192, max-running-requests: 8 }}\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 8\nload:\n  kind: agentic\n  agentic: {agentic}\n{rest}"
    )
}

/// The rules a point broke, by name.
fn broken(point: &serde_json::Value) -> Vec<&str> {
    point["agentx"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["met"] == false)
        .map(|r| r["rule"].as_str().unwrap())
        .collect()
}

fn measured<'a>(point: &'a serde_json::Value, rule: &str) -> &'a str {
    point["agentx"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == rule)
        .unwrap()["measured"]
        .as_str()
        .unwrap()
}

#[test]
fn validate_refuses_what_breaks_the_agentx_preset_where_it_stands() {
    let ws = Workspace::new();
    ws.write("s.jsonl", &sessions(2, false));
    let text = spec(
        "{ file: s.jsonl, live: 2, preset: agentx, think_scale: 0.5 }",
        "  # AgentX asks for the whole output\nstop: { duration: 60s }\ncache: { nonce: false }\n",
    )
    .replace(
        "output_tokens: 8\n",
        "output_tokens: 8\n  ignore_eos: false\n",
    );
    let path = ws.write("agentx.yaml", &text);
    let out = servebench().arg("validate").arg(&path).output().unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let said = show(&out);
    // Each at its line and column: the value that breaks the rule.
    let line_of = |needle: &str| 1 + text.lines().position(|l| l.contains(needle)).unwrap();
    for (line, what) in [
        (
            line_of("ignore_eos"),
            "`ignore_eos: false` breaks the `agentx` preset",
        ),
        (
            line_of("think_scale"),
            "`think_scale: 0.5` breaks the `agentx` preset",
        ),
        (
            line_of("duration"),
            "`stop.duration: 60s` breaks the `agentx` preset",
        ),
        (
            line_of("nonce"),
            "`cache.nonce: false` breaks the `agentx` preset",
        ),
    ] {
        assert!(said.contains(what), "{what}: {said}");
        assert!(
            said.contains(&format!("agentx.yaml:{line}:")),
            "line {line}: {said}"
        );
    }
    assert!(said.contains("at least 900 s"), "{said}");
    assert!(said.contains("preset_override: true"), "{said}");
    // The override lets the same spec through (a smoke run, never called conforming).
    let over = ws.write(
        "over.yaml",
        &text.replace("preset: agentx,", "preset: agentx, preset_override: true,"),
    );
    let out = servebench().arg("validate").arg(&over).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn a_short_run_under_the_override_breaks_only_the_duration_and_each_rule_is_measured() {
    let ws = Workspace::new();
    ws.write("s.jsonl", &sessions(3, false));
    let path = ws.write(
        "agentx.yaml",
        &spec(
            "{ file: s.jsonl, live: 2, preset: agentx, preset_override: true }",
            "stop: { duration: 3s }\n",
        ),
    );
    let out = ws.run(&path);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let p = &points[0];
    let v = &p["agentx"];
    assert_eq!(v["scenario"], "inferencex-agentx-mvp", "{v}");
    assert_eq!(
        (v["conforms"].as_bool(), v["overridden"].as_bool()),
        (Some(false), Some(true)),
        "{v}"
    );
    assert_eq!(broken(p), ["duration"], "{v}");
    // The trace (3 sessions of ~0.4 s) was replayed again and again until the duration.
    let jobs = &p["jobs"];
    assert!(jobs["started"].as_u64().unwrap() > 6, "{jobs}");
    assert!(
        measured(p, "duration").contains("(`stop.duration` 3 s)"),
        "{v}"
    );
    assert_eq!(jobs["reached_duration"], true, "{jobs}");
    // Each measured value, from the records.
    let turns: Vec<&serde_json::Value> = Vec::leak(read_jsonl(&dir.join("requests.jsonl")))
        .iter()
        .filter(|r| r["job"].is_object())
        .collect();
    let ok: Vec<_> = turns.iter().filter(|r| r["error"].is_null()).collect();
    let streamed = ok
        .iter()
        .filter(|r| {
            r["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["tokens"].as_u64() > Some(0))
        })
        .count();
    assert_eq!(jobs["turns_sent"].as_u64(), Some(turns.len() as u64));
    assert_eq!(
        measured(p, "streaming"),
        format!(
            "{streamed} of {} successful turns streamed their first token",
            ok.len()
        )
    );
    assert_eq!(streamed, ok.len());
    assert_eq!(
        measured(p, "context-overflow"),
        format!("0 of {} turns (0.00%)", turns.len())
    );
    // The longest stretch with no turn in flight, from the records' send and end times:
    // the runner's clock brackets each send, so it is within a few ms of them.
    let mut spans: Vec<(f64, f64)> = turns
        .iter()
        .map(|r| {
            let s = r["sent_at"].as_f64().unwrap();
            (s, s + r["end_s"].as_f64().unwrap())
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut end, mut longest) = (spans[0].1, 0.0f64);
    for (s, e) in &spans[1..] {
        longest = longest.max(s - end);
        end = end.max(*e);
    }
    let clock = jobs["longest_idle_s"].as_f64().unwrap();
    assert!(
        (clock - longest).abs() < 0.05,
        "runner {clock} s, records {longest} s"
    );
    // The gaps are the trace's 0.1 s: never 10 s idle.
    assert!(clock < 1.0, "{clock}");
    // Said on the console and in the report, never as conforming.
    let said = show(&out);
    assert!(
        said.contains("AgentX: does not conform (`preset_override`)"),
        "{said}"
    );
    assert!(said.contains("✗ AgentX duration:"), "{said}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## AgentX conformance"), "{report}");
    assert!(
        report.contains("**does not conform**: duration not met"),
        "{report}"
    );
    assert!(
        !report.contains("conforms to every AgentX rule"),
        "{report}"
    );
}

#[test]
fn a_run_that_skips_a_turn_and_scales_the_trace_s_time_names_each_rule_it_broke() {
    let ws = Workspace::new();
    ws.write("s.jsonl", &sessions(2, true));
    let path = ws.write(
        "agentx.yaml",
        &spec(
            "{ file: s.jsonl, live: 2, sessions: 2, think_scale: 0, preset: agentx, preset_override: true }",
            "stop: { duration: 20s }\n",
        ),
    );
    let (_dir, points) = ws.run_ok(&path);
    let p = &points[0];
    // Two sessions and no more (`sessions: 2`): they ran out long before the duration.
    assert_eq!(p["jobs"]["started"], 2, "{}", p["jobs"]);
    assert!(p["jobs"]["reached_duration"].is_null(), "{}", p["jobs"]);
    assert_eq!(
        broken(p),
        ["duration", "trace-delays", "no-truncation"],
        "{}",
        p["agentx"]
    );
    assert!(
        measured(p, "duration").contains("every session ended before the duration (2 started)"),
        "{}",
        p["agentx"]
    );
    assert_eq!(measured(p, "trace-delays"), "`think_scale: 0`");
    assert_eq!(
        measured(p, "no-truncation"),
        "1 session stopped at a turn past the server's context, not sent"
    );
    assert_eq!(p["agentx"]["conforms"], false);
}
