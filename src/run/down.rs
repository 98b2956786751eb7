//! `servebench down RUN_DIR`: stops the servers a crashed or killed runner left behind, from
//! the process groups recorded in meta.json, on this machine or over SSH.

use std::path::Path;
use std::time::Duration;

use crate::results::meta::ServerLaunch;
use crate::results::rundir::RunDir;

use super::server::STOP_GRACE;

/// Stops every recorded server group still alive; returns one line per launch.
pub async fn down(dir: &Path) -> Result<Vec<String>, String> {
    let run_dir = RunDir::open(dir).map_err(|e| e.to_string())?;
    let mut meta = run_dir.read_meta().map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    let mut ssh: Option<crate::host::ssh::SshHost> = None;
    for s in meta.servers.iter_mut() {
        let Some(pgid) = s.pgid.filter(|p| *p > 1) else {
            continue;
        };
        let line = match &s.host {
            None => stop_local(s, pgid),
            Some(_) => {
                if ssh.is_none() {
                    let target = super::remote::ssh_target(&meta.experiment.host)?
                        .ok_or("meta.json names an SSH host but the spec's host is local")?;
                    ssh = Some(
                        crate::host::ssh::SshHost::connect(&target)
                            .await
                            .map_err(|e| e.to_string())?,
                    );
                }
                stop_remote(ssh.as_ref().expect("connected above"), s, pgid).await
            }
        };
        lines.push(format!("{}: {line}", s.group));
    }
    run_dir.write_meta(&meta).map_err(|e| e.to_string())?;
    if lines.is_empty() {
        lines.push("no launched server is recorded in this run".into());
    }
    Ok(lines)
}

fn stop_local(s: &mut ServerLaunch, pgid: i32) -> String {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    if !crate::host::local::group_alive(pgid) {
        s.stopped = true;
        return format!("process group {pgid} is already gone");
    }
    // A process group id can be reused once the old group is gone: only stop a group that
    // still runs the program servebench launched.
    let program = program_name(s);
    if !local_group_runs(pgid, &program) {
        return format!(
            "process group {pgid} exists but does not run {program}; left alone (the id was reused)"
        );
    }
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
    let deadline = std::time::Instant::now() + STOP_GRACE;
    while crate::host::local::group_alive(pgid) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let killed = crate::host::local::group_alive(pgid);
    if killed {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        std::thread::sleep(Duration::from_millis(200));
    }
    let gone = !crate::host::local::group_alive(pgid);
    s.stopped = gone;
    record(s, gone, pgid, killed)
}

async fn stop_remote(ssh: &crate::host::ssh::SshHost, s: &mut ServerLaunch, pgid: i32) -> String {
    match ssh.group_alive(pgid).await {
        Ok(false) => {
            s.stopped = true;
            return format!("process group {pgid} on {} is already gone", ssh.name());
        }
        Err(e) => return format!("cannot check process group {pgid}: {e}"),
        Ok(true) => {}
    }
    let program = program_name(s);
    let check = ssh
        .run_script(
            r#"ps -o args= -g "$1" 2>/dev/null | grep -F -q -- "$2""#,
            &[pgid.to_string(), program.clone()],
        )
        .await;
    if matches!(&check, Ok(out) if !out.status.success()) {
        return format!(
            "process group {pgid} on {} does not run {program}; left alone (the id was reused)",
            ssh.name()
        );
    }
    match ssh.stop_group(pgid, STOP_GRACE).await {
        Ok(outcome) => {
            let gone = matches!(ssh.group_alive(pgid).await, Ok(false));
            s.stopped = gone;
            let killed = matches!(outcome, crate::host::local::StopOutcome::Killed);
            record(s, gone, pgid, killed)
        }
        Err(e) => format!("could not stop process group {pgid}: {e}"),
    }
}

fn record(s: &mut ServerLaunch, gone: bool, pgid: i32, killed: bool) -> String {
    let note = format!(
        "stopped by servebench down ({}); process group {pgid} {}",
        if killed { "SIGKILL" } else { "SIGTERM" },
        if gone {
            "confirmed gone"
        } else {
            "STILL ALIVE"
        }
    );
    s.outcome = Some(match s.outcome.take() {
        Some(prev) => format!("{prev}; {note}"),
        None => note.clone(),
    });
    note
}

/// The launched program's file name (`servebench`, `python`, ...), from the recorded command.
fn program_name(s: &ServerLaunch) -> String {
    s.command
        .as_ref()
        .and_then(|c| c.first())
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        .unwrap_or_default()
}

/// True when some process of group `pgid` runs `program`.
fn local_group_runs(pgid: i32, program: &str) -> bool {
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
