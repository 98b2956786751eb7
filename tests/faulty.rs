#![allow(dead_code)]
//! A server that misbehaves on purpose, for the trust tests: a raw HTTP/1.1 server on
//! 127.0.0.1:0 speaking just enough of SGLang's and the OpenAI API to be measured, with faults
//! switched on one by one: it closes the connection after every streamed response while
//! advertising keep-alive (as llama.cpp's server does), has no cache flush endpoint, counts
//! tokens at a chosen number of characters per token, refuses prompts over its context, hangs,
//! or sends a line that never ends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server does wrong (everything off: a well-behaved SGLang-like server).
#[derive(Debug, Clone)]
pub struct Faults {
    /// Close the TCP connection after each streamed response, with `Keep-Alive` headers.
    pub close_after_stream: bool,
    /// No `/flush_cache` (404), as vLLM without dev mode or llama.cpp.
    pub no_flush: bool,
    /// Characters per prompt token (SGLang's sim counts about 4; small models' tokenizers ~1.45).
    pub chars_per_token: f64,
    /// Prompts longer than this many tokens get HTTP 400 (llama.cpp's message).
    pub context: u64,
    /// Serve `/props` with `n_ctx` (llama.cpp) and no `/server_info`.
    pub llama_props: bool,
    /// Serve `/tokenize` (llama.cpp's shape: `{"content"}` -> `{"tokens": [...]}`).
    pub tokenize: bool,
    /// After the response headers of a generation, send nothing and keep the connection open.
    pub hang: bool,
    /// After the response headers of a generation, send `data: aaaa...` without ever ending
    /// the line.
    pub endless_line: bool,
    /// Tokens per streamed chunk (several for speculative decoding).
    pub tokens_per_chunk: u32,
    /// Seconds between chunks.
    pub chunk_gap_s: f64,
    /// Report `usage` on every chunk when the request asks for `continuous_usage_stats`.
    pub continuous_usage: bool,
    /// The model name `/v1/models` serves.
    pub model: String,
    /// Hang and endless line apply only to the generation request with this index (0-based, in
    /// the order they arrive); None: to every one.
    pub fault_only: Option<usize>,
    /// Serve SGLang's `/metrics` counters, with prompt tokens counted times this factor (1.0
    /// tells the truth); None: no `/metrics`.
    pub metrics_prompt_scale: Option<f64>,
    /// Lines appended to `/metrics` (NaN values, thousands of series).
    pub metrics_extra: String,
    /// `/metrics` answers HTTP 500 from its request with this index (0-based) on.
    pub metrics_fail_from: Option<usize>,
    /// Close the connection after a generation's first chunk (a server killed mid-stream).
    pub reset_mid_stream: bool,
    /// The faults apply only to generations asking for more tokens than this (a calibration's
    /// one-token counts are served well); None: to every one.
    pub fault_above_tokens: Option<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            close_after_stream: false,
            no_flush: false,
            chars_per_token: 4.0,
            context: 32_768,
            llama_props: false,
            tokenize: false,
            hang: false,
            endless_line: false,
            tokens_per_chunk: 1,
            chunk_gap_s: 0.001,
            continuous_usage: false,
            model: "faulty-model".into(),
            fault_only: None,
            metrics_prompt_scale: None,
            metrics_extra: String::new(),
            metrics_fail_from: None,
            reset_mid_stream: false,
            fault_above_tokens: None,
        }
    }
}

/// What the server saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// TCP connections accepted.
    pub connections: AtomicUsize,
    /// Requests by path, in arrival order.
    pub paths: Mutex<Vec<String>>,
    /// Prompt tokens of each generation request, as this server counted them.
    pub prompt_tokens: Mutex<Vec<u64>>,
    /// Generation requests seen.
    pub generations: AtomicUsize,
}

/// A running faulty server; stops when dropped.
pub struct FaultyServer {
    pub url: String,
    pub port: u16,
    pub seen: Arc<Seen>,
    stop: Arc<AtomicBool>,
}

