//! Prefill-decode (PD) disaggregation, as sglang 0.5.23 runs it: `--disaggregation-mode
//! prefill` computes a prompt's KV cache and hands it to a `--disaggregation-mode decode`
//! worker, which decodes and streams. A router sends every request to one worker of each
//! role at once, with `bootstrap_host`, `bootstrap_port` and `bootstrap_room` added to the
//! body; the two sides meet by the room. What SGLang does, with its file names, is in
//! docs/reference/sglang-extra.md ("Prefill-decode disaggregation").
//!
//! What the simulator does, role by role:
//!
//! - **Prefill** (`prefill` here, `http::disagg` for the request's path): it opens the
//!   bootstrap server on `--host`:`--disaggregation-bootstrap-port` (default 8998) before
//!   the HTTP port, as SGLang's tokenizer manager does (`bootstrap`): `GET /health`, `GET
//!   /route` (the prefill's parallel layout, then its one rank's address), and the
//!   simulator's own `POST /sim/kv_transfer`, where a decode worker waits for a room's KV (in
//!   SGLang a ZMQ message and an RDMA write; here one long-polled HTTP request). A
//!   `/generate` (or OpenAI request) with a room waits in the bootstrap queue until the
//!   decode side has asked for that room (SGLang's default `--optimistic-prefill-attempts 0`
//!   prefills only after the handshake), then prefills with `max_new_tokens` forced to 1
//!   (prefill.py `_process_req`; the radix cache counts its hits as usual), then holds the
//!   request in the inflight queue for the modelled transfer (`transfer`), then answers its
//!   own client with that one token and hands the decode side the token, the prompt's
//!   cached-token count and the bytes moved.
//! - **Decode**: it fetches the prefill's layout from `GET /route` (cached per bootstrap
//!   address, retried once a second up to 15 times), posts the room to
//!   `/sim/kv_transfer` and waits up to `SGLANG_DISAGGREGATION_WAITING_TIMEOUT` seconds
//!   (default 300) for the KV; then the request joins the running batch without a prefill of
//!   its own, its first token the prefill's, its `cached_tokens` the prefill's count
//!   (decode.py `_commit_transfer_to_req`), and decodes and streams as usual.
//!   Its radix cache is off unless `--disaggregation-decode-enable-radix-cache`.
//! - A room on `bootstrap_host` `2.2.2.2` (SGLang's `FAKE_BOOTSTRAP_HOST`, what its own
//!   health checks and warm-up send), or any request to a decode worker under
//!   `--disaggregation-transfer-backend fake` (SGLang's synthetic decode benchmark: its
//!   receivers are all fake, a room is not needed), moves no KV: the prefill answers at once,
//!   the decode side starts with a made-up first token and no cached tokens.
//!
//! The transfer's time, from the sim-only `--sim-kv-transfer-gbps` (default 25 GB/s, 1e9
//! bytes) and `--sim-kv-transfer-latency-ms` (default 1 ms), both times the profile's
//! `time_scale`: `bytes = prompt tokens x the profile's kv_bytes_per_token / tp` (each
//! rank sends its share on its own link, as SGLang's per-rank senders do) and
//! `time = latency + bytes / bandwidth`; transfers queue on the link one after another.
//!
//! Refusals, as 0.5.23's argument hook words them (arg_groups/pd_disaggregation_hook.py):
//! a prefill under `fake` is an `AssertionError`, a decode radix cache under `fake` a
//! `ValueError` (both a traceback and exit 1, after argparse took the values); a
//! request without `bootstrap_room` (unless the backend is `fake`) is aborted with 400
//! `Invalid request: Disaggregated request received without bootstrap room id. req.rid=...`
//! (scheduler.py `_handle_generate_request`); a decode whose prefill never sends the room
//! fails with `Decode transfer failed for request rank=0 ...: Request R timed out after
//! Xs in KVPoll.WaitingForInput` (500), and a prefill whose decode never asks with
//! `Prefill bootstrap failed ...: Request R timed out after Xs in KVPoll.Bootstrapping`
//! after `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` (default 300 s). A bootstrap port in use
//! is logged (`Server error: [Errno 98] ...`) and the prefill serves on without a bootstrap
//! server, as SGLang's thread does; a bootstrap port equal to `--port` leaves the HTTP port
//! taken, so the server exits with uvicorn's `[Errno 98]` line. A decode whose prefill
//! differs in `--page-size` or `--kv-cache-dtype` dies as SGLang's scheduler does
//! (`RuntimeError: Page size mismatch: ...`).
//!
//! Not modelled: several prefill ranks (tp, dp, pp: the bootstrap server lists one rank),
//! `PUT /route` from other processes, `/register_dp_rank` and `/query_dp_ranks`, the
//! `prefill_complete` allocation policy, optimistic prefill, decode retraction's KV backup
//! (a retracted decode request recomputes its prompt on the decode worker), the decode
//! prealloc queue's KV reservation before the transfer (the decode worker reserves the
//! prompt's KV when it arrives), the abort notifications between the two sides, and the
//! heartbeat that declares a prefill dead.

