//! Where servers run, behind one interface: [`Host`] launches, watches and stops a server and
//! cleans up after a runner that died; [`ServerProcess`] is one launched server. `local` is
//! this machine (a child process in its own process group); `remote` is an SSH host (a
//! detached process group, its log mirrored into the run directory, reached through a port
//! forward); `slurm` is a Slurm cluster (a job's allocation, the server a job step in it).
//!
//! A launched group is known again by its leader's start time and the host's boot id, not by
//! a program name ([`judge`]): a wrapper script that `exec`s python changes the name, a
//! zombie has none, and a reused id may run anything.

mod error;
pub mod local;
pub(crate) mod procfs;
pub(crate) mod remote;
pub(crate) mod slurm;
pub(crate) mod small_file;
pub mod ssh;
pub(crate) mod supervise;

use std::path::Path;
use std::time::Duration;

use futures_util::future::BoxFuture;
use indexmap::IndexMap;

use crate::engine::LaunchCommand;
use servebench_model::results::meta::ProcessRecord;

pub(crate) use error::HostError;

/// What to start for one server group.
pub(crate) struct Spawn<'a> {
    /// The group id (`g1`), for names of files on the host.
    pub group: &'a str,
    /// Program and arguments from the engine adapter; never passed through a shell.
    pub command: &'a LaunchCommand,
    /// Added to the environment (secrets already expanded).
    pub env: &'a IndexMap<String, String>,
    pub workdir: Option<&'a str>,
    /// The log in the run directory (written directly, or mirrored from the host).
    pub log_path: &'a Path,
    /// The port the server listens on.
    pub port: u16,
    /// The address it listens on, on its host: 127.0.0.1, or the host's address for a
    /// deployment's worker that a router on another host reaches.
    pub bind: &'a str,
    /// Other processes of its group run on the same machine (a deployment's workers and
    /// router): a Slurm step shares the node with them (`--overlap`).
    pub shared: bool,
}

/// How a stop went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stopped {
    /// What happened, in words: `stopped with SIGTERM`, `could not stop it: ...`.
    pub outcome: String,
    pub pgid: i32,
    /// The whole group is confirmed gone.
    pub gone: bool,
}

/// A launched server's process group as recorded, for `servebench down` to tell it from a
/// later group that reuses its id.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GroupIdentity {
    pub pgid: i32,
    /// When the leader started ([`ProcessRecord::leader_start`]); None in runs recorded
    /// before it was, which fall back to `program`.
    pub leader_start: Option<u64>,
    /// The host's boot id at launch.
    pub boot_id: Option<String>,
    /// The launched program's file name (`python`, `servebench`): the older check, that some
    /// process of the group runs it.
    pub program: String,
}

impl GroupIdentity {
    /// The identity `process` recorded, for a group that runs `program`. None when no process
    /// group was recorded, or one servebench must never stop (0, 1: every process, init).
    pub(crate) fn recorded(process: &ProcessRecord, program: String) -> Option<GroupIdentity> {
        Some(GroupIdentity {
            pgid: process.pgid.filter(|p| *p > 1)?,
            leader_start: process.leader_start,
            boot_id: process.boot_id.clone(),
            program,
        })
    }
}

/// What a host can tell about a recorded process group now.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GroupFacts {
    /// The leader (pid = pgid), still in the group: its state letter (`Z`: a zombie) and
    /// start time in clock ticks since boot.
    pub leader: Option<(char, u64)>,
    /// Processes of the group that are not zombies.
    pub live: usize,
    /// Of those, how many started before the recorded leader (so cannot be its children).
    pub older: usize,
    /// The host's boot id now.
    pub boot_id: Option<String>,
}

/// Whether a recorded group is still the one servebench launched.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// Nothing of it is left but zombies (which cannot be stopped and hold nothing).
    Gone,
    /// The launched group: safe to stop.
    Ours,
    /// The id belongs to something else now: left alone, for the reason given.
    Reused(String),
    /// The run recorded no start time (an older run): the caller checks the program name.
    Unrecorded,
}

