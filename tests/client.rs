//! The streaming client against small scripted HTTP servers: real sockets, exact bytes,
//! controlled delays.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use servebench::client::{Client, FlushOutcome, GenerationRequest, Measured, ServerConnections};
use servebench_model::results::records::{ConnectionUse, ErrorKind, RequestRole, TokenSource};
use servebench_model::spec::types::Api;

/// One step of a scripted response body.
#[derive(Clone)]
enum Step {
    /// Write these bytes (one HTTP chunk).
    Send(Vec<u8>),
    /// Wait before the next step.
    Sleep(u64),
    /// Wait until this many milliseconds after the response began (no drift over many steps).
    At(u64),
    /// Break the connection (the body errors, so the chunked encoding is never terminated).
    Break,
}
use Step::{At, Break, Send, Sleep};

fn send(s: &str) -> Step {
    Send(s.as_bytes().to_vec())
}

/// What the server answers on one path.
#[derive(Clone)]
struct Script {
    status: u16,
    content_type: &'static str,
    steps: Vec<Step>,
}

fn sse(steps: Vec<Step>) -> Script {
    Script {
        status: 200,
        content_type: "text/event-stream",
        steps,
    }
}

/// What the server saw.
#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<(String, HeaderMap, Value)>>>,
}

#[derive(Clone)]
struct AppState {
    scripts: Arc<HashMap<String, Script>>,
    seen: Seen,
}

async fn handle(State(state): State<AppState>, req: Request) -> Response {
    let path = req.uri().path().to_string();
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    state
        .seen
        .requests
        .lock()
        .unwrap()
        .push((path.clone(), headers, json));
    let Some(script) = state.scripts.get(&path).cloned() else {
        return Response::builder()
            .status(404)
            .body(Body::from("not found"))
            .unwrap();
    };
    let start = tokio::time::Instant::now();
    let state = (script.steps.into_iter(), start);
    let stream = futures_util::stream::unfold(state, |(mut steps, start)| async move {
        loop {
            match steps.next()? {
                Sleep(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                At(ms) => tokio::time::sleep_until(start + Duration::from_millis(ms)).await,
                Send(bytes) => return Some((Ok(Bytes::from(bytes)), (steps, start))),
                Break => {
                    return Some((Err(std::io::Error::other("scripted break")), (steps, start)));
                }
            }
        }
    });
    Response::builder()
        .status(StatusCode::from_u16(script.status).unwrap())
        .header(header::CONTENT_TYPE, script.content_type)
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Starts a server on a fresh port answering `scripts` by path; returns its URL and what it saw.
async fn serve(scripts: Vec<(&str, Script)>) -> (String, Seen) {
    let seen = Seen::default();
    let state = AppState {
        scripts: Arc::new(
            scripts
                .into_iter()
                .map(|(p, s)| (p.to_string(), s))
                .collect(),
        ),
        seen: seen.clone(),
    };
    let app = Router::new().fallback(handle).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    (url, seen)
}

fn request(api: Api) -> GenerationRequest {
    GenerationRequest {
        api,
        prompt: "The capital of France is".into(),
        max_tokens: 3,
        ignore_eos: true,
        temperature: 0.0,
        model: None,
        history: Vec::new(),
        prompt_role: "user",
        messages: None,
        spec_tokens_details: false,
        reasoning_markers: None,
        chat_template_kwargs: Default::default(),
        tools: None,
        tool_choice: None,
        headers: Vec::new(),
    }
}

async fn run(api: Api, path: &str, script: Script) -> Measured {
    run_with_timeout(api, path, script, Duration::from_secs(5)).await
}

async fn run_with_timeout(api: Api, path: &str, script: Script, timeout: Duration) -> Measured {
    let (url, _) = serve(vec![(path, script)]).await;
    Client::new(&url, None)
        .unwrap()
        .stream(&request(api), timeout)
        .await
}

fn tokens(m: &Measured) -> Vec<u32> {
    m.chunks.iter().map(|c| c.tokens).collect()
}

#[track_caller]
fn assert_error(
    m: &Measured,
    kind: ErrorKind,
) -> &servebench_model::results::records::RequestError {
    let e = m
        .error
        .as_ref()
        .unwrap_or_else(|| panic!("expected {kind:?}, got success: {m:?}"));
    assert_eq!(e.kind, kind, "{e:?}");
    e
}

fn native(text: &str, ids: usize, completion: u64, finish: Value) -> String {
    let ids: Vec<u64> = (0..ids as u64).collect();
    let event = json!({
        "text": text,
        "output_ids": ids,
        "meta_info": {"id": "5f1c", "finish_reason": finish, "prompt_tokens": 6,
            "completion_tokens": completion, "cached_tokens": 2, "weight_version": "default"}
    });
    format!("data: {event}\n\n")
}

const DONE: &str = "data: [DONE]\n\n";

#[tokio::test]
async fn native_cumulative_with_speculative_chunks() {
    let length = json!({"type": "length", "length": 6});
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native(" Paris", 1, 1, Value::Null)),
            // Speculative decoding: three tokens in one chunk.
            send(&native(" Paris. It is", 4, 4, Value::Null)),
            // Incomplete UTF-8: text unchanged, tokens still counted.
            send(&native(" Paris. It is", 5, 5, Value::Null)),
            send(&native(" Paris. It is é", 6, 6, length)),
            send(DONE),
        ]),
    )
    .await;
    assert!(m.error.is_none(), "{:?}", m.error);
    assert_eq!(tokens(&m), [1, 3, 1, 1]);
    assert_eq!(m.text, " Paris. It is é");
    assert_eq!(
        (m.prompt_tokens, m.completion_tokens, m.cached_tokens),
        (Some(6), Some(6), Some(2))
    );
    assert_eq!(m.token_source, TokenSource::MetaInfo);
    assert_eq!(m.finish_reason.as_deref(), Some("length"));
    assert!(m.end_s.unwrap() >= m.chunks[3].t_s);
    let record = m.into_record(
        "p000",
        1,
        2,
        RequestRole::Measure,
        Api::SglangGenerate,
        6,
        Some(6),
    );
    assert_eq!(
        (record.point.as_str(), record.round, record.index),
        ("p000", 1, 2)
    );
}

