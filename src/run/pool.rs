//! Running a plan on the run's hosts: one host (`host:`), or a pool (`hosts:`). Server groups
//! are independent, so a pool runs them in parallel, one group per host at a time (a
//! multi-node group takes `server.nodes` hosts at once), starting them in plan order. Records
//! go to the one run directory as they arrive (each file has one writer behind a lock). A host
//! that fails (cannot be reached, its link lost, a crash beyond the failure policy) leaves the
//! pool; its group's remaining points move to the next free host (`on_host_failure: move`) or
//! are recorded as failed (`fail`).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::host::Host;
use crate::host::local::LocalHost;
use crate::host::remote::RemoteHost;
use crate::host::slurm::SlurmHost;
use crate::plan::failure::FailurePolicy;
use crate::plan::{Plan, ServerGroup};
use servebench_model::catalog::{Failure, FlagKind};
use servebench_model::results::meta::{PoolHostRecord, RunMeta};
use servebench_model::results::rundir::RunDir;
use servebench_model::spec::types::{ClientPlacement, Experiment, HostFailover, HostSpec};
use servebench_model::spec::{LoadedSpec, Point};
use servebench_model::text::first_line;

use super::errors::RunError;
use super::interrupt::Interrupt;
use super::launch::{self, LaunchContext, LaunchEnd, Measuring, One, Tally};
use super::point::{self, PointRunner};
use super::probe::setup::ProbeSite;
use super::progress::Progress;
use super::records::{
    append_point, failed_point, gpu_sink, metrics_sink, python_of, server_label, write_meta,
};
use super::server::{self, ServerHandle};

/// How long each tool reading this machine's facts may take (nvidia-smi on a wedged driver).
const LOCAL_FACTS_SECS: u32 = 5;

/// A host servers run on.
pub(crate) struct PoolHost {
    /// `local`, or the SSH host's `user@host:port`.
    pub name: String,
    pub host: Arc<dyn Host>,
    /// The SSH connection (the agent and the host facts use it); None for this machine.
    pub remote: Option<Arc<RemoteHost>>,
    /// The Slurm cluster (the agent runs in its allocation); None off Slurm.
    pub slurm: Option<Arc<SlurmHost>>,
}

impl PoolHost {
    /// How many of a `need`-rank server's ranks this host runs: a Slurm allocation runs
    /// them all (its own size is checked before the run starts), a machine one.
    fn rank_capacity(&self, need: usize) -> usize {
        if self.slurm.is_some() { need.max(1) } else { 1 }
    }

    /// Where the measuring agent runs next to this host's servers (`client: host`): the SSH
    /// host or the Slurm allocation; None for this machine.
    fn agent_place(&self) -> Option<super::agent::session::AgentPlace> {
        use super::agent::session::AgentPlace;
        match (&self.remote, &self.slurm) {
            (Some(r), _) => Some(AgentPlace::Ssh(r.clone())),
            (None, Some(s)) => Some(AgentPlace::Slurm(s.clone())),
            (None, None) => None,
        }
    }
}

/// The run's hosts: those that could be reached, and those that could not (with why).
pub(crate) struct Pool {
    pub hosts: Vec<PoolHost>,
    pub unreachable: Vec<(String, String)>,
    /// True for `hosts:` (points then record their host); false for one `host:`.
    pub is_pool: bool,
    /// The run's console once it has one (a Slurm job's queue state is said there).
    pub console: Arc<std::sync::OnceLock<Progress>>,
}

