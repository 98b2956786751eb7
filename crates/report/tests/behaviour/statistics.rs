//! Confidence intervals in stored points and in the report.

use std::path::Path;

use servebench_model::results::RunDir;
use servebench_model::results::records::{CiMethod, Stat};
use servebench_report::report::{self, build_model};

#[test]
fn points_written_before_intervals_still_load() {
    let line =
        r#"{"count": 2, "mean": 0.5, "p50": 0.5, "p90": 0.6, "p99": 0.6, "min": 0.4, "max": 0.6}"#;
    let stat: Stat = serde_json::from_str(line).unwrap();
    assert_eq!((stat.count, stat.mean), (2, 0.5));
    assert_eq!(
        (stat.std, stat.cv, stat.ci95_low, stat.ci_method),
        (None, None, None, None)
    );
}

#[test]
fn intervals_round_trip_through_json() {
    let stat = Stat {
        count: 3,
        mean: 0.461,
        std: Some(0.01),
        cv: Some(0.01 / 0.461),
        ci95_low: Some(0.449),
        ci95_high: Some(0.473),
        ci_method: Some(CiMethod::Repeats),
        ..Stat::default()
    };
    let text = serde_json::to_string(&stat).unwrap();
    assert!(text.contains(r#""ci_method":"repeats""#), "{text}");
    assert_eq!(serde_json::from_str::<Stat>(&text).unwrap(), stat);
}

#[test]
fn point_details_show_the_interval_next_to_the_mean() {
    let dir = RunDir::open(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/clean-sweep"),
    )
    .unwrap();
    let mut points = dir.read_points().unwrap();
    let ttft = points[0].metrics.get_mut("ttft_s").unwrap();
    ttft.mean = 0.461;
    ttft.ci95_low = Some(0.449);
    ttft.ci95_high = Some(0.473);
    ttft.ci_method = Some(CiMethod::BootstrapRequests);
    let model = build_model(
        &dir.read_meta().unwrap(),
        &points,
        &dir.read_requests().unwrap(),
    );
    let text = report::render(&model, None).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("| TTFT | ms |"))
        .expect("a TTFT detail row");
    assert!(line.contains("| 461 [449, 473] |"), "{line}");
    // Without an interval the mean stands alone.
    let plain = text
        .lines()
        .filter(|l| l.starts_with("| TTFT | ms |"))
        .nth(1)
        .unwrap();
    assert!(!plain.contains('['), "{plain}");
    assert!(
        text.contains("95% confidence interval"),
        "the method is stated"
    );
}