#[tokio::test]
async fn native_incremental_stream() {
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native(" Paris", 1, 1, Value::Null)),
            send(&native(". It", 2, 3, Value::Null)),
            send(&native(" is", 1, 4, json!({"type": "stop", "matched": 2}))),
            send(DONE),
        ]),
    )
    .await;
    assert!(m.error.is_none(), "{:?}", m.error);
    assert_eq!(tokens(&m), [1, 2, 1]);
    assert_eq!(m.text, " Paris. It is");
    assert_eq!(m.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn request_bodies_per_api() {
    let (url, seen) = serve(vec![
        ("/generate", sse(vec![send(DONE)])),
        ("/v1/completions", sse(vec![send(DONE)])),
        ("/v1/chat/completions", sse(vec![send(DONE)])),
    ])
    .await;
    let client = Client::new(&url, None).unwrap();
    for api in [Api::SglangGenerate, Api::OpenaiCompletions, Api::OpenaiChat] {
        client.stream(&request(api), Duration::from_secs(5)).await;
    }
    let seen = seen.requests.lock().unwrap();
    assert_eq!(seen[0].0, "/generate");
    assert_eq!(seen[0].2["sampling_params"]["max_new_tokens"], 3);
    assert_eq!(seen[0].2["stream"], true);
    assert_eq!(seen[1].2["prompt"], "The capital of France is");
    assert_eq!(seen[1].2["stream_options"]["include_usage"], true);
    assert_eq!(seen[1].2["stream_options"]["continuous_usage_stats"], true);
    assert_eq!(seen[2].2["messages"][0]["role"], "user");
    assert_eq!(seen[2].2["model"], "default");
    assert_eq!(seen[2].2["ignore_eos"], true);
}

#[tokio::test]
async fn openai_completions_with_usage_chunk() {
    let chunk = |text: &str, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "x", "object": "text_completion", "created": 1, "model": "default",
                "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}],
                "usage": null})
        )
    };
    let usage = json!({"id": "x", "choices": [], "usage": {"prompt_tokens": 6,
        "completion_tokens": 4, "total_tokens": 10, "prompt_tokens_details": null}});
    let m = run(
        Api::OpenaiCompletions,
        "/v1/completions",
        sse(vec![
            send(&chunk(" Paris", Value::Null)),
            send(&chunk("", Value::Null)),
            send(&chunk(".", Value::Null)),
            send(&chunk(" It", json!("length"))),
            send(&format!("data: {usage}\n\n")),
            send(DONE),
        ]),
    )
    .await;
    assert!(m.error.is_none(), "{:?}", m.error);
    // Empty delta and usage-only chunks are kept with 0 tokens; the server's 4 wins over the 3
    // counted chunks.
    assert_eq!(tokens(&m), [1, 0, 1, 1, 0]);
    assert_eq!(
        (m.prompt_tokens, m.completion_tokens, m.cached_tokens),
        (Some(6), Some(4), None)
    );
    assert_eq!(m.token_source, TokenSource::Usage);
    assert_eq!(m.finish_reason.as_deref(), Some("length"));
}

