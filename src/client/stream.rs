//! One streaming request, from send to the end of the stream.
//!
//! The hot loop only reads and stamps: each network read is stamped with when its bytes reached
//! this host (the kernel's receive stamp on Linux, else `Instant::now()` as the read completes),
//! before any framing or JSON parsing, and events inherit the stamp of the read that completed
//! them. So a client busy parsing other streams' events does not make this one's later. Offsets count from the start of the write that handed the request's last byte to its
//! connection (the socket records it, stamped before the call, so never later than the
//! bytes), so the client's own queue, the body's encoding and any connect are outside TTFT.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use servebench_model::results::records::{
    Chunk, ChunkTokens, ErrorKind, RequestError, TokenSource,
};
use servebench_model::spec::types::Api;

use super::body::{Read, read};
use super::conn::describe;
use super::parse::{self, Parsed, StreamParser};
use super::sse::{SseEvent, SseFramer, head};
use super::{Client, GenerationRequest, Measured, request};

/// Longest non-2xx body read to extract the server's message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// After `[DONE]`, how long to wait for the body's end so the connection can be reused.
const DRAIN_LIMIT: Duration = Duration::from_millis(200);

/// Bytes every stream may bring, whatever it asks for.
const BUDGET_BASE_BYTES: u64 = 16 << 20;
/// Bytes a stream may bring per output token asked: an incremental event is a few hundred
/// bytes (a few kB with logprobs).
const BUDGET_BYTES_PER_TOKEN: u64 = 8 << 10;
/// `/generate` events may carry the whole text and ids so far (SGLang without incremental
/// output), about 5 n² bytes for n tokens: it may bring this many bytes per token squared
/// beside the rest.
const BUDGET_BYTES_PER_TOKEN_SQUARED: u64 = 64;
/// Chunks a stream keeps one by one beside four per output token asked (a stream needs one a
/// token, and role, finish and usage chunks around them).
const BUDGET_BASE_CHUNKS: usize = 4096;
/// Chunks a stream may add past its chunk budget, each where a folded event brings the first
/// token, or the first answer token, after chunks without: so TTFT and TTFA survive a fold.
const BUDGET_EXTRA_CHUNKS: usize = 8;

/// What one stream may bring: past `bytes` it is failed (`stream-budget`) and no longer
/// read; past `chunks` its events are folded into its last chunk (`chunks_folded`), so its
/// memory stays bounded (3,000,000 one-character events once took 1.87 GB for two requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    pub bytes: u64,
    pub chunks: usize,
}

impl Budget {
    /// The budget of a request on `api` asking for `max_tokens`.
    pub(crate) fn of(api: Api, max_tokens: u32) -> Budget {
        let n = u64::from(max_tokens);
        let mut bytes = BUDGET_BASE_BYTES.saturating_add(n.saturating_mul(BUDGET_BYTES_PER_TOKEN));
        if api == Api::SglangGenerate {
            bytes = bytes.saturating_add(
                n.saturating_mul(n)
                    .saturating_mul(BUDGET_BYTES_PER_TOKEN_SQUARED),
            );
        }
        let chunks = BUDGET_BASE_CHUNKS.saturating_add((max_tokens as usize).saturating_mul(4));
        Budget { bytes, chunks }
    }
}

/// A Unix time and the `Instant` taken with it, to place later instants on the Unix clock.
#[derive(Clone, Copy)]
struct Anchor {
    unix: f64,
    at: Instant,
}

impl Anchor {
    fn now() -> Anchor {
        Anchor {
            at: Instant::now(),
            unix: unix_now(),
        }
    }

    fn unix_at(&self, t: Instant) -> f64 {
        self.unix + t.saturating_duration_since(self.at).as_secs_f64()
    }
}

