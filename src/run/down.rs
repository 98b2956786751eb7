//! `servebench down RUN_DIR`: stops the servers a crashed or killed runner left behind, from
//! the process groups recorded in meta.json, through the same [`Host`] interface that launched
//! them (this machine, or the SSH host), and cancels the Slurm jobs it left in the queue.

use std::path::Path;

use crate::host::local::LocalHost;
use crate::host::remote::RemoteHost;
use crate::host::{GroupIdentity, Host, HostError, Leftover};
use servebench_model::results::meta::ServerLaunch;
use servebench_model::results::rundir::{RunDir, RunDirError};

use super::server::STOP_GRACE;

/// Why `down` could not look at the run at all.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DownError {
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error("cannot reach the run's host: {0}")]
    Host(#[from] HostError),
    #[error("cannot write meta.json: {0}")]
    Write(#[source] std::io::Error),
}

/// What `down` did to one recorded launch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DownLine {
    /// The server group (`g1`).
    pub group: String,
    pub what: Leftover,
    /// The sentence printed for it.
    pub text: String,
}

impl DownLine {
    /// True when something may still be running: a stop that was not confirmed, or a host
    /// that could not be asked.
    pub(crate) fn left_running(&self) -> bool {
        matches!(
            self.what,
            Leftover::Stopped { gone: false, .. } | Leftover::Unknown(_)
        )
    }
}

/// What `down` found and did, one line per recorded launch.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct DownReport {
    pub lines: Vec<DownLine>,
}

impl DownReport {
    /// True when every recorded server is confirmed gone (or was never ours).
    pub(crate) fn all_clear(&self) -> bool {
        !self.lines.iter().any(DownLine::left_running)
    }
}

/// Stops every recorded server group still alive and records it in meta.json.
pub(crate) async fn down(dir: &Path) -> Result<DownReport, DownError> {
    let run_dir = RunDir::open(dir)?;
    // A live runner stops its own servers: `down` is for what a dead one left.
    run_dir.lock()?;
    let mut meta = run_dir.read_meta()?;
    let mut report = DownReport::default();
    let mut hosts = Hosts::new(meta.experiment.pool());
    for s in meta.servers.iter_mut() {
        let program = program_name(&s.command).unwrap_or_default();
        let Some(id) = GroupIdentity::recorded(&s.process, program.clone()) else {
            continue;
        };
        let pgid = id.pgid;
        // The other ranks of a multi-node server first: rank 0 is the one they follow.
        for r in s.ranks.iter_mut() {
            // A deployment's worker runs its own program (the router is the launch).
            let rank_program = program_name(&r.command).unwrap_or_else(|| program.clone());
            let Some(rank_id) = GroupIdentity::recorded(&r.process, rank_program) else {
                continue;
            };
            let rank_pgid = rank_id.pgid;
            let host = hosts.get(r.process.host.as_deref()).await?;
            let what = host.stop_leftover(&rank_id, STOP_GRACE).await;
            if matches!(
                what,
                Leftover::AlreadyGone | Leftover::Stopped { gone: true, .. }
            ) {
                r.stopped = true;
            }
            let text = format!(
                "{}: {}",
                r.name.clone().unwrap_or_else(|| format!("rank {}", r.rank)),
                leftover_words(&what, rank_pgid, r.process.host.as_deref())
            );
            report.lines.push(DownLine {
                group: s.group.clone(),
                what,
                text,
            });
        }
        let host = hosts.get(s.process.host.as_deref()).await?;
        let what = host.stop_leftover(&id, STOP_GRACE).await;
        let mut text = describe(s, &what, pgid, host);
        if let Some(port) = s.port {
            text.push_str(&port_note(host, port, &what).await);
        }
        report.lines.push(DownLine {
            group: s.group.clone(),
            what,
            text,
        });
    }
    let submitted = run_dir.read_slurm_jobs()?;
    cancel_slurm_jobs(&mut meta.servers, &submitted, &mut report, &hosts.specs).await;
    run_dir.write_meta(&meta).map_err(DownError::Write)?;
    Ok(report)
}