pub(crate) mod bootstrap;
mod handoff;
pub(crate) mod peer;
pub(crate) mod rooms;
pub(crate) mod transfer;

use std::time::Duration;

pub(crate) use handoff::Handoff;
pub(crate) use transfer::{Link, TransferModel};

/// `--disaggregation-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Not disaggregated (SGLang's `null`).
    #[default]
    Null,
    /// A prefill worker.
    Prefill,
    /// A decode worker.
    Decode,
}

impl Mode {
    /// The `engine_type` label SGLang's metrics carry (`DisaggregationMode.to_engine_type`).
    pub(crate) fn engine_type(self) -> &'static str {
        match self {
            Mode::Null => "unified",
            Mode::Prefill => "prefill",
            Mode::Decode => "decode",
        }
    }
}

/// SGLang's `FAKE_BOOTSTRAP_HOST` (disaggregation/utils.py): a room on this host moves no KV.
pub(crate) const FAKE_BOOTSTRAP_HOST: &str = "2.2.2.2";

/// SGLang's default `--disaggregation-bootstrap-port`.
pub(crate) const DEFAULT_BOOTSTRAP_PORT: u16 = 8998;

/// The PD settings of one simulated worker.
#[derive(Debug, Clone)]
pub struct PdConfig {
    /// `--disaggregation-mode`.
    pub mode: Mode,
    /// `--disaggregation-bootstrap-port`: where a prefill listens; for a decode, the port of a
    /// room whose `bootstrap_port` is null.
    pub bootstrap_port: u16,
    /// `--disaggregation-transfer-backend` after SGLang's rewrite (`mooncake_tcp` ->
    /// `mooncake`).
    pub backend: String,
    /// The modelled KV transfer (already times the profile's `time_scale`).
    pub transfer: TransferModel,
    /// `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`: how long a prefill request waits for its
    /// decode side's handshake.
    pub bootstrap_timeout: Duration,
    /// `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`: how long a decode request waits for its KV.
    pub waiting_timeout: Duration,
    /// `--page-size`, which both sides must share.
    pub page_size: i64,
    /// `--kv-cache-dtype`, which both sides must share.
    pub kv_cache_dtype: String,
    /// `--tp-size`: the prefill's layout as `/route` lists it, and the share of each rank's
    /// KV bytes.
    pub tp: u64,
}

impl Default for PdConfig {
    fn default() -> Self {
        PdConfig {
            mode: Mode::Null,
            bootstrap_port: DEFAULT_BOOTSTRAP_PORT,
            backend: "mooncake".into(),
            transfer: TransferModel::default(),
            bootstrap_timeout: Duration::from_secs(300),
            waiting_timeout: Duration::from_secs(300),
            page_size: 1,
            kv_cache_dtype: "auto".into(),
            tp: 1,
        }
    }
}

impl PdConfig {
    /// Whether a request with these bootstrap fields moves no KV (SGLang's
    /// `_is_fake_transfer`: the fake host, or no host under the `fake` backend).
    pub(crate) fn is_fake(&self, host: Option<&str>) -> bool {
        host == Some(FAKE_BOOTSTRAP_HOST) || (host.is_none() && self.backend == "fake")
    }
}

