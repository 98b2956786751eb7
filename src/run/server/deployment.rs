//! A routed deployment (`server.deployment`) as one [`ServerProcess`]: N workers of the
//! group's engine started first (each ready on `/health`), then SGLang's router
//! (`sglang-router`) in front of them; watched together (any process's exit is the
//! deployment's, named by the process that went), and stopped together, router first. The
//! router serves what servebench measures and logs to the group's log (`server-g1.log`);
//! each worker logs to its own (`server-g1.worker0.log`, `server-g1.prefill0.log`, ...).
//!
//! The router runs with `--log-level debug`: its "Sending request url=WORKER" line, inside a
//! span that carries the request's `x-request-id`, is what names the worker of each request
//! ([`super::routing`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::catalog::Failure;
use crate::client::Client;
use crate::engine::deployment::{router_command, worker_server};
use crate::engine::{self};
use crate::host::{FailedRank, Host, HostError, ProcessIds, ServerProcess, Spawn, Stopped};
use crate::results::meta::RankLaunch;
use crate::secrets;
use crate::spec::deployment::{Deployment, WorkerRole};
use crate::spec::types::{Engine, Server};

use super::server_error::{STOP_GRACE, ServerError};
use crate::run::interrupt::Interrupt;

/// A worker of a launched deployment, as the measuring side reaches it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct WorkerTarget {
    /// `worker0`, `prefill0`, `decode1`; for `server.workers` of an attached router, its URL.
    pub name: String,
    /// `regular`, `prefill`, `decode`; None for `server.workers` (not known).
    pub role: Option<String>,
    /// Its URL from where servebench runs (a forwarded port for an SSH host).
    pub url: String,
    /// Its URL as the router reaches it: what the router was given, and names it in its log.
    pub url_on_host: String,
    /// A deployment spread over several hosts: the host it runs on.
    pub host: Option<String>,
}

impl WorkerTarget {
    /// A worker of `server.workers` (an attached router's), known by its URL alone.
    pub(crate) fn listed(url: &str) -> WorkerTarget {
        WorkerTarget {
            name: url.to_string(),
            role: None,
            url: url.to_string(),
            url_on_host: url.to_string(),
            host: None,
        }
    }
}

/// One launched process of the deployment.
struct Member {
    name: String,
    host: String,
    process: Box<dyn ServerProcess>,
    log_path: PathBuf,
}

/// The router and its workers, router first.
pub(crate) struct DeploymentProcess {
    members: Vec<Member>,
    /// Members seen exited, in the order they were seen.
    exited: Vec<usize>,
}

/// What a deployment's launch produced.
pub(crate) struct LaunchedDeployment {
    pub process: Box<dyn ServerProcess>,
    /// The router's command (the launch's own record) and port.
    pub command: Vec<String>,
    pub port: u16,
    /// The workers, for meta.json and `servebench down`.
    pub records: Vec<RankLaunch>,
    pub workers: Vec<WorkerTarget>,
}

/// The log of the deployment's `name` beside the group's `log`: `server-g1.decode1.log`.
pub(crate) fn member_log_path(log: &Path, name: &str) -> PathBuf {
    let stem = log
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "server".into());
    log.with_file_name(format!("{stem}.{name}.log"))
}

/// A port on `host` none of `taken` holds (picked ports are free, not reserved: two picks in
/// a row may give the same one).
async fn distinct_port(
    host: &dyn Host,
    wanted: Option<u16>,
    taken: &mut Vec<u16>,
) -> Result<u16, ServerError> {
    for _ in 0..20 {
        let p = host.pick_port(wanted).await?;
        if !taken.contains(&p) {
            taken.push(p);
            return Ok(p);
        }
        if wanted.is_some() {
            break;
        }
    }
    Err(ServerError::Config(
        "no distinct free port for every process of the deployment".into(),
    ))
}

/// Where one node of the deployment runs its processes, and what is taken there.
struct Node<'h> {
    host: &'h dyn Host,
    /// The servebench binary there (for simulated workers).
    bin: String,
    /// What its workers listen on: 127.0.0.1 beside the router, the host's address elsewhere.
    bind: String,
    taken: Vec<u16>,
}

