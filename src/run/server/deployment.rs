//! A routed deployment (`server.deployment`) as one [`ServerProcess`]: N workers of the
//! group's engine started first (each ready on `/health`), then SGLang's router
//! (`sglang-router`) in front of them; watched and stopped together as a
//! [`MultiProcessServer`] (any process's exit is the deployment's, named by the process that
//! went; the router stopped first). The
//! router serves what servebench measures and logs to the group's log (`server-g1.log`);
//! each worker logs to its own (`server-g1.worker0.log`, `server-g1.prefill0.log`, ...).
//!
//! The router runs with `--log-level debug`: its "Sending request url=WORKER" line, inside a
//! span that carries the request's `x-request-id`, is what names the worker of each request
//! ([`super::routing`]).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::engine::deployment::{router_command, worker_server};
use crate::engine::{self};
use crate::host::{Host, HostError, ServerProcess, Spawn};
use servebench_model::results::meta::RankLaunch;
use servebench_model::secrets;
use servebench_model::spec::deployment::{Deployment, WorkerRole};
use servebench_model::spec::types::Server;

use super::process_group::{
    Member, MultiProcessServer, Shape, enough_hosts, member_log_path, servebench_on, stop_members,
};
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

/// What a deployment's launch produced.
pub(crate) struct LaunchedDeployment {
    pub process: Box<dyn ServerProcess>,
    /// The router's command (the launch's own record) and port.
    pub command: Vec<String>,
    pub port: u16,
    /// The router's Prometheus listener's port, on the router's host (loopback there).
    pub prometheus_port: u16,
    /// The workers, for meta.json and `servebench down`.
    pub records: Vec<RankLaunch>,
    pub workers: Vec<WorkerTarget>,
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
    enough_hosts("server.deployment.nodes", count, hosts.len())?;
    let mut nodes = Vec::with_capacity(count);
    for (i, host) in hosts.iter().take(count).enumerate() {
        nodes.push(Node {
            host: *host,
            bin: servebench_on(*host, server).await?,
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
        let started = spawn_worker(group, server, plan, node, log_path).await;
        let (port, bootstrap, cmd, log, process) = match started {
            Ok(s) => s,
            Err(e) => {
                stop_members(&mut members, STOP_GRACE).await;
                return Err(e);
            }
        };
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
            command: Some(secrets::redact_argv(&cmd.argv())),
            process: process.ids(),
            port: Some(port),
            log_file: log.file_name().map(|n| n.to_string_lossy().into_owned()),
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
    for (member, target) in members.iter_mut().zip(&targets) {
        let probe = super::liveness::health_probe(&target.url, secrets::api_key(server));
        member.process.watch_liveness(probe);
    }
    let first = &mut nodes[0];
    let host = first.host;
    let started = spawn_router(group, server, dep, first, &for_router, log_path).await;
    let (port, prometheus_port, cmd, router) = match started {
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
        process: Box::new(MultiProcessServer::new(members, Shape::Deployment)),
        command: secrets::redact_argv(&cmd.argv()),
        port,
        prometheus_port,
        records,
        workers: targets,
    })
}

/// Starts one worker of the deployment (`plan`) on `node`: its port (and a prefill worker's
/// bootstrap port) picked there, its command, its process; its log beside the group's.
async fn spawn_worker(
    group: &str,
    server: &Server,
    plan: &servebench_model::spec::deployment::WorkerPlan,
    node: &mut Node<'_>,
    log_path: &Path,
) -> Result<Worker, ServerError> {
    let name = plan.name();
    let host = node.host;
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
    Ok((port, bootstrap, cmd, log, process))
}

/// A started worker: its port, bootstrap port (prefill), command, log and process.
type Worker = (
    u16,
    Option<u16>,
    engine::LaunchCommand,
    std::path::PathBuf,
    Box<dyn ServerProcess>,
);

/// Starts the router on the first node (`first`), given the workers as it reaches them
/// (`for_router`: role, URL, bootstrap port): its port, Prometheus port, command and process.
async fn spawn_router(
    group: &str,
    server: &Server,
    dep: &Deployment,
    first: &mut Node<'_>,
    for_router: &[(WorkerRole, String, Option<u16>)],
    log_path: &Path,
) -> Result<(u16, u16, engine::LaunchCommand, Box<dyn ServerProcess>), ServerError> {
    let host = first.host;
    let port = distinct_port(host, dep.router.port, &mut first.taken).await?;
    let prometheus = distinct_port(host, None, &mut first.taken).await?;
    let cmd = router_command(dep, port, prometheus, for_router)?;
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
    Ok((port, prometheus, cmd, process))
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
pub(crate) async fn router_lists_workers(
    client: &Client,
    want: usize,
) -> Result<bool, RouterRefused> {
    let v = match client.get_json("/workers").await {
        Ok(v) => v,
        Err(crate::client::ClientError::Status {
            status: status @ (401 | 403),
            message,
            ..
        }) => {
            let said = if message.is_empty() {
                String::new()
            } else {
                format!(" ({})", servebench_model::text::truncate(&message, 200))
            };
            return Err(RouterRefused { status, said });
        }
        Err(_) => return Ok(false),
    };
    Ok(router_lists(&v, want))
}

/// The router refused servebench's `GET /workers` (HTTP `status`, with what it `said`).
#[derive(Debug, thiserror::Error)]
#[error(
    "the router refused servebench's GET /workers with HTTP {status}{said}: it wants a key; give it as `server.args.api-key` (sent as a bearer token) or leave the router's own `api-key` out"
)]
pub(crate) struct RouterRefused {
    status: u16,
    said: String,
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
