//! The records of a run directory. `requests.jsonl` holds the raw truth; everything else is
//! derived from it.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::catalog::FlagKind;
use crate::spec::types::Api;

/// What a request was for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum RequestRole {
    /// A measured sample.
    Measure,
    /// Sent to prime the prefix cache (warm policy); not measured.
    Prime,
    /// Two-point method: the first request of a pair (`max_tokens` a).
    TwoPointA,
    /// Two-point method: the second request of a pair (`max_tokens` b), same prompt.
    TwoPointB,
    /// `validity:`: a known-answer canary, sent before the point's first round; not measured.
    Canary,
    /// `validity:`: the consistency prompt, alone before the first round or beside its
    /// measured load; not measured.
    Consistency,
}

impl RequestRole {
    /// True for the requests a point's numbers come from.
    pub fn is_measured(self) -> bool {
        !matches!(
            self,
            RequestRole::Prime | RequestRole::Canary | RequestRole::Consistency
        )
    }
}

/// Where a request of a `load:` point falls: only `measure` requests are counted.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Phase {
    /// Before the measured phase: it brings the server to a steady state.
    Warmup,
    /// Counted.
    #[default]
    Measure,
    /// After the measured phase: it keeps the load on while measured requests finish.
    Cooldown,
}

/// One chunk of a streamed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk {
    /// Seconds from send to the arrival of the network read that completed the chunk's SSE event
    /// (its final byte: the first moment the client could act on it), taken before parsing.
    pub t_s: f64,
    /// New output tokens this chunk carried (0 for role-only or empty chunks).
    pub tokens: u32,
    /// How many of `tokens` were thinking (reasoning) tokens; the rest were answer or
    /// tool-call tokens. 0 (and left out of the file) for a chunk without thinking.
    #[serde(default, skip_serializing_if = "no_tokens")]
    pub reasoning: u32,
}

fn no_tokens(n: &u32) -> bool {
    *n == 0
}

impl Chunk {
    /// A chunk of `tokens` answer tokens (or none) arriving at `t_s`.
    pub fn new(t_s: f64, tokens: u32) -> Chunk {
        Chunk {
            t_s,
            tokens,
            reasoning: 0,
        }
    }

    /// Answer (or tool-call) tokens: the chunk's tokens that were not thinking.
    pub fn answer(&self) -> u32 {
        self.tokens.saturating_sub(self.reasoning)
    }
}

/// Why a request that thought never answered (it has no time to the first answer token).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum NoAnswer {
    /// It reached `max_tokens` while still thinking (finish reason `length`).
    OutOfTokensWhileThinking,
    /// The server ended it while it was still thinking, for another reason (a stop token or
    /// string inside the thinking, or a parser that never saw the end marker).
    EndedWhileThinking,
}

/// Where a request's reasoning-token count came from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ReasoningSource {
    /// The server's count: `usage.completion_tokens_details.reasoning_tokens` (vLLM, SGLang),
    /// SGLang's `usage.reasoning_tokens` or `meta_info.reasoning_tokens`.
    Server,
    /// The sum of the chunks' thinking tokens, told apart by the stream's fields (chat) or by
    /// the launched reasoning parser's markers (text APIs).
    Chunks,
}

/// Whether each chunk's token count is the server's own.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ChunkTokens {
    /// Every chunk's count came from a cumulative count the server sent with it (SGLang's
    /// `meta_info.completion_tokens`, OpenAI `usage` on every chunk with
    /// `stream_options.continuous_usage_stats`): per-token ITL is exact.
    Exact,
    /// Some chunks carried no count, so each non-empty one was taken as one token: where
    /// chunks hold several tokens (speculative decoding), ITL is a per-chunk gap.
    AssumedOne,
}

/// How the connection a request went out on came to be.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ConnectionUse {
    /// An idle connection an earlier request had used.
    Reused,
    /// Opened ahead of the request (before the point's clock, or to replace a connection the
    /// server closed) and not used before.
    PreOpened,
    /// Opened when the request was due: its connect time passed before `sent_at`.
    Opened,
}

/// Where token counts came from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum TokenSource {
    /// SGLang native `meta_info` (`prompt_tokens`, `completion_tokens`, `cached_tokens`).
    MetaInfo,
    /// OpenAI `usage` (final chunk with `stream_options.include_usage`).
    Usage,
    /// No server counts: one token per non-empty chunk (an estimate).
    ChunkCount,
}

/// Why a request failed.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ErrorKind {
    /// Non-2xx HTTP status (the server's message is kept).
    Http,
    /// An `{"error": ...}` event inside a 200 stream.
    StreamError,
    /// Bytes that are not valid SSE or JSON.
    Malformed,
    /// Could not connect.
    Connect,
    /// The client's side, not the server's: it could not open a connection for lack of its
    /// own resources (no file descriptor left: `EMFILE`, `ENFILE`). The server was never
    /// asked, so this says nothing about it (never read as a server gone); raise `ulimit -n`
    /// or lower `load.max_in_flight`.
    ClientResources,
    /// The server broke the connection after it had started answering (or, on a connection
    /// opened for this request, before it answered at all).
    Reset,
    /// The client's side, not the server's: a connection that had been idle (kept from an
    /// earlier request, or opened ahead) turned out closed by the server when the request was
    /// written, before any response byte came back. The request never reached generation; it
    /// is sent again once on a fresh connection, so this kind shows on a request's
    /// `first_attempt` (its own error, if the second attempt fails too, is that attempt's).
    StaleConnection,
    /// The per-request timeout passed.
    Timeout,
    /// The stream ended without `[DONE]` or a finish reason.
    Incomplete,
    /// The stream brought more bytes than its budget (16 MiB + 8 KiB per `max_tokens`, and on
    /// `/generate` 64 B per `max_tokens` squared): the client stopped reading it.
    StreamBudget,
}

