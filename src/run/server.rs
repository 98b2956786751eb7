//! A server for one group: launched locally or already running at a URL; readiness and
//! crash detection.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::engine::{self, CrashCause};
use crate::host::local::LocalProcess;
use crate::results::meta::ServerLaunch;
use crate::spec::types::{ArgValue, Engine, Server};

use super::Interrupt;
use super::remote::{RemoteHost, RemoteServer};

/// Grace period between SIGTERM and SIGKILL when stopping a server.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// A launched server process: on this machine, or on the SSH host.
pub enum Launched {
    Local(LocalProcess),
    Remote(RemoteServer),
}

/// A server the runner talks to.
pub struct ServerHandle {
    /// The URL this machine reaches it at (a forwarded port for SSH hosts).
    pub url: String,
    /// The URL on the SSH host itself (for the agent measuring there).
    pub host_url: Option<String>,
    launched: Option<Launched>,
    pub record: ServerLaunch,
    launched_at: Instant,
    log_path: PathBuf,
    /// Length of the log file when this launch started.
    log_start: u64,
}

/// Why a server could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot start the server: {0}")]
    Spawn(String),
    #[error(
        "the server exited before it was ready ({cause}): {hint}\n--- last lines of {log} ---\n{tail}"
    )]
    DiedAtStart {
        cause: String,
        hint: String,
        log: String,
        tail: String,
    },
    #[error(
        "the server was not ready after {timeout:?} (no 200 from /health); raise server.ready_timeout or read {log}\n--- last lines ---\n{tail}"
    )]
    NotReady {
        timeout: Duration,
        log: String,
        tail: String,
    },
    #[error("the server at {url} does not answer /health: {message}")]
    ExternalDown { url: String, message: String },
    #[error("interrupted while waiting for the server")]
    Interrupted,
}

impl ServerError {
    /// The crash class, when the server itself failed (for expectations and the report).
    pub fn cause_label(&self) -> Option<String> {
        match self {
            ServerError::DiedAtStart { cause, .. } => Some(cause.clone()),
            ServerError::NotReady { .. } => {
                Some(crate::catalog::Failure::ReadyTimeout.name().into())
            }
            _ => None,
        }
    }
}

/// Names whose values never land in results: API keys, tokens, passwords.
pub fn is_secret(name: &str) -> bool {
    // Word match, so `max-total-tokens` is not a secret but `HF_TOKEN` is; "token" only as the
    // last word (`token_capacity` counts tokens, `access_token` is one).
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(['-', '_', '.'])
        .filter(|w| !w.is_empty())
        .collect();
    words.last() == Some(&"token")
        || words.iter().any(|w| {
            matches!(
                *w,
                "key" | "apikey" | "secret" | "password" | "passwd" | "credential" | "credentials"
            )
        })
}

pub const REDACTED: &str = "<redacted>";

/// The API key the client must send, from `server.args.api-key` (SGLang's flag).
pub fn api_key(server: &Server) -> Option<String> {
    match server.args.get("api-key") {
        Some(ArgValue::Str(s)) => expand_env_ref(s).ok(),
        _ => None,
    }
}

/// A value written exactly as `${NAME}` is read from servebench's environment at launch, so
/// secrets can stay out of spec files (and so out of the run directory).
pub fn expand_env_ref(value: &str) -> Result<String, String> {
    match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
        Some(name) => std::env::var(name).map_err(|_| {
            format!(
                "environment variable {name} (referenced as ${{{name}}} in the spec) is not set"
            )
        }),
        None => Ok(value.to_string()),
    }
}

/// The server section with `${NAME}` references replaced by their values.
fn with_env_refs_expanded(server: &Server) -> Result<Server, String> {
    let mut s = server.clone();
    for v in s.args.values_mut() {
        if let ArgValue::Str(text) = v {
            *text = expand_env_ref(text)?;
        }
    }
    for v in s.env.values_mut() {
        *v = expand_env_ref(v)?;
    }
    Ok(s)
}

