//! llama.cpp's HTTP API (`--api llama.cpp`), as llama-server serves it
//! (docs/reference/llama-cpp-facts.md §2-§8, docs/reference/llama-cpp-observed.md).
//!
//! JSON keys are in llama.cpp's order (it uses nlohmann's `ordered_json`;
//! tools/server/server-task.cpp `to_json_*`, server-context.cpp `get_props`, `get_models`,
//! `get_slots`). Streams send one event per generated token (several tokens of one
//! speculative step arrive as a burst of events); `usage` and `timings` ride on the final
//! chunk with `finish_reason`, as the observed build does (newer builds move usage to a
//! separate `choices: []` chunk with `stream_options.include_usage`). The connection closes
//! after each streamed response (see `keepalive`).

use super::keepalive::CloseAfterBody;
use super::{AppState, openai, unix_now};
use crate::llamacpp_options::LlamaOptions;
use crate::tokenizer;
use crate::types::{Command, Output, ReqOptions, Timings};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;

/// The BOS token every completion prompt starts with (`add_special`); the simulator's
/// tokenizer reserves ids below 256 for special tokens.
pub(crate) const BOS: u32 = 1;

/// What llama.cpp's handlers reach.
#[derive(Clone)]
pub(crate) struct LState {
    st: AppState,
    l: Arc<LlamaOptions>,
}

/// Builds llama-server's router.
pub(crate) fn router(st: AppState, l: Arc<LlamaOptions>) -> Router {
    let state = LState { st, l };
    Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/props", get(props))
        .route("/models", get(models))
        .route("/v1/models", get(models))
        .route("/slots", get(slots))
        .route("/slots/{id}", post(slot_action))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .route("/completion", post(native))
        .route("/completions", post(native))
        .route("/v1/completions", post(completions))
        .route("/chat/completions", post(chat))
        .route("/v1/chat/completions", post(chat))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn_with_state(state.clone(), loading))
        .with_state(state)
}

/// llama.cpp's error body (server-common.cpp `format_error_response`), status = code.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    json_ok(
        status,
        &json!({"error": {"code": status.as_u16(), "message": message, "type": kind}}),
    )
}

fn json_ok(status: StatusCode, v: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        v.to_string(),
    )
        .into_response()
}

/// Malformed JSON: llama-server lets nlohmann's parse_error escape to its 500 handler (checked
/// against the real server, tests/real_engine/llamacpp.rs).
fn parse_error() -> Response {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "[json.exception.parse_error.101] parse error: syntax error while parsing value",
    )
}

fn bad_request(message: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "not_found_error", "File Not Found")
}

/// Every path answers 503 while the model loads (server-http.cpp `middleware_server_state`).
async fn loading(State(s): State<LState>, req: Request, next: Next) -> Response {
    if !s.st.shared.is_ready() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable_error",
            "Loading model",
        );
    }
    next.run(req).await
}

/// `--api-key`: every path but the public ones needs `Authorization: Bearer KEY` (or
/// `X-Api-Key`) (server-http.cpp `get_public_endpoints`).
async fn authenticate(State(s): State<LState>, req: Request, next: Next) -> Response {
    let public = matches!(
        req.uri().path(),
        "/health" | "/v1/health" | "/models" | "/v1/models" | "/"
    );
    if !public && !s.l.api_keys.is_empty() {
        let h = req.headers();
        let bearer = h
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let x = h.get("x-api-key").and_then(|v| v.to_str().ok());
        let ok = [bearer, x]
            .iter()
            .flatten()
            .any(|k| s.l.api_keys.iter().any(|a| a == k));
        if !ok {
            return error(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "Invalid API Key",
            );
        }
    }
    next.run(req).await
}

async fn health() -> Response {
    json_ok(StatusCode::OK, &json!({"status": "ok"}))
}

fn build_info() -> String {
    format!("b0-servebench-sim-{}", env!("CARGO_PKG_VERSION"))
}

fn model_name(s: &LState) -> String {
    s.l.aliases
        .first()
        .cloned()
        .unwrap_or_else(|| s.l.model_path.clone())
}

