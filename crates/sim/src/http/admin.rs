//! Health, cache, info, metrics and abort endpoints.

use super::{AppState, json_response};
use crate::types::Command;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// SGLang's flush reply text on success.
const FLUSH_TEXT: &str = "Cache flushed.\nPlease check backend logs for more details. \
(When there are running or waiting requests, the operation will not be performed.)\n";

/// sglang 0.5.23's reply when requests kept it busy (HTTP 400, nothing flushed).
const FLUSH_FAILED: &str = "Flush cache failed.\n";

/// How long `/health` waits for its generation (SGLang's HEALTH_CHECK_TIMEOUT).
const HEALTH_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// `GET|POST /flush_cache[?timeout=S]`: 200 when flushed; 400 "Flush cache failed." while
/// requests are running or queued, after waiting up to `timeout` seconds (default 0) for them.
pub(crate) async fn flush(State(st): State<AppState>, Query(q): Query<FlushQuery>) -> Response {
    let timeout = q
        .timeout
        .filter(|t| t.is_finite() && *t > 0.0)
        .map_or(std::time::Duration::ZERO, |t| {
            std::time::Duration::from_secs_f64(t.min(3600.0))
        });
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if st.tx.send(Command::Flush(tx)).is_err() {
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        if rx.await.unwrap_or(false) {
            return (StatusCode::OK, FLUSH_TEXT).into_response();
        }
        if std::time::Instant::now() >= deadline {
            return (StatusCode::BAD_REQUEST, FLUSH_FAILED).into_response();
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// `/flush_cache`'s query.
#[derive(serde::Deserialize)]
pub(crate) struct FlushQuery {
    timeout: Option<f64>,
}

/// `GET /health` and `/health_generate` (http_server.py `health_generate`): 503 until warmup
/// is done; then a one-token generation through the scheduler, not counted in `/metrics`
/// (`log_metrics=False`), polled every `health_poll_s` (SGLang sleeps 1 s between looks, so an
/// answer takes at least that): 200 with an empty body once the scheduler answered, 503 after
/// 20 s without.
pub(crate) async fn health(State(st): State<AppState>) -> Response {
    if !st.shared.is_ready() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let tic = std::time::Instant::now();
    let opts = crate::types::ReqOptions {
        log_metrics: false,
        ..Default::default()
    };
    // A PD worker's health generation is a fake transfer (http_server.py sets
    // FAKE_BOOTSTRAP_HOST): a decode worker starts it without a prefill.
    let (events, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let disagg = (st.cfg.disagg.mode == crate::disagg::Mode::Decode)
        .then(|| crate::types::Disagg::Decode(crate::disagg::Handoff::fake()));
    let sent = st.send(crate::types::GenRequest {
        rid: format!("HEALTH_CHECK_{}", super::unix_now()).into(),
        input_ids: vec![0],
        max_new_tokens: 1,
        received: tic,
        events,
        opts,
        disagg,
    });
    if sent.is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let poll = st.cfg.profile.health_poll();
    let mut answered = false;
    while tic.elapsed() < HEALTH_CHECK_TIMEOUT {
        tokio::time::sleep(poll).await;
        while rx.try_recv().is_ok() {
            answered = true;
        }
        if answered {
            // Dropping the receiver aborts what is left of the generation.
            return StatusCode::OK.into_response();
        }
        if !st.shared.is_ready() {
            break;
        }
    }
    StatusCode::SERVICE_UNAVAILABLE.into_response()
}

/// `GET /ready` (0.5.23): 200 once warm, 503 before; no generation.
pub(crate) async fn ready(State(st): State<AppState>) -> Response {
    if st.shared.is_ready() {
        StatusCode::OK.into_response()
    } else {
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }
}

/// `GET /server_info`: every server argument at top level plus live state.
pub(crate) async fn server_info(State(st): State<AppState>) -> Response {
    let cfg = &st.cfg;
    let stats = st.shared.stats();
    let mut m = serde_json::Map::new();
    for (k, v) in &cfg.args.values {
        m.insert(k.clone(), v.clone());
    }
    // Resolved values, where the flag was left to its default.
    m.insert("model_path".into(), cfg.model_path.clone().into());
    m.insert(
        "served_model_name".into(),
        cfg.served_model_name.clone().into(),
    );
    m.insert("context_length".into(), cfg.context_length.into());
    m.insert(
        "max_running_requests".into(),
        cfg.max_running_requests.into(),
    );
    m.insert(
        "chunked_prefill_size".into(),
        cfg.chunked_prefill_size.map_or(-1, |c| c as i64).into(),
    );
    m.insert("max_total_tokens".into(), cfg.pool_tokens().into());
    m.insert("mem_fraction_static".into(), cfg.mem_fraction_static.into());
    // SGLang resolves the verify width when speculation is on (a profile can switch it on
    // without the flag).
    if let Some(sp) = &cfg.speculative {
        m.insert(
            "speculative_num_draft_tokens".into(),
            sp.num_draft_tokens.into(),
        );
    }
    m.insert("profile".into(), cfg.profile.name.clone().into());
    // servebench's own extra (SGLang has no such key): the multiplier on every modelled
    // duration, so scaled runs can be labelled.
    m.insert("sim_time_scale".into(), cfg.profile.time_scale.into());
    let mem = &cfg.profile.memory;
    let kv_gb = cfg.pool_tokens() as f64 * mem.kv_bytes_per_token / 1e9;
    m.insert(
        "status".into(),
        if st.shared.is_ready() {
            "ready"
        } else {
            "starting"
        }
        .into(),
    );
    m.insert("max_total_num_tokens".into(), cfg.pool_tokens().into());
    m.insert("max_req_input_len".into(), cfg.max_req_input_len().into());
    m.insert(
        "internal_states".into(),
        json!([{
            "last_gen_throughput": stats.gen_throughput,
            "memory_usage": {"weight": mem.weight_gb, "kvcache": kv_gb,
                             "token_capacity": cfg.pool_tokens(), "graph": mem.graph_gb},
            "avg_spec_accept_length": if cfg.speculative.is_some() { json!(stats.spec_accept_length) } else { Value::Null },
        }]),
    );
    m.insert(
        "version".into(),
        concat!("servebench-sim-", env!("CARGO_PKG_VERSION")).into(),
    );
    json_response(StatusCode::OK, &Value::Object(m))
}

/// `GET /model_info`.
pub(crate) async fn model_info(State(st): State<AppState>) -> Response {
    let tok = st
        .cfg
        .args
        .str("tokenizer-path")
        .unwrap_or(&st.cfg.model_path)
        .to_string();
    json_response(
        StatusCode::OK,
        &json!({"model_path": st.cfg.model_path, "tokenizer_path": tok, "is_generation": true,
                "preferred_sampling_params": null, "weight_version": "default",
                "disaggregation_mode": st.cfg.args.str("disaggregation-mode").unwrap_or("null")}),
    )
}

/// `GET /v1/models`.
pub(crate) async fn models(State(st): State<AppState>) -> Response {
    let name = &st.cfg.served_model_name;
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": [{"id": name, "object": "model", "created": st.created,
                 "owned_by": "sglang", "root": name, "parent": null,
                 "max_model_len": st.cfg.context_length}]}),
    )
}

