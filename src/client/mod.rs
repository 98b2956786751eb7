//! The streaming HTTP client: one request in, one [`Measured`] out, with every chunk's arrival
//! time taken as its bytes come off the network (before parsing).
//!
//! Three APIs: SGLang's native `/generate`, OpenAI `/v1/completions` and `/v1/chat/completions`.
//! Failures never surface as `Err` from [`Client::stream`]: they are recorded in
//! [`Measured::error`] together with whatever arrived before them.

mod parse;
mod request;
mod sse;
mod stream;
pub mod surface;

use std::fmt;
use std::time::Duration;

use thiserror::Error;

use crate::results::records::{Chunk, RequestError, RequestRecord, RequestRole, TokenSource};
use crate::spec::types::Api;

pub use request::{DEFAULT_MODEL, GenerationRequest};
pub use sse::{HEAD_BYTES, SseEvent, SseFramer, SseMalformed};
pub(crate) use stream::unix_now;

/// How long establishing a TCP connection may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Per-request limit of the admin helpers (`flush_cache`, `health`, `get_json`).
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The raw outcome of one request: everything a [`RequestRecord`] needs except where it belongs
/// (point, round, index, role) and what was asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Unix time (seconds) taken just before the request was sent.
    pub sent_at: f64,
    /// Every data chunk that arrived, in order, `[DONE]` and error events excluded. `t_s` is
    /// seconds from send to the network read that completed the event.
    pub chunks: Vec<Chunk>,
    /// Seconds from send to the end of the response (`[DONE]`, the end of an error body, or the
    /// failing event). None when it never ended (connect failure, reset, timeout).
    pub end_s: Option<f64>,
    /// Prompt tokens as counted by the server.
    pub prompt_tokens: Option<u64>,
    /// Output tokens: the server's count when it gave one, else the sum of per-chunk counts.
    pub completion_tokens: Option<u64>,
    /// Prompt tokens served from the prefix cache; None when the server did not say.
    pub cached_tokens: Option<u64>,
    /// Where the token counts came from.
    pub token_source: TokenSource,
    /// `stop`, `length`, `abort`, ...
    pub finish_reason: Option<String>,
    /// Why the request failed, if it did.
    pub error: Option<RequestError>,
    /// The generated text, for debugging; not stored in records.
    pub text: String,
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
        RequestRecord {
            point: point.to_string(),
            round,
            index,
            role,
            api,
            sent_at: self.sent_at,
            requested_prompt_tokens,
            max_tokens,
            chunks: self.chunks,
            end_s: self.end_s,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_tokens: self.cached_tokens,
            token_source: self.token_source,
            finish_reason: self.finish_reason,
            error: self.error,
        }
    }
}

/// Frames and parses an already received streaming body, given as the network reads that
/// delivered it, with the same framer, parser and per-event bookkeeping as [`Client::stream`]
/// (each read stamped with `Instant::now()`; stops at `[DONE]` or the first error). Used by the
/// hot-path bench (`benches/client_hot_path.rs`); measurements always go through
/// [`Client::stream`].
pub fn replay_stream<'a>(api: Api, reads: impl IntoIterator<Item = &'a [u8]>) -> Measured {
    stream::replay(api, reads)
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
    /// reqwest refused the client configuration.
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

/// A client of one inference server. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// `http://host:port` without a trailing slash.
    base_url: String,
    /// Sent as `Authorization: Bearer`; never printed.
    api_key: Option<String>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Client {
    /// A client for the server at `base_url` (`http://host:port`, optionally with a path prefix).
    /// Only `http` is supported: servebench is built without TLS.
    pub fn new(base_url: &str, api_key: Option<String>) -> Result<Client, ClientError> {
        let invalid = |reason: String| ClientError::InvalidUrl {
            url: base_url.into(),
            reason,
        };
        let url = reqwest::Url::parse(base_url).map_err(|e| invalid(e.to_string()))?;
        if url.scheme() != "http" {
            return Err(invalid(format!(
                "scheme `{}` is not supported; use http:// (servebench is built without TLS)",
                url.scheme()
            )));
        }
        let http = reqwest::Client::builder()
            .http1_only()
            // A benchmark must hit the server directly, whatever HTTP_PROXY says.
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT)
            // Thousands of concurrent streams each hold a connection; keep them all for reuse.
            .pool_max_idle_per_host(usize::MAX)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| ClientError::Build(e.to_string()))?;
        Ok(Client {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
        })
    }

    /// The server's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Sends one streaming request and measures it. Never fails: errors (HTTP, stream errors,
    /// malformed events, connect failures, resets, `timeout` passing) are recorded in
    /// [`Measured::error`] next to the chunks that arrived before them.
    pub async fn stream(&self, req: &GenerationRequest, timeout: Duration) -> Measured {
        stream::run(self, req, timeout).await
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
        };
        let m = self.stream(&req, timeout).await;
        let path = request::path(api).to_string();
        if let Some(e) = m.error {
            return Err(match e.status {
                Some(status) if e.kind == crate::results::records::ErrorKind::Http => {
                    ClientError::Status {
                        path,
                        status,
                        message: e.message,
                    }
                }
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
        let (status, body) = self.admin(reqwest::Method::POST, "/flush_cache").await?;
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
        Ok(self.admin(reqwest::Method::GET, "/health").await?.0)
    }

    /// `GET path` (e.g. `/server_info`) as JSON; non-2xx is an error.
    pub async fn get_json(&self, path: &str) -> Result<serde_json::Value, ClientError> {
        let (status, body) = self.admin(reqwest::Method::GET, path).await?;
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
    /// `POST`): status and whole body, bounded by `timeout`.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
        timeout: Duration,
    ) -> Result<(u16, bytes::Bytes), ClientError> {
        let failed = |e: reqwest::Error| ClientError::Request {
            path: path.into(),
            message: stream::describe(&e),
        };
        let method = if method == "POST" {
            reqwest::Method::POST
        } else {
            reqwest::Method::GET
        };
        let mut req = self.request(method, path).timeout(timeout);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let response = req.send().await.map_err(failed)?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(failed)?;
        Ok((status, body))
    }

    /// A small non-streaming request: status and whole body.
    async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<(u16, bytes::Bytes), ClientError> {
        let failed = |e: reqwest::Error| ClientError::Request {
            path: path.into(),
            message: stream::describe(&e),
        };
        let response = self
            .request(method, path)
            .timeout(ADMIN_TIMEOUT)
            .send()
            .await
            .map_err(failed)?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(failed)?;
        Ok((status, body))
    }

    /// A request to `path` with the API key, if any.
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self
            .http
            .request(method, format!("{}{}", self.base_url, path));
        match &self.api_key {
            // `bearer_auth` marks the header sensitive, so it is redacted from debug output.
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }
}
