//! A Slurm cluster as a [`Host`](super::Host): servebench submits a job that holds an
//! allocation (`sbatch`, one per server group or one for the run), waits for it while saying
//! its queue state and Slurm's pending reason, launches the server as a job step inside it
//! (`srun --jobid`), and reaches it at the first node's address. The step's output comes back
//! through `srun` itself into the run directory's log, so no shared file system is needed for
//! logs. A step that ends is classified with Slurm's own cause (time limit, preemption, node
//! failure, out-of-memory kill, an outside `scancel`) before the engine's log lines.
//!
//! A multi-node server (`server.nodes: N`) runs as N steps of one allocation, rank `i` on the
//! allocation's node `i` ([`SlurmRank`], one [`Host`](super::Host) per rank for
//! `run::server::ranks`), rank 0's node the ranks' meeting point. Ports are picked on the node that
//! will listen on them, by a step of servebench itself (`servebench port`), never assumed free
//! from the submitting machine.
//!
//! Slurm's commands run on this machine (a login node, or any node that can submit jobs), or
//! on the spec's `login` node over SSH ([`cli::Runner`]), always with argument vectors:
//! nothing the spec says is joined into shell text (over SSH each argument is quoted on its
//! own). Through a login node the steps' `srun` runs there under a local `ssh` whose output
//! goes to the step's log; stopping a step is always `scancel` (ending ssh would leave the
//! remote srun running), and servebench's binary is copied to the login node as for an SSH
//! host (the nodes see it there through the shared home directory).

pub(crate) mod cli;
pub(crate) mod error;

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::sync::Mutex;

use super::{HostError, Leftover, ServerProcess, Spawn, Stopped};
use servebench_model::catalog::Failure;
use servebench_model::results::meta::{ProcessRecord, SlurmJob};
use servebench_model::spec::types::{SlurmAllocation, SlurmOptions};

pub use cli::Runner;
pub use error::SlurmError;

/// How often the queue is asked about a job that waits for its allocation.
const QUEUE_POLL: Duration = Duration::from_millis(500);

/// How long a released job may take to leave the queue (Slurm's `KillWait` and epilog).
const RELEASE_WAIT: Duration = Duration::from_secs(60);

/// What the host tells the run while a job waits: one line per change of state or reason.
pub(crate) type WaitReport = Arc<dyn Fn(&str) + Send + Sync>;

/// Where the host records each job it submits, as `sbatch` answers (the run directory's
/// `slurm-jobs.jsonl`), so a job that waits in the queue is known to `down`.
pub(crate) type Journal = Arc<dyn Fn(&servebench_model::results::meta::SubmittedJob) + Send + Sync>;

/// The allocation servers are launched in now.
#[derive(Debug, Clone)]
struct Allocation {
    job: SlurmJob,
    /// The server group it was submitted for (`run` for the run's one allocation).
    owner: String,
    /// Each node's address (`NodeAddr`), in the order of `job.nodes`: rank 0 serves on the
    /// first.
    addrs: Vec<String>,
}

impl Allocation {
    /// The name and address of the node `rank` runs on.
    fn node_of(&self, opts: &SlurmOptions, rank: u32) -> Result<(&str, &str), HostError> {
        let i = opts.node_of_rank(rank) as usize;
        match (self.job.nodes.get(i), self.addrs.get(i)) {
            (Some(n), Some(a)) => Ok((n, a)),
            _ => Err(HostError::Unsupported(format!(
                "rank {rank} needs node {} of Slurm job {}, which has {}: set host.slurm.nodes (and ranks_per_node) to hold server.nodes",
                i + 1,
                self.job.job_id,
                servebench_model::text::count_s(self.job.nodes.len(), "node")
            ))),
        }
    }
}

/// A Slurm cluster reached through its commands on this machine.
pub(crate) struct SlurmHost {
    opts: SlurmOptions,
    /// `<spec name>-<run timestamp>`, in job names.
    run_id: String,
    current: Arc<Mutex<Option<Allocation>>>,
    /// The allocation last obtained, readable without waiting (node addresses for
    /// [`Host::address`](super::Host::address), which cannot wait).
    last: std::sync::Mutex<Option<Allocation>>,
    /// Ports handed out on each node lately (node, port): two ranks on one node, or a rank
    /// and the meeting point, never get the same one.
    handed_out: std::sync::Mutex<Vec<(String, u16, Instant)>>,
    /// Jobs submitted and not yet released: cancelled when the host is dropped, whatever
    /// path the run took.
    open_jobs: Arc<std::sync::Mutex<Vec<u64>>>,
    on_wait: WaitReport,
    stop: tokio::sync::watch::Receiver<bool>,
    launches: std::sync::atomic::AtomicUsize,
    /// Where Slurm's commands run: here, or the login node.
    runner: Runner,
    /// servebench's binary as the nodes run it, once known (uploaded to the login node).
    binary: Mutex<Option<String>>,
    /// Where submitted jobs are recorded, once the run directory exists.
    journal: std::sync::OnceLock<Journal>,
}

