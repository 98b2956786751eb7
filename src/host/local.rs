//! Servers on this machine: spawned in their own process group with their output in a log file,
//! and always stopped as a whole group. [`LocalHost`] is the [`Host`](super::Host) for
//! `host: local`.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use futures_util::future::BoxFuture;

use super::{HostError, Leftover, ProcessIds, ServerProcess, Spawn, Stopped};
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

/// This machine as a [`Host`](super::Host).
pub struct LocalHost;

/// A server launched by [`LocalHost`].
pub struct LocalServer {
    process: LocalProcess,
    url: String,
}

impl super::Host for LocalHost {
    fn name(&self) -> String {
        "local".into()
    }

    fn pick_port(&self, wanted: Option<u16>) -> BoxFuture<'_, Result<u16, HostError>> {
        Box::pin(async move {
            match wanted {
                Some(p) if super::port_in_use(p) => Err(HostError::PortInUse {
                    port: p,
                    host: "127.0.0.1".into(),
                }),
                Some(p) => Ok(p),
                None => super::free_port().map_err(|e| HostError::io("no free port", e)),
            }
        })
    }

    fn servebench_binary(&self) -> BoxFuture<'_, Result<String, HostError>> {
        Box::pin(async {
            std::env::current_exe()
                .map(|p| p.to_string_lossy().into_owned())
                .map_err(|e| HostError::io("cannot find servebench's own binary", e))
        })
    }

    fn spawn<'a>(
        &'a self,
        spawn: Spawn<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn ServerProcess>, HostError>> {
        Box::pin(async move {
            let process =
                LocalProcess::spawn_in(spawn.command, spawn.env, spawn.workdir, spawn.log_path)
                    .map_err(|e| HostError::Unsupported(e.to_string()))?;
            Ok(Box::new(LocalServer {
                process,
                url: format!("http://127.0.0.1:{}", spawn.port),
            }) as Box<dyn ServerProcess>)
        })
    }

    fn stop_leftover<'a>(
        &'a self,
        pgid: i32,
        program: &'a str,
        grace: Duration,
    ) -> BoxFuture<'a, Leftover> {
        Box::pin(async move {
            if !group_alive(pgid) {
                return Leftover::AlreadyGone;
            }
            if !group_runs(pgid, program) {
                return Leftover::Reused {
                    program: program.to_string(),
                };
            }
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            while group_alive(pgid) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let killed = group_alive(pgid);
            if killed {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Leftover::Stopped {
                killed,
                gone: !group_alive(pgid),
            }
        })
    }

    fn check_link(&self) -> BoxFuture<'_, Result<(), HostError>> {
        Box::pin(async { Ok(()) })
    }
}

impl ServerProcess for LocalServer {
    fn url(&self) -> &str {
        &self.url
    }

    fn host_url(&self) -> Option<&str> {
        None
    }

    fn ids(&self) -> ProcessIds {
        ProcessIds {
            pid: self.process.pgid(),
            pgid: self.process.pgid(),
            host: None,
            remote_log: None,
        }
    }

    fn exited(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.process.exit_status().is_some() })
    }

    fn sync_log(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn log_display(&self) -> String {
        self.process.log_path().display().to_string()
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_millis(50)
    }

    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Stopped> {
        Box::pin(async move {
            let outcome = self.process.stop(grace).to_string();
            let pgid = self.process.pgid();
            Stopped {
                outcome,
                pgid,
                gone: !group_alive(pgid),
            }
        })
    }
}

/// True when some process of group `pgid` runs `program` (its command line contains it).
fn group_runs(pgid: i32, program: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|e| {
        let path = e.path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            return false;
        };
        // Fields after the command name (which may hold spaces) start after the last ')'.
        let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
        let pg: Option<i32> = after.split_whitespace().nth(2).and_then(|f| f.parse().ok());
        pg == Some(pgid)
            && std::fs::read(path.join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(program))
                .unwrap_or(false)
    })
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
