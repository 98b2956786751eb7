//! The engine's profiler around chosen points (issue 22 item 4): the simulator serves
//! SGLang's `/start_profile` (a `ProfileReq` body) and `/stop_profile`, and vLLM's pair when
//! launched with `--profiler-config`, and writes a small trace of the forward steps it ran;
//! servebench starts it with the measured window, stops it after, and brings the trace into
//! the run directory (here, over SSH, from the host's run directory).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::faulty::flag_kinds;

fn spec(ws: &Workspace, name: &str, server: &str, extra: &str) -> std::path::PathBuf {
    spec_on(ws, name, server, "sglang-generate", extra)
}

fn spec_on(ws: &Workspace, name: &str, server: &str, api: &str, extra: &str) -> std::path::PathBuf {
    ws.write(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nserver:\n{server}\nworkload:\n  api: {api}\n  prompt: {{ kind: repeat, tokens: 64 }}\n  output_tokens: 16\nrequests: 4\n{extra}\n"
        ),
    )
}

const SIM: &str = "  engine: sim\n  model: test-model\n  args: { profile: fast, context-length: 8192 }\n  ready_timeout: 30s";

/// The trace files a point's capture names, read from the run directory.
fn traces(dir: &Path, point: &serde_json::Value) -> Vec<serde_json::Value> {
    point["profiler"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let rel = f["path"]
                .as_str()
                .unwrap_or_else(|| panic!("not copied: {f}"));
            read_json(&dir.join(rel))
        })
        .collect()
}

/// Only the point named is profiled; its capture covers the measured window, and the trace
/// the simulator wrote (one event, the forward steps it ran while capturing) is in the run
/// directory under `profiler/<group>/`, named by SGLang's profile id.
#[test]
fn a_chosen_point_is_profiled_over_its_measured_window_and_its_trace_kept() {
    let ws = Workspace::new();
    let spec = spec(
        &ws,
        "prof",
        SIM,
        "sweep:\n  concurrency: [1, 2]\nprofiler: { points: [p002], activities: [CPU] }",
    );
    let (dir, points) = ws.run_ok(&spec);
    assert!(points[0]["profiler"].is_null(), "{}", points[0]);
    assert!(!flag_kinds(&points[0]).contains(&"profiled".to_string()));
    let p = &points[1];
    let c = &p["profiler"];
    assert_eq!(c["engine"], "sglang", "{c}");
    assert!(c["error"].is_null(), "{c}");
    let (start, stop) = (
        c["started_at"].as_f64().unwrap(),
        c["stopped_at"].as_f64().unwrap(),
    );
    // The window: every measured request was sent after the start answered... or beside it
    // (the start goes beside the first request); all ended before the stop.
    let requests: Vec<_> = read_jsonl(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["point"] == "p002" && r["role"] == "measure")
        .collect();
    assert_eq!(requests.len(), 4);
    let last_end = requests
        .iter()
        .map(|r| r["sent_at"].as_f64().unwrap() + r["e2e_s"].as_f64().unwrap_or(0.0))
        .fold(0.0, f64::max);
    assert!(
        stop >= last_end - 1e-3,
        "stop {stop} before the last end {last_end}"
    );
    assert!(start <= stop);
    let files = c["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{c}");
    let id = c["profile_id"].as_str().unwrap();
    assert_eq!(files[0]["name"], format!("{id}-TP-0.trace.json"));
    assert!(
        files[0]["path"]
            .as_str()
            .unwrap()
            .starts_with(&format!("profiler/{}/", "g1"))
    );
    let trace = &traces(&dir, p)[0];
    let steps = trace["traceEvents"][0]["args"]["forward_steps"]
        .as_u64()
        .unwrap();
    // Four requests of 16 tokens, two at a time: at least 8 decode steps ran in the window.
    assert!(steps >= 8, "{steps} forward steps");
    assert_eq!(
        trace["traceEvents"][0]["args"]["activities"],
        serde_json::json!(["CPU"])
    );
    let kinds = flag_kinds(p);
    assert!(kinds.contains(&"profiled".to_string()), "{kinds:?}");
    assert!(!kinds.contains(&"profile-failed".to_string()), "{kinds:?}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains(files[0]["path"].as_str().unwrap()),
        "the report names the trace"
    );
}

/// `steps:` is SGLang's `num_steps`: the profiler stops itself, SGLang's target being the
/// forward count at the start plus `num_steps` plus one (scheduler_profiler_mixin), and
/// refuses servebench's stop with a 500, which is not a failure.
#[test]
fn steps_stop_the_profiler_by_itself() {
    let ws = Workspace::new();
    let spec = spec(&ws, "steps", SIM, "profiler: { points: all, steps: 3 }");
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    assert!(p["profiler"]["error"].is_null(), "{}", p["profiler"]);
    assert_eq!(p["profiler"]["steps"], 3);
    let trace = &traces(&dir, p)[0];
    assert_eq!(
        trace["traceEvents"][0]["args"]["forward_steps"], 4,
        "{trace}"
    );
    assert!(!flag_kinds(p).contains(&"profile-failed".to_string()));
}

