//! Reasoning held to the real engines: SGLang 0.5.23 launched with `--reasoning-parser qwen3`
//! and llama.cpp with `--reasoning-format deepseek`, both serving the tier's deterministic
//! thinking model (`scripts/real-engines/make_model.py`: any prompt is answered `<think>`, 24
//! words, `</think>`, 8 words, end of sequence). The truth is known token by token, so
//! servebench's thinking and answer tokens, its TTFT and its first-answer time are checked
//! against the model's construction and against the server's own counts (SGLang's usage and
//! `/metrics`, llama.cpp's `timings`); the simulator's thinking stream is held to the real
//! one field by field.

use std::path::Path;

use serde_json::{Value, json};

use super::differential::start_sim;
use super::http;
use super::sglang::{launched_model, run_ok};
use super::*;
use crate::common::*;

/// The thinking model's chain (`chain.json` beside it): thinking is the start marker, the
/// words and the end marker; the answer is the words and the end-of-sequence token (both
/// engines count it in `completion_tokens`).
struct Chain {
    thinking: u64,
    answer: u64,
}

impl Chain {
    fn read(path: &Path) -> Chain {
        let v = read_json(path);
        let words = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
        Chain {
            thinking: words("think_words") + 2,
            answer: words("answer_words") + 1,
        }
    }
    fn completion(&self) -> u64 {
        self.thinking + self.answer
    }
}

/// Output tokens that leave the model thinking (fewer than its thinking) and that let it
/// finish (more than the whole chain).
const CUT: u64 = 12;
const WHOLE: u64 = 60;

fn measured(dir: &Path, point: &str) -> Vec<Value> {
    read_jsonl(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["point"] == point && r["role"] == "measure")
        .collect()
}

/// Whether every chunk with thinking comes before the first chunk with answer tokens.
fn thinking_then_answer(r: &Value) -> bool {
    let chunks = r["chunks"].as_array().expect("chunks");
    let tokens = |c: &Value| c["tokens"].as_u64().unwrap_or(0);
    let thinking = |c: &Value| c["reasoning"].as_u64().unwrap_or(0);
    let last_thought = chunks.iter().rposition(|c| thinking(c) > 0);
    let first_answer = chunks.iter().position(|c| tokens(c) > thinking(c));
    matches!((last_thought, first_answer), (Some(t), Some(a)) if t <= a)
}

/// The arrival of a request's first chunk with tokens, and of its first chunk with answer
/// tokens (tokens beyond its thinking ones).
fn first_arrivals(r: &Value) -> (f64, Option<f64>) {
    let chunks = r["chunks"].as_array().expect("chunks");
    let tokens = |c: &Value| c["tokens"].as_u64().unwrap_or(0);
    let thinking = |c: &Value| c["reasoning"].as_u64().unwrap_or(0);
    let first = chunks.iter().find(|c| tokens(c) > 0).expect("a token")["t_s"]
        .as_f64()
        .unwrap();
    let answer = chunks
        .iter()
        .find(|c| tokens(c) > thinking(c))
        .and_then(|c| c["t_s"].as_f64());
    (first, answer)
}

fn mean(p: &Value, metric: &str) -> Option<f64> {
    p["metrics"][metric]["mean"].as_f64()
}

