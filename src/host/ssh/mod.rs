//! A host reached over SSH: one multiplexed connection (the system `ssh` as ControlMaster,
//! driven by the `openssh` crate, so ~/.ssh/config, agents and jump hosts work as they do for
//! the user), commands with every argument quoted for the remote POSIX shell, and a
//! reconnection when the master dies.
//!
//! Remote commands are run by the login shell of the remote user, which must be a POSIX shell
//! (sh, bash, dash, zsh); csh-family and fish quote differently.

pub(crate) mod error;
mod facts;
mod files;
mod process;
mod target;

use std::future::Future;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use openssh::{ControlPersist, ForwardType, KnownHosts, Session, SessionBuilder, Stdio};

pub use error::SshError;
pub(crate) use facts::{FACTS, local_facts, parse_facts};
pub use facts::{Gpu, HostFacts};

pub(crate) use process::RemoteProcess;
pub use target::{HostKeyCheck, SshTarget};

/// A remote process started with pipes: write to its stdin, read JSON lines from its stdout.
pub(crate) type PipedChild = openssh::Child<Arc<Session>>;

/// Connection attempts after the master dies, and the pause before the second one (doubling).
const RECONNECT_ATTEMPTS: u32 = 3;
const RECONNECT_BACKOFF: Duration = Duration::from_millis(500);
/// Keepalive, so a dead network ends the master (and so triggers a reconnect) in under a minute.
const SERVER_ALIVE_INTERVAL: Duration = Duration::from_secs(15);

/// The master connection exits after this long with no session or forwarded connection
/// open, so one left by a runner killed with SIGKILL does not linger. A live run never idles
/// this long (it pulls the server log every 500 ms); if it ever did, it would reconnect.
/// SERVEBENCH_SSH_IDLE_EXIT_S overrides it (tests).
const MASTER_IDLE_EXIT: usize = 300;

fn master_idle_exit() -> std::num::NonZeroUsize {
    std::env::var("SERVEBENCH_SSH_IDLE_EXIT_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .or(std::num::NonZeroUsize::new(MASTER_IDLE_EXIT))
        .unwrap_or(std::num::NonZeroUsize::MIN)
}

/// A connected SSH host.
pub struct SshHost {
    /// First, so it drops first: its drop asks the master to exit through the control
    /// socket, which lives in `dir`.
    session: RwLock<Arc<Session>>,
    target: SshTarget,
    host: String,
    /// Holds the control sockets and the generated ssh config; private to this process.
    dir: tempfile::TempDir,
    config: Option<PathBuf>,
    /// Serializes reconnections, so concurrent failures reconnect once.
    reconnecting: tokio::sync::Mutex<()>,
    /// Local forwards (local port, remote address, remote port), re-requested after a
    /// reconnection.
    forwards: Mutex<Vec<(u16, String, u16)>>,
}

impl std::fmt::Debug for SshHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshHost").field("host", &self.host).finish()
    }
}

impl SshHost {
    /// Opens the master connection. Never prompts (BatchMode); failures are classified.
    pub async fn connect(target: &SshTarget) -> Result<SshHost, SshError> {
        let target = target.resolved()?;
        let dir = tempfile::Builder::new()
            .prefix("servebench-ssh-")
            .tempdir_in(control_base())
            .map_err(|e| local("cannot create a directory for the SSH control socket", e))?;
        let config = match target.config_text() {
            Some(text) => {
                let path = dir.path().join("ssh_config");
                std::fs::write(&path, text)
                    .map_err(|e| local("cannot write the generated ssh config", e))?;
                Some(path)
            }
            None => None,
        };
        let host = target.display();
        let session = match open(&target, &host, dir.path(), config.as_deref()).await {
            Ok(s) => s,
            Err(e) => return Err(which_hop_failed(&target, e).await),
        };
        Ok(SshHost {
            session: RwLock::new(Arc::new(session)),
            host,
            target,
            dir,
            config,
            reconnecting: tokio::sync::Mutex::new(()),
            forwards: Mutex::new(Vec::new()),
        })
    }

    /// `user@host:port`, for messages.
    pub(crate) fn name(&self) -> &str {
        &self.host
    }

    pub(crate) fn target(&self) -> &SshTarget {
        &self.target
    }

    async fn open(&self) -> Result<Session, SshError> {
        open(
            &self.target,
            &self.host,
            self.dir.path(),
            self.config.as_deref(),
        )
        .await
    }