#[tokio::test]
async fn openai_chat_with_role_chunk_and_cache_report() {
    let delta = |d: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0,
                "delta": d, "finish_reason": finish}]})
        )
    };
    let usage = json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 8}}});
    let m = run(
        Api::OpenaiChat,
        "/v1/chat/completions",
        sse(vec![
            send(&delta(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
            )),
            send(&delta(json!({"content": "Hi"}), Value::Null)),
            send(&delta(json!({"content": "!"}), Value::Null)),
            send(&delta(json!({}), json!("stop"))),
            send(&format!("data: {usage}\n\n")),
            send(DONE),
        ]),
    )
    .await;
    assert!(m.error.is_none(), "{:?}", m.error);
    assert_eq!(tokens(&m), [0, 1, 1, 0, 0]);
    assert_eq!(m.text, "Hi!");
    assert_eq!(
        (m.prompt_tokens, m.completion_tokens, m.cached_tokens),
        (Some(9), Some(2), Some(8))
    );
    assert_eq!(m.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn sse_split_at_odd_places_and_crlf() {
    let first = native(" Paris", 1, 1, Value::Null).replace("\n\n", "\r\n\r\n");
    let second = native(" Paris.", 2, 2, Value::Null);
    let third = native(" Paris. It", 3, 3, json!({"type": "length", "length": 3}));
    // One byte per write; a pause now and then makes the server flush, so reads split the event
    // (and its `\r\n` pairs) at odd places.
    let mut steps = Vec::new();
    for (i, b) in first.bytes().enumerate() {
        steps.push(Send(vec![b]));
        if i % 7 == 3 {
            steps.push(Sleep(1));
        }
    }
    // The second event and half of the third in one write; `data:` without a space, a comment.
    let rest = format!(
        ": keep-alive\n\n{}{third}{DONE}",
        second.replacen("data: ", "data:", 1)
    );
    let (a, b) = rest.split_at(rest.len() / 2);
    steps.push(send(a));
    steps.push(Sleep(20));
    steps.push(send(b));
    let m = run(Api::SglangGenerate, "/generate", sse(steps)).await;
    assert!(m.error.is_none(), "{:?}", m.error);
    assert_eq!(tokens(&m), [1, 1, 1]);
    assert_eq!(m.text, " Paris. It");
    // The third event completed in the later write: it is stamped after the pause.
    assert!(m.chunks[2].t_s - m.chunks[1].t_s >= 0.015, "{:?}", m.chunks);
}

#[tokio::test]
async fn arrival_times_reflect_server_delays() {
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            Sleep(50),
            send(&native("a", 1, 1, Value::Null)),
            Sleep(100),
            send(&native("ab", 2, 2, Value::Null)),
            Sleep(100),
            send(&native("abc", 3, 3, json!({"type": "length", "length": 3}))),
            send(DONE),
        ]),
    )
    .await;
    assert!(m.error.is_none(), "{:?}", m.error);
    let t: Vec<f64> = m.chunks.iter().map(|c| c.t_s).collect();
    assert!(t[0] >= 0.045, "{t:?}");
    assert!(t[1] - t[0] >= 0.09 && t[2] - t[1] >= 0.09, "{t:?}");
    assert!(t[2] - t[0] < 0.5, "{t:?}");
    assert!(m.sent_at > 1.7e9);
    // The metrics see the same gaps.
    let r = m.into_record(
        "p000",
        0,
        0,
        RequestRole::Measure,
        Api::SglangGenerate,
        3,
        None,
    );
    let metrics = servebench_report::measure::metrics::request_metrics(&r);
    assert_eq!(metrics.ttft_s, Some(t[0]));
    assert!(metrics.itl_s.len() == 2 && metrics.itl_s.iter().all(|g| *g >= 0.09));
    let decode = metrics.decode_tok_s.unwrap();
    assert!(decode > 4.0 && decode < 11.2, "{decode}"); // 2 tokens over ~0.2 s
}

/// A client busy elsewhere when a token arrives still times it by its arrival: each read
/// carries the kernel's receive stamp, so TTFT is the server's 50 ms, not the 180 ms at which
/// the blocked runtime got to read it, and the wait is recorded apart.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_token_that_waits_for_a_busy_client_keeps_its_arrival_time() {
    let script = sse(vec![
        Sleep(50),
        send(&native("a", 1, 1, Value::Null)),
        Sleep(300),
        send(&native("ab", 2, 2, json!({"type": "length", "length": 2}))),
        send(DONE),
    ]);
    // The server on a runtime of its own, so blocking this one does not stop it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let (url, _) = serve(vec![("/generate", script)]).await;
            tx.send(url).unwrap();
            std::future::pending::<()>().await
        })
    });
    let url = rx.recv().unwrap();
    let client = Client::new(&url, None).unwrap();
    // This (single-threaded) runtime is blocked from 30 ms to 180 ms after the send.
    let blocker = tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        std::thread::sleep(Duration::from_millis(150));
    });
    let m = client
        .stream(&request(Api::SglangGenerate), Duration::from_secs(5))
        .await;
    blocker.await.unwrap();
    assert!(m.error.is_none(), "{:?}", m.error);
    let t: Vec<f64> = m.chunks.iter().map(|c| c.t_s).collect();
    assert!(
        t[0] >= 0.045 && t[0] < 0.15,
        "TTFT {t:?} is not the arrival time"
    );
    let waited = m.read_wait_max_s.expect("the wait is recorded");
    assert!(waited > 0.05, "waited {waited}");
    assert!(t[1] - t[0] >= 0.29, "{t:?}");
}

#[tokio::test]
async fn http_400_keeps_server_message() {
    let body = r#"{"object":"error","message":"The input (5000 tokens) is longer than the model's context length (4096 tokens).","type":"BadRequestError","param":null,"code":400}"#;
    let script = Script {
        status: 400,
        content_type: "application/json",
        steps: vec![send(body)],
    };
    let m = run(Api::OpenaiCompletions, "/v1/completions", script).await;
    let e = assert_error(&m, ErrorKind::Http);
    assert_eq!(e.status, Some(400));
    assert!(
        e.message.contains("longer than the model's context length"),
        "{}",
        e.message
    );
    assert!(e.body_head.as_ref().unwrap().len() <= 200);
    assert!(m.end_s.is_some());

    let nested = r#"{"error":{"message":"bad sampling params"}}"#;
    let script = Script {
        status: 400,
        content_type: "application/json",
        steps: vec![send(nested)],
    };
    let m = run(Api::SglangGenerate, "/generate", script).await;
    assert!(
        assert_error(&m, ErrorKind::Http)
            .message
            .contains("bad sampling params")
    );
}

