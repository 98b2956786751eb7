//! The run directory and the report renderer, against hand-checked fixture runs.

use std::fs;
use std::path::{Path, PathBuf};

use chrono::{TimeZone, Utc};
use indexmap::IndexMap;
use servebench_model::results::records::{Chunk, PointRecord, RequestRecord, Stat};
use servebench_model::results::{RunDir, RunDirError};
use servebench_report::report::{self, ReportError, Template, build_model};

use crate::fixtures;

#[track_caller]
fn rendered(name: &str) -> String {
    report::render_run_dir(&fixtures().open(name), None).expect("report renders")
}

fn request(point: &str, index: u32) -> RequestRecord {
    RequestRecord {
        point: point.to_string(),
        index,
        sent_at: 1_795_950_260.0 + index as f64,
        requested_prompt_tokens: Some(1024),
        chunks: vec![Chunk::new(0.1, 1), Chunk::new(0.11, 3)],
        end_s: Some(0.111),
        prompt_tokens: Some(1027),
        completion_tokens: Some(4),
        cached_tokens: Some(0),
        finish_reason: Some("length".to_string()),
        ..RequestRecord::fixture()
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

/// A recorded simulator run of 3 shared-prefix groups, with the radix cache on (every must-hit
/// request hit) and off (every one missed, flagged).
#[test]
fn shared_prefix_report() {
    let text = rendered("shared-prefix");
    let section = &text[text
        .find("## Prefix cache")
        .expect("a prefix cache section")
        ..text.find("## Point details").expect("point details")];
    insta::assert_snapshot!("shared_prefix_report_section", section);
    assert!(text.contains("prefix-cache-miss"), "{text}");
    assert!(
        text.contains("3 groups x 800 prefix tokens + 60 unique tokens"),
        "{text}"
    );
}

/// A recorded simulator run with its output faults on (`faults: { garbage_past_tokens: 3000,
/// garbage_above_batch: 4 }`): canaries fail past 3000 tokens, consistency at concurrency 8.
#[test]
fn a_validity_run_has_an_output_validity_section() {
    let text = rendered("validity");
    let section = &text[text
        .find("## Output validity")
        .expect("an Output validity section")
        ..text.find("## Charts").expect("charts")];
    insta::assert_snapshot!("validity_section", section);
    let model = fixtures().model_of("validity");
    let invalid = &model.validity.as_ref().unwrap().invalid;
    assert_eq!(invalid.len(), 3, "{invalid:?}");
}

#[test]
fn a_load_run_has_a_load_section_with_definitions_and_its_slo_verdicts() {
    // A real two-rate sweep on the simulator (fast profile), recorded as it ran.
    let text = rendered("load-rate");
    let section: String = text
        .split("## Load")
        .nth(1)
        .and_then(|s| s.split("## Point details").next())
        .expect("a Load section")
        .to_string();
    insta::assert_snapshot!("load_section", section);
}

/// The "Against the hardware" section of a report, up to the next section.
fn bound_section(text: &str) -> String {
    let start = text
        .find("## Against the hardware")
        .unwrap_or_else(|| panic!("no section:\n{text}"));
    let rest = &text[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 4);
    rest[..end].to_string()
}

#[test]
fn bound_section_report() {
    // clean-sweep's points with Llama 3.1 8B's config kept in meta.json and `gpu: h100-sxm`.
    insta::assert_snapshot!(
        "bound_section_report",
        bound_section(&rendered("bound-sweep"))
    );
}

#[test]
fn a_run_without_a_model_config_or_gpu_says_how_to_give_them() {
    let bound = fixtures().model_of("clean-sweep").bound.expect("a section");
    assert!(bound.rows.is_empty());
    assert_eq!(bound.missing.len(), 2, "{:?}", bound.missing);
    assert!(
        bound.missing[0].contains("give `server.model_facts:`"),
        "{:?}",
        bound.missing
    );
    assert!(
        bound.missing[1].contains("give `server.gpu:`"),
        "{:?}",
        bound.missing
    );
    // An open-loop run has no closed-loop step to grade: no section at all.
    assert!(fixtures().model_of("load-rate").bound.is_none());
}

#[test]
fn rendering_twice_is_identical() {
    assert_eq!(rendered("clean-sweep"), rendered("clean-sweep"));
    assert_eq!(rendered("contaminated"), rendered("contaminated"));
}

// ---- numbers in the model come from points.jsonl ----

#[test]
fn table_rows_carry_the_stored_means() {
    let dir = fixtures().open("clean-sweep");
    let points = dir.read_points().unwrap();
    let model = fixtures().model_of("clean-sweep");
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
    let model = fixtures().model_of("clean-sweep");
    let row = &model.tables[0].rows[0];
    let ttft = row.stats["ttft_s"].as_ref().unwrap().mean;
    let decode = row.stats["decode_tok_s"].as_ref().unwrap().mean;
    let line = rendered("clean-sweep")
        .lines()
        .find(|l| l.starts_with("| 1024 | 1024 |"))
        .expect("a row for ctx 1024")
        .to_string();
    // TTFT in ms, as every time is shown.
    assert!(
        line.contains(&format!(
            "| {} |",
            servebench_model::text::sig3(ttft * 1000.0)
        )),
        "{line}"
    );
    assert!(
        line.contains(&format!("| {} |", servebench_model::text::rate(decode))),
        "{line}"
    );
}

#[test]
fn missing_metrics_render_as_a_dash_never_nan() {
    let model = fixtures().model_of("contaminated");
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
    let model = fixtures().model_of("contaminated");
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
    let model = fixtures().model_of("clean-sweep");
    let template = "{{ title }}: {% for t in tables %}{% for r in t.rows %}\
                    {{ r.ctx_req }}={{ r.stats.ttft_s|stat('mean')|fmt_s }} {% endfor %}{% endfor %}\
                    {{ none|fmt_rate }}";
    let out = report::render(&model, Some(template)).unwrap();
    assert!(out.starts_with("prefill-vs-chunk: 1024="), "{out}");
    assert!(out.ends_with("—"), "{out}");
}

#[test]
fn user_template_error_names_the_line() {
    let model = fixtures().model_of("clean-sweep");
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
    // The message names the field that is not there, not only "undefined value".
    assert!(message.contains("titel"), "{message}");
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
    let out = report::render_run_dir(
        &fixtures().open("contaminated"),
        Some(&Template::File(path)),
    )
    .unwrap();
    assert_eq!(out, "long-context-oom (incomplete)\n");

    let missing = Template::File(tmp.path().join("nope.md.j2"));
    let err = report::render_run_dir(&fixtures().open("contaminated"), Some(&missing)).unwrap_err();
    assert!(matches!(err, ReportError::ReadTemplate { .. }), "{err:?}");
    assert!(err.to_string().contains("nope.md.j2"), "{err}");
}

// ---- built-in templates by name ----

#[test]
fn long_context_streaming_report() {
    let long_context = Template::Builtin(report::builtin("long-context").unwrap());
    let text =
        report::render_run_dir(&fixtures().open("contaminated"), Some(&long_context)).unwrap();
    insta::assert_snapshot!("long_context_streaming_report", text);
}

#[test]
fn long_context_two_point_report() {
    // The fixture's spec names `report.template: long-context`: no override needed.
    insta::assert_snapshot!("long_context_two_point_report", rendered("two-point-crash"));
}

#[test]
fn long_context_table_has_the_study_columns() {
    let header = |name: &str, override_: Option<&Template>| {
        report::render_run_dir(&fixtures().open(name), override_)
            .unwrap()
            .lines()
            .find(|l| l.starts_with("| ctx_req |"))
            .map(str::to_string)
    };
    let long_context = Template::Builtin(report::builtin("long-context").unwrap());
    assert_eq!(
        header("contaminated", Some(&long_context)).as_deref(),
        Some("| ctx_req | prompt_tok | TTFT_s | prefill_tok/s | decode_tok/s | s/out_tok |")
    );
    assert_eq!(
        header("two-point-crash", None).as_deref(),
        Some(
            "| ctx_req | prompt_tok | TTFT_s | prefill_tok/s | decode_tok/s | s/out_tok | t_a | t_b |"
        )
    );
    // One table per server group.
    let text =
        report::render_run_dir(&fixtures().open("clean-sweep"), Some(&long_context)).unwrap();
    assert_eq!(text.matches("| ctx_req |").count(), 2, "{text}");
    assert!(text.contains("### server.args.chunked-prefill-size=16384"));
}

#[test]
fn long_context_names_the_failed_point_and_its_cause() {
    let model = fixtures().model_of("two-point-crash");
    let crashed = &model.tables[0].rows[2];
    assert_eq!(crashed.failure.as_deref(), Some("out-of-memory"));
    let text = rendered("two-point-crash");
    let failed = text
        .lines()
        .find(|l| l.starts_with("- `p003 (ctx=4096)`: **out-of-memory**"))
        .unwrap_or_else(|| panic!("no failed-point line:\n{text}"));
    assert!(failed.contains("reset ×1"), "{failed}");
    assert!(
        !failed.contains("log tail"),
        "the log tail stays in the run directory: {failed}"
    );
    assert!(text.contains("| 4096 ⚠1,2,3 | — |"), "{text}");
    assert!(text.contains("✅ failed with out-of-memory, as published"));
}

#[test]
fn builtin_names_and_paths_resolve() {
    let base = Path::new("experiments");
    for name in ["default", "long-context"] {
        assert_eq!(
            Template::resolve(name, base),
            Template::Builtin(report::builtin(name).unwrap())
        );
        assert_eq!(
            Template::from_arg(Path::new(name)),
            Template::Builtin(report::builtin(name).unwrap())
        );
    }
    assert_eq!(
        Template::resolve("my.md.j2", base),
        Template::File(base.join("my.md.j2"))
    );
    assert_eq!(
        Template::from_arg(Path::new("long-context.md.j2")),
        Template::File(PathBuf::from("long-context.md.j2"))
    );
    assert_eq!(report::builtin_names(), "default, long-context");
    assert!(report::builtin("Long-Context").is_none());
}

#[test]
fn builtin_template_errors_name_the_file() {
    // A built-in template renders any fixture; an error in one would name its file.
    for name in [
        "clean-sweep",
        "contaminated",
        "two-point-crash",
        "capacity-search",
    ] {
        for t in report::BUILTIN_TEMPLATES {
            let text = report::render_run_dir(&fixtures().open(name), Some(&Template::Builtin(t)))
                .unwrap_or_else(|e| panic!("{name} with {}: {e}", t.file));
            assert!(
                !text.contains("NaN") && !text.contains("inf |"),
                "{name} with {}",
                t.file
            );
        }
    }
}

// ---- the report model's schema ----

#[test]
fn report_models_validate_against_the_schema() {
    let schema = report::schema::report_model_schema();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    for name in [
        "clean-sweep",
        "contaminated",
        "two-point-crash",
        "capacity-search",
    ] {
        let model = serde_json::to_value(fixtures().model_of(name)).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&model)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}");
    }
    // The schema is strict enough to catch a changed or misspelt field.
    let mut model = serde_json::to_value(fixtures().model_of("two-point-crash")).unwrap();
    model["tables"][0]["rows"][0]["ok"] = serde_json::json!("4");
    assert!(!validator.is_valid(&model));
    let mut model = serde_json::to_value(fixtures().model_of("two-point-crash")).unwrap();
    model["setup"]["tempreature"] = serde_json::json!(0.0);
    assert!(!validator.is_valid(&model));
}