/// What every request and point of a run against the thinking model must say: the model's
/// own split, TTFA at the first answer chunk and after TTFT, and no answer (with why) where
/// the output ran out while thinking.
fn assert_thinking_as_built(dir: &Path, points: &[Value], chain: &Chain, engine: &str) {
    for p in points {
        let id = p["id"].as_str().unwrap();
        let whole = p["values"]["workload.output_tokens"].as_u64() == Some(WHOLE);
        let requests = measured(dir, id);
        assert!(!requests.is_empty(), "{engine} {id}: no requests");
        for r in &requests {
            let (ttft, ttfa) = first_arrivals(r);
            if whole {
                assert_eq!(
                    r["completion_tokens"],
                    chain.completion(),
                    "{engine} {id}: {r}"
                );
                assert_eq!(r["reasoning_tokens"], chain.thinking, "{engine} {id}: {r}");
                assert_eq!(r["no_answer"], Value::Null, "{engine} {id}: {r}");
                let ttfa = ttfa.unwrap_or_else(|| panic!("{engine} {id}: no answer chunk: {r}"));
                // A client that read the whole stream at once (llama.cpp writes these 35
                // tokens in a few ms) stamps thinking and answer alike: never before, and in
                // order.
                assert!(
                    ttfa >= ttft,
                    "{engine} {id}: TTFA {ttfa} before TTFT {ttft}"
                );
                assert!(thinking_then_answer(r), "{engine} {id}: {r}");
            } else {
                assert_eq!(r["completion_tokens"], CUT, "{engine} {id}: {r}");
                assert_eq!(r["reasoning_tokens"], CUT, "{engine} {id}: {r}");
                assert_eq!(
                    r["no_answer"], "out-of-tokens-while-thinking",
                    "{engine} {id}"
                );
                assert_eq!(ttfa, None, "{engine} {id}: {r}");
            }
        }
        if whole {
            assert_eq!(
                mean(p, "reasoning_tokens"),
                Some(chain.thinking as f64),
                "{id}"
            );
            assert_eq!(mean(p, "answer_tokens"), Some(chain.answer as f64), "{id}");
            let ttfa_mean: f64 = requests
                .iter()
                .map(|r| first_arrivals(r).1.unwrap())
                .sum::<f64>()
                / requests.len() as f64;
            let got = mean(p, "ttfa_s").expect("ttfa_s");
            assert!(
                (got - ttfa_mean).abs() < 1e-9,
                "{engine} {id}: {got} vs {ttfa_mean}"
            );
        } else {
            assert_eq!(mean(p, "ttfa_s"), None, "{engine} {id}: {}", p["metrics"]);
            assert_eq!(mean(p, "answer_tokens"), Some(0.0), "{engine} {id}");
            let kinds: Vec<&str> = p["flags"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|f| f["kind"].as_str())
                .collect();
            assert!(kinds.contains(&"no-answer"), "{engine} {id}: {kinds:?}");
        }
    }
}

/// SGLang's own count of a point's round, from the `/metrics` scrapes at its start and end.
fn server_delta(dir: &Path, point: &str, name: &str) -> f64 {
    let rows: Vec<Value> = read_jsonl(&dir.join("metrics.jsonl"))
        .into_iter()
        .filter(|r| r["point"] == point)
        .collect();
    let at = |which: &str| {
        rows.iter()
            .find(|r| r["at"] == which)
            .and_then(|r| r["values"][name].as_f64())
            .unwrap_or_else(|| panic!("{name} at {which} of {point}"))
    };
    at("end") - at("start")
}

/// SGLang on all three APIs: thinking told apart by the stream's field (chat, where SGLang's
/// usage counts it too) and by the qwen3 parser's markers (`/generate`, completions), each
/// request's split equal to the model's and to SGLang's own counts, TTFT no earlier than
/// SGLang's own first-token time, and a request cut while thinking has no first-answer time.
#[test]
fn sglang_reasoning_parser_on_all_three_apis_measures_what_the_model_thought() {
    let Some(slot) = sglang_slot() else { return };
    let chain = Chain::read(&slot.tier.think_hf().join("chain.json"));
    let ws = Workspace::new();
    let standin = ws.path().join("sgl_kernel.log");
    let mark = marker("think");
    let server = launched_model(
        &slot.tier,
        &slot.tier.think_hf(),
        &standin,
        &mark,
        "    reasoning-parser: qwen3\n    enable-metrics: true\n",
    );
    let spec = ws.write(
        "think.yaml",
        &format!(
            "name: think\n{server}workload:\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: {WHOLE}\n  ignore_eos: false\nrequests: 3\nsweep:\n  workload.api: [openai-chat, openai-completions, sglang-generate]\n  workload.output_tokens: [{WHOLE}, {CUT}]\n"
        ),
    );
    let (dir, points) = run_ok(&ws, &spec);
    assert!(
        live_with_marker(&mark).is_empty(),
        "the server outlived the run"
    );
    assert_no_kernel_called(&standin);
    assert_eq!(points.len(), 6);
    assert_thinking_as_built(&dir, &points, &chain, "SGLang");
    for p in &points {
        let id = p["id"].as_str().unwrap();
        let requests = measured(&dir, id);
        // The chat stream's count is SGLang's own (usage); the text APIs' the markers'.
        let source = if p["values"]["workload.api"] == "openai-chat" {
            "server"
        } else {
            "chunks"
        };
        for r in &requests {
            assert_eq!(r["reasoning_source"], source, "{id}: {r}");
        }
        // SGLang's own counters over the point's round: the same tokens, and a first token
        // no later than the client saw it.
        let sent: u64 = read_jsonl(&dir.join("requests.jsonl"))
            .iter()
            .filter(|r| r["point"] == id)
            .map(|r| r["completion_tokens"].as_u64().unwrap_or(0))
            .sum();
        let generated = server_delta(&dir, id, "sglang:generation_tokens_total");
        assert_eq!(generated, sent as f64, "{id}: SGLang generated {generated}");
        let ttft_count = server_delta(&dir, id, "sglang:time_to_first_token_seconds_count");
        let server_ttft =
            server_delta(&dir, id, "sglang:time_to_first_token_seconds_sum") / ttft_count;
        let client_ttft = mean(p, "ttft_s").unwrap();
        assert!(
            client_ttft + 0.002 >= server_ttft,
            "{id}: servebench's TTFT {client_ttft} before SGLang's own {server_ttft}"
        );
    }
}