impl SlurmHost {
    /// A host for `opts`; `stop` turns true on an interrupt (a job still waiting is then
    /// cancelled); `on_wait` hears the queue state while one waits.
    pub(crate) fn new(
        opts: SlurmOptions,
        run_id: &str,
        runner: Runner,
        on_wait: WaitReport,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> SlurmHost {
        SlurmHost {
            opts,
            run_id: run_id.to_string(),
            current: Arc::default(),
            last: Default::default(),
            handed_out: Default::default(),
            open_jobs: Arc::default(),
            on_wait,
            stop,
            launches: Default::default(),
            runner,
            binary: Mutex::new(None),
            journal: std::sync::OnceLock::new(),
        }
    }

    /// Records every job submitted from now on with `journal`.
    pub(crate) fn set_journal(&self, journal: Journal) {
        let _ = self.journal.set(journal);
    }

    /// Where Slurm's commands run for `opts`: this machine, or its login node, connected
    /// (host key checked, never prompting).
    pub(crate) async fn runner_for(opts: &SlurmOptions) -> Result<Runner, HostError> {
        match &opts.login {
            None => Ok(Runner::Local),
            Some(login) => {
                let spec = servebench_model::spec::types::HostSpec::Ssh(login.clone());
                let target = super::remote::ssh_target(&spec)?.ok_or_else(|| {
                    HostError::Unsupported("host.slurm.login names no SSH host".into())
                })?;
                let ssh = super::ssh::SshHost::connect(&target).await?;
                Ok(Runner::Login(Arc::new(ssh)))
            }
        }
    }

    /// servebench's binary as the steps run it: through a login node, a copy there (once
    /// per content hash, as for an SSH host); else `SERVEBENCH_HOST_BINARY` or this one (the
    /// nodes must see it at the same path: a shared file system).
    async fn binary(&self) -> Result<String, HostError> {
        let mut cached = self.binary.lock().await;
        if let Some(b) = &*cached {
            return Ok(b.clone());
        }
        let local = host_binary()?;
        let b = match &self.runner {
            Runner::Local => local,
            Runner::Login(ssh) => ssh.ensure_binary(std::path::Path::new(&local)).await?.path,
        };
        *cached = Some(b.clone());
        Ok(b)
    }

    /// Checks that Slurm's commands are here and slurmctld answers (before anything runs).
    pub(crate) async fn check(&self) -> Result<(), HostError> {
        cli::run(
            &self.runner,
            "squeue",
            &["--noheader".into(), "--jobs=0".into()],
        )
        .await
        .map(|_| ())
        .or_else(|e| match e {
            // `--jobs=0` names no job: slurmctld answered.
            SlurmError::Failed { ref stderr, .. } if stderr.contains("Invalid job id") => Ok(()),
            e => Err(e),
        })
        .map_err(HostError::from)
    }

    /// `sbatch` arguments for an allocation named `name`: the spec's options, then its extra
    /// arguments, then a batch script that only holds the allocation (a constant: nothing the
    /// spec says is run by a shell).
    pub(crate) fn sbatch_args(opts: &SlurmOptions, name: &str) -> Vec<String> {
        let mut a = vec![
            "--parsable".to_string(),
            format!("--job-name={name}"),
            format!("--nodes={}", opts.nodes),
            "--ntasks-per-node=1".into(),
            "--output=/dev/null".into(),
        ];
        let mut opt = |flag: &str, v: &Option<String>| {
            if let Some(v) = v {
                a.push(format!("--{flag}={v}"));
            }
        };
        opt("partition", &opts.partition);
        opt("time", &opts.time);
        opt("account", &opts.account);
        opt("qos", &opts.qos);
        opt("constraint", &opts.constraint);
        if let Some(g) = opts.gpus_per_node {
            a.push(format!("--gpus-per-node={g}"));
        }
        // The job only holds the allocation: it gets PATH (to find `sleep`) and Slurm's own
        // variables, never the runner's environment (its secrets would sit in slurmctld's
        // job state). The servers' steps get theirs from `srun`.
        a.push("--export=PATH".into());
        a.extend(opts.sbatch.iter().cloned());
        a.push("--wrap=exec sleep infinity".into());
        a
    }

    /// The allocation for `group`: the current one while it runs (a relaunch, or the run's
    /// one allocation), else a new job, waited for until it runs.
    async fn allocation(&self, group: &str) -> Result<Allocation, HostError> {
        let owner = match self.opts.allocation {
            SlurmAllocation::Group => group.to_string(),
            SlurmAllocation::Run => "run".to_string(),
        };
        let mut current = self.current.lock().await;
        if let Some(a) = current.as_ref() {
            let alive = matches!(cli::job(&self.runner, a.job.job_id).await?, Some(j) if j.state == "RUNNING");
            if a.owner == owner && alive {
                return Ok(a.clone());
            }
            // Another group's, or ended: it is not this launch's to use.
            let old = a.job.job_id;
            release(&self.runner, old, &self.open_jobs).await;
            *current = None;
        }
        let name = format!("servebench-{}-{owner}", self.run_id);
        let out = cli::run(
            &self.runner,
            "sbatch",
            &Self::sbatch_args(&self.opts, &name),
        )
        .await?;
        let job_id = cli::parse_job_id(&out).ok_or_else(|| SlurmError::Unreadable {
            command: "sbatch --parsable".into(),
            text: out.clone(),
        })?;
        self.open_jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(job_id);
        if let Some(journal) = self.journal.get() {
            journal(&servebench_model::results::meta::SubmittedJob {
                group: owner.clone(),
                job_id,
                job_name: name.clone(),
                login: self.runner.login_name(),
            });
        }
        (self.on_wait)(&format!("{group}: submitted Slurm job {job_id} ({name})"));
        let info = match self.wait_running(group, job_id).await {
            Ok(info) => info,
            Err(e) => {
                release(&self.runner, job_id, &self.open_jobs).await;
                return Err(e);
            }
        };
        let node_list = info.node_list.clone().unwrap_or_default();
        let nodes = cli::hostnames(&self.runner, &node_list).await?;
        if nodes.is_empty() {
            return Err(SlurmError::Unreadable {
                command: format!("scontrol show hostnames {node_list}"),
                text: String::new(),
            }
            .into());
        }
        let mut addrs = Vec::with_capacity(nodes.len());
        for node in &nodes {
            addrs.push(cli::node_addr(&self.runner, node).await?);
        }
        let job = SlurmJob {
            job_id,
            job_name: name,
            step: None,
            partition: info.partition.clone(),
            node_list: info.node_list.clone(),
            nodes,
            queued_s: info.queued_s(),
            state: Some(info.state.clone()),
            reason: info.reason.clone(),
            exit_code: None,
            accounting: None,
            ended: false,
            login: self.runner.login_name(),
        };
        let a = Allocation { job, owner, addrs };
        *current = Some(a.clone());
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(a.clone());
        Ok(a)
    }

    /// Waits until `job_id` runs, telling each new state and reason; cancels nothing itself.
    async fn wait_running(&self, group: &str, job_id: u64) -> Result<cli::JobInfo, HostError> {
        let since = Instant::now();
        let mut said = String::new();
        let mut stop = self.stop.clone();
        loop {
            if *stop.borrow() {
                return Err(HostError::Interrupted);
            }
            match cli::job(&self.runner, job_id).await? {
                Some(j) if j.state == "RUNNING" => {
                    (self.on_wait)(&format!(
                        "{group}: Slurm job {job_id} running on {} after {} in the queue",
                        j.node_list.as_deref().unwrap_or("?"),
                        servebench_model::text::duration(since.elapsed().as_secs_f64())
                    ));
                    return Ok(j);
                }
                Some(j) if j.is_active() => {
                    let now = format!(
                        "{group}: Slurm job {job_id} {}{}",
                        j.state.to_lowercase(),
                        j.reason
                            .as_ref()
                            .map(|r| format!(" ({r})"))
                            .unwrap_or_default()
                    );
                    if now != said {
                        (self.on_wait)(&now);
                        said = now;
                    }
                }
                Some(j) => {
                    return Err(HostError::Unsupported(format!(
                        "Slurm job {job_id} ended before it started: {}{}",
                        j.state,
                        j.reason.map(|r| format!(" ({r})")).unwrap_or_default()
                    )));
                }
                None => {
                    return Err(HostError::Unsupported(format!(
                        "Slurm job {job_id} left the queue before it started"
                    )));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(QUEUE_POLL) => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// The `srun` command line that runs `argv` as a step of the current allocation on its
    /// node `node` (rank 0's is the first). `overlap`: share the resources another step holds
    /// (the agent next to the server, ranks that share a node).
    #[allow(clippy::too_many_arguments)]
    fn step_argv(
        job: &SlurmJob,
        node: &str,
        step_name: &str,
        overlap: bool,
        workdir: Option<&str>,
        gpus_per_node: Option<u32>,
        argv: &[String],
    ) -> Vec<String> {
        let mut a = vec![
            format!("--jobid={}", job.job_id),
            format!("--job-name={step_name}"),
            "--nodes=1".to_string(),
            "--ntasks=1".into(),
            format!("--nodelist={node}"),
            "--kill-on-bad-exit=1".into(),
        ];
        if overlap {
            a.push("--overlap".into());
        }
        if let Some(d) = workdir {
            a.push(format!("--chdir={d}"));
        }
        if let Some(g) = gpus_per_node.filter(|_| !overlap) {
            a.push(format!("--gpus-per-node={g}"));
        }
        a.push("--".into());
        a.extend(argv.iter().cloned());
        a
    }

    /// `srun` for servebench's measuring agent next to rank 0 in the current allocation, with
    /// its input and output piped to this process. None before an allocation runs.
    pub(crate) async fn agent_command(
        &self,
        heartbeat_ms: &str,
    ) -> Option<tokio::process::Command> {
        let a = self.current.lock().await.clone()?;
        let bin = self.binary().await.ok()?;
        let args = Self::step_argv(
            &a.job,
            a.job.nodes.first().map_or("", String::as_str),
            &format!("servebench-agent-{}", self.run_id),
            true,
            None,
            None,
            &[
                bin,
                "agent".into(),
                "--heartbeat-ms".into(),
                heartbeat_ms.into(),
            ],
        );
        let mut cmd = self.runner.command("srun", &args).ok()?;
        cmd.process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
                Ok(())
            });
        }
        Some(tokio::process::Command::from(cmd))
    }
}

impl Drop for SlurmHost {
    fn drop(&mut self) {
        // Nothing this run submitted may outlive it (an error path, a panic).
        let open = std::mem::take(&mut *self.open_jobs.lock().unwrap_or_else(|e| e.into_inner()));
        for job in open {
            cli::cancel_blocking(&self.runner, &job.to_string());
        }
    }
}

/// Cancels `job` and waits (up to [`RELEASE_WAIT`]) until it leaves the running states; true
/// once it has.
async fn release(runner: &Runner, job: u64, open: &std::sync::Mutex<Vec<u64>>) -> bool {
    let _ = cli::cancel(runner, &job.to_string(), None).await;
    let deadline = Instant::now() + RELEASE_WAIT;
    loop {
        match cli::job(runner, job).await {
            Ok(Some(j)) if j.is_active() && Instant::now() < deadline => {}
            Ok(Some(j)) if j.is_active() => return false,
            Ok(_) => break,
            Err(_) if Instant::now() < deadline => {}
            Err(_) => return false,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    open.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|j| *j != job);
    true
}

/// servebench's binary as the nodes run it: `SERVEBENCH_HOST_BINARY`, else this one (the
/// nodes must see it at the same path: a shared file system).
fn host_binary() -> Result<String, HostError> {
    match std::env::var_os("SERVEBENCH_HOST_BINARY") {
        Some(p) => Ok(PathBuf::from(p).to_string_lossy().into_owned()),
        None => std::env::current_exe()
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| HostError::io("cannot find servebench's own binary", e)),
    }
}

/// What a server's step on this machine's `srun` exports (`--export=NAMES`, the values from
/// srun's environment, never on its command line): the runner's variables but for secrets
/// (a secret's name, or a value the run's redactor hides: a `${NAME}` reference's target),
/// plus the server's own (`env`, expanded). Returns the names, and the runner's variables
/// left out (removed from srun's environment too).
fn step_environment(env: &indexmap::IndexMap<String, String>) -> (Vec<String>, Vec<String>) {
    let redactor = servebench_model::redact::current();
    let secret_values = redactor.secrets();
    let mut names = Vec::new();
    let mut left_out = Vec::new();
    for (k, v) in std::env::vars_os() {
        let (Some(k), v) = (k.to_str(), v.to_string_lossy()) else {
            continue;
        };
        if k.is_empty() || k.contains([',', '=']) || env.contains_key(k) {
            continue;
        }
        let secret = servebench_model::redact::is_secret(k, &v)
            || k == servebench_model::redact::ENV_VAR
            || secret_values.iter().any(|s| v.contains(s.as_str()));
        if secret {
            left_out.push(k.to_string());
        } else {
            names.push(k.to_string());
        }
    }
    names.extend(env.keys().filter(|k| !k.contains(',')).cloned());
    names.sort();
    names.dedup();
    (names, left_out)
}

/// Run by the login node's shell before `srun`: exports each `NAME=value` line of its stdin,
/// then runs its arguments. A constant: the values are data it reads, never shell text.
const EXPORT_STDIN: &str = "while IFS= read -r kv; do export \"$kv\"; done; exec \"$@\"";

/// The environment as `NAME=value` lines for [`EXPORT_STDIN`]; a value with a line break
/// cannot pass that way and is refused.
fn env_lines(env: &indexmap::IndexMap<String, String>) -> Result<String, HostError> {
    let mut text = String::new();
    for (k, v) in env {
        if k.contains(['\n', '=']) || v.contains('\n') || k.is_empty() {
            return Err(HostError::Unsupported(format!(
                "the environment variable {k:?} cannot be passed through a login node: names and values must be one line (names without `=`)"
            )));
        }
        text.push_str(&format!("{k}={v}\n"));
    }
    Ok(text)
}

/// Spawns the `srun` of [`SlurmHost::srun_command`]: its output copied, redacted, into the
/// log at `log_path`, and `env` written to its stdin where it reads the environment there.
fn start_step(
    mut cmd: std::process::Command,
    log_path: &std::path::Path,
    env: &indexmap::IndexMap<String, String>,
) -> Result<std::process::Child, HostError> {
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|e| HostError::io(format!("cannot open {}", log_path.display()), e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| HostError::io("cannot share the log file", e))?;
    let mut child = cmd.spawn().map_err(|e| {
        HostError::from(SlurmError::Missing {
            program: "srun".into(),
            source: e,
        })
    })?;
    let redactor = servebench_model::redact::current();
    for (from, to) in [
        (
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            log,
        ),
        (
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
            log_err,
        ),
    ] {
        if let Some(from) = from {
            let redactor = redactor.clone();
            std::thread::spawn(move || super::supervise::copy_lines(from, to, &redactor));
        }
    }
    if let Some(mut stdin) = child.stdin.take() {
        let text = env_lines(env)?;
        // A few lines: they fit the pipe's buffer, so this never waits on the remote side.
        std::io::Write::write_all(&mut stdin, text.as_bytes())
            .map_err(|e| HostError::io("cannot pass the environment to the login node", e))?;
    }
    Ok(child)
}

/// How long a port picked on a node stays reserved for the launch it was picked for.
const PORT_HOLD: Duration = Duration::from_secs(120);

impl SlurmHost {
    /// The allocation `group`'s launch uses: got (and waited for) by rank 0's launch.
    async fn current_allocation(&self) -> Result<Allocation, HostError> {
        self.current.lock().await.clone().ok_or_else(|| {
            HostError::Unsupported(
                "no Slurm allocation is running for this launch (rank 0 gets it first)".into(),
            )
        })
    }

    /// A port on the node rank `rank` runs on: `wanted` once that node says it is free,
    /// else one the node picks. Asked on the node itself (a step of `servebench port`, which
    /// shares the allocation's resources), since the node's ports are not this machine's.
    async fn pick_port_on(&self, rank: u32, wanted: Option<u16>) -> Result<u16, HostError> {
        let alloc = self.current_allocation().await?;
        let (node, _) = alloc.node_of(&self.opts, rank)?;
        let bin = self.binary().await?;
        for _ in 0..8 {
            let mut argv = vec![bin.clone(), "port".to_string()];
            if let Some(p) = wanted {
                argv.push(format!("--wanted={p}"));
            }
            let args = Self::step_argv(
                &alloc.job,
                node,
                &format!("servebench-port-{}", self.run_id),
                true,
                None,
                None,
                &argv,
            );
            let out = cli::output(&self.runner, "srun", &args).await?;
            let text = String::from_utf8_lossy(&out.stdout);
            let port = text
                .trim()
                .lines()
                .last()
                .and_then(|l| l.trim().parse().ok());
            let port = match (port, wanted) {
                (Some(p), _) => p,
                (None, Some(p)) if out.status.code() == Some(crate::host::PORT_TAKEN_EXIT) => {
                    return Err(HostError::PortInUse {
                        port: p,
                        host: node.to_string(),
                    });
                }
                (None, _) => {
                    return Err(SlurmError::Unreadable {
                        command: format!("srun ... {bin} port (on {node})"),
                        text: format!(
                            "{}{}",
                            text.trim(),
                            String::from_utf8_lossy(&out.stderr).trim()
                        ),
                    }
                    .into());
                }
            };
            let mut book = self.handed_out.lock().unwrap_or_else(|e| e.into_inner());
            book.retain(|(_, _, at)| at.elapsed() < PORT_HOLD);
            let taken = book.iter().any(|(n, p, _)| n == node && *p == port);
            if taken && wanted.is_none() {
                // Handed to another rank on this node moments ago, not bound yet: ask again.
                continue;
            }
            book.push((node.to_string(), port, Instant::now()));
            return Ok(port);
        }
        Err(HostError::Unsupported(format!(
            "{node} kept offering ports already handed out to this launch"
        )))
    }

    /// Starts rank `rank` of a server (0 for a single one) as a step on its node.
    async fn spawn_rank(
        &self,
        spawn: Spawn<'_>,
        rank: u32,
    ) -> Result<Box<dyn ServerProcess>, HostError> {
        // A member of a group (a deployment's `g1.worker0`) runs in its group's allocation;
        // the group's own process (the router, rank 0) holds it and releases it.
        let (owner, member) = match spawn.group.split_once('.') {
            Some((g, _)) => (g, true),
            None => (spawn.group, false),
        };
        let alloc = if rank == 0 {
            self.allocation(owner).await?
        } else {
            self.current_allocation().await?
        };
        let (node, addr) = alloc.node_of(&self.opts, rank)?;
        let n = self
            .launches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let step_name = format!("servebench-{}-{}-{n}", self.run_id, spawn.group);
        // Ranks that share a node share its resources, as do a deployment's processes; each
        // takes its own otherwise.
        let shared_node = self.opts.ranks_per_node > 1 || spawn.shared;
        let args = Self::step_argv(
            &alloc.job,
            node,
            &step_name,
            shared_node,
            spawn.workdir,
            self.opts.gpus_per_node,
            &spawn.command.argv(),
        );
        let cmd = self.srun_command(args, spawn.env)?;
        let child = start_step(cmd, spawn.log_path, spawn.env)?;
        let pid = child.id() as i32;
        let mut server = SlurmServer {
            child,
            pid,
            // srun leads its own process group on this machine.
            ids: ProcessRecord {
                pid: Some(pid),
                pgid: Some(pid),
                leader_start: super::procfs::proc_stat(pid).map(|p| p.start_ticks),
                boot_id: super::procfs::boot_id(),
                ..ProcessRecord::default()
            },
            job: alloc.job.clone(),
            step_name,
            // Rank 0 holds the allocation; the other ranks' steps end with it.
            release_job: rank == 0 && !member && self.opts.allocation == SlurmAllocation::Group,
            current: self.current.clone(),
            open_jobs: self.open_jobs.clone(),
            runner: self.runner.clone(),
            url: format!("http://{addr}:{}", spawn.port),
            host_url: format!(
                "http://{}:{}",
                crate::host::remote::url_host(spawn.bind),
                spawn.port
            ),
            log_path: spawn.log_path.to_path_buf(),
            last_look: None,
        };
        server.find_step().await;
        Ok(Box::new(server) as Box<dyn ServerProcess>)
    }

    /// The `srun` command that starts a step with `args`, run where Slurm's commands run,
    /// with `env` passed the way that place allows; its output is piped (see [`start_step`]).
    fn srun_command(
        &self,
        mut args: Vec<String>,
        env: &indexmap::IndexMap<String, String>,
    ) -> Result<std::process::Command, HostError> {
        let mut cmd = match &self.runner {
            Runner::Local => {
                let (names, left_out) = step_environment(env);
                let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
                args.insert(at, format!("--export={}", names.join(",")));
                let mut cmd = self.runner.command("srun", &args)?;
                for name in &left_out {
                    cmd.env_remove(name);
                }
                cmd.envs(env).stdin(std::process::Stdio::null());
                cmd
            }
            // ssh carries no environment: the variables (secrets among them) go through
            // ssh's stdin, never onto a command line, and a fixed script exports them.
            Runner::Login(_) => {
                let mut argv = vec![
                    "-c".to_string(),
                    EXPORT_STDIN.into(),
                    "sh".into(),
                    "srun".into(),
                ];
                argv.extend(args);
                let mut cmd = self.runner.command("sh", &argv)?;
                cmd.stdin(std::process::Stdio::piped());
                cmd
            }
        };
        // The step's output reaches the log through this process, line by line, with the
        // run's secrets hidden (SGLang logs its `server_args`, API key included).
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        // srun passes the SIGTERM it gets when the runner dies on to the step's tasks.
        unsafe {
            cmd.pre_exec(|| {
                let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
                Ok(())
            });
        }
        Ok(cmd)
    }

    /// Runs `argv` inside the running allocation as a step on rank 0's node (where the
    /// server's files are), beside the server's step: `servebench-<what>-<run id>`, what
    /// `srun` gave back, or why it did not run.
    async fn step_on_rank0(
        &self,
        what: &str,
        argv: &[String],
    ) -> Result<std::process::Output, HostError> {
        let a = self
            .current
            .lock()
            .await
            .clone()
            .ok_or_else(|| HostError::NoAllocation {
                what: what.to_string(),
            })?;
        let args = Self::step_argv(
            &a.job,
            a.job.nodes.first().map_or("", String::as_str),
            &format!("servebench-{what}-{}", self.run_id),
            true,
            None,
            None,
            argv,
        );
        Ok(cli::output(&self.runner, "srun", &args).await?)
    }

    /// The address of the node rank `rank` runs on, once the allocation runs.
    fn address_of(&self, rank: u32) -> String {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .and_then(|a| {
                a.node_of(&self.opts, rank)
                    .ok()
                    .map(|(_, addr)| addr.to_string())
            })
            .unwrap_or_else(|| "127.0.0.1".into())
    }

    /// One [`Host`](super::Host) per rank of a `nodes`-rank server: rank `i` on the
    /// allocation's node `i` (`ranks_per_node` to a node).
    pub(crate) fn ranks(self: &Arc<Self>, nodes: u32) -> Vec<Arc<dyn super::Host>> {
        (0..nodes)
            .map(|rank| {
                Arc::new(SlurmRank {
                    cluster: self.clone(),
                    rank,
                }) as Arc<dyn super::Host>
            })
            .collect()
    }
}

impl super::Host for SlurmHost {
    fn name(&self) -> String {
        match &self.opts.partition {
            Some(p) => format!("slurm:{p}"),
            None => "slurm".into(),
        }
    }

    fn prepare<'a>(&'a self, group: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        Box::pin(async move { self.allocation(group).await.map(|_| ()) })
    }

    fn pick_port(&self, wanted: Option<u16>) -> BoxFuture<'_, Result<u16, HostError>> {
        Box::pin(self.pick_port_on(0, wanted))
    }

