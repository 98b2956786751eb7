//! Health, cache, info, metrics and abort endpoints.

use super::{AppState, json_response, parse_json};
use crate::sim::types::Command;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// SGLang's flush reply text (same for success and refusal).
const FLUSH_TEXT: &str = "Cache flushed.\nPlease check backend logs for more details. \
(When there are running or waiting requests, the operation will not be performed.)\n";

/// `GET|POST /flush_cache`: 200 when flushed, 400 while requests are running or queued.
pub async fn flush(State(st): State<AppState>) -> Response {
    let (tx, rx) = tokio::sync::oneshot::channel();
    if st.tx.send(Command::Flush(tx)).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let ok = rx.await.unwrap_or(false);
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    (status, FLUSH_TEXT).into_response()
}

/// `GET /health` and `/health_generate`: 503 until warmup is done, then 200 with an empty body.
pub async fn health(State(st): State<AppState>) -> Response {
    if st.shared.is_ready() {
        StatusCode::OK.into_response()
    } else {
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    }
}

/// `GET /server_info`: every server argument at top level plus live state.
pub async fn server_info(State(st): State<AppState>) -> Response {
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
pub async fn model_info(State(st): State<AppState>) -> Response {
    let tok = st
        .cfg
        .args
        .str("tokenizer-path")
        .unwrap_or(&st.cfg.model_path)
        .to_string();
    json_response(
        StatusCode::OK,
        &json!({"model_path": st.cfg.model_path, "tokenizer_path": tok, "is_generation": true,
                "preferred_sampling_params": null, "weight_version": "default"}),
    )
}

/// `GET /v1/models`.
pub async fn models(State(st): State<AppState>) -> Response {
    let name = &st.cfg.served_model_name;
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": [{"id": name, "object": "model", "created": st.created,
                 "owned_by": "sglang", "root": name, "parent": null,
                 "max_model_len": st.cfg.context_length}]}),
    )
}

/// `GET /get_load`.
pub async fn load(State(st): State<AppState>) -> Response {
    let s = st.shared.stats();
    json_response(
        StatusCode::OK,
        &json!([{"dp_rank": 0, "num_reqs": s.num_running_reqs + s.num_queue_reqs,
                 "num_waiting_reqs": s.num_queue_reqs, "num_tokens": s.num_used_tokens}]),
    )
}

/// `GET /metrics` (registered only with `--enable-metrics`).
pub async fn metrics(State(st): State<AppState>) -> Response {
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

/// `POST /abort_request {"rid": ..}` or `{"abort_all": true}`.
pub async fn abort(State(st): State<AppState>, body: Bytes) -> Response {
    let v = match parse_json(&body) {
        Ok(v) => v,
        Err(e) => return (StatusCode::BAD_REQUEST, e.0).into_response(),
    };
    let all = v.get("abort_all").and_then(Value::as_bool).unwrap_or(false);
    let rid = v.get("rid").and_then(Value::as_str).map(str::to_string);
    if !all && rid.is_none() {
        return (StatusCode::BAD_REQUEST, "rid or abort_all is required").into_response();
    }
    let _ = st.tx.send(Command::Abort {
        rid: if all { None } else { rid },
    });
    StatusCode::OK.into_response()
}

/// Profiling endpoints: accepted, nothing to profile.
pub async fn ok() -> Response {
    (StatusCode::OK, "OK").into_response()
}

/// `POST /v1/tokenize` (and `/tokenize`): `{"prompt": str | [str]}` -> `{"tokens", "count",
/// "max_model_len"}`, as SGLang answers (openai `TokenizeResponse`). The count is what
/// `/generate` would report as `prompt_tokens` for the same text.
pub async fn tokenize(State(st): State<AppState>, body: Bytes) -> Response {
    let v = match super::parse_json(&body) {
        Ok(v) => v,
        Err(e) => {
            return json_response(StatusCode::BAD_REQUEST, &json!({"error": {"message": e.0}}));
        }
    };
    let max_model_len = st.cfg.context_length;
    match &v["prompt"] {
        Value::String(text) => {
            let tokens = crate::sim::tokenizer::encode(text);
            json_response(
                StatusCode::OK,
                &json!({"tokens": tokens, "count": tokens.len(), "max_model_len": max_model_len}),
            )
        }
        Value::Array(texts) if texts.iter().all(Value::is_string) => {
            let tokens: Vec<Vec<u32>> = texts
                .iter()
                .map(|t| crate::sim::tokenizer::encode(t.as_str().unwrap_or("")))
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
