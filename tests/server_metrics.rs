//! The server's `/metrics` at its edges: values the exposition format allows and JSON does
//! not (NaN, infinities), a server that publishes thousands of huge series, scrapes that
//! fail; and the engines' own ways of counting (SGLang's counters that appear late,
//! llama.cpp's prompt counter without the cached tokens).

use crate::common::*;
use crate::faulty::{Faults, FaultyServer, measured_requests, url_spec};

/// A server whose `/metrics` tells the truth, with `extra` lines after SGLang's counters.
fn metrics_server(extra: &str, fail_from: Option<usize>) -> FaultyServer {
    FaultyServer::start(Faults {
        metrics_prompt_scale: Some(1.0),
        metrics_extra: extra.to_string(),
        metrics_fail_from: fail_from,
        ..Faults::default()
    })
}

fn spec(ws: &Workspace, name: &str, server: &FaultyServer, rest: &str) -> std::path::PathBuf {
    ws.write(
        &format!("{name}.yaml"),
        &url_spec(name, &server.url, "{ kind: repeat, tokens: 64 }", rest),
    )
}

/// Item 5: NaN and the infinities are legal sample values (SGLang 0.5.23 on CPU exports
/// `sglang:fwd_occupancy` as NaN). They are stored as such, and the run stays reportable.
#[test]
fn nan_and_infinite_samples_are_stored_losslessly_and_the_run_reports() {
    let server = metrics_server(
        "# TYPE sglang:fwd_occupancy gauge\nsglang:fwd_occupancy{model_name=\"m\"} NaN\n\
         sglang:big +Inf\nsglang:small -Inf\n",
        None,
    );
    let ws = Workspace::new();
    let (dir, points) = ws.run_ok(&spec(&ws, "nan", &server, "requests: 3\n"));
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    assert!(text.contains(r#""sglang:fwd_occupancy":"NaN""#), "{text}");
    assert!(text.contains(r#""sglang:big":"+Inf""#) && text.contains(r#""sglang:small":"-Inf""#));
    assert!(!text.contains("null"), "{text}");
    assert_eq!(
        points[0]["server"]["requests"].as_f64(),
        Some(3.0),
        "{}",
        points[0]
    );
    let report = servebench().arg("report").arg(&dir).output().unwrap();
    assert!(report.status.success(), "{}", show(&report));

    // A run written before (NaN as `null`) is readable too.
    let old = text.replace(r#""NaN""#, "null");
    std::fs::write(dir.join("metrics.jsonl"), old).unwrap();
    let report = servebench().arg("report").arg(&dir).output().unwrap();
    assert!(report.status.success(), "{}", show(&report));
}

/// Item 5: 4,096 series of 1,000-character names grew the runner by about 9 MB a scrape and
/// `metrics.jsonl` by as much. A scrape keeps names of at most 200 bytes (and 1,024 of them),
/// says what it left out, and a body over 4 MiB is a failed scrape, with its cause.
#[test]
fn a_server_with_thousands_of_huge_series_costs_a_bounded_scrape_that_says_what_it_cut() {
    let series = |n: usize| -> String {
        (0..n)
            .map(|i| format!("junk_{i:04}_{} 1\n", "x".repeat(990)))
            .collect()
    };
    let server = metrics_server(&series(4000), None);
    let ws = Workspace::new();
    let (dir, points) = ws.run_ok(&spec(&ws, "huge", &server, "requests: 3\n"));
    let size = std::fs::metadata(dir.join("metrics.jsonl")).unwrap().len();
    assert!(size < 20_000, "metrics.jsonl is {size} bytes");
    let scrapes = read_jsonl(&dir.join("metrics.jsonl"));
    assert!(
        scrapes[0]["cut"]
            .as_str()
            .unwrap()
            .contains("4000 samples with names longer than 200 bytes"),
        "{}",
        scrapes[0]
    );
    let view = &points[0]["server"];
    assert_eq!(view["requests"].as_f64(), Some(3.0), "{view}");
    assert!(
        view["notes"].to_string().contains("left out 4000 samples"),
        "{view}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("left out 4000 samples"), "{report}");

    // Over the byte budget: every scrape fails, and says why.
    let server = metrics_server(&series(4300), None);
    let ws = Workspace::new();
    let (dir, points) = ws.run_ok(&spec(&ws, "over", &server, "requests: 2\n"));
    let scrapes = read_jsonl(&dir.join("metrics.jsonl"));
    assert!(
        scrapes.iter().all(|s| s["error"]
            .as_str()
            .unwrap()
            .contains("larger than 4194304 bytes")),
        "{scrapes:?}"
    );
    assert!(points[0]["server"]["failed_scrapes"].as_u64().unwrap() >= 2);
}

/// Item 5: a scrape that fails is recorded with its cause, counted on the point and shown in
/// the report, and the counters it leaves unknown are not compared.
#[test]
fn a_failed_scrape_is_recorded_with_its_cause_and_shown() {
    // The probe's and the start scrape's answers, then HTTP 500.
    let server = metrics_server("", Some(2));
    let ws = Workspace::new();
    let (dir, points) = ws.run_ok(&spec(&ws, "fails", &server, "requests: 3\n"));
    let scrapes = read_jsonl(&dir.join("metrics.jsonl"));
    assert_eq!(scrapes[0]["at"], "start");
    assert!(scrapes[0]["error"].is_null(), "{}", scrapes[0]);
    let end = scrapes.last().unwrap();
    assert_eq!(end["at"], "end");
    assert_eq!(end["error"], "/metrics answered HTTP 500", "{end}");
    let view = &points[0]["server"];
    assert!(view["failed_scrapes"].as_u64().unwrap() >= 1, "{view}");
    assert_eq!(view["scrape_error"], "/metrics answered HTTP 500");
    assert!(
        view["requests"].is_null(),
        "unknown without an end scrape: {view}"
    );
    assert!(
        crate::faulty::flag_kinds(&points[0])
            .iter()
            .all(|k| k != "server-disagrees"),
        "{}",
        points[0]
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("|\n\n- p001: ")
            && report.contains(" scrapes failed (first: /metrics answered HTTP 500)"),
        "{report}"
    );
}

/// Item 11: SGLang's token and request counters appear with the first finished request, its
/// cached-token counter with the first cache hit. The first point of a fresh simulated
/// SGLang, cold, has its server view.
#[test]
fn a_fresh_sglangs_first_cold_point_has_its_server_counters() {
    let ws = Workspace::new();
    let spec = ws.write(
        "fresh.yaml",
        "name: fresh\nserver:\n  engine: sim\n  model: m\n  args: { profile: fast, enable-metrics: true }\n  ready_timeout: 30s\n\
         workload:\n  prompt: { kind: repeat, tokens: 64, calibrate: false }\n  output_tokens: 4\n\
         cache: { policy: cold }\nrequests: 3\n",
    );
    let (dir, points) = ws.run_ok(&spec);
    let first = read_jsonl(&dir.join("metrics.jsonl")).remove(0);
    assert!(
        first["values"]["sglang:num_requests_total"].is_null(),
        "a fresh server has no request counter yet: {first}"
    );
    let view = &points[0]["server"];
    let client_prompt: u64 = measured_requests(&dir)
        .iter()
        .map(|r| r["prompt_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(view["requests"].as_f64(), Some(3.0), "{view}");
    assert_eq!(
        view["prompt_tokens"].as_f64(),
        Some(client_prompt as f64),
        "{view}"
    );
    assert_eq!(view["cached_tokens"].as_f64(), Some(0.0), "{view}");
    assert_eq!(view["generation_tokens"].as_f64(), Some(12.0), "{view}");
}

/// Issue 46 item 5: SGLang 0.5.23 counts cached tokens by the tier that served them
/// (`cache_source`); a warm point on the simulated SGLang (no HiCache: every hit the device's)
/// has them by tier, equal to the client's cached tokens, and the report says so beside the
/// server's view. llama.cpp, which counts no tiers, is said to count none.
#[test]
fn a_warm_sglang_point_has_its_cached_tokens_by_tier() {
    let ws = Workspace::new();
    let spec = ws.write(
        "tiers.yaml",
        "name: tiers\nserver:\n  engine: sim\n  model: m\n  args: { profile: fast, enable-metrics: true }\n  ready_timeout: 30s\n\
         workload:\n  prompt: { kind: repeat, tokens: 128, calibrate: false }\n  output_tokens: 4\n\
         cache: { policy: warm }\nrequests: 4\n",
    );
    let (dir, points) = ws.run_ok(&spec);
    let view = &points[0]["server"];
    let cached: u64 = measured_requests(&dir)
        .iter()
        .map(|r| r["cached_tokens"].as_u64().unwrap())
        .sum();
    assert!(cached > 0, "warm: {view}");
    assert_eq!(
        view["cached_by_tier"]["device"].as_f64(),
        Some(cached as f64),
        "{view}"
    );
    assert_eq!(
        view["cached_by_tier"].as_object().unwrap().len(),
        1,
        "{view}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains(&format!("- p001: device {cached} (100%).")),
        "{report}"
    );
}

/// Item 6: llama.cpp's `prompt_tokens_total` leaves out the cached tokens, which
/// `prompt_tokens_cached_total` counts. A warm point is not "100% apart".
#[test]
fn a_warm_llama_cpp_point_agrees_with_the_servers_counters() {
    let ws = Workspace::new();
    let spec = ws.write(
        "warm.yaml",
        "name: warm\nserver:\n  engine: llama.cpp\n  simulate: true\n  model: m.gguf\n  \
         args: { -c: 4096, -np: 1, metrics: true, profile: fast }\n  ready_timeout: 30s\n\
         workload:\n  api: openai-completions\n  prompt: { kind: repeat, tokens: 128, calibrate: false }\n  output_tokens: 4\n\
         cache: { policy: warm }\nrequests: 4\n",
    );
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    let view = &p["server"];
    assert_eq!(view["engine"], "llamacpp", "{p}");
    let requests = measured_requests(&dir);
    let prompt: u64 = requests
        .iter()
        .map(|r| r["prompt_tokens"].as_u64().unwrap())
        .sum();
    let cached: u64 = requests
        .iter()
        .map(|r| r["cached_tokens"].as_u64().unwrap())
        .sum();
    assert!(cached > prompt / 2, "warm: {cached} of {prompt} cached");
    assert_eq!(
        view["prompt_tokens"].as_f64(),
        Some(prompt as f64),
        "{view}"
    );
    assert_eq!(
        view["cached_tokens"].as_f64(),
        Some(cached as f64),
        "{view}"
    );
    assert!(
        crate::faulty::flag_kinds(p)
            .iter()
            .all(|k| k != "server-disagrees"),
        "{p}"
    );
    assert!(view.get("cached_by_tier").is_none(), "{view}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains(
            "not by tier (llamacpp counts its cached tokens without the tier that served them)"
        ),
        "{report}"
    );
}

/// Item 6: a server cut off mid-stream had counted the prompts the client never saw finish.
/// Its counters do not judge the point: the failure is the requests' own.
#[test]
fn a_point_whose_requests_failed_is_failed_by_them_not_by_the_servers_counters() {
    let server = FaultyServer::start(Faults {
        metrics_prompt_scale: Some(1.0),
        reset_mid_stream: true,
        ..Faults::default()
    });
    let ws = Workspace::new();
    let spec = ws.write(
        "cut.yaml",
        &url_spec(
            "cut",
            &server.url,
            "{ kind: repeat, tokens: 64, calibrate: false }",
            "requests: 3\n",
        ),
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let p = &points[0];
    assert_eq!(p["errors"], 3, "{p}");
    assert!(
        crate::faulty::flag_kinds(p)
            .iter()
            .all(|k| k != "server-disagrees"),
        "{p}"
    );
    assert!(
        p["server"]["notes"]
            .to_string()
            .contains("3 requests of the window failed"),
        "{p}"
    );
    let meta = read_json(&dir.join("meta.json"));
    let reason = meta["status_reason"].as_str().unwrap();
    assert!(!reason.contains("apart"), "{reason}");
    assert!(reason.contains("3 of 3 requests failed"), "{reason}");
}
