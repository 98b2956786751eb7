//! Native `/generate`: cumulative (default) or incremental streaming, and non-streaming.

use super::fastapi::{self, PydanticError};
use super::{
    AppState, DONE, Rejected, json_response, opt_i64, sglang_sse_response, sglang_stream_error,
    sse, unix_now,
};
use crate::ChunkTrace;
use crate::tokenizer;
use crate::types::{Finish, Output};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::stream;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;

/// `POST|PUT /generate`.
pub(crate) async fn generate(State(st): State<AppState>, body: Bytes) -> Response {
    let received = Instant::now();
    // The order 0.5.23 checks in: FastAPI's parse into GenerateReqInput (not JSON, not an
    // object), the JSON contract gate, then the tokenizer manager's own checks.
    let v = match fastapi::parse_body(&body) {
        Ok(v) => v,
        Err(e) => return fastapi::validation_error(&[e]),
    };
    if !v.is_object() {
        return fastapi::validation_error(&[PydanticError::not_a_dict("GenerateReqInput", &v)]);
    }
    if let Err(m) = super::contract::generate_request(&v) {
        return json_response(StatusCode::BAD_REQUEST, &json!({ "error": m.to_string() }));
    }
    let streaming = v.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let parsed = parse_request(&v);
    let (prompts, max_new) = match parsed {
        Ok(p) => p,
        Err(Rejected(m)) => return reject(streaming, m),
    };
    let rid = v.get("rid").and_then(Value::as_str).map(str::to_string);
    if streaming {
        if prompts.len() != 1 {
            return reject(true, "The simulator streams one prompt per request.".into());
        }
        let ids = prompts.into_iter().next().unwrap_or_default();
        let pd = crate::disagg::BootstrapFields::of(&v, 0);
        return match super::disagg::submit(&st, rid, ids, max_new, received, pd) {
            Ok((rid, rx)) => {
                let think = thinking_of(&st, &v, &rid);
                sglang_sse_response(event_stream(
                    rx,
                    rid,
                    st.cfg.incremental_output,
                    received,
                    st.cfg.trace.clone(),
                    think,
                ))
            }
            Err(Rejected(m)) => reject(true, m),
        };
    }
    let single = prompts.len() == 1 && !v.get("text").is_some_and(Value::is_array);
    let mut receivers = Vec::new();
    for (i, ids) in prompts.into_iter().enumerate() {
        let rid = rid
            .clone()
            .map(|r| if i == 0 { r } else { format!("{r}-{i}") });
        let pd = crate::disagg::BootstrapFields::of(&v, i);
        match super::disagg::submit(&st, rid, ids, max_new, received, pd) {
            Ok(x) => receivers.push(x),
            Err(Rejected(m)) => return error_json(m),
        }
    }
    let mut outs = Vec::new();
    for (rid, rx) in receivers {
        let think = thinking_of(&st, &v, &rid);
        match collect(rx, rid, received, think).await {
            Some(Ok(v)) => outs.push(v),
            Some(Err(refused)) => return refused,
            None => {
                let body = json!({"error": {"message": "The server is shutting down."}});
                return json_response(StatusCode::INTERNAL_SERVER_ERROR, &body);
            }
        }
    }
    if single {
        json_response(StatusCode::OK, &outs.remove(0))
    } else {
        json_response(StatusCode::OK, &Value::Array(outs))
    }
}

/// Token ids of each prompt, and max_new_tokens.
fn parse_request(v: &Value) -> Result<(Vec<Vec<u32>>, Option<i64>), Rejected> {
    let sp = v.get("sampling_params").cloned().unwrap_or(json!({}));
    if !sp.is_object() {
        return Err(Rejected("sampling_params must be an object".into()));
    }
    let max_new = opt_i64(&sp, "max_new_tokens")?;
    let prompts = match (v.get("input_ids"), v.get("text")) {
        (Some(ids), _) if !ids.is_null() => match ids {
            Value::Array(a) if a.iter().all(Value::is_array) => {
                a.iter().map(ids_of).collect::<Result<_, _>>()?
            }
            ids => vec![ids_of(ids)?],
        },
        (_, Some(Value::String(t))) => vec![tokenizer::encode(t)],
        (_, Some(Value::Array(a))) if !a.is_empty() => a
            .iter()
            .map(|t| {
                t.as_str()
                    .map(tokenizer::encode)
                    .ok_or_else(|| Rejected("text must be a string or a list of strings".into()))
            })
            .collect::<Result<_, _>>()?,
        _ => {
            // io_struct.py `normalize_batch_and_arguments`.
            return Err(Rejected(
                "Either text, input_ids or input_embeds should be provided.".into(),
            ));
        }
    };
    Ok((prompts, max_new))
}