/// A request's failure, with its cause.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestError {
    pub kind: ErrorKind,
    /// Human-readable cause (the server's message when it sent one).
    pub message: String,
    /// HTTP status, when a response arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The first 200 bytes of the offending body or event, for malformed or error responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_head: Option<String>,
}

/// One request as it happened. Appended to `requests.jsonl` and flushed when it completes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The point this request belongs to (`Point::id`).
    pub point: String,
    /// Round (0-based) when `repeat` > 1.
    pub round: u32,
    /// Index of the request within its point and round.
    pub index: u32,
    pub role: RequestRole,
    pub api: Api,
    /// Unix time (seconds) when the write that handed the request's last byte to its connection
    /// began (stamped before the call, so never later than the bytes): TTFT, chunk offsets
    /// and `end_s` count from here, so neither the client's own
    /// queue, body encoding nor a TCP handshake is in them. When no byte was written (connect
    /// failure), the time the request gave up. Older records: taken just before sending.
    pub sent_at: f64,
    /// Unix time (seconds) the runner released the request (its intended send time); `sent_at`
    /// minus this is the client's own delay (a free connection, connecting, encoding). None in
    /// records that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at: Option<f64>,
    /// Seconds from the start of the request's first write to the end of its last (a long
    /// prompt's body takes a while; a client descheduled inside a write shows here); not part
    /// of TTFT. None when nothing was written, and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_s: Option<f64>,
    /// The longest any of the response's bytes waited in this host's kernel before the client
    /// read them: the client's own queue (other streams' events parsed first), outside TTFT and
    /// token times, which take the kernel's arrival stamps. A read returns the stamp of the
    /// newest bytes it took, so events that arrived while the client was this late share it:
    /// a wait longer than the gap between tokens moves the earlier token's time to the later
    /// one's. None where the kernel gives no stamps, when nothing waited, and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_wait_s: Option<f64>,
    /// Seconds the TCP connect of this request's connection took, when it was opened for this
    /// request (pre-opened or opened when due); None when the connection was reused, when no
    /// connection was made, and in older records. Never part of TTFT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_s: Option<f64>,
    /// How the connection the request was sent on came to be (None when no connection was
    /// made, and in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<ConnectionUse>,
    /// True when a first attempt failed on a stale connection and the request was sent again
    /// on a fresh one; every time in the record is the second attempt's. Not an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retried: bool,
    /// The first attempt's failure when `retried` (kind `stale-connection`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_attempt: Option<RequestError>,
    /// Prompt length the spec asked for, in tokens (None for file prompts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_prompt_tokens: Option<u64>,
    /// `max_new_tokens` / `max_tokens` sent.
    pub max_tokens: u32,
    /// Every chunk that arrived, in order (the `[DONE]` sentinel excluded), up to the stream's
    /// chunk budget (4,096 + 4 per `max_tokens`); see `chunks_folded` for the rest.
    pub chunks: Vec<Chunk>,
    /// Events that came past the stream's chunk budget: their tokens were folded into the
    /// last chunks (a new one only where the first token or the first answer token came), so
    /// their gaps are not kept one by one. None when nothing was folded, and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks_folded: Option<u64>,
    /// Seconds from send to the end of the stream (None if it never ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_s: Option<f64>,
    /// Prompt tokens as counted by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Output tokens as counted by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Prompt tokens served from the server's prefix cache. None when the server did not say
    /// (OpenAI APIs without `--enable-cache-report`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Seconds the server itself says it took to the first token, where it reports one
    /// (llama.cpp: `timings.prompt_ms`, its prompt processing; SGLang:
    /// `meta_info.first_token_latency`). A TTFT shorter than this was stamped late by the
    /// client (flagged `ttft-below-server`). None when the server does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_ttft_s: Option<f64>,
    pub token_source: TokenSource,
    /// Whether each chunk's `tokens` is the server's count or one assumed per non-empty chunk.
    /// None in records that predate it: see [`RequestRecord::chunk_tokens`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_tokens: Option<ChunkTokens>,
    /// `stop`, `length`, `abort`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RequestError>,
    /// What this request should find in the prefix cache because of earlier requests of its
    /// group (a shared-prefix group, or a session's earlier turns). None for requests that
    /// share nothing by design.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<CacheShare>,
    /// A request made of a trace's prefix blocks: the tokens its leading blocks already sent
    /// earlier in the round could have served from the prefix cache (compare `cached_tokens`).
    /// None for other requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theoretical_cached_tokens: Option<u64>,
    /// A request made of a trace's blocks: the most it could have found from the round's
    /// own prompts, counting the blocks of requests made after it and sent before its first
    /// token (the server may have served them first: two sent within a millisecond, a
    /// session's subagents). `cached_tokens` above this is another run's or point's text.
    /// None where not worked out (then `theoretical_cached_tokens` is the ceiling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachable_cached_tokens: Option<u64>,
    /// An agent session's turn: its session, turn and context. None for other requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<super::jobs::JobTurn>,
    /// A session's or agent session's request: the session id its session headers carried
    /// (`load.session_headers`; a subagent's own id). None without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// A subagent's request: its parent session's id, as its parent headers carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// The workload mix entry the request was drawn from (None without a mix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix: Option<String>,
    /// `load:` points: the request's phase (warm-up and cool-down are recorded, not counted).
    /// None for closed-loop points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// `load:` points: seconds from the request's scheduled time (`scheduled_at`, set from the
    /// arrival schedule) to `sent_at`: how late the client was (a wait for a slot under
    /// `max_in_flight` included). None for closed-loop points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_s: Option<f64>,
    /// Speculative verify steps the request's decode took, where they are known (see
    /// [`StepSource`]); None for plain decoding, for streams that cannot tell, and in older
    /// records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_steps: Option<u64>,
    /// Where `verify_steps` came from (None when it is None).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_steps_source: Option<StepSource>,
    /// Output tokens per verify step after the first token: (completion_tokens - tokens in
    /// the first token chunk) / verify_steps (SGLang's own `spec_accept_length` divides all
    /// of completion_tokens, the prefill's token included). None without `verify_steps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_length: Option<f64>,
    /// The `x-request-id` header servebench sent with it (unique in the run): a router's log
    /// names the request by it, so a deployment's records say which worker served each one.
    /// None in older records and for requests that sent nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The worker a routed deployment's router sent the request to (the last one, when it
    /// retried on another), as its log says; None where no router log names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// A disaggregated deployment: the prefill worker the router paired with `worker` (the
    /// decode worker) for this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_worker: Option<String>,
    /// The workers the router sent the request to before `worker`, in order, when it
    /// retried it elsewhere (a worker that failed or was gone); empty when it did not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rerouted_from: Vec<String>,
    /// Thinking (reasoning) tokens among `completion_tokens` (see `reasoning_source`); None
    /// when the stream carried no thinking, and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Where `reasoning_tokens` came from (None when it is None).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_source: Option<ReasoningSource>,
    /// Why a request that thought has no answer (and so no time to the first answer token);
    /// None when its answer came, when it did not think, and for failed requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_answer: Option<NoAnswer>,
    /// Seconds from send to the first chunk carrying an answer or tool-call token (TTFT for a
    /// request that did not think); None when no answer came (`no_answer` says why), and in
    /// older records (the report then takes it from `chunks`). See [`RequestRecord::split`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfa_s: Option<f64>,
    /// Output tokens that were the answer's (tool calls included): `completion_tokens` less
    /// the thinking (`reasoning_tokens`, at most all of them). None without output tokens,
    /// and in older records. See [`RequestRecord::split`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_tokens: Option<u64>,
    /// Fields of the stream's events servebench does not know, seen with a value (at most
    /// [`UNKNOWN_FIELDS_KEPT`] names, as `delta.<name>`): their text was counted neither as
    /// thinking nor as answer. Empty when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_fields: Vec<String>,
    /// Tool calls the request's stream made; None when it was sent no tools (and for failed
    /// requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u32>,
    /// Whether every call named a declared tool with JSON arguments satisfying its schema
    /// (judged by the `jsonschema` crate in the draft the schema declares, 2020-12 by
    /// default); None when it made no call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_valid: Option<bool>,
    /// Why a call was not valid (the first found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_invalid: Option<String>,
    /// A request replaying a captured request's literal messages (`load.trace.format:
    /// sagemaker-capture`): what the capture recorded of it. None for every other request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub captured: Option<Captured>,
}