    fn session(&self) -> Arc<Session> {
        self.session
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Checks the master connection and reconnects if it is gone.
    pub(crate) async fn ensure_connected(&self) -> Result<(), SshError> {
        let s = self.session();
        if s.check().await.is_ok() {
            return Ok(());
        }
        self.reconnect(&s).await
    }

    /// Replaces a dead session (unless another task already did), with bounded attempts.
    async fn reconnect(&self, dead: &Arc<Session>) -> Result<(), SshError> {
        let _turn = self.reconnecting.lock().await;
        if !Arc::ptr_eq(&self.session(), dead) {
            return Ok(());
        }
        tracing::warn!("the SSH connection to {} dropped; reconnecting", self.host);
        let mut last = None;
        for attempt in 0..RECONNECT_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(RECONNECT_BACKOFF * 2u32.pow(attempt - 1)).await;
            }
            match self.open().await {
                Ok(s) => {
                    *self.session.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(s);
                    return self.restore_forwards().await;
                }
                // A key or login problem does not go away by retrying.
                Err(
                    e @ (SshError::HostKeyMismatch { .. }
                    | SshError::HostKeyUnknown { .. }
                    | SshError::AuthRefused { .. }
                    | SshError::InvalidTarget(_)),
                ) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(SshError::Reconnect {
            host: self.host.clone(),
            attempts: RECONNECT_ATTEMPTS,
            last: Box::new(last.unwrap_or_else(|| SshError::Other {
                host: self.host.clone(),
                stderr: "no attempt was made".into(),
            })),
        })
    }

    /// Runs `op` on the session; if it fails because the master is gone, reconnects and runs
    /// it once more. Only for operations that are safe to repeat.
    async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> Result<T, SshError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: Future<Output = Result<T, openssh::Error>>,
    {
        let s = self.session();
        match op(s.clone()).await {
            Ok(v) => Ok(v),
            Err(e) => {
                if s.check().await.is_ok() {
                    return Err(self.command_error(what, e));
                }
                self.reconnect(&s).await?;
                op(self.session())
                    .await
                    .map_err(|e| self.command_error(what, e))
            }
        }
    }

    fn command_error(&self, what: &str, e: openssh::Error) -> SshError {
        let host = self.host.clone();
        match e {
            openssh::Error::Remote(io) if io.kind() == std::io::ErrorKind::NotFound => {
                SshError::CommandNotFound {
                    host,
                    program: what.to_string(),
                }
            }
            openssh::Error::RemoteProcessTerminated => SshError::Remote {
                host,
                what: what.to_string(),
                message: "exited with status 255 (or ssh lost the connection)".into(),
            },
            other => SshError::Remote {
                host,
                what: what.to_string(),
                message: error_chain(&other),
            },
        }
    }

    /// Runs `argv` on the host (each argument quoted for the remote shell) and collects its
    /// output; a non-zero exit is in `Output::status`, not an error.
    pub async fn run<S: AsRef<str>>(&self, argv: &[S]) -> Result<Output, SshError> {
        let argv = owned_argv(argv)?;
        self.retrying(&argv[0], |s| {
            let argv = argv.clone();
            async move { command(&s, &argv).output().await }
        })
        .await
    }

    /// Like [`run`](Self::run), but a non-zero exit is an error carrying stderr; returns stdout.
    pub async fn run_checked<S: AsRef<str>>(&self, argv: &[S]) -> Result<Vec<u8>, SshError> {
        let out = self.run(argv).await?;
        self.checked(argv.first().map(AsRef::as_ref).unwrap_or(""), out)
    }

    /// Runs a fixed shell `script` as `sh -c script sh ARGS...`: the script reads its inputs
    /// as "$1", "$2", ... so no value is ever spliced into shell text. `script` must be a
    /// constant written in this crate, never built from input.
    pub async fn run_script<S: AsRef<str>>(
        &self,
        script: &str,
        args: &[S],
    ) -> Result<Output, SshError> {
        self.run(&script_argv(script, args)).await
    }

    /// [`run_script`](Self::run_script) that fails on a non-zero exit, naming `what`.
    pub(crate) async fn script_checked<S: AsRef<str>>(
        &self,
        what: &str,
        script: &str,
        args: &[S],
    ) -> Result<Vec<u8>, SshError> {
        let out = self.run_script(script, args).await?;
        self.checked(what, out)
    }

    fn checked(&self, what: &str, out: Output) -> Result<Vec<u8>, SshError> {
        if out.status.success() {
            return Ok(out.stdout);
        }
        Err(SshError::CommandFailed {
            host: self.host.clone(),
            what: what.to_string(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }

    /// Starts `argv` with stdin, stdout and stderr piped (for a long-running agent that
    /// streams JSON lines back). Dropping the child kills the local ssh client, not
    /// necessarily the remote process.
    pub async fn spawn_piped<S: AsRef<str>>(&self, argv: &[S]) -> Result<PipedChild, SshError> {
        let argv = owned_argv(argv)?;
        // Spawning only forks the local ssh client; a dead master would show up later.
        self.ensure_connected().await?;
        let s = self.session();
        let mut cmd = Session::to_raw_command(s, quote(&argv[0]));
        cmd.args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn()
            .await
            .map_err(|e| self.command_error(&argv[0], e))
    }

    /// Forwards 127.0.0.1:<free local port> to `remote_host`:`remote_port` as the host reaches
    /// it (127.0.0.1, or the address a server there listens on); returns
    /// the local port. The forward lives as long as the connection (and is restored after a
    /// reconnection, on the same local port).
    pub async fn forward_local(
        &self,
        remote_host: &str,
        remote_port: u16,
    ) -> Result<u16, SshError> {
        let mut last = None;
        // The free port can be taken between choosing and binding; try a few.
        for _ in 0..3 {
            let local_port =
                super::free_port().map_err(|e| local("cannot find a free local port", e))?;
            match self
                .request_forward(local_port, remote_host, remote_port)
                .await
            {
                Ok(()) => {
                    self.forwards
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((local_port, remote_host.to_string(), remote_port));
                    return Ok(local_port);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| SshError::Other {
            host: self.host.clone(),
            stderr: "port forwarding failed".into(),
        }))
    }

    async fn request_forward(
        &self,
        local_port: u16,
        remote_host: &str,
        remote_port: u16,
    ) -> Result<(), SshError> {
        let what = format!("forwarding local port {local_port} to {remote_host}:{remote_port}");
        self.retrying(&what, |s| async move {
            s.request_port_forward(
                ForwardType::Local,
                (Ipv4Addr::LOCALHOST, local_port),
                tcp_socket(remote_host, remote_port),
            )
            .await
        })
        .await
    }

    async fn restore_forwards(&self) -> Result<(), SshError> {
        let forwards = self
            .forwards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for (local_port, remote_host, remote_port) in forwards {
            self.session()
                .request_port_forward(
                    ForwardType::Local,
                    (Ipv4Addr::LOCALHOST, local_port),
                    tcp_socket(&remote_host, remote_port),
                )
                .await
                .map_err(|e| {
                    self.command_error(
                        &format!("restoring the forward of local port {local_port}"),
                        e,
                    )
                })?;
        }
        Ok(())
    }

    /// A local `ssh` process that runs `argv` on the host through the master connection
    /// (each argument quoted for the remote shell), with stdin null and output the caller's:
    /// for a long-running command whose output goes to a file. Ending it does not end the
    /// remote command. `-p 9` (the discard port) keeps it from ever opening a connection of
    /// its own when the master is gone, so it never skips the host key check the master did.
    pub(crate) fn std_command<S: AsRef<str>>(
        &self,
        argv: &[S],
    ) -> Result<std::process::Command, SshError> {
        let argv = owned_argv(argv)?;
        let mut cmd = std::process::Command::new("ssh");
        cmd.stdin(std::process::Stdio::null())
            .arg("-S")
            .arg(self.control_socket())
            .args(["-o", "BatchMode=yes", "-T", "-p", "9", "none", "--"])
            .args(argv.iter().map(|a| quote(a)));
        Ok(cmd)
    }

    /// The control socket of the current master connection.
    pub(crate) fn control_socket(&self) -> PathBuf {
        self.session().control_socket().to_path_buf()
    }

    /// The pid of the local ssh master process (from `ssh -O check`), None when it is gone.
    pub async fn master_pid(&self) -> Option<u32> {
        let out = tokio::process::Command::new("ssh")
            .arg("-S")
            .arg(self.control_socket())
            .args(["-O", "check", "none"])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .ok()?;
        parse_master_pid(&String::from_utf8_lossy(&out.stderr))
    }

    /// Ends the master connection (remote processes started detached keep running).
    pub async fn close(self) -> Result<(), SshError> {
        let session = self.session();
        drop(self.session);
        match Arc::try_unwrap(session) {
            Ok(s) => s.close().await.map_err(|e| SshError::Other {
                host: self.host.clone(),
                stderr: error_chain(&e),
            }),
            // Still used by a piped child; it closes when that ends.
            Err(_) => Ok(()),
        }
    }
}

async fn open(
    t: &SshTarget,
    host: &str,
    dir: &Path,
    config: Option<&Path>,
) -> Result<Session, SshError> {
    let mut b = SessionBuilder::default();
    b.known_hosts_check(match t.host_key_check {
        HostKeyCheck::Strict => KnownHosts::Strict,
        HostKeyCheck::AcceptNew => KnownHosts::Add,
    })
    .control_directory(dir)
    .control_persist(ControlPersist::IdleFor(master_idle_exit()))
    // ssh takes whole seconds; zero would mean "no timeout".
    .connect_timeout(t.connect_timeout.max(Duration::from_secs(1)));
    let user_sets_keepalive = t
        .options
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("ServerAliveInterval"));
    if !user_sets_keepalive {
        b.server_alive_interval(SERVER_ALIVE_INTERVAL);
    }
    if let Some(u) = &t.user {
        b.user(u.clone());
    }
    if let Some(p) = t.port {
        b.port(p);
    }
    if let Some(k) = &t.identity {
        b.keyfile(k);
    }
    if let Some(j) = &t.jump {
        b.jump_hosts(j.split(','));
    }
    if let Some(k) = &t.known_hosts {
        b.user_known_hosts_file(k);
    }
    if let Some(c) = config {
        b.config_file(c);
    }
    b.connect(&t.destination)
        .await
        .map_err(|e| connect_error(t, host, e))
}

/// Where the control socket and generated config go: the temp directory, unless its path
/// has characters that ssh would split or expand where it pastes the config's path into the
/// jump host's command (`ProxyJump` runs `ssh -F <path>` through a shell).
fn control_base() -> PathBuf {
    let tmp = std::env::temp_dir();
    let plain = tmp.to_str().is_some_and(|s| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c))
    });
    if plain { tmp } else { PathBuf::from("/tmp") }
}

/// A failure through a jump host: the jump's own ssh has no stderr we can read, so ssh only
/// says the proxy closed. Connect to the first jump directly: its refusal (host key, key,
/// reach) is the real error; if it lets us in, the jump could not reach the target.
async fn which_hop_failed(t: &SshTarget, e: SshError) -> SshError {
    let Some(jump) = t.first_jump() else {
        return e;
    };
    if !matches!(e, SshError::Unreachable { .. } | SshError::Other { .. }) {
        return e;
    }
    match Box::pin(SshHost::connect(&jump)).await {
        Err(je) => je,
        Ok(h) => {
            let _ = h.close().await;
            match e {
                SshError::Unreachable { host, reason } => SshError::Unreachable {
                    reason: format!(
                        "{reason} (the jump host {} lets us in, but could not reach {host} or was not allowed to forward to it)",
                        jump.display()
                    ),
                    host,
                },
                other => other,
            }
        }
    }
}

fn connect_error(t: &SshTarget, host: &str, e: openssh::Error) -> SshError {
    match e {
        openssh::Error::Connect(io) => {
            error::classify(host, &t.known_hosts_display(), &io.to_string())
        }
        other => SshError::Other {
            host: host.to_string(),
            stderr: error_chain(&other),
        },
    }
}

/// `program` always in single quotes: openssh leaves words like `A=b` bare, and a bare
/// `A=b` in command position would be an assignment, not a program.
/// `host:port` as the far end of a forward (an IPv6 address in brackets, as ssh -L takes it).
fn tcp_socket(host: &str, port: u16) -> openssh::Socket<'static> {
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    openssh::Socket::TcpSocket {
        host: host.into(),
        port,
    }
}