fn ids_of(v: &Value) -> Result<Vec<u32>, Rejected> {
    v.as_array()
        .and_then(|a| {
            a.iter()
                .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect::<Option<Vec<u32>>>()
        })
        .ok_or_else(|| Rejected("input_ids must be a list of non-negative integers".into()))
}

fn error_json(m: String) -> Response {
    json_response(StatusCode::BAD_REQUEST, &json!({"error": {"message": m}}))
}

/// Streaming errors are HTTP 200 with an error event, as in SGLang.
fn reject(streaming: bool, m: String) -> Response {
    if !streaming {
        return error_json(m);
    }
    let body = sglang_stream_error(&m);
    sglang_sse_response(stream::iter([Ok(body), Ok(Bytes::from_static(DONE))]))
}

/// SGLang's `finish_reason` object.
pub(crate) fn finish_json(f: &Option<Finish>) -> Value {
    match f {
        None => Value::Null,
        Some(Finish::Length(n)) => json!({"type": "length", "length": n}),
        Some(Finish::Abort(m, code)) => json!({"type": "abort", "message": m, "status_code": code}),
    }
}

/// A chunk of a request that has not finished, in SGLang's key order, as SSE bytes. Same
/// content as the `json!` path (`meta_info` without the final-chunk fields).
fn running_chunk_sse(
    text: &str,
    ids: &[u32],
    o: &Output,
    rid: &str,
    first: bool,
    reasoning: u64,
) -> Bytes {
    #[derive(serde::Serialize)]
    struct Chunk<'a> {
        text: &'a str,
        output_ids: &'a [u32],
        meta_info: Meta<'a>,
    }
    #[derive(serde::Serialize)]
    struct Meta<'a> {
        id: &'a str,
        finish_reason: Option<()>,
        prompt_tokens: u64,
        weight_version: &'static str,
        num_retractions: u32,
        reasoning_tokens: u64,
        completion_tokens: u64,
        cached_tokens: u64,
        cached_tokens_details: Option<CachedDetails>,
        dp_rank: Option<()>,
        #[serde(skip_serializing_if = "Option::is_none")]
        response_sent_to_client_ts: Option<f64>,
    }
    let chunk = Chunk {
        text,
        output_ids: ids,
        meta_info: Meta {
            id: rid,
            finish_reason: None,
            prompt_tokens: o.prompt_tokens,
            weight_version: WEIGHT_VERSION,
            num_retractions: 0,
            reasoning_tokens: reasoning,
            completion_tokens: o.completion_tokens,
            cached_tokens: o.cached_tokens,
            cached_tokens_details: (o.cached_tokens > 0).then_some(CachedDetails {
                device: o.cached_tokens,
                host: 0,
            }),
            dp_rank: None,
            response_sent_to_client_ts: first.then(unix_now),
        },
    };
    let mut out = Vec::with_capacity(64 + text.len() + ids.len() * 7);
    out.extend_from_slice(b"data: ");
    if serde_json::to_writer(&mut out, &chunk).is_err() {
        return sse(&json!({"error": {"message": "serialization failed"}}));
    }
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// Where the cached prompt tokens were found (output_streamer.py
/// `get_cached_tokens_details`): all on the device, there being no host or storage tier.
#[derive(serde::Serialize)]
struct CachedDetails {
    device: u64,
    host: u64,
}

/// The weights' version: SGLang's `--weight-version` default; the simulator never updates
/// weights, so one version spans every output token.
const WEIGHT_VERSION: &str = "default";