/// Judges `facts` against the recorded identity. The leader's start time decides while the
/// leader exists (a zombie leader included); once it is gone the group's id cannot be reused
/// while any member lives (Linux keeps a process group's id allocated), so the members that
/// started after the leader are its own.
pub(crate) fn judge(id: &GroupIdentity, facts: &GroupFacts) -> Verdict {
    if facts.live == 0 {
        return Verdict::Gone;
    }
    if let (Some(then), Some(now)) = (&id.boot_id, &facts.boot_id)
        && then != now
    {
        return Verdict::Reused(
            "the host has restarted since the launch, so the id belongs to another program".into(),
        );
    }
    let Some(start) = id.leader_start else {
        return Verdict::Unrecorded;
    };
    match facts.leader {
        Some((_, s)) if s == start => Verdict::Ours,
        Some(_) => Verdict::Reused(format!(
            "process {} leads it now but started at another time than the server servebench \
             launched (the id was reused)",
            id.pgid
        )),
        None if facts.older == 0 => Verdict::Ours,
        None => Verdict::Reused(
            "its processes started before the server servebench launched (the id was reused)"
                .into(),
        ),
    }
}

/// What `servebench down` found for a recorded server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Leftover {
    /// Nothing of the group is left (zombies aside).
    AlreadyGone,
    /// The group id now belongs to another program: left alone, for this reason.
    Reused { why: String },
    /// Stopped; `gone` says whether that is confirmed.
    Stopped { killed: bool, gone: bool },
    /// The host could not be asked.
    Unknown(String),
}

/// A host that runs servers: this machine, an SSH host, a Slurm cluster.
pub(crate) trait Host: Send + Sync {
    /// How the host is named in messages and records: `local`, `bench@gpu-box-1`.
    fn name(&self) -> String;

    /// True for this machine: a port on its loopback is reached from here as it is.
    fn is_local(&self) -> bool {
        false
    }

    /// Readies the host for a launch of `group` before its ports are picked: a Slurm cluster
    /// gets the group's allocation here, so that ports are picked on its nodes. Nothing to do
    /// for a machine.
    fn prepare<'a>(&'a self, _group: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(async { Ok(()) })
    }

    /// The port for a server: `wanted` once checked free, else a free one.
    fn pick_port(&self, wanted: Option<u16>) -> BoxFuture<'_, Result<u16, HostError>>;

    /// servebench's own binary as the host runs it (for `engine: sim`).
    fn servebench_binary(&self) -> BoxFuture<'_, Result<String, HostError>>;

    /// Starts a server detached in its own process group, its output in `spawn.log_path`.
    fn spawn<'a>(
        &'a self,
        spawn: Spawn<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn ServerProcess>, HostError>>;

    /// Stops the process group a runner that died left, if it is still the one recorded
    /// ([`judge`]: a process group id is reused once its group is gone).
    fn stop_leftover<'a>(
        &'a self,
        id: &'a GroupIdentity,
        grace: Duration,
    ) -> BoxFuture<'a, Leftover>;

    /// True when something listens on `port` on the host's loopback.
    fn port_in_use(&self, port: u16) -> BoxFuture<'_, Result<bool, HostError>>;

    /// Checks the host can still be reached (re-establishing a dropped link when it can).
    fn check_link(&self) -> BoxFuture<'_, Result<(), HostError>>;

    /// The address other hosts reach this one at (a multi-node server's rendezvous):
    /// 127.0.0.1 for this machine, the SSH destination's host name for an SSH host.
    fn address(&self) -> String {
        "127.0.0.1".into()
    }

    /// A small regular file on the host the server runs on (a model's `config.json`), at most
    /// `limit` bytes: its bytes, or why it was not read ([`HostError::File`]: `no such file`,
    /// `not a regular file`, `5000000 bytes; read up to 4194304`; or the link's error).
    fn read_small_file<'a>(
        &'a self,
        path: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, HostError>> {
        Box::pin(async move { Ok(small_file::read_local(path, limit)?) })
    }

    /// Copies regular file `path` on the host the server runs on into `to` on this machine,
    /// at most `limit` bytes: the bytes copied, or why not. This machine's files are copied a
    /// buffer at a time; another host's come through [`Host::read_small_file`].
    fn copy_file<'a>(
        &'a self,
        path: &'a str,
        to: &'a std::path::Path,
        limit: u64,
    ) -> BoxFuture<'a, Result<u64, HostError>> {
        Box::pin(async move {
            let data = self.read_small_file(path, limit).await?;
            std::fs::write(to, &data).map_err(small_file::FileRefused::NotWritten)?;
            Ok(data.len() as u64)
        })
    }

    /// The regular files of a directory on the host the server runs on (a profiler's
    /// traces), at most `max`, as (name, bytes); or why not.
    fn list_files<'a>(
        &'a self,
        dir: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, HostError>> {
        Box::pin(async move { Ok(small_file::list_local(dir, max)?) })
    }

    /// What the host the server runs on is (its GPUs' model, memory, driver and power limit),
    /// read with the facts script (`ssh::facts::FACTS`) where it can only be read once the
    /// server's place exists (a Slurm allocation's node); None elsewhere (this machine and SSH
    /// hosts are read before the launch).
    /// As `meta.json`'s `server_host` holds them (JSON: the facts are the SSH layer's type).
    fn facts_after_launch(&self) -> BoxFuture<'_, Option<serde_json::Value>> {
        Box::pin(async { None })
    }

    /// A directory of this run on the host, for what the server writes there (a
    /// profiler's traces); None where the host keeps none (this machine: the run directory).
    fn run_dir_on_host(&self) -> Option<String> {
        None
    }
}

