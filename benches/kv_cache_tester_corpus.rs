//! SemiAnalysis's kv-cache-tester corpus (the AgentX traces), whole: every `*.json` session of
//! a folder (`KV_CACHE_TESTER_TRACES`, by default the four in
//! `tests/fixtures/kv-cache-tester/traces`) validated as published, one `servebench validate`
//! a file (the refused listed with their first line), then the folder at once with its wall
//! time and peak RSS; then the first `KV_CACHE_TESTER_REPLAY` sessions (4; 0: none) replayed
//! on a fresh simulator whose pool never evicts (`live` as many, think and tool time times
//! `KV_CACHE_TESTER_THINK`, 0.01), with what issue 44 asks of the field's data: the turns
//! flagged `unexpected-cache-hit`, the requests whose server hit is not within a block of
//! their theoretical one (recomputed here from `requests.jsonl`), prompts that are not their
//! `in`, and how late each turn went out against the trace (`sent_at - job.due_at`).
//!
//! Get the corpus from callanjfox/kv-cache-tester, folder `traces/` (Apache-2.0), then:
//! `KV_CACHE_TESTER_TRACES=path/to/traces cargo bench --bench kv_cache_tester_corpus`.
//! A release binary replays as the field would: build it, then run this bench's binary
//! (`cargo bench --bench kv_cache_tester_corpus --no-run`) with `SERVEBENCH_BIN=target/release/servebench`.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/validate.rs"]
mod validate_rss;
use validate_rss::validate;

const BLOCK: u64 = 64;

fn main() {
    let folder = std::env::var_os("KV_CACHE_TESTER_TRACES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kv-cache-tester/traces"),
        PathBuf::from,
    );
    let number = |name: &str, default: f64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(default)
    };
    let replay = number("KV_CACHE_TESTER_REPLAY", 4.0) as usize;
    let think = number("KV_CACHE_TESTER_THINK", 0.01);
    let bin = std::env::var("SERVEBENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_servebench").to_string());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .expect("KV_CACHE_TESTER_TRACES: a folder of trace_*.json sessions")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let dir = tempfile::tempdir().expect("tempdir");

    // Each session on its own: which validate, and why the others do not.
    let mut refused = Vec::new();
    for file in &files {
        let spec = write_spec(dir.path(), "one", file, 1, None, think);
        let out = Command::new(&bin)
            .arg("validate")
            .arg(&spec)
            .output()
            .expect("run servebench");
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            refused.push(format!(
                "{}: {}",
                file.file_name().unwrap().to_string_lossy(),
                why.lines().next().unwrap_or("")
            ));
        }
    }
    println!(
        "sessions validated one by one: {} of {} ({})",
        files.len() - refused.len(),
        files.len(),
        folder.display()
    );
    for r in refused.iter().take(10) {
        println!("  refused {r}");
    }
    // The folder at once, as a run reads it: every session read through and checked, the
    // first held (the whole corpus's blocks are past the 16 Mi ids a run holds: each request
    // names its whole history again, 94 M ids in all).
    let spec = write_spec(dir.path(), "folder", &folder, 1, Some(replay.max(1)), think);
    let started = std::time::Instant::now();
    let (ok, rss_mb) = validate(&bin, &spec);
    println!(
        "the folder at once: {} in {:.2} s, peak RSS {rss_mb:.0} MB",
        if ok { "ok" } else { "refused" },
        started.elapsed().as_secs_f64()
    );

    if replay == 0 {
        return;
    }
    let slice = dir.path().join("slice");
    std::fs::create_dir(&slice).expect("mkdir");
    for file in files
        .iter()
        .filter(|f| !refused_name(&refused, f))
        .take(replay)
    {
        std::fs::copy(file, slice.join(file.file_name().unwrap())).expect("copy");
    }
    let sessions = std::fs::read_dir(&slice).expect("slice").count();
    let spec = write_spec(dir.path(), "slice", &slice, sessions.max(1), None, think);
    replay_slice(&bin, dir.path(), &spec, sessions);
}

fn refused_name(refused: &[String], file: &Path) -> bool {
    let name = file.file_name().unwrap().to_string_lossy();
    refused.iter().any(|r| r.starts_with(&format!("{name}:")))
}

