//! OpenAI-compatible `/v1/completions` and `/v1/chat/completions`, shaped as sglang 0.5.23's
//! `entrypoints/openai/serving_{completions,chat}.py` write them.

use super::fastapi::{self, PydanticError};
use super::generate::weight_metadata;
use super::{AppState, DONE, Rejected, json_response, output_stream, sglang_sse_response, sse};
use crate::tokenizer;
use crate::types::{Finish, Output};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;

#[derive(Clone, Copy, PartialEq)]
enum Api {
    Completion,
    Chat,
}

/// `POST /v1/completions`.
pub(crate) async fn completions(State(st): State<AppState>, body: Bytes) -> Response {
    handle(st, body, Api::Completion).await
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat(State(st): State<AppState>, body: Bytes) -> Response {
    handle(st, body, Api::Chat).await
}

/// SGLang's OpenAI-style error body (serving_base.py `create_error_response`), for what the
/// handler refuses once the body fits the request model.
fn openai_error(message: String) -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({"object": "error", "message": message, "type": "BadRequestError", "param": null, "code": 400}),
    )
}

/// Options that shape every chunk.
struct Shape {
    api: Api,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    continuous_usage: bool,
    cache_report: bool,
    /// The request's `return_spec_tokens_details`.
    spec_details: bool,
    /// The request's thinking tokens (`crate::thinking`).
    think: u64,
    /// Chat carries thinking in `reasoning_content` (`--reasoning-parser`).
    split: bool,
    /// The tool call the chat request makes (`crate::tools`).
    call: Option<crate::tools::PlannedCall>,
}

/// What pydantic refuses in the request model (protocol.py `CompletionRequest`,
/// `ChatCompletionRequest`) before the handler runs: the fields the simulator reads.
fn model_errors(v: &Value, api: Api) -> Vec<PydanticError> {
    let Some(obj) = v.as_object() else {
        return vec![PydanticError(format!(
            "{{'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or object to extract fields from', 'input': {}}}",
            crate::python::py_repr(v)
        ))];
    };
    // The model's before-validator fills in `tool_choice` before the fields are checked, so
    // the input pydantic quotes has it.
    let mut input = v.clone();
    if api == Api::Chat && !obj.contains_key("tool_choice") {
        let choice = if obj.get("tools").is_some_and(|t| !t.is_null()) {
            "auto"
        } else {
            "none"
        };
        input["tool_choice"] = choice.into();
    }
    let mut errors = Vec::new();
    let required = match api {
        Api::Completion => "prompt",
        Api::Chat => "messages",
    };
    match obj.get(required) {
        None => errors.push(PydanticError::missing(required, &input)),
        Some(m) if api == Api::Chat && !m.is_array() => errors.push(PydanticError::wrong_type(
            "messages",
            "list_type",
            "Input should be a valid list",
            m,
        )),
        _ => {}
    }
    if api == Api::Chat {
        errors.extend(role_errors(obj.get("messages")));
    }
    let int_fields: &[&str] = match api {
        Api::Completion => &["max_tokens"],
        Api::Chat => &["max_tokens", "max_completion_tokens"],
    };
    for field in int_fields {
        match obj.get(*field) {
            None | Some(Value::Null) => {}
            Some(x) if x.is_f64() && x.as_f64().is_some_and(|f| f.fract() != 0.0) => {
                errors.push(PydanticError::wrong_type(
                    field,
                    "int_from_float",
                    "Input should be a valid integer, got a number with a fractional part",
                    x,
                ));
            }
            // Lax mode: a bool or a string of digits is an integer.
            Some(x) if x.is_boolean() => {}
            Some(Value::String(t)) if t.trim().parse::<i64>().is_err() => {
                errors.push(PydanticError::wrong_type(
                    field,
                    "int_parsing",
                    "Input should be a valid integer, unable to parse string as an integer",
                    &Value::String(t.clone()),
                ));
            }
            Some(Value::String(_)) => {}
            Some(x) if !x.is_number() => errors.push(PydanticError::wrong_type(
                field,
                "int_type",
                "Input should be a valid integer",
                x,
            )),
            // CompletionRequest's `validate_max_tokens_positive` (chat has none).
            Some(x) if api == Api::Completion && lax_int(x).is_some_and(|n| n <= 0) => errors.push(
                PydanticError::value_error(field, "max_tokens must be positive", x),
            ),
            Some(_) => {}
        }
    }
    errors
}

