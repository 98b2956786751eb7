//! A server process on this machine: spawned in its own process group with its output in a
//! log file, and always stopped as a whole group.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::engine::LaunchCommand;

/// A running server process group.
#[derive(Debug)]
pub struct LocalProcess {
    child: Child,
    pgid: i32,
    log_path: PathBuf,
    stopped: bool,
}

/// How a stop went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// It had already exited (status as text).
    AlreadyExited(String),
    /// It exited after SIGTERM.
    Terminated,
    /// It ignored SIGTERM for the grace period and was killed.
    Killed,
}

impl std::fmt::Display for StopOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopOutcome::AlreadyExited(s) => write!(f, "had exited ({s})"),
            StopOutcome::Terminated => write!(f, "stopped with SIGTERM"),
            StopOutcome::Killed => write!(f, "killed with SIGKILL after the grace period"),
        }
    }
}

impl LocalProcess {
    /// Starts `cmd` with `env` added, stdout and stderr appended to `log_path`, in a new
    /// process group. The child also gets SIGTERM if servebench itself dies, so even a
    /// `kill -9` of the runner does not leave a server behind.
    pub fn spawn(
        cmd: &LaunchCommand,
        env: &IndexMap<String, String>,
        log_path: &Path,
    ) -> std::io::Result<Self> {
        Self::spawn_in(cmd, env, None, log_path)
    }

    /// Like [`spawn`](Self::spawn), in the working directory `workdir` when given.
    pub fn spawn_in(
        cmd: &LaunchCommand,
        env: &IndexMap<String, String>,
        workdir: Option<&str>,
        log_path: &Path,
    ) -> std::io::Result<Self> {
        let log = File::options().create(true).append(true).open(log_path)?;
        let mut command = Command::new(&cmd.program);
        if let Some(dir) = workdir {
            command.current_dir(dir);
        }
        command
            .args(&cmd.args)
            .envs(env)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot start {:?}: {e}", cmd.program))
        })?;
        let pgid = child.id() as i32;
        Ok(LocalProcess {
            child,
            pgid,
            log_path: log_path.to_path_buf(),
            stopped: false,
        })
    }

    /// Process group id (= the leader's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The exit status if the leader has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM to the whole group, up to `grace` to exit, then SIGKILL; waits for the leader.
    pub fn stop(&mut self, grace: Duration) -> StopOutcome {
        self.stopped = true;
        if let Some(status) = self.exit_status() {
            // The leader is gone; its children may not be.
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
            return StopOutcome::AlreadyExited(status.to_string());
        }
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exit_status().is_some() && !group_alive(self.pgid) {
                return StopOutcome::Terminated;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        let _ = self.child.wait();
        // Orphaned members are reaped by init; give it a moment so callers can confirm.
        let deadline = Instant::now() + Duration::from_secs(2);
        while group_alive(self.pgid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        StopOutcome::Killed
    }
}

/// True while any process of the group exists (signal 0 probes without sending).
pub fn group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_ok()
}

impl Drop for LocalProcess {
    fn drop(&mut self) {
        if !self.stopped {
            self.stop(Duration::from_secs(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> LaunchCommand {
        LaunchCommand {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
        }
    }

    #[test]
    fn stop_kills_the_whole_group_and_logs_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let mut env = IndexMap::new();
        env.insert("GREETING".to_string(), "hello from env".to_string());
        // A parent that spawns a grandchild: both must go.
        let mut p =
            LocalProcess::spawn(&sh("echo $GREETING; sleep 30 & sleep 30"), &env, &log).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(group_alive(p.pgid()));
        let outcome = p.stop(Duration::from_secs(2));
        assert_eq!(outcome, StopOutcome::Terminated);
        assert!(!group_alive(p.pgid()));
        assert!(
            std::fs::read_to_string(&log)
                .unwrap()
                .contains("hello from env")
        );
    }

    #[test]
    fn a_process_that_ignores_term_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = LocalProcess::spawn(
            &sh("trap '' TERM; sleep 30"),
            &IndexMap::new(),
            &dir.path().join("l"),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(p.stop(Duration::from_millis(300)), StopOutcome::Killed);
        assert!(!group_alive(p.pgid()));
    }

    #[test]
    fn exit_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let mut p =
            LocalProcess::spawn(&sh("exit 3"), &IndexMap::new(), &dir.path().join("l")).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(p.exit_status().is_some());
        assert!(matches!(
            p.stop(Duration::from_secs(1)),
            StopOutcome::AlreadyExited(_)
        ));
    }

    #[test]
    fn missing_program_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let c = LaunchCommand {
            program: "/no/such/servebench-engine".into(),
            args: vec![],
        };
        let e = LocalProcess::spawn(&c, &IndexMap::new(), &dir.path().join("l")).unwrap_err();
        assert!(e.to_string().contains("/no/such/servebench-engine"));
    }
}
