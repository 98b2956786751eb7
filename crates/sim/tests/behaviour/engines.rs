//! `servebench sim --api vllm|llama.cpp`: each engine's surface, driven as a child process the
//! way an engine adapter launches it. Each test takes its turn with the other end-to-end tests
//! (`common::exclusive`): its servers would otherwise starve their timing on two cores.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FOX: &str = "The quick brown fox jumps over the lazy dog. ";

/// A `servebench sim` child process whose stdout and stderr lines are collected.
pub(crate) struct Server {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    pub(crate) base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn spawn(args: &[&str], env: &[(&str, &str)]) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_servebench-sim"));
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn servebench sim");
    let lines = Arc::new(Mutex::new(Vec::new()));
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    for pipe in [Box::new(out) as Box<dyn Read + Send>, Box::new(err)] {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
    }
    Server {
        child,
        lines,
        base: String::new(),
    }
}

impl Server {
    pub(crate) fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn count(&self, needle: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Waits for a log line containing `needle`; returns it.
    #[track_caller]
    fn wait_line(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(l) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return l.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no line with {needle:?} in:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the process to exit; its status code.
    #[track_caller]
    pub(crate) fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader threads take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return status.code();
            }
            assert!(Instant::now() < deadline, "still running:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn port(&self) -> u16 {
        self.base.rsplit(':').next().unwrap().parse().unwrap()
    }
}

/// Port of the URL at the end of a ready line (`... http://127.0.0.1:PORT[ - ...]`).
fn url_in(line: &str) -> String {
    let at = line.find("http://").expect("a URL");
    line[at..].split_whitespace().next().unwrap().to_string()
}

/// `servebench sim --api vllm ARGS` on a free port, once it accepts connections.
pub(crate) fn vllm(args: &[&str], env: &[(&str, &str)]) -> Server {
    let mut all = vec!["--api", "vllm", "--host", "127.0.0.1", "--port", "0"];
    all.extend_from_slice(args);
    let mut s = spawn(&all, env);
    s.base = url_in(&s.wait_line("Starting vLLM server on http://"));
    s.wait_line("Application startup complete.");
    // As in vLLM, uvicorn logs its start-up just before the socket listens: poll as a client
    // (or an engine adapter polling /health) does.
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", s.port())).is_err() {
        assert!(Instant::now() < deadline, "never listened:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(5));
    }
    s
}

/// `servebench sim --api sglang ARGS` on a free port, once fired up.
pub(crate) fn sglang(args: &[&str]) -> Server {
    let mut all = vec!["--api", "sglang", "--port", "0", "--model-path", "m"];
    all.extend_from_slice(args);
    let mut s = spawn(&all, &[]);
    s.base = url_in(&s.wait_line("Uvicorn running on http://"));
    s.wait_line("The server is fired up and ready to roll!");
    s
}

/// `servebench sim --api llama.cpp ARGS` on a free port, once loaded.
pub(crate) fn llamacpp(args: &[&str]) -> Server {
    let mut all = vec!["--api", "llama.cpp", "--port", "0"];
    all.extend_from_slice(args);
    let mut s = spawn(&all, &[]);
    s.base = url_in(&s.wait_line("server is listening on http://"));
    s
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A client that never reuses a connection (llama.cpp closes them after streams).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

async fn get(base: &str, path: &str) -> (u16, String) {
    let r = client().get(format!("{base}{path}")).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

pub(crate) async fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = client()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Streams a request; every SSE event's data (JSON, or the raw `[DONE]`).
pub(crate) async fn stream(base: &str, path: &str, body: &Value) -> (u16, Vec<String>) {
    let mut r = client()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let mut buf = String::new();
    let mut events = Vec::new();
    while let Some(c) = r.chunk().await.unwrap() {
        buf.push_str(std::str::from_utf8(&c).unwrap());
        while let Some(i) = buf.find("\n\n") {
            let ev: String = buf.drain(..i + 2).collect();
            events.push(
                ev.trim()
                    .strip_prefix("data: ")
                    .unwrap_or(ev.trim())
                    .to_string(),
            );
        }
    }
    assert!(buf.is_empty(), "trailing bytes: {buf:?}");
    (status, events)
}

pub(crate) fn jsons(events: &[String]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

/// A copy of the fast profile that runs out of memory on prefill batches over 100 tokens.
fn oom_profile(dir: &tempfile::TempDir) -> String {
    let fast = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/fast.yaml"))
        .unwrap();
    let path = dir.path().join("oom.yaml");
    std::fs::write(&path, format!("{fast}\noom_prefill_tokens: 100\n")).unwrap();
    path.to_str().unwrap().to_string()
}

// ---------------------------------------------------------------- vLLM ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_vllm_takes_vllm_serve_flags_and_serves_its_identity() {
    let _turn = crate::common::exclusive();
    let s = vllm(
        &[
            "org/Model-8B",
            "--max_model_len",
            "4K",
            "-tp",
            "2",
            "--gpu-memory-utilization",
            "0.9",
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens",
            "2048",
            "--no-enable-chunked-prefill",
            "--enable-chunked-prefill",
            "--enable-prefix-caching",
            "--served-model-name",
            "m1",
            "m2",
            "--disable-log-requests",
            "--enforce-eager",
            "--load-format",
            "dummy",
            "--profile",
            "fast",
        ],
        &[],
    );
    let log = s.log();
    assert!(log.contains("does not model vLLM's --load-format"), "{log}");
    assert!(
        log.contains("non-default args: {'model_tag': 'org/Model-8B'"),
        "{log}"
    );
    assert!(log.contains("] GPU KV cache size: "), "{log}");
    assert!(
        log.contains("Route: /v1/completions, Methods: POST"),
        "{log}"
    );
    assert!(log.contains("(APIServer pid="), "{log}");
    assert_eq!(get(&s.base, "/health").await, (200, String::new()));
    assert_eq!(get(&s.base, "/ping").await, (200, String::new()));
    let (_, v) = get(&s.base, "/version").await;
    let v: Value = serde_json::from_str(&v).unwrap();
    assert!(v["version"].as_str().unwrap().starts_with("0.34.0"));
    let (_, m) = get(&s.base, "/v1/models").await;
    let m: Value = serde_json::from_str(&m).unwrap();
    assert_eq!(m["object"], "list");
    let card = &m["data"][0];
    assert_eq!(
        (
            &card["id"],
            &card["owned_by"],
            &card["root"],
            &card["max_model_len"]
        ),
        (
            &json!("m1"),
            &json!("vllm"),
            &json!("org/Model-8B"),
            &json!(4096)
        )
    );
    assert_eq!(m["data"][1]["id"], "m2");
    // No SGLang endpoints, no dev endpoints without VLLM_SERVER_DEV_MODE.
    for path in [
        "/generate",
        "/flush_cache",
        "/reset_prefix_cache",
        "/v1/tokenize",
    ] {
        let (status, body) = post(&s.base, path, &json!({})).await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(body, json!({"detail": "Not Found"}));
    }
    assert_eq!(get(&s.base, "/server_info").await.0, 404);
    let (status, t) = post(&s.base, "/tokenize", &json!({"prompt": FOX})).await;
    assert_eq!(status, 200);
    assert_eq!(
        (&t["count"], &t["max_model_len"]),
        (&json!(11), &json!(4096))
    );
    let (_, d) = post(&s.base, "/detokenize", &json!({"tokens": t["tokens"]})).await;
    assert!(d["prompt"].is_string());
    // The ids come back as text of as many tokens (vLLM's bench aligns its prompts so).
    let (_, again) = post(&s.base, "/tokenize", &json!({"prompt": d["prompt"]})).await;
    assert_eq!(again["count"], json!(11), "{d}");
    // A request naming another model is refused.
    let (status, e) = post(
        &s.base,
        "/v1/completions",
        &json!({"model": "other", "prompt": "hi", "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(e["error"]["type"], "NotFoundError");
    assert_eq!(e["error"]["param"], "model");
    assert!(s.log().contains("\"GET /v1/models HTTP/1.1\" 200 OK"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_vllm_streams_usage_only_when_asked() {
    let _turn = crate::common::exclusive();
    let s = vllm(&["m"], &[]);
    let body = |opts: Value| {
        let mut b = json!({"model": "m", "prompt": FOX, "max_tokens": 3, "stream": true});
        if !opts.is_null() {
            b["stream_options"] = opts;
        }
        b
    };
    // Plain stream: three chunks, no usage key at all, [DONE].
    let (status, ev) = stream(&s.base, "/v1/completions", &body(Value::Null)).await;
    assert_eq!(status, 200);
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks = jsons(&ev);
    assert_eq!(chunks.len(), 3);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(chunks[0]["object"], "text_completion");
    assert!(chunks[0]["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[0]["choices"][0]["stop_reason"], Value::Null);
    // continuous_usage_stats alone does nothing.
    let (_, ev) = stream(
        &s.base,
        "/v1/completions",
        &body(json!({"continuous_usage_stats": true})),
    )
    .await;
    assert!(jsons(&ev).iter().all(|c| c.get("usage").is_none()));
    // include_usage: a final choices-[] chunk; no cached_tokens without the flag.
    let (_, ev) = stream(
        &s.base,
        "/v1/completions",
        &body(json!({"include_usage": true})),
    )
    .await;
    let chunks = jsons(&ev);
    assert_eq!(chunks.len(), 4);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 11, "total_tokens": 14, "completion_tokens": 3})
    );
    assert!(chunks[..3].iter().all(|c| c.get("usage").is_none()));
    // Both: usage on every chunk, cumulative.
    let (_, ev) = stream(
        &s.base,
        "/v1/completions",
        &body(json!({"include_usage": true, "continuous_usage_stats": true})),
    )
    .await;
    let counts: Vec<u64> = jsons(&ev)
        .iter()
        .map(|c| c["usage"]["completion_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 2, 3, 3]);
    // Chat: the role chunk comes with the first token; the last token carries finish_reason.
    let (_, ev) = stream(
        &s.base,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2,
                "stream": true}),
    )
    .await;
    let chunks = jsons(&ev);
    assert_eq!(chunks.len(), 3, "{chunks:?}");
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert!(chunks[2]["choices"][0]["delta"]["content"].is_string());
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "length");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_vllm_reports_cached_tokens_in_whole_blocks_only_with_the_flag() {
    let _turn = crate::common::exclusive();
    let prompt = FOX.repeat(10); // 101 tokens
    let req = json!({"prompt": prompt, "max_tokens": 2});
    for (flag, expect_details) in [
        (Some("--enable-prompt-tokens-details"), true),
        (None, false),
    ] {
        let args: Vec<&str> = std::iter::once("m").chain(flag).collect();
        let s = vllm(&args, &[]);
        let (_, first) = post(&s.base, "/v1/completions", &req).await;
        let (_, again) = post(&s.base, "/v1/completions", &req).await;
        if expect_details {
            assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
            // 100 tokens match (the last is always recomputed): six whole 16-token blocks.
            assert_eq!(again["usage"]["prompt_tokens_details"]["cached_tokens"], 96);
            let streamed = json!({"prompt": prompt, "max_tokens": 2, "stream": true,
                                  "stream_options": {"include_usage": true}});
            let (_, ev) = stream(&s.base, "/v1/completions", &streamed).await;
            let chunks = jsons(&ev);
            assert_eq!(
                chunks.last().unwrap()["usage"]["prompt_tokens_details"]["cached_tokens"],
                96
            );
        } else {
            assert_eq!(again["usage"]["prompt_tokens_details"], Value::Null);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_vllm_reset_prefix_cache_needs_dev_mode_and_idle_blocks() {
    let _turn = crate::common::exclusive();
    let s = vllm(
        &["m", "--sim-time-scale", "2"],
        &[("VLLM_SERVER_DEV_MODE", "1")],
    );
    assert!(
        s.log()
            .contains("SECURITY WARNING: Development endpoints are enabled!")
    );
    let (status, info) = get(&s.base, "/server_info").await;
    assert_eq!(status, 200);
    let info: Value = serde_json::from_str(&info).unwrap();
    assert!(
        info["vllm_config"]
            .as_str()
            .unwrap()
            .contains("max_model_len=")
    );
    let (status, ok) = post(&s.base, "/reset_prefix_cache", &json!({})).await;
    assert_eq!((status, ok), (200, json!({"success": true})));
    // A running request holds blocks: refused (still 200), then preempted on request.
    let base = s.base.clone();
    let running = tokio::spawn(async move {
        post(
            &base,
            "/v1/completions",
            &json!({"prompt": FOX, "max_tokens": 300}),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (status, refused) = post(&s.base, "/reset_prefix_cache", &json!({})).await;
    assert_eq!((status, refused), (200, json!({"success": false})));
    let (status, forced) = post(
        &s.base,
        "/reset_prefix_cache?reset_running_requests=true",
        &json!({}),
    )
    .await;
    assert_eq!((status, forced), (200, json!({"success": true})));
    let (status, done) = running.await.unwrap();
    assert_eq!(status, 200, "the preempted request recomputes and finishes");
    assert_eq!(done["usage"]["completion_tokens"], 300);
    s.wait_line("Failed to reset prefix cache because some blocks (");
    assert!(s.count("Successfully reset prefix cache") >= 2);
    let (_, m) = get(&s.base, "/metrics").await;
    assert!(
        m.contains("vllm:num_preemptions_total{model_name=\"m\",engine=\"0\"} 1.0"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_vllm_metrics_have_vllm_names_and_true_values() {
    let _turn = crate::common::exclusive();
    let s = vllm(&["m", "--served-model-name", "served"], &[]);
    let req = json!({"prompt": FOX.repeat(4), "max_tokens": 5});
    post(&s.base, "/v1/completions", &req).await;
    post(&s.base, "/v1/completions", &req).await;
    let want = "vllm:request_success_total{model_name=\"served\",engine=\"0\",finished_reason=\"length\"} 2.0";
    let deadline = Instant::now() + Duration::from_secs(10);
    let m = loop {
        let (status, m) = get(&s.base, "/metrics").await;
        assert_eq!(status, 200);
        if m.contains(want) || Instant::now() > deadline {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let labels = "{model_name=\"served\",engine=\"0\"}";
    for line in [
        want.to_string(),
        format!("vllm:num_requests_running{labels} 0.0"),
        format!("vllm:num_requests_waiting{labels} 0.0"),
        format!("vllm:prompt_tokens_total{labels} 82.0"),
        format!("vllm:generation_tokens_total{labels} 10.0"),
        format!("vllm:prefix_cache_queries_total{labels} 82.0"),
        format!("vllm:prefix_cache_hits_total{labels} 32.0"),
        format!("vllm:time_to_first_token_seconds_count{labels} 2.0"),
        format!("vllm:e2e_request_latency_seconds_count{labels} 2.0"),
        format!("vllm:request_queue_time_seconds_count{labels} 2.0"),
        format!("vllm:inter_token_latency_seconds_count{labels} 8.0"),
    ] {
        assert!(m.contains(&line), "{line} not in\n{m}");
    }
    for name in [
        "# TYPE vllm:kv_cache_usage_perc gauge",
        "# TYPE vllm:num_preemptions_total counter",
        "vllm:time_to_first_token_seconds_bucket{model_name=\"served\",engine=\"0\",le=\"+Inf\"} 2.0",
    ] {
        assert!(m.contains(name), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_vllm_refuses_and_clamps_lengths_like_0_33() {
    let _turn = crate::common::exclusive();
    let s = vllm(&["m", "--max-model-len", "64"], &[]);
    let long = FOX.repeat(7); // 71 tokens
    let (status, e) = post(
        &s.base,
        "/v1/completions",
        &json!({"prompt": long, "max_tokens": 1}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        e,
        json!({"error": {"message": "This model's maximum context length is 64 tokens. However, your prompt contains 71 input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.",
                         "type": "BadRequestError", "param": "input_tokens", "code": 400}})
    );
    let (status, e) = post(
        &s.base,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 100}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        e["error"]["message"],
        "max_tokens=100 cannot be greater than max_model_len=64. Please request fewer output tokens."
    );
    // Streaming refusals are plain 400s too.
    let (status, _) = post(
        &s.base,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": long}], "stream": true}),
    )
    .await;
    assert_eq!(status, 400);
    // Prompt + max_tokens over the context: clamped, not refused.
    let (status, ok) = post(
        &s.base,
        "/v1/completions",
        &json!({"prompt": FOX.repeat(2), "max_tokens": 60}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(ok["usage"]["completion_tokens"], 64 - 21);
    assert_eq!(ok["choices"][0]["finish_reason"], "length");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_vllm_logs_stats_and_access_lines() {
    let _turn = crate::common::exclusive();
    let s = vllm(
        &["m", "--max-num-seqs", "1", "--sim-time-scale", "3"],
        &[("VLLM_LOG_STATS_INTERVAL", "0.2")],
    );
    let mut tasks = Vec::new();
    for i in 0..2 {
        let base = s.base.clone();
        tasks.push(tokio::spawn(async move {
            post(
                &base,
                "/v1/completions",
                &json!({"prompt": format!("{i} {FOX}"), "max_tokens": 150}),
            )
            .await
        }));
    }
    let line = s.wait_line("Engine 000: Avg prompt throughput: ");
    for part in [
        "tokens/s, Avg generation throughput: ",
        "Running: 1 reqs, Waiting: ",
        "GPU KV cache usage: ",
        "%, Prefix cache hit rate: ",
    ] {
        assert!(line.contains(part), "{line}");
    }
    assert!(
        line.contains("] Engine 000") && line.starts_with("(APIServer pid="),
        "{line}"
    );
    for t in tasks {
        assert_eq!(t.await.unwrap().0, 200);
    }
    s.wait_line("\"POST /v1/completions HTTP/1.1\" 200 OK");
    s.wait_line("Waiting: 1 reqs");
}

#[test]
fn sim_vllm_out_of_memory_crash_is_logged_as_vllm_does() {
    let _turn = crate::common::exclusive();
    let dir = tempfile::tempdir().unwrap();
    let profile = oom_profile(&dir);
    let mut s = vllm(&["m", "--profile", &profile], &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (status, _) = rt.block_on(post(
        &s.base,
        "/v1/completions",
        &json!({"prompt": FOX, "max_tokens": 2}),
    ));
    assert_eq!(status, 200, "small prompts are fine");
    let url = format!("{}/v1/completions", s.base);
    let r = rt.block_on(async {
        client()
            .post(url)
            .json(&json!({"prompt": FOX.repeat(20), "max_tokens": 2}))
            .send()
            .await
    });
    assert!(r.is_err() || !r.unwrap().status().is_success());
    assert_eq!(s.wait_exit(), Some(1));
    let log = s.log();
    for line in [
        "EngineCore encountered a fatal error.",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ] {
        assert!(log.contains(line), "{line} not in\n{log}");
    }
}

#[test]
fn sim_vllm_start_up_failures_and_bad_flags() {
    let _turn = crate::common::exclusive();
    // KV cache smaller than the context.
    let mut s = spawn(
        &[
            "--api",
            "vllm",
            "m",
            "--port",
            "0",
            "--gpu-memory-utilization",
            "0.21",
        ],
        &[],
    );
    assert_eq!(s.wait_exit(), Some(1));
    let log = s.log();
    assert!(
        log.contains(
            "ValueError: To serve at least one request with the model's max seq len (32768)"
        ),
        "{log}"
    );
    assert!(
        log.contains("the estimated maximum model length is"),
        "{log}"
    );
    assert!(
        log.contains("RuntimeError: Engine core initialization failed."),
        "{log}"
    );
    // No KV cache at all.
    let mut s = spawn(
        &[
            "--api",
            "vllm",
            "m",
            "--port",
            "0",
            "--gpu-memory-utilization",
            "0.1",
        ],
        &[],
    );
    assert_eq!(s.wait_exit(), Some(1));
    assert!(
        s.log()
            .contains("ValueError: No available memory for the cache blocks.")
    );
    // Port in use: fails before loading anything.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let mut s = spawn(
        &["--api", "vllm", "m", "--host", "127.0.0.1", "--port", &port],
        &[],
    );
    assert_eq!(s.wait_exit(), Some(1));
    assert!(
        s.log()
            .contains("OSError: [Errno 98] Address already in use"),
        "{}",
        s.log()
    );
    drop(busy);
    // A model path that does not exist.
    let mut s = spawn(&["--api", "vllm", "/nonexistent/model", "--port", "0"], &[]);
    assert_eq!(s.wait_exit(), Some(1));
    assert!(s.log().contains(
        "ValueError: Invalid repository ID or local directory specified: '/nonexistent/model'"
    ));
    // A flag vLLM does not have: argparse's exit 2, with a hint.
    let mut s = spawn(&["--api", "vllm", "m", "--max-model-lenn", "5"], &[]);
    assert_eq!(s.wait_exit(), Some(2));
    let log = s.log();
    assert!(
        log.contains("vllm serve: error: unrecognized arguments: --max-model-lenn"),
        "{log}"
    );
    assert!(log.contains("did you mean --max-model-len?"), "{log}");
}

#[test]
fn sim_vllm_refuses_connections_until_ready() {
    let _turn = crate::common::exclusive();
    let port = free_port();
    let p = port.to_string();
    // A 1 s warmup (the fast profile's 50 ms at time scale 20).
    let s = spawn(
        &[
            "--api",
            "vllm",
            "m",
            "--host",
            "127.0.0.1",
            "--port",
            &p,
            "--sim-time-scale",
            "20",
        ],
        &[],
    );
    s.wait_line("GPU KV cache size:");
    let err = TcpStream::connect(("127.0.0.1", port)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(s.count("Application startup complete."), 0);
    s.wait_line("Application startup complete.");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The moment a surface's ready line is written, its port accepts connections and `/health`
/// answers 200 (SGLang, vLLM and llama.cpp modes): a runner may take the line as a hint. Each
/// line is checked by the thread reading the pipe, the instant it arrives.
#[test]
fn sim_ready_lines_come_only_once_the_port_listens() {
    let _turn = crate::common::exclusive();
    let cases: [(&[&str], &str); 3] = [
        (&["--api", "vllm", "m"], "Application startup complete."),
        (
            &["--profile", "fast"],
            "The server is fired up and ready to roll!",
        ),
        (
            &["--api", "llama.cpp", "-m", "m.gguf"],
            "all slots are idle",
        ),
    ];
    for round in 0..3 {
        for (args, line) in cases {
            let port = free_port();
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_servebench-sim"));
            cmd.args(args)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            for pipe in [
                Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
                Box::new(child.stderr.take().unwrap()),
            ] {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for l in BufReader::new(pipe).lines().map_while(Result::ok) {
                        if l.contains(line) {
                            let connected = TcpStream::connect(("127.0.0.1", port)).map(|mut c| {
                                c.write_all(
                                    b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                )
                                .unwrap();
                                let mut head = String::new();
                                let _ = BufReader::new(c).read_line(&mut head);
                                head
                            });
                            let _ = tx.send(connected.map_err(|e| e.to_string()));
                        }
                    }
                });
            }
            let got = rx.recv_timeout(Duration::from_secs(60));
            let _ = child.kill();
            let _ = child.wait();
            let head = got.expect("no ready line").unwrap_or_else(|e| {
                panic!("round {round}, {args:?}: {line:?} written before the port listened: {e}")
            });
            assert!(
                head.starts_with("HTTP/1.1 200"),
                "round {round}, {args:?}: /health right after {line:?}: {head}"
            );
        }
    }
}

// ----------------------------------------------------------- llama.cpp ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_llamacpp_health_is_503_while_loading_then_props_and_models() {
    let _turn = crate::common::exclusive();
    let port = free_port();
    let p = port.to_string();
    let s = spawn(
        &[
            "--api",
            "llama.cpp",
            "-m",
            "models/tiny.gguf",
            "--port",
            &p,
            "-c",
            "4096",
            "-np",
            "2",
            "-a",
            "tiny",
            "-t",
            "8",
            "-ngl",
            "99",
            "-fa",
            "on",
            "--no-webui",
            "--cache-reuse",
            "256",
            "--sim-time-scale",
            "20",
        ],
        &[],
    );
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let loading = loop {
        if let Ok(r) = client().get(format!("{base}/health")).send().await {
            break (r.status().as_u16(), r.text().await.unwrap());
        }
        assert!(Instant::now() < deadline, "never listened:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(
        loading,
        (
            503,
            r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#
                .to_string()
        )
    );
    assert_eq!(
        get(&base, "/props").await.0,
        503,
        "every path while loading"
    );
    s.wait_line("srv  llama_server: server is listening on http://127.0.0.1:");
    assert_eq!(
        get(&base, "/health").await,
        (200, r#"{"status":"ok"}"#.to_string())
    );
    let (_, props) = get(&base, "/props").await;
    let props: Value = serde_json::from_str(&props).unwrap();
    assert_eq!(
        props["default_generation_settings"]["n_ctx"], 2048,
        "per slot"
    );
    assert_eq!(props["total_slots"], 2);
    assert_eq!(props["model_path"], "models/tiny.gguf");
    assert!(props["build_info"].as_str().unwrap().starts_with('b'));
    let (_, models) = get(&base, "/v1/models").await;
    let models: Value = serde_json::from_str(&models).unwrap();
    let card = &models["data"][0];
    assert_eq!(
        (&card["id"], &card["owned_by"]),
        (&json!("tiny"), &json!("llamacpp"))
    );
    assert_eq!(card["meta"]["n_ctx_train"], 32768);
    assert!(card.get("max_model_len").is_none());
    let (status, e) = post(&base, "/generate", &json!({})).await;
    assert_eq!(status, 404);
    assert_eq!(e["error"]["type"], "not_found_error");
    assert_eq!(get(&base, "/metrics").await.0, 501, "needs --metrics");
    let log = s.log();
    for line in [
        "srv    load_model: loading model 'models/tiny.gguf'",
        "slot   load_model: id  1 | task -1 | new slot, n_ctx = 2048",
        "srv  llama_server: model loaded",
        "srv  update_slots: all slots are idle",
    ] {
        assert!(log.contains(line), "{line} not in\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_llamacpp_slots_cache_prompts_and_erase_needs_a_save_path() {
    let _turn = crate::common::exclusive();
    let s = llamacpp(&["-m", "tiny.gguf", "-np", "1", "-c", "4096"]);
    let (status, e) = post(&s.base, "/slots/0?action=erase", &json!({})).await;
    assert_eq!(status, 501);
    assert_eq!(
        e,
        json!({"error": {"code": 501, "message": "This server does not support slots action. Start it with `--slot-save-path`", "type": "not_supported_error"}})
    );
    drop(s);
    let dir = tempfile::tempdir().unwrap();
    let s = llamacpp(&[
        "-m",
        "tiny.gguf",
        "-np",
        "1",
        "-c",
        "4096",
        "--slot-save-path",
        dir.path().to_str().unwrap(),
    ]);
    let req = json!({"prompt": FOX.repeat(5), "max_tokens": 3});
    let (_, a) = post(&s.base, "/v1/completions", &req).await;
    let n = a["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(n, 52, "51 tokens and BOS");
    assert_eq!(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let (_, b) = post(&s.base, "/v1/completions", &req).await;
    assert_eq!(b["usage"]["prompt_tokens_details"]["cached_tokens"], n - 1);
    assert_eq!(b["timings"]["cache_n"], n - 1);
    assert_eq!(b["timings"]["prompt_n"], 1);
    // The answer can reach the client a moment before the server releases the slot (as
    // llama-server's HTTP thread and its slot loop do): the slot turns idle within 2 s.
    let deadline = Instant::now() + Duration::from_secs(2);
    let slots = loop {
        let (_, slots) = get(&s.base, "/slots").await;
        let slots: Value = serde_json::from_str(&slots).unwrap();
        if slots[0]["is_processing"] == false || Instant::now() > deadline {
            break slots;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(slots[0]["id"], 0);
    assert_eq!(slots[0]["is_processing"], false);
    assert_eq!(slots[0]["n_ctx"], 4096);
    let (status, erased) = post(&s.base, "/slots/0?action=erase", &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(erased, json!({"id_slot": 0, "n_erased": n + 3}));
    let (_, c) = post(&s.base, "/v1/completions", &req).await;
    assert_eq!(
        c["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "erased"
    );
    let (status, _) = post(&s.base, "/slots/0?action=frob", &json!({})).await;
    assert_eq!(status, 400);
    drop(s);
    let s = llamacpp(&["-m", "tiny.gguf", "--no-slots"]);
    let (status, e) = get(&s.base, "/slots").await;
    assert_eq!(status, 501);
    assert!(e.contains("This server does not support slots endpoint."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_llamacpp_tokenize_has_no_bos_unless_asked_but_completions_do() {
    let _turn = crate::common::exclusive();
    let s = llamacpp(&["-m", "tiny.gguf"]);
    let (_, plain) = post(&s.base, "/tokenize", &json!({"content": FOX})).await;
    let (_, special) = post(
        &s.base,
        "/tokenize",
        &json!({"content": FOX, "add_special": true}),
    )
    .await;
    let plain = plain["tokens"].as_array().unwrap().len();
    let special = special["tokens"].as_array().unwrap();
    assert_eq!(special.len(), plain + 1);
    let (_, c) = post(
        &s.base,
        "/v1/completions",
        &json!({"prompt": FOX, "max_tokens": 1}),
    )
    .await;
    assert_eq!(
        c["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
        special.len()
    );
    let (_, d) = post(&s.base, "/detokenize", &json!({"tokens": special})).await;
    assert!(d["content"].is_string());
    let (_, p) = post(
        &s.base,
        "/tokenize",
        &json!({"content": "hi there", "with_pieces": true}),
    )
    .await;
    assert_eq!(p["tokens"][1]["piece"], " there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_llamacpp_streams_one_event_per_token_with_timings_at_the_end() {
    let _turn = crate::common::exclusive();
    let s = llamacpp(&["-m", "tiny.gguf", "-c", "4096"]);
    let (status, ev) = stream(
        &s.base,
        "/v1/completions",
        &json!({"prompt": FOX, "max_tokens": 5, "stream": true,
                "stream_options": {"include_usage": true}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let chunks = jsons(&ev);
    assert_eq!(chunks.len(), 6, "five tokens, then the final chunk");
    assert!(chunks[..5].iter().all(|c| {
        c["choices"][0]["finish_reason"].is_null()
            && c.get("usage").is_none()
            && c["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
    }));
    let last = &chunks[5];
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(last["choices"][0]["text"], "");
    assert_eq!(last["usage"]["completion_tokens"], 5);
    assert_eq!(last["usage"]["prompt_tokens"], 12);
    let t = &last["timings"];
    assert_eq!(
        (&t["prompt_n"], &t["predicted_n"], &t["cache_n"]),
        (&json!(12), &json!(5), &json!(0))
    );
    for k in ["prompt_ms", "predicted_ms", "predicted_per_token_ms"] {
        assert!(t[k].as_f64().unwrap() > 0.0, "{k}");
    }
    // Chat: the first token brings a role event and a content event.
    let (_, ev) = stream(
        &s.base,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": true}),
    )
    .await;
    let chunks = jsons(&ev);
    assert_eq!(chunks.len(), 5);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "length");
    // Without `stream_options.include_usage` the real server sends no usage on a chat stream
    // (checked against llama-server by `real_engine::llamacpp`).
    assert!(chunks[4]["usage"].is_null(), "{}", chunks[4]);
    // The native endpoint: no [DONE]; the last event says stop.
    let (_, ev) = stream(
        &s.base,
        "/completion",
        &json!({"prompt": FOX, "n_predict": 2, "stream": true}),
    )
    .await;
    assert!(!ev.contains(&"[DONE]".to_string()));
    let chunks = jsons(&ev);
    assert_eq!(chunks.len(), 3);
    assert_eq!(chunks[0]["stop"], false);
    assert_eq!(chunks[0]["tokens"].as_array().unwrap().len(), 1);
    assert_eq!(chunks[2]["stop"], true);
    assert_eq!(chunks[2]["tokens_predicted"], 2);
    assert!(chunks[2]["timings"]["predicted_ms"].is_number());
    // print_timing, as llama-server logs it.
    s.wait_line("slot print_timing: id ");
    s.wait_line("prompt eval time = ");
    s.wait_line("       eval time = ");
    s.wait_line("      total time = ");
    s.wait_line("slot      release: id ");
    s.wait_line("slot launch_slot_: id ");
}

/// Reads one HTTP/1.1 response from `r`: its head and body (Content-Length or chunked).
fn read_response(r: &mut BufReader<TcpStream>) -> (String, String) {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "connection closed mid-head"
        );
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    if lower.contains("transfer-encoding: chunked") {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        let len: usize = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut b = vec![0; len];
        r.read_exact(&mut b).unwrap();
        body = b;
    }
    (head, String::from_utf8(body).unwrap())
}

fn http_post(path: &str, host: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn sim_llamacpp_closes_the_connection_after_each_streamed_response() {
    let _turn = crate::common::exclusive();
    let mut s = llamacpp(&["-m", "tiny.gguf"]);
    let host = format!("127.0.0.1:{}", s.port());
    let tcp = TcpStream::connect(&host).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = tcp.try_clone().unwrap();
    let mut r = BufReader::new(tcp);
    // Non-streamed responses keep the connection: two on one socket.
    for _ in 0..2 {
        w.write_all(
            http_post(
                "/v1/completions",
                &host,
                r#"{"prompt":"hi","max_tokens":2}"#,
            )
            .as_bytes(),
        )
        .unwrap();
        let (head, body) = read_response(&mut r);
        let lower = head.to_ascii_lowercase();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(lower.contains("keep-alive: timeout=5, max=100"), "{head}");
        assert!(!lower.contains("connection: close"), "{head}");
        assert!(body.contains("\"finish_reason\":\"length\""));
    }
    // A streamed response on the same socket: complete, Keep-Alive advertised, then closed.
    w.write_all(
        http_post(
            "/v1/completions",
            &host,
            r#"{"prompt":"hi","max_tokens":3,"stream":true}"#,
        )
        .as_bytes(),
    )
    .unwrap();
    let (head, body) = read_response(&mut r);
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("keep-alive: timeout=5, max=100"), "{head}");
    assert!(!lower.contains("connection: close"), "{head}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    let mut rest = Vec::new();
    assert_eq!(
        r.read_to_end(&mut rest).unwrap(),
        0,
        "closed after the stream"
    );
    // The next request written on that socket goes nowhere.
    let again = w
        .write_all(http_post("/health", &host, "").as_bytes())
        .and_then(|_| {
            let mut buf = [0u8; 64];
            std::thread::sleep(Duration::from_millis(50));
            r.get_mut().read(&mut buf)
        });
    assert!(matches!(again, Ok(0) | Err(_)), "{again:?}");
    // A fresh connection is served as usual.
    let tcp = TcpStream::connect(&host).unwrap();
    let mut w = tcp.try_clone().unwrap();
    let mut r = BufReader::new(tcp);
    w.write_all(format!("GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut r).1, r#"{"status":"ok"}"#);
    let _ = s.child.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_llamacpp_refuses_prompts_over_the_slot_context() {
    let _turn = crate::common::exclusive();
    let s = llamacpp(&["-m", "tiny.gguf", "-c", "128", "-np", "2"]);
    let long = FOX.repeat(7); // 71 tokens + BOS, over 64 per slot
    for path in ["/v1/completions", "/completion"] {
        let (status, e) = post(
            &s.base,
            path,
            &json!({"prompt": long, "max_tokens": 1, "stream": true}),
        )
        .await;
        assert_eq!(status, 400, "{path}");
        assert_eq!(
            e,
            json!({"error": {"code": 400,
                "message": "request (72 tokens) exceeds the available context size (64 tokens), try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": 72, "n_ctx": 64}})
        );
    }
    // A large max_tokens is no error: generation stops when the slot is full.
    let (status, ok) = post(
        &s.base,
        "/v1/completions",
        &json!({"prompt": FOX, "max_tokens": 1000}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(ok["usage"]["completion_tokens"], 64 - 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_llamacpp_np_limits_concurrent_decoding() {
    let _turn = crate::common::exclusive();
    let s = llamacpp(&[
        "-m",
        "tiny.gguf",
        "-np",
        "2",
        "-c",
        "8192",
        "--metrics",
        "--sim-time-scale",
        "2",
    ]);
    let mut tasks = Vec::new();
    for i in 0..4 {
        let base = s.base.clone();
        tasks.push(tokio::spawn(async move {
            post(
                &base,
                "/v1/completions",
                &json!({"prompt": format!("{i} {FOX}"), "max_tokens": 60}),
            )
            .await
        }));
    }
    let (mut most, mut deferred) = (0.0f64, 0.0f64);
    let value = |m: &str, name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
            .unwrap()
            .parse()
            .unwrap()
    };
    while tasks.iter().any(|t| !t.is_finished()) {
        let (_, m) = get(&s.base, "/metrics").await;
        most = most.max(value(&m, "requests_processing"));
        deferred = deferred.max(value(&m, "requests_deferred"));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().0, 200);
    }
    assert_eq!(most, 2.0, "two slots");
    assert!(deferred >= 1.0, "the others waited");
    let (_, m) = get(&s.base, "/metrics").await;
    assert_eq!(value(&m, "tokens_predicted_total"), 240.0);
    assert!(m.contains("# TYPE llamacpp:prompt_tokens_total counter"));
    assert_eq!(s.count("slot launch_slot_: id "), 4);
    // The observed build's speculative counters, 0 without a draft model, and no
    // per-position series.
    for name in [
        "spec_decode_num_draft_tokens_total",
        "spec_decode_num_accepted_tokens_total",
        "spec_decode_num_drafts_total",
    ] {
        assert!(
            m.contains(&format!("# TYPE llamacpp:{name} counter")),
            "{name}"
        );
        assert_eq!(value(&m, name), 0.0, "{name}");
    }
    assert!(!m.contains("per_pos"), "{m}");
}

/// With a draft model (`-md`, `--draft-max N`) the counters count each finished request's
/// drafts as llama.cpp does: N draft tokens per verification step, at most that many
/// accepted, and one per-position series per draft position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_llamacpp_counts_speculative_drafts() {
    let _turn = crate::common::exclusive();
    let s = llamacpp(&[
        "-m",
        "tiny.gguf",
        "-md",
        "draft.gguf",
        "--draft-max",
        "3",
        "--metrics",
    ]);
    let (status, v) = post(
        &s.base,
        "/v1/completions",
        &json!({"prompt": FOX, "max_tokens": 40}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let (_, m) = get(&s.base, "/metrics").await;
    let value = |name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
            .unwrap_or_else(|| panic!("{name} in {m}"))
            .parse()
            .unwrap()
    };
    let drafted = value("spec_decode_num_draft_tokens_total");
    let accepted = value("spec_decode_num_accepted_tokens_total");
    let steps = value("spec_decode_num_drafts_total");
    assert!(steps >= 1.0, "{m}");
    assert_eq!(drafted, 3.0 * steps, "{m}");
    assert!(accepted <= drafted && accepted > 0.0, "{m}");
    let per_pos: Vec<f64> = m
        .lines()
        .filter_map(|l| {
            l.strip_prefix("llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position=\"")
        })
        .map(|l| l.split_whitespace().last().unwrap().parse().unwrap())
        .collect();
    assert_eq!(per_pos.len(), 3, "{m}");
    assert_eq!(per_pos.iter().sum::<f64>(), accepted, "{m}");
    assert!(per_pos.windows(2).all(|w| w[0] >= w[1]), "{per_pos:?}");
}

#[test]
fn sim_llamacpp_failure_lines() {
    let _turn = crate::common::exclusive();
    // Out of memory in a prefill.
    let dir = tempfile::tempdir().unwrap();
    let profile = oom_profile(&dir);
    let mut s = llamacpp(&["-m", "tiny.gguf", "--profile", &profile]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = format!("{}/v1/completions", s.base);
    let _ = rt.block_on(async {
        client()
            .post(url)
            .json(&json!({"prompt": FOX.repeat(20), "max_tokens": 2}))
            .send()
            .await
    });
    assert_eq!(s.wait_exit(), Some(1));
    let log = s.log();
    assert!(log.contains("cudaMalloc failed: out of memory"), "{log}");
    assert!(
        log.contains("ggml_backend_cuda_buffer_type_alloc_buffer: allocating"),
        "{log}"
    );
    // A context whose KV cache does not fit beside the weights.
    let mut s = spawn(
        &[
            "--api",
            "llama.cpp",
            "-m",
            "tiny.gguf",
            "--port",
            "0",
            "-c",
            "1000000",
        ],
        &[],
    );
    assert_eq!(s.wait_exit(), Some(1));
    let log = s.log();
    assert!(log.contains("llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache"), "{log}");
    assert!(
        log.contains("srv  llama_server: exiting due to model loading error"),
        "{log}"
    );
    // Port in use: fails before loading.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let mut s = spawn(
        &["--api", "llama.cpp", "-m", "tiny.gguf", "--port", &port],
        &[],
    );
    assert_eq!(s.wait_exit(), Some(1));
    assert!(s.log().contains(&format!(
        "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: {port}"
    )));
    drop(busy);
    // A model file that does not exist.
    let mut s = spawn(
        &[
            "--api",
            "llama.cpp",
            "-m",
            "/nonexistent/x.gguf",
            "--port",
            "0",
        ],
        &[],
    );
    assert_eq!(s.wait_exit(), Some(1));
    let log = s.log();
    assert!(
        log.contains("gguf_init_from_file: failed to open GGUF file '/nonexistent/x.gguf'"),
        "{log}"
    );
    assert!(log.contains("failed to load model"), "{log}");
    // An argument llama-server does not know.
    let mut s = spawn(&["--api", "llama.cpp", "--model-path", "x"], &[]);
    assert_eq!(s.wait_exit(), Some(1));
    assert!(s.log().contains("error: invalid argument: --model-path"));
}

// -------------------------------------------------------------- SGLang ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_api_sglang_is_the_default_surface() {
    let _turn = crate::common::exclusive();
    let s = spawn(
        &["--api", "sglang", "--port", "0", "--model-path", "m"],
        &[],
    );
    let base = url_in(&s.wait_line("Uvicorn running on http://"));
    s.wait_line("The server is fired up and ready to roll!");
    let (status, v) = post(
        &base,
        "/generate",
        &json!({"text": FOX, "sampling_params": {"max_new_tokens": 2}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(v["meta_info"]["completion_tokens"], 2);
    let mut bad = spawn(&["--api", "tgi"], &[]);
    assert_eq!(bad.wait_exit(), Some(2));
    assert!(bad.log().contains("argument --api: invalid choice"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_api_keys_guard_what_each_engine_guards() {
    let _turn = crate::common::exclusive();
    let auth = |base: &str, path: &str, key: Option<&str>| {
        let mut r = client()
            .post(format!("{base}{path}"))
            .json(&json!({"prompt": "hi", "max_tokens": 1, "content": "hi"}));
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        async move {
            let r = r.send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    // vLLM: /v1 paths only.
    let s = vllm(&["m", "--api-key", "sekrit"], &[]);
    assert_eq!(
        auth(&s.base, "/v1/completions", None).await,
        (401, r#"{"error":"Unauthorized"}"#.to_string())
    );
    assert_eq!(
        auth(&s.base, "/v1/completions", Some("sekrit")).await.0,
        200
    );
    assert_eq!(auth(&s.base, "/tokenize", None).await.0, 200);
    assert!(!s.log().contains("sekrit"), "the key is not logged");
    drop(s);
    // llama.cpp: everything but health and models.
    let s = llamacpp(&["-m", "tiny.gguf", "--api-key", "k1,k2"]);
    let (status, body) = auth(&s.base, "/tokenize", None).await;
    assert_eq!(status, 401);
    assert_eq!(
        body,
        r#"{"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}"#
    );
    assert_eq!(auth(&s.base, "/v1/completions", Some("k2")).await.0, 200);
    assert_eq!(get(&s.base, "/health").await.0, 200);
    assert_eq!(get(&s.base, "/v1/models").await.0, 200);
}

/// The simulator refuses what each engine's build refuses, with the engine's exit status and
/// message shape (issue 18 items 9 and 21): sglang 0.5.23's argparse (exit 2: an ambiguous
/// prefix, a flag it lacks), llama-server of llama-cpp-python 0.3.36 (exit 1: `--mlock`,
/// `--no-mmap`, gone from that build).
#[test]
fn sim_refuses_flags_as_each_engine_build_does() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_servebench-sim"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--model-path", "m", "--pp", "2"]);
    assert_eq!(code, Some(2), "{err}");
    // 0.5.23's parser is `sglang serve`'s, also under `python -m sglang.launch_server`.
    assert!(err.starts_with("usage: sglang serve"), "{err}");
    assert!(
        err.contains("sglang serve: error: ambiguous option: --pp could match --pp-"),
        "{err}"
    );
    let (code, err) = run(&["--model-path", "m", "--cuda-graph-max-bs", "8"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("ambiguous option: --cuda-graph-max-bs could match"),
        "{err}"
    );
    let (code, err) = run(&[
        "--model-path",
        "m",
        "--stream-output",
        "--no-such-flag",
        "3",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "sglang serve: error: unrecognized arguments: --stream-output --no-such-flag 3"
        ),
        "{err}"
    );
    for gone in ["--mlock", "--no-mmap"] {
        let (code, err) = run(&["--api", "llama.cpp", "-m", "m.gguf", gone]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(&format!("error: invalid argument: {gone}")),
            "{err}"
        );
    }
}