/// What a capture recorded of a request replayed from it, beside what this server said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Captured {
    /// The captured response's `usage.prompt_tokens`: the recorded server's count, by its
    /// tokenizer, which need not be this server's; kept beside `prompt_tokens`, never
    /// compared with it. None when the capture has no usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
}

/// Unknown stream field names a record keeps.
pub const UNKNOWN_FIELDS_KEPT: usize = 8;

/// Where a request's speculative verify steps came from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum StepSource {
    /// The server's own count: SGLang's `meta_info.spec_verify_ct` on the final chunk.
    Server,
    /// One step per token chunk after the first: written by earlier versions only (read back
    /// from their runs). Servers merge tokens into chunks without speculation too, so chunks
    /// are no longer counted as steps.
    Chunks,
}

impl RequestRecord {
    /// Sets `verify_steps`, its source and `accept_length` from the server's count
    /// (`server_steps`). Without one nothing is set: a chunk holding several tokens is not a
    /// verify step's, since servers merge tokens into chunks for other reasons too (the real
    /// SGLang 0.5.23 does when its streamer is behind, with speculation off; vLLM at
    /// `--stream-interval` over 1), so counting chunks took plain decoding for speculation that
    /// accepted nothing (`real_engine::sglang::attached_streaming_on_all_three_apis_counts_the_servers_tokens`).
    /// Where the requests carry no count, a point's accept length comes from the server's
    /// counters (vLLM) or is not known.
    pub fn set_verify_steps(&mut self, server_steps: Option<u64>) {
        let Some(first) = self.chunks.iter().map(|c| c.tokens).find(|t| *t > 0) else {
            return;
        };
        let Some(steps) = server_steps.filter(|n| *n > 0) else {
            return;
        };
        let total = self
            .completion_tokens
            .unwrap_or_else(|| self.chunks.iter().map(|c| u64::from(c.tokens)).sum());
        self.verify_steps = Some(steps);
        self.verify_steps_source = Some(StepSource::Server);
        self.accept_length = Some(total.saturating_sub(u64::from(first)) as f64 / steps as f64);
    }
}

