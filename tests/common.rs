//! Shared helpers for the integration tests.

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;

// The turn timing-sensitive tests take and a process's output, shared with the simulator's
// tests (its runs take turns with ours).
pub use testkit::process::{Turn, exclusive, show};

/// Calls `f` every 20 ms until it gives a value, failing the test with `what` after `timeout`.
#[track_caller]
pub fn poll_until<T>(
    timeout: std::time::Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {timeout:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits until `path` exists and is not empty (a run has written its first line there).
#[track_caller]
pub fn wait_for_nonempty(path: &Path, timeout: std::time::Duration) {
    poll_until(timeout, &format!("{} stays empty", path.display()), || {
        std::fs::metadata(path).ok().filter(|m| m.len() > 0)
    });
}

/// `servebench run SPEC --out OUT --quiet` started with its output piped, for a test that
/// acts on the run while it goes (a signal, a server killed) and then waits for it.
pub fn spawn_run(spec: &Path, out: &Path) -> std::process::Child {
    std::process::Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The servebench binary under test.
pub fn servebench() -> Command {
    Command::cargo_bin("servebench").expect("binary built")
}

/// A temp directory with a spec file in it.
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

/// A failed test's files (its specs, run directories, server logs) stay for a look: a flaky
/// real engine's log is the only record of why it failed.
impl Drop for Workspace {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "the failed test's files are kept in {}",
                self.dir.path().display()
            );
        }
    }
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    #[track_caller]
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    /// `servebench run SPEC --out <tmp>/runs --quiet`.
    pub fn run(&self, spec: &Path) -> Output {
        self.run_with(spec, &[])
    }

    /// Runs `spec`, which must succeed; its run directory and points.jsonl.
    #[track_caller]
    pub fn run_ok(&self, spec: &Path) -> (PathBuf, Vec<serde_json::Value>) {
        let out = self.run(spec);
        assert!(out.status.success(), "{}", show(&out));
        let dir = run_dir(&out);
        let points = read_jsonl(&dir.join("points.jsonl"));
        (dir, points)
    }

    /// `servebench run SPEC --out <tmp>/runs --quiet ARGS...` (e.g. `--check`).
    pub fn run_with(&self, spec: &Path, args: &[&str]) -> Output {
        let turn = exclusive();
        self.run_in_turn(spec, args, &turn)
    }

    /// [`Workspace::run_with`] inside a turn the caller already holds: for a test that
    /// compares the timings of several runs, so nothing else runs between them.
    pub fn run_in_turn(&self, spec: &Path, args: &[&str], _turn: &Turn) -> Output {
        servebench()
            .arg("run")
            .arg(spec)
            .arg("--out")
            .arg(self.dir.path().join("runs"))
            .arg("--quiet")
            .args(args)
            .timeout(std::time::Duration::from_secs(120))
            .output()
            .expect("run servebench")
    }
}

/// A `servebench sim` on a free port of this machine (`--model-path MODEL --port PORT
/// --profile fast`, then `args`), for the tests of a server servebench attaches to
/// (`server.url`): started, and returned once its `/health` answers 200 (the runner looks
/// at it once, so a run before that fails); killed when dropped.
pub struct ExternalSim {
    pub port: u16,
    child: std::process::Child,
}

impl ExternalSim {
    #[track_caller]
    pub fn start(model: &str, args: &[&str], env: &[(&str, &Path)]) -> ExternalSim {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("servebench"))
            .args(["sim", "--model-path", model, "--port", &port.to_string()])
            .args(["--profile", "fast"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut sim = ExternalSim { port, child };
        poll_until(
            std::time::Duration::from_secs(30),
            &format!("the simulator on port {port} is not healthy"),
            || {
                assert!(sim.is_running(), "the simulator on port {port} exited");
                health_ok(port).then_some(())
            },
        );
        sim
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Whether the simulator is still running (servebench must not stop a server it did
    /// not start).
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for ExternalSim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `GET /health` on `port` answers 200.
fn health_ok(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let mut head = [0u8; 12];
    conn.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_ok()
        && conn.read_exact(&mut head).is_ok()
        && head.ends_with(b" 200")
}

/// The run directory printed by `servebench run`.
#[track_caller]
pub fn run_dir(out: &Output) -> PathBuf {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .unwrap_or_else(|| {
            panic!(
                "no run directory in output:\n{stdout}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    PathBuf::from(line.trim())
}

#[track_caller]
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

#[track_caller]
pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .expect("json")
}

/// A spec on the simulator's fast profile; `extra` is appended (top-level keys).
pub fn sim_spec(name: &str, workload: &str, extra: &str) -> String {
    format!(
        "name: {name}\nserver:\n  engine: sim\n  model: test-model\n  args: {{ profile: fast, context-length: 8192 }}\n  ready_timeout: 30s\nworkload:\n{workload}\n{extra}\n"
    )
}

/// Fails when the checked-in schema at `path` (relative to the repository root) differs from
/// `current`, naming the command that regenerates it; `UPDATE_SCHEMA=1` rewrites it instead.
#[track_caller]
pub fn assert_schema_current(path: &str, current: &str, kind: &str) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::write(&file, current).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    let on_disk = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        on_disk == current,
        "{path} is stale: run `cargo run -- schema {kind} > {path}` \
         (or `UPDATE_SCHEMA=1 cargo test --test integration checked_in_`)"
    );
}

/// A point's flags other than timing noise (`high-variance`), which a busy
/// test machine may raise on any point.
pub fn validity_flags(point: &serde_json::Value) -> Vec<&serde_json::Value> {
    point["flags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !MACHINE_FLAGS.contains(&f["kind"].as_str().unwrap_or("")))
        .collect()
}

/// Flags that describe the machine a test ran on rather than the point: its spread, and a
/// client short of CPU (`client-read-late`: on a loaded test machine the client may read a
/// fast profile's tokens later than their 1 ms gaps; `decode-held-back`: read so late that a
/// request's tokens came in one read). Tests of those flags look for them.
pub const MACHINE_FLAGS: &[&str] = &["high-variance", "client-read-late", "decode-held-back"];

/// The report crate's fixture runs.
pub fn report_fixtures() -> testkit::runs::FixtureRuns {
    testkit::runs::FixtureRuns::at(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/report/tests/fixtures/runs"),
    )
}
