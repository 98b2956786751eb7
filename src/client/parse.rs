//! Per-API parsing of stream events into token counts, usage and finish reasons.
//!
//! Token accounting:
//! - Native `/generate`: new tokens per chunk = change in the cumulative
//!   `meta_info.completion_tokens`, so a chunk whose text is unchanged (incomplete UTF-8) still
//!   counts its tokens and speculative decoding's multi-token chunks count in full.
//! - OpenAI: when a chunk with choices carries `usage` (`continuous_usage_stats`), its tokens are
//!   the change in `usage.completion_tokens`. Otherwise one token per chunk with a non-empty text
//!   (or chat content) delta. The final usage chunk's `completion_tokens` wins as the request's
//!   total; per-chunk counts stay as measured (see `measure::metrics` for what that means for ITL).
//! - Role-only chat chunks, empty deltas and the usage-only chunk (`choices: []`) carry 0 tokens.
//!
//! [`StreamParser::chunk_tokens`] says whether every count was the server's
//! ([`ChunkTokens::Exact`]) or some non-empty chunk was taken as one token
//! ([`ChunkTokens::AssumedOne`]).

use std::borrow::Cow;

use serde_json::Value;

use servebench_model::results::records::{ChunkTokens, TokenSource, UNKNOWN_FIELDS_KEPT};
use servebench_model::spec::reasoning::ThinkMarkers;
use servebench_model::spec::types::Api;

use super::sse::head;
use super::thinking::{Phase, Seen, Thinking, reasoning_share};

/// The most generated text a parser keeps for one request (the answer a validity check
/// judges, a session's reply for its next turn): a server streaming huge events cannot grow
/// the client's memory past this per request. Past it, [`StreamParser::text_cut`] is set.
pub(crate) const TEXT_KEPT_BYTES: usize = 1 << 20;

/// The fields of a chat delta servebench reads or knows to carry no output text: vLLM's
/// `reasoning`, SGLang's and llama.cpp's `reasoning_content`, OpenAI's `refusal`,
/// `function_call` and `audio`, SGLang's `hidden_states`. Any other field with a value is
/// reported (`unknown_fields`), never silently dropped.
const KNOWN_DELTA_FIELDS: &[&str] = &[
    "role",
    "content",
    "reasoning",
    "reasoning_content",
    "tool_calls",
    "function_call",
    "refusal",
    "audio",
    "hidden_states",
    "name",
];

/// What one event meant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Parsed {
    /// A data chunk carrying `tokens` new output tokens (possibly 0), `reasoning` of them
    /// thinking tokens.
    Chunk { tokens: u32, reasoning: u32 },
    /// `[DONE]`: the stream ended normally.
    Done,
    /// An `{"error": ...}` event: the server failed the request mid-stream.
    Error { message: String, head: String },
}

/// An event that is not valid JSON of the expected shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Malformed {
    pub message: String,
    /// The first 200 bytes of the event's data.
    pub head: String,
}

/// Tokens of a thinking block's markers a model writes (`<think>` and `</think>`): tokens the
/// server counts and, where it splits the thinking, streams no text for.
const THINK_MARKER_TOKENS: u64 = 2;

/// Running state of one response stream.
#[derive(Debug)]
pub(crate) struct StreamParser {
    api: Api,
    /// Generated text so far (debugging only).
    pub text: String,
    /// Latest `prompt_tokens` the server reported.
    pub prompt_tokens: Option<u64>,
    /// Latest `cached_tokens` the server reported.
    pub cached_tokens: Option<u64>,
    /// Latest finish reason (`stop`, `length`, `abort`, ...).
    pub finish_reason: Option<String>,
    /// Message of an `abort` finish reason, when the server aborted the request.
    pub abort_message: Option<String>,
    /// The server's own time to the request's first token, seconds, where it reports one:
    /// llama.cpp's `timings.prompt_ms` (prompt processing), SGLang's
    /// `meta_info.first_token_latency`. No client's TTFT can be shorter.
    pub server_ttft_s: Option<f64>,
    /// Speculative verify steps the server counted (SGLang `meta_info.spec_verify_ct`, on the
    /// final chunk), where it says.
    pub spec_verify_ct: Option<u64>,
    /// Latest cumulative completion count from the server (meta_info or usage).
    server_completion: Option<u64>,
    /// Sum of per-chunk token counts.
    counted: u64,
    /// Some non-empty chunk carried no server count and was taken as one token.
    assumed: bool,
    /// Keep the whole text on the native API too (its cumulative shortcut skips it).
    keep_text: bool,
    /// The generated text passed [`TEXT_KEPT_BYTES`]: `text` holds its start only.
    pub text_cut: bool,
    /// The native API's cumulative text length so far (the text itself is kept up to
    /// [`TEXT_KEPT_BYTES`]).
    native_len: usize,
    /// Where the stream is, thinking or answering, and the launched parser's markers.
    thinking: Thinking,
    /// Sum of per-chunk thinking tokens.
    reasoning_counted: u64,
    /// The server's latest cumulative thinking count (`meta_info.reasoning_tokens`, usage's
    /// `reasoning_tokens` or `completion_tokens_details.reasoning_tokens`).
    server_reasoning: Option<u64>,
    /// Some chunk carried answer (or tool-call) tokens.
    answered: bool,
    /// Unknown delta fields seen with a value (`delta.<name>`), at most [`UNKNOWN_FIELDS_KEPT`].
    pub unknown_fields: Vec<String>,
    /// The chat stream's tool calls, assembled (`delta.tool_calls`).
    pub tool_calls: super::tool_calls::ToolCalls,
}

impl StreamParser {
    /// The same parser, keeping every event's text when `keep` (see `keep_text`).
    pub(crate) fn keeping_text(mut self, keep: bool) -> StreamParser {
        self.keep_text = keep;
        self
    }

    /// The same parser, finding thinking in text by `markers` (text APIs of a server
    /// launched with a reasoning parser; chat streams carry thinking in fields of their own).
    pub(crate) fn with_markers(mut self, markers: Option<ThinkMarkers>) -> StreamParser {
        if self.api != Api::OpenaiChat {
            self.thinking = Thinking::new(markers);
        }
        self
    }

    /// Thinking tokens of the request: the server's count where it gave one above 0, else
    /// the chunks' (None, with its source, when no thinking was seen).
    ///
    /// A chat stream's thinking markers (`<think>`, `</think>`) and the end-of-sequence token
    /// are tokens the server counts and streams no text for: on a server without per-chunk
    /// counts (llama.cpp) they are in its total and in no chunk. Those silent tokens are
    /// thinking, all of them when the request never answered; else the end-of-sequence token
    /// of a request that stopped is the answer's (as SGLang and vLLM count it), two markers
    /// are thinking, and any tokens beyond (several to a chunk, as with speculative decoding)
    /// are split as the phases' chunks were: held to the real engines in the tier.
    pub(crate) fn reasoning_tokens(
        &self,
    ) -> Option<(u64, servebench_model::results::records::ReasoningSource)> {
        use servebench_model::results::records::ReasoningSource;
        if let Some(n) = self.server_reasoning.filter(|n| *n > 0) {
            return Some((n, ReasoningSource::Server));
        }
        if self.reasoning_counted == 0 {
            return None;
        }
        let silent = self.completion_tokens().saturating_sub(self.counted);
        let thinking = if !self.answered {
            self.reasoning_counted + silent
        } else {
            // The markers are at most two of the silent tokens; the rest are tokens that came
            // several to a chunk (speculative decoding), split as the phases' chunks were.
            let eos = u64::from(self.finish_reason.as_deref() == Some("stop"));
            let extra = silent.saturating_sub(eos);
            let markers = extra.min(THINK_MARKER_TOKENS);
            let shared = (extra - markers) * self.reasoning_counted / self.counted.max(1);
            self.reasoning_counted + markers + shared
        };
        Some((thinking, ReasoningSource::Chunks))
    }

