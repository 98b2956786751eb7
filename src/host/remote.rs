//! An SSH host as a [`Host`](super::Host): the connection, the per-run directory on the host,
//! servebench's own binary there (for the simulator engine and the measuring agent), ports
//! read from the host's /proc, servers launched detached with their logs mirrored into the run
//! directory as they grow, and reached through a port forward.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::ssh::{self, HostKeyCheck, RemoteProcess, SshHost, SshTarget};
use super::{HostError, Leftover, ServerProcess, Spawn, Stopped};
use servebench_model::results::meta::ProcessRecord;
use servebench_model::spec::types::{self, HostSpec};

/// How often a remote server's log is pulled into the run directory.
const LOG_SYNC_EVERY: Duration = Duration::from_millis(500);

/// The spec's host as an SSH target (None for `local`).
pub(crate) fn ssh_target(host: &HostSpec) -> Result<Option<SshTarget>, ssh::SshError> {
    match host {
        HostSpec::Url(u) if u == "local" => Ok(None),
        HostSpec::Url(u) => SshTarget::parse_url(u).map(Some),
        HostSpec::Slurm(_) => Ok(None),
        HostSpec::Ssh(s) => {
            let mut t = if s.ssh.starts_with("ssh://") {
                SshTarget::parse_url(&s.ssh)?
            } else {
                SshTarget::new(&s.ssh)
            };
            if s.user.is_some() {
                t.user = s.user.clone();
            }
            if s.port.is_some() {
                t.port = s.port;
            }
            t.identity = s.identity.as_deref().map(expand_home);
            t.jump = s.jump.clone();
            t.known_hosts = s.known_hosts.as_deref().map(expand_home);
            t.host_key_check = match s.host_key_check {
                types::HostKeyCheck::Strict => HostKeyCheck::Strict,
                types::HostKeyCheck::AcceptNew => HostKeyCheck::AcceptNew,
            };
            t.options = s
                .options
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Ok(Some(t))
        }
    }
}

/// `addr` as a URL's host (an IPv6 address in brackets).
pub(crate) fn url_host(addr: &str) -> String {
    if addr.contains(':') && !addr.starts_with('[') {
        format!("[{addr}]")
    } else {
        addr.to_string()
    }
}

fn spec_address(host: &HostSpec) -> Option<String> {
    match host {
        HostSpec::Ssh(s) => s.address.clone(),
        HostSpec::Url(_) | HostSpec::Slurm(_) => None,
    }
}

fn expand_home(p: &str) -> PathBuf {
    match (p.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(p),
    }
}

/// The connected host of a run.
pub(crate) struct RemoteHost {
    pub ssh: Arc<SshHost>,
    /// The per-run directory on the host (logs, pid files).
    pub dir: String,
    binary: tokio::sync::Mutex<Option<String>>,
    /// `address:` of the host's spec: where the run's other hosts reach it.
    address: Option<String>,
}

impl RemoteHost {
    /// Connects (failing fast with ssh's classified error) and creates the run's directory.
    pub(crate) async fn connect(host: &HostSpec, run_id: &str) -> Result<RemoteHost, HostError> {
        let target = ssh_target(host)?
            .ok_or_else(|| HostError::Unsupported("the host is local, not an SSH host".into()))?;
        let ssh = SshHost::connect(&target).await?;
        let base = match host {
            HostSpec::Ssh(s) => s.remote_dir.clone(),
            HostSpec::Url(_) | HostSpec::Slurm(_) => None,
        };
        let runs_base = base
            .as_ref()
            .map(|b| format!("{}/runs", b.trim_end_matches('/')));
        let dir = ssh.remote_dir(runs_base.as_deref(), run_id).await?;
        Ok(RemoteHost {
            ssh: Arc::new(ssh),
            dir,
            binary: tokio::sync::Mutex::new(None),
            address: spec_address(host),
        })
    }

    /// Connects without creating a run directory (for `servebench down`).
    pub(crate) async fn reach(host: &HostSpec) -> Result<RemoteHost, HostError> {
        let target = ssh_target(host)?
            .ok_or_else(|| HostError::Unsupported("the host is local, not an SSH host".into()))?;
        let ssh = SshHost::connect(&target).await?;
        Ok(RemoteHost {
            ssh: Arc::new(ssh),
            dir: String::new(),
            binary: tokio::sync::Mutex::new(None),
            address: spec_address(host),
        })
    }

