//! How fast is the client's hot path: SSE framing plus token extraction, on one core?
//!
//! Builds realistic response bodies in memory for a 256-token output:
//! - `native-cumul`: SGLang `/generate` in its default cumulative mode (every event carries the
//!   full text and full `output_ids` so far plus `meta_info`), so bodies grow quadratically;
//! - `native-incr`: `/generate` with `--incremental-streaming-output` (text and ids are deltas);
//! - `chat`: OpenAI `/v1/chat/completions` chunks (role chunk, content chunks, finish chunk,
//!   `include_usage` chunk);
//!
//! and replays each through [`servebench::client::replay_stream`], the same framer, parser and
//! per-event bookkeeping `Client::stream` runs on network reads. Reads are either 1400 bytes (one
//! TCP segment each) or split every event at awkward offsets (inside `data:`, mid-JSON, between
//! the two final newlines). Everything runs in the main thread, without a runtime: one core.
//!
//! Prints events/s and MB/s (median of several timed iterations after a warm-up) per scenario and
//! whether the goal of 500,000 events/s is met. Panics if the extracted token totals are wrong.
//!
//! Run: `cargo bench --bench client_hot_path`

use std::hint::black_box;
use std::ops::Range;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use servebench::client::replay_stream;
use servebench_model::spec::types::Api;

const OUTPUT_TOKENS: usize = 256;
const GOAL_EVENTS_PER_S: f64 = 500_000.0;
const WARMUP: Duration = Duration::from_millis(500);
const ITERATIONS: usize = 9;
const ITERATION_TARGET: Duration = Duration::from_millis(150);

/// One response body and the reads that deliver it.
struct Scenario {
    name: String,
    api: Api,
    body: Vec<u8>,
    reads: Vec<Range<usize>>,
    /// Events in the body, `[DONE]` included.
    events: usize,
    /// Sum of the per-chunk token counts the client must extract.
    chunk_tokens: u64,
}

/// A deterministic token stream: (id, text) per output token. Mostly word pieces, some
/// punctuation, newlines and quotes (escaped in JSON), and every 50th token an incomplete UTF-8
/// sequence whose text only appears with the next token (the text is unchanged for one event).
fn tokens() -> Vec<(u32, String)> {
    const WORDS: [&str; 12] = [
        " the", " model", " server", " token", "izer", " batch", " of", " cache", ",", ".", " a",
        " latency",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..OUTPUT_TOKENS)
        .map(|i| {
            let r = next();
            let id = (r % 150_000) as u32;
            let text = match i % 50 {
                24 => String::new(),
                25 => " café".to_string(),
                37 => "\n\n".to_string(),
                41 => " \"quoted\"".to_string(),
                _ => WORDS[(r >> 32) as usize % WORDS.len()].to_string(),
            };
            (id, text)
        })
        .collect()
}

fn event(body: &mut Vec<u8>, value: &Value) {
    body.extend_from_slice(b"data: ");
    body.extend_from_slice(serde_json::to_string(value).unwrap().as_bytes());
    body.extend_from_slice(b"\n\n");
}

fn done(body: &mut Vec<u8>) {
    body.extend_from_slice(b"data: [DONE]\n\n");
}

fn meta(i: usize) -> Value {
    let n = i + 1;
    let mut meta = json!({
        "id": "5f1c0a9e2b7d4c3a8e6f1b2d3c4a5e6f",
        "finish_reason": null,
        "prompt_tokens": 1000,
        "weight_version": "default",
        "total_retractions": 0,
        "completion_tokens": n,
        "cached_tokens": 512,
    });
    if i == 0 {
        meta["response_sent_to_client_ts"] = json!(1772580196.301);
    }
    if n == OUTPUT_TOKENS {
        meta["finish_reason"] = json!({"type": "length", "length": OUTPUT_TOKENS});
        meta["e2e_latency"] = json!(2.5731);
    }
    meta
}

/// Native `/generate` body: cumulative or incremental; one event per token, then `[DONE]`.
fn native_body(cumulative: bool) -> (Vec<u8>, usize, u64) {
    let toks = tokens();
    let mut body = Vec::new();
    let mut text = String::new();
    let mut ids = Vec::new();
    for (i, (id, t)) in toks.iter().enumerate() {
        text.push_str(t);
        ids.push(*id);
        let value = if cumulative {
            json!({"text": text, "output_ids": ids, "meta_info": meta(i)})
        } else {
            json!({"text": t, "output_ids": [id], "meta_info": meta(i)})
        };
        event(&mut body, &value);
    }
    done(&mut body);
    // `completion_tokens` counts every token, also those of an unchanged text.
    (body, OUTPUT_TOKENS + 1, OUTPUT_TOKENS as u64)
}

/// `/v1/chat/completions` body with `include_usage`: role chunk, one content chunk per token,
/// finish chunk, usage chunk, `[DONE]`.
fn chat_body() -> (Vec<u8>, usize, u64) {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "5f1c0a9e2b7d4c3a8e6f1b2d3c4a5e6f",
            "object": "chat.completion.chunk",
            "created": 1772580196,
            "model": "default",
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish,
                "matched_stop": null,
            }],
            "usage": null,
        })
    };
    let mut body = Vec::new();
    event(
        &mut body,
        &chunk(json!({"role": "assistant", "content": ""}), Value::Null),
    );
    let mut events = 1;
    let mut non_empty = 0;
    for (_, t) in tokens() {
        // The OpenAI layer sends an event for every engine output; one with an incomplete
        // character carries an empty delta (0 tokens) and the next one carries the text.
        non_empty += u64::from(!t.is_empty());
        event(&mut body, &chunk(json!({"content": t}), Value::Null));
        events += 1;
    }
    event(&mut body, &chunk(json!({}), json!("length")));
    event(
        &mut body,
        &json!({
            "id": "5f1c0a9e2b7d4c3a8e6f1b2d3c4a5e6f",
            "object": "chat.completion.chunk",
            "created": 1772580196,
            "model": "default",
            "choices": [],
            "usage": {
                "prompt_tokens": 1000,
                "completion_tokens": OUTPUT_TOKENS,
                "total_tokens": 1000 + OUTPUT_TOKENS,
                "prompt_tokens_details": null,
                "reasoning_tokens": 0,
            },
        }),
    );
    done(&mut body);
    // Without continuous usage, a chunk counts 1 token when its delta is non-empty; the usage
    // chunk's total (all tokens) is the request's count.
    (body, events + 3, non_empty)
}

