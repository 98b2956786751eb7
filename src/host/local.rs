//! Servers on this machine: spawned in their own process group with their output in a log file,
//! and always stopped as a whole group. [`LocalHost`] is the [`Host`](super::Host) for
//! `host: local`; it launches each server under `servebench supervise` ([`super::supervise`]),
//! so a runner killed with SIGKILL leaves nothing behind.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use futures_util::future::BoxFuture;

use super::{
    GroupIdentity, HostError, Leftover, Liveness, Loss, ServerProcess, Spawn, Stopped, Verdict,
};
use crate::engine::LaunchCommand;
use servebench_model::results::meta::ProcessRecord;

use super::procfs::still_running;
#[cfg(test)]
use super::procfs::{ProcStat, parse_stat};
use super::procfs::{age_s, boot_id, comm, group_alive, group_facts, group_processes, proc_stat};

/// A running server process group.
#[derive(Debug)]
pub(crate) struct LocalProcess {
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
    /// process group, without a supervisor (the tests' direct child).
    #[cfg(test)]
    fn spawn(
        cmd: &LaunchCommand,
        env: &IndexMap<String, String>,
        log_path: &Path,
    ) -> std::io::Result<Self> {
        Self::start(&cmd.program, &cmd.args, cmd, env, None, log_path)
    }

