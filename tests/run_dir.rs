//! The run directory is never corrupted: one runner at a time (a lock for the runner's life),
//! a record that cannot be written stops the run (a real "no space left on device", from a
//! file that is a link to /dev/full), and the spec is found from any working directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

fn spawn_run(ws: &Workspace, spec: &Path) -> Child {
    Command::new(BIN)
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The first run directory under `<ws>/runs/<name>` once its meta.json exists.
fn wait_for_run_dir(ws: &Workspace, name: &str) -> PathBuf {
    poll_until(Duration::from_secs(60), "no run directory", || {
        let dir = std::fs::read_dir(ws.path().join("runs").join(name))
            .ok()?
            .next()?
            .ok()?
            .path();
        dir.join("meta.json").is_file().then_some(dir)
    })
}

#[test]
fn a_second_runner_on_a_live_run_directory_is_refused_at_once() {
    let ws = Workspace::new();
    let _turn = exclusive();
    let spec = ws.write(
        "busy.yaml",
        &sim_spec(
            "busy",
            "  prompt: { kind: repeat, tokens: 200, calibrate: false }\n  output_tokens: 400",
            "requests: 200",
        ),
    );
    let first = spawn_run(&ws, &spec);
    let dir = wait_for_run_dir(&ws, "busy");
    wait_for_nonempty(&dir.join("requests.jsonl"), Duration::from_secs(60));
    let before = std::fs::read_to_string(dir.join("requests.jsonl")).unwrap();

    let started = Instant::now();
    let second = servebench()
        .arg("run")
        .arg("--resume")
        .arg(&dir)
        .arg("--quiet")
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2), "{}", show(&second));
    assert!(started.elapsed() < Duration::from_secs(10), "at once");
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!("pid {}", first.id())),
        "names the runner: {err}"
    );
    // `down` would stop the live runner's server: refused too.
    let down = servebench().arg("down").arg(&dir).output().unwrap();
    assert_ne!(down.status.code(), Some(0), "{}", show(&down));
    assert!(
        String::from_utf8_lossy(&down.stderr).contains(&format!("pid {}", first.id())),
        "{}",
        show(&down)
    );
    // The refused runner touched nothing: the first one's records are all still there.
    let after = std::fs::read_to_string(dir.join("requests.jsonl")).unwrap();
    assert!(after.starts_with(&before), "records were dropped");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = first.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    // The lock went with its runner.
    let down = servebench().arg("down").arg(&dir).output().unwrap();
    assert!(down.status.success(), "{}", show(&down));
}

/// A spec whose server (a wrapper around `servebench sim`) starts only once `file` in the run
/// directory is a link to /dev/full, so the test wins the race against the runner's writes.
fn full_disk_spec(ws: &Workspace, name: &str, file: &str) -> PathBuf {
    let runs = ws.path().join("runs").join(name);
    let wrapper = ws.write(
        &format!("{name}.sh"),
        &format!(
            "until [ -L \"$(ls -d {runs}/*/ | head -1){file}\" ]; do sleep 0.05; done\nexec \"{BIN}\" sim \"$@\"\n",
            runs = runs.display()
        ),
    );
    ws.write(
        &format!("{name}.yaml"),
        &format!(
            "name: {name}\nserver:\n  engine: sglang\n  launcher: [sh, {}]\n  model: m\n  args: {{ profile: fast }}\n  ready_timeout: 30s\n\
             workload:\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\", calibrate: false }}\n  output_tokens: 8\n\
             sweep:\n  ctx: [256, 512]\nrequests: 4\n",
            wrapper.display()
        ),
    )
}

/// Runs `spec` with `file` in its run directory linked to /dev/full once the directory exists.
fn run_on_a_full_disk(ws: &Workspace, name: &str, file: &str) -> (std::process::Output, PathBuf) {
    let _turn = exclusive();
    let spec = full_disk_spec(ws, name, file);
    let child = spawn_run(ws, &spec);
    let dir = wait_for_run_dir(ws, name);
    std::os::unix::fs::symlink("/dev/full", dir.join(file)).unwrap();
    let out = child.wait_with_output().unwrap();
    (out, dir)
}