#[tokio::test]
async fn error_event_in_200_stream() {
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, Value::Null)),
            send(r#"data: {"error":{"message":"The input (9000 tokens) is longer than the model's context length (4096 tokens)."}}"#),
            send("\n\n"),
            send(DONE),
        ]),
    )
    .await;
    let e = assert_error(&m, ErrorKind::StreamError);
    assert!(
        e.message.starts_with("The input (9000 tokens)"),
        "{}",
        e.message
    );
    assert_eq!(e.status, Some(200));
    assert_eq!(tokens(&m), [1]);
}

#[tokio::test]
async fn malformed_json_keeps_short_head_and_earlier_chunks() {
    let garbage = format!("data: {{\"text\": \"{}\n\n", "x".repeat(500));
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, Value::Null)),
            send(&garbage),
            send(DONE),
        ]),
    )
    .await;
    let e = assert_error(&m, ErrorKind::Malformed);
    let head = e.body_head.as_ref().unwrap();
    assert!(
        head.len() <= 200 && head.starts_with("{\"text\": \"xxx"),
        "{head}"
    );
    assert_eq!(tokens(&m), [1]);
}

#[tokio::test]
async fn plain_json_body_is_malformed() {
    let script = Script {
        status: 200,
        content_type: "application/json",
        steps: vec![send(r#"{"text":"Paris","meta_info":{}}"#), send("\n")],
    };
    let m = run(Api::SglangGenerate, "/generate", script).await;
    assert_error(&m, ErrorKind::Malformed);
}

#[tokio::test]
async fn connection_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = Client::new(&url, Some("sekrit-key".into())).unwrap();
    let m = client
        .stream(&request(Api::SglangGenerate), Duration::from_secs(5))
        .await;
    let e = assert_error(&m, ErrorKind::Connect);
    assert!(!e.message.contains("sekrit"));
    assert!(m.end_s.is_none() && m.chunks.is_empty());
}

#[tokio::test]
async fn connection_broken_mid_stream() {
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, Value::Null)),
            Sleep(20),
            send("data: {\"te"),
            Break,
        ]),
    )
    .await;
    assert_error(&m, ErrorKind::Reset);
    assert_eq!(tokens(&m), [1]);
    assert!(m.end_s.is_none());
}

#[tokio::test]
async fn timeout_keeps_chunks_so_far() {
    let m = run_with_timeout(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, Value::Null)),
            Sleep(5000),
            send(DONE),
        ]),
        Duration::from_millis(300),
    )
    .await;
    assert_error(&m, ErrorKind::Timeout);
    assert_eq!(tokens(&m), [1]);
    assert_eq!(m.completion_tokens, Some(1));
}

#[tokio::test]
async fn missing_done_is_incomplete() {
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, Value::Null)),
            send(&native("ab", 2, 2, Value::Null)),
        ]),
    )
    .await;
    assert_error(&m, ErrorKind::Incomplete);
    assert_eq!(tokens(&m), [1, 1]);
    assert!(m.end_s.is_some());

    // A final `[DONE]` missing only its blank line is accepted.
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, Value::Null)),
            send("data: [DONE]"),
        ]),
    )
    .await;
    assert!(m.error.is_none(), "{:?}", m.error);

    // A cut-off event is incomplete, with its head kept.
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, Value::Null)),
            send("data: {\"text\":\"ab"),
        ]),
    )
    .await;
    let e = assert_error(&m, ErrorKind::Incomplete);
    assert_eq!(e.body_head.as_deref(), Some("{\"text\":\"ab"));
}

#[tokio::test]
async fn server_abort_is_a_stream_error() {
    let abort = json!({"type": "abort", "message": "out of memory", "status_code": 500});
    let m = run(
        Api::SglangGenerate,
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, Value::Null)),
            send(&native("a", 1, 1, abort)),
            send(DONE),
        ]),
    )
    .await;
    let e = assert_error(&m, ErrorKind::StreamError);
    assert!(e.message.contains("out of memory"));
    assert_eq!(m.finish_reason.as_deref(), Some("abort"));
}

#[tokio::test]
async fn api_key_is_sent_but_never_recorded() {
    let (url, seen) = serve(vec![(
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, json!({"type": "length", "length": 1}))),
            send(DONE),
        ]),
    )])
    .await;
    let client = Client::new(&url, Some("sekrit-key".into())).unwrap();
    let m = client
        .stream(&request(Api::SglangGenerate), Duration::from_secs(5))
        .await;
    assert!(m.error.is_none(), "{:?}", m.error);
    let auth = seen.requests.lock().unwrap()[0].1[header::AUTHORIZATION].clone();
    assert_eq!(auth.to_str().unwrap(), "Bearer sekrit-key");
    assert!(!format!("{client:?}").contains("sekrit"));
    assert!(!format!("{m:?}").contains("sekrit"));
    let record = m.into_record(
        "p000",
        0,
        0,
        RequestRole::Measure,
        Api::SglangGenerate,
        1,
        None,
    );
    assert!(!serde_json::to_string(&record).unwrap().contains("sekrit"));
}

