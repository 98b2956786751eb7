//! Processes under test: the turn timing-sensitive tests take, servers started in their own
//! process group and awaited, and a process's output for an assertion's message.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::http;

/// Held while a test runs a server and measures timing: timing-sensitive tests take turns, so
/// on a 2-core machine one test's server is not starved by another's (timing assertions stay
/// meaningful and the suites stay deterministic).
///
/// The turn is a lock on a file in the temp directory, not a mutex: every test binary of the
/// workspace (servebench's, the simulator's) takes the same file, so they take turns too, and
/// `cargo nextest run` (a process per test) is covered. Each call opens the file anew, so
/// threads of one process (`cargo test`) exclude each other too; the lock goes with the file
/// when the guard drops, or when a killed test's process ends.
pub fn exclusive() -> Turn {
    let path = std::env::temp_dir().join("servebench-tests.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    Turn { _file: file }
}

/// A test's turn at timing-sensitive work (see [`exclusive`]); ends when dropped.
#[must_use = "the turn ends when the guard drops"]
pub struct Turn {
    _file: std::fs::File,
}

/// A process's exit status, stdout and stderr, for an assertion's message.
pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A port free on 127.0.0.1 a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `cmd` in its own process group, its output in `log`, from a thread that lives as
/// long as the test process: the parent-death signal fires when the forking thread ends, and
/// a server (a shared one too) must outlive the test that started it, but not the process.
pub fn spawn_kept(mut cmd: Command, log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("log");
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out)
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            Ok(())
        });
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cmd.spawn());
        loop {
            std::thread::park();
        }
    });
    rx.recv()
        .expect("spawner thread")
        .unwrap_or_else(|e| panic!("cannot start the server: {e}"))
}

/// Waits until `GET base/path` answers 200, or fails with the log's tail.
pub fn wait_healthy(child: &mut Child, base: &str, path: &str, log: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "the server exited ({status}) before it was ready:\n{}",
                tail(&std::fs::read_to_string(log).unwrap_or_default(), 40)
            );
        }
        if http::get(base, path).is_ok_and(|r| r.status == 200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not ready within {timeout:?}:\n{}",
            tail(&std::fs::read_to_string(log).unwrap_or_default(), 40)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
