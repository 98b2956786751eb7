//! E2E normalized interactivity (AIPerf's `e2e_normalized_interactivity_p90`/`_p75`) on the
//! simulator: the point's numbers recomputed from its own records (1 / numpy percentile of
//! E2E / output tokens over the successful measured requests), in points.jsonl, points.csv and
//! the report.

use crate::common::*;

fn numpy_percentile(mut x: Vec<f64>, q: f64) -> f64 {
    x.sort_by(f64::total_cmp);
    let h = (x.len() - 1) as f64 * q / 100.0;
    let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
    x[lo] + (h - lo as f64) * (x[hi] - x[lo])
}

#[test]
fn interactivity_is_recomputed_from_the_records() {
    let ws = Workspace::new();
    let spec = ws.write(
        "intv.yaml",
        &sim_spec(
            "intv",
            "  prompt: { kind: random, tokens: 200 }\n  output_tokens: { dist: uniform, min: 8, max: 48 }\n",
            "concurrency: 4\nrequests: 40\nexpect:\n  - { metric: e2e_normalized_interactivity_p90, value: 1000000, tolerance: 1%, source: a value no point reaches }\n",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let ratios: Vec<f64> = requests
        .iter()
        .filter(|r| r["role"] == "measure" && r["error"].is_null())
        .map(|r| r["end_s"].as_f64().unwrap() / r["completion_tokens"].as_f64().unwrap())
        .collect();
    assert_eq!(ratios.len(), 40);
    let mut csv = csv::Reader::from_path(dir.join("points.csv")).unwrap();
    let header = csv.headers().unwrap().clone();
    let row = csv.records().next().unwrap().unwrap();
    for q in [90.0, 75.0] {
        let name = format!("e2e_normalized_interactivity_p{q}");
        let got = &points[0]["metrics"][&name];
        let want = 1.0 / numpy_percentile(ratios.clone(), q);
        let mean = got["mean"].as_f64().unwrap();
        assert!(
            (mean - want).abs() < 1e-9 * want,
            "{name}: {mean} != {want}"
        );
        assert_eq!(got["count"], 40);
        let col = header
            .iter()
            .position(|h| h == format!("{name}_mean"))
            .unwrap();
        let shown: f64 = row[col].parse().unwrap();
        assert!((shown - want).abs() < 1e-6 * want, "{name}: csv {shown}");
    }
    let p90 = points[0]["metrics"]["e2e_normalized_interactivity_p90"]["mean"].as_f64();
    let p75 = points[0]["metrics"]["e2e_normalized_interactivity_p75"]["mean"].as_f64();
    assert!(p90 <= p75, "the slower tail is the lower rate");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("e2e_normalized_interactivity_p90"),
        "{report}"
    );
    assert!(
        report.contains("1 / p90(E2E / completion_tokens)"),
        "{report}"
    );
    // `expect:` takes it, and judges the point's value.
    assert!(
        report.contains("| e2e_normalized_interactivity_p90 (shown in tok/s) | 1000000 |")
            && report.contains("❌ off by"),
        "{report}"
    );
    // `compare` pairs it like every metric.
    let out = servebench()
        .arg("compare")
        .arg(&dir)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("### interactivity p90 (tok/s, higher is better)"),
        "{text}"
    );
}