fn sampling_params(s: &LState) -> Value {
    json!({"n_predict": s.l.n_predict, "seed": s.st.cfg.seed as i64, "temperature": 0.8,
           "dynatemp_range": 0.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
           "repeat_penalty": 1.0, "ignore_eos": false, "stream": true,
           "cache_prompt": s.l.cache_prompt, "n_probs": 0})
}

/// `GET /props`.
async fn props(State(s): State<LState>) -> Response {
    json_ok(
        StatusCode::OK,
        &json!({
            "default_generation_settings": {"params": sampling_params(&s), "n_ctx": s.l.n_ctx_slot},
            "total_slots": s.l.n_slots,
            "model_alias": model_name(&s),
            "model_path": s.l.model_path,
            "modalities": {"vision": false, "audio": false},
            "endpoint_slots": s.l.slots_endpoint,
            "endpoint_props": false,
            "endpoint_metrics": s.l.metrics,
            "webui": false,
            "chat_template": "{% for message in messages %}{{ message.content }}\n\n{% endfor %}assistant:",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "build_info": build_info(),
            "is_sleeping": false,
        }),
    )
}

/// `GET /v1/models` (and `/models`): the Ollama-style list and the OpenAI one.
async fn models(State(s): State<LState>) -> Response {
    let name = model_name(&s);
    let mem = &s.st.cfg.profile.memory;
    let size = (mem.weight_gb * 1e9) as u64;
    json_ok(
        StatusCode::OK,
        &json!({
            "models": [{"name": name, "model": name, "modified_at": "", "size": "", "digest": "",
                        "type": "model", "description": "", "tags": [""],
                        "capabilities": ["completion"], "parameters": "",
                        "details": {"parent_model": "", "format": "gguf", "family": "",
                                    "families": [""], "parameter_size": "", "quantization_level": ""}}],
            "object": "list",
            "data": [{"id": name, "aliases": s.l.aliases, "tags": [], "object": "model",
                      "created": s.st.created, "owned_by": "llamacpp",
                      "meta": {"vocab_type": 2, "n_vocab": tokenizer::VOCAB_SIZE,
                               "n_ctx_train": s.l.n_ctx_train, "n_ctx": s.l.n_ctx_slot,
                               "n_embd": 4096, "n_params": size / 2, "size": size}}],
        }),
    )
}

/// `GET /slots` (on by default; `--no-slots` turns it off).
async fn slots(State(s): State<LState>) -> Response {
    if !s.l.slots_endpoint {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "not_supported_error",
            "This server does not support slots endpoint. Start it with `--slots`",
        );
    }
    let views =
        s.st.shared
            .slots
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default();
    let list: Vec<Value> = views
        .iter()
        .map(|v| {
            json!({"id": v.id, "n_ctx": v.n_ctx, "speculative": s.st.cfg.speculative.is_some(),
                   "is_processing": v.task.is_some(),
                   "id_task": v.task.map_or(-1, |t| t as i64),
                   "n_prompt_tokens_cache": v.n_cached,
                   "params": sampling_params(&s),
                   "next_token": [{"has_next_token": v.task.is_some(), "has_new_line": false,
                                   "n_remain": -1, "n_decoded": 0}]})
        })
        .collect();
    json_ok(StatusCode::OK, &Value::Array(list))
}

/// `POST /slots/{id}?action=erase|save|restore`: every action needs `--slot-save-path`.
async fn slot_action(
    State(s): State<LState>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if s.l.slot_save_path.is_none() {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "not_supported_error",
            "This server does not support slots action. Start it with `--slot-save-path`",
        );
    }
    let Ok(id) = id.parse::<usize>() else {
        return bad_request("Invalid slot ID");
    };
    let id = id % s.l.n_slots.max(1);
    match q.get("action").map(String::as_str) {
        Some("erase") => {
            let (reply, rx) = tokio::sync::oneshot::channel();
            if s.st.tx.send(Command::EraseSlot { id, reply }).is_err() {
                return error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable_error",
                    "Loading model",
                );
            }
            // A busy slot is erased once its task ends: the call waits.
            let n = rx.await.unwrap_or(0);
            json_ok(StatusCode::OK, &json!({"id_slot": id, "n_erased": n}))
        }
        Some("save" | "restore") => error(
            StatusCode::NOT_IMPLEMENTED,
            "not_supported_error",
            "servebench sim does not implement slot save/restore",
        ),
        _ => bad_request("Invalid action"),
    }
}

