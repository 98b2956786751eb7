//! Conversation-aware routing measured on real parts: the Shepherd Model Gateway (smg 1.13.0)
//! in front of two real SGLang 0.5.23 CPU workers, launched by servebench as one deployment
//! per policy, replaying agent sessions whose turns carry their session's id
//! (`X-SMG-Routing-Key` among them). Per policy: each session's share of turns on one worker
//! (by the router's log), the servers' cached tokens against the trace's theoretical hits, and
//! the router's own counters read on its Prometheus listener.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::sglang::launched;
use super::*;
use crate::common::*;

/// The sweep's points by policy.
fn by_policy(points: &[Value]) -> BTreeMap<String, Value> {
    points
        .iter()
        .map(|p| {
            let policy = p["values"]["server.deployment.router.policy"]
                .as_str()
                .unwrap_or_else(|| panic!("a point of no policy: {p}"));
            (policy.to_string(), p.clone())
        })
        .collect()
}

/// Each session's share of routed turns on its busiest worker.
fn shares(p: &Value) -> Vec<f64> {
    p["jobs"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["affinity"]
                .as_f64()
                .unwrap_or_else(|| panic!("a session without its workers: {s}"))
        })
        .collect()
}

/// The increase of the router's counter `name` over the point, summed over the series whose
/// labels contain `labels`; None when no such series was read.
fn counter(p: &Value, name: &str, labels: &str) -> Option<f64> {
    let read: Vec<f64> = p["router"]["counters"]
        .as_array()?
        .iter()
        .filter(|c| c["name"] == name && c["labels"].as_str().unwrap_or("").contains(labels))
        .map(|c| c["increase"].as_f64().unwrap())
        .collect();
    (!read.is_empty()).then(|| read.iter().sum())
}

/// (server cached, theoretical) tokens of the point's trace requests, and how many of the
/// server's tokens a token of the trace came to (its prompt tokens over the trace's).
fn hits(p: &Value) -> (f64, f64, f64) {
    let t = &p["trace_cache"];
    let n = |k: &str| t[k].as_f64().unwrap();
    (
        n("cached_tokens"),
        n("theoretical_cached_tokens"),
        n("prompt_tokens") / n("requested_prompt_tokens"),
    )
}

