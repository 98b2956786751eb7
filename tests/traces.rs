//! Traces replayed with the sharing they record: Mooncake's `hash_ids` made into prompts
//! whose real cache hits match the blocks' promise (and are not taken for contamination),
//! and agent sessions from a session trace (`experiments/agentic-replay.yaml`, shipped with
//! its generated trace) on the simulator: turns, subagents, a session stopped at the server's
//! context with its reason, jobs per hour and TTFT against context.

use crate::common::*;

/// The repository's `experiments` folder.
fn experiments() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")
}

/// An example spec from `experiments/`, written to `ws` on the fast profile with `edits`
/// (from, to) applied and its data file's path made absolute.
fn example(ws: &Workspace, file: &str, edits: &[(&str, &str)]) -> std::path::PathBuf {
    let mut text = std::fs::read_to_string(experiments().join(file)).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{file}: no `{from}`");
        text = text.replacen(from, to, 1);
    }
    let data = format!("file: {}/data/", experiments().display());
    let text = text
        .replace("file: data/", &data)
        .replace("profile: h100-llama8b", "profile: fast");
    ws.write(file, &text)
}

#[test]
fn a_mooncake_trace_shares_what_its_hash_ids_say_and_real_hits_are_not_contamination() {
    let ws = Workspace::new();
    let spec = example(&ws, "mooncake-trace.yaml", &[]);
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    let kinds: Vec<&str> = validity_flags(p)
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(
        !kinds.iter().any(|k| k.contains("cache")),
        "real hits flagged: {kinds:?}"
    );
    assert_eq!(p["ok"], 60);
    let t = &p["trace_cache"];
    let (theory, cached, prompt) = (
        t["theoretical_cached_tokens"].as_f64().unwrap(),
        t["cached_tokens"].as_f64().unwrap(),
        t["prompt_tokens"].as_f64().unwrap(),
    );
    // The trace's conversations share most of their prompts, and the simulator's radix cache
    // (which never evicts at this size) finds what the blocks promise, within a few tokens a
    // request (the block joins). A request sent while the one holding its blocks is still in
    // prefill finds less (a busy test machine stretches prefills): a few may.
    assert!(theory > 0.5 * prompt, "{t}");
    assert!((cached - theory).abs() < 0.05 * theory, "{t}");
    assert_eq!(t["above"], 0, "{t}");
    assert!(t["below"].as_u64() <= Some(5), "{t}");
    // Each request says what it could find beside what it found.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let first = &requests[0];
    assert_eq!(
        first["theoretical_cached_tokens"], 0,
        "nothing sent before it"
    );
    assert!(
        requests
            .iter()
            .any(|r| r["theoretical_cached_tokens"].as_u64() > Some(1000))
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("## Trace blocks in the prefix cache"),
        "{report}"
    );

    // A second run of the same spec shares nothing with the first (its blocks are salted):
    // as-is, nothing is flushed, and still no request finds more than its own round sent.
    let as_is = example(
        &ws,
        "mooncake-trace.yaml",
        &[(
            "cache: { policy: cold, verify: true }",
            "cache: { policy: as-is, verify: true }",
        )],
    );
    let (_, again) = ws.run_ok(&as_is);
    assert_eq!(
        again[0]["trace_cache"]["above"], 0,
        "{}",
        again[0]["trace_cache"]
    );
}

#[test]
fn agent_sessions_replay_their_turns_subagents_and_stop_at_the_servers_context() {
    let ws = Workspace::new();
    let spec = example(
        &ws,
        "agentic-replay.yaml",
        &[
            ("think_scale: 0.25", "think_scale: 0.02"),
            ("  load.agentic.live: [2, 6]", "  load.agentic.live: [4]"),
        ],
    );
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    let jobs = &p["jobs"];
    assert_eq!(
        (jobs["live"].as_u64(), jobs["started"].as_u64()),
        (Some(4), Some(12))
    );
    assert_eq!(
        (jobs["completed"].as_u64(), jobs["stopped"].as_u64()),
        (Some(11), Some(1))
    );
    let sessions = jobs["sessions"].as_array().unwrap();
    let s11 = sessions.iter().find(|s| s["trace_id"] == "s11").unwrap();
    let why = s11["stopped"].as_str().unwrap();
    assert!(why.starts_with("past the server's context: turn "), "{why}");
    assert!(s11["sent"].as_u64() < s11["turns"].as_u64());
    // Every completed session sent each of its turns (subagents' included).
    for s in sessions.iter().filter(|s| s["stopped"].is_null()) {
        assert_eq!(s["sent"], s["turns"], "{s}");
        assert!(s["completion_s"].as_f64().unwrap() > 0.0);
    }
    let live_mean = jobs["live_mean"].as_f64().unwrap();
    assert!(live_mean > 1.0 && live_mean <= 4.0, "{jobs}");
    let window = jobs["window_s"].as_f64().unwrap();
    let per_hour = jobs["jobs_per_hour"].as_f64().unwrap();
    assert!((per_hour - 11.0 * 3600.0 / window).abs() < 1e-6 * per_hour);
    // Turns: the main agents' and the subagents', each with its context and its promise.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let sent: u64 = sessions.iter().map(|s| s["sent"].as_u64().unwrap()).sum();
    assert_eq!(requests.len() as u64, sent);
    assert!(
        requests.iter().any(|r| r["job"]["agent"].is_string()),
        "subagent turns"
    );
    let turns = jobs["ttft_by_context"].as_array().unwrap();
    let banded: u64 = turns.iter().map(|b| b["turns"].as_u64().unwrap()).sum();
    assert_eq!(banded, sent);
    // A session's later turns find its history cached, as the blocks promise; no hit is
    // taken for contamination.
    let t = &p["trace_cache"];
    assert!(
        t["theoretical_cached_tokens"].as_f64() > Some(0.5 * t["prompt_tokens"].as_f64().unwrap())
    );
    assert_eq!(t["above"], 0, "{t}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Agent sessions"), "{report}");
    assert!(report.contains("TTFT against context"), "{report}");
    assert!(report.contains("1 past the server's context"), "{report}");
}