impl Pool {
    /// Connects to every host (a per-run directory `run_id` on each SSH host). One host that
    /// cannot be reached fails the run before anything starts; a pool goes on without the
    /// hosts it cannot reach, unless none is left.
    pub(crate) async fn connect(
        exp: &Experiment,
        run_id: &str,
        interrupt: &Interrupt,
    ) -> Result<Pool, RunError> {
        let specs = exp.pool();
        let console: Arc<std::sync::OnceLock<Progress>> = Arc::default();
        let connected = futures_util::future::join_all(
            specs
                .iter()
                .map(|h| connect_one(h, run_id, interrupt, &console)),
        )
        .await;
        let mut pool = Pool {
            hosts: Vec::new(),
            unreachable: Vec::new(),
            is_pool: !exp.hosts.is_empty(),
            console,
        };
        let mut first_error = None;
        for (spec, c) in specs.iter().zip(connected) {
            match c {
                Ok(h) => pool.hosts.push(h),
                Err(e) => {
                    pool.unreachable.push((spec.label(), e.to_string()));
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if pool.hosts.is_empty() || !pool.is_pool => Err(RunError::Host(e)),
            _ => Ok(pool),
        }
    }

    /// `on a pool of 2 hosts (a, b)`, `on bench@gpu (client on the host)`, or nothing.
    pub(crate) fn describe(&self, placement: ClientPlacement) -> String {
        if self.is_pool {
            return format!(
                " on a pool of {} ({})",
                servebench_model::text::count_s(self.hosts.len(), "host"),
                self.hosts
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        match self.hosts.first() {
            Some(PoolHost {
                remote: Some(r), ..
            }) => format!(
                " on {} (client on the {})",
                r.ssh.name(),
                if placement == ClientPlacement::Host {
                    "host"
                } else {
                    "local machine, through a port forward"
                }
            ),
            Some(PoolHost { slurm: Some(s), .. }) => format!(
                " on {} (client {})",
                s.name(),
                if placement == ClientPlacement::Host {
                    "in the allocation, next to rank 0"
                } else {
                    "on this machine"
                }
            ),
            _ => String::new(),
        }
    }
}

async fn connect_one(
    spec: &HostSpec,
    run_id: &str,
    interrupt: &Interrupt,
    console: &Arc<std::sync::OnceLock<Progress>>,
) -> Result<PoolHost, crate::host::HostError> {
    if spec.is_local() {
        return Ok(PoolHost {
            name: "local".into(),
            host: Arc::new(LocalHost),
            remote: None,
            slurm: None,
        });
    }
    if let Some(opts) = spec.slurm() {
        let said = console.clone();
        let runner = SlurmHost::runner_for(opts).await?;
        let slurm = SlurmHost::new(
            opts.clone(),
            run_id,
            runner,
            Arc::new(move |text: &str| match said.get() {
                Some(p) => p.waiting(text),
                None => servebench_model::console::errln(text),
            }),
            interrupt.subscribe(),
        );
        slurm.check().await?;
        let slurm = Arc::new(slurm);
        return Ok(PoolHost {
            name: slurm.name().to_string(),
            host: slurm.clone(),
            remote: None,
            slurm: Some(slurm),
        });
    }
    let remote = Arc::new(RemoteHost::connect(spec, run_id).await?);
    Ok(PoolHost {
        name: remote.ssh.name().to_string(),
        host: remote.clone(),
        remote: Some(remote),
        slurm: None,
    })
}

/// What the groups of a run share.
pub(super) struct PoolRun<'a> {
    pub spec: &'a LoadedSpec,
    pub run_dir: &'a Arc<RunDir>,
    pub meta: &'a Mutex<RunMeta>,
    pub progress: &'a Progress,
    pub interrupt: &'a Interrupt,
    pub spec_dir: PathBuf,
    pub tally: &'a Mutex<Tally>,
    /// Why the run stopped early (`on_failure: abort`, a lost host, no host left).
    pub aborted: &'a Mutex<Option<String>>,
}

impl PoolRun<'_> {
    fn first(&self) -> &Experiment {
        &self.spec.points[0].experiment
    }

    fn stopping(&self) -> bool {
        self.interrupt.is_set() || self.aborted.lock().map(|a| a.is_some()).unwrap_or(true)
    }

    fn abort(&self, why: String) {
        let mut a = self.aborted.lock().unwrap_or_else(|e| e.into_inner());
        a.get_or_insert(why);
    }

    fn write_meta(&self) -> Result<(), RunError> {
        let meta = self.meta.lock().unwrap_or_else(|e| e.into_inner());
        write_meta(self.run_dir, &meta)
    }
}

/// How one group's turn on its host(s) ended.
enum GroupEnd<'p> {
    /// Every point of the turn is recorded (or the run is stopping).
    Done,
    /// A host failed: `host` (an index into the pool) leaves it; `remaining` were not
    /// measured.
    HostFailed {
        host: usize,
        why: String,
        remaining: Vec<&'p Point>,
    },
}

/// Measures every group of `plan` on the pool's hosts until done, stopped, or a record
/// cannot be written (the error). Every server launched is stopped before it returns.
pub(super) async fn run_pool(plan: &Plan, run: &PoolRun<'_>, pool: &Pool) -> Result<(), RunError> {
    record_hosts(run, pool).await?;

    let n = pool.hosts.len();
    let mut alive = vec![true; n];
    let mut busy = vec![false; n];
    let mut queue: VecDeque<(&ServerGroup, Vec<&Point>)> = plan
        .groups
        .iter()
        .map(|g| (g, g.points.iter().collect()))
        .collect();
    let mut running = FuturesUnordered::new();
    let mut first_error: Option<RunError> = None;
    loop {
        // Start groups in plan order while the next one has the hosts it needs.
        while first_error.is_none() && !run.stopping() {
            let Some((g, _)) = queue.front() else { break };
            let need = g.server.node_count() as usize;
            // Free hosts in order until they hold every rank (a Slurm host holds them all).
            let mut free = Vec::new();
            let mut holds = 0;
            for i in (0..n).filter(|&i| alive[i] && !busy[i]) {
                if holds >= need {
                    break;
                }
                free.push(i);
                holds += pool.hosts[i].rank_capacity(need);
            }
            if holds < need {
                break;
            }
            let (g, points) = queue.pop_front().expect("peeked above");
            for &i in &free {
                busy[i] = true;
            }
            let hosts: Vec<&PoolHost> = free.iter().map(|&i| &pool.hosts[i]).collect();
            running.push(async move {
                let end = run_group(run, pool, g, points, &free, &hosts).await;
                (free, g, end)
            });
        }
        let Some((used, g, end)) = running.next().await else {
            break;
        };
        for &i in &used {
            busy[i] = false;
        }
        match end {
            Err(e) => note_error(run, &mut first_error, Err(e)),
            Ok(GroupEnd::Done) => {}
            Ok(GroupEnd::HostFailed {
                host,
                why,
                remaining,
            }) => {
                alive[host] = false;
                let left = alive.iter().filter(|a| **a).count();
                if let Some(moved) = host_failed(
                    run,
                    pool,
                    (host, &why),
                    (g, remaining),
                    left,
                    &mut first_error,
                ) {
                    // First in line: the group keeps its place in plan order.
                    queue.push_front(moved);
                }
            }
        }
        // Groups that can never start (every host they could use has failed) are recorded
        // as failed, once nothing runs that could free a host.
        if running.is_empty() && first_error.is_none() && !run.stopping() {
            fail_unstartable(run, pool, &alive, &mut queue, &mut first_error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Records what each host of the pool is (for the report, and for `compare`, which warns
/// across hardware), and each Slurm job as it is submitted (`down` finds one still queued).
async fn record_hosts(run: &PoolRun<'_>, pool: &Pool) -> Result<(), RunError> {
    let first = run.first();
    // Each Slurm job is recorded as it is submitted: `down` finds one still in the queue.
    for slurm in pool.hosts.iter().filter_map(|h| h.slurm.as_ref()) {
        let dir = run.run_dir.clone();
        slurm.set_journal(Arc::new(move |job| {
            if let Err(e) = dir.append_slurm_job(job) {
                servebench_model::console::errln(&format!(
                    "servebench: cannot record Slurm job {} in {}: {e}",
                    job.job_id,
                    servebench_model::results::rundir::SLURM_JOBS_FILE
                ));
            }
        }));
    }
    // What each host is, for the report and for `compare` (which warns across hardware).
    let python = python_of(first);
    // This machine is read too when servebench launches the server here: its GPUs are the
    // server's (a server at `url:` may be anywhere; a Slurm node is not this machine).
    let launched_here = first.server.url.is_none();
    let facts = futures_util::future::join_all(pool.hosts.iter().map(|h| async {
        match (&h.remote, &h.slurm) {
            (Some(r), _) => crate::host::remote::host_facts(&r.ssh, &python).await,
            // Ctrl-C is not kept waiting on a hung tool: the facts are given up (and the
            // script's process group killed).
            (None, None) if launched_here => tokio::select! {
                f = crate::host::ssh::local_facts(LOCAL_FACTS_SECS) => f,
                () = run.interrupt.wait() => None,
            }
            .and_then(|f| serde_json::to_value(f).ok()),
            _ => None,
        }
    }))
    .await;
    {
        let mut meta = run.meta.lock().unwrap_or_else(|e| e.into_inner());
        if pool.is_pool {
            meta.hosts = pool
                .hosts
                .iter()
                .zip(&facts)
                .map(|(h, f)| PoolHostRecord {
                    name: h.name.clone(),
                    facts: f.clone(),
                    failed: None,
                })
                .chain(pool.unreachable.iter().map(|(name, why)| PoolHostRecord {
                    name: name.clone(),
                    facts: None,
                    failed: Some(format!("cannot be reached: {}", first_line(why))),
                }))
                .collect();
        } else if let Some(f) = facts.first() {
            meta.server_host = f.clone();
        }
    }
    run.write_meta()?;
    for (name, why) in &pool.unreachable {
        run.progress.line(&format!(
            "host {name} cannot be reached, the pool goes on without it: {}",
            first_line(why)
        ));
    }
    Ok(())
}

/// A host failed while it ran group `g`: it is marked failed in `meta.json`; the points it
/// left move to another host (returned, to go first in line) when `on_host_failure: move`
/// and one is `left`, or are recorded as failed.
fn host_failed<'p>(
    run: &PoolRun<'_>,
    pool: &Pool,
    (host, why): (usize, &str),
    (g, remaining): (&'p ServerGroup, Vec<&'p Point>),
    left: usize,
    first_error: &mut Option<RunError>,
) -> Option<(&'p ServerGroup, Vec<&'p Point>)> {
    let name = &pool.hosts[host].name;
    {
        let mut meta = run.meta.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = meta.hosts.iter_mut().find(|h| &h.name == name) {
            h.failed = Some(why.to_string());
        }
    }
    note_error(run, first_error, run.write_meta());
    match run.first().on_host_failure.unwrap_or_default() {
        HostFailover::Move if left > 0 && !remaining.is_empty() => {
            run.progress.line(&format!(
                "host {name} failed ({}); {} of {} move to another host",
                first_line(why),
                servebench_model::text::count_s(remaining.len(), "point"),
                g.id
            ));
            Some((g, remaining))
        }
        _ => {
            run.progress
                .line(&format!("host {name} failed: {}", first_line(why)));
            let msg = format!("host {name} failed: {why}");
            for p in remaining {
                let record = failed_point(p, &g.id, FlagKind::ServerFailed, &msg);
                let written = append_point(run.run_dir, run.progress, &record);
                note_error(run, first_error, written);
            }
            None
        }
    }
}

/// Records as failed the groups at the front of `queue` that can never start: every host
/// they could use has failed (`alive`). Aborts the run when no host is left.
fn fail_unstartable(
    run: &PoolRun<'_>,
    pool: &Pool,
    alive: &[bool],
    queue: &mut VecDeque<(&ServerGroup, Vec<&Point>)>,
    first_error: &mut Option<RunError>,
) {
    let left = alive.iter().filter(|a| **a).count();
    while let Some((g, _)) = queue.front() {
        let need = g.server.node_count() as usize;
        let holds: usize = (0..alive.len())
            .filter(|&i| alive[i])
            .map(|i| pool.hosts[i].rank_capacity(need))
            .sum();
        if need <= holds {
            break;
        }
        let (g, points) = queue.pop_front().expect("peeked above");
        let msg = if left == 0 {
            "no host of the pool is left to run it".to_string()
        } else {
            format!(
                "{} is {} but only {} of the pool are left",
                g.server.nodes_key(),
                g.server.node_count(),
                servebench_model::text::count_s(left, "host")
            )
        };
        run.progress.line(&format!("{}: {msg}", g.id));
        for p in points {
            let record = failed_point(p, &g.id, FlagKind::ServerFailed, &msg);
            let written = append_point(run.run_dir, run.progress, &record);
            note_error(run, first_error, written);
        }
        if left == 0 {
            run.abort("every host of the pool failed".into());
        }
    }
}

/// What a group's launches carry from one to the next.
struct GroupState<'p> {
    /// The group's points not measured yet.
    pending: std::iter::Peekable<std::vec::IntoIter<&'p Point>>,
    policy: FailurePolicy,
    tally: Tally,
    /// Read once per group, kept with every launch of it.
    model_config: Option<servebench_model::results::meta::ModelConfigRecord>,
}

/// Where a group runs, the same for each of its launches.
struct GroupSite<'a> {
    g: &'a ServerGroup,
    /// The pool's hosts the group runs on; the first runs rank 0.
    hosts: &'a [&'a PoolHost],
    /// The host of each rank, rank 0's first.
    rank_hosts: &'a [&'a dyn Host],
    /// Where the agent measures (`client: host`).
    agent_host: Option<&'a super::agent::session::AgentPlace>,
    /// Where the engine's profiler writes its traces, when the group profiles.
    profile_dir: Option<&'a str>,
}

/// Measures `points` of group `g` on `hosts` (`indices` into the pool): launch, measure,
/// relaunch after crashes as the failure policy says, stop.
async fn run_group<'p>(
    run: &PoolRun<'_>,
    pool: &Pool,
    g: &'p ServerGroup,
    points: Vec<&'p Point>,
    indices: &[usize],
    hosts: &[&PoolHost],
) -> Result<GroupEnd<'p>, RunError> {
    let first = run.first();
    let label = hosts
        .iter()
        .map(|h| h.name.as_str())
        .collect::<Vec<_>>()
        .join("+");
    if pool.is_pool {
        run.run_dir.set_group_host(&g.id, &label);
    }
    let rank_hosts = rank_hosts(hosts, g.server.node_count());
    let host_refs: Vec<&dyn Host> = rank_hosts.iter().map(|h| h.as_ref()).collect();
    let rank0 = hosts[0];
    let agent_host = rank0
        .agent_place()
        .filter(|_| first.placement() == ClientPlacement::Host);
    let mut runner = group_runner(run, rank0, agent_host.is_some());
    let profile_dir = super::server::traces::group_dir(
        g,
        &points,
        rank0.host.as_ref(),
        rank0.slurm.is_some(),
        run.run_dir,
    );
    let launched = super::server::traces::with_profiler(&g.server, &points, profile_dir.as_deref());
    let site = GroupSite {
        g,
        hosts,
        rank_hosts: &host_refs,
        agent_host: agent_host.as_ref(),
        profile_dir: profile_dir.as_deref(),
    };
    let mut state = GroupState {
        pending: points.into_iter().peekable(),
        policy: FailurePolicy::new(first.on_failure),
        tally: Tally::default(),
        model_config: None,
    };
    let end = loop {
        if state.pending.peek().is_none() || run.stopping() {
            break GroupEnd::Done;
        }
        let log = run.run_dir.server_log_path(&g.id);
        starting(run, g, pool.is_pool.then_some(label.as_str()));
        let started = start_on_picked_ports(run, g, &launched, &log, &host_refs).await;
        let mut handle = match started {
            Ok(h) => h,
            Err(server::ServerError::Interrupted) => break GroupEnd::Done,
            Err(e) => match start_failed(run, pool, g, (indices, hosts), e, &mut state).await? {
                Some(end) => break end,
                None => continue,
            },
        };
        run.progress.launched(&g.id);
        let end = measure_launch(run, pool, &site, &mut handle, &mut runner, &mut state).await?;
        if let Some(end) = launch_ended(run, pool, (indices, hosts), end, &mut state.pending).await
        {
            break end;
        }
    };
    let mut shared = run.tally.lock().unwrap_or_else(|e| e.into_inner());
    shared.problems.append(&mut state.tally.problems);
    shared.measured_points += state.tally.measured_points;
    Ok(end)
}

