//! Fuzz targets for servebench's untrusted inputs: the spec loader, the SSE framer, the
//! stream parser behind each API, and a differential target that renders one logical token
//! stream in every API's wire format and checks all parse paths agree.
//!
//! Each target takes arbitrary bytes and panics when an invariant breaks. Two drivers run
//! them: cargo-fuzz (`fuzz/fuzz_targets/*.rs`, with libFuzzer) and the bounded, deterministic
//! run in the normal test suite (`tests/fuzz.rs`, which includes this file), both over the
//! checked-in corpus in `fuzz/corpus/<target>/`.

use std::time::Instant;

use servebench::client::{HEAD_BYTES, SseEvent, SseFramer, replay_stream};
use servebench_model::spec::types::Api;

/// A fuzz target: panics when an invariant breaks.
pub type Target = fn(&[u8]);

/// The targets, by the name of their corpus folder.
pub const TARGETS: &[(&str, Target)] = &[
    ("spec_load", spec_load),
    ("sse_framer", sse_framer),
    ("stream_parse", stream_parse),
    ("stream_differential", stream_differential),
];

/// The three APIs whose streams the client parses.
pub const APIS: [Api; 3] = [Api::SglangGenerate, Api::OpenaiCompletions, Api::OpenaiChat];

/// A small deterministic generator (SplitMix64): the same input always splits the same way.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded from bytes (FNV-1a), so a fuzz input decides its own read boundaries.
    pub fn from_bytes(bytes: &[u8]) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng(h)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

/// `bytes` cut into reads at random offsets (some empty, some single bytes, some long).
pub fn split<'a>(bytes: &'a [u8], rng: &mut Rng) -> Vec<&'a [u8]> {
    let mut reads = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len = match rng.below(4) {
            0 => 0,
            1 => 1,
            2 => rng.below(16),
            _ => rng.below(bytes.len() - at + 1),
        };
        let end = (at + len).min(bytes.len());
        reads.push(&bytes[at..end]);
        at = end;
    }
    reads
}

// ---- the spec loader ----

/// Any text loads or fails with positioned, bounded diagnostics; never panics.
pub fn spec_load(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Err(errors) = servebench_model::spec::load_str("fuzz.yaml", &text) else {
        return;
    };
    let max = servebench_model::spec::diagnostics::MAX_DIAGNOSTICS;
    assert!(
        !errors.diagnostics.is_empty(),
        "failed without a diagnostic"
    );
    assert!(
        errors.diagnostics.len() <= max,
        "{} diagnostics",
        errors.diagnostics.len()
    );
    for d in &errors.diagnostics {
        assert!(d.line >= 1 && d.column >= 1, "no position: {d:?}");
        assert!(!d.message.trim().is_empty(), "no message: {d:?}");
    }
    // An error never echoes a huge input: each one is a few lines of bounded width.
    let rendered = errors.to_string();
    assert!(
        rendered.len() <= max * 4 * 1024,
        "{} bytes of errors for {} bytes of input",
        rendered.len(),
        data.len()
    );
}

// ---- the SSE framer ----

/// Frames `reads` until the first malformed line: the events, then the error's head if any.
fn frame(reads: &[&[u8]]) -> (Vec<Vec<u8>>, Option<String>) {
    let now = Instant::now();
    let mut framer = SseFramer::new();
    let mut events: Vec<Vec<u8>> = Vec::new();
    let data = |e: SseEvent| e.data;
    for read in reads {
        match framer.feed(read, now) {
            Ok(evs) => events.extend(evs.into_iter().map(data)),
            Err(bad) => return (events, Some(bad.head)),
        }
    }
    match framer.finish() {
        Ok(last) => events.extend(last.map(data)),
        Err(bad) => return (events, Some(bad.head)),
    }
    (events, None)
}

/// Framing never panics, never makes more than it was given, and does not depend on where
/// the network cut the body: one read or many give the same events and the same error.
pub fn sse_framer(data: &[u8]) {
    let (whole, whole_err) = frame(&[data]);
    let mut rng = Rng::from_bytes(data);
    let (events, err) = frame(&split(data, &mut rng));
    let total: usize = events.iter().map(Vec::len).sum();
    assert!(
        total <= data.len(),
        "{total} bytes of events from {} bytes",
        data.len()
    );
    for head in [&err, &whole_err].into_iter().flatten() {
        // HEAD_BYTES of the line, with invalid UTF-8 replaced (3 bytes each) and a mark.
        assert!(
            head.len() <= HEAD_BYTES * 3 + 8,
            "head of {} bytes",
            head.len()
        );
    }
    assert_eq!(err, whole_err, "the error depends on the read boundaries");
    if err.is_none() {
        assert_eq!(events, whole, "the events depend on the read boundaries");
    }
}

// ---- the stream parser, per API ----