/// Literal secret values in a server section (for scrubbing copies of the spec).
pub fn literal_secrets(server: &Server) -> Vec<String> {
    let args = server.args.iter().filter_map(|(k, v)| match v {
        ArgValue::Str(s) if is_secret(k) => Some(s.clone()),
        _ => None,
    });
    let env = server
        .env
        .iter()
        .filter(|(k, _)| is_secret(k))
        .map(|(_, v)| v.clone());
    args.chain(env)
        .filter(|s| s.len() >= 4 && !s.starts_with("${"))
        .collect()
}

/// Replaces every literal secret in `text` with `<redacted>`.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_string(), |t, s| t.replace(s.as_str(), REDACTED))
}

/// The server section with secret values redacted (for resolved.yaml and meta.json).
pub fn redacted_server(server: &Server) -> Server {
    let mut s = server.clone();
    for (k, v) in s.args.iter_mut() {
        if is_secret(k) {
            *v = ArgValue::Str(REDACTED.into());
        }
    }
    for (k, v) in s.env.iter_mut() {
        if is_secret(k) {
            *v = REDACTED.into();
        }
    }
    s
}

fn redacted_args(server: &Server) -> indexmap::IndexMap<String, serde_json::Value> {
    server
        .args
        .iter()
        .map(|(k, v)| {
            let v = if is_secret(k) {
                serde_json::json!(REDACTED)
            } else {
                serde_json::to_value(v).unwrap_or_default()
            };
            (k.clone(), v)
        })
        .collect()
}

fn redacted_env(server: &Server) -> indexmap::IndexMap<String, String> {
    server
        .env
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if is_secret(k) {
                    REDACTED.to_string()
                } else {
                    v.clone()
                },
            )
        })
        .collect()
}

/// Redacts the values that follow secret flags in an argv.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for a in argv {
        if hide_next {
            out.push(REDACTED.to_string());
            hide_next = false;
            continue;
        }
        match a.strip_prefix("--").and_then(|f| f.split_once('=')) {
            Some((flag, _)) if is_secret(flag) => out.push(format!("--{flag}={REDACTED}")),
            _ => {
                hide_next = a.starts_with("--") && is_secret(a);
                out.push(a.clone());
            }
        }
    }
    out
}