/// llama.cpp streams thinking in `reasoning_content` a token a chunk, with no per-chunk
/// counts and no reasoning count in its usage: the markers and the end-of-sequence token
/// stream no text, and servebench's split must still be the model's (the silent tokens of
/// a request that answered are its markers and its end, `StreamParser::reasoning_tokens`).
#[test]
fn llamacpp_reasoning_format_measures_what_the_model_thought() {
    let Some(tier) = tier(Part::LlamaCpp) else {
        return;
    };
    let _turn = exclusive();
    let chain = Chain::read(&tier.dir.join("model-think.gguf.chain.json"));
    let server = start_llama_model(
        &tier,
        &tier.think_gguf(),
        &["--reasoning-format", "deepseek"],
    );
    let ws = Workspace::new();
    let spec = ws.write(
        "think.yaml",
        &format!(
            "name: think\nserver:\n  engine: llama.cpp\n  url: {}\n  model: tiny\nworkload:\n  api: openai-chat\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: {WHOLE}\n  ignore_eos: false\nrequests: 3\nsweep:\n  workload.output_tokens: [{WHOLE}, {CUT}]\n",
            server.base
        ),
    );
    let (dir, points) = run_ok(&ws, &spec);
    assert_eq!(points.len(), 2);
    assert_thinking_as_built(&dir, &points, &chain, "llama.cpp");
    for r in measured(&dir, "p001") {
        assert_eq!(r["reasoning_source"], "chunks", "{r}");
        // llama.cpp's own prompt time: no client sees its first token sooner.
        let server_ttft = r["server_ttft_s"].as_f64().expect("timings.prompt_ms");
        let (ttft, _) = first_arrivals(&r);
        assert!(
            ttft >= server_ttft,
            "TTFT {ttft} before llama.cpp's {server_ttft}"
        );
    }
}

/// The fields of a chat stream's deltas by phase, and its usage: what a client relies on.
/// `max_tokens` ends it four tokens into the answer, on the model and on the simulator alike
/// (the simulator does not model the end of sequence).
fn thinking_stream_shape(base: &str, max_tokens: u64) -> Value {
    let r = http::post(
        base,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": max_tokens, "stream": true,
                "stream_options": {"include_usage": true}}),
    )
    .expect("chat stream");
    let chunks = r.chunks();
    let delta_keys = |pick: &dyn Fn(&Value) -> bool| -> Value {
        let mut all = std::collections::BTreeSet::new();
        for c in chunks.iter().filter(|c| pick(&c["choices"][0]["delta"])) {
            if let Some(o) = c["choices"][0]["delta"].as_object() {
                all.extend(o.keys().cloned());
            }
        }
        json!(all)
    };
    let thinking = |d: &Value| d["reasoning_content"].is_string();
    let answering = |d: &Value| d["content"].as_str().is_some_and(|s| !s.is_empty());
    let text_chunks = chunks
        .iter()
        .filter(|c| {
            let d = &c["choices"][0]["delta"];
            thinking(d) || answering(d)
        })
        .count();
    let first_answer = chunks
        .iter()
        .position(|c| answering(&c["choices"][0]["delta"]));
    let last_thought = chunks
        .iter()
        .rposition(|c| thinking(&c["choices"][0]["delta"]));
    let usage = &chunks.last().expect("usage")["usage"];
    let mut usage_keys: Vec<&String> = usage
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    usage_keys.sort();
    json!({
        "status": r.status,
        "first_delta": chunks[0]["choices"][0]["delta"],
        "thinking_delta_keys": delta_keys(&thinking),
        "answer_delta_keys": delta_keys(&answering),
        // The markers are tokens of the thinking that stream no text: the chunks with text
        // are at least two fewer than the tokens (not an exact count: SGLang's detokenizer
        // sometimes sends two tokens in one chunk).
        "markers_stream_no_text": text_chunks + 2 <= usage["completion_tokens"].as_u64().unwrap_or(0) as usize,
        "thinking_then_answer": matches!((last_thought, first_answer), (Some(t), Some(a)) if t < a),
        "markers_in_text": chunks.iter().any(|c| {
            let d = &c["choices"][0]["delta"];
            [&d["content"], &d["reasoning_content"]]
                .iter()
                .any(|t| t.as_str().is_some_and(|s| s.contains("think>")))
        }),
        "finish_reason": chunks.iter().rev().find_map(|c| c["choices"][0]["finish_reason"].as_str()),
        "usage_keys": usage_keys,
        "reasoning_tokens": usage["reasoning_tokens"],
        "completion_tokens_details": usage["completion_tokens_details"],
        "completion_tokens": usage["completion_tokens"],
    })
}

