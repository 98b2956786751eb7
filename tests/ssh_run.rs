//! End to end over SSH: `servebench run` against a real sshd on loopback (see `sshd.rs`), the
//! simulator launched as the `sglang` engine (its launcher pointed at `servebench sim`, which
//! takes SGLang's flags).

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::common::*;
use crate::sshd::Sshd;

macro_rules! sshd {
    () => {
        match Sshd::start() {
            Some(s) => s,
            None => return,
        }
    };
}

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

/// A spec on `sshd`: engine sglang launched as `servebench sim`, fast profile. `args` is the
/// inside of `server.args`, `rest` more top-level keys.
fn ssh_spec(sshd: &Sshd, name: &str, client: &str, args: &str, rest: &str) -> String {
    format!(
        "name: {name}\nhost:\n  ssh: 127.0.0.1\n  port: {port}\n  identity: {key}\n  known_hosts: {kh}\n  remote_dir: {home}/sb\nclient: {client}\n\
         server:\n  engine: sglang\n  launcher: [{BIN}, sim]\n  model: test-model\n  args: {{ profile: fast, context-length: 16384{args} }}\n  ready_timeout: 30s\n\
         workload:\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 32\n{rest}\n",
        port = sshd.port,
        key = sshd.client_key.display(),
        kh = sshd.known_hosts.display(),
        home = sshd.home.display(),
    )
}

fn points(dir: &Path) -> Vec<serde_json::Value> {
    read_jsonl(&dir.join("points.jsonl"))
}

fn mean(p: &serde_json::Value, metric: &str) -> f64 {
    p["metrics"][metric]["mean"]
        .as_f64()
        .unwrap_or_else(|| panic!("no {metric} in {p}"))
}

