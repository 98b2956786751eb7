//! Each engine adapter end to end, against the simulator in that engine's mode (`simulate:
//! true` runs `servebench sim --api ENGINE` with the engine's own flags): launch, readiness,
//! identity, the cold-cache reset, a sweep, a crash classified from that engine's log lines,
//! and teardown.

use std::path::Path;

use crate::common::*;

/// The fast profile, crashing out of memory above `oom` new prefill tokens.
fn profile(ws: &Workspace, oom: Option<u64>) -> String {
    let fast =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/fast.yaml"))
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
        surface["version"].as_str().unwrap().starts_with("0.33.0"),
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
            .filter(|f| f["kind"] != "high-variance")
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