/// `POST /tokenize`: `add_special` (default false) prepends BOS, which completions always do.
async fn tokenize(body: Bytes) -> Response {
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return parse_error();
    };
    let content = v.get("content").and_then(Value::as_str).unwrap_or("");
    let add_special = v
        .get("add_special")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let with_pieces = v
        .get("with_pieces")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut tokens: Vec<Value> = Vec::new();
    if add_special {
        tokens.push(if with_pieces {
            json!({"id": BOS, "piece": "<s>"})
        } else {
            json!(BOS)
        });
    }
    for piece in tokenizer::pieces(content) {
        let id = tokenizer::piece_id(piece);
        tokens.push(if with_pieces {
            json!({"id": id, "piece": piece})
        } else {
            json!(id)
        });
    }
    json_ok(StatusCode::OK, &json!({"tokens": tokens}))
}

/// `POST /detokenize`.
async fn detokenize(body: Bytes) -> Response {
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return bad_request("Invalid JSON body");
    };
    let ids: Vec<u32> = v
        .get("tokens")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                .filter(|id| *id != BOS)
                .collect()
        })
        .unwrap_or_default();
    let mut content = String::new();
    tokenizer::decode_into(&ids, &mut content);
    json_ok(StatusCode::OK, &json!({"content": content}))
}

/// llama-server's metric families, as the observed build counts and names them
/// (tools/server/server-task.cpp `to_metrics`): counters, then gauges;
/// `prompt_tokens_total` the prompt tokens it computed, the cached ones apart. Each is
/// (type, name, help, value).
fn families(
    st: &crate::metrics::SchedStats,
) -> [(&'static str, &'static str, &'static str, f64); 15] {
    let e = &st.engine;
    let busy = if e.n_decode > 0 {
        e.n_busy_slots as f64 / e.n_decode as f64
    } else {
        0.0
    };
    [
        (
            "counter",
            "prompt_tokens_total",
            "Number of prompt tokens processed, excluding cached tokens",
            e.prompt_tokens_computed as f64,
        ),
        (
            "counter",
            "prompt_tokens_cached_total",
            "Number of prompt tokens reused from the cache",
            e.prompt_tokens_cache_n as f64,
        ),
        (
            "counter",
            "prompt_seconds_total",
            "Total time spent processing prompts",
            e.prompt_seconds,
        ),
        (
            "counter",
            "tokens_predicted_total",
            "Number of generation tokens processed",
            st.generation_tokens_total as f64,
        ),
        (
            "counter",
            "tokens_predicted_seconds_total",
            "Total time spent generating tokens",
            e.predicted_seconds,
        ),
        (
            "counter",
            "n_decode_total",
            "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
            e.n_decode as f64,
        ),
        (
            "counter",
            "n_tokens_max",
            "Largest observed sequence length (prompt + generation)",
            e.n_tokens_max as f64,
        ),
        (
            "counter",
            "spec_decode_num_draft_tokens_total",
            "Speculative: Total draft tokens generated",
            e.spec_draft_tokens as f64,
        ),
        (
            "counter",
            "spec_decode_num_accepted_tokens_total",
            "Speculative: Total draft tokens accepted by the target model",
            e.spec_accepted_tokens as f64,
        ),
        (
            "counter",
            "spec_decode_num_drafts_total",
            "Speculative: Total speculative decoding verification steps",
            e.spec_verify_steps as f64,
        ),
        (
            "gauge",
            "prompt_tokens_seconds",
            "Average prompt throughput in tokens/s",
            e.last_prompt_tok_s,
        ),
        (
            "gauge",
            "predicted_tokens_seconds",
            "Average generation throughput in tokens/s",
            e.last_predicted_tok_s,
        ),
        (
            "gauge",
            "requests_processing",
            "Number of requests processing",
            st.num_running_reqs as f64,
        ),
        (
            "gauge",
            "requests_deferred",
            "Number of requests deferred",
            e.deferred as f64,
        ),
        (
            "gauge",
            "n_busy_slots_per_decode",
            "Average number of busy slots per llama_decode() call",
            busy,
        ),
    ]
}

/// `GET /metrics` (with `--metrics`): llama.cpp's names, unlabeled but for the per-position
/// speculative counter.
async fn metrics(State(s): State<LState>) -> Response {
    if !s.l.metrics {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "not_supported_error",
            "This server does not support metrics endpoint. Start it with `--metrics`",
        );
    }
    let st = s.st.shared.stats();
    let e = &st.engine;
    let mut out = String::new();
    for (kind, name, help, value) in families(&st) {
        let _ = writeln!(
            out,
            "# HELP llamacpp:{name} {help}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}"
        );
    }
    // A labeled counter, one series per draft position, once a speculative task finished.
    if !e.spec_accepted_per_pos.is_empty() {
        let name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total";
        let _ = writeln!(
            out,
            "# HELP {name} Accepted tokens per draft position\n# TYPE {name} counter"
        );
        for (i, n) in e.spec_accepted_per_pos.iter().enumerate() {
            let _ = writeln!(out, "{name}{{position=\"{i}\"}} {n}");
        }
    }
    (
        [
            (
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4".to_string(),
            ),
            (
                header::HeaderName::from_static("process-start-time-unix"),
                s.st.created.to_string(),
            ),
        ],
        out,
    )
        .into_response()
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// `/completion`: llama.cpp's own shape; the stream ends without `[DONE]`.
    Native,
    /// `/v1/completions`.
    Completion,
    /// `/v1/chat/completions`.
    Chat,
}