/// The roles `ChatCompletionMessageGenericParam` admits (0.5.23's protocol.py), in any case;
/// `ChatCompletionMessageUserParam` admits the literal `user`.
const GENERIC_ROLES: [&str; 7] = [
    "system",
    "assistant",
    "tool",
    "function",
    "developer",
    "latest_reminder",
    "root",
];

/// A message whose string `role` neither member of the messages' union admits fails both, as
/// pydantic says it (other shapes of a message are not modelled here). A `tool` message needs
/// no `tool_call_id` (optional in the model).
fn role_errors(messages: Option<&Value>) -> Vec<PydanticError> {
    let Some(Value::Array(list)) = messages else {
        return Vec::new();
    };
    let mut errors = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let Some(role) = m.get("role").and_then(Value::as_str) else {
            continue;
        };
        if role == "user" || GENERIC_ROLES.iter().any(|r| r.eq_ignore_ascii_case(role)) {
            continue;
        }
        let loc = |member: &str| {
            format!(
                "('body', 'messages', {i}, 'function-after[validate_thinking_parts_role(), {member}]', 'role')"
            )
        };
        let why = format!(
            "'role' must be one of {} (case-insensitive).",
            GENERIC_ROLES.map(|r| format!("'{r}'")).join(", ")
        );
        let input = crate::python::py_str(role);
        errors.push(PydanticError(format!(
            "{{'type': 'value_error', 'loc': {}, 'msg': {}, 'input': {input}, 'ctx': {{'error': ValueError({})}}}}",
            loc("ChatCompletionMessageGenericParam"),
            crate::python::py_str(&format!("Value error, {why}")),
            crate::python::py_str(&why),
        )));
        errors.push(PydanticError(format!(
            "{{'type': 'literal_error', 'loc': {}, 'msg': \"Input should be 'user'\", 'input': {input}, 'ctx': {{'expected': \"'user'\"}}}}",
            loc("ChatCompletionMessageUserParam"),
        )));
    }
    errors
}

/// The handler's own checks (`_validate_request`), after the model admitted the body.
/// `context_length` is `--context-length` as given (the check is skipped without it, as the
/// real server's is).
fn validate_request(v: &Value, api: Api, context_length: Option<i64>) -> Result<(), Rejected> {
    match api {
        Api::Completion => {
            let empty = |p: &Value| match p {
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Null => true,
                _ => false,
            };
            let prompt = &v["prompt"];
            if empty(prompt) || prompt.as_array().is_some_and(|a| a.iter().all(empty)) {
                return Err(Rejected("Prompt cannot be empty".into()));
            }
        }
        Api::Chat => {
            if v["messages"].as_array().is_none_or(Vec::is_empty) {
                return Err(Rejected("Messages cannot be empty.".into()));
            }
            if let (Some(n), Some(ctx)) = (chat_max_tokens(v), context_length)
                && n > ctx
            {
                return Err(Rejected(format!(
                    "max_completion_tokens is too large: {n}.This model supports at most {ctx} completion tokens."
                )));
            }
        }
    }
    Ok(())
}

