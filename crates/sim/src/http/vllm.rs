//! vLLM's HTTP API (`--api vllm`), as vLLM 0.34 serves it (docs/reference/vllm-facts.md §2-§8).
//!
//! Shapes follow vLLM's pydantic models and how each is dumped: streamed completion chunks
//! with `exclude_unset` (so `usage` appears only with continuous usage stats), the final usage
//! chunk with `exclude_none` (openai/completion/serving.py, openai/chat_completion/serving.py,
//! read at upstream commits 030ea52 and 006c49d), errors as `{"error": {message, type, param,
//! code}}` (serve/engine/protocol.py `ErrorResponse`).

use super::{AppState, json_response, openai, unix_now};
use crate::metrics::Histogram;
use crate::tokenizer;
use crate::types::{Command, Finish, Output, ReqOptions};
use crate::vllm_options::VllmOptions;
use crate::voice::{Proc, VLLM_VERSION, Voice};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;

/// Every route, with its methods, in the order vLLM logs them at start-up.
pub(crate) const ROUTES: &[(&str, &str)] = &[
    ("/health", "GET"),
    ("/ping", "GET, POST"),
    ("/load", "GET"),
    ("/version", "GET"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/v1/models", "GET"),
    ("/v1/completions", "POST"),
    ("/v1/chat/completions", "POST"),
    ("/metrics", "GET"),
    ("/reset_prefix_cache", "POST"),
    ("/reset_mm_cache", "POST"),
    ("/reset_encoder_cache", "POST"),
    ("/server_info", "GET"),
    ("/is_sleeping", "GET"),
];

/// Routes registered only with `VLLM_SERVER_DEV_MODE=1` (serve/__init__.py
/// `register_vllm_dev_api_routers`).
pub(crate) const DEV_ROUTES: &[&str] = &[
    "/reset_prefix_cache",
    "/reset_mm_cache",
    "/reset_encoder_cache",
    "/server_info",
    "/is_sleeping",
];

/// What vLLM's handlers reach.
#[derive(Clone)]
pub(crate) struct VState {
    st: AppState,
    v: Arc<VllmOptions>,
    voice: Voice,
}

/// Builds vLLM's router: the routes, API-key checking on /v1 paths, uvicorn's access log.
pub(crate) fn router(st: AppState, v: Arc<VllmOptions>) -> Router {
    let voice = Voice::new(crate::api::Api::Vllm, st.cfg.log.clone());
    let state = VState { st, v, voice };
    let mut r = Router::new()
        .route("/health", get(health))
        .route("/ping", get(health).post(health))
        .route("/load", get(load))
        .route("/version", get(version))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/v1/models", get(models))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/metrics", get(metrics));
    // vLLM includes its profiler routes only when `--profiler-config` names a profiler.
    if state.v.profiler_dir.is_some() {
        r = r
            .route("/start_profile", post(start_profile))
            .route("/stop_profile", post(stop_profile));
    }
    if state.v.dev_mode {
        r = r
            .route("/reset_prefix_cache", post(reset_prefix_cache))
            .route("/reset_mm_cache", post(empty_ok))
            .route("/reset_encoder_cache", post(empty_ok))
            .route("/server_info", get(server_info))
            .route("/is_sleeping", get(is_sleeping));
    }
    r.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(middleware::from_fn_with_state(state.clone(), access_log))
        .with_state(state)
}

/// `POST /start_profile`: the torch profiler of `--profiler-config` starts (200, no body).
async fn start_profile(State(s): State<VState>) -> Response {
    s.st.cfg
        .log
        .info("INFO api_router.py:33: Starting profiler...");
    let dir = s.v.profiler_dir.clone().unwrap_or_default();
    let start = crate::profiler::StartRequest {
        dir: super::admin::expand_home(&dir),
        profile_id: String::new(),
        num_steps: None,
        activities: vec!["CPU".into(), "CUDA".into()],
    };
    // A start while one runs changes nothing: the profiler is already recording.
    let _ =
        s.st.shared
            .profiler
            .start(start, crate::profiler::Flavour::Vllm, &s.st.cfg.log);
    s.st.cfg
        .log
        .info("INFO api_router.py:35: Profiler started.");
    StatusCode::OK.into_response()
}

/// `POST /stop_profile`: the trace is written before it answers (200, no body).
async fn stop_profile(State(s): State<VState>) -> Response {
    s.st.cfg
        .log
        .info("INFO api_router.py:41: Stopping profiler...");
    tokio::time::sleep(s.st.cfg.profile.profiler_stop()).await;
    let _ = s.st.shared.profiler.stop(&s.st.cfg.log);
    s.st.cfg
        .log
        .info("INFO api_router.py:43: Profiler stopped.");
    StatusCode::OK.into_response()
}

/// vLLM's error body and status.
fn error(status: StatusCode, kind: &str, message: &str, param: Option<&str>) -> Response {
    json_response(
        status,
        &json!({"error": {"message": message, "type": kind, "param": param, "code": status.as_u16()}}),
    )
}