/// Four sessions of four turns (256 to 640 tokens, blocks of 16, each turn the last one's
/// blocks and more: 1,152 of 1,792 prompt tokens are theoretical hits), one live at a time, through
/// smg over two real SGLang workers, once per policy. Consistent hashing keeps every session on
/// one worker and its servers find the theoretical hits; round robin alternates each session's
/// turns over both workers, so each turn finds only what the turn before last left there.
#[test]
fn consistent_hashing_keeps_each_conversation_on_one_real_worker_and_its_cache_hits() {
    let Some(slot) = sglang_slot() else { return };
    let Some(_) = tier(Part::Smg) else { return };
    let tier = &slot.tier;
    let ws = Workspace::new();
    let marker = marker("conversations");
    let standin = ws.path().join("sgl_kernel.log");
    let trace =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/data/routing-sessions.jsonl");
    let server = launched(
        tier,
        &standin,
        &marker,
        &format!(
            "    enable-metrics: true\n  deployment:\n    workers: 2\n    router:\n      kind: smg\n      launcher: [{}, launch]\n      policy: consistent_hashing\n      env: {{ HF_HUB_OFFLINE: \"1\", SERVEBENCH_REAL_ENGINE_MARKER: {marker} }}\n",
            tier.smg().display()
        ),
    );
    // Two workers start at once on this machine's two cores: more than the tier's 4 minutes.
    let server = server.replace("ready_timeout: 4m", "ready_timeout: 10m");
    let spec = ws.write(
        "conversations.yaml",
        &format!(
            "name: conversations\n{server}sweep:\n  server.deployment.router.policy: [consistent_hashing, cache_aware, round_robin]\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 4\nload:\n  kind: agentic\n  agentic: {{ file: {}, live: 1, think_scale: 0 }}\n",
            trace.display()
        ),
    );
    // Three deployments of two SGLang workers each, started one after another: 1-4 minutes
    // each on a loaded 2-core machine.
    let out = servebench()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .timeout(std::time::Duration::from_secs(1800))
        .output()
        .expect("run servebench");
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let left = live_with_marker(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
    assert_no_kernel_called(&standin);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let section = report
        .split("## Conversations behind the router")
        .nth(1)
        .unwrap_or_else(|| panic!("no routing section:\n{report}"));
    eprintln!(
        "## Conversations behind the router{}",
        section.split("\n## ").next().unwrap()
    );
    let by = by_policy(&points);
    assert_eq!(by.len(), 3, "{points:?}");
    for (policy, p) in &by {
        assert_eq!(p["status"], "ok", "{policy}: {p}");
        assert_eq!(p["jobs"]["completed"], 4, "{policy}: {}", p["jobs"]);
        let router = &p["router"];
        assert!(router["scrapes"].as_u64().unwrap() >= 2, "{router}");
        // The router's count of requests per worker is its log's word, worker by worker.
        for w in p["workers"].as_array().unwrap() {
            let url = w["url"].as_str().unwrap();
            let logged = w["routed"][0].as_f64().unwrap() + w["routed"][1].as_f64().unwrap();
            assert_eq!(
                counter(p, "smg_worker_requests_total", &format!("worker={url}")),
                Some(logged),
                "{policy}: the router's counter and its log for {url}: {router}"
            );
        }
        let (cached, theoretical, _) = hits(p);
        eprintln!(
            "{policy}: shares {:?}, server cached {cached} of theoretical {theoretical}",
            shares(p)
        );
    }
    // Consistent hashing: every session whole on one worker, every turn hashed by its key,
    // the servers' hits the theoretical ones (SGLang finds a block's hit and at most a few
    // tokens past it: the precedent of the published session's slice).
    let ch = &by["consistent_hashing"];
    assert!(shares(ch).iter().all(|s| *s == 1.0), "{}", ch["jobs"]);
    assert_eq!(
        counter(
            ch,
            "smg_consistent_hashing_policy_branch_total",
            "branch=routing_key_hit"
        ),
        Some(16.0),
        "{}",
        ch["router"]
    );
    let (ch_cached, theoretical, scale) = hits(ch);
    assert_eq!(theoretical, 4.0 * 1152.0);
    // A 16-token block of the trace is 15-17 tokens of this vocabulary (seen: the point's
    // prompts 4-5% longer than the trace's), so the hits are compared in the server's tokens:
    // none found less or more than its theoretical hit by over servebench's tolerance, and
    // the total is the theoretical at the prompts' scale (seen: 4,817 of 4,608 at 1.042).
    let below_above = |p: &Value| {
        (
            p["trace_cache"]["below"].as_u64().unwrap(),
            p["trace_cache"]["above"].as_u64().unwrap(),
        )
    };
    assert_eq!(below_above(ch), (0, 0), "{}", ch["trace_cache"]);
    assert!(
        (ch_cached / theoretical - scale).abs() <= 0.02,
        "consistent hashing finds the theoretical hits: {ch_cached} of {theoretical} at {scale}"
    );
    // Round robin: each session's turns alternate over both workers (one live session at a
    // time), each turn finding what its session's turn before last left: 640 of 1,152 tokens.
    let rr = &by["round_robin"];
    assert!(shares(rr).iter().all(|s| *s == 0.5), "{}", rr["jobs"]);
    let (rr_cached, _, scale) = hits(rr);
    // Every turn after a session's first finds less than its theoretical hit (the second
    // nothing, the third and fourth the prompt of the turn before last): 3 a session.
    assert_eq!(below_above(rr), (12, 0), "{}", rr["trace_cache"]);
    assert!(
        (rr_cached / (4.0 * 640.0) - scale).abs() <= 0.02,
        "round robin finds the hits the turn before last left: {rr_cached} at {scale}"
    );
    assert!(rr_cached < ch_cached);
    assert_eq!(
        rr["router"]["absent"],
        serde_json::json!(["smg_round_robin_policy_branch_total"]),
        "smg 1.13.0 counts no round-robin branches: said absent, not zero"
    );
    // Cache-aware: its decisions and prefix match ratio counted once per request.
    let ca = &by["cache_aware"];
    let branches = counter(ca, "smg_cache_aware_policy_branch_total", "");
    assert_eq!(branches, Some(16.0), "{}", ca["router"]);
    assert_eq!(
        counter(ca, "smg_cache_aware_match_ratio_count", ""),
        Some(16.0),
        "{}",
        ca["router"]
    );
    assert!(
        section.contains("absent (not exported): smg_round_robin_policy_branch_total"),
        "{section}"
    );
}