impl ServerHandle {
    /// Starts the group's server (or checks the external one) and waits until it is ready.
    /// `remote` is the run's SSH host; None launches on this machine.
    pub async fn start(
        group: &str,
        server: &Server,
        log_path: &Path,
        interrupt: &Interrupt,
        remote: Option<&mut RemoteHost>,
    ) -> Result<ServerHandle, ServerError> {
        if let Some(url) = &server.url {
            let url = url.trim_end_matches('/').to_string();
            let client = Client::new(&url, api_key(server))
                .map_err(|e| ServerError::Spawn(e.to_string()))?;
            match client.health().await {
                Ok(200) => {}
                Ok(code) => {
                    return Err(ServerError::ExternalDown {
                        url,
                        message: format!("HTTP {code}"),
                    });
                }
                Err(e) => {
                    return Err(ServerError::ExternalDown {
                        url,
                        message: e.to_string(),
                    });
                }
            }
            let info = server_info(&client).await;
            return Ok(ServerHandle {
                url: url.clone(),
                host_url: None,
                launched: None,
                record: ServerLaunch {
                    group: group.to_string(),
                    engine: "external".into(),
                    url,
                    args: redacted_args(server),
                    env: redacted_env(server),
                    server_info: info,
                    outcome: Some("external: not started or stopped by servebench".into()),
                    ..Default::default()
                },
                launched_at: Instant::now(),
                log_path: log_path.to_path_buf(),
                log_start: 0,
            });
        }
        let effective = with_env_refs_expanded(server).map_err(ServerError::Spawn)?;
        let mut record = ServerLaunch {
            group: group.to_string(),
            engine: server.engine.to_string(),
            args: redacted_args(server),
            env: redacted_env(server),
            log_file: log_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned()),
            ..Default::default()
        };
        let log_start = std::fs::metadata(log_path).map(|m| m.len()).unwrap_or(0);
        // Ready time counts from the launch, before any SSH round trips.
        let launched_at = Instant::now();
        let mut handle = match remote {
            None => {
                let port = match server.port {
                    Some(p) => {
                        if crate::host::port_in_use(p) {
                            return Err(ServerError::Spawn(format!(
                                "port {p} is already in use on 127.0.0.1: stop what listens there, or omit server.port to pick a free one"
                            )));
                        }
                        p
                    }
                    None => {
                        crate::host::free_port().map_err(|e| ServerError::Spawn(e.to_string()))?
                    }
                };
                let self_exe =
                    std::env::current_exe().map_err(|e| ServerError::Spawn(e.to_string()))?;
                let cmd = engine::launch_command(&effective, &self_exe.to_string_lossy(), port)
                    .map_err(ServerError::Spawn)?;
                let process = LocalProcess::spawn_in(
                    &cmd,
                    &effective.env,
                    effective.workdir.as_deref(),
                    log_path,
                )
                .map_err(|e| ServerError::Spawn(e.to_string()))?;
                let url = format!("http://127.0.0.1:{port}");
                record.url = url.clone();
                record.command = Some(redact_argv(&cmd.argv()));
                record.pgid = Some(process.pgid());
                record.pid = Some(process.pgid());
                ServerHandle {
                    url,
                    host_url: None,
                    launched: Some(Launched::Local(process)),
                    record,
                    launched_at,
                    log_path: log_path.to_path_buf(),
                    log_start,
                }
            }
            Some(host) => {
                let port = match server.port {
                    Some(p) => {
                        if host.port_in_use(p).await.map_err(ServerError::Spawn)? {
                            return Err(ServerError::Spawn(format!(
                                "port {p} is already in use on {}: stop what listens there, or omit server.port to pick a free one",
                                host.ssh.name()
                            )));
                        }
                        p
                    }
                    None => host.free_port(30000).await.map_err(ServerError::Spawn)?,
                };
                let needs_binary = effective.engine == Engine::Sim && effective.launcher.is_none();
                let bin = if needs_binary {
                    host.binary().await.map_err(ServerError::Spawn)?
                } else {
                    "servebench".to_string()
                };
                let cmd =
                    engine::launch_command(&effective, &bin, port).map_err(ServerError::Spawn)?;
                let remote_log = format!("{}/server-{group}.log", host.dir);
                let pid_file = format!("{}/server-{group}.pid", host.dir);
                let process = host
                    .ssh
                    .spawn_detached(
                        &cmd.argv(),
                        &effective.env,
                        effective.workdir.as_deref(),
                        &remote_log,
                        &pid_file,
                    )
                    .await
                    .map_err(|e| ServerError::Spawn(e.to_string()))?;
                record.host = Some(host.ssh.name().to_string());
                record.command = Some(redact_argv(&cmd.argv()));
                record.pgid = Some(process.pgid);
                record.pid = Some(process.pid);
                record.remote_log = Some(remote_log);
                let remote =
                    RemoteServer::new(host.ssh.clone(), process, log_path.to_path_buf(), port);
                // Readiness and /server_info go through a forward; so does the measurement
                // with `client: local`.
                let forwarded = host.ssh.forward_local(port).await;
                let mut handle = ServerHandle {
                    url: String::new(),
                    host_url: Some(format!("http://127.0.0.1:{port}")),
                    launched: Some(Launched::Remote(remote)),
                    record,
                    launched_at,
                    log_path: log_path.to_path_buf(),
                    log_start,
                };
                match forwarded {
                    Ok(local_port) => handle.url = format!("http://127.0.0.1:{local_port}"),
                    Err(e) => {
                        handle.stop("the port forward failed").await;
                        return Err(ServerError::Spawn(format!(
                            "cannot forward a local port to port {port} on the host: {e}"
                        )));
                    }
                }
                handle.record.url = handle.host_url.clone().unwrap_or_default();
                handle
            }
        };
        handle.wait_ready(server, interrupt).await?;
        Ok(handle)
    }

    async fn wait_ready(
        &mut self,
        server: &Server,
        interrupt: &Interrupt,
    ) -> Result<(), ServerError> {
        let client = Client::new(&self.url, api_key(server))
            .map_err(|e| ServerError::Spawn(e.to_string()))?;
        let deadline = self.launched_at + server.ready_timeout;
        loop {
            if interrupt.is_set() {
                self.stop("interrupted before ready").await;
                return Err(ServerError::Interrupted);
            }
            if let Some(cause) = self.crashed().await {
                let log = self.log_display();
                let tail = self.log_tail(3000);
                self.record.outcome = Some(format!("crashed at start: {}", cause.label()));
                self.stop("crashed at start").await;
                return Err(ServerError::DiedAtStart {
                    cause: cause.label().into(),
                    hint: cause.explain().into(),
                    log,
                    tail,
                });
            }
            if let Ok(200) = client.health().await {
                break;
            }
            // SGLang's ready line counts too (e.g. when /health is slow to answer under a
            // proxy); it is printed after the warm-up generation, like /health's first 200.
            if self.logged_since_launch().contains(engine::READY_LINE) {
                break;
            }
            if Instant::now() > deadline {
                self.sync_log().await;
                let (log, tail) = (self.log_display(), self.log_tail(3000));
                self.stop("not ready in time").await;
                return Err(ServerError::NotReady {
                    timeout: server.ready_timeout,
                    log,
                    tail,
                });
            }
            tokio::time::sleep(self.poll_interval()).await;
        }
        self.record.ready_after_s = Some(self.launched_at.elapsed().as_secs_f64());
        self.record.server_info = server_info(&client).await;
        Ok(())
    }

    /// How often to look at the process: each look at a remote one is an SSH round trip.
    fn poll_interval(&self) -> Duration {
        match self.launched {
            Some(Launched::Remote(_)) => Duration::from_millis(300),
            _ => Duration::from_millis(50),
        }
    }

    /// The crash cause if the launched process has exited.
    pub async fn crashed(&mut self) -> Option<CrashCause> {
        match self.launched.as_mut()? {
            Launched::Local(p) => {
                p.exit_status()?;
            }
            Launched::Remote(r) => {
                // An SSH hiccup is not a crash; the next look decides.
                if r.alive().await.unwrap_or(true) {
                    return None;
                }
                r.sync_log().await;
            }
        }
        Some(engine::classify_crash(&self.log_tail(20_000)))
    }

    /// Like [`crashed`](Self::crashed), but gives a server that is going down up to `grace` to
    /// exit: when requests just failed on a broken connection, the process may still be
    /// writing its traceback.
    pub async fn crashed_within(&mut self, grace: Duration) -> Option<CrashCause> {
        let deadline = Instant::now() + grace;
        loop {
            if let Some(cause) = self.crashed().await {
                return Some(cause);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(self.poll_interval()).await;
        }
    }

    /// What this launch wrote to the log (the file is shared by a group's relaunches), at most
    /// its last 64 KiB.
    fn logged_since_launch(&self) -> String {
        let len = std::fs::metadata(&self.log_path)
            .map(|m| m.len())
            .unwrap_or(0);
        crate::host::file_tail(
            &self.log_path,
            len.saturating_sub(self.log_start).min(65_536),
        )
    }

    /// Pulls a remote server's log into the run directory now.
    pub async fn sync_log(&self) {
        if let Some(Launched::Remote(r)) = &self.launched {
            r.sync_log().await;
        }
    }

    /// The last bytes of the server's log in the run directory (mirrored for remote servers).
    pub fn log_tail(&self, bytes: u64) -> String {
        match &self.launched {
            Some(_) => crate::host::file_tail(&self.log_path, bytes),
            None => String::new(),
        }
    }

    fn log_display(&self) -> String {
        match &self.launched {
            Some(Launched::Remote(r)) => format!(
                "{} (on the host: {})",
                self.log_path.display(),
                r.process.log_path
            ),
            _ => self.log_path.display().to_string(),
        }
    }

    /// Stops a launched server's whole process group and records how it ended.
    pub async fn stop(&mut self, why: &str) {
        let Some(launched) = self.launched.take() else {
            return;
        };
        let (outcome, pgid, gone) = match launched {
            Launched::Local(mut p) => {
                let outcome = p.stop(STOP_GRACE).to_string();
                let gone = !crate::host::local::group_alive(p.pgid());
                (outcome, p.pgid(), gone)
            }
            Launched::Remote(mut r) => {
                let (outcome, gone) = r.stop(STOP_GRACE).await;
                (outcome, r.process.pgid, gone)
            }
        };
        let note = format!(
            "{why}: {outcome}; process group {pgid} {}",
            if gone {
                "confirmed gone"
            } else {
                "STILL ALIVE"
            }
        );
        self.record.stopped = gone;
        self.record.outcome = Some(match self.record.outcome.take() {
            Some(prev) => format!("{prev}; {note}"),
            None => note,
        });
    }
}