/// A request's place in a group of requests that share a prompt prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheShare {
    /// The group: a shared-prefix group, or a session's user (from 0).
    pub group: u32,
    /// The turn of a session's conversation (from 0); None for shared-prefix groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// Prompt tokens this request shares with the group's earlier requests (the group's
    /// prefix; a session turn's previous prompt, as the server counted it). Once an earlier
    /// request of the group has had its first token, its prefill has ended and the server
    /// holds these tokens: the request must find them cached.
    pub shared_tokens: u64,
    /// The most this request can find cached: `shared_tokens`, plus the previous turn's
    /// reply for a session (servers cache generated tokens too).
    pub reusable_tokens: u64,
}

impl RequestRecord {
    /// Whether per-chunk token counts are the server's: as recorded, or for older records as
    /// they were then: SGLang's native counts always were; OpenAI streams were asked for a
    /// final usage chunk only, so their chunks counted one token each.
    pub fn chunk_tokens(&self) -> ChunkTokens {
        self.chunk_tokens.unwrap_or(match self.token_source {
            TokenSource::MetaInfo => ChunkTokens::Exact,
            TokenSource::Usage | TokenSource::ChunkCount => ChunkTokens::AssumedOne,
        })
    }

    /// Drops what no aggregate reads (a point's summary, the report's model and timelines),
    /// once the record is in `requests.jsonl` (the raw truth): chunks that carried no token
    /// (role-only, empty, usage-only: every metric skips them), the finish reason, the first
    /// attempt's failure (`retried` stays), the mix name and a failed response's body head.
    /// What is left gives the same numbers: the report reads every record back, and a point
    /// folds each one into its summary (keeping it until the end only where it is judged with
    /// others of its group or pair), so these parts were most of each one's heap.
    pub fn drop_detail(&mut self) {
        self.chunks.retain(|c| c.tokens > 0);
        self.chunks.shrink_to_fit();
        self.finish_reason = None;
        self.first_attempt = None;
        self.mix = None;
        if let Some(e) = &mut self.error {
            e.body_head = None;
        }
    }

    /// Whether the request streamed thinking: reasoning tokens counted, or a reason it never
    /// answered.
    pub fn thought(&self) -> bool {
        self.reasoning_tokens.is_some_and(|n| n > 0) || self.no_answer.is_some()
    }

    /// How the request's output splits into thinking and answer, from its chunks and the
    /// server's counts (the one rule for the record's `ttfa_s` and `answer_tokens` and the
    /// report's metrics); None without a chunk carrying a token.
    pub fn split(&self) -> Option<AnswerSplit> {
        let mut token_chunks = self.chunks.iter().filter(|c| c.tokens > 0).peekable();
        token_chunks.peek()?;
        let (mut streamed, mut counted, mut ttfa_s) = (0u64, 0u64, None);
        for c in token_chunks {
            streamed += u64::from(c.tokens);
            counted += u64::from(c.reasoning);
            if ttfa_s.is_none() && c.answer() > 0 {
                ttfa_s = Some(c.t_s);
            }
        }
        let completion = self.completion_tokens.unwrap_or(streamed);
        // A server count above the output (impossible: flagged `impossible-usage`) is cut to
        // the output, so the answer is never negative.
        let reasoning = self.reasoning_tokens.unwrap_or(counted).min(completion);
        Some(AnswerSplit {
            ttfa_s,
            reasoning_tokens: reasoning,
            counted_reasoning: counted,
            answer_tokens: completion - reasoning,
        })
    }

    /// Sets `ttfa_s` and `answer_tokens` from [`split`](Self::split): called once where a
    /// record is made, so every sender's records carry them.
    pub fn set_split(&mut self) {
        let split = self.split();
        self.ttfa_s = split.and_then(|s| s.ttfa_s);
        self.answer_tokens = split.map(|s| s.answer_tokens);
    }

    /// Output tokens in chunks that carried any, and how many such chunks there were.
    pub fn token_chunks(&self) -> (u64, usize) {
        self.chunks
            .iter()
            .filter(|c| c.tokens > 0)
            .fold((0, 0), |(t, n), c| (t + u64::from(c.tokens), n + 1))
    }
}

/// A request's output split into thinking and answer (see [`RequestRecord::split`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnswerSplit {
    /// Seconds from send to the first chunk with an answer (or tool-call) token; None when
    /// none came.
    pub ttfa_s: Option<f64>,
    /// Thinking tokens: the server's count where it gave one, else the chunks', at most the
    /// output.
    pub reasoning_tokens: u64,
    /// Thinking tokens the chunks carried.
    pub counted_reasoning: u64,
    /// The rest of the output.
    pub answer_tokens: u64,
}

/// Aggregate of one metric over a point's requests.
///
/// The spread and interval fields came later than the rest; they default to None so older
/// `points.jsonl` files still load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default, JsonSchema)]
pub struct Stat {
    /// Number of values (requests, or chunk gaps for ITL and ICL).
    pub count: usize,
    /// Arithmetic mean, in the metric's stored unit (seconds, tok/s or tokens).
    pub mean: f64,
    /// Median (percentiles interpolate linearly between ranks).
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sample standard deviation (n - 1 denominator), same unit as the metric. None with fewer
    /// than two values.
    #[serde(default)]
    pub std: Option<f64>,
    /// Coefficient of variation, `std / mean` (0.1 = 10%). None without `std` or when the mean
    /// is 0.
    #[serde(default)]
    pub cv: Option<f64>,
    /// Lower end of the 95% confidence interval of the mean, same unit as the metric. None when
    /// there is no interval (a single request).
    #[serde(default)]
    pub ci95_low: Option<f64>,
    /// Upper end of the 95% confidence interval of the mean.
    #[serde(default)]
    pub ci95_high: Option<f64>,
    /// How the interval was computed (None when there is none).
    #[serde(default)]
    pub ci_method: Option<CiMethod>,
    /// Set when figures are estimates, not computed from every value (absent: exact): past
    /// 65,536 values of a metric its percentiles come from a histogram (within 0.1% of the
    /// exact ones), past 131,072 timeline events the peak output and most in flight from
    /// 10 ms slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Estimate>,
}