/// vLLM serves `/start_profile` only when launched with a profiler configured: servebench
/// adds `--profiler-config` naming the group's directory, and keeps the trace that appeared.
#[test]
fn vllm_gets_its_profiler_config_at_launch() {
    let ws = Workspace::new();
    let server = "  engine: vllm\n  simulate: true\n  model: test-model\n  args: { profile: fast, max-model-len: 8192 }\n  ready_timeout: 30s";
    let spec = spec_on(
        &ws,
        "vllm-prof",
        server,
        "openai-completions",
        "profiler: { points: all }",
    );
    let (dir, points) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let command = meta["servers"][0]["command"].to_string();
    assert!(command.contains("--profiler-config"), "{command}");
    let p = &points[0];
    assert_eq!(p["profiler"]["engine"], "vllm");
    assert!(p["profiler"]["error"].is_null(), "{}", p["profiler"]);
    let files = p["profiler"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{}", p["profiler"]);
    assert!(
        files[0]["name"]
            .as_str()
            .unwrap()
            .ends_with(".pt.trace.json")
    );
    assert!(
        traces(&dir, p)[0]["traceEvents"][0]["args"]["forward_steps"]
            .as_u64()
            .unwrap()
            > 0
    );
}

/// A vLLM capture in a directory other processes write to too: only vLLM's own trace
/// (`<worker>.<time_ns>.pt.trace.json`, stamped within the capture) is kept; a file another
/// process wrote there meanwhile (one holding a secret, another's old trace) stays put.
#[test]
fn a_vllm_capture_in_a_shared_directory_keeps_only_its_own_traces() {
    let ws = Workspace::new();
    let shared = ws.path().join("shared-traces");
    std::fs::create_dir_all(&shared).unwrap();
    let server = "  engine: vllm\n  simulate: true\n  model: test-model\n  args: { profile: fast, max-model-len: 8192 }\n  ready_timeout: 30s";
    let spec = spec_on(
        &ws,
        "vllm-shared",
        server,
        "openai-completions",
        &format!("profile: {{ points: all, dir: {} }}", shared.display()),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::write(shared.join(format!("other-{i}.secret")), "sk-not-yours");
                // Another process's trace, from long ago.
                let _ = std::fs::write(
                    shared.join(format!(
                        "otherproc.{}.pt.trace.json",
                        1_000_000_000_000_000_000u64 + i
                    )),
                    "{}",
                );
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let (_, points) = ws.run_ok(&spec);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let p = &points[0];
    let files: Vec<&str> = p["profiler"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].starts_with("sim_worker.") && files[0].ends_with(".pt.trace.json"),
        "{files:?}"
    );
}

/// An engine without a profiler endpoint: the point is measured, and says it was not
/// profiled and why; nothing claims a trace.
#[test]
fn an_engine_without_a_profiler_says_so() {
    let ws = Workspace::new();
    let server = "  engine: llama.cpp\n  simulate: true\n  model: test-model.gguf\n  args: { profile: fast }\n  ready_timeout: 30s";
    let spec = spec_on(
        &ws,
        "llama-prof",
        server,
        "openai-completions",
        "profiler: { points: all }",
    );
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    assert_eq!(p["ok"], 4);
    assert!(
        p["profiler"]["error"]
            .as_str()
            .unwrap()
            .contains("no profiler endpoint"),
        "{}",
        p["profiler"]
    );
    let kinds = flag_kinds(p);
    assert!(kinds.contains(&"profile-failed".to_string()), "{kinds:?}");
    assert!(!kinds.contains(&"profiled".to_string()), "{kinds:?}");
    assert!(!dir.join("profiler").exists());
}

/// Over SSH the server writes into the host's run directory; the trace is copied back into
/// this run directory, byte for byte; a directory the server cannot write fails the capture,
/// not the point.
#[test]
fn over_ssh_the_trace_is_copied_back_within_its_budget() {
    let Some(sshd) = crate::sshd::Sshd::start() else {
        return;
    };
    let ws = Workspace::new();
    let host = format!(
        "host:\n  ssh: 127.0.0.1\n  port: {port}\n  identity: {key}\n  known_hosts: {kh}\n  remote_dir: {home}/sb\n",
        port = sshd.port,
        key = sshd.client_key.display(),
        kh = sshd.known_hosts.display(),
        home = sshd.home.display(),
    );
    let server = format!(
        "  engine: sglang\n  launcher: [{bin}, sim]\n  model: test-model\n  args: {{ profile: fast, context-length: 8192 }}\n  ready_timeout: 30s",
        bin = env!("CARGO_BIN_EXE_servebench"),
    );
    let spec_at = |name: &str, profile: &str| {
        ws.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\n{host}server:\n{server}\nworkload:\n  prompt: {{ kind: repeat, tokens: 64 }}\n  output_tokens: 16\nrequests: 4\n{profile}\n"
            ),
        )
    };
    let (dir, points) = ws.run_ok(&spec_at("ssh-prof", "profiler: { points: all }"));
    let p = &points[0];
    assert!(p["profiler"]["error"].is_null(), "{}", p["profiler"]);
    let remote = p["profiler"]["dir"].as_str().unwrap();
    assert!(
        remote.starts_with(&format!("{}/sb", sshd.home.display())),
        "{remote}"
    );
    let files = p["profiler"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{}", p["profiler"]);
    let name = files[0]["name"].as_str().unwrap();
    let copied = std::fs::read(dir.join(files[0]["path"].as_str().unwrap())).unwrap();
    let original = std::fs::read(Path::new(remote).join(name)).unwrap();
    assert_eq!(copied, original);
    assert_eq!(files[0]["bytes"], original.len() as u64);

    // A directory the server cannot create (under a file, so not even as root): its stop
    // fails, and the point says the capture failed while its numbers stand.
    let (_, points) = ws.run_ok(&spec_at(
        "ssh-prof-unwritable",
        "profiler: { points: all, dir: /dev/null/servebench-traces }",
    ));
    let p = &points[0];
    assert_eq!(p["ok"], 4);
    assert!(flag_kinds(p).contains(&"profile-failed".to_string()), "{p}");
    assert!(
        p["profiler"]["error"]
            .as_str()
            .unwrap()
            .contains("/stop_profile failed: 500"),
        "{}",
        p["profiler"]
    );
}

