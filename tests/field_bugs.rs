//! The field's three replay bugs, each made on the simulator and named by its flag with its
//! cause (issue 44): a replay that does not re-send its history exactly (AIPerf's
//! reconstruction, found by InferenceX), a client that cannot hold the concurrency asked
//! (inference-perf #648), a server that caches nothing re-sent (vllm #42948). A healthy
//! replay gets none of the three.

use crate::common::{Workspace, read_jsonl, servebench, show, validity_flags};

const FIELD_FLAGS: [&str; 3] = ["history-diverged", "no-prefix-hits", "client-limited"];

/// Two agent sessions of six main turns, each turn its previous turn's blocks and eight new
/// blocks of 16 tokens (its new message: 128 tokens), output 4 tokens.
fn sessions(ws: &Workspace) -> std::path::PathBuf {
    let mut lines = String::new();
    for s in 0..2 {
        let turns: Vec<String> = (1..=6u64)
            .map(|k| {
                let ids: Vec<String> = (1..=8 * k).map(|i| i.to_string()).collect();
                format!(
                    r#"{{"t": {k}, "type": "n", "in": {}, "out": 4, "hash_ids": [{}]}}"#,
                    128 * k,
                    ids.join(", ")
                )
            })
            .collect();
        lines.push_str(&format!(
            "{{\"id\": \"s{s}\", \"block_size\": 16, \"requests\": [{}]}}\n",
            turns.join(", ")
        ));
    }
    ws.write("sessions.jsonl", &lines)
}

/// An agentic replay of [`sessions`] on a fresh simulator whose pool never evicts; `args`
/// go to the simulator, `facts` is the spec's `server.model_facts` (or nothing).
fn agentic_spec(ws: &Workspace, args: &str, facts: &str) -> std::path::PathBuf {
    let file = sessions(ws);
    ws.write(
        "agentic.yaml",
        &format!(
            "name: field\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 8192, max-total-tokens: 400000{args} }}\n{facts}  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 4\nload:\n  kind: agentic\n  agentic: {{ file: {}, live: 2, think_scale: 0 }}\ncache: {{ policy: cold, verify: true }}\n",
            file.display()
        ),
    )
}

/// `servebench run` with `env` set (the client's test-only faults).
fn run_env(
    ws: &Workspace,
    spec: &std::path::Path,
    env: &[(&str, &str)],
) -> (std::path::PathBuf, serde_json::Value) {
    let _turn = crate::common::exclusive();
    let mut cmd = servebench();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .expect("run servebench");
    assert!(out.status.success(), "{}", show(&out));
    let dir = crate::common::run_dir(&out);
    let mut points = read_jsonl(&dir.join("points.jsonl"));
    (dir, points.remove(0))
}

fn flag<'a>(p: &'a serde_json::Value, kind: &str) -> Option<&'a str> {
    p["flags"]
        .as_array()?
        .iter()
        .find(|f| f["kind"] == kind)
        .and_then(|f| f["message"].as_str())
}

fn kinds(p: &serde_json::Value) -> Vec<&str> {
    validity_flags(p)
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect()
}

#[test]
fn a_healthy_replay_gets_none_of_the_three_field_flags() {
    let ws = Workspace::new();
    let (dir, p) = run_env(&ws, &agentic_spec(&ws, "", ""), &[]);
    let kinds = kinds(&p);
    for f in FIELD_FLAGS {
        assert!(!kinds.contains(&f), "{f} on a healthy replay: {kinds:?}");
    }
    // Every turn after a session's first re-sent its whole history, and found it.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(requests.len(), 12);
    for r in &requests {
        let j = &r["job"];
        if j["history_tokens"].is_null() {
            continue;
        }
        assert_eq!(j["history_tokens"], j["history_sent_tokens"], "{r}");
        assert_eq!(
            j["history_tokens"].as_u64(),
            Some(j["context_tokens"].as_u64().unwrap() - 128)
        );
    }
    assert_eq!(
        requests
            .iter()
            .filter(|r| r["job"]["history_tokens"].is_u64())
            .count(),
        10
    );
    let t = &p["trace_cache"];
    assert_eq!(t["below"].as_u64(), Some(0), "{t}");

    // A closed loop at concurrency 4 holds 4 in flight.
    let spec = ws.write(
        "closed.yaml",
        &crate::common::sim_spec(
            "closed",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 32",
            "concurrency: 4\nrequests: 16\n",
        ),
    );
    let (_, p) = run_env(&ws, &spec, &[]);
    let kinds = self::kinds(&p);
    assert!(!kinds.contains(&"client-limited"), "{kinds:?}");
}