/// Processes whose command line contains `needle` (from the process table).
fn processes_with(needle: &str) -> Vec<String> {
    let out = std::process::Command::new("ps")
        .args(["-eo", "pid,pgid,args"])
        .output()
        .expect("ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(needle) && !l.contains("ps -eo"))
        .map(String::from)
        .collect()
}

#[test]
fn a_sweep_measured_on_the_host_and_through_a_forward_agree() {
    let sshd = sshd!();
    let ws = Workspace::new();
    let rest = "sweep:\n  ctx: [512, 2048]\nrequests: 3\n";
    let mut by_client = Vec::new();
    // The two runs' timings are compared below: nothing timing-sensitive runs between them.
    let turn = exclusive();
    for client in ["host", "local"] {
        let spec = ws.write(
            &format!("{client}.yaml"),
            // `--enable-metrics`: SGLang serves `/metrics` only when asked.
            &ssh_spec(
                &sshd,
                &format!("over-ssh-{client}"),
                client,
                ", enable-metrics: true",
                rest,
            ),
        );
        let out = ws.run_in_turn(&spec, &[], &turn);
        assert!(out.status.success(), "{}\n{}", show(&out), sshd.log_text());
        let dir = run_dir(&out);
        let meta = read_json(&dir.join("meta.json"));
        assert_eq!(meta["client_placement"], client);
        assert_eq!(meta["status"], "complete");
        let server = &meta["servers"][0];
        assert_eq!(server["host"], format!("127.0.0.1:{}", sshd.port));
        assert_eq!(server["stopped"], true, "{server}");
        assert!(
            server["outcome"]
                .as_str()
                .unwrap()
                .contains("confirmed gone"),
            "{server}"
        );
        assert!(
            server["command"][0]
                .as_str()
                .unwrap()
                .ends_with("servebench")
        );
        // Host facts read over SSH.
        assert!(meta["server_host"]["hostname"].as_str().is_some(), "{meta}");
        // The log was mirrored into the run directory.
        let log = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
        assert!(
            log.contains("The server is fired up and ready to roll!"),
            "{log}"
        );
        let requests = read_jsonl(&dir.join("requests.jsonl"));
        assert_eq!(
            requests.iter().filter(|r| r["role"] == "measure").count(),
            6
        );
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(report.contains("127.0.0.1"), "the report names the host");
        assert!(report.contains("- **GPU host:** "), "{report}");
        // The launch records that this machine reached it through a forward.
        assert_eq!(meta["servers"][0]["through_forward"], true, "{meta}");
        let placement = match client {
            "host" => "servebench's agent on the GPU host, measuring against localhost",
            _ => "through an SSH port forward",
        };
        assert!(report.contains(placement), "{report}");
        // The server's `/metrics`, scraped beside the requests (by the agent on the host, or
        // here through the forward): a start and an end scrape per point, in metrics.jsonl.
        let scrapes = read_jsonl(&dir.join("metrics.jsonl"));
        for id in ["p001", "p002"] {
            let mine: Vec<_> = scrapes.iter().filter(|s| s["point"] == id).collect();
            assert!(mine.len() >= 2, "{client}: {id} has {} scrapes", mine.len());
            assert_eq!(mine[0]["at"], "start", "{client}");
            assert_eq!(mine.last().unwrap()["at"], "end", "{client}");
            // SGLang's token counters appear with its first finished request: a gauge is
            // there from the first scrape.
            assert!(mine[0]["values"]["sglang:num_running_reqs"].is_number());
        }
        assert!(
            report.contains("## The server's view"),
            "{client}: {report}"
        );
        by_client.push(points(&dir));
    }
    // Both clients measure the same server on the same machine: the numbers must agree.
    for (h, l) in by_client[0].iter().zip(&by_client[1]) {
        assert_eq!(h["ok"], 3);
        assert_eq!(l["ok"], 3);
        // The server's own counts over each point are the same either way: three requests
        // and the prompt tokens the client saw.
        for view in [&h["server"], &l["server"]] {
            assert_eq!(view["engine"], "sglang", "{view}");
            assert_eq!(view["requests"].as_f64(), Some(3.0), "{view}");
        }
        assert_eq!(h["server"]["prompt_tokens"], l["server"]["prompt_tokens"]);
        assert!(
            h["flags"]
                .as_array()
                .unwrap()
                .iter()
                .all(|f| f["kind"] != "server-disagrees"),
            "{h}"
        );
        assert_eq!(mean(h, "prompt_tokens"), mean(l, "prompt_tokens"));
        for m in ["ttft_s", "decode_tok_s"] {
            let (a, b) = (mean(h, m), mean(l, m));
            assert!((a - b).abs() / a.max(b) < 0.5, "{m}: host {a} vs local {b}");
        }
    }
}

#[test]
fn hostile_argument_values_reach_the_server_verbatim() {
    let sshd = sshd!();
    let ws = Workspace::new();
    let marker = ws.path().join("pwned");
    let hostile = format!(
        "a b 'c' \\\"d\\\" $(touch {m}) `touch {m}`; touch {m} && echo *",
        m = marker.display()
    );
    let spec = ws.write(
        "hostile.yaml",
        &ssh_spec(
            &sshd,
            "hostile",
            "local",
            &format!(", served-model-name: \"{hostile}\""),
            "sweep:\n  ctx: [256]\n  workload.api: [openai-completions]\n",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    assert!(!marker.exists(), "a shell ran part of an argument");
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    let expected = hostile.replace("\\\"", "\"");
    assert_eq!(
        meta["servers"][0]["server_info"]["served_model_name"], expected,
        "{meta}"
    );
    // OpenAI requests name the served model: the server accepted them.
    assert_eq!(points(&dir)[0]["ok"], 1);
}

/// A profile that crashes with SGLang's out-of-memory lines above 3000 new prefill tokens.
fn oom_profile(ws: &Workspace) -> String {
    let fast = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/sim/profiles/fast.yaml"),
    )
    .unwrap();
    ws.write("oom.yaml", &format!("{fast}\noom_prefill_tokens: 3000\n"))
        .display()
        .to_string()
}

fn run_oom(sshd: &Sshd, ws: &Workspace, policy: &str) -> (Output, Vec<serde_json::Value>) {
    let profile = oom_profile(ws);
    let spec = ws.write(
        &format!("{policy}.yaml"),
        &(ssh_spec(sshd, &format!("oom-{policy}"), "local", "", "")
            .replace("profile: fast", &format!("profile: {profile}"))
            + &format!("sweep:\n  ctx: [1024, 4096, 8192, 2048]\non_failure: {policy}\nexpect:\n  - {{ where: {{ ctx: 4096 }}, failure: out-of-memory }}\n")),
    );
    let out = ws.run(&spec);
    let dir = run_dir(&out);
    (out, points(&dir))
}

#[test]
fn an_out_of_memory_crash_is_classified_and_each_policy_applies() {
    let sshd = sshd!();
    let ws = Workspace::new();

    let (out, p) = run_oom(&sshd, &ws, "continue");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a crash makes the run incomplete"
    );
    let ids: Vec<(&str, bool)> = p
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["ok"].as_u64().unwrap() > 0))
        .collect();
    assert_eq!(
        ids,
        [
            ("p001", true),
            ("p002", false),
            ("p003", false),
            ("p004", true)
        ],
        "continue: relaunch after each crash and go on"
    );
    assert_eq!(p[1]["failure"], "out-of-memory");
    assert_eq!(p[2]["failure"], "out-of-memory");
    let crash = p[1]["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "server-crashed")
        .unwrap();
    assert!(
        crash["message"]
            .as_str()
            .unwrap()
            .contains("CUDA out of memory"),
        "the log excerpt is recorded: {crash}"
    );

    let (_, p) = run_oom(&sshd, &ws, "skip-larger");
    let kinds: Vec<String> = p
        .iter()
        .map(|p| {
            p["flags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["kind"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    assert_eq!(p[1]["failure"], "out-of-memory");
    assert!(
        kinds[2].contains("skipped"),
        "8192 > 4096 is skipped: {kinds:?}"
    );
    assert!(p[3]["ok"].as_u64().unwrap() > 0, "2048 < 4096 still runs");

    let (out, p) = run_oom(&sshd, &ws, "abort");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(p.len(), 2, "abort stops after the crash: {p:?}");
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    assert!(
        meta["status_reason"]
            .as_str()
            .unwrap()
            .contains("on_failure is abort"),
        "{meta}"
    );
    // The expectation of a crash at 4096 holds.
    let check = servebench().arg("check").arg(&dir).output().unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", show(&check));
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("out-of-memory"), "{report}");
}

#[test]
fn strict_host_key_checking_refuses_an_unknown_host_before_anything_starts() {
    let sshd = sshd!();
    let ws = Workspace::new();
    let empty = ws.write("empty_known_hosts", "");
    let spec = ws.write(
        "strict.yaml",
        &ssh_spec(&sshd, "strict", "local", "", "sweep:\n  ctx: [256]\n").replace(
            &format!("known_hosts: {}", sshd.known_hosts.display()),
            &format!("known_hosts: {}", empty.display()),
        ),
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("host key"), "{err}");
    assert!(err.contains("accept-new"), "the opt-in is named: {err}");
    assert!(!ws.path().join("runs").exists(), "nothing was created");
}

/// Starts `servebench run SPEC` in the background, with `env` added.
fn spawn_run_with(ws: &Workspace, spec: &Path, env: &[(&str, &str)]) -> std::process::Child {
    std::process::Command::new(BIN)
        .envs(env.iter().copied())
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The run directory once `servebench run` created it.
fn wait_for_run_dir(ws: &Workspace, name: &str) -> std::path::PathBuf {
    poll_until(Duration::from_secs(30), "no run directory", || {
        std::fs::read_dir(ws.path().join("runs").join(name))
            .ok()?
            .next()?
            .ok()
            .map(|e| e.path())
    })
}

/// Waits until `meta.json` records a launched server group; returns its pgid.
fn wait_for_server(dir: &Path) -> i64 {
    poll_until(Duration::from_secs(30), "no server in meta.json", || {
        let text = std::fs::read_to_string(dir.join("meta.json")).ok()?;
        let meta: serde_json::Value = serde_json::from_str(&text).ok()?;
        meta["servers"][0]["pgid"].as_i64()
    })
}

/// Writes the spec `name` (as [`ssh_spec`] builds it), starts `servebench run` on it in the
/// background with `env` added, and waits until its server is launched; the runner, its run
/// directory and the server's process group.
fn start_background_run(
    sshd: &Sshd,
    ws: &Workspace,
    name: &str,
    client: &str,
    args: &str,
    rest: &str,
    env: &[(&str, &str)],
) -> (std::process::Child, std::path::PathBuf, i64) {
    let spec = ws.write(
        &format!("{name}.yaml"),
        &ssh_spec(sshd, name, client, args, rest),
    );
    let child = spawn_run_with(ws, &spec, env);
    let dir = wait_for_run_dir(ws, name);
    let pgid = wait_for_server(&dir);
    (child, dir, pgid)
}

/// The ssh ControlMaster processes connected to this sshd (`ssh ... -M ... -p PORT`).
fn ssh_masters(sshd: &Sshd) -> Vec<String> {
    let port = format!("-p {}", sshd.port);
    processes_with(&port)
        .into_iter()
        .filter(|l| l.contains("ssh") && l.contains(" -M "))
        .collect()
}

#[test]
fn ctrl_c_mid_point_leaves_no_process_behind() {
    let sshd = sshd!();
    let ws = Workspace::new();
    let _turn = exclusive();
    let marker = format!("ctrlc-{}", std::process::id());
    // Long prompts on a slow profile: the point is still running when Ctrl-C comes.
    let (mut child, dir, pgid) = start_background_run(
        &sshd,
        &ws,
        "ctrlc",
        "host",
        &format!(", served-model-name: {marker}, sim-time-scale: 40"),
        "sweep:\n  ctx: [4096, 8192]\nrequests: 4\n",
        &[],
    );
    // Wait until requests are in flight on the host.
    wait_for_nonempty(&dir.join("requests.jsonl"), Duration::from_secs(30));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    // The process table has neither the server (its group) nor the agent.
    assert!(crate::sshd::group_members(pgid as i32).is_empty());
    assert!(
        processes_with(&marker).is_empty(),
        "{:?}",
        processes_with(&marker)
    );
    assert!(
        processes_with(" agent")
            .iter()
            .all(|p| !p.contains(&sshd.home.display().to_string())),
        "the agent is gone"
    );
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "incomplete");
    assert_eq!(meta["servers"][0]["stopped"], true, "{meta}");
}

#[test]
fn down_stops_what_a_killed_runner_left_and_resume_finishes_the_run() {
    let sshd = sshd!();
    let ws = Workspace::new();
    let _turn = exclusive();
    let marker = format!("down-{}", std::process::id());
    // An ssh master left by a killed runner exits after 3 idle seconds (default 300).
    let (mut child, dir, pgid) = start_background_run(
        &sshd,
        &ws,
        "down",
        "local",
        &format!(", served-model-name: {marker}, sim-time-scale: 20"),
        "sweep:\n  ctx: [1024, 2048, 4096]\nrequests: 2\n",
        &[("SERVEBENCH_SSH_IDLE_EXIT_S", "3")],
    );
    // Let the first point finish, then kill the runner without a chance to clean up.
    wait_for_nonempty(&dir.join("points.jsonl"), Duration::from_secs(60));
    let masters = ssh_masters(&sshd);
    assert_eq!(masters.len(), 1, "the runner's ssh master: {masters:?}");
    assert!(masters[0].contains("ControlPersist=3s"), "{masters:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    // The server runs detached on the host: it survived its runner.
    assert!(!crate::sshd::group_members(pgid as i32).is_empty());
    // The runner's ssh master outlived it too, but leaves once idle.
    poll_until(
        Duration::from_secs(15),
        "the killed runner's ssh master stays",
        || ssh_masters(&sshd).is_empty().then_some(()),
    );
    let out = servebench().arg("down").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("confirmed gone"), "{text}");
    assert!(crate::sshd::group_members(pgid as i32).is_empty());
    assert!(processes_with(&marker).is_empty());
    // Again: nothing left to do.
    let out = servebench().arg("down").arg(&dir).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("already gone"));

    // Resume measures the rest in the same directory, without duplicating records.
    let out = servebench()
        .arg("run")
        .arg("--resume")
        .arg(&dir)
        .arg("--quiet")
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let p = points(&dir);
    let ids: Vec<&str> = p.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["p001", "p002", "p003"]);
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    for id in ids {
        assert_eq!(
            requests
                .iter()
                .filter(|r| r["point"] == id && r["role"] == "measure")
                .count(),
            2,
            "{id}"
        );
    }
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["resumed_at"].as_array().unwrap().len(), 1);
    assert!(processes_with(&marker).is_empty());
}