impl Client {
    /// Sends one streaming request and measures it. Never fails: errors (HTTP, stream errors,
    /// malformed events, connect failures, resets, `timeout` passing) are recorded in
    /// [`Measured::error`] next to the chunks that arrived before them. The call's time is the
    /// request's scheduled time; `timeout` counts from it.
    pub async fn stream(&self, req: &GenerationRequest, timeout: Duration) -> Measured {
        run(self, req, timeout, false).await
    }

    /// [`stream`](Self::stream), keeping the whole generated text in [`Measured::text`] on
    /// every API (the native API's hot path skips cumulative text it does not need): for the
    /// requests whose answer is judged (`validity:`).
    pub async fn stream_text(&self, req: &GenerationRequest, timeout: Duration) -> Measured {
        run(self, req, timeout, true).await
    }
}

/// Frames and parses an already received streaming body, given as the network reads that
/// delivered it, with the same framer, parser and per-event bookkeeping as [`Client::stream`]
/// (each read stamped with `Instant::now()`; stops at `[DONE]` or the first error). Used by the
/// hot-path bench (`benches/client_hot_path.rs`); measurements always go through
/// [`Client::stream`].
pub fn replay_stream<'a>(api: Api, reads: impl IntoIterator<Item = &'a [u8]>) -> Measured {
    replay(api, reads)
}