impl FaultyServer {
    pub fn start(faults: Faults) -> FaultyServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let seen = Arc::new(Seen::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let faults = Arc::new(faults);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                s.connections.fetch_add(1, Ordering::Relaxed);
                let (s, f, st) = (s.clone(), faults.clone(), st.clone());
                std::thread::spawn(move || serve(conn, &f, &s, &st));
            }
        });
        FaultyServer {
            url: format!("http://127.0.0.1:{port}"),
            port,
            seen,
            stop,
        }
    }

    /// Paths requested so far.
    pub fn paths(&self) -> Vec<String> {
        self.seen.paths.lock().unwrap().clone()
    }
}

impl Drop for FaultyServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One request: method, path (with query), body.
struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { method, path, body })
}

fn serve(conn: TcpStream, f: &Faults, seen: &Seen, stop: &AtomicBool) {
    let _ = conn.set_nodelay(true);
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut out = conn;
    while let Some(req) = read_request(&mut reader) {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        seen.paths.lock().unwrap().push(req.path.clone());
        let keep_going = route(&req, &mut out, f, seen);
        if !keep_going {
            let _ = out.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}

fn respond(out: &mut TcpStream, status: &str, content_type: &str, body: &str) {
    let _ = write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: keep-alive\r\n\r\n{body}",
        body.len()
    );
    let _ = out.flush();
}

fn json(out: &mut TcpStream, status: &str, v: serde_json::Value) {
    respond(out, status, "application/json", &v.to_string());
}

/// Serves one request; false closes the connection.
fn route(req: &Request, out: &mut TcpStream, f: &Faults, seen: &Seen) -> bool {
    let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap_or_default();
    let path = req.path.split('?').next().unwrap_or("");
    match (req.method.as_str(), path) {
        ("GET", "/health") => respond(out, "200 OK", "text/plain", ""),
        ("GET", "/v1/models") => json(
            out,
            "200 OK",
            serde_json::json!({"object": "list", "data": [
                {"id": f.model, "object": "model", "owned_by": "faulty", "max_model_len": f.context}
            ]}),
        ),
        ("GET", "/props") if f.llama_props => json(
            out,
            "200 OK",
            serde_json::json!({"default_generation_settings": {"n_ctx": f.context},
                "total_slots": 1, "model_path": "/models/faulty.gguf", "build_info": "b0-faulty"}),
        ),
        ("GET", "/server_info") if !f.llama_props => json(
            out,
            "200 OK",
            serde_json::json!({"context_length": f.context, "max_req_input_len": f.context - 5,
                "version": "0.0.0-faulty"}),
        ),
        ("GET" | "POST", "/flush_cache") if !f.no_flush => {
            respond(out, "200 OK", "text/plain", "Cache flushed.\n")
        }
        ("POST", "/tokenize") if f.tokenize => {
            let text = body["content"].as_str().unwrap_or("");
            let n = count(text, f);
            json(
                out,
                "200 OK",
                serde_json::json!({"tokens": (0..n).collect::<Vec<u64>>()}),
            )
        }
        ("POST", "/generate") | ("POST", "/v1/completions") => {
            return generate(req, &body, out, f, seen);
        }
        ("GET", "/metrics")
            if f.metrics_fail_from.is_some_and(|from| {
                let asked = seen.paths.lock().unwrap();
                asked.iter().filter(|p| *p == "/metrics").count() > from
            }) =>
        {
            respond(
                out,
                "500 Internal Server Error",
                "text/plain",
                "scrape refused\n",
            );
        }
        ("GET", "/metrics") if f.metrics_prompt_scale.is_some() => {
            let scale = f.metrics_prompt_scale.unwrap_or(1.0);
            let prompt: u64 = seen.prompt_tokens.lock().unwrap().iter().sum();
            let n = seen.generations.load(Ordering::Relaxed);
            let body = format!(
                "# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{{model_name=\"m\"}} {}\n\
                 # TYPE sglang:num_requests_total counter\nsglang:num_requests_total{{model_name=\"m\"}} {n}\n\
                 # TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{{model_name=\"m\"}} 0\n",
                (prompt as f64 * scale).round()
            ) + &f.metrics_extra;
            respond(out, "200 OK", "text/plain; version=0.0.4", &body);
        }
        _ => json(
            out,
            "404 Not Found",
            serde_json::json!({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}),
        ),
    }
    true
}

fn count(text: &str, f: &Faults) -> u64 {
    (text.chars().count() as f64 / f.chars_per_token).ceil() as u64
}

fn generate(
    req: &Request,
    body: &serde_json::Value,
    out: &mut TcpStream,
    f: &Faults,
    seen: &Seen,
) -> bool {
    let native = req.path.starts_with("/generate");
    let text = if native {
        body["text"].as_str().unwrap_or("")
    } else {
        body["prompt"].as_str().unwrap_or("")
    };
    let prompt = count(text, f);
    seen.prompt_tokens.lock().unwrap().push(prompt);
    let nth = seen.generations.fetch_add(1, Ordering::Relaxed);
    if prompt > f.context {
        json(
            out,
            "400 Bad Request",
            serde_json::json!({"error": {"code": 400, "type": "exceed_context_size_error",
                "message": format!("request ({prompt} tokens) exceeds the available context size ({} tokens), try increasing it", f.context),
                "n_prompt_tokens": prompt, "n_ctx": f.context}}),
        );
        return true;
    }
    let max = if native {
        body["sampling_params"]["max_new_tokens"].as_u64()
    } else {
        body["max_tokens"].as_u64()
    }
    .unwrap_or(16);
    let faulty =
        f.fault_only.is_none_or(|i| i == nth) && f.fault_above_tokens.is_none_or(|n| max > n);
    let stream = body["stream"].as_bool().unwrap_or(false);
    let continuous = f.continuous_usage
        && body["stream_options"]["continuous_usage_stats"]
            .as_bool()
            .unwrap_or(false);
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5, max=100\r\n\r\n"
    );
    let _ = out.flush();
    if f.hang && faulty {
        std::thread::sleep(Duration::from_secs(3600));
        return false;
    }
    if f.endless_line && faulty {
        let piece = "a".repeat(64 * 1024);
        let mut first = true;
        loop {
            let data = if first {
                format!("data: {piece}")
            } else {
                piece.clone()
            };
            first = false;
            if write!(out, "{:x}\r\n{data}\r\n", data.len()).is_err() || out.flush().is_err() {
                return false;
            }
        }
    }
    let send = |out: &mut TcpStream, event: &str| {
        let _ = write!(out, "{:x}\r\n{event}\r\n", event.len());
        let _ = out.flush();
    };
    let mut done = 0u64;
    while done < max {
        std::thread::sleep(Duration::from_secs_f64(f.chunk_gap_s));
        let n = u64::from(f.tokens_per_chunk).min(max - done);
        done += n;
        let last = done == max;
        let finish = if last { "\"length\"" } else { "null" };
        let event = if native {
            format!(
                "data: {{\"text\":\"{}\",\"meta_info\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{done},\"cached_tokens\":0,\"finish_reason\":{}}}}}\n\n",
                "x".repeat(done as usize),
                if last {
                    "{\"type\":\"length\",\"length\":1}"
                } else {
                    "null"
                }
            )
        } else {
            let usage = if continuous || last {
                format!(
                    ",\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{done},\"total_tokens\":{}}}",
                    prompt + done
                )
            } else {
                String::new()
            };
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"text\":\"{}\",\"finish_reason\":{finish}}}]{usage}}}\n\n",
                "x".repeat(n as usize)
            )
        };
        send(out, &event);
        if f.reset_mid_stream && faulty {
            return false;
        }
    }
    let _ = stream;
    send(out, "data: [DONE]\n\n");
    let _ = write!(out, "0\r\n\r\n");
    let _ = out.flush();
    !f.close_after_stream
}