#[test]
fn down_stops_a_wrapper_launched_server_that_a_killed_runner_left() {
    let sshd = sshd!();
    let ws = Workspace::new();
    let _turn = exclusive();
    let marker = format!("wrapped-{}", std::process::id());
    // A launcher script that activates nothing and starts the server as its child, not with
    // exec: the program recorded (`sh`) is not what serves.
    let wrapper = ws.write(
        "launch-sim.sh",
        &format!("\"{BIN}\" sim \"$@\"\necho the server ended\n"),
    );
    let spec = ws.write(
        "wrapped.yaml",
        &ssh_spec(
            &sshd,
            "wrapped",
            "local",
            &format!(", served-model-name: {marker}, sim-time-scale: 20"),
            "sweep:\n  ctx: [1024, 2048]\nrequests: 2\n",
        )
        .replace(
            &format!("launcher: [{BIN}, sim]"),
            &format!("launcher: [sh, {}]", wrapper.display()),
        ),
    );
    let mut child = spawn_run_with(&ws, &spec, &[("SERVEBENCH_SSH_IDLE_EXIT_S", "3")]);
    let dir = wait_for_run_dir(&ws, "wrapped");
    let pgid = wait_for_server(&dir);
    wait_for_nonempty(&dir.join("requests.jsonl"), Duration::from_secs(60));
    let meta = read_json(&dir.join("meta.json"));
    assert!(
        meta["servers"][0]["leader_start"].as_u64().is_some(),
        "{meta}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // Detached on the host, the server survives its runner (by design: a dropped SSH link
    // must not end a long run's server).
    assert!(!processes_with(&marker).is_empty());
    let out = servebench().arg("down").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("confirmed gone"), "{text}");
    assert!(!text.contains("reused"), "{text}");
    assert!(crate::sshd::group_members(pgid as i32).is_empty());
    assert!(
        processes_with(&marker).is_empty(),
        "{:?}",
        processes_with(&marker)
    );
}