struct Shape {
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    prompt_text: String,
    n_ctx_slot: u64,
    /// `stream_options.include_usage`: a streamed chat ends with a separate `choices: []`
    /// chunk holding usage and timings (without it, no usage at all).
    include_usage: bool,
    /// The request's thinking tokens (`crate::thinking`).
    think: u64,
    /// Chat carries thinking in `reasoning_content` (`--reasoning-format` not `none`).
    split: bool,
    /// The tool call the chat request makes (`crate::tools`).
    call: Option<crate::tools::PlannedCall>,
}

/// Without `--jinja` llama-server refuses `tools`, and a `tool_choice` other than `auto`,
/// with a `std::runtime_error` its handler answers 500 (server-common.cpp
/// `oaicompat_chat_params_parse`). It reads the choice as a string: a missing or non-string
/// one is `auto`.
fn refused_tools(s: &LState, v: &Value) -> Option<Response> {
    if s.st.cfg.tool_call_parser {
        return None;
    }
    let tools = v["tools"].as_array().is_some_and(|t| !t.is_empty());
    let choice = v
        .get("tool_choice")
        .and_then(Value::as_str)
        .unwrap_or("auto");
    let message = if tools {
        "tools param requires --jinja flag"
    } else if choice != "auto" {
        "tool_choice param requires --jinja flag"
    } else {
        return None;
    };
    Some(error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        message,
    ))
}

async fn native(State(s): State<LState>, body: Bytes) -> Response {
    handle(s, body, Kind::Native).await
}

async fn completions(State(s): State<LState>, body: Bytes) -> Response {
    handle(s, body, Kind::Completion).await
}

async fn chat(State(s): State<LState>, body: Bytes) -> Response {
    handle(s, body, Kind::Chat).await
}

fn random_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