#[tokio::test]
async fn admin_helpers() {
    let text = |status: u16, body: &str| Script {
        status,
        content_type: "text/plain",
        steps: vec![send(body)],
    };
    let (url, seen) = serve(vec![
        (
            "/flush_cache",
            text(
                200,
                "Cache flushed.\nPlease check backend logs for more details.",
            ),
        ),
        ("/health", text(503, "")),
        (
            "/server_info",
            Script {
                status: 200,
                content_type: "application/json",
                steps: vec![send(r#"{"max_total_num_tokens": 4096, "version": "0.5"}"#)],
            },
        ),
    ])
    .await;
    let client = Client::new(&format!("{url}/"), None).unwrap();
    assert_eq!(client.flush_cache().await.unwrap(), FlushOutcome::Flushed);
    assert_eq!(client.health().await.unwrap(), 503);
    assert_eq!(
        client.get_json("/server_info").await.unwrap()["max_total_num_tokens"],
        4096
    );
    assert!(client.get_json("/missing").await.is_err());
    assert_eq!(seen.requests.lock().unwrap()[0].0, "/flush_cache");

    let (url, _) = serve(vec![("/flush_cache", text(400, "Cache flushed.\nbusy"))]).await;
    let client = Client::new(&url, None).unwrap();
    assert!(
        matches!(client.flush_cache().await.unwrap(), FlushOutcome::Busy(t) if t.contains("busy"))
    );
}

#[tokio::test]
async fn count_prompt_tokens_reads_server_counts() {
    let (url, seen) = serve(vec![(
        "/generate",
        sse(vec![
            send(&native("a", 1, 1, json!({"type": "length", "length": 1}))),
            send(DONE),
        ]),
    )])
    .await;
    let client = Client::new(&url, None).unwrap();
    let counts = client
        .count_prompt_tokens(
            Api::SglangGenerate,
            "hello",
            None,
            std::time::Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(counts, (6, Some(2)));
    assert_eq!(
        seen.requests.lock().unwrap()[0].2["sampling_params"]["max_new_tokens"],
        1
    );
}

#[test]
fn https_and_bad_urls_are_rejected() {
    assert!(Client::new("https://example.com", None).is_err());
    assert!(Client::new("not a url", None).is_err());
}

/// When a raw test server drops a connection instead of answering.
#[derive(Clone, Copy)]
enum Drops {
    /// Never: every request is answered and connections are kept.
    Never,
    /// The `n`th request (from 1) on each connection: the connection is closed as that
    /// request arrives, as when a server times an idle connection out just as it is used.
    NthOnConnection(usize),
    /// Every request after the first `n` the server answered, on any connection.
    AfterServed(usize),
}

/// A raw HTTP/1.1 server answering `/generate` with a one-token native stream and anything
/// else with an empty 200, keeping connections open, except as `drops` says. Returns its URL
/// and the number of connections it accepted.
async fn raw_server(drops: Drops) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let served = served.clone();
            tokio::spawn(async move {
                let mut socket = BufReader::new(socket);
                let mut on_connection = 0;
                loop {
                    let mut line = String::new();
                    if socket.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let post = line.starts_with("POST /generate");
                    let mut length = 0;
                    loop {
                        let mut h = String::new();
                        socket.read_line(&mut h).await.unwrap();
                        let h = h.trim_end().to_ascii_lowercase();
                        if h.is_empty() {
                            break;
                        }
                        if let Some(v) = h.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    socket.read_exact(&mut body).await.unwrap();
                    on_connection += 1;
                    let drop_it = match drops {
                        Drops::Never => false,
                        Drops::NthOnConnection(n) => on_connection == n,
                        Drops::AfterServed(n) => served.load(Ordering::SeqCst) >= n,
                    };
                    if drop_it {
                        return;
                    }
                    served.fetch_add(1, Ordering::SeqCst);
                    let response = if post {
                        let events = format!(
                            "{}{DONE}",
                            native("a", 1, 1, json!({"type": "length", "length": 1}))
                        );
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{events}\r\n0\r\n\r\n",
                            events.len()
                        )
                    } else {
                        "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_string()
                    };
                    socket
                        .get_mut()
                        .write_all(response.as_bytes())
                        .await
                        .unwrap();
                }
            });
        }
    });
    (url, connections)
}

