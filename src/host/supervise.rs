//! `servebench supervise`: the first process of a local server's process group. The runner
//! starts it (in a new group, with `PR_SET_PDEATHSIG`), and it runs the engine's command as
//! its child in the same group. When the runner dies, even by SIGKILL, the kernel sends the
//! supervisor SIGTERM, and it stops the whole group: a launcher that is a wrapper script
//! (`sh launch.sh` activating a venv, then starting python) leaves no server listening.
//!
//! - SIGTERM, SIGHUP or SIGINT (the runner's stop, a dying runner, a closed terminal): the
//!   group gets SIGTERM, `--grace-ms` to exit, then SIGKILL; the supervisor exits last.
//! - The command ends by itself: what it left in the group is stopped the same way, and the
//!   supervisor exits with the command's status (128 + N for signal N), which the runner
//!   sees as the server's.
//!
//! - The supervisor itself killed (SIGKILL: nothing it can catch): the kernel kills the
//!   command (`PR_SET_PDEATHSIG` with SIGKILL, armed in the child before it runs: a launcher
//!   that waits out its open requests on SIGTERM, as uvicorn does, would otherwise serve on
//!   without its scheduler), and the runner, its parent, kills what is left of the group as
//!   soon as it sees its leader gone ([`super::local`]).
//! - The command's own children orphaned (a launcher killed, its scheduler left): the
//!   supervisor is their subreaper (`PR_SET_CHILD_SUBREAPER`), so they become its children
//!   rather than init's; it reaps them and stops them with the group, even those that left it.
//!
//! What it does is said in the server's log, on stderr.
//!
//! The command's output reaches the log through the supervisor, line by line, with the run's
//! secrets hidden ([`servebench_model::redact`]; the runner hands them over in
//! [`servebench_model::redact::ENV_VAR`], which the command does not inherit): SGLang logs its
//! `server_args`, API key included, and the log is part of the run directory.

use std::io::Write;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::unistd::{Pid, getpgrp, getpid, getppid};

use super::procfs::processes;

/// What `servebench supervise` is told.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Supervise {
    /// The runner's pid: if the supervisor's parent is already another process, the runner
    /// died before the death signal was armed.
    pub parent: Option<i32>,
    /// Between SIGTERM and SIGKILL when stopping the group.
    pub grace: Duration,
    /// The command and its arguments.
    pub command: Vec<String>,
}

/// The supervisor's arguments before the command: `supervise --parent PID --grace-ms N --`.
pub(crate) fn args(parent: i32, grace: Duration) -> Vec<String> {
    vec![
        "supervise".into(),
        "--parent".into(),
        parent.to_string(),
        "--grace-ms".into(),
        grace.as_millis().to_string(),
        "--".into(),
    ]
}

/// The signals the supervisor waits for instead of dying of them.
fn watched() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGCHLD,
    ] {
        set.add(s);
    }
    set
}

fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "servebench supervise: {text}");
}

/// Runs the supervisor; its exit code.
pub(crate) fn main(opts: Supervise) -> i32 {
    let Some((program, args)) = opts.command.split_first() else {
        say("no command given");
        return crate::exit::BAD_INPUT;
    };
    // Blocked, the signals wait for `sigwait` below instead of killing the supervisor (the
    // command unblocks them before it starts: a signal mask is inherited).
    let set = watched();
    if let Err(e) = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None) {
        say(&format!("cannot block signals: {e}"));
        return crate::exit::FAILED;
    }
    if opts.parent.is_some_and(|p| getppid().as_raw() != p) {
        say("the runner is already gone; not starting the server");
        return crate::exit::FAILED;
    }
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        say(&format!(
            "cannot adopt the command's orphans ({e}); they are stopped with the group"
        ));
    }
    let mut command = Command::new(program);
    command.args(args);
    let relay = Relay::prepare(&mut command);
    // SAFETY: sigprocmask and prctl are async-signal-safe; nothing else runs between fork
    // and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            // The server must die of SIGTERM, not inherit the supervisor's blocked signals.
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
            // It dies with the supervisor even if the supervisor alone is killed: at once,
            // since nothing is left to give it a grace period and then make sure.
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            say(&format!("cannot start {program:?}: {e}"));
            return 127;
        }
    };
    let relay = relay.start(&mut child);
    let code = wait_for(&mut child, &set, &opts, program);
    relay.finish(RELAY_DRAIN);
    code
}

/// How long the relay may go on copying after the command ended (its last lines, a
/// traceback), when something outside the group still holds the pipe.
const RELAY_DRAIN: Duration = Duration::from_secs(2);