async fn handle(s: LState, body: Bytes, kind: Kind) -> Response {
    let received = Instant::now();
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return parse_error();
    };
    if kind == Kind::Chat
        && let Some(r) = refused_tools(&s, &v)
    {
        return r;
    }
    let text_ids = match kind {
        Kind::Chat => openai::chat_prompt(&v),
        Kind::Native | Kind::Completion => match v.get("prompt") {
            None | Some(Value::Null) => return bad_request("\"prompt\" is required"),
            _ => openai::completion_prompt(&v),
        },
    };
    let text_ids = match text_ids {
        Ok(ids) => ids,
        Err(e) => return bad_request(&e.0),
    };
    // Completion prompts get BOS (`add_special`), unlike /tokenize's default.
    let mut ids = Vec::with_capacity(text_ids.len() + 1);
    ids.push(BOS);
    ids.extend(text_ids);
    let n = ids.len() as u64;
    let n_ctx = s.l.n_ctx_slot;
    if n >= n_ctx {
        return json_ok(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"code": 400,
                "message": format!("request ({n} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"),
                "type": "exceed_context_size_error", "n_prompt_tokens": n, "n_ctx": n_ctx}}),
        );
    }
    let int = |k: &str| v.get(k).and_then(Value::as_i64);
    let asked = match kind {
        Kind::Native => int("n_predict").or(int("max_tokens")),
        Kind::Completion => int("max_tokens"),
        Kind::Chat => int("max_completion_tokens").or(int("max_tokens")),
    }
    .unwrap_or(-1);
    // Generation stops when the slot's context is full: a large max_tokens is no error.
    let room = n_ctx - n;
    let mut max_new = if asked < 0 {
        room
    } else {
        (asked as u64).min(room)
    };
    if s.l.n_predict >= 0 {
        max_new = max_new.min(s.l.n_predict as u64);
    }
    let opts = ReqOptions {
        cache_prompt: v
            .get("cache_prompt")
            .and_then(Value::as_bool)
            .unwrap_or(s.l.cache_prompt),
        id_slot: int("id_slot").filter(|i| *i >= 0).map(|i| i as usize),
        ..ReqOptions::default()
    };
    let rx = match s.st.enqueue(None, ids, max_new, received, opts) {
        Ok((_, rx)) => rx,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", &e.0),
    };
    let prompt_text = match v.get("prompt") {
        Some(Value::String(p)) => p.clone(),
        _ => String::new(),
    };
    let shape = Shape {
        kind,
        id: format!("chatcmpl-{}", random_id()),
        // The request's `model` is ignored: responses name the alias (or the model path).
        model: model_name(&s),
        created: unix_now() as u64,
        prompt_text,
        n_ctx_slot: n_ctx,
        include_usage: v
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        think: crate::thinking::tokens_for(
            &s.st.cfg.profile.thinking,
            &v,
            kind == Kind::Chat,
            &random_id(),
        ),
        split: s.st.cfg.reasoning_split && kind == Kind::Chat,
        call: (kind == Kind::Chat)
            .then(|| {
                let caller = crate::tools::Caller::of(&s.st.cfg, crate::tools::CallShape::LlamaCpp);
                // server-common.cpp `gen_tool_call_id`: 32 random letters and digits.
                crate::tools::plan(&v, &caller, random_id())
            })
            .flatten(),
    };
    if v.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        let body = Body::from_stream(event_stream(rx, Arc::new(shape)));
        let mut resp = Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(body)
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
        resp.extensions_mut().insert(CloseAfterBody);
        resp
    } else {
        collect(rx, shape).await
    }
}

/// A non-streamed chat's message beyond its content (chat.cpp `common_chat_msg::
/// to_json_oaicompat`): `reasoning_content` when the thinking is split and not empty, the
/// call in `tool_calls` (type, function, id) when one was made.
fn full_message(shape: &Shape, thinking: &str, message: &mut Value) {
    if !thinking.is_empty() {
        message["reasoning_content"] = thinking.into();
    }
    if let Some(call) = shape.call.as_ref().and_then(|c| c.whole()) {
        message["tool_calls"] = json!([call]);
    }
}

fn timings_json(t: &Timings) -> Value {
    let per = |ms: f64, n: u64| {
        if n == 0 || ms <= 0.0 {
            (0.0, 0.0)
        } else {
            (ms / n as f64, 1e3 * n as f64 / ms)
        }
    };
    let (p_tok, p_s) = per(t.prompt_ms, t.prompt_n);
    let (g_tok, g_s) = per(t.predicted_ms, t.predicted_n);
    json!({"cache_n": t.cache_n, "prompt_n": t.prompt_n, "prompt_ms": t.prompt_ms,
           "prompt_per_token_ms": p_tok, "prompt_per_second": p_s,
           "predicted_n": t.predicted_n, "predicted_ms": t.predicted_ms,
           "predicted_per_token_ms": g_tok, "predicted_per_second": g_s})
}