/// How a [`Stat`]'s figures were estimated where they are not exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Estimate {
    /// Percentiles from a log-bucketed histogram, each within 0.1% (relative) of the exact
    /// one; count, mean, min, max and std stay exact.
    Histogram,
    /// A point-level figure over the request timeline (`peak_output_tok_s`,
    /// `concurrency_max`) from 10 ms slots instead of every event: peak output within one
    /// slot's tokens at each edge of its one-second bucket, the concurrency an upper bound
    /// that counts requests starting in the same slot as overlapping.
    Slots,
}

/// How a confidence interval was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CiMethod {
    /// Seeded percentile bootstrap over requests (2000 resamples), for points with fewer than
    /// three rounds.
    BootstrapRequests,
    /// Student's t interval over the means of three or more rounds (`repeat` >= 3).
    Repeats,
    /// Normal (Student's t) interval of the mean over requests, from the exact standard
    /// deviation of per-request sums (a request's gaps kept together), for a point past 65,536
    /// values of a metric and fewer than three rounds, where the bootstrap would need every value.
    NormalRequests,
}

/// What a point's numbers are worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum PointStatus {
    /// Every planned request was measured and failures stayed within the error budget.
    Ok,
    /// It has numbers, but more requests failed than the budget allows, or it did not run to
    /// completion (interrupted, the server died): the numbers cover fewer requests.
    Degraded,
    /// No successful measured request: no numbers (every request failed, calibration or the
    /// server failed, or it was skipped).
    Failed,
}

/// A validity flag on a point, shown next to its numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flag {
    /// What kind of doubt (see the catalogue): `cold-cache-hit`, `errors`, `calibration`, ...
    pub kind: FlagKind,
    /// What happened and what it means for the numbers.
    pub message: String,
}

impl Flag {
    pub fn new(kind: FlagKind, message: impl Into<String>) -> Flag {
        Flag {
            kind,
            message: message.into(),
        }
    }
}

impl RequestRecord {
    /// A successful-looking record of point `p000` with nothing observed: request 0 of round 0,
    /// role `measure`, SGLang's native API, sent at 0, `max_tokens` 4, no chunks, no counts
    /// (token source `meta-info`). Tests set what they check on top of it
    /// (`RequestRecord { end_s: Some(1.0), ..RequestRecord::fixture() }`), so adding a field
    /// changes one place.
    #[doc(hidden)]
    pub fn fixture() -> RequestRecord {
        RequestRecord {
            point: "p000".into(),
            round: 0,
            index: 0,
            role: RequestRole::Measure,
            api: Api::SglangGenerate,
            sent_at: 0.0,
            scheduled_at: None,
            write_s: None,
            read_wait_s: None,
            connect_s: None,
            connection: None,
            retried: false,
            first_attempt: None,
            requested_prompt_tokens: None,
            max_tokens: 4,
            chunks: Vec::new(),
            chunks_folded: None,
            end_s: None,
            prompt_tokens: None,
            completion_tokens: None,
            cached_tokens: None,
            server_ttft_s: None,
            token_source: TokenSource::MetaInfo,
            chunk_tokens: None,
            finish_reason: None,
            error: None,
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
            request_id: None,
            worker: None,
            prefill_worker: None,
            rerouted_from: Vec::new(),
            reasoning_tokens: None,
            reasoning_source: None,
            no_answer: None,
            ttfa_s: None,
            answer_tokens: None,
            unknown_fields: Vec::new(),
            tool_calls: None,
            captured: None,
            tool_call_valid: None,
            tool_call_invalid: None,
        }
    }
}

impl PointRecord {
    /// A point with nothing measured yet.
    pub fn empty(point: &crate::spec::Point, group: &str) -> PointRecord {
        PointRecord {
            id: point.id.clone(),
            values: point.values.clone(),
            group: group.to_string(),
            ..PointRecord::default()
        }
    }

    /// The point's status: as recorded, or, for runs that predate it, failed without a
    /// successful request and degraded with errors or when incomplete.
    pub fn status(&self) -> PointStatus {
        self.status.unwrap_or(if self.ok == 0 {
            PointStatus::Failed
        } else if self.errors > 0 || self.incomplete {
            PointStatus::Degraded
        } else {
            PointStatus::Ok
        })
    }

    /// True when the point carries a flag of `kind`.
    pub fn has_flag(&self, kind: &FlagKind) -> bool {
        self.flags.iter().any(|f| &f.kind == kind)
    }
}