/// Where the run's Slurm commands ran: this machine (`login` None), or the login node the
/// run recorded, connected as the spec's `host.slurm.login` says (its key, its known_hosts).
async fn slurm_runner(
    login: Option<&str>,
    specs: &[servebench_model::spec::types::HostSpec],
) -> Result<crate::host::slurm::Runner, HostError> {
    use servebench_model::spec::types::HostSpec;
    let Some(name) = login else {
        return Ok(crate::host::slurm::Runner::Local);
    };
    let opts = specs
        .iter()
        .filter_map(HostSpec::slurm)
        .find(|o| {
            o.login
                .as_ref()
                .is_some_and(|l| spec_name(&HostSpec::Ssh(l.clone())).as_deref() == Some(name))
        })
        .ok_or_else(|| {
            HostError::Unsupported(format!(
                "the run's spec names no Slurm login node {name} (host.slurm.login)"
            ))
        })?;
    crate::host::slurm::SlurmHost::runner_for(opts).await
}

/// Cancels each recorded Slurm job that is still in the queue (once per job: a run's one
/// allocation serves several launches), on the login node the run used, and records that on
/// its launches: the launches' jobs, then the jobs submitted that no launch names (a runner
/// that died while its job waited in the queue).
async fn cancel_slurm_jobs(
    servers: &mut [ServerLaunch],
    submitted: &[servebench_model::results::meta::SubmittedJob],
    report: &mut DownReport,
    specs: &[servebench_model::spec::types::HostSpec],
) {
    use crate::host::slurm::cli;
    let mut seen = std::collections::HashSet::new();
    let mut runners: Vec<(Option<String>, cli::Runner)> = Vec::new();
    let jobs: Vec<(String, u64, Option<String>)> = servers
        .iter()
        .filter_map(|s| {
            let j = s.slurm.as_ref()?;
            Some((s.group.clone(), j.job_id, j.login.clone()))
        })
        .chain(
            submitted
                .iter()
                .map(|j| (j.group.clone(), j.job_id, j.login.clone())),
        )
        .collect();
    for (group, id, login) in jobs {
        if !seen.insert(id) {
            continue;
        }
        let job = servebench_model::results::meta::SlurmJob {
            job_id: id,
            login,
            ..Default::default()
        };
        let runner = match runners.iter().find(|(l, _)| *l == job.login) {
            Some((_, r)) => r.clone(),
            None => match slurm_runner(job.login.as_deref(), specs).await {
                Ok(r) => {
                    runners.push((job.login.clone(), r.clone()));
                    r
                }
                Err(e) => {
                    let text = format!("cannot reach Slurm to cancel job {id}: {e}");
                    report.lines.push(DownLine {
                        group: group.clone(),
                        what: Leftover::Unknown(text.clone()),
                        text,
                    });
                    continue;
                }
            },
        };
        let (what, text) = match cli::job(&runner, id).await {
            Ok(Some(j)) if j.is_active() => {
                let cancelled = cli::cancel(&runner, &id.to_string(), None).await;
                let gone = wait_job_gone(&runner, id).await;
                let text = match cancelled {
                    Ok(()) => format!(
                        "Slurm job {id} ({}) cancelled by servebench down; {}",
                        j.state,
                        if gone {
                            "it has left the queue"
                        } else {
                            "it is STILL IN THE QUEUE"
                        }
                    ),
                    Err(e) => format!("cannot cancel Slurm job {id}: {e}"),
                };
                (
                    Leftover::Stopped {
                        killed: false,
                        gone,
                    },
                    text,
                )
            }
            Ok(Some(j)) => (
                Leftover::AlreadyGone,
                format!("Slurm job {id} has already ended ({})", j.state),
            ),
            Ok(None) => (
                Leftover::AlreadyGone,
                format!("Slurm job {id} is no longer in the queue"),
            ),
            Err(e) => (
                Leftover::Unknown(format!("cannot ask Slurm about job {id}: {e}")),
                format!("cannot ask Slurm about job {id}: {e}"),
            ),
        };
        let ended = !matches!(
            what,
            Leftover::Unknown(_) | Leftover::Stopped { gone: false, .. }
        );
        for s in servers.iter_mut() {
            if let Some(sj) = s.slurm.as_mut().filter(|sj| sj.job_id == id) {
                sj.ended = ended;
            }
        }
        report.lines.push(DownLine { group, what, text });
    }
}

/// Waits up to a minute for a cancelled job to leave the running states.
async fn wait_job_gone(runner: &crate::host::slurm::Runner, id: u64) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        match crate::host::slurm::cli::job(runner, id).await {
            Ok(Some(j)) if j.is_active() => {}
            Ok(_) => return true,
            Err(_) => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    false
}

/// The run's hosts, reached on first use: recorded launches name their SSH host
/// (`user@host:port`), found among the spec's `host` or `hosts`.
struct Hosts {
    specs: Vec<servebench_model::spec::types::HostSpec>,
    reached: Vec<(String, RemoteHost)>,
}

