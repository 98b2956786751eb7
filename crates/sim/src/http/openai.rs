//! OpenAI-compatible `/v1/completions` and `/v1/chat/completions`.

use super::{AppState, DONE, Rejected, json_response, opt_i64, parse_json, sse, sse_response};
use crate::tokenizer;
use crate::types::{Finish, Output};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::stream;
use serde_json::{Value, json};
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

/// SGLang's OpenAI-style error body.
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
}

async fn handle(st: AppState, body: Bytes, api: Api) -> Response {
    let received = Instant::now();
    let v = match parse_json(&body) {
        Ok(v) => v,
        Err(Rejected(m)) => return openai_error(m),
    };
    let parsed = match api {
        Api::Completion => completion_prompt(&v),
        Api::Chat => chat_prompt(&v),
    }
    .and_then(|ids| Ok((ids, max_tokens(&v, api)?)));
    let (ids, max_new) = match parsed {
        Ok(x) => x,
        Err(Rejected(m)) => return openai_error(m),
    };
    let rid = v.get("rid").and_then(Value::as_str).map(str::to_string);
    let (rid, rx) = match st.submit(rid, ids, max_new, received) {
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
        id: match api {
            Api::Completion => format!("cmpl-{rid}"),
            Api::Chat => format!("chatcmpl-{rid}"),
        },
        model: v
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string(),
        created: super::unix_now() as u64,
        include_usage: flag("include_usage"),
        continuous_usage: flag("continuous_usage_stats"),
        cache_report: st.cfg.enable_cache_report,
    };
    if v.get("stream").and_then(Value::as_bool).unwrap_or(false) {
        // sglang 0.5.23 sends the 200 head with the first token, not before it.
        let mut rx = rx;
        match rx.recv().await {
            Some(first) => sse_response(event_stream(first, rx, Arc::new(shape))),
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

fn max_tokens(v: &Value, api: Api) -> Result<Option<i64>, Rejected> {
    let given = match api {
        Api::Chat => opt_i64(v, "max_completion_tokens")?.or(opt_i64(v, "max_tokens")?),
        Api::Completion => opt_i64(v, "max_tokens")?,
    };
    match given {
        Some(n) if n <= 0 => Err(Rejected(format!("max_tokens must be at least 1, got {n}."))),
        Some(n) => Ok(Some(n)),
        // OpenAI's completions default; chat has none in SGLang (runs to EOS, or to
        // SamplingParams' 128 here: the simulator never emits EOS).
        None if api == Api::Completion => Ok(Some(16)),
        None => Ok(None),
    }
}

fn finish_str(f: &Option<Finish>) -> Value {
    match f {
        None => Value::Null,
        Some(Finish::Length(_)) => "length".into(),
        Some(Finish::Abort(..)) => "abort".into(),
    }
}

fn usage(o: &Output, cache_report: bool) -> Value {
    // sglang 0.5.23 reports the count with --enable-cache-report even at 0 (older versions
    // left it out at 0).
    let details = if cache_report {
        json!({"cached_tokens": o.cached_tokens})
    } else {
        Value::Null
    };
    json!({
        "prompt_tokens": o.prompt_tokens,
        "completion_tokens": o.completion_tokens,
        "total_tokens": o.prompt_tokens + o.completion_tokens,
        "prompt_tokens_details": details,
        "reasoning_tokens": 0,
    })
}

fn chunk(shape: &Shape, choice: Value, usage: Value) -> Value {
    let object = match shape.api {
        Api::Completion => "text_completion",
        Api::Chat => "chat.completion.chunk",
    };
    let choices = if choice.is_null() {
        json!([])
    } else {
        json!([choice])
    };
    json!({"id": shape.id, "object": object, "created": shape.created, "model": shape.model,
           "choices": choices, "usage": usage})
}

/// Every SSE event for one engine output, as one write.
fn events_for(shape: &Shape, o: &Output, first: bool) -> Vec<u8> {
    let mut text = String::new();
    tokenizer::decode_into(&o.new_ids, &mut text);
    let cont = if shape.continuous_usage {
        usage(o, shape.cache_report)
    } else {
        Value::Null
    };
    let mut out = Vec::with_capacity(512);
    match shape.api {
        Api::Completion => {
            let c = json!({"index": 0, "text": text, "logprobs": null,
                           "finish_reason": finish_str(&o.finish), "matched_stop": null});
            out.extend_from_slice(&sse(&chunk(shape, c, cont.clone())));
        }
        Api::Chat => {
            // 0.5.23: no usage on the role chunk, and no chunk with empty content.
            if first {
                let c = json!({"index": 0, "delta": {"role": "assistant", "content": ""},
                               "logprobs": null, "finish_reason": null, "matched_stop": null});
                out.extend_from_slice(&sse(&chunk(shape, c, Value::Null)));
            }
            if !text.is_empty() {
                let c = json!({"index": 0, "delta": {"content": text}, "logprobs": null,
                               "finish_reason": null, "matched_stop": null});
                out.extend_from_slice(&sse(&chunk(shape, c, cont.clone())));
            }
            if o.finish.is_some() {
                let c = json!({"index": 0, "delta": {}, "logprobs": null,
                               "finish_reason": finish_str(&o.finish), "matched_stop": null});
                out.extend_from_slice(&sse(&chunk(shape, c, cont)));
            }
        }
    }
    if o.finish.is_some() {
        if shape.include_usage {
            out.extend_from_slice(&sse(&chunk(
                shape,
                Value::Null,
                usage(o, shape.cache_report),
            )));
        }
        out.extend_from_slice(DONE);
    }
    out
}

/// The stream of a request whose first output (`head`) is in hand.
fn event_stream(
    head: Output,
    rx: UnboundedReceiver<Output>,
    shape: Arc<Shape>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    stream::unfold(
        (rx, shape, Some(head), true, false),
        |(mut rx, shape, pending, first, done)| async move {
            if done {
                return None;
            }
            let o = match pending {
                Some(o) => o,
                None => rx.recv().await?,
            };
            let bytes = Bytes::from(events_for(&shape, &o, first));
            let done = o.finish.is_some();
            Some((Ok(bytes), (rx, shape, None, false, done)))
        },
    )
}

fn shutting_down() -> Response {
    json_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        &json!({"object": "error", "message": "The server is shutting down.", "type": "InternalServerError", "param": null, "code": 500}),
    )
}

async fn collect(mut rx: UnboundedReceiver<Output>, shape: Shape) -> Response {
    let mut text = String::new();
    while let Some(o) = rx.recv().await {
        tokenizer::decode_into(&o.new_ids, &mut text);
        if o.finish.is_none() {
            continue;
        }
        let (object, choice) = match shape.api {
            Api::Completion => (
                "text_completion",
                json!({"index": 0, "text": text, "logprobs": null,
                       "finish_reason": finish_str(&o.finish), "matched_stop": null}),
            ),
            Api::Chat => (
                "chat.completion",
                json!({"index": 0,
                       "message": {"role": "assistant", "content": text, "reasoning_content": null, "tool_calls": null},
                       "logprobs": null, "finish_reason": finish_str(&o.finish), "matched_stop": null}),
            ),
        };
        let body = json!({"id": shape.id, "object": object, "created": shape.created,
                          "model": shape.model, "choices": [choice],
                          "usage": usage(&o, shape.cache_report)});
        return json_response(StatusCode::OK, &body);
    }
    shutting_down()
}