async fn handle(st: AppState, body: Bytes, api: Api) -> Response {
    let received = Instant::now();
    let v = match fastapi::parse_body(&body) {
        Ok(v) => v,
        Err(e) => return fastapi::validation_error(&[e]),
    };
    let errors = model_errors(&v, api);
    if !errors.is_empty() {
        return fastapi::validation_error(&errors);
    }
    if let Err(Rejected(m)) = validate_request(&v, api, st.cfg.args.int("context-length")) {
        return openai_error(m);
    }
    let parsed = match api {
        Api::Completion => completion_prompt(&v),
        Api::Chat => chat_prompt(&v),
    }
    .map(|ids| (ids, max_tokens(&v, api)));
    let (ids, max_new) = match parsed {
        Ok(x) => x,
        Err(Rejected(m)) => return openai_error(m),
    };
    let rid = v.get("rid").and_then(Value::as_str).map(str::to_string);
    let pd = crate::disagg::BootstrapFields::of(&v, 0);
    let (rid, rx) = match super::disagg::submit(&st, rid, ids, max_new, received, pd) {
        Ok(x) => x,
        Err(Rejected(m)) => return openai_error(m),
    };
    let opts = v.get("stream_options");
    let flag = |k: &str| {
        opts.and_then(|o| o.get(k))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    };
    let shape = Shape {
        api,
        // The request's id as it is: 0.5.23 writes no `cmpl-` / `chatcmpl-` prefix.
        id: rid.to_string(),
        model: v
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string(),
        created: super::unix_now() as u64,
        include_usage: flag("include_usage"),
        continuous_usage: flag("continuous_usage_stats"),
        cache_report: st.cfg.enable_cache_report,
        spec_details: v
            .get("return_spec_tokens_details")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        think: crate::thinking::tokens_for(&st.cfg.profile.thinking, &v, api == Api::Chat, &rid),
        split: st.cfg.reasoning_split,
        call: (api == Api::Chat)
            .then(|| {
                let caller = crate::tools::Caller::of(&st.cfg, crate::tools::CallShape::Sglang);
                crate::tools::plan(&v, &caller, format!("call_{rid}"))
            })
            .flatten(),
    };
    if v.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        // sglang 0.5.23 sends the 200 head with the first token, not before it.
        let mut rx = rx;
        match rx.recv().await {
            Some(first) => {
                sglang_sse_response(output_stream(Some(first), rx, Arc::new(shape), events_for))
            }
            None => shutting_down(),
        }
    } else {
        collect(rx, shape).await
    }
}

pub(super) fn completion_prompt(v: &Value) -> Result<Vec<u32>, Rejected> {
    let bad = || Rejected("prompt must be a string, a list of strings, or token ids".into());
    match v.get("prompt") {
        Some(Value::String(s)) => Ok(tokenizer::encode(s)),
        Some(Value::Array(a)) => match a.first() {
            Some(Value::String(s)) if a.len() == 1 => Ok(tokenizer::encode(s)),
            Some(Value::Array(inner)) if a.len() == 1 => ids(inner).ok_or_else(bad),
            Some(Value::Number(_)) => ids(a).ok_or_else(bad),
            Some(_) => Err(Rejected(
                "The simulator serves one prompt per request.".into(),
            )),
            None => Err(bad()),
        },
        _ => Err(bad()),
    }
}

fn ids(a: &[Value]) -> Option<Vec<u32>> {
    a.iter()
        .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
        .collect()
}

/// Renders messages with a plain template: each message's content on its own lines, then an
/// assistant cue. Nothing precedes the first message, so a nonce there defeats the cache.
pub(super) fn chat_prompt(v: &Value) -> Result<Vec<u32>, Rejected> {
    let Some(msgs) = v.get("messages").and_then(Value::as_array) else {
        return Err(Rejected("messages must be a list".into()));
    };
    let mut text = String::new();
    for m in msgs {
        match m.get("content") {
            Some(Value::String(s)) => text.push_str(s),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                    }
                }
            }
            Some(Value::Null) | None => {}
            Some(_) => {
                return Err(Rejected(
                    "message content must be a string or a list".into(),
                ));
            }
        }
        text.push_str("\n\n");
    }
    text.push_str("assistant:");
    Ok(tokenizer::encode(&text))
}

