//! Agents at the SLO (`slo.agent`): a capacity search over live agent sessions on a
//! simulator whose capacity is known (two requests run at once: a third live agent waits a
//! whole turn for a slot), each session's verdict recomputed from its turns' records.

use std::collections::BTreeMap;

use crate::common::*;

/// Six agents of five turns, each turn 400 output tokens, no thinking time: a turn holds its
/// slot for ~0.5 s of decode on the `fast` profile (1.2 ms a step).
fn sessions() -> String {
    (0..6)
        .map(|s| {
            let turns: Vec<String> = (0..5)
                .map(|t| format!("{{\"t\": {t}, \"in\": 64, \"out\": 400}}"))
                .collect();
            format!(
                "{{\"id\": \"a{s}\", \"requests\": [{}]}}\n",
                turns.join(", ")
            )
        })
        .collect()
}

#[test]
fn the_most_agents_at_the_slo_is_the_servers_slots_and_each_verdict_follows_its_turns() {
    let ws = Workspace::new();
    ws.write("agents.jsonl", &sessions());
    let spec = ws.write(
        "agents.yaml",
        "name: agents\nserver:\n  engine: sim\n  model: test-model\n  args: { profile: fast, context-length: 8192, max-running-requests: 2 }\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: { kind: random, tokens: 64 }\n  output_tokens: 400\nload:\n  kind: agentic\n  agentic: { file: agents.jsonl, live: 1, think_scale: 0 }\nslo:\n  agent: { ttft: 150ms, percentile: 90, output_tok_s: 50 }\nsearch: { over: load.agentic.live, start: 1, max: 4 }\nexpect:\n  - { metric: agents_at_slo, value: 2, tolerance: 0 }\n",
    );
    let (dir, points) = ws.run_ok(&spec);
    // Two slots: at 1 and 2 live no turn waits; at 3 one always waits a turn (~0.5 s).
    let s = &read_json(&dir.join("search.json"))["searches"][0];
    assert_eq!(
        (s["capacity"].as_f64(), s["above"].as_f64()),
        (Some(2.0), Some(3.0)),
        "{s}"
    );
    let a = &s["agents"];
    assert_eq!(a["agents_at_slo"], 2.0, "{a}");
    // The simulator reports no power: per megawatt is absent, and says why.
    assert!(a["agents_at_slo_per_mw"].is_null(), "{a}");
    assert!(
        a["power_source"]
            .as_str()
            .unwrap()
            .starts_with("not measured"),
        "{a}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("**2 agents at the SLO**"), "{report}");
    assert!(report.contains("per MW: not measured"), "{report}");
    assert!(report.contains("agents meeting their SLO |"), "{report}");
    // `expect:` takes the answer, judged on the probe that set it.
    let out = servebench().arg("check").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(show(&out).contains("agents_at_slo"), "{}", show(&out));
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    for p in &points {
        let live = p["search"]["value"].as_f64().unwrap();
        let jobs = &p["jobs"];
        let passes = p["search"]["passes"].as_bool().unwrap();
        assert_eq!(passes, live <= 2.0, "live {live}: {}", p["search"]);
        // Each agent's verdict, recomputed from its turns: the nearest-rank p90 of its TTFT
        // from the turn's due time, and its output over its generating seconds.
        let mine: Vec<&serde_json::Value> = requests
            .iter()
            .filter(|r| r["point"] == p["id"] && r["job"].is_object())
            .collect();
        let mut by: BTreeMap<u64, (Vec<f64>, u64, f64)> = BTreeMap::new();
        for r in &mine {
            let e = by.entry(r["job"]["session"].as_u64().unwrap()).or_default();
            let lag = r["lag_s"].as_f64().unwrap_or(0.0);
            let first = r["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["tokens"].as_u64() > Some(0))
                .unwrap()["t_s"]
                .as_f64()
                .unwrap();
            e.0.push(first + lag);
            e.1 += r["completion_tokens"].as_u64().unwrap();
            e.2 += r["end_s"].as_f64().unwrap() - first;
        }
        let mut met = 0;
        for s in jobs["sessions"].as_array().unwrap() {
            let (ttft, tokens, gen_s) = &by[&s["session"].as_u64().unwrap()];
            let mut sorted = ttft.clone();
            sorted.sort_by(f64::total_cmp);
            let p90 = sorted[(0.9 * sorted.len() as f64).ceil() as usize - 1];
            let v = &s["slo"];
            assert!((v["latency_s"].as_f64().unwrap() - p90).abs() < 1e-9, "{v}");
            let speed = *tokens as f64 / gen_s;
            assert!((v["output_tok_s"].as_f64().unwrap() - speed).abs() < 1e-6 * speed);
            let ok = p90 <= 0.150 && speed >= 50.0;
            assert_eq!(v["met"].as_bool(), Some(ok), "{v}");
            met += usize::from(ok);
        }
        // A count of 0 is left out of the record.
        assert_eq!(
            jobs["agents_met"].as_u64().unwrap_or(0),
            met as u64,
            "{jobs}"
        );
        assert_eq!(jobs["agents_judged"], 6, "{jobs}");
        let share = p["metrics"]["agents_slo_share"]["mean"].as_f64().unwrap();
        assert!((share - met as f64 / 6.0).abs() < 1e-12);
    }
}
