//! Ctrl-C during a point: stop new requests, keep what finished, stop the server, partial report.

use std::time::{Duration, Instant};

use crate::common::*;

/// Processes whose command line mentions `needle` (read from /proc).
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[test]
fn ctrl_c_keeps_finished_requests_stops_the_server_and_renders_a_partial_report() {
    interrupt_mid_point(nix::sys::signal::Signal::SIGINT, "SIGINT (Ctrl-C)");
}

#[test]
fn sighup_from_a_closed_terminal_is_handled_like_ctrl_c() {
    interrupt_mid_point(nix::sys::signal::Signal::SIGHUP, "SIGHUP");
}

/// A run sent `signal` mid-point: exit 1, the partial point and report kept, the server
/// stopped, and the console says which signal in words.
fn interrupt_mid_point(signal: nix::sys::signal::Signal, said: &str) {
    let _turn = exclusive();
    let ws = Workspace::new();
    let model = format!("interrupt-model-{}", std::process::id());
    let spec = ws.write(
        "long.yaml",
        &format!(
            "name: interrupted\nserver:\n  engine: sim\n  model: {model}\n  args: {{ profile: fast }}\nworkload:\n  prompt: {{ kind: repeat, tokens: 200, calibrate: false }}\n  output_tokens: 400\nrequests: 200\n"
        ),
    );
    let child = crate::common::spawn_run(&spec, &ws.path().join("runs"));

    // Wait until at least two requests are on disk, then press Ctrl-C.
    let deadline = Instant::now() + Duration::from_secs(60);
    let requests_file = loop {
        if let Some(f) = glob_requests(ws.path())
            && std::fs::read_to_string(&f).is_ok_and(|t| t.lines().count() >= 2)
        {
            break f;
        }
        assert!(Instant::now() < deadline, "no requests recorded in time");
        std::thread::sleep(Duration::from_millis(20));
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("run incomplete: interrupted by {said}")),
        "{stderr}"
    );
    assert!(!stderr.contains("interrupted: interrupted"), "{stderr}");
    assert!(!stderr.contains("Incomplete"), "no Rust names: {stderr}");

    let dir = requests_file.parent().unwrap();
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "incomplete", "{meta}");
    assert!(
        meta["status_reason"].as_str().unwrap().contains(said),
        "{meta}"
    );
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 1);
    assert_eq!(points[0]["incomplete"], true);
    let ok = points[0]["ok"].as_u64().unwrap();
    assert!((2..200).contains(&ok), "finished requests are kept: {ok}");
    assert_eq!(
        read_jsonl(&dir.join("requests.jsonl")).len() as u64,
        ok,
        "only finished requests are records"
    );
    assert!(
        points[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "interrupted")
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.to_lowercase().contains("incomplete"),
        "partial report says so"
    );
    assert!(
        meta["servers"][0]["outcome"]
            .as_str()
            .unwrap()
            .contains("confirmed gone"),
        "{meta}"
    );
    // No simulator process survives (the process table is the judge).
    let left = processes_mentioning(&model);
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn glob_requests(root: &std::path::Path) -> Option<std::path::PathBuf> {
    let base = root.join("runs").join("interrupted");
    let entry = std::fs::read_dir(base).ok()?.flatten().next()?;
    let f = entry.path().join("requests.jsonl");
    f.exists().then_some(f)
}

#[test]
fn a_closed_stdout_and_stderr_do_not_stop_the_run() {
    // `servebench run spec | head -1`, and a terminal that went away: every console write
    // fails, the run goes on to its end and its report.
    let ws = Workspace::new();
    let spec = ws.write(
        "closed.yaml",
        &sim_spec(
            "closed",
            "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 4",
            "sweep:\n  ctx: [128, 256]\nrequests: 2",
        ),
    );
    let _turn = exclusive();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Closing the read ends makes every write fail with EPIPE.
    drop(child.stdout.take());
    drop(child.stderr.take());
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "not a panic (101): {status:?}");
    let base = ws.path().join("runs").join("closed");
    let dir = std::fs::read_dir(base)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "complete", "{meta}");
    assert_eq!(read_jsonl(&dir.join("points.jsonl")).len(), 2);
    assert!(dir.join("report.md").is_file());
}

/// Ctrl-C during an open-loop point with requests in flight: the same end as a closed loop
/// (exit 1, the partial point and report, nothing left locked), and `--resume` finishes it.
#[test]
fn ctrl_c_during_a_load_point_ends_like_a_closed_loop_and_resume_finishes_it() {
    let _turn = exclusive();
    let ws = Workspace::new();
    let model = format!("load-interrupt-model-{}", std::process::id());
    // 40 requests a second, each about 0.5 s of decode: some always in flight.
    let spec = ws.write(
        "load.yaml",
        &format!(
            "name: interrupted\nserver:\n  engine: sim\n  model: {model}\n  args: {{ profile: fast }}\nworkload:\n  prompt: {{ kind: repeat, tokens: 64, calibrate: false }}\n  output_tokens: 400\nload: {{ kind: rate, rate: 40, arrival: constant }}\nstop: {{ requests: 120 }}\n"
        ),
    );
    for attempt in 0..3 {
        let child =
            crate::common::spawn_run(&spec, &ws.path().join("runs").join(attempt.to_string()));
        let root = ws.path().join("runs").join(attempt.to_string());
        let deadline = Instant::now() + Duration::from_secs(60);
        let requests_file = loop {
            let found = std::fs::read_dir(root.join("interrupted"))
                .ok()
                .and_then(|mut d| d.next())
                .and_then(|e| e.ok())
                .map(|e| e.path().join("requests.jsonl"));
            if let Some(f) = found
                && std::fs::read_to_string(&f).is_ok_and(|t| t.lines().count() >= 3)
            {
                break f;
            }
            assert!(Instant::now() < deadline, "no requests recorded in time");
            std::thread::sleep(Duration::from_millis(10));
        };
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(1), "not a panic: {}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        let dir = requests_file.parent().unwrap();
        let meta = read_json(&dir.join("meta.json"));
        assert_eq!(meta["status"], "incomplete", "{meta}");
        let points = read_jsonl(&dir.join("points.jsonl"));
        assert_eq!(points.len(), 1, "the partial point is recorded");
        assert_eq!(points[0]["incomplete"], true);
        let flags = points[0]["flags"].as_array().unwrap();
        let said = flags
            .iter()
            .find(|f| f["kind"] == "interrupted")
            .unwrap_or_else(|| panic!("{flags:?}"));
        // Counted against the schedule's 120 measured requests, not one per point.
        assert!(
            said["message"]
                .as_str()
                .unwrap()
                .contains(" of 120 requests"),
            "{said}"
        );
        assert!(dir.join("report.md").is_file(), "a partial report");
        let left = processes_mentioning(&model);
        assert!(left.is_empty(), "left behind: {left:?}");
        if attempt < 2 {
            continue;
        }
        // Not locked: --resume measures the point again, to the end.
        let out = servebench()
            .args(["run", "--quiet", "--resume"])
            .arg(dir)
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
        let meta = read_json(&dir.join("meta.json"));
        assert_eq!(meta["status"], "complete", "{meta}");
        let points = read_jsonl(&dir.join("points.jsonl"));
        assert_eq!(points.len(), 1);
        assert_eq!(points[0]["ok"], 120, "{}", points[0]);
    }
}
