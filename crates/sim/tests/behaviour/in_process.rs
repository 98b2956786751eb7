//! The built-in simulator, driven over real HTTP in-process on port 0.

use serde_json::{Value, json};
use sim::{ChunkTrace, SimConfig, SimLog, serve};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

const FOX: &str = "The quick brown fox jumps over the lazy dog. ";

struct Sim {
    base: String,
    log: SimLog,
    trace: ChunkTrace,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    http: reqwest::Client,
}

/// Starts a simulator with `args` (plus the fast profile); does not wait for warmup.
async fn launch(args: &[&str]) -> Sim {
    launch_with(args, |_| {}).await
}

/// Like [`launch`], with a last change to the config (what the environment would set).
async fn launch_with(args: &[&str], tweak: impl FnOnce(&mut SimConfig)) -> Sim {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let mut cfg = SimConfig::from_args(&args).expect("valid args");
    tweak(&mut cfg);
    let log = SimLog::capture();
    let trace = ChunkTrace::new();
    cfg.log = log.clone();
    cfg.trace = Some(trace.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(cfg, listener, async {
        let _ = rx.await;
    }));
    Sim {
        base,
        log,
        trace,
        stop: Some(stop),
        task,
        http: reqwest::Client::new(),
    }
}

/// Starts a simulator and waits until `/health` is 200.
async fn start(args: &[&str]) -> Sim {
    start_with(args, |_| {}).await
}

/// Like [`start`], with a last change to the config.
async fn start_with(args: &[&str], tweak: impl FnOnce(&mut SimConfig)) -> Sim {
    let sim = launch_with(args, tweak).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while sim.get("/health").await.0 != 200 {
        assert!(Instant::now() < deadline, "sim never became healthy");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sim
}

impl Sim {
    async fn get(&self, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, String) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let (s, t) = self.post(path, body).await;
        (s, serde_json::from_str(&t).unwrap_or(Value::String(t)))
    }

    /// Streams a request; returns each event's JSON (or the raw `[DONE]`) with its arrival time.
    async fn stream(&self, path: &str, body: &Value) -> (u16, Vec<(Instant, String)>, Instant) {
        // Serialized before the clock starts: a debug build's JSON encoding of a long prompt
        // is the client's time, not the server's.
        let body = serde_json::to_vec(body).unwrap();
        let sent = Instant::now();
        let mut r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let mut buf = String::new();
        let mut events = Vec::new();
        while let Some(c) = r.chunk().await.unwrap() {
            let now = Instant::now();
            buf.push_str(std::str::from_utf8(&c).unwrap());
            while let Some(i) = buf.find("\n\n") {
                let ev: String = buf.drain(..i + 2).collect();
                let data = ev.trim().strip_prefix("data: ").expect("SSE data line");
                events.push((now, data.to_string()));
            }
        }
        assert!(buf.is_empty(), "trailing bytes: {buf:?}");
        (status, events, sent)
    }

    /// Streams and returns the JSON events, checking the stream ends with `[DONE]`.
    async fn stream_json(&self, path: &str, body: &Value) -> Vec<Value> {
        let (status, events, _) = self.stream(path, body).await;
        assert_eq!(status, 200);
        assert_eq!(events.last().map(|e| e.1.as_str()), Some("[DONE]"));
        events[..events.len() - 1]
            .iter()
            .map(|(_, d)| serde_json::from_str(d).unwrap())
            .collect()
    }

    fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log
            .lines()
            .into_iter()
            .filter(|l| l.contains(needle))
            .collect()
    }

    async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.await.unwrap()
    }
}

