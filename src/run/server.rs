//! A server for one group: attached (already running at a URL) or launched on a [`Host`];
//! readiness, crash detection and the record of how it ended.

pub(crate) mod deployment;
mod liveness;
pub(crate) mod model_facts;
mod process_group;
pub(crate) mod ranks;
pub(crate) mod routing;
mod server_error;
pub(crate) mod traces;
pub(crate) mod watch;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::engine::{self, CrashCause};
use crate::host::{Host, HostError, ServerProcess, Spawn};
use servebench_model::results::meta::ServerLaunch;
use servebench_model::secrets::{self, api_key};
use servebench_model::spec::types::{Engine, Server};

use super::interrupt::Interrupt;
pub(crate) use server_error::{STOP_GRACE, ServerError};

/// Why a server servebench did not start no longer answers.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotAnswering {
    #[error("/health answered HTTP {0}")]
    Status(u16),
    #[error(transparent)]
    Client(crate::client::ClientError),
}

/// A server the runner talks to.
pub(crate) struct ServerHandle {
    /// The URL this machine reaches it at (a forwarded port for SSH hosts).
    pub url: String,
    /// The URL on the SSH host itself (for the agent measuring there).
    pub host_url: Option<String>,
    /// None for an attached server: servebench neither started it nor stops it.
    process: Option<Box<dyn ServerProcess>>,
    pub record: ServerLaunch,
    launched_at: Instant,
    log_path: PathBuf,
    /// Length of the log file when this launch started.
    log_start: u64,
    /// The engine whose log lines classify a crash.
    pub engine: Engine,
    /// The signal that ended the launched server, once it has exited by one.
    pub killed_by: Option<i32>,
    /// The workers behind a router: a launched deployment's, or an attached router's
    /// `server.workers`; each one's `/metrics` is scraped around every round.
    pub workers: Vec<deployment::WorkerTarget>,
    /// A launched deployment's router's Prometheus listener, as this machine reaches it
    /// (None when this is not one, or its router runs on another host).
    pub router_metrics: Option<String>,
}

impl ServerHandle {
    /// Like [`start`](Self::start) on `hosts`: rank `i` of a multi-node server
    /// (`server.nodes`) runs on `hosts[i]`; a single-node server on `hosts[0]`.
    pub(crate) async fn start_on(
        group: &str,
        server: &Server,
        log_path: &Path,
        interrupt: &Interrupt,
        hosts: &[&dyn Host],
    ) -> Result<ServerHandle, ServerError> {
        match &server.url {
            Some(url) => Self::attach(group, server, url, log_path).await,
            None => Self::launch(group, server, log_path, interrupt, hosts).await,
        }
    }

    /// A server servebench did not start: checked with `/health`, described by `/server_info`.
    async fn attach(
        group: &str,
        server: &Server,
        url: &str,
        log_path: &Path,
    ) -> Result<ServerHandle, ServerError> {
        let url = url.trim_end_matches('/').to_string();
        let client =
            Client::new(&url, api_key(server)).map_err(|e| ServerError::Config(e.to_string()))?;
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
        let surface = crate::client::surface::probe(&client).await;
        let notes = model_notes(server, &surface);
        Ok(ServerHandle {
            url: url.clone(),
            host_url: None,
            process: None,
            record: ServerLaunch {
                group: group.to_string(),
                // The engine the spec says it is, when it says one.
                engine: if server.engine == Engine::Sim {
                    "external".into()
                } else {
                    format!("{} (external)", server.engine)
                },
                url,
                args: secrets::redacted_args(server),
                env: secrets::redacted_env(server),
                server_info: info,
                surface: Some(surface),
                notes,
                outcome: Some("external: not started or stopped by servebench".into()),
                ..Default::default()
            },
            launched_at: Instant::now(),
            log_path: log_path.to_path_buf(),
            log_start: 0,
            engine: server.engine,
            killed_by: None,
            workers: server
                .workers
                .iter()
                .map(|w| deployment::WorkerTarget::listed(w))
                .collect(),
            router_metrics: None,
        })
    }

