//! End to end: a capacity search (`search:`) on the simulator, against a capacity computed by
//! hand from the `fast` profile's timing model; its validation; resuming it mid-search.

use std::path::Path;

use crate::common::*;

/// A server that runs one request at a time (`max-running-requests: 1`), 10x slower than
/// `fast` (`sim-time-scale: 10`), fed at a constant rate: below its capacity every request
/// finds it idle, above it a queue builds.
///
/// The capacity, by hand from `crates/sim/profiles/fast.yaml` (times x10): a 58-token prompt (64 asked,
/// uncalibrated) prefills in 10 x (0.3 ms + 1.2 us x 58) = 3.7 ms; its 8 output tokens take
/// the prefill's token and 7 decode steps of 10 x (1.2 ms + 2 us x 1 + 0.5 ns x ~62) =
/// 12.0 ms: S = 3.7 + 7 x 12.0 = 87.9 ms of service per request (plus ~1 ms of HTTP), so the
/// server serves at most 1/S = 11.4 req/s.
///
/// The SLO, e2e_p90 <= 2S = 176 ms (from each request's scheduled time; a p90 is judged on
/// 10 or more measured requests, and a probe has 20): below 1/S every request takes S. Above
/// it request j (from 0, 2 warm-up then 20 measured) waits j x (S - 1/r); the p90 of the 20
/// measured interpolates to j = 2 + 0.9 x 19 = 19.1, so the SLO breaks where
/// S + 19.1 (S - 1/r) = 2S: r = 1 / (S (1 - 1/19.1)) = 1.055 / S = 12.0 req/s.
const CAPACITY_REQ_S: f64 = 12.0;

fn search_spec(name: &str, search: &str) -> String {
    format!(
        "name: {name}\n\
         server:\n  engine: sim\n  model: test-model\n  \
         args: {{ profile: fast, context-length: 8192, max-running-requests: 1, sim-time-scale: 10 }}\n  \
         ready_timeout: 30s\n\
         workload:\n  prompt: {{ kind: random, tokens: 64, calibrate: false }}\n  output_tokens: 8\n\
         load: {{ kind: rate, rate: 1, arrival: constant }}\n\
         warmup: {{ requests: 2 }}\n\
         stop: {{ requests: 20 }}\n\
         slo: {{ targets: {{ e2e_p90: 176ms }} }}\n\
         {search}\n"
    )
}