/// What a parse gives that does not depend on timing.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Tokens of each chunk, in order.
    pub chunk_tokens: Vec<u32>,
    pub completion_tokens: Option<u64>,
    pub prompt_tokens: Option<u64>,
    pub finish_reason: Option<String>,
    /// The error's kind, as it is written in records.
    pub error: Option<String>,
}

/// Parses `reads` as a streamed response of `api`.
pub fn parse(api: Api, reads: &[&[u8]]) -> Outcome {
    let m = replay_stream(api, reads.iter().copied());
    Outcome {
        chunk_tokens: m.chunks.iter().map(|c| c.tokens).collect(),
        completion_tokens: m.completion_tokens,
        prompt_tokens: m.prompt_tokens,
        finish_reason: m.finish_reason.clone(),
        error: m.error.as_ref().map(|e| e.kind.to_string()),
    }
}

/// Any body, for every API: no panic, at most one chunk per event, text no longer than the
/// body, and the same outcome however the body was cut into reads (unless it fails: a read
/// that completes good events and a malformed line drops those events, so only the error's
/// kind is compared then).
pub fn stream_parse(data: &[u8]) {
    let mut rng = Rng::from_bytes(data);
    let reads = split(data, &mut rng);
    let lines = data.iter().filter(|b| **b == b'\n').count();
    for api in APIS {
        let m = replay_stream(api, reads.iter().copied());
        assert!(
            m.chunks.len() <= lines,
            "{} chunks from {lines} lines",
            m.chunks.len()
        );
        assert!(m.text.len() <= data.len(), "{} bytes of text", m.text.len());
        if let Some(e) = &m.error {
            assert!(
                e.message.len() <= 4 * 1024,
                "{} bytes of error",
                e.message.len()
            );
        }
        let split_outcome = parse(api, &reads);
        let whole = parse(api, &[data]);
        if whole.error.is_none() && split_outcome.error.is_none() {
            assert_eq!(
                split_outcome, whole,
                "{api:?}: depends on the read boundaries"
            );
        } else {
            assert_eq!(split_outcome.error, whole.error, "{api:?}: errors differ");
        }
    }
}

// ---- the differential target ----

/// A logical stream: what the server generated, independent of any wire format.
#[derive(Debug, Clone)]
pub struct Logical {
    /// Each chunk's text and how many tokens it carries (at least 1).
    pub chunks: Vec<(String, u64)>,
    pub prompt_tokens: u64,
    /// `stop` or `length`.
    pub finish: &'static str,
}

const PIECES: [&str; 12] = [
    " the",
    " server",
    "é",
    "\"quoted\"",
    "\\",
    "\n",
    "",
    " 世界",
    "\u{1F600}",
    "}",
    " {\"a\":",
    "\t",
];

impl Logical {
    /// Decodes a stream from bytes: libFuzzer explores the streams themselves.
    pub fn from_bytes(data: &[u8]) -> Logical {
        let mut bytes = data.iter().copied();
        let mut next = || bytes.next().unwrap_or(0);
        let n = usize::from(next() % 16) + 1;
        let prompt_tokens = u64::from(next()) * 37 + 1;
        let finish = if next() % 2 == 0 { "stop" } else { "length" };
        let chunks = (0..n)
            .map(|_| {
                let tokens = u64::from(next() % 5) + 1;
                // Some chunks long enough for the cumulative fast path (256-byte events).
                let repeat = if next() % 4 == 0 { 24 } else { 1 };
                let text: String = (0..tokens)
                    .map(|_| PIECES[usize::from(next()) % PIECES.len()])
                    .collect::<String>()
                    .repeat(repeat);
                (text, tokens)
            })
            .collect();
        Logical {
            chunks,
            prompt_tokens,
            finish,
        }
    }

    pub fn total_tokens(&self) -> u64 {
        self.chunks.iter().map(|(_, n)| n).sum()
    }
}

/// How a stream is written on the wire, beyond its API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As servers send it.
    Plain,
    /// Every event carries an extra field with a `\u` escape: the parser's borrowed fast path
    /// declines such events, so they take its `Value` path.
    Escaped,
    /// `/generate` only: `meta_info` first instead of last, so the cumulative fast path (which
    /// reads only a trailing `meta_info`) declines.
    MetaFirst,
}

/// A way to render a stream: API, cumulative or incremental text (`/generate`), encoding.
#[derive(Debug, Clone, Copy)]
pub struct Format {
    pub api: Api,
    pub cumulative: bool,
    pub encoding: Encoding,
}

/// Every format the differential compares.
pub fn formats() -> Vec<Format> {
    let mut out = Vec::new();
    for cumulative in [true, false] {
        for encoding in [Encoding::Plain, Encoding::Escaped, Encoding::MetaFirst] {
            out.push(Format {
                api: Api::SglangGenerate,
                cumulative,
                encoding,
            });
        }
    }
    for api in [Api::OpenaiCompletions, Api::OpenaiChat] {
        for encoding in [Encoding::Plain, Encoding::Escaped] {
            out.push(Format {
                api,
                cumulative: false,
                encoding,
            });
        }
    }
    out
}