/// The flags that set PD up, as parsed.
#[derive(Debug, Clone, Default)]
pub(crate) struct PdFlags<'a> {
    pub mode: Option<&'a str>,
    pub bootstrap_port: Option<i64>,
    pub backend: Option<&'a str>,
    pub decode_radix: bool,
    pub gbps: Option<f64>,
    pub latency_ms: Option<f64>,
}

/// A refusal at start-up: SGLang's argument hook raising, after argparse took the values. The
/// process prints the traceback's last lines and exits 1.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum PdError {
    /// A Python exception from `handle_pd_disaggregation`: where it was raised and its line.
    #[error("{exception}: {message}")]
    Hook {
        /// `AssertionError`, `ValueError`.
        exception: &'static str,
        /// Its message.
        message: String,
        /// The line of pd_disaggregation_hook.py that raised it, and its source.
        at: (u32, &'static str),
    },
    /// A simulator flag out of range (exit 2).
    #[error("{0}")]
    Flag(String),
}

impl PdError {
    /// The traceback's tail as Python prints it.
    pub(crate) fn traceback(&self) -> String {
        match self {
            PdError::Hook {
                exception,
                message,
                at: (line, source),
            } => format!(
                "Traceback (most recent call last):\n  File \"/usr/local/lib/python3.12/dist-packages/sglang/srt/arg_groups/pd_disaggregation_hook.py\", line {line}, in handle_pd_disaggregation\n    {source}\n{exception}: {message}"
            ),
            PdError::Flag(m) => m.clone(),
        }
    }
}

/// What the resolution logs (SGLang's `logger.info`/`logger.warning` in the hook).
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub config: PdConfig,
    /// `disable_radix_cache` as the hook leaves it for a decode worker (None: unchanged).
    pub disable_radix_cache: Option<bool>,
    /// Lines to log, each with its level.
    pub log: Vec<(&'static str, String)>,
}

/// The seconds an `SGLANG_DISAGGREGATION_*_TIMEOUT` variable holds (SGLang's `EnvInt`; the
/// simulator also takes fractions, for tests), else `default`.
fn env_seconds(name: &str, default: u64) -> Duration {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs(default), Duration::from_secs_f64)
}

/// Resolves the PD flags as `handle_pd_disaggregation` does (sglang 0.5.23,
/// arg_groups/pd_disaggregation_hook.py), in its order: `mooncake_tcp` becomes `mooncake`;
/// a decode radix cache under `fake` is a `ValueError` (line 106); a decode worker's radix
/// cache is off unless asked for (lines 117-127); a prefill under `fake` is an
/// `AssertionError` (line 146). `time_scale` multiplies the transfer's times.
pub(crate) fn resolve(f: &PdFlags<'_>, time_scale: f64) -> Result<Resolved, PdError> {
    let mode = match f.mode.unwrap_or("null") {
        "prefill" => Mode::Prefill,
        "decode" => Mode::Decode,
        _ => Mode::Null,
    };
    let mut log = Vec::new();
    let mut backend = f.backend.unwrap_or("mooncake").to_string();
    if backend == "mooncake_tcp" {
        backend = "mooncake".into();
        log.push((
            "INFO",
            "disaggregation transfer backend 'mooncake_tcp' -> mooncake with MC_FORCE_TCP=1 (TCP transport, no RDMA)".to_string(),
        ));
    }
    let mut disable_radix_cache = None;
    if mode == Mode::Decode {
        if f.decode_radix {
            if backend == "fake" {
                return Err(PdError::Hook {
                    exception: "ValueError",
                    message: "--disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend fake".into(),
                    at: (106, "raise ValueError("),
                });
            }
            disable_radix_cache = Some(false);
            log.push((
                "WARNING",
                "EXPERIMENTAL: Radix cache is enabled for decode server".into(),
            ));
        } else {
            disable_radix_cache = Some(true);
            log.push((
                "WARNING",
                "Radix cache is disabled for decode server".into(),
            ));
        }
    }
    if mode == Mode::Prefill && backend == "fake" {
        return Err(PdError::Hook {
            exception: "AssertionError",
            message: "Prefill server does not support 'fake' as the transfer backend".into(),
            at: (
                146,
                "assert cfg.disaggregation_transfer_backend != \"fake\", (",
            ),
        });
    }
    let port = f.bootstrap_port.unwrap_or(DEFAULT_BOOTSTRAP_PORT as i64);
    let bootstrap_port = u16::try_from(port).map_err(|_| {
        PdError::Flag(format!(
            "--disaggregation-bootstrap-port must be 0..65535, got {port}"
        ))
    })?;
    let gbps = f.gbps.unwrap_or(transfer::DEFAULT_GBPS);
    if !(gbps > 0.0 && gbps.is_finite()) {
        return Err(PdError::Flag(format!(
            "--sim-kv-transfer-gbps must be a positive number, got {gbps}"
        )));
    }
    let latency_ms = f.latency_ms.unwrap_or(transfer::DEFAULT_LATENCY_MS);
    if !(latency_ms >= 0.0 && latency_ms.is_finite()) {
        return Err(PdError::Flag(format!(
            "--sim-kv-transfer-latency-ms must be 0 or more, got {latency_ms}"
        )));
    }
    Ok(Resolved {
        config: PdConfig {
            mode,
            bootstrap_port,
            backend,
            transfer: TransferModel::new(gbps, latency_ms).scaled(time_scale),
            bootstrap_timeout: env_seconds("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", 300),
            waiting_timeout: env_seconds("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", 300),
            ..PdConfig::default()
        },
        disable_radix_cache,
        log,
    })
}