#[test]
fn a_full_disk_stops_the_run_at_the_first_record_it_cannot_write() {
    let ws = Workspace::new();
    let (out, dir) = run_on_a_full_disk(&ws, "full", "requests.jsonl");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("requests.jsonl") && err.contains("No space left on device"),
        "names the file and the OS error: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "failed", "{meta}");
    let reason = meta["status_reason"].as_str().unwrap();
    assert!(reason.contains("No space left on device"), "{reason}");
    assert!(
        meta["servers"][0]["outcome"]
            .as_str()
            .unwrap()
            .contains("confirmed gone"),
        "{meta}"
    );
    // Measuring stopped at once: the first point is recorded as cut short, the second never ran.
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 1, "{points:?}");
    assert_eq!(points[0]["incomplete"], true);
    assert_eq!(
        points[0]["ok"], 0,
        "no request is counted that is not on disk"
    );
    assert!(
        points[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "write-failed"),
        "{}",
        points[0]
    );
    assert!(!dir.join("meta.json.tmp").exists());
    // The report is attempted; here requests.jsonl is not a file it can read.
    assert!(err.contains("the report could not be rendered"), "{err}");
}

#[test]
fn a_meta_json_that_cannot_be_written_fails_the_run_and_leaves_no_temporary_file() {
    let ws = Workspace::new();
    let (out, dir) = run_on_a_full_disk(&ws, "fullmeta", "meta.json.tmp");
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("meta.json") && err.contains("No space left on device"),
        "{err}"
    );
    // The failed write removed its temporary file (here the link), so the status could still
    // be recorded.
    assert!(!dir.join("meta.json.tmp").exists());
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "failed", "{meta}");
    assert!(
        !dir.join("points.jsonl").exists() || read_jsonl(&dir.join("points.jsonl")).is_empty(),
        "nothing was measured after the failed write"
    );
}

#[test]
fn resume_and_report_work_from_another_working_directory() {
    let ws = Workspace::new();
    std::fs::create_dir(ws.path().join("specs")).unwrap();
    ws.write("specs/prompts.txt", "Tell me a story about a lighthouse.\n");
    ws.write(
        "specs/mine.md.j2",
        "# my template: {{ title }} ({{ totals.points }} points)\n",
    );
    ws.write(
        "specs/rel.yaml",
        &sim_spec(
            "rel",
            "  prompt: { kind: file, path: prompts.txt }\n  output_tokens: 4",
            "sweep:\n  concurrency: [1, 2]\nrequests: 2\nreport: { template: mine.md.j2 }",
        ),
    );
    let out = {
        let _turn = exclusive();
        servebench()
            .current_dir(ws.path())
            .args(["run", "specs/rel.yaml", "--out", "runs", "--quiet"])
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap()
    };
    assert!(out.status.success(), "{}", show(&out));
    let dir = ws.path().join(run_dir(&out));
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["spec_file"], "specs/rel.yaml");
    assert_eq!(
        meta["spec_path"],
        ws.path()
            .canonicalize()
            .unwrap()
            .join("specs/rel.yaml")
            .display()
            .to_string()
    );

    // Forget the second point, then resume it from elsewhere.
    let keep = |file: &str, key: &str| {
        let kept: Vec<String> = std::fs::read_to_string(dir.join(file))
            .unwrap()
            .lines()
            .filter(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()[key] == "p001")
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(dir.join(file), kept.concat()).unwrap();
    };
    keep("points.jsonl", "id");
    keep("requests.jsonl", "point");
    let out = {
        let _turn = exclusive();
        servebench()
            .current_dir("/")
            .arg("run")
            .arg("--resume")
            .arg(&dir)
            .arg("--quiet")
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap()
    };
    assert!(out.status.success(), "{}", show(&out));
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 2);
    assert_eq!(points[1]["ok"], 2, "{}", points[1]);

    std::fs::remove_file(dir.join("report.md")).unwrap();
    let out = servebench()
        .current_dir("/")
        .arg("report")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.starts_with("# my template: rel (2 points)"),
        "{report}"
    );
}