#[test]
fn the_faulty_server_serves_a_stream_then_closes_when_told() {
    let s = FaultyServer::start(Faults {
        close_after_stream: true,
        ..Faults::default()
    });
    let mut conn = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let body = r#"{"text":"abcdefgh","sampling_params":{"max_new_tokens":3},"stream":true}"#;
    write!(
        conn,
        "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut all = String::new();
    conn.read_to_string(&mut all).unwrap();
    assert!(all.contains("Keep-Alive: timeout=5"), "{all}");
    assert!(all.contains("\"completion_tokens\":3"), "{all}");
    assert!(all.contains("[DONE]"), "{all}");
    assert_eq!(*s.seen.prompt_tokens.lock().unwrap(), vec![2]);
}

/// A spec measuring the server at `url`; `rest` adds top-level keys.
pub fn url_spec(name: &str, url: &str, prompt: &str, rest: &str) -> String {
    format!(
        "name: {name}\nserver:\n  url: {url}\n  ready_timeout: 10s\nworkload:\n  prompt: {prompt}\n  output_tokens: 4\n{rest}"
    )
}

/// The measured requests of a run, in file order.
pub fn measured_requests(dir: &std::path::Path) -> Vec<serde_json::Value> {
    crate::common::read_jsonl(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["role"] == "measure")
        .collect()
}

pub fn flag_kinds(point: &serde_json::Value) -> Vec<String> {
    point["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| f["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Item 1: llama.cpp's server closes the connection after every streamed response while its
/// headers say keep-alive. Nothing may be lost: not a measured request, not a calibration
/// request, not a cache flush; and the client learns it and opens a fresh connection for each
/// request ahead of time, so none has to be retried either.
#[test]
fn a_server_that_closes_after_every_stream_loses_no_request() {
    let server = FaultyServer::start(Faults {
        close_after_stream: true,
        ..Faults::default()
    });
    let ws = crate::common::Workspace::new();
    let spec = ws.write(
        "closes.yaml",
        &url_spec(
            "closes",
            &server.url,
            "{ kind: repeat, tokens: 64 }",
            "sweep:\n  workload.api: [sglang-generate, openai-completions]\n  concurrency: [1, 4]\nrequests: 32\n",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points.len(), 4);
    for p in &points {
        assert_eq!(
            (p["ok"].as_u64(), p["errors"].as_u64()),
            (Some(32), Some(0)),
            "{p}"
        );
        let kinds = flag_kinds(p);
        for bad in [
            "flush-failed",
            "calibration-failed",
            "errors",
            "stale-connections",
        ] {
            assert!(!kinds.iter().any(|k| k == bad), "{bad}: {p}");
        }
    }
    let requests = measured_requests(&dir);
    assert_eq!(requests.len(), 128);
    for r in &requests {
        assert!(r.get("error").is_none(), "{r}");
        assert!(r.get("retried").is_none(), "learned, so never stale: {r}");
        // Every request found a connection opened ahead for it: none paid a handshake when due.
        let how = r["connection"].as_str().unwrap_or("none");
        assert!(how == "pre-opened" || how == "reused", "{r}");
        assert!(r["scheduled_at"].as_f64().unwrap() <= r["sent_at"].as_f64().unwrap());
    }
    // Each of the 128 streams had its own connection; every point's flush went through (and the
    // one that found the endpoint when the server was attached).
    assert!(server.seen.connections.load(Ordering::Relaxed) >= 128);
    let flushes = server
        .paths()
        .iter()
        .filter(|p| *p == "/flush_cache")
        .count();
    assert_eq!(flushes, 1 + 4);
}

/// Item 8: a line that never ends fails its request as malformed at the client's per-event
/// budget (instead of growing the client's memory), and the run goes on.
#[test]
fn an_endless_line_fails_its_request_at_the_budget_and_the_run_goes_on() {
    let server = FaultyServer::start(Faults {
        endless_line: true,
        fault_only: Some(1),
        ..Faults::default()
    });
    let ws = crate::common::Workspace::new();
    let spec = ws.write(
        "endless.yaml",
        &url_spec(
            "endless",
            &server.url,
            "{ kind: repeat, tokens: 64, calibrate: false }",
            "requests: 3\n",
        ),
    );
    let out = ws.run(&spec);
    let dir = crate::common::run_dir(&out);
    let requests = measured_requests(&dir);
    assert_eq!(requests.len(), 3, "{}", crate::common::show(&out));
    let failed: Vec<_> = requests
        .iter()
        .filter(|r| r.get("error").is_some())
        .collect();
    assert_eq!(failed.len(), 1, "{requests:?}");
    let e = &failed[0]["error"];
    assert_eq!(e["kind"], "malformed");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("1048576 bytes") && message.contains("EVENT_BYTES_LIMIT"),
        "{message}"
    );
    assert!(e["body_head"].as_str().unwrap().len() <= 200);
    assert!(dir.join("report.md").exists());
    let points = crate::common::read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points[0]["error_kinds"]["malformed"], 1);
    assert_eq!(points[0]["ok"], 2);
}

/// A server that sends its headers and then nothing: the request times out at the spec's
/// `request_timeout`, and the next one is measured as usual.
#[test]
fn a_hung_request_times_out_at_the_request_timeout() {
    let server = FaultyServer::start(Faults {
        hang: true,
        fault_only: Some(0),
        ..Faults::default()
    });
    let ws = crate::common::Workspace::new();
    let spec = ws.write(
        "hang.yaml",
        &url_spec(
            "hang",
            &server.url,
            "{ kind: repeat, tokens: 64, calibrate: false }",
            "requests: 2\nrequest_timeout: 1s\n",
        ),
    );
    let started = std::time::Instant::now();
    let out = ws.run(&spec);
    let dir = crate::common::run_dir(&out);
    let requests = measured_requests(&dir);
    assert_eq!(requests.len(), 2, "{}", crate::common::show(&out));
    let hung = &requests[0];
    assert_eq!(hung["error"]["kind"], "timeout", "{hung}");
    assert!(
        hung["error"]["message"].as_str().unwrap().contains("1s"),
        "{hung}"
    );
    assert!(hung.get("end_s").is_none());
    assert!(requests[1].get("error").is_none(), "{}", requests[1]);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// Item 12: a stream whose chunks carry several tokens and no per-chunk counts makes ITL a
/// per-chunk gap; the point says so and the report labels it. With usage on every chunk the
/// counts are exact and ITL is per token.
#[test]
fn itl_is_per_token_only_where_the_stream_counts_each_chunk() {
    for continuous_usage in [false, true] {
        let server = FaultyServer::start(Faults {
            tokens_per_chunk: 3,
            continuous_usage,
            chunk_gap_s: 0.003,
            ..Faults::default()
        });
        let ws = crate::common::Workspace::new();
        let spec = ws.write(
            "chunks.yaml",
            &url_spec(
                "chunks",
                &server.url,
                "{ kind: repeat, tokens: 64 }",
                "requests: 3\n",
            )
            .replace(
                "output_tokens: 4",
                "output_tokens: 12\n  api: openai-completions",
            ),
        );
        let (dir, points) = ws.run_ok(&spec);
        let p = &points[0];
        let per_chunk = flag_kinds(p).iter().any(|k| k == "itl-per-chunk");
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        let requests = measured_requests(&dir);
        let itl = p["metrics"]["itl_s"]["p50"].as_f64().unwrap();
        let icl = p["metrics"]["icl_s"]["p50"].as_f64().unwrap();
        if continuous_usage {
            assert!(!per_chunk, "{p}");
            assert!(requests.iter().all(|r| r["chunk_tokens"] == "exact"));
            // 3 tokens per 3 ms chunk: about 1 ms per token.
            assert!(itl < icl / 2.0, "itl {itl} icl {icl}");
            assert!(!report.contains("ITL (per chunk)"));
        } else {
            assert!(per_chunk, "{p}");
            assert!(requests.iter().all(|r| r["chunk_tokens"] == "assumed-one"));
            assert_eq!(itl, icl);
            let flag = &p["flags"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["kind"] == "itl-per-chunk")
                .unwrap()["message"];
            assert!(
                flag.as_str().unwrap().contains("36 tokens in 12 chunks"),
                "{flag}"
            );
            assert!(report.contains("ITL (per chunk)"), "{report}");
            // Per token numbers stay per token.
            let tpot = p["metrics"]["tpot_s"]["mean"].as_f64().unwrap();
            assert!(tpot < icl / 2.0, "tpot {tpot} icl {icl}");
        }
    }
}

/// Item 6 (the server's view): a server whose `/metrics` counts half the prompt tokens the
/// client saw is flagged `server-disagrees`; the same server telling the truth is not, and its
/// counters land beside the client's numbers, every scrape in `metrics.jsonl`.
#[test]
fn server_counters_that_contradict_the_client_are_flagged() {
    for (scale, lying) in [(1.0, false), (0.5, true)] {
        let server = FaultyServer::start(Faults {
            metrics_prompt_scale: Some(scale),
            ..Faults::default()
        });
        let ws = crate::common::Workspace::new();
        let spec = ws.write(
            "view.yaml",
            &url_spec(
                "view",
                &server.url,
                "{ kind: repeat, tokens: 64 }",
                "concurrency: 2\nrequests: 6\n",
            ),
        );
        let (dir, points) = ws.run_ok(&spec);
        let p = &points[0];
        let view = &p["server"];
        let client_prompt: u64 = measured_requests(&dir)
            .iter()
            .map(|r| r["prompt_tokens"].as_u64().unwrap())
            .sum();
        assert_eq!(view["engine"], "sglang", "{p}");
        assert_eq!(view["requests"].as_f64(), Some(6.0), "{p}");
        assert_eq!(
            view["prompt_tokens"].as_f64(),
            Some((client_prompt as f64 * scale).round()),
            "{p}"
        );
        let flagged = p["flags"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == "server-disagrees");
        assert_eq!(flagged.is_some(), lying, "{p}");
        if let Some(f) = flagged {
            assert!(
                f["message"].as_str().unwrap().contains("prompt tokens"),
                "{f}"
            );
        }
        let scrapes = crate::common::read_jsonl(&dir.join("metrics.jsonl"));
        assert!(scrapes.len() >= 2, "a start and an end scrape");
        assert_eq!(scrapes[0]["at"], "start");
        assert_eq!(scrapes.last().unwrap()["at"], "end");
        assert!(scrapes[0]["values"]["sglang:prompt_tokens_total"].is_number());
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(report.contains("## The server's view"), "{report}");
        assert!(
            report.contains(&format!("| 6 / 6 | {client_prompt} / ")),
            "{report}"
        );
        // The point's time series: the client's in-flight requests and the server's gauges.
        let svg = std::fs::read_to_string(dir.join("charts/timeline-p001.svg")).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("in flight (client)"),
            "{svg}"
        );
        assert!(svg.contains("running (server)"));
        assert!(report.contains("](charts/timeline-p001.svg)"), "{report}");
    }
}

/// The pid of the `servebench sim` process (not its supervisor) whose command line names
/// `model`.
fn sim_pid(model: &str) -> Option<i32> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.get(1).map(String::as_str) == Some("sim") && args.iter().any(|a| a == model) {
            return entry.file_name().to_str()?.parse().ok();
        }
    }
    None
}

