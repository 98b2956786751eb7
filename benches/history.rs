//! `servebench history` over 1,000 run directories: 10 experiments of 100 runs each, every
//! run the clean-sweep fixture's `meta.json` and six-point `points.jsonl` (12 KB) with its own
//! start time, a server flag that changes every 25 runs and decode speeds that step with it.
//! Three timings, each of the whole history (find, read, build, render the Markdown):
//!
//! - `cold, no index`: every run directory read (`--no-index`);
//! - `cold, index built`: the same, and the index written (the first `history` of a folder);
//! - `with the index`: every run taken from the index (its stamps checked against the files).
//!
//! - with `HISTORY_BENCH_DROP_CACHES=1` (root), `disk, no index` and `disk, the index`: the
//!   same after the page cache is dropped, every file read from the disk.
//!
//! Run: `cargo bench --bench history` (`HISTORY_BENCH_RUNS=N` for another count). The load
//! average is printed beside the timings: on a shared machine they are only comparable with it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use servebench_report::history::{self, index, source};

fn generate(root: &Path, runs: usize) {
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/report/tests/fixtures/runs/clean-sweep");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("meta.json")).unwrap())
            .unwrap();
    let points: Vec<serde_json::Value> = std::fs::read_to_string(fixtures.join("points.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for i in 0..runs {
        let experiment = format!("bench-{}", i % 10);
        let n = i / 10;
        let mut m = meta.clone();
        m["experiment"]["name"] = experiment.clone().into();
        m["started_at"] = format!(
            "2026-{:02}-{:02}T{:02}:00:00Z",
            1 + n / 28 % 12,
            1 + n % 28,
            i % 24
        )
        .into();
        let chunk = if (n / 25) % 2 == 0 { 8192 } else { 4096 };
        m["experiment"]["server"]["args"]["chunked-prefill-size"] = chunk.into();
        let dir = root.join(&experiment).join(format!("run-{n:04}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("meta.json"),
            serde_json::to_string_pretty(&m).unwrap(),
        )
        .unwrap();
        let mut text = String::new();
        for p in &points {
            let mut p = p.clone();
            // Three rounds with a 2% interval: evidence that stands, so steps are judged.
            if let Some(stat) = p["metrics"]["decode_tok_s"].as_object_mut() {
                let factor = if chunk == 4096 { 0.8 } else { 1.0 };
                let mean = stat["mean"].as_f64().unwrap_or(100.0) * factor;
                stat.insert("mean".into(), mean.into());
                stat.insert("count".into(), 3.into());
                stat.insert("std".into(), (mean * 0.01).into());
                stat.insert("ci95_low".into(), (mean * 0.98).into());
                stat.insert("ci95_high".into(), (mean * 1.02).into());
                stat.insert("ci_method".into(), "repeats".into());
            }
            text.push_str(&serde_json::to_string(&p).unwrap());
            text.push('\n');
        }
        std::fs::write(dir.join("points.jsonl"), text).unwrap();
    }
}

fn whole(paths: &[PathBuf], index: Option<&Path>) -> (usize, usize, [f64; 3]) {
    let t = Instant::now();
    let budget = source::Budget::default();
    let (runs, skipped) = match index {
        None => source::load_dirs(paths, &budget),
        Some(i) => {
            let (r, s, _) = index::load_dirs(paths, &budget, i);
            (r, s)
        }
    };
    assert!(skipped.is_empty(), "{skipped:?}");
    let n = runs.len();
    let read_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let model = history::build(
        runs,
        skipped,
        vec!["runs".into()],
        None,
        &history::default_metrics(),
    );
    let build_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let md = history::markdown::render(&model, Some("charts")).expect("the history renders");
    let render_s = t.elapsed().as_secs_f64();
    let changes = model
        .experiments
        .iter()
        .map(|e| e.change_points().len())
        .sum();
    assert!(md.len() > 1000);
    (n, changes, [read_s, build_s, render_s])
}

fn main() {
    let runs: usize = std::env::var("HISTORY_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("runs");
    let t = Instant::now();
    generate(&root, runs);
    println!(
        "generated {runs} run directories in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let paths = vec![root.clone()];
    let idx = root.join(index::INDEX_FILE);
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let timed = |what: &str, index: Option<&Path>| {
        let t = Instant::now();
        let (n, changes, [read, build, render]) = whole(&paths, index);
        println!(
            "{what:<18} {n} runs, {changes} change points: {:.3} s (read {read:.3} s, build {build:.3} s, render {render:.3} s; load average {})",
            t.elapsed().as_secs_f64(),
            load().trim()
        );
    };
    timed("cold, no index", None);
    timed("cold, index built", Some(&idx));
    timed("with the index", Some(&idx));
    timed("with the index", Some(&idx));
    // From a cold disk: the page cache dropped before each (root only), so every file is read
    // from the disk, as on a first history after a reboot or over a network file system.
    if std::env::var_os("HISTORY_BENCH_DROP_CACHES").is_some() {
        for (what, index) in [
            ("disk, no index", None),
            ("disk, the index", Some(idx.as_path())),
        ] {
            drop_page_cache();
            timed(what, index);
        }
    }
}

/// Writes dirty pages out and drops the page cache (`/proc/sys/vm/drop_caches`: root only).
fn drop_page_cache() {
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .expect("HISTORY_BENCH_DROP_CACHES needs root: /proc/sys/vm/drop_caches");
}
