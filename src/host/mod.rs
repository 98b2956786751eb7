//! Where servers run, behind one interface: [`Host`] launches, watches and stops a server and
//! cleans up after a runner that died; [`ServerProcess`] is one launched server. `local` is
//! this machine (a child process in its own process group); `remote` is an SSH host (a
//! detached process group, its log mirrored into the run directory, reached through a port
//! forward). A new kind of host (a Slurm allocation) is a new implementation of these traits.

pub mod local;
pub mod remote;
pub mod ssh;

use std::path::Path;
use std::time::Duration;

use futures_util::future::BoxFuture;
use indexmap::IndexMap;

use crate::engine::LaunchCommand;

/// Why a host could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The SSH layer failed (connection, authentication, a remote command).
    #[error(transparent)]
    Ssh(#[from] ssh::SshError),
    /// A local system call or file operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The requested port is taken.
    #[error(
        "port {port} is already in use on {host}: stop what listens there, or omit server.port to pick a free one"
    )]
    PortInUse { port: u16, host: String },
    /// Something the host cannot do, with the reason.
    #[error("{0}")]
    Unsupported(String),
}

impl HostError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> HostError {
        HostError::Io {
            what: what.into(),
            source,
        }
    }
}

/// What to start for one server group.
pub struct Spawn<'a> {
    /// The group id (`g1`), for names of files on the host.
    pub group: &'a str,
    /// Program and arguments from the engine adapter; never passed through a shell.
    pub command: &'a LaunchCommand,
    /// Added to the environment (secrets already expanded).
    pub env: &'a IndexMap<String, String>,
    pub workdir: Option<&'a str>,
    /// The log in the run directory (written directly, or mirrored from the host).
    pub log_path: &'a Path,
    /// The port the server listens on, on the host's loopback.
    pub port: u16,
}

/// Where a launched server runs, as recorded in `meta.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessIds {
    pub pid: i32,
    /// The process group, which [`ServerProcess::stop`] and `servebench down` stop as a whole.
    pub pgid: i32,
    /// The SSH host's name; None on this machine.
    pub host: Option<String>,
    /// The log file on the host (mirrored into the run directory); None on this machine.
    pub remote_log: Option<String>,
}

/// How a stop went.
#[derive(Debug, Clone, PartialEq)]
pub struct Stopped {
    /// What happened, in words: `stopped with SIGTERM`, `could not stop it: ...`.
    pub outcome: String,
    pub pgid: i32,
    /// The whole group is confirmed gone.
    pub gone: bool,
}

/// What `servebench down` found for a recorded server.
#[derive(Debug, Clone, PartialEq)]
pub enum Leftover {
    /// Nothing of the group is left.
    AlreadyGone,
    /// The group id now belongs to another program: left alone.
    Reused { program: String },
    /// Stopped; `gone` says whether that is confirmed.
    Stopped { killed: bool, gone: bool },
    /// The host could not be asked.
    Unknown(String),
}

/// A host that runs servers: this machine, an SSH host (later a Slurm allocation).
pub trait Host: Send + Sync {
    /// How the host is named in messages and records: `local`, `bench@gpu-box-1`.
    fn name(&self) -> String;

    /// The port for a server: `wanted` once checked free, else a free one.
    fn pick_port(&self, wanted: Option<u16>) -> BoxFuture<'_, Result<u16, HostError>>;

    /// servebench's own binary as the host runs it (for `engine: sim`).
    fn servebench_binary(&self) -> BoxFuture<'_, Result<String, HostError>>;

    /// Starts a server detached in its own process group, its output in `spawn.log_path`.
    fn spawn<'a>(
        &'a self,
        spawn: Spawn<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn ServerProcess>, HostError>>;

    /// Stops process group `pgid`, left by a runner that died, if it still runs `program`
    /// (a process group id is reused once its group is gone).
    fn stop_leftover<'a>(
        &'a self,
        pgid: i32,
        program: &'a str,
        grace: Duration,
    ) -> BoxFuture<'a, Leftover>;

    /// Checks the host can still be reached (re-establishing a dropped link when it can).
    fn check_link(&self) -> BoxFuture<'_, Result<(), HostError>>;
}

/// A launched server.
pub trait ServerProcess: Send {
    /// Its base URL as this machine reaches it (through a forward for SSH hosts).
    fn url(&self) -> &str;

    /// Its base URL on the host itself (for a measuring agent there); None on this machine.
    fn host_url(&self) -> Option<&str>;

    /// Its pid, process group and where it runs.
    fn ids(&self) -> ProcessIds;

    /// True once the server process has exited (a failed look at a remote one is not an
    /// exit: the next look decides).
    fn exited(&mut self) -> BoxFuture<'_, bool>;

    /// Brings the run directory's copy of the log up to date.
    fn sync_log(&self) -> BoxFuture<'_, ()>;

    /// Where to read the log, for messages.
    fn log_display(&self) -> String;

    /// How often to look at the process (each look at a remote one is a round trip).
    fn poll_interval(&self) -> Duration;

    /// Stops the whole process group (SIGTERM, `grace`, SIGKILL) and confirms it is gone.
    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Stopped>;
}

/// A free TCP port on 127.0.0.1 (bind port 0, read it back, release it).
pub fn free_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
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
pub fn file_tail(path: &std::path::Path, max_bytes: u64) -> String {
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
