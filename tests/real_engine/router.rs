//! The real `sglang-router` 0.3.2 (PyPI's Rust router, `python -m sglang_router.launch_router`)
//! in front of two simulated SGLang workers (`servebench sim --profile fast --enable-metrics`),
//! with servebench measuring through it (`server.url` the router's).
//!
//! What the router asks of a worker (seen through a logging proxy in front of the simulator,
//! December 2026): at registration a gRPC probe (SGLang's scheduler, then vLLM's), then
//! `GET /health`, `GET /server_info` and `GET /model_info` (its metadata: `tp_size`, `dp_size`,
//! `model_path`, `served_model_name`), then the tokenizer of `model_path` (the tier's model
//! directory here, so nothing is downloaded); `GET /get_load` every 30 s for its load monitor
//! and for its own `/get_loads` (SGLang 0.5.23 has no `/get_load`: 404, which the router
//! records as load -1, on the real server and the simulator alike); `POST /flush_cache` when
//! its own is called. Requests are forwarded to the same path. Workers are told apart here by
//! their own `/metrics` counters, never by the router's word. In PD mode
//! (`--pd-disaggregation`) it registers prefill and decode workers the same way and posts
//! each request, `bootstrap_host`, `bootstrap_port` and `bootstrap_room` added, to one worker
//! of each role, answering with the decode worker's response (seen through the same proxy).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::common::*;

/// Two simulated workers and the real router in front of them.
struct Deployment {
    workers: Vec<RealServer>,
    router: RealServer,
}

/// `servebench sim` on a free port, serving the tier's model directory (its name is what
/// `/model_info` answers, and where the router loads the tokenizer from).
fn start_worker(tier: &Tier, marker: &str) -> RealServer {
    start_worker_with(tier, marker, free_port(), &[])
}

/// [`start_worker`] on `port` with `extra` flags.
fn start_worker_with(tier: &Tier, marker: &str, port: u16, extra: &[&str]) -> RealServer {
    let dir = tempfile::Builder::new()
        .prefix("servebench-router-worker")
        .tempdir()
        .unwrap();
    let log = dir.path().join("server.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_servebench"));
    cmd.args([
        "sim",
        "--profile",
        "fast",
        "--enable-metrics",
        "--model-path",
    ])
    .arg(tier.model_hf())
    .args(["--host", "127.0.0.1", "--port", &port.to_string()])
    .args(extra)
    .env("SERVEBENCH_REAL_ENGINE_MARKER", marker);
    let t0 = Instant::now();
    let mut child = spawn_kept(cmd, &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&mut child, &base, "/health", &log, Duration::from_secs(60));
    RealServer {
        child,
        base,
        log,
        started_in: t0.elapsed(),
        _dir: dir,
    }
}

/// The real router with `policy` in front of `workers`, once it lists every worker healthy.
fn start_router(tier: &Tier, workers: &[RealServer], policy: &str, marker: &str) -> RealServer {
    let urls: Vec<&str> = workers.iter().map(|w| w.base.as_str()).collect();
    let mut args = vec!["--policy", policy, "--worker-urls"];
    args.extend(&urls);
    launch_router(tier, &args, &urls, marker)
}

/// The real router with `args`, once it lists every one of `workers` (their URLs) healthy.
fn launch_router(tier: &Tier, args: &[&str], workers: &[&str], marker: &str) -> RealServer {
    let dir = tempfile::Builder::new()
        .prefix("servebench-router")
        .tempdir()
        .unwrap();
    let port = free_port();
    let log = dir.path().join("router.log");
    let mut cmd = Command::new(tier.router_python());
    cmd.args(["-m", "sglang_router.launch_router", "--host", "127.0.0.1"])
        .args(["--port", &port.to_string()])
        // Its Prometheus listener defaults to 0.0.0.0:29000: a free loopback port instead.
        .args(["--prometheus-host", "127.0.0.1"])
        .args(["--prometheus-port", &free_port().to_string()])
        // DEBUG names the worker each request is sent to ("Sending request url=...").
        .args(["--log-level", "debug"])
        .args(args)
        .env("SERVEBENCH_REAL_ENGINE_MARKER", marker)
        .env("HF_HUB_OFFLINE", "1");
    let t0 = Instant::now();
    let mut child = spawn_kept(cmd, &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&mut child, &base, "/health", &log, Duration::from_secs(60));
    // `/health` answers before the workers are registered (a background job): wait for them.
    let want = workers.len();
    let listed = poll_until(
        Duration::from_secs(60),
        "the router lists every worker healthy",
        || {
            let r = http::get(&base, "/workers").ok()?;
            let ws = r.json()["workers"].as_array()?.clone();
            let healthy = ws.iter().filter(|w| w["is_healthy"] == true).count();
            (healthy == want).then_some(ws)
        },
    );
    for w in workers {
        assert!(
            listed.iter().any(|l| l["url"] == *w),
            "{w} not among the router's workers: {listed:?}"
        );
    }
    RealServer {
        child,
        base,
        log,
        started_in: t0.elapsed(),
        _dir: dir,
    }
}