    /// Why a request that thought has no answer (None when it answered or never thought).
    pub(crate) fn no_answer(&self) -> Option<servebench_model::results::records::NoAnswer> {
        use servebench_model::results::records::NoAnswer;
        let thought = self.reasoning_tokens().is_some() || self.thinking.phase == Phase::Thinking;
        if self.answered || !thought {
            return None;
        }
        Some(match self.finish_reason.as_deref() {
            Some("length") => NoAnswer::OutOfTokensWhileThinking,
            _ => NoAnswer::EndedWhileThinking,
        })
    }

    /// Appends `s` to the kept text, up to [`TEXT_KEPT_BYTES`].
    fn keep(&mut self, s: &str) {
        let room = TEXT_KEPT_BYTES.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
            return;
        }
        let mut cut = room;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&s[..cut]);
        self.text_cut = true;
    }

    /// A chunk of `tokens` tokens whose text carried `seen`: its thinking share, counted,
    /// and whether it answered. `server_delta` is the change in the server's cumulative
    /// thinking count on this chunk, where it sends one per chunk and the text says nothing.
    fn account(&mut self, tokens: u32, seen: Seen, server_delta: Option<u64>) -> u32 {
        // Text tells thinking from answer on chat streams (fields) and where markers are
        // known; the native API without markers has the server's cumulative count.
        let reasoning = match server_delta {
            Some(d) if !self.thinking.scans_text() => {
                let d = clamp_u32(d).min(tokens);
                if tokens > d {
                    self.thinking.phase = Phase::Answering;
                } else if d > 0 && self.thinking.phase != Phase::Answering {
                    self.thinking.phase = Phase::Thinking;
                }
                d
            }
            _ => reasoning_share(tokens, seen, self.thinking.phase),
        };
        self.answered |= tokens > reasoning;
        self.reasoning_counted += u64::from(reasoning);
        reasoning
    }

    /// Notes a delta field servebench does not know.
    fn unknown_field(&mut self, name: &str) {
        let name = format!("delta.{}", name.chars().take(64).collect::<String>());
        if self.unknown_fields.len() < UNKNOWN_FIELDS_KEPT && !self.unknown_fields.contains(&name) {
            self.unknown_fields.push(name);
        }
    }

    /// A parser for a response of `api`.
    pub(crate) fn new(api: Api) -> StreamParser {
        StreamParser {
            api,
            text: String::new(),
            prompt_tokens: None,
            cached_tokens: None,
            finish_reason: None,
            abort_message: None,
            server_ttft_s: None,
            spec_verify_ct: None,
            server_completion: None,
            counted: 0,
            assumed: false,
            keep_text: false,
            text_cut: false,
            native_len: 0,
            thinking: Thinking::new(None),
            reasoning_counted: 0,
            server_reasoning: None,
            answered: false,
            unknown_fields: Vec::new(),
            tool_calls: Default::default(),
        }
    }

    /// Whether every chunk's count came from the server.
    pub(crate) fn chunk_tokens(&self) -> ChunkTokens {
        if self.assumed {
            ChunkTokens::AssumedOne
        } else {
            ChunkTokens::Exact
        }
    }

    /// Interprets one event's data.
    pub(crate) fn event(&mut self, data: &[u8]) -> Result<Parsed, Malformed> {
        if data.trim_ascii() == b"[DONE]" {
            return Ok(Parsed::Done);
        }
        // Fast path: the common shapes, parsed into borrowed structs. Anything else (errors,
        // unexpected types, duplicate keys, invalid JSON) goes the Value path below, which
        // defines the behaviour; the fast path extracts exactly what it would.
        if let Some((tokens, reasoning)) = self.fast_event(data) {
            self.counted += u64::from(tokens);
            return Ok(Parsed::Chunk { tokens, reasoning });
        }
        let malformed = |message: String| Malformed {
            message,
            head: head(data),
        };
        let value: Value = serde_json::from_slice(data)
            .map_err(|e| malformed(format!("event is not valid JSON: {e}")))?;
        let Some(obj) = value.as_object() else {
            return Err(malformed("event is not a JSON object".into()));
        };
        if let Some(error) = obj.get("error").filter(|e| !e.is_null()) {
            return Ok(Parsed::Error {
                message: error_message(error),
                head: head(data),
            });
        }
        let (tokens, reasoning) = match self.api {
            Api::SglangGenerate => self.native(&value),
            Api::OpenaiCompletions | Api::OpenaiChat => self.openai(&value),
        };
        self.counted += u64::from(tokens);
        Ok(Parsed::Chunk { tokens, reasoning })
    }

    /// Token count (and thinking tokens among them) of an event of the expected shape without
    /// an error, parsed with borrowed structs; None sends the event to the Value path.
    fn fast_event(&mut self, data: &[u8]) -> Option<(u32, u32)> {
        if self.api == Api::SglangGenerate
            && let Some(tokens) = self.cumulative_native(data)
        {
            return Some(tokens);
        }
        // Skipped values are checked less than parsed ones: serde_json does not check their
        // UTF-8 or `\u` escapes (nor whether a number's exponent overflows, the one difference
        // left), so such events take the Value path.
        if std::str::from_utf8(data).is_err() || memchr::memmem::find(data, b"\\u").is_some() {
            return None;
        }
        match self.api {
            Api::SglangGenerate => {
                let fast::Obj(e) =
                    serde_json::from_slice::<fast::Obj<fast::NativeEvent>>(data).ok()?;
                if e.error.is_some() {
                    return None;
                }
                let meta = e.meta_info.map(|fast::Obj(m)| m).unwrap_or_default();
                self.take_server_ttft(meta.first_token_latency);
                Some(self.native_fields(fast::NativeFields {
                    spec_verify_ct: meta.spec_verify_ct,
                    reasoning: meta.reasoning_tokens,
                    text: e.text,
                    ids: e.output_ids.map(|fast::Count(n)| n),
                    completion: meta.completion_tokens,
                    prompt: meta.prompt_tokens,
                    cached: meta.cached_tokens,
                    finish: meta.finish_reason,
                }))
            }
            Api::OpenaiCompletions | Api::OpenaiChat => {
                let fast::Obj(e) =
                    serde_json::from_slice::<fast::Obj<fast::OpenaiEvent>>(data).ok()?;
                if e.error.is_some() {
                    return None;
                }
                let choices: Vec<fast::Choice> = e
                    .choices
                    .unwrap_or_default()
                    .into_iter()
                    .map(|fast::Obj(c)| c)
                    .collect();
                // Tool-call pieces are assembled from the Value path (they are few).
                let called = |c: &fast::Choice| {
                    c.delta.as_ref().is_some_and(|fast::Obj(d)| {
                        d.tool_calls.as_ref().is_some_and(|t| !t.is_empty())
                    })
                };
                if self.api == Api::OpenaiChat && choices.iter().any(called) {
                    return None;
                }
                let timings = e.timings.map(|fast::Obj(t)| t);
                self.take_server_ttft(timings.and_then(|t| t.prompt_ms).map(|ms| ms / 1e3));
                if let Some(n) = e
                    .sglext
                    .and_then(|fast::Obj(x)| x.spec_tokens_details)
                    .and_then(|fast::Obj(d)| d.spec_verify_ct)
                {
                    self.spec_verify_ct = Some(n);
                }
                if let Some(n) = e
                    .metrics
                    .and_then(|fast::Obj(m)| m.speculative_decoding)
                    .and_then(|fast::Obj(d)| d.num_spec_steps)
                {
                    self.spec_verify_ct = Some(n);
                }
                Some(self.openai_fields(&choices, e.usage.map(|fast::Obj(u)| u)))
            }
        }
    }

    /// SGLang's default (cumulative) stream repeats the whole text and `output_ids` in every
    /// event, so parsing them makes a stream quadratic in its length. When `meta_info` carries
    /// `completion_tokens`, the counts need nothing else: find `meta_info` (the last key SGLang
    /// writes) with a SIMD search, parse only that object, and check the event is one closed
    /// JSON object. Anything unusual returns None and takes the full paths. The generated text
    /// is then not kept (it is for debugging only).
    fn cumulative_native(&mut self, data: &[u8]) -> Option<(u32, u32)> {
        const KEY: &[u8] = b"\"meta_info\":";
        if self.keep_text || self.thinking.scans_text() {
            return None;
        }
        let data = data.trim_ascii();
        if data.len() < 256 || data.first() != Some(&b'{') || data.last() != Some(&b'}') {
            return None; // very short events are cheap on the full path
        }
        // An escaped quote inside the text can never match `"meta_info":` (the byte after
        // `meta_info` would be a backslash), and neither can `"error"`.
        if memchr::memmem::find(data, b"\"error\"").is_some() {
            return None;
        }
        let pos = memchr::memmem::rfind(data, KEY)?;
        let tail = &data[pos + KEY.len()..];
        let mut values =
            serde_json::Deserializer::from_slice(tail).into_iter::<fast::Obj<fast::Meta>>();
        let fast::Obj(meta) = values.next()?.ok()?;
        // The object must close the event: `...meta_info": {..} }` and nothing after.
        let rest = tail.get(values.byte_offset()..)?.trim_ascii();
        if rest != b"}" {
            return None;
        }
        let completion = meta.completion_tokens?;
        self.take_server_ttft(meta.first_token_latency);
        Some(self.native_fields(fast::NativeFields {
            spec_verify_ct: meta.spec_verify_ct,
            reasoning: meta.reasoning_tokens,
            text: None,
            ids: None,
            completion: Some(completion),
            prompt: meta.prompt_tokens,
            cached: meta.cached_tokens,
            finish: meta.finish_reason,
        }))
    }

    /// Where the token counts came from.
    pub(crate) fn token_source(&self) -> TokenSource {
        match (self.server_completion, self.api) {
            (None, _) => TokenSource::ChunkCount,
            (Some(_), Api::SglangGenerate) => TokenSource::MetaInfo,
            (Some(_), _) => TokenSource::Usage,
        }
    }

    /// Output tokens: the server's count when it gave one, else the sum of per-chunk counts.
    pub(crate) fn completion_tokens(&self) -> u64 {
        self.server_completion.unwrap_or(self.counted)
    }

    /// The Value path's native fields: what [`fast::NativeEvent`] extracts, by indexing.
    fn native(&mut self, v: &Value) -> (u32, u32) {
        let meta = &v["meta_info"];
        self.take_server_ttft(meta["first_token_latency"].as_f64());
        let finish = match &meta["finish_reason"] {
            Value::Null => None,
            Value::String(s) => Some(fast::Finish::Reason(s.into())),
            reason => Some(fast::Finish::Object {
                kind: reason["type"].as_str().unwrap_or("unknown").into(),
                message: reason["message"].as_str().map(Into::into),
            }),
        };
        self.native_fields(fast::NativeFields {
            spec_verify_ct: meta["spec_verify_ct"].as_u64(),
            reasoning: meta["reasoning_tokens"].as_u64(),
            text: v["text"].as_str().map(Into::into),
            ids: v["output_ids"].as_array().map(Vec::len),
            completion: meta["completion_tokens"].as_u64(),
            prompt: meta["prompt_tokens"].as_u64(),
            cached: meta["cached_tokens"].as_u64(),
            finish,
        })
    }

    fn native_fields(&mut self, f: fast::NativeFields<'_>) -> (u32, u32) {
        let completion = f.completion;
        let (text_changed, seen) = match &f.text {
            Some(t) => self.take_native_text(t, f.ids, completion),
            None => (false, Seen::default()),
        };
        if let Some(n) = f.prompt {
            self.prompt_tokens = Some(n);
        }
        if let Some(n) = f.cached {
            self.cached_tokens = Some(n);
        }
        if let Some(n) = f.spec_verify_ct {
            self.spec_verify_ct = Some(n);
        }
        match f.finish {
            None => {}
            Some(fast::Finish::Reason(s)) => self.finish(&s, None),
            Some(fast::Finish::Object { kind, message }) => {
                self.finish(&kind, message.map(Into::into))
            }
        }
        // SGLang's `meta_info.reasoning_tokens` is cumulative, on every event.
        let server_delta = f.reasoning.map(|n| {
            let before = self.server_reasoning.unwrap_or(0);
            self.server_reasoning = Some(n.max(before));
            n.saturating_sub(before)
        });
        let tokens = match completion {
            Some(c) => {
                let new = c.saturating_sub(self.server_completion.unwrap_or(0));
                self.server_completion = Some(c.max(self.server_completion.unwrap_or(0)));
                clamp_u32(new)
            }
            None => {
                self.assumed |= text_changed;
                u32::from(text_changed)
            }
        };
        (tokens, self.account(tokens, seen, server_delta))
    }

    /// Appends a native chunk's text, cumulative (the default) or incremental
    /// (`--incremental-streaming-output`), keeping at most [`TEXT_KEPT_BYTES`]. Returns
    /// whether new text arrived, and what the new text carried.
    fn take_native_text(
        &mut self,
        t: &str,
        ids: Option<usize>,
        completion: Option<u64>,
    ) -> (bool, Seen) {
        // `output_ids` follows the same mode as `text`: the full list in cumulative mode, so its
        // length equals the cumulative count. Without it, cumulative text extends the previous one.
        let cumulative = match (ids, completion) {
            (Some(n), Some(c)) => n as u64 == c,
            _ => t.len() >= self.native_len && t.starts_with(&self.text),
        };
        if cumulative {
            let changed = t.len() != self.native_len || !t.starts_with(&self.text);
            // The new part (the whole text if the server rewrote the old one).
            let new = match t.get(self.native_len..) {
                Some(tail) if t.starts_with(&self.text) => tail,
                _ => t,
            };
            let seen = if changed {
                self.thinking.text(new)
            } else {
                Seen::default()
            };
            self.text.clear();
            self.text_cut = false;
            self.keep(t);
            self.native_len = t.len();
            (changed, seen)
        } else {
            self.keep(t);
            self.native_len = self.native_len.saturating_add(t.len());
            (!t.is_empty(), self.thinking.text(t))
        }
    }

    /// The Value path's OpenAI fields: what [`fast::OpenaiEvent`] extracts, by indexing.
    /// Keeps the server's own time to the first token, when an event gives a plausible one.
    fn take_server_ttft(&mut self, seconds: Option<f64>) {
        if let Some(s) = seconds.filter(|s| s.is_finite() && *s >= 0.0) {
            self.server_ttft_s = Some(s);
        }
    }

    fn openai(&mut self, v: &Value) -> (u32, u32) {
        self.take_server_ttft(v["timings"]["prompt_ms"].as_f64().map(|ms| ms / 1e3));
        // SGLang's `sglext.spec_tokens_details`: one object, or a list of them when n > 1
        // (servebench asks for one choice: the first).
        let details = &v["sglext"]["spec_tokens_details"];
        let details = if details.is_array() {
            &details[0]
        } else {
            details
        };
        if let Some(n) = details["spec_verify_ct"].as_u64() {
            self.spec_verify_ct = Some(n);
        }
        // vLLM's per-request speculative counts (`--per-request-spec-decode-metrics`), on the
        // final usage chunk.
        if let Some(n) = v["metrics"]["speculative_decoding"]["num_spec_steps"].as_u64() {
            self.spec_verify_ct = Some(n);
        }
        fn text(x: &Value) -> Option<Cow<'_, str>> {
            x.as_str().map(Cow::Borrowed)
        }
        let mut choices = Vec::new();
        for choice in v["choices"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let d = &choice["delta"];
            if self.api == Api::OpenaiChat
                && let Some(pieces) = d["tool_calls"].as_array()
            {
                self.tool_calls.delta(pieces);
            }
            if let Some(fields) = d.as_object() {
                for (k, x) in fields {
                    if !KNOWN_DELTA_FIELDS.contains(&k.as_str()) && has_value(x) {
                        self.unknown_field(k);
                    }
                }
            }
            choices.push(fast::Choice {
                text: text(&choice["text"]),
                delta: Some(fast::Obj(fast::Delta {
                    role: None,
                    content: text(&d["content"]),
                    reasoning_content: text(&d["reasoning_content"]),
                    reasoning: text(&d["reasoning"]),
                    refusal: text(&d["refusal"]),
                    tool_calls: d["tool_calls"]
                        .as_array()
                        .map(|calls| vec![serde::de::IgnoredAny; calls.len()]),
                    function_call: has_value(&d["function_call"]).then_some(serde::de::IgnoredAny),
                    audio: None,
                    hidden_states: None,
                    name: None,
                })),
                finish_reason: text(&choice["finish_reason"]),
            });
        }
        let usage = &v["usage"];
        let usage = usage.is_object().then(|| fast::Usage {
            completion_tokens: usage["completion_tokens"].as_u64(),
            prompt_tokens: usage["prompt_tokens"].as_u64(),
            prompt_tokens_details: Some(fast::Obj(fast::Details {
                cached_tokens: usage["prompt_tokens_details"]["cached_tokens"].as_u64(),
            })),
            reasoning_tokens: usage["reasoning_tokens"].as_u64(),
            completion_tokens_details: Some(fast::Obj(fast::CompletionDetails {
                reasoning_tokens: usage["completion_tokens_details"]["reasoning_tokens"].as_u64(),
            })),
        });
        self.openai_fields(&choices, usage)
    }

    fn openai_fields(
        &mut self,
        choices: &[fast::Choice<'_>],
        usage: Option<fast::Usage>,
    ) -> (u32, u32) {
        // Whether any output arrived, and what it was: thinking, answer or a tool call.
        let mut carried = false;
        let mut seen = Seen::default();
        for choice in choices {
            match self.api {
                Api::OpenaiChat => {
                    if let Some(fast::Obj(d)) = &choice.delta {
                        let non_empty =
                            |s: &Option<Cow<'_, str>>| s.as_ref().is_some_and(|s| !s.is_empty());
                        // vLLM streams thinking as `reasoning`; SGLang and llama.cpp as
                        // `reasoning_content`: tokens too, but not the answer.
                        let thought = non_empty(&d.reasoning) || non_empty(&d.reasoning_content);
                        let called = d.tool_calls.as_ref().is_some_and(|c| !c.is_empty())
                            || d.function_call.is_some();
                        let answered = non_empty(&d.content) || non_empty(&d.refusal) || called;
                        for s in [&d.content, &d.refusal].into_iter().flatten() {
                            self.keep(s);
                        }
                        carried |= thought || answered;
                        seen = seen.merge(self.thinking.fields(Seen {
                            reasoning: thought,
                            answer: answered,
                        }));
                    }
                }
                _ => {
                    if let Some(s) = &choice.text {
                        self.keep(s);
                        carried |= !s.is_empty();
                        seen = seen.merge(self.thinking.text(s));
                    }
                }
            }
            if let Some(reason) = &choice.finish_reason {
                self.finish(reason, None);
            }
        }
        let mut usage_completion = None;
        if let Some(usage) = usage {
            usage_completion = usage.completion_tokens;
            if let Some(n) = usage.prompt_tokens {
                self.prompt_tokens = Some(n);
            }
            // Null or absent details mean "not reported" (no `--enable-cache-report`), not 0.
            self.cached_tokens = usage
                .prompt_tokens_details
                .and_then(|fast::Obj(d)| d.cached_tokens);
            // The request's thinking total (vLLM and SGLang: `completion_tokens_details`;
            // SGLang also `reasoning_tokens`, 0 when it did not count): a total, not a
            // per-chunk count.
            let total = usage
                .completion_tokens_details
                .and_then(|fast::Obj(d)| d.reasoning_tokens)
                .into_iter()
                .chain(usage.reasoning_tokens)
                .max();
            if let Some(n) = total {
                self.server_reasoning = Some(n.max(self.server_reasoning.unwrap_or(0)));
            }
        }
        let tokens = match usage_completion {
            Some(c) => {
                self.server_completion = Some(c);
                // On a chunk with choices (continuous usage) the count so far equals the
                // previous usage, so the difference is this chunk's tokens. On the usage-only
                // chunk: where every chunk's count was the server's, what is left are tokens
                // of steps that sent no chunk (SGLang's chat stream skips a step whose text
                // delta is empty, as the last one can be), known only now; where chunks were
                // taken as one token each, the counts stay as measured.
                if choices.is_empty() && self.assumed {
                    0
                } else {
                    clamp_u32(c.saturating_sub(self.counted))
                }
            }
            None => {
                self.assumed |= carried;
                u32::from(carried)
            }
        };
        (tokens, self.account(tokens, seen, None))
    }

    fn finish(&mut self, reason: &str, message: Option<String>) {
        if reason == "abort" {
            self.abort_message = Some(message.unwrap_or_else(|| "no message".into()));
        }
        self.finish_reason = Some(reason.to_string());
    }
}