/// The rank of a multi-node server that failed first (see [`ServerProcess::failed_rank`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FailedRank {
    pub rank: u32,
    /// Ranks in the server.
    pub of: u32,
    /// The host it ran on.
    pub host: String,
    /// Its log in the run directory.
    pub log_path: std::path::PathBuf,
    /// A deployment's process: its name (`decode1`, `router`), said instead of the rank.
    pub name: Option<String>,
}

impl std::fmt::Display for FailedRank {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let log = self
            .log_path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        match &self.name {
            Some(name) => write!(
                f,
                "{name}, one of {} processes on {}, log {log}",
                self.of, self.host
            ),
            None => write!(
                f,
                "rank {} of {} on {}, log {log}",
                self.rank, self.of, self.host
            ),
        }
    }
}

/// A launched server.
pub(crate) trait ServerProcess: Send {
    /// Its base URL as this machine reaches it (through a forward for SSH hosts).
    fn url(&self) -> &str;

    /// Its base URL on the host itself (for a measuring agent there); None on this machine.
    fn host_url(&self) -> Option<&str>;

    /// Whether this machine reaches it through an SSH port forward ([`Self::url`] is the
    /// forward's local end).
    fn through_forward(&self) -> bool {
        false
    }

    /// Its pid, process group and where it runs, as `meta.json` records them.
    fn ids(&self) -> ProcessRecord;

    /// True once the server process has exited (a failed look at a remote one is not an
    /// exit: the next look decides).
    fn exited(&mut self) -> BoxFuture<'_, bool>;

    /// Brings the run directory's copy of the log up to date.
    fn sync_log(&self) -> BoxFuture<'_, ()>;

    /// Where to read the log, for messages.
    fn log_display(&self) -> String;

    /// How often to look at the process (each look at a remote one is a round trip).
    fn poll_interval(&self) -> Duration;

    /// How long a line the process wrote may take to reach the run directory's copy of its
    /// log (a remote log is pulled now and then).
    fn log_lag(&self) -> Duration {
        Duration::ZERO
    }

    /// Stops the whole process group (SIGTERM, `grace`, SIGKILL) and confirms it is gone.
    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Stopped>;

    /// The Slurm job it runs in, as last seen (None off Slurm).
    fn slurm_job(&self) -> Option<servebench_model::results::meta::SlurmJob> {
        None
    }

    /// Once it has exited: the host's own reason, when the host ended it (Slurm's time
    /// limit, a preemption, a node failure); None leaves the cause to the engine's log lines.
    fn host_failure(&mut self) -> BoxFuture<'_, Option<servebench_model::catalog::Failure>> {
        Box::pin(async { None })
    }

    /// Once it has exited: the signal that ended it (9 for SIGKILL), when one did and the host
    /// can tell. None when it exited by itself.
    fn exit_signal(&mut self) -> Option<i32> {
        None
    }

    /// For a multi-node server that exited: the rank whose failure brought it down (its log
    /// holds the cause). None for a single process.
    fn failed_rank(&self) -> Option<FailedRank> {
        None
    }

    /// Looked at while a point runs: Some once a process of the server ended. A lost one
    /// ([`Loss::fatal`]: its leader, or a process of its group that had run for a while when
    /// the server then failed its [`Liveness`] probe) comes after stopping the rest, so
    /// requests in flight end now rather than at their timeout. None while it is whole, and
    /// where the host cannot tell cheaply (the crash is then found after the point).
    fn lost_process(&mut self) -> BoxFuture<'_, Option<Loss>> {
        Box::pin(async { None })
    }

    /// How to ask the server whether it still serves once a long-running process of its
    /// group ended (ignored where [`Self::lost_process`] is not looked at).
    fn watch_liveness(&mut self, _probe: Liveness) {}
}

