//! Multi-node ranks, as the engines run them: `--nnodes N --node-rank I --dist-init-addr
//! HOST:PORT` (SGLang) or `--nnodes N --node-rank I --master-addr HOST --master-port PORT
//! [--headless]` (vLLM). The ranks rendezvous over a real TCP connection at the init address
//! (rank 0 listens there, like torch's TCPStore); rank 0 serves HTTP only once every rank has
//! joined; a rank whose peer goes away logs gloo's `Connection closed by peer` and exits 1,
//! so the others end when rank 0 dies and rank 0 ends when another rank dies.
//!
//! The wire is one line each way: a rank sends `servebench-sim rank I of N`, rank 0 answers
//! `go` once all have joined. Then the connections stay open, carrying nothing: their end is
//! the signal.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::log::SimLog;

/// Longest handshake line read from a peer.
const LINE_BUDGET: usize = 128;
/// How long ranks wait for each other when no `--dist-timeout` is given.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// A rank's place in a multi-node server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RankArgs {
    pub nnodes: u32,
    pub rank: u32,
    /// Rank 0's `HOST:PORT`.
    pub init_addr: String,
    /// vLLM's `--headless`: no HTTP at all on ranks from 1.
    pub headless: bool,
    pub timeout: Duration,
}

/// Bad multi-node flags (exit 2, like argparse).
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum RankArgError {
    #[error("--node-rank {rank} is out of range for --nnodes {nnodes} (0 to {})", .nnodes - 1)]
    RankRange { rank: i64, nnodes: i64 },
    #[error("--nnodes {0} must be at least 1")]
    Nodes(i64),
    #[error("--nnodes {0} needs {1}: where rank 0 waits for the others")]
    NoInitAddr(u32, &'static str),
    #[error("argument {flag}: invalid int value: {value:?}")]
    BadInt { flag: String, value: String },
    #[error("argument {0}: expected one argument")]
    Missing(String),
}

impl RankArgs {
    /// From SGLang's parsed flags; None for a single-node server.
    pub(crate) fn from_sglang(
        nnodes: Option<i64>,
        rank: Option<i64>,
        init_addr: Option<&str>,
        timeout_s: Option<i64>,
    ) -> Result<Option<RankArgs>, RankArgError> {
        let nnodes = nnodes.unwrap_or(1);
        let rank = rank.unwrap_or(0);
        Self::checked(
            nnodes,
            rank,
            init_addr.map(str::to_string),
            false,
            timeout_s,
            "--dist-init-addr",
        )
    }

    fn checked(
        nnodes: i64,
        rank: i64,
        init_addr: Option<String>,
        headless: bool,
        timeout_s: Option<i64>,
        addr_flag: &'static str,
    ) -> Result<Option<RankArgs>, RankArgError> {
        if nnodes < 1 {
            return Err(RankArgError::Nodes(nnodes));
        }
        if rank < 0 || rank >= nnodes {
            return Err(RankArgError::RankRange { rank, nnodes });
        }
        if nnodes == 1 {
            return Ok(None);
        }
        let nnodes = nnodes as u32;
        let init_addr = init_addr.ok_or(RankArgError::NoInitAddr(nnodes, addr_flag))?;
        Ok(Some(RankArgs {
            nnodes,
            rank: rank as u32,
            init_addr,
            headless,
            timeout: timeout_s
                .filter(|s| *s > 0)
                .map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs(s as u64)),
        }))
    }

    /// Takes vLLM's multi-node flags out of `args` (the rest goes to vLLM's parser); None and
    /// `args` untouched for a single-node server. vLLM's own default `--master-addr` is
    /// 127.0.0.1 and `--master-port` 29501.
    pub(crate) fn take_vllm(args: &mut Vec<String>) -> Result<Option<RankArgs>, RankArgError> {
        let mut kept = Vec::with_capacity(args.len());
        let (mut nnodes, mut rank, mut addr, mut port, mut headless) =
            (None, None, None, None, false);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let (name, inline) = match a.split_once('=') {
                Some((n, v)) if n.starts_with('-') => (n, Some(v.to_string())),
                _ => (a.as_str(), None),
            };
            let name = name.replace('_', "-");
            let slot = match name.as_str() {
                "--nnodes" | "-n" => &mut nnodes,
                "--node-rank" | "-r" => &mut rank,
                "--master-addr" => &mut addr,
                "--master-port" => &mut port,
                "--headless" => {
                    headless = true;
                    continue;
                }
                _ => {
                    kept.push(a.clone());
                    continue;
                }
            };
            let value = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| RankArgError::Missing(name.clone()))?,
            };
            *slot = Some((name, value));
        }
        let int = |v: &Option<(String, String)>, default: i64| match v {
            None => Ok(default),
            Some((flag, value)) => value
                .trim()
                .parse::<i64>()
                .map_err(|_| RankArgError::BadInt {
                    flag: flag.clone(),
                    value: value.clone(),
                }),
        };
        let n = int(&nnodes, 1)?;
        if n <= 1 {
            // Not multi-node: `--headless` belongs to data parallelism, left to vLLM's parser.
            return Ok(None);
        }
        let r = int(&rank, 0)?;
        let p = int(&port, 29501)?;
        let host = addr.map_or("127.0.0.1".to_string(), |(_, v)| v);
        let parsed = Self::checked(
            n,
            r,
            Some(format!("{host}:{p}")),
            headless,
            None,
            "--master-addr",
        )?;
        *args = kept;
        Ok(parsed)
    }
}

