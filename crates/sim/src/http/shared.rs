//! What every surface's handlers share: the state they reach, JSON and SSE responses, the
//! request-body parse and its refusal, the clock.

use crate::config::SimConfig;
use crate::state::Shared;
use crate::types::{Command, GenRequest, Output, ReqOptions};
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// What every handler can reach.
#[derive(Clone)]
pub(crate) struct AppState {
    pub cfg: Arc<SimConfig>,
    pub shared: Arc<Shared>,
    pub tx: Sender<Command>,
    pub created: u64,
    /// Prefill-decode disaggregation's rooms and peers (unused when not disaggregated).
    pub pd: Arc<crate::disagg::PdState>,
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// A validation failure, phrased as SGLang phrases it.
#[derive(Debug)]
pub(crate) struct Rejected(pub String);

impl AppState {
    /// Checks a tokenized request as SGLang's tokenizer manager does; the tokens it may
    /// generate (`max_new_tokens` trimmed to the context and the pool).
    pub(crate) fn validate(
        &self,
        input_ids: &[u32],
        max_new_tokens: Option<i64>,
    ) -> Result<u64, Rejected> {
        // Unset, it is not checked against the context, and SamplingParams' 128 applies.
        let given = max_new_tokens.is_some();
        let max_new_tokens = max_new_tokens.unwrap_or(128);
        let n = input_ids.len() as u64;
        if max_new_tokens < 0 {
            return Err(Rejected(format!(
                "max_new_tokens must be at least 0, got {max_new_tokens}."
            )));
        }
        if n == 0 {
            return Err(Rejected("The input is empty.".into()));
        }
        let ctx = self.cfg.context_length;
        if n >= ctx {
            return Err(Rejected(format!(
                "The input ({n} tokens) is longer than the model's context length ({ctx} tokens)."
            )));
        }
        // tokenizer_manager.py `_validate_one_request`: prompt + max_new_tokens must stay
        // under the context (SGLang answers 400; vLLM instead shortens the output).
        let max_new = max_new_tokens as u64;
        if given && n + max_new >= ctx {
            return Err(Rejected(format!(
                "Requested token count exceeds the model's maximum context length of {ctx} tokens. \
                 You requested a total of {} tokens: {n} tokens from the input messages and \
                 {max_new} tokens for the completion. Please reduce the number of tokens in the \
                 input messages or the completion to fit within the limit.",
                n + max_new
            )));
        }
        // The scheduler's own limit (tp_worker.py max_req_input_len, managers/utils.py
        // `validate_input_length`): the KV pool bounds it too.
        let limit = self.cfg.max_req_input_len();
        if n >= limit {
            return Err(Rejected(format!(
                "Input length ({n} tokens) exceeds the maximum allowed length ({limit} tokens). \
                 Use a shorter input or enable --allow-auto-truncate."
            )));
        }
        // The scheduler trims the output to max_req_len - prompt - 1 (scheduler.py).
        let max_req_len = (ctx - 1).min(self.cfg.pool_tokens().saturating_sub(1));
        Ok(max_new.min(max_req_len.saturating_sub(n + 1)))
    }

    /// Queues an already validated request; the other surfaces validate in their own words.
    pub(crate) fn enqueue(
        &self,
        rid: Option<String>,
        input_ids: Vec<u32>,
        max_new_tokens: u64,
        received: Instant,
        opts: ReqOptions,
    ) -> Result<(Arc<str>, mpsc::UnboundedReceiver<Output>), Rejected> {
        let (events, rx) = mpsc::unbounded_channel();
        let rid: Arc<str> = rid
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
            .into();
        self.send(GenRequest {
            rid: rid.clone(),
            input_ids,
            max_new_tokens,
            received,
            events,
            opts,
            disagg: None,
        })?;
        Ok((rid, rx))
    }

    /// Hands a request to the scheduler.
    pub(crate) fn send(&self, g: GenRequest) -> Result<(), Rejected> {
        self.tx
            .send(Command::Generate(g))
            .map_err(|_| Rejected("The server is shutting down.".into()))
    }
}

/// A JSON response with a status.
pub(crate) fn json_response(status: StatusCode, v: &serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

/// An SSE response from a stream of already-framed `data: ...\n\n` chunks (vLLM's surface).
pub(crate) fn sse_response(
    s: impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(s))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// SGLang's SSE response: Starlette's `StreamingResponse(media_type="text/event-stream")`,
/// which adds the charset to a `text/` type and sends no `cache-control`.
pub(crate) fn sglang_sse_response(
    s: impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static,
) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream; charset=utf-8")
        .body(Body::from_stream(s))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// One request's SSE stream: `events` writes each engine output (`head` first, when the
/// surface waited for the first output before answering), `first` on the first, until the
/// final output. An engine that ends without one (it died) just ends the stream.
pub(crate) fn output_stream<S: Send + Sync + 'static>(
    head: Option<Output>,
    rx: mpsc::UnboundedReceiver<Output>,
    shape: Arc<S>,
    events: fn(&S, &Output, bool) -> Vec<u8>,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
    futures_util::stream::unfold(
        (rx, shape, head, true, false),
        move |(mut rx, shape, pending, first, done)| async move {
            if done {
                return None;
            }
            let o = match pending {
                Some(o) => o,
                None => rx.recv().await?,
            };
            let bytes = Bytes::from(events(&shape, &o, first));
            let done = o.finish.is_some();
            Some((Ok(bytes), (rx, shape, None, false, done)))
        },
    )
}

/// The error event SGLang's `/generate` stream sends when the request fails after the 200
/// head (http_server.py `stream_results`), followed by `[DONE]`.
pub(crate) fn sglang_stream_error(message: &str) -> Bytes {
    sse(
        &serde_json::json!({"error": {"message": message, "type": "invalid_request_error",
                                      "code": 400, "retryable": false}}),
    )
}

/// Frames one SSE event.
pub(crate) fn sse(v: &serde_json::Value) -> Bytes {
    let mut s = String::with_capacity(256);
    s.push_str("data: ");
    s.push_str(&v.to_string());
    s.push_str("\n\n");
    Bytes::from(s)
}

/// The stream terminator.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// Reads an integer field that may be absent or null.
pub(crate) fn opt_i64(v: &serde_json::Value, key: &str) -> Result<Option<i64>, Rejected> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(x) => x
            .as_i64()
            .or_else(|| x.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| Rejected(format!("{key} must be an integer, got {x}"))),
    }
}
