//! Every sender on the one request path (issue 43): a lost server is found and said by each
//! one, and Ctrl-C keeps every record it measured, in the file and in the point's summary.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::faulty::{Faults, FaultyServer, flag_kinds, measured_requests, url_spec};

/// The load shapes of the five senders, as spec text after the workload.
fn senders() -> Vec<(&'static str, String)> {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("experiments/data/agentic-sessions.jsonl");
    vec![
        ("closed-loop", "requests: 400\nconcurrency: 2\n".to_string()),
        (
            "two-point",
            "requests: 200\nmethod: { kind: two-point, a: 1, b: 4 }\n".to_string(),
        ),
        (
            "scheduled",
            "load: { kind: rate, rate: 100, arrival: constant }\nstop: { requests: 400 }\n"
                .to_string(),
        ),
        (
            "sessions",
            "load: { kind: sessions, sessions: { users: 4, turns: 100, think: 1ms } }\n"
                .to_string(),
        ),
        (
            "agentic",
            format!(
                "load:\n  kind: agentic\n  agentic: {{ file: {}, live: 2, sessions: 200, think_scale: 0.001, block_size: 64 }}\n",
                trace.display()
            ),
        ),
    ]
}

/// Every sender stops once its measured requests fail past `stop.errors`: the one request
/// path judges it as each record is written, the point says `stopped-on-errors`, the run does
/// not exit 0, and far fewer requests than planned went out (each stream here is cut after its first
/// chunk, a failed request).
#[test]
fn every_sender_stops_at_its_error_budget() {
    for (name, load) in senders() {
        let server = FaultyServer::start(Faults {
            reset_mid_stream: true,
            // Calibrations' one-token counts are answered: the measured requests fail.
            fault_above_tokens: Some(1),
            tokenize: true,
            ..Faults::default()
        });
        let ws = Workspace::new();
        let load = match load.contains("stop: { ") {
            true => load.replace("stop: { ", "stop: { errors: 3, "),
            false => format!("{load}stop: {{ errors: 3 }}\n"),
        };
        let spec = ws.write(
            "errors.yaml",
            &url_spec(
                name,
                &server.url,
                "{ kind: repeat, tokens: 64, calibrate: false }",
                &load,
            ),
        );
        let out = crate::common::spawn_run(&spec, &ws.path().join("runs"))
            .wait_with_output()
            .unwrap();
        let shown = show(&out);
        // Failed (1), or degraded (3) where some requests were answered (a two-point pair's
        // one-token first request is): never 0.
        assert!(
            matches!(out.status.code(), Some(1) | Some(3)),
            "{name}: {shown}"
        );
        let dir = run_dir(&out);
        let points = read_jsonl(&dir.join("points.jsonl"));
        let kinds = flag_kinds(&points[0]);
        assert!(
            kinds.iter().any(|k| k == "stopped-on-errors"),
            "{name}: {kinds:?}\n{shown}"
        );
        // Every record here is a measured one (a two-point pair's are `two-point-a`/`-b`).
        let failed = read_jsonl(&dir.join("requests.jsonl"))
            .iter()
            .filter(|r| !r["error"].is_null())
            .count();
        // Past a budget of 3: the fourth failure stops the round; what was in flight (two
        // at once, or a session's subagents) still ends and is recorded.
        assert!(
            (4..=16).contains(&failed),
            "{name}: {failed} failed\n{shown}"
        );
        let sent = server.seen.generations.load(Ordering::Relaxed);
        assert!(
            sent <= 16,
            "{name}: {sent} requests went out of 200 or more planned"
        );
    }
}