/// One finished point: aggregates and flags, one line of `points.jsonl`. The default is a
/// point with nothing in it (no id, nothing measured).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PointRecord {
    /// Stable id, e.g. `p003`.
    pub id: String,
    /// The sweep values of this point, by dimension name.
    pub values: IndexMap<String, serde_json::Value>,
    /// The server group (launch) the point ran on.
    pub group: String,
    /// Requested prompt length in tokens (None for file prompts).
    #[serde(default)]
    pub requested_prompt_tokens: Option<u64>,
    /// Measured requests that succeeded / failed.
    pub ok: usize,
    pub errors: usize,
    /// Error counts by kind.
    #[serde(default)]
    pub error_kinds: IndexMap<String, usize>,
    /// Metrics by name (`ttft_s`, `prefill_tok_s`, `decode_tok_s`, `tpot_s`, `itl_s`, `icl_s`,
    /// `e2e_s`, `prompt_tokens`, `cached_tokens`, `completion_tokens`).
    pub metrics: IndexMap<String, Stat>,
    /// Validity flags (contamination, errors, calibration misses).
    #[serde(default)]
    pub flags: Vec<Flag>,
    /// True when the point did not run to completion (interrupted or the server died).
    #[serde(default)]
    pub incomplete: bool,
    /// Why the server failed during (or before) this point, classified from its log:
    /// `out-of-memory`, `kv-pool-too-small`, `port-in-use`, `startup-error`, `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// How the prompt was calibrated, every attempt included (None without calibration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    /// `ok`, `degraded` or `failed`. Absent in runs that predate it: see [`PointRecord::status`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PointStatus>,
    /// When the point started and ended (calibration, flushes and every round included):
    /// what `plan --from` estimates a rerun from. Absent in runs that predate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall: Option<Wall>,
    /// What requests that share prompt prefixes found in the cache against what they had to
    /// find: one row per shared-prefix group, or per session turn. Empty for other workloads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefix_cache: Vec<PrefixCacheRow>,
    /// What a `load:` point's numbers rest on: its offered load, window, phases, percentiles
    /// and SLO verdict (also for a closed-loop point with `slo:`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadSummary>,
    /// What the server's own `/metrics` said over the point (None when it has none, or the
    /// point was measured through the host agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<super::server_view::ServerView>,
    /// The host that measured the point (`user@host:port`; `a+b` for a multi-node server,
    /// rank 0 first), in a run on a host pool; None on a single host (see meta.json).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The capacity search this point is a probe of (None for an ordinary point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<super::search::SearchTag>,
    /// What the GPUs of the server's host did over the point (None without `telemetry:`
    /// sampling, or in runs that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<super::gpu::GpuView>,
    /// The engine's profiler over the point's measured window (`profiler:`), and its traces
    /// (`profile` in runs written before the key was renamed).
    #[serde(default, alias = "profile", skip_serializing_if = "Option::is_none")]
    pub profiler: Option<ProfilerCapture>,
    /// What each worker behind the router served over the point (`server.workers`), from its
    /// own `/metrics`, in the spec's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerView>,
    /// A launched deployment's router, as its own counters (its Prometheus listener) saw the
    /// point: its routing decisions beside the workers' and the client's counts (None for a
    /// server that is not a launched deployment's router, and in runs that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterView>,
    /// What `validity:` found of the server's output at the point (None when it asked for
    /// nothing, or in runs that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validity: Option<super::validity::ValidityView>,
    /// Requests made of a trace's prefix blocks: their theoretical cache hits against the
    /// server's (None for other points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_cache: Option<super::jobs::TraceCache>,
    /// Agent sessions (`load: { kind: agentic }`): jobs per hour, live sessions, each
    /// session's course (None for other points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<super::jobs::JobsView>,
    /// The point judged against the `agentx` preset's rules (`load.agentic.preset`); None for
    /// other points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agentx: Option<super::agentx::AgentxVerdict>,
    /// The point's tool calls: requests sent tools, calls made, valid ones, the first invalid
    /// (None when no request was sent tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<super::tool_calls::ToolCallsView>,
    /// The point graded against the hardware, as the report's "Against the hardware" grades
    /// it (None when it cannot be: open-loop and failed points, a run without a model config
    /// or a GPU, and runs that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<PointBound>,
}

/// A point's decode step and prefill against the GPU's datasheet: the figures `expect:`,
/// `compare` and `history` follow, with what they rest on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PointBound {
    /// Each figure by its name in the catalogue (`catalog::Graded`: `step_s`, `step_floor_s`,
    /// `effective_bandwidth_gbs`, `decode_bw_fraction`, `prefill_tflops`,
    /// `prefill_flops_fraction`), in the catalogue's unit; a prefill figure is absent without
    /// a prefill speed.
    pub figures: IndexMap<String, f64>,
    /// The GPU graded against (its datasheet name).
    pub gpu: String,
    /// Its peak memory bandwidth, GB/s.
    pub peak_bandwidth_gb_s: f64,
    /// Its dense peak TFLOP/s at the precision prefills are graded at.
    pub peak_tflops: f64,
    /// Where the GPU's figures come from.
    pub gpu_source: String,
    /// Tensor-parallel ranks and pipeline stages the weights and cache are split over.
    pub tp: u32,
    pub pp: u32,
    /// What was assumed or not said by the config or the run, one sentence each (a GPU taken
    /// from the host's facts, the weights split evenly over the ranks, ...).
    pub assumptions: Vec<String>,
}

/// One worker behind a router, as its own counters saw a point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerView {
    /// The worker's URL, as the spec gives it (a launched deployment's: as servebench
    /// reaches it).
    pub url: String,
    /// A launched deployment's worker: its name (`worker0`, `prefill0`, `decode1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A launched deployment's worker: its role (`regular`, `prefill`, `decode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// A deployment spread over several hosts: the host this worker runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Requests the router's log says it sent here (the last worker each was sent to), that
    /// succeeded and that failed: the measured ones and a load point's warm-up and cool-down
    /// (the window its counters cover); None where no router log names workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed: Option<(usize, usize)>,
    /// Measured requests the router sent here first and then retried on another worker (this
    /// one failed them, or was gone), by its log.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rerouted: usize,
    /// Its server view (requests, prompt, cached and generated tokens, gauges); None when
    /// no scrape of it answered with names servebench knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<super::server_view::ServerView>,
}