fn bad_request(message: &str, param: Option<&str>) -> Response {
    error(StatusCode::BAD_REQUEST, "BadRequestError", message, param)
}

/// FastAPI's 404 for an unknown path.
async fn not_found() -> Response {
    json_response(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"}))
}

async fn method_not_allowed() -> Response {
    json_response(
        StatusCode::METHOD_NOT_ALLOWED,
        &json!({"detail": "Method Not Allowed"}),
    )
}

/// `--api-key` guards `/v1`, `/v2` and `/inference` paths only (FrontendArgs.api_key).
async fn authenticate(State(s): State<VState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let guarded = ["/v1", "/v2", "/inference"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")));
    if guarded && !s.v.api_keys.is_empty() && req.method() != axum::http::Method::OPTIONS {
        let ok = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .is_some_and(|k| s.v.api_keys.iter().any(|a| a == k));
        if !ok {
            return json_response(StatusCode::UNAUTHORIZED, &json!({"error": "Unauthorized"}));
        }
    }
    next.run(req).await
}

/// Uvicorn's access log line, once the response starts.
async fn access_log(State(s): State<VState>, req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.to_string())
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let line = format!(
        "{} {}{} HTTP/1.1",
        req.method(),
        req.uri().path(),
        req.uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default()
    );
    let resp = next.run(req).await;
    if s.v.access_log {
        let status = resp.status();
        s.voice.vllm_raw(
            Proc::Api,
            &format!(
                "INFO:     {peer} - \"{line}\" {} {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            ),
        );
    }
    resp
}

/// `GET /health`, `GET|POST /ping`: 200 with an empty body; 503 once the engine is dead.
async fn health(State(s): State<VState>) -> Response {
    if s.st.shared.crashed() {
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    } else {
        StatusCode::OK.into_response()
    }
}

/// `GET /version`: vLLM's version, with the simulator named as a local version label.
async fn version() -> Response {
    json_response(
        StatusCode::OK,
        &json!({"version": format!("{VLLM_VERSION}+servebench.sim")}),
    )
}

async fn load(State(s): State<VState>) -> Response {
    let st = s.st.shared.stats();
    json_response(
        StatusCode::OK,
        &json!({"server_load": st.num_running_reqs + st.num_queue_reqs}),
    )
}

fn random_id() -> String {
    format!("{:016x}", uuid::Uuid::new_v4().as_u128() as u64)
}

/// `GET /v1/models`: one card per served name.
async fn models(State(s): State<VState>) -> Response {
    let data: Vec<Value> = s
        .v
        .served_names
        .iter()
        .map(|name| {
            json!({"id": name, "object": "model", "created": s.st.created, "owned_by": "vllm",
                   "root": s.v.model, "parent": null, "max_model_len": s.st.cfg.context_length,
                   "permission": [{"id": format!("modelperm-{}", random_id()), "object": "model_permission",
                       "created": s.st.created, "allow_create_engine": false, "allow_sampling": true,
                       "allow_logprobs": true, "allow_search_indices": false, "allow_view": true,
                       "allow_fine_tuning": false, "organization": "*", "group": null, "is_blocking": false}]})
        })
        .collect();
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}

fn parse_body(body: &Bytes) -> Result<Value, Box<Response>> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .filter(Value::is_object)
        .ok_or_else(|| {
            Box::new(bad_request(
                "Expecting value: the request body is not a JSON object.",
                None,
            ))
        })
}

/// A request's `model` must be one of the served names (serve/engine/serving.py `_check_model`).
fn check_model(s: &VState, v: &Value) -> Result<(), Box<Response>> {
    match v.get("model").and_then(Value::as_str) {
        Some(m) if !s.v.skip_model_validation && !s.v.served_names.iter().any(|n| n == m) => {
            Err(Box::new(error(
                StatusCode::NOT_FOUND,
                "NotFoundError",
                &format!("The model `{m}` does not exist."),
                Some("model"),
            )))
        }
        _ => Ok(()),
    }
}

/// `POST /tokenize`: a prompt or chat messages; no length limit.
async fn tokenize(State(s): State<VState>, body: Bytes) -> Response {
    let v = match parse_body(&body) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if let Err(r) = check_model(&s, &v) {
        return *r;
    }
    let ids = if v.get("messages").is_some() {
        openai::chat_prompt(&v)
    } else {
        match v.get("prompt") {
            Some(Value::String(p)) => Ok(tokenizer::encode(p)),
            _ => return bad_request("Field required: prompt or messages", Some("prompt")),
        }
    };
    let ids = match ids {
        Ok(ids) => ids,
        Err(e) => return bad_request(&e.0, None),
    };
    let strs = v
        .get("return_token_strs")
        .and_then(Value::as_bool)
        .unwrap_or(false)
        .then(|| {
            let text = v.get("prompt").and_then(Value::as_str).unwrap_or("");
            tokenizer::pieces(text)
        });
    json_response(
        StatusCode::OK,
        &json!({"count": ids.len(), "max_model_len": s.st.cfg.context_length, "tokens": ids,
                "token_strs": strs}),
    )
}

/// `POST /detokenize`: token ids back to text.
async fn detokenize(State(s): State<VState>, body: Bytes) -> Response {
    let v = match parse_body(&body) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if let Err(r) = check_model(&s, &v) {
        return *r;
    }
    let Some(ids) = v.get("tokens").and_then(Value::as_array).and_then(|a| {
        a.iter()
            .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
            .collect::<Option<Vec<u32>>>()
    }) else {
        return bad_request("tokens must be a list of token ids", Some("tokens"));
    };
    let mut text = String::new();
    tokenizer::decode_into(&ids, &mut text);
    json_response(StatusCode::OK, &json!({"prompt": text}))
}

#[derive(Clone, Copy, PartialEq)]
enum Api {
    Completion,
    Chat,
}

/// What shapes every chunk of one response.
struct Shape {
    api: Api,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    continuous_usage: bool,
    prompt_details: bool,
    /// The request's thinking tokens (`crate::thinking`).
    think: u64,
    /// `--reasoning-parser`: chat carries thinking in `delta.reasoning`, and the usage gives
    /// `completion_tokens_details.reasoning_tokens` (chat_completion/serving.py).
    split: bool,
    /// `--per-request-spec-decode-metrics`: the final usage chunk carries the request's counts.
    spec_metrics: bool,
    /// The tool call the chat request makes (`crate::tools`).
    call: Option<crate::tools::PlannedCall>,
}

impl Shape {
    fn splits(&self) -> bool {
        self.split && self.api == Api::Chat
    }
}

async fn completions(State(s): State<VState>, body: Bytes) -> Response {
    handle(s, body, Api::Completion).await
}

async fn chat(State(s): State<VState>, body: Bytes) -> Response {
    handle(s, body, Api::Chat).await
}

fn opt_int(v: &Value, key: &str) -> Result<Option<i64>, Box<Response>> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x.as_i64().map(Some).ok_or_else(|| {
            Box::new(bad_request(
                &format!("{key}: Input should be a valid integer"),
                Some(key),
            ))
        }),
    }
}

