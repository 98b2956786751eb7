//! How far do streamed chunks arrive from the simulator's model time?
//!
//! Starts the simulator in-process on port 0 with a profile whose decode steps take ~3 ms plus
//! 40 us per running sequence (a batch of 512 takes ~23 ms, in the range of real GPUs),
//! opens N concurrent streaming `/generate` requests with reqwest, stamps each chunk's arrival
//! on the client, and compares it with the scheduler's model deadline for that chunk (from the
//! in-process `ChunkTrace`). Prints median / p99 / max drift for N = 1, 64, 512, twice:
//! - `emit`: when the simulator's HTTP layer hands the chunk to the connection (its own drift);
//! - `arrive`: when the bench's client, sharing the same cores, has read it (end to end);
//! - `floor`: the same N streams from the same client at the same step cadence, answered by a
//!   bare HTTP server that does nothing but blocking `write`s of chunked SSE events of the
//!   simulator's mean size (one thread per core): the least any server could do on this
//!   machine. On a 2-core VM one loopback TCP write costs ~15 us in the kernel, so 512 writes
//!   per step cannot all leave within 1 ms.
//!
//! Run: `cargo bench --bench sim_drift`

use sim::{ChunkTrace, Profile, SimConfig, SimLog, serve};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const OUTPUT_TOKENS: u64 = 64;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        println!("sim drift: chunk time - model time, per chunk");
        println!(
            "{:>6} {:>7} {:>8} {:>11} {:>11} {:>11}",
            "N", "where", "chunks", "median_ms", "p99_ms", "max_ms"
        );
        // SIM_DRIFT_N=512 measures one stream count (for profiling); default 1, 64 and 512.
        let counts: Vec<usize> = match std::env::var("SIM_DRIFT_N") {
            Ok(v) => v.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
            Err(_) => vec![1, 64, 512],
        };
        for n in counts {
            let (emit, arrive, mean_bytes) = run(n).await;
            let floor = floor(n, mean_bytes).await;
            for (name, drift) in [("emit", emit), ("arrive", arrive), ("floor", floor)] {
                let pct = |q: f64| drift[((drift.len() - 1) as f64 * q) as usize] * 1e3;
                println!(
                    "{n:>6} {name:>7} {:>8} {:>11.3} {:>11.3} {:>11.3}",
                    drift.len(),
                    pct(0.5),
                    pct(0.99),
                    pct(1.0)
                );
            }
        }
    });
}

/// Signed seconds from `model` to `t`.
fn signed(t: Instant, model: Instant) -> f64 {
    if t >= model {
        (t - model).as_secs_f64()
    } else {
        -(model - t).as_secs_f64()
    }
}

/// The bench's HTTP/1.1 client, as servebench's own is built.
fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
        .expect("client")
}

/// POSTs `body` to `url` and stamps every complete SSE event as its bytes arrive (parsing
/// nothing); returns the stamps and the bytes read.
async fn read_events(
    client: &reqwest::Client,
    url: &str,
    body: &serde_json::Value,
) -> (Vec<Instant>, usize) {
    let mut r = client.post(url).json(body).send().await.expect("send");
    let mut arrivals = Vec::with_capacity(OUTPUT_TOKENS as usize + 1);
    let mut last = 0u8;
    let mut bytes = 0;
    while let Some(c) = r.chunk().await.expect("chunk") {
        let now = Instant::now();
        bytes += c.len();
        // Count "\n\n" event ends, including one split across two reads.
        for &b in c.iter() {
            if b == b'\n' && last == b'\n' {
                arrivals.push(now);
                last = 0;
            } else {
                last = b;
            }
        }
    }
    (arrivals, bytes)
}

/// Decode step time of the bench profile at `n` running sequences.
fn step_time(n: usize) -> Duration {
    Duration::from_micros(3_000 + 40 * n as u64)
}

