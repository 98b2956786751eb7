//! A deployment launched from one spec (`server.deployment`): simulated SGLang workers and the
//! real `sglang-router` 0.3.2 in front of them, started, measured through and stopped by
//! servebench. Each request's worker comes from the router's own log (its `x-request-id`),
//! and is checked here against the workers' own `/metrics` counters.

use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::common::*;

/// A spec of `workers` simulated workers behind the tier's router (`router` is the rest of
/// its `router:` block), every process marked with `marker`.
fn deployment_spec(tier: &Tier, name: &str, deployment: &str, marker: &str, rest: &str) -> String {
    format!(
        "name: {name}\nserver:\n  engine: sim\n  model: {model}\n  args: {{ profile: fast, enable-metrics: true }}\n  env: {{ SERVEBENCH_REAL_ENGINE_MARKER: {marker} }}\n  ready_timeout: 90s\n  deployment:\n{deployment}\n    router:\n      launcher: [{python}, -m, sglang_router.launch_router]\n      env: {{ HF_HUB_OFFLINE: \"1\", SERVEBENCH_REAL_ENGINE_MARKER: {marker} }}\n{rest}",
        model = tier.model_hf().display(),
        python = tier.router_python().display(),
    )
}

/// [`deployment_spec`] with the Shepherd Model Gateway (`router.kind: smg`, the tier's
/// `smg launch`) as the router.
fn smg_deployment_spec(
    tier: &Tier,
    name: &str,
    deployment: &str,
    marker: &str,
    rest: &str,
) -> String {
    format!(
        "name: {name}\nserver:\n  engine: sim\n  model: {model}\n  args: {{ profile: fast, enable-metrics: true }}\n  env: {{ SERVEBENCH_REAL_ENGINE_MARKER: {marker} }}\n  ready_timeout: 90s\n  deployment:\n{deployment}\n    router:\n      kind: smg\n      launcher: [{smg}, launch]\n      env: {{ HF_HUB_OFFLINE: \"1\", SERVEBENCH_REAL_ENGINE_MARKER: {marker} }}\n{rest}",
        model = tier.model_hf().display(),
        smg = tier.smg().display(),
    )
}

fn measured(dir: &std::path::Path) -> Vec<Value> {
    read_jsonl(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["role"] == "measure")
        .collect()
}

/// Round robin over worker0 and worker1 sent 10 of the 20 measured requests to each, by
/// the router's word, and each worker's own counters (scraped from this machine through a
/// forward, or by the agent on the router's host) say the same.
fn ten_each_as_each_worker_counted(dir: &std::path::Path, records: &[Value]) {
    let by_router = routed(records, "p001");
    assert_eq!(by_router.get("worker0"), Some(&10), "{by_router:?}");
    assert_eq!(by_router.get("worker1"), Some(&10), "{by_router:?}");
    let points = read_jsonl(&dir.join("points.jsonl"));
    for w in points[0]["workers"].as_array().unwrap() {
        let name = w["name"].as_str().unwrap();
        assert_eq!(
            w["view"]["requests"].as_f64().unwrap(),
            by_router[name] as f64,
            "the worker's own counters: {w}"
        );
    }
}

/// Measured requests per worker name, by the router's word in `requests.jsonl`.
fn routed(records: &[Value], point: &str) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for r in records.iter().filter(|r| r["point"] == point) {
        let w = r["worker"]
            .as_str()
            .unwrap_or_else(|| panic!("a measured request without its worker: {r}"));
        *out.entry(w.to_string()).or_default() += 1;
    }
    out
}