/// Issue 18 item 19: a launched server SIGKILLed mid-point is lost: the rest of the point is
/// not fired at it, the cause names the signal, and the run exits 1 (README's table).
#[test]
fn a_killed_server_is_called_lost_by_its_signal_and_nothing_more_is_sent_to_it() {
    let _turn = crate::common::exclusive();
    let ws = crate::common::Workspace::new();
    let model = format!("killed-model-{}", std::process::id());
    let spec = ws.write(
        "killed.yaml",
        &format!(
            "name: killed\nserver:\n  engine: sim\n  model: {model}\n  args: {{ profile: fast }}\nworkload:\n  prompt: {{ kind: repeat, tokens: 64, calibrate: false }}\n  output_tokens: 200\nrequests: 200\nconcurrency: 2\n"
        ),
    );
    let child = crate::common::spawn_run(&spec, &ws.path().join("runs"));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let requests = loop {
        let found = std::fs::read_dir(ws.path().join("runs").join("killed"))
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path().join("requests.jsonl"));
        if let Some(f) = found
            && std::fs::read_to_string(&f).is_ok_and(|t| t.lines().count() >= 3)
        {
            break f;
        }
        assert!(std::time::Instant::now() < deadline, "nothing recorded");
        std::thread::sleep(Duration::from_millis(10));
    };
    let pid = sim_pid(&model).expect("the simulator runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let show = crate::common::show(&out);
    assert_eq!(out.status.code(), Some(1), "lost, not degraded (3): {show}");
    let dir = requests.parent().unwrap();
    let points = crate::common::read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 1, "{points:?}");
    let p = &points[0];
    assert_eq!(p["failure"], "killed", "{p}");
    let crash = p["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "server-crashed")
        .unwrap_or_else(|| panic!("{p}"));
    assert!(
        crash["message"]
            .as_str()
            .unwrap()
            .contains("by SIGKILL (signal 9)"),
        "{crash}"
    );
    // The requests in flight broke; at most one connect error per slot finds the server gone.
    let recorded = measured_requests(dir);
    let connect = recorded
        .iter()
        .filter(|r| r["error"]["kind"] == "connect")
        .count();
    assert!(
        connect <= 2,
        "{connect} connect errors: fired at a dead server"
    );
    assert!(recorded.len() < 100, "{} requests sent", recorded.len());
    let meta = crate::common::read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "incomplete", "{meta}");
    assert!(
        meta["status_reason"]
            .as_str()
            .unwrap()
            .contains("the server was lost during p001 (server killed)"),
        "{meta}"
    );
}

