//! A prefill worker's bootstrap server, on `--host`:`--disaggregation-bootstrap-port`: what
//! SGLang's `CommonKVBootstrapServer` (disaggregation/common/conn.py, aiohttp, the base of
//! mooncake's, nixl's and mori's) answers a decode worker, plus the simulator's transfer.
//!
//! - `GET /health`: 200 `OK`.
//! - `GET /route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1`:
//!   the prefill's layout (`PrefillServerInfo`: sizes, `page_size`, `kv_cache_dtype`,
//!   `follow_bootstrap_room`, `prefill_http_port`, ...); with real ranks (`0`, `0`, a tp rank,
//!   `0`) that rank's `rank_ip` and `rank_port`; a missing input 400 `Missing inputs for
//!   bootstrap server.`; an unknown rank 404 `Bootstrap info not found for dp_rank=...`. Other
//!   methods than GET and PUT are 405 `Method not allowed`; PUT (ranks registering
//!   themselves) is not modelled, as the simulated prefill has its one rank registered from
//!   the start, and answers 405 too.
//! - `POST /sim/kv_transfer` `{"bootstrap_room": R}` (the simulator's own; in SGLang a ZMQ
//!   message to the rank's port, then an RDMA write): the decode side's handshake for room R,
//!   answered once the room's KV has moved with the prefill's [`Handoff`], or with
//!   `{"failed": reason}` when the prefill request gave up. The rank's `rank_port` is this
//!   server's port.
//! - Anything else: aiohttp's 404 `404: Not Found`.

use super::handoff::Handoff;
use super::rooms::Rooms;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// What the bootstrap server knows about its prefill worker.
#[derive(Debug, Clone)]
pub(crate) struct PrefillLayout {
    /// `--tp-size` (attention TP: the simulator has no DP attention).
    pub tp: u64,
    /// `--page-size`.
    pub page_size: i64,
    /// `--kv-cache-dtype`.
    pub kv_cache_dtype: String,
    /// The prefill's HTTP port (SGLang registers it for decode's rebootstrap).
    pub http_port: u16,
    /// Where a rank is reached: the bootstrap host (`127.0.0.1` for a wildcard `--host`, as
    /// `register_to_bootstrap` rewrites it) and this server's port.
    pub rank_ip: String,
    pub rank_port: u16,
}

#[derive(Clone)]
struct BootstrapState {
    rooms: Arc<Rooms>,
    layout: Arc<PrefillLayout>,
}

/// The bootstrap server's routes over `rooms`.
pub(crate) fn router(rooms: Arc<Rooms>, layout: PrefillLayout) -> Router {
    let state = BootstrapState {
        rooms,
        layout: Arc::new(layout),
    };
    Router::new()
        .route("/health", get(|| async { text(StatusCode::OK, "OK") }))
        .route("/route", any(route))
        .route("/sim/kv_transfer", post(kv_transfer))
        .fallback(|| async { text(StatusCode::NOT_FOUND, "404: Not Found") })
        .with_state(state)
}

fn text(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

fn json_body(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        v.to_string(),
    )
        .into_response()
}

/// The layout a decode worker reads first (`PrefillServerInfo` as `dataclasses.asdict` writes
/// it, `kv_layout` and `dsv41_spec_layout` dropped when None).
pub(crate) fn server_info(l: &PrefillLayout) -> Value {
    json!({
        "attn_tp_size": l.tp,
        "attn_cp_size": 1,
        "dp_size": 1,
        "pp_size": 1,
        "page_size": l.page_size,
        "kv_cache_dtype": l.kv_cache_dtype,
        "follow_bootstrap_room": true,
        "enable_dsa_cache_layer_split": false,
        "decode_allocation_policy": "early",
        "enable_kv_cache_sharding": false,
        "prefill_http_port": l.http_port,
        "target_tp_rank": null,
        "target_tp_ranks": null,
        "target_cp_ranks": null,
        "target_pp_ranks": null,
        "required_dst_info_num": null,
        "required_prefill_response_num": null,
    })
}

async fn route(
    method: Method,
    State(st): State<BootstrapState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if method != Method::GET {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            "Method not allowed",
        )
            .into_response();
    }
    let keys = [
        "prefill_dp_rank",
        "prefill_cp_rank",
        "target_tp_rank",
        "target_pp_rank",
    ];
    let given: Vec<&str> = keys
        .iter()
        .map(|k| q.get(*k).map_or("", String::as_str))
        .collect();
    if given.iter().any(|v| v.is_empty()) {
        return text(
            StatusCode::BAD_REQUEST,
            "Missing inputs for bootstrap server.",
        );
    }
    let Ok(ranks) = given
        .iter()
        .map(|v| v.trim().parse::<i64>())
        .collect::<Result<Vec<i64>, _>>()
    else {
        // Python's int() raising inside the handler: aiohttp's bare 500.
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "500 Internal Server Error\n\nServer got itself in trouble",
        );
    };
    if ranks.iter().all(|r| *r == -1) {
        return json_body(StatusCode::OK, &server_info(&st.layout));
    }
    let [dp, cp, tp, pp] = [ranks[0], ranks[1], ranks[2], ranks[3]];
    if dp == 0 && cp == 0 && pp == 0 && (0..st.layout.tp as i64).contains(&tp) {
        return json_body(
            StatusCode::OK,
            &json!({"rank_ip": st.layout.rank_ip, "rank_port": st.layout.rank_port}),
        );
    }
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!(
            "Bootstrap info not found for dp_rank={} cp_rank={} tp_rank={} pp_rank={}",
            given[0], given[1], given[2], given[3]
        ),
    )
        .into_response()
}

/// Frees a room the decode side stops waiting for (its request timed out or went away).
struct Asking {
    rooms: Arc<Rooms>,
    room: u64,
}

impl Drop for Asking {
    fn drop(&mut self) {
        self.rooms.abandon_decode(self.room);
    }
}

async fn kv_transfer(State(st): State<BootstrapState>, body: Bytes) -> Response {
    let room = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("bootstrap_room").and_then(Value::as_u64));
    let Some(room) = room else {
        return text(
            StatusCode::BAD_REQUEST,
            "Missing inputs for bootstrap server.",
        );
    };
    let kv = st.rooms.decode(room);
    let _asking = Asking {
        rooms: st.rooms.clone(),
        room,
    };
    match kv.await {
        Ok(handoff) => json_body(
            StatusCode::OK,
            &serde_json::to_value::<Handoff>(handoff).unwrap_or(Value::Null),
        ),
        // The prefill request gave up; SGLang's decode side then reads no failure record of
        // its own.
        Err(_) => json_body(
            StatusCode::OK,
            &json!({"failed": "Failed due to an unknown reason from another rank"}),
        ),
    }
}
