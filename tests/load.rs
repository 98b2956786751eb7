//! End to end: `load:` points on the simulator (rates, ramps, traces, phases, lag, SLOs).

use crate::common::*;

fn load_spec(name: &str, extra: &str) -> String {
    sim_spec(
        name,
        "  prompt: { kind: random, tokens: 64, calibrate: false }\n  output_tokens: 8",
        extra,
    )
}

fn metric(point: &serde_json::Value, name: &str) -> f64 {
    point["metrics"][name]["mean"]
        .as_f64()
        .unwrap_or_else(|| panic!("no {name} in {point}"))
}

#[test]
fn a_rate_sweep_keeps_its_schedule_phases_and_system_metrics() {
    let ws = Workspace::new();
    let spec = ws.write(
        "rate.yaml",
        &load_spec(
            "rate",
            "load: { kind: rate, rate: 40, arrival: poisson, seed: 3 }\n\
             sweep: { load.rate: [20, 40] }\n\
             warmup: { requests: 5 }\n\
             stop: { requests: 30 }\n\
             cooldown: { requests: 3 }\n\
             slo: { ttft: 2s, tpot: 1s, targets: { ttft_p99: 5s, attainment: 90% } }\n\
             percentiles: [50, 99, 99.9]",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points.len(), 2);
    // The header counts the load model's requests, not one per point (issue 18 item 2).
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("open loop: each point's own, from its load model"),
        "{report}"
    );
    assert!(!report.contains("per point and round"), "{report}");
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    for (p, rate) in points.iter().zip([20.0, 40.0]) {
        let id = p["id"].as_str().unwrap();
        let mine: Vec<_> = requests.iter().filter(|r| r["point"] == id).collect();
        let phase = |name: &str| mine.iter().filter(|r| r["phase"] == name).count();
        assert_eq!(
            (phase("warmup"), phase("measure"), phase("cooldown")),
            (5, 30, 3)
        );
        for r in &mine {
            let (sched, sent, lag) = (
                r["scheduled_at"].as_f64().unwrap(),
                r["sent_at"].as_f64().unwrap(),
                r["lag_s"].as_f64().unwrap(),
            );
            assert!((sent - sched - lag).abs() < 1e-6, "{r}");
            assert!(lag > -0.001, "sent before its schedule: {r}");
        }
        // Only the measured phase counts.
        assert_eq!(p["ok"], 30, "{p}");
        assert_eq!(p["load"]["measured"], 30);
        assert_eq!(p["load"]["warmup"], 5);
        assert_eq!(p["load"]["latency_origin"], "scheduled");
        let offered = p["load"]["offered_req_s"].as_f64().unwrap();
        // 29 Poisson gaps: the offered rate is within a factor of two of the spec's.
        assert!(offered > rate / 2.0 && offered < rate * 2.0, "{offered}");
        // The simulator keeps up at these rates: throughput follows the offered load.
        let tput = metric(p, "throughput_req_s");
        assert!(tput > rate / 3.0 && tput < rate * 3.0, "{tput} at {rate}");
        assert!(metric(p, "goodput_req_s") <= tput + 1e-9);
        assert!(metric(p, "output_tok_s") > 0.0);
        assert!(
            (metric(p, "total_tok_s") - metric(p, "input_tok_s") - metric(p, "output_tok_s")).abs()
                < 1e-6
        );
        assert!(metric(p, "concurrency_max") >= 1.0);
        assert!(metric(p, "ttft_sched_s") >= metric(p, "ttft_s") - 1e-3);
        assert!(p["metrics"]["schedule_lag_s"]["count"] == 30);
        assert!(p["metrics"]["client_cpu"]["mean"].as_f64().is_some());
        assert!(
            p["load"]["percentiles"]["ttft_sched_s"]["p99.9"]
                .as_f64()
                .is_some()
        );
        assert_eq!(p["load"]["slo"]["checks"][0]["target"], "ttft_p99");
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Load"), "{report}");
    assert!(report.contains(
        "`goodput_req_s` (req/s): Completed measured requests meeting every per-request SLO"
    ));
    // Throughput-latency and goodput charts beside the report, linked from it.
    for chart in ["load-ttft.svg", "load-tpot.svg", "load-goodput.svg"] {
        let svg = std::fs::read_to_string(dir.join("charts").join(chart)).unwrap();
        assert!(svg.starts_with("<svg"), "{chart}");
        assert!(report.contains(&format!("(charts/{chart})")), "{chart}");
    }
    // The CSV exports: one row per point, one per recorded request, same columns throughout.
    let mut points_csv = csv::Reader::from_path(dir.join("points.csv")).unwrap();
    let header = points_csv.headers().unwrap().clone();
    assert!(
        header.iter().any(|h| h == "goodput_req_s_mean"),
        "{header:?}"
    );
    assert!(header.iter().any(|h| h == "load.rate"), "{header:?}");
    let rows: Vec<csv::StringRecord> = points_csv.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 2);
    let col = header
        .iter()
        .position(|h| h == "throughput_req_s_mean")
        .unwrap();
    let first: f64 = rows[0][col].parse().unwrap();
    assert!((first - metric(&points[0], "throughput_req_s")).abs() < 1e-9);
    let mut requests_csv = csv::Reader::from_path(dir.join("requests.csv")).unwrap();
    let header = requests_csv.headers().unwrap().clone();
    let wait_col = header.iter().position(|h| h == "read_wait_ms").unwrap();
    let rows: Vec<csv::StringRecord> = requests_csv.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), requests.len());
    // Each request's longest kernel wait, in ms, as its record says it in seconds.
    let mut waits = 0;
    for (row, rec) in rows.iter().zip(&requests) {
        match rec["read_wait_s"].as_f64() {
            Some(s) => {
                let shown: f64 = row[wait_col].parse().unwrap();
                assert!((shown - s * 1e3).abs() < 1e-6, "{shown} vs {s}");
                waits += 1;
            }
            None => assert_eq!(&row[wait_col], "", "{rec}"),
        }
    }
    assert!(waits > 0, "no request recorded a read wait");

    // The runner summarised records trimmed as they were written (`drop_detail`: zero-token
    // chunks, finish reasons, mix names dropped); the full records in requests.jsonl give
    // exactly the numbers it wrote.
    use servebench_model::results::records::{Phase, RequestRecord};
    let loaded = servebench_model::spec::load(&spec).expect("the spec loads");
    let full: Vec<RequestRecord> = requests
        .iter()
        .map(|r| serde_json::from_value(r.clone()).expect("a request record"))
        .collect();
    for p in &points {
        let id = p["id"].as_str().unwrap();
        let exp = &loaded
            .points
            .iter()
            .find(|x| x.id == id)
            .unwrap()
            .experiment;
        let mut measured: Vec<RequestRecord> = full
            .iter()
            .filter(|r| r.point == id && r.phase == Some(Phase::Measure))
            .cloned()
            .collect();
        measured.sort_by_key(|r| r.index);
        let s = servebench_report::measure::summary::summarize(exp, &measured, Vec::new(), false);
        let mut metrics = s.metrics;
        let observed = servebench_report::measure::system::Observed {
            warmup: 5,
            cooldown: 3,
            offered_req_s: p["load"]["offered_req_s"].as_f64(),
            client_cpu: p["metrics"]["client_cpu"]["mean"].as_f64(),
            stopped_on_errors: false,
            // Only the server view reads it; this point has none.
            unmeasured: Default::default(),
        };
        let load = servebench_report::measure::system::add(
            exp,
            &measured,
            &observed,
            &mut metrics,
            &mut vec![],
        )
        .expect("a load summary");
        assert_eq!(
            serde_json::to_value(&metrics).unwrap(),
            p["metrics"],
            "{id}"
        );
        assert_eq!(serde_json::to_value(&load).unwrap(), p["load"], "{id}");
    }
}

