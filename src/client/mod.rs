//! The streaming HTTP client: one request in, one [`Measured`] out, with every chunk's arrival
//! time taken as its bytes come off the network (before parsing), counted from when the
//! request's last byte was written to its connection.
//!
//! Three APIs: SGLang's native `/generate`, OpenAI `/v1/completions` and `/v1/chat/completions`.
//! Failures never surface as `Err` from [`Client::stream`]: they are recorded in
//! [`Measured::error`] together with whatever arrived before them.
//!
//! The transport is hyper's low-level HTTP/1.1 client over connections the client opens and
//! keeps itself (`pool`): connect times are measured apart from TTFT, a point opens the
//! connections it needs before its clock starts ([`Client::prepare`]), a server that closes
//! connections after each stream gets a fresh one per request, and a request that meets a
//! stale connection is sent again once (see `pool` for the rules).

mod body;
mod conn;
#[cfg(target_os = "linux")]
mod kernel_stamp;
mod parse;
mod pool;
pub(crate) mod prometheus;
mod request;
mod sse;
mod stream;
pub(crate) mod surface;
mod thinking;
mod tool_calls;
mod url_check;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::{self, HeaderValue};
use thiserror::Error;

use servebench_model::results::records::{
    Chunk, ChunkTokens, ConnectionUse, ErrorKind, NoAnswer, ReasoningSource, RequestError,
    RequestRecord, RequestRole, TokenSource,
};
use servebench_model::spec::types::Api;

pub use request::{ChatMessage, DEFAULT_MODEL, GenerationRequest};
pub use sse::{EVENT_BYTES_LIMIT, HEAD_BYTES, SseEvent, SseFramer, SseMalformed, SseProblem};
pub use stream::replay_stream;
pub(crate) use stream::unix_now;
pub use tool_calls::Judged as ToolCallsJudged;
pub(crate) use url_check::UrlCheck;

/// Per-request limit of the admin helpers (`flush_cache`, `health`, `get_json`).
pub(crate) const ADMIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Largest body the admin helpers read (`/server_info` and the like are a few kB).
pub(crate) const ADMIN_BODY_LIMIT: usize = 16 << 20;

/// The raw outcome of one request: everything a [`RequestRecord`] needs except where it belongs
/// (point, round, index, role) and what was asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Unix time (seconds) when the write of the request's last byte began; when
    /// nothing was written (no connection), when the request gave up. See
    /// [`RequestRecord::sent_at`].
    pub sent_at: f64,
    /// Unix time (seconds) when [`Client::stream`] was called: the request's intended send time.
    pub scheduled_at: Option<f64>,
    /// Seconds from the start of the request's first write to the end of its last.
    pub write_s: Option<f64>,
    /// Seconds the TCP connect took, when the connection was opened for this request.
    pub connect_s: Option<f64>,
    /// How the connection came to be (None when there was none).
    pub connection: Option<ConnectionUse>,
    /// The first attempt's failure (a stale connection) when the request was sent again.
    pub first_attempt: Option<RequestError>,
    /// Every data chunk that arrived, in order, `[DONE]` and error events excluded. `t_s` is
    /// seconds from `sent_at` to the network read that completed the event.
    pub chunks: Vec<Chunk>,
    /// Events past the stream's chunk budget, folded into its last chunks (0: none).
    pub chunks_folded: u64,
    /// Seconds from send to the end of the response (`[DONE]`, the end of an error body, or the
    /// failing event). None when it never ended (connect failure, reset, timeout).
    pub end_s: Option<f64>,
    /// Prompt tokens as counted by the server.
    pub prompt_tokens: Option<u64>,
    /// Output tokens: the server's count when it gave one, else the sum of per-chunk counts.
    pub completion_tokens: Option<u64>,
    /// Prompt tokens served from the prefix cache; None when the server did not say.
    pub cached_tokens: Option<u64>,
    /// The server's own time to the first token, where it reports one.
    pub server_ttft_s: Option<f64>,
    /// Speculative verify steps the server counted for the request (SGLang
    /// `meta_info.spec_verify_ct`), where it says.
    pub spec_verify_ct: Option<u64>,
    /// Where the token counts came from.
    pub token_source: TokenSource,
    /// Whether every chunk's count was the server's.
    pub chunk_tokens: ChunkTokens,
    /// `stop`, `length`, `abort`, ...
    pub finish_reason: Option<String>,
    /// Why the request failed, if it did.
    pub error: Option<RequestError>,
    /// The generated text (the answer on chat streams; the raw text, thinking included, on
    /// the others), at most `client::parse::TEXT_KEPT_BYTES` of it; not stored in records.
    pub text: String,
    /// The text passed that bound and `text` holds its start only.
    pub text_cut: bool,
    /// Thinking tokens and where the count came from; None when no thinking was seen.
    pub reasoning: Option<(u64, ReasoningSource)>,
    /// Why a request that thought never answered (None for failed requests).
    pub no_answer: Option<NoAnswer>,
    /// Delta fields servebench does not know, seen with a value.
    pub unknown_fields: Vec<String>,
    /// Tool calls streamed, whether they were all valid and why not (None: no tools sent).
    pub tool_calls: Option<ToolCallsJudged>,
    /// The longest any read's bytes had waited in this host's kernel when the client read
    /// them (its own queue, outside every time above), where the kernel stamps arrivals.
    pub read_wait_max_s: Option<f64>,
    /// The `x-request-id` it was sent with.
    pub request_id: Option<String>,
}