/// A worker's PD state shared by its handlers: the rooms it serves (prefill), the prefill
/// layouts it knows (decode), and whether the server is closing (a request still in a
/// bootstrap or transfer queue then ends, so the graceful shutdown does not wait for it).
#[derive(Debug)]
pub(crate) struct PdState {
    pub rooms: std::sync::Arc<rooms::Rooms>,
    pub peers: peer::Peers,
    pub closing: tokio::sync::watch::Sender<bool>,
}

impl Default for PdState {
    fn default() -> Self {
        PdState {
            rooms: Default::default(),
            peers: Default::default(),
            closing: tokio::sync::watch::channel(false).0,
        }
    }
}

/// The bootstrap fields of one request of a body (`bootstrap_host`, `bootstrap_port`,
/// `bootstrap_room`; a batch carries a list of each).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct BootstrapFields {
    pub host: Option<String>,
    pub port: Option<u16>,
    pub room: Option<u64>,
}

impl BootstrapFields {
    /// The fields of the `index`th request of body `v` (a scalar applies to all; a scalar
    /// room counts up, `bootstrap_room + i`, as io_struct.py normalises it).
    pub(crate) fn of(v: &serde_json::Value, index: usize) -> Self {
        let pick = |key: &str| match v.get(key) {
            Some(serde_json::Value::Array(a)) => {
                a.get(index).cloned().unwrap_or(serde_json::Value::Null)
            }
            Some(x) => x.clone(),
            None => serde_json::Value::Null,
        };
        let room = match v.get("bootstrap_room") {
            Some(serde_json::Value::Array(_)) => pick("bootstrap_room").as_u64(),
            Some(x) => x.as_u64().map(|r| r + index as u64),
            None => None,
        };
        BootstrapFields {
            host: pick("bootstrap_host").as_str().map(str::to_string),
            port: pick("bootstrap_port")
                .as_u64()
                .and_then(|p| u16::try_from(p).ok()),
            room,
        }
    }
}

/// Python's `repr` of a request id in SGLang's f-strings (`{req.rid=}`): a quoted string.
fn py_rid(rid: &str) -> String {
    crate::python::py_str(rid)
}

/// The room as an f-string shows it (`None` when the request had none).
fn py_room(room: Option<u64>) -> String {
    room.map_or_else(|| "None".to_string(), |r| r.to_string())
}