/// Borrowed, strictly typed views of the fields the parser reads. Strict on purpose: a field of
/// another type than expected (or a duplicate key, or a non-object where an object is expected)
/// fails the parse, and the event takes the `Value` path, so both paths always agree.
mod fast {
    use std::borrow::Cow;
    use std::fmt;
    use std::marker::PhantomData;

    use serde::de::value::MapAccessDeserializer;
    use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

    /// A JSON object (never an array, which derived structs would accept positionally).
    pub(crate) struct Obj<T>(pub T);

    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<T>(PhantomData<T>);
            impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
                type Value = T;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                    T::deserialize(MapAccessDeserializer::new(map))
                }
            }
            d.deserialize_map(V(PhantomData)).map(Obj)
        }
    }

    /// The length of a JSON array, elements skipped.
    pub(crate) struct Count(pub usize);

    impl<'de> Deserialize<'de> for Count {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Count;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("an array")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                    let mut n = 0;
                    while seq.next_element::<IgnoredAny>()?.is_some() {
                        n += 1;
                    }
                    Ok(Count(n))
                }
            }
            d.deserialize_seq(V)
        }
    }

    /// A native finish reason: a string, or an object with `type` and `message`.
    pub(crate) enum Finish<'a> {
        Reason(Cow<'a, str>),
        Object {
            kind: Cow<'a, str>,
            message: Option<Cow<'a, str>>,
        },
    }

    #[derive(serde::Deserialize)]
    struct FinishObject<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<Cow<'a, str>>,
        #[serde(borrow)]
        message: Option<Cow<'a, str>>,
    }

    impl<'de: 'a, 'a> Deserialize<'de> for Finish<'a> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<'a>(PhantomData<&'a ()>);
            impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
                type Value = Finish<'a>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a string or an object")
                }
                fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Finish<'a>, E> {
                    Ok(Finish::Reason(Cow::Borrowed(s)))
                }
                fn visit_str<E: de::Error>(self, s: &str) -> Result<Finish<'a>, E> {
                    Ok(Finish::Reason(Cow::Owned(s.to_string())))
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Finish<'a>, A::Error> {
                    let o = FinishObject::deserialize(MapAccessDeserializer::new(map))?;
                    Ok(Finish::Object {
                        kind: o.kind.unwrap_or(Cow::Borrowed("unknown")),
                        message: o.message,
                    })
                }
            }
            d.deserialize_any(V(PhantomData))
        }
    }

    /// What the parser reads of a native event.
    pub(crate) struct NativeFields<'a> {
        pub spec_verify_ct: Option<u64>,
        /// SGLang's cumulative `meta_info.reasoning_tokens`.
        pub reasoning: Option<u64>,
        pub text: Option<Cow<'a, str>>,
        pub ids: Option<usize>,
        pub completion: Option<u64>,
        pub prompt: Option<u64>,
        pub cached: Option<u64>,
        pub finish: Option<Finish<'a>>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct NativeEvent<'a> {
        pub error: Option<IgnoredAny>,
        #[serde(borrow)]
        pub text: Option<Cow<'a, str>>,
        pub output_ids: Option<Count>,
        #[serde(borrow)]
        pub meta_info: Option<Obj<Meta<'a>>>,
    }

    #[derive(serde::Deserialize, Default)]
    pub(crate) struct Meta<'a> {
        pub first_token_latency: Option<f64>,
        pub reasoning_tokens: Option<u64>,
        pub spec_verify_ct: Option<u64>,
        pub completion_tokens: Option<u64>,
        pub prompt_tokens: Option<u64>,
        pub cached_tokens: Option<u64>,
        #[serde(borrow)]
        pub finish_reason: Option<Finish<'a>>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct OpenaiEvent<'a> {
        pub error: Option<IgnoredAny>,
        #[serde(borrow)]
        pub choices: Option<Vec<Obj<Choice<'a>>>>,
        pub usage: Option<Obj<Usage>>,
        /// llama.cpp's timings on the final chunk.
        pub timings: Option<Obj<Timings>>,
        /// SGLang's extensions: a `choices: []` chunk after the last token chunk, when the
        /// request asked (`return_spec_tokens_details`).
        pub sglext: Option<Obj<SglExt>>,
        /// vLLM's per-request metrics on the final usage chunk.
        pub metrics: Option<Obj<VllmMetrics>>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct VllmMetrics {
        /// `--per-request-spec-decode-metrics` (vLLM 0.34).
        pub speculative_decoding: Option<Obj<VllmSpec>>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct VllmSpec {
        pub num_spec_steps: Option<u64>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct SglExt {
        /// One object for one choice (a list for n > 1 takes the Value path).
        pub spec_tokens_details: Option<Obj<SpecTokensDetails>>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct SpecTokensDetails {
        pub spec_verify_ct: Option<u64>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct Timings {
        pub prompt_ms: Option<f64>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct Choice<'a> {
        #[serde(borrow)]
        pub text: Option<Cow<'a, str>>,
        #[serde(borrow)]
        pub delta: Option<Obj<Delta<'a>>>,
        #[serde(borrow)]
        pub finish_reason: Option<Cow<'a, str>>,
    }

    /// A chat delta. Unknown fields send the event to the Value path, which reports them.
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // fields known to carry no output text are listed, not read
    pub(crate) struct Delta<'a> {
        pub role: Option<IgnoredAny>,
        #[serde(borrow)]
        pub content: Option<Cow<'a, str>>,
        /// SGLang's and llama.cpp's thinking.
        #[serde(borrow)]
        pub reasoning_content: Option<Cow<'a, str>>,
        /// vLLM's thinking (`reasoning_content` renamed, vllm PRs #33402, #50624).
        #[serde(borrow)]
        pub reasoning: Option<Cow<'a, str>>,
        #[serde(borrow)]
        pub refusal: Option<Cow<'a, str>>,
        pub tool_calls: Option<Vec<IgnoredAny>>,
        pub function_call: Option<IgnoredAny>,
        pub audio: Option<IgnoredAny>,
        pub hidden_states: Option<IgnoredAny>,
        pub name: Option<IgnoredAny>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct Usage {
        pub completion_tokens: Option<u64>,
        pub prompt_tokens: Option<u64>,
        pub prompt_tokens_details: Option<Obj<Details>>,
        /// SGLang's own place for it (0 when it did not count).
        pub reasoning_tokens: Option<u64>,
        pub completion_tokens_details: Option<Obj<CompletionDetails>>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct CompletionDetails {
        pub reasoning_tokens: Option<u64>,
    }

    #[derive(serde::Deserialize)]
    pub(crate) struct Details {
        pub cached_tokens: Option<u64>,
    }
}

/// Whether a JSON value carries something: not null, not an empty string, array or object.
fn has_value(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

fn clamp_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The human message of an error value: `{"message": ..}`, a bare string, or the JSON itself.
pub(crate) fn error_message(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        _ => match error["message"].as_str() {
            Some(s) => s.to_string(),
            None => error.to_string(),
        },
    }
}

/// The server's message in a non-2xx body: `{"error":{"message"}}`, `{"message"}`,
/// `{"detail"}`, or the raw text.
pub(crate) fn http_error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
            return error_message(e);
        }
        for key in ["message", "detail"] {
            match v.get(key) {
                Some(Value::String(s)) => return s.clone(),
                Some(Value::Null) | None => {}
                Some(other) => return other.to_string(),
            }
        }
    }
    let text = head(body);
    let text = text.trim();
    if text.is_empty() {
        "(empty body)".to_string()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(p: &mut StreamParser, events: &[&str]) -> Vec<u32> {
        events
            .iter()
            .map(|e| match p.event(e.as_bytes()).unwrap() {
                Parsed::Chunk { tokens, .. } => tokens,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn the_servers_own_time_to_the_first_token_is_read_where_it_is_reported() {
        // llama.cpp: `timings.prompt_ms` on the final OpenAI chunk.
        let mut p = StreamParser::new(Api::OpenaiCompletions);
        feed(
            &mut p,
            &[
                r#"{"choices":[{"text":"a","finish_reason":null}]}"#,
                r#"{"choices":[{"text":"b","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":2},"timings":{"prompt_n":5,"prompt_ms":3.08,"predicted_ms":1.2}}"#,
            ],
        );
        assert_eq!(p.server_ttft_s, Some(3.08 / 1e3));
        // SGLang: `meta_info.first_token_latency` on the last chunk, short and long events.
        for pad in [0, 300] {
            let text = "x".repeat(pad);
            let mut p = StreamParser::new(Api::SglangGenerate);
            let last = format!(
                r#"{{"text":"{text}ab","output_ids":[1,2],"meta_info":{{"prompt_tokens":5,"completion_tokens":2,"cached_tokens":0,"finish_reason":{{"type":"length","length":2}},"e2e_latency":0.05,"first_token_latency":0.0123}}}}"#
            );
            feed(&mut p, &[&last]);
            assert_eq!(p.server_ttft_s, Some(0.0123), "pad {pad}");
        }
        // Nothing reported, or nonsense: nothing kept.
        let mut p = StreamParser::new(Api::OpenaiCompletions);
        feed(
            &mut p,
            &[r#"{"choices":[{"text":"a","finish_reason":"stop"}],"timings":{"prompt_ms":-1}}"#],
        );
        assert_eq!(p.server_ttft_s, None);
    }

    #[test]
    fn sglang_verify_steps_are_read_from_the_final_meta_info() {
        // Short events take the Value path, long ones the meta_info shortcut: same count.
        for pad in [0, 300] {
            let text = "x".repeat(pad);
            let mut p = StreamParser::new(Api::SglangGenerate);
            let first = format!(
                r#"{{"text":"{text}a","output_ids":[1],"meta_info":{{"prompt_tokens":5,"completion_tokens":1,"cached_tokens":0,"finish_reason":null}}}}"#
            );
            let last = format!(
                r#"{{"text":"{text}abcd","output_ids":[1,2,3,4],"meta_info":{{"prompt_tokens":5,"completion_tokens":4,"cached_tokens":0,"finish_reason":{{"type":"length","length":4}},"spec_accept_rate":0.66,"spec_accept_length":4.0,"spec_verify_ct":1}}}}"#
            );
            feed(&mut p, &[&first]);
            assert_eq!(p.spec_verify_ct, None, "pad {pad}");
            feed(&mut p, &[&last]);
            assert_eq!(p.spec_verify_ct, Some(1), "pad {pad}");
        }
    }

    #[test]
    fn sglang_openai_verify_steps_are_read_from_the_sglext_chunk() {
        // serving_completions.py / serving_chat.py (0.5.23): after the last token chunk, a
        // `choices: []` chunk with `sglext.spec_tokens_details`, then the usage chunk.
        let details = r#"{"spec_accept_rate":0.5,"spec_accept_length":2.5,"spec_cap_length":0.0,"spec_block_accept_length":0.0,"spec_num_correct_drafts":3,"spec_num_proposed_drafts":6,"spec_verify_ct":2,"spec_correct_drafts_histogram":[],"spec_cap_lens_histogram":[]}"#;
        for (api, token) in [
            (
                Api::OpenaiCompletions,
                r#"{"id":"r","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"abcde","logprobs":null,"finish_reason":"length","matched_stop":null}],"usage":null}"#,
            ),
            (
                Api::OpenaiChat,
                r#"{"id":"r","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"abcde"},"finish_reason":"length"}]}"#,
            ),
        ] {
            let object = if api == Api::OpenaiChat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            };
            let sglext = format!(
                r#"{{"id":"r","object":"{object}","created":1,"model":"m","choices":[],"usage":null,"sglext":{{"spec_tokens_details":{details}}}}}"#
            );
            let listed = format!(
                r#"{{"id":"r","object":"{object}","created":1,"model":"m","choices":[],"usage":null,"sglext":{{"spec_tokens_details":[{details}]}}}}"#
            );
            for ext in [&sglext, &listed] {
                let mut p = StreamParser::new(api);
                assert_eq!(feed(&mut p, &[token]), vec![1]);
                assert_eq!(p.spec_verify_ct, None);
                assert_eq!(feed(&mut p, &[ext]), vec![0], "{api:?}");
                assert_eq!(p.spec_verify_ct, Some(2), "{api:?} {ext}");
            }
        }
    }

    #[test]
    fn native_cumulative_with_unchanged_text() {
        let mut p = StreamParser::new(Api::SglangGenerate);
        let tokens = feed(
            &mut p,
            &[
                r#"{"text":"a","output_ids":[1],"meta_info":{"prompt_tokens":5,"completion_tokens":1,"cached_tokens":2,"finish_reason":null}}"#,
                r#"{"text":"a","output_ids":[1,2],"meta_info":{"prompt_tokens":5,"completion_tokens":2,"cached_tokens":2,"finish_reason":null}}"#,
                r#"{"text":"abcd","output_ids":[1,2,3,4,5],"meta_info":{"prompt_tokens":5,"completion_tokens":5,"cached_tokens":2,"finish_reason":{"type":"length","length":5}}}"#,
            ],
        );
        assert_eq!(tokens, [1, 1, 3]);
        assert_eq!(p.text, "abcd");
        assert_eq!(p.completion_tokens(), 5);
        assert_eq!(p.token_source(), TokenSource::MetaInfo);
        assert_eq!(p.chunk_tokens(), ChunkTokens::Exact);
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
        assert_eq!((p.prompt_tokens, p.cached_tokens), (Some(5), Some(2)));
    }

    #[test]
    fn long_cumulative_events_take_the_meta_info_shortcut_with_the_same_counts() {
        let long_text = "word ".repeat(400);
        let ids: Vec<String> = (0..300).map(|i| i.to_string()).collect();
        let event = |n: u64, finish: &str| {
            format!(
                r#"{{"text":"{long_text}\"meta_info\": x","output_ids":[{}],"meta_info":{{"id":"a","finish_reason":{finish},"prompt_tokens":9,"completion_tokens":{n},"cached_tokens":2}}}}"#,
                ids[..n as usize].join(",")
            )
        };
        let mut p = StreamParser::new(Api::SglangGenerate);
        assert!(matches!(
            p.event(event(1, "null").as_bytes()),
            Ok(Parsed::Chunk { tokens: 1, .. })
        ));
        assert!(matches!(
            p.event(event(4, "null").as_bytes()),
            Ok(Parsed::Chunk { tokens: 3, .. })
        ));
        assert!(matches!(
            p.event(event(5, r#"{"type":"length","length":5}"#).as_bytes()),
            Ok(Parsed::Chunk { tokens: 1, .. })
        ));
        assert_eq!(p.completion_tokens(), 5);
        assert_eq!(p.prompt_tokens, Some(9));
        assert_eq!(p.cached_tokens, Some(2));
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
        // A long event cut short, or one with an error, still takes the full path.
        let cut = event(6, "null");
        assert!(p.event(&cut.as_bytes()[..cut.len() - 1]).is_err());
        let err = format!(r#"{{"error":{{"message":"{long_text}"}}}}"#);
        assert!(matches!(p.event(err.as_bytes()), Ok(Parsed::Error { .. })));
    }

    #[test]
    fn native_incremental() {
        let mut p = StreamParser::new(Api::SglangGenerate);
        let tokens = feed(
            &mut p,
            &[
                r#"{"text":"ab","output_ids":[1,2],"meta_info":{"completion_tokens":2}}"#,
                r#"{"text":"ab","output_ids":[3],"meta_info":{"completion_tokens":3}}"#,
            ],
        );
        assert_eq!(tokens, [2, 1]);
        assert_eq!(p.text, "abab");
    }

    #[test]
    fn openai_continuous_usage() {
        let mut p = StreamParser::new(Api::OpenaiCompletions);
        let tokens = feed(
            &mut p,
            &[
                r#"{"choices":[{"text":"ab"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#,
                r#"{"choices":[{"text":"c","finish_reason":"length"}],"usage":{"prompt_tokens":4,"completion_tokens":3}}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":1}}}"#,
            ],
        );
        assert_eq!(tokens, [2, 1, 0]);
        assert_eq!((p.completion_tokens(), p.cached_tokens), (3, Some(1)));
        assert_eq!(p.token_source(), TokenSource::Usage);
        assert_eq!(p.chunk_tokens(), ChunkTokens::Exact);
    }

    /// SGLang 0.5.23's chat stream yields no chunk for a step whose text delta is empty
    /// (serving_chat.py: `if delta:`), so the last step's token can reach the client only in
    /// the final usage chunk's count.
    #[test]
    fn chat_continuous_usage_counts_a_step_that_sent_no_chunk_on_the_usage_chunk() {
        let mut p = StreamParser::new(Api::OpenaiChat);
        let tokens = feed(
            &mut p,
            &[
                r#"{"choices":[{"delta":{"role":"assistant","content":""}}],"usage":null}"#,
                r#"{"choices":[{"delta":{"content":"ab"}}],"usage":{"prompt_tokens":4,"completion_tokens":1}}"#,
                r#"{"choices":[{"delta":{"content":"c"}}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#,
                r#"{"choices":[{"delta":{},"finish_reason":"length"}],"usage":null}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3}}"#,
            ],
        );
        assert_eq!(tokens, [0, 1, 1, 0, 1]);
        assert_eq!(tokens.iter().map(|t| u64::from(*t)).sum::<u64>(), 3);
        assert_eq!(p.completion_tokens(), 3);
        assert_eq!(p.chunk_tokens(), ChunkTokens::Exact);
    }

    #[test]
    fn openai_final_usage_only_assumes_one_token_per_chunk() {
        let mut p = StreamParser::new(Api::OpenaiCompletions);
        let tokens = feed(
            &mut p,
            &[
                r#"{"choices":[{"text":"abc"}],"usage":null}"#,
                r#"{"choices":[{"text":"de","finish_reason":"length"}],"usage":null}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":5}}"#,
            ],
        );
        assert_eq!(tokens, [1, 1, 0]);
        assert_eq!(p.completion_tokens(), 5);
        assert_eq!(p.chunk_tokens(), ChunkTokens::AssumedOne);
    }

    #[test]
    fn chat_without_usage_counts_chunks() {
        let mut p = StreamParser::new(Api::OpenaiChat);
        let tokens = feed(
            &mut p,
            &[
                r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
                r#"{"choices":[{"delta":{"content":"x"}}]}"#,
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
            ],
        );
        assert_eq!(tokens, [0, 1, 0]);
        assert_eq!(p.token_source(), TokenSource::ChunkCount);
        assert_eq!(p.completion_tokens(), 1);
    }

    /// Each chunk's (tokens, thinking tokens).
    fn feed_split(p: &mut StreamParser, events: &[&str]) -> Vec<(u32, u32)> {
        events
            .iter()
            .map(|e| match p.event(e.as_bytes()).unwrap() {
                Parsed::Chunk { tokens, reasoning } => (tokens, reasoning),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    /// vLLM (current) streams thinking as `delta.reasoning`, SGLang 0.5.23 and llama.cpp as
    /// `delta.reasoning_content`: both are output tokens, thinking ones, on both parse paths
    /// (a `\u` escape sends an event down the Value path).
    #[test]
    fn thinking_is_read_from_both_chat_fields_on_both_paths() {
        for field in ["reasoning", "reasoning_content"] {
            for escape in ["", "\\u0041"] {
                let mut p = StreamParser::new(Api::OpenaiChat);
                let think = format!(r#"{{"choices":[{{"delta":{{"{field}":"hm{escape}"}}}}]}}"#);
                let answer = format!(r#"{{"choices":[{{"delta":{{"content":"42{escape}"}}}}]}}"#);
                let got = feed_split(
                    &mut p,
                    &[
                        r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
                        &think,
                        &think,
                        &answer,
                        r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"completion_tokens_details":{"reasoning_tokens":2}}}"#,
                    ],
                );
                assert_eq!(
                    got,
                    [(0, 0), (1, 1), (1, 1), (1, 0), (0, 0)],
                    "{field} {escape}"
                );
                assert_eq!(
                    p.reasoning_tokens(),
                    Some((
                        2,
                        servebench_model::results::records::ReasoningSource::Server
                    ))
                );
                assert_eq!(p.no_answer(), None);
                // The kept text is the answer, not the thinking.
                assert!(p.text.starts_with("42"), "{}", p.text);
                assert!(p.unknown_fields.is_empty());
            }
        }
    }

    /// A tool call's pieces are output tokens of the answer (TTFT and TTFA count them), and
    /// are assembled into the call, on the Value path as on the fast one.
    #[test]
    fn streamed_tool_call_pieces_are_answer_tokens_and_assembled() {
        let mut p = StreamParser::new(Api::OpenaiChat);
        let events = [
            r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\": "}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ];
        let got: Vec<(u32, u32)> = events
            .iter()
            .map(|e| match p.event(e.as_bytes()).unwrap() {
                Parsed::Chunk { tokens, reasoning } => (tokens, reasoning),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(got, [(1, 1), (1, 0), (1, 0), (1, 0), (0, 0)]);
        assert_eq!(p.no_answer(), None);
        let tools = [
            serde_json::json!({"type": "function", "function": {"name": "f",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}},
                           "required": ["a"]}}}),
        ];
        let j = p.tool_calls.judge(&tools);
        assert_eq!((j.count, j.valid), (1, Some(true)), "{j:?}");
    }

    #[test]
    fn a_request_that_ran_out_while_thinking_says_so() {
        let mut p = StreamParser::new(Api::OpenaiChat);
        feed(
            &mut p,
            &[
                r#"{"choices":[{"delta":{"reasoning":"hm"}}]}"#,
                r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#,
            ],
        );
        assert_eq!(
            p.no_answer(),
            Some(servebench_model::results::records::NoAnswer::OutOfTokensWhileThinking)
        );
        assert_eq!(
            p.reasoning_tokens(),
            Some((
                1,
                servebench_model::results::records::ReasoningSource::Chunks
            ))
        );
    }

    /// llama.cpp's shape (a chunk a token, no per-chunk counts, no reasoning count in its
    /// usage): its thinking markers and end-of-sequence token are in `completion_tokens` and
    /// in no chunk. As the real llama-server streams the tier's thinking model (`<think>`, 3
    /// words, `</think>`, 2 words, EOS): 5 thinking tokens and 3 answer tokens, as SGLang
    /// counts the same; unanswered, every token was thinking.
    #[test]
    fn silent_marker_tokens_are_thinking_where_chunks_carry_no_counts() {
        use servebench_model::results::records::ReasoningSource::Chunks;
        let think = r#"{"choices":[{"delta":{"reasoning_content":" hm"}}]}"#;
        let answer = r#"{"choices":[{"delta":{"content":" a"}}]}"#;
        let mut p = StreamParser::new(Api::OpenaiChat);
        feed(
            &mut p,
            &[
                r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#,
                think,
                think,
                think,
                answer,
                answer,
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
                r#"{"choices":[],"usage":{"completion_tokens":8,"prompt_tokens":9}}"#,
            ],
        );
        assert_eq!(p.chunk_tokens(), ChunkTokens::AssumedOne);
        assert_eq!(p.reasoning_tokens(), Some((5, Chunks)));
        let mut p = StreamParser::new(Api::OpenaiChat);
        feed(
            &mut p,
            &[
                think,
                think,
                r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#,
                r#"{"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":9}}"#,
            ],
        );
        assert_eq!(p.reasoning_tokens(), Some((3, Chunks)));
    }

    /// Several tokens to a chunk (speculative decoding) on a server without per-chunk counts:
    /// the silent tokens beyond the two markers are not all charged to the thinking. Three
    /// thinking and three answer chunks of two tokens each, two markers and EOS: 15 tokens, 8
    /// of them thinking.
    #[test]
    fn tokens_several_to_a_chunk_are_split_as_the_phases_chunks_were() {
        use servebench_model::results::records::ReasoningSource::Chunks;
        let think = r#"{"choices":[{"delta":{"reasoning_content":" hm hm"}}]}"#;
        let answer = r#"{"choices":[{"delta":{"content":" a a"}}]}"#;
        let mut p = StreamParser::new(Api::OpenaiChat);
        feed(
            &mut p,
            &[
                think,
                think,
                think,
                answer,
                answer,
                answer,
                r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
                r#"{"choices":[],"usage":{"completion_tokens":15,"prompt_tokens":9}}"#,
            ],
        );
        assert_eq!(p.reasoning_tokens(), Some((8, Chunks)));
    }

    #[test]
    fn a_delta_field_servebench_does_not_know_is_reported_not_dropped() {
        let mut p = StreamParser::new(Api::OpenaiChat);
        let got = feed_split(
            &mut p,
            &[
                r#"{"choices":[{"delta":{"thinking":"hm"}}]}"#,
                r#"{"choices":[{"delta":{"content":"a","thinking":null}}]}"#,
            ],
        );
        assert_eq!(got, [(0, 0), (1, 0)]);
        assert_eq!(p.unknown_fields, ["delta.thinking"]);
    }

    /// SGLang's `/generate` with a reasoning parser: thinking found by the parser's markers in
    /// the raw text, cumulative or not; `meta_info.reasoning_tokens` (the server's count)
    /// wins as the total.
    #[test]
    fn native_thinking_is_found_by_the_launched_parsers_markers() {
        let markers = match servebench_model::spec::reasoning::sglang_parser("qwen3") {
            servebench_model::spec::reasoning::ParserKnowledge::Markers(m) => m,
            other => panic!("{other:?}"),
        };
        let ev = |text: &str, n: u64, r: u64| {
            format!(
                r#"{{"text":"{text}","meta_info":{{"prompt_tokens":5,"completion_tokens":{n},"reasoning_tokens":{r},"finish_reason":null}}}}"#
            )
        };
        let mut p = StreamParser::new(Api::SglangGenerate).with_markers(Some(markers));
        let got = feed_split(
            &mut p,
            &[
                &ev("<think>", 1, 1),
                &ev("<think>hm", 2, 2),
                &ev("<think>hm</think>", 3, 3),
                &ev("<think>hm</think>Paris", 4, 3),
            ],
        );
        assert_eq!(got, [(1, 1), (1, 1), (1, 1), (1, 0)]);
        assert_eq!(
            p.reasoning_tokens(),
            Some((
                3,
                servebench_model::results::records::ReasoningSource::Server
            ))
        );
        // Without markers, the server's per-event count tells them apart.
        let mut p = StreamParser::new(Api::SglangGenerate);
        let got = feed_split(&mut p, &[&ev("a", 1, 1), &ev("ab", 3, 2)]);
        assert_eq!(got, [(1, 1), (2, 1)]);
    }

    /// A server streaming huge text events cannot grow the kept text past its bound
    /// (issue 35 item 10a: 512 KB events took the runner to 2.25 GB).
    #[test]
    fn the_kept_text_is_bounded_whatever_the_server_streams() {
        let big = "x".repeat(512 * 1024);
        for api in [Api::OpenaiCompletions, Api::OpenaiChat, Api::SglangGenerate] {
            // `/generate` with `--incremental-streaming-output`: each event its new text.
            let event = |n: usize| match api {
                Api::OpenaiCompletions => format!(r#"{{"choices":[{{"text":"{big}"}}]}}"#),
                Api::OpenaiChat => {
                    format!(r#"{{"choices":[{{"delta":{{"content":"{big}"}}}}]}}"#)
                }
                Api::SglangGenerate => format!(
                    r#"{{"text":"{big}","output_ids":[1],"meta_info":{{"completion_tokens":{n}}}}}"#
                ),
            };
            let mut p = StreamParser::new(api).keeping_text(true);
            for n in 1..=20 {
                p.event(event(n).as_bytes()).unwrap();
            }
            assert!(p.text.len() <= TEXT_KEPT_BYTES, "{api:?}: {}", p.text.len());
            assert!(p.text_cut, "{api:?}");
            assert_eq!(p.completion_tokens(), 20, "{api:?}");
        }
    }

    /// vLLM 0.34 `--per-request-spec-decode-metrics`: the final usage chunk's
    /// `metrics.speculative_decoding.num_spec_steps` is the request's verify steps.
    #[test]
    fn vllm_per_request_verify_steps_are_read_from_the_final_usage_chunk() {
        let last = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4,"total_tokens":9,"completion_tokens":5},"metrics":{"speculative_decoding":{"mean_acceptance_length":2.0,"draft_acceptance_rate":0.5,"acceptance_histogram":[1,1,0],"num_spec_steps":2,"num_accepted_draft_tokens":2,"num_draft_tokens":4,"num_spec_tokens":2}}}"#;
        for escape in [false, true] {
            let mut p = StreamParser::new(Api::OpenaiChat);
            let last = if escape {
                last.replace(r#""m""#, r#""\u006d""#)
            } else {
                last.to_string()
            };
            feed(&mut p, &[&last]);
            assert_eq!(p.spec_verify_ct, Some(2), "escape {escape}");
        }
    }

    #[test]
    fn error_and_malformed_events() {
        let mut p = StreamParser::new(Api::SglangGenerate);
        assert!(matches!(
            p.event(br#"{"error":{"message":"too long"}}"#).unwrap(),
            Parsed::Error { message, .. } if message == "too long"
        ));
        assert!(p.event(b"{not json").is_err());
        assert!(p.event(b"[1]").is_err());
        assert_eq!(p.event(b" [DONE] ").unwrap(), Parsed::Done);
    }

    #[test]
    fn http_messages() {
        assert_eq!(http_error_message(br#"{"error":{"message":"m1"}}"#), "m1");
        assert_eq!(
            http_error_message(br#"{"object":"error","message":"m2","code":400}"#),
            "m2"
        );
        assert_eq!(http_error_message(br#"{"detail":"m3"}"#), "m3");
        assert_eq!(http_error_message(b"plain\n"), "plain");
        assert_eq!(http_error_message(b""), "(empty body)");
    }
}
