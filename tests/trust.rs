//! Numbers you can trust on any server: calibration that cannot overshoot, cache control that
//! says what it did, and servers described by what they answered. Each test runs against the
//! faulty server (tests/faulty.rs) misbehaving in one way.

use crate::common::*;
use crate::faulty::{Faults, FaultyServer};

/// A spec measuring the server at `url`.
fn url_spec(name: &str, url: &str, workload: &str, extra: &str) -> String {
    format!(
        "name: {name}\nserver:\n  url: {url}\n  model: faulty-model\nworkload:\n{workload}\n{extra}\n"
    )
}

#[test]
fn calibration_learns_a_small_tokenizer_and_never_sends_past_the_context() {
    // 1.45 characters per token: guessing 4 would send 2.8x every target.
    let server = FaultyServer::start(Faults {
        chars_per_token: 1.45,
        context: 16_384,
        ..Faults::default()
    });
    let ws = Workspace::new();
    let spec = ws.write(
        "cal.yaml",
        &url_spec(
            "cal",
            &server.url,
            "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 8",
            "sweep: { ctx: [2048, 8192, 14000] }\nrequests: 2",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let sent = server.seen.prompt_tokens.lock().unwrap().clone();
    let largest = *sent.iter().max().unwrap();
    assert!(
        largest <= 14_000 * 102 / 100,
        "the largest prompt sent was {largest} tokens: {sent:?}"
    );
    for p in &points {
        assert_eq!(p["status"], "ok", "{p}");
        let target = p["requested_prompt_tokens"].as_f64().unwrap();
        let got = p["metrics"]["prompt_tokens"]["mean"].as_f64().unwrap();
        assert!((got - target).abs() <= 0.02 * target, "{got} for {target}");
        let cal = &p["calibration"];
        assert_eq!(cal["counted_by"], "generate", "{p}");
        let attempts = cal["attempts"].as_array().unwrap();
        assert!(!attempts.is_empty() || cal["reused"] == true, "{p}");
        for a in attempts {
            assert!(a["tokens"].as_u64().is_some(), "every attempt counted: {a}");
            assert!(a["seconds"].as_f64().unwrap() >= 0.0);
        }
    }
    assert_eq!(points[0]["calibration"]["attempts"][0]["kind"], "probe");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("**Status:** complete"), "{report}");
}

#[test]
fn a_target_past_the_servers_context_fails_its_point_before_sending_it() {
    let server = FaultyServer::start(Faults {
        chars_per_token: 1.45,
        context: 8_192,
        ..Faults::default()
    });
    let ws = Workspace::new();
    let spec = ws.write(
        "big.yaml",
        &url_spec(
            "big",
            &server.url,
            "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 8",
            "sweep: { ctx: [1024, 20000] }\nrequests: 1",
        ),
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(1), "a point failed: {}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "20000 prompt tokens do not fit: the server accepts at most 8187 (its context, less 8 output tokens)"
        ),
        "{stderr}"
    );
    let largest = *server
        .seen
        .prompt_tokens
        .lock()
        .unwrap()
        .iter()
        .max()
        .unwrap();
    assert!(
        largest <= 8_192,
        "sent {largest} tokens to an 8192-token server"
    );
    let points = read_jsonl(&run_dir(&out).join("points.jsonl"));
    assert_eq!(points[0]["status"], "ok");
    assert_eq!(points[1]["status"], "failed");
}

#[test]
fn a_hung_server_stalls_calibration_only_for_the_request_timeout() {
    let server = FaultyServer::start(Faults {
        hang: true,
        ..Faults::default()
    });
    let ws = Workspace::new();
    let spec = ws.write(
        "hang.yaml",
        &url_spec(
            "hang",
            &server.url,
            "  prompt: { kind: repeat, tokens: 512 }\n  output_tokens: 4",
            "request_timeout: 2s",
        ),
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let points = read_jsonl(&run_dir(&out).join("points.jsonl"));
    // The point's own span (not the wait for the tests' timing lock): a 2 s timeout, not 10 min.
    let wall = &points[0]["wall"];
    let took = wall["ended_at"].as_f64().unwrap() - wall["started_at"].as_f64().unwrap();
    assert!(took < 10.0, "the point took {took} s");
    let flags = points[0]["flags"].to_string();
    assert!(flags.contains("calibration-failed"), "{flags}");
    assert!(flags.contains("no complete response within 2s"), "{flags}");
    let attempts = points[0]["calibration"]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "the first attempt failed: {attempts:?}");
    assert!(attempts[0]["seconds"].as_f64().unwrap() < 5.0);
}

#[test]
fn a_server_without_a_cache_reset_is_measured_cold_with_nonces_and_says_so() {
    let server = FaultyServer::start(Faults {
        no_flush: true,
        ..Faults::default()
    });
    let ws = Workspace::new();
    let spec = ws.write(
        "noflush.yaml",
        &url_spec(
            "noflush",
            &server.url,
            "  prompt: { kind: repeat, tokens: 256 }\n  output_tokens: 4",
            "cache: { policy: cold, verify: true }\nrequests: 3\nrepeat: 2",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    // Looked for once, at attach time; never asked again per point.
    assert_eq!(
        server
            .paths()
            .iter()
            .filter(|p| p.as_str() == "/flush_cache")
            .count(),
        1,
        "{:?}",
        server.paths()
    );
    // Timing noise (high-variance) is the machine's, not the cache's: the
    // point must carry no cache or flush flag.
    assert!(
        validity_flags(&points[0]).is_empty(),
        "a verified cold point without a flush is clean: {}",
        points[0]
    );
    let meta = read_json(&dir.join("meta.json"));
    let surface = &meta["servers"][0]["surface"];
    assert!(surface["cache_reset"].is_null(), "{surface}");
    assert!(
        surface["identity"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "/v1/models"),
        "{surface}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("the server offers no cache reset endpoint, so nothing was flushed"),
        "{report}"
    );
    assert!(
        !report.contains("the cache is flushed before each point"),
        "{report}"
    );
}

#[test]
fn a_url_server_is_described_by_what_answered_and_another_model_is_called_out() {
    let server = FaultyServer::start(Faults {
        model: "someone-elses-model".into(),
        ..Faults::default()
    });
    let ws = Workspace::new();
    let spec = ws.write(
        "who.yaml",
        &url_spec(
            "who",
            &server.url,
            "  prompt: { kind: repeat, tokens: 128 }\n  output_tokens: 4",
            "",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "warning: the server serves someone-elses-model, not the spec's model faulty-model"
        ),
        "{stderr}"
    );
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["servers"][0]["surface"]["version"], "0.0.0-faulty");
    assert_eq!(
        meta["servers"][0]["surface"]["cache_reset"]["kind"],
        "flush-cache"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("not the spec's model faulty-model"),
        "{report}"
    );
    assert!(report.contains("cache reset: `/flush_cache`"), "{report}");
}

#[test]
fn the_simulator_is_calibrated_through_its_tokenize_endpoint() {
    let ws = Workspace::new();
    let spec = ws.write(
        "tok.yaml",
        &sim_spec(
            "tok",
            "  prompt: { kind: repeat, tokens: 3000 }\n  output_tokens: 4",
            "requests: 1",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let cal = &points[0]["calibration"];
    assert_eq!(cal["counted_by"], "tokenize", "{cal}");
    let got = points[0]["metrics"]["prompt_tokens"]["mean"]
        .as_f64()
        .unwrap();
    assert!((got - 3000.0).abs() <= 60.0, "{got}");
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["servers"][0]["surface"]["tokenize"], "v1-prompt");
}
