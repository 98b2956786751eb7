//! Runs to report and compare: the report crate's fixture runs (`crates/report/tests/fixtures/runs`)
//! opened and modelled, and synthetic runs with known differences built on one of them.

use std::path::PathBuf;

use serde_json::json;
use servebench_model::results::RunDir;
use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::{CiMethod, Flag, PointRecord, Stat};
use servebench_report::report::compare::{CompareModel, LoadedRun, Verdict};
use servebench_report::report::{self, build_model};

/// The report crate's fixture runs, wherever the test reads them from (each test tree names
/// the folder from its own manifest directory).
pub struct FixtureRuns {
    root: PathBuf,
}

impl FixtureRuns {
    /// The fixture runs in `root` (`.../crates/report/tests/fixtures/runs`).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        FixtureRuns { root: root.into() }
    }

    /// The fixture run `name`'s directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    #[track_caller]
    pub fn open(&self, name: &str) -> RunDir {
        RunDir::open(&self.path(name)).expect("fixture run directory opens")
    }

    /// The report model of fixture run `name`.
    #[track_caller]
    pub fn model_of(&self, name: &str) -> report::ReportModel {
        let dir = self.open(name);
        build_model(
            &dir.read_meta().unwrap(),
            &dir.read_points().unwrap(),
            &dir.read_requests().unwrap(),
        )
    }

    /// The clean-sweep fixture's meta with a new name, server args and sweep dimensions.
    pub fn meta(&self, name: &str, args: serde_json::Value, dims: &[&str]) -> RunMeta {
        let path = self.path("clean-sweep").join("meta.json");
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        v["experiment"]["name"] = json!(name);
        v["experiment"]["server"]["args"] = args;
        v["dimensions"] = json!(dims);
        serde_json::from_value(v).expect("meta")
    }

    /// A: chunked prefill 8192 at ctx 1024, 8192, 32768. B: 4096 at ctx 1024, 8192, 16384; TTFT at
    /// 1024 is clearly slower, decode the same within noise; B flagged its 8192 point.
    pub fn chunk_runs(&self) -> Vec<LoadedRun> {
        let a = run(
            "runs/chunk/2026-11-29T10-00-00Z",
            self.meta(
                "chunk",
                json!({ "chunked-prefill-size": 8192, "tp-size": 1 }),
                &["ctx"],
            ),
            vec![
                point("p001", 1024, (0.100, 0.095, 0.105), (100.0, 96.0, 104.0)),
                point("p002", 8192, (0.400, 0.390, 0.410), (95.0, 92.0, 98.0)),
                point("p003", 32768, (1.600, 1.550, 1.650), (80.0, 78.0, 82.0)),
            ],
        );
        let mut flagged = point("p002", 8192, (0.200, 0.190, 0.210), (95.5, 92.0, 99.0));
        flagged.flags.push(Flag {
            kind: "cold-cache-hit".into(),
            message: "2 of 8 requests hit the prefix cache".into(),
        });
        let b = run(
            "runs/chunk/2026-11-29T11-00-00Z",
            self.meta(
                "chunk",
                json!({ "chunked-prefill-size": 4096, "tp-size": 1 }),
                &["ctx"],
            ),
            vec![
                point("p001", 1024, (0.150, 0.145, 0.155), (101.0, 97.0, 105.0)),
                flagged,
                point("p003", 16384, (0.800, 0.780, 0.820), (88.0, 86.0, 90.0)),
            ],
        );
        vec![a, b]
    }
}

/// A statistic with a mean and a 95% interval.
pub fn stat(mean: f64, low: f64, high: f64) -> Stat {
    Stat {
        count: 8,
        mean,
        p50: mean,
        p90: high,
        p99: high,
        min: low,
        max: high,
        ci95_low: Some(low),
        ci95_high: Some(high),
        ci_method: Some(CiMethod::BootstrapRequests),
        ..Stat::default()
    }
}

/// A point at `ctx` with TTFT and decode speed as (mean, low, high).
pub fn point(id: &str, ctx: u64, ttft: (f64, f64, f64), decode: (f64, f64, f64)) -> PointRecord {
    PointRecord {
        id: id.to_string(),
        values: [("ctx".to_string(), json!(ctx))].into_iter().collect(),
        group: "g1".to_string(),
        requested_prompt_tokens: Some(ctx),
        ok: 8,
        metrics: [
            ("ttft_s".to_string(), stat(ttft.0, ttft.1, ttft.2)),
            (
                "decode_tok_s".to_string(),
                stat(decode.0, decode.1, decode.2),
            ),
        ]
        .into_iter()
        .collect(),
        ..PointRecord::default()
    }
}

/// A loaded run at `path` (not read from disk).
pub fn run(path: &str, meta: RunMeta, points: Vec<PointRecord>) -> LoadedRun {
    LoadedRun {
        path: PathBuf::from(path),
        meta,
        points,
        truncated_lines: vec![],
        part: None,
        searches: None,
    }
}

/// Each row's point and the verdict of the second run against the first on `metric`.
pub fn verdicts(model: &CompareModel, metric: &str) -> Vec<(String, Option<Verdict>)> {
    let table = model.metrics.iter().find(|m| m.name == metric).unwrap();
    table
        .rows
        .iter()
        .map(|r| (r.point.clone(), r.cells[1].verdict))
        .collect()
}
