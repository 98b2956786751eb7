//! One streaming request, from send to the end of the stream.
//!
//! The hot loop only reads and stamps: `Instant::now()` is taken as each network read completes,
//! before any framing or JSON parsing, and events inherit the stamp of the read that completed
//! them.

use std::error::Error as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::time::timeout_at;

use crate::results::records::{Chunk, ErrorKind, RequestError, TokenSource};
use crate::spec::types::Api;

use super::parse::{self, Parsed, StreamParser};
use super::sse::{SseEvent, SseFramer, head};
use super::{Client, GenerationRequest, Measured, request};

/// Longest non-2xx body read to extract the server's message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// After `[DONE]`, how long to wait for the body's end so the connection can be reused.
const DRAIN_LIMIT: Duration = Duration::from_millis(200);

pub(super) async fn run(client: &Client, req: &GenerationRequest, timeout: Duration) -> Measured {
    let mut m = Measured::nothing_yet();
    let built = client
        .request(reqwest::Method::POST, request::path(req.api))
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .json(&request::body(req))
        .build();
    let built = match built {
        Ok(b) => b,
        Err(e) => {
            m.sent_at = unix_now();
            m.error = Some(error(ErrorKind::Connect, describe(&e), None, None));
            return m;
        }
    };

    // Stamp as late as possible before the bytes leave.
    m.sent_at = unix_now();
    let t0 = Instant::now();
    let deadline = tokio::time::Instant::from_std(t0) + timeout;
    let since = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    let timed_out = || format!("no complete response within {timeout:?}");

    let mut response = match timeout_at(deadline, client.http.execute(built)).await {
        Err(_) => {
            m.error = Some(error(ErrorKind::Timeout, timed_out(), None, None));
            return m;
        }
        Ok(Err(e)) => {
            let kind = if e.is_connect() {
                ErrorKind::Connect
            } else if e.is_timeout() {
                ErrorKind::Timeout
            } else {
                ErrorKind::Reset
            };
            m.error = Some(error(kind, describe(&e), None, None));
            return m;
        }
        Ok(Ok(r)) => r,
    };
    let status = response.status().as_u16();

    if !response.status().is_success() {
        let mut body = Vec::new();
        let mut broken = None;
        while body.len() < ERROR_BODY_LIMIT {
            match timeout_at(deadline, response.chunk()).await {
                Ok(Ok(Some(bytes))) => body.extend_from_slice(&bytes),
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    broken = Some(describe(&e));
                    break;
                }
                Err(_) => {
                    broken = Some(timed_out());
                    break;
                }
            }
        }
        m.end_s = Some(since(Instant::now()));
        let mut message = format!("HTTP {status}: {}", parse::http_error_message(&body));
        if let Some(b) = broken {
            message.push_str(&format!(" (error body cut short: {b})"));
        }
        m.error = Some(error(
            ErrorKind::Http,
            message,
            Some(status),
            Some(head(&body)),
        ));
        return m;
    }

    let mut framer = SseFramer::new();
    let mut parser = StreamParser::new(req.api);
    let mut done = false;
    let fail = |kind: ErrorKind, message: String, body_head: Option<String>| {
        Some(error(kind, message, Some(status), body_head))
    };
    while !done && m.error.is_none() {
        let read = timeout_at(deadline, response.chunk()).await;
        // Stamp before anything else touches the bytes.
        let arrived = Instant::now();
        match read {
            Err(_) => m.error = fail(ErrorKind::Timeout, timed_out(), None),
            Ok(Err(e)) => {
                let message = format!("connection broke mid-stream: {}", describe(&e));
                m.error = fail(ErrorKind::Reset, message, None);
            }
            Ok(Ok(Some(bytes))) => {
                done = take_read(
                    &mut m,
                    &mut framer,
                    &mut parser,
                    &bytes,
                    arrived,
                    t0,
                    status,
                );
            }
            Ok(Ok(None)) => {
                // The body ended without `[DONE]`. A last event missing only its blank line is
                // still taken; anything else means the stream was cut short.
                let pending = framer.finish();
                let mut truncated = None;
                match pending {
                    Ok(Some(event)) => {
                        let data = event.data.clone();
                        let mut probe = StreamParser::new(req.api);
                        if probe.event(&data).is_ok() {
                            done = take_event(&mut m, &mut parser, event, t0, status);
                        } else {
                            truncated = Some(head(&data));
                        }
                    }
                    Ok(None) => {}
                    Err(bad) => truncated = Some(bad.head),
                }
                if m.error.is_none() {
                    m.end_s = Some(since(arrived));
                    if !done {
                        let message = match truncated {
                            Some(_) => "stream ended in the middle of an event".to_string(),
                            None => "stream ended without [DONE]".to_string(),
                        };
                        m.error = fail(ErrorKind::Incomplete, message, truncated);
                    }
                }
                break;
            }
        }
    }
    if done {
        // Let the body finish so the connection returns to the pool; nothing after `[DONE]`
        // is measured.
        let drain_until = deadline.min(tokio::time::Instant::now() + DRAIN_LIMIT);
        while let Ok(Ok(Some(_))) = timeout_at(drain_until, response.chunk()).await {}
        if m.error.is_none()
            && let Some(message) = parser.abort_message.clone()
        {
            m.error = fail(
                ErrorKind::StreamError,
                format!("server aborted the request: {message}"),
                None,
            );
        }
    }

    settle(&mut m, &mut parser);
    m
}

