//! servebench against the real SGLang 0.5.23 server on CPU, the way users run it.
//!
//! The tests named `attached_*` share one server the tests started ([`with_sglang`]) and point
//! servebench at it with `server.url`; the `launched_*` ones let servebench launch SGLang
//! itself (`engine: sglang`, `launcher:` the tier's python, the CPU flags and environment).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::common::*;

/// `server:` for the shared server at `s`.
fn attached(s: &RealServer, tier: &Tier) -> String {
    format!(
        "server:\n  engine: sglang\n  url: {}\n  model: {}\n",
        s.base,
        tier.model_hf().display()
    )
}

/// `server:` launching the tier's SGLang with `extra` flags (YAML `key: value` lines) and the
/// environment marker `marker`.
pub fn launched(tier: &Tier, standin_log: &Path, marker: &str, extra: &str) -> String {
    launched_model(tier, &tier.model_hf(), standin_log, marker, extra)
}

/// [`launched`], serving the model at `model`.
pub fn launched_model(
    tier: &Tier,
    model: &Path,
    standin_log: &Path,
    marker: &str,
    extra: &str,
) -> String {
    let env: Vec<String> = sglang_env(tier, standin_log, marker)
        .into_iter()
        .map(|(k, v)| format!("    {k}: \"{v}\"\n"))
        .collect();
    let args: String = SGLANG_CPU_ARGS
        .iter()
        .map(|(k, v)| format!("    {k}: {v}\n"))
        .collect();
    format!(
        "server:\n  engine: sglang\n  launcher: [{}, -m, sglang.launch_server]\n  model: {}\n  ready_timeout: 4m\n  env:\n{}  args:\n{}{}",
        tier.python().display(),
        model.display(),
        env.concat(),
        args,
        extra
    )
}