/// Reads of `size` bytes (the last one shorter).
fn fixed_reads(len: usize, size: usize) -> Vec<Range<usize>> {
    (0..len)
        .step_by(size)
        .map(|s| s..(s + size).min(len))
        .collect()
}

/// Every event split at awkward offsets: inside `data`, in the middle of the JSON (a UTF-8
/// sequence may be cut), and between the two final newlines; the last piece of one event
/// shares a read with the start of the next.
fn awkward_reads(body: &[u8]) -> Vec<Range<usize>> {
    let mut cuts = vec![0];
    let mut start = 0;
    while start < body.len() {
        let end = start
            + body[start..]
                .windows(2)
                .position(|w| w == b"\n\n")
                .expect("events end with a blank line")
            + 2;
        let len = end - start;
        for off in [3, len / 2, len - 1] {
            if off > 0 && start + off > *cuts.last().unwrap() {
                cuts.push(start + off);
            }
        }
        start = end;
    }
    cuts.push(body.len());
    cuts.windows(2).map(|w| w[0]..w[1]).collect()
}

fn scenarios() -> Vec<Scenario> {
    let mut out = Vec::new();
    let bodies = [
        ("native-cumul", Api::SglangGenerate, native_body(true)),
        ("native-incr", Api::SglangGenerate, native_body(false)),
        ("chat", Api::OpenaiChat, chat_body()),
    ];
    for (name, api, (body, events, chunk_tokens)) in bodies {
        for (split, reads) in [
            ("1400B", fixed_reads(body.len(), 1400)),
            ("awkward", awkward_reads(&body)),
        ] {
            out.push(Scenario {
                name: format!("{name}/{split}"),
                api,
                body: body.clone(),
                reads,
                events,
                chunk_tokens,
            });
        }
    }
    out
}

/// Replays one body; checks tokens and events; returns events handled.
fn replay(s: &Scenario) -> usize {
    let body = black_box(&s.body[..]);
    let m = replay_stream(s.api, s.reads.iter().map(|r| &body[r.clone()]));
    let m = black_box(m);
    assert!(m.error.is_none(), "{}: {:?}", s.name, m.error);
    assert!(m.end_s.is_some(), "{}: no [DONE]", s.name);
    let tokens: u64 = m.chunks.iter().map(|c| u64::from(c.tokens)).sum();
    assert_eq!(tokens, s.chunk_tokens, "{}: per-chunk tokens", s.name);
    assert_eq!(
        m.completion_tokens,
        Some(OUTPUT_TOKENS as u64),
        "{}: completion tokens",
        s.name
    );
    // Every data chunk plus `[DONE]`.
    let events = m.chunks.len() + 1;
    assert_eq!(events, s.events, "{}: events", s.name);
    events
}

fn main() {
    let scenarios = scenarios();
    println!(
        "client hot path: SSE framing + token extraction, one core, {OUTPUT_TOKENS}-token outputs"
    );
    println!(
        "{:<22} {:>7} {:>6} {:>9} {:>10} {:>13} {:>9}",
        "scenario", "events", "reads", "body_KB", "us/stream", "events/s", "MB/s"
    );
    let mut worst = f64::INFINITY;
    for s in &scenarios {
        // Warm up, and size iterations so each takes about ITERATION_TARGET.
        let start = Instant::now();
        let mut streams = 0u64;
        while start.elapsed() < WARMUP {
            replay(s);
            streams += 1;
        }
        let per_iter = ((streams as f64 * ITERATION_TARGET.as_secs_f64()
            / start.elapsed().as_secs_f64())
        .ceil() as u64)
            .max(1);
        let mut rates = Vec::new();
        for _ in 0..ITERATIONS {
            let t = Instant::now();
            let mut events = 0usize;
            for _ in 0..per_iter {
                events += replay(s);
            }
            let secs = t.elapsed().as_secs_f64();
            rates.push((events as f64 / secs, secs / per_iter as f64));
        }
        rates.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (events_per_s, secs_per_stream) = rates[rates.len() / 2];
        let mb_per_s = s.body.len() as f64 / secs_per_stream / 1e6;
        worst = worst.min(events_per_s);
        println!(
            "{:<22} {:>7} {:>6} {:>9.1} {:>10.1} {:>13.0} {:>9.1}",
            s.name,
            s.events,
            s.reads.len(),
            s.body.len() as f64 / 1e3,
            secs_per_stream * 1e6,
            events_per_s,
            mb_per_s
        );
    }
    let met = worst >= GOAL_EVENTS_PER_S;
    println!(
        "goal {:.0} events/s on one core: {} (slowest scenario {:.0} events/s)",
        GOAL_EVENTS_PER_S,
        if met { "MET" } else { "NOT MET" },
        worst
    );
}