    /// servebench's binary on the host, uploaded once per content hash. The binary is
    /// `SERVEBENCH_HOST_BINARY` when set (e.g. a static musl build), else this one.
    pub(crate) async fn binary(&self) -> Result<String, HostError> {
        let mut cached = self.binary.lock().await;
        if let Some(b) = &*cached {
            return Ok(b.clone());
        }
        let local = match std::env::var_os("SERVEBENCH_HOST_BINARY") {
            Some(p) => PathBuf::from(p),
            None => std::env::current_exe()
                .map_err(|e| HostError::io("cannot find servebench's own binary", e))?,
        };
        let b = self.ssh.ensure_binary(&local).await?;
        *cached = Some(b.path.clone());
        Ok(b.path)
    }

    /// A free TCP port on the host's loopback, from `first` upwards.
    pub(crate) async fn free_port(&self, first: u16) -> Result<u16, HostError> {
        for port in first..first.saturating_add(200) {
            // A port handed out moments ago may not be bound yet: concurrent launches (a
            // host pool, the ranks of one server) must not get the same one.
            if !reserve(port) {
                continue;
            }
            if !self.port_in_use(port).await? {
                return Ok(port);
            }
        }
        Err(HostError::Unsupported(format!(
            "no free port on the host between {first} and {}",
            first.saturating_add(200)
        )))
    }

    /// True when something listens on `port` on the host (read from /proc/net/tcp*, which
    /// every Linux has; no ss or netstat needed).
    pub(crate) async fn port_in_use(&self, port: u16) -> Result<bool, HostError> {
        const SCRIPT: &str = r#"p=$(printf '%04X' "$1")
cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p="$p" 'NR > 1 { n = split($2, a, ":"); if (toupper(a[n]) == p && $4 == "0A") f = 1 } END { exit f ? 0 : 1 }'"#;
        let out = self.ssh.run_script(SCRIPT, &[port.to_string()]).await?;
        Ok(out.status.success())
    }
}

/// How long a port handed out by [`RemoteHost::free_port`] stays reserved for its launch.
const PORT_HOLD: Duration = Duration::from_secs(120);

/// Ports this process handed out lately, with when (one book for every host: hosts of a pool
/// may be one machine).
static HANDED_OUT: std::sync::Mutex<Vec<(u16, std::time::Instant)>> =
    std::sync::Mutex::new(Vec::new());

/// Reserves `port` unless it was handed out lately: checked and noted under one lock, so two
/// concurrent picks never get the same port (a port found in use stays noted; it is taken).
fn reserve(port: u16) -> bool {
    let mut book = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    book.retain(|(_, at)| at.elapsed() < PORT_HOLD);
    if book.iter().any(|(p, _)| *p == port) {
        return false;
    }
    book.push((port, std::time::Instant::now()));
    true
}

/// A server launched on the host, its log mirrored into the run directory.
pub(crate) struct RemoteServer {
    pub ssh: Arc<SshHost>,
    pub process: RemoteProcess,
    /// The mirrored log in the run directory.
    pub local_log: PathBuf,
    /// The forwarded URL on this machine.
    url: String,
    host_url: String,
    offset: Arc<tokio::sync::Mutex<u64>>,
    mirror: tokio::task::JoinHandle<()>,
}

impl RemoteServer {
    pub(crate) fn new(
        ssh: Arc<SshHost>,
        process: RemoteProcess,
        local_log: PathBuf,
        bind: &str,
        port: u16,
        local_port: u16,
    ) -> Self {
        let offset = Arc::new(tokio::sync::Mutex::new(0u64));
        let mirror = {
            let (ssh, remote, local, offset) = (
                ssh.clone(),
                process.log_path.clone(),
                local_log.clone(),
                offset.clone(),
            );
            tokio::spawn(async move {
                loop {
                    // A failed pull (a dropped connection) is retried on the next tick from
                    // the same byte offset, after the SSH layer reconnects.
                    let _ = pull_log(&ssh, &remote, &local, &offset, false).await;
                    tokio::time::sleep(LOG_SYNC_EVERY).await;
                }
            })
        };
        RemoteServer {
            ssh,
            process,
            local_log,
            url: format!("http://127.0.0.1:{local_port}"),
            host_url: format!("http://{}:{port}", url_host(bind)),
            offset,
            mirror,
        }
    }

    /// Pulls what the log gained since the last pull.
    pub(crate) async fn sync_log(&self) {
        self.pull(false).await;
    }

    /// Pulls the log; `whole`: also a last line that has no newline yet (the server is gone).
    async fn pull(&self, whole: bool) {
        let _ = pull_log(
            &self.ssh,
            &self.process.log_path,
            &self.local_log,
            &self.offset,
            whole,
        )
        .await;
    }

    /// True while the server process runs.
    pub(crate) async fn alive(&self) -> Result<bool, HostError> {
        Ok(self.ssh.alive(self.process.pid).await?)
    }