/// Options vLLM refuses before it reads the prompt: `stream_options` without streaming (the
/// request model's validator), a `tool_choice` other than `none` without a tool parser
/// (renderers/online_renderer.py `render_chat`). None: none refused.
fn refused_options(s: &VState, v: &Value, api: Api, stream: bool) -> Option<Response> {
    let opts = v.get("stream_options").filter(|o| !o.is_null());
    if opts.is_some() && !stream {
        return Some(bad_request(
            "Stream options can only be defined when `stream=True`.",
            Some("stream_options"),
        ));
    }
    let tools = v["tools"].as_array().is_some_and(|t| !t.is_empty());
    if api != Api::Chat || s.st.cfg.tool_call_parser {
        return None;
    }
    // The request model makes a missing choice `auto` when tools are given.
    let choice = match v.get("tool_choice") {
        None | Some(Value::Null) if tools => &Value::from("auto"),
        None | Some(Value::Null) => return None,
        Some(c) => c,
    };
    let message = match choice {
        Value::String(c) if c == "none" => return None,
        Value::String(c) if c == "auto" => {
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"
                .to_string()
        }
        Value::String(c) => format!("tool_choice=\"{c}\" requires --tool-call-parser to be set"),
        c => format!(
            "tool_choice=function \"{}\" requires --tool-call-parser to be set",
            c.pointer("/function/name").and_then(Value::as_str).unwrap_or_default()
        ),
    };
    Some(bad_request(&message, None))
}

/// The request's prompt as token ids (a completion's must be given and non-empty), or vLLM's
/// refusal.
fn prompt_ids(v: &Value, api: Api) -> Result<Vec<u32>, Box<Response>> {
    let ids = match api {
        Api::Completion => {
            let empty = match v.get("prompt") {
                None | Some(Value::Null) => true,
                Some(Value::String(p)) => p.is_empty(),
                _ => false,
            };
            if empty {
                return Err(Box::new(bad_request(
                    "Either prompt or prompt_embeds must be provided and non-empty.",
                    Some("prompt"),
                )));
            }
            openai::completion_prompt(v)
        }
        Api::Chat => openai::chat_prompt(v),
    };
    ids.map_err(|e| Box::new(bad_request(&e.0, None)))
}

/// The request's output limit as vLLM reads it (`max_tokens`, on chat also
/// `max_completion_tokens`, which wins); None: as many as fit.
fn max_tokens_of(v: &Value, api: Api) -> Result<Option<i64>, Box<Response>> {
    Ok(match api {
        Api::Completion => match opt_int(v, "max_tokens") {
            Ok(m) => Some(m.unwrap_or(16)),
            Err(r) => return Err(r),
        },
        Api::Chat => match (
            opt_int(v, "max_completion_tokens"),
            opt_int(v, "max_tokens"),
        ) {
            (Ok(a), Ok(b)) => a.or(b),
            (Err(r), _) | (_, Err(r)) => return Err(r),
        },
    })
}

