//! How many live agent sessions one machine's client drives: `servebench run` of an `agentic`
//! load against the simulator (`servebench sim`, fast profile, started by the bench so that
//! the runner's CPU is its own), each session `TURNS` turns (8) growing to its context (32k or
//! 128k tokens, 64-token blocks, 8 output tokens, 1 s of think time after each), `live` sessions
//! at once, raised case by case. Per case, from the run's own records and the kernel: turns
//! sent and per second against the `live / think` offered, live sessions (time-weighted mean),
//! TTFT p50/p99, the prompt tokens sent per second (millions), the runner's CPU (cores, over the
//! window, and per turn) and peak RSS, and any `client-limited` flag the point carries.
//!
//! Plain streams beside them (`streams`): a `rate` load of 32-token prompts and 8 output tokens
//! (the `load_client` bench's spec, 20,000 requests, lag limit 1 ms), the rate raised until the
//! point is flagged `client-limited` (schedule lag p99 over the limit: only open-loop loads
//! have a schedule to be late against).
//!
//! The simulator and the runner share this machine's cores: the CPU columns say which of the
//! two ran out. Run: `cargo bench --bench agentic_ceiling` (`AGENTIC_CEILING="131072 16 64"`:
//! the context, then the live counts; `AGENTIC_CEILING="streams 2000 8000"`: plain streams at
//! those rates; `SERVEBENCH_BIN=target/release/servebench` runs that binary). The load
//! average is printed beside each case.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "support/machine.rs"]
mod machine;
#[allow(dead_code)]
mod support;

const BLOCK: u64 = 64;
const TURNS: u64 = 8;
const THINK_S: f64 = 1.0;