#[test]
fn report_model_schema_describes_the_fields() {
    let schema = report::schema::report_model_schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert!(
        schema["$id"]
            .as_str()
            .unwrap()
            .ends_with("report-model.schema.json")
    );
    let row = &schema["$defs"]["PointRow"]["properties"];
    assert!(
        row["ctx_req"]["description"]
            .as_str()
            .unwrap()
            .contains("Requested prompt tokens")
    );
    let stat = &schema["$defs"]["Stat"]["properties"];
    assert!(
        stat["ci95_low"]["description"]
            .as_str()
            .unwrap()
            .contains("95%")
    );
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

    let meta = fixtures().open("clean-sweep").read_meta().unwrap();
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
        ..PointRecord::default()
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
fn requests_are_visited_line_by_line_into_any_record_type() {
    let tmp = tempfile::tempdir().unwrap();
    let started = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
    let dir = RunDir::create(tmp.path(), "t", "", started).unwrap();
    dir.append_request(&request("p001", 0)).unwrap();
    dir.append_request(&request("p002", 1)).unwrap();
    // A blank line, a line ended by CRLF, then a crash mid-write.
    let path = dir.path.join("requests.jsonl");
    let mut text = fs::read_to_string(&path).unwrap();
    let first = text.lines().next().unwrap().to_string();
    text.push_str(&format!("\n{first}\r\n"));
    text.push_str(r#"{"point":"p003","round":0,"ind"#);
    fs::write(&path, &text).unwrap();

    /// Only what a caller reads of each line.
    #[derive(serde::Deserialize)]
    struct Lean {
        point: String,
        sent_at: f64,
    }
    let mut seen = Vec::new();
    let truncated = dir
        .visit_requests(|r: Lean| seen.push((r.point, r.sent_at)))
        .unwrap();
    let t0 = 1_795_950_260.0;
    assert_eq!(
        seen,
        [
            ("p001".to_string(), t0),
            ("p002".to_string(), t0 + 1.0),
            ("p001".to_string(), t0)
        ]
    );
    assert_eq!(
        truncated,
        vec![5],
        "lines count from 1, the blank one included"
    );

    // A bad line that is not cut off is an error naming it.
    fs::write(&path, format!("{first}\nnot json\n")).unwrap();
    let e = dir.visit_requests(|_: Lean| ()).unwrap_err();
    assert!(matches!(e, RunDirError::Parse { line: 2, .. }), "{e}");
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

// ---- charts ----

/// A point of a ctx × concurrency sweep whose TTFT grows with the context; `ttft_s` None is a
/// point whose every request failed.
fn sweep_point(id: &str, ctx: u64, concurrency: u64, ttft_s: Option<f64>) -> PointRecord {
    let stat = |mean: f64| Stat {
        count: 2,
        mean,
        ..Default::default()
    };
    let mut metrics = IndexMap::new();
    if let Some(ttft) = ttft_s {
        metrics.insert("ttft_s".to_string(), stat(ttft));
        metrics.insert("prompt_tokens".to_string(), stat(ctx as f64));
        metrics.insert("decode_tok_s".to_string(), stat(100.0));
    }
    PointRecord {
        id: id.to_string(),
        values: [
            ("ctx".to_string(), serde_json::json!(ctx)),
            ("concurrency".to_string(), serde_json::json!(concurrency)),
        ]
        .into_iter()
        .collect(),
        group: "g1".to_string(),
        requested_prompt_tokens: Some(ctx),
        ok: if ttft_s.is_some() { 2 } else { 0 },
        errors: if ttft_s.is_some() { 0 } else { 2 },
        metrics,
        ..PointRecord::default()
    }
}

/// The report model of a ctx [1k, 2k, 4k, 8k] × concurrency [1, 4] sweep; the 8k point at
/// concurrency 4 failed.
fn sweep_model() -> report::ReportModel {
    let mut meta = fixtures().open("clean-sweep").read_meta().unwrap();
    meta.dimensions = vec!["ctx".to_string(), "concurrency".to_string()];
    let mut points = Vec::new();
    for (i, ctx) in [1024u64, 2048, 4096, 8192].into_iter().enumerate() {
        for concurrency in [1u64, 4] {
            let id = format!("p{:03}", points.len() + 1);
            let failed = ctx == 8192 && concurrency == 4;
            let ttft = (!failed).then(|| 0.1 * (i + 1) as f64 * concurrency as f64);
            points.push(sweep_point(&id, ctx, concurrency, ttft));
        }
    }
    build_model(&meta, &points, &[])
}

/// `(fill colour, cx, cy)` of every point marker in an SVG, in drawing order.
fn markers(svg: &str) -> Vec<(String, i32, i32)> {
    svg.lines()
        .filter(|l| l.starts_with("<circle"))
        .map(|l| (attr(l, "fill"), num(l, "cx"), num(l, "cy")))
        .collect()
}

#[track_caller]
fn attr(line: &str, name: &str) -> String {
    let start = line
        .find(&format!(" {name}=\""))
        .unwrap_or_else(|| panic!("no {name} in {line}"))
        + name.len()
        + 3;
    line[start..].split('"').next().unwrap().to_string()
}

#[track_caller]
fn num(line: &str, name: &str) -> i32 {
    attr(line, name).parse().unwrap()
}

#[test]
fn chart_lines_follow_the_data_on_a_log_axis() {
    let model = sweep_model();
    let all = report::charts::charts(&model);
    let ttft = all.iter().find(|c| c.file == "ttft.svg").unwrap();
    let labels: Vec<&str> = ttft.series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, vec!["concurrency=1", "concurrency=4"]);
    assert_eq!(
        ttft.series[1].points.len(),
        3,
        "the failed point is left out"
    );

    let svg = report::charts::render_svg(ttft).unwrap();
    let found = markers(&svg);
    assert_eq!(found.len(), 7, "one marker per measured point");
    let colours: Vec<&String> = found.iter().map(|(c, ..)| c).fold(Vec::new(), |mut v, c| {
        if !v.contains(&c) {
            v.push(c)
        }
        v
    });
    assert_eq!(colours.len(), 2, "one colour per concurrency");
    for colour in colours {
        let line: Vec<(i32, i32)> = found
            .iter()
            .filter(|(c, ..)| c == colour)
            .map(|&(_, x, y)| (x, y))
            .collect();
        // Context doubles from point to point: equal steps on the log axis.
        let steps: Vec<i32> = line.windows(2).map(|w| w[1].0 - w[0].0).collect();
        assert!(steps.iter().all(|s| *s > 0), "{line:?}");
        assert!(
            steps.iter().all(|s| (s - steps[0]).abs() <= 1),
            "2x context is one equal step: {steps:?}"
        );
        // TTFT rises with context, so the marker climbs (SVG y grows downwards).
        assert!(line.windows(2).all(|w| w[1].1 < w[0].1), "{line:?}");
    }
    // A linear y axis: concurrency 1 rises 0.1 s per point in equal steps, and its 8k point
    // (0.4 s) sits level with concurrency 4's 1k point (also 0.4 s).
    let c1: Vec<i32> = found[..4].iter().map(|m| m.2).collect();
    let rises: Vec<i32> = c1.windows(2).map(|w| w[0] - w[1]).collect();
    assert!(rises.iter().all(|r| (r - rises[0]).abs() <= 1), "{rises:?}");
    assert!((c1[3] - found[4].2).abs() <= 1, "{found:?}");

    for label in ["concurrency=1", "concurrency=4"] {
        assert_eq!(
            svg.matches(&format!("\n{label}\n")).count(),
            1,
            "one legend entry for {label}"
        );
    }
    for tick in ["1k", "2k", "4k", "8k"] {
        assert!(svg.contains(&format!("\n{tick}\n")), "tick {tick}: {svg}");
    }
    assert_eq!(
        svg,
        report::charts::render_svg(ttft).unwrap(),
        "deterministic"
    );
}

#[test]
fn charts_need_a_context_sweep_and_two_measured_points() {
    let mut meta = fixtures().open("clean-sweep").read_meta().unwrap();
    meta.dimensions = vec!["ctx".to_string(), "concurrency".to_string()];

    // Only concurrency varies: nothing to draw against context, so no charts and no links.
    let same_ctx: Vec<PointRecord> = [1u64, 2, 4]
        .iter()
        .enumerate()
        .map(|(i, c)| sweep_point(&format!("p{i}"), 1024, *c, Some(0.1 * *c as f64)))
        .collect();
    let model = build_model(&meta, &same_ctx, &[]);
    assert!(report::charts::charts(&model).is_empty());
    assert!(model.charts.is_empty());
    assert!(!report::render(&model, None).unwrap().contains("## Charts"));

    // Context varies but only one point measured anything: a line needs two.
    let one_measured = vec![
        sweep_point("p1", 1024, 1, Some(0.1)),
        sweep_point("p2", 2048, 1, None),
    ];
    let model = build_model(&meta, &one_measured, &[]);
    assert!(report::charts::charts(&model).is_empty());

    // The sweep model: decode is measured, prefill never was, so prefill has no chart.
    let model = sweep_model();
    let files: Vec<&str> = report::charts::charts(&model)
        .iter()
        .map(|c| c.file)
        .collect();
    assert_eq!(files, vec!["ttft.svg", "decode.svg"]);
    let paths: Vec<&str> = model.charts.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, vec!["charts/ttft.svg", "charts/decode.svg"]);
    let text = report::render(&model, None).unwrap();
    assert!(
        text.contains("![TTFT against context length](charts/ttft.svg)"),
        "{text}"
    );
    assert!(!text.contains("prefill.svg"));
}

#[test]
fn clean_sweep_ttft_chart() {
    let model = fixtures().model_of("clean-sweep");
    let charts = report::charts::charts(&model);
    let ttft = charts.iter().find(|c| c.file == "ttft.svg").unwrap();
    // One line per server group, labelled by the server dimension that differs.
    let labels: Vec<&str> = ttft.series.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(
        labels,
        vec!["chunked-prefill-size=4096", "chunked-prefill-size=16384"]
    );
    insta::assert_snapshot!(
        "clean_sweep_ttft_chart",
        report::charts::render_svg(ttft).unwrap()
    );
}

/// A copy of a fixture run directory that a test may write into.
fn writable_copy(name: &str) -> (tempfile::TempDir, RunDir) {
    let tmp = tempfile::tempdir().unwrap();
    for entry in fs::read_dir(fixtures().path(name)).unwrap() {
        let path = entry.unwrap().path();
        fs::copy(&path, tmp.path().join(path.file_name().unwrap())).unwrap();
    }
    let dir = RunDir::open(tmp.path()).unwrap();
    (tmp, dir)
}

#[test]
fn written_report_and_charts_rerender_byte_identical() {
    let (_tmp, dir) = writable_copy("clean-sweep");
    let path = report::write_report(&dir, None).unwrap();
    assert_eq!(path, dir.path.join("report.md"));
    let read_all = || {
        [
            "report.md",
            "charts/ttft.svg",
            "charts/prefill.svg",
            "charts/decode.svg",
        ]
        .map(|f| fs::read(dir.path.join(f)).unwrap_or_else(|e| panic!("{f}: {e}")))
    };
    let first = read_all();
    let markdown = String::from_utf8(first[0].clone()).unwrap();
    assert_eq!(
        markdown,
        rendered("clean-sweep"),
        "same text as render_run_dir"
    );
    for file in ["ttft.svg", "prefill.svg", "decode.svg"] {
        assert!(markdown.contains(&format!("](charts/{file})")), "{file}");
    }
    report::write_report(&dir, None).unwrap();
    assert_eq!(read_all(), first);

    // A chart the data no longer supports is removed, not left beside the report.
    let (_tmp2, flat) = writable_copy("clean-sweep");
    fs::create_dir_all(flat.path.join("charts")).unwrap();
    fs::write(flat.path.join("charts/extra-note.txt"), "mine").unwrap();
    let points = flat.read_points().unwrap();
    let one_ctx: Vec<String> = points
        .iter()
        .filter(|p| p.requested_prompt_tokens == Some(1024))
        .map(|p| serde_json::to_string(p).unwrap() + "\n")
        .collect();
    fs::write(flat.path.join("points.jsonl"), one_ctx.concat()).unwrap();
    fs::write(flat.path.join("charts/ttft.svg"), "old").unwrap();
    report::write_report(&flat, None).unwrap();
    assert!(!flat.path.join("charts/ttft.svg").exists());
    assert!(
        flat.path.join("charts/extra-note.txt").exists(),
        "only chart files are removed"
    );
}

#[test]
fn points_with_warnings_have_hollow_markers() {
    // contaminated: p002 (4k) hit the cache in a cold run; p001 (1k) and p003 (16k) are clean
    // for TTFT apart from p003's own warnings.
    let model = fixtures().model_of("contaminated");
    let warned: Vec<(&str, usize)> = model.tables[0]
        .rows
        .iter()
        .map(|r| (r.id.as_str(), r.warning_count))
        .collect();
    let charts = report::charts::charts(&model);
    let ttft = charts.iter().find(|c| c.file == "ttft.svg").unwrap();
    let svg = report::charts::render_svg(ttft).unwrap();
    let fills: Vec<String> = markers(&svg).into_iter().map(|m| m.0).collect();
    let expected: Vec<bool> = warned
        .iter()
        .filter(|(id, _)| *id != "p004")
        .map(|(_, n)| *n > 0)
        .collect();
    assert_eq!(
        fills.iter().map(|f| f == "none").collect::<Vec<_>>(),
        expected,
        "{warned:?} {fills:?}"
    );
    assert!(expected.contains(&true) && expected.contains(&false));
}

/// A real capacity search on the simulator (tests/search.rs's spec), recorded as it ran: the
/// Capacity section states the answer with its bracket, lists the probes in order and links
/// the chart, whose markers are the probes' verdicts.
#[test]
fn a_capacity_search_has_a_capacity_section() {
    let text = rendered("capacity-search");
    let section: String = text
        .split("## Capacity")
        .nth(1)
        .and_then(|s| s.split("## Point details").next())
        .expect("a Capacity section")
        .to_string();
    insta::assert_snapshot!("capacity_section", section);
    // The numbers are search.json's and the probes' own.
    let dir = fixtures().open("capacity-search");
    let file = dir.read_search().unwrap().expect("search.json");
    let s = &file.searches[0];
    assert_eq!((s.capacity, s.above), (Some(11.625), Some(12.0)));
    // The headline is what the server completed at the capacity probe, then the offered
    // value and the bracket.
    assert!(
        section.contains(
            "capacity 11.3 req/s completed at 11.6 req/s offered (between 11.6 passing and 12.0 failing; resolution 5.00%)"
        ),
        "{section}"
    );
    // Probes 11.25 and 11.625 read apart; every probe shows its measured requests.
    assert!(
        section.contains("| 5 | p001-s5 | 11.3 | 20 | passes |"),
        "{section}"
    );
    let points = dir.read_points().unwrap();
    let rows = section.lines().filter(|l| l.contains("| p001-s")).count();
    assert_eq!(rows, points.len());
    let failing: Vec<_> = points
        .iter()
        .filter(|p| !p.search.as_ref().unwrap().passes)
        .collect();
    assert_eq!(failing.len(), 1);
    assert!(
        section.contains("| 2 | p001-s2 | 12.0 | 20 | **fails** | 9.6 | 495 |"),
        "{section}"
    );
    assert!(section.contains("probe 2 (load.rate 12.0) fails: e2e_p99 0.495 > 0.176."));
    // The chart: one cross per failing probe, a filled circle per passing one (each panel,
    // plus one in each legend).
    let section = report::capacity::section(Some(&file), &points).unwrap();
    let view = &section.searches[0];
    let svg = report::capacity_chart::render_svg(view).unwrap();
    let passing = points.len() - failing.len();
    assert_eq!(svg.matches("<circle").count(), 2 * (passing + 1), "{svg}");
    // The rate the server sustained at the answer, beside it: probe 6 (11.625 offered)
    // completed 11.3 req/s, within 10%: no caveat.
    let six = points.iter().find(|p| p.id == "p001-s6").unwrap();
    let achieved = six.search.as_ref().unwrap().throughput_req_s;
    assert_eq!(view.achieved_at_capacity, Some(achieved));
    assert!(
        text.contains(&format!(
            "**capacity {} req/s completed at 11.6 req/s offered",
            servebench_model::text::sig3(achieved)
        )),
        "{text}"
    );
    assert!(!text.contains("part of the gap is the window's tail"));
    // A copy where that probe completed only 9 req/s says the answer may hide a growing queue.
    let tmp = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(fixtures().path("capacity-search")).unwrap() {
        let f = f.unwrap();
        if f.file_type().unwrap().is_file() {
            std::fs::copy(f.path(), tmp.path().join(f.file_name())).unwrap();
        }
    }
    let lines = std::fs::read_to_string(tmp.path().join("points.jsonl")).unwrap();
    let edited: Vec<String> = lines
        .lines()
        .map(|l| {
            let mut p: serde_json::Value = serde_json::from_str(l).unwrap();
            if p["id"] == "p001-s6" {
                p["search"]["throughput_req_s"] = 9.0.into();
            }
            p.to_string()
        })
        .collect();
    std::fs::write(tmp.path().join("points.jsonl"), lines_joined(&edited)).unwrap();
    let slow = report::render_run_dir(&RunDir::open(tmp.path()).unwrap(), None).unwrap();
    assert!(
        slow.contains("**capacity 9.00 req/s completed at 11.6 req/s offered")
            && slow.contains("The server completed 9.0 req/s where 11.6 req/s were offered")
            && slow.contains("part of the gap is the window's tail"),
        "{slow}"
    );
}

fn lines_joined(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn a_load_run_over_two_server_variants_has_a_pareto_frontier_per_variant_and_run_wide() {
    // A real run on the simulator: max-running-requests 1 and 4, each at 10, 40 and 160
    // requests/s. From its points.jsonl (output_tok_s mean, decode_tok_s p50):
    //   g1: p001 (113, 832) p002 (435, 836) p003 (779, 869)
    //   g2: p004 (114, 838) p005 (443, 831) p006 (1605, 820)
    // p003 beats p001 and p002 on both axes: g1's frontier is p003 alone. In g2 each point
    // trades one axis for the other: all three are on its frontier. Run-wide, p003 also beats
    // p004 and p005; nothing has more total tok/s than p006.
    let model = fixtures().model_of("load-pareto");
    let load = model.load.expect("a load section");
    let ids = |keep: fn(&report::pareto::ParetoPoint) -> bool| -> Vec<&str> {
        load.pareto
            .iter()
            .filter(|p| keep(p))
            .map(|p| p.id.as_str())
            .collect()
    };
    assert_eq!(ids(|p| p.frontier), ["p003", "p006"]);
    assert_eq!(
        ids(|p| p.variant_frontier),
        ["p003", "p004", "p005", "p006"]
    );
    assert_eq!(
        report::pareto::variants(&load.pareto),
        [
            "server.args.max-running-requests=1",
            "server.args.max-running-requests=4"
        ]
    );
    // The chart: one line per variant through its frontier, dominated points as dots.
    let chart = report::load_charts::charts(&load)
        .into_iter()
        .find(|c| c.file == "load-pareto.svg")
        .expect("a Pareto chart");
    assert_eq!(chart.lines[0].1.len(), 1);
    assert_eq!(chart.dots[0].len(), 2);
    assert_eq!(chart.lines[1].1.len(), 3);
    assert!(chart.dots[1].is_empty());
    let svg = report::load_charts::render_svg(&chart).unwrap();
    assert!(svg.contains("server.args.max-running-requests=4"), "{svg}");
    let text = rendered("load-pareto");
    let section = &text[text.find("Pareto frontier (").expect("the Pareto text")
        ..text[text.find("## Load").unwrap()..]
            .find("Definitions:")
            .map(|i| i + text.find("## Load").unwrap())
            .unwrap()];
    insta::assert_snapshot!("load_pareto", section);
}

/// The clean sweep turned into a speculation on/off study by hand: group g1 plain, g2 with
/// `--speculative-algorithm EAGLE`, its points' accept lengths, step times and decode speeds
/// chosen (1.80x at ctx 1024, 1.10x at 8192, 0.70x at 32768, where acceptance is too low).
fn speculative_study() -> (servebench_model::results::meta::RunMeta, Vec<PointRecord>) {
    use servebench_model::catalog::FlagKind;
    use servebench_model::results::records::Flag;
    let dir = fixtures().open("clean-sweep");
    let mut meta = dir.read_meta().unwrap();
    let dim = "server.args.speculative-algorithm";
    meta.dimensions = vec![dim.to_string(), "ctx".to_string()];
    for s in &mut meta.servers {
        s.args.shift_remove("chunked-prefill-size");
        if s.group == "g2" {
            s.args
                .insert("speculative-algorithm".into(), serde_json::json!("EAGLE"));
        }
    }
    let mut points = dir.read_points().unwrap();
    let off: Vec<f64> = points[..3]
        .iter()
        .map(|p| p.metrics["decode_tok_s"].mean)
        .collect();
    for (i, p) in points.iter_mut().enumerate() {
        let on = p.group == "g2";
        let ctx = p.values["ctx"].clone();
        p.values = [
            (
                dim.to_string(),
                if on { "EAGLE".into() } else { false.into() },
            ),
            ("ctx".to_string(), ctx),
        ]
        .into_iter()
        .collect();
        if !on {
            continue;
        }
        let (speedup, accept) = [(1.8, 2.6), (1.1, 1.9), (0.7, 1.05)][i - 3];
        let decode = p.metrics.get_mut("decode_tok_s").unwrap();
        decode.mean = off[i - 3] * speedup;
        let n = decode.count;
        let stat = |mean: f64, low: f64, high: f64| Stat {
            count: n,
            mean,
            min: low,
            p50: mean,
            p90: high,
            p99: high,
            max: high,
            ..Stat::default()
        };
        p.metrics.insert(
            "accept_length".into(),
            stat(accept, (accept - 0.3_f64).max(1.0), accept + 0.2),
        );
        p.metrics.insert(
            "verify_step_s".into(),
            stat(accept / off[i - 3] / speedup, 0.0, 0.0),
        );
        if accept < 1.1 {
            p.flags.push(Flag::new(
                FlagKind::SpecLowAcceptance,
                "speculative decoding accepted 1.05 tokens per verify step",
            ));
        }
    }
    (meta, points)
}

#[test]
fn speculative_section_snapshot() {
    let (meta, points) = speculative_study();
    let model = build_model(&meta, &points, &[]);
    let text = report::render(&model, None).unwrap();
    let start = text
        .find("## Speculative decoding")
        .expect("a speculative section");
    let end = start + 2 + text[start + 2..].find("\n## ").expect("a section after it");
    let section = &text[start..end];
    insta::assert_snapshot!("speculative_section", section);
    assert!(
        section.contains("Speculation pays up to ctx 8192 (1.10x) and stops paying by ctx 32768 (0.70x): the crossover lies between ctx 8192 and 32768."),
        "{section}"
    );
    assert!(section.contains("| 1.05 ⚠ |"), "{section}");
}

/// The clean sweep's points as if every request had been sent tools: the first point's calls
/// all valid, the second's partly broken (flagged), the third's answered in text.
fn tool_calling_study() -> (servebench_model::results::meta::RunMeta, Vec<PointRecord>) {
    use servebench_model::catalog::FlagKind;
    use servebench_model::results::records::Flag;
    use servebench_model::results::tool_calls::{InvalidCall, ToolCallsView};
    let dir = fixtures().open("clean-sweep");
    let meta = dir.read_meta().unwrap();
    let mut points = dir.read_points().unwrap();
    points.truncate(3);
    let views = [
        (8, 8, 8, None),
        (
            8,
            8,
            3,
            Some((
                2,
                "arguments of `get_weather` are not JSON: EOF while parsing",
            )),
        ),
        (8, 0, 0, None),
    ];
    for (p, (sent, called, valid, first)) in points.iter_mut().zip(views) {
        p.tool_calls = Some(ToolCallsView {
            sent,
            called,
            valid,
            first_invalid: first.map(|(request, reason)| InvalidCall {
                request,
                reason: reason.to_string(),
            }),
        });
        if valid < called {
            p.flags.push(Flag::new(
                FlagKind::InvalidToolCalls,
                "5 of 8 tool calls were invalid",
            ));
        }
    }
    (meta, points)
}

/// Per point sent tools: the calls made, valid and invalid, the valid share (flagged under
/// 95%), the first invalid call, beside the point's TTFT; the definitions follow the metrics.
#[test]
fn tool_calls_section_snapshot() {
    let (meta, points) = tool_calling_study();
    let model = build_model(&meta, &points, &[]);
    let section = model.tool_calls.as_ref().expect("a tool-call section");
    let rows: Vec<(usize, usize, usize, usize, Option<f64>)> = section
        .rows
        .iter()
        .map(|r| (r.sent, r.called, r.valid, r.invalid, r.valid_rate))
        .collect();
    assert_eq!(
        rows,
        [
            (8, 8, 8, 0, Some(1.0)),
            (8, 8, 3, 5, Some(0.375)),
            (8, 0, 0, 0, None)
        ]
    );
    let ttft = &points[1].metrics["ttft_s"];
    assert_eq!(section.rows[1].ttft_p50_s, Some(ttft.p50));
    assert_eq!(section.rows[1].ttft_p99_s, Some(ttft.p99));
    assert_eq!(section.flagged, [section.rows[1].point.clone()]);
    assert!(model.metric_defs.contains_key("tool_call_valid_rate"));
    let text = report::render(&model, None).unwrap();
    let start = text.find("## Tool calls").expect("a tool-call section");
    let end = start + 2 + text[start + 2..].find("\n## ").expect("a section after it");
    let section = &text[start..end];
    insta::assert_snapshot!("tool_calls_section", section);
    assert!(section.contains("| 0.38 ⚠ |"), "{section}");
    assert!(
        section.contains("request 2: arguments of `get_weather` are not JSON"),
        "{section}"
    );
}

/// A run whose requests were sent no tools has no tool-call section and no tool-call
/// definitions: the report never states what did not happen.
#[test]
fn a_run_without_tools_has_no_tool_call_section() {
    let model = fixtures().model_of("clean-sweep");
    assert!(model.tool_calls.is_none());
    assert!(!model.metric_defs.contains_key("tool_call_rate"));
    let text = report::render(&model, None).unwrap();
    assert!(!text.contains("## Tool calls"), "{text}");
}

/// A block trace's setup says what its lines sent: their blocks, no nonce, their own output
/// lengths (it read "random, target 64 tokens", "4 tokens per request" and "a unique nonce
/// starts every measured prompt" for a Mooncake replay).
#[test]
fn a_block_traces_setup_says_its_lines_send_their_blocks() {
    let dir = fixtures().open("clean-sweep");
    let mut meta = dir.read_meta().unwrap();
    meta.experiment.load = Some(
        serde_json::from_value(serde_json::json!({
            "kind": "trace",
            "trace": {"file": "conversation_trace.jsonl"}
        }))
        .unwrap(),
    );
    let model = build_model(
        &meta,
        &dir.read_points().unwrap(),
        &dir.read_requests().unwrap(),
    );
    let text = report::render(&model, None).unwrap();
    let line = |head: &str| text.lines().find(|l| l.starts_with(head)).unwrap();
    let prompt = line("- **Prompt:**");
    assert!(
        prompt.contains(
            "each line of the trace `conversation_trace.jsonl` with `hash_ids` sends its blocks"
        ) && prompt.contains("the other lines send the workload's prompt"),
        "{prompt}"
    );
    let output = line("- **Output:**");
    assert!(
        output.contains("each line's `output_length` from the trace (without one, "),
        "{output}"
    );
    let cache = line("- **Cache:**");
    assert!(
        cache.contains("a prompt of blocks carries no nonce")
            && !cache.contains("a unique nonce starts every measured prompt"),
        "{cache}"
    );
}

/// An agent-session run's header says its sessions, turns and live count, not the closed
/// loop's "requests per point and round, concurrency" it does not have (93 turns of 6
/// sessions at 3 live read "1 per point and round, concurrency 1").
#[test]
fn an_agentic_runs_header_says_its_sessions_turns_and_live_count() {
    use servebench_model::results::jobs::{JobRecord, JobsView};
    let dir = fixtures().open("clean-sweep");
    let mut points = dir.read_points().unwrap();
    points.truncate(1);
    let sessions: Vec<JobRecord> = (0..6)
        .map(|i| JobRecord {
            session: i,
            trace_id: format!("trace_{i}"),
            turns: if i == 0 { 18 } else { 15 },
            sent: if i == 0 { 18 } else { 15 },
            failed: 0,
            completion_s: Some(100.0),
            stopped: None,
            ..JobRecord::default()
        })
        .collect();
    points[0].jobs = Some(JobsView {
        live: 3,
        live_mean: 2.5,
        window_s: 400.0,
        started: 6,
        completed: 6,
        stopped: 0,
        jobs_per_hour: 54.0,
        ttft_by_context: Vec::new(),
        sessions,
        ..JobsView::default()
    });
    let mut meta = dir.read_meta().unwrap();
    meta.experiment.load = Some(
        serde_json::from_value(serde_json::json!({
            "kind": "agentic",
            "agentic": {"file": "sessions.jsonl", "live": 3}
        }))
        .unwrap(),
    );
    let model = build_model(&meta, &points, &dir.read_requests().unwrap());
    let text = report::render(&model, None).unwrap();
    // Its prompts are the trace's blocks and its outputs the trace's, not the workload's.
    let line = |head: &str| text.lines().find(|l| l.starts_with(head)).unwrap();
    let prompt = line("- **Prompt:**");
    assert!(
        prompt.contains("each turn's blocks in the session trace `sessions.jsonl`")
            && !prompt.contains("target"),
        "{prompt}"
    );
    let output = line("- **Output:**");
    assert!(
        output.contains("each turn's output length from the trace")
            && !output.contains("per request"),
        "{output}"
    );
    let cache = line("- **Cache:**");
    assert!(
        cache.contains("sessions share nothing") && !cache.contains("a unique nonce"),
        "{cache}"
    );
    let header = text
        .lines()
        .find(|l| l.starts_with("- **Requests:**"))
        .unwrap();
    assert!(
        header.contains("agent sessions replayed from a trace")
            && header.contains("p001 6 sessions, 93 turns, 3 live at once"),
        "{header}"
    );
    assert!(!header.contains("per point and round"), "{header}");
}