const SEARCH: &str = "search: { over: load.rate, start: 6, max: 96, resolution: 5% }";

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_rate_search_finds_the_hand_computed_capacity() {
    let ws = Workspace::new();
    let spec = ws.write("cap.yaml", &search_spec("cap", SEARCH));
    let (dir, points) = ws.run_ok(&spec);
    let file = read_json(&dir.join("search.json"));
    let s = &file["searches"][0];
    assert_eq!(s["seed"], "p001");
    assert_eq!(s["label"], "all");
    assert_eq!(s["complete"], true);
    let capacity = s["capacity"].as_f64().expect("a capacity");
    assert!(
        (capacity - CAPACITY_REQ_S).abs() / CAPACITY_REQ_S <= 0.10,
        "found {capacity} req/s, by hand {CAPACITY_REQ_S}: {s}"
    );
    let above = s["above"].as_f64().expect("a failing bound");
    assert!(
        above > capacity && (above - capacity) / capacity <= 0.05 + 1e-9,
        "{s}"
    );
    // Every probe is an ordinary recorded point, tagged, in order, its value in its values.
    assert_eq!(points.len() as u64, s["probes"].as_u64().unwrap());
    for (k, p) in points.iter().enumerate() {
        let tag = &p["search"];
        assert_eq!(p["id"], format!("p001-s{}", k + 1));
        assert_eq!(tag["probe"], k + 1);
        assert_eq!(p["values"]["load.rate"].as_f64(), tag["value"].as_f64());
        // The verdict is the point's own SLO verdict.
        assert_eq!(tag["passes"], p["load"]["slo"]["met"], "{p}");
        let tput = p["metrics"]["throughput_req_s"]["mean"].as_f64().unwrap();
        assert_eq!(tag["throughput_req_s"].as_f64(), Some(tput));
    }
    // The answer is the highest passing probe; the bound the lowest failing one.
    let values = |passes: bool| {
        points
            .iter()
            .filter(|p| p["search"]["passes"] == passes)
            .map(|p| p["search"]["value"].as_f64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(values(true).into_iter().reduce(f64::max), Some(capacity));
    assert_eq!(values(false).into_iter().reduce(f64::min), Some(above));
    // Each request is recorded under its probe.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert!(
        requests
            .iter()
            .all(|r| r["point"].as_str().unwrap().starts_with("p001-s"))
    );
    // The answer is what the server sustained at the capacity probe, not what was offered.
    let at_capacity = points
        .iter()
        .find(|p| p["search"]["value"].as_f64() == Some(capacity))
        .unwrap();
    assert_eq!(
        s["sustained_req_s"].as_f64(),
        at_capacity["search"]["throughput_req_s"].as_f64(),
        "{s}"
    );
    // The report states the answer and draws the search.
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Capacity"), "{report}");
    let sustained = servebench_model::text::sig3(s["sustained_req_s"].as_f64().unwrap());
    assert!(
        report.contains(&format!("**capacity {sustained} req/s completed at ")),
        "{report}"
    );
    assert!(report.contains(" req/s offered (between "), "{report}");
    // Monotonic verdicts here: nothing to warn about.
    assert!(!report.contains("NOT MONOTONIC"), "{report}");
    assert!(s.get("inversions").is_none(), "{s}");
    assert!(dir.join("charts/capacity-p001.svg").exists());
}

#[test]
fn a_search_is_resumed_from_its_recorded_probes() {
    let ws = Workspace::new();
    let spec = ws.write("cap.yaml", &search_spec("cap", SEARCH));
    let (dir, points) = ws.run_ok(&spec);
    let first = read_json(&dir.join("search.json"))["searches"][0].clone();
    // As if the run had stopped after its third probe: the rest of the records gone.
    let keep: Vec<String> = points[..3].iter().map(|p| p.to_string()).collect();
    std::fs::write(dir.join("points.jsonl"), keep.join("\n") + "\n").unwrap();
    std::fs::remove_file(dir.join("search.json")).unwrap();
    let mut meta = read_json(&dir.join("meta.json"));
    meta["status"] = "incomplete".into();
    std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    let _turn = exclusive();
    let out = servebench()
        .args(["run", "--resume"])
        .arg(&dir)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("3 probes recorded earlier, replayed"), "{err}");
    assert!(
        !err.contains("search probe 1 "),
        "probe 1 measured again: {err}"
    );
    let again = read_jsonl(&dir.join("points.jsonl"));
    // The first three are the earlier session's records, untouched.
    for (a, b) in again[..3].iter().zip(&points[..3]) {
        assert_eq!(a, b);
    }
    let ids: Vec<&str> = again.iter().map(|p| p["id"].as_str().unwrap()).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique, "no probe recorded twice");
    let s = &read_json(&dir.join("search.json"))["searches"][0];
    assert_eq!(s["complete"], true);
    assert_eq!(s["probes"].as_u64(), Some(again.len() as u64));
    // The replayed probes steer it the same way: the 4th value is the one the first run chose.
    assert_eq!(again[3]["search"]["value"], points[3]["search"]["value"]);
    let capacity = s["capacity"].as_f64().unwrap();
    assert!(
        (capacity - CAPACITY_REQ_S).abs() / CAPACITY_REQ_S <= 0.10,
        "{s} (first: {first})"
    );
}

#[test]
fn a_search_spec_is_checked_at_its_place() {
    let ws = Workspace::new();
    let check = |name: &str, text: &str, needles: &[&str]| {
        let spec = ws.write(name, text);
        let out = servebench()
            .arg("validate")
            .arg(&spec)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        for n in needles {
            assert!(err.contains(n), "missing {n:?} in:\n{err}");
        }
    };
    // The searched dimension swept too.
    check(
        "swept.yaml",
        &search_spec("s", &format!("{SEARCH}\nsweep: {{ load.rate: [1, 2] }}")),
        &[
            "`load.rate` is searched (`search.over`), so it cannot also be swept",
            "swept.yaml:15:10",
        ],
    );
    // No SLO targets to judge by.
    check(
        "noslo.yaml",
        &search_spec("s", SEARCH)
            .replace("slo: { targets: { e2e_p90: 176ms } }", "slo: { e2e: 1s }"),
        &[
            "needs SLO targets to judge its probes by",
            "noslo.yaml:14:1",
        ],
    );
    // Bounds out of order, a resolution out of (0, 1), a rate search without an open loop.
    check(
        "bounds.yaml",
        &search_spec(
            "s",
            "search: { over: concurrency, start: 8, max: 4, resolution: 150% }",
        ),
        &[
            "`max` (4) is below `start` (8)",
            "the resolution is a share between 0 and 1",
            "`search.over: concurrency` moves the closed loop's concurrency",
        ],
    );
    // A concurrency search past the closed loop's own bound.
    check(
        "huge.yaml",
        &search_spec("s", SEARCH)
            .replace("load: { kind: rate, rate: 1, arrival: constant }\n", "")
            .replace(
                SEARCH,
                "search: { over: concurrency, start: 1, max: 100000 }",
            ),
        &["a concurrency search goes up to 4096 clients", "huge.yaml:"],
    );
}