/// `meta_info` as sglang 0.5.23's tokenizer manager builds it, in its key order: the
/// per-output counts; on the final output `weight_versions`, `e2e_latency` and the speculative
/// counters; `cached_tokens_details` always (null without a cache hit, else all of the hit
/// on the device) and `dp_rank` (null: one data-parallel rank); `response_sent_to_client_ts` (Unix seconds) on the first output sent,
/// which for a plain answer is the answer itself.
fn meta_info(o: &Output, rid: &str, first: bool, received: Instant, reasoning: u64) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), rid.into());
    m.insert("finish_reason".into(), finish_json(&o.finish));
    m.insert("prompt_tokens".into(), o.prompt_tokens.into());
    m.insert("weight_version".into(), WEIGHT_VERSION.into());
    // 0.5.23: num_retractions (no total_retractions) and reasoning_tokens.
    m.insert("num_retractions".into(), 0.into());
    m.insert("reasoning_tokens".into(), reasoning.into());
    m.insert("completion_tokens".into(), o.completion_tokens.into());
    m.insert("cached_tokens".into(), o.cached_tokens.into());
    if o.finish.is_some() {
        m.insert(
            "weight_versions".into(),
            weight_versions(o.completion_tokens),
        );
    }
    m.insert(
        "cached_tokens_details".into(),
        if o.cached_tokens > 0 {
            json!({"device": o.cached_tokens, "host": 0})
        } else {
            Value::Null
        },
    );
    m.insert("dp_rank".into(), Value::Null);
    if o.finish.is_some() {
        m.insert(
            "e2e_latency".into(),
            received.elapsed().as_secs_f64().into(),
        );
        if let Some(s) = o.spec {
            let rate = s.num_correct_drafts as f64 / s.num_proposed_drafts.max(1) as f64;
            let len = o.completion_tokens as f64 / s.verify_ct.max(1) as f64;
            m.insert("spec_accept_rate".into(), rate.into());
            m.insert("spec_accept_length".into(), len.into());
            m.insert(
                "spec_num_correct_drafts".into(),
                s.num_correct_drafts.into(),
            );
            m.insert(
                "spec_num_proposed_drafts".into(),
                s.num_proposed_drafts.into(),
            );
            m.insert("spec_verify_ct".into(), s.verify_ct.into());
            // Late-2025 names, for clients that read those.
            m.insert("spec_accept_token_num".into(), s.num_correct_drafts.into());
            m.insert("spec_draft_token_num".into(), s.num_proposed_drafts.into());
        }
    }
    if first {
        m.insert("response_sent_to_client_ts".into(), unix_now().into());
    }
    Value::Object(m)
}

/// `weight_versions`: the one version's span over the output tokens
/// (utils/weight_versions.py `add_weight_versions_to_meta_info`).
pub fn weight_versions(completion_tokens: u64) -> Value {
    json!([{"version": WEIGHT_VERSION, "start": 0, "end": completion_tokens}])
}

/// The OpenAI answers' top-level `metadata` (`build_endpoint_weight_version_metadata`).
pub(crate) fn weight_metadata(completion_tokens: u64) -> Value {
    json!({"weight_version": WEIGHT_VERSION, "weight_versions": weight_versions(completion_tokens)})
}

struct GenStream {
    rx: UnboundedReceiver<Output>,
    rid: Arc<str>,
    incremental: bool,
    received: Instant,
    text: String,
    ids: Vec<u32>,
    first: bool,
    finished: bool,
    /// Emission stamps for the drift bench (None in normal use).
    trace: Option<ChunkTrace>,
    index: u32,
    /// The request's thinking tokens, and whether `meta_info` counts them.
    think: Think,
}

/// A request's thinking on `/generate`: its tokens, written with their markers in the raw
/// text, and whether `meta_info.reasoning_tokens` counts them (a reasoning parser is set).
#[derive(Clone, Copy)]
struct Think {
    tokens: u64,
    counted: bool,
}

impl Think {
    fn reasoning(&self, o: &Output) -> u64 {
        if self.counted {
            o.completion_tokens.min(self.tokens)
        } else {
            0
        }
    }
}