/// Issue 18 item 19: a server servebench did not start that dies is lost (the point says
/// so), and the next point is not sent to it (once, it showed `calibration-failed`).
#[test]
fn an_external_server_that_dies_is_lost_not_a_calibration_failure() {
    let server = FaultyServer::start(Faults {
        chunk_gap_s: 0.02,
        ..Faults::default()
    });
    let ws = crate::common::Workspace::new();
    let spec = ws.write(
        "gone.yaml",
        &url_spec(
            "gone",
            &server.url,
            "{ kind: repeat, tokens: 64 }",
            "sweep:\n  workload.output_tokens: [4, 8]\nrequests: 400\nconcurrency: 2\n",
        ),
    );
    let _turn = crate::common::exclusive();
    let child = crate::common::spawn_run(&spec, &ws.path().join("runs"));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while server.seen.generations.load(Ordering::Relaxed) < 6 {
        assert!(std::time::Instant::now() < deadline, "no requests");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(server);
    let out = child.wait_with_output().unwrap();
    let show = crate::common::show(&out);
    assert_eq!(out.status.code(), Some(1), "{show}");
    let dir = crate::common::run_dir(&out);
    let points = crate::common::read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 1, "the next point is not sent: {points:?}");
    let kinds = flag_kinds(&points[0]);
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("server-lost"),
        "{kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k == "calibration-failed"),
        "{kinds:?}"
    );
    assert_eq!(points[0]["failure"], "lost");
    let recorded = measured_requests(&dir);
    assert!(recorded.len() < 300, "{} requests fired", recorded.len());
}