fn usage_json(o: &Output) -> Value {
    json!({"completion_tokens": o.completion_tokens, "prompt_tokens": o.prompt_tokens,
           "total_tokens": o.completion_tokens + o.prompt_tokens,
           "prompt_tokens_details": {"cached_tokens": o.cached_tokens}})
}

/// One partial event per generated token.
fn partial(
    shape: &Shape,
    id: u32,
    text: &str,
    predicted: u64,
    o: &Output,
    role: bool,
) -> Vec<Value> {
    match shape.kind {
        Kind::Native => vec![
            json!({"index": 0, "content": text, "tokens": [id], "stop": false,
                                    "id_slot": o.slot.map_or(-1, |s| s as i64),
                                    "tokens_predicted": predicted, "tokens_evaluated": o.prompt_tokens}),
        ],
        Kind::Completion => vec![json!({
            "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": null}],
            "created": shape.created, "model": shape.model, "system_fingerprint": build_info(),
            "object": "text_completion", "id": shape.id})],
        Kind::Chat => {
            let mut v = Vec::new();
            if role {
                v.push(chat_chunk(
                    shape,
                    json!({"role": "assistant", "content": null}),
                ));
            }
            v.push(chat_chunk(shape, json!({"content": text})));
            v
        }
    }
}

/// A streamed chat chunk carrying `delta`.
fn chat_chunk(shape: &Shape, delta: Value) -> Value {
    json!({"choices": [{"finish_reason": null, "index": 0, "delta": delta}],
           "created": shape.created, "id": shape.id, "model": shape.model,
           "system_fingerprint": build_info(), "object": "chat.completion.chunk"})
}

/// The events of an answer token of a request that calls a tool (the role first): the
/// call's piece, when the token adds one (server-chat.cpp sends a chunk per message diff).
fn call_events(
    shape: &Shape,
    call: &crate::tools::PlannedCall,
    answered: u64,
    last: bool,
    role: bool,
) -> Vec<Value> {
    let mut v = Vec::new();
    if role {
        v.push(chat_chunk(
            shape,
            json!({"role": "assistant", "content": null}),
        ));
    }
    if let Some((field, piece)) = call.delta(answered, last) {
        let mut delta = serde_json::Map::new();
        delta.insert(field.into(), piece);
        v.push(chat_chunk(shape, Value::Object(delta)));
    }
    v
}

/// The final result; `content` is the whole text for non-streamed responses.
fn final_json(shape: &Shape, o: &Output, content: &str, streamed: bool) -> Value {
    let t = o.timings.unwrap_or_default();
    match shape.kind {
        Kind::Native => json!({
            "index": 0, "content": content, "tokens": [], "id_slot": o.slot.map_or(-1, |s| s as i64),
            "stop": true, "model": shape.model, "tokens_predicted": o.completion_tokens,
            "tokens_evaluated": o.prompt_tokens,
            "generation_settings": {"n_predict": -1, "n_ctx": shape.n_ctx_slot, "stream": streamed},
            "prompt": shape.prompt_text, "has_new_line": false, "truncated": false,
            "stop_type": "limit", "stopping_word": "",
            "tokens_cached": o.prompt_tokens + o.completion_tokens,
            "timings": timings_json(&t)}),
        Kind::Completion => json!({
            "choices": [{"text": content, "index": 0, "logprobs": null, "finish_reason": "length"}],
            "created": shape.created, "model": shape.model, "system_fingerprint": build_info(),
            "object": "text_completion", "usage": usage_json(o), "id": shape.id,
            "timings": timings_json(&t)}),
        Kind::Chat if streamed && shape.include_usage => json!({
            "choices": [{"finish_reason": "length", "index": 0, "delta": {}}],
            "created": shape.created, "id": shape.id, "model": shape.model,
            "system_fingerprint": build_info(), "object": "chat.completion.chunk"}),
        Kind::Chat if streamed => json!({
            "choices": [{"finish_reason": "length", "index": 0, "delta": {}}],
            "created": shape.created, "id": shape.id, "model": shape.model,
            "system_fingerprint": build_info(), "object": "chat.completion.chunk",
            "timings": timings_json(&t)}),
        Kind::Chat => json!({
            "choices": [{"finish_reason": "length", "index": 0,
                         "message": {"role": "assistant", "content": content}}],
            "created": shape.created, "model": shape.model, "system_fingerprint": build_info(),
            "object": "chat.completion", "usage": usage_json(o), "id": shape.id,
            "timings": timings_json(&t)}),
    }
}