async fn handle(s: VState, body: Bytes, api: Api) -> Response {
    let received = Instant::now();
    let v = match parse_body(&body) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    if let Err(r) = check_model(&s, &v) {
        return *r;
    }
    let stream = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(r) = refused_options(&s, &v, api, stream) {
        return r;
    }
    let (ids, max_new) = match admitted(&v, api, s.st.cfg.context_length) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let prefix = match api {
        Api::Completion => "cmpl",
        Api::Chat => "chatcmpl",
    };
    let id = format!("{prefix}-{}", random_id());
    log_request(&s, &id, max_new, ids.len());
    let rx = match s.st.enqueue(
        Some(format!("{id}-0")),
        ids,
        max_new,
        received,
        ReqOptions::default(),
    ) {
        Ok((_, rx)) => rx,
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalServerError",
                &e.0,
                None,
            );
        }
    };
    let shape = shape_of(&s, &v, api, id);
    if stream {
        super::sse_response(super::output_stream(None, rx, Arc::new(shape), events_for))
    } else {
        collect(rx, shape).await
    }
}

/// The prompt's ids and the tokens it may generate, or vLLM's refusal of its lengths.
fn admitted(v: &Value, api: Api, ctx: u64) -> Result<(Vec<u32>, u64), Box<Response>> {
    let ids = prompt_ids(v, api)?;
    let max_tokens = max_tokens_of(v, api)?;
    let refuse = |message: String, param: Option<&str>| Err(Box::new(bad_request(&message, param)));
    if let Some(m) = max_tokens {
        if m < 1 {
            return refuse(
                format!("max_tokens must be at least 1, got {m}."),
                Some("max_tokens"),
            );
        }
        if m as u64 > ctx {
            return refuse(
                format!(
                    "max_tokens={m} cannot be greater than max_model_len={ctx}. Please request fewer output tokens."
                ),
                Some("max_tokens"),
            );
        }
    }
    let n = ids.len() as u64;
    if n > ctx {
        return refuse(
            format!(
                "This model's maximum context length is {ctx} tokens. However, your prompt contains {n} input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt."
            ),
            Some("input_tokens"),
        );
    }
    if n == ctx {
        return refuse(
            format!(
                "The decoder prompt (length {n}) plus the number of requested output tokens (at least 1) is longer than the maximum model length of {ctx}. Make sure that `max_model_len` is no smaller than the number of text tokens (prompt + requested output tokens)."
            ),
            None,
        );
    }
    // vLLM 0.33 clamps the output to what the context leaves (serve/utils/api_utils.py
    // `get_max_tokens`): prompt + max_tokens over max_model_len is not an error.
    Ok((ids, max_tokens.map_or(ctx - n, |m| (m as u64).min(ctx - n))))
}

/// `--enable-log-requests`: the request's sampling parameters and its admission.
fn log_request(s: &VState, id: &str, max_new: u64, prompt_tokens: usize) {
    if !s.v.log_requests {
        return;
    }
    s.voice.vllm(
        Proc::Api,
        "INFO",
        "logger.py:49",
        &format!(
            "Received request {id}-0: params: SamplingParams(n=1, max_tokens={max_new}), prompt_token_ids: {prompt_tokens} tokens"
        ),
    );
    s.voice.vllm(
        Proc::Api,
        "INFO",
        "async_llm.py:361",
        &format!("Added request {id}-0."),
    );
}