/// Round robin over two workers servebench launched: every request's worker is named from
/// the router's log, the split is even (within 10%), the router's word matches each worker's
/// own counters, and everything is stopped after (meta.json says so, no process is left).
#[test]
fn a_launched_deployment_round_robins_and_names_each_requests_worker() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    // `Workspace::run` takes the tests' turn itself.
    let marker = marker("deploy-rr");
    let ws = Workspace::new();
    let spec = ws.write(
        "rr.yaml",
        &deployment_spec(
            &tier,
            "deploy-rr",
            "    workers: 2",
            &marker,
            "      policy: round_robin\nworkload:\n  api: sglang-generate\n  prompt: { kind: repeat, tokens: 128, calibrate: false }\n  output_tokens: 8\nrequests: 40\nconcurrency: 4\n",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let records = measured(&dir);
    assert_eq!(records.len(), 40);
    let by_router = routed(&records, "p001");
    assert_eq!(
        by_router.keys().collect::<Vec<_>>(),
        ["worker0", "worker1"],
        "{by_router:?}"
    );
    let (a, b) = (by_router["worker0"] as f64, by_router["worker1"] as f64);
    assert!(
        (a - b).abs() / 40.0 <= 0.1,
        "round robin is even within 10%: {by_router:?}"
    );
    // The router's word and each worker's own counters agree, worker by worker.
    let points = read_jsonl(&dir.join("points.jsonl"));
    let workers = points[0]["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2);
    for w in workers {
        let name = w["name"].as_str().unwrap();
        assert_eq!(w["role"], "regular");
        assert_eq!(
            w["routed"][0].as_u64().unwrap() as usize,
            by_router[name],
            "{w}"
        );
        assert_eq!(
            w["view"]["requests"].as_f64().unwrap(),
            by_router[name] as f64,
            "the worker's own counters: {w}"
        );
    }
    let meta = read_json(&dir.join("meta.json"));
    let server = &meta["servers"][0];
    let ranks = server["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2, "{server}");
    for (i, r) in ranks.iter().enumerate() {
        assert_eq!(r["name"], format!("worker{i}"));
        assert_eq!(r["stopped"], true, "{r}");
        assert!(
            dir.join(r["log_file"].as_str().unwrap()).is_file(),
            "each worker's log is kept: {r}"
        );
    }
    assert_eq!(server["stopped"], true, "{server}");
    let command = server["command"].as_array().unwrap();
    assert!(
        command.iter().any(|a| a == "--worker-urls") && command.iter().any(|a| a == "round_robin"),
        "{command:?}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("| point | worker | role | routed |"),
        "the report's worker table has the router's word:\n{report}"
    );
    let left = live_with_marker(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
}

/// Policies compared in one run as server variants: cache-aware keeps each shared-prefix
/// group on one worker (every owed hit found there, nothing routed away); round robin over
/// three groups sends each group's requests to both workers, and the requests that reach a
/// worker without the prefix are routed away, not counted as cache misses.
#[test]
fn cache_aware_routing_keeps_each_group_on_the_worker_that_holds_its_prefix() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    // `Workspace::run` takes the tests' turn itself.
    let marker = marker("deploy-ca");
    let ws = Workspace::new();
    let spec = ws.write(
        "ca.yaml",
        &deployment_spec(
            &tier,
            "deploy-ca",
            "    workers: 2",
            &marker,
            "      policy: cache_aware\nsweep:\n  server.deployment.router.policy: [cache_aware, round_robin]\nworkload:\n  api: sglang-generate\n  prompt: { kind: shared-prefix, groups: 3, prefix_tokens: 512, suffix_tokens: 32 }\n  output_tokens: 8\ncache: { policy: cold, verify: true }\nrequests: 30\n",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 2);
    let kinds = |p: &Value| -> Vec<String> {
        p["flags"]
            .as_array()
            .map(|f| {
                f.iter()
                    .map(|f| f["kind"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let rows = |p: &Value| p["prefix_cache"].as_array().unwrap().clone();
    // Cache-aware: one worker per group, every owed hit found there.
    let ca = &points[0];
    assert!(
        ca["label"]
            .as_str()
            .unwrap_or_default()
            .contains("cache_aware")
            || ca["values"].to_string().contains("cache_aware"),
        "{ca}"
    );
    for row in rows(ca) {
        assert_eq!(row["workers"], 1, "{row}");
        assert!(row.get("routed_away").is_none(), "{row}");
        assert!(row["must_hit"].as_u64().unwrap() >= 8, "{row}");
        assert_eq!(row["hits"], row["must_hit"], "{row}");
    }
    assert!(
        !kinds(ca).iter().any(|k| k.starts_with("prefix-")),
        "{:?}",
        kinds(ca)
    );
    // Round robin, three groups over two workers: each group on both.
    let rr = &points[1];
    let mut away = 0;
    for row in rows(rr) {
        assert_eq!(row["workers"], 2, "{row}");
        away += row["routed_away"].as_u64().unwrap_or(0);
        assert_eq!(
            row["hits"], row["must_hit"],
            "owed hits are owed per worker, and found: {row}"
        );
    }
    assert!(
        away >= 3,
        "each group's first visit to its second worker is routed away: {away}"
    );
    assert!(
        kinds(rr).contains(&"prefix-routed-away".to_string())
            && !kinds(rr).contains(&"prefix-cache-miss".to_string()),
        "{:?}",
        kinds(rr)
    );
    // The workers' own cached counters say the same: round robin cached less.
    let cached = |p: &Value| -> f64 {
        p["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["view"]["cached_tokens"].as_f64().unwrap())
            .sum()
    };
    assert!(cached(ca) > cached(rr), "{} vs {}", cached(ca), cached(rr));
    let left = live_with_marker(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
}

/// A worker killed mid-run: the router retries what it can on the other (the records after
/// the kill name worker0), the point fails as crashed and names the worker and its log, and
/// the run does not exit 0.
#[test]
fn a_worker_killed_mid_run_is_named_and_the_router_s_retries_recorded() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let _turn = exclusive();
    let marker = marker("deploy-kill");
    let ws = Workspace::new();
    let requests = 60;
    let spec = ws.write(
        "kill.yaml",
        &deployment_spec(
            &tier,
            "deploy-kill",
            "    workers: 2",
            &marker,
            &format!("      policy: round_robin\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 128, calibrate: false }}\n  output_tokens: 32\nrequests: {requests}\ncache: {{ policy: as-is }}\n"),
        ),
    );
    let runs = ws.path().join("runs");
    let out = std::thread::scope(|s| {
        let run = s.spawn(|| {
            servebench()
                .arg("run")
                .arg(&spec)
                .arg("--out")
                .arg(&runs)
                .arg("--quiet")
                .timeout(Duration::from_secs(300))
                .output()
                .expect("run servebench")
        });
        // worker1's process group, from meta.json once a third of the requests are in.
        let pgid = poll_until(
            Duration::from_secs(90),
            "a third of the run measured",
            || {
                let dir = std::fs::read_dir(runs.join("deploy-kill"))
                    .ok()?
                    .next()?
                    .ok()?
                    .path();
                let n = std::fs::read_to_string(dir.join("requests.jsonl"))
                    .ok()?
                    .lines()
                    .count();
                let meta: Value =
                    serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).ok()?)
                        .ok()?;
                let pgid = meta["servers"][0]["ranks"][1]["pgid"].as_i64()?;
                (n >= requests / 3).then_some(pgid)
            },
        );
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(-(pgid as i32)),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        run.join().unwrap()
    });
    assert!(
        !out.status.success(),
        "a crashed point is no success: {}",
        show(&out)
    );
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let crash = points[0]["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "server-crashed")
        .unwrap_or_else(|| panic!("the point says the deployment lost a worker: {}", points[0]));
    let msg = crash["message"].as_str().unwrap();
    assert!(
        msg.contains("worker1") && msg.contains("server-g1.worker1.log"),
        "the failure names the worker and its log: {msg}"
    );
    // After the kill, the router sent what it could to the survivor: the sends it tried on
    // the dead worker first are retried there, and the records say so.
    let records = measured(&dir);
    let last = records.last().unwrap();
    assert_eq!(last["worker"], "worker0", "{last}");
    let rerouted = records
        .iter()
        .filter(|r| r["rerouted_from"] == serde_json::json!(["worker1"]))
        .count();
    assert!(rerouted >= 1, "the router's retries are recorded");
    let dead = points[0]["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "worker1")
        .unwrap()
        .clone();
    assert_eq!(dead["rerouted"], rerouted, "{dead}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("worker1"), "{stderr}");
    let left = live_with_marker(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
}

/// A disaggregated deployment from one spec: one prefill and two decode workers behind the
/// router in PD mode. Every request is answered; the router's log names each one's decode
/// and prefill worker (the decodes split evenly, the prefill has them all); the workers' own
/// histograms give each stage, and the modelled KV transfer's time (latency + bytes over
/// bandwidth) is what the prefill worker's transfer stage and the decode worker's wait for
/// the KV say it was; 200 ms more transfer latency adds about 200 ms to the client's TTFT.
#[test]
fn a_disaggregated_deployment_splits_each_requests_time_into_its_stages() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let marker = marker("deploy-pd");
    let ws = Workspace::new();
    let spec = |latency_ms: u32| {
        deployment_spec(
            &tier,
            "deploy-pd",
            "    prefill: 1\n    decode: 2",
            &marker,
            "      policy: round_robin\nworkload:\n  api: sglang-generate\n  prompt: { kind: random, tokens: 256, calibrate: false }\n  output_tokens: 8\nrequests: 12\n",
        )
        .replace(
            "enable-metrics: true }",
            &format!("enable-metrics: true, sim-kv-transfer-latency-ms: {latency_ms}, sim-kv-transfer-gbps: 10 }}"),
        )
    };
    let fast = ws.write("fast.yaml", &spec(1));
    let slow = ws.write("slow.yaml", &spec(201));
    let (fast_dir, fast_points) = ws.run_ok(&fast);
    let (_, slow_points) = ws.run_ok(&slow);
    let records = measured(&fast_dir);
    assert_eq!(records.len(), 12);
    assert!(
        records
            .iter()
            .all(|r| r["error"].is_null() && r["completion_tokens"] == 8),
        "every request answered in full"
    );
    let decodes = routed(&records, "p001");
    assert_eq!(decodes.get("decode0"), Some(&6), "{decodes:?}");
    assert_eq!(decodes.get("decode1"), Some(&6), "{decodes:?}");
    assert!(
        records.iter().all(|r| r["prefill_worker"] == "prefill0"),
        "the prefill worker of each request"
    );
    let workers = fast_points[0]["workers"].as_array().unwrap();
    let prefill = workers.iter().find(|w| w["role"] == "prefill").unwrap();
    assert_eq!(prefill["routed"][0], 12, "{prefill}");
    let view = &prefill["view"];
    assert_eq!(
        view["requests"], 12.0,
        "the prefill worker prefilled every prompt: {view}"
    );
    let kv = &view["kv_transfer"];
    // 256 prompt tokens of the simulator's model at 10 GB/s, 1 ms latency: the transfer is
    // the latency plus its bytes over the bandwidth, as the prefill's histograms say.
    let mib = kv["mb"].as_f64().unwrap();
    let expected_ms = 1.0 + mib * 1.048576 / 10.0;
    let latency = kv["latency_ms"].as_f64().unwrap();
    assert!(
        (latency - expected_ms).abs() < 0.25 * expected_ms + 1.0,
        "transfer {latency} ms, modelled {expected_ms} ms ({mib} MiB): {kv}"
    );
    let stage = |w: &Value, s: &str| w["view"]["stages"][s]["mean_s"].as_f64();
    assert!(stage(prefill, "prefill_forward").is_some(), "{prefill}");
    for d in workers.iter().filter(|w| w["role"] == "decode") {
        let waited = stage(d, "decode_transferred").unwrap() * 1000.0;
        assert!(
            waited >= latency * 0.8,
            "a decode worker waits for the KV at least as long as it travels: {waited} ms vs {latency} ms"
        );
        assert_eq!(d["view"]["requests"], 6.0, "{d}");
    }
    let ttft = |p: &Value| p["metrics"]["ttft_s"]["mean"].as_f64().unwrap() * 1000.0;
    let added = ttft(&slow_points[0]) - ttft(&fast_points[0]);
    assert!(
        (150.0..300.0).contains(&added),
        "200 ms more transfer latency adds about 200 ms to TTFT: {added} ms"
    );
    let report = std::fs::read_to_string(fast_dir.join("report.md")).unwrap();
    assert!(
        report.contains("### Prefill-decode breakdown")
            && report.contains("| p001 | prefill0 | prefill | prefill_bootstrap"),
        "{report}"
    );
    let left = live_with_marker(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
}

/// A runner killed mid-run leaves nothing of its deployment: the router and every worker
/// are stopped by their supervisors, and `servebench down` finds each one gone, by name.
#[test]
fn a_killed_runner_leaves_no_worker_or_router_behind() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let _turn = exclusive();
    let marker = marker("deploy-orphan");
    let ws = Workspace::new();
    let spec = ws.write(
        "orphan.yaml",
        &deployment_spec(
            &tier,
            "deploy-orphan",
            "    workers: 2",
            &marker,
            "      policy: round_robin\nworkload:\n  api: sglang-generate\n  prompt: { kind: repeat, tokens: 128, calibrate: false }\n  output_tokens: 64\nrequests: 2000\n",
        ),
    );
    let runs = ws.path().join("runs");
    let mut runner = std::process::Command::new(env!("CARGO_BIN_EXE_servebench"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&runs)
        .arg("--quiet")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let dir = poll_until(Duration::from_secs(90), "the deployment measured", || {
        let dir = std::fs::read_dir(runs.join("deploy-orphan"))
            .ok()?
            .next()?
            .ok()?
            .path();
        let n = std::fs::read_to_string(dir.join("requests.jsonl"))
            .ok()?
            .lines()
            .count();
        (n >= 5).then_some(dir)
    });
    assert!(
        live_with_marker(&marker).len() >= 3,
        "router and workers run"
    );
    runner.kill().unwrap();
    runner.wait().unwrap();
    poll_until(
        Duration::from_secs(15),
        &format!("left behind: {:?}", live_with_marker(&marker)),
        || live_with_marker(&marker).is_empty().then_some(()),
    );
    let out = servebench().arg("down").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for name in ["worker0", "worker1"] {
        assert!(
            text.lines()
                .any(|l| l.contains(name) && l.contains("already gone")),
            "{name}: {text}"
        );
    }
}

/// A deployment spread over a pool of two SSH hosts (two sshd on loopback): worker0 and the
/// router on the first, worker1 on the second listening on that host's `address:`
/// (127.0.0.2, loopback too, so only the bind address reaches it). The router on the first
/// host reaches worker1 there; each request's worker comes from the router's log as it is
/// pulled from the host, and matches each worker's own counters; everything is stopped on
/// both hosts.
#[test]
fn a_deployment_spread_over_two_ssh_hosts_routes_to_both_and_names_each_requests_worker() {
    spread_over_two_ssh_hosts("local");
}

/// The same, measured by the agent on the router's host (`client: host`): the runner tells it
/// the workers (scraped from there, at the addresses the router uses) and relays the router's
/// sends from its copy of the log, so the agent's records and verdicts name each worker.
#[test]
fn a_spread_deployment_measured_on_the_router_s_host_names_each_requests_worker() {
    spread_over_two_ssh_hosts("host");
}

/// A disaggregated deployment spread over two SSH hosts: prefill0 and decode1 on the second
/// (listening on its `address:`), decode0 and the router on the first. The decode worker on
/// the first host fetches each room's KV from the prefill's bootstrap server on the second,
/// as the router pairs them; every request is answered in full, paired with prefill0, and
/// the decodes split evenly.
#[test]
fn a_disaggregated_deployment_spread_over_two_hosts_moves_kv_between_them() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let (Some(a), Some(b)) = (crate::sshd::Sshd::start(), crate::sshd::Sshd::start()) else {
        return;
    };
    let marker = marker("deploy-pd-spread");
    let ws = Workspace::new();
    let spec = ws.write(
        "pd-spread.yaml",
        &format!(
            "hosts:\n{}{}{}",
            a.host_entry(""),
            b.host_entry("    address: 127.0.0.2\n"),
            deployment_spec(
                &tier,
                "deploy-pd-spread",
                "    prefill: 1\n    decode: 2\n    nodes: 2\n    placement: [1, 0, 1]",
                &marker,
                "      policy: round_robin\nworkload:\n  api: sglang-generate\n  prompt: { kind: random, tokens: 256, calibrate: false }\n  output_tokens: 8\nrequests: 12\n",
            )
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let ranks = meta["servers"][0]["ranks"].as_array().unwrap();
    let url = |name: &str| {
        ranks
            .iter()
            .find(|r| r["name"] == name)
            .and_then(|r| r["url"].as_str())
            .unwrap_or_else(|| panic!("no {name}: {ranks:?}"))
            .to_string()
    };
    assert!(
        url("prefill0").starts_with("http://127.0.0.2:"),
        "{ranks:?}"
    );
    assert!(url("decode0").starts_with("http://127.0.0.1:"), "{ranks:?}");
    assert!(url("decode1").starts_with("http://127.0.0.2:"), "{ranks:?}");
    let records = measured(&dir);
    assert_eq!(records.len(), 12);
    assert!(
        records.iter().all(|r| r["error"].is_null()
            && r["completion_tokens"] == 8
            && r["prefill_worker"] == "prefill0"),
        "every request answered in full, prefilled on the other host"
    );
    let decodes = routed(&records, "p001");
    assert_eq!(decodes.get("decode0"), Some(&6), "{decodes:?}");
    assert_eq!(decodes.get("decode1"), Some(&6), "{decodes:?}");
    let workers = points[0]["workers"].as_array().unwrap();
    let prefill = workers.iter().find(|w| w["role"] == "prefill").unwrap();
    assert_eq!(prefill["view"]["requests"], 12.0, "{prefill}");
    assert!(live_with_marker(&marker).is_empty());
}

/// Ctrl-C while a deployment spread over two SSH hosts is measured by the agent on the
/// router's host (the runner relaying the router's sends meanwhile): the run ends as
/// interrupted (exit 1, no panic), the requests finished so far stay on disk, each named by
/// its worker, the partial report is written, and the router and both workers are stopped on
/// both hosts.
#[test]
fn ctrl_c_on_a_spread_deployment_keeps_what_was_measured_and_stops_every_host() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let (Some(a), Some(b)) = (crate::sshd::Sshd::start(), crate::sshd::Sshd::start()) else {
        return;
    };
    let _turn = exclusive();
    let marker = marker("deploy-spread-ctrl-c");
    let ws = Workspace::new();
    let spec = ws.write(
        "spread-ctrl-c.yaml",
        &format!(
            "hosts:\n{}{}client: host\n{}",
            a.host_entry(""),
            b.host_entry("    address: 127.0.0.2\n"),
            deployment_spec(
                &tier,
                "deploy-spread-ctrl-c",
                "    workers: 2\n    nodes: 2",
                &marker,
                "      policy: round_robin\nworkload:\n  api: sglang-generate\n  prompt: { kind: repeat, tokens: 128, calibrate: false }\n  output_tokens: 64\nrequests: 2000\nconcurrency: 2\n",
            )
        ),
    );
    let runs = ws.path().join("runs");
    let runner = std::process::Command::new(env!("CARGO_BIN_EXE_servebench"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&runs)
        .arg("--quiet")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let dir = poll_until(Duration::from_secs(90), "the deployment measured", || {
        let dir = std::fs::read_dir(runs.join("deploy-spread-ctrl-c"))
            .ok()?
            .next()?
            .ok()?
            .path();
        let n = std::fs::read_to_string(dir.join("requests.jsonl"))
            .ok()?
            .lines()
            .filter(|l| l.contains("\"measure\""))
            .count();
        (n >= 6).then_some(dir)
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = runner.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("run incomplete: interrupted by SIGINT (Ctrl-C)"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "incomplete", "{meta}");
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points[0]["incomplete"], true, "{}", points[0]);
    let records = measured(&dir);
    assert!(
        records.len() >= 6 && records.len() < 2000,
        "{}",
        records.len()
    );
    // Every finished request kept, each named by its worker (the relay ran to the end).
    let by_router = routed(&records, "p001");
    assert!(
        by_router.contains_key("worker0") && by_router.contains_key("worker1"),
        "{by_router:?}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.to_lowercase().contains("incomplete"),
        "partial report"
    );
    poll_until(
        Duration::from_secs(15),
        &format!("left running: {:?}", live_with_marker(&marker)),
        || live_with_marker(&marker).is_empty().then_some(()),
    );
}

fn spread_over_two_ssh_hosts(client: &str) {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let (Some(a), Some(b)) = (crate::sshd::Sshd::start(), crate::sshd::Sshd::start()) else {
        return;
    };
    let marker = marker(&format!("deploy-spread-{client}"));
    let ws = Workspace::new();
    let hosts = format!(
        "hosts:\n{}{}client: {client}\n",
        a.host_entry(""),
        b.host_entry("    address: 127.0.0.2\n")
    );
    let spec = ws.write(
        "spread.yaml",
        &format!(
            "{hosts}{}",
            deployment_spec(
                &tier,
                "deploy-spread",
                "    workers: 2\n    nodes: 2",
                &marker,
                "      policy: round_robin\nworkload:\n  api: sglang-generate\n  prompt: { kind: repeat, tokens: 128, calibrate: false }\n  output_tokens: 8\nrequests: 20\nconcurrency: 2\n",
            )
        ),
    );
    let plan = servebench().arg("plan").arg(&spec).output().unwrap();
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(
        text.contains("2 workers over 2 nodes")
            && text.contains("worker1 (node 1): ")
            && text.contains("--host NODE1_ADDRESS")
            && text.contains("http://NODE1_ADDRESS:PORT_worker1"),
        "{}",
        show(&plan)
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["client_placement"], client);
    let server = &meta["servers"][0];
    let on = |h: &Value, s: &crate::sshd::Sshd| {
        h.as_str()
            .is_some_and(|h| h.ends_with(&format!(":{}", s.port)))
    };
    assert!(on(&server["host"], &a), "the router on the first: {server}");
    let ranks = server["ranks"].as_array().unwrap();
    assert!(on(&ranks[0]["host"], &a), "{}", ranks[0]);
    assert!(on(&ranks[1]["host"], &b), "{}", ranks[1]);
    assert!(
        ranks[1]["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.2:"),
        "{}",
        ranks[1]
    );
    let command = ranks[1]["command"].to_string();
    assert!(command.contains(r#""--host","127.0.0.2""#), "{command}");
    let router_args = server["command"].to_string();
    assert!(
        router_args.contains(ranks[1]["url"].as_str().unwrap()),
        "the router reaches worker1 at its host's address: {router_args}"
    );
    // The router's log came from the host a pull at a time; each request is named still.
    let records = measured(&dir);
    assert_eq!(records.len(), 20);
    ten_each_as_each_worker_counted(&dir, &records);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let row = report
        .lines()
        .find(|l| l.contains("| worker1 "))
        .unwrap_or_else(|| panic!("no worker1 row:\n{report}"));
    assert!(
        row.contains(&format!(" on 127.0.0.1:{} ", b.port)),
        "each worker's host is named: {row}"
    );
    for r in ranks {
        assert_eq!(r["stopped"], true, "{r}");
        assert!(dir.join(r["log_file"].as_str().unwrap()).is_file(), "{r}");
    }
    assert_eq!(server["stopped"], true, "{server}");
    let left = live_with_marker(&marker);
    assert!(left.is_empty(), "left running: {left:?}");
}

/// A deployment on a Slurm allocation (the test cluster's one node as two ranks): worker0
/// and the router on rank 0, worker1 on rank 1, each a step of the group's one job that
/// shares the node; the router's log comes through its step's output and names each
/// request's worker; the job is released and nothing is left.
#[test]
fn a_deployment_on_a_slurm_allocation_runs_each_process_as_a_step_of_one_job() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let cluster = crate::slurmd::SlurmCluster::get();
    let _cleanup = cluster.cancel_on_drop("servebench-deploy-slurm");
    let _turn = exclusive();
    let marker = marker("deploy-slurm");
    let ws = Workspace::new();
    let spec = ws.write(
        "slurm.yaml",
        &format!(
            "host:\n  slurm: {{ time: \"5\", nodes: 1, ranks_per_node: 2 }}\n{}",
            deployment_spec(
                &tier,
                "deploy-slurm",
                "    workers: 2\n    nodes: 2",
                &marker,
                "      policy: round_robin\nworkload:\n  api: sglang-generate\n  prompt: { kind: repeat, tokens: 128, calibrate: false }\n  output_tokens: 8\nrequests: 20\nconcurrency: 2\n",
            )
        ),
    );
    let runs = ws.path().join("runs");
    let out = servebench()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&runs)
        .env("SLURM_CONF", &cluster.conf)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    let server = &meta["servers"][0];
    let job = server["slurm"]["job_id"].as_u64().unwrap();
    assert_eq!(
        server["slurm"]["ended"], true,
        "the job is released: {server}"
    );
    let ranks = server["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2, "{server}");
    let records = measured(&dir);
    assert_eq!(records.len(), 20);
    // Measured by the agent on rank 0's node, told the workers and relayed the router's log.
    assert_eq!(
        meta["client_placement"], "host",
        "{}",
        meta["client_placement"]
    );
    ten_each_as_each_worker_counted(&dir, &records);
    // Every process was a step of the one job (the router's log says it ran in it).
    for r in ranks {
        assert_eq!(r["stopped"], true, "{r}");
        let log = std::fs::read_to_string(dir.join(r["log_file"].as_str().unwrap())).unwrap();
        assert!(!log.is_empty(), "{r}");
    }
    let sacct_free = cluster.jobs_named("servebench-deploy-slurm");
    assert!(sacct_free.is_empty(), "job {job} left: {sacct_free:?}");
    poll_until(
        Duration::from_secs(15),
        &format!("left running: {:?}", live_with_marker(&marker)),
        || live_with_marker(&marker).is_empty().then_some(()),
    );
}

/// The same deployment with the router's successor, the Shepherd Model Gateway (`smg`
/// 1.13.0, `router.kind: smg`): launched with the same flags, ready on its `/workers`, each
/// request's worker named from its log, the router's word matching each worker's counters,
/// and nothing left after.
#[test]
fn a_launched_smg_deployment_round_robins_and_names_each_requests_worker() {
    let Some(tier) = tier(Part::Smg) else {
        return;
    };
    let marker = marker("deploy-smg");
    let ws = Workspace::new();
    let spec = ws.write(
        "smg.yaml",
        &smg_deployment_spec(
            &tier,
            "deploy-smg",
            "    workers: 2",
            &marker,
            "      policy: round_robin\nworkload:\n  api: sglang-generate\n  prompt: { kind: repeat, tokens: 128, calibrate: false }\n  output_tokens: 8\nrequests: 20\n",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    let command = meta["servers"][0]["command"].to_string();
    assert!(command.contains("launch"), "{command}");
    ten_each_as_each_worker_counted(&dir, &measured(&dir));
    let left = live_with_marker(&marker);
    assert!(left.is_empty(), "left behind: {left:?}");
}
