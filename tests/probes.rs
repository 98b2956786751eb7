//! Every sender runs every probe (issue 34 item 1): a closed loop, the two-point method, an
//! arrival schedule and sessions, each on the simulator with `/metrics` on, a fake
//! `nvidia-smi`, the consistency check under load and the engine's profiler. Each point must
//! carry the server's view (and `metrics.jsonl` its scrapes), GPU readings, a consistency
//! verdict judged under its load, and a profiler capture of its measured window.

use crate::common::*;
use crate::telemetry::{Readings, fake_nvidia_smi, path_with, run};

/// Runs one point with `sender` (the spec's keys that choose it) and every probe on, and
/// checks each probe's part of the point.
#[track_caller]
fn every_probe_runs_on(name: &str, sender: &str, consistency_sent_under_load: bool) {
    let ws = Workspace::new();
    let bin = fake_nvidia_smi(
        ws.path(),
        &Readings {
            power_w: 300.0,
            free_mib: [40_960.0, 81_920.0],
            throttle: [0, 0],
            old_driver: false,
        },
    );
    let spec = ws.write(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 8192, enable-metrics: true }}\n  ready_timeout: 30s\n\
             workload:\n  prompt: {{ kind: repeat, tokens: 64 }}\n  output_tokens: 200\n\
             {sender}\n\
             telemetry: {{ gpu: nvidia-smi, interval: 100ms }}\n\
             validity: {{ consistency: {{ requests: 2 }} }}\n\
             profiler: {{ points: all, activities: [CPU] }}\n"
        ),
    );
    let out = run(&ws, &spec, &path_with(Some(&bin)));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];

    // The server's /metrics, scraped through the round.
    let scrapes = read_jsonl(&dir.join("metrics.jsonl"));
    assert!(
        scrapes
            .iter()
            .any(|s| s["point"] == "p001" && s["at"] == "end"),
        "no end scrape in metrics.jsonl: {scrapes:?}"
    );
    assert!(
        p["server"]["requests"].as_f64().unwrap_or(0.0) > 0.0,
        "no server view: {}",
        p["server"]
    );
    // The GPU sampler.
    assert!(
        p["gpu"]["samples"].as_u64().unwrap_or(0) >= 1,
        "{}",
        p["gpu"]
    );
    // Validity: the consistency prompt was judged beside the round's load.
    let c = &p["validity"]["consistency"];
    assert!(c.is_object(), "no consistency verdict: {}", p["validity"]);
    if consistency_sent_under_load {
        assert!(c["under_load"].as_u64().unwrap_or(0) >= 1, "{c}");
    }
    // The profiler, over the measured window.
    let capture = &p["profiler"];
    assert!(capture["error"].is_null(), "{capture}");
    assert!(capture["started_at"].as_f64().is_some(), "{capture}");
    assert!(capture["stopped_at"].as_f64().is_some(), "{capture}");
}

#[test]
fn a_closed_loop_runs_every_probe() {
    every_probe_runs_on("closed", "requests: 4\nconcurrency: 2", true);
}

#[test]
fn the_two_point_method_runs_every_probe() {
    every_probe_runs_on(
        "pairs",
        "requests: 2\nmethod: { kind: two-point, a: 1, b: 17 }",
        true,
    );
}

#[test]
fn an_arrival_schedule_runs_every_probe() {
    every_probe_runs_on(
        "scheduled",
        "load: { kind: rate, rate: 20, arrival: constant }\nstop: { requests: 12 }",
        true,
    );
}

/// The gap issue 34 found: a sessions point wrote no `metrics.jsonl` and had no server view.
#[test]
fn sessions_run_every_probe() {
    every_probe_runs_on(
        "sessions",
        "load: { kind: sessions, sessions: { users: 2, turns: 3, think: 10ms } }",
        true,
    );
}

/// Agent sessions replayed from a session trace (issue 36): a sender like the others.
#[test]
fn agent_sessions_run_every_probe() {
    let trace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("experiments/data/agentic-sessions.jsonl");
    every_probe_runs_on(
        "agentic",
        &format!(
            "load:\n  kind: agentic\n  agentic: {{ file: {}, live: 2, sessions: 2, think_scale: 0.02, block_size: 64 }}",
            trace.display()
        ),
        true,
    );
}