fn thinking_of(st: &AppState, v: &Value, rid: &str) -> Think {
    Think {
        tokens: crate::thinking::tokens_for(&st.cfg.profile.thinking, v, false, rid),
        counted: st.cfg.reasoning_split,
    }
}

fn event_stream(
    rx: UnboundedReceiver<Output>,
    rid: Arc<str>,
    incremental: bool,
    received: Instant,
    trace: Option<ChunkTrace>,
    think: Think,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    let s = GenStream {
        rx,
        rid,
        incremental,
        received,
        text: String::new(),
        ids: Vec::new(),
        first: true,
        finished: false,
        trace,
        index: 0,
        think,
    };
    stream::unfold(s, |mut s| async move {
        if s.finished {
            return None;
        }
        // None without a final output: the engine died; end without [DONE], like a dropped
        // connection.
        let o = s.rx.recv().await?;
        let new_text = crate::thinking::split(&o, s.think.tokens, true).joined();
        let reasoning = s.think.reasoning(&o);
        let (text, ids): (&str, &[u32]) = if s.incremental {
            (&new_text, &o.new_ids)
        } else {
            s.text.push_str(&new_text);
            s.ids.extend_from_slice(&o.new_ids);
            (&s.text, &s.ids)
        };
        let mut bytes = if o.finish.is_none() {
            // The common chunk, serialized straight to bytes (no `Value` tree): at hundreds
            // of streams per decode step this is the simulator's per-chunk cost.
            running_chunk_sse(text, ids, &o, &s.rid, s.first, reasoning)
        } else {
            let chunk = json!({"text": text, "output_ids": ids, "meta_info": meta_info(&o, &s.rid, s.first, s.received, reasoning)});
            sse(&chunk)
        };
        s.first = false;
        if o.finish.is_some() {
            s.finished = true;
            let mut b = bytes.to_vec();
            b.extend_from_slice(DONE);
            bytes = Bytes::from(b);
        }
        if let Some(t) = &s.trace {
            t.emitted(&s.rid, s.index);
        }
        s.index += 1;
        Some((Ok(bytes), s))
    })
}

/// The final response, or None when the engine went away first. An abort with an HTTP status
/// of 400 or more is the error response SGLang's tokenizer manager raises for a plain answer
/// (`_handle_abort_finish_reason`): 400 `{"error": {"message"}}` (a ValueError), another
/// status FastAPI's `{"detail": message}` (an HTTPException).
async fn collect(
    mut rx: UnboundedReceiver<Output>,
    rid: Arc<str>,
    received: Instant,
    think: Think,
) -> Option<Result<Value, Response>> {
    let mut text = String::new();
    let mut ids = Vec::new();
    while let Some(o) = rx.recv().await {
        text.push_str(&crate::thinking::split(&o, think.tokens, true).joined());
        ids.extend_from_slice(&o.new_ids);
        if let Some(Finish::Abort(m, code)) = &o.finish
            && (400..600).contains(code)
        {
            if *code == 400 {
                return Some(Err(error_json(m.clone())));
            }
            let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return Some(Err(json_response(status, &json!({ "detail": m }))));
        }
        if o.finish.is_some() {
            // The plain answer is the first (and only) output sent.
            return Some(Ok(
                json!({"text": text, "output_ids": ids, "meta_info": meta_info(&o, &rid, true, received, think.reasoning(&o))}),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_chunk_bytes_equal_the_value_path() {
        let o = Output {
            new_ids: vec![5, 6],
            completion_tokens: 2,
            prompt_tokens: 10,
            cached_tokens: 3,
            finish: None,
            spec: None,
            slot: None,
            timings: None,
        };
        let received = Instant::now();
        let via_value = sse(&json!({
            "text": "a \"b\"\n",
            "output_ids": [5, 6],
            "meta_info": meta_info(&o, "rid1", false, received, 0)
        }));
        let direct = running_chunk_sse("a \"b\"\n", &[5, 6], &o, "rid1", false, 0);
        assert_eq!(direct, via_value);
        let first = running_chunk_sse("x", &[5], &o, "rid1", true, 0);
        assert!(
            std::str::from_utf8(&first)
                .unwrap()
                .contains("\"response_sent_to_client_ts\":")
        );
    }
}