/// How the response to `v` is written: usage, thinking, the call the model makes.
fn shape_of(s: &VState, v: &Value, api: Api, id: String) -> Shape {
    let opts = v.get("stream_options").filter(|o| !o.is_null());
    let flag = |k: &str| {
        opts.and_then(|o| o.get(k))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    // serve/utils/api_utils.py `should_include_usage`.
    let (include_usage, continuous_usage) = if s.v.force_include_usage {
        (true, true)
    } else {
        let inc = flag("include_usage");
        (inc, inc && flag("continuous_usage_stats"))
    };
    let think = crate::thinking::tokens_for(&s.st.cfg.profile.thinking, v, api == Api::Chat, &id);
    let call = (api == Api::Chat)
        .then(|| {
            let caller = crate::tools::Caller::of(&s.st.cfg, crate::tools::CallShape::Vllm);
            // chat_utils.py `make_tool_call_id`: 16 hex digits of a random UUID.
            crate::tools::plan(v, &caller, format!("chatcmpl-tool-{}", random_id()))
        })
        .flatten();
    Shape {
        api,
        id,
        model: s.v.served_names[0].clone(),
        created: unix_now() as u64,
        include_usage,
        continuous_usage,
        prompt_details: s.v.prompt_tokens_details,
        think,
        split: s.st.cfg.reasoning_split,
        spec_metrics: s.v.per_request_spec_metrics,
        call,
    }
}

fn finish_str(f: &Option<Finish>) -> Value {
    match f {
        None => Value::Null,
        Some(Finish::Length(_)) => "length".into(),
        Some(Finish::Abort(..)) => "abort".into(),
    }
}

/// `UsageInfo` in its field order; `prompt_tokens_details` only when enabled (else absent in
/// streams, `null` in whole responses).
fn usage(o: &Output, details: bool, null_details: bool) -> Value {
    let mut u = json!({"prompt_tokens": o.prompt_tokens,
                       "total_tokens": o.prompt_tokens + o.completion_tokens,
                       "completion_tokens": o.completion_tokens});
    if details {
        u["prompt_tokens_details"] = json!({"cached_tokens": o.cached_tokens});
    } else if null_details {
        u["prompt_tokens_details"] = Value::Null;
    }
    u
}

fn chunk_head(shape: &Shape) -> serde_json::Map<String, Value> {
    let object = match shape.api {
        Api::Completion => "text_completion",
        Api::Chat => "chat.completion.chunk",
    };
    let mut m = serde_json::Map::new();
    m.insert("id".into(), shape.id.clone().into());
    m.insert("object".into(), object.into());
    m.insert("created".into(), shape.created.into());
    m.insert("model".into(), shape.model.clone().into());
    m
}

/// The SSE events for one engine output, as one write.
fn events_for(shape: &Shape, o: &Output, first: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    match shape.api {
        Api::Completion => completion_event(shape, o, &mut out),
        Api::Chat => chat_events(shape, o, first, &mut out),
    }
    if o.finish.is_some() {
        if shape.include_usage {
            out.extend_from_slice(&super::sse(&usage_chunk(shape, o)));
        }
        out.extend_from_slice(super::DONE);
    }
    out
}

/// Continuous usage stats: the prompt and `completion` tokens so far.
fn continuous(o: &Output, completion: u64) -> Value {
    json!({"prompt_tokens": o.prompt_tokens, "total_tokens": o.prompt_tokens + completion,
           "completion_tokens": completion})
}

/// A completion's chunk for one output (none for an empty output that does not finish).
fn completion_event(shape: &Shape, o: &Output, out: &mut Vec<u8>) {
    if o.new_ids.is_empty() && o.finish.is_none() {
        return;
    }
    let parts = crate::thinking::split(o, shape.think, true);
    let mut c = chunk_head(shape);
    c.insert(
        "choices".into(),
        json!([{"index": 0, "text": parts.joined(), "logprobs": null,
                "finish_reason": finish_str(&o.finish), "stop_reason": null,
                "prompt_token_ids": null, "token_ids": null}]),
    );
    if shape.continuous_usage {
        c.insert("usage".into(), continuous(o, o.completion_tokens));
    }
    out.extend_from_slice(&super::sse(&Value::Object(c)));
}

/// A chat's chunks for one output: the role first, the parser's thinking as its own chunk,
/// then the answer's delta (text, or the call's piece), with the finish on the last.
fn chat_events(shape: &Shape, o: &Output, first: bool, out: &mut Vec<u8>) {
    if first {
        let mut c = chunk_head(shape);
        c.insert(
            "choices".into(),
            json!([{"index": 0, "delta": {"role": "assistant", "content": ""},
                    "logprobs": null, "finish_reason": null}]),
        );
        if shape.continuous_usage {
            c.insert("usage".into(), continuous(o, 0));
        }
        c.insert("prompt_token_ids".into(), Value::Null);
        out.extend_from_slice(&super::sse(&Value::Object(c)));
    }
    let (thinking, text) = crate::thinking::shown(o, shape.think, shape.splits());
    let finished = o.finish.is_some();
    // A thinking marker the parser consumed: no DeltaMessage, and serving_chat.py sends
    // nothing for the step (`if delta_message is None: continue`).
    if thinking.is_empty() && text.is_empty() && !finished && !o.new_ids.is_empty() {
        return;
    }
    // The parser's thinking comes as `{"reasoning": ...}` (DeltaMessage), its own chunk.
    if !thinking.is_empty() {
        let mut c = chunk_head(shape);
        c.insert(
            "choices".into(),
            json!([{"index": 0, "delta": {"reasoning": thinking}, "logprobs": null,
                    "finish_reason": null, "token_ids": null}]),
        );
        if shape.continuous_usage && text.is_empty() && !finished {
            c.insert("usage".into(), continuous(o, o.completion_tokens));
        }
        out.extend_from_slice(&super::sse(&Value::Object(c)));
        if text.is_empty() && !finished {
            return;
        }
    }
    let delta = match &shape.call {
        // The tool parser's delta; none (no chunk) while it has nothing new, an empty one
        // to carry the finish (serving.py: `delta_message = DeltaMessage()`).
        Some(call) => {
            let (count, answered) = crate::tools::answer_tokens(o, shape.think);
            match call.delta(answered, finished).filter(|_| count > 0) {
                Some((field, piece)) => {
                    Value::Object([(field.to_string(), piece)].into_iter().collect())
                }
                // After the call the model writes on: content, as without one.
                None if count > 0 && call.complete() && !text.is_empty() => {
                    json!({"content": text})
                }
                None if finished => json!({}),
                None => return,
            }
        }
        None => json!({"content": text}),
    };
    let mut c = chunk_head(shape);
    let choice = if finished {
        json!({"index": 0, "delta": delta, "logprobs": null,
               "finish_reason": finish_str(&o.finish), "stop_reason": null, "token_ids": null})
    } else {
        json!({"index": 0, "delta": delta, "logprobs": null,
               "finish_reason": null, "token_ids": null})
    };
    c.insert("choices".into(), json!([choice]));
    if shape.continuous_usage {
        c.insert("usage".into(), continuous(o, o.completion_tokens));
    }
    out.extend_from_slice(&super::sse(&Value::Object(c)));
}

/// The final usage chunk (`stream_options.include_usage`), with the request's speculative
/// counts under `--per-request-spec-decode-metrics`.
fn usage_chunk(shape: &Shape, o: &Output) -> Value {
    let mut c = chunk_head(shape);
    c.insert("choices".into(), json!([]));
    let mut u = usage(o, shape.prompt_details, false);
    if shape.splits() {
        u["completion_tokens_details"] =
            json!({"reasoning_tokens": o.completion_tokens.min(shape.think)});
    }
    c.insert("usage".into(), u);
    // `--per-request-spec-decode-metrics` (generate/base/protocol.py
    // `SpeculativeDecodingMetrics`): the request's verify steps and drafts.
    if let Some(sp) = o.spec.filter(|_| shape.spec_metrics) {
        let steps = sp.verify_ct.max(1);
        c.insert(
            "metrics".into(),
            json!({"speculative_decoding": {
                "mean_acceptance_length": 1.0 + sp.num_correct_drafts as f64 / steps as f64,
                "draft_acceptance_rate": sp.num_correct_drafts as f64 / sp.num_proposed_drafts.max(1) as f64,
                "acceptance_histogram": [],
                "num_spec_steps": sp.verify_ct,
                "num_accepted_draft_tokens": sp.num_correct_drafts,
                "num_draft_tokens": sp.num_proposed_drafts,
                "num_spec_tokens": sp.num_proposed_drafts / steps}}),
        );
    }
    Value::Object(c)
}

async fn collect(mut rx: UnboundedReceiver<Output>, shape: Shape) -> Response {
    let (mut text, mut thinking) = (String::new(), String::new());
    while let Some(o) = rx.recv().await {
        if shape.api == Api::Chat {
            let (thought, answer) = crate::thinking::shown(&o, shape.think, shape.splits());
            thinking.push_str(&thought);
            crate::tools::gather(shape.call.as_ref(), &o, shape.think, &answer, &mut text);
        } else {
            tokenizer::decode_into(&o.new_ids, &mut text);
        }
        if o.finish.is_none() {
            continue;
        }
        let usage = usage(&o, shape.prompt_details, true);
        let body = match shape.api {
            Api::Completion => json!({
                "id": shape.id, "object": "text_completion", "created": shape.created,
                "model": shape.model,
                "choices": [{"index": 0, "text": text, "logprobs": null,
                             "finish_reason": finish_str(&o.finish), "stop_reason": null,
                             "token_ids": null, "prompt_logprobs": null, "prompt_token_ids": null}],
                "service_tier": null, "system_fingerprint": null, "usage": usage,
                "kv_transfer_params": null}),
            Api::Chat => json!({
                "id": shape.id, "object": "chat.completion", "created": shape.created,
                "model": shape.model,
                "choices": [full_choice(&shape, &o, &text, &thinking)],
                "service_tier": null, "system_fingerprint": null, "usage": usage,
                "prompt_logprobs": null, "prompt_token_ids": null, "kv_transfer_params": null}),
        };
        return json_response(StatusCode::OK, &body);
    }
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "InternalServerError",
        "The server had an error while processing your request.",
        None,
    )
}