    fn servebench_binary(&self) -> BoxFuture<'_, Result<String, HostError>> {
        Box::pin(self.binary())
    }

    fn spawn<'a>(
        &'a self,
        spawn: Spawn<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn ServerProcess>, HostError>> {
        Box::pin(self.spawn_rank(spawn, 0))
    }

    fn stop_leftover<'a>(
        &'a self,
        id: &'a super::GroupIdentity,
        grace: Duration,
    ) -> BoxFuture<'a, Leftover> {
        // The srun a dead runner left is a local process group.
        super::Host::stop_leftover(&super::local::LocalHost, id, grace)
    }

    fn port_in_use(&self, port: u16) -> BoxFuture<'_, Result<bool, HostError>> {
        Box::pin(async move { Ok(super::port_in_use(port)) })
    }

    fn check_link(&self) -> BoxFuture<'_, Result<(), HostError>> {
        Box::pin(async move { self.check().await })
    }

    fn address(&self) -> String {
        self.address_of(0)
    }

    /// Read inside the allocation, on rank 0's node (where the model path is the server's),
    /// as a step that overlaps the server's.
    fn read_small_file<'a>(
        &'a self,
        path: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, HostError>> {
        Box::pin(async move {
            let out = self
                .step_on_rank0("read", &super::small_file::argv(path, limit))
                .await?;
            Ok(super::small_file::from_output(&out, limit)?)
        })
    }

    /// Read inside the allocation, on rank 0's node, as a step beside the server's.
    fn facts_after_launch(&self) -> BoxFuture<'_, Option<serde_json::Value>> {
        Box::pin(async move {
            let script: Vec<String> = ["sh", "-c", crate::host::ssh::FACTS, "sh", "false", "5"]
                .into_iter()
                .map(String::from)
                .collect();
            let out = self.step_on_rank0("facts", &script).await.ok()?;
            serde_json::to_value(crate::host::ssh::parse_facts(&String::from_utf8_lossy(
                &out.stdout,
            )))
            .ok()
        })
    }

    /// Listed inside the allocation, on rank 0's node, like [`read_small_file`](Self::read_small_file).
    fn list_files<'a>(
        &'a self,
        dir: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, HostError>> {
        Box::pin(async move {
            let out = self
                .step_on_rank0("list", &super::small_file::list_argv(dir, max))
                .await?;
            Ok(super::small_file::parse_listing(&out)?)
        })
    }
}

