//! The report through the `servebench` binary (`run`, `report`), and what the report crate's
//! own tests (`cargo test -p servebench-report`) cannot read from inside its folder: the
//! checked-in schemas, the guide's example template, the roofline crate's model configs and
//! the experiments' data. The fixture runs are the report crate's
//! (`crates/report/tests/fixtures/runs`).

use std::fs;
use std::path::Path;

use servebench_model::results::RunDir;
use servebench_model::results::records::PointRecord;
use servebench_report::report::{self, build_model};

use crate::common::{Workspace, read_jsonl, report_fixtures, run_dir, servebench, show, sim_spec};

#[test]
fn bound_section_figures_are_the_rooflines_on_the_points_means() {
    let model = report_fixtures().model_of("bound-sweep");
    let bound = model.bound.as_ref().expect("a section");
    assert!(bound.missing.is_empty(), "{:?}", bound.missing);
    let dir = report_fixtures().open("bound-sweep");
    let points = dir.read_points().unwrap();
    let config: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("crates/roofline/tests/fixtures/configs/llama-3.1-8b.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let llama = roofline::ModelFacts::from_hf_config(&config).unwrap();
    let h100 = roofline::gpu::find("h100-sxm").unwrap();
    assert_eq!(bound.rows.len(), points.len());
    assert_eq!(bound.tp, 1);
    for (row, p) in bound.rows.iter().zip(&points) {
        let mean = |k: &str| p.metrics[k].mean;
        let close = |got: f64, want: f64| {
            assert!(
                (got - want).abs() <= want.abs() * 1e-9,
                "{}: {got} vs {want}",
                p.id
            )
        };
        let context = mean("prompt_tokens") + mean("completion_tokens") / 2.0;
        close(row.context_tokens, context);
        let s = roofline::step::decode_step(&llama, &Default::default(), 1.0, context, 1.0);
        close(row.step_s, 1.0 / mean("decode_tok_s"));
        close(row.step_floor_s, s.bytes() / 3.35e12);
        close(row.weight_bytes_per_gpu, s.weight_bytes);
        close(row.kv_bytes_per_gpu, 131_072.0 * context);
        close(row.effective_bandwidth_gbs, s.bytes() / row.step_s / 1e9);
        close(row.decode_bw_fraction, row.step_floor_s / row.step_s);
        let work = roofline::step::prefill(&llama, &Default::default(), mean("prompt_tokens"), 0.0);
        let seconds = mean("prompt_tokens") / mean("prefill_tok_s");
        close(row.prefill_tflops.unwrap(), work.flops() / seconds / 1e12);
        close(
            row.prefill_flops_fraction.unwrap(),
            work.flops() / seconds / h100.peak_flops(roofline::Precision::Bf16),
        );
    }
    // Batch 1 over three contexts in two groups: one line, and its findings said in words.
    assert_eq!(bound.sweeps.len(), 1);
    assert_eq!(bound.sweeps[0].points, 6);
    assert!(!bound.sweeps[0].findings.is_empty());
    assert!(bound.chart.is_some());
}

/// Under speculative decoding each point is graded with its own measured accept length: its
/// step is that many tokens over its per-request decode speed, its bytes those of a step that
/// verifies them.
#[test]
fn speculative_points_are_graded_with_their_own_measured_accept_length() {
    let dir = report_fixtures().open("bound-sweep");
    let mut meta = dir.read_meta().unwrap();
    meta.servers[0]
        .args
        .insert("speculative-algorithm".into(), serde_json::json!("EAGLE"));
    let mut points = dir.read_points().unwrap();
    let accepts = [2.5, 2.0, 1.5, 2.5, 2.0, 1.5];
    for (p, a) in points.iter_mut().zip(accepts) {
        let mut stat = p.metrics["decode_tok_s"].clone();
        (stat.mean, stat.p50, stat.min, stat.max) = (a, a, a, a);
        p.metrics.insert("accept_length".into(), stat);
    }
    let model = build_model(&meta, &points, &dir.read_requests().unwrap());
    let bound = model.bound.as_ref().expect("a section");
    assert!(bound.missing.is_empty(), "{:?}", bound.missing);
    assert!(bound.tokens_per_step_per_point);
    let llama = roofline::ModelFacts::from_hf_config(
        &serde_json::from_str(
            &fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("crates/roofline/tests/fixtures/configs/llama-3.1-8b.json"),
            )
            .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(bound.rows.len(), points.len());
    for ((row, p), a) in bound.rows.iter().zip(&points).zip(accepts) {
        let mean = |k: &str| p.metrics[k].mean;
        assert_eq!(row.tokens_per_step, a);
        let want = a / mean("decode_tok_s");
        assert!((row.step_s - want).abs() <= want * 1e-9, "{}", p.id);
        let context = mean("prompt_tokens") + mean("completion_tokens") / 2.0;
        let s = roofline::step::decode_step(&llama, &Default::default(), 1.0, context, a);
        let floor = s.bytes() / 3.35e12;
        assert!((row.step_floor_s - floor).abs() <= floor * 1e-9, "{}", p.id);
    }
    assert!(
        (bound.tokens_per_step - 2.0).abs() < 1e-12,
        "{}",
        bound.tokens_per_step
    );
    assert!(
        bound
            .assumptions
            .iter()
            .any(|a| a.contains("each point's measured accept length")),
        "{:?}",
        bound.assumptions
    );
    assert!(
        !bound
            .assumptions
            .iter()
            .any(|a| a.contains("tokens per step are not known")),
        "{:?}",
        bound.assumptions
    );
    let md = report::render(&model, None).unwrap();
    assert!(
        md.contains("each point's measured accept length in decode tokens per step"),
        "{md}"
    );

    // Speculation on but no verify steps counted: one token per step, and said.
    let plain = dir.read_points().unwrap();
    let model = build_model(&meta, &plain, &dir.read_requests().unwrap());
    let bound = model.bound.as_ref().expect("a section");
    assert!(!bound.tokens_per_step_per_point);
    assert_eq!(bound.tokens_per_step, 1.0);
    assert!(
        bound
            .assumptions
            .iter()
            .any(|a| a.contains("speculative decoding is on but its tokens per step are not known")),
        "{:?}",
        bound.assumptions
    );
}

/// Expert parallelism on a MoE model is said: the floor is a GPU's mean share of the routed
/// experts, and the busiest GPU reads more. A dense model under the same flag says nothing.
#[test]
fn expert_parallelism_on_a_moe_model_is_an_assumption_said() {
    let dir = report_fixtures().open("bound-sweep");
    let points = dir.read_points().unwrap();
    let requests = dir.read_requests().unwrap();
    let assumptions = |meta: &servebench_model::results::meta::RunMeta| {
        build_model(meta, &points, &requests)
            .bound
            .expect("a section")
            .assumptions
    };
    let mut meta = dir.read_meta().unwrap();
    for s in &mut meta.servers {
        s.args.insert("ep-size".into(), serde_json::json!(8));
    }
    assert!(
        !assumptions(&meta)
            .iter()
            .any(|a| a.contains("expert parallelism")),
        "a dense model has no experts to spread"
    );
    let kimi: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/data/kimi-k2.6-config.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for s in &mut meta.servers {
        s.args.insert("tp-size".into(), serde_json::json!(8));
        if let Some(kept) = s.model_config.as_mut() {
            kept.config = Some(kimi.clone());
        }
    }
    let said = assumptions(&meta);
    assert!(
        said.iter().any(|a| a.starts_with("expert parallelism (ep 8): each GPU is taken to read its mean share of the routed experts")),
        "{said:?}"
    );
}

#[test]
fn user_template_from_the_spec_renders_in_run_and_report() {
    let ws = Workspace::new();
    ws.write(
        "my.md.j2",
        "# {{ title }}\n{% for t in tables %}{% for r in t.rows %}\
         {{ r.ctx_req }}: {{ r.stats.ttft_s|stat(\"mean\")|fmt_s }} s\n{% endfor %}{% endfor %}",
    );
    let spec = ws.write(
        "mine.yaml",
        &sim_spec(
            "mine",
            "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 4",
            "sweep:\n  ctx: [256, 512]\nreport: { template: my.md.j2 }",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let markdown = fs::read_to_string(dir.join("report.md")).unwrap();
    let lines: Vec<&str> = markdown.lines().collect();
    assert_eq!(lines.len(), 3, "{markdown}");
    assert_eq!(lines[0], "# mine");
    assert!(
        lines[1].starts_with("256: ") && lines[1].ends_with(" s"),
        "{markdown}"
    );

    // `servebench report` finds the same template through the recorded spec path...
    let again = servebench()
        .args(["report", "--stdout"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", show(&again));
    assert_eq!(String::from_utf8_lossy(&again.stdout), markdown);

    // ...takes another file or a built-in name with --template...
    let other = ws.write("other.md.j2", "{{ setup.template }} {{ totals.points }}\n");
    let with_file = servebench()
        .args(["report", "--stdout", "--template"])
        .arg(&other)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(with_file.status.success(), "{}", show(&with_file));
    assert_eq!(String::from_utf8_lossy(&with_file.stdout), "my.md.j2 2\n");
    let builtin = servebench()
        .args(["report", "--stdout", "--template", "long-context"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(builtin.status.success(), "{}", show(&builtin));
    assert!(
        String::from_utf8_lossy(&builtin.stdout).contains("| ctx_req | prompt_tok | TTFT_s |"),
        "{}",
        show(&builtin)
    );

    // ...and a template error names the file and the line.
    let broken = ws.write("broken.md.j2", "# {{ title }}\n\n{{ tabels }}\n");
    let failed = servebench()
        .args(["report", "--stdout", "--template"])
        .arg(&broken)
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(failed.status.code(), Some(1), "{}", show(&failed));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains(&format!("template {}, line 3", broken.display())),
        "{stderr}"
    );
}

#[test]
fn the_guides_example_template_renders() {
    let readme =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide/report.md"))
            .expect("docs/guide/report.md");
    let template = readme
        .split_once("```jinja\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(t, _)| t)
        .expect("the guide's report page has a ```jinja example");
    let out = report::render(&report_fixtures().model_of("clean-sweep"), Some(template)).unwrap();
    assert!(out.starts_with("# prefill-vs-chunk (complete)\n"), "{out}");
    assert!(
        out.contains("## server.args.chunked-prefill-size=4096"),
        "{out}"
    );
    assert!(out.contains("\n| 1024 | 0.0725 | 131 |\n"), "{out}");
}

#[test]
fn spec_naming_a_builtin_template_runs_and_a_missing_file_is_refused() {
    let ws = Workspace::new();
    let spec = ws.write(
        "lc.yaml",
        &sim_spec(
            "lc",
            "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 4",
            "sweep:\n  ctx: [256, 512]\nreport: { template: long-context }",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let markdown = fs::read_to_string(run_dir(&out).join("report.md")).unwrap();
    assert!(
        markdown.contains("| ctx_req | prompt_tok | TTFT_s | prefill_tok/s |"),
        "{markdown}"
    );

    let missing = ws.write(
        "missing.yaml",
        &sim_spec(
            "missing",
            "  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 4",
            "report: { template: long_context }",
        ),
    );
    let out = ws.run(&missing);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("long_context does not exist") && stderr.contains("default, long-context"),
        "{stderr}"
    );
}

#[test]
fn checked_in_report_model_schema_is_current() {
    crate::common::assert_schema_current(
        report::schema::REPORT_MODEL_SCHEMA_PATH,
        &report::schema::to_json(&report::schema::report_model_schema()),
        "report-model",
    );
}

#[test]
fn a_skipped_truncated_record_is_a_warning_on_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    for file in ["meta.json", "points.jsonl", "requests.jsonl"] {
        fs::copy(
            report_fixtures().path("clean-sweep").join(file),
            tmp.path().join(file),
        )
        .unwrap();
    }
    // A crash mid-write leaves half a point record and no newline.
    let points = tmp.path().join("points.jsonl");
    let mut text = fs::read_to_string(&points).unwrap();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let cut_line = text.lines().count() + 1;
    text.push_str(r#"{"id":"p009","group":"g"#);
    fs::write(&points, text).unwrap();

    let report = |args: &[&str], rust_log: Option<&str>| {
        let mut cmd = servebench();
        cmd.arg("report").arg(tmp.path()).arg("--stdout").args(args);
        match rust_log {
            Some(v) => cmd.env("RUST_LOG", v),
            None => cmd.env_remove("RUST_LOG"),
        };
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", show(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let warning = format!(
        "warning: {}:{cut_line}: skipped a truncated record\n",
        points.display()
    );
    let stderr = report(&[], None);
    assert!(stderr.contains(&warning), "{stderr}");
    // -v is accepted after the command and keeps the warning.
    assert!(report(&["-v"], None).contains(&warning));
    // RUST_LOG replaces the default filter: errors only.
    let stderr = report(&[], Some("error"));
    assert!(!stderr.contains("truncated"), "{stderr}");
}

#[test]
fn sim_run_writes_linked_charts_and_report_redraws_them() {
    let ws = Workspace::new();
    let spec = ws.write(
        "charts.yaml",
        &sim_spec(
            "charts",
            "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 8",
            "cache: { policy: cold, verify: true }\nsweep:\n  ctx: [512, 1024, 2048]\n  concurrency: [1, 2]\nrequests: 2",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let markdown = fs::read_to_string(dir.join("report.md")).unwrap();
    // A closed loop has its system throughput, at concurrency 1 and 2 alike: in
    // points.jsonl, in the results table (not `—`) and in points.csv.
    let points = read_jsonl(&dir.join("points.jsonl"));
    for p in &points {
        let rps = p["metrics"]["throughput_req_s"]["mean"].as_f64();
        assert!(rps.is_some_and(|r| r > 0.0), "{p}");
        assert!(
            p["metrics"]["output_tok_s"]["mean"]
                .as_f64()
                .is_some_and(|r| r > 0.0)
        );
        let row = markdown
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "| {} | {} |",
                    p["values"]["ctx"], p["values"]["concurrency"]
                ))
            })
            .unwrap_or_else(|| panic!("a row for {p}\n{markdown}"));
        assert!(
            row.contains(&format!(
                "| {} |",
                servebench_model::text::rate(rps.unwrap())
            )),
            "{row}"
        );
    }
    let csv = fs::read_to_string(dir.join("points.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(header.contains("throughput_req_s_mean"), "{header}");
    assert!(
        header.contains("ttft_ms_mean") && !header.contains("ttft_s_mean"),
        "{header}"
    );
    let mut drawn = Vec::new();
    for file in ["ttft.svg", "prefill.svg", "decode.svg"] {
        assert!(
            markdown.contains(&format!("](charts/{file})")),
            "{file} linked:\n{markdown}"
        );
        let svg = fs::read_to_string(dir.join("charts").join(file)).unwrap();
        assert!(svg.starts_with("<svg"), "{file}");
        if file == "prefill.svg" {
            // Prompt / TTFT is prefill speed only one request at a time: at concurrency 2
            // it is queueing, so those points have none to draw.
            assert!(!svg.contains("\nconcurrency=2\n"), "{file}");
            assert_eq!(markers(&svg).len(), 3, "{file}: the concurrency-1 points");
            drawn.push(svg);
            continue;
        }
        for legend in ["concurrency=1", "concurrency=2"] {
            assert!(svg.contains(&format!("\n{legend}\n")), "{file}: {legend}");
        }
        // One marker per point with the figure: every point has a TTFT; a point without a
        // decode speed says why (a starved client read all its requests' tokens at once:
        // `decode-held-back`).
        let metric = if file == "ttft.svg" {
            "ttft_s"
        } else {
            "decode_tok_s"
        };
        let (with, without): (Vec<&serde_json::Value>, Vec<&serde_json::Value>) = points
            .iter()
            .partition(|p| p["metrics"].get(metric).is_some());
        for p in &without {
            assert!(
                file == "decode.svg" && p["flags"].to_string().contains("decode-held-back"),
                "{file}: {p}"
            );
        }
        assert_eq!(
            markers(&svg).len(),
            with.len(),
            "{file}: one marker per point"
        );
        drawn.push(svg);
    }

    // `servebench report` redraws the same bytes from the stored files.
    let _turn = crate::common::exclusive();
    let again = servebench().arg("report").arg(&dir).output().unwrap();
    assert!(again.status.success(), "{}", show(&again));
    for (file, before) in ["ttft.svg", "prefill.svg", "decode.svg"].iter().zip(&drawn) {
        assert_eq!(
            &fs::read_to_string(dir.join("charts").join(file)).unwrap(),
            before
        );
    }
    assert_eq!(fs::read_to_string(dir.join("report.md")).unwrap(), markdown);
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

/// The bound-sweep fixture's model and its section, after `edit` changed its meta and points.
fn bound_after(
    edit: impl FnOnce(&mut servebench_model::results::meta::RunMeta, &mut Vec<PointRecord>),
) -> (report::ReportModel, Vec<PointRecord>) {
    let dir = report_fixtures().open("bound-sweep");
    let mut meta = dir.read_meta().unwrap();
    let mut points = dir.read_points().unwrap();
    edit(&mut meta, &mut points);
    let model = build_model(&meta, &points, &dir.read_requests().unwrap());
    (model, points)
}

/// Points that differ in a setting that changes the step (here speculative decoding, on in
/// one server group) are two lines, each graded at its own verify width, not one line over
/// every context.
#[test]
fn bound_lines_are_split_by_every_setting_that_changes_the_step() {
    let (model, points) = bound_after(|meta, points| {
        let args = &mut meta.servers[1].args;
        args.insert("speculative-algorithm".into(), serde_json::json!("EAGLE"));
        args.insert("speculative-num-draft-tokens".into(), serde_json::json!(4));
        for p in points.iter_mut().filter(|p| p.group == "g2") {
            let mut stat = p.metrics["decode_tok_s"].clone();
            (stat.mean, stat.p50, stat.min, stat.max) = (2.0, 2.0, 2.0, 2.0);
            p.metrics.insert("accept_length".into(), stat);
        }
    });
    let bound = model.bound.as_ref().expect("a section");
    assert!(bound.missing.is_empty(), "{:?}", bound.missing);
    let lines: Vec<&str> = bound.sweeps.iter().map(|s| s.line.as_str()).collect();
    assert_eq!(
        lines,
        ["batch 1", "batch 1, speculative (verify width 4)"],
        "{:?}",
        bound.sweeps
    );
    assert_eq!(bound.sweeps[0].points, 3);
    assert_eq!(bound.sweeps[1].points, 3);
    // A verify step's weights are counted for the 4 tokens it verifies, not the 2 it accepts.
    let llama = roofline::ModelFacts::from_hf_config(
        &serde_json::from_str(
            &fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("crates/roofline/tests/fixtures/configs/llama-3.1-8b.json"),
            )
            .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    for (row, p) in bound.rows.iter().zip(&points) {
        let context = p.metrics["prompt_tokens"].mean + p.metrics["completion_tokens"].mean / 2.0;
        let verify = if p.group == "g2" { 4.0 } else { 1.0 };
        assert_eq!(row.verify_tokens_per_step, verify, "{}", p.id);
        let s = roofline::step::decode_step(&llama, &Default::default(), 1.0, context, verify);
        assert!(
            (row.weight_bytes_per_gpu - s.weight_bytes).abs() <= s.weight_bytes * 1e-12,
            "{}",
            p.id
        );
    }
    let md = report::render(&model, None).unwrap();
    assert!(
        md.contains("At batch 1, speculative (verify width 4), over 3 contexts, step = "),
        "{md}"
    );
}

/// A point at concurrency above 1 has other requests' prefills between its decode steps: it
/// is not graded as pure decode steps, and the section says why.
#[test]
fn bound_leaves_points_with_interleaved_prefills_ungraded_and_says_why() {
    let (model, _) = bound_after(|_, points| {
        for p in points
            .iter_mut()
            .filter(|p| p.id == "p002" || p.id == "p005")
        {
            p.values.insert("concurrency".into(), serde_json::json!(4));
        }
    });
    let bound = model.bound.as_ref().expect("a section");
    assert_eq!(bound.rows.len(), 4);
    assert!(bound.rows.iter().all(|r| r.batch == 1.0));
    assert_eq!(bound.not_graded.len(), 1, "{:?}", bound.not_graded);
    assert!(
        bound.not_graded[0].starts_with("p002, p005 (concurrency 4): other requests' prefills run between a request's decode steps"),
        "{:?}",
        bound.not_graded
    );
    let md = report::render(&model, None).unwrap();
    assert!(
        md.contains("Not graded:\n\n- p002, p005 (concurrency 4)"),
        "{md}"
    );
}

/// A prefill faster than the GPU's peak FLOP/s is impossible, and said; a compressed-tensors
/// FP8 checkpoint's prefill is graded against the FP8 peak.
#[test]
fn bound_flags_a_prefill_above_peak_and_grades_fp8_checkpoints_at_the_fp8_peak() {
    let (model, _) = bound_after(|_, points| {
        let stat = points[0].metrics.get_mut("prefill_tok_s").unwrap();
        stat.mean *= 100.0;
    });
    let bound = model.bound.as_ref().expect("a section");
    assert_eq!(bound.findings.len(), 1, "{:?}", bound.findings);
    assert!(
        bound.findings[0].starts_with("p001: its prefill ran at")
            && bound.findings[0].contains("of the GPU's peak bf16 FLOP/s, which no GPU can"),
        "{:?}",
        bound.findings
    );
    assert!(bound.rows[0].prefill_flops_fraction.unwrap() > 1.0);

    let (model, _) = bound_after(|meta, _| {
        let config = meta.servers[0]
            .model_config
            .as_mut()
            .and_then(|c| c.config.as_mut())
            .unwrap();
        config["quantization_config"] = serde_json::json!({
            "quant_method": "compressed-tensors",
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true},
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}
            }},
            "ignore": ["lm_head"]
        });
    });
    let bound = model.bound.as_ref().expect("a section");
    assert!(bound.missing.is_empty(), "{:?}", bound.missing);
    assert_eq!(bound.prefill_precision, "fp8");
    let gpu = bound.gpu.as_ref().unwrap();
    assert_eq!(gpu.prefill_peak_tflops, 1979.0);
}

/// The report says the client went through an SSH port forward only where it did: a local
/// run records its host's facts (`server_host`) and went through none.
#[test]
fn the_provenance_names_a_port_forward_only_where_the_client_went_through_one() {
    let ws = Workspace::new();
    let spec = ws.write(
        "local.yaml",
        &sim_spec(
            "local",
            "  prompt: { kind: repeat, tokens: 32 }\n  output_tokens: 2\n",
            "",
        ),
    );
    let (dir, _) = ws.run_ok(&spec);
    let meta = read_json_file(&dir.join("meta.json"));
    assert!(
        meta.get("server_host").is_some(),
        "a local run records its host: {meta}"
    );
    assert!(
        meta["servers"][0].get("through_forward").is_none(),
        "{meta}"
    );
    let report = fs::read_to_string(dir.join("report.md")).unwrap();
    let client = report
        .lines()
        .find(|l| l.starts_with("- **Client:**"))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(!client.contains("port forward"), "{client}");
    // The same run, recorded as measured through a forward, says so.
    let run = RunDir::open(&dir).unwrap();
    let mut meta = run.read_meta().unwrap();
    meta.servers[0].through_forward = true;
    let model = build_model(
        &meta,
        &run.read_points().unwrap(),
        &run.read_requests().unwrap(),
    );
    let md = report::render(&model, None).unwrap();
    assert!(md.contains(", through an SSH port forward"), "{md}");
}

fn read_json_file(path: &Path) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

/// A re-rendered run's `requests.csv` holds the numbers its `requests.jsonl` holds, to the
/// bit (accept lengths of every verify-step count to 64, Unix send times). The binary built
/// for tests always parses floats exactly (a dev-dependency turns serde_json's
/// `float_roundtrip` on); `architecture::the_shipped_binary_parses_floats_exactly` checks
/// the one users build.
#[test]
fn a_re_rendered_run_reads_its_numbers_to_the_bit() {
    let ws = Workspace::new();
    let dir = ws.path().join("run");
    fs::create_dir_all(&dir).unwrap();
    let src = report_fixtures().path("clean-sweep");
    for f in ["meta.json", "points.jsonl"] {
        fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    // Every verify-step count to 64 for three totals, on copies of the fixture's first
    // request (63 / 22 among them).
    let template = read_jsonl(&src.join("requests.jsonl")).remove(0);
    let mut want = Vec::new();
    let mut lines = String::new();
    for steps in 1..=64u64 {
        for tokens in [63u64, 127, 255] {
            let accept = tokens as f64 / steps as f64;
            let sent = 1_796_505_898.0 + accept / 7.0;
            let mut r = template.clone();
            r["index"] = want.len().into();
            r["verify_steps"] = steps.into();
            r["accept_length"] = accept.into();
            r["sent_at"] = sent.into();
            want.push((accept, sent));
            lines.push_str(&format!("{r}\n"));
        }
    }
    fs::write(dir.join("requests.jsonl"), lines).unwrap();
    let out = servebench().arg("report").arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let mut csv = csv::Reader::from_path(dir.join("requests.csv")).unwrap();
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), want.len());
    for (row, (accept, sent)) in rows.iter().zip(&want) {
        let n = row.len();
        assert_eq!(row[n - 1].parse::<f64>().unwrap(), *accept, "{row:?}");
        assert_eq!(row[6].parse::<f64>().unwrap(), *sent, "{row:?}");
    }
}

/// A point whose block requests found a hit served in the other order names it under the
/// cache table, and counts it apart from contamination (`above`, marked ⚠).
#[test]
fn reordered_block_hits_are_named_under_the_cache_table() {
    let dir = report_fixtures().open("clean-sweep");
    let mut points = dir.read_points().unwrap();
    points[0].trace_cache = Some(servebench_model::results::jobs::TraceCache {
        requests: 10,
        prompt_tokens: 20_000,
        requested_prompt_tokens: 20_000,
        theoretical_cached_tokens: 12_000,
        cached_tokens: 12_900,
        below: 0,
        above: 0,
        reordered: 2,
        unreported: 0,
        tolerance_tokens: 64,
        length_error_min: Some(-12),
        length_error_max: Some(260),
        length_error_share_max: Some(0.013),
    });
    let model = build_model(
        &dir.read_meta().unwrap(),
        &points,
        &dir.read_requests().unwrap(),
    );
    let row = &model.trace.as_ref().expect("a trace section").cache[0];
    assert_eq!((row.above, row.reordered), (0, 2));
    let out = report::render(&model, None).unwrap();
    let id = &points[0].id;
    assert!(
        out.contains(&format!(
            "- {id}: 2 of its requests found more than their theoretical hit"
        )),
        "{out}"
    );
    assert!(!out.contains(" 0 ⚠"), "{out}");
    // The prompts' drift in the server's tokens, and the tolerance that includes it.
    assert!(
        out.contains(&format!(
            "- {id}: prompts came out -12 to +260 tokens from their trace lengths in the server's tokens (at most 1.30%); each hit was judged within 64 tokens plus its request's error."
        )),
        "{out}"
    );
    // None reordered: no line.
    points[0].trace_cache.as_mut().unwrap().reordered = 0;
    let model = build_model(
        &dir.read_meta().unwrap(),
        &points,
        &dir.read_requests().unwrap(),
    );
    assert!(
        !report::render(&model, None)
            .unwrap()
            .contains("of its requests found more")
    );
}