/// Starts the deployment of `server` (secrets expanded) over `hosts` (its node `i` on
/// `hosts[i]`, the router on the first): every worker, each ready on `/health`, then the
/// router. A process that cannot be started, or a worker that dies or is not ready in time,
/// stops the ones already started.
pub(crate) async fn spawn_deployment(
    group: &str,
    server: &Server,
    dep: &Deployment,
    hosts: &[&dyn Host],
    log_path: &Path,
    interrupt: &Interrupt,
    deadline: Instant,
) -> Result<LaunchedDeployment, ServerError> {
    let count = dep.node_count() as usize;
    if hosts.len() < count {
        return Err(ServerError::Config(format!(
            "server.deployment.nodes is {count} but only {} host(s) are free for it: list at least {count} hosts in `hosts:`",
            hosts.len()
        )));
    }
    let simulated = server.engine == Engine::Sim || server.simulate;
    let mut nodes = Vec::with_capacity(count);
    for (i, host) in hosts.iter().take(count).enumerate() {
        nodes.push(Node {
            host: *host,
            bin: if simulated && server.launcher.is_none() {
                host.servebench_binary().await?
            } else {
                "servebench".to_string()
            },
            bind: if i == 0 {
                "127.0.0.1".into()
            } else {
                host.address()
            },
            taken: Vec::new(),
        });
    }
    let plans = dep.plan();
    let mut members: Vec<Member> = Vec::new();
    let mut records = Vec::new();
    let mut targets = Vec::new();
    let mut for_router = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        let name = plan.name();
        let node = &mut nodes[dep.node_of(i)];
        let host = node.host;
        let started = async {
            let port = distinct_port(host, None, &mut node.taken).await?;
            let bootstrap = match plan.role {
                WorkerRole::Prefill => Some(distinct_port(host, None, &mut node.taken).await?),
                _ => None,
            };
            let ws = worker_server(server, plan, bootstrap);
            let cmd = engine::launch_command_on(&ws, &node.bin, &node.bind, port)?;
            let log = member_log_path(log_path, &name);
            let process = host
                .spawn(Spawn {
                    group: &format!("{group}.{name}"),
                    command: &cmd,
                    env: &server.env,
                    workdir: server.workdir.as_deref(),
                    log_path: &log,
                    port,
                    bind: &node.bind,
                    shared: true,
                })
                .await
                .map_err(|e| match e {
                    HostError::Interrupted => ServerError::Interrupted,
                    e => ServerError::Spawn(HostError::Unsupported(format!(
                        "{name} of the deployment on {}: {e}",
                        host.name()
                    ))),
                })?;
            Ok::<_, ServerError>((port, bootstrap, cmd, log, process))
        }
        .await;
        let (port, bootstrap, cmd, log, process) = match started {
            Ok(s) => s,
            Err(e) => {
                stop_members(&mut members, STOP_GRACE).await;
                return Err(e);
            }
        };
        let ids = process.ids();
        // As the router reaches it, from the first node.
        let url_on_host = format!(
            "http://{}:{port}",
            crate::host::remote::url_host(&node.bind)
        );
        targets.push(WorkerTarget {
            name: name.clone(),
            role: Some(plan.role.to_string()),
            url: process.url().to_string(),
            url_on_host: url_on_host.clone(),
            host: (count > 1).then(|| host.name()),
        });
        for_router.push((plan.role, url_on_host.clone(), bootstrap));
        records.push(RankLaunch {
            rank: i as u32 + 1,
            name: Some(name.clone()),
            role: Some(plan.role.to_string()),
            url: Some(url_on_host),
            bootstrap_port: bootstrap,
            host: ids.host.clone(),
            command: Some(secrets::redact_argv(&cmd.argv())),
            pgid: Some(ids.pgid),
            pid: Some(ids.pid),
            leader_start: ids.leader_start,
            boot_id: ids.boot_id.clone(),
            port: Some(port),
            log_file: log.file_name().map(|n| n.to_string_lossy().into_owned()),
            remote_log: ids.remote_log.clone(),
            stopped: false,
        });
        members.push(Member {
            name,
            host: host.name(),
            process,
            log_path: log,
        });
    }
    if let Err(e) = workers_ready(server, &mut members, &targets, interrupt, deadline).await {
        stop_members(&mut members, STOP_GRACE).await;
        return Err(e);
    }
    let first = &mut nodes[0];
    let host = first.host;
    let started = async {
        let port = distinct_port(host, dep.router.port, &mut first.taken).await?;
        let prometheus = distinct_port(host, None, &mut first.taken).await?;
        let cmd = router_command(dep, port, prometheus, &for_router)?;
        let process = host
            .spawn(Spawn {
                group,
                command: &cmd,
                env: &dep.router.env,
                workdir: server.workdir.as_deref(),
                log_path,
                port,
                bind: "127.0.0.1",
                shared: true,
            })
            .await
            .map_err(|e| match e {
                HostError::Interrupted => ServerError::Interrupted,
                e => ServerError::Spawn(HostError::Unsupported(format!(
                    "the router on {}: {e}",
                    host.name()
                ))),
            })?;
        Ok::<_, ServerError>((port, cmd, process))
    }
    .await;
    let (port, cmd, router) = match started {
        Ok(s) => s,
        Err(e) => {
            stop_members(&mut members, STOP_GRACE).await;
            return Err(e);
        }
    };
    members.insert(
        0,
        Member {
            name: "router".into(),
            host: host.name(),
            process: router,
            log_path: log_path.to_path_buf(),
        },
    );
    Ok(LaunchedDeployment {
        process: Box::new(DeploymentProcess {
            members,
            exited: Vec::new(),
        }),
        command: secrets::redact_argv(&cmd.argv()),
        port,
        records,
        workers: targets,
    })
}

