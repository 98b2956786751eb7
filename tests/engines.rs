//! Each engine adapter end to end, against the simulator in that engine's mode (`simulate:
//! true` runs `servebench sim --api ENGINE` with the engine's own flags): launch, readiness,
//! identity, the cold-cache reset, a sweep, a crash classified from that engine's log lines,
//! and teardown.

use std::path::Path;

use crate::common::*;

/// The fast profile, crashing out of memory above `oom` new prefill tokens.
fn profile(ws: &Workspace, oom: Option<u64>) -> String {
    let fast = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/sim/profiles/fast.yaml"),
    )
    .unwrap();
    let extra = oom.map_or(String::new(), |n| format!("\noom_prefill_tokens: {n}\n"));
    ws.write("engine-profile.yaml", &format!("{fast}{extra}"))
        .display()
        .to_string()
}

fn servers_gone(meta: &serde_json::Value) {
    for s in meta["servers"].as_array().unwrap() {
        assert_eq!(s["stopped"], true, "{s}");
    }
}

#[test]
fn vllm_is_launched_its_way_reset_through_dev_mode_and_swept() {
    let ws = Workspace::new();
    let profile = profile(&ws, None);
    let spec = ws.write(
        "vllm.yaml",
        &format!(
            "name: vllm\nserver:\n  engine: vllm\n  simulate: true\n  model: Qwen/Qwen3-8B\n  \
             args: {{ max-model-len: 8192, max-num-seqs: 8, enable-prompt-tokens-details: true, profile: {profile} }}\n  \
             env: {{ VLLM_SERVER_DEV_MODE: \"1\" }}\n  ready_timeout: 30s\n\
             workload:\n  api: openai-completions\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 8\n\
             cache: {{ policy: cold, verify: true }}\nsweep: {{ ctx: [512, 2048] }}\nrequests: 3\n"
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let server = &meta["servers"][0];
    // Launched as `vllm serve MODEL`: the model positional, vLLM's flags.
    let cmd: Vec<String> = server["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let joined = cmd.join(" ");
    assert!(
        joined.contains("sim --api vllm Qwen/Qwen3-8B --host 127.0.0.1 --port"),
        "{joined}"
    );
    assert!(joined.contains("--max-model-len 8192"), "{joined}");
    assert_eq!(server["engine"], "vllm (simulated)");
    // Identity and what it offers, as vLLM answers.
    let surface = &server["surface"];
    assert!(
        surface["identity"].to_string().contains("/version"),
        "{surface}"
    );
    assert!(
        surface["version"].as_str().unwrap().starts_with("0.34.0"),
        "{surface}"
    );
    assert_eq!(
        surface["cache_reset"]["kind"], "reset-prefix-cache",
        "{surface}"
    );
    assert_eq!(surface["context_length"], 8192, "{surface}");
    assert_eq!(surface["tokenize"], "prompt", "{surface}");
    assert_eq!(surface["metrics"], true, "{surface}");
    for p in &points {
        assert_eq!(p["status"], "ok", "{p}");
        let doubts: Vec<&serde_json::Value> = p["flags"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| !crate::common::MACHINE_FLAGS.contains(&f["kind"].as_str().unwrap_or("")))
            .collect();
        assert!(doubts.is_empty(), "{p}");
        assert_eq!(p["metrics"]["cached_tokens"]["max"], 0.0, "{p}");
        assert_eq!(p["calibration"]["counted_by"], "tokenize", "{p}");
    }
    let log = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
    assert!(log.contains("Application startup complete."), "{log}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("vllm (simulated)"), "{report}");
    assert!(
        report.contains("cache reset: `/reset_prefix_cache`"),
        "{report}"
    );
    servers_gone(&meta);
}

#[test]
fn vllm_without_dev_mode_has_no_cache_reset_and_says_so() {
    let ws = Workspace::new();
    let profile = profile(&ws, None);
    let spec = ws.write(
        "nodev.yaml",
        &format!(
            "name: nodev\nserver:\n  engine: vllm\n  simulate: true\n  model: m\n  \
             args: {{ max-model-len: 4096, profile: {profile} }}\n  ready_timeout: 30s\n\
             workload:\n  api: openai-completions\n  prompt: {{ kind: repeat, tokens: 256 }}\n  output_tokens: 4\n\
             requests: 2\n"
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let surface = &meta["servers"][0]["surface"];
    assert!(surface["cache_reset"].is_null(), "{surface}");
    assert!(
        surface["notes"]
            .to_string()
            .contains("VLLM_SERVER_DEV_MODE=1"),
        "{surface}"
    );
    // No reset, so nonces keep prompts apart; without --enable-prompt-tokens-details vLLM does
    // not say what it cached, and the point says so rather than claiming a verified cold point.
    let flags = points[0]["flags"].to_string();
    assert!(!flags.contains("flush-failed"), "{flags}");
    assert!(flags.contains("cache-unverified"), "{flags}");
    assert!(flags.contains("--enable-prompt-tokens-details"), "{flags}");
}

#[test]
fn a_vllm_crash_is_classified_from_vllms_own_lines() {
    let ws = Workspace::new();
    let profile = profile(&ws, Some(1500));
    let spec = ws.write(
        "crash.yaml",
        &format!(
            "name: crash\nserver:\n  engine: vllm\n  simulate: true\n  model: m\n  \
             args: {{ max-model-len: 8192, profile: {profile} }}\n  ready_timeout: 30s\n\
             workload:\n  api: openai-completions\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\", calibrate: false }}\n  output_tokens: 4\n\
             sweep: {{ ctx: [256, 4096] }}\nrequests: 1\nexpect:\n  - {{ where: {{ ctx: 4096 }}, failure: out-of-memory }}\n"
        ),
    );
    let out = ws.run_with(&spec, &["--check"]);
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points[1]["failure"], "out-of-memory", "{}", points[1]);
    let flags = points[1]["flags"].to_string();
    assert!(
        flags.contains("--gpu-memory-utilization"),
        "vLLM's hint: {flags}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("failed with out-of-memory, as published"),
        "{}",
        show(&out)
    );
    servers_gone(&read_json(&dir.join("meta.json")));
}

#[test]
fn a_vllm_flag_typo_is_caught_before_anything_starts() {
    let ws = Workspace::new();
    let spec = ws.write(
        "typo.yaml",
        "name: typo\nserver:\n  engine: vllm\n  model: m\n  args: { max-model-lenght: 8192 }\nworkload:\n  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 4\n",
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("vLLM has no flag `max-model-lenght`"),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean `max-model-len`?"), "{stderr}");
    assert!(stderr.contains("typo.yaml:5:"), "{stderr}");
    // A flag newer than the list: a warning, passed through.
    let spec = ws.write(
        "new.yaml",
        "name: new\nserver:\n  engine: vllm\n  model: m\n  args: { a-flag-from-vllm-0-40: 1 }\nworkload:\n  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 4\n",
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: "));
}

#[test]
fn llama_cpp_is_launched_with_short_flags_erased_per_slot_and_swept() {
    let ws = Workspace::new();
    let profile = profile(&ws, None);
    let slots = ws.path().join("slots");
    std::fs::create_dir_all(&slots).unwrap();
    let spec = ws.write(
        "llama.yaml",
        &format!(
            "name: llama\nserver:\n  engine: llama.cpp\n  simulate: true\n  model: models/qwen3-0.6b-q8_0.gguf\n  \
             args: {{ -c: 8192, -np: 2, slot-save-path: {slots}, profile: {profile} }}\n  ready_timeout: 30s\n\
             workload:\n  api: openai-completions\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 8\n\
             cache: {{ policy: cold, verify: true }}\nconcurrency: 2\nsweep: {{ ctx: [256, 1024] }}\nrequests: 4\n",
            slots = slots.display()
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let server = &meta["servers"][0];
    let joined: Vec<&str> = server["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let joined = joined.join(" ");
    // `llama-server -m MODEL`, short flags verbatim (`-c`, `-np`), never `--model-path`.
    assert!(
        joined
            .contains("sim --api llama.cpp -m models/qwen3-0.6b-q8_0.gguf --host 127.0.0.1 --port"),
        "{joined}"
    );
    assert!(
        joined.contains(" -c 8192") && joined.contains(" -np 2"),
        "{joined}"
    );
    assert!(!joined.contains("--model-path"), "{joined}");
    assert_eq!(server["engine"], "llama.cpp (simulated)");
    let surface = &server["surface"];
    assert!(
        surface["identity"].to_string().contains("/props"),
        "{surface}"
    );
    assert_eq!(surface["cache_reset"]["kind"], "slot-erase", "{surface}");
    assert_eq!(
        surface["cache_reset"]["slots"].as_array().unwrap().len(),
        2,
        "{surface}"
    );
    // The context a request can use: 8192 split over two slots.
    assert_eq!(surface["context_length"], 4096, "{surface}");
    for p in &points {
        assert_eq!(p["status"], "ok", "{p}");
        assert!(validity_flags(p).is_empty(), "{p}");
        assert_eq!(p["ok"], 4, "{p}");
        assert_eq!(p["errors"], 0, "{p}");
        // Erased before the point; later requests in a slot share only the BOS token.
        assert!(
            p["metrics"]["cached_tokens"]["max"].as_f64().unwrap() <= 1.0,
            "{p}"
        );
    }
    // The server closes the connection after every stream: nothing was lost to it.
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert!(
        requests.iter().all(|r| r["error"].is_null()),
        "no request failed"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("llama.cpp (simulated)"), "{report}");
    servers_gone(&meta);
}

#[test]
fn a_llama_cpp_crash_is_classified_from_its_own_lines() {
    let ws = Workspace::new();
    let spec = ws.write(
        "gone.yaml",
        "name: gone\nserver:\n  engine: llama.cpp\n  simulate: true\n  model: /nonexistent/model.gguf\n  \
         args: { -c: 4096, profile: fast }\n  ready_timeout: 30s\n\
         workload:\n  api: openai-completions\n  prompt: { kind: repeat, tokens: 128 }\n  output_tokens: 4\nrequests: 1\n",
    );
    let out = ws.run_with(&spec, &[]);
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points[0]["failure"], "model-not-found", "{}", points[0]);
    servers_gone(&read_json(&dir.join("meta.json")));
}

/// `plan` prints the command each group will run, as that engine spells it, secrets hidden.
#[test]
fn plan_shows_each_engines_own_command_line() {
    let ws = Workspace::new();
    let spec = ws.write(
        "plan.yaml",
        "name: plan\nserver:\n  engine: vllm\n  model: Qwen/Qwen3-8B\n  args: { max-model-len: 8192, enforce-eager: false, api-key: sk-plan-secret-1234 }\n\
         workload:\n  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 4\n",
    );
    let out = servebench().arg("plan").arg(&spec).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "launch vLLM: vllm serve Qwen/Qwen3-8B --host 127.0.0.1 --port PORT --max-model-len 8192 --no-enforce-eager"
        ),
        "{}",
        show(&out)
    );
    assert!(!stdout.contains("sk-plan-secret-1234"), "{stdout}");
    let spec = ws.write(
        "llama.yaml",
        "name: llama\nserver:\n  engine: llama.cpp\n  model: m.gguf\n  args: { -c: 4096, -np: 2 }\n\
         workload:\n  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 4\n",
    );
    let out = servebench().arg("plan").arg(&spec).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(
            "launch llama.cpp: llama-server -m m.gguf --host 127.0.0.1 --port PORT -c 4096 -np 2"
        ),
        "{}",
        show(&out)
    );
}

/// SGLang leaves `prompt_tokens_details` out of OpenAI usage when nothing was cached, even with
/// `--enable-cache-report`; its `/server_info` says the report is on, so an absent count is a
/// reported 0 and a cold point is verified. Without the flag the point says it is unverified.
#[test]
fn sglang_with_cache_report_verifies_cold_points_on_the_openai_api() {
    let ws = Workspace::new();
    let profile = profile(&ws, None);
    for (report, unverified) in [(true, false), (false, true)] {
        let spec = ws.write(
            "report.yaml",
            &format!(
                "name: report\nserver:\n  engine: sglang\n  simulate: true\n  model: m\n  \
                 args: {{ enable-cache-report: {report}, profile: {profile} }}\n  ready_timeout: 30s\n\
                 workload:\n  api: openai-completions\n  prompt: {{ kind: repeat, tokens: 256 }}\n  output_tokens: 4\n\
                 cache: {{ policy: cold, verify: true }}\nrequests: 3\n"
            ),
        );
        let (dir, points) = ws.run_ok(&spec);
        let surface = &read_json(&dir.join("meta.json"))["servers"][0]["surface"];
        assert_eq!(
            surface["cached_tokens_omitted_when_zero"]
                .as_bool()
                .unwrap_or(false),
            report,
            "{surface}"
        );
        let flags = points[0]["flags"].to_string();
        assert_eq!(flags.contains("cache-unverified"), unverified, "{flags}");
        if report {
            assert_eq!(
                points[0]["metrics"]["cached_tokens"]["max"], 0.0,
                "{}",
                points[0]
            );
        }
    }
}

/// `engine: command` launches any server from a template and learns what it offers by asking:
/// here the simulator stands in for a custom server (TGI, TensorRT-LLM's serve, your own).
#[test]
fn a_command_engine_is_launched_from_its_template_and_probed() {
    let ws = Workspace::new();
    let bin = env!("CARGO_BIN_EXE_servebench");
    let spec = ws.write(
        "command.yaml",
        &format!(
            "name: command\nserver:\n  engine: command\n  model: my-model\n  \
             launcher: [\"{bin}\", sim, --api, vllm, \"{{model}}\", --host, \"{{host}}\", --port, \"{{port}}\", --enable-prompt-tokens-details]\n  \
             args: {{ profile: fast }}\n  env: {{ VLLM_SERVER_DEV_MODE: \"1\" }}\n  ready_timeout: 30s\n\
             workload:\n  api: openai-chat\n  prompt: {{ kind: repeat, tokens: 256 }}\n  output_tokens: 4\n\
             cache: {{ policy: cold, verify: true }}\nrequests: 2\n"
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let server = &meta["servers"][0];
    assert_eq!(server["engine"], "command");
    let cmd = server["command"].to_string();
    assert!(
        cmd.contains("\"my-model\",\"--host\",\"127.0.0.1\",\"--port\""),
        "{cmd}"
    );
    assert!(cmd.contains("\"--profile\",\"fast\""), "{cmd}");
    // Nothing assumed from the name: what answered is what it offers.
    let surface = &server["surface"];
    assert_eq!(
        surface["cache_reset"]["kind"], "reset-prefix-cache",
        "{surface}"
    );
    assert!(
        surface["identity"].to_string().contains("/version"),
        "{surface}"
    );
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    assert!(validity_flags(&points[0]).is_empty(), "{}", points[0]);
    servers_gone(&meta);
}

/// A ready line is a hint, never the proof (issue 18 item 3): a server that prints it a second
/// before its port listens is measured once `/health` answers, not while it refuses
/// connections (the run used to fire its requests, and its cache-reset probe, at a closed port).
#[test]
fn a_ready_line_before_the_port_listens_is_not_readiness() {
    let ws = Workspace::new();
    let bin = env!("CARGO_BIN_EXE_servebench");
    let spec = ws.write(
        "early-line.yaml",
        &format!(
            "name: early-line\nserver:\n  engine: command\n  model: m\n  \
             launcher: [sh, -c, 'echo \"The server is fired up and ready to roll!\"; sleep 1; exec \"$0\" sim --profile fast --host 127.0.0.1 --port \"$1\"', \"{bin}\", \"{{port}}\"]\n  \
             ready_line: \"fired up and ready\"\n  ready_timeout: 30s\n\
             workload:\n  api: sglang-generate\n  prompt: {{ kind: repeat, tokens: 64 }}\n  output_tokens: 4\n\
             cache: {{ policy: cold }}\nrequests: 2\n"
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let server = &meta["servers"][0];
    assert_eq!(
        server["surface"]["cache_reset"]["kind"], "flush-cache",
        "{server}"
    );
    assert!(server["ready_after_s"].as_f64().unwrap() >= 1.0, "{server}");
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    servers_gone(&meta);
}

/// llama.cpp with `--no-slots` (no `GET /slots`) and `--slot-save-path`: erase works, and
/// `/props` counts the slots, so the cold points are reset per slot; its `-a` alias is the
/// spec's model under another name, not another model (issue 18 items 17 and 18).
#[test]
fn llama_cpp_with_no_slots_and_an_alias_is_reset_and_not_doubted() {
    let ws = Workspace::new();
    let profile = profile(&ws, None);
    let slots = ws.path().join("slots");
    std::fs::create_dir_all(&slots).unwrap();
    let spec = ws.write(
        "llama-alias.yaml",
        &format!(
            "name: llama-alias\nserver:\n  engine: llama.cpp\n  simulate: true\n  model: models/qwen3-0.6b-q8_0.gguf\n  \
             args: {{ -c: 4096, -np: 3, -a: qwen-small, no-slots: true, slot-save-path: {slots}, profile: {profile} }}\n  ready_timeout: 30s\n\
             workload:\n  api: openai-completions\n  prompt: {{ kind: repeat, tokens: 128 }}\n  output_tokens: 4\n\
             cache: {{ policy: cold, verify: true }}\nrequests: 2\n",
            slots = slots.display()
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let server = &meta["servers"][0];
    let surface = &server["surface"];
    assert_eq!(surface["cache_reset"]["kind"], "slot-erase", "{surface}");
    assert_eq!(
        surface["cache_reset"]["slots"],
        serde_json::json!([0, 1, 2]),
        "{surface}"
    );
    assert!(
        !surface["notes"].to_string().contains("slot-save-path"),
        "{surface}"
    );
    assert!(
        server["notes"].as_array().is_none_or(|n| n.is_empty()),
        "no 'serves X, not the spec's model': {server}"
    );
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    servers_gone(&meta);
}

/// A `url:` server the spec names no model for: requests carry the name it serves
/// (`/v1/models`), which vLLM requires (any other is a 404); the record says the spec's engine
/// (issue 18 items 10 and 21).
#[test]
fn a_url_server_without_a_model_gets_the_name_it_serves() {
    let ws = Workspace::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut sim = std::process::Command::new(env!("CARGO_BIN_EXE_servebench"))
        .args([
            "sim",
            "--api",
            "vllm",
            "Qwen/Qwen3-8B",
            "--served-model-name",
            "qwen-served",
        ])
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--profile",
            "fast",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the simulated vLLM never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let spec = ws.write(
        "url.yaml",
        &format!(
            "name: url\nserver:\n  engine: vllm\n  url: http://127.0.0.1:{port}\nworkload:\n  api: openai-chat\n  \
             prompt: {{ kind: repeat, tokens: 64 }}\n  output_tokens: 4\nrequests: 2\n"
        ),
    );
    let out = ws.run(&spec);
    let _ = sim.kill();
    let _ = sim.wait();
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(
        meta["servers"][0]["engine"], "vllm (external)",
        "{}",
        meta["servers"][0]
    );
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
}

/// An engine whose program is not installed: which program, where it was looked for, and the
/// fix, not "entity not found" (issue 18 item 21).
#[test]
fn a_missing_engine_binary_is_named_with_where_it_was_looked_for() {
    let ws = Workspace::new();
    let spec = ws.write(
        "missing.yaml",
        "name: missing\nserver:\n  engine: llama.cpp\n  model: m.gguf\n  env: { PATH: /nonexistent-bin }\n\
         workload:\n  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 4\n",
    );
    let out = ws.run(&spec);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("llama-server is not on PATH (/nonexistent-bin)"),
        "{stderr}"
    );
    assert!(stderr.contains("server.launcher"), "{stderr}");
    assert!(!stderr.contains("entity not found"), "{stderr}");
}