fn sse_into(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(v.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

struct StreamState {
    rx: UnboundedReceiver<Output>,
    shape: Arc<Shape>,
    predicted: u64,
    done: bool,
}

/// One write per token event (so a speculative step's tokens leave as separate events).
fn event_stream(
    rx: UnboundedReceiver<Output>,
    shape: Arc<Shape>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    let s = StreamState {
        rx,
        shape,
        predicted: 0,
        done: false,
    };
    stream::unfold(s, |mut s| async move {
        if s.done {
            return None;
        }
        let o = s.rx.recv().await?;
        let mut out = Vec::with_capacity(256 * (o.new_ids.len() + 1));
        for (k, &id) in o.new_ids.iter().enumerate() {
            let role = s.predicted == 0;
            let thinking = s.predicted < s.shape.think;
            // Once the call is sent the model writes on, and its text is content (below).
            if let Some(call) = s.shape.call.as_ref().filter(|c| !thinking && !c.complete()) {
                s.predicted += 1;
                let last = o.finish.is_some() && k + 1 == o.new_ids.len();
                let answered = s.predicted - s.shape.think;
                for ev in call_events(&s.shape, call, answered, last, role) {
                    sse_into(&mut out, &ev);
                }
                continue;
            }
            let text = crate::thinking::token_text(s.predicted, s.shape.think, id, !s.shape.split)
                .to_string();
            s.predicted += 1;
            // A thinking marker the template's parser consumed streams nothing
            // (common_chat_msg_diff is empty), and no chunk is sent for it but the role's.
            if text.is_empty() {
                if role {
                    let mut first = partial(&s.shape, id, "", s.predicted, &o, true);
                    first.truncate(1);
                    first.iter().for_each(|ev| sse_into(&mut out, ev));
                }
                continue;
            }
            for mut ev in partial(&s.shape, id, &text, s.predicted, &o, role) {
                // The template's thinking, parsed out (common_chat_msg_diff): its own field.
                if thinking && s.shape.split && ev["choices"][0]["delta"]["content"].is_string() {
                    ev["choices"][0]["delta"] = json!({"reasoning_content": text});
                }
                sse_into(&mut out, &ev);
            }
        }
        if o.finish.is_some() {
            s.done = true;
            sse_into(&mut out, &final_json(&s.shape, &o, "", true));
            if s.shape.kind == Kind::Chat && s.shape.include_usage {
                let t = o.timings.unwrap_or_default();
                sse_into(
                    &mut out,
                    &json!({"choices": [], "created": s.shape.created, "id": s.shape.id,
                            "model": s.shape.model, "system_fingerprint": build_info(),
                            "object": "chat.completion.chunk", "usage": usage_json(&o),
                            "timings": timings_json(&t)}),
                );
            }
            if s.shape.kind != Kind::Native {
                out.extend_from_slice(super::DONE);
            }
        }
        Some((Ok(Bytes::from(out)), s))
    })
}

async fn collect(mut rx: UnboundedReceiver<Output>, shape: Shape) -> Response {
    let (mut text, mut thinking) = (String::new(), String::new());
    while let Some(o) = rx.recv().await {
        if shape.kind == Kind::Chat {
            let (thought, answer) = crate::thinking::shown(&o, shape.think, shape.split);
            thinking.push_str(&thought);
            crate::tools::gather(shape.call.as_ref(), &o, shape.think, &answer, &mut text);
        } else {
            tokenizer::decode_into(&o.new_ids, &mut text);
        }
        if o.finish.is_some() {
            let mut body = final_json(&shape, &o, &text, false);
            if shape.kind == Kind::Chat {
                full_message(&shape, &thinking, &mut body["choices"][0]["message"]);
            }
            return json_ok(StatusCode::OK, &body);
        }
    }
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "Compute error.",
    )
}