/// The abort of a request without a room on a PD worker (scheduler.py, 400).
pub(crate) fn no_room_message(rid: &str) -> String {
    format!(
        "Invalid request: Disaggregated request received without bootstrap room id. req.rid={}",
        py_rid(rid)
    )
}

/// A prefill request whose decode side never asked for its room (prefill.py
/// `handle_bootstrap_failure` over common/conn.py `_check_bootstrap_timeout`, 500).
pub(crate) fn bootstrap_timeout_message(rid: &str, room: u64, waited: Duration) -> String {
    bootstrap_failed_message(
        rid,
        room,
        &format!(
            "Request {room} timed out after {:.1}s in KVPoll.Bootstrapping",
            waited.as_secs_f64()
        ),
    )
}

/// A prefill request whose bootstrap failed for `reason` (prefill.py
/// `handle_bootstrap_failure`, 500).
pub(crate) fn bootstrap_failed_message(rid: &str, room: u64, reason: &str) -> String {
    format!(
        "Prefill bootstrap failed for request rank=0 req.rid={} req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): {reason}",
        py_rid(rid)
    )
}

/// A decode request whose KV never came (decode.py's transfer queue over common/conn.py
/// `_check_waiting_timeout`, 500).
pub(crate) fn waiting_timeout_message(rid: &str, room: u64, waited: Duration) -> String {
    transfer_failed_message(
        rid,
        Some(room),
        &format!(
            "Request {room} timed out after {:.1}s in KVPoll.WaitingForInput",
            waited.as_secs_f64()
        ),
    )
}

/// A decode request whose transfer failed for `reason` (decode.py, 500).
pub(crate) fn transfer_failed_message(rid: &str, room: Option<u64>, reason: &str) -> String {
    format!(
        "Decode transfer failed for request rank=0 decode_req.req.rid={} decode_req.req.bootstrap_room={} with exception KVTransferError(bootstrap_room={}): {reason}",
        py_rid(rid),
        py_room(room),
        py_room(room)
    )
}

/// A decode request that never got the prefill's layout (decode.py: after 15 failed
/// attempts the receiver is aborted, and the handshake fails; 500).
pub(crate) fn handshake_failed_message(rid: &str, room: u64) -> String {
    format!(
        "Decode handshake failed for request rank=0 decode_req.req.rid={} decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): Aborted by AbortReq.",
        py_rid(rid)
    )
}