impl Measured {
    /// Completes the record with where the request belongs and what was asked.
    #[allow(clippy::too_many_arguments)]
    pub fn into_record(
        self,
        point: &str,
        round: u32,
        index: u32,
        role: RequestRole,
        api: Api,
        max_tokens: u32,
        requested_prompt_tokens: Option<u64>,
    ) -> RequestRecord {
        let server_steps = self.spec_verify_ct;
        let mut record = RequestRecord {
            point: point.to_string(),
            round,
            index,
            role,
            api,
            sent_at: self.sent_at,
            scheduled_at: self.scheduled_at,
            write_s: self.write_s,
            read_wait_s: self.read_wait_max_s,
            connect_s: self.connect_s,
            connection: self.connection,
            retried: self.first_attempt.is_some(),
            first_attempt: self.first_attempt,
            requested_prompt_tokens,
            max_tokens,
            chunks: self.chunks,
            chunks_folded: (self.chunks_folded > 0).then_some(self.chunks_folded),
            end_s: self.end_s,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens,
            server_ttft_s: self.server_ttft_s,
            token_source: self.token_source,
            chunk_tokens: Some(self.chunk_tokens),
            finish_reason: self.finish_reason,
            error: self.error,
            share: None,
            theoretical_cached_tokens: None,
            reachable_cached_tokens: None,
            job: None,
            session_id: None,
            parent_session_id: None,
            mix: None,
            phase: None,
            lag_s: None,
            verify_steps: None,
            verify_steps_source: None,
            accept_length: None,
            request_id: self.request_id,
            worker: None,
            prefill_worker: None,
            rerouted_from: Vec::new(),
            reasoning_tokens: self.reasoning.map(|(n, _)| n),
            reasoning_source: self.reasoning.map(|(_, s)| s),
            no_answer: self.no_answer,
            ttfa_s: None,
            answer_tokens: None,
            unknown_fields: self.unknown_fields,
            tool_calls: self.tool_calls.as_ref().map(|t| t.count),
            tool_call_valid: self.tool_calls.as_ref().and_then(|t| t.valid),
            tool_call_invalid: self.tool_calls.and_then(|t| t.invalid),
            captured: None,
        };
        record.set_verify_steps(server_steps);
        record.set_split();
        record
    }
}

/// Outcome of `/flush_cache`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlushOutcome {
    /// The cache was flushed.
    Flushed,
    /// Requests were running or queued, so nothing was flushed (HTTP 400); retry later. Holds the
    /// server's text.
    Busy(String),
}

/// Failures of the client's helpers (streams record theirs in [`Measured::error`]).
#[derive(Debug, Error)]
pub enum ClientError {
    /// The base URL does not parse or is not `http://`.
    #[error("invalid server URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The client could not be set up (an API key that is not a valid header value).
    #[error("could not build the HTTP client: {0}")]
    Build(String),
    /// Connecting, sending or reading failed (or a calibration stream recorded an error).
    #[error("{path}: request failed: {message}")]
    Request { path: String, message: String },
    /// The server answered with an unexpected status; `message` is its own, when it sent one.
    #[error("{path}: HTTP {status}: {message}")]
    Status {
        path: String,
        status: u16,
        message: String,
    },
    /// A JSON endpoint answered something else.
    #[error("{path}: response is not valid JSON: {message}")]
    Json { path: String, message: String },
    /// A calibration response carried no `prompt_tokens`.
    #[error("{path}: the server did not report prompt_tokens")]
    NoPromptTokens { path: String },
}