/// How many more launches a server gets when a port servebench picked was taken before the
/// engine bound it.
const PORT_RACE_RETRIES: u32 = 2;

/// Starts the group's server; when servebench picked its ports (no `server.port`) and the
/// engine then found one taken, starts it again on fresh picks: a port is free when picked
/// and released, and another process (any outgoing connection takes an ephemeral port) can
/// take it before the engine binds it. A port the spec names is the user's, never retried.
async fn start_on_picked_ports(
    run: &PoolRun<'_>,
    g: &ServerGroup,
    server: &servebench_model::spec::types::Server,
    log: &std::path::Path,
    hosts: &[&dyn Host],
) -> Result<ServerHandle, server::ServerError> {
    let mut tries = 0;
    loop {
        let started = ServerHandle::start_on(&g.id, server, log, run.interrupt, hosts).await;
        let raced = match &started {
            Err(e) => e.cause_label().as_deref() == Some(Failure::PortInUse.name()),
            Ok(_) => false,
        };
        if !raced || server.port.is_some() || server.url.is_some() {
            return started;
        }
        if tries == PORT_RACE_RETRIES {
            return started.map_err(|e| match e {
                // The engine's hint says to omit `server.port`, which the spec did.
                server::ServerError::DiedAtStart { cause, log, tail, .. } => {
                    server::ServerError::DiedAtStart {
                        cause,
                        hint: format!(
                            "servebench picked free ports {} times and each was taken before the server bound it: something on this host takes ports fast; name a free server.port",
                            PORT_RACE_RETRIES + 1
                        ),
                        log,
                        tail,
                    }
                }
                e => e,
            });
        }
        tries += 1;
        run.progress.line(&format!(
            "{}: a port servebench picked was taken before the server bound it; starting again on fresh ports ({tries} of {PORT_RACE_RETRIES})",
            g.id
        ));
    }
}

