//! A multi-node server (`server.nodes: N`) as one [`ServerProcess`]: N ranks, one per host,
//! started together (each rank's command from the engine's rank model, `engine::ranks`),
//! then watched and stopped together as a [`MultiProcessServer`]. Rank 0 serves
//! HTTP; each rank logs to its own file in the run directory (`server-g1.log` for rank 0,
//! `server-g1.rank1.log` for rank 1, ...).

use std::path::{Path, PathBuf};

use crate::engine::ranks::{Rendezvous, rank_commands};
use crate::host::{Host, HostError, ServerProcess, Spawn};
use servebench_model::results::meta::RankLaunch;
use servebench_model::secrets;
use servebench_model::spec::types::Server;

use super::process_group::{
    Member, MultiProcessServer, Shape, enough_hosts, member_log_path, servebench_on, stop_members,
};
use super::server_error::{STOP_GRACE, ServerError};

/// The log of rank `rank` (from 1) beside rank 0's `log`: `server-g1.rank1.log`.
pub(crate) fn rank_log_path(log: &Path, rank: u32) -> PathBuf {
    member_log_path(log, &format!("rank{rank}"))
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
    enough_hosts("server.nodes", nodes, hosts.len())?;
    let mut ports = Vec::with_capacity(nodes);
    let mut bins = Vec::with_capacity(nodes);
    for (i, host) in hosts.iter().take(nodes).enumerate() {
        ports.push(
            host.pick_port(if i == 0 { server.port } else { None })
                .await?,
        );
        bins.push(servebench_on(*host, server).await?);
    }
    let rendezvous = Rendezvous {
        host: server
            .dist_init_host
            .clone()
            .unwrap_or_else(|| hosts[0].address()),
        port: hosts[0].pick_port(None).await?,
    };
    let mut ranks: Vec<Member> = Vec::with_capacity(nodes);
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
                stop_members(&mut ranks, STOP_GRACE).await;
                return Err(ServerError::Spawn(HostError::Unsupported(format!(
                    "rank {i} of {nodes} on {}: {e}",
                    hosts[i].name()
                ))));
            }
        };
        if i == 0 {
            rank0 = Some(secrets::redact_argv(&cmd.argv()));
        } else {
            records.push(RankLaunch {
                rank: i as u32,
                command: Some(secrets::redact_argv(&cmd.argv())),
                process: process.ids(),
                port: Some(ports[i]),
                log_file: rank_log
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned()),
                ..Default::default()
            });
        }
        ranks.push(Member {
            name: format!("rank {i}"),
            host: hosts[i].name(),
            process,
            log_path: rank_log,
        });
    }
    Ok(LaunchedRanks {
        process: Box::new(MultiProcessServer::new(
            ranks,
            Shape::Ranks {
                engine: server.engine,
            },
        )),
        command: rank0.unwrap_or_default(),
        port: ports[0],
        records,
    })
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