/// Rank `rank` of a multi-node server on a Slurm cluster: a step on the allocation's node
/// for that rank. Rank 0 gets the allocation (in [`prepare`](super::Host::prepare)); the
/// others launch into it.
pub(crate) struct SlurmRank {
    cluster: Arc<SlurmHost>,
    rank: u32,
}

impl super::Host for SlurmRank {
    fn name(&self) -> String {
        format!(
            "{} rank {}",
            super::Host::name(self.cluster.as_ref()),
            self.rank
        )
    }

    fn prepare<'a>(&'a self, group: &'a str) -> BoxFuture<'a, Result<(), HostError>> {
        if self.rank == 0 {
            super::Host::prepare(self.cluster.as_ref(), group)
        } else {
            Box::pin(async { Ok(()) })
        }
    }

    fn pick_port(&self, wanted: Option<u16>) -> BoxFuture<'_, Result<u16, HostError>> {
        Box::pin(self.cluster.pick_port_on(self.rank, wanted))
    }

    fn servebench_binary(&self) -> BoxFuture<'_, Result<String, HostError>> {
        Box::pin(self.cluster.binary())
    }

    fn spawn<'a>(
        &'a self,
        spawn: Spawn<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn ServerProcess>, HostError>> {
        Box::pin(self.cluster.spawn_rank(spawn, self.rank))
    }

    fn stop_leftover<'a>(
        &'a self,
        id: &'a super::GroupIdentity,
        grace: Duration,
    ) -> BoxFuture<'a, Leftover> {
        super::Host::stop_leftover(self.cluster.as_ref(), id, grace)
    }

    fn port_in_use(&self, port: u16) -> BoxFuture<'_, Result<bool, HostError>> {
        super::Host::port_in_use(self.cluster.as_ref(), port)
    }

    fn check_link(&self) -> BoxFuture<'_, Result<(), HostError>> {
        super::Host::check_link(self.cluster.as_ref())
    }

    fn address(&self) -> String {
        self.cluster.address_of(self.rank)
    }

    fn read_small_file<'a>(
        &'a self,
        path: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, HostError>> {
        super::Host::read_small_file(self.cluster.as_ref(), path, limit)
    }

    fn list_files<'a>(
        &'a self,
        dir: &'a str,
        max: usize,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, HostError>> {
        super::Host::list_files(self.cluster.as_ref(), dir, max)
    }
}