/// An integer as pydantic's lax mode reads one: a number without a fraction, a bool, a
/// string of digits.
fn lax_int(x: &Value) -> Option<i64> {
    match x {
        Value::Bool(b) => Some(i64::from(*b)),
        Value::String(t) => t.trim().parse().ok(),
        x => x
            .as_i64()
            .or_else(|| x.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)),
    }
}

/// An optional integer field, read as the model admitted it.
fn opt_lax_int(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(lax_int)
}

/// Chat's output limit as 0.5.23 reads it: `max_completion_tokens or max_tokens` (Python's
/// `or`: a 0 in the first falls through to the second; a 0 in `max_tokens` is kept).
fn chat_max_tokens(v: &Value) -> Option<i64> {
    match opt_lax_int(v, "max_completion_tokens") {
        Some(n) if n != 0 => Some(n),
        _ => opt_lax_int(v, "max_tokens"),
    }
}

fn max_tokens(v: &Value, api: Api) -> Option<i64> {
    match api {
        // Unset, chat runs to EOS (here to SamplingParams' 128: the simulator never emits
        // EOS); a negative one fails in the scheduler's words.
        Api::Chat => chat_max_tokens(v),
        // CompletionRequest's default; the model refused anything under 1.
        Api::Completion => Some(opt_lax_int(v, "max_tokens").unwrap_or(16)),
    }
}

fn finish_str(f: &Option<Finish>) -> Value {
    match f {
        None => Value::Null,
        Some(Finish::Length(_)) => "length".into(),
        Some(Finish::Abort(..)) => "abort".into(),
    }
}

/// `UsageInfo` with every key (pydantic's `model_dump`): `prompt_tokens_details` is null
/// unless `cached` is given (--enable-cache-report; 0.5.23 reports 0 too), and
/// `completion_tokens_details` is null (it carries reasoning tokens, and there are none).
fn usage(o: &Output, cached: Option<u64>, reasoning: u64) -> Value {
    json!({
        "prompt_tokens": o.prompt_tokens,
        "total_tokens": o.prompt_tokens + o.completion_tokens,
        "completion_tokens": o.completion_tokens,
        "prompt_tokens_details": cached.map_or(Value::Null, |c| json!({"cached_tokens": c})),
        "reasoning_tokens": reasoning,
        // The OpenAI place, set only when there are some (protocol.py `UsageInfo`).
        "completion_tokens_details": if reasoning > 0 { json!({"reasoning_tokens": reasoning}) } else { Value::Null },
    })
}

/// `UsageInfo` written with `exclude_none` (the completions stream's usage chunk).
fn without_nulls(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.retain(|_, x| !x.is_null());
    }
    v
}

impl Shape {
    /// `SpecTokensDetails` (protocol.py) for a finished output, when the request asked and
    /// the request decoded speculatively (`spec_tokens_details_from_meta_info` returns None
    /// when meta_info has no spec keys: speculation off). Every field, as pydantic dumps it;
    /// the simulator keeps no cap lengths or histograms (0.0 and [] are the defaults).
    fn spec_tokens_details(&self, o: &Output) -> Option<Value> {
        let s = o.spec.filter(|_| self.spec_details)?;
        Some(json!({
            "spec_accept_rate": s.num_correct_drafts as f64 / s.num_proposed_drafts.max(1) as f64,
            "spec_accept_length": o.completion_tokens as f64 / s.verify_ct.max(1) as f64,
            "spec_cap_length": 0.0,
            "spec_block_accept_length": 0.0,
            "spec_num_correct_drafts": s.num_correct_drafts,
            "spec_num_proposed_drafts": s.num_proposed_drafts,
            "spec_verify_ct": s.verify_ct,
            "spec_correct_drafts_histogram": [],
            "spec_cap_lens_histogram": [],
        }))
    }

    /// Thinking tokens so far, as the usage counts them (with a reasoning parser only).
    fn reasoning(&self, o: &Output) -> u64 {
        if self.split {
            o.completion_tokens.min(self.think)
        } else {
            0
        }
    }