/// One host per rank of a `nodes`-node server: a Slurm host gives each rank its own node of
/// the allocation.
fn rank_hosts(hosts: &[&PoolHost], nodes: u32) -> Vec<Arc<dyn Host>> {
    hosts
        .iter()
        .flat_map(|h| match &h.slurm {
            Some(s) if nodes > 1 => s.ranks(nodes),
            _ => vec![h.host.clone()],
        })
        .collect()
}

/// Measures the group's pending points on a started server, then stops it, whatever
/// happened, and records the launch in `meta.json`.
async fn measure_launch(
    run: &PoolRun<'_>,
    pool: &Pool,
    site: &GroupSite<'_>,
    handle: &mut ServerHandle,
    runner: &mut PointRunner,
    state: &mut GroupState<'_>,
) -> Result<LaunchEnd, RunError> {
    let g = site.g;
    let single_host = pool.hosts.len() == 1;
    let host = site.rank_hosts[0];
    let launch_index =
        match announce(run, g, handle, host, &mut state.model_config, single_host).await {
            Ok(i) => i,
            Err((e, i)) => {
                // Nothing may outlive the runner: stop the server before giving up.
                handle.stop("stopping after an error").await;
                set_launch(run, i, handle);
                return Err(e);
            }
        };
    let cx = launch_context(run, site);
    let measuring = Measuring {
        runner: &mut *runner,
        agent_host: site.agent_host,
        server: &g.server,
        spec_dir: &run.spec_dir,
    };
    // The group's pending points, measured on this launch until they are done, the server
    // crashes, or the run stops. A point with a `search:` block is a capacity search: its
    // probes are measured here, one after another, on this launch ([`super::search`]).
    let result = match launch::measurer(handle, &cx, measuring) {
        Err(e) => Err(e),
        Ok(mut measurer) => {
            let end = loop {
                let Some(point) = state.pending.next() else {
                    break Ok(LaunchEnd::Finished);
                };
                match launch::skipped(point, &mut state.policy, &cx) {
                    Ok(false) => {}
                    Ok(true) => continue,
                    Err(e) => break Err(e),
                }
                let mut on = launch::Launch {
                    handle: &mut *handle,
                    policy: &mut state.policy,
                    cx: &cx,
                    measurer: measurer.as_mut(),
                    tally: &mut state.tally,
                };
                let end = match point.experiment.search.clone() {
                    Some(search) => super::search::run_search(point, search, &mut on).await,
                    None => on.point(point, &mut |_| {}).await,
                };
                match end {
                    Err(e) => break Err(e),
                    Ok(None) => {}
                    Ok(Some(One::End(end))) => break Ok(end),
                    Ok(Some(One::Unavailable(msg))) => {
                        break launch::fail_rest(state.pending.by_ref(), &cx, &msg);
                    }
                }
            };
            measurer.close().await;
            end
        }
    };
    runner.set_site(ProbeSite::default(), None);
    // Whatever happened, the server goes down and that is recorded.
    let why = match &result {
        Err(_) => "stopping after an error",
        Ok(_) if run.interrupt.cause().is_some_and(|c| c.is_failure()) => {
            "stopping: a record could not be written"
        }
        Ok(end) => end.stop_reason(state.pending.peek().is_some()),
    };
    handle.stop(why).await;
    set_launch(run, launch_index, handle);
    // The first error is the one to report.
    let meta_written = run.write_meta();
    let end = result?;
    meta_written?;
    Ok(end)
}

