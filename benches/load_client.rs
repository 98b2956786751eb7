//! The client under open-loop load, end to end: `servebench run` of a `load:` spec against the
//! built-in simulator (fast profile, 8 output tokens), as a user runs it. For each case it
//! reports what the run's own records say: the offered and achieved request rates, the
//! schedule lag (actual minus scheduled send: the pacing error) p50/p99/max, the most streams
//! in flight at once, the client's CPU, and the peak RSS (getrusage of the children: the
//! runner's, see `child_max_rss_mb`),
//! so memory can be read against the number of requests. Two more columns say where the CPU
//! went: `cpu s`, the CPU seconds of the whole case (the runner and the simulator it started:
//! user + system, from getrusage of the children; server start, summary and report included),
//! and `us/req`, that over the requests: on a
//! machine of C cores, C / that bounds the requests per second client and simulator together
//! can serve.
//!
//! Cases (name, rate, max_in_flight, requests):
//! - `pace-1k`: 1,000 req/s Poisson, 5,000 requests: the pacing error at 1,000 req/s.
//! - `rate-10k`: 10,000 req/s constant, 20,000 requests: streamed requests per second.
//! - `streams-10k`: 10,000 requests all at once (`rate: inf`): concurrent streams.
//! - `mem-2k`, `mem-20k`, `mem-200k` and `mem-1m`: 4,000 req/s (the same connections in
//!   each), 2,000 to 1,000,000 requests (the last 250 s): peak RSS against count. Exact
//!   statistics are kept up to 65,536 values per metric (then a histogram), so memory rises
//!   until that cap and is flat after it: read mem-200k against mem-1m.
//!
//! Run: `cargo bench --bench load_client` (`LOAD_BENCH=pace-1k` runs one case). The simulator
//! and the client share this machine's cores: read the figures with the machine's load.

mod support;

const CASES: &[(&str, &str, u32)] = &[
    ("pace-1k", "rate: 1000, arrival: poisson", 5_000),
    ("rate-10k", "rate: 10000, arrival: constant", 20_000),
    ("streams-10k", "rate: inf", 10_000),
    ("mem-2k", "rate: 4000, arrival: constant", 2_000),
    ("mem-20k", "rate: 4000, arrival: constant", 20_000),
    ("mem-200k", "rate: 4000, arrival: constant", 200_000),
    ("mem-1m", "rate: 4000, arrival: constant", 1_000_000),
];

fn main() {
    let only = std::env::var("LOAD_BENCH").ok();
    let bin = env!("CARGO_BIN_EXE_servebench");
    println!(
        "{:<12} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8} {:>8}",
        "case",
        "requests",
        "offered/s",
        "achieved/s",
        "lag p50",
        "lag p99",
        "lag max",
        "inflight",
        "cpu",
        "rss MB",
        "cpu s",
        "us/req"
    );
    for (name, load, requests) in CASES {
        if only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = support::write_spec(dir.path(), name, load, *requests, "");
        let cpu_before = children_cpu_s();
        let run = support::run(bin, &spec, dir.path());
        let rss_mb = child_max_rss_mb();
        let cpu_s = children_cpu_s() - cpu_before;
        let run = match run {
            Ok(run) => run,
            Err(stderr) => {
                println!("{name}: the run failed: {stderr}");
                continue;
            }
        };
        let points = std::fs::read_to_string(run.join("points.jsonl")).expect("points.jsonl");
        let p: serde_json::Value =
            serde_json::from_str(points.lines().next().expect("a point")).expect("json");
        let m =
            |metric: &str, field: &str| p["metrics"][metric][field].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:<12} {:>9} {:>10.0} {:>10.0} {:>8.3}ms {:>8.3}ms {:>8.1}ms {:>9.0} {:>8.2} {:>9.0} {:>8.1} {:>8.0}   ({} ok, {} failed)",
            name,
            requests,
            p["load"]["offered_req_s"].as_f64().unwrap_or(f64::NAN),
            m("throughput_req_s", "mean"),
            m("schedule_lag_s", "p50") * 1e3,
            m("schedule_lag_s", "p99") * 1e3,
            m("schedule_lag_s", "max") * 1e3,
            m("concurrency_max", "mean"),
            m("client_cpu", "mean"),
            rss_mb,
            cpu_s,
            cpu_s * 1e6 / f64::from(*requests),
            p["ok"],
            p["errors"],
        );
    }
}

/// The largest peak RSS of any descendant waited for so far: the runner, or the simulator it
/// started (a grandchild, through the supervisor) if that were larger. Sampled from /proc on
/// 2026-12-01: the simulator held 17 MB in `mem-2k`, the runner 252 MB of the 258 reported in
/// `streams-10k`. Cumulative: run one case at a time (`LOAD_BENCH=...`) for a clean figure per
/// case.
fn child_max_rss_mb() -> f64 {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    u.max_rss() as f64 / 1024.0
}

/// CPU seconds (user + system) of every child waited for so far, their own children included:
/// the runner and the simulator it started.
fn children_cpu_s() -> f64 {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    secs(u.user_time()) + secs(u.system_time())
}
