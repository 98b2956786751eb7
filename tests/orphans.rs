//! No orphans: a runner killed with SIGKILL leaves no server behind on this machine, even when
//! the launcher is a wrapper script that starts the real server as its child (the supervisor
//! stops the whole process group); `down` knows a group by its leader's start time, and a
//! zombie counts as gone.

use std::path::Path;
use std::time::Duration;

use crate::common::*;

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

/// Processes whose command line mentions `needle` and that are not zombies (from /proc).
pub fn live_processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if zombie {
            continue;
        }
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// A spec whose launcher is `sh WRAPPER` (engine sglang: the wrapper gets SGLang's flags and
/// hands them to `servebench sim`), serving under the model name `marker`.
fn wrapper_spec(
    ws: &Workspace,
    name: &str,
    wrapper_body: &str,
    marker: &str,
) -> std::path::PathBuf {
    let wrapper = ws.write(&format!("{name}.sh"), wrapper_body);
    ws.write(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nserver:\n  engine: sglang\n  launcher: [sh, {wrapper}]\n  model: m\n  args: {{ profile: fast, served-model-name: {marker}, sim-time-scale: 20 }}\n  ready_timeout: 30s\n\
             workload:\n  prompt: {{ kind: repeat, tokens: 2000, calibrate: false }}\n  output_tokens: 200\nrequests: 50\n",
            wrapper = wrapper.display()
        ),
    )
}

/// The run directory under `<ws>/runs/<name>` once the runner recorded its server.
fn wait_for_launch(ws: &Workspace, name: &str) -> std::path::PathBuf {
    poll_until(Duration::from_secs(60), "no server recorded", || {
        let dir = std::fs::read_dir(ws.path().join("runs").join(name))
            .ok()?
            .next()?
            .ok()?
            .path();
        let meta = std::fs::read_to_string(dir.join("meta.json")).ok()?;
        let meta: serde_json::Value = serde_json::from_str(&meta).ok()?;
        meta["servers"][0]["pgid"].as_i64().map(|_| dir)
    })
}

fn kill_runner_and_count_leftovers(variant: &str, wrapper_body: &str) {
    let ws = Workspace::new();
    let _turn = exclusive();
    let marker = format!("orphan-{variant}-{}", std::process::id());
    let spec = wrapper_spec(&ws, variant, wrapper_body, &marker);
    let mut runner = std::process::Command::new(BIN)
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let dir = wait_for_launch(&ws, variant);
    wait_for_nonempty(&dir.join("requests.jsonl"), Duration::from_secs(60));
    assert!(
        !live_processes_mentioning(&marker).is_empty(),
        "the server runs before the kill"
    );
    let meta = read_json(&dir.join("meta.json"));
    let server = &meta["servers"][0];
    assert!(server["leader_start"].as_u64().is_some(), "{meta}");
    assert!(server["port"].as_u64().is_some(), "{meta}");
    runner.kill().unwrap();
    runner.wait().unwrap();
    // The supervisor stops the whole group as soon as its runner is gone: SIGTERM is enough,
    // well within the 10 s before it would use SIGKILL.
    poll_until(
        Duration::from_secs(5),
        &format!(
            "{variant}: left behind: {:?}",
            live_processes_mentioning(&marker)
        ),
        || live_processes_mentioning(&marker).is_empty().then_some(()),
    );
    // `down` finds nothing to do.
    let out = servebench().arg("down").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("already gone"), "{text}");
    assert!(text.contains("is free"), "the port is checked: {text}");
}

#[test]
fn a_killed_runner_leaves_no_server_when_a_wrapper_script_starts_it_as_a_child() {
    kill_runner_and_count_leftovers(
        "child",
        &format!("# a venv would be activated here\n\"{BIN}\" sim \"$@\"\necho the server ended\n"),
    );
}