    /// Launches the engine's command on `host` and waits until it is ready.
    async fn launch(
        group: &str,
        server: &Server,
        log_path: &Path,
        interrupt: &Interrupt,
        hosts: &[&dyn Host],
    ) -> Result<ServerHandle, ServerError> {
        let effective = secrets::with_env_refs_expanded(server)
            .map_err(|e| ServerError::Config(e.to_string()))?;
        let log_start = std::fs::metadata(log_path).map(|m| m.len()).unwrap_or(0);
        // Ready time counts from the launch, before any SSH round trips.
        let launched_at = Instant::now();
        // A Slurm cluster's allocation comes first: ports are picked on its nodes.
        for host in hosts.iter().take(effective.node_count().max(1) as usize) {
            match host.prepare(group).await {
                Ok(()) => {}
                Err(HostError::Interrupted) => return Err(ServerError::Interrupted),
                Err(e) => return Err(e.into()),
            }
        }
        let mut workers = Vec::new();
        let mut router_metrics = None;
        let (process, argv, port, ranks) = if let Some(dep) = &effective.deployment {
            let d = deployment::spawn_deployment(
                group,
                &effective,
                dep,
                hosts,
                log_path,
                interrupt,
                launched_at + server.ready_timeout,
            )
            .await?;
            workers = d.workers;
            // Its listener is on the router's loopback: reached from here when that is here.
            router_metrics = hosts[0]
                .is_local()
                .then(|| format!("http://127.0.0.1:{}", d.prometheus_port));
            (d.process, d.command, d.port, d.records)
        } else if effective.node_count() > 1 {
            let r = ranks::spawn_ranks(group, &effective, hosts, log_path).await?;
            (r.process, r.command, r.port, r.records)
        } else {
            let host = hosts[0];
            let port = host.pick_port(server.port).await?;
            let bin = process_group::servebench_on(host, &effective).await?;
            let cmd = engine::launch_command(&effective, &bin, port)?;
            let process = match host
                .spawn(Spawn {
                    group,
                    command: &cmd,
                    env: &effective.env,
                    workdir: effective.workdir.as_deref(),
                    log_path,
                    port,
                    bind: "127.0.0.1",
                    shared: false,
                })
                .await
            {
                Ok(p) => p,
                Err(HostError::Interrupted) => return Err(ServerError::Interrupted),
                Err(e) => return Err(e.into()),
            };
            (process, secrets::redact_argv(&cmd.argv()), port, Vec::new())
        };
        // A Slurm job's time in the queue is not the server's start-up: its ready time (and
        // ready_timeout) count from the step's launch; the queue time is on the job's record.
        let launched_at = if process.slurm_job().is_some() {
            Instant::now()
        } else {
            launched_at
        };
        let mut handle = ServerHandle {
            url: process.url().to_string(),
            host_url: process.host_url().map(str::to_string),
            record: ServerLaunch {
                group: group.to_string(),
                engine: if server.simulate && server.engine != Engine::Sim {
                    format!("{} (simulated)", server.engine)
                } else {
                    server.engine.to_string()
                },
                url: process.host_url().unwrap_or(process.url()).to_string(),
                through_forward: process.through_forward(),
                command: Some(argv),
                ranks,
                // The flags this engine got: `args` with its `engine_args` merged over them.
                args: secrets::redacted_args(&Server {
                    args: engine::effective_args(server),
                    ..server.clone()
                }),
                env: secrets::redacted_env(server),
                log_file: log_path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned()),
                process: process.ids(),
                port: Some(port),
                slurm: process.slurm_job(),
                ..Default::default()
            },
            process: Some(process),
            launched_at,
            log_path: log_path.to_path_buf(),
            log_start,
            engine: server.engine,
            killed_by: None,
            workers,
            router_metrics,
        };
        let probe = liveness::health_probe(&handle.url, api_key(server));
        if let Some(process) = handle.process.as_mut() {
            process.watch_liveness(probe);
        }
        handle.wait_ready(server, interrupt).await?;
        Ok(handle)
    }

    async fn wait_ready(
        &mut self,
        server: &Server,
        interrupt: &Interrupt,
    ) -> Result<(), ServerError> {
        let client = Client::new(&self.url, api_key(server))
            .map_err(|e| ServerError::Config(e.to_string()))?;
        let deadline = self.launched_at + server.ready_timeout;
        loop {
            if interrupt.is_set() {
                self.stop("interrupted before ready").await;
                return Err(ServerError::Interrupted);
            }
            if let Some(cause) = self.crashed().await {
                let log = self.log_display();
                let tail = self.log_tail(3000);
                // Named before the stop, which lets the process go.
                let origin = self.crash_origin();
                self.record.outcome = Some(format!("crashed at start: {}", cause.label()));
                self.stop("crashed at start").await;
                let hint = match origin.as_deref() {
                    // A deployment's router that could not even be imported.
                    Some(o) if o.starts_with("router,") && tail.contains("No module named 'sglang_router'") => {
                        "the router is not installed for that python: `pip install sglang-router`, or set server.deployment.router.launcher to a python that has it".to_string()
                    }
                    _ => engine::explain(self.engine, cause).to_string(),
                };
                return Err(ServerError::DiedAtStart {
                    cause: cause.label().into(),
                    hint: match origin {
                        Some(origin) => format!("{origin}: {hint}"),
                        None => hint,
                    },
                    log,
                    tail,
                });
            }
            // Readiness is an answered health request. A ready line is a hint, never the proof:
            // engines print theirs around the moment the socket listens (uvicorn's "Application
            // startup complete." comes before it), so a line seen while the port refuses
            // connections or /health says 503 (starting) is not ready. A server that has no
            // /health (`engine: command`, 404) is ready once it answered and printed its line.
            let health = client.health().await;
            // A router answers /health before it has registered its workers.
            let listed = match health {
                Ok(200) if server.deployment.is_some() => {
                    deployment::router_lists_workers(&client, self.workers.len()).await
                }
                _ => Ok(true),
            };
            let listed = match listed {
                Ok(l) => l,
                Err(why) => {
                    self.record.outcome = Some("refused servebench at start".into());
                    self.stop("refused servebench at start").await;
                    return Err(ServerError::Config(why.to_string()));
                }
            };
            if let Ok(200) = health
                && listed
            {
                break;
            }
            if matches!(health, Ok(code) if code != 503)
                && engine::is_ready_line(server, &self.logged_since_launch())
            {
                break;
            }
            if Instant::now() > deadline {
                self.sync_log().await;
                let (log, tail) = (self.log_display(), self.log_tail(3000));
                self.stop("not ready in time").await;
                return Err(ServerError::NotReady {
                    timeout: server.ready_timeout,
                    log: match (&server.deployment, health) {
                        (Some(_), Ok(200)) => {
                            format!(
                                "{log} (the router answers but does not list every worker healthy at /workers)"
                            )
                        }
                        _ => log,
                    },
                    tail,
                });
            }
            tokio::time::sleep(self.poll_interval()).await;
        }
        self.record.ready_after_s = Some(self.launched_at.elapsed().as_secs_f64());
        self.record.server_info = server_info(&client).await;
        let surface = crate::client::surface::probe(&client).await;
        self.record.notes = model_notes(server, &surface);
        self.record.surface = Some(surface);
        Ok(())
    }

    fn poll_interval(&self) -> Duration {
        self.process
            .as_ref()
            .map_or(Duration::from_millis(50), |p| p.poll_interval())
    }

    /// The crash cause if the launched process has exited.
    pub(crate) async fn crashed(&mut self) -> Option<CrashCause> {
        let process = self.process.as_mut()?;
        if !process.exited().await {
            return None;
        }
        // The host's own reason (Slurm's time limit, ...) before the engine's log lines.
        let host_cause = process.host_failure().await;
        if let Some(job) = process.slurm_job() {
            self.record.slurm = Some(job);
        }
        self.killed_by = process.exit_signal();
        let cause =
            host_cause.unwrap_or_else(|| engine::classify(self.engine, &self.log_tail(20_000)));
        // A signal the log does not explain is still a cause: it is named, not "unknown".
        Some(match (cause, self.killed_by) {
            (CrashCause::Unknown, Some(_)) => CrashCause::Killed,
            (cause, _) => cause,
        })
    }

    /// How the launched server's process ended, when a signal ended it: `by SIGKILL (signal
    /// 9)`.
    pub(crate) fn exit_note(&self) -> Option<String> {
        let n = self.killed_by?;
        let name = nix::sys::signal::Signal::try_from(n)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| "a signal".into());
        Some(format!("by {name} (signal {n})"))
    }

    /// A launched deployment: its router's log (the run directory's copy), where this
    /// launch's lines begin (the router names each request's worker there), and how late a
    /// line may reach that copy.
    pub(crate) fn router_log(&self) -> Option<routing::RouterLog> {
        let p = self.process.as_ref()?;
        (!self.workers.is_empty())
            .then(|| routing::RouterLog {
                path: Some(self.log_path.clone()),
                from: self.log_start,
                lag: p.log_lag(),
            })
            .filter(|_| p.failed_rank().is_none())
    }

    /// For a server servebench did not start: Err with why when it does not answer `/health`
    /// (after a point whose requests could not connect, it may be gone).
    pub(crate) async fn answers(&self, server: &Server) -> Result<(), NotAnswering> {
        if self.process.is_some() {
            return Ok(());
        }
        let client = Client::new(&self.url, api_key(server)).map_err(NotAnswering::Client)?;
        match client.health().await {
            Ok(200) => Ok(()),
            Ok(code) => Err(NotAnswering::Status(code)),
            Err(e) => Err(NotAnswering::Client(e)),
        }
    }

    /// For a multi-node server that exited: which rank failed, where (`rank 1 of 2 on
    /// bench@gpu-b, log server-g1.rank1.log`).
    pub(crate) fn crash_origin(&self) -> Option<String> {
        self.process.as_ref()?.failed_rank().map(|r| r.to_string())
    }

    /// Like [`crashed`](Self::crashed), but gives a server that is going down up to `grace` to
    /// exit: when requests just failed on a broken connection, the process may still be
    /// writing its traceback.
    pub(crate) async fn crashed_within(&mut self, grace: Duration) -> Option<CrashCause> {
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
    pub(crate) async fn sync_log(&self) {
        if let Some(p) = &self.process {
            p.sync_log().await;
        }
    }

    /// The last bytes of the server's log in the run directory (mirrored for remote servers).
    pub(crate) fn log_tail(&self, bytes: u64) -> String {
        match &self.process {
            // A multi-node server's cause is in the log of the rank that failed.
            Some(p) => match p.failed_rank() {
                Some(r) => crate::host::file_tail(&r.log_path, bytes),
                None => crate::host::file_tail(&self.log_path, bytes),
            },
            None => String::new(),
        }
    }

    fn log_display(&self) -> String {
        match &self.process {
            Some(p) => p.log_display(),
            None => self.log_path.display().to_string(),
        }
    }

    /// Stops a launched server's whole process group and records how it ended.
    pub(crate) async fn stop(&mut self, why: &str) {
        let Some(mut process) = self.process.take() else {
            return;
        };
        let stopped = process.stop(STOP_GRACE).await;
        if let Some(job) = process.slurm_job() {
            self.record.slurm = Some(job);
        }
        let note = format!(
            "{why}: {}; process group {} {}",
            stopped.outcome,
            stopped.pgid,
            if stopped.gone {
                "confirmed gone"
            } else {
                "STILL ALIVE"
            }
        );
        self.record.stopped = stopped.gone;
        for r in &mut self.record.ranks {
            r.stopped = stopped.gone;
        }
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
            secrets::redact_json(&mut v);
            return Some(v);
        }
    }
    None
}