#[test]
fn a_killed_ssh_master_is_reestablished_and_the_run_goes_on() {
    let sshd = sshd!();
    let ws = Workspace::new();
    let _turn = exclusive();
    let (mut child, dir, _) = start_background_run(
        &sshd,
        &ws,
        "blip",
        "local",
        ", sim-time-scale: 10",
        "sweep:\n  ctx: [1024, 2048, 4096, 1024]\nrequests: 2\n",
        &[],
    );
    wait_for_nonempty(&dir.join("points.jsonl"), Duration::from_secs(60));
    // The ControlMaster of this run.
    let masters = ssh_masters(&sshd);
    assert_eq!(masters.len(), 1, "{masters:?}");
    let pid: i32 = masters[0]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let p = points(&dir);
    assert_eq!(p.len(), 4, "every point got a record: {p:?}\n{stderr}");
    assert!(
        p.last().unwrap()["ok"].as_u64().unwrap() > 0,
        "the last point was measured over the new connection: {stderr}"
    );
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["servers"][0]["stopped"], true, "{meta}");
    assert!(status.code().is_some());
}

#[test]
fn a_host_that_goes_away_stops_the_run_with_what_it_measured() {
    let mut sshd = sshd!();
    let ws = Workspace::new();
    let _turn = exclusive();
    let (mut child, dir, pgid) = start_background_run(
        &sshd,
        &ws,
        "gone",
        "local",
        ", sim-time-scale: 10",
        "sweep:\n  ctx: [1024, 2048, 4096, 8192]\nrequests: 2\n",
        &[],
    );
    wait_for_nonempty(&dir.join("points.jsonl"), Duration::from_secs(60));
    // The host goes down: sshd and every connection end (the detached server lives on, as it
    // would on a host that is only unreachable; the test stops it below).
    sshd.stop();
    let status = child.wait().unwrap();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(status.code(), Some(1));
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "incomplete", "{meta}");
    assert!(
        meta["status_reason"]
            .as_str()
            .unwrap()
            .contains("cannot be reached"),
        "{meta}"
    );
    let p = points(&dir);
    assert!(p[0]["ok"].as_u64().unwrap() > 0, "the first point is kept");
    assert!(
        p.len() < 4,
        "the run stopped instead of failing every point: {p:?}"
    );
    assert!(dir.join("report.md").is_file());
}