/// Asks a launched server whether it still serves (its engine's health endpoint, bounded in
/// time): Ok when it answered, Err with what it did instead.
pub(crate) type Liveness =
    std::sync::Arc<dyn Fn() -> BoxFuture<'static, Result<(), NotServing>> + Send + Sync>;

/// What a server did instead of answering its liveness probe (`did not answer /health ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct NotServing(pub String);

/// A process a launched server's group lost while a point ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loss {
    /// Which process, and what the server did after.
    pub what: String,
    /// True when the server cannot serve without it (its leader, or a part after which it
    /// failed its liveness probe): it was stopped. False for a helper that ended while the
    /// server still answered (a compiler, a compile worker going idle): it goes on.
    pub fatal: bool,
}

/// A free TCP port on 127.0.0.1 (bind port 0, read it back, release it).
pub fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// How `servebench port --wanted P` exits when P is taken on its machine.
pub(crate) const PORT_TAKEN_EXIT: i32 = crate::exit::FAILED;

/// `servebench port`, run on the machine a server will listen on (a Slurm node): prints
/// `wanted` when it is free there (else says so on stderr and exits [`PORT_TAKEN_EXIT`]), or
/// a port free on every address of the machine.
pub(crate) fn port_main(wanted: Option<u16>) -> i32 {
    let picked = match wanted {
        Some(p) if port_in_use(p) => Err(format!("port {p} is in use here")),
        Some(p) => std::net::TcpListener::bind(("0.0.0.0", p))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("port {p} cannot be bound here: {e}")),
        None => std::net::TcpListener::bind("0.0.0.0:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("no free port here: {e}")),
    };
    match picked {
        Ok(p) => {
            servebench_model::console::outln(&p.to_string());
            crate::exit::OK
        }
        Err(why) => {
            servebench_model::console::errln(&why);
            PORT_TAKEN_EXIT
        }
    }
}

/// True when something already listens on 127.0.0.1:`port`.
pub fn port_in_use(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        std::time::Duration::from_millis(200),
    )
    .is_ok()
}

/// The last `max_bytes` of a file, lossily decoded (for crash excerpts).
pub(crate) fn file_tail(path: &std::path::Path, max_bytes: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max_bytes)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(start: Option<u64>) -> GroupIdentity {
        GroupIdentity {
            pgid: 4242,
            leader_start: start,
            boot_id: Some("boot-a".into()),
            program: "python".into(),
        }
    }

    fn facts(leader: Option<(char, u64)>, live: usize, older: usize) -> GroupFacts {
        GroupFacts {
            leader,
            live,
            older,
            boot_id: Some("boot-a".into()),
        }
    }

    #[test]
    fn a_group_is_known_by_its_leaders_start_time() {
        let ours = id(Some(1000));
        assert_eq!(judge(&ours, &facts(Some(('S', 1000)), 3, 0)), Verdict::Ours);
        // Another process got the id later.
        assert!(matches!(
            judge(&ours, &facts(Some(('S', 5000)), 1, 0)),
            Verdict::Reused(_)
        ));
        // The leader (a wrapper script) died; its children live on in the group.
        assert_eq!(judge(&ours, &facts(None, 2, 0)), Verdict::Ours);
        assert!(matches!(
            judge(&ours, &facts(None, 2, 1)),
            Verdict::Reused(_)
        ));
        // Without a recorded start, the caller falls back to the program name.
        assert_eq!(
            judge(&id(None), &facts(Some(('S', 1)), 1, 0)),
            Verdict::Unrecorded
        );
    }

    #[test]
    fn zombies_are_gone_not_reused() {
        let ours = id(Some(1000));
        // A zombie leader and nothing else; a zombie leader with live children is ours.
        assert_eq!(judge(&ours, &facts(Some(('Z', 1000)), 0, 0)), Verdict::Gone);
        assert_eq!(judge(&ours, &facts(Some(('Z', 1000)), 1, 0)), Verdict::Ours);
        // Even a zombie with another start time holds nothing to stop.
        assert_eq!(judge(&ours, &facts(Some(('Z', 7)), 0, 0)), Verdict::Gone);
        assert_eq!(judge(&ours, &facts(None, 0, 0)), Verdict::Gone);
    }

    #[test]
    fn after_a_reboot_nothing_is_ours() {
        let ours = id(Some(1000));
        let mut f = facts(Some(('S', 1000)), 1, 0);
        f.boot_id = Some("boot-b".into());
        assert!(matches!(judge(&ours, &f), Verdict::Reused(_)));
        f.live = 0;
        assert_eq!(judge(&ours, &f), Verdict::Gone);
    }
}