/// A note when the server serves a model other than the spec's (a `url:` server that is not
/// what the spec says, or a launcher that ignores the model flag).
fn model_notes(
    server: &Server,
    surface: &servebench_model::results::meta::ServerSurface,
) -> Vec<String> {
    let Some(want) = &server.model else {
        return Vec::new();
    };
    // The names the spec itself gives the model: SGLang's and vLLM's --served-model-name
    // (vLLM's may list several), llama.cpp's -a/--alias (comma-separated).
    let args = engine::effective_args(server);
    let given: Vec<&str> = ["served-model-name", "alias", "-a"]
        .iter()
        .filter_map(|k| match args.get(*k) {
            Some(servebench_model::spec::types::ArgValue::Str(n)) => Some(n.as_str()),
            _ => None,
        })
        .flat_map(|n| n.split([',', ' ']).map(str::trim).filter(|x| !x.is_empty()))
        .collect();
    let matches = |m: &str| {
        m == want || given.contains(&m) || m.rsplit('/').next() == want.rsplit('/').next()
    };
    if surface.models.is_empty() || surface.models.iter().any(|m| matches(m)) {
        return Vec::new();
    }
    vec![format!(
        "the server serves {}, not the spec's model {want}: the numbers are that model's",
        surface.models.join(", ")
    )]
}