#[test]
fn unusable_trace_blocks_are_refused_at_validate_with_the_traces_line() {
    let ws = Workspace::new();
    ws.write(
        "t.jsonl",
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [1, 2]}\n{\"timestamp\": 10, \"input_length\": 600, \"output_length\": 4}\n",
    );
    let spec = ws.write(
        "t.yaml",
        &sim_spec(
            "t",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 4",
            "load:\n  kind: trace\n  trace: { file: t.jsonl, hash_ids: required }\n",
        ),
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    let text = show(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("t.jsonl:2:1: the line has no `hash_ids`"),
        "{text}"
    );
    assert!(text.contains("load.trace.hash_ids: auto"), "{text}");
    // A block size of 0 is refused by the spec's own bounds.
    let zero = ws.write(
        "z.yaml",
        &sim_spec(
            "z",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 4",
            "load:\n  kind: trace\n  trace: { file: t.jsonl, block_size: 0 }\n",
        ),
    );
    let out = servebench().arg("validate").arg(&zero).output().unwrap();
    let text = show(&out);
    assert!(
        !out.status.success() && text.contains("block_size"),
        "{text}"
    );
    // A session whose blocks do not fit its turn's length names its line and the fix.
    ws.write(
        "s.jsonl",
        "{\"id\": \"a\", \"block_size\": 64, \"requests\": [{\"t\": 0, \"in\": 700, \"out\": 4, \"hash_ids\": [1, 2]}]}\n",
    );
    let agentic = ws.write(
        "a.yaml",
        &sim_spec(
            "a",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 4",
            "load:\n  kind: agentic\n  agentic: { file: s.jsonl, live: 2 }\n",
        ),
    );
    let out = servebench().arg("validate").arg(&agentic).output().unwrap();
    let text = show(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(
            "s.jsonl:1:1: session a, requests[0]: 2 hash_ids of 64 tokens do not fit `in` 700"
        ),
        "{text}"
    );
    assert!(text.contains("load.agentic.block_size"), "{text}");
    // A negative time is refused where it stands, with the fix, not waited as an hour.
    ws.write(
        "s.jsonl",
        r#"{"id": "a", "requests": [{"t": 0, "in": 7, "out": 4}, {"t": 1, "type": "subagent", "duration_ms": -2000, "requests": [{"in": 5, "out": 1}]}]}"#,
    );
    let out = servebench().arg("validate").arg(&agentic).output().unwrap();
    let text = show(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("s.jsonl:1:103: `duration_ms` is -2000: it cannot be negative"),
        "{text}"
    );
    assert!(text.contains("correct the field"), "{text}");
}

/// A capacity search moves the live sessions: each probe replays the sessions at its value,
/// judged by the SLO targets (loose here, so the search runs to its top or to saturation).
#[test]
fn a_capacity_search_moves_the_live_sessions() {
    let ws = Workspace::new();
    let spec = example(
        &ws,
        "agentic-replay.yaml",
        &[
            ("think_scale: 0.25", "think_scale: 0"),
            ("targets: { ttft_p90: 200ms }", "targets: { ttft_p90: 10s }"),
            (
                "sweep:\n  load.agentic.live: [2, 6]",
                "search: { over: load.agentic.live, start: 1, max: 4, resolution: 50% }",
            ),
        ],
    );
    let (dir, points) = ws.run_ok(&spec);
    let s = &read_json(&dir.join("search.json"))["searches"][0];
    assert_eq!(s["over"], "load.agentic.live", "{s}");
    assert!(points.len() >= 2, "{} probes", points.len());
    for p in &points {
        let value = p["search"]["value"].as_f64().unwrap();
        assert_eq!(p["jobs"]["live"].as_f64(), Some(value), "{p}");
        assert_eq!(p["jobs"]["started"], 12);
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains(" live sessions, "), "{report}");
}

/// The published kv-cache-tester sessions of `tests/fixtures/kv-cache-tester` (Apache-2.0,
/// copied unchanged; see its NOTICE).
fn published_sessions() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kv-cache-tester/traces")
}

/// A spec replaying `file` on a fresh simulator whose pool never evicts (far more tokens than
/// the sessions hold) and whose context holds their longest turn.
fn corpus_spec(ws: &Workspace, file: &std::path::Path, agentic: &str) -> std::path::PathBuf {
    ws.write(
        "corpus.yaml",
        &format!(
            "name: corpus\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 262144, max-total-tokens: 4000000 }}\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 4\nload:\n  kind: agentic\n  agentic: {{ file: {}, {agentic} }}\ncache: {{ policy: cold, verify: true }}\n",
            file.display()
        ),
    )
}