#[test]
fn a_killed_runner_leaves_no_server_when_a_wrapper_script_execs_it() {
    kill_runner_and_count_leftovers("exec", &format!("exec \"{BIN}\" sim \"$@\"\n"));
}

/// A run directory whose meta.json records one local server: the clean-sweep fixture's meta
/// with `server` merged into its first launch.
fn run_dir_with_server(ws: &Workspace, server: serde_json::Value) -> std::path::PathBuf {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/report/tests/fixtures/runs/clean-sweep");
    let dir = ws.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    let mut meta = read_json(&fixture.join("meta.json"));
    let launch = meta["servers"][0].as_object_mut().unwrap();
    launch.remove("host");
    launch.insert("stopped".into(), false.into());
    for (k, v) in server.as_object().unwrap() {
        launch.insert(k.clone(), v.clone());
    }
    meta["servers"] = serde_json::json!([launch]);
    std::fs::write(
        dir.join("meta.json"),
        serde_json::to_string_pretty(&meta).unwrap(),
    )
    .unwrap();
    dir
}

/// Field 22 of /proc/PID/stat.
fn start_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(')').unwrap().1;
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

#[test]
fn down_reports_a_zombie_group_as_gone_not_reused() {
    use std::os::unix::process::CommandExt;
    let ws = Workspace::new();
    // A group whose only process has exited and is not reaped (this test is its parent).
    let child = std::process::Command::new("sh")
        .args(["-c", "exit 0"])
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = start_ticks(pid);
    poll_until(Duration::from_secs(10), "the child is not a zombie", || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .trim_start()
            .starts_with('Z')
            .then_some(())
    });
    let dir = run_dir_with_server(
        &ws,
        serde_json::json!({ "pgid": pid, "pid": pid, "leader_start": start, "command": ["python", "-m", "sglang.launch_server"] }),
    );
    let out = servebench().arg("down").arg(&dir).output().unwrap();
    drop(child);
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("already gone"), "{text}");
    assert!(!text.contains("reused"), "{text}");
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["servers"][0]["stopped"], true, "{meta}");
}

#[test]
fn down_leaves_a_reused_group_alone_and_stops_its_own_group_whatever_it_runs() {
    use std::os::unix::process::CommandExt;
    let ws = Workspace::new();
    let mut other = std::process::Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = other.id();
    let start = start_ticks(pid);
    // Recorded with another start time: the id now belongs to another process.
    let dir = run_dir_with_server(
        &ws,
        serde_json::json!({ "pgid": pid, "pid": pid, "leader_start": start + 1, "command": ["sleep"] }),
    );
    let out = servebench().arg("down").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("left alone") && text.contains("reused"),
        "{text}"
    );
    assert!(other.try_wait().unwrap().is_none(), "left running");

    // Recorded with its own start time, it is stopped even though its program name (a
    // wrapper's `sh`) is not what runs now.
    let dir = ws.path().join("run");
    let mut meta = read_json(&dir.join("meta.json"));
    meta["servers"][0]["leader_start"] = start.into();
    meta["servers"][0]["command"] = serde_json::json!(["sh", "launch-sglang.sh"]);
    std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    let out = servebench().arg("down").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("confirmed gone"), "{text}");
    let status = other.wait().unwrap();
    assert!(!status.success(), "stopped by a signal: {status:?}");
}

/// The processes of group `pgid` (pid, command name), zombies left out.
fn group_members(pgid: i32) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") || fields.get(2) != Some(&pgid.to_string().as_str()) {
            continue;
        }
        let pid: i32 = head.split_whitespace().next().unwrap().parse().unwrap();
        let comm = head.split_once('(').map(|(_, c)| c.to_string()).unwrap();
        found.push((pid, comm));
    }
    found
}

