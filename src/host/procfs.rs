//! The process table as `/proc` shows it on this machine: a process's state, parent, group and
//! start time; a group's members; the boot id that start times count from; what a recorded
//! group is now. Read by the local host, the supervisor and Slurm's steps alike.

use nix::sys::signal::killpg;
use nix::unistd::Pid;

use super::{GroupFacts, GroupIdentity};

/// A process as `/proc/PID/stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub pid: i32,
    /// `R`, `S`, `D`, `Z` (a zombie), ...
    pub state: char,
    /// Its parent.
    pub ppid: i32,
    /// Its process group.
    pub pgrp: i32,
    /// When it started, in clock ticks since boot (field 22).
    pub start_ticks: u64,
}

/// Parses one `/proc/PID/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so the fields after it are counted from its last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let (head, rest) = text.rsplit_once(')')?;
    let pid = head.split_whitespace().next()?.parse().ok()?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); field N is fields[N - 3].
    Some(ProcStat {
        pid,
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// Process `pid` as `/proc` shows it now (None once it is gone, zombies included until reaped).
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether process `pid`, started at `start_ticks`, is still running: `Some(false)` only when
/// `/proc` says so (its entry gone, a zombie, or another process on its pid), `None` when
/// `/proc` could not be read at all. A reader out of file descriptors (a runner holding
/// thousands of connections) cannot open `/proc/PID/stat`, and that says nothing about the
/// process.
pub(crate) fn still_running(pid: i32, start_ticks: u64) -> Option<bool> {
    still_running_in(pid, start_ticks, |path| std::fs::read_to_string(path))
}

/// [`still_running`], reading `/proc` with `read`.
fn still_running_in(
    pid: i32,
    start_ticks: u64,
    read: impl Fn(&str) -> std::io::Result<String>,
) -> Option<bool> {
    match read(&format!("/proc/{pid}/stat")) {
        Ok(text) => {
            Some(parse_stat(&text).is_some_and(|p| p.start_ticks == start_ticks && p.state != 'Z'))
        }
        // ENOENT once the entry is gone; ESRCH while the process is being torn down.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::libc::ESRCH) =>
        {
            Some(false)
        }
        Err(_) => None,
    }
}

/// Clock ticks per second in `/proc` (`USER_HZ`, `sysconf(_SC_CLK_TCK)`): part of Linux's
/// user ABI, 100 on every architecture.
const USER_HZ: f64 = 100.0;

/// Seconds process `p` has run, from its start time and the machine's uptime.
pub(crate) fn age_s(p: &ProcStat) -> Option<f64> {
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(uptime - p.start_ticks as f64 / USER_HZ)
}

/// The command name of process `pid` (`/proc/PID/comm`), if it is still there.
pub(crate) fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// This machine's boot id, which changes at every boot (process start times count from it).
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Every process of group `pgid`, zombies included, from `/proc`.
pub(crate) fn group_processes(pgid: i32) -> Vec<ProcStat> {
    processes().into_iter().filter(|p| p.pgrp == pgid).collect()
}

/// Every process on this machine, zombies included, from `/proc`.
pub(crate) fn processes() -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| parse_stat(&std::fs::read_to_string(e.path().join("stat")).ok()?))
        .collect()
}

/// True while any process of the group exists that is not a zombie (a zombie has exited: it
/// holds no port or memory and cannot be stopped, only reaped by its parent).
pub(crate) fn group_alive(pgid: i32) -> bool {
    // Signal 0 probes without sending: the cheap answer when nothing is left at all.
    killpg(Pid::from_raw(pgid), None).is_ok()
        && group_processes(pgid).iter().any(|p| p.state != 'Z')
}

/// What this machine tells about recorded group `id` now.
pub(crate) fn group_facts(id: &GroupIdentity) -> GroupFacts {
    let members = group_processes(id.pgid);
    let live: Vec<&ProcStat> = members.iter().filter(|p| p.state != 'Z').collect();
    GroupFacts {
        leader: members
            .iter()
            .find(|p| p.pid == id.pgid)
            .map(|p| (p.state, p.start_ticks)),
        live: live.len(),
        older: id.leader_start.map_or(0, |start| {
            live.iter().filter(|p| p.start_ticks < start).count()
        }),
        boot_id: boot_id(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process is judged ended only on what `/proc` says, never on a read that failed for
    /// the reader's own reasons (out of file descriptors).
    #[test]
    fn a_process_is_ended_only_when_proc_says_so() {
        let me = proc_stat(std::process::id() as i32).expect("own stat");
        assert_eq!(still_running(me.pid, me.start_ticks), Some(true));
        assert_eq!(still_running(me.pid, me.start_ticks + 1), Some(false));
        assert_eq!(still_running(i32::MAX, 0), Some(false));
        let emfile = |_: &str| -> std::io::Result<String> {
            Err(std::io::Error::from_raw_os_error(nix::libc::EMFILE))
        };
        assert_eq!(still_running_in(me.pid, me.start_ticks, emfile), None);
        let esrch = |_: &str| -> std::io::Result<String> {
            Err(std::io::Error::from_raw_os_error(nix::libc::ESRCH))
        };
        assert_eq!(still_running_in(me.pid, me.start_ticks, esrch), Some(false));
    }
}