/// Item 1: a kept connection the server closed as the next request arrived: no response byte
/// came back, so the request never reached generation. It is sent again on a fresh
/// connection, succeeds, and says so; admin calls get the same second chance.
#[tokio::test]
async fn a_stale_connection_is_retried_once_on_a_fresh_one() {
    use std::sync::atomic::Ordering;
    let (url, connections) = raw_server(Drops::NthOnConnection(2)).await;
    let client = Client::new(&url, None).unwrap();
    // Admin calls: the second request on the kept connection is dropped, and sent again.
    assert_eq!(client.health().await.unwrap(), 200);
    assert_eq!(client.health().await.unwrap(), 200);
    assert_eq!(client.stale_retries(), 1);
    // A stream on the kept connection (its second request): the same.
    let m = client
        .stream(&request(Api::SglangGenerate), Duration::from_secs(5))
        .await;
    assert!(m.error.is_none(), "{m:?}");
    let stale = m.first_attempt.as_ref().expect("a first attempt");
    assert_eq!(stale.kind, ErrorKind::StaleConnection);
    assert!(
        stale.message.contains("kept from an earlier request"),
        "{}",
        stale.message
    );
    // The second attempt's own connection and times.
    assert_eq!(m.connection, Some(ConnectionUse::Opened));
    assert!(m.connect_s.is_some());
    assert_eq!(tokens(&m), [1]);
    let record = m.into_record(
        "p000",
        0,
        1,
        RequestRole::Measure,
        Api::SglangGenerate,
        3,
        None,
    );
    assert!(record.retried && record.error.is_none());
    assert_eq!(
        record.first_attempt.unwrap().kind,
        ErrorKind::StaleConnection
    );
    assert_eq!(client.stale_retries(), 2);
    assert_eq!(connections.load(Ordering::SeqCst), 3);
}

/// A connection opened for the request and closed by the server without an answer is the
/// server's doing (`reset`), not retried; a retry that meets the same fails as the server's,
/// with the stale first attempt kept.
#[tokio::test]
async fn a_server_that_drops_requests_is_a_reset_not_a_stale_connection() {
    let (url, _) = raw_server(Drops::AfterServed(0)).await;
    let client = Client::new(&url, None).unwrap();
    let m = client
        .stream(&request(Api::SglangGenerate), Duration::from_secs(5))
        .await;
    let e = assert_error(&m, ErrorKind::Reset);
    assert!(e.message.contains("without answering"), "{}", e.message);
    assert!(m.first_attempt.is_none());
    assert_eq!(client.stale_retries(), 0);

    let (url, _) = raw_server(Drops::AfterServed(1)).await;
    let client = Client::new(&url, None).unwrap();
    let req = request(Api::SglangGenerate);
    assert!(
        client
            .stream(&req, Duration::from_secs(5))
            .await
            .error
            .is_none()
    );
    // Once its connection's watch (off the request's path) kept it idle, the next request
    // reuses it.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let m = client.stream(&req, Duration::from_secs(5)).await;
    assert_error(&m, ErrorKind::Reset);
    assert_eq!(
        m.first_attempt.as_ref().map(|e| e.kind),
        Some(ErrorKind::StaleConnection)
    );
}

/// No learning delay in a send: the pool watches the first streams' connections 50 ms after
/// their end to learn whether the server keeps them, off the caller's path, so a request is
/// handed back at its end and the next one goes out at once (on another connection).
#[tokio::test]
async fn the_pools_watch_of_a_connection_does_not_hold_its_request() {
    let (url, _) = raw_server(Drops::Never).await;
    let client = Client::new(&url, None).unwrap();
    let req = request(Api::SglangGenerate);
    let first = client.stream(&req, Duration::from_secs(5)).await;
    assert!(first.error.is_none(), "{first:?}");
    let handed_back = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let end = first.sent_at + first.end_s.unwrap();
    // Handed back within 40 ms of its end (the watch alone takes 50).
    assert!(
        handed_back - end < 0.040,
        "{:.1} ms",
        (handed_back - end) * 1e3
    );
}

/// Item 13: `prepare` opens the connections before the requests; they go out on them, their
/// connect time recorded apart, and the next ones reuse them.
#[tokio::test]
async fn prepared_connections_carry_the_first_wave_and_are_reused() {
    use std::sync::atomic::Ordering;
    let (url, connections) = raw_server(Drops::Never).await;
    let client = Client::new(&url, None).unwrap();
    client.prepare(3).await.unwrap();
    let accepted = || connections.load(Ordering::SeqCst);
    // The server accepts in its own task; give it a moment.
    for _ in 0..100 {
        if accepted() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(accepted(), 3);
    let req = request(Api::SglangGenerate);
    let wave = |client: Client| {
        let req = req.clone();
        async move {
            let runs = (0..3).map(|_| {
                let (client, req) = (client.clone(), req.clone());
                tokio::spawn(async move { client.stream(&req, Duration::from_secs(5)).await })
            });
            futures_util::future::join_all(runs)
                .await
                .into_iter()
                .map(|r| r.unwrap())
                .collect::<Vec<_>>()
        }
    };
    for m in wave(client.clone()).await {
        assert!(m.error.is_none(), "{m:?}");
        assert_eq!(m.connection, Some(ConnectionUse::PreOpened));
        assert!(m.connect_s.unwrap() > 0.0);
        assert!(m.write_s.unwrap() >= 0.0);
        assert!(m.scheduled_at.unwrap() <= m.sent_at);
        assert!(m.chunks[0].t_s > 0.0);
    }
    // The first streams' connections are watched a moment after their end (the pool learning
    // whether the server keeps them), off the requests' path; then they are idle for reuse.
    tokio::time::sleep(Duration::from_millis(150)).await;
    for m in wave(client.clone()).await {
        assert!(m.error.is_none(), "{m:?}");
        assert_eq!(m.connection, Some(ConnectionUse::Reused));
        assert_eq!(m.connect_s, None);
    }
    assert_eq!(accepted(), 3);
    assert_eq!(client.server_connections(), ServerConnections::KeptOpen);
    // Fewer needed: the surplus is closed, nothing new opened.
    client.prepare(1).await.unwrap();
    assert_eq!(accepted(), 3);
}

/// Item 1, at the client: against a server that closes after every stream (keep-alive
/// headers notwithstanding), the client learns it from the first stream and from then on gives
/// each request a connection opened ahead; nothing is retried or lost, admin calls included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_closes_after_streams_gets_a_fresh_connection_per_request() {
    use crate::faulty::{Faults, FaultyServer};
    let server = FaultyServer::start(Faults {
        close_after_stream: true,
        ..Faults::default()
    });
    let client = Client::new(&server.url, None).unwrap();
    client.prepare(1).await.unwrap();
    let req = request(Api::OpenaiCompletions);
    for i in 0..8 {
        let m = client.stream(&req, Duration::from_secs(5)).await;
        assert!(m.error.is_none() && m.first_attempt.is_none(), "{i}: {m:?}");
        // Opened ahead (or the flush's, which the server keeps): never when due.
        assert_ne!(m.connection, Some(ConnectionUse::Opened), "{i}");
        assert_eq!(m.completion_tokens, Some(3));
        assert_eq!(client.flush_cache().await.unwrap(), FlushOutcome::Flushed);
    }
    assert_eq!(
        client.server_connections(),
        ServerConnections::ClosedAfterStream
    );
    assert_eq!(client.stale_retries(), 0);
}