    /// Stops the whole process group (TERM, grace, KILL), confirms it is gone, pulls the rest
    /// of the log. Returns the outcome and whether the group is confirmed gone.
    pub(crate) async fn stop(&mut self, grace: Duration) -> (String, bool) {
        let outcome = match self.ssh.stop_group(self.process.pgid, grace).await {
            Ok(o) => o.to_string(),
            Err(e) => format!("could not stop it: {e}"),
        };
        let gone = matches!(self.ssh.group_alive(self.process.pgid).await, Ok(false));
        self.pull(true).await;
        self.mirror.abort();
        (outcome, gone)
    }
}

impl Drop for RemoteServer {
    fn drop(&mut self) {
        self.mirror.abort();
    }
}

/// Appends what the remote log gained to the mirror, whole lines only (unless `whole`, or a
/// line outgrows the line budget), each through the run's redactor: a secret is never cut in
/// two by a pull and so never half-hidden.
async fn pull_log(
    ssh: &SshHost,
    remote: &str,
    local: &Path,
    offset: &tokio::sync::Mutex<u64>,
    whole: bool,
) -> Result<(), HostError> {
    let mut off = offset.lock().await;
    let bytes = ssh.read_from(remote, *off).await?;
    let take = match memchr::memrchr(b'\n', &bytes) {
        _ if whole || bytes.len() >= servebench_model::redact::MAX_LINE_BYTES => bytes.len(),
        Some(i) => i + 1,
        None => 0,
    };
    if take == 0 {
        return Ok(());
    }
    let redactor = servebench_model::redact::current();
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(local)
        .and_then(|mut f| f.write_all(&redactor.bytes(&bytes[..take])))
        .map_err(|e| HostError::io(format!("cannot append to {}", local.display()), e))?;
    *off += take as u64;
    Ok(())
}

/// Facts about the host, for meta.json; `python` is the interpreter that imports sglang.
pub(crate) async fn host_facts(ssh: &SshHost, python: &str) -> Option<serde_json::Value> {
    let facts: ssh::HostFacts = ssh.host_facts(python).await.ok()?;
    serde_json::to_value(facts).ok()
}

impl super::Host for RemoteHost {
    fn name(&self) -> String {
        self.ssh.name().to_string()
    }

    fn address(&self) -> String {
        if let Some(a) = &self.address {
            return a.clone();
        }
        let d = &self.ssh.target().destination;
        let d = d.strip_prefix("ssh://").unwrap_or(d);
        let d = d.rsplit('@').next().unwrap_or(d);
        d.trim_start_matches('[')
            .split(']')
            .next()
            .unwrap_or(d)
            .to_string()
    }