/// `points: [answer]`: after a capacity search, its answer is measured once more with the
/// profiler (`p001-answer`), no probe is profiled, and the search's answer is what it was
/// without the profiler (the extra point is not a probe). The search is the hand-computed
/// one of `search::a_concurrency_search_finds_the_hand_computed_number_of_clients`.
#[test]
fn a_search_answer_is_profiled_after_the_search() {
    let ws = Workspace::new();
    let spec = ws.write(
        "answer.yaml",
        "name: answer\n\
         server:\n  engine: sim\n  model: test-model\n  \
         args: { profile: fast, context-length: 8192, max-running-requests: 2, sim-time-scale: 30 }\n  \
         ready_timeout: 30s\n\
         workload:\n  prompt: { kind: random, tokens: 64, calibrate: false }\n  output_tokens: 8\n\
         requests: 4\n\
         slo: { targets: { e2e_p90: 340ms } }\n\
         search: { over: concurrency, start: 1, max: 64, resolution: 5% }\n\
         profile: { points: [answer] }\n",
    );
    let (dir, points) = ws.run_ok(&spec);
    let s = &read_json(&dir.join("search.json"))["searches"][0];
    assert_eq!(
        (s["capacity"].as_f64(), s["probes"].as_u64()),
        (Some(2.0), Some(4)),
        "{s}"
    );
    let (probes, rest): (Vec<_>, Vec<_>) = points.iter().partition(|p| !p["search"].is_null());
    assert_eq!(probes.len(), 4);
    assert!(
        probes.iter().all(|p| p["profiler"].is_null()),
        "no probe is profiled"
    );
    assert_eq!(rest.len(), 1, "{rest:?}");
    let answer = rest[0];
    assert_eq!(answer["id"], "p001-answer");
    assert_eq!(answer["values"]["concurrency"], 2);
    assert!(
        answer["profiler"]["error"].is_null(),
        "{}",
        answer["profiler"]
    );
    assert_eq!(answer["profiler"]["files"].as_array().unwrap().len(), 1);
    assert!(flag_kinds(answer).contains(&"profiled".to_string()));
}