/// A non-streamed chat's choice (chat_completion/serving.py `chat_completion_full_generator`):
/// `ChatMessage` with `tool_calls` always a list and the parser's `reasoning`; the text beside
/// a call in `content` (null when none, "" for a named choice); `finish_reason` `tool_calls`
/// when an `auto` choice called a tool, whatever ended the output.
fn full_choice(shape: &Shape, o: &Output, text: &str, thinking: &str) -> Value {
    let call = shape
        .call
        .as_ref()
        .and_then(|c| c.whole().map(|w| (c.auto, w)));
    let content = match &call {
        Some((false, _)) => Value::from(text),
        _ if text.is_empty() && (call.is_some() || shape.splits()) => Value::Null,
        _ => Value::from(text),
    };
    let finish = match &call {
        Some((true, _)) => "tool_calls".into(),
        _ => finish_str(&o.finish),
    };
    json!({"index": 0,
           "message": {"role": "assistant", "content": content, "refusal": null,
                       "annotations": null, "audio": null, "function_call": null,
                       "tool_calls": call.map(|(_, w)| vec![w]).unwrap_or_default(),
                       "reasoning": if thinking.is_empty() { Value::Null } else { thinking.into() }},
           "logprobs": null, "finish_reason": finish, "stop_reason": null, "token_ids": null})
}

