//! A Mooncake-style trace with `hash_ids` replayed end to end (`servebench run` against the
//! built-in simulator, fast profile) beside a `rate` load of the same count at the same rate:
//! the schedule lag (pacing error) of each, and the runner's peak RSS, at a tenth of the
//! trace and at all of it, so memory can be read against the number of lines.
//!
//! The trace: `LINES` lines (100,000) at `RATE` requests/s (2,000, evenly spaced), 40
//! conversations whose prompts share their leading blocks (16-token blocks, 2 to 6 a prompt,
//! as Mooncake's traces share 512-token ones), 8 output tokens.
//!
//! Run small first: `TRACE_BENCH="5000 1000" cargo bench --bench trace_replay` (lines, rate;
//! a third word, `trace` or `rate`, runs that kind at the full size alone).
//! The simulator and the client share this machine's cores: read the figures with its load.

use std::io::Write;
use std::path::Path;
use std::process::Command;

fn main() {
    let arg = std::env::var("TRACE_BENCH").unwrap_or_default();
    let mut parts = arg.split_whitespace().map(|s| s.parse::<f64>().ok());
    let lines = parts.next().flatten().unwrap_or(100_000.0) as usize;
    let rate = parts.next().flatten().unwrap_or(2_000.0);
    // A third word picks one kind (`trace` or `rate`) and the full size alone.
    let only = arg.split_whitespace().nth(2).map(str::to_string);
    let bin = env!("CARGO_BIN_EXE_servebench");
    println!(
        "{:<16} {:>8} {:>10} {:>10} {:>10} {:>10} {:>9} {:>8}",
        "case", "requests", "achieved/s", "lag p50", "lag p99", "lag max", "rss MB", "hits"
    );
    let sizes = if only.is_some() {
        vec![lines]
    } else {
        vec![lines / 10, lines]
    };
    for n in sizes {
        for kind in ["trace", "rate"] {
            if only.as_deref().is_some_and(|o| o != kind) {
                continue;
            }
            let dir = tempfile::tempdir().expect("tempdir");
            let spec = write_case(dir.path(), kind, n, rate);
            let (run, rss_mb) = run(bin, &spec, dir.path());
            let Some(run) = run else {
                println!("{kind}-{n}: the run failed");
                continue;
            };
            let text = std::fs::read_to_string(run.join("points.jsonl")).expect("points");
            let p: serde_json::Value =
                serde_json::from_str(text.lines().next().expect("a point")).expect("json");
            let m = |k: &str, f: &str| p["metrics"][k][f].as_f64().unwrap_or(f64::NAN);
            let hits = &p["trace_cache"];
            let share = hits["cached_tokens"].as_f64().unwrap_or(0.0)
                / hits["prompt_tokens"].as_f64().unwrap_or(f64::NAN);
            println!(
                "{:<16} {:>8} {:>10.0} {:>8.3}ms {:>8.3}ms {:>8.1}ms {:>9.0} {:>8}",
                format!("{kind}-{n}"),
                p["ok"],
                m("throughput_req_s", "mean"),
                m("schedule_lag_s", "p50") * 1e3,
                m("schedule_lag_s", "p99") * 1e3,
                m("schedule_lag_s", "max") * 1e3,
                rss_mb,
                if kind == "trace" {
                    format!("{:.0}%", share * 100.0)
                } else {
                    "-".into()
                },
            );
        }
    }
}

/// The spec of one case (and, for a trace, its file) in `dir`.
fn write_case(dir: &Path, kind: &str, n: usize, rate: f64) -> std::path::PathBuf {
    let load = match kind {
        "trace" => {
            let mut f = std::io::BufWriter::new(
                std::fs::File::create(dir.join("trace.jsonl")).expect("trace"),
            );
            // xorshift64*: the same trace every run.
            let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
            let mut next = move || {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                state.wrapping_mul(0x2545_F491_4F6C_DD1D)
            };
            for (i, fresh) in (0..n).zip(1_000_000u64..) {
                let conv = next() % 40;
                let blocks = 2 + next() % 5;
                // A conversation's first blocks are its own; the last one is new.
                let mut ids: Vec<u64> = (0..blocks - 1).map(|b| conv * 16 + b).collect();
                ids.push(fresh);
                let input = (blocks - 1) * 16 + 1 + next() % 16;
                writeln!(
                    f,
                    "{{\"timestamp\": {:.3}, \"input_length\": {input}, \"output_length\": 8, \"hash_ids\": {ids:?}}}",
                    i as f64 * 1000.0 / rate
                )
                .expect("write");
            }
            "kind: trace, trace: { file: trace.jsonl, block_size: 16, hash_ids: required }"
                .to_string()
        }
        _ => format!("kind: rate, rate: {rate}, arrival: constant"),
    };
    let spec = dir.join("bench.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: {kind}\nserver:\n  engine: sim\n  model: m\n  args: {{ profile: fast, context-length: 4096, max-running-requests: 20000 }}\n  ready_timeout: 60s\n\
             workload:\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 8\n\
             cache: {{ policy: as-is, verify: true }}\nrequest_timeout: 120s\n\
             load: {{ {load}, max_in_flight: 20000, lag_limit: 1ms }}\nstop: {{ requests: {n} }}\n"
        ),
    )
    .expect("write spec");
    spec
}

/// Runs the spec; its run directory (None when it failed) and the runner's peak RSS in MB
/// (`VmHWM` read from /proc while it runs: the simulator, a grandchild, is not in it).
fn run(bin: &str, spec: &Path, dir: &Path) -> (Option<std::path::PathBuf>, f64) {
    let mut child = Command::new(bin)
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(dir.join("runs"))
        .arg("--quiet")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run servebench");
    let status = format!("/proc/{}/status", child.id());
    let mut hwm_kb = 0.0f64;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status)
            && let Some(kb) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        {
            hwm_kb = hwm_kb.max(kb);
        }
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let run = stdout
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .map(|r| std::path::PathBuf::from(r.trim()));
    // A run that did not end well: the server's last words, before the temp dir goes.
    if !out.status.success()
        && let Some(dir) = &run
    {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("server-") && name.ends_with(".log") {
                let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                println!("{name} (exit {}), its last lines:", out.status);
                for l in &lines[lines.len().saturating_sub(15)..] {
                    println!("  {l}");
                }
            }
        }
    }
    (run, hwm_kb / 1024.0)
}