    /// The cached count the usage reports, if the server reports it.
    fn cached(&self, o: &Output) -> Option<u64> {
        self.cache_report.then_some(o.cached_tokens)
    }

    /// One chunk: completions write `usage` on every chunk (null unless given); chat's
    /// msgspec chunk leaves a null `usage` out.
    fn chunk(&self, choices: Value, usage: Value) -> Value {
        let (object, keep_null) = match self.api {
            Api::Completion => ("text_completion", true),
            Api::Chat => ("chat.completion.chunk", false),
        };
        let mut c = Map::new();
        c.insert("id".into(), self.id.clone().into());
        c.insert("object".into(), object.into());
        c.insert("created".into(), self.created.into());
        c.insert("model".into(), self.model.clone().into());
        c.insert("choices".into(), choices);
        if keep_null || !usage.is_null() {
            c.insert("usage".into(), usage);
        }
        Value::Object(c)
    }
}

/// A chat stream choice (sse_utils.py `StreamChoice` over `StreamDelta`): the delta always
/// has `reasoning_content` (null without a reasoning parser), then `role` and `content` when
/// set.
fn chat_choice(role: bool, content: Option<&str>, finish: &Option<Finish>) -> Value {
    let mut delta = Map::new();
    delta.insert("reasoning_content".into(), Value::Null);
    if role {
        delta.insert("role".into(), "assistant".into());
    }
    if let Some(c) = content {
        delta.insert("content".into(), c.into());
    }
    json!([{"index": 0, "delta": delta, "logprobs": null,
            "finish_reason": finish_str(finish), "matched_stop": null}])
}

/// Every SSE event for one engine output, as one write.
fn events_for(shape: &Shape, o: &Output, first: bool) -> Vec<u8> {
    let reasoning = shape.reasoning(o);
    let (thinking, text) =
        crate::thinking::shown(o, shape.think, shape.split && shape.api == Api::Chat);
    let mut out = Vec::with_capacity(512);
    match shape.api {
        Api::Completion => {
            // The continuous usage of completions never carries the cached count.
            let cont = if shape.continuous_usage {
                usage(o, None, reasoning)
            } else {
                Value::Null
            };
            let c = json!([{"index": 0, "text": text, "logprobs": null,
                            "finish_reason": finish_str(&o.finish), "matched_stop": null}]);
            out.extend_from_slice(&sse(&shape.chunk(c, cont)));
        }
        Api::Chat => {
            // The role chunk first (no usage), then one chunk per output with text (none
            // for an output whose text is empty), then, after the last output, the finish
            // chunk (no usage): serving_chat.py `_generate_chat_stream`.
            if first {
                out.extend_from_slice(&sse(
                    &shape.chunk(chat_choice(true, Some(""), &None), Value::Null)
                ));
            }
            // With a reasoning parser the thinking comes as its own chunk.
            if !thinking.is_empty() {
                let cont = if shape.continuous_usage && text.is_empty() {
                    usage(o, shape.cached(o), reasoning)
                } else {
                    Value::Null
                };
                let mut c = chat_choice(false, None, &None);
                c[0]["delta"]["reasoning_content"] = thinking.into();
                out.extend_from_slice(&sse(&shape.chunk(c, cont)));
            }
            if let Some(call) = &shape.call {
                // The answer is the call: its pieces, one per answer token.
                let (count, answered) = crate::tools::answer_tokens(o, shape.think);
                if count > 0
                    && let Some((field, piece)) = call.delta(answered, o.finish.is_some())
                {
                    let cont = if shape.continuous_usage {
                        usage(o, shape.cached(o), reasoning)
                    } else {
                        Value::Null
                    };
                    let mut c = chat_choice(false, None, &None);
                    c[0]["delta"][field] = piece;
                    out.extend_from_slice(&sse(&shape.chunk(c, cont)));
                } else if count > 0 && call.complete() && !text.is_empty() {
                    // After the call the model writes on: content, as without one.
                    let cont = if shape.continuous_usage {
                        usage(o, shape.cached(o), reasoning)
                    } else {
                        Value::Null
                    };
                    let c = chat_choice(false, Some(&text), &None);
                    out.extend_from_slice(&sse(&shape.chunk(c, cont)));
                }
            } else if !text.is_empty() {
                let cont = if shape.continuous_usage {
                    usage(o, shape.cached(o), reasoning)
                } else {
                    Value::Null
                };
                let c = chat_choice(false, Some(&text), &None);
                out.extend_from_slice(&sse(&shape.chunk(c, cont)));
            }
            if o.finish.is_some() {
                let c = chat_choice(false, None, &o.finish);
                out.extend_from_slice(&sse(&shape.chunk(c, Value::Null)));
            }
        }
    }
    if o.finish.is_some() {
        if let Some(details) = shape.spec_tokens_details(o) {
            // serving_completions.py / serving_chat.py: after the token and finish chunks,
            // `choices=[]  # sglext is at response level`, `model_dump_json()` (null usage
            // kept), then the usage chunk.
            let mut c = shape.chunk(json!([]), Value::Null);
            c["usage"] = Value::Null;
            c["sglext"] = json!({ "spec_tokens_details": details });
            out.extend_from_slice(&sse(&c));
        }
        if shape.include_usage {
            let u = usage(o, shape.cached(o), reasoning);
            let u = match shape.api {
                // `model_dump_json(exclude_none=True)`.
                Api::Completion => without_nulls(u),
                Api::Chat => u,
            };
            out.extend_from_slice(&sse(&shape.chunk(json!([]), u)));
        }
        out.extend_from_slice(DONE);
    }
    out
}