/// `/server_info`, or the older `/get_server_info`, with secret-named fields redacted (SGLang
/// lists every server argument there, `api_key` included).
async fn server_info(client: &Client) -> Option<serde_json::Value> {
    for path in ["/server_info", "/get_server_info"] {
        if let Ok(mut v) = client.get_json(path).await {
            redact_json(&mut v);
            return Some(v);
        }
    }
    None
}

/// Replaces the values of secret-named keys, at any depth.
pub fn redact_json(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if is_secret(k) && !child.is_null() {
                    *child = serde_json::json!(REDACTED);
                } else {
                    redact_json(child);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact_json),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_from_argv() {
        let argv: Vec<String> = [
            "python",
            "--api-key",
            "sk-123",
            "--hf-token=abc",
            "--tp",
            "8",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let r = redact_argv(&argv);
        assert_eq!(
            r,
            [
                "python",
                "--api-key",
                REDACTED,
                "--hf-token=<redacted>",
                "--tp",
                "8"
            ]
        );
        assert!(!r.join(" ").contains("sk-123"));
    }

    #[test]
    fn env_refs_expand_and_secrets_scrub() {
        assert_eq!(expand_env_ref("plain").unwrap(), "plain");
        assert_eq!(
            expand_env_ref("${PATH}").unwrap(),
            std::env::var("PATH").unwrap()
        );
        assert!(
            expand_env_ref("${SERVEBENCH_NO_SUCH_VAR}")
                .unwrap_err()
                .contains("SERVEBENCH_NO_SUCH_VAR")
        );
        let server: Server = serde_saphyr::from_str(
            "model: m\nargs: { api-key: sk-abc123 }\nenv: { HF_TOKEN: '${HF}' }\n",
        )
        .unwrap();
        let secrets = literal_secrets(&server);
        assert_eq!(secrets, vec!["sk-abc123".to_string()]);
        assert_eq!(
            scrub("api-key: sk-abc123\n", &secrets),
            "api-key: <redacted>\n"
        );
        let r = redacted_server(&server);
        assert_eq!(r.args["api-key"], ArgValue::Str(REDACTED.into()));
    }

    #[test]
    fn server_info_secrets_are_redacted_at_any_depth() {
        let mut v = serde_json::json!({"api_key": "sk-1", "tp_size": 8, "max_total_num_tokens": 5,
            "internal_states": [{"hf_token": "x", "ssl_keyfile": null}]});
        redact_json(&mut v);
        assert_eq!(v["api_key"], REDACTED);
        assert_eq!(v["internal_states"][0]["hf_token"], REDACTED);
        assert_eq!(v["max_total_num_tokens"], 5);
        assert_eq!(v["tp_size"], 8);
    }

    #[test]
    fn secret_names() {
        assert!(is_secret("HF_TOKEN"));
        assert!(is_secret("api-key"));
        assert!(is_secret("OPENAI_API_KEY"));
        assert!(!is_secret("PYTORCH_CUDA_ALLOC_CONF"));
        assert!(!is_secret("tp-size"));
        assert!(!is_secret("max-total-tokens"));
        assert!(!is_secret("token_capacity"));
        assert!(is_secret("access_token"));
        assert!(!is_secret("--speculative-num-draft-tokens"));
    }
}