impl Hosts {
    fn new(specs: Vec<servebench_model::spec::types::HostSpec>) -> Hosts {
        Hosts {
            specs,
            reached: Vec::new(),
        }
    }

    /// This machine for `None`, else the SSH host recorded as `name`.
    async fn get(&mut self, name: Option<&str>) -> Result<&dyn Host, DownError> {
        let Some(name) = name else {
            return Ok(&LocalHost);
        };
        if let Some(i) = self.reached.iter().position(|(n, _)| n == name) {
            return Ok(&self.reached[i].1);
        }
        let remote = self
            .specs
            .iter()
            .filter(|s| !s.is_local())
            .find(|s| spec_name(s).as_deref() == Some(name));
        // A run recorded before pools named no other host than its one `host`.
        let spec = match remote {
            Some(s) => s.clone(),
            None => self
                .specs
                .iter()
                .find(|s| !s.is_local())
                .cloned()
                .ok_or_else(|| {
                    HostError::Unsupported(format!("the run's spec names no SSH host {name}"))
                })?,
        };
        let host = RemoteHost::reach(&spec).await?;
        self.reached.push((name.to_string(), host));
        Ok(&self.reached.last().expect("pushed above").1)
    }
}

/// The name an SSH host spec connects as (`user@host:port`), as launches record it.
fn spec_name(spec: &servebench_model::spec::types::HostSpec) -> Option<String> {
    let t = crate::host::remote::ssh_target(spec).ok()??;
    Some(t.resolved().map_or_else(|_| t.display(), |r| r.display()))
}

/// A leftover in words (for ranks, which have no record of their own to update).
fn leftover_words(what: &Leftover, pgid: i32, host: Option<&str>) -> String {
    let on = host.map(|h| format!(" on {h}")).unwrap_or_default();
    match what {
        Leftover::AlreadyGone => format!("process group {pgid}{on} is already gone"),
        Leftover::Reused { why } => {
            format!("process group {pgid}{on} is not the server's any more, left alone: {why}")
        }
        Leftover::Unknown(why) => why.clone(),
        Leftover::Stopped { killed, gone } => format!(
            "stopped by servebench down ({}); process group {pgid}{on} {}",
            if *killed { "SIGKILL" } else { "SIGTERM" },
            if *gone {
                "confirmed gone"
            } else {
                "STILL ALIVE"
            }
        ),
    }
}

/// The sentence for a launch, recording the outcome on it.
fn describe(s: &mut ServerLaunch, what: &Leftover, pgid: i32, host: &dyn Host) -> String {
    let on = match &s.process.host {
        Some(_) => format!(" on {}", host.name()),
        None => String::new(),
    };
    match what {
        Leftover::AlreadyGone => {
            s.stopped = true;
            format!("process group {pgid}{on} is already gone")
        }
        Leftover::Reused { why } => {
            format!("process group {pgid}{on} is not the server's any more, left alone: {why}")
        }
        Leftover::Unknown(why) => why.clone(),
        Leftover::Stopped { killed, gone } => {
            s.stopped = *gone;
            let note = format!(
                "stopped by servebench down ({}); process group {pgid} {}",
                if *killed { "SIGKILL" } else { "SIGTERM" },
                if *gone {
                    "confirmed gone"
                } else {
                    "STILL ALIVE"
                }
            );
            s.outcome = Some(match s.outcome.take() {
                Some(prev) => format!("{prev}; {note}"),
                None => note.clone(),
            });
            note
        }
    }
}

/// What the server's port says after `down`: free, or still taken by something that is not
/// the recorded server (whose group is gone). Nothing when the host cannot tell.
async fn port_note(host: &dyn Host, port: u16, what: &Leftover) -> String {
    match (what, host.port_in_use(port).await) {
        (Leftover::AlreadyGone | Leftover::Stopped { gone: true, .. }, Ok(false)) => {
            format!("; port {port} is free")
        }
        (Leftover::AlreadyGone | Leftover::Stopped { gone: true, .. }, Ok(true)) => format!(
            "; port {port} is in use, but not by this run's server (its process group is gone)"
        ),
        _ => String::new(),
    }
}

/// The launched program's file name (`servebench`, `python`, ...), from the recorded command.
fn program_name(command: &Option<Vec<String>>) -> Option<String> {
    let program = command.as_ref()?.first()?;
    Some(program.rsplit('/').next().unwrap_or(program).to_string())
}