#[test]
fn the_published_kv_cache_tester_sessions_validate_and_replay_as_published() {
    let ws = Workspace::new();
    // The folder as published: one session a file, whole 64-token blocks hashed.
    let spec = corpus_spec(&ws, &published_sessions(), "live: 4, think_scale: 0");
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    let jobs = &p["jobs"];
    assert_eq!(
        (jobs["started"].as_u64(), jobs["completed"].as_u64()),
        (Some(4), Some(4)),
        "{jobs}"
    );
    // 53 + 32 + 3 + 5 requests, the subagents' included, each sent once.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(requests.len(), 93);
    assert_eq!(
        requests
            .iter()
            .filter(|r| r["job"]["agent"].is_string())
            .count(),
        4 + 12 + 17 + 11 + 5 + 7,
        "subagent turns"
    );
    for r in &requests {
        assert!(r["error"].is_null(), "{r}");
    }
    // One unit: the simulator counts tokens, so each block is made exact in its count (a
    // line break and one-token words): every prompt is its `in`, and every hit its
    // theoretical one and the next block's line break, judged within a block (64 tokens).
    let t = &p["trace_cache"];
    assert_eq!(
        (t["above"].as_u64(), t["tolerance_tokens"].as_u64()),
        (Some(0), Some(64)),
        "{t}"
    );
    assert_eq!(t["prompt_tokens"], t["requested_prompt_tokens"], "{t}");
    let kinds: Vec<&str> = validity_flags(p)
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(!kinds.contains(&"unexpected-cache-hit"), "{kinds:?}");
    let first_token = |r: &serde_json::Value| {
        let at = r["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["tokens"].as_u64() > Some(0))
            .map_or(f64::INFINITY, |c| c["t_s"].as_f64().unwrap());
        r["sent_at"].as_f64().unwrap() + at
    };
    let mut below = 0;
    for r in &requests {
        let context = r["job"]["context_tokens"].as_u64().unwrap();
        assert_eq!(r["prompt_tokens"].as_u64(), Some(context), "{r}");
        let (cached, theoretical) = (
            r["cached_tokens"].as_u64().unwrap(),
            r["theoretical_cached_tokens"].as_u64().unwrap(),
        );
        // Over by the next block's line break, and by words its text may share with the
        // block the trace recorded there by chance (one word in a hundred or so).
        // (A sibling made after it but served first may have left more: its reachable hit.)
        let reachable = r["reachable_cached_tokens"]
            .as_u64()
            .unwrap()
            .max(theoretical);
        assert!(cached <= reachable + 3, "{cached} over {reachable}");
        if cached + 64 < theoretical {
            // Only a prefill race: another turn of its session was in prefill at the same
            // time (sent before its first token, first token after its send: the blocks
            // were still being cached, and the two may reach the server in either order).
            below += 1;
            let sent = r["sent_at"].as_f64().unwrap();
            let race = requests.iter().any(|q| {
                q["job"]["session"] == r["job"]["session"]
                    && q["sent_at"].as_f64().unwrap() < first_token(r)
                    && first_token(q) > sent
                    && q != r
            });
            assert!(race, "below its ceiling without a race: {r}");
        }
    }
    assert_eq!(t["below"].as_u64(), Some(below), "{t}");
}

/// The trace's timing as recorded, in the corpus's convention (a subagent's `t` is when it
/// returned, its requests' `t` from its own start): each send against the time worked out
/// here from the records' own ends, independently of the runner.
#[test]
fn a_session_waits_as_its_trace_recorded_it() {
    let ws = Workspace::new();
    // main0 ends at 0.1; a1 ran from 0.2 to 1.0 (its turns at 0 and 0.5 of it); a2 launched
    // at 0.15, still running at main1 (t 1.3; its last turn ends at 0.15 + 1.6 = 1.75);
    // main1 waits 1.2 s from main0's end and for a1 (+0.3 s after its end), not for a2;
    // main2 waits 0.6 s from main1's end (1.3 + 0.1) and for a2 (+0.25 s).
    let trace = ws.write(
        "timing.jsonl",
        concat!(
            r#"{"id": "timing", "block_size": 16, "requests": ["#,
            r#"{"t": 0, "type": "n", "in": 20, "out": 2, "hash_ids": [1], "api_time": 0.1},"#,
            r#"{"t": 1.0, "type": "subagent", "agent_id": "a1", "duration_ms": 800, "status": "completed", "requests": ["#,
            r#"{"t": 0, "type": "s", "in": 20, "out": 2, "hash_ids": [50], "api_time": 0.1},"#,
            r#"{"t": 0.5, "type": "s", "in": 40, "out": 2, "hash_ids": [50, 51]}]},"#,
            r#"{"t": 0.15, "type": "subagent", "agent_id": "a2", "duration_ms": null, "status": "async_launched", "requests": ["#,
            r#"{"t": 0, "type": "s", "in": 20, "out": 2, "hash_ids": [60]},"#,
            r#"{"t": 1.5, "type": "s", "in": 40, "out": 2, "hash_ids": [60, 61], "api_time": 0.1}]},"#,
            r#"{"t": 1.3, "type": "n", "in": 40, "out": 2, "hash_ids": [1, 2], "think_time": 1.2, "api_time": 0.1},"#,
            r#"{"t": 2.0, "type": "n", "in": 60, "out": 2, "hash_ids": [1, 2, 3]}]}"#,
            "\n"
        ),
    );
    let spec = corpus_spec(&ws, &trace, "live: 1, think_scale: 1");
    let (dir, _) = ws.run_ok(&spec);
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(requests.len(), 7);
    let find = |agent: Option<&str>, context: u64| {
        requests
            .iter()
            .find(|r| r["job"]["agent"].as_str() == agent && r["job"]["context_tokens"] == context)
            .unwrap_or_else(|| panic!("{agent:?} {context}"))
    };
    let sent = |r: &serde_json::Value| r["sent_at"].as_f64().unwrap();
    let end = |r: &serde_json::Value| sent(r) + r["end_s"].as_f64().unwrap();
    let (main0, main1, main2) = (find(None, 20), find(None, 40), find(None, 60));
    let (a1_0, a1_1) = (find(Some("a1"), 20), find(Some("a1"), 40));
    let (a2_0, a2_1) = (find(Some("a2"), 20), find(Some("a2"), 40));
    let expected = [
        ("a1's first", sent(a1_0), end(main0) + 0.1),
        ("a2's first", sent(a2_0), end(main0) + 0.05),
        ("a1's second", sent(a1_1), end(a1_0) + 0.4),
        ("a2's second", sent(a2_1), end(a2_0) + 1.5),
        (
            "main1",
            sent(main1),
            (end(main0) + 1.2).max(end(a1_1) + 0.3),
        ),
        (
            "main2",
            sent(main2),
            (end(main1) + 0.6).max(end(a2_1) + 0.25),
        ),
    ];
    for (what, at, want) in expected {
        // Never early; late by the client's own work (a loaded test machine) only: a gap
        // counts from its turn's last byte, not from when the request path handed the turn
        // back (after one of the first two streams, the connection pool watches its
        // connection 50 ms first; that wait sent the next turn 50 ms late).
        let late = at - want;
        assert!((-0.002..0.035).contains(&late), "{what}: {late:+.4} s");
    }
    // The main agent went on while a2 still ran: its turn before a2's last ended.
    assert!(sent(main1) < end(a2_1), "main1 waited for a2");
}

/// TraceLab's published sample rows (`tests/fixtures/tracelab`, copied unchanged; see its
/// NOTICE): 19 LLM rounds of a Claude Code and a Codex session.
fn published_tracelab() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tracelab/round_trace.jsonl")
}