/// Two workers and the router (`policy`), every process marked with `marker`.
fn deploy(tier: &Tier, policy: &str, marker: &str) -> Deployment {
    let workers = vec![start_worker(tier, marker), start_worker(tier, marker)];
    let router = start_router(tier, &workers, policy, marker);
    eprintln!(
        "sglang-router ({policy}) ready in {:.1?} at {} in front of {} and {}",
        router.started_in, router.base, workers[0].base, workers[1].base
    );
    Deployment { workers, router }
}

impl Deployment {
    /// Stops the router and the workers and proves no process with `marker` is left.
    fn stop(mut self, marker: &str) {
        self.router.stop();
        for w in &mut self.workers {
            w.stop();
        }
        let left = live_with_marker(marker);
        assert!(left.is_empty(), "left running: {left:?}");
    }
}

/// A counter from the worker's own `/metrics` (summed over its label sets). SGLang shows a
/// counter only after its first event (sglang-facts 9): absent is 0.
fn counter(base: &str, name: &str) -> f64 {
    let r = http::get(base, "/metrics").expect("/metrics");
    assert_eq!(r.status, 200, "{base}/metrics: {}", r.body);
    r.body
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Finished requests per worker, by the workers' own count.
fn requests_per_worker(d: &Deployment) -> Vec<f64> {
    d.workers
        .iter()
        .map(|w| counter(&w.base, "sglang:num_requests_total"))
        .collect()
}

/// The router's log without its ANSI colours (it writes them to a file too).
fn router_log(d: &Deployment) -> String {
    let mut out = String::new();
    let mut chars = d.router.log_text().chars().collect::<Vec<_>>().into_iter();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `server:` measuring the router at `base` (an external server: servebench launches nothing).
fn through(base: &str, tier: &Tier) -> String {
    format!(
        "server:\n  engine: sglang\n  url: {base}\n  model: {}\n",
        tier.model_hf().display()
    )
}

/// Round robin: servebench's requests through the router split evenly over the two workers,
/// as the workers themselves count them; the run and its report work through the router (its
/// `/flush_cache` flushes every worker, so `cold` is possible).
#[test]
fn router_round_robin_spreads_requests_evenly_over_two_workers() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let turn = exclusive();
    let marker = marker("router-rr");
    let d = deploy(&tier, "round_robin", &marker);
    let before = requests_per_worker(&d);
    let ws = Workspace::new();
    let requests = 40;
    let spec = ws.write(
        "rr.yaml",
        &format!(
            "name: router-rr\n{}  workers: [{}, {}]\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 128, calibrate: false }}\n  output_tokens: 4\nconcurrency: 2\nrequests: {requests}\ncache: {{ policy: cold, verify: true }}\n",
            through(&d.router.base, &tier),
            d.workers[0].base,
            d.workers[1].base
        ),
    );
    let t0 = Instant::now();
    let out = ws.run_in_turn(&spec, &[], &turn);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let p = &points[0];
    assert_eq!(p["status"], "ok", "{p}");
    assert_eq!(p["ok"], requests, "{p}");
    assert!(
        validity_flags(p).is_empty(),
        "nothing in doubt through the router: {p}"
    );
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(
        meta["servers"][0]["surface"]["cache_reset"]["kind"], "flush-cache",
        "the router's own /flush_cache is found: {}",
        meta["servers"][0]["surface"]
    );
    assert!(dir.join("report.md").is_file());
    let after = requests_per_worker(&d);
    let served: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let total: f64 = served.iter().sum();
    assert!(
        total >= requests as f64,
        "the workers finished {total} requests, servebench sent {requests}: {served:?}"
    );
    for (w, n) in d.workers.iter().zip(&served) {
        assert!(
            (n - total / 2.0).abs() <= 0.1 * total / 2.0,
            "round robin: {} served {n} of {total} (each within 10% of half): {served:?}",
            w.base
        );
    }
    // servebench's own per-worker view (`server.workers`) says the same, worker by worker.
    let views: Vec<f64> = p["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["view"]["requests"].as_f64().unwrap_or(-1.0))
        .collect();
    assert_eq!(views, served, "{}", p["workers"]);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Workers behind the router"), "{report}");
    eprintln!(
        "round robin through the real router: {served:?} of {total} requests in {:.1?}",
        t0.elapsed()
    );
    d.stop(&marker);
}

/// A prompt of about 300 words that starts with `group` (words drawn from a fixed seed, so
/// groups share nothing past their first few characters).
fn group_prefix(group: u64) -> String {
    const WORDS: &[&str] = &[
        "alpha", "river", "stone", "cloud", "maple", "orbit", "lemon", "prism", "tiger", "velvet",
        "quartz", "harbor", "cedar", "meadow", "ember", "falcon",
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ (group + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let mut words = vec![format!("group {group}:")];
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        words.push(WORDS[(x % WORDS.len() as u64) as usize].to_string());
    }
    words.join(" ")
}

/// `POST /generate` through the router; the worker's `meta_info`.
fn generate(base: &str, text: &str, max_new_tokens: u64) -> Value {
    let body = json!({
        "text": text,
        "sampling_params": { "max_new_tokens": max_new_tokens, "ignore_eos": true }
    });
    let r = http::post(base, "/generate", &body).expect("POST /generate");
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["meta_info"].clone()
}

/// Cache-aware routing of a shared-prefix workload: the first request of each of four groups
/// is sent at once (long outputs, so all four are in flight and the router's miss path, the
/// least loaded worker, spreads them); then each group's later requests, one group at a time.
/// Each group's requests land on one worker, told from the workers' own counters
/// (`sglang:num_requests_total` moves on one worker only, by the group's count, and that
/// worker's `sglang:cached_tokens_total` by what the requests report as cached); both workers
/// hold groups.
#[test]
fn router_cache_aware_keeps_each_shared_prefix_group_on_one_worker() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let _turn = exclusive();
    let marker = marker("router-cache");
    let d = deploy(&tier, "cache_aware", &marker);
    let groups: Vec<String> = (0..4).map(group_prefix).collect();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for g in &groups {
            let base = d.router.base.as_str();
            s.spawn(move || generate(base, &format!("{g} first"), 200));
        }
    });
    let later = 3;
    let mut owner = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let before = requests_per_worker(&d);
        let cached_before: Vec<f64> = d
            .workers
            .iter()
            .map(|w| counter(&w.base, "sglang:cached_tokens_total"))
            .collect();
        let mut cached = 0.0;
        for k in 0..later {
            let m = generate(&d.router.base, &format!("{g} question {k}"), 2);
            let (hit, prompt) = (
                m["cached_tokens"].as_f64().unwrap(),
                m["prompt_tokens"].as_f64().unwrap(),
            );
            assert!(
                hit >= 0.9 * prompt,
                "group {i} request {k}: the worker it reached had the group's prefix: {m}"
            );
            cached += hit;
        }
        let moved: Vec<f64> = requests_per_worker(&d)
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .collect();
        let on: Vec<usize> = (0..moved.len()).filter(|w| moved[*w] > 0.0).collect();
        assert_eq!(
            on.len(),
            1,
            "group {i}'s requests on one worker, by the workers' counters: {moved:?}"
        );
        let w = on[0];
        assert_eq!(moved[w], later as f64, "group {i}: {moved:?}");
        let hits = counter(&d.workers[w].base, "sglang:cached_tokens_total") - cached_before[w];
        assert_eq!(
            hits, cached,
            "group {i}: worker {w}'s own cached-token count agrees with its responses"
        );
        owner.push(w);
    }
    assert!(
        owner.contains(&0) && owner.contains(&1),
        "the four groups are spread over both workers (their first requests were in flight together): {owner:?}"
    );
    eprintln!(
        "cache-aware through the real router: groups on workers {owner:?} in {:.1?}",
        t0.elapsed()
    );
    d.stop(&marker);
}

