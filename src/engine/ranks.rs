//! The rank model of a multi-node server (`server.nodes: N`): which command line each of the
//! N ranks gets. The same ranks are started over SSH (`run`) and as Slurm job steps, so this
//! is the one place that knows each engine's multi-node flags.
//!
//! - SGLang: the same command on every node plus `--nnodes N --node-rank I --dist-init-addr
//!   HOST:PORT`; only rank 0 serves the API, ranks from 1 answer `/health` on their own port
//!   with a dummy server (docs/reference/sglang-extra.md, "Multi-node").
//! - vLLM (native multiprocessing backend): `--nnodes N --node-rank I --master-addr HOST
//!   --master-port PORT`; ranks from 1 add `--headless` and serve no HTTP
//!   (docs/reference/vllm-facts.md §10).
//!
//! The simulator takes the same flags (`sim::ranks`), so a spec runs unchanged against it.

use super::{LaunchCommand, LaunchError, adapter, effective_args, launch_command};
use servebench_model::spec::types::{Engine, Server};

/// Flags the rank model sets itself: refused in `server.args` of a multi-node server.
pub(crate) const RANK_FLAGS: &[&str] = &[
    "nnodes",
    "node-rank",
    "dist-init-addr",
    "nccl-init-addr",
    "master-addr",
    "master-port",
    "headless",
];

/// Where the ranks meet: rank 0's host as the others reach it, and a port free there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rendezvous {
    pub host: String,
    pub port: u16,
}

impl Rendezvous {
    /// `HOST:PORT` (IPv6 hosts in brackets).
    pub(crate) fn addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One rank's launch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RankCommand {
    /// 0 serves the API.
    pub rank: u32,
    pub command: LaunchCommand,
    /// True when the rank listens on its `--port` (SGLang's ranks from 1 answer `/health`
    /// there; vLLM's headless ranks do not listen at all).
    pub listens: bool,
}

/// Why ranks cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum RankError {
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(
        "server.nodes: {engine} has no multi-node launch servebench knows; use engine sglang or vllm (or their simulators)"
    )]
    Unsupported { engine: String },
    #[error(
        "server.args.{0} is set by servebench for a multi-node server (server.nodes): remove it"
    )]
    Reserved(String),
    #[error("server.nodes is {nodes} but {ports} ports were given, one per rank is needed")]
    Ports { nodes: u32, ports: usize },
}

/// Which flag family a server's ranks take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RankFlavour {
    /// `--nnodes --node-rank --dist-init-addr`.
    Sglang,
    /// `--nnodes --node-rank --master-addr --master-port [--headless]`.
    Vllm,
}

/// The flavour of `server`'s ranks, or why it has none.
pub(crate) fn flavour(server: &Server) -> Result<RankFlavour, RankError> {
    match server.engine {
        Engine::Sim | Engine::Sglang => Ok(RankFlavour::Sglang),
        Engine::Vllm => Ok(RankFlavour::Vllm),
        other => Err(RankError::Unsupported {
            engine: adapter(other).display.to_string(),
        }),
    }
}