/// Waits up to `timeout` for `child` to exit; None (after killing it) when it did not.
fn wait_at_most(
    mut child: std::process::Child,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A run of `wrapper_body` as SGLang's launcher (a long point, a 120 s request timeout),
/// started; its run directory once requests flow, and the marker its processes carry.
/// A runner a test started: killed when the test ends before it (a failed assertion), so a
/// failing test leaves no run going (its server is stopped by its supervisor).
struct Runner(Option<std::process::Child>);

impl Runner {
    fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, std::process::Child::id)
    }

    fn take(mut self) -> std::process::Child {
        self.0.take().expect("a runner is taken once")
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn start_long_run(
    ws: &Workspace,
    name: &str,
    wrapper_body: &str,
) -> (Runner, std::path::PathBuf, String) {
    let marker = format!("orphan-{name}-{}", std::process::id());
    let spec = wrapper_spec(ws, name, wrapper_body, &marker);
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("requests: 50\n", "requests: 400\nrequest_timeout: 120s\n");
    std::fs::write(&spec, text).unwrap();
    let runner = std::process::Command::new(BIN)
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let runner = Runner(Some(runner));
    let dir = wait_for_launch(ws, name);
    wait_for_nonempty(&dir.join("requests.jsonl"), Duration::from_secs(60));
    (runner, dir, marker)
}

/// The first point's `server-crashed` message.
fn crash_message(dir: &Path) -> String {
    let points = read_jsonl(&dir.join("points.jsonl"));
    let flags = points[0]["flags"].as_array().cloned().unwrap_or_default();
    flags
        .iter()
        .find(|f| f["kind"] == "server-crashed")
        .and_then(|f| f["message"].as_str())
        .unwrap_or_else(|| panic!("no server-crashed flag: {}", points[0]))
        .to_string()
}

#[test]
fn a_killed_supervisor_leaves_no_server_even_one_that_ignores_sigterm() {
    let ws = Workspace::new();
    let _turn = exclusive();
    // A launcher that outlives SIGTERM (uvicorn waits for its open requests) and the server
    // it started as its child.
    let (runner, dir, marker) = start_long_run(
        &ws,
        "supervisor",
        &format!("trap '' TERM\n\"{BIN}\" sim \"$@\"\necho the server ended\n"),
    );
    let pgid = read_json(&dir.join("meta.json"))["servers"][0]["pgid"]
        .as_i64()
        .unwrap() as i32;
    // The group's leader is `servebench supervise`.
    assert!(
        group_members(pgid)
            .iter()
            .any(|(pid, name)| *pid == pgid && name.starts_with("servebench")),
        "{:?}",
        group_members(pgid)
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let killed = std::time::Instant::now();
    poll_until(
        Duration::from_secs(5),
        &format!(
            "left behind by the killed supervisor: {:?}",
            live_processes_mentioning(&marker)
        ),
        || live_processes_mentioning(&marker).is_empty().then_some(()),
    );
    let status = wait_at_most(runner.take(), Duration::from_secs(60))
        .expect("the run waited on requests to a server that is gone");
    assert!(!status.success(), "a crashed point is no success");
    assert!(
        killed.elapsed() < Duration::from_secs(60),
        "well within the 120 s request timeout: {:?}",
        killed.elapsed()
    );
    let msg = crash_message(&dir);
    assert!(msg.contains("leader"), "{msg}");
}

#[test]
fn a_server_that_lost_its_scheduler_is_stopped_at_once_not_waited_on() {
    let ws = Workspace::new();
    let _turn = exclusive();
    // SGLang's layout in miniature: a scheduler (here `sleep`) beside the HTTP front (the
    // simulator). When the scheduler dies the front stays, holding its connections without a
    // token more (stopped): what SGLang's launcher does when its scheduler is killed.
    let (runner, dir, marker) = start_long_run(
        &ws,
        "scheduler",
        &format!(
            "sleep 3600 &\nPART=$!\n\"{BIN}\" sim \"$@\" &\nSIM=$!\nwait $PART\nkill -STOP $SIM\nwait $SIM\n"
        ),
    );
    let pgid = read_json(&dir.join("meta.json"))["servers"][0]["pgid"]
        .as_i64()
        .unwrap() as i32;
    let scheduler = group_members(pgid)
        .into_iter()
        .find(|(_, name)| name == "sleep")
        .map(|(pid, _)| pid)
        .unwrap_or_else(|| panic!("no scheduler: {:?}", group_members(pgid)));
    // A part of the server is one that ran a while, not a passing helper.
    std::thread::sleep(Duration::from_secs(11));
    assert!(
        !live_processes_mentioning(&marker).is_empty(),
        "the run is still going"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(scheduler),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let killed = std::time::Instant::now();
    // Its `/health` is given 25 s (SGLang's own check waits 20 s for its scheduler), then the
    // server is stopped: well within the spec's 120 s request timeout.
    let status = wait_at_most(runner.take(), Duration::from_secs(60))
        .expect("the run waited on requests the server could never answer");
    assert!(!status.success(), "a crashed point is no success");
    assert!(killed.elapsed() < Duration::from_secs(60));
    let left = live_processes_mentioning(&marker);
    assert!(left.is_empty(), "left behind: {left:?}");
    let msg = crash_message(&dir);
    assert!(
        msg.contains(&format!("process {scheduler} (sleep)"))
            && msg.contains("did not answer /health within 25 s"),
        "the point names what was lost and what the server did: {msg}"
    );
}

#[test]
fn a_helper_that_ends_while_the_server_still_answers_is_not_a_lost_server() {
    let ws = Workspace::new();
    let _turn = exclusive();
    // A helper beside the server (here `sleep`): a JIT compiler, or PyTorch's compile workers,
    // which shut down after a minute idle. The server (the simulator) serves on without it.
    let (runner, dir, marker) = start_long_run(
        &ws,
        "helper",
        &format!("sleep 3600 &\nexec \"{BIN}\" sim \"$@\"\n"),
    );
    let pgid = read_json(&dir.join("meta.json"))["servers"][0]["pgid"]
        .as_i64()
        .unwrap() as i32;
    let helper = group_members(pgid)
        .into_iter()
        .find(|(_, name)| name == "sleep")
        .map(|(pid, _)| pid)
        .unwrap_or_else(|| panic!("no helper: {:?}", group_members(pgid)));
    // Settled, as a scheduler would be: it ran 10 s and more.
    std::thread::sleep(Duration::from_secs(11));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(helper),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let at_kill = read_jsonl(&dir.join("requests.jsonl")).len();
    // The server serves on: a request (about 5 s each here) is answered after the helper ended.
    poll_until(
        Duration::from_secs(30),
        "no request answered after the helper ended",
        || {
            let after = read_jsonl(&dir.join("requests.jsonl"));
            (after.len() > at_kill && after.iter().all(|r| r["error"].is_null())).then_some(())
        },
    );
    assert!(
        !live_processes_mentioning(&marker).is_empty(),
        "the server was stopped: {:?}",
        std::fs::read_to_string(dir.join("points.jsonl"))
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(runner.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    wait_at_most(runner.take(), Duration::from_secs(60)).expect("Ctrl-C ends the run");
    assert!(live_processes_mentioning(&marker).is_empty());
    let point = &read_jsonl(&dir.join("points.jsonl"))[0];
    let flags = point["flags"].as_array().cloned().unwrap_or_default();
    let kinds: Vec<&str> = flags.iter().filter_map(|f| f["kind"].as_str()).collect();
    assert!(
        !kinds.contains(&"server-crashed") && !kinds.contains(&"server-lost"),
        "{kinds:?}"
    );
    let ended = flags
        .iter()
        .find(|f| f["kind"] == "server-part-ended")
        .and_then(|f| f["message"].as_str())
        .unwrap_or_else(|| panic!("no server-part-ended flag: {point}"));
    assert!(
        ended.contains(&format!("process {helper} (sleep)")) && ended.contains("still answered"),
        "{ended}"
    );
}