/// How the rendezvous ended for this rank.
pub(crate) enum Joined {
    /// Rank 0: one connection per other rank, by rank.
    Leader(BTreeMap<u32, TcpStream>),
    /// Another rank: its connection to rank 0.
    Follower(TcpStream),
}

/// Why the rendezvous failed (logged as torch does, then exit 1).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RendezvousError {
    #[error(
        "torch.distributed.DistStoreError: Timed out after {} seconds waiting for clients. {joined}/{nnodes} clients joined.",
        .waited.as_secs()
    )]
    Timeout {
        waited: Duration,
        joined: u32,
        nnodes: u32,
    },
    #[error(
        "torch.distributed.DistNetworkError: The client socket has timed out after {}s while trying to connect to ({addr}).",
        .waited.as_secs()
    )]
    ConnectTimeout { waited: Duration, addr: String },
    #[error(
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: {addr}: {source}"
    )]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("RuntimeError: rank 0 at {addr} refused this rank: {reply}")]
    Refused { addr: String, reply: String },
}

/// Meets the other ranks at the init address.
pub(crate) async fn rendezvous(r: &RankArgs, log: &SimLog) -> Result<Joined, RendezvousError> {
    if r.rank == 0 {
        lead(r, log).await.map(Joined::Leader)
    } else {
        follow(r, log).await.map(Joined::Follower)
    }
}