/// `POST /reset_prefix_cache[?reset_running_requests=true]` (dev mode): 200 with
/// `{"success": bool}`; false while running requests hold KV blocks.
async fn reset_prefix_cache(
    State(s): State<VState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let truthy = |k: &str| {
        q.get(k)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1"))
    };
    let (reply, rx) = tokio::sync::oneshot::channel();
    if s.st
        .tx
        .send(Command::ResetPrefixCache {
            reset_running: truthy("reset_running_requests"),
            reply,
        })
        .is_err()
    {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let ok = rx.await.unwrap_or(false);
    json_response(StatusCode::OK, &json!({"success": ok}))
}

async fn empty_ok() -> Response {
    StatusCode::OK.into_response()
}

async fn is_sleeping() -> Response {
    json_response(StatusCode::OK, &json!({"is_sleeping": false}))
}

/// `GET /server_info` (dev mode): the engine config as text, and the VLLM_* environment.
async fn server_info(
    State(s): State<VState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let cfg = &s.st.cfg;
    let config = json!({
        "model": s.v.model, "served_model_name": s.v.served_names, "max_model_len": cfg.context_length,
        "gpu_memory_utilization": s.v.gpu_memory_utilization, "block_size": s.v.block_size,
        "num_gpu_blocks": cfg.pool_tokens() / s.v.block_size.max(1),
        "max_num_seqs": cfg.max_running_requests,
        "max_num_batched_tokens": cfg.chunked_prefill_size.unwrap_or(cfg.max_prefill_tokens),
        "enable_chunked_prefill": cfg.chunked_prefill_size.is_some(),
        "enable_prefix_caching": !cfg.disable_radix_cache,
        "tensor_parallel_size": s.v.tensor_parallel_size,
        "speculative_config": cfg.speculative.as_ref().map(|sp| json!({"num_speculative_tokens": sp.num_draft_tokens - 1})),
        "seed": cfg.seed, "profile": cfg.profile.name, "sim_time_scale": cfg.profile.time_scale,
    });
    let vllm_config = if q.get("config_format").map(String::as_str) == Some("json") {
        config
    } else {
        let mut text = String::new();
        if let Value::Object(m) = &config {
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    text.push_str(", ");
                }
                let _ = write!(text, "{k}={v}");
            }
        }
        Value::String(text)
    };
    let vllm_env: serde_json::Map<String, Value> = std::env::vars()
        .filter(|(k, _)| k.starts_with("VLLM_") && k != "VLLM_API_KEY")
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"vllm_config": vllm_config, "vllm_env": vllm_env,
                "system_env": {"os": std::env::consts::OS, "arch": std::env::consts::ARCH,
                               "servebench_sim": env!("CARGO_PKG_VERSION")}}),
    )
}

/// Python's float formatting as prometheus_client writes values (`1.0`, `0.25`).
fn py_float(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

fn render_histogram(out: &mut String, name: &str, help: &str, labels: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (le, cum) in h.cumulative() {
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"{}\"}} {}",
            py_float(le),
            py_float(cum as f64)
        );
    }
    let _ = writeln!(
        out,
        "{name}_bucket{{{labels},le=\"+Inf\"}} {}",
        py_float(h.count() as f64)
    );
    let _ = writeln!(
        out,
        "{name}_count{{{labels}}} {}",
        py_float(h.count() as f64)
    );
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", py_float(h.sum()));
}

/// `GET /metrics`: vLLM's Prometheus names (v1/metrics/loggers.py `PrometheusStatLogger`),
/// with `model_name` and `engine` labels; counters carry prometheus_client's `_total`.
async fn metrics(State(s): State<VState>) -> Response {
    let st = s.st.shared.stats();
    let e = &st.engine;
    let labels = format!(
        "model_name=\"{}\",engine=\"0\"",
        s.v.served_names[0].replace('"', "'")
    );
    let mut out = String::new();
    engine_series(&mut out, &labels, &st);
    latency_histograms(&mut out, &labels, &st);
    let cfg = &s.st.cfg;
    if let Some(sp) = &cfg.speculative {
        speculative_counters(&mut out, &labels, sp.num_draft_tokens, e);
    }
    cache_config_info(&mut out, &s);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// A gauge with the server's labels.
fn gauge(out: &mut String, labels: &str, name: &str, help: &str, v: f64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {}",
        py_float(v)
    );
}

/// A counter with the server's labels (prometheus_client adds `_total`).
fn counter(out: &mut String, labels: &str, name: &str, help: &str, v: f64) {
    let _ = writeln!(
        out,
        "# HELP {name}_total {help}\n# TYPE {name}_total counter\n{name}_total{{{labels}}} {}",
        py_float(v)
    );
}

/// The scheduler's gauges and the engine's token, cache and request counters.
fn engine_series(out: &mut String, labels: &str, st: &crate::metrics::SchedStats) {
    let e = &st.engine;
    gauge(
        out,
        labels,
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        st.num_running_reqs as f64,
    );
    gauge(
        out,
        labels,
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        st.num_queue_reqs as f64,
    );
    gauge(
        out,
        labels,
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        st.token_usage,
    );
    counter(
        out,
        labels,
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        e.prefix_queries as f64,
    );
    counter(
        out,
        labels,
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        e.prefix_hits as f64,
    );
    counter(
        out,
        labels,
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        e.preemptions as f64,
    );
    counter(
        out,
        labels,
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        e.prompt_tokens as f64,
    );
    counter(
        out,
        labels,
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        e.prompt_tokens_cached as f64,
    );
    counter(
        out,
        labels,
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        st.generation_tokens_total as f64,
    );
    let _ = writeln!(
        out,
        "# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter"
    );
    for (reason, n) in [
        ("stop", 0),
        ("length", e.finished_length),
        ("abort", e.finished_abort),
    ] {
        let _ = writeln!(
            out,
            "vllm:request_success_total{{{labels},finished_reason=\"{reason}\"}} {}",
            py_float(n as f64)
        );
    }
}