fn shutting_down() -> Response {
    json_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        &json!({"object": "error", "message": "The server is shutting down.", "type": "InternalServerError", "param": null, "code": 500}),
    )
}

async fn collect(mut rx: UnboundedReceiver<Output>, shape: Shape) -> Response {
    let (mut text, mut thinking) = (String::new(), String::new());
    let split = shape.split && shape.api == Api::Chat;
    while let Some(o) = rx.recv().await {
        let (thought, answer) = crate::thinking::shown(&o, shape.think, split);
        thinking.push_str(&thought);
        crate::tools::gather(shape.call.as_ref(), &o, shape.think, &answer, &mut text);
        if o.finish.is_none() {
            continue;
        }
        let (object, choice) = match shape.api {
            Api::Completion => (
                "text_completion",
                json!({"index": 0, "text": text, "logprobs": null,
                       "finish_reason": finish_str(&o.finish), "matched_stop": null}),
            ),
            // `ChatMessage` drops a null `tool_calls`; serving_chat.py `_build_chat_response`
            // keeps the text beside a call in `content` ("" when none).
            Api::Chat => {
                let mut choice = json!({"index": 0,
                       "message": {"role": "assistant", "content": text,
                                   "reasoning_content": if thinking.is_empty() { Value::Null } else { Value::from(thinking.clone()) }},
                       "logprobs": null, "finish_reason": finish_str(&o.finish), "matched_stop": null});
                if let Some(call) = shape.call.as_ref().and_then(|c| c.whole()) {
                    choice["message"]["tool_calls"] = json!([call]);
                }
                ("chat.completion", choice)
            }
        };
        let mut body = json!({"id": shape.id, "object": object, "created": shape.created,
                          "model": shape.model, "choices": [choice],
                          "usage": usage(&o, shape.cached(&o), shape.reasoning(&o)),
                          "metadata": weight_metadata(o.completion_tokens)});
        if let Some(details) = shape.spec_tokens_details(&o) {
            body["sglext"] = json!({ "spec_tokens_details": details });
        }
        return json_response(StatusCode::OK, &body);
    }
    shutting_down()
}