async fn lead(r: &RankArgs, log: &SimLog) -> Result<BTreeMap<u32, TcpStream>, RendezvousError> {
    let listener =
        TcpListener::bind(&r.init_addr)
            .await
            .map_err(|source| RendezvousError::Listen {
                addr: r.init_addr.clone(),
                source,
            })?;
    log.info(&format!(
        "node_rank 0 of {}: waiting for {} more rank(s) at {}",
        r.nnodes,
        r.nnodes - 1,
        r.init_addr
    ));
    let deadline = tokio::time::Instant::now() + r.timeout;
    let mut peers: BTreeMap<u32, TcpStream> = BTreeMap::new();
    while peers.len() < (r.nnodes - 1) as usize {
        let accepted = tokio::time::timeout_at(deadline, listener.accept()).await;
        let Ok(accepted) = accepted else {
            return Err(RendezvousError::Timeout {
                waited: r.timeout,
                joined: peers.len() as u32 + 1,
                nnodes: r.nnodes,
            });
        };
        let Ok((stream, from)) = accepted else {
            continue;
        };
        let mut reader = BufReader::new(stream);
        let line = match tokio::time::timeout(Duration::from_secs(10), read_line(&mut reader)).await
        {
            Ok(Some(l)) => l,
            _ => continue,
        };
        let mut stream = reader.into_inner();
        match parse_hello(&line, r.nnodes) {
            Some(rank) if rank > 0 && !peers.contains_key(&rank) => {
                log.info(&format!("node_rank {rank} joined from {from}"));
                peers.insert(rank, stream);
            }
            _ => {
                let _ = stream
                    .write_all(
                        format!(
                            "refused: expected one of ranks 1..{} of {}\n",
                            r.nnodes - 1,
                            r.nnodes
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        }
    }
    for s in peers.values_mut() {
        let _ = s.write_all(b"go\n").await;
    }
    log.info(&format!(
        "all {} ranks joined at {}; starting the server",
        r.nnodes, r.init_addr
    ));
    Ok(peers)
}

async fn follow(r: &RankArgs, log: &SimLog) -> Result<TcpStream, RendezvousError> {
    let deadline = tokio::time::Instant::now() + r.timeout;
    log.info(&format!(
        "node_rank {} of {}: connecting to rank 0 at {}",
        r.rank, r.nnodes, r.init_addr
    ));
    let mut stream = loop {
        match TcpStream::connect(&r.init_addr).await {
            Ok(s) => break s,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(_) => {
                return Err(RendezvousError::ConnectTimeout {
                    waited: r.timeout,
                    addr: r.init_addr.clone(),
                });
            }
        }
    };
    let _ = stream
        .write_all(format!("servebench-sim rank {} of {}\n", r.rank, r.nnodes).as_bytes())
        .await;
    let mut reader = BufReader::new(stream);
    let reply = tokio::time::timeout_at(deadline, read_line(&mut reader))
        .await
        .ok()
        .flatten();
    match reply.as_deref() {
        Some("go") => Ok(reader.into_inner()),
        Some(other) => Err(RendezvousError::Refused {
            addr: r.init_addr.clone(),
            reply: other.to_string(),
        }),
        None => Err(RendezvousError::Timeout {
            waited: r.timeout,
            joined: 0,
            nnodes: r.nnodes,
        }),
    }
}

/// `servebench-sim rank I of N` with N matching: I.
fn parse_hello(line: &str, nnodes: u32) -> Option<u32> {
    let rest = line.strip_prefix("servebench-sim rank ")?;
    let (rank, n) = rest.split_once(" of ")?;
    let (rank, n): (u32, u32) = (rank.parse().ok()?, n.parse().ok()?);
    (n == nnodes && rank < nnodes).then_some(rank)
}

/// One line of at most [`LINE_BUDGET`] bytes, without its newline; None at the end or past
/// the budget.
async fn read_line(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut buf = Vec::new();
    let mut limited = r.take(LINE_BUDGET as u64);
    limited.read_until(b'\n', &mut buf).await.ok()?;
    if buf.last() != Some(&b'\n') {
        return None;
    }
    buf.pop();
    String::from_utf8(buf)
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// Resolves with the rank whose connection ended first (rank 0's view).
pub(crate) async fn first_lost(peers: BTreeMap<u32, TcpStream>) -> u32 {
    let mut set = tokio::task::JoinSet::new();
    for (rank, stream) in peers {
        set.spawn(async move {
            closed(stream).await;
            rank
        });
    }
    match set.join_next().await {
        Some(Ok(rank)) => rank,
        _ => std::future::pending().await,
    }
}

/// Resolves when the peer closes the connection (or it breaks).
pub(crate) async fn closed(mut stream: TcpStream) {
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// gloo's words for a peer that went away, which the engines' crash lines classify as
/// `rank-lost`.
pub(crate) fn lost_line(this_rank: u32, lost_rank: u32, addr: &str) -> String {
    format!(
        "[node_rank {this_rank}] RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [{addr}] (node_rank {lost_rank} is gone)"
    )
}

/// SGLang's ranks from 1: `/health`, `/health_generate` and `/ping` always answer 200 on the
/// rank's own `--host:--port`, anything else 404 (srt/utils/common.py
/// `launch_dummy_health_check_server`).
pub(crate) async fn dummy_health(listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&head);
            let path = line.split_whitespace().nth(1).unwrap_or("");
            let status = match path {
                "/health" | "/health_generate" | "/ping" => "200 OK",
                _ => "404 Not Found",
            };
            let _ = stream
                .write_all(
                    format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                        .as_bytes(),
                )
                .await;
        });
    }
}

/// What this process is after the rendezvous.
pub(crate) enum Role {
    /// A single-node server.
    Single,
    /// Rank 0 of several: serves, watching the others.
    Leader {
        peers: BTreeMap<u32, TcpStream>,
        init_addr: String,
    },
}

/// Meets the other ranks (`r` None: a single-node server, nothing to do). Ranks from 1 live
/// their whole life here (a dummy `/health`, or nothing when headless, until rank 0 goes):
/// `Err` is the exit code the process ends with.
pub(crate) async fn start(
    r: Option<&RankArgs>,
    log: &SimLog,
    host: &str,
    port: u16,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Role, i32> {
    let Some(r) = r else {
        return Ok(Role::Single);
    };
    let joined = match rendezvous(r, log).await {
        Ok(j) => j,
        Err(e) => {
            log.raw(&format!("[node_rank {}] {e}", r.rank));
            return Err(crate::exit::FAILED);
        }
    };
    let stream = match joined {
        Joined::Leader(peers) => {
            return Ok(Role::Leader {
                peers,
                init_addr: r.init_addr.clone(),
            });
        }
        Joined::Follower(s) => s,
    };
    if r.headless {
        log.info(&format!(
            "Launching vLLM (v0.34.0+servebench.sim) headless multiproc executor, with head node address {} for torch.distributed process group.",
            r.init_addr
        ));
    } else {
        match TcpListener::bind((host, port)).await {
            Ok(l) => {
                tokio::spawn(dummy_health(l));
                log.info(&format!(
                    "Dummy health check server started in background thread at {host}:{port}"
                ));
            }
            Err(e) => {
                log.info(&format!(
                    "ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): {e}"
                ));
                return Err(crate::exit::FAILED);
            }
        }
    }
    tokio::select! {
        _ = closed(stream) => {
            log.raw(&lost_line(r.rank, 0, &r.init_addr));
            Err(crate::exit::FAILED)
        }
        _ = shutdown => Err(crate::exit::OK),
    }
}

/// The server's shutdown: `signal`, or (rank 0) another rank lost, logged at once and noted
/// in `lost` so the process exits 1.
pub(crate) async fn until_shutdown(
    role: Role,
    log: SimLog,
    lost: std::sync::Arc<std::sync::atomic::AtomicBool>,
    signal: impl std::future::Future<Output = ()>,
) {
    match role {
        Role::Single => signal.await,
        Role::Leader { peers, init_addr } => tokio::select! {
            rank = first_lost(peers) => {
                log.raw(&lost_line(0, rank, &init_addr));
                lost.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            _ = signal => {}
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn v(args: &[&str]) -> (Result<Option<RankArgs>, RankArgError>, Vec<String>) {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let r = RankArgs::take_vllm(&mut a);
        (r, a)
    }

    #[test]
    fn vllm_flags_are_taken_out_only_for_several_nodes() {
        let (r, rest) = v(&[
            "m",
            "--nnodes",
            "2",
            "--node-rank=1",
            "--master-addr",
            "10.0.0.1",
            "--master-port",
            "5000",
            "--headless",
            "--max-model-len",
            "8",
        ]);
        let r = r.unwrap().unwrap();
        assert_eq!((r.nnodes, r.rank, r.headless), (2, 1, true));
        assert_eq!(r.init_addr, "10.0.0.1:5000");
        assert_eq!(rest, ["m", "--max-model-len", "8"]);
        let (r, rest) = v(&["m", "--headless"]);
        assert_eq!(r.unwrap(), None);
        assert_eq!(rest, ["m", "--headless"]);
        let (r, _) = v(&["m", "-n", "2", "-r", "2"]);
        assert_eq!(
            r.unwrap_err(),
            RankArgError::RankRange { rank: 2, nnodes: 2 }
        );
        let (r, _) = v(&["m", "--nnodes", "x"]);
        assert!(matches!(r, Err(RankArgError::BadInt { .. })));
    }

    #[test]
    fn sglang_needs_an_init_address_for_several_nodes() {
        assert_eq!(RankArgs::from_sglang(None, None, None, None), Ok(None));
        assert_eq!(
            RankArgs::from_sglang(Some(2), Some(0), None, None),
            Err(RankArgError::NoInitAddr(2, "--dist-init-addr"))
        );
        let r = RankArgs::from_sglang(Some(2), Some(1), Some("h:1"), Some(5))
            .unwrap()
            .unwrap();
        assert_eq!(r.timeout, Duration::from_secs(5));
    }

    #[test]
    fn hello_lines_name_a_rank_of_the_same_size() {
        assert_eq!(parse_hello("servebench-sim rank 1 of 2", 2), Some(1));
        assert_eq!(parse_hello("servebench-sim rank 1 of 3", 2), None);
        assert_eq!(parse_hello("servebench-sim rank 2 of 2", 2), None);
        assert_eq!(parse_hello("GET / HTTP/1.1", 2), None);
    }

    #[tokio::test]
    async fn ranks_meet_and_rank_zero_sees_a_lost_rank() {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let args = |rank| RankArgs {
            nnodes: 3,
            rank,
            init_addr: addr.clone(),
            headless: false,
            timeout: Duration::from_secs(20),
        };
        let log = SimLog::capture();
        let (a1, a2, a0) = (args(1), args(2), args(0));
        let (l1, l2) = (log.clone(), log.clone());
        let f1 = tokio::spawn(async move { rendezvous(&a1, &l1).await });
        let f2 = tokio::spawn(async move { rendezvous(&a2, &l2).await });
        let Joined::Leader(peers) = rendezvous(&a0, &log).await.unwrap() else {
            panic!("rank 0 leads")
        };
        assert_eq!(peers.keys().copied().collect::<Vec<_>>(), [1, 2]);
        let Ok(Joined::Follower(s1)) = f1.await.unwrap() else {
            panic!("rank 1 follows")
        };
        let Ok(Joined::Follower(s2)) = f2.await.unwrap() else {
            panic!("rank 2 follows")
        };
        // Rank 2 dies: rank 0 learns which one.
        drop(s2);
        assert_eq!(first_lost(peers).await, 2);
        // Rank 0 is gone now (its streams dropped): rank 1 sees its connection end.
        tokio::time::timeout(Duration::from_secs(10), closed(s1))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_rank_that_never_comes_times_rank_zero_out() {
        let port = free_port();
        let r = RankArgs {
            nnodes: 2,
            rank: 0,
            init_addr: format!("127.0.0.1:{port}"),
            headless: false,
            timeout: Duration::from_millis(300),
        };
        let e = match rendezvous(&r, &SimLog::capture()).await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("nobody joined"),
        };
        assert!(e.contains("1/2 clients joined"), "{e}");
    }
}
