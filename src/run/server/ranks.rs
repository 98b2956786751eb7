//! A multi-node server (`server.nodes: N`) as one [`ServerProcess`]: N ranks, one per host,
//! started together (each rank's command from the engine's rank model, `engine::ranks`),
//! watched together (any rank's exit is the server's), and stopped together. Rank 0 serves
//! HTTP; each rank logs to its own file in the run directory (`server-g1.log` for rank 0,
//! `server-g1.rank1.log` for rank 1, ...).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::catalog::Failure;
use crate::engine::ranks::{Rendezvous, rank_commands};
use crate::host::{FailedRank, Host, HostError, ProcessIds, ServerProcess, Spawn, Stopped};
use crate::results::meta::RankLaunch;
use crate::secrets;
use crate::spec::types::{Engine, Server};

use super::server_error::{STOP_GRACE, ServerError};

/// How long the ranks that lost a silent rank get to say so in their logs.
const LOSS_WORDS_WAIT: Duration = Duration::from_secs(3);

/// One launched rank.
struct Rank {
    rank: u32,
    host: String,
    process: Box<dyn ServerProcess>,
    log_path: PathBuf,
}

/// The grace the other ranks get when one lost a process mid-point.
const LOST_RANK_GRACE: Duration = Duration::from_secs(2);

/// The ranks of one server, rank 0 first.
pub(crate) struct RankedProcess {
    ranks: Vec<Rank>,
    engine: Engine,
    /// Ranks seen exited, in the order they were seen.
    exited: Vec<usize>,
}

/// The log of rank `rank` (from 1) beside rank 0's `log`: `server-g1.rank1.log`.
pub(crate) fn rank_log_path(log: &Path, rank: u32) -> PathBuf {
    let stem = log
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "server".into());
    log.with_file_name(format!("{stem}.rank{rank}.log"))
}

/// What a launch of ranks produced.
pub(crate) struct LaunchedRanks {
    pub process: Box<dyn ServerProcess>,
    /// Rank 0's command and port (the launch's own record).
    pub command: Vec<String>,
    pub port: u16,
    /// Ranks from 1, for meta.json and `servebench down`.
    pub records: Vec<RankLaunch>,
}

/// Starts the ranks of `server` (secrets expanded) on `hosts` (rank `i` on `hosts[i]`). A rank
/// that cannot be started stops the ones already started.
pub(crate) async fn spawn_ranks(
    group: &str,
    server: &Server,
    hosts: &[&dyn Host],
    log_path: &Path,
) -> Result<LaunchedRanks, ServerError> {
    let nodes = server.node_count() as usize;
    if hosts.len() < nodes {
        return Err(ServerError::Config(format!(
            "server.nodes is {nodes} but only {} host(s) are free for it: list at least {nodes} hosts in `hosts:`",
            hosts.len()
        )));
    }
    let simulated = server.engine == Engine::Sim || server.simulate;
    let mut ports = Vec::with_capacity(nodes);
    let mut bins = Vec::with_capacity(nodes);
    for (i, host) in hosts.iter().take(nodes).enumerate() {
        ports.push(
            host.pick_port(if i == 0 { server.port } else { None })
                .await?,
        );
        bins.push(if simulated && server.launcher.is_none() {
            host.servebench_binary().await?
        } else {
            "servebench".to_string()
        });
    }
    let rendezvous = Rendezvous {
        host: server
            .dist_init_host
            .clone()
            .unwrap_or_else(|| hosts[0].address()),
        port: hosts[0].pick_port(None).await?,
    };
    let mut ranks: Vec<Rank> = Vec::with_capacity(nodes);
    let mut records = Vec::new();
    let mut rank0 = None;
    for i in 0..nodes {
        let commands = rank_commands(server, &bins[i], &ports, &rendezvous)
            .map_err(|e| ServerError::Config(e.to_string()))?;
        let cmd = &commands[i].command;
        let rank_log = if i == 0 {
            log_path.to_path_buf()
        } else {
            rank_log_path(log_path, i as u32)
        };
        // Files on the host are named by the group: one name per rank, as two ranks may
        // share a machine.
        let file_group = if i == 0 {
            group.to_string()
        } else {
            format!("{group}.rank{i}")
        };
        let spawned = hosts[i]
            .spawn(Spawn {
                group: &file_group,
                command: cmd,
                env: &server.env,
                workdir: server.workdir.as_deref(),
                log_path: &rank_log,
                port: ports[i],
                bind: "127.0.0.1",
                shared: false,
            })
            .await;
        let process = match spawned {
            Ok(p) => p,
            Err(e) => {
                stop_all(&mut ranks, STOP_GRACE).await;
                return Err(ServerError::Spawn(HostError::Unsupported(format!(
                    "rank {i} of {nodes} on {}: {e}",
                    hosts[i].name()
                ))));
            }
        };
        let ids = process.ids();
        if i == 0 {
            rank0 = Some(secrets::redact_argv(&cmd.argv()));
        } else {
            records.push(RankLaunch {
                rank: i as u32,
                host: ids.host.clone(),
                command: Some(secrets::redact_argv(&cmd.argv())),
                pgid: Some(ids.pgid),
                pid: Some(ids.pid),
                leader_start: ids.leader_start,
                boot_id: ids.boot_id.clone(),
                port: Some(ports[i]),
                log_file: rank_log
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned()),
                remote_log: ids.remote_log.clone(),
                stopped: false,
                ..Default::default()
            });
        }
        ranks.push(Rank {
            rank: i as u32,
            host: hosts[i].name(),
            process,
            log_path: rank_log,
        });
    }
    Ok(LaunchedRanks {
        process: Box::new(RankedProcess {
            ranks,
            engine: server.engine,
            exited: Vec::new(),
        }),
        command: rank0.unwrap_or_default(),
        port: ports[0],
        records,
    })
}