/// The request latency histograms.
fn latency_histograms(out: &mut String, labels: &str, st: &crate::metrics::SchedStats) {
    render_histogram(
        out,
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        labels,
        &st.ttft,
    );
    render_histogram(
        out,
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        labels,
        &st.itl,
    );
    render_histogram(
        out,
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        labels,
        &st.e2e,
    );
    render_histogram(
        out,
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        labels,
        &st.engine.queue_time,
    );
}

/// v1/spec_decode/metrics.py `SpecDecodingProm`: the counters exist (at 0) once a speculative
/// config is given, and count per verify step per request; the accepted tokens per position.
fn speculative_counters(
    out: &mut String,
    labels: &str,
    num_draft_tokens: u32,
    e: &crate::metrics::EngineStats,
) {
    counter(
        out,
        labels,
        "vllm:spec_decode_num_drafts",
        "Number of spec decoding drafts.",
        e.spec_verify_steps as f64,
    );
    counter(
        out,
        labels,
        "vllm:spec_decode_num_draft_tokens",
        "Number of draft tokens.",
        e.spec_draft_tokens as f64,
    );
    counter(
        out,
        labels,
        "vllm:spec_decode_num_accepted_tokens",
        "Number of accepted tokens.",
        e.spec_accepted_tokens as f64,
    );
    let name = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
    let _ = writeln!(
        out,
        "# HELP {name} Accepted tokens per draft position.\n# TYPE {name} counter"
    );
    for pos in 0..num_draft_tokens.saturating_sub(1) as usize {
        let n = e.spec_accepted_per_pos.get(pos).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "{name}{{{labels},position=\"{pos}\"}} {}",
            py_float(n as f64)
        );
    }
}

/// vLLM's `cache_config_info` gauge: the block size, prefix caching, memory share and blocks.
fn cache_config_info(out: &mut String, s: &VState) {
    let _ = writeln!(
        out,
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n\
         vllm:cache_config_info{{block_size=\"{}\",enable_prefix_caching=\"{}\",engine=\"0\",gpu_memory_utilization=\"{}\",num_gpu_blocks=\"{}\"}} 1.0",
        s.v.block_size,
        if s.st.cfg.disable_radix_cache {
            "False"
        } else {
            "True"
        },
        s.v.gpu_memory_utilization,
        s.st.cfg.pool_tokens() / s.v.block_size.max(1),
    );
}

/// vLLM's periodic stats line (v1/metrics/loggers.py `LoggingStatLogger.log`), every
/// `VLLM_LOG_STATS_INTERVAL` seconds; an idle interval logs nothing (vLLM logs it at DEBUG).
pub(crate) async fn log_stats(st: AppState, voice: Voice) {
    let Some(v) = st.cfg.vllm.clone() else {
        return;
    };
    if !v.log_stats {
        return;
    }
    let mut prev = st.shared.stats();
    let mut last = Instant::now();
    loop {
        tokio::time::sleep(v.stats_interval).await;
        let now = st.shared.stats();
        let secs = last.elapsed().as_secs_f64().max(1e-9);
        last = Instant::now();
        let prompt = (now.engine.prompt_tokens - prev.engine.prompt_tokens) as f64 / secs;
        let gen_tput = (now.generation_tokens_total - prev.generation_tokens_total) as f64 / secs;
        let preempted = now.engine.preemptions - prev.engine.preemptions;
        let idle = prompt == 0.0
            && gen_tput == 0.0
            && now.num_running_reqs == 0
            && now.num_queue_reqs == 0;
        if !idle {
            let hit = if now.engine.prefix_queries_since_reset > 0 {
                100.0 * now.engine.prefix_hits_since_reset as f64
                    / now.engine.prefix_queries_since_reset as f64
            } else {
                0.0
            };
            let preemptions = if preempted > 0 {
                format!("Preemptions: {preempted}, ")
            } else {
                String::new()
            };
            voice.vllm(
                Proc::Api,
                "INFO",
                "loggers.py:236",
                &format!(
                    "Engine 000: Avg prompt throughput: {prompt:.1} tokens/s, Avg generation throughput: {gen_tput:.1} tokens/s, Running: {} reqs, Waiting: {} reqs, {preemptions}GPU KV cache usage: {:.1}%, Prefix cache hit rate: {hit:.1}%",
                    now.num_running_reqs,
                    now.num_queue_reqs,
                    now.token_usage * 100.0,
                ),
            );
        }
        prev = now;
    }
}