/// A trace of `sessions` sessions, each `TURNS` turns growing to `context` tokens.
fn write_trace(path: &Path, sessions: u32, context: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("trace"));
    for s in 0..sessions {
        let mut requests = Vec::new();
        for k in 1..=TURNS {
            let tokens = context * k / TURNS - 16;
            let ids: Vec<u64> = (0..tokens / BLOCK).collect();
            requests.push(serde_json::json!({
                "t": k as f64 * 2.0, "type": "n", "in": tokens, "out": 8,
                "hash_ids": ids, "think_time": THINK_S,
            }));
        }
        let line =
            serde_json::json!({"id": format!("s{s}"), "block_size": BLOCK, "requests": requests});
        writeln!(f, "{line}").expect("write trace");
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `servebench sim` on `port`, ready.
fn start_sim(bin: &str, port: u16, context: u64) -> Child {
    let child = Command::new(bin)
        .args(["sim", "--model-path", "m", "--port", &port.to_string()])
        .args(["--profile", "fast", "--max-running-requests", "20000"])
        .args(["--context-length", &(context + 1024).to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the simulator");
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the simulator did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

fn write_spec(dir: &Path, port: u16, live: u32) -> PathBuf {
    let spec = dir.join("ceiling.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: agentic-ceiling\nserver: {{ engine: sglang, url: \"http://127.0.0.1:{port}\" }}\n\
             workload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 8\n\
             cache: {{ policy: as-is, verify: false }}\nrequest_timeout: 600s\n\
             load: {{ kind: agentic, agentic: {{ file: trace.jsonl, live: {live}, think_scale: 1.0 }} }}\n"
        ),
    )
    .expect("write spec");
    spec
}

/// The runner's CPU seconds (user + system, from `/proc/<pid>/stat`) and peak RSS (MB,
/// `VmHWM`), as last read while it ran (every 100 ms).
fn sample(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<f64>()
        .ok()?;
    Some((ticks / 100.0, hwm / 1024.0))
}

/// Runs the spec; the run directory, the runner's CPU seconds and peak RSS (MB).
fn run(bin: &str, spec: &Path, dir: &Path) -> Result<(PathBuf, f64, f64), String> {
    let mut child = Command::new(bin)
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(dir.join("runs"))
        .arg("--quiet")
        // Files, not pipes: nothing reads them while it runs.
        .stdout(std::fs::File::create(dir.join("stdout")).expect("stdout file"))
        .stderr(std::fs::File::create(dir.join("stderr")).expect("stderr file"))
        .spawn()
        .expect("run servebench");
    let (mut cpu, mut rss) = (0.0, 0.0);
    while child.try_wait().ok().flatten().is_none() {
        if let Some((c, r)) = sample(child.id()) {
            (cpu, rss) = (c, r);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    read("stdout")
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .map(|run| (PathBuf::from(run.trim()), cpu, rss))
        .ok_or_else(|| read("stderr"))
}

fn case(bin: &str, context: u64, live: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    write_trace(&dir.path().join("trace.jsonl"), live, context);
    let port = free_port();
    let mut sim = start_sim(bin, port, context);
    let spec = write_spec(dir.path(), port, live);
    let load = machine::load_average();
    let result = run(bin, &spec, dir.path());
    let _ = sim.kill();
    let _ = sim.wait();
    let (run, cpu, rss) = match result {
        Ok(r) => r,
        Err(e) => return println!("{context} x {live}: the run failed: {e}"),
    };
    let points = std::fs::read_to_string(run.join("points.jsonl")).expect("points.jsonl");
    let p: serde_json::Value =
        serde_json::from_str(points.lines().next().expect("a point")).expect("json");
    let m = |metric: &str, field: &str| p["metrics"][metric][field].as_f64().unwrap_or(f64::NAN);
    let jobs = &p["jobs"];
    let window = jobs["window_s"].as_f64().unwrap_or(f64::NAN);
    let turns = p["ok"].as_f64().unwrap_or(0.0) + p["errors"].as_f64().unwrap_or(0.0);
    // The prompt tokens sent: each session's turns average (TURNS + 1) / 2 TURNS of the context.
    let mtok = turns * (context as f64 * (TURNS + 1) as f64 / (2 * TURNS) as f64) / 1e6;
    let flags: Vec<String> = p["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            let kind = f["kind"].as_str()?;
            // How many requests the client read late, of how many: the flag's own count.
            let count = f["message"]
                .as_str()
                .and_then(|m| m.split(" requests").next());
            Some(match (kind, count) {
                ("client-read-late", Some(c)) => format!("{kind} ({c})"),
                _ => kind.to_string(),
            })
        })
        .collect();
    println!(
        "{:>7} {:>5} {:>6} {:>7.1} {:>7.1} {:>6.1} {:>8.3} {:>8.3} {:>7.1} {:>6.2} {:>8.2} {:>7.0}  {} (load {load}, cpu {:.0})",
        context,
        live,
        turns,
        turns / window,
        f64::from(live) / THINK_S,
        jobs["live_mean"].as_f64().unwrap_or(f64::NAN),
        m("ttft_s", "p50"),
        m("ttft_s", "p99"),
        mtok / window,
        cpu / window,
        cpu * 1e3 / turns.max(1.0),
        rss,
        flags.join(","),
        cpu,
    );
}

/// Plain streams at `rate` requests per second.
fn streams(bin: &str, rate: u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let load = format!("rate: {rate}, arrival: constant");
    let spec = support::write_spec(dir.path(), "streams", &load, 20_000, "");
    let load = machine::load_average();
    let (run, cpu, rss) = match run(bin, &spec, dir.path()) {
        Ok(r) => r,
        Err(e) => return println!("streams {rate}/s: the run failed: {e}"),
    };
    let points = std::fs::read_to_string(run.join("points.jsonl")).expect("points.jsonl");
    let p: serde_json::Value =
        serde_json::from_str(points.lines().next().expect("a point")).expect("json");
    let m = |metric: &str, field: &str| p["metrics"][metric][field].as_f64().unwrap_or(f64::NAN);
    let achieved = m("throughput_req_s", "mean");
    let flags: Vec<&str> = p["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    println!(
        "streams {rate:>6}/s achieved {achieved:>7.0}/s lag p99 {:>8.2} ms in flight max {:>6.0} runner {cpu:>5.1} cpu s, {:>5.0} us/req, rss {rss:>4.0} MB  {} (load {load})",
        m("schedule_lag_s", "p99") * 1e3,
        m("concurrency_max", "mean"),
        cpu * 1e6 / 20_000.0,
        flags.join(","),
    );
}

fn main() {
    // Another build's binary (a release one, while this orchestration is built for dev).
    let bin = std::env::var("SERVEBENCH_BIN").unwrap_or(env!("CARGO_BIN_EXE_servebench").into());
    let bin = bin.as_str();
    let arg = std::env::var("AGENTIC_CEILING").unwrap_or_default();
    if let Some(rates) = arg.strip_prefix("streams") {
        for rate in rates.split_whitespace().filter_map(|w| w.parse().ok()) {
            streams(bin, rate);
        }
        return;
    }
    let mut words = arg.split_whitespace().filter_map(|w| w.parse::<u64>().ok());
    let cases: Vec<(u64, Vec<u32>)> = match words.next() {
        Some(context) => vec![(context, words.map(|w| w as u32).collect())],
        None => vec![(32_768, vec![16, 64, 256]), (131_072, vec![16, 64, 256])],
    };
    println!(
        "{:>7} {:>5} {:>6} {:>7} {:>7} {:>6} {:>8} {:>8} {:>7} {:>6} {:>8} {:>7}  flags",
        "context",
        "live",
        "turns",
        "turns/s",
        "offered",
        "live~",
        "ttft p50",
        "ttft p99",
        "Mtok/s",
        "cores",
        "ms/turn",
        "rss MB"
    );
    for (context, lives) in cases {
        for live in lives {
            case(bin, context, live);
        }
    }
}