/// A request id unique in this process and, by its random stem, across runs: `sb-<stem>-<n>`.
/// Routers and engines that read `x-request-id` (sglang-router logs it with the worker it
/// picked; vLLM can take it as its own id) then name servebench's request by it.
fn next_request_id() -> String {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static STEM: OnceLock<String> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let stem = STEM.get_or_init(|| format!("{:08x}", rand::random::<u32>()));
    format!("sb-{stem}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// From the first write's start to the last write's end: the whole write, however long the
/// client was descheduled within it; None before both happened.
fn write_s(wire: &super::conn::Wire) -> Option<f64> {
    let (first, done) = (wire.first_write?, wire.last_write_done?);
    Some(done.saturating_duration_since(first).as_secs_f64())
}

/// When the bytes just read reached this host (the kernel's stamp, never before the request
/// was written at `t0`, never after they were read); the longest wait between the two is
/// kept in `m`.
fn arrival(lease: &mut super::pool::Lease, t0: Instant, m: &mut Measured) -> Instant {
    let read_at = Instant::now();
    let arrived = lease
        .conn()
        .log
        .get()
        .last_arrival
        .filter(|a| *a >= t0 && *a <= read_at)
        .unwrap_or(read_at);
    if arrived < read_at {
        let waited = (read_at - arrived).as_secs_f64();
        m.read_wait_max_s = Some(m.read_wait_max_s.map_or(waited, |w| w.max(waited)));
    }
    arrived
}

/// The error body of a response that was not a success, read up to [`ERROR_BODY_LIMIT`]
/// before `deadline` (`timeout` names it): when the reading ended, the request's error with
/// the server's message, and whether the body was read to its end (the connection is then
/// reusable).
async fn http_error(
    lease: &mut super::pool::Lease,
    body: &mut hyper::body::Incoming,
    status: u16,
    (deadline, timeout): (Instant, Duration),
) -> (Instant, RequestError, bool) {
    let mut bytes = Vec::new();
    let mut broken = None;
    let mut complete = false;
    while bytes.len() < ERROR_BODY_LIMIT {
        match read(lease, body, deadline).await {
            Read::Data(b) => bytes.extend_from_slice(&b),
            Read::End => {
                complete = true;
                break;
            }
            Read::Failed(e) => {
                broken = Some(describe(&e));
                break;
            }
            Read::TimedOut => {
                broken = Some(format!("no complete response within {timeout:?}"));
                break;
            }
        }
    }
    let ended = Instant::now();
    let mut message = format!("HTTP {status}: {}", parse::http_error_message(&bytes));
    if let Some(b) = broken {
        message.push_str(&format!(" (error body cut short: {b})"));
    }
    let err = error(ErrorKind::Http, message, Some(status), Some(head(&bytes)));
    (ended, err, complete)
}

pub(super) async fn run(
    client: &Client,
    req: &GenerationRequest,
    timeout: Duration,
    keep_text: bool,
) -> Measured {
    let scheduled = Anchor::now();
    let deadline = scheduled.at + timeout;
    let mut m = Measured::nothing_yet();
    m.scheduled_at = Some(scheduled.unix);
    // Encoded before anything is sent, so its cost never falls inside TTFT.
    let body = Bytes::from(serde_json::to_vec(&request::body(req)).unwrap_or_default());
    let id = next_request_id();
    let ex = client
        .exchange(
            hyper::Method::POST,
            request::path(req.api),
            body,
            true,
            deadline,
            timeout,
            Some(&id),
            &req.headers,
        )
        .await;
    m.request_id = Some(id);
    m.connect_s = ex.connect_s;
    m.connection = ex.how;
    m.first_attempt = ex.first_attempt;
    m.write_s = write_s(&ex.wire);
    let t0 = ex.wire.last_write.unwrap_or_else(Instant::now);
    m.sent_at = scheduled.unix_at(t0);
    let since = |t: Instant| t.saturating_duration_since(t0).as_secs_f64();
    let timed_out = || format!("no complete response within {timeout:?}");

    let response = match ex.result {
        Ok(r) => r,
        Err(e) => {
            m.error = Some(e);
            return m;
        }
    };
    let mut lease = ex.lease.expect("a response comes with its connection");
    let status = response.status().as_u16();
    let mut body = response.into_body();

    if !response_ok(status) {
        let (end_s, err, complete) =
            http_error(&mut lease, &mut body, status, (deadline, timeout)).await;
        m.end_s = Some(since(end_s));
        m.error = Some(err);
        client.pool.release(lease, false, complete).await;
        return m;
    }

    let mut framer = SseFramer::new();
    let mut parser = StreamParser::new(req.api)
        .keeping_text(keep_text)
        .with_markers(req.reasoning_markers);
    let budget = Budget::of(req.api, req.max_tokens);
    let mut bytes_read: u64 = 0;
    let (mut done, mut ended) = (false, false);
    let fail = |kind: ErrorKind, message: String, body_head: Option<String>| {
        Some(error(kind, message, Some(status), body_head))
    };
    while !done && m.error.is_none() {
        let got = read(&mut lease, &mut body, deadline).await;
        // Stamp before anything else touches the bytes: when they reached this host, where
        // the kernel said, and never before the request was written.
        let arrived = arrival(&mut lease, t0, &mut m);
        match got {
            Read::TimedOut => m.error = fail(ErrorKind::Timeout, timed_out(), None),
            Read::Failed(e) => {
                let message = format!("connection broke mid-stream: {}", describe(&e));
                m.error = fail(ErrorKind::Reset, message, None);
            }
            Read::Data(bytes) => {
                bytes_read = bytes_read.saturating_add(bytes.len() as u64);
                if bytes_read > budget.bytes {
                    m.end_s = Some(since(arrived));
                    let message = format!(
                        "the stream passed its budget of {} bytes (16 MiB + 8 KiB per max_tokens{}): servebench stopped reading it",
                        budget.bytes,
                        if req.api == Api::SglangGenerate {
                            " + 64 B per max_tokens squared"
                        } else {
                            ""
                        }
                    );
                    m.error = fail(ErrorKind::StreamBudget, message, None);
                    break;
                }
                let read = Arrived {
                    bytes: &bytes,
                    at: arrived,
                    t0,
                };
                done = take_read(
                    &mut m,
                    &mut framer,
                    &mut parser,
                    read,
                    status,
                    budget.chunks,
                );
            }
            Read::End => {
                ended = true;
                let at = (t0, arrived);
                done = body_ended(&mut m, &mut framer, &mut parser, req, at, status);
                break;
            }
        }
    }
    if done {
        // Let the body finish so the connection can serve again; nothing after `[DONE]` is
        // measured.
        if !ended {
            let until = deadline.min(Instant::now() + DRAIN_LIMIT);
            ended = drain(&mut lease, &mut body, until).await;
        }
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
    if let Some(tools) = &req.tools
        && m.error.is_none()
    {
        m.tool_calls = Some(parser.tool_calls.judge(tools));
    }
    // A connection is only reused at a message boundary; anything else is closed (and
    // replaced).
    client.pool.release(lease, true, ended).await;
    m
}

/// The body ended (`at`: the request's last write, and the end's arrival) without `[DONE]`.
/// A last event missing only its blank line is still taken; anything else means the stream
/// was cut short, recorded in `m`. Whether the stream is done.
fn body_ended(
    m: &mut Measured,
    framer: &mut SseFramer,
    parser: &mut StreamParser,
    req: &GenerationRequest,
    (t0, arrived): (Instant, Instant),
    status: u16,
) -> bool {
    let mut done = false;
    let mut truncated = None;
    match framer.finish() {
        Ok(Some(event)) => {
            let data = event.data.clone();
            let mut probe = StreamParser::new(req.api).with_markers(req.reasoning_markers);
            if probe.event(&data).is_ok() {
                let kept = Budget::of(req.api, req.max_tokens).chunks;
                done = take_event(m, parser, event, t0, status, kept);
            } else {
                truncated = Some(head(&data));
            }
        }
        Ok(None) => {}
        Err(bad) => truncated = Some(bad.head),
    }
    if m.error.is_none() {
        m.end_s = Some(arrived.saturating_duration_since(t0).as_secs_f64());
        if !done {
            let message = match truncated {
                Some(_) => "stream ended in the middle of an event".to_string(),
                None => "stream ended without [DONE]".to_string(),
            };
            m.error = Some(error(
                ErrorKind::Incomplete,
                message,
                Some(status),
                truncated,
            ));
        }
    }
    done
}

/// Reads what is left of a body until `until`; whether it ended (the connection is then
/// reusable).
async fn drain(
    lease: &mut super::pool::Lease,
    body: &mut hyper::body::Incoming,
    until: Instant,
) -> bool {
    loop {
        match read(lease, body, until).await {
            Read::Data(_) => {}
            Read::End => return true,
            Read::Failed(_) | Read::TimedOut => return false,
        }
    }
}

fn response_ok(status: u16) -> bool {
    (200..300).contains(&status)
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
    let kept = Budget::of(api, u32::MAX).chunks;
    for bytes in reads {
        if done || m.error.is_some() {
            break;
        }
        let read = Arrived {
            bytes,
            at: Instant::now(),
            t0,
        };
        done = take_read(&mut m, &mut framer, &mut parser, read, status, kept);
    }
    settle(&mut m, &mut parser);
    m
}

/// One network read's bytes, when they arrived, and the request's send (`t0`).
struct Arrived<'b> {
    bytes: &'b [u8],
    at: Instant,
    t0: Instant,
}

/// One network read: frames it and applies every completed event, stopping at `[DONE]`
/// (returns true) or the first error (recorded in `m`); `kept` chunks are kept one by one.
/// Shared by [`run`] and [`replay`], so the hot-path bench measures exactly this code.
fn take_read(
    m: &mut Measured,
    framer: &mut SseFramer,
    parser: &mut StreamParser,
    read: Arrived<'_>,
    status: u16,
    kept: usize,
) -> bool {
    let Arrived {
        bytes,
        at: arrived,
        t0,
    } = read;
    match framer.feed(bytes, arrived) {
        Ok(events) => {
            for event in events {
                if take_event(m, parser, event, t0, status, kept) {
                    return true;
                }
                if m.error.is_some() {
                    break;
                }
            }
        }
        Err(bad) => {
            m.end_s = Some(arrived.saturating_duration_since(t0).as_secs_f64());
            m.error = Some(error(
                ErrorKind::Malformed,
                bad.message(),
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
    m.server_ttft_s = parser.server_ttft_s;
    m.spec_verify_ct = parser.spec_verify_ct;
    // Before the finish reason is taken: it says why an unanswered request stopped.
    m.no_answer = if m.error.is_none() {
        parser.no_answer()
    } else {
        None
    };
    // Before the finish reason is taken too: a stopped request's end-of-sequence token is
    // the answer's.
    m.reasoning = parser.reasoning_tokens();
    m.finish_reason = parser.finish_reason.take();
    m.token_source = parser.token_source();
    m.chunk_tokens = parser.chunk_tokens();
    m.completion_tokens = Some(parser.completion_tokens());
    m.text = std::mem::take(&mut parser.text);
    m.text_cut = parser.text_cut;
    m.unknown_fields = std::mem::take(&mut parser.unknown_fields);
}

/// Keeps chunk `c` in `m`, one by one within `kept` chunks. Past them it is counted in
/// `m.chunks_folded` and folded into the last chunk (its tokens added, its time the latest;
/// an empty one adds nothing), except that a chunk bringing tokens after an empty last chunk,
/// or the first answer token after a last chunk without, starts a new last chunk (at most
/// [`BUDGET_EXTRA_CHUNKS`] of them): TTFT and TTFA keep their times.
fn keep(m: &mut Measured, c: Chunk, kept: usize) {
    let n = m.chunks.len();
    let Some(last) = m.chunks.last().filter(|_| n >= kept) else {
        m.chunks.push(c);
        return;
    };
    m.chunks_folded += 1;
    if c.tokens == 0 {
        return;
    }
    let first_of_kind = last.tokens == 0 || (c.answer() > 0 && last.answer() == 0);
    if first_of_kind && n < kept + BUDGET_EXTRA_CHUNKS {
        m.chunks.push(c);
        return;
    }
    if let Some(last) = m.chunks.last_mut() {
        last.t_s = c.t_s;
        last.tokens = last.tokens.saturating_add(c.tokens);
        last.reasoning = last.reasoning.saturating_add(c.reasoning);
    }
}

/// Applies one event; returns true at `[DONE]`. Errors are recorded in `m`; `kept` chunks are
/// kept one by one (see [`keep`]).
fn take_event(
    m: &mut Measured,
    parser: &mut StreamParser,
    event: SseEvent,
    t0: Instant,
    status: u16,
    kept: usize,
) -> bool {
    let t_s = event.arrived.saturating_duration_since(t0).as_secs_f64();
    match parser.event(&event.data) {
        Ok(Parsed::Done) => {
            m.end_s = Some(t_s);
            true
        }
        Ok(Parsed::Chunk { tokens, reasoning }) => {
            let c = Chunk {
                t_s,
                tokens,
                reasoning,
            };
            keep(m, c, kept);
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

/// Seconds since the Unix epoch (send times and point spans in records).
pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Measured {
    /// Before the request is sent: nothing measured, counts unknown.
    pub(crate) fn nothing_yet() -> Measured {
        Measured {
            sent_at: 0.0,
            scheduled_at: None,
            write_s: None,
            connect_s: None,
            connection: None,
            first_attempt: None,
            chunks: Vec::new(),
            chunks_folded: 0,
            end_s: None,
            prompt_tokens: None,
            completion_tokens: None,
            cached_tokens: None,
            server_ttft_s: None,
            spec_verify_ct: None,
            token_source: TokenSource::ChunkCount,
            chunk_tokens: ChunkTokens::Exact,
            finish_reason: None,
            error: None,
            text: String::new(),
            text_cut: false,
            read_wait_max_s: None,
            request_id: None,
            reasoning: None,
            no_answer: None,
            unknown_fields: Vec::new(),
            tool_calls: None,
        }
    }
}