/// The flags of a point other than timing noise.
fn doubts(p: &Value) -> Vec<String> {
    validity_flags(p)
        .iter()
        .filter(|f| f["kind"] != "itl-per-chunk")
        .map(|f| f["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

fn kinds(p: &Value) -> Vec<String> {
    p["flags"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["kind"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn stat(p: &Value, metric: &str, s: &str) -> f64 {
    p["metrics"][metric][s]
        .as_f64()
        .unwrap_or_else(|| panic!("{metric}.{s} missing: {}", p["metrics"]))
}

/// Runs `spec` (a long timeout: real servers are slower than the simulator). The caller holds
/// the turn (inside [`with_sglang`], or the [`SglangSlot`]'s).
pub fn run(ws: &Workspace, spec: &Path) -> std::process::Output {
    servebench()
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .timeout(Duration::from_secs(600))
        .output()
        .expect("run servebench")
}

pub fn run_ok(ws: &Workspace, spec: &Path) -> (PathBuf, Vec<Value>) {
    let out = run(ws, spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    (dir, points)
}

/// Cold (nonce + flush), cold without the nonce, warm and as-is against the real radix
/// cache: servebench's verification agrees with what SGLang's `cached_tokens` says.
#[test]
fn attached_cache_policies_are_verified_by_the_real_radix_cache() {
    with_sglang(|tier, s| {
        let ws = Workspace::new();
        let workload = "workload:\n  api: sglang-generate\n  prompt: { kind: repeat, tokens: 256, calibrate: false }\n  output_tokens: 4\nrequests: 4\n";
        let server = attached(s, tier);
        // Cold with the nonce: every request pays a full prefill, nothing is flagged.
        let spec = ws.write(
            "cold.yaml",
            &format!("name: cold\n{server}{workload}cache: {{ policy: cold, verify: true }}\n"),
        );
        let (dir, points) = run_ok(&ws, &spec);
        let p = &points[0];
        assert_eq!(p["status"], "ok", "{p}");
        assert!(doubts(p).is_empty(), "{p}");
        // At most the BOS token the tokenizer puts before the nonce: SGLang's radix cache
        // matches it once an earlier request of the point left it (seen: 0 or 1 per request).
        // Nothing after it: the point's 4 nonces open with 4 different characters, so with 4
        // different tokens (random openings shared one now and then: 2 cached, a flaky CI).
        assert!(stat(p, "cached_tokens", "max") <= 1.0, "{p}");
        let meta = read_json(&dir.join("meta.json"));
        let surface = &meta["servers"][0]["surface"];
        assert_eq!(
            surface["cache_reset"]["kind"], "flush-cache",
            "the real server's /flush_cache is found: {surface}"
        );
        // Cold without the nonce: the same prompt again hits the radix cache; verification
        // sees it in SGLang's own cached_tokens and excludes those requests.
        let spec = ws.write(
            "nononce.yaml",
            &format!(
                "name: nononce\n{server}{workload}cache: {{ policy: cold, verify: true, nonce: false }}\n"
            ),
        );
        let (_, points) = run_ok(&ws, &spec);
        let p = &points[0];
        assert!(
            kinds(p).contains(&"cold-cache-hit".to_string()),
            "the real radix cache served the repeated prompt: {p}"
        );
        // Warm: each prompt primed, then measured from the cache.
        let spec = ws.write(
            "warm.yaml",
            &format!("name: warm\n{server}{workload}cache: {{ policy: warm, verify: true }}\n"),
        );
        let (_, points) = run_ok(&ws, &spec);
        let p = &points[0];
        assert!(doubts(p).is_empty(), "{p}");
        assert!(
            stat(p, "cached_tokens", "min") >= 200.0,
            "warm requests are served from the cache: {p}"
        );
        // As-is: nothing done, the hits reported.
        let spec = ws.write(
            "asis.yaml",
            &format!("name: asis\n{server}{workload}cache: {{ policy: as-is, verify: true }}\n"),
        );
        let (_, points) = run_ok(&ws, &spec);
        assert!(
            kinds(&points[0]).contains(&"cache-hits".to_string()),
            "{}",
            points[0]
        );
    });
}

/// Shared prefixes: the real radix cache gives every request of a group the hit servebench
/// expects from its group (no `prefix-cache-miss`, no `unexpected-cache-hit`).
#[test]
fn attached_shared_prefix_hits_are_what_servebench_expects() {
    with_sglang(|tier, s| {
        let ws = Workspace::new();
        let spec = ws.write(
            "prefix.yaml",
            &format!(
                "name: prefix\n{}workload:\n  api: sglang-generate\n  prompt: {{ kind: shared-prefix, groups: 2, prefix_tokens: 512, suffix_tokens: 128, seed: 1 }}\n  output_tokens: 4\ncache: {{ policy: cold, verify: true }}\nrequests: 8\n",
                attached(s, tier)
            ),
        );
        let (dir, points) = run_ok(&ws, &spec);
        let p = &points[0];
        assert_eq!(p["status"], "ok", "{p}");
        assert!(doubts(p).is_empty(), "{p}");
        let mut records = read_jsonl(&dir.join("requests.jsonl"));
        records.sort_by(|a, b| {
            a["sent_at"]
                .as_f64()
                .partial_cmp(&b["sent_at"].as_f64())
                .unwrap()
        });
        let mut hits = 0;
        let mut seen = std::collections::HashSet::new();
        for r in &records {
            // The first request of a group has nothing before it to hit (one at a time here,
            // so every later one starts after an earlier one's prefill ended).
            if seen.insert(r["share"]["group"].as_u64()) {
                continue;
            }
            let expected = r["share"]["shared_tokens"].as_u64();
            let cached = r["cached_tokens"].as_u64().unwrap();
            if let Some(e) = expected.filter(|e| *e > 0) {
                assert!(cached >= e, "expected {e} cached, got {cached}: {r}");
                hits += 1;
            }
        }
        assert!(hits >= 4, "later requests of each group hit: {records:?}");
    });
}

/// Calibration counts prompt tokens with the real tokenizer: the prompt lands on the length
/// asked for, as SGLang itself counts it.
#[test]
fn attached_calibration_uses_the_real_tokenizer() {
    with_sglang(|tier, s| {
        let ws = Workspace::new();
        let spec = ws.write(
            "calib.yaml",
            &format!(
                "name: calib\n{}workload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 300 }}\n  output_tokens: 4\nrequests: 3\n",
                attached(s, tier)
            ),
        );
        let (dir, points) = run_ok(&ws, &spec);
        let p = &points[0];
        assert!(doubts(p).is_empty(), "{p}");
        let prompt = stat(p, "prompt_tokens", "mean");
        assert!(
            (prompt - 300.0).abs() <= 300.0 * 0.03,
            "calibrated to 300 (+-3%) as SGLang counts: {prompt}"
        );
        assert!(!p["calibration"].is_null(), "{p}");
        let records = read_jsonl(&dir.join("requests.jsonl"));
        assert!(
            records
                .iter()
                .all(|r| r["prompt_tokens"].as_u64().is_some())
        );
    });
}

/// Streaming on the three APIs: tokens are counted from the server's `completion_tokens`
/// (SGLang merges tokens into fewer chunks when its streamer is behind), every request gets
/// the output asked for, and the usage chunk is read on the OpenAI APIs.
#[test]
fn attached_streaming_on_all_three_apis_counts_the_servers_tokens() {
    with_sglang(|tier, s| {
        let ws = Workspace::new();
        let spec = ws.write(
            "apis.yaml",
            &format!(
                "name: apis\n{}workload:\n  prompt: {{ kind: repeat, tokens: 128, calibrate: false }}\n  output_tokens: 24\nsweep:\n  workload.api: [sglang-generate, openai-completions, openai-chat]\nrequests: 3\n",
                attached(s, tier)
            ),
        );
        let (dir, points) = run_ok(&ws, &spec);
        assert_eq!(points.len(), 3);
        for p in &points {
            assert_eq!(p["status"], "ok", "{p}");
            // SGLang's OpenAI APIs report no cached tokens without --enable-cache-report:
            // servebench says the cache went unverified there, rightly.
            let d: Vec<String> = doubts(p)
                .into_iter()
                .filter(|k| k != "cache-unverified")
                .collect();
            assert!(d.is_empty(), "{p}");
            assert_eq!(stat(p, "completion_tokens", "mean"), 24.0, "{p}");
        }
        for r in read_jsonl(&dir.join("requests.jsonl")) {
            assert_eq!(r["completion_tokens"], 24, "{r}");
            let chunk_tokens: u64 = r["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["tokens"].as_u64().unwrap())
                .sum();
            assert_eq!(
                chunk_tokens, 24,
                "the chunks add up to the server's count: {r}"
            );
            let chunks = r["chunks"].as_array().unwrap().len();
            assert!(chunks >= 2, "{r}");
            assert!(r["error"].is_null(), "{r}");
            assert_eq!(r["finish_reason"], "length", "{r}");
        }
    });
}

/// The real profiler: SGLang 0.5.23 takes servebench's `ProfileReq` body (profile id,
/// CPU activity, `num_steps`, output dir), stops itself after the steps, refuses the stop
/// that follows with its 500 (not a failure), and leaves a torch trace named by the profile
/// id; servebench copies it into the run directory, a real gzip of Chrome trace JSON.
#[test]
fn attached_profiler_capture_leaves_sglangs_own_trace() {
    with_sglang(|tier, s| {
        let ws = Workspace::new();
        let traces = ws.path().join("traces");
        let spec = ws.write(
            "prof.yaml",
            &format!(
                "name: prof\n{}workload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 8\nrequests: 2\nprofile: {{ points: all, steps: 3, activities: [CPU], dir: {} }}\n",
                attached(s, tier),
                traces.display()
            ),
        );
        let (dir, points) = run_ok(&ws, &spec);
        let p = &points[0];
        assert_eq!(p["status"], "ok", "{p}");
        let c = &p["profiler"];
        assert!(c["error"].is_null(), "{c}");
        assert!(kinds(p).contains(&"profiled".to_string()), "{p}");
        assert!(!kinds(p).contains(&"profile-failed".to_string()), "{p}");
        let files = c["files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "{c}");
        let name = files[0]["name"].as_str().unwrap();
        let id = c["profile_id"].as_str().unwrap();
        assert_eq!(
            name,
            format!("{id}-TP-0.trace.json.gz"),
            "SGLang's own name"
        );
        let bytes = std::fs::read(dir.join(files[0]["path"].as_str().unwrap())).unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "a gzip file");
        assert_eq!(bytes, std::fs::read(traces.join(name)).unwrap());
    });
}

/// An open-loop rate sweep and a small capacity search against the real server.
#[test]
fn attached_rate_sweep_and_capacity_search_run_on_the_real_server() {
    with_sglang(|tier, s| {
        let ws = Workspace::new();
        let base = format!(
            "{}workload:\n  prompt: {{ kind: random, tokens: 64, calibrate: false }}\n  output_tokens: 8\ncache: {{ policy: cold, verify: true }}\nload: {{ kind: rate, rate: 2, arrival: poisson, seed: 1 }}\nwarmup: {{ requests: 2 }}\nstop: {{ requests: 12, duration: 30s }}\n",
            attached(s, tier)
        );
        let spec = ws.write(
            "rates.yaml",
            &format!("name: rates\n{base}sweep:\n  load.rate: [2, 8]\n"),
        );
        let (_, points) = run_ok(&ws, &spec);
        assert_eq!(points.len(), 2);
        for p in &points {
            assert_eq!(p["status"], "ok", "{p}");
            assert!(p["ok"].as_u64().unwrap() >= 12, "{p}");
            assert!(doubts(p).iter().all(|k| k == "client-limited"), "{p}");
        }
        let spec = ws.write(
            "capacity.yaml",
            &format!(
                "name: capacity\n{base}slo: {{ ttft: 2s, tpot: 500ms, targets: {{ ttft_p99: 2s }} }}\nsearch: {{ over: load.rate, start: 4, max: 16, resolution: 50% }}\n"
            ),
        );
        let out = run(&ws, &spec);
        assert!(out.status.success(), "{}", show(&out));
        let dir = run_dir(&out);
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(report.to_lowercase().contains("capacity"), "{report}");
    });
}

/// Two-point with and without the flush: without it the second request of each pair hits
/// the radix cache (499 of 500 tokens here too) and servebench says "cache reuse suspected"
/// instead of printing the founding NaN; with it the decode speed is a number.
#[test]
fn attached_two_point_reproduces_the_founding_nan_without_the_flush() {
    with_sglang(|tier, s| {
        let ws = Workspace::new();
        let body = |policy: &str| {
            format!(
                "{}workload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 500, calibrate: false }}\n  output_tokens: 17\ncache: {{ policy: {policy}, verify: true }}\nmethod: {{ kind: two-point, a: 1, b: 17 }}\nrequests: 2\n",
                attached(s, tier)
            )
        };
        let spec = ws.write("naive.yaml", &format!("name: naive\n{}", body("as-is")));
        let (dir, points) = run_ok(&ws, &spec);
        let p = &points[0];
        assert!(
            kinds(p).contains(&"cache-reuse-suspected".to_string()),
            "{p}"
        );
        assert!(p["metrics"].get("decode_tok_s").is_none(), "{p}");
        let records = read_jsonl(&dir.join("requests.jsonl"));
        let most_cached = records
            .iter()
            .filter_map(|r| r["cached_tokens"].as_u64())
            .max()
            .unwrap();
        let prompt = records[0]["prompt_tokens"].as_u64().unwrap();
        assert!(
            most_cached + 1 >= prompt,
            "the second request found all but the last prompt token cached: {most_cached} of {prompt}"
        );
        let spec = ws.write("flushed.yaml", &format!("name: flushed\n{}", body("cold")));
        let (_, points) = run_ok(&ws, &spec);
        let p = &points[0];
        assert!(doubts(p).is_empty(), "{p}");
        assert!(stat(p, "decode_tok_s", "mean") > 0.0, "{p}");
    });
}

/// A prompt over the context length: SGLang's own 400 and message, recorded per request,
/// and the point fails (a run where points failed does not exit 0).
#[test]
fn attached_too_long_prompt_gets_sglangs_own_400() {
    with_sglang(|tier, s| {
        let direct = http::post(
            &s.base,
            "/generate",
            &serde_json::json!({"input_ids": vec![5; 5000], "sampling_params": {"max_new_tokens": 4}}),
        )
        .unwrap();
        assert_eq!(direct.status, 400, "{direct:?}");
        let ws = Workspace::new();
        let spec = ws.write(
            "long.yaml",
            &format!(
                "name: long\n{}workload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 6000, calibrate: false }}\n  output_tokens: 4\nrequests: 2\n",
                attached(s, tier)
            ),
        );
        let out = run(&ws, &spec);
        assert!(!out.status.success(), "{}", show(&out));
        let dir = run_dir(&out);
        let records = read_jsonl(&dir.join("requests.jsonl"));
        let error = records[0]["error"].to_string();
        assert!(error.contains("400"), "{error}");
        assert!(
            error.contains("context length") || error.contains("longer than"),
            "SGLang's own words are kept: {error}"
        );
    });
}

/// servebench launches SGLang itself (a flag sweep, so two launches in two groups), with
/// `/metrics`: readiness, the server's view, teardown of all three processes, no kernel
/// called. The report's render depends on the NaN fix (`sglang:fwd_occupancy`).
#[test]
fn launched_flag_sweep_metrics_and_teardown() {
    let Some(slot) = sglang_slot() else { return };
    let ws = Workspace::new();
    let standin = ws.path().join("sgl_kernel.log");
    let mark = marker("launch");
    let spec = ws.write(
        "launch.yaml",
        &format!(
            "name: launch\n{}    enable-metrics: true\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 128 }}\n  output_tokens: 8\ncache: {{ policy: cold, verify: true }}\nsweep:\n  server.args.max-total-tokens: [32768, 65536]\nrequests: 4\n",
            launched(&slot.tier, &standin, &mark, "")
        ),
    );
    let out = run(&ws, &spec);
    let dir = run_dir(&out);
    // Teardown first: whatever else failed, nothing may be left.
    let left = live_with_marker(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
    assert_no_kernel_called(&standin);
    let lookups = std::fs::read_to_string(&standin).unwrap_or_default();
    assert!(
        lookups.contains("import sgl_kernel"),
        "the stand-in was used: {lookups}"
    );
    let meta = read_json(&dir.join("meta.json"));
    let servers = meta["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2, "one launch per flag value: {meta}");
    for (s, tokens) in servers.iter().zip(["32768", "65536"]) {
        assert_eq!(s["stopped"], true, "{s}");
        let cmd = s["command"].to_string();
        assert!(cmd.contains("sglang.launch_server"), "{cmd}");
        assert!(cmd.contains(tokens), "{cmd}");
        assert!(s["outcome"].as_str().unwrap().contains("gone"), "{s}");
        assert_eq!(
            s["server_info"]["max_total_num_tokens"].as_u64(),
            Some(tokens.parse().unwrap()),
            "the real server took the flag: {}",
            s["server_info"]
        );
    }
    let log = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
    assert!(
        log.contains("The server is fired up and ready to roll!"),
        "{log}"
    );
    assert!(out.status.success(), "{}", show(&out));
    let points = read_jsonl(&dir.join("points.jsonl"));
    for p in &points {
        assert_eq!(p["status"], "ok", "{p}");
        assert!(doubts(p).is_empty(), "server-disagrees or worse: {p}");
        assert!(!p["server"].is_null(), "the server's own view: {p}");
        // SGLang 0.5.23 labels its cached tokens by the tier that served them
        // (`cache_source`): without HiCache, the device's, and the split adds up to the total.
        let v = &p["server"];
        let cached = v["cached_tokens"].as_f64().unwrap_or(0.0);
        let tiers = v["cached_by_tier"].as_object().cloned().unwrap_or_default();
        match cached > 0.0 {
            true => {
                assert_eq!(tiers.keys().collect::<Vec<_>>(), ["device"], "{v}");
                assert_eq!(tiers["device"].as_f64(), Some(cached), "{v}");
            }
            false => assert!(tiers.is_empty(), "{v}"),
        }
    }
    // Fails until the NaN metrics fix is merged: the report must render.
    let report = std::fs::read_to_string(dir.join("report.md"))
        .expect("report.md renders with SGLang's NaN sglang:fwd_occupancy");
    assert!(report.contains("launch"), "{report}");
}

/// A flag value SGLang refuses (argparse's choices): SGLang's own exit and message in the
/// report, the run fails, nothing left behind.
#[test]
fn launched_bad_flag_fails_with_sglangs_own_message() {
    let Some(slot) = sglang_slot() else { return };
    let ws = Workspace::new();
    let standin = ws.path().join("sgl_kernel.log");
    let mark = marker("badflag");
    let server = launched(&slot.tier, &standin, &mark, "").replace(
        "attention-backend: torch_native",
        "attention-backend: no-such-backend",
    );
    let spec = ws.write(
        "bad.yaml",
        &format!(
            "name: bad\n{server}workload:\n  prompt: {{ kind: repeat, tokens: 64 }}\n  output_tokens: 4\nrequests: 1\n"
        ),
    );
    let out = run(&ws, &spec);
    assert!(!out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap_or_default();
    let meta = read_json(&dir.join("meta.json"));
    let said = format!("{}\n{}\n{meta}", show(&out), report);
    assert!(
        said.contains("invalid choice: 'no-such-backend'"),
        "SGLang's own argparse message is shown: {said}"
    );
    assert!(
        said.contains("startup-error") || said.contains("rejected its arguments"),
        "{said}"
    );
    let left = live_with_marker(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The server killed (SIGKILL to its launcher process) mid-point: the point fails as a
/// crash, the run exits non-zero, and none of SGLang's three processes survives.
#[test]
fn launched_server_killed_mid_point_then_ctrl_c_and_down() {
    let Some(slot) = sglang_slot() else { return };
    let ws = Workspace::new();
    let standin = ws.path().join("sgl_kernel.log");
    // Killed outright mid-point, each on a fresh launch: the group's leader (`servebench
    // supervise`, which relays SGLang's log), then SGLang's own launcher (tokenizer manager and
    // HTTP front, the supervisor's child). Either way nothing of SGLang is left serving, and
    // the run does not wait out the request timeout on requests that cannot finish.
    for victim in ["supervisor", "launcher"] {
        let name = format!("killed-{victim}");
        let mark = marker(&name);
        let spec = ws.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\n{}workload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 64, calibrate: false }}\n  output_tokens: 64\nrequests: 400\nrequest_timeout: 10m\n",
                launched(&slot.tier, &standin, &mark, "")
            ),
        );
        let runner = std::process::Command::new(assert_cmd::cargo::cargo_bin("servebench"))
            .arg("run")
            .arg(&spec)
            .arg("--out")
            .arg(ws.path().join("runs"))
            .arg("--quiet")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let requests = wait_for_requests(&ws, &name, 2);
        let dir = requests.parent().unwrap().to_path_buf();
        let meta = read_json(&dir.join("meta.json"));
        let pgid = meta["servers"][0]["pgid"].as_i64().unwrap() as i32;
        let procs = processes(|p| p.pgid == pgid && !p.zombie);
        assert!(
            procs.len() >= 4,
            "the supervisor and SGLang's three processes: {procs:?}"
        );
        let supervisor = procs
            .iter()
            .find(|p| p.pid == pgid)
            .unwrap_or_else(|| panic!("no group leader: {procs:?}"));
        assert!(
            supervisor.cmdline.contains(" supervise "),
            "the leader is servebench supervise: {supervisor:?}"
        );
        let launcher = procs
            .iter()
            .find(|p| p.ppid == pgid)
            .unwrap_or_else(|| panic!("no child of the supervisor: {procs:?}"));
        assert!(
            launcher.cmdline.contains("sglang"),
            "the supervisor's child is SGLang's launcher: {launcher:?}"
        );
        let pid = if victim == "supervisor" {
            pgid
        } else {
            launcher.pid
        };
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let killed = std::time::Instant::now();
        poll_until(
            Duration::from_secs(20),
            &format!("{victim} killed: SGLang's processes outlive it"),
            || live_with_marker(&mark).is_empty().then_some(()),
        );
        let out = runner.wait_with_output().unwrap();
        assert!(
            killed.elapsed() < Duration::from_secs(60),
            "{victim} killed: the run waited {:?} on requests that could not finish",
            killed.elapsed()
        );
        assert!(!out.status.success(), "{}", show(&out));
        let points = read_jsonl(&dir.join("points.jsonl"));
        assert!(
            kinds(&points[0]).contains(&"server-crashed".to_string()),
            "{}",
            points[0]
        );
    }

    // Ctrl-C mid-point on a fresh launch: stopped, partial report, nothing left; `down`
    // then finds the group already gone.
    let mark = marker("ctrlc");
    let spec = ws.write(
        "ctrlc.yaml",
        &format!(
            "name: ctrlc\n{}workload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 64, calibrate: false }}\n  output_tokens: 64\nrequests: 400\n",
            launched(&slot.tier, &standin, &mark, "")
        ),
    );
    let runner = std::process::Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let requests = wait_for_requests(&ws, "ctrlc", 2);
    let dir = requests.parent().unwrap().to_path_buf();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = runner.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let left = live_with_marker(&mark);
    assert!(left.is_empty(), "left behind after Ctrl-C: {left:?}");
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "incomplete", "{meta}");
    assert!(
        meta["servers"][0]["outcome"]
            .as_str()
            .unwrap()
            .contains("gone"),
        "{meta}"
    );
    let down = servebench().arg("down").arg(&dir).output().unwrap();
    assert!(down.status.success(), "{}", show(&down));
    assert!(
        String::from_utf8_lossy(&down.stdout).contains("already gone"),
        "{}",
        show(&down)
    );
    assert_no_kernel_called(&standin);
}

/// Waits for `n` request records of run `name` under `ws`; the requests.jsonl path.
fn wait_for_requests(ws: &Workspace, name: &str, n: usize) -> PathBuf {
    poll_until(Duration::from_secs(300), "no requests recorded", || {
        let dir = std::fs::read_dir(ws.path().join("runs").join(name))
            .ok()?
            .next()?
            .ok()?
            .path();
        let f = dir.join("requests.jsonl");
        std::fs::read_to_string(&f)
            .ok()
            .filter(|t| t.lines().count() >= n)
            .map(|_| f)
    })
}

/// A slice of the published kv-cache-tester corpus (`tests/fixtures/kv-cache-tester`,
/// Apache-2.0) replayed on the real SGLang: its server hits meet the trace's theoretical hits
/// within a block, in the server's own tokens, and nothing is flagged an unexpected hit. The
/// tier's model holds 4,096 positions and the session's turns 9.9k-11k tokens, so the slice is
/// scaled by four: `in` divided by 4 and blocks of 16 tokens instead of 64 (each turn keeps
/// its recorded blocks and whole-block hashing, `floor(in / 64) == floor((in / 4) / 16)`), and
/// answers cut to 8 tokens, which the next turn's prompt does not carry anyway.
///
/// This test found the gap it now holds closed: in this 512-token vocabulary only 2 of the
/// runner's 117 words are one token, so blocks were sized in characters and ran 4.0-4.7% long
/// in SGLang's tokens, each hit 104-114 tokens over its theoretical one (4 of 5 turns flagged
/// `unexpected-cache-hit`); single letters, one token each there, now make the blocks exact.
#[test]
fn attached_published_agent_session_hits_meet_the_trace_within_a_block() {
    with_sglang(|tier, s| {
        let ws = Workspace::new();
        let published = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/kv-cache-tester/traces/trace_0538.json");
        let mut session: Value =
            serde_json::from_str(&std::fs::read_to_string(published).unwrap()).unwrap();
        session["block_size"] = 16.into();
        for r in session["requests"].as_array_mut().unwrap() {
            let (inp, out) = (r["in"].as_u64().unwrap(), r["out"].as_u64().unwrap());
            r["in"] = (inp / 4).into();
            r["out"] = out.min(8).into();
        }
        let trace = ws.write("slice.json", &session.to_string());
        let spec = ws.write(
            "slice.yaml",
            &format!(
                "name: slice\n{}workload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 8\nload:\n  kind: agentic\n  agentic: {{ file: {}, live: 1, think_scale: 0 }}\ncache: {{ policy: cold, verify: true }}\n",
                attached(s, tier),
                trace.display()
            ),
        );
        let (dir, points) = run_ok(&ws, &spec);
        let p = &points[0];
        let t = &p["trace_cache"];
        let tolerance = t["tolerance_tokens"].as_u64().unwrap();
        let records = read_jsonl(&dir.join("requests.jsonl"));
        assert_eq!(records.len(), 5, "the session's five turns");
        let mut within = 0;
        for r in &records {
            assert!(r["error"].is_null(), "{r}");
            let cached = r["cached_tokens"].as_u64().unwrap();
            let theoretical = r["theoretical_cached_tokens"].as_u64().unwrap();
            eprintln!(
                "turn of {} tokens ({} asked): cached {cached}, theoretical {theoretical}",
                r["prompt_tokens"], r["job"]["context_tokens"]
            );
            // Exact in the server's count: every prompt its `in`, every hit its leading blocks
            // and the next block's line break.
            assert_eq!(r["prompt_tokens"], r["job"]["context_tokens"], "{r}");
            assert!(
                (theoretical..=theoretical + 3).contains(&cached),
                "cached {cached}, theoretical {theoretical}: {r}"
            );
            if cached.abs_diff(theoretical) <= tolerance {
                within += 1;
            }
        }
        let kinds = kinds(p);
        assert!(
            !kinds.iter().any(|k| k == "unexpected-cache-hit"),
            "{kinds:?}"
        );
        assert_eq!(within, records.len(), "hits within {tolerance} tokens: {t}");
        assert_eq!(
            (t["above"].as_u64(), t["below"].as_u64()),
            (Some(0), Some(0)),
            "{t}"
        );
    });
}