/// A server running as a step of a Slurm job, through the `srun` child that launched it.
pub(crate) struct SlurmServer {
    child: std::process::Child,
    pid: i32,
    ids: ProcessRecord,
    /// The job's record, kept up to date (step, state, exit code).
    job: SlurmJob,
    step_name: String,
    /// One job per group: stopping the server releases the allocation.
    release_job: bool,
    current: Arc<Mutex<Option<Allocation>>>,
    open_jobs: Arc<std::sync::Mutex<Vec<u64>>>,
    /// Where Slurm's commands run (the step is stopped with `scancel` there).
    runner: Runner,
    url: String,
    host_url: String,
    log_path: PathBuf,
    /// When the job's state was last asked (see [`ServerProcess::exited`]).
    last_look: Option<Instant>,
}

/// How often a running server's job is asked whether Slurm still runs it: srun itself may
/// take a while to notice a cancelled or timed-out job (it waits for the step's I/O).
const JOB_LOOK_EVERY: Duration = Duration::from_millis(500);

impl SlurmServer {
    /// Finds the step's id by its name (srun does not print it), while srun runs.
    async fn find_step(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.job.step.is_none() && Instant::now() < deadline {
            if let Ok(steps) = cli::steps(&self.runner, self.job.job_id).await
                && let Some((id, _)) = steps.iter().find(|(_, n)| *n == self.step_name)
            {
                self.job.step = Some(id.clone());
                return;
            }
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn srun_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// The job's state now, recorded on the job (from accounting when the cluster keeps it).
    async fn refresh(&mut self) -> Option<String> {
        if let Some((state, code)) = cli::sacct_state(&self.runner, self.job.job_id).await {
            self.job.state = Some(state.clone());
            self.job.exit_code = code;
            self.job.accounting = Some("sacct".into());
            // sacct may lag behind slurmctld: a job it still calls running is asked again.
            if !cli::is_active_state(&state) {
                return Some(state);
            }
        }
        match cli::job(&self.runner, self.job.job_id).await {
            Ok(Some(j)) => {
                self.job.state = Some(j.state.clone());
                self.job.reason = j.reason.clone();
                self.job.exit_code = j.exit_code.clone();
                self.job.accounting = Some("scontrol".into());
                Some(j.state)
            }
            _ => self.job.state.clone(),
        }
    }

    /// Waits up to `wait` for srun to exit.
    async fn srun_gone_within(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while !self.srun_exited() {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        true
    }

    async fn step_gone(&self) -> bool {
        match &self.job.step {
            Some(step) => match cli::steps(&self.runner, self.job.job_id).await {
                Ok(steps) => !steps.iter().any(|(id, _)| id == step),
                Err(_) => false,
            },
            None => true,
        }
    }
}

impl ServerProcess for SlurmServer {
    fn url(&self) -> &str {
        &self.url
    }

    fn host_url(&self) -> Option<&str> {
        Some(&self.host_url)
    }

    fn ids(&self) -> ProcessRecord {
        self.ids.clone()
    }

    fn exited(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            if self.srun_exited() {
                return true;
            }
            if self.last_look.is_some_and(|t| t.elapsed() < JOB_LOOK_EVERY) {
                return false;
            }
            self.last_look = Some(Instant::now());
            // Slurm ended the job (a time limit, a cancel, a failed node): the server is
            // gone even while srun still waits for the step's output.
            match cli::job(&self.runner, self.job.job_id).await {
                Ok(Some(j)) => !j.is_active(),
                Ok(None) => true,
                // Slurm not answering is not an end: the next look decides.
                Err(_) => false,
            }
        })
    }

    fn sync_log(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn log_display(&self) -> String {
        format!(
            "{} (the output of Slurm step {})",
            self.log_path.display(),
            self.job.step.as_deref().unwrap_or(&self.step_name)
        )
    }

    fn poll_interval(&self) -> Duration {
        Duration::from_millis(100)
    }

    fn log_lag(&self) -> Duration {
        // The step's output comes through slurmstepd and srun, line by line.
        Duration::from_millis(250)
    }

    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Stopped> {
        Box::pin(async move {
            let target = self.job.step.clone();
            let outcome = if self.srun_exited() {
                format!(
                    "Slurm step {} had ended",
                    target.as_deref().unwrap_or("(unknown)")
                )
            } else {
                // TERM to the step's tasks (through scancel, or through srun, which passes it
                // on), the grace period, then the step cancelled outright.
                let termed = match &target {
                    Some(step) => cli::cancel(&self.runner, step, Some("TERM")).await.is_ok(),
                    None => false,
                };
                if !termed {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(self.pid),
                        nix::sys::signal::Signal::SIGTERM,
                    );
                }
                if self.srun_gone_within(grace).await {
                    format!(
                        "Slurm step {} stopped with SIGTERM",
                        target.as_deref().unwrap_or("(unknown)")
                    )
                } else {
                    if let Some(step) = &target {
                        let _ = cli::cancel(&self.runner, step, None).await;
                    }
                    if !self.srun_gone_within(Duration::from_secs(30)).await {
                        let _ = self.child.kill();
                    }
                    format!(
                        "Slurm step {} cancelled after the grace period",
                        target.as_deref().unwrap_or("(unknown)")
                    )
                }
            };
            let _ = self.child.wait();
            let mut gone = self.step_gone().await;
            let mut outcome = outcome;
            if self.release_job {
                let released = release(&self.runner, self.job.job_id, &self.open_jobs).await;
                gone &= released;
                let mut current = self.current.lock().await;
                if current
                    .as_ref()
                    .is_some_and(|a| a.job.job_id == self.job.job_id)
                {
                    *current = None;
                }
                outcome.push_str(&format!(
                    "; Slurm job {} {}",
                    self.job.job_id,
                    if released {
                        "released"
                    } else {
                        "STILL IN THE QUEUE"
                    }
                ));
                self.job.ended = released;
            }
            self.refresh().await;
            Stopped {
                outcome,
                pgid: self.pid,
                gone,
            }
        })
    }

    fn slurm_job(&self) -> Option<SlurmJob> {
        Some(self.job.clone())
    }

    fn host_failure(&mut self) -> BoxFuture<'_, Option<Failure>> {
        Box::pin(async move {
            let state = self.refresh().await;
            let tail = super::file_tail(&self.log_path, 20_000);
            cli::failure_of(state.as_deref(), &tail)
        })
    }
}

