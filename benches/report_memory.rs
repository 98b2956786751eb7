//! The report's memory against the number of requests. For each case, `servebench run` of a
//! `load:` spec against the built-in simulator (fast profile, 32-token prompts, 8 output
//! tokens, `/metrics` scraped so the point draws its timeline), then, in this process, the
//! report of that run directory rendered and written again (`report::write_report`: what
//! `servebench report DIR` does: report.md, charts, timeline, CSV exports). A counting
//! allocator gives the heap peak of that call: the most bytes allocated and not yet freed at
//! once, above what was held before it (heaptrack's "peak heap memory consumption", without
//! heaptrack). Beside it, the peak of reading every request into memory
//! (`RunDir::read_requests_lean`), which is what the report held before it folded requests
//! line by line: the column that grows with the requests.
//!
//! Cases (name, rate, requests): `report-2k` (500/s, 2,000), `report-20k` (2,000/s, 20,000),
//! `report-200k` (4,000/s, 200,000; the run takes about a minute).
//!
//! Run: `cargo bench --bench report_memory` (`REPORT_BENCH=report-20k` runs one case).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use servebench_model::results::RunDir;

mod support;

const CASES: &[(&str, u32, u32)] = &[
    ("report-2k", 500, 2_000),
    ("report-20k", 2_000, 20_000),
    ("report-200k", 4_000, 200_000),
];

/// The system allocator, counting the bytes it holds and their peak.
struct Counting;

/// Bytes allocated and not freed now.
static NOW: AtomicUsize = AtomicUsize::new(0);
/// The most `NOW` has been since the last [`peak_of`] began.
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = NOW.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                NOW.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f`, returning what it returned, the heap peak above what was held before it (MB),
/// and its wall time (s).
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, f64, f64) {
    let before = NOW.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let started = Instant::now();
    let out = f();
    let secs = started.elapsed().as_secs_f64();
    let peak = PEAK.load(Ordering::Relaxed) - before;
    (out, peak as f64 / 1e6, secs)
}

fn main() {
    let only = std::env::var("REPORT_BENCH").ok();
    let bin = env!("CARGO_BIN_EXE_servebench");
    println!(
        "{:<12} {:>9} {:>12} {:>15} {:>10} {:>17}",
        "case", "requests", "jsonl MB", "report peak MB", "report s", "all-in-memory MB"
    );
    for (name, rate, requests) in CASES {
        if only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let spec = support::write_spec(
            dir.path(),
            name,
            &format!("rate: {rate}, arrival: constant"),
            *requests,
            ", enable-metrics: true",
        );
        let run = match support::run(bin, &spec, dir.path()) {
            Ok(run) => run,
            Err(stderr) => {
                println!("{name}: the run failed: {stderr}");
                continue;
            }
        };
        let run = run.as_path();
        let jsonl_mb = std::fs::metadata(run.join("requests.jsonl"))
            .map(|m| m.len() as f64 / 1e6)
            .unwrap_or(f64::NAN);
        let run_dir = RunDir::open(run).expect("run directory");
        let (written, report_mb, report_s) =
            peak_of(|| servebench_report::report::write_report(&run_dir, None));
        if let Err(e) = written {
            println!("{name}: the report failed: {e}");
            continue;
        }
        let (held, held_mb, _) = peak_of(|| run_dir.read_requests_lean().map(|r| r.records));
        let recorded = held.map_or(0, |r| r.len());
        println!(
            "{:<12} {:>9} {:>12.1} {:>15.2} {:>10.2} {:>17.1}",
            name, recorded, jsonl_mb, report_mb, report_s, held_mb
        );
    }
}