/// A server servebench did not start dies mid-point: whatever the sender, the point says
/// `server-lost`, the run exits 1, and far fewer requests than planned went to the dead address.
#[test]
fn every_sender_reports_a_server_lost_mid_point() {
    for (name, load) in senders() {
        let server = FaultyServer::start(Faults {
            chunk_gap_s: 0.002,
            tokenize: true,
            ..Faults::default()
        });
        let ws = Workspace::new();
        let spec = ws.write(
            "gone.yaml",
            &url_spec(name, &server.url, "{ kind: repeat, tokens: 64 }", &load),
        );
        let _turn = exclusive();
        let child = crate::common::spawn_run(&spec, &ws.path().join("runs"));
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.seen.generations.load(Ordering::Relaxed) < 12 {
            assert!(Instant::now() < deadline, "{name}: no requests");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(server);
        let out = child.wait_with_output().unwrap();
        let shown = show(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {shown}");
        let dir = run_dir(&out);
        let points = read_jsonl(&dir.join("points.jsonl"));
        assert_eq!(points.len(), 1, "{name}: {shown}");
        let kinds = flag_kinds(&points[0]);
        assert!(
            kinds.iter().any(|k| k == "server-lost"),
            "{name}: {kinds:?}\n{shown}"
        );
        let recorded = measured_requests(&dir);
        let connect = recorded
            .iter()
            .filter(|r| r["error"]["kind"] == "connect")
            .count();
        // At most one connect failure per request in flight (or live session) finds it gone.
        assert!(connect <= 4, "{name}: {connect} connect errors");
        assert!(recorded.len() < 300, "{name}: {} sent", recorded.len());
    }
}

/// Ctrl-C mid-point, for each sender on the simulator: the run exits 1 and every measured
/// record in `requests.jsonl` is in the point's summary (`ok` + `errors`); agent sessions
/// all say how they ended.
#[test]
fn ctrl_c_keeps_every_measured_record_in_file_and_summary_for_every_sender() {
    let rounds: usize = std::env::var("SERVEBENCH_CTRL_C_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    for round in 0..rounds {
        for (name, load) in senders() {
            ctrl_c_keeps_every_record(name, &load, round);
        }
    }
}

fn ctrl_c_keeps_every_record(name: &str, load: &str, round: usize) {
    let ws = Workspace::new();
    let spec = ws.write(
        "stop.yaml",
        &sim_spec(
            name,
            "  prompt: { kind: repeat, tokens: 64, calibrate: false }\n  output_tokens: 16",
            load,
        ),
    );
    let _turn = exclusive();
    let child = crate::common::spawn_run(&spec, &ws.path().join("runs"));
    let deadline = Instant::now() + Duration::from_secs(90);
    let runs = ws.path().join("runs").join(name);
    loop {
        let measured = std::fs::read_dir(&runs)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path().join("requests.jsonl"))
            .and_then(|f| std::fs::read_to_string(f).ok())
            .map_or(0, |t| {
                t.lines()
                    .filter(|l| !l.contains("\"role\":\"prime\""))
                    .count()
            });
        if measured >= 6 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: nothing measured in time"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let shown = show(&out);
    assert_eq!(out.status.code(), Some(1), "{name} #{round}: {shown}");
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 1, "{name} #{round}: {shown}");
    let p = &points[0];
    let summarized = p["ok"].as_u64().unwrap() + p["errors"].as_u64().unwrap();
    // Measured: every role but primes and checks (two-point pairs are `two-point-a`/`-b`).
    let in_file = read_jsonl(&dir.join("requests.jsonl"))
        .iter()
        .filter(|r| {
            ["measure", "two-point-a", "two-point-b"].contains(&r["role"].as_str().unwrap_or(""))
        })
        .count() as u64;
    assert_eq!(
        summarized, in_file,
        "{name} #{round}: the summary holds {summarized} requests, requests.jsonl {in_file}\n{p}"
    );
    if name == "agentic" {
        let jobs = &p["jobs"];
        let started = jobs["started"].as_u64().unwrap();
        let ended = jobs["completed"].as_u64().unwrap() + jobs["stopped"].as_u64().unwrap();
        assert_eq!(
            started, ended,
            "{name} #{round}: every session says how it ended: {jobs}"
        );
        let sent: u64 = jobs["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["sent"].as_u64().unwrap())
            .sum();
        assert_eq!(sent, in_file, "{name} #{round}: {jobs}");
    }
}

/// Issue 43: the agentic sender read its trace and calibrated its block text inside the
/// measured window; on the chat API (counted by generations, not `/tokenize`) those requests
/// were in the server's counters and not the client's: a false `server-disagrees` (98 against
/// 95). Now they come before the window: the server's count matches the client's.
#[test]
fn an_agentic_point_on_the_chat_api_calibrates_outside_its_measured_window() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("experiments/data/agentic-sessions.jsonl");
    let ws = Workspace::new();
    let spec = ws.write(
        "chat.yaml",
        &format!(
            "name: chat\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 4096, enable-metrics: true }}\n  ready_timeout: 30s\nworkload:\n  api: openai-chat\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 8\nload:\n  kind: agentic\n  agentic: {{ file: {}, live: 2, sessions: 4, think_scale: 0.01 }}\n",
            trace.display()
        ),
    );
    let _turn = exclusive();
    let out = servebench()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .output()
        .unwrap();
    let shown = show(&out);
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let kinds = flag_kinds(&points[0]);
    assert!(
        !kinds.iter().any(|k| k == "server-disagrees"),
        "{kinds:?}\n{}",
        points[0]["flags"]
    );
    // The block text was calibrated by generations on this API: they are in the file, before
    // the first measured turn, and not among the point's requests.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let measured = requests.iter().filter(|r| r["role"] == "measure").count() as u64;
    assert!(measured > 0, "{shown}");
    assert_eq!(
        points[0]["ok"].as_u64().unwrap() + points[0]["errors"].as_u64().unwrap(),
        measured
    );
    let server = &points[0]["server"];
    assert!(
        !server.is_null(),
        "the server's view was scraped: {}",
        points[0]
    );
}

/// `stop.duration` is judged on the request path, from the measured window's opening: no
/// agentic turn goes out after it, and a session whose next turn is due past it stops at once
/// (it does not sleep out a think wait the point will never use). Here every think wait is
/// 5x the trace's (1.5-6 s) and the point lasts 2 s: without the path's deadline the point
/// would last until its longest wait ran out.
#[test]
fn an_agentic_point_sends_nothing_after_its_duration_and_does_not_sleep_past_it() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("experiments/data/agentic-sessions.jsonl");
    let ws = Workspace::new();
    let spec = ws.write(
        "deadline.yaml",
        &format!(
            "name: deadline\nserver:\n  engine: sim\n  model: demo-model\n  args: {{ profile: fast, context-length: 4096 }}\n  ready_timeout: 30s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 32\nload:\n  kind: agentic\n  agentic: {{ file: {}, live: 4, think_scale: 5 }}\nstop: {{ duration: 2s }}\n",
            trace.display()
        ),
    );
    let started = Instant::now();
    let (dir, points) = ws.run_ok(&spec);
    let elapsed = started.elapsed();
    let requests: Vec<serde_json::Value> = read_jsonl(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["job"].is_object())
        .collect();
    assert!(!requests.is_empty());
    let first = requests
        .iter()
        .map(|r| r["sent_at"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    for r in &requests {
        // The window opens just before the first turn: none goes out 2 s after it.
        let at = r["sent_at"].as_f64().unwrap() - first;
        assert!(at < 2.0, "a turn went out {at:.3} s into a 2 s point: {r}");
    }
    let jobs = &points[0]["jobs"];
    // The sessions' window ends with their last turn, before any 1.5-6 s wait ran out.
    let window = jobs["window_s"].as_f64().unwrap();
    assert!(window < 3.0, "{jobs}");
    for s in jobs["sessions"].as_array().unwrap() {
        assert_eq!(
            s["stopped"].as_str(),
            Some("`stop.duration` ended the point: before its next turn"),
            "{s}"
        );
    }
    // The run itself did not wait out the sessions' think time either.
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
}