#[test]
fn the_published_tracelab_sample_validates_and_replays_its_recorded_prefixes_and_waits() {
    let ws = Workspace::new();
    let scale = 0.02;
    let spec = corpus_spec(
        &ws,
        &published_tracelab(),
        &format!("format: tracelab, live: 2, think_scale: {scale}"),
    );
    // The rounds' recorded outputs (up to 2,475 tokens) at a fifth of the fast profile's time.
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("profile: fast,", "profile: fast, sim-time-scale: 0.2,");
    let spec = ws.write("tracelab.yaml", &text);
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    // Worked out here from the rows, as TraceLab records them: a round is sent at its latest
    // input event and ends at its last output event; the sessions in order of first
    // appearance, each round after the one before it, sharing min(prefix_tokens // 64, the
    // previous round's whole blocks, its own) 64-token blocks with it.
    let text = std::fs::read_to_string(published_tracelab()).unwrap();
    let secs = |v: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
            .unwrap()
            .timestamp_micros() as f64
            / 1e6
    };
    // (sent, end, input, prefix) a round, its session's in order of first appearance.
    type Round = (f64, f64, u64, u64);
    let mut sessions: Vec<(String, Vec<Round>)> = Vec::new();
    for line in text.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let events = r["timing_events"].as_array().unwrap();
        let at = |kinds: &[&str]| {
            events
                .iter()
                .filter(|e| kinds.contains(&e["event_type"].as_str().unwrap()))
                .map(|e| secs(&e["timestamp"]))
                .collect::<Vec<f64>>()
        };
        let sent = at(&["user_message", "tool_result"])
            .into_iter()
            .fold(f64::MIN, f64::max);
        let end = at(&["text", "reasoning", "tool_call"])
            .into_iter()
            .fold(sent, f64::max);
        let round = (
            sent,
            end,
            r["input_tokens_total"].as_u64().unwrap(),
            r["prefix_tokens"].as_u64().unwrap(),
        );
        let sid = r["session_id"].as_str().unwrap().to_string();
        match sessions.iter_mut().find(|(s, _)| *s == sid) {
            Some((_, rounds)) => rounds.push(round),
            None => sessions.push((sid, vec![round])),
        }
    }
    assert_eq!(sessions.len(), 2);
    // (theoretical hit, seconds after the previous round's end) a session's turn.
    let mut expected: Vec<Vec<(u64, f64)>> = Vec::new();
    for (_, rounds) in &mut sessions {
        rounds.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut prev: Option<(f64, u64)> = None;
        expected.push(
            rounds
                .iter()
                .map(|&(sent, end, input, prefix)| {
                    let blocks = input / 64;
                    let (hit, gap) = match prev {
                        None => (0, 0.0),
                        Some((prev_end, prev_blocks)) => (
                            (prefix.min(input) / 64).min(prev_blocks).min(blocks) * 64,
                            (sent - prev_end).max(0.0),
                        ),
                    };
                    prev = Some((end, blocks));
                    (hit, gap)
                })
                .collect(),
        );
    }
    let theory: u64 = expected.iter().flatten().map(|e| e.0).sum();
    assert_eq!(theory, 438_464, "the sample's own sharing");

    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    let jobs = &p["jobs"];
    assert_eq!(
        (jobs["started"].as_u64(), jobs["completed"].as_u64()),
        (Some(2), Some(2)),
        "{jobs}"
    );
    let kinds: Vec<&str> = validity_flags(p)
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(!kinds.contains(&"unexpected-cache-hit"), "{kinds:?}");
    let t = &p["trace_cache"];
    assert_eq!(t["theoretical_cached_tokens"].as_u64(), Some(theory), "{t}");
    assert_eq!(t["prompt_tokens"], t["requested_prompt_tokens"], "{t}");
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(requests.len(), 19);
    let sent = |r: &serde_json::Value| r["sent_at"].as_f64().unwrap();
    let end = |r: &serde_json::Value| sent(r) + r["end_s"].as_f64().unwrap();
    for (s, want) in expected.iter().enumerate() {
        let mut mine: Vec<&serde_json::Value> = requests
            .iter()
            .filter(|r| r["job"]["session"].as_u64() == Some(s as u64))
            .collect();
        mine.sort_by_key(|r| r["job"]["turn"].as_u64());
        assert_eq!(mine.len(), want.len());
        for (k, (r, &(hit, gap))) in mine.iter().zip(want).enumerate() {
            assert!(r["error"].is_null(), "{r}");
            // Each turn is owed the recorded prefix, to a block, and the server found it:
            // the sessions run one turn at a time and share nothing with each other.
            assert_eq!(
                r["theoretical_cached_tokens"].as_u64(),
                Some(hit),
                "{s}/{k}"
            );
            let cached = r["cached_tokens"].as_u64().unwrap();
            assert!(
                cached.abs_diff(hit) <= 64,
                "{s}/{k}: {cached} against {hit}"
            );
            // Due the recorded wait (scaled) after the previous turn's end, never sent early.
            let due = r["job"]["due_at"].as_f64().unwrap();
            if k > 0 {
                let from = end(mine[k - 1]);
                assert!(
                    (due - from - gap * scale).abs() < 0.005,
                    "{s}/{k}: due {:.4} s after the previous end, the trace {:.4}",
                    due - from,
                    gap * scale
                );
            }
            assert!(sent(r) >= due - 0.002, "{s}/{k}: sent before due");
        }
    }
}

/// The published Mooncake traces of `tests/fixtures/mooncake` (Apache-2.0, their first 300
/// lines copied unchanged; see its NOTICE).
fn published_mooncake(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mooncake")
        .join(name)
}

/// A spec replaying the Mooncake trace `file` as published (milliseconds, 512-token blocks,
/// every line with its blocks) on a fresh simulator whose pool never evicts.
fn mooncake_spec(ws: &Workspace, file: &std::path::Path, time_scale: f64) -> std::path::PathBuf {
    ws.write(
        "mooncake.yaml",
        &format!(
            "name: mooncake\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 262144, max-total-tokens: 4000000 }}\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 4\nload:\n  kind: trace\n  trace: {{ file: {}, format: mooncake, block_size: 512, hash_ids: required, time_scale: {time_scale} }}\ncache: {{ policy: cold, verify: true }}\n",
            file.display()
        ),
    )
}