/// A spec replaying `file` (a session or a folder) on a simulator whose pool never evicts at
/// these sizes, `live` sessions at once (`sessions` of them in all, the first held).
fn write_spec(
    dir: &Path,
    name: &str,
    file: &Path,
    live: usize,
    sessions: Option<usize>,
    think: f64,
) -> PathBuf {
    let spec = dir.join(format!("{name}.yaml"));
    let sessions = sessions.map_or(String::new(), |n| format!(" sessions: {n},"));
    std::fs::write(
        &spec,
        format!(
            "name: kv-cache-tester-corpus\nserver:\n  engine: sim\n  model: m\n  args: {{ profile: fast, context-length: 262144, max-total-tokens: 8000000 }}\n  ready_timeout: 60s\n\
             workload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 4\n\
             cache: {{ policy: cold, verify: true }}\nrequest_timeout: 600s\n\
             load: {{ kind: agentic, agentic: {{ file: {}, live: {live},{sessions} think_scale: {think} }} }}\n",
            file.display()
        ),
    )
    .expect("write spec");
    spec
}

/// The slice replayed, and what its records say: turns, errors, `unexpected-cache-hit`,
/// hits within a block of their theoretical (or reachable) one, prompts at their `in`, and
/// the turns' lateness against the trace.
fn replay_slice(bin: &str, dir: &Path, spec: &Path, sessions: usize) {
    let out = Command::new(bin)
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(dir.join("runs"))
        .arg("--quiet")
        .output()
        .expect("run servebench");
    let run = String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        l.strip_prefix("run directory: ")
            .map(|r| PathBuf::from(r.trim()))
    });
    let Some(run) = run.filter(|r| r.join("points.jsonl").is_file()) else {
        println!(
            "the replay failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    };
    let point: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(run.join("points.jsonl"))
            .expect("points")
            .lines()
            .next()
            .expect("a point"),
    )
    .expect("json");
    let flagged: Vec<String> = point["flags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["kind"].as_str().map(str::to_string))
        .collect();
    let records: Vec<serde_json::Value> = std::fs::read_to_string(run.join("requests.jsonl"))
        .expect("requests")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let (mut errors, mut within, mut below, mut above, mut at_in) = (0, 0, 0, 0, 0);
    let mut late_ms = Vec::new();
    for r in &records {
        if !r["error"].is_null() {
            errors += 1;
            continue;
        }
        let n = |k: &str| r[k].as_u64();
        if let (Some(cached), Some(theoretical)) =
            (n("cached_tokens"), n("theoretical_cached_tokens"))
        {
            let reachable = n("reachable_cached_tokens").unwrap_or(0).max(theoretical);
            if cached + BLOCK < theoretical {
                below += 1;
            } else if cached > reachable + BLOCK {
                above += 1;
            } else {
                within += 1;
            }
        }
        if n("prompt_tokens") == r["job"]["context_tokens"].as_u64() {
            at_in += 1;
        }
        if let (Some(sent), Some(due)) = (r["sent_at"].as_f64(), r["job"]["due_at"].as_f64()) {
            late_ms.push((sent - due) * 1000.0);
        }
    }
    late_ms.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        if late_ms.is_empty() {
            return f64::NAN;
        }
        let k = (late_ms.len() - 1) as f64 * q;
        let (i, f) = (k.floor() as usize, k.fract());
        late_ms[i] + (late_ms[(i + 1).min(late_ms.len() - 1)] - late_ms[i]) * f
    };
    println!(
        "replayed {sessions} sessions: {} turns, {errors} failed; unexpected-cache-hit: {}",
        records.len(),
        if flagged.iter().any(|f| f == "unexpected-cache-hit") {
            "flagged"
        } else {
            "none"
        }
    );
    println!(
        "  server hits within a block ({BLOCK} tokens) of the theoretical: {within}; below it: {below}; above the reachable: {above}"
    );
    println!("  prompts exactly their `in`: {at_in} of {}", records.len());
    println!(
        "  sent after due: p50 {:.1} ms, p99 {:.1} ms, latest {:.1} ms, earliest {:.1} ms",
        pct(0.5),
        pct(0.99),
        late_ms.last().copied().unwrap_or(f64::NAN),
        late_ms.first().copied().unwrap_or(f64::NAN)
    );
    println!("  point flags: {}", flagged.join(", "));
    println!("  run directory: {}", run.display());
}