/// What a launch's points need from the run and the group's site.
fn launch_context<'a>(run: &'a PoolRun<'_>, site: &'a GroupSite<'_>) -> LaunchContext<'a> {
    LaunchContext {
        group: &site.g.id,
        run_dir: run.run_dir,
        progress: run.progress,
        interrupt: run.interrupt,
        host: site.hosts[0].host.as_ref(),
        remote: site
            .hosts
            .iter()
            .any(|h| h.remote.is_some() || h.slurm.is_some()),
        profile_dir: site.profile_dir,
    }
}

/// Says on the console that a group's server is being started (or connected to), `on` the
/// pool's hosts named.
fn starting(run: &PoolRun<'_>, g: &ServerGroup, on: Option<&str>) {
    let on = on.map(|l| format!(" on {l}")).unwrap_or_default();
    // An external server is not started: servebench only connects to it.
    let doing = if g.server.url.is_some() {
        "connecting to the server"
    } else {
        "starting the server"
    };
    run.progress.line(&format!(
        "{}: {doing} ({}){on}",
        g.id,
        server_label(&g.server)
    ));
}

/// How a group goes on after one of its launches ended: Some when the group ends (the run
/// stops, or a pool host failed and the rest of its points move), None for another launch.
async fn launch_ended<'p>(
    run: &PoolRun<'_>,
    pool: &Pool,
    (indices, hosts): (&[usize], &[&PoolHost]),
    end: LaunchEnd,
    pending: &mut std::iter::Peekable<std::vec::IntoIter<&'p Point>>,
) -> Option<GroupEnd<'p>> {
    match end {
        LaunchEnd::Interrupted => Some(GroupEnd::Done),
        LaunchEnd::Aborted(why) if pool.is_pool && pool.hosts.len() > 1 => {
            Some(GroupEnd::HostFailed {
                host: indices[0],
                why: format!("a crash beyond the failure policy: {}", first_line(&why)),
                remaining: pending.collect(),
            })
        }
        LaunchEnd::HostLost(why) if pool.is_pool => {
            let bad = lost_host(hosts).await.unwrap_or(0);
            Some(GroupEnd::HostFailed {
                host: indices[bad],
                why,
                remaining: pending.collect(),
            })
        }
        LaunchEnd::Aborted(why) | LaunchEnd::HostLost(why) | LaunchEnd::ServerLost(why) => {
            run.abort(why);
            Some(GroupEnd::Done)
        }
        LaunchEnd::Crashed | LaunchEnd::Finished => None,
    }
}