/// A client of one inference server. Cheap to clone; clones share the connections.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    pool: Arc<pool::Pool>,
}

struct Shared {
    /// `http://host:port[/prefix]` without a trailing slash.
    base_url: String,
    /// The path prefix of the base URL (`""` or `/prefix`).
    prefix: String,
    /// `host[:port]` as the URL gives it, for the `Host` header.
    host: HeaderValue,
    /// `Authorization: Bearer ...`, marked sensitive; never printed.
    authorization: Option<HeaderValue>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.shared.base_url)
            .field(
                "api_key",
                &self.shared.authorization.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Whether the server closes a connection after a streamed response, as the client learned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerConnections {
    /// Not seen yet.
    Unknown,
    /// It keeps connections open: the client reuses them.
    KeptOpen,
    /// It closes them after each stream (llama.cpp's server does, while advertising
    /// keep-alive): every streamed request gets a fresh connection, opened ahead.
    ClosedAfterStream,
}

impl Client {
    /// The same server and key over connections of its own, so a side channel (the
    /// `/metrics` scraper) never takes a connection a measured request was given.
    pub(crate) fn with_own_connections(&self) -> Client {
        Client {
            shared: self.shared.clone(),
            pool: Arc::new(pool::Pool::new(self.pool.authority().to_string())),
        }
    }

    /// A client for the server at `base_url` (`http://host:port`, optionally with a path prefix).
    /// Only `http` is supported: servebench is built without TLS. Connects nothing yet.
    pub fn new(base_url: &str, api_key: Option<String>) -> Result<Client, ClientError> {
        let invalid = |reason: String| ClientError::InvalidUrl {
            url: base_url.into(),
            reason,
        };
        let uri: hyper::Uri = base_url.parse().map_err(|e| invalid(format!("{e}")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(invalid(format!(
                    "scheme `{other}` is not supported; use http:// (servebench is built without TLS)"
                )));
            }
            None => {
                return Err(invalid(
                    "not an absolute URL; write http://host:port".into(),
                ));
            }
        }
        let authority = uri.authority().ok_or_else(|| invalid("no host".into()))?;
        if authority.as_str().contains('@') {
            return Err(invalid(
                "user names and passwords in the URL are not supported".into(),
            ));
        }
        let port = authority.port_u16().unwrap_or(80);
        let host =
            HeaderValue::from_str(authority.as_str()).map_err(|e| invalid(format!("host: {e}")))?;
        let authorization = match api_key {
            Some(key) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    ClientError::Build("the API key is not a valid HTTP header value".into())
                })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        Ok(Client {
            shared: Arc::new(Shared {
                base_url: base_url.trim_end_matches('/').to_string(),
                prefix: uri.path().trim_end_matches('/').to_string(),
                host,
                authorization,
            }),
            pool: Arc::new(pool::Pool::new(format!("{}:{port}", authority.host()))),
        })
    }

    /// Opens connections until `n` are ready for the requests to come, and keeps that many
    /// ready from then on: called before a point's clock starts, so that no measured request
    /// waits for a handshake (or for the others' handshakes). Idle connections the server
    /// closed meanwhile are dropped, and any beyond `n` are closed. A connect failure is
    /// returned, but the connections that could be opened stay ready; the requests record
    /// their own failures.
    pub async fn prepare(&self, n: usize) -> Result<(), ClientError> {
        self.pool
            .prepare(n)
            .await
            .map_err(|f| ClientError::Request {
                path: "(connect)".into(),
                message: f.message,
            })
    }

    /// What the client learned about the server's connections after streamed responses.
    pub fn server_connections(&self) -> ServerConnections {
        match self.pool.after_stream() {
            pool::AfterStream::Unknown { .. } => ServerConnections::Unknown,
            pool::AfterStream::KeepsOpen => ServerConnections::KeptOpen,
            pool::AfterStream::Closes => ServerConnections::ClosedAfterStream,
        }
    }

    /// Requests (streams and admin calls alike) sent again after a stale connection so far.
    pub fn stale_retries(&self) -> u64 {
        self.pool.stale_retries()
    }

    /// Sends `prompt` with one output token and returns the server's `prompt_tokens` and
    /// `cached_tokens` (for calibrating prompt lengths).
    pub async fn count_prompt_tokens(
        &self,
        api: Api,
        prompt: &str,
        model: Option<&str>,
        timeout: Duration,
    ) -> Result<(u64, Option<u64>), ClientError> {
        let req = GenerationRequest {
            api,
            prompt: prompt.to_string(),
            max_tokens: 1,
            ignore_eos: true,
            temperature: 0.0,
            model: model.map(str::to_string),
            history: Vec::new(),
            prompt_role: "user",
            messages: None,
            spec_tokens_details: false,
            reasoning_markers: None,
            chat_template_kwargs: Default::default(),
            tools: None,
            tool_choice: None,
            headers: Vec::new(),
        };
        let m = self.stream(&req, timeout).await;
        let path = request::path(api).to_string();
        if let Some(e) = m.error {
            return Err(match e.status {
                Some(status) if e.kind == ErrorKind::Http => ClientError::Status {
                    path,
                    status,
                    message: e.message,
                },
                _ => ClientError::Request {
                    path,
                    message: e.message,
                },
            });
        }
        match m.prompt_tokens {
            Some(n) => Ok((n, m.cached_tokens)),
            None => Err(ClientError::NoPromptTokens { path }),
        }
    }

    /// Flushes the server's prefix cache (`POST /flush_cache`). SGLang answers 400 without
    /// flushing while requests are running: that is [`FlushOutcome::Busy`], not an error.
    pub async fn flush_cache(&self) -> Result<FlushOutcome, ClientError> {
        let (status, body) = self.admin(hyper::Method::POST, "/flush_cache").await?;
        let text = String::from_utf8_lossy(&body).trim().to_string();
        match status {
            200..=299 => Ok(FlushOutcome::Flushed),
            400 => Ok(FlushOutcome::Busy(text)),
            _ => Err(ClientError::Status {
                path: "/flush_cache".into(),
                status,
                message: parse::http_error_message(&body),
            }),
        }
    }

    /// `GET /health`: the HTTP status (200 ready, 503 starting or stopping).
    pub async fn health(&self) -> Result<u16, ClientError> {
        Ok(self.admin(hyper::Method::GET, "/health").await?.0)
    }

    /// `GET path` (e.g. `/server_info`) as JSON; non-2xx is an error.
    pub async fn get_json(&self, path: &str) -> Result<serde_json::Value, ClientError> {
        let (status, body) = self.admin(hyper::Method::GET, path).await?;
        if !(200..300).contains(&status) {
            let message = parse::http_error_message(&body);
            return Err(ClientError::Status {
                path: path.into(),
                status,
                message,
            });
        }
        serde_json::from_slice(&body).map_err(|e| ClientError::Json {
            path: path.into(),
            message: e.to_string(),
        })
    }

    /// A small non-streaming request with an optional JSON body (`method` is `GET` or
    /// `POST`): status and whole body (at most [`ADMIN_BODY_LIMIT`]), bounded by `timeout`.
    /// Sent again once after a stale connection, like every request.
    pub(crate) async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
        timeout: Duration,
    ) -> Result<(u16, Bytes), ClientError> {
        let method = if method == "POST" {
            hyper::Method::POST
        } else {
            hyper::Method::GET
        };
        let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
        self.send_small(method, path, body, timeout, ADMIN_BODY_LIMIT, &[])
            .await
    }

    /// `GET path` like [`call`](Self::call), failing once the body passes `limit` bytes
    /// (a `/metrics` scrape's budget).
    pub(crate) async fn get_bounded(
        &self,
        path: &str,
        timeout: Duration,
        limit: usize,
    ) -> Result<(u16, Bytes), ClientError> {
        self.send_small(hyper::Method::GET, path, Bytes::new(), timeout, limit, &[])
            .await
    }

    /// A small non-streaming request of any method with `headers` (a `Content-Type` among
    /// them replaces the JSON one a body gets): status and whole body (at most
    /// [`ADMIN_BODY_LIMIT`]), bounded by `timeout`. A tracking server's API (`mlflow`).
    pub(crate) async fn send(
        &self,
        method: hyper::Method,
        path: &str,
        body: Bytes,
        headers: &[(hyper::header::HeaderName, HeaderValue)],
        timeout: Duration,
    ) -> Result<(u16, Bytes), ClientError> {
        self.send_small(method, path, body, timeout, ADMIN_BODY_LIMIT, headers)
            .await
    }

    /// A small non-streaming request without a body, bounded by [`ADMIN_TIMEOUT`].
    async fn admin(&self, method: hyper::Method, path: &str) -> Result<(u16, Bytes), ClientError> {
        self.send_small(
            method,
            path,
            Bytes::new(),
            ADMIN_TIMEOUT,
            ADMIN_BODY_LIMIT,
            &[],
        )
        .await
    }

    async fn send_small(
        &self,
        method: hyper::Method,
        path: &str,
        request_body: Bytes,
        timeout: Duration,
        limit: usize,
        headers: &[(hyper::header::HeaderName, HeaderValue)],
    ) -> Result<(u16, Bytes), ClientError> {
        let failed = |message: String| ClientError::Request {
            path: path.into(),
            message,
        };
        let deadline = Instant::now() + timeout;
        let ex = self
            .exchange(
                method,
                path,
                request_body,
                false,
                deadline,
                timeout,
                None,
                headers,
            )
            .await;
        let response = ex.result.map_err(|e| failed(e.message))?;
        let mut lease = ex.lease.expect("a response comes with its connection");
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        loop {
            match body::read(&mut lease, &mut body, deadline).await {
                body::Read::Data(b) => {
                    if bytes.len() + b.len() > limit {
                        return Err(failed(format!(
                            "the response body is larger than {limit} bytes"
                        )));
                    }
                    bytes.extend_from_slice(&b);
                }
                body::Read::End => break,
                body::Read::Failed(e) => return Err(failed(conn::describe(&e))),
                body::Read::TimedOut => {
                    return Err(failed(format!(
                        "no complete response within {}",
                        servebench_model::text::duration(timeout.as_secs_f64())
                    )));
                }
            }
        }
        self.pool.release(lease, false, true).await;
        Ok((status, Bytes::from(bytes)))
    }

    /// Sends a request to `path` (with the API key, if any, and `x-request-id` when given)
    /// and waits for its head.
    #[allow(clippy::too_many_arguments)]
    async fn exchange(
        &self,
        method: hyper::Method,
        path: &str,
        body: Bytes,
        streaming: bool,
        deadline: Instant,
        timeout: Duration,
        request_id: Option<&str>,
        extra: &[(hyper::header::HeaderName, HeaderValue)],
    ) -> pool::Exchange {
        let uri = format!("{}{path}", self.shared.prefix);
        let request_id = request_id.and_then(|id| HeaderValue::from_str(id).ok());
        let build = || {
            let mut b = hyper::Request::builder()
                .method(method.clone())
                .uri(uri.as_str())
                .header(header::HOST, self.shared.host.clone())
                .header(
                    header::USER_AGENT,
                    concat!("servebench/", env!("CARGO_PKG_VERSION")),
                );
            if !body.is_empty() && !extra.iter().any(|(n, _)| n == header::CONTENT_TYPE) {
                b = b.header(header::CONTENT_TYPE, "application/json");
            }
            if streaming {
                b = b.header(header::ACCEPT, "text/event-stream");
            }
            if let Some(auth) = &self.shared.authorization {
                b = b.header(header::AUTHORIZATION, auth.clone());
            }
            if let Some(id) = &request_id {
                b = b.header("x-request-id", id.clone());
            }
            for (name, value) in extra {
                b = b.header(name, value.clone());
            }
            b.body(http_body_util::Full::new(body.clone()))
                .expect("method, path and headers were checked when the client was made")
        };
        self.pool.exchange(build, deadline, timeout).await
    }
}

/// Raises this process's soft limit on open files to its hard limit, once: an open-loop point
/// at `rate: inf` holds one connection per request in flight (10,000 streams need 10,000
/// descriptors), and many systems start processes at a soft limit of 1,024. Returns the soft
/// limit now in force (None when it cannot be read); a failure to raise it is left to show as
/// connect errors naming the limit.
pub(crate) fn raise_open_file_limit() -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Some(hard);
    }
    Some(soft)
}