/// A router's own counters over a point, read from its Prometheus listener before and after
/// each round (each a counter's increase over the rounds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouterView {
    /// The listener's `/metrics` URL.
    pub url: String,
    /// Scrapes that answered, and those that failed (the last failure's cause).
    pub scrapes: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_scrapes: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape_error: Option<String>,
    /// Each series of the counters servebench reads that the router exported, with its
    /// increase over the point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub counters: Vec<RouterCounter>,
    /// The names servebench reads that the router did not export at all: absent, not zero.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<String>,
}

/// One series of a router's counter and its increase over a point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouterCounter {
    /// The metric's name (a histogram's with `_sum` or `_count`).
    pub name: String,
    /// Its labels, as `key=value` pairs joined by `,` (`branch=routing_key_hit`); empty for
    /// none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub labels: String,
    /// Its increase over the point's rounds.
    pub increase: f64,
}

/// One capture of the engine's profiler (`profiler:`) around a point's measured window.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ProfilerCapture {
    /// The profiler asked: `sglang` (`/start_profile` with a `ProfileReq` body) or `vllm`
    /// (`/start_profile` of a server launched with `--profiler-config`).
    pub engine: String,
    /// The round captured (the point's first).
    pub round: u32,
    /// The directory the server was told to write to, on its host; None: its own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// SGLang's `profile_id`, which names its trace files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<String>,
    /// SGLang's `num_steps`: the profiler stopped itself after this many forward steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<u32>,
    /// When `/start_profile` answered (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<f64>,
    /// When `/stop_profile` answered (Unix seconds): the traces were written by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<f64>,
    /// What went wrong, in words (the server's refusal, a timeout, an engine without a
    /// profiler endpoint); None when the capture worked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The trace files the capture wrote.
    #[serde(default)]
    pub files: Vec<TraceFile>,
}

/// One trace file a capture wrote on the server's host.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct TraceFile {
    /// Its name in the capture's directory.
    pub name: String,
    pub bytes: u64,
    /// Where it is in the run directory (relative to it); None when it stayed on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Why it stayed on the host (over `profile.max_mib`, not readable, a server servebench
    /// did not start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<String>,
}

/// Expected against observed cache hits of one shared-prefix group, or one session turn (all
/// users together), over a point's rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PrefixCacheRow {
    /// The shared-prefix group (None for a session turn's row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u32>,
    /// The session turn, from 0 (None for a group's row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// Successful requests whose server reported cached tokens.
    pub requests: usize,
    /// Requests that had to find the shared tokens cached: sent after an earlier request of
    /// their group (or their session's previous turn) had its first token.
    pub must_hit: usize,
    /// Of those, the ones that did (within 64 tokens, at most half the shared part: page
    /// granularity and the last token).
    pub hits: usize,
    /// Requests that could not have found anything (the first of their group, a session's
    /// first turn).
    pub must_miss: usize,
    /// Requests that found more than their group could have left in the cache.
    pub unexpected: usize,
    /// Mean shared tokens over the must-hit requests (what the cache had to serve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_cached_tokens: Option<f64>,
    /// Mean cached tokens the server reported for the must-hit requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<f64>,
    /// A routed deployment (the router's log names each request's worker): the workers the
    /// row's requests went to. A request owes a hit only on a worker where an earlier request
    /// of its group had its first token; the others are `routed_away`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// Requests sent to a worker without their group's prefix while another worker held it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub routed_away: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A load point's basis: what was offered, over which window, and whether it met its SLO.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LoadSummary {
    /// `rate`, `ramp`, `trace`, or `closed` (a closed loop judged against `slo:`).
    pub kind: String,
    /// Requests per second the schedule offered over its measured phase (measured requests /
    /// the measured phase's scheduled span; None for `rate: inf` and closed loops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offered_req_s: Option<f64>,
    /// The arrival process (`constant`, `poisson`, `gamma`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<String>,
    /// Seconds from the first measured request's scheduled time to the last one's end: the
    /// window system throughputs divide by.
    pub window_s: f64,
    /// Requests scheduled per phase that were recorded.
    pub warmup: usize,
    pub measured: usize,
    pub cooldown: usize,
    /// Where latencies in `*_sched_s` count from (`scheduled`); `ttft_s` and `e2e_s` count
    /// from the request's last byte written, as in closed loops.
    pub latency_origin: String,
    /// Percentiles asked for by `percentiles:`, per metric: `{"ttft_sched_s": {"p99.9": 1.2}}`.
    #[serde(default)]
    pub percentiles: IndexMap<String, IndexMap<String, f64>>,
    /// The SLO verdict (None without `slo:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloVerdict>,
    /// True when `stop.errors` stopped the point early.
    #[serde(default)]
    pub stopped_on_errors: bool,
}

impl SloCheck {
    /// True when the point had fewer measured values than the target needs to be judged
    /// (`needed`, see `measure::system::min_samples`): the check is then neither met nor
    /// missed.
    pub fn insufficient(&self) -> bool {
        self.samples < self.needed
    }

    /// Why an insufficient target was not judged: `ttft_p99 not judged: 5 measured values, a
    /// p99 needs at least 100`.
    pub fn unjudged_text(&self) -> String {
        let what = match self.target.rsplit_once("_p") {
            _ if self.target == "agents" => "the per-agent SLO".to_string(),
            Some((_, pct)) if self.target != "attainment" => format!("a p{pct}"),
            _ => format!("attainment {}%", crate::text::sig3(self.limit * 100.0)),
        };
        format!(
            "{} not judged: {}, {what} needs at least {}",
            self.target,
            crate::text::count(self.samples, "measured value", "measured values"),
            self.needed
        )
    }