/// The point runner of a group: records to the run directory, `/metrics` scrapes to
/// `metrics.jsonl`; GPU readings sampled here by program only when this machine is the
/// server's host (an SSH host's or Slurm node's are sampled by the agent there, `client:
/// host`); a DCGM exporter is read from wherever the client runs: here too when no agent
/// does (`agent`).
fn group_runner(run: &PoolRun<'_>, rank0: &PoolHost, agent: bool) -> PointRunner {
    let here = rank0.remote.is_none() && rank0.slurm.is_none();
    let sinks = super::probe::setup::ProbeSinks {
        metrics: Some(metrics_sink(run.run_dir.clone())),
        gpu: (here || !agent).then(|| (gpu_sink(run.run_dir.clone()), rank0.name.clone(), here)),
        ..Default::default()
    };
    PointRunner::new(
        point::run_dir_sink(run.run_dir.clone(), run.interrupt.clone()),
        run.progress.clone(),
        run.interrupt.clone(),
        run.spec_dir.clone(),
    )
    .with_probe_sinks(sinks)
}

/// A group's server failed to start (`e`): the group moves to another host of the pool when
/// this one is lost (or the policy aborts and the pool has others), else its remaining points
/// are recorded as failed. Some: how the group ends; None: the next launch is tried.
async fn start_failed<'p>(
    run: &PoolRun<'_>,
    pool: &Pool,
    g: &ServerGroup,
    (indices, hosts): (&[usize], &[&PoolHost]),
    e: server::ServerError,
    state: &mut GroupState<'p>,
) -> Result<Option<GroupEnd<'p>>, RunError> {
    let GroupState {
        pending,
        policy,
        tally,
        ..
    } = state;
    let msg = e.to_string();
    // A pool host that cannot be reached any more: the group goes elsewhere.
    if pool.is_pool
        && let Some(bad) = lost_host(hosts).await
    {
        return Ok(Some(GroupEnd::HostFailed {
            host: indices[bad],
            why: format!("cannot be reached: {}", first_line(&msg)),
            remaining: pending.collect(),
        }));
    }
    if pool.is_pool && policy.aborts_on_start_failure() && pool.hosts.len() > 1 {
        return Ok(Some(GroupEnd::HostFailed {
            host: indices[0],
            why: format!(
                "the server failed to start there (on_failure: abort): {}",
                first_line(&msg)
            ),
            remaining: pending.collect(),
        }));
    }
    // The group's remaining points cannot run; record them as failed and go on.
    run.progress.line(&format!("{}: {msg}", g.id));
    tally
        .problems
        .push(format!("{}: {}", g.id, first_line(&msg)));
    for p in pending.by_ref() {
        let mut record = failed_point(p, &g.id, FlagKind::ServerFailed, &msg);
        record.failure = e.cause_label();
        append_point(run.run_dir, run.progress, &record)?;
    }
    if policy.aborts_on_start_failure() {
        run.abort(format!(
            "{}: the server failed to start (on_failure: abort)",
            g.id
        ));
    }
    Ok(None)
}