fn req_body(text: &str, max_new: u64, stream: bool) -> Value {
    json!({"text": text, "sampling_params": {"max_new_tokens": max_new}, "stream": stream})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_streams_cumulative_text_and_meta_info() {
    let sim = start(&[]).await;
    let chunks = sim
        .stream_json("/generate", &req_body("The capital of France is", 4, true))
        .await;
    assert_eq!(chunks.len(), 4, "one chunk per decode step");
    for (i, c) in chunks.iter().enumerate() {
        let m = &c["meta_info"];
        assert_eq!(m["completion_tokens"], i as u64 + 1);
        assert_eq!(
            c["output_ids"].as_array().unwrap().len(),
            i + 1,
            "cumulative ids"
        );
        assert_eq!(m["cached_tokens"], 0);
        assert_eq!(m["prompt_tokens"], 5);
        assert_eq!(m["response_sent_to_client_ts"].is_number(), i == 0);
        assert_eq!(m["e2e_latency"].is_number(), i == 3);
    }
    let t0 = chunks[0]["text"].as_str().unwrap();
    let t3 = chunks[3]["text"].as_str().unwrap();
    assert!(t3.starts_with(t0) && t3.len() > t0.len());
    assert_eq!(chunks[2]["meta_info"]["finish_reason"], Value::Null);
    assert_eq!(
        chunks[3]["meta_info"]["finish_reason"],
        json!({"type": "length", "length": 4})
    );
    // Non-streaming gives the same text (deterministic model).
    let (s, v) = sim
        .post_json("/generate", &req_body("The capital of France is", 4, false))
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["text"], chunks[3]["text"]);
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_streams_deltas_with_incremental_output() {
    let sim = start(&["--incremental-streaming-output"]).await;
    let chunks = sim.stream_json("/generate", &req_body(FOX, 5, true)).await;
    assert_eq!(chunks.len(), 5);
    let joined: String = chunks.iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["output_ids"].as_array().unwrap().len() == 1)
    );
    let (_, whole) = sim.post_json("/generate", &req_body(FOX, 5, false)).await;
    assert_eq!(whole["text"], joined);
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_completions_and_chat_stream_with_usage() {
    let sim = start(&[]).await;
    let body = json!({"model": "m", "prompt": FOX, "max_tokens": 3, "stream": true,
                      "stream_options": {"include_usage": true}});
    let chunks = sim.stream_json("/v1/completions", &body).await;
    assert_eq!(chunks.len(), 4, "three outputs plus usage");
    assert_eq!(chunks[0]["object"], "text_completion");
    assert_eq!(chunks[0]["model"], "m");
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[3]["choices"], json!([]));
    assert_eq!(chunks[3]["usage"]["completion_tokens"], 3);
    // 0.5.23 writes the completions usage chunk without its null fields (exclude_none).
    let keys: Vec<&String> = chunks[3]["usage"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "prompt_tokens",
            "total_tokens",
            "completion_tokens",
            "reasoning_tokens"
        ]
    );
    assert!(
        chunks[..3]
            .iter()
            .all(|c| c["usage"].is_null() && c.get("usage").is_some())
    );

    let body = json!({"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2,
                      "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    let chunks = sim.stream_json("/v1/chat/completions", &body).await;
    // The real 0.5.23 writes `reasoning_content: null` in every delta (sse_utils.py
    // `StreamDelta`), the finish chunk's delta has nothing else, and the chunks before the
    // usage one have no `usage` key unless continuous usage fills it.
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"reasoning_content": null, "role": "assistant", "content": ""})
    );
    assert!(chunks[0].get("usage").is_none());
    assert!(chunks[1]["choices"][0]["delta"]["content"].is_string());
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(
        fin["choices"][0]["delta"],
        json!({"reasoning_content": null})
    );
    assert_eq!(fin["choices"][0]["finish_reason"], "length");
    assert!(fin.get("usage").is_none());
    assert_eq!(
        chunks[1]["usage"]["completion_tokens"], 1,
        "continuous usage"
    );
    let total = chunks.last().unwrap()["usage"]["total_tokens"].as_u64();
    assert!(total.unwrap() > 2);

    let (s, v) = sim
        .post_json(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["usage"]["completion_tokens"], 2);
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_tokens_on_repeat_but_not_with_a_nonce() {
    let sim = start(&["--enable-cache-report"]).await;
    let prompt = FOX.repeat(20);
    let (_, a) = sim
        .post_json("/generate", &req_body(&prompt, 2, false))
        .await;
    assert_eq!(a["meta_info"]["cached_tokens"], 0);
    let (_, b) = sim
        .post_json("/generate", &req_body(&prompt, 2, false))
        .await;
    let n = b["meta_info"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        b["meta_info"]["cached_tokens"],
        n - 1,
        "all but the last prompt token"
    );
    let (_, c) = sim
        .post_json(
            "/generate",
            &req_body(&format!("nonce-8c1f {prompt}"), 2, false),
        )
        .await;
    assert_eq!(c["meta_info"]["cached_tokens"], 0);

    let comp = |p: &str| json!({"prompt": p, "max_tokens": 1});
    let (_, v) = sim.post_json("/v1/completions", &comp(&prompt)).await;
    assert!(
        v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let (_, v) = sim
        .post_json("/v1/completions", &comp(&format!("zq9 {prompt}")))
        .await;
    // sglang 0.5.23 reports 0 with --enable-cache-report (older versions left it out).
    assert_eq!(
        v["usage"]["prompt_tokens_details"],
        json!({"cached_tokens": 0})
    );
    sim.stop().await.unwrap();

    let sim = start(&["--disable-radix-cache"]).await;
    for _ in 0..2 {
        let (_, v) = sim
            .post_json("/generate", &req_body(&prompt, 1, false))
            .await;
        assert_eq!(v["meta_info"]["cached_tokens"], 0);
    }
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_cache_refuses_while_busy() {
    let sim = start(&[]).await;
    let prompt = FOX.repeat(10);
    sim.post_json("/generate", &req_body(&prompt, 1, false))
        .await;
    let (s, body) = sim.get("/flush_cache").await;
    assert_eq!((s, body.starts_with("Cache flushed.")), (200, true));
    let (_, v) = sim
        .post_json("/generate", &req_body(&prompt, 1, false))
        .await;
    assert_eq!(v["meta_info"]["cached_tokens"], 0, "flushed");
    // A long request keeps the engine busy.
    let busy = {
        let http = sim.http.clone();
        let url = format!("{}/generate", sim.base);
        tokio::spawn(async move { http.post(url).json(&req_body(FOX, 300, false)).send().await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // sglang 0.5.23's refusal (HTTP 400, nothing flushed).
    let (s, body) = sim.post("/flush_cache", &json!({})).await;
    assert_eq!((s, body.trim()), (400, "Flush cache failed."));
    busy.await.unwrap().unwrap();
    assert_eq!(sim.get("/flush_cache").await.0, 200);
    assert_eq!(sim.log_lines("Cache flushed successfully!").len(), 2);
    assert_eq!(
        sim.log_lines("Cache not flushed because there are pending requests.")
            .len(),
        1
    );
    sim.stop().await.unwrap();
}

/// A flush that comes while a prefill pass runs is refused, as SGLang's is while a batch runs:
/// the pass holds the prefixes it matched. It was accepted (the pass's requests were in no
/// queue), the cache was reset under them, and the pass's end panicked the scheduler on a
/// prefix node that no longer existed, every later request answered "shutting down".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_cache_refuses_during_a_prefill_pass() {
    // About 2,300 prompt tokens at 150 us each: a pass of about 350 ms.
    let sim = start_with(&[], |c| c.profile.prefill.per_token_us = 150.0).await;
    let prompt = FOX.repeat(200);
    let busy = {
        let http = sim.http.clone();
        let url = format!("{}/generate", sim.base);
        tokio::spawn(async move {
            http.post(url)
                .json(&req_body(&prompt, 1, false))
                .send()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (s, body) = sim.post("/flush_cache", &json!({})).await;
    assert_eq!((s, body.trim()), (400, "Flush cache failed."));
    let answer = busy.await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    // The scheduler lives on: the next request is answered and a flush when idle succeeds.
    let (_, v) = sim.post_json("/generate", &req_body(FOX, 1, false)).await;
    assert!(v["text"].is_string(), "{v}");
    assert_eq!(sim.get("/flush_cache").await.0, 200);
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_503_until_warmup_then_200() {
    // time scale 4: the fast profile's 50 ms warmup takes 200 ms.
    let sim = launch(&["--sim-time-scale", "4"]).await;
    let (s, _) = sim.get("/health").await;
    assert_eq!(s, 503);
    assert_eq!(
        sim.get("/model_info").await.0,
        200,
        "model_info answers before ready"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(sim.get("/health").await, (200, String::new()));
    assert_eq!(sim.get("/health_generate").await.0, 200);
    assert_eq!(
        sim.log_lines("The server is fired up and ready to roll!")
            .len(),
        1
    );
    assert_eq!(
        sim.log_lines("Uvicorn running on http://127.0.0.1:").len(),
        1
    );
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_long_prompts_fail_in_each_api_form() {
    let sim = start(&["--context-length", "20"]).await;
    let long = FOX.repeat(3); // 31 tokens
    let msg = "The input (31 tokens) is longer than the model's context length (20 tokens).";
    let (s, v) = sim.post_json("/generate", &req_body(&long, 4, false)).await;
    assert_eq!((s, &v["error"]["message"]), (400, &json!(msg)));
    let (s, events, _) = sim.stream("/generate", &req_body(&long, 4, true)).await;
    assert_eq!(s, 200);
    let first: Value = serde_json::from_str(&events[0].1).unwrap();
    assert_eq!(first["error"]["message"], msg);
    assert_eq!(events[1].1, "[DONE]");
    let (s, v) = sim
        .post_json(
            "/v1/completions",
            &json!({"prompt": long, "max_tokens": 4, "stream": true}),
        )
        .await;
    assert_eq!(s, 400);
    assert_eq!(
        v,
        json!({"object": "error", "message": msg, "type": "BadRequestError", "param": null, "code": 400})
    );
    let (s, v) = sim.post_json("/generate", &req_body("hi", 0, false)).await;
    assert_eq!(
        (s, v["meta_info"]["completion_tokens"].as_u64()),
        (200, Some(0))
    );
    let bad = json!({"text": "hi", "sampling_params": {"max_new_tokens": -1}});
    let (s, v) = sim.post_json("/generate", &bad).await;
    assert_eq!(
        (s, &v["error"]["message"]),
        (400, &json!("max_new_tokens must be at least 0, got -1."))
    );
    let (s, _) = sim
        .post_json("/v1/completions", &json!({"prompt": "hi", "max_tokens": 0}))
        .await;
    assert_eq!(s, 400);
    let r = sim
        .http
        .post(format!("{}/generate", sim.base))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_prefill_shows_in_prefill_log_lines() {
    let sim = start(&["--chunked-prefill-size", "64"]).await;
    let (_, v) = sim
        .post_json("/generate", &req_body(&FOX.repeat(20), 1, false))
        .await;
    assert_eq!(v["meta_info"]["prompt_tokens"], 201);
    // Without the one-token batches of the /health generations (SGLang logs those too).
    let lines: Vec<String> = sim
        .log_lines("Prefill batch")
        .into_iter()
        .filter(|l| !l.contains("#new-token: 1,"))
        .collect();
    let tokens: Vec<&str> = lines
        .iter()
        .map(|l| {
            l.split("#new-token: ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(tokens, ["64", "64", "64", "9"]);
    assert!(lines[0].contains("#new-seq: 1,") && lines[1].contains("#new-seq: 0,"));
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculative_decoding_emits_multi_token_chunks() {
    let sim = start(&[
        "--speculative-algorithm",
        "EAGLE",
        "--decode-log-interval",
        "1",
    ])
    .await;
    let chunks = sim.stream_json("/generate", &req_body(FOX, 60, true)).await;
    let counts: Vec<u64> = chunks
        .iter()
        .map(|c| c["meta_info"]["completion_tokens"].as_u64().unwrap())
        .collect();
    let steps: Vec<u64> = counts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(steps.iter().any(|s| *s > 1), "{steps:?}");
    assert!(steps.iter().all(|s| (1..=4).contains(s)), "{steps:?}");
    assert!(chunks.len() < 40);
    let last = &chunks.last().unwrap()["meta_info"];
    assert_eq!(last["completion_tokens"], 60);
    let ct = last["spec_verify_ct"].as_u64().unwrap();
    assert_eq!(ct as usize, chunks.len() - 1);
    assert!(last["spec_accept_length"].as_f64().unwrap() > 1.5);
    assert!(sim.log_lines("accept len: ").len() as u64 >= ct - 1);
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_streams_carry_spec_tokens_details_only_when_asked() {
    let sim = start(&["--speculative-algorithm", "EAGLE"]).await;
    for (path, mut body) in [
        (
            "/v1/completions",
            json!({"model": "m", "prompt": FOX, "max_tokens": 40, "ignore_eos": true, "stream": true,
                   "stream_options": {"include_usage": true}}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": FOX}], "max_tokens": 40,
                   "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}),
        ),
    ] {
        let plain = sim.stream_json(path, &body).await;
        assert!(plain.iter().all(|c| c.get("sglext").is_none()), "{path}");
        body["return_spec_tokens_details"] = true.into();
        let asked = sim.stream_json(path, &body).await;
        let ext: Vec<&Value> = asked.iter().filter(|c| c.get("sglext").is_some()).collect();
        assert_eq!(ext.len(), 1, "{path}: {asked:?}");
        // One `choices: []` chunk after the last token chunk, before the usage chunk.
        let at = asked
            .iter()
            .position(|c| c.get("sglext").is_some())
            .unwrap();
        assert_eq!(at, asked.len() - 2, "{path}");
        assert_eq!(ext[0]["choices"], json!([]));
        assert!(ext[0]["usage"].is_null());
        assert!(asked[at + 1]["usage"]["completion_tokens"] == 40, "{path}");
        let d = &ext[0]["sglext"]["spec_tokens_details"];
        let ct = d["spec_verify_ct"].as_u64().unwrap();
        assert!((10..40).contains(&ct), "{path}: {d}");
        assert_eq!(d["spec_accept_length"].as_f64().unwrap(), 40.0 / ct as f64);
        for key in [
            "spec_cap_length",
            "spec_correct_drafts_histogram",
            "spec_num_proposed_drafts",
        ] {
            assert!(d.get(key).is_some(), "{key}");
        }
    }
    // Without speculation there is nothing to report, asked or not.
    sim.stop().await.unwrap();
    let plain = start(&[]).await;
    let chunks = plain
        .stream_json(
            "/v1/completions",
            &json!({"model": "m", "prompt": FOX, "max_tokens": 8, "stream": true,
                    "return_spec_tokens_details": true}),
        )
        .await;
    assert!(chunks.iter().all(|c| c.get("sglext").is_none()));
    plain.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_running_requests_limits_the_batch() {
    let sim = start(&["--max-running-requests", "2", "--decode-log-interval", "1"]).await;
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (http, url) = (sim.http.clone(), format!("{}/generate", sim.base));
        let body = req_body(&format!("request {i} {FOX}"), 20, false);
        tasks.push(tokio::spawn(async move {
            http.post(url).json(&body).send().await.unwrap().status()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().as_u16(), 200);
    }
    let running: Vec<u64> = sim
        .log_lines("Decode batch")
        .iter()
        .map(|l| {
            l.split("#running-req: ")
                .nth(1)
                .unwrap()
                .split(',')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(running.iter().all(|r| *r <= 2), "{running:?}");
    assert!(running.contains(&2));
    assert!(sim.log_lines("#queue-req: 2,").len() + sim.log_lines("#queue-req: 1,").len() > 0);
    sim.stop().await.unwrap();
}

/// Runs a timing test's body on its own 2-thread runtime, taking its turn with the end-to-end
/// runs (see `common::exclusive`) so a busy machine does not skew the clock.
fn timed(body: impl std::future::Future<Output = ()>) {
    let _turn = crate::common::exclusive();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(body);
}

/// Timing assertions take their turn with the end-to-end runs (see `common::exclusive`).
#[test]
fn ttft_follows_the_prefill_model() {
    timed(ttft_follows_the_prefill_model_body());
}

async fn ttft_follows_the_prefill_model_body() {
    // h100-llama8b at a tenth of real time: 4000 tokens prefill in ~17.6 ms, 40 in ~0.6 ms.
    let sim = start(&[
        "--profile",
        "h100-llama8b",
        "--sim-time-scale",
        "0.1",
        "--skip-server-warmup",
    ])
    .await;
    let ttft = |text: String| {
        let sim = &sim;
        async move {
            let (_, events, sent) = sim.stream("/generate", &req_body(&text, 2, true)).await;
            events[0].0 - sent
        }
    };
    let long = ttft(format!("a{}", FOX.repeat(400))).await;
    let short = ttft(format!("b{}", FOX.repeat(4))).await;
    assert!(long >= Duration::from_micros(17_000), "{long:?}");
    assert!(long < Duration::from_millis(80), "{long:?}");
    assert!(long > short * 4, "{long:?} vs {short:?}");
    // The trace's model times match: first chunk due ~prefill time after receipt.
    let trace = sim.trace.entries();
    assert!(trace.iter().filter(|e| e.chunk_index == 0).count() >= 2);
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_frees_the_slot() {
    let sim = start(&["--max-running-requests", "1"]).await;
    let mut r = sim
        .http
        .post(format!("{}/generate", sim.base))
        .json(&req_body(FOX, 20_000, true))
        .send()
        .await
        .unwrap();
    r.chunk().await.unwrap();
    drop(r);
    let t = Instant::now();
    let (s, _) = sim
        .post_json("/generate", &req_body("next", 3, false))
        .await;
    assert_eq!(s, 200);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "the aborted request must not hold the slot"
    );
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_request_finishes_with_abort() {
    let sim = start(&[]).await;
    let body = json!({"text": FOX, "rid": "r-1", "sampling_params": {"max_new_tokens": 5000}});
    let task = {
        let (http, url) = (sim.http.clone(), format!("{}/generate", sim.base));
        tokio::spawn(async move {
            http.post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    // SGLang's AbortReq defaults rid to "": an empty object aborts nothing, and is a 200.
    assert_eq!(sim.post("/abort_request", &json!({})).await.0, 200);
    assert_eq!(
        sim.post("/abort_request", &json!({"rid": "r-1"})).await.0,
        200
    );
    let v = task.await.unwrap();
    assert_eq!(v["meta_info"]["finish_reason"]["type"], "abort");
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_endpoints_and_metrics() {
    let sim = start(&[
        "--model-path",
        "org/Model-8B",
        "--tp",
        "2",
        "--enable-metrics",
    ])
    .await;
    sim.post_json("/generate", &req_body(FOX, 3, false)).await;
    let (_, info) = sim.get("/server_info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["tp_size"], 2);
    assert_eq!(info["model_path"], "org/Model-8B");
    assert!(info["max_total_num_tokens"].as_u64().unwrap() > 100_000);
    assert!(info["internal_states"][0]["memory_usage"]["token_capacity"].is_u64());
    assert!(info["version"].is_string() && info["status"] == "ready");
    assert_eq!(sim.get("/get_server_info").await.0, 200);
    let (_, mi) = sim.get("/get_model_info").await;
    assert!(mi.contains("\"is_generation\":true"));
    let (_, models) = sim.get("/v1/models").await;
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["id"], "org/Model-8B");
    assert_eq!(models["data"][0]["owned_by"], "sglang");
    // The scheduler counts a request when it finishes, which can be just after the client has
    // read the final chunk: poll briefly.
    let want = "sglang:num_requests_total{model_name=\"org/Model-8B\"} 1";
    let (mut s, mut m) = sim.get("/metrics").await;
    for _ in 0..100 {
        if m.contains(want) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        (s, m) = sim.get("/metrics").await;
    }
    assert_eq!(s, 200);
    for name in [
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:generation_tokens_total",
        "sglang:token_usage",
    ] {
        assert!(m.contains(name), "{name}");
    }
    assert!(m.contains(want), "{m}");
    sim.stop().await.unwrap();
    let sim = start(&[]).await;
    assert_eq!(sim.get("/metrics").await.0, 404);
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oom_profile_crashes_like_sglang() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("oom.yaml");
    let fast = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/fast.yaml"))
        .unwrap();
    std::fs::write(&path, format!("{fast}\noom_prefill_tokens: 100\n")).unwrap();
    let sim = start(&["--profile", path.to_str().unwrap()]).await;
    let (s, _) = sim.post_json("/generate", &req_body(FOX, 2, false)).await;
    assert_eq!(s, 200, "small prompts are fine");
    let r = sim
        .http
        .post(format!("{}/generate", sim.base))
        .json(&req_body(&FOX.repeat(20), 2, false))
        .send()
        .await;
    assert!(r.is_err() || !r.unwrap().status().is_success());
    let log = sim.log.clone();
    let result = tokio::time::timeout(Duration::from_secs(5), sim.task)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_err());
    let text = log.lines().join("\n");
    assert!(text.contains("Scheduler hit an exception: Traceback"));
    assert!(text.contains("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"));
    assert!(
        text.contains("Received sigquit from a child process. It usually means the child failed.")
    );
}

#[test]
fn cli_rejects_bad_values_and_prints_help() {
    use assert_cmd::Command;
    let out = Command::new(env!("CARGO_BIN_EXE_servebench-sim"))
        .args(["--port", "abc"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port"));
    let out = Command::new(env!("CARGO_BIN_EXE_servebench-sim"))
        .args(["--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--chunked-prefill-size",
        "--speculative-algorithm",
        "h100-llama8b",
        "fast",
    ] {
        assert!(help.contains(needle), "{needle}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_servebench-sim"))
        .args(["--port", "0", "--mem-fraction-static", "0.1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    ));
    // A value outside a flag's choices, a word where SGLang's integer parser wants a number:
    // exit 2 with argparse's words (sglang 0.5.23's own, checked against it).
    for (args, words) in [
        (
            &["--attention-backend", "no-such-backend"][..],
            "sglang serve: error: argument --attention-backend: invalid choice: 'no-such-backend' (choose from 'triton', 'torch_native',",
        ),
        (
            &["--max-total-tokens", "lots"][..],
            "sglang serve: error: argument --max-total-tokens: Invalid integer value: 'lots'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive.",
        ),
        (
            &["--no-enable-metrics"][..],
            "sglang serve: error: unrecognized arguments: --no-enable-metrics",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_servebench-sim"))
            .args(["--port", "0"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(words), "{args:?}: {err}");
    }
    // A flag sglang 0.5.23 does not have: argparse's exit 2 (it used to be a warning).
    let out = Command::new(env!("CARGO_BIN_EXE_servebench-sim"))
        .args(["--port", "0", "--bogus-flag", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unrecognized arguments: --bogus-flag x"),
        "{err}"
    );
}

/// sglang 0.5.23 reads `--max-total-tokens`, `--context-length` and `--max-prefill-tokens`
/// with its own integer parser, which takes SI and IEC suffixes; its `--no-X` spellings (of
/// BooleanOptionalAction flags) start the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_integer_suffixes_and_negations_are_accepted() {
    let sim = start(&[
        "--max-total-tokens",
        "64k",
        "--context-length",
        "4Ki",
        "--no-enable-tf32-matmul",
        "--no-lora-strict-loading",
    ])
    .await;
    let (_, info) = sim.get("/server_info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["max_total_num_tokens"], 64_000, "{info}");
    assert_eq!(info["context_length"], 4096, "{info}");
    sim.stop().await.unwrap();
}

// ---- The `kimi-k2.6-8x-rtxpro6000` profile against its published measurements ----

/// A prompt of exactly `n` token ids; `nonce` makes it distinct from other prompts.
fn kimi_prompt(n: usize, nonce: u32) -> Vec<u32> {
    std::iter::once(1000 + nonce)
        .chain((1..n as u32).map(|i| (i * 7919 + nonce * 13) % 100_000 + 300))
        .collect()
}

fn ids_body(ids: &[u32], max_new: u64) -> Value {
    json!({"input_ids": ids, "sampling_params": {"max_new_tokens": max_new}, "stream": true})
}

const KIMI: &[&str] = &[
    "--profile",
    "kimi-k2.6-8x-rtxpro6000",
    "--tp-size",
    "8",
    "--skip-server-warmup",
];

/// Timing assertions take their turn with the end-to-end runs (see `common::exclusive`).
#[test]
fn kimi_profile_reproduces_the_published_ttft_and_decode_at_a_tenth_of_real_time() {
    timed(kimi_timing_body());
}

async fn kimi_timing_body() {
    let scale = 0.1;
    let sim = start(&[KIMI, &["--sim-time-scale", "0.1"]].concat()).await;
    for path in ["/server_info", "/get_server_info"] {
        let info: Value = serde_json::from_str(&sim.get(path).await.1).unwrap();
        assert_eq!(info["sim_time_scale"], 0.1, "{path}");
        assert_eq!(info["context_length"], 200_000);
        assert!(info["max_req_input_len"].as_u64().unwrap() > 180_000);
    }
    // Cold: a fresh prompt of 11405 tokens, 17 output tokens, streamed.
    let ids = kimi_prompt(11_405, 1);
    let (status, events, sent) = sim.stream("/generate", &ids_body(&ids, 17)).await;
    assert_eq!(status, 200);
    let ttft = (events[0].0 - sent).as_secs_f64();
    assert!((ttft / (3.96 * scale) - 1.0).abs() < 0.10, "TTFT {ttft}");
    let last: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
    let steps = last["meta_info"]["spec_verify_ct"].as_f64().unwrap();
    assert_eq!(last["meta_info"]["completion_tokens"], 17);
    assert!(steps < 16.0, "several tokens per step");
    // Decode seconds per output token, for the profile's mean of 5.70 steps per 16 tokens
    // (single requests take 5 to 7): published 0.072 at 11.4k.
    let decode = (events[events.len() - 2].0 - events[0].0).as_secs_f64();
    let s_per_tok = decode / steps * 5.70 / 16.0;
    assert!(
        (s_per_tok / (0.072 * scale) - 1.0).abs() < 0.10,
        "s/out_tok {s_per_tok} over {steps} steps"
    );
    // Cache hit: the same prompt again computes one token (62.5 ms), then decodes 16 more
    // (steps x 203.4 ms): 1.22 s for the mean 5.70 steps. The published single sample is
    // 1.57 s; the profile's header says why the model does not chase it.
    let (_, events, sent) = sim.stream("/generate", &ids_body(&ids, 17)).await;
    let last: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
    assert_eq!(last["meta_info"]["cached_tokens"], 11_404);
    let steps = last["meta_info"]["spec_verify_ct"].as_f64().unwrap();
    let first = (events[0].0 - sent).as_secs_f64();
    let t_b = (events[events.len() - 2].0 - sent).as_secs_f64();
    // The first chunk: the one-token prefill plus the request's handling, which is real time
    // (unscaled; a debug build parses 11k ids in a few ms).
    assert!(
        first > 0.0625 * scale && first < 0.0625 * scale + 0.025,
        "{first}"
    );
    let decode_model = steps * 0.2034 * scale;
    assert!(
        ((t_b - first) / decode_model - 1.0).abs() < 0.10,
        "decode {} vs {decode_model}",
        t_b - first
    );
    assert!((t_b / (1.57 * scale) - 1.0).abs() < 0.30, "t_b {t_b}");
    sim.stop().await.unwrap();
}

/// The two-point method with a flush between the requests: 1.4k and 11.4k prompts prefilled
/// twice each, 45.5k once; the second 45.5k prefill dies. Returns the requests' statuses.
async fn kimi_double_prefill_sequence(sim: &Sim) -> Vec<Result<u16, String>> {
    let mut out = Vec::new();
    for (n, nonce) in [(1424, 1), (11_405, 2), (45_507, 3)] {
        let ids = kimi_prompt(n, nonce);
        for max_new in [1, 17] {
            assert_eq!(sim.post("/flush_cache", &json!({})).await.0, 200);
            let r = sim
                .http
                .post(format!("{}/generate", sim.base))
                .json(&json!({"input_ids": ids, "sampling_params": {"max_new_tokens": max_new}}))
                .send()
                .await;
            let r = match r {
                Ok(r) => Ok(r.status().as_u16()).and_then(|s| {
                    if s == 200 {
                        Ok(s)
                    } else {
                        Err(format!("status {s}"))
                    }
                }),
                Err(e) => Err(e.to_string()),
            };
            let failed = r.is_err();
            out.push(r);
            if failed {
                return out;
            }
        }
    }
    out
}

/// Takes its turn (see `common::exclusive`): long prompts keep both cores busy.
#[test]
fn kimi_double_prefill_at_094_runs_out_of_memory_like_sglang() {
    timed(kimi_oom_body());
}

async fn kimi_oom_body() {
    let sim = start_with(&[KIMI, &["--sim-time-scale", "0.01"]].concat(), |c| {
        c.expandable_segments = false;
    })
    .await;
    let results = kimi_double_prefill_sequence(&sim).await;
    assert_eq!(results.len(), 6, "{results:?}");
    assert!(results[..5].iter().all(Result::is_ok), "{results:?}");
    assert!(results[5].is_err(), "the second 45.5k prefill must fail");
    let log = sim.log.clone();
    let result = tokio::time::timeout(Duration::from_secs(5), sim.task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        result.is_err(),
        "serve returns an error: the process exits 1"
    );
    let text = log.lines().join("\n");
    assert!(text.contains("Scheduler hit an exception: Traceback (most recent call last):"));
    assert!(
        text.contains("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a total capacity of 94.97 GiB of which 444.77 MiB is free"),
        "{text}"
    );
    assert!(text.contains("expandable_segments:True"));
    assert!(
        text.contains("Received sigquit from a child process. It usually means the child failed.")
    );
    // SGLang logs a batch before running it: the fatal fifth chunk of the second 45.5k is logged.
    let prefills = log
        .lines()
        .iter()
        .filter(|l| l.contains("Prefill batch") && l.contains("#new-token: 8192"))
        .count();
    assert_eq!(
        prefills,
        2 + 5 + 5,
        "11.4k x2, 45.5k: five full chunks each"
    );
}

/// Takes its turn (see `common::exclusive`): long prompts keep both cores busy.
#[test]
fn kimi_fix_and_cache_hits_survive_the_same_prompts() {
    timed(kimi_fix_body());
}

async fn kimi_fix_body() {
    // The published fix: 0.93, chunks of 4096, expandable segments.
    let fix = [
        KIMI,
        &[
            "--sim-time-scale",
            "0.01",
            "--mem-fraction-static",
            "0.93",
            "--chunked-prefill-size",
            "4096",
        ],
    ]
    .concat();
    let sim = start_with(&fix, |c| c.expandable_segments = true).await;
    let results = kimi_double_prefill_sequence(&sim).await;
    assert_eq!(results.len(), 6);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(sim.log_lines("Memory pool end. avail mem=1.82 GB").len() == 1);
    sim.stop().await.unwrap();
    // Step (1) of the published runs: at 0.94, each prompt prefilled once, the repeat cached.
    let sim = start_with(&[KIMI, &["--sim-time-scale", "0.01"]].concat(), |c| {
        c.expandable_segments = false;
    })
    .await;
    for (n, nonce) in [(1407, 4), (11_382, 5), (45_507, 6)] {
        let ids = kimi_prompt(n, nonce);
        for max_new in [1, 17] {
            let (s, v) = sim
                .post_json(
                    "/generate",
                    &json!({"input_ids": ids, "sampling_params": {"max_new_tokens": max_new}}),
                )
                .await;
            assert_eq!(s, 200, "{v}");
        }
    }
    sim.stop().await.unwrap();
}

/// Sends `n` requests at once, each `max_new` tokens long, and returns each one's
/// completion_tokens (non-streamed /generate).
async fn burst(sim: &Sim, n: usize, max_new: u64) -> Vec<u64> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let (http, url) = (sim.http.clone(), format!("{}/generate", sim.base));
        let body = json!({"text": format!("request {i} {FOX}"), "rid": format!("r{i}"),
            "sampling_params": {"max_new_tokens": max_new}});
        tasks.push(tokio::spawn(async move {
            let v: Value = http
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["meta_info"]["completion_tokens"].as_u64().unwrap_or(0)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// The number after `key` in a log line (`#running-req: 3,` -> 3.0).
fn field(line: &str, key: &str) -> f64 {
    line.split(key)
        .nth(1)
        .and_then(|r| r.split([',', ' ']).find(|s| !s.is_empty()))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_kv_pool_retracts_requests_with_sglangs_lines_and_every_request_completes() {
    // 12 requests of ~20 prompt tokens and 300 output tokens: admission estimates 0.7 x 300
    // each, so about 8 fit in 2,000 tokens; decoding them all needs 8 x 320 = 2,560.
    let sim = start(&[
        "--max-total-tokens",
        "2000",
        "--decode-log-interval",
        "1",
        "--enable-metrics",
    ])
    .await;
    let done = burst(&sim, 12, 300).await;
    assert!(done.iter().all(|n| *n == 300), "{done:?}");
    let retracts = sim.log_lines("KV cache pool is full. Retract requests. #retracted_reqs: ");
    assert!(!retracts.is_empty(), "no retraction logged");
    for l in &retracts {
        assert!(field(l, "#retracted_reqs: ") >= 1.0, "{l}");
        assert!(l.contains("#new_token_ratio: "), "{l}");
    }
    for l in sim.log_lines("Decode batch") {
        assert!(field(&l, "token usage: ") <= 1.0, "{l}");
        assert!(field(&l, "#token: ") <= 2000.0, "{l}");
    }
    // A full pool queues the rest: some decode line shows waiting requests.
    assert!(
        sim.log_lines("Decode batch")
            .iter()
            .any(|l| field(l, "#queue-req: ") > 0.0)
    );
    let (_, metrics) = sim.get("/metrics").await;
    let total = metrics
        .lines()
        .find(|l| l.starts_with("sglang:num_retracted_requests_total{"))
        .map(|l| field(l, "} "))
        .unwrap();
    let logged: f64 = retracts.iter().map(|l| field(l, "#retracted_reqs: ")).sum();
    assert_eq!(total, logged, "the counter is the logged retractions' sum");
    assert!(metrics.contains("sglang:num_requests_total{model_name=\"sim-model\"} 12"));
    sim.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roomy_pool_never_retracts() {
    let sim = start(&["--decode-log-interval", "1"]).await;
    let done = burst(&sim, 12, 300).await;
    assert!(done.iter().all(|n| *n == 300));
    assert!(sim.log_lines("Retract requests").is_empty());
    sim.stop().await.unwrap();
}

/// Model times of request `rid`'s outputs.
fn outputs_of(sim: &Sim, rid: &str) -> Vec<Instant> {
    sim.trace
        .entries()
        .into_iter()
        .filter(|e| &*e.rid == rid)
        .map(|e| e.model_time)
        .collect()
}

/// A long prompt arrives while another request decodes: whether the decoding request gets a
/// token from the prefill iteration itself.
async fn decode_during_a_prefill(args: &[&str]) -> bool {
    let sim = start(args).await;
    let (http, url) = (sim.http.clone(), format!("{}/generate", sim.base));
    let first = tokio::spawn(async move {
        let body = json!({"text": FOX, "rid": "short", "sampling_params": {"max_new_tokens": 400}});
        http.post(url).json(&body).send().await.unwrap().status()
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    let long =
        json!({"text": FOX.repeat(400), "rid": "long", "sampling_params": {"max_new_tokens": 2}});
    assert_eq!(sim.post("/generate", &long).await.0, 200);
    assert_eq!(first.await.unwrap().as_u16(), 200);
    let long_first = outputs_of(&sim, "long")[0];
    let short = outputs_of(&sim, "short");
    assert!(short.len() > 2 && short[0] < long_first);
    sim.stop().await.unwrap();
    short.contains(&long_first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_chunk_decodes_running_requests_in_the_prefill_iteration() {
    assert!(decode_during_a_prefill(&["--enable-mixed-chunk"]).await);
    assert!(
        !decode_during_a_prefill(&[]).await,
        "SGLang's default: prefill alone"
    );
}

// ---- sglang 0.5.23 (sglang-facts section 9; issue 18 items 8 and 12) ----

/// Prompt + `max_new_tokens` at or over the context is a 400 (tokenizer_manager.py), not a
/// shortened output; the scheduler's own limit is min(context - 1, pool - 1) - 5 (tp_worker.py)
/// with its own wording, and `/server_info` says that limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_refuses_what_does_not_fit_the_context_in_0_5_23s_words() {
    let sim = start(&["--context-length", "1024"]).await;
    let ids: Vec<u32> = (0..1000).map(|i| 300 + i).collect();
    let body =
        |max_new: u64| json!({"input_ids": ids, "sampling_params": {"max_new_tokens": max_new}});
    let (s, v) = sim.post_json("/generate", &body(100)).await;
    assert_eq!(s, 400, "{v}");
    let m = v["error"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("Requested token count exceeds the model's maximum context length of 1024 tokens. You requested a total of 1100 tokens: 1000 tokens from the input messages and 100 tokens for the completion."),
        "{m}"
    );
    // What fits is generated in full.
    let (s, v) = sim.post_json("/generate", &body(20)).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["meta_info"]["completion_tokens"], 20);
    let (s, v) = sim
        .post_json(
            "/v1/completions",
            &json!({"prompt": ids, "max_tokens": 100}),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("Requested token count exceeds"),
        "{v}"
    );
    sim.stop().await.unwrap();

    // A KV pool smaller than the context: the scheduler's limit, 600 - 1 - 5.
    let sim = start(&["--context-length", "4096", "--max-total-tokens", "600"]).await;
    let (_, info) = sim.get("/server_info").await;
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["max_req_input_len"], 594, "{info}");
    let ids: Vec<u32> = (0..594).map(|i| 300 + i).collect();
    let (s, v) = sim
        .post_json(
            "/generate",
            &json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 4}}),
        )
        .await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(
        v["error"]["message"],
        "Input length (594 tokens) exceeds the maximum allowed length (594 tokens). Use a shorter input or enable --allow-auto-truncate."
    );
    // servebench's calibration reads the limit out of this very message
    // (`prompt::calibrate::tests`, the root crate's).
    sim.stop().await.unwrap();
}

/// `/generate` bodies are validated first (400 `{"error": "..."}`), `meta_info` has
/// `num_retractions` and `reasoning_tokens`, `/get_load` is gone and `/ready` exists,
/// `/health` is a generation through the scheduler that `/metrics` does not count, and a
/// busy `/flush_cache?timeout=S` waits for the requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_0_5_23_routes_and_bodies() {
    let sim = start(&["--enable-metrics"]).await;
    for bad in [
        json!({"text": "hi", "sampling_params": {"max_new_tokens": 2, "frobnicate": 1}}),
        json!({"text": "hi", "sampling_params": {"max_new_tokens": 2.0}}),
        json!({"text": "hi", "sampling_params": {"max_new_tokens": 2.0}, "stream": true}),
    ] {
        let (s, v) = sim.post_json("/generate", &bad).await;
        assert_eq!(s, 400, "{bad}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    let (s, v) = sim
        .post_json("/generate", &req_body("hi there", 2, false))
        .await;
    assert_eq!(s, 200, "{v}");
    let meta = &v["meta_info"];
    assert_eq!(meta["num_retractions"], 0, "{meta}");
    assert_eq!(meta["reasoning_tokens"], 0, "{meta}");
    assert!(meta.get("total_retractions").is_none(), "{meta}");
    assert_eq!(sim.get("/get_load").await.0, 404);
    assert_eq!(sim.get("/ready").await.0, 200);
    // /health generates (one prefill batch of one token) and is not counted.
    let before = sim.log_lines("Prefill batch").len();
    let started = Instant::now();
    assert_eq!(sim.get("/health").await.0, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(sim.log_lines("Prefill batch").len(), before + 1);
    let (_, metrics) = sim.get("/metrics").await;
    let requests: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("sglang:num_requests_total"))
        .collect();
    assert!(
        requests
            .iter()
            .all(|l| l.ends_with(" 1") || l.ends_with(" 1.0")),
        "only the one /generate request: {requests:?}"
    );
    // Busy: refused at once, or flushed once idle when given a timeout.
    let busy = {
        let http = sim.http.clone();
        let url = format!("{}/generate", sim.base);
        tokio::spawn(async move { http.post(url).json(&req_body(FOX, 200, false)).send().await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(sim.get("/flush_cache").await.0, 400);
    let (s, body) = sim.get("/flush_cache?timeout=30").await;
    assert_eq!((s, body.starts_with("Cache flushed.")), (200, true));
    assert!(busy.await.unwrap().unwrap().status().is_success());
    sim.stop().await.unwrap();
}

/// sglang 0.5.23's OpenAI streams: the 200 head comes with the first token (not before the
/// prefill), usage is not on the chat role chunk, and there is no chunk with empty content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_openai_head_comes_with_the_first_token() {
    let sim = start(&["--sim-time-scale", "100", "--skip-server-warmup"]).await;
    let prompt = FOX.repeat(200);
    let body = json!({"prompt": prompt, "max_tokens": 2, "stream": true});
    let sent = Instant::now();
    let mut r = sim
        .http
        .post(format!("{}/v1/completions", sim.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    let head = sent.elapsed();
    let first = r.chunk().await.unwrap().unwrap();
    let first_at = sent.elapsed();
    assert!(String::from_utf8_lossy(&first).contains("\"text\""));
    assert!(
        head.as_secs_f64() >= 0.8 * first_at.as_secs_f64() && first_at > Duration::from_millis(100),
        "head after {head:?}, first token after {first_at:?}"
    );
    while r.chunk().await.unwrap().is_some() {}
    let chat = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true,
                      "stream_options": {"include_usage": true, "continuous_usage_stats": true}});
    let events = sim.stream_json("/v1/chat/completions", &chat).await;
    assert_eq!(
        events[0]["choices"][0]["delta"]["role"], "assistant",
        "{events:?}"
    );
    assert!(events[0]["usage"].is_null(), "{}", events[0]);
    for e in &events[1..] {
        if let Some(content) = e["choices"][0]["delta"]["content"].as_str() {
            assert!(!content.is_empty(), "{e}");
        }
    }
    sim.stop().await.unwrap();
}

/// What the real sglang 0.5.23 writes (compared against it by
/// `real_engine::differential`): the SSE content type, `meta_info`'s `cached_tokens_details`
/// (null without a hit, else the hit on the device), `dp_rank` (null), `weight_versions` on
/// the last output only, `response_sent_to_client_ts` on the first output sent (the plain
/// answer itself); the OpenAI answers' `metadata` and full usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_0_5_23_streams_and_answers_carry_its_fields() {
    let sim = start(&[]).await;
    let r = sim
        .http
        .post(format!("{}/generate", sim.base))
        .json(&req_body(FOX, 3, true))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "text/event-stream; charset=utf-8"
    );
    r.text().await.unwrap();
    let chunks = sim.stream_json("/generate", &req_body(FOX, 3, true)).await;
    assert_eq!(chunks.len(), 3);
    for (i, c) in chunks.iter().enumerate() {
        let m = &c["meta_info"];
        let cached = m["cached_tokens"].as_u64().unwrap();
        assert!(cached > 0, "the second time the prompt is cached: {m}");
        assert_eq!(
            m["cached_tokens_details"],
            json!({"device": cached, "host": 0})
        );
        assert_eq!(m["dp_rank"], Value::Null);
        assert!(m.get("dp_rank").is_some());
        assert_eq!(m.get("response_sent_to_client_ts").is_some(), i == 0, "{m}");
        assert_eq!(m.get("weight_versions").is_some(), i == 2, "{m}");
    }
    assert_eq!(
        chunks[2]["meta_info"]["weight_versions"],
        json!([{"version": "default", "start": 0, "end": 3}])
    );
    sim.post("/flush_cache", &json!({})).await;
    let (_, v) = sim.post_json("/generate", &req_body(FOX, 2, false)).await;
    let m = &v["meta_info"];
    let keys: Vec<&String> = m.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "id",
            "finish_reason",
            "prompt_tokens",
            "weight_version",
            "num_retractions",
            "reasoning_tokens",
            "completion_tokens",
            "cached_tokens",
            "weight_versions",
            "cached_tokens_details",
            "dp_rank",
            "e2e_latency",
            "response_sent_to_client_ts"
        ]
    );
    assert_eq!(m["cached_tokens_details"], Value::Null);

    for (path, body) in [
        ("/v1/completions", json!({"prompt": "hi", "max_tokens": 2})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
        ),
    ] {
        let (s, v) = sim.post_json(path, &body).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            v["metadata"],
            json!({"weight_version": "default", "weight_versions": [{"version": "default", "start": 0, "end": 2}]})
        );
        assert_eq!(v["usage"]["prompt_tokens_details"], Value::Null);
        assert!(v["usage"].get("completion_tokens_details").is_some(), "{v}");
        assert!(
            !v["id"].as_str().unwrap().contains('-'),
            "no cmpl- prefix: {v}"
        );
        let mut sbody = body.clone();
        sbody["stream"] = json!(true);
        let r = sim
            .http
            .post(format!("{}{path}", sim.base))
            .json(&sbody)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.headers()["content-type"],
            "text/event-stream; charset=utf-8"
        );
        r.text().await.unwrap();
    }
    let (_, v) = sim
        .post_json(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
        )
        .await;
    assert_eq!(
        v["choices"][0]["message"],
        json!({"role": "assistant", "content": v["choices"][0]["message"]["content"], "reasoning_content": null}),
        "no tool_calls key"
    );
    // Chat: `max_tokens: 0` is zero tokens (not refused); `max_completion_tokens: 0` falls
    // through to `max_tokens` (Python's `or`).
    let (s, v) = sim
        .post_json(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}),
        )
        .await;
    assert_eq!((s, &v["usage"]["completion_tokens"]), (200, &json!(0)));
    let (_, v) = sim
        .post_json(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0, "max_tokens": 3}),
        )
        .await;
    assert_eq!(v["usage"]["completion_tokens"], 3);
    sim.stop().await.unwrap();

    // With --enable-cache-report the cached count is reported, 0 included, in every usage.
    let sim = start(&["--enable-cache-report"]).await;
    let body = json!({"prompt": "hi", "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}});
    let chunks = sim.stream_json("/v1/completions", &body).await;
    assert_eq!(
        chunks.last().unwrap()["usage"]["prompt_tokens_details"],
        json!({"cached_tokens": 0})
    );
    sim.stop().await.unwrap();
}

/// sglang 0.5.23's refusals, in its words and shapes (each compared against the real server,
/// see `docs/reference/sim-vs-real.md`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_0_5_23_refusals_in_its_words() {
    let sim = start(&[]).await;
    let raw = |path: &'static str, body: &'static str| {
        let http = sim.http.clone();
        let url = format!("{}{path}", sim.base);
        async move {
            let r = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let text = r.text().await.unwrap();
            (
                status,
                serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
            )
        }
    };
    // The tokenizer manager's check, plain and streamed.
    let (s, v) = sim
        .post_json(
            "/generate",
            &json!({"sampling_params": {"max_new_tokens": 4}}),
        )
        .await;
    assert_eq!(
        (s, v),
        (
            400,
            json!({"error": {"message": "Either text, input_ids or input_embeds should be provided."}})
        )
    );
    let (s, events, _) = sim
        .stream("/generate", &json!({"sampling_params": {}, "stream": true}))
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&events[0].1).unwrap(),
        json!({"error": {"message": "Either text, input_ids or input_embeds should be provided.",
                         "type": "invalid_request_error", "code": 400, "retryable": false}})
    );
    // The JSON contract gate: serde's words, as a string.
    let (s, v) = sim
        .post_json(
            "/generate",
            &json!({"text": "hi", "sampling_params": {"bogus": 1}}),
        )
        .await;
    assert_eq!(s, 400);
    let e = v["error"].as_str().unwrap();
    assert!(
        e.starts_with("unknown field `bogus`, expected one of `max_new_tokens`, `stop`,")
            && e.ends_with("`beam_width`, `watermark`, `choice`"),
        "{e}"
    );
    // FastAPI's validation errors: the OpenAI object with `type: "Bad Request"`.
    for (path, body) in [
        ("/generate", "{not json"),
        ("/v1/completions", "{not json"),
        ("/v1/chat/completions", "{\"a\":1,}"),
        (
            "/v1/completions",
            "{\"model\": \"tiny\", \"max_tokens\": 4}",
        ),
        (
            "/v1/chat/completions",
            "{\"model\": \"tiny\", \"max_tokens\": 4}",
        ),
        ("/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 0}"),
        ("/generate", "[1, 2]"),
        ("/generate", ""),
        ("/abort_request", "{not json"),
        ("/abort_request", ""),
    ] {
        let (s, v) = raw(path, body).await;
        assert_eq!(s, 400, "{path} {body}: {v}");
        assert_eq!(
            (&v["object"], &v["type"], &v["code"], &v["param"]),
            (
                &json!("error"),
                &json!("Bad Request"),
                &json!(400),
                &Value::Null
            ),
            "{path} {body}: {v}"
        );
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .starts_with("1 validation error:\n  {'type': '"),
            "{v}"
        );
    }
    let (_, v) = raw(
        "/v1/completions",
        "{\"model\": \"tiny\", \"max_tokens\": 4}",
    )
    .await;
    assert_eq!(
        v["message"],
        "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required', 'input': {'model': 'tiny', 'max_tokens': 4}}"
    );
    // A role neither member of the messages' union admits fails both (0.5.23's pydantic
    // errors, taken from its ChatCompletionRequest); a tool message without `tool_call_id`
    // and a system role in capitals are admitted.
    let (s, v) = raw(
        "/v1/chat/completions",
        "{\"messages\": [{\"role\": \"SYSTEM\", \"content\": \"s\"}, {\"role\": \"tool\", \"content\": \"t\"}, {\"role\": \"User\", \"content\": \"u\"}], \"max_tokens\": 1}",
    )
    .await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(
        v["message"],
        "2 validation errors:\n  {'type': 'value_error', 'loc': ('body', 'messages', 2, 'function-after[validate_thinking_parts_role(), ChatCompletionMessageGenericParam]', 'role'), 'msg': \"Value error, 'role' must be one of 'system', 'assistant', 'tool', 'function', 'developer', 'latest_reminder', 'root' (case-insensitive).\", 'input': 'User', 'ctx': {'error': ValueError(\"'role' must be one of 'system', 'assistant', 'tool', 'function', 'developer', 'latest_reminder', 'root' (case-insensitive).\")}}\n  {'type': 'literal_error', 'loc': ('body', 'messages', 2, 'function-after[validate_thinking_parts_role(), ChatCompletionMessageUserParam]', 'role'), 'msg': \"Input should be 'user'\", 'input': 'User', 'ctx': {'expected': \"'user'\"}}"
    );
    let (s, v) = raw(
        "/v1/chat/completions",
        "{\"messages\": [{\"role\": \"SYSTEM\", \"content\": \"s\"}, {\"role\": \"tool\", \"content\": \"t\"}], \"max_tokens\": 1}",
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let (_, v) = raw("/generate", "{not json").await;
    assert_eq!(
        v["message"],
        "1 validation error:\n  {'type': 'json_invalid', 'loc': ('body', 1), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': 'unexpected character, expected a string key'}}"
    );
    // The handlers' own checks: BadRequestError.
    for (path, body, msg) in [
        (
            "/v1/chat/completions",
            json!({"model": "tiny", "messages": [], "max_tokens": 4}),
            "Messages cannot be empty.",
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": "", "max_tokens": 4}),
            "Prompt cannot be empty",
        ),
        (
            "/v1/completions",
            json!({"model": "tiny", "prompt": [], "max_tokens": 4}),
            "Prompt cannot be empty",
        ),
    ] {
        let (s, v) = sim.post_json(path, &body).await;
        assert_eq!(
            (s, v),
            (
                400,
                json!({"object": "error", "message": msg, "type": "BadRequestError", "param": null, "code": 400})
            )
        );
    }
    // Starlette's 404 and 405.
    assert_eq!(
        sim.get("/no/such/path").await,
        (404, "{\"detail\":\"Not Found\"}".to_string())
    );
    let r = sim
        .http
        .get(format!("{}/generate", sim.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.headers()["allow"], "POST, PUT");
    assert_eq!(
        r.text().await.unwrap(),
        "{\"detail\":\"Method Not Allowed\"}"
    );
    sim.stop().await.unwrap();
}