/// `GET /metrics` (registered only with `--enable-metrics`).
pub(crate) async fn metrics(State(st): State<AppState>) -> Response {
    let text = st
        .shared
        .stats()
        .render(&st.cfg.served_model_name, st.cfg.pool_tokens());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `POST /abort_request {"rid": ..}` or `{"abort_all": true}`. The body is FastAPI's
/// `Body()` (a malformed or missing one is its validation error); `AbortReq` defaults `rid` to
/// `""`, so `{}` is a 200 that aborts nothing, as SGLang 0.5.23 answers (http_server.py,
/// io_struct.py `AbortReq.__post_init__`).
pub(crate) async fn abort(State(st): State<AppState>, body: Bytes) -> Response {
    let v = match super::fastapi::parse_body(&body) {
        Ok(v) => v,
        Err(e) => return super::fastapi::validation_error(&[e]),
    };
    let all = v.get("abort_all").and_then(Value::as_bool).unwrap_or(false);
    let rid = v
        .get("rid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let _ = st.tx.send(Command::Abort {
        rid: if all { None } else { Some(rid) },
    });
    StatusCode::OK.into_response()
}

/// `/start_profile` (GET or POST), with an optional `ProfileReq` body: a capture that the
/// scheduler's iterations step and `/stop_profile` (or `num_steps`) ends. SGLang raises a
/// `RuntimeError` for a start while one runs: FastAPI's plain 500.
pub(crate) async fn start_profile(State(st): State<AppState>, body: Bytes) -> Response {
    let req = if body.is_empty() {
        Value::Null
    } else {
        match super::fastapi::parse_body(&body) {
            Ok(v) => v,
            Err(e) => return super::fastapi::validation_error(&[e]),
        }
    };
    let dir = req["output_dir"]
        .as_str()
        .map(str::to_string)
        .or_else(|| std::env::var("SGLANG_TORCH_PROFILER_DIR").ok())
        .unwrap_or_else(|| "/tmp".into());
    let start = crate::profiler::StartRequest {
        dir: expand_home(&dir),
        profile_id: req["profile_id"]
            .as_str()
            .map_or_else(|| super::unix_now().to_string(), str::to_string),
        num_steps: req["num_steps"].as_u64().filter(|n| *n > 0),
        activities: req["activities"].as_array().map_or_else(
            || vec!["CPU".into(), "GPU".into()],
            |a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            },
        ),
    };
    match st
        .shared
        .profiler
        .start(start, crate::profiler::Flavour::Sglang, &st.cfg.log)
    {
        Ok(()) => (StatusCode::OK, "Start profiling.\n").into_response(),
        Err(_) => internal_error(),
    }
}

