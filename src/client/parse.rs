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

use serde_json::Value;

use crate::results::records::TokenSource;
use crate::spec::types::Api;

use super::sse::head;

/// What one event meant.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// A data chunk carrying `tokens` new output tokens (possibly 0).
    Chunk { tokens: u32 },
    /// `[DONE]`: the stream ended normally.
    Done,
    /// An `{"error": ...}` event: the server failed the request mid-stream.
    Error { message: String, head: String },
}

/// An event that is not valid JSON of the expected shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub message: String,
    /// The first 200 bytes of the event's data.
    pub head: String,
}

/// Running state of one response stream.
#[derive(Debug)]
pub struct StreamParser {
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
    /// Latest cumulative completion count from the server (meta_info or usage).
    server_completion: Option<u64>,
    /// Sum of per-chunk token counts.
    counted: u64,
}

impl StreamParser {
    /// A parser for a response of `api`.
    pub fn new(api: Api) -> StreamParser {
        StreamParser {
            api,
            text: String::new(),
            prompt_tokens: None,
            cached_tokens: None,
            finish_reason: None,
            abort_message: None,
            server_completion: None,
            counted: 0,
        }
    }

    /// Interprets one event's data.
    pub fn event(&mut self, data: &[u8]) -> Result<Parsed, Malformed> {
        if data.trim_ascii() == b"[DONE]" {
            return Ok(Parsed::Done);
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
        let tokens = match self.api {
            Api::SglangGenerate => self.native(&value),
            Api::OpenaiCompletions | Api::OpenaiChat => self.openai(&value),
        };
        self.counted += u64::from(tokens);
        Ok(Parsed::Chunk { tokens })
    }

    /// Where the token counts came from.
    pub fn token_source(&self) -> TokenSource {
        match (self.server_completion, self.api) {
            (None, _) => TokenSource::ChunkCount,
            (Some(_), Api::SglangGenerate) => TokenSource::MetaInfo,
            (Some(_), _) => TokenSource::Usage,
        }
    }

    /// Output tokens: the server's count when it gave one, else the sum of per-chunk counts.
    pub fn completion_tokens(&self) -> u64 {
        self.server_completion.unwrap_or(self.counted)
    }

    fn native(&mut self, v: &Value) -> u32 {
        let meta = &v["meta_info"];
        let completion = meta["completion_tokens"].as_u64();
        let text_changed = match v["text"].as_str() {
            Some(t) => {
                self.take_native_text(t, v["output_ids"].as_array().map(Vec::len), completion)
            }
            None => false,
        };
        if let Some(n) = meta["prompt_tokens"].as_u64() {
            self.prompt_tokens = Some(n);
        }
        if let Some(n) = meta["cached_tokens"].as_u64() {
            self.cached_tokens = Some(n);
        }
        match &meta["finish_reason"] {
            Value::Null => {}
            Value::String(s) => self.finish(s, None),
            reason => {
                let kind = reason["type"].as_str().unwrap_or("unknown").to_string();
                let message = reason["message"].as_str().map(str::to_string);
                self.finish(&kind, message);
            }
        }
        match completion {
            Some(c) => {
                let new = c.saturating_sub(self.server_completion.unwrap_or(0));
                self.server_completion = Some(c.max(self.server_completion.unwrap_or(0)));
                clamp_u32(new)
            }
            None => u32::from(text_changed),
        }
    }

    /// Appends a native chunk's text, cumulative (the default) or incremental
    /// (`--incremental-streaming-output`). Returns whether new text arrived.
    fn take_native_text(&mut self, t: &str, ids: Option<usize>, completion: Option<u64>) -> bool {
        // `output_ids` follows the same mode as `text`: the full list in cumulative mode, so its
        // length equals the cumulative count. Without it, cumulative text extends the previous one.
        let cumulative = match (ids, completion) {
            (Some(n), Some(c)) => n as u64 == c,
            _ => t.starts_with(&self.text),
        };
        if cumulative {
            let changed = t != self.text;
            self.text.clear();
            self.text.push_str(t);
            changed
        } else {
            self.text.push_str(t);
            !t.is_empty()
        }
    }

    fn openai(&mut self, v: &Value) -> u32 {
        let choices = v["choices"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut delta = String::new();
        for choice in choices {
            match self.api {
                Api::OpenaiChat => {
                    // Reasoning models stream their thinking as `reasoning_content`: tokens too.
                    for key in ["reasoning_content", "content"] {
                        if let Some(s) = choice["delta"][key].as_str() {
                            delta.push_str(s);
                        }
                    }
                }
                _ => {
                    if let Some(s) = choice["text"].as_str() {
                        delta.push_str(s);
                    }
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish(reason, None);
            }
        }
        self.text.push_str(&delta);
        let usage = &v["usage"];
        let usage_completion = usage["completion_tokens"].as_u64();
        if let Some(n) = usage["prompt_tokens"].as_u64() {
            self.prompt_tokens = Some(n);
        }
        if usage.is_object() {
            // Null or absent details mean "not reported" (no `--enable-cache-report`), not 0.
            self.cached_tokens = usage["prompt_tokens_details"]["cached_tokens"].as_u64();
        }
        match usage_completion {
            Some(c) => {
                self.server_completion = Some(c);
                // On the usage-only chunk the tokens were already counted from the chunks. On a
                // chunk with choices (continuous usage) the count so far equals the previous
                // usage, so the difference is this chunk's tokens.
                if choices.is_empty() {
                    0
                } else {
                    clamp_u32(c.saturating_sub(self.counted))
                }
            }
            None => u32::from(!delta.is_empty()),
        }
    }

    fn finish(&mut self, reason: &str, message: Option<String>) {
        if reason == "abort" {
            self.abort_message = Some(message.unwrap_or_else(|| "no message".into()));
        }
        self.finish_reason = Some(reason.to_string());
    }
}

fn clamp_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The human message of an error value: `{"message": ..}`, a bare string, or the JSON itself.
pub fn error_message(error: &Value) -> String {
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
pub fn http_error_message(body: &[u8]) -> String {
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
                Parsed::Chunk { tokens } => tokens,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
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
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
        assert_eq!((p.prompt_tokens, p.cached_tokens), (Some(5), Some(2)));
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