/// A runner whose open-file limit (`ulimit -n`) leaves room for fewer connections than the
/// load has in flight holds requests back rather than fail them: every request is sent and
/// answered, the point says the client limited it and why, and nothing blames the server
/// (no `server-lost`, no failed request); the server keeps running.
#[test]
fn a_client_short_of_file_descriptors_holds_requests_back_and_blames_itself() {
    use crate::common::{ExternalSim, Workspace, read_jsonl, run_dir, show};
    use std::os::unix::process::CommandExt;
    let ws = Workspace::new();
    let mut sim = ExternalSim::start("m", &[], &[]);
    let spec = ws.write(
        "fds.yaml",
        &format!(
            "name: fds\nserver:\n  engine: sglang\n  url: {}\n  model: m\nworkload:\n  prompt: {{ kind: random, tokens: 32 }}\n  output_tokens: 400\nrequest_timeout: 60s\nload: {{ kind: rate, rate: 400, arrival: constant, max_in_flight: 1000 }}\nstop: {{ requests: 300 }}\n",
            sim.url()
        ),
    );
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("servebench"));
    cmd.arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet");
    // 320 descriptors: room for 64 connections beside the 256 the runner keeps for its files.
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, 320, 320)
                .map_err(std::io::Error::from)
        });
    }
    let out = cmd.output().expect("run servebench");
    let dir = run_dir(&out);
    let records = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(
        records.len(),
        300,
        "every request was sent:\n{}",
        show(&out)
    );
    let failed: Vec<&serde_json::Value> =
        records.iter().filter(|r| !r["error"].is_null()).collect();
    assert!(failed.is_empty(), "{failed:?}");
    let points = read_jsonl(&dir.join("points.jsonl"));
    let flags = points[0]["flags"].as_array().unwrap();
    let limited = flags
        .iter()
        .find(|f| {
            f["kind"] == "client-limited" && f["message"].as_str().unwrap().contains("ulimit -n")
        })
        .unwrap_or_else(|| panic!("no flag names the open-file limit: {flags:?}"));
    assert!(
        limited["message"]
            .as_str()
            .unwrap()
            .contains("at most 64 requests"),
        "{limited}"
    );
    assert!(
        !flags.iter().any(|f| f["kind"] == "server-lost"),
        "{flags:?}"
    );
    assert!(sim.is_running(), "the server must be running");
}