/// Item 8: an SSE line that never ends is cut at the per-event budget; the request fails as
/// malformed, naming it, and the client goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_line_is_malformed_at_the_budget() {
    use crate::faulty::{Faults, FaultyServer};
    let server = FaultyServer::start(Faults {
        endless_line: true,
        fault_only: Some(0),
        ..Faults::default()
    });
    let client = Client::new(&server.url, None).unwrap();
    let req = request(Api::SglangGenerate);
    let m = client.stream(&req, Duration::from_secs(30)).await;
    let e = assert_error(&m, ErrorKind::Malformed);
    assert!(
        e.message
            .contains(&format!("{} bytes", servebench::client::EVENT_BYTES_LIMIT)),
        "{}",
        e.message
    );
    assert!(e.body_head.as_ref().unwrap().starts_with("data: aaaa"));
    let next = client.stream(&req, Duration::from_secs(5)).await;
    assert!(next.error.is_none(), "{next:?}");
}

/// Issue 36: a thinking model on vLLM's current chat shape (`delta.reasoning`, no usage per
/// chunk), 32 thinking then 32 answer tokens, 5 ms a token, the first at 40 ms. Main 32e4dc2
/// read only `reasoning_content`: TTFT 205 ms (the first answer token), TPOT 2.54 ms and a
/// "2.00 tokens per chunk" warning. SGLang's and llama.cpp's shape (`reasoning_content`) must
/// measure the same.
#[tokio::test]
async fn a_thinking_models_stream_is_timed_from_its_first_thinking_token_on_both_shapes() {
    use servebench_model::results::records::ReasoningSource;
    use servebench_report::measure::metrics::request_metrics;
    for field in ["reasoning", "reasoning_content"] {
        let chunk = |delta: String| {
            send(&format!(
                "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
            ))
        };
        let mut steps = vec![chunk(r#"{"role":"assistant","content":""}"#.into())];
        for i in 0..64u64 {
            steps.push(At(40 + 5 * i));
            steps.push(if i < 32 {
                chunk(format!(r#"{{"{field}":"t{i} "}}"#))
            } else {
                chunk(format!(r#"{{"content":"a{i} "}}"#))
            });
        }
        steps.push(send(
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n",
        ));
        steps.push(send(
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":200,\"total_tokens\":264,\"completion_tokens\":64,\"completion_tokens_details\":{\"reasoning_tokens\":32}}}\n\ndata: [DONE]\n\n",
        ));
        let m = run(Api::OpenaiChat, "/v1/chat/completions", sse(steps)).await;
        assert!(m.error.is_none(), "{field}: {:?}", m.error);
        let record = m.into_record(
            "p000",
            0,
            0,
            RequestRole::Measure,
            Api::OpenaiChat,
            64,
            None,
        );
        assert_eq!(record.reasoning_tokens, Some(32), "{field}");
        assert_eq!(record.reasoning_source, Some(ReasoningSource::Server));
        assert_eq!(record.no_answer, None);
        let r = request_metrics(&record);
        let ms = |s: Option<f64>| s.unwrap() * 1e3;
        // A loaded machine wakes late, never early: bounds above are loose, below tight (a
        // late first token shortens a phase's span, so its rate may read a little high).
        let ttft = ms(r.ttft_s);
        assert!((39.0..90.0).contains(&ttft), "{field}: TTFT {ttft} ms");
        let ttfa = ms(r.ttfa_s);
        assert!(
            (199.0..300.0).contains(&ttfa),
            "{field}: first answer {ttfa} ms"
        );
        let tpot = ms(r.tpot_s);
        assert!((4.9..7.5).contains(&tpot), "{field}: TPOT {tpot} ms");
        assert_eq!(
            (r.reasoning_tokens, r.answer_tokens),
            (Some(32.0), Some(32.0))
        );
        // The record carries the same split and first answer, made where it was made.
        assert_eq!(
            (record.ttfa_s, record.answer_tokens),
            (r.ttfa_s, Some(32)),
            "{field}"
        );
        let (think, answer) = (r.reasoning_tok_s.unwrap(), r.answer_tok_s.unwrap());
        assert!(
            (130.0..=240.0).contains(&think),
            "{field}: thinking {think} tok/s"
        );
        assert!(
            (130.0..=240.0).contains(&answer),
            "{field}: answer {answer} tok/s"
        );
        // One token per chunk: no "tokens per chunk" warning.
        let spec = servebench_model::spec::load_str(
            "t.yaml",
            "name: t\nserver: { url: http://127.0.0.1:1 }\nworkload: { api: openai-chat, prompt: { kind: random, tokens: 200 }, output_tokens: 64 }\nrequests: 1\n",
        )
        .unwrap();
        let s = servebench_report::measure::summary::summarize(
            &spec.points[0].experiment,
            &[record],
            Vec::new(),
            false,
        );
        let kinds: Vec<String> = s.flags.iter().map(|f| f.kind.to_string()).collect();
        assert!(
            !kinds.contains(&"itl-per-chunk".to_string()),
            "{field}: {kinds:?}"
        );
        assert!(s.metrics.contains_key("ttfa_s"), "{field}");
        assert_eq!(s.metrics["reasoning_tokens"].mean, 32.0);
    }
}

/// Issue 43: a stream of tiny chunks (3,000,000 one-character thinking events took 1.87 GB for
/// two requests). Past its chunk budget (4,096 + 4 per max_tokens) a stream keeps no more
/// chunks one by one: the rest are folded into its last chunks, counted in `chunks_folded`,
/// with the first token's and the first answer's times kept; past its byte budget (16 MiB +
/// 8 KiB per max_tokens) it fails, named, and is no longer read.
#[tokio::test]
async fn a_flood_of_tiny_chunks_stays_within_the_streams_budget() {
    let event = |field: &str| {
        format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"{field}\":\"x\"}},\"finish_reason\":null}}]}}\n\n"
        )
    };
    let done = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":55,\"completion_tokens\":50}}\n\ndata: [DONE]\n\n";
    // 30,000 thinking events, then 10,000 answer events, in reads of 1,000 events each.
    let reads = |field: &str, n: usize| -> Vec<Step> {
        (0..n / 1000)
            .map(|_| Send(event(field).repeat(1000).into_bytes()))
            .collect()
    };
    let mut steps = reads("reasoning_content", 30_000);
    steps.extend(reads("content", 10_000));
    steps.push(send(done));
    let (url, _) = serve(vec![("/v1/chat/completions", sse(steps))]).await;
    let client = Client::new(&url, None).unwrap();
    let mut req = request(Api::OpenaiChat);
    req.max_tokens = 50;
    let m = client.stream(&req, Duration::from_secs(30)).await;
    assert!(m.error.is_none(), "{:?}", m.error);
    let kept = 4096 + 4 * 50;
    assert!(
        m.chunks.len() <= kept + 8 && m.chunks.len() > kept,
        "{} chunks",
        m.chunks.len()
    );
    // The 40,000 events and the usage chunk, less those kept one by one.
    assert_eq!(m.chunks_folded, 40_001 - kept as u64);
    // Every token is still counted, and the first answer keeps its own chunk.
    let streamed: u64 = m.chunks.iter().map(|c| u64::from(c.tokens)).sum();
    let thinking: u64 = m.chunks.iter().map(|c| u64::from(c.reasoning)).sum();
    assert_eq!((streamed, thinking), (40_000, 30_000));
    let first_answer = m.chunks.iter().position(|c| c.answer() > 0).unwrap();
    assert_eq!(
        m.chunks[first_answer].answer(),
        m.chunks[first_answer].tokens
    );
    let record = m.into_record(
        "p000",
        0,
        0,
        RequestRole::Measure,
        Api::OpenaiChat,
        50,
        None,
    );
    assert_eq!(record.chunks_folded, Some(40_001 - kept as u64));
    assert!(record.ttfa_s.is_some());

    // 17 MiB of events on max_tokens 50: over 16 MiB + 400 KiB, failed by name.
    let big: Vec<Step> = (0..300)
        .map(|_| Send(event("content").repeat(456).into_bytes()))
        .chain((0..1).map(|_| send(done)))
        .collect();
    let (url, _) = serve(vec![("/v1/chat/completions", sse(big))]).await;
    let m = Client::new(&url, None)
        .unwrap()
        .stream(&req, Duration::from_secs(30))
        .await;
    let e = assert_error(&m, ErrorKind::StreamBudget);
    assert!(
        e.message
            .starts_with("the stream passed its budget of 17186816 bytes"),
        "{}",
        e.message
    );
    assert!(m.chunks.len() <= kept + 8, "{}", m.chunks.len());
}