#[test]
fn a_capped_flood_is_flagged_client_limited_and_waits_count_from_the_schedule() {
    let ws = Workspace::new();
    // Everything due at once through one slot: each request waits for the one before it.
    let spec = ws.write(
        "flood.yaml",
        &load_spec(
            "flood",
            "load: { kind: rate, rate: inf, max_in_flight: 1 }\nstop: { requests: 12 }",
        ),
    );
    let (_, points) = ws.run_ok(&spec);
    let p = &points[0];
    let flags: Vec<&str> = p["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert!(flags.contains(&"client-limited"), "{p}");
    assert_eq!(metric(p, "concurrency_max"), 1.0);
    // The last request waited for eleven before it: its TTFT from the schedule holds them.
    let lag = &p["metrics"]["schedule_lag_s"];
    assert!(lag["max"].as_f64().unwrap() > 5.0 * lag["min"].as_f64().unwrap().max(1e-4));
    assert!(metric(p, "e2e_sched_s") > 2.0 * metric(p, "e2e_s"), "{p}");
}

#[test]
fn a_ramp_and_a_trace_send_what_they_describe() {
    let ws = Workspace::new();
    ws.write(
        "trace.jsonl",
        "{\"at\": 0.0, \"output_tokens\": 3}\n{\"at\": 0.2}\n{\"at\": 0.4, \"output_tokens\": 5}\n{\"at\": 0.6}\n",
    );
    let spec = ws.write(
        "shapes.yaml",
        &load_spec(
            "shapes",
            "load: { kind: ramp, arrival: constant, ramp: { from: 10, to: 30, over: 1s, steps: 2 }, trace: { file: trace.jsonl, time_scale: 0.5 } }\n\
             sweep: { load.kind: [ramp, trace] }",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let of = |id: &serde_json::Value| -> Vec<&serde_json::Value> {
        requests.iter().filter(|r| &r["point"] == id).collect()
    };
    // Ramp: 0.5 s at 10/s then 0.5 s at 30/s: 5 + 15 arrivals.
    let ramp = of(&points[0]["id"]);
    assert!((ramp.len() as i64 - 20).abs() <= 1, "{}", ramp.len());
    // Trace: four arrivals 0.1 s apart (time scale 0.5), output lengths from the file.
    let trace = of(&points[1]["id"]);
    assert_eq!(trace.len(), 4);
    let t0 = trace
        .iter()
        .map(|r| r["scheduled_at"].as_f64().unwrap())
        .fold(f64::MAX, f64::min);
    let mut at: Vec<f64> = trace
        .iter()
        .map(|r| r["scheduled_at"].as_f64().unwrap() - t0)
        .collect();
    at.sort_by(f64::total_cmp);
    for (a, want) in at.iter().zip([0.0, 0.1, 0.2, 0.3]) {
        assert!((a - want).abs() < 1e-6, "{at:?}");
    }
    let mut outs: Vec<u64> = trace
        .iter()
        .map(|r| r["completion_tokens"].as_u64().unwrap())
        .collect();
    outs.sort();
    assert_eq!(outs, [3, 5, 8, 8]);
}

#[test]
fn validate_names_what_a_load_block_lacks() {
    let ws = Workspace::new();
    let spec = ws.write(
        "bad.yaml",
        &load_spec(
            "bad",
            "load: { kind: rate }\nslo: { targets: { ttft_p200: 1s } }",
        ),
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`load.kind: rate` needs `load.rate`"), "{err}");
    assert!(err.contains("needs a `stop:`"), "{err}");
    assert!(err.contains("p200"), "{err}");
}

/// A trace that cannot be read is refused before the run starts, at the spec's `trace:` field;
/// a schedule that cannot be made when the point runs fails that point with its own cause
/// (not a prompt error), and the run says it failed.
#[test]
fn an_unmakeable_schedule_is_refused_before_launching_at_its_value() {
    let ws = Workspace::new();
    let spec = ws.write(
        "gone.yaml",
        &load_spec(
            "gone",
            "load: { kind: trace, trace: { file: no-such-trace.jsonl } }",
        ),
    );
    let out = ws.run_with(&spec, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-trace.jsonl"), "{err}");
    assert!(err.contains("gone.yaml:10:"), "{err}");
    // `rate: inf` with only a duration: everything is due at once, so how many is unknown.
    let spec = ws.write(
        "flood.yaml",
        &load_spec(
            "flood",
            "load: { kind: rate, rate: inf }\nstop: { duration: 1s }",
        ),
    );
    // Refused before launching, at the spec's value (issue 18 item 15), like the trace.
    let out = ws.run_with(&spec, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("give `stop.requests`"), "{err}");
    assert!(err.contains("flood.yaml:10:27"), "{err}");
    assert!(
        !ws.path().join("runs").join("flood").exists(),
        "no run directory"
    );
}

#[test]
fn a_trace_replays_its_own_prompt_and_output_lengths() {
    let ws = Workspace::new();
    // Seconds with `at` or Mooncake's milliseconds and `input_length`; one line without a
    // prompt length keeps the workload's 64 tokens.
    ws.write(
        "lengths.jsonl",
        "{\"at\": 0.0, \"input_tokens\": 40, \"output_tokens\": 3}\n\
         {\"timestamp\": 50, \"input_length\": 300, \"output_length\": 5}\n\
         {\"at\": 0.1, \"input_tokens\": 1200, \"output_tokens\": 7}\n\
         {\"at\": 0.15, \"output_tokens\": 9}\n",
    );
    let spec = ws.write(
        "lengths.yaml",
        &sim_spec(
            "lengths",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 8",
            "load: { kind: trace, trace: { file: lengths.jsonl } }",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let mut seen: Vec<(u64, u64, u64)> = requests
        .iter()
        .map(|r| {
            (
                r["completion_tokens"].as_u64().unwrap(),
                r["requested_prompt_tokens"].as_u64().unwrap(),
                r["prompt_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    seen.sort();
    // Each request asked for its line's prompt length (in the 2% bucket drawn lengths use)
    // and its line's output length, and the server counted that many prompt tokens
    // (calibrated: within 2%, plus the nonce's few tokens).
    let want = [(3, 40), (5, 300), (7, 1200), (9, 64)];
    assert_eq!(seen.len(), want.len(), "{seen:?}");
    for ((out, asked, got), (want_out, want_in)) in seen.iter().zip(want) {
        assert_eq!(*out, want_out, "{seen:?}");
        assert!(
            (*asked as f64 - want_in as f64).abs() <= 0.01 * want_in as f64,
            "asked {asked} for {want_in}: {seen:?}"
        );
        assert!(
            (*got as f64 - want_in as f64).abs() <= 0.02 * want_in as f64 + 12.0,
            "{got} tokens for a trace line of {want_in}: {seen:?}"
        );
    }
}

#[test]
fn warmup_and_cooldown_count_on_the_clients_side_of_the_servers_view() {
    // The server's counters over the scraped window include the warm-up and cool-down
    // requests; the client's side of the comparison must too, or every load point with
    // phases is flagged `server-disagrees` by the requests it excluded on purpose.
    let ws = Workspace::new();
    let spec = ws.write(
        "phases.yaml",
        &sim_spec(
            "phases",
            "  prompt: { kind: random, tokens: 64, calibrate: false }\n  output_tokens: 8",
            "load: { kind: rate, rate: 40, arrival: constant }\n\
             warmup: { requests: 5 }\nstop: { requests: 20 }\ncooldown: { requests: 4 }",
        )
        .replace(
            "context-length: 8192",
            "context-length: 8192, enable-metrics: true",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    assert_eq!(p["ok"], 20, "{p}");
    let recorded = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(recorded.len(), 29);
    assert_eq!(p["server"]["requests"].as_f64(), Some(29.0), "{p}");
    let prompt: u64 = recorded
        .iter()
        .map(|r| r["prompt_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(p["server"]["prompt_tokens"].as_f64(), Some(prompt as f64));
    assert!(
        p["flags"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["kind"] != "server-disagrees"),
        "{p}"
    );
}