/// `/stop_profile` (GET or POST): writes the capture's trace before it answers (after the
/// profile's `profiler_stop_ms`).
pub(crate) async fn stop_profile(State(st): State<AppState>) -> Response {
    tokio::time::sleep(st.cfg.profile.profiler_stop()).await;
    match st.shared.profiler.stop(&st.cfg.log) {
        Ok(_) => (
            StatusCode::OK,
            "Stop profiling. This will take some time.\n",
        )
            .into_response(),
        Err(_) => internal_error(),
    }
}

/// What FastAPI answers when a handler raises.
fn internal_error() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "Internal Server Error",
    )
        .into_response()
}

/// Python's `Path(...).expanduser()`.
pub(crate) fn expand_home(dir: &str) -> std::path::PathBuf {
    match (dir.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
        _ => std::path::PathBuf::from(dir),
    }
}

/// `POST /v1/tokenize` (and `/tokenize`): `{"prompt": str | [str]}` -> `{"tokens", "count",
/// "max_model_len"}`, as SGLang answers (openai `TokenizeResponse`). The count is what
/// `/generate` would report as `prompt_tokens` for the same text.
pub(crate) async fn tokenize(State(st): State<AppState>, body: Bytes) -> Response {
    let v = match super::fastapi::parse_body(&body) {
        Ok(v) => v,
        Err(e) => return super::fastapi::validation_error(&[e]),
    };
    let max_model_len = st.cfg.context_length;
    match &v["prompt"] {
        Value::String(text) => {
            let tokens = crate::tokenizer::encode(text);
            json_response(
                StatusCode::OK,
                &json!({"tokens": tokens, "count": tokens.len(), "max_model_len": max_model_len}),
            )
        }
        Value::Array(texts) if texts.iter().all(Value::is_string) => {
            let tokens: Vec<Vec<u32>> = texts
                .iter()
                .map(|t| crate::tokenizer::encode(t.as_str().unwrap_or("")))
                .collect();
            let counts: Vec<usize> = tokens.iter().map(Vec::len).collect();
            json_response(
                StatusCode::OK,
                &json!({"tokens": tokens, "count": counts, "max_model_len": max_model_len}),
            )
        }
        _ => json_response(
            StatusCode::BAD_REQUEST,
            &json!({"object": "error", "message": "`prompt` must be a string or a list of strings",
                "type": "BadRequestError", "param": null, "code": 400}),
        ),
    }
}
