//! The run directory and the report renderer, against hand-checked fixture runs.

use std::fs;
use std::path::{Path, PathBuf};

use chrono::{TimeZone, Utc};
use servebench::report::{self, ReportError, build_model};
use servebench::results::records::{
    Chunk, PointRecord, RequestRecord, RequestRole, Stat, TokenSource,
};
use servebench::results::{RunDir, RunDirError};
use servebench::spec::types::Api;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/runs")
        .join(name)
}

#[track_caller]
fn open(name: &str) -> RunDir {
    RunDir::open(&fixture(name)).expect("fixture run directory opens")
}

#[track_caller]
fn model_of(name: &str) -> report::ReportModel {
    let dir = open(name);
    build_model(
        &dir.read_meta().unwrap(),
        &dir.read_points().unwrap(),
        &dir.read_requests().unwrap(),
    )
}

#[track_caller]
fn rendered(name: &str) -> String {
    report::render_run_dir(&open(name), None).expect("report renders")
}

fn request(point: &str, index: u32) -> RequestRecord {
    RequestRecord {
        point: point.to_string(),
        round: 0,
        index,
        role: RequestRole::Measure,
        api: Api::SglangGenerate,
        sent_at: 1_795_950_260.0 + index as f64,
        requested_prompt_tokens: Some(1024),
        max_tokens: 4,
        chunks: vec![
            Chunk {
                t_s: 0.1,
                tokens: 1,
            },
            Chunk {
                t_s: 0.11,
                tokens: 3,
            },
        ],
        end_s: Some(0.111),
        prompt_tokens: Some(1027),
        completion_tokens: Some(4),
        cached_tokens: Some(0),
        token_source: TokenSource::MetaInfo,
        finish_reason: Some("length".to_string()),
        error: None,
    }
}

// ---- snapshots: what a user reads ----

#[test]
fn clean_sweep_report() {
    insta::assert_snapshot!("clean_sweep_report", rendered("clean-sweep"));
}

#[test]
fn contaminated_incomplete_report() {
    insta::assert_snapshot!("contaminated_incomplete_report", rendered("contaminated"));
}

#[test]
fn rendering_twice_is_identical() {
    assert_eq!(rendered("clean-sweep"), rendered("clean-sweep"));
    assert_eq!(rendered("contaminated"), rendered("contaminated"));
}

// ---- numbers in the model come from points.jsonl ----

#[test]
fn table_rows_carry_the_stored_means() {
    let dir = open("clean-sweep");
    let points = dir.read_points().unwrap();
    let model = model_of("clean-sweep");
    assert_eq!(model.tables.len(), 2, "one table per server group");
    assert_eq!(model.point_dimensions, vec!["ctx"]);
    assert_eq!(
        model.server_dimensions,
        vec!["server.args.chunked-prefill-size"]
    );

    let row = model.tables[0]
        .rows
        .iter()
        .find(|r| r.ctx_req == Some(1024))
        .unwrap();
    let stored = points.iter().find(|p| p.id == row.id).unwrap();
    let ttft = row.stats["ttft_s"].as_ref().unwrap();
    assert_eq!(ttft.mean, stored.metrics["ttft_s"].mean);
    assert_eq!(row.values, vec!["1024"]);
    assert_eq!(row.ok, 2);
    assert_eq!(
        model.tables[1].title,
        "server.args.chunked-prefill-size=16384"
    );
}

#[test]
fn rendered_row_shows_the_formatted_means() {
    let model = model_of("clean-sweep");
    let row = &model.tables[0].rows[0];
    let ttft = row.stats["ttft_s"].as_ref().unwrap().mean;
    let decode = row.stats["decode_tok_s"].as_ref().unwrap().mean;
    let line = rendered("clean-sweep")
        .lines()
        .find(|l| l.starts_with("| 1024 | 1024 |"))
        .expect("a row for ctx 1024")
        .to_string();
    assert!(
        line.contains(&format!("| {} |", report::format::sig3(ttft))),
        "{line}"
    );
    assert!(
        line.contains(&format!("| {} |", report::format::fmt_rate(decode))),
        "{line}"
    );
}