    /// Starts `cmd` under `servebench supervise` (`supervisor` is servebench's binary), which
    /// leads the new process group and runs `cmd` in it. When this process dies, even by
    /// SIGKILL, the supervisor gets SIGTERM and stops the whole group (SIGTERM, `grace`,
    /// SIGKILL): a wrapper script's children go too, not only the direct child.
    pub(crate) fn spawn_supervised(
        supervisor: &Path,
        grace: Duration,
        cmd: &LaunchCommand,
        env: &IndexMap<String, String>,
        workdir: Option<&str>,
        log_path: &Path,
    ) -> std::io::Result<Self> {
        // The supervisor would only say it in the log: say it now, like a direct spawn does.
        find_program(&cmd.program, env, workdir).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot start {:?}: {e}", cmd.program))
        })?;
        let mut args = super::supervise::args(std::process::id() as i32, grace);
        args.extend(cmd.argv());
        // The supervisor hides these in the server's log; the server does not inherit them.
        let mut env = env.clone();
        env.insert(
            servebench_model::redact::ENV_VAR.to_string(),
            servebench_model::redact::current().to_env(),
        );
        Self::start(
            &supervisor.to_string_lossy(),
            &args,
            cmd,
            &env,
            workdir,
            log_path,
        )
    }

    fn start(
        program: &str,
        args: &[String],
        cmd: &LaunchCommand,
        env: &IndexMap<String, String>,
        workdir: Option<&str>,
        log_path: &Path,
    ) -> std::io::Result<Self> {
        let log = File::options().create(true).append(true).open(log_path)?;
        let mut command = Command::new(program);
        if let Some(dir) = workdir {
            command.current_dir(dir);
        }
        command
            .args(args)
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
            let e = match e.kind() {
                std::io::ErrorKind::NotFound => {
                    find_program(program, env, workdir).err().unwrap_or(e)
                }
                _ => e,
            };
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
    pub(crate) fn pgid(&self) -> i32 {
        self.pgid
    }

    pub(crate) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The exit status if the leader has exited.
    pub(crate) fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM to the whole group, up to `grace` to exit, then SIGKILL; waits for the leader.
    pub(crate) fn stop(&mut self, grace: Duration) -> StopOutcome {
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

/// Checks that `program` can be started as `execvp` would find it: a path (relative to
/// `workdir`), or a name on `PATH` (the one in `env` when it sets one).
fn find_program(
    program: &str,
    env: &IndexMap<String, String>,
    workdir: Option<&str>,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        let p = Path::new(program);
        let p = match workdir {
            Some(dir) if p.is_relative() => Path::new(dir).join(p),
            _ => p.to_path_buf(),
        };
        executable(&p)
    } else {
        let path = env
            .get("PATH")
            .cloned()
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        path.split(':')
            .any(|dir| executable(&Path::new(if dir.is_empty() { "." } else { dir }).join(program)))
    };
    if found {
        return Ok(());
    }
    // Which binary, where it was looked for, and the fix (std's own "entity not found" says none).
    let message = if program.contains('/') {
        let at = match workdir {
            Some(dir) if Path::new(program).is_relative() => format!(" (in {dir})"),
            _ => String::new(),
        };
        format!(
            "no executable file at {program}{at}: install the engine there, or give its path in server.launcher"
        )
    } else {
        let path = env
            .get("PATH")
            .cloned()
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_default();
        format!(
            "{program} is not on PATH ({}): install it, add its directory to PATH (server.env.PATH), or give its full path in server.launcher",
            servebench_model::text::truncate(&path, 300)
        )
    };
    Err(std::io::Error::new(std::io::ErrorKind::NotFound, message))
}

impl Drop for LocalProcess {
    fn drop(&mut self) {
        if !self.stopped {
            self.stop(Duration::from_secs(5));
        }
    }
}

/// This machine as a [`Host`](super::Host).
pub(crate) struct LocalHost;

/// How long the supervisor gives the server between SIGTERM and SIGKILL when the runner is
/// gone (the runner's own stops give their own grace).
const SUPERVISOR_GRACE: Duration = Duration::from_secs(10);

/// A server launched by [`LocalHost`].
pub(crate) struct LocalServer {
    process: LocalProcess,
    url: String,
    ids: ProcessRecord,
    /// The group's processes that have run for [`SETTLED_S`] or more, as last seen while a
    /// point ran: pid, start time and name. One of them gone means the server lost a part.
    settled: Vec<(i32, u64, String)>,
    /// Asked once a settled process ended: whether the server still serves without it.
    liveness: Option<Liveness>,
}

/// How long a process of a server's group must have run before its end counts as the server
/// losing a part: its scheduler, detokenizer, workers run from start-up to the end; a helper
/// that comes and goes (a compile, a tool the server runs) does not.
const SETTLED_S: f64 = 10.0;

/// The grace a server that lost a part gets between SIGTERM and SIGKILL: short, since its
/// requests cannot finish and each second of it is a second they wait.
const LOST_GRACE: Duration = Duration::from_secs(2);

/// Kills what is left of group `pgid` after its leader (the supervisor) exited: when the
/// supervisor was killed, nothing else stops a server half there (its HTTP front without its
/// scheduler holds requests until their timeout).
fn kill_leaderless_group(pgid: i32) {
    if group_alive(pgid) {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

impl LocalServer {
    /// What the end of `gone` (settled processes of the group) means: a part the server
    /// cannot serve without when it then fails its liveness probe (or has none), and the
    /// server is stopped; a helper that came to its end when the server still answers.
    async fn judge_ended(&mut self, gone: &[(i32, u64, String)]) -> Loss {
        let mut what = ended_processes(gone);
        if let Some(probe) = &self.liveness {
            match probe().await {
                Ok(()) => {
                    return Loss {
                        what: format!("{what}; the server still answered, so it went on"),
                        fatal: false,
                    };
                }
                Err(why) => what = format!("{what}, and the server {why}"),
            }
        }
        self.process.stop(LOST_GRACE);
        Loss { what, fatal: true }
    }
}

/// `process 12 (sleep) of its group ended`, or several named (at most three) and counted.
fn ended_processes(gone: &[(i32, u64, String)]) -> String {
    let named: Vec<String> = gone
        .iter()
        .take(3)
        .map(|(pid, _, name)| format!("{pid} ({name})"))
        .collect();
    match gone.len() {
        1 => format!("process {} of its group ended", named[0]),
        n if n <= 3 => format!("processes {} of its group ended", named.join(", ")),
        n => format!(
            "processes {} and {} more of its group ended",
            named.join(", "),
            n - 3
        ),
    }
}

impl super::Host for LocalHost {
    fn name(&self) -> String {
        "local".into()
    }

    fn is_local(&self) -> bool {
        true
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
            // servebench itself supervises the group, so nothing outlives a killed runner.
            let supervisor = std::env::current_exe()
                .map_err(|e| HostError::io("cannot find servebench's own binary", e))?;
            let process = LocalProcess::spawn_supervised(
                &supervisor,
                SUPERVISOR_GRACE,
                spawn.command,
                spawn.env,
                spawn.workdir,
                spawn.log_path,
            )
            .map_err(|e| HostError::Unsupported(e.to_string()))?;
            // Read while the leader cannot have been reaped yet (it is our child).
            let pgid = process.pgid();
            let ids = ProcessRecord {
                pid: Some(pgid),
                pgid: Some(pgid),
                leader_start: proc_stat(pgid).map(|p| p.start_ticks),
                boot_id: boot_id(),
                ..ProcessRecord::default()
            };
            Ok(Box::new(LocalServer {
                process,
                url: format!("http://127.0.0.1:{}", spawn.port),
                ids,
                settled: Vec::new(),
                liveness: None,
            }) as Box<dyn ServerProcess>)
        })
    }

    fn stop_leftover<'a>(
        &'a self,
        id: &'a GroupIdentity,
        grace: Duration,
    ) -> BoxFuture<'a, Leftover> {
        Box::pin(async move {
            let pgid = id.pgid;
            match super::judge(id, &group_facts(id)) {
                Verdict::Gone => return Leftover::AlreadyGone,
                Verdict::Reused(why) => return Leftover::Reused { why },
                Verdict::Unrecorded if !group_runs(pgid, &id.program) => {
                    return Leftover::Reused {
                        why: format!("it does not run {} (the id was reused)", id.program),
                    };
                }
                Verdict::Ours | Verdict::Unrecorded => {}
            }
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
            let deadline = Instant::now() + grace;
            while group_alive(pgid) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let killed = group_alive(pgid);
            if killed {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                let deadline = Instant::now() + Duration::from_secs(2);
                while group_alive(pgid) && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Leftover::Stopped {
                killed,
                gone: !group_alive(pgid),
            }
        })
    }

    fn port_in_use(&self, port: u16) -> BoxFuture<'_, Result<bool, HostError>> {
        Box::pin(async move { Ok(super::port_in_use(port)) })
    }

    fn copy_file<'a>(
        &'a self,
        path: &'a str,
        to: &'a Path,
        limit: u64,
    ) -> BoxFuture<'a, Result<u64, HostError>> {
        Box::pin(async move { Ok(super::small_file::copy_local(path, to, limit)?) })
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

    fn ids(&self) -> ProcessRecord {
        self.ids.clone()
    }

    fn exited(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let exited = self.process.exit_status().is_some();
            if exited {
                kill_leaderless_group(self.process.pgid());
            }
            exited
        })
    }

    fn lost_process(&mut self) -> BoxFuture<'_, Option<Loss>> {
        Box::pin(async move {
            let pgid = self.process.pgid();
            if let Some(status) = self.process.exit_status() {
                kill_leaderless_group(pgid);
                return Some(Loss {
                    what: format!(
                        "its process group's leader (servebench supervise, pid {pgid}) exited ({status})"
                    ),
                    fatal: true,
                });
            }
            // Each settled process is asked for by its pid: a process table that could not be
            // read (no file descriptor left) says nothing, and nothing is judged from it.
            let gone: Vec<_> = self
                .settled
                .iter()
                .filter(|(pid, start, _)| still_running(*pid, *start) == Some(false))
                .cloned()
                .collect();
            if !gone.is_empty() {
                // Forgotten once judged: a look dropped mid-judgment (its point ended) leaves
                // them to the next look.
                let loss = self.judge_ended(&gone).await;
                self.settled.retain(|p| !gone.contains(p));
                return Some(loss);
            }
            let now = group_processes(pgid);
            for p in now.iter().filter(|p| p.state != 'Z') {
                let known = self.settled.iter().any(|(pid, _, _)| *pid == p.pid);
                if !known && age_s(p).is_some_and(|a| a >= SETTLED_S) {
                    let name = comm(p.pid).unwrap_or_else(|| "?".into());
                    self.settled.push((p.pid, p.start_ticks, name));
                }
            }
            None
        })
    }

    fn watch_liveness(&mut self, probe: Liveness) {
        self.liveness = Some(probe);
    }

    fn exit_signal(&mut self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.process.exit_status()?;
        // The supervisor leading the group exits 128 + N when signal N ended the server.
        status.signal().or_else(|| {
            status
                .code()
                .filter(|c| (129..=192).contains(c))
                .map(|c| c - 128)
        })
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

    #[test]
    fn ended_processes_are_named_three_at_most_and_the_rest_counted() {
        let p = |pid: i32, name: &str| (pid, 0, name.to_string());
        assert_eq!(
            ended_processes(&[p(7, "sleep")]),
            "process 7 (sleep) of its group ended"
        );
        assert_eq!(
            ended_processes(&[p(7, "a"), p(8, "b")]),
            "processes 7 (a), 8 (b) of its group ended"
        );
        let many: Vec<_> = (1..=34).map(|i| p(i, "python")).collect();
        assert_eq!(
            ended_processes(&many),
            "processes 1 (python), 2 (python), 3 (python) and 31 more of its group ended"
        );
    }

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
    fn stat_lines_are_read_past_odd_command_names() {
        let line = "4242 (my (odd) prog) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                pid: 4242,
                state: 'S',
                ppid: 1,
                pgrp: 4240,
                start_ticks: 987654,
            })
        );
        assert_eq!(parse_stat("12 (x) Z"), None);
        let me = proc_stat(std::process::id() as i32).unwrap();
        assert_eq!(me.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(boot_id().is_some());
    }

    #[test]
    fn a_group_of_zombies_is_not_alive_and_down_calls_it_gone() {
        use std::os::unix::process::CommandExt;
        // Exited, not reaped (this test is its parent): a zombie that leads its group.
        let child = Command::new("sh")
            .args(["-c", "exit 0"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        let start = proc_stat(pgid).unwrap().start_ticks;
        let deadline = Instant::now() + Duration::from_secs(10);
        while proc_stat(pgid).is_some_and(|p| p.state != 'Z') {
            assert!(Instant::now() < deadline, "no zombie");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(killpg(Pid::from_raw(pgid), None).is_ok(), "the id is taken");
        assert!(!group_alive(pgid));
        let id = GroupIdentity {
            pgid,
            leader_start: Some(start),
            boot_id: boot_id(),
            program: "python".into(),
        };
        let facts = group_facts(&id);
        assert_eq!(facts.leader, Some(('Z', start)));
        assert_eq!(super::super::judge(&id, &facts), Verdict::Gone);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let found = rt.block_on(super::super::Host::stop_leftover(
            &LocalHost,
            &id,
            Duration::from_secs(1),
        ));
        assert_eq!(found, Leftover::AlreadyGone);
        drop(child);
    }

    #[test]
    fn programs_are_found_as_exec_would_find_them() {
        let none = IndexMap::new();
        assert!(find_program("sh", &none, None).is_ok());
        assert!(find_program("/bin/sh", &none, None).is_ok());
        assert!(find_program("no-such-servebench-engine", &none, None).is_err());
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("launch.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        // Not executable yet.
        assert!(find_program("./launch.sh", &none, dir.path().to_str()).is_err());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(find_program("./launch.sh", &none, dir.path().to_str()).is_ok());
        let mut env = IndexMap::new();
        env.insert("PATH".to_string(), dir.path().display().to_string());
        assert!(find_program("launch.sh", &env, None).is_ok());
        assert!(
            find_program("sh", &env, None).is_err(),
            "the spec's PATH is the one"
        );
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