/// One measurement with `n` concurrent streams; returns sorted emission and arrival drifts (s)
/// and the mean bytes per streamed event.
async fn run(n: usize) -> (Vec<f64>, Vec<f64>, usize) {
    let mut profile = Profile::fast();
    profile.decode.base_ms = 3.0;
    // Step time grows with the batch as on a GPU; a flat 3 ms step at 512 streams would ask a
    // 2-core machine for 170k SSE chunks a second, a load no real server produces.
    profile.decode.per_seq_us = 40.0;
    profile.warmup_s = 0.0;
    let mut cfg = SimConfig::from_args(&[
        "--max-running-requests".into(),
        "1024".into(),
        "--skip-server-warmup".into(),
        // Every Decode line would go to the (captured) log; keep it rare.
        "--decode-log-interval".into(),
        "1000".into(),
    ])
    .expect("args");
    cfg.profile = profile;
    cfg.log = SimLog::capture();
    let trace = ChunkTrace::new();
    cfg.trace = Some(trace.clone());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // The simulator gets its own runtime, as it has its own process under `servebench run`:
    // the bench's client tasks must not queue behind its connection tasks (or the reverse).
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .thread_name("sim-http")
            .enable_all()
            .build()
            .expect("server runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let _ = serve(cfg, listener, async {
                let _ = stopped.await;
            })
            .await;
        });
    });
    let client = http_client();
    // Warm up connections so connection setup is not in the measurement.
    let _ = client.get(format!("{base}/health")).send().await;

    let start = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (client, base, start) = (client.clone(), base.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let rid = format!("drift-{n}-{i}");
            let body = serde_json::json!({
                "text": format!("stream {i}: The quick brown fox jumps over the lazy dog."),
                "rid": rid,
                "stream": true,
                "sampling_params": {"max_new_tokens": OUTPUT_TOKENS},
            });
            let (arrivals, bytes) = read_events(&client, &format!("{base}/generate"), &body).await;
            (rid, arrivals, bytes)
        }));
    }
    let mut arrivals: HashMap<String, Vec<Instant>> = HashMap::new();
    let (mut bytes, mut events) = (0, 0);
    for t in tasks {
        let (rid, a, b) = t.await.expect("task");
        bytes += b;
        events += a.len();
        arrivals.insert(rid, a);
    }
    let model: HashMap<(String, u32), Instant> = trace
        .entries()
        .into_iter()
        .map(|e| ((e.rid.to_string(), e.chunk_index), e.model_time))
        .collect();
    let mut emit: Vec<f64> = trace
        .emissions()
        .into_iter()
        .filter_map(|e| {
            model
                .get(&(e.rid.to_string(), e.chunk_index))
                .map(|m| signed(e.emitted, *m))
        })
        .collect();
    let mut drift = Vec::new();
    for e in trace.entries() {
        if let Some(t) = arrivals
            .get(&*e.rid)
            .and_then(|a| a.get(e.chunk_index as usize))
        {
            // Signed: an arrival before its model time would be a bug worth seeing.
            let d = if *t >= e.model_time {
                (*t - e.model_time).as_secs_f64()
            } else {
                -(e.model_time - *t).as_secs_f64()
            };
            drift.push(d);
        }
    }
    let _ = stop.send(());
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::task::spawn_blocking(move || server.join()),
    )
    .await;
    drift.sort_by(f64::total_cmp);
    emit.sort_by(f64::total_cmp);
    (emit, drift, bytes / events.max(1))
}

/// The machine's floor: the same `n` streaming `/generate` requests from the same client,
/// answered by a bare HTTP/1.1 server that only writes: after the headers, each connection
/// gets an SSE event of `chunk_bytes` (chunked encoding, as the simulator sends) at each of
/// the bench profile's step deadlines, by plain blocking writes from one thread per core (as
/// the simulator's runtime has one worker per core). Returns sorted drifts (s) of each write's
/// start from its deadline.
async fn floor(n: usize, chunk_bytes: usize) -> Vec<f64> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/generate", listener.local_addr().expect("addr"));
    let client = http_client();
    let body = serde_json::json!({"text": "floor", "stream": true});
    let readers: Vec<_> = (0..n)
        .map(|_| {
            let (client, url, body) = (client.clone(), url.clone(), body.clone());
            tokio::spawn(async move { read_events(&client, &url, &body).await })
        })
        .collect();
    // Accept every request, read it whole, answer with the stream's headers.
    let accepted = tokio::task::spawn_blocking(move || {
        (0..n)
            .map(|_| {
                let (mut s, _) = listener.accept().expect("accept");
                s.set_nodelay(true).expect("nodelay");
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                let complete = |got: &[u8]| {
                    let text = String::from_utf8_lossy(got);
                    let Some(end) = text.find("\r\n\r\n") else {
                        return false;
                    };
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    got.len() >= end + 4 + length
                };
                while !complete(&got) {
                    let k = s.read(&mut buf).expect("read request");
                    assert!(k > 0, "the client hung up");
                    got.extend_from_slice(&buf[..k]);
                }
                s.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                )
                .expect("headers");
                s
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("accept");
    let event = format!(
        "data: {}\n\n",
        "x".repeat(chunk_bytes.saturating_sub(8).max(1))
    );
    let frame = format!("{:x}\r\n{event}\r\n", event.len()).into_bytes();
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n);
    let step = step_time(n);
    let start = Instant::now() + Duration::from_millis(20);
    let mut groups: Vec<Vec<std::net::TcpStream>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, s) in accepted.into_iter().enumerate() {
        groups[i % threads].push(s);
    }
    let writers: Vec<_> = groups
        .into_iter()
        .map(|mut socks| {
            let frame = frame.clone();
            std::thread::spawn(move || {
                let mut drift = Vec::with_capacity(socks.len() * OUTPUT_TOKENS as usize);
                for k in 1..=OUTPUT_TOKENS as u32 {
                    let deadline = start + step * k;
                    // As the scheduler waits: sleep to shortly before, then spin.
                    let now = Instant::now();
                    if deadline > now + Duration::from_micros(200) {
                        std::thread::sleep(deadline - now - Duration::from_micros(200));
                    }
                    while Instant::now() < deadline {
                        std::hint::spin_loop();
                    }
                    for s in socks.iter_mut() {
                        // Stamped as the simulator stamps `emit`: when this write starts.
                        drift.push(signed(Instant::now(), deadline));
                        s.write_all(&frame).expect("write");
                    }
                }
                for s in socks.iter_mut() {
                    let _ = s.write_all(b"0\r\n\r\n");
                }
                drift
            })
        })
        .collect();
    let mut drift = Vec::new();
    for w in writers {
        drift.extend(
            tokio::task::spawn_blocking(move || w.join())
                .await
                .expect("join")
                .expect("writer"),
        );
    }
    for r in readers {
        let (arrivals, _) = r.await.expect("reader");
        assert_eq!(
            arrivals.len(),
            OUTPUT_TOKENS as usize,
            "every floor event arrived"
        );
    }
    drift.sort_by(f64::total_cmp);
    drift
}