#[test]
fn plan_bounds_a_search_by_its_probes() {
    let ws = Workspace::new();
    let spec = ws.write("cap.yaml", &search_spec("cap", SEARCH));
    let out = servebench()
        .arg("plan")
        .arg(&spec)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    // 6 -> 96 is 4 doublings (5 probes), a 2x bracket to 5% is 5 bisections: 10 probes.
    assert!(
        text.contains(
            "p001  capacity search over load.rate from 6.00 to 96.0 req/s, resolution 5.00%: at most 10 probes"
        ),
        "{text}"
    );
    // The probes the model's capacity (11.4 req/s) makes the search take, each replayed on
    // its schedule: 6 and 12 req/s, then bisections between them (6 probes), 15.0 s; the real
    // search takes 14.8 s (it once said 36.7 s: 10 probes, each as long as the first).
    assert!(text.contains("cache cold  ~15.0 s"), "{text}");
}

/// A closed-loop search over `concurrency`, on the server above with two slots
/// (`max-running-requests: 2`) and three times slower (`sim-time-scale: 30`, so that the
/// client's few milliseconds between one request's end and the next one's send, longer on a
/// loaded machine, stay small beside a request's service): S = 3 x 87.9 = 264 ms (see
/// [`CAPACITY_REQ_S`]; a second running request adds 60 us to a 36 ms decode step, and its
/// 11 ms prefill stalls the other's decode once). With one or two clients each request finds a
/// slot free: E2E about S + 11 ms = 275 ms, and throughput doubles from one client to two, so
/// no plateau stops the doubling there. With c > 2 clients the two slots serve at most 2 / S,
/// so by Little's law the mean E2E is at least c x S / 2: 396 ms at three clients, 528 ms at
/// four. With `e2e_p90 <= 340 ms` two clients pass and three fail: the search doubles 1, 2, 4
/// (fails), bisects to 3 (fails) and answers 2, bracket [2, 3). The spec asks for 4 requests,
/// too few for a p90: each probe is extended to the 10 a p90 is judged on.
#[test]
fn a_concurrency_search_finds_the_hand_computed_number_of_clients() {
    let ws = Workspace::new();
    let spec = ws.write(
        "conc.yaml",
        "name: conc\n\
         server:\n  engine: sim\n  model: test-model\n  \
         args: { profile: fast, context-length: 8192, max-running-requests: 2, sim-time-scale: 30 }\n  \
         ready_timeout: 30s\n\
         workload:\n  prompt: { kind: random, tokens: 64, calibrate: false }\n  output_tokens: 8\n\
         requests: 4\n\
         slo: { targets: { e2e_p90: 340ms } }\n\
         search: { over: concurrency, start: 1, max: 64, resolution: 5% }\n",
    );
    let (dir, points) = ws.run_ok(&spec);
    let s = &read_json(&dir.join("search.json"))["searches"][0];
    assert_eq!(s["over"], "concurrency", "{s}");
    assert_eq!(s["complete"], true, "{s}");
    assert_eq!(
        (s["capacity"].as_f64(), s["above"].as_f64()),
        (Some(2.0), Some(3.0)),
        "{s}"
    );
    let probed: Vec<(f64, bool)> = points
        .iter()
        .map(|p| {
            (
                p["search"]["value"].as_f64().unwrap(),
                p["search"]["passes"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        probed,
        [(1.0, true), (2.0, true), (4.0, false), (3.0, false)],
        "{points:?}"
    );
    for p in &points {
        assert_eq!(
            p["values"]["concurrency"].as_f64(),
            p["search"]["value"].as_f64()
        );
        // Extended from 4 to the 10 requests a p90 is judged on.
        assert_eq!(p["ok"], 10, "{p}");
        let check = &p["load"]["slo"]["checks"][0];
        assert_eq!(
            (check["samples"].as_u64(), check["needed"].as_u64()),
            (Some(10), Some(10))
        );
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("capacity 2 in flight, "), "{report}");
    assert!(
        report.contains(" req/s completed (between 2 passing and 3 failing"),
        "{report}"
    );
}

/// Saturation: the two-slot server above serves at most 2/S whatever the number of clients
/// (S = 88 ms). One client leaves a slot idle, two fill both (throughput about doubles); past
/// two only the client's few milliseconds between a request's end and its next send are left
/// to fill, under 5% at four on an idle machine, a little more on a loaded one (where eight is
/// then the first doubling under 5%). With a loose SLO (every probe passes) the search stops
/// doubling at the first doubling that adds under 5%, takes every probe within 5% of that
/// plateau as the bracket's top, and answers the highest probe below it. The answer is
/// recomputed here from the probes' own throughputs by that rule.
#[test]
fn a_search_stops_doubling_where_throughput_stops_growing() {
    let ws = Workspace::new();
    let spec = ws.write(
        "flat.yaml",
        "name: flat\n\
         server:\n  engine: sim\n  model: test-model\n  \
         args: { profile: fast, context-length: 8192, max-running-requests: 2, sim-time-scale: 10 }\n  \
         ready_timeout: 30s\n\
         workload:\n  prompt: { kind: random, tokens: 64, calibrate: false }\n  output_tokens: 8\n\
         requests: 40\n\
         slo: { targets: { e2e_p90: 10s } }\n\
         search: { over: concurrency, start: 1, max: 64, resolution: 5% }\n",
    );
    let (dir, points) = ws.run_ok(&spec);
    let s = &read_json(&dir.join("search.json"))["searches"][0];
    assert_eq!(s["complete"], true, "{s}");
    let saturated = s["saturated_at"].as_f64().expect("saturation found");
    // Every probe passed its SLO: the bracket's top is the plateau, not a failure.
    assert!(points.iter().all(|p| p["search"]["passes"] == true));
    let probes: Vec<(f64, f64)> = points
        .iter()
        .map(|p| {
            (
                p["search"]["value"].as_f64().unwrap(),
                p["search"]["throughput_req_s"].as_f64().unwrap(),
            )
        })
        .collect();
    // The doublings: 1, 2, 4, ... up to the saturation; each before it added 5% or more, the
    // last under 5%. No probe went past it.
    let doublings: Vec<(f64, f64)> = probes
        .iter()
        .copied()
        .take_while(|&(v, _)| v <= saturated)
        .filter(|&(v, _)| (v.log2()).fract() == 0.0)
        .collect();
    assert_eq!(doublings.last().map(|d| d.0), Some(saturated), "{probes:?}");
    for pair in doublings.windows(2) {
        let gained = pair[1].1 >= pair[0].1 * 1.05;
        assert_eq!(gained, pair[1].0 < saturated, "{probes:?}");
    }
    assert!(probes.iter().all(|&(v, _)| v <= saturated), "{probes:?}");
    // The scenario grows before it saturates: two clients fill the slot one left idle.
    assert!(probes[1].1 > probes[0].1 * 1.6, "{probes:?}");
    assert!(saturated >= 4.0, "{probes:?}");
    // The answer by the rule: the plateau is the saturating probe's throughput; the lowest
    // probe within 5% of it is the bracket's top, the highest below that the capacity.
    let plateau = doublings.last().unwrap().1;
    let above = probes
        .iter()
        .filter(|p| p.1 >= plateau * 0.95)
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min);
    let capacity = probes
        .iter()
        .filter(|p| p.1 < plateau * 0.95 && p.0 < above)
        .map(|p| p.0)
        .fold(0.0, f64::max);
    assert_eq!(
        (s["capacity"].as_f64(), s["above"].as_f64()),
        (Some(capacity), Some(above)),
        "{probes:?}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains(&format!(
            "where throughput had stopped growing: saturation at {saturated}"
        )),
        "{report}"
    );
}