/// A server servebench attached to (`server.url`) writes where it is told: with
/// `profiler.dir` its trace is found there and copied in; without, it goes to the server's own
/// default directory, which servebench says it did not look in (it never claims a trace).
#[test]
fn an_attached_server_writes_where_profile_dir_says() {
    let ws = Workspace::new();
    let default_dir = ws.path().join("server-default");
    let sim = ExternalSim::start(
        "ext-model",
        &[],
        &[("SGLANG_TORCH_PROFILER_DIR", default_dir.as_path())],
    );
    let spec_with = |name: &str, profile: &str| {
        ws.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nserver:\n  url: {}\n  ready_timeout: 10s\nworkload:\n  prompt: {{ kind: repeat, tokens: 64 }}\n  output_tokens: 8\nrequests: 2\nprofiler: {profile}\n",
                sim.url()
            ),
        )
    };
    let traces = ws.path().join("traces");
    let told = ws.run(&spec_with(
        "told",
        &format!("{{ points: all, dir: {} }}", traces.display()),
    ));
    let untold = ws.run(&spec_with("untold", "{ points: all }"));
    drop(sim);
    assert!(told.status.success(), "{}", show(&told));
    let dir = run_dir(&told);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let files = p["profiler"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{}", p["profiler"]);
    let name = files[0]["name"].as_str().unwrap();
    assert_eq!(
        std::fs::read(dir.join(files[0]["path"].as_str().unwrap())).unwrap(),
        std::fs::read(traces.join(name)).unwrap()
    );

    assert!(untold.status.success(), "{}", show(&untold));
    let p = &read_jsonl(&run_dir(&untold).join("points.jsonl"))[0];
    assert!(
        p["profiler"]["files"].as_array().unwrap().is_empty(),
        "{}",
        p["profiler"]
    );
    let failed: Vec<_> = p["flags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "profile-failed")
        .collect();
    assert_eq!(failed.len(), 1, "{p}");
    assert!(
        failed[0]["message"]
            .as_str()
            .unwrap()
            .contains("not looked for"),
        "{p}"
    );
    // The server did write it, where its own default says.
    assert_eq!(std::fs::read_dir(&default_dir).unwrap().count(), 1);
}

/// Ctrl-C while `/stop_profile` is slow (a simulator whose stop takes 60 s): the stop is
/// sent and given a few seconds, not `profiler.stop_timeout`'s ten minutes; the run ends
/// interrupted, what was measured stays on disk, and the capture is recorded as cut short by
/// the interrupt: no trace is looked for, none is claimed on the console or in the report.
#[test]
fn ctrl_c_during_a_slow_profiler_stop_does_not_wait_for_it() {
    let _turn = exclusive();
    let ws = Workspace::new();
    let fast = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/sim/profiles/fast.yaml"),
    )
    .unwrap();
    let profile = ws.write(
        "slow-stop-profile.yaml",
        &format!("{fast}\nprofiler_stop_ms: 60000\n"),
    );
    let server = format!(
        "  engine: sim\n  model: test-model\n  args: {{ profile: {}, context-length: 8192 }}\n  ready_timeout: 30s",
        profile.display()
    );
    let spec = spec(
        &ws,
        "slow-stop",
        &server,
        "sweep:\n  concurrency: [1, 2]\nprofiler: { points: [p001] }",
    );
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The profiled point's four measured requests are on disk: its window closed and the
    // stop is (about to be) waiting on the simulator.
    let dir = poll_until(Duration::from_secs(60), "p001's requests", || {
        if child.try_wait().unwrap().is_some() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("the run ended before Ctrl-C: {err}");
        }
        let base = ws.path().join("runs").join("slow-stop");
        let dir = std::fs::read_dir(base).ok()?.flatten().next()?.path();
        let text = std::fs::read_to_string(dir.join("requests.jsonl")).ok()?;
        (text.lines().count() >= 4).then_some(dir)
    });
    let sent = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    // Well under the simulator's 60 s, with room for a loaded machine's server stop and report.
    while child.try_wait().unwrap().is_none() {
        if sent.elapsed() > Duration::from_secs(40) {
            let _ = child.kill();
            panic!("the run still waits {:?} after Ctrl-C", sent.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("run incomplete: interrupted by SIGINT (Ctrl-C)"),
        "{stderr}"
    );

    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 1, "p002 never ran: {points:?}");
    let p = &points[0];
    assert_eq!(p["ok"], 4, "what was measured is kept: {p}");
    let measured = read_jsonl(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["point"] == "p001" && r["role"] == "measure")
        .count();
    assert_eq!(measured, 4);
    let c = &p["profiler"];
    assert_eq!(
        c["error"],
        "interrupted by SIGINT (Ctrl-C): /stop_profile did not answer within 5 s of it, so the capture was given up (its traces, if any, are not looked for)",
        "{c}"
    );
    assert!(c["stopped_at"].is_null(), "{c}");
    assert_eq!(c["files"], serde_json::json!([]), "{c}");
    assert!(flag_kinds(p).contains(&"profile-failed".to_string()), "{p}");
    assert!(!dir.join("profiler").exists());
    assert!(!stderr.contains("profiled: "), "{stderr}");
    assert!(
        stderr.contains("⚠ profile-failed: interrupted by SIGINT (Ctrl-C): /stop_profile"),
        "{stderr}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("| not captured: interrupted by SIGINT (Ctrl-C): /stop_profile"),
        "{report}"
    );
    assert!(!report.contains(&format!("profiler/{}/", "g1")), "{report}");
}