#[test]
fn the_published_mooncake_traces_validate_and_replay_as_published() {
    let ws = Workspace::new();
    for name in [
        "conversation_trace.head300.jsonl",
        "synthetic_trace.head300.jsonl",
    ] {
        let spec = mooncake_spec(&ws, &published_mooncake(name), 1.0);
        let out = servebench().arg("validate").arg(&spec).output().unwrap();
        assert!(out.status.success(), "{name}: {}", show(&out));
    }
    // Read with another block size, the published lines do not fit: the unit is 512.
    let text = std::fs::read_to_string(mooncake_spec(
        &ws,
        &published_mooncake("conversation_trace.head300.jsonl"),
        1.0,
    ))
    .unwrap()
    .replace("block_size: 512", "block_size: 256");
    let spec = ws.write("mooncake-256.yaml", &text);
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(!out.status.success());
    assert!(
        show(&out).contains("conversation_trace.head300.jsonl:1:"),
        "{}",
        show(&out)
    );
    // The conversation trace's first 30 lines (9 s of it, at a tenth: 0.9 s), as published.
    let text =
        std::fs::read_to_string(published_mooncake("conversation_trace.head300.jsonl")).unwrap();
    let head: String = text.lines().take(30).map(|l| format!("{l}\n")).collect();
    let slice = ws.write("head30.jsonl", &head);
    let (dir, points) = ws.run_ok(&mooncake_spec(&ws, &slice, 0.1));
    let p = &points[0];
    assert_eq!(p["ok"], 30, "{p}");
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    // The theoretical hits recomputed from the lines: 512 tokens a leading block seen
    // before (the simulator's pool never evicts at this size).
    let lines: Vec<serde_json::Value> = head
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut theory_total = 0;
    for line in &lines {
        let ids: Vec<u64> = line["hash_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let lead = ids.iter().take_while(|id| seen.contains(*id)).count() as u64;
        theory_total += (lead * 512).min(line["input_length"].as_u64().unwrap());
        seen.extend(ids);
    }
    assert_eq!(theory_total, 14_848, "the slice's own sharing");
    let t = &p["trace_cache"];
    assert_eq!(
        t["theoretical_cached_tokens"].as_u64(),
        Some(theory_total),
        "{t}"
    );
    assert_eq!(t["above"].as_u64(), Some(0), "{t}");
    // One unit: each prompt is its `input_length` in the server's tokens.
    assert_eq!(t["prompt_tokens"], t["requested_prompt_tokens"], "{t}");
    let mut lengths: Vec<u64> = lines
        .iter()
        .map(|l| l["input_length"].as_u64().unwrap())
        .collect();
    let mut sent: Vec<u64> = requests
        .iter()
        .map(|r| r["prompt_tokens"].as_u64().unwrap())
        .collect();
    lengths.sort_unstable();
    sent.sort_unstable();
    assert_eq!(sent, lengths);
    let kinds: Vec<&str> = validity_flags(p)
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(!kinds.contains(&"unexpected-cache-hit"), "{kinds:?}");
}

#[test]
fn a_burstgpt_csv_replays_at_its_seconds() {
    let ws = Workspace::new();
    // BurstGPT's columns, as its README documents them (its data files are not copied here).
    let trace = ws.write(
        "burst.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
         5,ChatGPT,472,18,490,Conversation log\n\
         6,ChatGPT,1087,23,1110,Conversation log\n\
         7,GPT-4,417,27,444,API log\n",
    );
    let spec = ws.write(
        "burst.yaml",
        &format!(
            "name: burst\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast }}\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 4\nload:\n  kind: trace\n  trace: {{ file: {}, format: burstgpt, time_scale: 0.2 }}\n",
            trace.display()
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["ok"], 3);
    let (requests, at) = by_schedule(&dir);
    // One second apart in the trace, at a time scale of 0.2.
    assert!(
        (at[1] - at[0] - 0.2).abs() < 1e-6 && (at[2] - at[1] - 0.2).abs() < 1e-6,
        "{at:?}"
    );
    let outputs: Vec<u64> = requests
        .iter()
        .map(|r| r["max_tokens"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(outputs, [18, 23, 27], "{}", requests[0]);
}

#[test]
fn aiperf_multi_turn_sessions_replay_with_their_delays_after_each_answer() {
    let ws = Workspace::new();
    // AIPerf's multi_turn (its loader's documented shapes): a session split over two lines,
    // a hoisted system turn, `texts` of one, per-turn `output_length`.
    let file = ws.write(
        "conversations.jsonl",
        concat!(
            r#"{"session_id": "a", "turns": [{"text": "What is deep learning?", "output_length": 5}, {"text": "Explain it for a five year old.", "delay": 300}]}"#,
            "\n",
            r#"{"session_id": "b", "turns": [{"role": "system", "text": "You are a helpful assistant."}, {"texts": ["Who are you?"], "delay": 5000}, {"text": "And then?", "delay": 150, "output_length": 3}]}"#,
            "\n",
            r#"{"session_id": "a", "turns": [{"text": "Thanks.", "delay": 200, "output_length": 2}]}"#,
            "\n",
        ),
    );
    let spec = ws.write(
        "mt.yaml",
        &format!(
            "name: mt\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast }}\n  ready_timeout: 30s\nworkload:\n  api: openai-chat\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 4\nload:\n  kind: sessions\n  sessions: {{ users: 2, file: {} }}\n",
            file.display()
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["ok"], 5, "{}", points[0]);
    let flags = points[0]["flags"].to_string();
    assert!(!flags.contains("unexpected-cache-hit"), "{flags}");
    let mut requests = read_jsonl(&dir.join("requests.jsonl"));
    requests.sort_by_key(|r| r["index"].as_u64());
    let sent = |r: &serde_json::Value| r["sent_at"].as_f64().unwrap();
    let end = |r: &serde_json::Value| sent(r) + r["end_s"].as_f64().unwrap();
    // File order: a's three turns, then b's two.
    let max: Vec<u64> = requests
        .iter()
        .map(|r| r["max_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(max, [5, 4, 2, 4, 3], "{}", requests[0]);
    // Each turn waits its delay after the previous answer ended; a first turn's is not
    // waited (AIPerf reads a delay only once the turn before it returned).
    for (i, delay) in [(1, 0.3), (2, 0.2), (4, 0.15)] {
        let late = sent(&requests[i]) - (end(&requests[i - 1]) + delay);
        assert!((-0.002..0.035).contains(&late), "turn {i}: {late:+.4} s");
    }
    assert!(
        sent(&requests[3]) < 1.0 + sent(&requests[0]),
        "b's first delay was waited"
    );
    // The history grows by the previous turn and its reply (server tokens), and each turn
    // expects the turn before it in the cache.
    for i in [1, 2, 4] {
        let (before, now) = (&requests[i - 1], &requests[i]);
        let (p0, p1) = (
            before["prompt_tokens"].as_u64().unwrap(),
            now["prompt_tokens"].as_u64().unwrap(),
        );
        assert!(
            p1 > p0 + before["completion_tokens"].as_u64().unwrap(),
            "{i}: {p0} -> {p1}"
        );
        assert_eq!(now["share"]["shared_tokens"], p0, "{now}");
    }
    // b's system message is in every one of its prompts: its first is longer than a's
    // first by more than the question's words.
    assert!(
        requests[3]["prompt_tokens"].as_u64() > requests[0]["prompt_tokens"].as_u64(),
        "{}",
        requests[3]
    );
}

#[test]
fn a_multi_turn_line_servebench_would_not_send_as_aiperf_does_is_refused_at_validate() {
    let ws = Workspace::new();
    ws.write(
        "mt.jsonl",
        "{\"session_id\": \"a\", \"turns\": [{\"text\": \"hi\"}]}\n{\"session_id\": \"b\", \"turns\": [{\"text\": \"hi\"}, {\"text\": \"then\", \"timestamp\": 1000}]}\n",
    );
    let spec = ws.write(
        "mt.yaml",
        &sim_spec(
            "mt",
            "  api: openai-chat\n  prompt: { kind: random, tokens: 64 }\n  output_tokens: 4",
            "load:\n  kind: sessions\n  sessions: { users: 2, file: mt.jsonl }\n",
        ),
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    let text = show(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("mt.jsonl:2:64: `timestamp`"), "{text}");
    assert!(
        text.contains("write `delay` (milliseconds) instead"),
        "{text}"
    );
    // `turns` and `think` belong to generated conversations.
    let both = ws.write(
        "both.yaml",
        &sim_spec(
            "both",
            "  api: openai-chat\n  prompt: { kind: random, tokens: 64 }\n  output_tokens: 4",
            "load:\n  kind: sessions\n  sessions: { users: 2, turns: 3, think: 1s, file: mt.jsonl }\n",
        ),
    );
    let out = servebench().arg("validate").arg(&both).output().unwrap();
    let text = show(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("`sessions.turns` does not apply with `sessions.file`"),
        "{text}"
    );
    assert!(
        text.contains("`sessions.think` does not apply with `sessions.file`"),
        "{text}"
    );
    let neither = ws.write(
        "neither.yaml",
        &sim_spec(
            "neither",
            "  api: openai-chat\n  prompt: { kind: random, tokens: 64 }\n  output_tokens: 4",
            "load:\n  kind: sessions\n  sessions: { users: 2 }\n",
        ),
    );
    let out = servebench().arg("validate").arg(&neither).output().unwrap();
    let text = show(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("needs `turns`"), "{text}");
}

#[test]
fn sglang_agentic_trace_rounds_replay_back_to_back_with_the_servers_replies() {
    let ws = Workspace::new();
    // SGLang's own fixture, unchanged: 3 conversations of 3 rounds, the first round a system
    // and a user message.
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sglang/agentic_prebuilt.json");
    let doc = read_json(&file);
    let spec = ws.write(
        "at.yaml",
        &format!(
            "name: at\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, enable-cache-report: true }}\n  ready_timeout: 30s\nworkload:\n  api: openai-chat\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 6\nload:\n  kind: sessions\n  sessions: {{ users: 2, file: {}, format: sglang-agentic-trace }}\n",
            file.display()
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["ok"], 9, "{}", points[0]);
    let flags = points[0]["flags"].to_string();
    assert!(!flags.contains("unexpected-cache-hit"), "{flags}");
    let mut requests = read_jsonl(&dir.join("requests.jsonl"));
    requests.sort_by_key(|r| r["index"].as_u64());
    assert_eq!(requests.len(), 9);
    let sent = |r: &serde_json::Value| r["sent_at"].as_f64().unwrap();
    let end = |r: &serde_json::Value| sent(r) + r["end_s"].as_f64().unwrap();
    let u = |v: &serde_json::Value| v.as_u64().unwrap();
    assert!(
        requests.iter().all(|r| r["max_tokens"] == 6),
        "{}",
        requests[0]
    );
    for c in 0..3 {
        let turns = &requests[3 * c..3 * c + 3];
        assert!(
            turns.iter().all(|r| r["share"]["group"] == c as u64),
            "{}",
            turns[0]
        );
        // The first round is its system message and its user message: their 9 and 8 words
        // (a token each at least) and the template's assistant cue (3); without the system
        // message it would be the user's, servebench's tag (5) and the cue, 16.
        assert!(u(&turns[0]["prompt_tokens"]) >= 20, "{}", turns[0]);
        for i in 1..3 {
            let (before, now) = (&turns[i - 1], &turns[i]);
            // No think time: each round goes when the previous reply ended.
            let late = sent(now) - end(before);
            assert!((-0.002..0.035).contains(&late), "{c}/{i}: {late:+.4} s");
            // The history is the previous prompt and the server's reply, then the round's
            // message: the server finds all of the previous prompt cached (but the chat
            // template's assistant cue, which the reply replaces).
            // It grows by the reply (the server's count) and the round's words (a token each
            // at least): a history without the reply would grow by the words alone.
            let (p0, p1) = (u(&before["prompt_tokens"]), u(&now["prompt_tokens"]));
            let words = doc["conversations"][c][i]["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["content"].as_str().unwrap().split_whitespace().count() as u64)
                .sum::<u64>();
            let grown = u(&before["completion_tokens"]) + words;
            assert!(p1 >= p0 + grown, "{c}/{i}: {p0} -> {p1}, not {grown} more");
            assert_eq!(u(&now["share"]["shared_tokens"]), p0, "{now}");
            let cached = now["cached_tokens"].as_u64().unwrap_or(0);
            assert!(cached + 4 >= p0, "{c}/{i}: found {cached} of {p0}");
        }
    }
    // Two users: the third conversation starts when one of the first two has ended.
    let first_end = end(&requests[2]).min(end(&requests[5]));
    assert!(sent(&requests[6]) >= first_end - 0.002, "{}", requests[6]);
    assert!(
        sent(&requests[3]) < end(&requests[0]),
        "the first two start at once"
    );
}

#[test]
fn an_agentic_trace_servebench_would_not_send_as_sglang_does_is_refused_at_validate() {
    let ws = Workspace::new();
    ws.write(
        "trace.json",
        "{\"conversations\": [\n  [{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}],\n  [{\"messages\": [{\"role\": \"tool\", \"content\": \"b\"}, {\"role\": \"User\", \"content\": \"c\"}]}]\n]}\n",
    );
    let chat = "  api: openai-chat\n  prompt: { kind: random, tokens: 64 }\n  output_tokens: 220";
    let load = "load:\n  kind: sessions\n  sessions: { users: 2, file: trace.json, format: sglang-agentic-trace }\n";
    let refused = |name: &str, workload: &str, load: &str| {
        let spec = ws.write(&format!("{name}.yaml"), &sim_spec(name, workload, load));
        let out = servebench().arg("validate").arg(&spec).output().unwrap();
        let text = show(&out);
        assert!(!out.status.success(), "{text}");
        text
    };
    // SGLang's chat endpoint admits `user` in lower case only: refused where it stands.
    let text = refused("role", chat, load);
    assert!(
        text.contains("trace.json:3:53: `role: \"User\"`: SGLang's chat endpoint admits `user` in lower case only"),
        "{text}"
    );
    // SGLang replays it on chat backends only, one output length a turn.
    let text = refused("api", &chat.replace("openai-chat", "sglang-generate"), load);
    assert!(text.contains("write `api: openai-chat`"), "{text}");
    let dist = chat.replace("220", "{ dist: uniform, min: 64, max: 256 }");
    let text = refused("dist", &dist, load);
    assert!(text.contains("write `output_tokens: 220`"), "{text}");
    // A format names a file's; without one it says so.
    let text = refused(
        "nofile",
        chat,
        "load:\n  kind: sessions\n  sessions: { users: 2, turns: 2, format: sglang-agentic-trace }\n",
    );
    assert!(
        text.contains("`sessions.format` reads `sessions.file`, and there is no file"),
        "{text}"
    );
    // `--agentic-max-turns` is SGLang's: not for an AIPerf file.
    let text = refused(
        "aiperf",
        chat,
        "load:\n  kind: sessions\n  sessions: { users: 2, file: trace.json, max_turns: 2 }\n",
    );
    assert!(
        text.contains("add `format: sglang-agentic-trace`"),
        "{text}"
    );
    // The same document with the role written as SGLang admits it validates.
    ws.write(
        "trace.json",
        "{\"conversations\": [[{\"messages\": [{\"role\": \"tool\", \"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}]]}\n",
    );
    let spec = ws.write("ok.yaml", &sim_spec("ok", chat, load));
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn a_bailian_trace_replays_at_its_seconds_with_16_token_blocks() {
    let ws = Workspace::new();
    // Lines in the schema Alibaba's README documents (its files are Git LFS objects that
    // could not be read here): a chat, its second turn resending the first's blocks, and a
    // chat of its own.
    let trace = ws.write(
        "bailian.jsonl",
        concat!(
            r#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 300, "output_length": 6, "type": "text", "turn": 1, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]}"#,
            "\n",
            r#"{"chat_id": 2, "parent_chat_id": 1, "timestamp": 1.5, "input_length": 330, "output_length": 5, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 21, 22]}"#,
            "\n",
            r#"{"chat_id": 3, "parent_chat_id": -1, "timestamp": 2.0, "input_length": 40, "output_length": 4, "type": "search", "turn": 1, "hash_ids": [30, 31, 32]}"#,
            "\n",
        ),
    );
    let spec = ws.write(
        "bailian.yaml",
        &sim_spec(
            "bailian",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 4",
            &format!(
                "load:\n  kind: trace\n  trace: {{ file: {}, format: bailian, time_scale: 0.2 }}\ncache: {{ policy: cold, verify: true }}\n",
                trace.display()
            ),
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["ok"], 3, "{}", points[0]);
    let (requests, at) = by_schedule(&dir);
    // Seconds (1.0 and 0.5 apart), at a time scale of 0.2: not milliseconds.
    assert!(
        (at[1] - at[0] - 0.2).abs() < 1e-6 && (at[2] - at[1] - 0.1).abs() < 1e-6,
        "{at:?}"
    );
    let max: Vec<u64> = requests
        .iter()
        .map(|r| r["max_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(max, [6, 5, 4]);
    // The second turn finds the first's 18 whole blocks of 16 tokens; the others nothing.
    let theory: Vec<u64> = requests
        .iter()
        .map(|r| r["theoretical_cached_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(theory, [0, 18 * 16, 0], "{}", requests[1]);
    let cached = requests[1]["cached_tokens"].as_u64().unwrap_or(0);
    assert!(cached.abs_diff(18 * 16) <= 16, "{}", requests[1]);
    // Another block size would replay other prompts: refused.
    let wrong = ws.write(
        "wrong.yaml",
        &sim_spec(
            "wrong",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 4",
            &format!(
                "load:\n  kind: trace\n  trace: {{ file: {}, format: bailian, block_size: 512 }}\n",
                trace.display()
            ),
        ),
    );
    let out = servebench().arg("validate").arg(&wrong).output().unwrap();
    let text = show(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("a Bailian trace's blocks are 16 tokens"),
        "{text}"
    );
}

/// A run's requests in the order they were due, and when each was (Unix seconds).
fn by_schedule(dir: &std::path::Path) -> (Vec<serde_json::Value>, Vec<f64>) {
    let mut requests = read_jsonl(&dir.join("requests.jsonl"));
    requests.sort_by(|a, b| {
        a["scheduled_at"]
            .as_f64()
            .partial_cmp(&b["scheduled_at"].as_f64())
            .unwrap()
    });
    let at = requests
        .iter()
        .map(|r| r["scheduled_at"].as_f64().unwrap())
        .collect();
    (requests, at)
}

/// A SageMaker Data Capture record in AWS's documented schema (the request and response
/// bodies as `data`, JSON or BASE64), as AIPerf 0.13's loader reads it.
fn capture_record(
    time: &str,
    body: &serde_json::Value,
    prompt_tokens: u64,
    base64: bool,
) -> String {
    use base64::Engine as _;
    let input = body.to_string();
    let output =
        serde_json::json!({"usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 4}})
            .to_string();
    let (input, output, encoding) = if base64 {
        let b = base64::engine::general_purpose::STANDARD;
        (b.encode(input), b.encode(output), "BASE64")
    } else {
        (input, output, "JSON")
    };
    serde_json::json!({
        "captureData": {
            "endpointInput": {"observedContentType": "application/json", "mode": "INPUT", "data": input, "encoding": encoding},
            "endpointOutput": {"observedContentType": "application/json", "mode": "OUTPUT", "data": output, "encoding": encoding}
        },
        "eventMetadata": {"eventId": "e", "inferenceTime": time, "inferenceId": "i"},
        "eventVersion": "0"
    })
    .to_string()
}

#[test]
fn a_sagemaker_capture_replays_each_record_at_its_time_with_its_captured_messages() {
    let ws = Workspace::new();
    let words = |n: usize| vec!["word"; n].join(" ");
    // Three requests, written out of order, of very different lengths, a second apart.
    let bodies = [
        serde_json::json!({"messages": [{"role": "user", "content": words(10)}], "max_tokens": 3, "temperature": 0.2}),
        serde_json::json!({"messages": [{"role": "system", "content": words(400)}, {"role": "user", "content": "go"}], "max_tokens": 5}),
        serde_json::json!({"messages": [{"role": "user", "content": words(100)}], "max_completion_tokens": 4}),
    ];
    let lines = [
        capture_record("2026-04-29T00:00:02Z", &bodies[2], 903, true),
        capture_record("2026-04-29T00:00:00Z", &bodies[0], 901, false),
        capture_record("2026-04-29T00:00:01Z", &bodies[1], 902, false),
    ];
    let capture = ws.write("capture.jsonl", &(lines.join("\n") + "\n"));
    let spec_text = format!(
        "name: capture\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast }}\n  ready_timeout: 30s\nworkload:\n  api: openai-chat\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 9\nload:\n  kind: trace\n  trace: {{ file: {}, format: sagemaker-capture, time_scale: 0.2 }}\ncache: {{ policy: cold, verify: true }}\n",
        capture.display()
    );
    let spec = ws.write("capture.yaml", &spec_text);
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    assert_eq!(p["ok"], 3, "{p}");
    let (requests, at) = by_schedule(&dir);
    // Each sent at its recorded time (a second apart) times the time scale, and on time.
    assert!(
        (at[1] - at[0] - 0.2).abs() < 1e-6 && (at[2] - at[1] - 0.2).abs() < 1e-6,
        "{at:?}"
    );
    for r in &requests {
        assert!(r["lag_s"].as_f64().unwrap() < 0.5, "{r}");
    }
    // In time order: the captured output limits, and the recorded prompt counts kept apart.
    let max: Vec<u64> = requests
        .iter()
        .map(|r| r["max_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(max, [3, 5, 4]);
    let recorded: Vec<u64> = requests
        .iter()
        .map(|r| r["captured"]["prompt_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(recorded, [901, 902, 903]);
    // The server counted the captured messages (10, 400 + 1 and 100 words), not a prompt
    // of servebench's 64 tokens.
    let counted: Vec<u64> = requests
        .iter()
        .map(|r| r["prompt_tokens"].as_u64().unwrap())
        .collect();
    assert!(counted[0] >= 10 && counted[0] < 40, "{counted:?}");
    assert!(
        counted[1] >= 401 && counted[2] >= 100 && counted[1] > counted[2] + 250,
        "{counted:?}"
    );
    // No theoretical hit is worked out, and nothing judges the literal prompts' hits.
    assert!(p.get("trace_cache").is_none_or(|t| t.is_null()), "{p}");
    assert!(requests.iter().all(|r| {
        r.get("theoretical_cached_tokens")
            .is_none_or(|t| t.is_null())
    }));
    let kinds: Vec<&str> = validity_flags(p)
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(!kinds.iter().any(|k| k.contains("cache")), "{kinds:?}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        !report.contains("Trace blocks in the prefix cache"),
        "{report}"
    );
    // The setup says what was sent: the captured messages, no nonce, no requested length.
    assert!(
        report.contains("- **Prompt:** each captured request's own messages"),
        "{report}"
    );
    assert!(
        report.contains("the captured prompts carry no nonce"),
        "{report}"
    );
    assert!(
        !report.contains("a unique nonce starts every measured prompt"),
        "{report}"
    );
    assert!(
        p.get("requested_prompt_tokens").is_none_or(|v| v.is_null()),
        "{p}"
    );
    // Nothing of the captured text is written to the run directory.
    for file in ["requests.jsonl", "points.jsonl", "report.md"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(!text.contains("word word"), "{file}");
    }

    // Another API, a warm cache: refused at validate with the fix.
    for (from, to, want) in [
        (
            "api: openai-chat",
            "api: openai-completions",
            "set `workload.api: openai-chat`",
        ),
        ("policy: cold", "policy: warm", "cache.policy"),
        (
            "format: sagemaker-capture",
            "format: sagemaker-capture, hash_ids: required",
            "a SageMaker capture has literal prompts, no blocks",
        ),
    ] {
        let bad = ws.write("bad.yaml", &spec_text.replacen(from, to, 1));
        let out = servebench().arg("validate").arg(&bad).output().unwrap();
        assert!(!out.status.success());
        assert!(show(&out).contains(want), "{}", show(&out));
    }
    // A record without `max_tokens` gets `workload.output_tokens`: a number, not a draw.
    let no_limit = serde_json::json!({"messages": [{"role": "user", "content": "hi"}]});
    std::fs::write(
        &capture,
        format!(
            "{}\n{}\n",
            lines[0],
            capture_record("2026-04-29T00:00:03Z", &no_limit, 1, false)
        ),
    )
    .unwrap();
    let drawn = ws.write(
        "drawn.yaml",
        &spec_text.replacen(
            "output_tokens: 9",
            "output_tokens: { dist: uniform, min: 4, max: 8 }",
            1,
        ),
    );
    let out = servebench().arg("validate").arg(&drawn).output().unwrap();
    assert!(!out.status.success());
    assert!(
        show(&out).contains("1 of the capture's 2 requests have no `max_tokens`"),
        "{}",
        show(&out)
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    // A record that is no chat request: refused at its line.
    let csv = lines[1].replace(r#""encoding":"JSON""#, r#""encoding":"CSV""#);
    std::fs::write(&capture, format!("{}\n{csv}\n", lines[0])).unwrap();
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(!out.status.success());
    assert!(
        show(&out).contains("capture.jsonl:2:17: `endpointInput.encoding` is CSV"),
        "{}",
        show(&out)
    );
}