    /// How a missed target was missed, e.g. `ttft_p99 1120 ms > 1000 ms` or `attainment 0.780 <
    /// 0.950` (attainment must reach its target; every other target is a ceiling); for an
    /// insufficient one, [`unjudged_text`](Self::unjudged_text).
    pub fn missed_text(&self) -> String {
        if self.insufficient() {
            return self.unjudged_text();
        }
        match self.value {
            // The per-agent SLO (`slo.agent`): the share of agents that met it.
            Some(v) if self.target == "agents" => format!(
                "agents meeting the per-agent SLO {}% < {}%",
                crate::text::sig3(v * 100.0),
                crate::text::sig3(self.limit * 100.0)
            ),
            Some(v) if self.target == "attainment" => format!(
                "{} {} < {}",
                self.target,
                crate::text::sig3(v),
                crate::text::sig3(self.limit)
            ),
            // Times in ms, as every table shows them.
            Some(v) => format!(
                "{} {} ms > {} ms",
                self.target,
                crate::text::sig3(v * 1000.0),
                crate::text::sig3(self.limit * 1000.0)
            ),
            None => format!("{} not measured", self.target),
        }
    }
}

/// Whether a point met its SLO targets, target by target.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SloVerdict {
    /// Every target held on enough values (and with no targets: attainment was 100%). False
    /// when a target had too few values to be judged (see [`SloVerdict::unjudged`]).
    pub met: bool,
    /// Measured requests meeting every per-request threshold.
    pub good: usize,
    /// Measured requests judged (failed ones count as not good).
    pub judged: usize,
    pub checks: Vec<SloCheck>,
}

impl SloVerdict {
    /// The targets that had too few values to be judged.
    pub fn unjudged(&self) -> impl Iterator<Item = &SloCheck> {
        self.checks.iter().filter(|c| c.insufficient())
    }
}

/// One point-level target and what the point reached.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SloCheck {
    /// As written: `ttft_p99`, `attainment`.
    pub target: String,
    /// The bound (seconds; a share for attainment).
    pub limit: f64,
    /// What the point reached (None when it had no value: no successful request).
    pub value: Option<f64>,
    /// Held, and judged on enough values (never true when [`insufficient`](Self::insufficient)).
    pub met: bool,
    /// The measured values the target was computed from (requests, for a percentile; judged
    /// requests, for attainment). 0 in runs that predate it.
    #[serde(default)]
    pub samples: usize,
    /// The fewest values it is judged on (`measure::system::min_samples`); 0 in runs that
    /// predate it.
    #[serde(default)]
    pub needed: usize,
}

/// How a point's generated prompt was sized to its target token count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Target prompt tokens.
    pub target: u64,
    /// How tokens were counted: `tokenize` (the server's tokenize endpoint, no prefill) or
    /// `generate` (a one-token generation per attempt).
    pub counted_by: String,
    /// Characters of text chosen (None when calibration failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chars: Option<usize>,
    /// True when an earlier point's calibration was reused (its attempts are there).
    #[serde(default)]
    pub reused: bool,
    /// Every counting request, in order.
    #[serde(default)]
    pub attempts: Vec<CalibrationAttempt>,
}

/// One counting request of a calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationAttempt {
    /// `probe` (learning characters per token) or `fit` (aiming at the target).
    pub kind: CalibrationAttemptKind,
    /// Characters of generated text sent (after the nonce).
    pub chars: usize,
    /// Tokens the server counted (None when it refused or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Seconds the request took.
    pub seconds: f64,
    /// Why it gave no count: `too-long` (past the server's context) or the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a calibration request was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CalibrationAttemptKind {
    Probe,
    Fit,
}

/// A span of wall-clock time, in seconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Wall {
    pub started_at: f64,
    pub ended_at: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(tokens: &[u32], exact: bool) -> RequestRecord {
        RequestRecord {
            chunks: tokens
                .iter()
                .enumerate()
                .map(|(i, t)| Chunk::new(i as f64 * 0.01, *t))
                .collect(),
            completion_tokens: Some(tokens.iter().map(|t| u64::from(*t)).sum()),
            chunk_tokens: Some(if exact {
                ChunkTokens::Exact
            } else {
                ChunkTokens::AssumedOne
            }),
            ..RequestRecord::fixture()
        }
    }

    #[test]
    fn the_servers_verify_count_gives_decode_tokens_per_step() {
        // 1 prefill token, then 9 tokens over 4 verify steps.
        let mut r = streamed(&[1, 3, 2, 1, 3], true);
        r.set_verify_steps(Some(4));
        assert_eq!(r.verify_steps, Some(4));
        assert_eq!(r.verify_steps_source, Some(StepSource::Server));
        assert_eq!(r.accept_length, Some(2.25));
    }

    #[test]
    fn without_a_server_count_multi_token_chunks_are_not_taken_for_verify_steps() {
        // Real SGLang merges tokens into chunks when its streamer is behind, speculation off.
        for mut r in [
            streamed(&[0, 1, 3, 2, 1], true),
            streamed(&[1, 1, 1], true),
            streamed(&[1, 3, 2], false),
        ] {
            r.set_verify_steps(None);
            assert_eq!(
                (r.verify_steps, r.verify_steps_source, r.accept_length),
                (None, None, None)
            );
        }
    }
}