/// One of two workers killed (SIGKILL) while servebench runs through a round-robin router.
/// Observed with sglang-router 0.3.2: no request fails; the router's sends to the dead worker
/// fail ("Failed to send typed request worker_url=..."), each is retried on the other worker
/// (`--retry-max-retries` 5, backoff from 50 ms), and after 10 failures its circuit breaker
/// (`--cb-failure-threshold` 10) stops sending there; the dead worker stays listed healthy
/// until a health check (every 60 s) says otherwise.
#[test]
fn router_worker_killed_mid_run_is_retried_on_the_other() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let _turn = exclusive();
    let marker = marker("router-kill");
    let d = deploy(&tier, "round_robin", &marker);
    let ws = Workspace::new();
    let requests = 40;
    // ~50 ms a request (32 tokens at ~1.5 ms each), one at a time: ~2 s, killed a third in.
    let spec = ws.write(
        "kill.yaml",
        &format!(
            "name: router-kill\n{}workload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 128, calibrate: false }}\n  output_tokens: 32\nrequests: {requests}\ncache: {{ policy: as-is }}\n",
            through(&d.router.base, &tier)
        ),
    );
    let before = requests_per_worker(&d);
    let t0 = Instant::now();
    let (out, killed_after) = std::thread::scope(|s| {
        let run = s.spawn(|| {
            servebench()
                .arg("run")
                .arg(&spec)
                .arg("--out")
                .arg(ws.path().join("runs"))
                .arg("--quiet")
                .timeout(Duration::from_secs(300))
                .output()
                .expect("run servebench")
        });
        let served = poll_until(Duration::from_secs(60), "a third of the run served", || {
            let n: f64 = requests_per_worker(&d)
                .iter()
                .zip(&before)
                .map(|(a, b)| a - b)
                .sum();
            (n >= requests as f64 / 3.0).then_some(n)
        });
        let pg = nix::unistd::Pid::from_raw(-d.workers[1].pgid());
        nix::sys::signal::kill(pg, nix::sys::signal::Signal::SIGKILL).unwrap();
        (run.join().unwrap(), served)
    });
    let took = t0.elapsed();
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let p = &points[0];
    // One request at a time: the kill lands between two requests (the router retries the
    // next one on the other worker: every request ok, exit 0), or inside one the dead worker
    // was streaming (the router cannot retry a stream it has begun: that one request breaks
    // mid-stream, and the run says so and exits 3, degraded). Both were observed.
    let errors = p["errors"].as_u64().unwrap();
    match errors {
        0 => assert!(out.status.success(), "{}", show(&out)),
        1 => {
            assert_eq!(out.status.code(), Some(3), "{}", show(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("1 of 40 requests failed") && stderr.contains("mid-stream"),
                "the broken stream is named: {stderr}"
            );
            let broken: Vec<serde_json::Value> = read_jsonl(&dir.join("requests.jsonl"))
                .into_iter()
                .filter(|r| !r["error"].is_null())
                .collect();
            assert_eq!(broken.len(), 1, "{broken:?}");
            assert_eq!(broken[0]["error"]["kind"], "reset", "{}", broken[0]);
        }
        n => panic!("{n} requests failed: only the one in flight at the kill may: {p}"),
    }
    assert_eq!(
        p["ok"].as_u64().unwrap(),
        requests - errors,
        "every other request answered, the dead worker's retried on the other: {p}"
    );
    let survivor = counter(&d.workers[0].base, "sglang:num_requests_total") - before[0];
    assert!(
        survivor >= (requests - errors) as f64 - killed_after,
        "the surviving worker served the rest: {survivor} (killed after {killed_after})"
    );
    let log = router_log(&d);
    let dead = &d.workers[1].base;
    let failed_sends = log
        .lines()
        .filter(|l| {
            l.contains("Failed to send typed request") && l.contains(&format!("worker_url={dead}"))
        })
        .count();
    assert!(
        (1..=10).contains(&failed_sends),
        "the router tried the dead worker, and stopped after its circuit breaker's 10 failures: {failed_sends}\n{}",
        tail(&log, 30)
    );
    let listed = http::get(&d.router.base, "/workers").unwrap().json();
    eprintln!(
        "worker killed after {killed_after} requests: {} of {requests} ok in {took:.1?}, {failed_sends} failed sends to it, router's view: {}",
        requests - errors,
        listed["workers"]
            .as_array()
            .map(|ws| ws
                .iter()
                .map(|w| format!("{} healthy={}", w["url"], w["is_healthy"]))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default()
    );
    d.stop(&marker);
}

/// Seconds to the first streamed event of `POST /generate` through `base` (timed by the test
/// client as bytes arrive), and the completion tokens the last chunk counts.
fn streamed_ttft(base: &str, text: &str, max_new_tokens: u64) -> (f64, u64) {
    let body = json!({
        "text": text,
        "stream": true,
        "sampling_params": { "max_new_tokens": max_new_tokens, "ignore_eos": true }
    });
    let r = http::post(base, "/generate", &body).expect("POST /generate");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.done(), "the stream ends with [DONE]: {:?}", r.events);
    let chunks = r.chunks();
    let last = chunks.last().expect("a chunk");
    (
        r.events[0].0,
        last["meta_info"]["completion_tokens"].as_u64().unwrap_or(0),
    )
}