    fn pick_port(&self, wanted: Option<u16>) -> BoxFuture<'_, Result<u16, HostError>> {
        Box::pin(async move {
            match wanted {
                Some(p) if self.port_in_use(p).await? => Err(HostError::PortInUse {
                    port: p,
                    host: self.ssh.name().to_string(),
                }),
                Some(p) => Ok(p),
                None => self.free_port(30000).await,
            }
        })
    }

    fn servebench_binary(&self) -> BoxFuture<'_, Result<String, HostError>> {
        Box::pin(self.binary())
    }

    fn spawn<'a>(
        &'a self,
        spawn: Spawn<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn ServerProcess>, HostError>> {
        Box::pin(async move {
            let group = spawn.group;
            let remote_log = format!("{}/server-{group}.log", self.dir);
            let pid_file = format!("{}/server-{group}.pid", self.dir);
            let process = self
                .ssh
                .spawn_detached(
                    &spawn.command.argv(),
                    spawn.env,
                    spawn.workdir,
                    &remote_log,
                    &pid_file,
                )
                .await?;
            // Readiness and /server_info go through a forward; so does the measurement with
            // `client: local`.
            match self.ssh.forward_local(spawn.bind, spawn.port).await {
                Ok(local_port) => Ok(Box::new(RemoteServer::new(
                    self.ssh.clone(),
                    process,
                    spawn.log_path.to_path_buf(),
                    spawn.bind,
                    spawn.port,
                    local_port,
                )) as Box<dyn ServerProcess>),
                Err(e) => {
                    // Nothing may outlive a failed launch.
                    let _ = self.ssh.stop_group(process.pgid, STOP_GRACE_FAILED).await;
                    Err(HostError::Unsupported(format!(
                        "cannot forward a local port to port {} on the host: {e}",
                        spawn.port
                    )))
                }
            }
        })
    }

    fn stop_leftover<'a>(
        &'a self,
        id: &'a super::GroupIdentity,
        grace: Duration,
    ) -> BoxFuture<'a, Leftover> {
        Box::pin(async move {
            let pgid = id.pgid;
            let verdict = match self.ssh.group_facts(id).await {
                Ok(Some(facts)) => super::judge(id, &facts),
                // No /proc on the host: whether anything is left, then the program name.
                Ok(None) => match self.ssh.group_alive(pgid).await {
                    Ok(false) => super::Verdict::Gone,
                    Ok(true) => super::Verdict::Unrecorded,
                    Err(e) => {
                        return Leftover::Unknown(format!(
                            "cannot check process group {pgid}: {e}"
                        ));
                    }
                },
                Err(e) => {
                    return Leftover::Unknown(format!("cannot check process group {pgid}: {e}"));
                }
            };
            match verdict {
                super::Verdict::Gone => return Leftover::AlreadyGone,
                super::Verdict::Reused(why) => return Leftover::Reused { why },
                super::Verdict::Unrecorded => {
                    let check = self
                        .ssh
                        .run_script(
                            r#"ps -o args= -g "$1" 2>/dev/null | grep -F -q -- "$2""#,
                            &[pgid.to_string(), id.program.clone()],
                        )
                        .await;
                    if matches!(&check, Ok(out) if !out.status.success()) {
                        return Leftover::Reused {
                            why: format!("it does not run {} (the id was reused)", id.program),
                        };
                    }
                }
                super::Verdict::Ours => {}
            }
            match self.ssh.stop_group(pgid, grace).await {
                Ok(outcome) => Leftover::Stopped {
                    killed: matches!(outcome, super::local::StopOutcome::Killed),
                    gone: matches!(self.ssh.group_alive(pgid).await, Ok(false)),
                },
                Err(e) => Leftover::Unknown(format!("could not stop process group {pgid}: {e}")),
            }
        })
    }

    fn port_in_use(&self, port: u16) -> BoxFuture<'_, Result<bool, HostError>> {
        Box::pin(RemoteHost::port_in_use(self, port))
    }

    fn check_link(&self) -> BoxFuture<'_, Result<(), HostError>> {
        Box::pin(async move { Ok(self.ssh.ensure_connected().await?) })
    }

    fn read_small_file<'a>(
        &'a self,
        path: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, HostError>> {
        Box::pin(async move {
            let out = self
                .ssh
                .run_script(
                    super::small_file::SCRIPT,
                    &[path.to_string(), limit.to_string()],
                )
                .await?;
            Ok(super::small_file::from_output(&out, limit)?)
        })
    }

    fn list_files<'a>(
        &'a self,
        dir: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, HostError>> {
        Box::pin(async move {
            let out = self
                .ssh
                .run_script(
                    super::small_file::LIST_SCRIPT,
                    &[dir.to_string(), max.to_string()],
                )
                .await?;
            Ok(super::small_file::parse_listing(&out)?)
        })
    }

    fn run_dir_on_host(&self) -> Option<String> {
        Some(self.dir.clone())
    }
}

/// How long a server whose forward failed gets to exit before SIGKILL.
const STOP_GRACE_FAILED: Duration = Duration::from_secs(10);

impl ServerProcess for RemoteServer {
    fn url(&self) -> &str {
        &self.url
    }

    fn host_url(&self) -> Option<&str> {
        Some(&self.host_url)
    }

    fn through_forward(&self) -> bool {
        true
    }

    fn ids(&self) -> ProcessRecord {
        ProcessRecord {
            host: Some(self.ssh.name().to_string()),
            pid: Some(self.process.pid),
            pgid: Some(self.process.pgid),
            leader_start: self.process.leader_start,
            boot_id: self.process.boot_id.clone(),
            remote_log: Some(self.process.log_path.clone()),
        }
    }

    fn exited(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            // An SSH hiccup is not a crash; the next look decides.
            if self.alive().await.unwrap_or(true) {
                return false;
            }
            RemoteServer::sync_log(self).await;
            true
        })
    }

    fn sync_log(&self) -> BoxFuture<'_, ()> {
        Box::pin(RemoteServer::sync_log(self))
    }

    fn log_display(&self) -> String {
        format!(
            "{} (on the host: {})",
            self.local_log.display(),
            self.process.log_path
        )
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_millis(300)
    }

    fn log_lag(&self) -> Duration {
        // A pull every LOG_SYNC_EVERY, a round trip each, and one pull that started just
        // before the line was written.
        LOG_SYNC_EVERY * 3
    }

    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Stopped> {
        Box::pin(async move {
            let (outcome, gone) = RemoteServer::stop(self, grace).await;
            Stopped {
                outcome,
                pgid: self.process.pgid,
                gone,
            }
        })
    }
}