/// Waits until every worker answers `/health` 200: a worker that exits first is named with
/// its log's cause; the deadline is the group's `ready_timeout`.
async fn workers_ready(
    server: &Server,
    members: &mut [Member],
    targets: &[WorkerTarget],
    interrupt: &Interrupt,
    deadline: Instant,
) -> Result<(), ServerError> {
    let clients = targets
        .iter()
        .map(|t| Client::new(&t.url, secrets::api_key(server)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ServerError::Config(e.to_string()))?;
    let mut ready = vec![false; members.len()];
    loop {
        if interrupt.is_set() {
            return Err(ServerError::Interrupted);
        }
        for (i, m) in members.iter_mut().enumerate() {
            if ready[i] {
                continue;
            }
            if m.process.exited().await {
                m.process.sync_log().await;
                let tail = crate::host::file_tail(&m.log_path, 3000);
                let cause =
                    engine::classify(server.engine, &crate::host::file_tail(&m.log_path, 20_000));
                return Err(ServerError::DiedAtStart {
                    cause: cause.label().into(),
                    hint: format!(
                        "{} of the deployment: {}",
                        m.name,
                        engine::explain(server.engine, cause)
                    ),
                    log: m.process.log_display(),
                    tail,
                });
            }
            ready[i] = matches!(clients[i].health().await, Ok(200));
        }
        if ready.iter().all(|r| *r) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let late: Vec<&str> = members
                .iter()
                .zip(&ready)
                .filter(|(_, r)| !**r)
                .map(|(m, _)| m.name.as_str())
                .collect();
            let first = members
                .iter()
                .zip(&ready)
                .find(|(_, r)| !**r)
                .map(|(m, _)| m);
            if let Some(m) = first {
                m.process.sync_log().await;
            }
            return Err(ServerError::NotReady {
                timeout: server.ready_timeout,
                log: format!(
                    "{} (not ready: {})",
                    first.map_or_else(String::new, |m| m.process.log_display()),
                    late.join(", ")
                ),
                tail: first.map_or_else(String::new, |m| crate::host::file_tail(&m.log_path, 3000)),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Ok(true) once the router lists `want` workers, every one healthy (`GET /workers`; it
/// answers `/health` before its background job has registered them). Err(why) when it refuses
/// servebench (HTTP 401 or 403: a key servebench does not send), which waiting cannot change.
pub(crate) async fn router_lists_workers(client: &Client, want: usize) -> Result<bool, String> {
    let v = match client.get_json("/workers").await {
        Ok(v) => v,
        Err(crate::client::ClientError::Status {
            status: status @ (401 | 403),
            message,
            ..
        }) => {
            return Err(format!(
                "the router refused servebench's GET /workers with HTTP {status}{}: it wants a key; give it as `server.args.api-key` (sent as a bearer token) or leave the router's own `api-key` out",
                if message.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", crate::text::truncate(&message, 200))
                }
            ));
        }
        Err(_) => return Ok(false),
    };
    Ok(router_lists(&v, want))
}

/// Whether a router's `/workers` answer `v` lists `want` workers, every one healthy.
fn router_lists(v: &serde_json::Value, want: usize) -> bool {
    let Some(listed) = v.get("workers").and_then(|w| w.as_array()) else {
        return false;
    };
    listed.len() == want
        && listed
            .iter()
            .all(|w| w.get("is_healthy").and_then(|h| h.as_bool()) == Some(true))
}

async fn stop_members(members: &mut [Member], grace: Duration) -> Vec<Stopped> {
    futures_util::future::join_all(members.iter_mut().map(|m| m.process.stop(grace))).await
}

impl DeploymentProcess {
    fn first_failed(&self) -> Option<(usize, &Member)> {
        self.exited.first().map(|&i| (i, &self.members[i]))
    }
}

impl ServerProcess for DeploymentProcess {
    fn url(&self) -> &str {
        self.members[0].process.url()
    }

    fn host_url(&self) -> Option<&str> {
        self.members[0].process.host_url()
    }

    fn ids(&self) -> ProcessIds {
        self.members[0].process.ids()
    }

    fn exited(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            for i in 0..self.members.len() {
                if !self.exited.contains(&i) && self.members[i].process.exited().await {
                    self.exited.push(i);
                }
            }
            if !self.exited.is_empty() {
                self.sync_log().await;
            }
            !self.exited.is_empty()
        })
    }

    fn sync_log(&self) -> BoxFuture<'_, ()> {
        super::process_group::sync_all(self.members.iter().map(|m| m.process.as_ref()))
    }

    fn log_display(&self) -> String {
        match self.first_failed() {
            Some((_, m)) => m.process.log_display(),
            None => self.members[0].process.log_display(),
        }
    }

    fn log_lag(&self) -> Duration {
        self.members[0].process.log_lag()
    }

    fn poll_interval(&self) -> Duration {
        super::process_group::poll_interval(self.members.iter().map(|m| m.process.as_ref()))
    }

    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Stopped> {
        Box::pin(async move {
            // The router first, so it sends nothing more to workers that are going.
            let router = self.members[0].process.stop(grace).await;
            let workers = stop_members(&mut self.members[1..], grace).await;
            let named: Vec<(String, Stopped)> = std::iter::once(router)
                .chain(workers)
                .zip(&self.members)
                .map(|(s, m)| (m.name.clone(), s))
                .collect();
            super::process_group::stopped_together(&named)
        })
    }

    fn slurm_job(&self) -> Option<crate::results::meta::SlurmJob> {
        self.members[0].process.slurm_job()
    }

    fn host_failure(&mut self) -> BoxFuture<'_, Option<Failure>> {
        Box::pin(async move {
            let i = self.exited.first().copied()?;
            self.members[i].process.host_failure().await
        })
    }

    fn exit_signal(&mut self) -> Option<i32> {
        let i = self.exited.first().copied()?;
        self.members[i].process.exit_signal()
    }

    fn lost_process(&mut self) -> BoxFuture<'_, Option<String>> {
        // A worker that lost a part is stopped by its own look: the router then serves on
        // the others, as it would in a user's deployment.
        Box::pin(async move {
            for m in &mut self.members {
                if let Some(what) = m.process.lost_process().await {
                    return Some(format!("{}: {what}", m.name));
                }
            }
            None
        })
    }

    fn failed_rank(&self) -> Option<FailedRank> {
        let (i, m) = self.first_failed()?;
        Some(FailedRank {
            rank: i as u32,
            of: self.members.len() as u32,
            host: m.host.clone(),
            log_path: m.log_path.clone(),
            name: Some(m.name.clone()),
        })
    }
}

#[cfg(test)]
mod tests {

    /// A router that wants a key servebench does not send is said at once, not waited on
    /// until `ready_timeout`.
    #[test]
    fn a_router_that_refuses_servebench_is_no_router_still_starting() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in listener.incoming().take(4) {
                let Ok(mut s) = s else { continue };
                let mut b = [0u8; 4096];
                let _ = s.read(&mut b);
                let _ = s.write_all(
                    b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 12\r\nConnection: close\r\n\r\nUnauthorized",
                );
            }
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = Client::new(&format!("http://127.0.0.1:{port}"), None).unwrap();
        let got = rt.block_on(router_lists_workers(&client, 2));
        let why = got.expect_err("refused");
        assert!(why.contains("HTTP 401") && why.contains("api-key"), "{why}");
        assert!(router_lists(
            &serde_json::json!({"workers": [{"is_healthy": true}, {"is_healthy": true}]}),
            2
        ));
    }
    use super::*;

    #[test]
    fn member_logs_sit_beside_the_groups() {
        assert_eq!(
            member_log_path(Path::new("/runs/x/server-g1.log"), "decode1"),
            Path::new("/runs/x/server-g1.decode1.log")
        );
    }
}