#[test]
fn missing_metrics_render_as_a_dash_never_nan() {
    let model = model_of("contaminated");
    let p003 = model.tables[0]
        .rows
        .iter()
        .find(|r| r.id == "p003")
        .unwrap();
    assert!(
        p003.stats["decode_tok_s"].is_none(),
        "one output token: no decode speed"
    );
    let text = rendered("contaminated");
    let line = text.lines().find(|l| l.starts_with("| 16384 |")).unwrap();
    assert!(line.contains("| — |"), "{line}");
    assert!(
        !text.contains("NaN") && !text.contains("| inf"),
        "no NaN/inf anywhere"
    );
}

#[test]
fn flags_become_numbered_markers_and_warnings() {
    let model = model_of("contaminated");
    let table = &model.tables[0];
    let kinds: Vec<(&str, &str)> = table
        .warnings
        .iter()
        .map(|w| (w.point.as_str(), w.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("p002", "cold-cache-hit"),
            ("p003", "calibration"),
            ("p003", "errors"),
            ("p003", "incomplete")
        ]
    );
    let p002 = &table.rows[1];
    assert_eq!(p002.marks["cached"], " ⚠1");
    let p003 = &table.rows[2];
    assert_eq!(p003.marks["prompt_tok"], " ⚠2");
    assert_eq!(p003.marks["ok_err"], " ⚠3,4");
    let http = &p003.error_summary[0];
    assert_eq!(
        (http.kind.as_str(), http.count, http.status),
        ("http", 1, Some(503))
    );
    assert!(
        http.sample
            .as_deref()
            .unwrap()
            .starts_with("Service Unavailable")
    );
    assert_eq!(model.unfinished_points[0].id, "p004");
    assert!(!model.run.complete);
}

#[test]
fn truncated_line_is_noted_in_the_report() {
    let text = rendered("contaminated");
    assert!(
        text.contains("requests.jsonl line 11 was cut off"),
        "{text}"
    );
}

// ---- user templates ----

#[test]
fn user_template_sees_the_model_and_filters() {
    let model = model_of("clean-sweep");
    let template = "{{ title }}: {% for t in tables %}{% for r in t.rows %}\
                    {{ r.ctx_req }}={{ r.stats.ttft_s|stat('mean')|fmt_s }} {% endfor %}{% endfor %}\
                    {{ none|fmt_rate }}";
    let out = report::render(&model, Some(template)).unwrap();
    assert!(out.starts_with("prefill-vs-chunk: 1024="), "{out}");
    assert!(out.ends_with("—"), "{out}");
}

#[test]
fn user_template_error_names_the_line() {
    let model = model_of("clean-sweep");
    let err = report::render(&model, Some("# {{ title }}\n\n{{ tables[0].titel }}\n")).unwrap_err();
    let ReportError::Template {
        ref name,
        line,
        ref message,
    } = err
    else {
        panic!("expected a template error, got {err:?}")
    };
    assert_eq!(name, report::USER_TEMPLATE_NAME);
    assert_eq!(line, Some(3));
    assert!(message.contains("undefined"), "{message}");
    assert!(err.to_string().contains("line 3"), "{err}");

    let err = report::render(&model, Some("{% for x in %}")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("template user template, line 1: syntax error"),
        "{err}"
    );
}

