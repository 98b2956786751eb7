//! A decode worker's side of the handshake, over real HTTP to the prefill worker's bootstrap
//! server (`bootstrap`): the prefill's layout from `GET /route` (all ranks `-1`), once per
//! bootstrap address and then cached, as SGLang's `try_ensure_parallel_info` caches it in
//! `prefill_info_table`; its rank's address (ranks `0`); then the room's KV from
//! `POST /sim/kv_transfer`, waited for as long as the caller allows.

use super::handoff::Handoff;
use axum::body::Body;
use hyper::Request;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::net::TcpStream;

/// Why a request to a prefill worker's bootstrap server did not get its answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PeerError {
    #[error("connecting to {addr} timed out")]
    ConnectTimeout { addr: String },
    #[error("{addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// A status other than 200 for one of the layout's two questions (SGLang's words).
    #[error("Failed to get prefill {what} info: {status}, {body}")]
    Status {
        what: &'static str,
        status: u16,
        body: String,
    },
    #[error(transparent)]
    Http(#[from] hyper::Error),
    #[error(transparent)]
    Request(#[from] hyper::http::Error),
    #[error(transparent)]
    Body(#[from] axum::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// What a decode worker keeps of a prefill worker's layout.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PrefillInfo {
    /// `page_size` (None: not said).
    pub page_size: Option<i64>,
    /// `kv_cache_dtype`.
    pub kv_cache_dtype: Option<String>,
    /// `host:port` of its rank 0, where the KV comes from.
    pub rank: String,
}

/// The prefill layouts this decode worker has fetched, by bootstrap address.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    known: Mutex<HashMap<String, PrefillInfo>>,
}

impl Peers {
    /// The layout of the prefill at `addr` (`host:port`), fetched once.
    pub(crate) async fn info(&self, addr: &str) -> Result<PrefillInfo, PeerError> {
        if let Some(i) = self.known.lock().ok().and_then(|k| k.get(addr).cloned()) {
            return Ok(i);
        }
        let all =
            "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1";
        let (status, body) = request(addr, "GET", all, None).await?;
        if status != 200 {
            return Err(PeerError::Status {
                what: "server",
                status,
                body,
            });
        }
        let v: Value = serde_json::from_str(&body)?;
        let one = "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0";
        let (status, rank) = request(addr, "GET", one, None).await?;
        if status != 200 {
            return Err(PeerError::Status {
                what: "rank",
                status,
                body: rank,
            });
        }
        let r: Value = serde_json::from_str(&rank)?;
        let info = PrefillInfo {
            page_size: v.get("page_size").and_then(Value::as_i64),
            kv_cache_dtype: v
                .get("kv_cache_dtype")
                .and_then(Value::as_str)
                .map(str::to_string),
            rank: format!(
                "{}:{}",
                r.get("rank_ip")
                    .and_then(Value::as_str)
                    .unwrap_or("127.0.0.1"),
                r.get("rank_port").and_then(Value::as_u64).unwrap_or(0)
            ),
        };
        if let Ok(mut k) = self.known.lock() {
            k.insert(addr.to_string(), info.clone());
        }
        Ok(info)
    }
}

/// How the wait for a room's KV ended.
#[derive(Debug, PartialEq)]
pub(crate) enum Fetched {
    /// The KV moved.
    Kv(Handoff),
    /// The prefill side reported a failure (its words).
    Failed(String),
    /// The prefill's bootstrap server went away mid-wait (the error's words).
    Lost(String),
}

/// Waits at `rank` (`host:port`) for `room`'s KV (no time limit: the caller bounds it).
pub(crate) async fn fetch_kv(rank: &str, room: u64) -> Fetched {
    let body = serde_json::json!({ "bootstrap_room": room }).to_string();
    match request(rank, "POST", "/sim/kv_transfer", Some(body)).await {
        Ok((200, text)) => match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.get("failed").is_some() => Fetched::Failed(
                v["failed"]
                    .as_str()
                    .unwrap_or("KV transfer failed")
                    .to_string(),
            ),
            Ok(v) => serde_json::from_value(v)
                .map(Fetched::Kv)
                .unwrap_or_else(|e| Fetched::Failed(e.to_string())),
            Err(e) => Fetched::Failed(e.to_string()),
        },
        Ok((status, text)) => Fetched::Failed(format!("{status}: {text}")),
        Err(e) => Fetched::Lost(e.to_string()),
    }
}

/// One HTTP/1.1 request to `addr` on its own connection: (status, body).
async fn request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<String>,
) -> Result<(u16, String), PeerError> {
    let connect = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr));
    let tcp = connect
        .await
        .map_err(|_| PeerError::ConnectTimeout {
            addr: addr.to_string(),
        })?
        .map_err(|source| PeerError::Connect {
            addr: addr.to_string(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr);
    if body.is_some() {
        req = req.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let req = req.body(body.map_or_else(Body::empty, Body::from))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(Body::new(resp.into_body()), 1 << 20).await?;
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}