/// AIPerf's fault: each turn re-sent with the previous turn's new message trimmed (its
/// second half cut). The client's check compares the bytes it sent; the simulator's radix
/// cache, which matches the tokens it was sent, finds the hits fall on its own.
#[test]
fn a_replay_that_trims_its_history_is_flagged_at_the_first_turn_it_diverged() {
    let ws = Workspace::new();
    let (dir, p) = run_env(
        &ws,
        &agentic_spec(&ws, "", ""),
        &[("SERVEBENCH_TEST_TRIM_HISTORY", "1")],
    );
    let message = flag(&p, "history-diverged").unwrap_or_else(|| panic!("{:?}", kinds(&p)));
    // Every turn after a session's first diverged, in both sessions.
    assert!(message.starts_with("10 of 10 turns"), "{message}");
    assert!(
        message.contains("(2 of the point's agent chains)"),
        "{message}"
    );
    assert!(!kinds(&p).contains(&"no-prefix-hits"), "{:?}", kinds(&p));
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let mut below = 0;
    let mut first: Option<&serde_json::Value> = None;
    for r in &requests {
        let j = &r["job"];
        let (Some(history), Some(sent)) = (
            j["history_tokens"].as_u64(),
            j["history_sent_tokens"].as_u64(),
        ) else {
            continue;
        };
        // Turn 1 re-sent turn 0's message cut: it diverged inside that message. Later
        // turns re-send the message before the previous one whole, which the previous
        // turn had cut: they diverge inside that one, a message and a half back.
        let from = history.saturating_sub(256);
        assert!(sent >= from && sent < from + 128, "{r}");
        if first.is_none_or(|f| r["sent_at"].as_f64() < f["sent_at"].as_f64()) {
            first = Some(r);
        }
        let (cached, theoretical) = (
            r["cached_tokens"].as_u64().unwrap(),
            r["theoretical_cached_tokens"].as_u64().unwrap(),
        );
        below += usize::from(cached + 64 < theoretical);
        // From the fourth turn on the server's hits fall over a message short of the
        // theoretical one, turn after turn (the best any earlier prompt matches: the
        // previous turn's, a message and a half back; turn 2 finds turn 0's whole).
        if history >= 384 {
            assert!(
                cached + 128 < theoretical,
                "{cached} against {theoretical}: {r}"
            );
        }
    }
    assert_eq!(
        p["trace_cache"]["below"].as_u64(),
        Some(below as u64),
        "{}",
        p["trace_cache"]
    );
    assert!(below >= 8, "{below}");
    // The first turn that diverged, by its send, is the one named.
    let j = &first.unwrap()["job"];
    let named = format!(
        "session {}, turn {}, began with {} of the {} tokens",
        j["session"], j["turn"], j["history_sent_tokens"], j["history_tokens"]
    );
    assert!(message.contains(&named), "{named}: {message}");
}

/// vllm #42948's server: the prefix cache on and reporting, finding nothing. Named as the
/// server's (the prompts re-sent their history exactly), with the model's attention layers.
#[test]
fn a_server_that_caches_nothing_re_sent_is_named_with_its_attention_layout() {
    let ws = Workspace::new();
    let facts = "  model_facts: { model_type: gemma2, hidden_size: 64, num_hidden_layers: 4, num_attention_heads: 4, num_key_value_heads: 4, head_dim: 16, vocab_size: 1000, intermediate_size: 128, sliding_window: 128, layer_types: [sliding_attention, full_attention, sliding_attention, full_attention] }\n";
    let (_, p) = run_env(
        &ws,
        &agentic_spec(&ws, ", sim-no-prefix-hits: true", facts),
        &[],
    );
    let message = flag(&p, "no-prefix-hits").unwrap_or_else(|| panic!("{:?}", kinds(&p)));
    assert!(message.contains("10 requests re-sent blocks"), "{message}");
    assert!(message.contains("and found 0 (0.0%"), "{message}");
    assert!(
        message.contains("The server's prefix cache, not the replay"),
        "{message}"
    );
    assert!(
        message.contains(
            "The model's attention: 2 sliding-window (128 tokens) and 2 full-attention layers"
        ),
        "{message}"
    );
    assert!(!kinds(&p).contains(&"history-diverged"), "{:?}", kinds(&p));
}