/// The command of every rank, rank 0 first. `ports[i]` is the port rank `i` listens on, on
/// its own host (for rank 0 the API's port).
pub(crate) fn rank_commands(
    server: &Server,
    self_exe: &str,
    ports: &[u16],
    rendezvous: &Rendezvous,
) -> Result<Vec<RankCommand>, RankError> {
    let nodes = server.node_count();
    if ports.len() != nodes as usize {
        return Err(RankError::Ports {
            nodes,
            ports: ports.len(),
        });
    }
    let flavour = flavour(server)?;
    if let Some(k) = effective_args(server)
        .keys()
        .map(|k| k.trim_start_matches('-'))
        .find(|k| RANK_FLAGS.contains(k))
    {
        return Err(RankError::Reserved(k.to_string()));
    }
    (0..nodes)
        .map(|rank| {
            let mut command = launch_command(server, self_exe, ports[rank as usize])?;
            let n = nodes.to_string();
            let r = rank.to_string();
            match flavour {
                RankFlavour::Sglang => command.args.extend([
                    "--nnodes".into(),
                    n,
                    "--node-rank".into(),
                    r,
                    "--dist-init-addr".into(),
                    rendezvous.addr(),
                ]),
                RankFlavour::Vllm => {
                    command.args.extend([
                        "--nnodes".into(),
                        n,
                        "--node-rank".into(),
                        r,
                        "--master-addr".into(),
                        rendezvous.host.clone(),
                        "--master-port".into(),
                        rendezvous.port.to_string(),
                    ]);
                    if rank > 0 {
                        command.args.push("--headless".into());
                    }
                }
            }
            Ok(RankCommand {
                rank,
                command,
                listens: rank == 0 || flavour == RankFlavour::Sglang,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(yaml: &str) -> Server {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn rdv() -> Rendezvous {
        Rendezvous {
            host: "gpu-a".into(),
            port: 5000,
        }
    }

    #[test]
    fn sglang_ranks_share_one_init_address() {
        let s = server("engine: sglang\nmodel: m\nnodes: 2\nargs: { tp-size: 16 }\n");
        let ranks = rank_commands(&s, "sb", &[30000, 30001], &rdv()).unwrap();
        assert_eq!(ranks.len(), 2);
        assert_eq!(
            ranks[1].command.argv().join(" "),
            "python -m sglang.launch_server --model-path m --host 127.0.0.1 --port 30001 \
             --tp-size 16 --nnodes 2 --node-rank 1 --dist-init-addr gpu-a:5000"
        );
        assert!(ranks[0].command.args.ends_with(&[
            "--node-rank".into(),
            "0".into(),
            "--dist-init-addr".into(),
            "gpu-a:5000".into()
        ]));
        assert!(ranks.iter().all(|r| r.listens));
    }

    #[test]
    fn vllm_ranks_from_one_are_headless() {
        let s = server("engine: vllm\nmodel: m\nnodes: 3\n");
        let ranks = rank_commands(&s, "sb", &[8000, 8001, 8002], &rdv()).unwrap();
        assert_eq!(
            ranks[2].command.argv().join(" "),
            "vllm serve m --host 127.0.0.1 --port 8002 --nnodes 3 --node-rank 2 \
             --master-addr gpu-a --master-port 5000 --headless"
        );
        assert!(!ranks[0].command.args.contains(&"--headless".to_string()));
        assert_eq!(
            ranks.iter().map(|r| r.listens).collect::<Vec<_>>(),
            [true, false, false]
        );
    }

    #[test]
    fn the_simulator_takes_its_engines_flags() {
        let s = server("engine: vllm\nsimulate: true\nmodel: m\nnodes: 2\n");
        let ranks = rank_commands(&s, "/bin/sb", &[1, 2], &rdv()).unwrap();
        assert_eq!(ranks[1].command.program, "/bin/sb");
        assert_eq!(ranks[1].command.args[..3], ["sim", "--api", "vllm"]);
        assert!(ranks[1].command.args.contains(&"--headless".to_string()));
    }

    #[test]
    fn what_cannot_be_ranked_says_why() {
        let s = server("engine: llama.cpp\nmodel: m\nnodes: 2\n");
        assert!(matches!(
            rank_commands(&s, "sb", &[1, 2], &rdv()),
            Err(RankError::Unsupported { .. })
        ));
        let s = server("engine: sglang\nmodel: m\nnodes: 2\nargs: { node-rank: 1 }\n");
        assert_eq!(
            rank_commands(&s, "sb", &[1, 2], &rdv()),
            Err(RankError::Reserved("node-rank".into()))
        );
        let s = server("engine: sglang\nmodel: m\nnodes: 2\n");
        assert!(matches!(
            rank_commands(&s, "sb", &[1], &rdv()),
            Err(RankError::Ports { .. })
        ));
        let v6 = Rendezvous {
            host: "::1".into(),
            port: 7,
        };
        assert_eq!(v6.addr(), "[::1]:7");
    }
}