/// The simulator in SGLang's mode with the same parser, thinking as long, streams its
/// thinking as the real SGLang does: the same fields in each phase, the markers never in the
/// text, thinking then answer, the usage's reasoning count where SGLang puts it.
#[test]
fn sglang_sim_thinks_in_the_real_servers_fields() {
    let Some(slot) = sglang_slot() else { return };
    let chain = Chain::read(&slot.tier.think_hf().join("chain.json"));
    let real = start_sglang_model(
        &slot.tier,
        &slot.tier.think_hf(),
        &["--reasoning-parser", "qwen3"],
    );
    let thinking = chain.thinking.to_string();
    let sim = start_sim(&[
        "--model-path",
        &slot.tier.think_hf().display().to_string(),
        "--reasoning-parser",
        "qwen3",
        "--profile",
        "fast",
        "--sim-thinking-tokens",
        &thinking,
    ]);
    let max_tokens = chain.thinking + 4;
    let (r, s) = (
        thinking_stream_shape(&real.base, max_tokens),
        thinking_stream_shape(&sim.base, max_tokens),
    );
    eprintln!("thinking stream, real and simulated: {r}");
    assert_eq!(r, s, "\nreal: {r}\nsim:  {s}");
    // Attached by `url:` (no launch flags in the spec), `/generate` still splits thinking by
    // the parser the real server says it runs.
    let ws = Workspace::new();
    let spec = ws.write(
        "attached.yaml",
        &format!(
            "name: attached\nserver:\n  engine: sglang\n  url: {}\n  model: {}\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: {WHOLE}\n  ignore_eos: false\nrequests: 3\n",
            real.base,
            slot.tier.think_hf().display()
        ),
    );
    let (dir, points) = run_ok(&ws, &spec);
    let mut p = points[0].clone();
    p["values"] = json!({"workload.output_tokens": WHOLE});
    assert_thinking_as_built(&dir, &[p], &chain, "SGLang attached");
}

/// The simulator in llama.cpp's mode with `--reasoning-format deepseek`, thinking as long,
/// streams its thinking as the real `llama-server` does (no reasoning count in its usage).
#[test]
fn llamacpp_sim_thinks_in_the_real_servers_fields() {
    let Some(tier) = tier(Part::LlamaCpp) else {
        return;
    };
    let _turn = exclusive();
    let chain = Chain::read(&tier.dir.join("model-think.gguf.chain.json"));
    let model = tier.think_gguf().display().to_string();
    let real = start_llama_model(
        &tier,
        &tier.think_gguf(),
        &["--reasoning-format", "deepseek"],
    );
    let thinking = chain.thinking.to_string();
    let sim = start_sim(&[
        "--api",
        "llama.cpp",
        "-m",
        &model,
        "--reasoning-format",
        "deepseek",
        "--sim-thinking-tokens",
        &thinking,
    ]);
    let max_tokens = chain.thinking + 4;
    let (r, s) = (
        thinking_stream_shape(&real.base, max_tokens),
        thinking_stream_shape(&sim.base, max_tokens),
    );
    eprintln!("thinking stream, real and simulated: {r}");
    assert_eq!(r, s, "\nreal: {r}\nsim:  {s}");
}