#[test]
fn template_override_file_is_used() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("short.md.j2");
    fs::write(&path, "{{ title }} ({{ run.status }})\n").unwrap();
    let out = report::render_run_dir(&open("contaminated"), Some(&path)).unwrap();
    assert_eq!(out, "long-context-oom (incomplete)\n");

    let missing = tmp.path().join("nope.md.j2");
    let err = report::render_run_dir(&open("contaminated"), Some(&missing)).unwrap_err();
    assert!(matches!(err, ReportError::ReadTemplate { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.md.j2"), "{err}");
}

// ---- the run directory ----

#[test]
fn run_dir_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let started = Utc.with_ymd_and_hms(2026, 11, 29, 10, 4, 12).unwrap();
    let spec = "name: demo\n# comments survive\n";
    let dir = RunDir::create(tmp.path(), "demo", spec, started).unwrap();
    assert_eq!(dir.path, tmp.path().join("demo/2026-11-29T10-04-12Z"));
    assert_eq!(
        fs::read_to_string(dir.path.join("spec.yaml")).unwrap(),
        spec
    );

    // Same second: a suffix, never a shared folder.
    let second = RunDir::create(tmp.path(), "demo", spec, started).unwrap();
    assert_eq!(second.path, tmp.path().join("demo/2026-11-29T10-04-12Z-2"));

    let meta = open("clean-sweep").read_meta().unwrap();
    dir.write_meta(&meta).unwrap();
    dir.write_resolved(&serde_json::json!({ "points": [{ "id": "p001", "ctx": 1024 }] }))
        .unwrap();
    let resolved = fs::read_to_string(dir.path.join("resolved.yaml")).unwrap();
    assert!(resolved.contains("ctx: 1024"), "{resolved}");

    let requests: Vec<RequestRecord> = (0..3).map(|i| request("p001", i)).collect();
    std::thread::scope(|s| {
        for r in &requests {
            let dir = &dir;
            s.spawn(move || dir.append_request(r).unwrap());
        }
    });
    let point = PointRecord {
        id: "p001".to_string(),
        values: [("ctx".to_string(), serde_json::json!(1024))]
            .into_iter()
            .collect(),
        group: "g1".to_string(),
        requested_prompt_tokens: Some(1024),
        ok: 3,
        errors: 0,
        error_kinds: Default::default(),
        metrics: [(
            "ttft_s".to_string(),
            Stat {
                count: 3,
                mean: 0.1,
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        flags: vec![],
        incomplete: false,
        failure: None,
    };
    dir.append_point(&point).unwrap();

    let reopened = RunDir::open(&dir.path).unwrap();
    assert_eq!(reopened.read_meta().unwrap(), meta);
    let mut back = reopened.read_requests().unwrap();
    back.sort_by_key(|r| r.index);
    assert_eq!(back, requests);
    assert_eq!(reopened.read_points().unwrap(), vec![point]);
    assert_eq!(
        reopened.server_log_path("g1"),
        dir.path.join("server-g1.log")
    );

    reopened.write_report("# demo\n").unwrap();
    assert_eq!(
        fs::read_to_string(dir.path.join("report.md")).unwrap(),
        "# demo\n"
    );
}

#[test]
fn truncated_last_line_is_skipped_and_appends_resume_on_a_new_line() {
    let tmp = tempfile::tempdir().unwrap();
    let started = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
    let dir = RunDir::create(tmp.path(), "t", "", started).unwrap();
    dir.append_request(&request("p001", 0)).unwrap();
    // A crash mid-write leaves half a record and no newline.
    let path = dir.path.join("requests.jsonl");
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str(r#"{"point":"p001","round":0,"ind"#);
    fs::write(&path, &text).unwrap();

    let read = dir.read_requests_detailed().unwrap();
    assert_eq!(read.records.len(), 1);
    assert_eq!(read.truncated_lines, vec![2]);

    // A resumed run appends after the cut line, not onto it.
    fs::write(dir.path.join("meta.json"), "{}").unwrap();
    let resumed = RunDir::open(&dir.path).unwrap();
    resumed.append_request(&request("p001", 1)).unwrap();
    let read = resumed.read_requests_detailed().unwrap();
    assert_eq!(read.records.len(), 2);
    assert_eq!(read.truncated_lines, vec![2]);
}

#[test]
fn bad_files_are_errors_naming_the_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let err = RunDir::open(tmp.path()).unwrap_err();
    assert!(matches!(err, RunDirError::NotARunDir { .. }));
    assert!(err.to_string().contains("no meta.json"), "{err}");

    fs::write(
        tmp.path().join("meta.json"),
        "{\n  \"tool_version\": 3\n}\n",
    )
    .unwrap();
    let dir = RunDir::open(tmp.path()).unwrap();
    let err = dir.read_meta().unwrap_err();
    assert!(err.to_string().contains("meta.json:2:"), "{err}");

    // A corrupt line in the middle is not a crash artefact: fail, naming it.
    let good = serde_json::to_string(&request("p001", 0)).unwrap();
    fs::write(
        tmp.path().join("requests.jsonl"),
        format!("{good}\n{{\"point\": 7}}\n{good}\n"),
    )
    .unwrap();
    let err = dir.read_requests().unwrap_err();
    assert!(matches!(err, RunDirError::Parse { line: 2, .. }), "{err:?}");
    assert!(err.to_string().contains("requests.jsonl:2:"), "{err}");
}
