//! Secrets never land anywhere: a spec plants distinct random secrets in every place a spec can
//! hold one, runs against the simulator (which logs its `server_args`, API key included, as
//! SGLang does), and every byte the run writes (each file under the run directories, walked
//! recursively, and the console of every command) is searched for each secret, as written,
//! JSON-escaped and base64-encoded.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

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

/// The secrets of a spec planted for `host` (its `host:` lines and the server's engine and
/// launcher lines): every place the spec holds one, free text included. The first entry of
/// the env is the variable a `${NAME}` reference reads.
struct Planted {
    spec: String,
    /// Every secret, as planted.
    secrets: Vec<String>,
    /// The ones the spec hands to Slurm itself (`sbatch:` extras): the user put them in the
    /// job's record, so Slurm's state is not searched for them.
    given_to_slurm: Vec<String>,
    /// `NAME=value` of the variable `${NAME}` refers to.
    env: (String, String),
}

fn planted(name: &str, host: &str, server_head: &str) -> Planted {
    let api_key = secret("sk-api");
    let desc_key = secret("desc-key");
    let bearer = secret("desc-bearer");
    let query = secret("desc-query");
    let env_password = secret("env-pass");
    let referenced = secret("ref-password");
    let comment = secret("sbatch-comment");
    let ref_var = format!("SB_TEST_REF_{}", uuid::Uuid::new_v4().simple());
    let host = host.replace("{comment}", &comment);
    let spec = format!(
        "name: {name}
description: \"calls it with api_key={desc_key} and Authorization: Bearer {bearer}; see http://h:1/v1?token={query}&x=1\"
{host}server:
{server_head}  args: {{ profile: fast, context-length: 8192, api-key: \"{api_key}\" }}
  env:
    DB_URL: \"postgres://db/x?sslmode=off password={env_password}\"
    SERVICE_PASSWORD: \"${{{ref_var}}}\"
  ready_timeout: 60s
workload:
  prompt: {{ kind: repeat, tokens: 64, calibrate: false }}
  output_tokens: 4
requests: 2
"
    );
    let given_to_slurm = if host.contains(&comment) {
        vec![comment.clone()]
    } else {
        Vec::new()
    };
    Planted {
        spec,
        secrets: vec![
            api_key,
            desc_key,
            bearer,
            query,
            env_password,
            referenced.clone(),
            comment,
        ],
        given_to_slurm,
        env: (ref_var, referenced),
    }
}

/// Every secret of `p` is nowhere in the run directories under `runs` or the output of
/// `commands`; the server's log of the run in `dir` shows the key's place, hidden.
#[track_caller]
fn assert_planted_nowhere(p: &Planted, runs: &Path, dir: &Path, commands: &[&Output]) {
    let secrets: Vec<&str> = p.secrets.iter().map(String::as_str).collect();
    let files = assert_nowhere(&secrets, runs, commands);
    assert!(files >= 6, "searched {files} files");
    let log = read(&dir.join("server-g1.log"));
    assert!(log.contains("api_key='<redacted>'"), "{log}");
    let spec_copy = read(&dir.join("spec.yaml"));
    assert!(spec_copy.contains("api_key=<redacted>"), "{spec_copy}");
    // The stored copy still reads as a spec.
    let copy = runs.join("copy.yaml");
    std::fs::write(&copy, &spec_copy).unwrap();
    let validate = servebench()
        .arg("validate")
        .arg(&copy)
        .env(&p.env.0, &p.env.1)
        .output()
        .unwrap();
    assert!(validate.status.success(), "{}", show(&validate));
    std::fs::remove_file(copy).unwrap();
}

/// Item 13: the free-text secrets (a description's `api_key=` and `Bearer`, a URL's
/// `?token=`, `password=` inside an env value) land nowhere on a local run, nor a password
/// in an SSH host's address (`ssh://user:PASS@host`) on the console.
#[test]
fn free_text_secrets_and_a_hosts_password_land_nowhere_locally() {
    let ws = Workspace::new();
    let p = planted("planted-local", "", "  engine: sim\n  model: m\n");
    let spec = ws.write("local.yaml", &p.spec);
    let env = [(p.env.0.as_str(), p.env.1.as_str())];
    let spec_arg = spec.display().to_string();
    let validate = servebench_in(&ws, &["validate", &spec_arg], &env);
    let plan = servebench_in(&ws, &["plan", &spec_arg], &env);
    let out = run(&ws, &spec, &env);
    assert!(out.status.success(), "{}", show(&out));
    let dir = ws.path().join(run_dir(&out));
    let report = servebench_in(&ws, &["report", &dir.display().to_string()], &env);
    assert_planted_nowhere(
        &p,
        &ws.path().join("runs"),
        &dir,
        &[&validate, &plan, &out, &report],
    );

    // A password in an SSH host's address: the host cannot be reached, and says so without it.
    let password = secret("ssh-pass");
    let unreachable = ws.write(
        "ssh.yaml",
        &format!(
            "name: planted-ssh-pass\nhost: ssh://bench:{password}@127.0.0.1:1\nserver: {{ engine: sim, model: m }}\n\
             workload: {{ prompt: {{ kind: repeat, tokens: 64 }}, output_tokens: 4 }}\n"
        ),
    );
    let arg = unreachable.display().to_string();
    let outs = [
        servebench_in(&ws, &["validate", &arg], &[]),
        servebench_in(&ws, &["plan", &arg], &[]),
        run(&ws, &unreachable, &[]),
    ];
    assert!(!outs[2].status.success(), "{}", show(&outs[2]));
    assert!(
        String::from_utf8_lossy(&outs[2].stderr).contains("cannot reach <redacted>@127.0.0.1:1")
    );
    let refs: Vec<&Output> = outs.iter().collect();
    assert_nowhere(&[&password], &ws.path().join("runs"), &refs);
}

/// Item 13: the same planted secrets over a real sshd on loopback (the server launched there,
/// its log mirrored back).
#[test]
fn planted_secrets_land_nowhere_over_ssh() {
    let Some(sshd) = crate::sshd::Sshd::start() else {
        return;
    };
    let ws = Workspace::new();
    let host = format!(
        "host:\n  ssh: 127.0.0.1\n  port: {}\n  identity: {}\n  known_hosts: {}\n  remote_dir: {}/sb\n",
        sshd.port,
        sshd.client_key.display(),
        sshd.known_hosts.display(),
        sshd.home.display()
    );
    let head = format!(
        "  engine: sglang\n  launcher: [{}, sim]\n  model: m\n",
        env!("CARGO_BIN_EXE_servebench")
    );
    let p = planted("planted-ssh", &host, &head);
    let spec = ws.write("ssh.yaml", &p.spec);
    let env = [(p.env.0.as_str(), p.env.1.as_str())];
    let out = run(&ws, &spec, &env);
    assert!(out.status.success(), "{}\n{}", show(&out), sshd.log_text());
    let dir = ws.path().join(run_dir(&out));
    let report = servebench_in(&ws, &["report", &dir.display().to_string()], &env);
    assert_planted_nowhere(&p, &ws.path().join("runs"), &dir, &[&out, &report]);
}

/// Item 13: on a real one-node Slurm: the server's log (the step's output), the job's record
/// in slurmctld (`scontrol show job -d`, its saved state and environment) hold no planted
/// secret; `sbatch:` extras are redacted in what servebench writes and prints.
#[test]
fn planted_secrets_land_nowhere_on_slurm_nor_in_its_job_state() {
    let cluster = crate::slurmd::SlurmCluster::get();
    let _cleanup = cluster.cancel_on_drop("servebench-planted-slurm");
    let ws = Workspace::new();
    let p = planted(
        "planted-slurm",
        "host:\n  slurm: { time: \"5\", sbatch: [\"--comment=api_key={comment}\"] }\n",
        "  engine: sim\n  model: m\n",
    );
    let spec = ws.write("slurm.yaml", &p.spec);
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .env("SLURM_CONF", &cluster.conf)
        .env(&p.env.0, &p.env.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While the job runs: what slurmctld keeps of it.
    let job = poll_until(Duration::from_secs(60), "the job running", || {
        cluster
            .jobs_named("servebench-planted-slurm")
            .iter()
            .find(|l| l.contains(" RUNNING "))
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
    });
    let shown = cluster.output("scontrol", &["show", "job", "-d", &job]);
    assert!(shown.contains(&format!("JobId={job}")), "{shown}");
    let mut state = Vec::new();
    files_now(&cluster.dir.path().join("state"), &mut state);
    let done = child.wait_with_output().unwrap();
    assert!(done.status.success(), "{}", show(&done));
    let dir = ws.path().join(run_dir(&done));
    let report = servebench_in(&ws, &["report", &dir.display().to_string()], &[]);
    assert_planted_nowhere(&p, &ws.path().join("runs"), &dir, &[&done, &report]);
    let mut found = Vec::new();
    for s in p.secrets.iter().filter(|s| !p.given_to_slurm.contains(s)) {
        for form in forms(s) {
            if shown.contains(&form) {
                found.push(format!("{s} in scontrol show job -d"));
            }
            for (path, bytes) in &state {
                if memchr::memmem::find(bytes, form.as_bytes()).is_some() {
                    found.push(format!("{s} in {path}"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "in Slurm's job state:\n{}",
        found.join("\n")
    );
    assert!(
        state.iter().any(|(p, _)| p.ends_with("environment")),
        "the job's saved environment was searched: {:?}",
        state.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
}

/// Every file under `dir` that can be read now (slurmctld rewrites its state as it goes).
fn files_now(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_now(&p, out);
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push((p.display().to_string(), bytes));
        }
    }
}