impl Drop for SlurmServer {
    fn drop(&mut self) {
        if !self.srun_exited() {
            if let Some(step) = &self.job.step {
                cli::cancel_blocking(&self.runner, step);
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> SlurmOptions {
        serde_json::from_value(serde_json::json!({})).unwrap()
    }

    #[test]
    fn sbatch_gets_each_option_as_its_own_argument() {
        let mut o = opts();
        o.partition = Some("gpu".into());
        o.nodes = 2;
        o.gpus_per_node = Some(8);
        o.time = Some("1:00:00".into());
        o.account = Some("proj; rm -rf /".into());
        o.sbatch = vec!["--exclusive".into(), "--mem=0".into()];
        let a = SlurmHost::sbatch_args(&o, "servebench-x-g1");
        assert_eq!(
            a,
            [
                "--parsable",
                "--job-name=servebench-x-g1",
                "--nodes=2",
                "--ntasks-per-node=1",
                "--output=/dev/null",
                "--partition=gpu",
                "--time=1:00:00",
                "--account=proj; rm -rf /",
                "--gpus-per-node=8",
                "--export=PATH",
                "--exclusive",
                "--mem=0",
                "--wrap=exec sleep infinity",
            ]
        );
    }

    #[test]
    fn the_environment_reaches_a_login_nodes_srun_as_data_never_as_shell_text() {
        let mut env = indexmap::IndexMap::new();
        env.insert(
            "HF_TOKEN".to_string(),
            "a'b $(touch /tmp/x) `y` \"z\"".to_string(),
        );
        env.insert("EMPTY".to_string(), String::new());
        let text = env_lines(&env).unwrap();
        // The script as the login node's shell runs it, with `env` in place of srun.
        let mut child = std::process::Command::new("sh")
            .args(["-c", EXPORT_STDIN, "sh", "env"])
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let got = String::from_utf8_lossy(&out.stdout);
        assert!(
            got.lines()
                .any(|l| l == "HF_TOKEN=a'b $(touch /tmp/x) `y` \"z\""),
            "{got}"
        );
        assert!(got.lines().any(|l| l == "EMPTY="), "{got}");
        env.insert("BAD".into(), "two\nlines".into());
        let e = env_lines(&env).unwrap_err().to_string();
        assert!(e.contains("\"BAD\"") && e.contains("one line"), "{e}");
    }

    #[test]
    fn the_step_runs_the_engines_argv_after_a_double_dash() {
        let job = SlurmJob {
            job_id: 12,
            nodes: vec!["gpu01".into(), "gpu02".into()],
            ..Default::default()
        };
        let a = SlurmHost::step_argv(
            &job,
            "gpu01",
            "s",
            false,
            Some("/w"),
            Some(8),
            &["python".into(), "--flag=$(x)".into()],
        );
        assert_eq!(
            a,
            [
                "--jobid=12",
                "--job-name=s",
                "--nodes=1",
                "--ntasks=1",
                "--nodelist=gpu01",
                "--kill-on-bad-exit=1",
                "--chdir=/w",
                "--gpus-per-node=8",
                "--",
                "python",
                "--flag=$(x)",
            ]
        );
    }
}
