//! Secrets never land anywhere: a spec plants distinct random secrets in every place a spec can
//! hold one, runs against the simulator (which logs its `server_args`, API key included, as
//! SGLang does), and every byte the run writes (each file under the run directories, walked
//! recursively, and the console of every command) is searched for each secret, as written,
//! JSON-escaped and base64-encoded.

use std::path::Path;
use std::process::Output;

use crate::common::*;

/// A secret nobody else uses: a random part, with a prefix naming where it was planted.
fn secret(place: &str) -> String {
    format!("{place}-{}", uuid::Uuid::new_v4().simple())
}

/// Standard base64 (HTTP Basic credentials), without padding.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// Each form a secret could take in a file or on the console.
fn forms(secret: &str) -> Vec<String> {
    let json = serde_json::to_string(secret).unwrap();
    let mut out = vec![
        secret.to_string(),
        json[1..json.len() - 1].to_string(),
        base64(secret.as_bytes()),
    ];
    out.dedup();
    out
}

/// Every file under `dir`, recursively, with its bytes.
fn every_file(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            every_file(&p, out);
        } else {
            out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
}

/// Fails naming each (secret, form, place) found in the run directories under `runs` or in the
/// console output of `commands`; returns how many files were searched.
#[track_caller]
fn assert_nowhere(secrets: &[&str], runs: &Path, commands: &[&Output]) -> usize {
    let mut places = Vec::new();
    every_file(runs, &mut places);
    let files = places.len();
    for (i, out) in commands.iter().enumerate() {
        places.push((format!("command {i} stdout"), out.stdout.clone()));
        places.push((format!("command {i} stderr"), out.stderr.clone()));
    }
    let mut found = Vec::new();
    for s in secrets {
        for form in forms(s) {
            for (place, bytes) in &places {
                if memchr::memmem::find(bytes, form.as_bytes()).is_some() {
                    found.push(format!("{form:?} (secret {s:?}) in {place}"));
                }
            }
        }
    }
    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn servebench_in(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = servebench();
    cmd.args(args).current_dir(ws.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap()
}

fn run(ws: &Workspace, spec: &Path, env: &[(&str, &str)]) -> Output {
    let _turn = exclusive();
    let spec = spec.display().to_string();
    servebench_in(ws, &["run", &spec, "--out", "runs", "--quiet"], env)
}

#[test]
fn secrets_planted_everywhere_land_nowhere() {
    let ws = Workspace::new();
    let api_key = secret("sk-api");
    let token_file = format!("/secrets/{}", secret("token-file"));
    let engine_token = secret("hf-engine");
    // Quotes and a backslash: the JSON-escaped form differs from the raw one.
    let env_token = format!("{}\"q\\b", secret("hf-env"));
    let referenced = secret("ref-password");
    let swept = [secret("swept-a"), secret("swept-b")];
    let ref_var = format!("SB_TEST_REF_{}", uuid::Uuid::new_v4().simple());
    let yaml_env_token = env_token.replace('\\', "\\\\").replace('"', "\\\"");
    let spec = ws.write(
        "planted.yaml",
        &format!(
            "name: planted
server:
  engine: sim
  model: m
  args: {{ profile: fast, context-length: 8192, api-key: \"{api_key}\", admin-api-key: \"{token_file}\" }}
  engine_args:
    vllm: {{ hf-token: \"{engine_token}\" }}
  env:
    HF_TOKEN: \"{yaml_env_token}\"
    SERVICE_PASSWORD: \"${{{ref_var}}}\"
  ready_timeout: 30s
workload:
  prompt: {{ kind: repeat, tokens: 64 }}
  output_tokens: 4
requests: 2
sweep:
  server.env.ACCESS_TOKEN: [\"{}\", \"{}\"]
",
            swept[0], swept[1]
        ),
    );
    let env = [(ref_var.as_str(), referenced.as_str())];
    let spec_arg = spec.display().to_string();
    let validate = servebench_in(&ws, &["validate", &spec_arg], &env);
    let plan = servebench_in(&ws, &["plan", &spec_arg], &env);
    let out = run(&ws, &spec, &env);
    assert!(out.status.success(), "{}", show(&out));
    let dir = ws.path().join(run_dir(&out));
    let dir_arg = dir.display().to_string();
    let report = servebench_in(&ws, &["report", &dir_arg], &env);
    assert!(report.status.success(), "{}", show(&report));

    let secrets = [
        api_key.as_str(),
        token_file.as_str(),
        engine_token.as_str(),
        env_token.as_str(),
        referenced.as_str(),
        swept[0].as_str(),
        swept[1].as_str(),
    ];
    let files = assert_nowhere(
        &secrets,
        &ws.path().join("runs"),
        &[&validate, &plan, &out, &report],
    );
    assert!(files >= 8, "searched {files} files");

    // The secrets were there to leak: the simulator logged its server_args with the key, the
    // spec copy held them, each launch had its swept token.
    let logs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .map(|p| read(&p))
        .collect();
    assert_eq!(logs.len(), 2, "one log per swept launch");
    for log in &logs {
        assert!(log.contains("api_key='<redacted>'"), "{log}");
    }
    let spec_copy = read(&dir.join("spec.yaml"));
    assert!(spec_copy.contains("api-key: \"<redacted>\""), "{spec_copy}");
    assert!(
        spec_copy.contains(&format!("${{{ref_var}}}")),
        "references stay"
    );
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 2);
    assert!(points.iter().all(|p| p["ok"] == 2), "{points:?}");
}

#[test]
fn a_server_that_crashes_at_start_shows_its_log_without_the_key() {
    let ws = Workspace::new();
    let key = secret("sk-crash");
    let var = format!("SB_TEST_KEY_{}", uuid::Uuid::new_v4().simple());
    // Too little memory for the KV pool: the simulator logs its server_args, then dies.
    let spec = ws.write(
        "crash.yaml",
        &format!(
            "name: crash
server:
  engine: sim
  model: m
  args: {{ profile: fast, mem-fraction-static: 0.01, api-key: \"${{{var}}}\" }}
  ready_timeout: 30s
workload:
  prompt: {{ kind: repeat, tokens: 64 }}
  output_tokens: 4
"
        ),
    );
    let out = run(&ws, &spec, &[(var.as_str(), key.as_str())]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let dir = ws.path().join(run_dir(&out));
    // The log excerpt reached the console and the point's record, key hidden.
    let points = read(&dir.join("points.jsonl"));
    assert!(points.contains("server_args=ServerArgs("), "{points}");
    assert!(points.contains("api_key='<redacted>'"), "{points}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("api_key='<redacted>'"), "{stderr}");
    assert_nowhere(&[&key], &ws.path().join("runs"), &[&out]);
}

#[test]
fn url_credentials_are_refused_and_shown_nowhere() {
    let ws = Workspace::new();
    let password = secret("url-pass");
    let user = "bench-user";
    let spec = ws.write(
        "url.yaml",
        &format!(
            "name: url
server:
  url: \"http://{user}:{password}@127.0.0.1:9/\"
  model: m
workload:
  prompt: {{ kind: repeat, tokens: 64 }}
  output_tokens: 4
"
        ),
    );
    let spec_arg = spec.display().to_string();
    let plan = servebench_in(&ws, &["plan", &spec_arg], &[]);
    let out = run(&ws, &spec, &[]);
    // Refused before a run directory exists (issue 18 item 15: the client cannot send them),
    // and the refusal does not repeat them.
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("user names and passwords in the URL"),
        "{}",
        show(&out)
    );
    assert!(!ws.path().join("runs").join("url").exists());
    std::fs::create_dir_all(ws.path().join("runs")).unwrap();
    let userinfo = format!("{user}:{password}");
    assert_nowhere(
        &[&password, &userinfo],
        &ws.path().join("runs"),
        &[&plan, &out],
    );
}
