//! How much does servebench's client add to TTFT, and does the first wave pay for the client's
//! own connection set-up?
//!
//! A bare HTTP/1.1 server answers every streaming `/generate` request with its first token
//! exactly `DELAY` after it has read the whole request: one thread reads every connection (a
//! single-threaded async runtime), one writer thread keeps the deadlines, sleeping to shortly
//! before each and then spinning, and records how late it wrote (`late`: a loaded machine
//! delays the server too; that is in the error, so read it against `floor`). N streaming requests (N = 1, 32,
//! 512) go out together through servebench's real client (`Client::stream`, after
//! `Client::prepare(N)` as a point does), in waves, on a fresh client per N. For each request,
//! TTFT error = measured TTFT - `DELAY`: what the client (and the machine) added. The first
//! wave is reported apart from the later ones, with the connect times the client recorded
//! apart from TTFT. `floor` is the same waves from a bare client on open sockets (write the
//! request, stamp, read until the first event): what any client on this machine pays.
//!
//! Two server modes: `keep-alive`, and `closes` (the connection is closed after every stream
//! while the headers advertise keep-alive, as llama.cpp's server does); `failed` counts
//! requests that were lost.
//!
//! Run: `cargo bench --bench client_ttft` (`CLIENT_TTFT_N=512` measures one count,
//! `CLIENT_TTFT_MODE=closes` one mode).

use std::collections::BinaryHeap;
use std::net::TcpStream;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use servebench::client::{Client, GenerationRequest, Measured};
use servebench_model::spec::types::Api;

#[path = "support/loopback_server.rs"]
mod loopback_server;
use loopback_server::{Due, complete_request, listen, write_fully};

/// How long the server takes from a request's last byte to its first token.
const DELAY: Duration = Duration::from_millis(20);

/// Requests per N (at least three waves).
const REQUESTS: usize = 256;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let counts: Vec<usize> = match std::env::var("CLIENT_TTFT_N") {
            Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
            Err(_) => vec![1, 32, 512],
        };
        let modes: Vec<bool> = match std::env::var("CLIENT_TTFT_MODE").as_deref() {
            Ok("closes") => vec![true],
            Ok("keep-alive") => vec![false],
            _ => vec![false, true],
        };
        println!(
            "client TTFT error: measured TTFT - {} ms server delay (ms)",
            DELAY.as_millis()
        );
        println!(
            "{:>10} {:>5} {:>7} {:>5} {:>7} {:>8} {:>8} {:>11} {:>11} {:>10} {:>10}",
            "mode",
            "N",
            "wave",
            "n",
            "failed",
            "err_p50",
            "err_p99",
            "connect_p50",
            "connect_p99",
            "late_p50",
            "late_p99"
        );
        for closes in modes {
            for &n in &counts {
                let waves = (REQUESTS / n).max(3);
                let server = KnownServer::start(closes);
                let rows = measure_client(&server.url, n, waves).await;
                let late = server.lateness();
                for row in rows {
                    row.print(closes, n, &late);
                }
                let server = KnownServer::start(closes);
                floor(&server, n, waves)
                    .await
                    .print(closes, n, &server.lateness());
            }
        }
    });
}

/// What one row of the table says.
struct Row {
    wave: &'static str,
    errors: Vec<f64>,
    failed: usize,
    connects: Vec<f64>,
}

impl Row {
    fn print(mut self, closes: bool, n: usize, late: &[f64]) {
        let (e50, e99) = percentiles(&mut self.errors);
        let (c50, c99) = percentiles(&mut self.connects);
        let (l50, l99) = percentiles(&mut late.to_vec());
        println!(
            "{:>10} {n:>5} {:>7} {:>5} {:>7} {:>8} {:>8} {:>11} {:>11} {:>10} {:>10}",
            if closes { "closes" } else { "keep-alive" },
            self.wave,
            self.errors.len(),
            self.failed,
            ms(e50),
            ms(e99),
            ms(c50),
            ms(c99),
            ms(l50),
            ms(l99)
        );
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.3}", v * 1e3))
}