/// Waits for the command to end or a signal to stop the group; the exit code.
fn wait_for(child: &mut Child, set: &SigSet, opts: &Supervise, program: &str) -> i32 {
    loop {
        let signal = match set.wait() {
            Ok(s) => s,
            Err(e) => {
                say(&format!("cannot wait for signals: {e}"));
                stop_group(child, opts.grace);
                return crate::exit::FAILED;
            }
        };
        match signal {
            Signal::SIGCHLD => {
                reap_adopted(child.id() as i32);
                if let Ok(Some(status)) = child.try_wait() {
                    let code = exit_code(status);
                    if others_alive() {
                        say(&format!(
                            "{program} ended ({status}); stopping what it left in its process group"
                        ));
                        stop_group(child, opts.grace);
                    }
                    return code;
                }
            }
            s => {
                let why = match s {
                    Signal::SIGHUP => "SIGHUP",
                    Signal::SIGINT => "SIGINT",
                    _ if opts.parent.is_some_and(|p| getppid().as_raw() != p) => {
                        "SIGTERM (the runner is gone)"
                    }
                    _ => "SIGTERM",
                };
                say(&format!(
                    "{why}: stopping process group {} (SIGTERM, then SIGKILL after {} s)",
                    getpgrp(),
                    servebench_model::text::sig3(opts.grace.as_secs_f64())
                ));
                let status = stop_group(child, opts.grace);
                return status.map_or(128 + s as i32, exit_code);
            }
        }
    }
}

/// Copies the command's stdout and stderr to the supervisor's own (the server's log), one line
/// at a time through the run's redactor.
struct Relay {
    redactor: std::sync::Arc<servebench_model::redact::Redactor>,
}

/// The copying threads of a started [`Relay`].
struct Relaying {
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Relay {
    /// Pipes the command's output, and keeps the secrets' list out of its environment.
    fn prepare(command: &mut Command) -> Relay {
        let redactor = std::env::var(servebench_model::redact::ENV_VAR)
            .map(|t| servebench_model::redact::Redactor::from_env(&t))
            .unwrap_or_default();
        command
            .env_remove(servebench_model::redact::ENV_VAR)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        Relay {
            redactor: std::sync::Arc::new(redactor),
        }
    }

    fn start(self, child: &mut Child) -> Relaying {
        let mut threads = Vec::new();
        if let Some(out) = child.stdout.take() {
            let r = self.redactor.clone();
            threads.push(std::thread::spawn(move || {
                copy_lines(out, std::io::stdout(), &r)
            }));
        }
        if let Some(err) = child.stderr.take() {
            let r = self.redactor.clone();
            threads.push(std::thread::spawn(move || {
                copy_lines(err, std::io::stderr(), &r)
            }));
        }
        Relaying { threads }
    }
}

impl Relaying {
    /// Waits up to `drain` for the pipes to close (everything the command wrote is copied).
    fn finish(self, drain: Duration) {
        let deadline = Instant::now() + drain;
        while self.threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Copies `from` to `to` line by line (a line longer than the budget in pieces), each through
/// `redactor`; ends when `from` closes.
pub(crate) fn copy_lines(
    from: impl std::io::Read,
    mut to: impl std::io::Write,
    redactor: &servebench_model::redact::Redactor,
) {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(from);
    let mut line = Vec::new();
    loop {
        line.clear();
        match std::io::Read::take(&mut reader, servebench_model::redact::MAX_LINE_BYTES as u64)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let _ = to.write_all(&redactor.bytes(&line));
                let _ = to.flush();
            }
        }
    }
}

/// `status` as an exit code: the command's own, or 128 + the signal that ended it.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(crate::exit::FAILED)
}

/// Processes of the supervisor's group other than itself, and the orphans it adopted (some
/// may have left the group), that are not zombies.
fn others() -> Vec<i32> {
    let me = getpid().as_raw();
    let group = getpgrp().as_raw();
    processes()
        .into_iter()
        .filter(|p| p.pid != me && p.state != 'Z' && (p.pgrp == group || p.ppid == me))
        .map(|p| p.pid)
        .collect()
}

/// Reaps the adopted orphans that have exited (the command itself is left to its `Child`).
fn reap_adopted(command: i32) {
    use nix::sys::wait::{WaitPidFlag, waitpid};
    let me = getpid().as_raw();
    for p in processes() {
        if p.ppid == me && p.pid != command && p.state == 'Z' {
            let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

fn others_alive() -> bool {
    !others().is_empty()
}

/// SIGTERM to the group, up to `grace` for it to go, then SIGKILL to what is left (each
/// process but the supervisor). Reaps the command; its status if it was seen to exit.
fn stop_group(child: &mut Child, grace: Duration) -> Option<ExitStatus> {
    let mut status = child.try_wait().ok().flatten();
    // The supervisor's own SIGTERM is blocked: it stays pending, harmlessly.
    let _ = nix::sys::signal::killpg(getpgrp(), Signal::SIGTERM);
    // Adopted orphans that left the group get it one by one.
    for pid in others() {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    loop {
        if status.is_none() {
            status = child.try_wait().ok().flatten();
        }
        if !others_alive() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // New processes may start while the last ones are killed: go round until none is left.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = others();
        if left.is_empty() || Instant::now() >= deadline {
            break;
        }
        for pid in left {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(20));
        reap_adopted(child.id() as i32);
        if status.is_none() {
            status = child.try_wait().ok().flatten();
        }
    }
    if status.is_none() {
        status = child.wait().ok();
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_hides_secrets_line_by_line() {
        let redactor = servebench_model::redact::Redactor::new(["sk-relay-secret-1".to_string()]);
        let log = b"[t] server_args=ServerArgs(api_key='sk-relay-secret-1', tp_size=1)\nplain\nno newline sk-relay-secret-1";
        let mut out = Vec::new();
        copy_lines(&log[..], &mut out, &redactor);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "[t] server_args=ServerArgs(api_key='<redacted>', tp_size=1)\nplain\nno newline <redacted>"
        );
    }
}