/// A launch is ready: its model config (read once per group), the host's facts once a Slurm
/// node is known, its notes and readiness on the console, its record in `meta.json`. Returns
/// the launch's index in `meta.servers`; on a failed write, the error and that index.
async fn announce(
    run: &PoolRun<'_>,
    g: &ServerGroup,
    handle: &mut ServerHandle,
    host: &dyn Host,
    model_config: &mut Option<servebench_model::results::meta::ModelConfigRecord>,
    single_host: bool,
) -> Result<usize, (RunError, usize)> {
    let config = match &model_config {
        Some(c) => c,
        None => model_config
            .insert(super::server::model_facts::read(&g.server, &run.spec_dir, host).await),
    };
    handle.record.model_config = Some(config.clone());
    // A Slurm node is known once the allocation exists: its facts are read now, once.
    if single_host
        && run
            .meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .server_host
            .is_none()
        && let Some(f) = host.facts_after_launch().await
    {
        run.meta
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .server_host = Some(f);
    }
    for note in &handle.record.notes {
        run.progress.line(&format!("{}: warning: {note}", g.id));
    }
    if let Some(s) = handle.record.ready_after_s {
        run.progress.line(&format!(
            "{}: ready after {} at {}",
            g.id,
            servebench_model::text::duration(s),
            handle.record.url
        ));
    }
    let launch_index = {
        let mut meta = run.meta.lock().unwrap_or_else(|e| e.into_inner());
        meta.servers.push(handle.record.clone());
        meta.servers.len() - 1
    };
    run.write_meta().map_err(|e| (e, launch_index))?;
    Ok(launch_index)
}

/// Keeps the first error; a record that cannot be written stops every group (measuring on
/// would measure what cannot be kept). Groups still running stop their servers first, so
/// the loop never returns early.
fn note_error(run: &PoolRun<'_>, first: &mut Option<RunError>, result: Result<(), RunError>) {
    let Err(e) = result else { return };
    if let RunError::Write { what, source } = &e {
        run.interrupt
            .trigger(super::interrupt::StopCause::WriteFailed {
                file: what.clone(),
                error: source.to_string(),
            });
    }
    first.get_or_insert(e);
}

fn set_launch(run: &PoolRun<'_>, index: usize, handle: &ServerHandle) {
    let mut meta = run.meta.lock().unwrap_or_else(|e| e.into_inner());
    meta.servers[index] = handle.record.clone();
}

/// The first of `hosts` whose link is gone (and cannot be re-established).
async fn lost_host(hosts: &[&PoolHost]) -> Option<usize> {
    for (i, h) in hosts.iter().enumerate() {
        if h.remote.is_some() && h.host.check_link().await.is_err() {
            return Some(i);
        }
    }
    None
}