/// The per-read hot path of [`run`] without a network: every read is stamped with
/// `Instant::now()`, fed to the [`SseFramer`], and each completed event goes through
/// [`take_event`], stopping at `[DONE]` or the first error, as `run` does. A body that ends
/// without `[DONE]` is not examined further (`end_s` stays None). Used by the hot-path bench.
pub(super) fn replay<'a>(api: Api, reads: impl IntoIterator<Item = &'a [u8]>) -> Measured {
    let mut m = Measured::nothing_yet();
    let t0 = Instant::now();
    let status = 200;
    let mut framer = SseFramer::new();
    let mut parser = StreamParser::new(api);
    let mut done = false;
    for bytes in reads {
        if done || m.error.is_some() {
            break;
        }
        let arrived = Instant::now();
        done = take_read(&mut m, &mut framer, &mut parser, bytes, arrived, t0, status);
    }
    settle(&mut m, &mut parser);
    m
}

/// One network read: frames it and applies every completed event, stopping at `[DONE]`
/// (returns true) or the first error (recorded in `m`). Shared by [`run`] and [`replay`], so
/// the hot-path bench measures exactly this code.
#[allow(clippy::too_many_arguments)]
fn take_read(
    m: &mut Measured,
    framer: &mut SseFramer,
    parser: &mut StreamParser,
    bytes: &[u8],
    arrived: Instant,
    t0: Instant,
    status: u16,
) -> bool {
    match framer.feed(bytes, arrived) {
        Ok(events) => {
            for event in events {
                if take_event(m, parser, event, t0, status) {
                    return true;
                }
                if m.error.is_some() {
                    break;
                }
            }
        }
        Err(bad) => {
            m.end_s = Some(arrived.saturating_duration_since(t0).as_secs_f64());
            let message = "response is not a server-sent event stream".to_string();
            m.error = Some(error(
                ErrorKind::Malformed,
                message,
                Some(status),
                Some(bad.head),
            ));
        }
    }
    false
}

/// Copies what the parser learned into the measurement.
fn settle(m: &mut Measured, parser: &mut StreamParser) {
    m.prompt_tokens = parser.prompt_tokens;
    m.cached_tokens = parser.cached_tokens;
    m.finish_reason = parser.finish_reason.take();
    m.token_source = parser.token_source();
    m.completion_tokens = Some(parser.completion_tokens());
    m.text = std::mem::take(&mut parser.text);
}

/// Applies one event; returns true at `[DONE]`. Errors are recorded in `m`.
fn take_event(
    m: &mut Measured,
    parser: &mut StreamParser,
    event: SseEvent,
    t0: Instant,
    status: u16,
) -> bool {
    let t_s = event.arrived.saturating_duration_since(t0).as_secs_f64();
    match parser.event(&event.data) {
        Ok(Parsed::Done) => {
            m.end_s = Some(t_s);
            true
        }
        Ok(Parsed::Chunk { tokens }) => {
            m.chunks.push(Chunk { t_s, tokens });
            false
        }
        Ok(Parsed::Error { message, head }) => {
            m.end_s = Some(t_s);
            m.error = Some(error(
                ErrorKind::StreamError,
                message,
                Some(status),
                Some(head),
            ));
            false
        }
        Err(bad) => {
            m.end_s = Some(t_s);
            m.error = Some(error(
                ErrorKind::Malformed,
                bad.message,
                Some(status),
                Some(bad.head),
            ));
            false
        }
    }
}

fn error(
    kind: ErrorKind,
    message: String,
    status: Option<u16>,
    body_head: Option<String>,
) -> RequestError {
    RequestError {
        kind,
        message,
        status,
        body_head,
    }
}

/// A reqwest error with its causes ("error sending request: ...: Connection refused"), which
/// reqwest's own Display leaves out. Headers (and so the API key) are never part of it.
pub(super) fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Seconds since the Unix epoch (send times and point spans in records).
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Measured {
    /// Before the request is sent: nothing measured, counts unknown.
    fn nothing_yet() -> Measured {
        Measured {
            sent_at: 0.0,
            chunks: Vec::new(),
            end_s: None,
            prompt_tokens: None,
            completion_tokens: None,
            cached_tokens: None,
            token_source: TokenSource::ChunkCount,
            finish_reason: None,
            error: None,
            text: String::new(),
        }
    }
}