/// Median and 99th percentile (nearest rank below), or None without values.
fn percentiles(v: &mut [f64]) -> (Option<f64>, Option<f64>) {
    if v.is_empty() {
        return (None, None);
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    (Some(at(0.5)), Some(at(0.99)))
}

/// Opens the connections a point needs before its clock, as `run` does.
async fn prepare(client: &Client, n: usize) {
    let _ = client.prepare(n).await;
}

/// The connect time the client recorded for a request (apart from its TTFT).
fn connect_s(m: &Measured) -> Option<f64> {
    m.connect_s
}

/// `waves` waves of `n` concurrent streams through servebench's client; rows for the first
/// wave and the later ones.
async fn measure_client(url: &str, n: usize, waves: usize) -> Vec<Row> {
    let client = Client::new(url, None).expect("client");
    prepare(&client, n).await;
    let mut rows = vec![
        Row {
            wave: "first",
            errors: Vec::new(),
            failed: 0,
            connects: Vec::new(),
        },
        Row {
            wave: "later",
            errors: Vec::new(),
            failed: 0,
            connects: Vec::new(),
        },
    ];
    for w in 0..waves {
        let start = Arc::new(tokio::sync::Barrier::new(n));
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let (client, start) = (client.clone(), start.clone());
                tokio::spawn(async move {
                    let req = GenerationRequest {
                        api: Api::SglangGenerate,
                        prompt: format!("wave {w} request {i}: The quick brown fox."),
                        max_tokens: 1,
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
                    };
                    start.wait().await;
                    client.stream(&req, Duration::from_secs(30)).await
                })
            })
            .collect();
        let row = &mut rows[usize::from(w > 0)];
        for t in tasks {
            let m = t.await.expect("task");
            row.connects.extend(connect_s(&m));
            match (&m.error, m.chunks.iter().find(|c| c.tokens > 0)) {
                (None, Some(first)) => row.errors.push(first.t_s - DELAY.as_secs_f64()),
                _ => row.failed += 1,
            }
        }
    }
    rows
}

/// The same waves from a bare client: open sockets (fresh ones before each wave for a server
/// that closes them), write the request, stamp, read until the first event.
async fn floor(server: &KnownServer, n: usize, waves: usize) -> Row {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.url.trim_start_matches("http://").to_string();
    let body = r#"{"text":"floor","sampling_params":{"max_new_tokens":1},"stream":true}"#;
    let request = format!(
        "POST /generate HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut row = Row {
        wave: "floor",
        errors: Vec::new(),
        failed: 0,
        connects: Vec::new(),
    };
    let mut sockets = Vec::new();
    for _ in 0..waves {
        if sockets.is_empty() {
            for _ in 0..n {
                let s = tokio::net::TcpStream::connect(&addr)
                    .await
                    .expect("connect");
                s.set_nodelay(true).expect("nodelay");
                sockets.push(s);
            }
        }
        let start = Arc::new(tokio::sync::Barrier::new(n));
        let tasks: Vec<_> = sockets
            .drain(..)
            .map(|mut s| {
                let (request, start) = (request.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    s.write_all(request.as_bytes()).await.expect("write");
                    let t0 = Instant::now();
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    let mut first = None;
                    // Until the response's last chunk (`0\r\n\r\n`), stamping the first event.
                    while !got.ends_with(b"0\r\n\r\n") {
                        let k = s.read(&mut buf).await.expect("read");
                        assert!(k > 0, "the server hung up early");
                        got.extend_from_slice(&buf[..k]);
                        if first.is_none() {
                            let head_end = got.windows(4).position(|w| w == b"\r\n\r\n");
                            if head_end
                                .is_some_and(|h| got[h + 4..].windows(2).any(|w| w == b"\n\n"))
                            {
                                first = Some(t0.elapsed().as_secs_f64());
                            }
                        }
                    }
                    (s, first.expect("an event"))
                })
            })
            .collect();
        for t in tasks {
            let (s, ttft) = t.await.expect("task");
            row.errors.push(ttft - DELAY.as_secs_f64());
            if !server.closes {
                sockets.push(s);
            }
        }
    }
    row
}