/// Prefill-decode disaggregation through the real router (`--pd-disaggregation --prefill URL
/// BOOTSTRAP_PORT --decode URL --decode URL`): one simulated prefill worker and two decode
/// workers. The router sends each request, `bootstrap_host` (the prefill URL's host),
/// `bootstrap_port` and a random `bootstrap_room` added, to one worker of each role and
/// answers with the decode worker's response. Every request is answered with its token count;
/// the prefill worker's own counters show every prompt prefilled there (one token each, one
/// modelled KV transfer each, of prompt x 128 KiB); the decode workers split the decodes
/// (round robin) and prefill nothing; a repeated prompt is reported cached by the decode
/// worker, as the prefill's radix cache found it; servebench measures through it; and a
/// prefill restarted with 300 ms more `--sim-kv-transfer-latency-ms` makes the streamed TTFT
/// through the router about that much longer.
#[test]
fn router_pd_one_prefill_two_decode_serves_every_request() {
    let Some(tier) = tier(Part::Router) else {
        return;
    };
    let turn = exclusive();
    let marker = marker("router-pd");
    let (prefill_port, bootstrap_port) = (free_port(), free_port());
    let bp = bootstrap_port.to_string();
    let prefill_args = |latency_ms: &'static str| {
        [
            "--disaggregation-mode",
            "prefill",
            "--disaggregation-bootstrap-port",
            bp.as_str(),
            "--sim-kv-transfer-latency-ms",
            latency_ms,
        ]
    };
    let mut prefill = start_worker_with(&tier, &marker, prefill_port, &prefill_args("1"));
    let decode = ["--disaggregation-mode", "decode"];
    let decodes = [
        start_worker_with(&tier, &marker, free_port(), &decode),
        start_worker_with(&tier, &marker, free_port(), &decode),
    ];
    let urls = [
        prefill.base.as_str(),
        decodes[0].base.as_str(),
        decodes[1].base.as_str(),
    ];
    let router = launch_router(
        &tier,
        &[
            "--pd-disaggregation",
            "--prefill",
            urls[0],
            &bp,
            "--decode",
            urls[1],
            "--decode",
            urls[2],
            "--policy",
            "round_robin",
        ],
        &urls,
        &marker,
    );
    let roles: Vec<(String, String)> =
        http::get(&router.base, "/workers").unwrap().json()["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["url"].as_str().unwrap_or("").to_string(),
                    w["worker_type"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
    eprintln!("the PD router's workers: {roles:?}");
    let t0 = Instant::now();
    let requests = 12;
    let max_new = 8;
    let mut prompt_total = 0.0;
    for i in 0..requests {
        let m = generate(&router.base, &group_prefix(i), max_new);
        assert_eq!(m["completion_tokens"], max_new, "request {i}: {m}");
        assert_eq!(
            m["finish_reason"]["type"], "length",
            "request {i} ran to its length: {m}"
        );
        prompt_total += m["prompt_tokens"].as_f64().unwrap();
    }
    // The prefill worker prefilled every prompt and moved every prompt's KV.
    let p = &prefill.base;
    assert_eq!(counter(p, "sglang:num_requests_total"), requests as f64);
    assert_eq!(counter(p, "sglang:prompt_tokens_total"), prompt_total);
    assert_eq!(
        counter(p, "sglang:generation_tokens_total"),
        requests as f64,
        "a prefill worker computes one token a request"
    );
    assert_eq!(
        counter(p, "sglang:kv_transfer_latency_ms_count"),
        requests as f64
    );
    // The fast profile's 131072 bytes of KV a token, in SGLang's MB (2^20 bytes).
    let mb = counter(p, "sglang:kv_transfer_total_mb_sum");
    assert!(
        (mb - prompt_total * 0.125).abs() < 1e-6,
        "{mb} MB moved for {prompt_total} prompt tokens"
    );
    // The decode workers split the decodes and prefilled nothing.
    let decoded: Vec<f64> = decodes
        .iter()
        .map(|d| counter(&d.base, "sglang:num_requests_total"))
        .collect();
    assert_eq!(decoded.iter().sum::<f64>(), requests as f64, "{decoded:?}");
    for n in &decoded {
        assert!(
            (n - requests as f64 / 2.0).abs() <= 1.0,
            "round robin over the decode workers: {decoded:?}"
        );
    }
    let generated: f64 = decodes
        .iter()
        .map(|d| counter(&d.base, "sglang:generation_tokens_total"))
        .sum();
    assert_eq!(generated, (requests * max_new) as f64);
    for d in &decodes {
        assert!(
            !d.log_text().contains("Prefill batch"),
            "a decode worker runs no prefill:\n{}",
            tail(&d.log_text(), 20)
        );
        assert!(counter(&d.base, "sglang:kv_transfer_bootstrap_ms_count") > 0.0);
    }
    assert!(prefill.log_text().contains("Prefill batch"));
    // A repeated prompt: the prefill's radix cache has it, and the decode worker says so.
    let again = generate(&router.base, &group_prefix(0), max_new);
    let (hit, prompt) = (
        again["cached_tokens"].as_f64().unwrap(),
        again["prompt_tokens"].as_f64().unwrap(),
    );
    assert!(hit >= 0.9 * prompt, "{again}");
    // servebench measures through the PD router.
    let ws = Workspace::new();
    let spec = ws.write(
        "pd.yaml",
        &format!(
            "name: router-pd\n{}workload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 128, calibrate: false }}\n  output_tokens: 8\nrequests: 8\ncache: {{ policy: as-is }}\n",
            through(&router.base, &tier)
        ),
    );
    let out = ws.run_in_turn(&spec, &[], &turn);
    assert!(out.status.success(), "{}", show(&out));
    let points = read_jsonl(&run_dir(&out).join("points.jsonl"));
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    assert_eq!(points[0]["ok"], 8, "{}", points[0]);
    // The modelled transfer is in the TTFT: the same prefill with 300 ms more latency.
    let ttft = |base: &str| {
        let runs: Vec<f64> = (0..4)
            .map(|k| {
                let (t, n) = streamed_ttft(base, &format!("ttft probe {k} of a few words"), 4);
                assert_eq!(n, 4);
                t
            })
            .collect();
        runs.iter().sum::<f64>() / runs.len() as f64
    };
    let fast = ttft(&router.base);
    prefill.stop();
    let prefill = start_worker_with(&tier, &marker, prefill_port, &prefill_args("301"));
    let slow = ttft(&router.base);
    let moved = counter(&prefill.base, "sglang:kv_transfer_latency_ms_sum")
        / counter(&prefill.base, "sglang:kv_transfer_latency_ms_count");
    eprintln!(
        "PD through the real router: {requests} requests, decodes split {decoded:?}, {prompt_total} prompt tokens prefilled, {mb} MB moved; streamed TTFT {:.1} ms at 1 ms transfer latency, {:.1} ms at 301 ms (the prefill's own transfer latency {moved:.1} ms) in {:.1?}",
        fast * 1e3,
        slow * 1e3,
        t0.elapsed()
    );
    assert!(fast < 0.2, "TTFT {fast} s with a 1 ms transfer");
    assert!(
        (0.24..0.45).contains(&(slow - fast)),
        "300 ms more transfer latency adds {:.0} ms to the TTFT",
        (slow - fast) * 1e3
    );
    assert!((300.0..320.0).contains(&moved), "{moved}");
    let mut workers = vec![prefill];
    workers.extend(decodes);
    Deployment { workers, router }.stop(&marker);
}