fn event(body: &mut Vec<u8>, json: &str, encoding: Encoding) {
    body.extend_from_slice(b"data: ");
    if encoding == Encoding::Escaped {
        // Before the closing brace: `{..., "x": "\u0041"}`.
        let open = json.strip_suffix('}').expect("an object");
        let sep = if open.ends_with('{') { "" } else { "," };
        body.extend_from_slice(format!("{open}{sep}\"x\":\"\\u0041\"}}").as_bytes());
    } else {
        body.extend_from_slice(json.as_bytes());
    }
    body.extend_from_slice(b"\n\n");
}

/// The stream as `format`'s server would send it, ending with `[DONE]`.
pub fn render(s: &Logical, format: Format) -> Vec<u8> {
    use serde_json::json;
    let mut body = Vec::new();
    let last = s.chunks.len() - 1;
    let mut text = String::new();
    let mut ids: Vec<u64> = Vec::new();
    let mut done: u64 = 0;
    if format.api == Api::OpenaiChat {
        let role = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}], "usage": null});
        event(&mut body, &role.to_string(), format.encoding);
    }
    for (i, (piece, n)) in s.chunks.iter().enumerate() {
        done += n;
        text.push_str(piece);
        ids.extend((0..*n).map(|k| 1000 + done + k));
        let finish = (i == last).then_some(s.finish);
        let json = match format.api {
            Api::SglangGenerate => {
                let finish = finish.map(|f| json!({"type": f}));
                let meta = json!({"prompt_tokens": s.prompt_tokens, "completion_tokens": done, "cached_tokens": 0, "finish_reason": finish});
                let (t, o) = if format.cumulative {
                    (json!(text), json!(ids))
                } else {
                    (json!(piece), json!(ids[ids.len() - *n as usize..]))
                };
                // serde_json keeps insertion order (preserve_order): SGLang writes meta_info last.
                if format.encoding == Encoding::MetaFirst {
                    json!({"meta_info": meta, "text": t, "output_ids": o})
                } else {
                    json!({"text": t, "output_ids": o, "meta_info": meta})
                }
            }
            Api::OpenaiCompletions => json!({
                "choices": [{"index": 0, "text": piece, "finish_reason": finish}],
                "usage": {"prompt_tokens": s.prompt_tokens, "completion_tokens": done},
            }),
            Api::OpenaiChat => json!({
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": finish}],
                "usage": {"prompt_tokens": s.prompt_tokens, "completion_tokens": done},
            }),
        };
        event(&mut body, &json.to_string(), format.encoding);
    }
    if format.api != Api::SglangGenerate {
        let usage = json!({"choices": [], "usage": {"prompt_tokens": s.prompt_tokens, "completion_tokens": done}});
        event(&mut body, &usage.to_string(), format.encoding);
    }
    body.extend_from_slice(b"data: [DONE]\n\n");
    body
}

/// What every format must agree on: the chunks that carried tokens, the totals, the finish.
#[derive(Debug, PartialEq)]
struct Agreed {
    token_chunks: Vec<u32>,
    completion_tokens: Option<u64>,
    prompt_tokens: Option<u64>,
    finish_reason: Option<String>,
    error: Option<String>,
}

fn agreed(o: &Outcome) -> Agreed {
    Agreed {
        token_chunks: o.chunk_tokens.iter().copied().filter(|t| *t > 0).collect(),
        completion_tokens: o.completion_tokens,
        prompt_tokens: o.prompt_tokens,
        finish_reason: o.finish_reason.clone(),
        error: o.error.clone(),
    }
}

/// One logical stream in every API's wire format (and every encoding that sends it down
/// another of the parser's paths), cut at random offsets: all give the same chunks with
/// tokens, the same totals and the same finish reason, and those are the stream's own.
pub fn stream_differential(data: &[u8]) {
    let s = Logical::from_bytes(data);
    let mut rng = Rng::from_bytes(data);
    let expected_tokens: Vec<u32> = s.chunks.iter().map(|(_, n)| *n as u32).collect();
    let expected = Agreed {
        token_chunks: expected_tokens,
        completion_tokens: Some(s.total_tokens()),
        prompt_tokens: Some(s.prompt_tokens),
        finish_reason: Some(s.finish.to_string()),
        error: None,
    };
    for format in formats() {
        let body = render(&s, format);
        let reads = split(&body, &mut rng);
        let outcome = parse(format.api, &reads);
        let got = agreed(&outcome);
        assert_eq!(
            got,
            expected,
            "{format:?} disagrees; body:\n{}",
            String::from_utf8_lossy(&body)
        );
        let sum: u64 = outcome.chunk_tokens.iter().map(|t| u64::from(*t)).sum();
        assert_eq!(
            sum,
            s.total_tokens(),
            "{format:?}: chunk tokens do not add up"
        );
    }
}