/// Runs `sweep` over SSH with `client: host`, where the host's "servebench" is a stand-in
/// shell script whose `agent` branch is `agent_branch` (it passes the install check with
/// `--version`); `env` adds variables for the runner. Returns the output and run directory.
fn run_with_stand_in_agent(
    sshd: &Sshd,
    ws: &Workspace,
    name: &str,
    agent_branch: &str,
    sweep: &str,
    env: &[(&str, &str)],
) -> (std::process::Output, std::path::PathBuf) {
    let fake = ws.write(
        &format!("{name}-servebench"),
        &format!(
            "#!/bin/sh\ncase \"$1\" in\n  --version) echo 'servebench 0.1.0' ;;\n  agent) {agent_branch} ;;\nesac\n"
        ),
    );
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let spec = ws.write(
        &format!("{name}.yaml"),
        &ssh_spec(sshd, name, "host", "", sweep),
    );
    let _turn = exclusive();
    let out = servebench()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .env("SERVEBENCH_HOST_BINARY", &fake)
        .envs(env.iter().copied())
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let dir = run_dir(&out);
    (out, dir)
}

/// The message of the point's flag of `kind`.
fn flag_message(point: &serde_json::Value, kind: &str) -> String {
    point["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind)
        .and_then(|f| f["message"].as_str())
        .unwrap_or_else(|| panic!("no {kind} flag: {point}"))
        .to_string()
}

#[test]
fn an_agent_that_dies_is_recorded_with_its_last_words() {
    let sshd = sshd!();
    let ws = Workspace::new();
    let (out, dir) = run_with_stand_in_agent(
        &sshd,
        &ws,
        "dies",
        "echo 'agent: cannot open shared object file' >&2; exit 127",
        "sweep:\n  ctx: [256, 512]\n",
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let p = points(&dir);
    assert_eq!(p.len(), 2, "both points are recorded: {p:?}");
    for point in &p {
        let msg = flag_message(point, "agent-lost");
        assert!(msg.contains("cannot open shared object file"), "{msg}");
    }
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["servers"][0]["stopped"], true, "{meta}");
}

#[test]
fn a_frozen_agent_is_stopped_and_its_points_recorded() {
    let sshd = sshd!();
    let ws = Workspace::new();
    // A stand-in agent that says hello, then never speaks again (no heartbeat): frozen.
    let marker = format!("{}", 30_000 + std::process::id() % 30_000);
    let (out, dir) = run_with_stand_in_agent(
        &sshd,
        &ws,
        "frozen",
        &format!(
            "pg=$(ps -o pgid= -p $$ | tr -d ' '); echo \"{{\\\"hello\\\":{{\\\"pid\\\":$$,\\\"pgid\\\":$pg,\\\"protocol\\\":2}}}}\"; exec sleep {marker}"
        ),
        "sweep:\n  ctx: [256, 512]\n",
        &[("SERVEBENCH_AGENT_SILENCE_S", "1.5")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let p = points(&dir);
    assert_eq!(p.len(), 2, "both points are recorded: {p:?}");
    for point in &p {
        let msg = flag_message(point, "agent-lost");
        assert!(
            msg.contains("sent nothing, not even its heartbeat")
                && msg.contains("stopped with SIGTERM"),
            "{msg}"
        );
    }
    // Each point's frozen agent was stopped on the host: none is left.
    let left = processes_with(&format!("sleep {marker}"));
    assert!(left.is_empty(), "frozen agents left behind: {left:?}");
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["servers"][0]["stopped"], true, "{meta}");
}

#[test]
fn heartbeats_keep_a_quiet_agent_alive() {
    let sshd = sshd!();
    let ws = Workspace::new();
    // Decode steps of 60 ms: a 32-token request is silent for ~2 s, longer than the limit.
    let fast = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/sim/profiles/fast.yaml"
    ))
    .unwrap();
    let slow = fast.replace("base_ms: 1.2 ", "base_ms: 60 ");
    assert_ne!(fast, slow);
    let profile = ws.write("slow-decode.yaml", &slow);
    let spec = ws.write(
        "quiet.yaml",
        &ssh_spec(
            &sshd,
            "quiet",
            "host",
            "",
            "sweep:\n  ctx: [256]\nrequests: 1\n",
        ),
    );
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("profile: fast", &format!("profile: {}", profile.display()));
    std::fs::write(&spec, text).unwrap();
    let _turn = exclusive();
    let limit = 0.8;
    let out = servebench()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .env("SERVEBENCH_AGENT_SILENCE_S", limit.to_string())
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let p = points(&run_dir(&out));
    assert_eq!(p[0]["ok"], 1, "{}", p[0]);
    assert!(p[0]["flags"].as_array().unwrap().is_empty(), "{}", p[0]);
    // The request was silent for longer than the limit: only heartbeats bridged it.
    let e2e = mean(&p[0], "e2e_s");
    assert!(e2e > 2.0 * limit, "e2e {e2e} s");
}