/// What a prefill's heartbeat failure marks its rooms with (common/conn.py
/// `_handle_node_failure`): here, a bootstrap server that went away mid-transfer.
pub(crate) fn prefill_down_reason(addr: &str, room: u64) -> String {
    format!(
        "Prefill server with bootstrap_addr: {addr} is healthy before, but now it is down. Request (bootstrap_room: {room}) has been marked as failed."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn flags<'a>(mode: &'a str, backend: &'a str) -> PdFlags<'a> {
        PdFlags {
            mode: Some(mode),
            backend: Some(backend),
            ..PdFlags::default()
        }
    }

    /// sglang 0.5.23's hook, as its traceback ended when run here (a prefill with `fake`:
    /// `AssertionError: Prefill server does not support 'fake' as the transfer backend`, exit
    /// 1).
    #[test]
    fn refusals_are_sglangs() {
        let e = resolve(&flags("prefill", "fake"), 1.0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "AssertionError: Prefill server does not support 'fake' as the transfer backend"
        );
        assert!(
            e.traceback()
                .contains("pd_disaggregation_hook.py\", line 146, in handle_pd_disaggregation"),
            "{}",
            e.traceback()
        );
        assert!(e.traceback().ends_with(&e.to_string()));
        let f = PdFlags {
            decode_radix: true,
            ..flags("decode", "fake")
        };
        assert_eq!(
            resolve(&f, 1.0).unwrap_err().to_string(),
            "ValueError: --disaggregation-decode-enable-radix-cache is incompatible with --disaggregation-transfer-backend fake"
        );
        // A decode worker may use fake (synthetic decode benchmarks); a null one anything.
        assert!(resolve(&flags("decode", "fake"), 1.0).is_ok());
        assert!(resolve(&flags("null", "fake"), 1.0).is_ok());
        for bad in [0.0, -1.0, f64::NAN] {
            let f = PdFlags {
                gbps: Some(bad),
                ..flags("prefill", "mooncake")
            };
            assert!(matches!(resolve(&f, 1.0), Err(PdError::Flag(_))), "{bad}");
        }
        let f = PdFlags {
            latency_ms: Some(-1.0),
            ..flags("decode", "nixl")
        };
        assert!(matches!(resolve(&f, 1.0), Err(PdError::Flag(_))));
    }

    #[test]
    fn defaults_rewrites_and_the_decode_radix_cache() {
        let r = resolve(&PdFlags::default(), 1.0).unwrap();
        assert_eq!(r.config.mode, Mode::Null);
        assert_eq!(r.config.bootstrap_port, 8998);
        assert_eq!(r.config.backend, "mooncake");
        assert_eq!(r.disable_radix_cache, None);
        assert!(r.log.is_empty());
        let r = resolve(&flags("prefill", "mooncake_tcp"), 1.0).unwrap();
        assert_eq!(r.config.backend, "mooncake");
        assert!(r.log[0].1.contains("'mooncake_tcp' -> mooncake"));
        let r = resolve(&flags("decode", "mooncake"), 1.0).unwrap();
        assert_eq!(r.disable_radix_cache, Some(true));
        assert_eq!(r.log[0].1, "Radix cache is disabled for decode server");
        let f = PdFlags {
            decode_radix: true,
            ..flags("decode", "nixl")
        };
        assert_eq!(resolve(&f, 1.0).unwrap().disable_radix_cache, Some(false));
    }

    #[test]
    fn fake_transfers_are_sglangs() {
        let mut c = PdConfig::default();
        assert!(c.is_fake(Some(FAKE_BOOTSTRAP_HOST)));
        assert!(!c.is_fake(None));
        assert!(!c.is_fake(Some("10.0.0.1")));
        c.backend = "fake".into();
        assert!(c.is_fake(None));
        assert!(!c.is_fake(Some("10.0.0.1")));
    }

    /// The messages a client sees, in the words of SGLang's f-strings.
    #[test]
    fn failure_messages() {
        assert_eq!(
            no_room_message("abc"),
            "Invalid request: Disaggregated request received without bootstrap room id. req.rid='abc'"
        );
        assert_eq!(
            waiting_timeout_message("r1", 7, Duration::from_millis(1049)),
            "Decode transfer failed for request rank=0 decode_req.req.rid='r1' decode_req.req.bootstrap_room=7 with exception KVTransferError(bootstrap_room=7): Request 7 timed out after 1.0s in KVPoll.WaitingForInput"
        );
        assert!(
            bootstrap_timeout_message("r1", 7, Duration::from_secs(300))
                .ends_with("Request 7 timed out after 300.0s in KVPoll.Bootstrapping")
        );
    }

    #[test]
    fn bootstrap_fields_of_one_request_and_of_a_batch() {
        let one = json!({"text": "x", "bootstrap_host": "10.0.0.2", "bootstrap_port": 8998, "bootstrap_room": 5});
        assert_eq!(
            BootstrapFields::of(&one, 0),
            BootstrapFields {
                host: Some("10.0.0.2".into()),
                port: Some(8998),
                room: Some(5)
            }
        );
        // A scalar room counts up over a batch; lists are taken item by item.
        assert_eq!(BootstrapFields::of(&one, 2).room, Some(7));
        let batch = json!({"bootstrap_host": ["a", "b"], "bootstrap_port": [null, 9000], "bootstrap_room": [11, 12]});
        let b = BootstrapFields::of(&batch, 1);
        assert_eq!(
            (b.host.as_deref(), b.port, b.room),
            (Some("b"), Some(9000), Some(12))
        );
        assert_eq!(BootstrapFields::of(&batch, 0).port, None);
        assert_eq!(
            BootstrapFields::of(&json!({}), 0),
            BootstrapFields::default()
        );
    }
}