/// A port servebench picked can be taken before the engine binds it (any outgoing connection
/// takes an ephemeral port: seen once in the real-engine tier, a Slurm worker's picked port
/// taken 3 s later). servebench starts the server again on fresh picks; a port the spec names
/// is the user's and is never retried.
#[test]
fn a_picked_port_taken_before_the_engine_binds_it_is_picked_again() {
    let ws = crate::common::Workspace::new();
    let bin = env!("CARGO_BIN_EXE_servebench");
    let mark = ws.path().join("first-start");
    // The engine's first start finds its port taken, as SGLang words it; later ones serve.
    let wrapper = ws.write(
        "taken.sh",
        &format!(
            "if [ ! -e '{mark}' ]; then : > '{mark}'\n  echo \"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 1): address already in use\"\n  exit 1\nfi\nexec \"{bin}\" sim \"$@\"\n",
            mark = mark.display()
        ),
    );
    let spec = |name: &str, port: &str| {
        ws.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nserver:\n  engine: sglang\n  launcher: [sh, {}]\n  model: m\n{port}  args: {{ profile: fast }}\n  ready_timeout: 30s\nworkload:\n  prompt: {{ kind: repeat, tokens: 64, calibrate: false }}\n  output_tokens: 4\nrequests: 2\n",
                wrapper.display()
            ),
        )
    };
    let (dir, points) = ws.run_ok(&spec("picked", ""));
    assert_eq!(points[0]["ok"], 2, "{}", points[0]);
    let log = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
    assert!(
        log.contains("address already in use"),
        "the first start: {log}"
    );
    assert!(mark.exists());
    // A port the spec names: the same taken port fails the group, not retried.
    std::fs::remove_file(&mark).unwrap();
    let port = servebench::host::free_port().unwrap_or(0);
    let out = ws.run_with(&spec("named", &format!("  port: {port}\n")), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", crate::common::show(&out));
    let dir = crate::common::run_dir(&out);
    let points = crate::common::read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points[0]["failure"], "port-in-use", "{}", points[0]);
    // Picked ports taken every time: three starts, then a failure that does not tell the
    // user to omit the `server.port` the spec never named.
    let always = ws.write(
        "always.sh",
        "echo \"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 1): address already in use\"\nexit 1\n",
    );
    let text = std::fs::read_to_string(spec("always", "")).unwrap();
    let path = ws.write(
        "always.yaml",
        &text.replace(
            &wrapper.display().to_string(),
            &always.display().to_string(),
        ),
    );
    let out = ws.run_with(&path, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", crate::common::show(&out));
    let dir = crate::common::run_dir(&out);
    let log = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
    assert_eq!(log.matches("address already in use").count(), 3, "{log}");
    let points = crate::common::read_jsonl(&dir.join("points.jsonl"));
    let said = points[0].to_string();
    assert!(
        said.contains("servebench picked free ports 3 times") && !said.contains("omit server.port"),
        "{said}"
    );
}