#[test]
fn lines_from_the_agent_that_are_not_records_are_counted_on_the_point() {
    let sshd = sshd!();
    let ws = Workspace::new();
    // A stand-in agent: a stray line, then the point's record.
    let (out, dir) = run_with_stand_in_agent(
        &sshd,
        &ws,
        "garbled",
        "read -r line; echo 'Welcome to gpu-box!'; \
         echo '{\"point\":{\"point\":{\"id\":\"p001\",\"values\":{\"ctx\":256},\"group\":\"g1\",\"ok\":0,\"errors\":0,\"metrics\":{}},\"interrupted\":false}}'; cat >/dev/null",
        "sweep:\n  ctx: [256]\n",
        &[],
    );
    let p = &points(&dir)[0];
    let msg = flag_message(p, "agent-garbled");
    assert!(
        msg.starts_with("1 line from the host's agent was not servebench output and was skipped (first: Welcome to gpu-box!)"),
        "{msg}\n{}",
        show(&out)
    );
}

/// The model's config.json is read on the SSH host, from the model path the server is
/// launched with, and kept in meta.json so the report grades the points.
#[test]
fn the_model_config_is_read_on_the_ssh_host_and_the_report_grades_with_it() {
    let sshd = sshd!();
    let ws = Workspace::new();
    let model = ws.path().join("llama dir");
    std::fs::create_dir(&model).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crates/roofline/tests/fixtures/configs/llama-3.1-8b.json"),
        model.join("config.json"),
    )
    .unwrap();
    let spec = ssh_spec(
        &sshd,
        "ssh-config",
        "local",
        "",
        "sweep:\n  ctx: [256, 1024]\n",
    )
    .replace(
        "  model: test-model\n",
        &format!("  model: \"{}\"\n", model.display()),
    )
    .replace(
        "  ready_timeout: 30s\n",
        "  ready_timeout: 30s\n  gpu: h100-sxm\n",
    );
    let spec = ws.write("ssh-config.yaml", &spec);
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    let kept = &meta["servers"][0]["model_config"];
    let origin = kept["origin"].as_str().unwrap();
    assert!(origin.contains("127.0.0.1"), "{kept}");
    assert!(
        origin.ends_with(&format!(":{}/config.json", model.display())),
        "{kept}"
    );
    assert_eq!(kept["config"]["num_key_value_heads"], 8, "{kept}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Against the hardware"), "{report}");
    assert!(
        report.contains("NVIDIA H100 SXM's peak bandwidth (3350 GB/s"),
        "{report}"
    );
    assert!(!report.contains("The points are not graded"), "{report}");
}
