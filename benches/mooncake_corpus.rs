//! Mooncake's published traces, whole: each `*.jsonl` of a folder (`MOONCAKE_TRACES`, by
//! default the samples in `tests/fixtures/mooncake`) validated as published (`servebench
//! validate`, `format: mooncake`, 512-token blocks, `hash_ids: required`), with its lines,
//! its time span, the validate's wall time and peak RSS, and what the blocks share (the
//! theoretical hit of a cache that never evicts, recomputed here from the lines); then its
//! first `MOONCAKE_REPLAY` lines (200; 0: none) replayed on the simulator, with the server's
//! hits beside the theoretical ones.
//!
//! Get the corpus from kvcache-ai/Mooncake, folder `FAST25-release/traces/`
//! (`conversation_trace.jsonl`, `synthetic_trace.jsonl`, `toolagent_trace.jsonl`), then:
//! `MOONCAKE_TRACES=path/to/traces cargo bench --bench mooncake_corpus`.

use std::collections::HashSet;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/validate.rs"]
mod validate_rss;
use validate_rss::validate;

fn main() {
    let folder = std::env::var_os("MOONCAKE_TRACES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mooncake"),
        PathBuf::from,
    );
    let replay: usize = std::env::var("MOONCAKE_REPLAY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let bin = env!("CARGO_BIN_EXE_servebench");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .expect("MOONCAKE_TRACES: a folder of *.jsonl traces")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    println!(
        "{:<36} {:>8} {:>9} {:>9} {:>8} {:>7} {:>10} {:>8} {:>8} {:>12}",
        "trace",
        "lines",
        "span s",
        "validate",
        "rss MB",
        "shared",
        "replayed",
        "theory",
        "server",
        "below/above"
    );
    for file in files {
        let dir = tempfile::tempdir().expect("tempdir");
        let (lines, span_s, shared) = shares(&file);
        let spec = write_spec(dir.path(), &file, 1.0);
        let started = std::time::Instant::now();
        let (ok, rss_mb) = validate(bin, &spec);
        let took = started.elapsed().as_secs_f64();
        let (theory, server, judged) = if replay > 0 && ok {
            replay_head(bin, dir.path(), &file, replay)
        } else {
            ("-".into(), "-".into(), "-".into())
        };
        println!(
            "{:<36} {:>8} {:>9.0} {:>8.2}s {:>8.0} {:>6.1}% {:>10} {:>8} {:>8} {:>12}",
            file.file_name().unwrap().to_string_lossy(),
            lines,
            span_s,
            took,
            rss_mb,
            shared * 100.0,
            if ok {
                replay.min(lines).to_string()
            } else {
                "refused".into()
            },
            theory,
            server,
            judged,
        );
    }
}

/// Lines, span (s) and the share of prompt tokens in leading blocks sent before (a cache
/// that never evicts), recomputed from the file independently of servebench.
fn shares(file: &Path) -> (usize, f64, f64) {
    let reader = std::io::BufReader::new(std::fs::File::open(file).expect("open"));
    let (mut seen, mut lines, mut hit, mut total) = (HashSet::new(), 0usize, 0u64, 0u64);
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    for line in reader.lines() {
        let line = line.expect("read");
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        let n = v["input_length"].as_u64().unwrap_or(0);
        let ids: Vec<u64> = v["hash_ids"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
            .unwrap_or_default();
        let lead = ids.iter().take_while(|id| seen.contains(*id)).count() as u64;
        hit += (lead * 512).min(n);
        total += n;
        seen.extend(ids);
        let t = v["timestamp"].as_f64().unwrap_or(0.0) / 1000.0;
        (first, last) = (first.min(t), last.max(t));
        lines += 1;
    }
    (lines, last - first, hit as f64 / total.max(1) as f64)
}

/// A spec replaying `trace` on a simulator whose pool never evicts at these sizes.
fn write_spec(dir: &Path, trace: &Path, time_scale: f64) -> PathBuf {
    let spec = dir.join("mooncake.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: mooncake-corpus\nserver:\n  engine: sim\n  model: m\n  args: {{ profile: fast, context-length: 262144, max-total-tokens: 8000000 }}\n  ready_timeout: 60s\n\
             workload:\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 4\n\
             cache: {{ policy: cold, verify: true }}\nrequest_timeout: 300s\n\
             load: {{ kind: trace, trace: {{ file: {}, format: mooncake, block_size: 512, hash_ids: required, time_scale: {time_scale} }} }}\n",
            trace.display()
        ),
    )
    .expect("write spec");
    spec
}

/// The first `n` lines of `file` replayed (at a tenth of their time): the theoretical and
/// the server's cached tokens, as shares of the prompt tokens, and the requests that found
/// less and more than their theoretical hit (`below/above`).
fn replay_head(bin: &str, dir: &Path, file: &Path, n: usize) -> (String, String, String) {
    let text = std::fs::read_to_string(file).expect("read");
    let head: String = text.lines().take(n).map(|l| format!("{l}\n")).collect();
    let slice = dir.join("head.jsonl");
    std::fs::write(&slice, head).expect("write");
    let spec = write_spec(dir, &slice, 0.1);
    let out = Command::new(bin)
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(dir.join("runs"))
        .arg("--quiet")
        .output()
        .expect("run servebench");
    let run = String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        l.strip_prefix("run directory: ")
            .map(|r| r.trim().to_string())
    });
    let Some(points) =
        run.and_then(|r| std::fs::read_to_string(Path::new(&r).join("points.jsonl")).ok())
    else {
        println!("{}", String::from_utf8_lossy(&out.stderr));
        return ("failed".into(), "failed".into(), "-".into());
    };
    let p: serde_json::Value =
        serde_json::from_str(points.lines().next().expect("a point")).expect("json");
    let t = &p["trace_cache"];
    let share = |k: &str| {
        t[k].as_f64().unwrap_or(f64::NAN) / t["prompt_tokens"].as_f64().unwrap_or(f64::NAN)
    };
    (
        format!("{:.1}%", share("theoretical_cached_tokens") * 100.0),
        format!("{:.1}%", share("cached_tokens") * 100.0),
        format!("{}/{}", t["below"], t["above"]),
    )
}