/// A response due on a socket.
type Job = Due<TcpStream>;

/// The known-delay server: one thread reads requests for every connection (a single-threaded
/// async runtime, so a burst of 512 connections costs no thread spawns), one writer thread
/// keeps the deadlines.
struct KnownServer {
    url: String,
    closes: bool,
    late: Arc<Mutex<Vec<f64>>>,
}

impl KnownServer {
    fn start(closes: bool) -> KnownServer {
        let late = Arc::new(Mutex::new(Vec::new()));
        let (jobs, due) = mpsc::channel::<Job>();
        let recorded = late.clone();
        std::thread::spawn(move || write_on_time(due, closes, &recorded));
        let addr = listen(move |conn| read_requests(conn, jobs.clone()));
        KnownServer {
            url: format!("http://{addr}"),
            closes,
            late,
        }
    }

    fn lateness(&self) -> Vec<f64> {
        self.late.lock().unwrap().clone()
    }
}

/// Reads the requests of one connection; each complete one becomes a job for the writer, with
/// a clone of the socket to answer on.
async fn read_requests(conn: tokio::net::TcpStream, jobs: mpsc::Sender<Job>) {
    use tokio::io::AsyncReadExt;
    conn.set_nodelay(true).expect("nodelay");
    let std = conn.into_std().expect("std");
    let writer = std.try_clone().expect("clone");
    let mut conn = tokio::net::TcpStream::from_std(std).expect("register");
    let mut got: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // A whole request: head, then `content-length` bytes of body.
        while let Some(length) = complete_request(&got) {
            got.drain(..length);
            let deadline = Instant::now() + DELAY;
            let socket = writer.try_clone().expect("clone");
            if jobs
                .send(Due {
                    deadline,
                    item: socket,
                })
                .is_err()
            {
                return;
            }
        }
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(k) => got.extend_from_slice(&buf[..k]),
        }
    }
}

fn write_on_time(due: mpsc::Receiver<Job>, closes: bool, late: &Mutex<Vec<f64>>) {
    let event = r#"data: {"text":"a","meta_info":{"prompt_tokens":8,"completion_tokens":1,"cached_tokens":0,"finish_reason":{"type":"length","length":1}}}"#;
    let event = format!("{event}\n\n");
    let done = "data: [DONE]\n\n";
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: keep-alive\r\nkeep-alive: timeout=5, max=100\r\n\r\n{:x}\r\n{event}\r\n{:x}\r\n{done}\r\n0\r\n\r\n",
        event.len(),
        done.len()
    );
    let mut heap: BinaryHeap<Job> = BinaryHeap::new();
    loop {
        let wait = heap
            .peek()
            .map(|j| j.deadline.saturating_duration_since(Instant::now()));
        let next = match wait {
            None => due.recv().ok(),
            Some(w) if w > Duration::from_micros(300) => {
                match due.recv_timeout(w - Duration::from_micros(300)) {
                    Ok(job) => Some(job),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
            Some(_) => due.try_recv().ok(),
        };
        if let Some(job) = next {
            heap.push(job);
            continue;
        }
        let Some(job) = heap.peek() else { return };
        while Instant::now() < job.deadline {
            std::hint::spin_loop();
        }
        let mut job = heap.pop().expect("a job");
        let now = Instant::now();
        late.lock()
            .unwrap()
            .push((now - job.deadline).as_secs_f64());
        write_fully(&mut job.item, response.as_bytes());
        if closes {
            let _ = job.item.shutdown(std::net::Shutdown::Both);
        }
    }
}