async fn stop_all(ranks: &mut [Rank], grace: Duration) -> Vec<Stopped> {
    futures_util::future::join_all(ranks.iter_mut().map(|r| r.process.stop(grace))).await
}

impl RankedProcess {
    /// True when every rank seen exited says in its log that it lost a peer.
    fn only_followers_exited(&self) -> bool {
        self.exited.iter().all(|&i| {
            crate::engine::classify(
                self.engine,
                &crate::host::file_tail(&self.ranks[i].log_path, 20_000),
            ) == Failure::RankLost
        })
    }

    /// The ranks' records after a stop, with `stopped` set from how each went.
    fn first_failed(&self) -> Option<&Rank> {
        // The rank whose own log does not say it lost a peer is the one that failed; the
        // others only followed it. Failing that, the first seen exited.
        self.exited
            .iter()
            .map(|&i| &self.ranks[i])
            .find(|r| {
                crate::engine::classify(self.engine, &crate::host::file_tail(&r.log_path, 20_000))
                    != Failure::RankLost
            })
            .or_else(|| self.exited.first().map(|&i| &self.ranks[i]))
    }
}

impl ServerProcess for RankedProcess {
    fn url(&self) -> &str {
        self.ranks[0].process.url()
    }

    fn host_url(&self) -> Option<&str> {
        self.ranks[0].process.host_url()
    }

    fn ids(&self) -> ProcessIds {
        self.ranks[0].process.ids()
    }

    fn exited(&mut self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            for i in 0..self.ranks.len() {
                if !self.exited.contains(&i) && self.ranks[i].process.exited().await {
                    self.exited.push(i);
                }
            }
            if !self.exited.is_empty() {
                // The logs decide which rank failed first: bring them all up to date.
                self.sync_log().await;
                // Ranks that only lost a peer follow the one that failed, and may be seen
                // gone first (a Slurm step's end takes a while to reach its srun): the failed
                // one gets a moment to be seen too, so the failure is pinned on it.
                let deadline = std::time::Instant::now() + LOSS_WORDS_WAIT;
                while self.exited.len() < self.ranks.len()
                    && self.only_followers_exited()
                    && std::time::Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    for i in 0..self.ranks.len() {
                        if !self.exited.contains(&i) && self.ranks[i].process.exited().await {
                            self.exited.push(i);
                        }
                    }
                    self.sync_log().await;
                }
            }
            !self.exited.is_empty()
        })
    }

    fn sync_log(&self) -> BoxFuture<'_, ()> {
        super::process_group::sync_all(self.ranks.iter().map(|r| r.process.as_ref()))
    }

    fn log_display(&self) -> String {
        match self.first_failed() {
            Some(r) if r.rank > 0 => r.process.log_display(),
            _ => self.ranks[0].process.log_display(),
        }
    }

    fn poll_interval(&self) -> Duration {
        super::process_group::poll_interval(self.ranks.iter().map(|r| r.process.as_ref()))
    }

    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, Stopped> {
        Box::pin(async move {
            let all = stop_all(&mut self.ranks, grace).await;
            let named: Vec<(String, Stopped)> = all
                .into_iter()
                .enumerate()
                .map(|(i, s)| (format!("rank {i}"), s))
                .collect();
            super::process_group::stopped_together(&named)
        })
    }

    fn slurm_job(&self) -> Option<crate::results::meta::SlurmJob> {
        // Rank 0's step holds the allocation.
        self.ranks[0].process.slurm_job()
    }

    fn host_failure(&mut self) -> BoxFuture<'_, Option<Failure>> {
        Box::pin(async move {
            let i = self.first_failed().map(|r| r.rank as usize)?;
            if let Some(f) = self.ranks[i].process.host_failure().await {
                return Some(f);
            }
            // A rank that died without a word (killed, its node gone) is known by what the
            // others say: they lost it.
            let own = crate::engine::classify(
                self.engine,
                &crate::host::file_tail(&self.ranks[i].log_path, 20_000),
            );
            if own != Failure::Unknown {
                return None;
            }
            // The others' words may still be on their way (a Slurm step's output passes
            // through slurmstepd and srun): they get a moment to arrive.
            let deadline = std::time::Instant::now() + LOSS_WORDS_WAIT;
            loop {
                self.sync_log().await;
                let others_lost_it = self.ranks.iter().any(|r| {
                    crate::engine::classify(
                        self.engine,
                        &crate::host::file_tail(&r.log_path, 20_000),
                    ) == Failure::RankLost
                });
                if others_lost_it {
                    return Some(Failure::RankLost);
                }
                if std::time::Instant::now() >= deadline {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    fn lost_process(&mut self) -> BoxFuture<'_, Option<String>> {
        // One rank short, the others wait on it forever (a collective never completes): all go.
        Box::pin(async move {
            for i in 0..self.ranks.len() {
                if let Some(what) = self.ranks[i].process.lost_process().await {
                    for r in &mut self.ranks {
                        r.process.stop(LOST_RANK_GRACE).await;
                    }
                    return Some(format!("rank {}: {what}", self.ranks[i].rank));
                }
            }
            None
        })
    }

    fn failed_rank(&self) -> Option<FailedRank> {
        let r = self.first_failed()?;
        Some(FailedRank {
            rank: r.rank,
            of: self.ranks.len() as u32,
            host: r.host.clone(),
            log_path: r.log_path.clone(),
            name: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_logs_sit_beside_rank_zeros() {
        assert_eq!(
            rank_log_path(Path::new("/runs/x/server-g1.log"), 2),
            Path::new("/runs/x/server-g1.rank2.log")
        );
    }
}