fn quote(program: &str) -> String {
    format!("'{}'", program.replace('\'', r"'\''"))
}

fn command<'a>(s: &'a Session, argv: &[String]) -> openssh::OwningCommand<&'a Session> {
    let mut cmd = s.raw_command(quote(&argv[0]));
    cmd.args(&argv[1..]);
    cmd
}

fn owned_argv<S: AsRef<str>>(argv: &[S]) -> Result<Vec<String>, SshError> {
    if argv.is_empty() || argv[0].as_ref().is_empty() {
        return Err(SshError::InvalidArgument(
            "no program given to run on the host".into(),
        ));
    }
    Ok(argv.iter().map(|a| a.as_ref().to_string()).collect())
}

fn script_argv<S: AsRef<str>>(script: &str, args: &[S]) -> Vec<String> {
    ["sh", "-c", script, "sh"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().map(|a| a.as_ref().to_string()))
        .collect()
}

fn parse_master_pid(check_stderr: &str) -> Option<u32> {
    let rest = check_stderr.split("Master running (pid=").nth(1)?;
    rest.split(')').next()?.trim().parse().ok()
}

fn local(what: &str, source: std::io::Error) -> SshError {
    SshError::Local {
        what: what.to_string(),
        source,
    }
}

/// An error with its sources, since openssh's own messages are generic.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_pid_is_read_from_ssh_check() {
        assert_eq!(
            parse_master_pid("Master running (pid=4242)\r\n"),
            Some(4242)
        );
        assert_eq!(
            parse_master_pid("Control socket connect(x): No such file"),
            None
        );
    }

    #[test]
    fn programs_are_always_quoted() {
        assert_eq!(quote("A=b"), "'A=b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn scripts_take_their_inputs_as_positional_parameters() {
        assert_eq!(
            script_argv("echo \"$1\"", &["a b"]),
            ["sh", "-c", "echo \"$1\"", "sh", "a b"]
        );
        assert!(owned_argv::<&str>(&[]).is_err());
    }
}