/// inference-perf #648's client: at most 2 requests in flight, whatever is asked. The flag
/// names the concurrency asked and what the records show was held.
#[test]
fn a_client_that_cannot_hold_the_concurrency_asked_is_client_limited() {
    let ws = Workspace::new();
    let spec = ws.write(
        "closed.yaml",
        &crate::common::sim_spec(
            "closed",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 32",
            "concurrency: 8\nrequests: 24\n",
        ),
    );
    let (dir, p) = run_env(&ws, &spec, &[("SERVEBENCH_TEST_MAX_IN_FLIGHT", "2")]);
    let message = flag(&p, "client-limited").unwrap_or_else(|| panic!("{:?}", kinds(&p)));
    assert!(
        message.contains("8 requests in flight asked, at most 2 achieved"),
        "{message}"
    );
    // Recomputed from the records: never more than 2 in flight.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let mut events: Vec<(f64, i32)> = Vec::new();
    for r in &requests {
        let sent = r["sent_at"].as_f64().unwrap();
        events.push((sent, 1));
        events.push((sent + r["end_s"].as_f64().unwrap(), -1));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0, 0);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    assert_eq!(most, 2);
}

/// The same client under agent sessions: four live sessions whose turns follow each other at
/// once (`think_scale: 0.001`), through a client that holds one request in flight. Each turn
/// then waits for the other sessions' turns before it goes out: late against the trace's
/// timing, which the records' `due_at` shows and the flag names with the live sessions asked.
#[test]
fn agent_turns_a_client_sends_late_are_client_limited() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("experiments/data/agentic-sessions.jsonl");
    let ws = Workspace::new();
    let spec = ws.write(
        "late.yaml",
        &format!(
            "name: late\nserver:\n  engine: sim\n  model: demo-model\n  args: {{ profile: fast, context-length: 4096 }}\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 32\nload:\n  kind: agentic\n  agentic: {{ file: {}, live: 4, sessions: 8, think_scale: 0.001 }}\n",
            trace.display()
        ),
    );
    let (dir, p) = run_env(&ws, &spec, &[("SERVEBENCH_TEST_MAX_IN_FLIGHT", "1")]);
    let message = flag(&p, "client-limited").unwrap_or_else(|| panic!("{:?}", kinds(&p)));
    assert!(message.contains("at 4 live sessions asked"), "{message}");
    // Recomputed from the records: the turns said late are those sent 50 ms past due.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let late: Vec<f64> = requests
        .iter()
        .filter_map(|r| Some(r["sent_at"].as_f64()? - r["job"]["due_at"].as_f64()?))
        .collect();
    assert!(!late.is_empty());
    let over = late.iter().filter(|&&l| l > 0.050).count();
    assert!(over * 100 > late.len(), "{late:?}");
    assert!(
        message.contains(&format!(
            "{over} of {} turns went out more than 50 ms",
            late.len()
        )),
        "{message}"
    );
}

/// Without the fault the same sessions keep their timing: no turn is said late.
#[test]
fn agent_turns_sent_on_time_are_not_client_limited() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("experiments/data/agentic-sessions.jsonl");
    let ws = Workspace::new();
    let spec = ws.write(
        "on-time.yaml",
        &format!(
            "name: on-time\nserver:\n  engine: sim\n  model: demo-model\n  args: {{ profile: fast, context-length: 4096 }}\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 32\nload:\n  kind: agentic\n  agentic: {{ file: {}, live: 4, sessions: 8, think_scale: 0.05 }}\n",
            trace.display()
        ),
    );
    let (dir, p) = run_env(&ws, &spec, &[]);
    assert!(!kinds(&p).contains(&"client-limited"), "{:?}", kinds(&p));
    let turns: Vec<serde_json::Value> = read_jsonl(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["job"].is_object())
        .collect();
    assert!(!turns.is_empty());
    assert!(turns.iter().all(|r| r["job"]["due_at"].is_number()));
}
