//! The report's "Against the hardware" section on real runs of the simulator: the founding case
//! (`experiments/kimi-bound.yaml`) must be diagnosed as attention not reading the cache at
//! memory speed, a healthy kernel on the same model and GPU must not be, and a run whose model
//! config cannot be read says so and how to give it. Every printed figure is checked against
//! the roofline arithmetic on the run's own means.

use std::path::{Path, PathBuf};

use roofline::step::{self, Layout};

use crate::common::*;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The founding experiment as shipped, with its config path made absolute (the spec is
/// written elsewhere) and the simulator `scale` times as slow as the model.
fn founding_spec(scale: &str) -> String {
    let text = std::fs::read_to_string(repo("experiments/kimi-bound.yaml")).unwrap();
    assert!(
        text.contains("sim-time-scale: 0.1\n"),
        "the shipped scale moved"
    );
    text.replace(
        "model_facts: data/kimi-k2.6-config.json",
        &format!(
            "model_facts: {}",
            repo("experiments/data/kimi-k2.6-config.json").display()
        ),
    )
    .replace(
        "sim-time-scale: 0.1\n",
        &format!("sim-time-scale: {scale}\n"),
    )
}

/// The report's section, from its heading to the next.
#[track_caller]
fn section(report: &str) -> String {
    let start = report
        .find("## Against the hardware")
        .unwrap_or_else(|| panic!("no section:\n{report}"));
    let rest = &report[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 4);
    rest[..end].to_string()
}

/// The number after `marker` in `line` (digits, `.` and `,`).
#[track_caller]
fn number_after(line: &str, marker: &str) -> f64 {
    let rest = line
        .split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("no `{marker}` in {line}"));
    rest.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .filter(|c| *c != ',')
        .collect::<String>()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn k2() -> roofline::ModelFacts {
    let text = std::fs::read_to_string(repo("experiments/data/kimi-k2.6-config.json")).unwrap();
    roofline::ModelFacts::from_hf_config(&serde_json::from_str(&text).unwrap()).unwrap()
}

#[test]
fn the_shipped_config_is_the_one_the_roofline_golden_tests_check() {
    assert_eq!(
        std::fs::read(repo("experiments/data/kimi-k2.6-config.json")).unwrap(),
        std::fs::read(repo(
            "crates/roofline/tests/fixtures/configs/kimi-k2-thinking.json"
        ))
        .unwrap()
    );
}

#[test]
fn the_founding_case_is_diagnosed_in_the_report() {
    let ws = Workspace::new();
    let spec = ws.write("kimi-bound.yaml", &founding_spec("0.05"));
    // --check: the expectation on a graded figure (decode_bw_fraction) holds.
    let out = ws.run_with(&spec, &["--check"]);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    let kept = &meta["servers"][0]["model_config"];
    assert!(
        kept["origin"]
            .as_str()
            .unwrap()
            .ends_with("kimi-k2.6-config.json (server.model_facts)"),
        "{kept}"
    );
    let shipped: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("experiments/data/kimi-k2.6-config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(kept["config"], shipped);

    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let text = section(&report);
    let finding = text
        .lines()
        .find(|l| l.contains("its context-dependent part runs at"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        finding.contains("x below bandwidth: attention is not memory-bound here"),
        "{finding}"
    );
    // 70,272 bytes per token of context over the profile's 17.8 us: 3.95 GB/s, 454x below
    // the card's 1,792 GB/s (within 10%: the simulator's steps are measured).
    let gb_s = number_after(finding, "runs at");
    assert!((gb_s - 3.95).abs() < 0.4, "{gb_s} GB/s: {finding}");
    let below = number_after(finding, "about");
    assert!((below - 454.0).abs() < 45.0, "{below}x: {finding}");
    assert!(
        text.contains("- assumed: the simulator ran at sim-time-scale 0.05: measured steps are divided by 0.05"),
        "{text}"
    );
    assert!(!text.contains("speculative decoding is on"), "{text}");
    assert!(
        text.contains("- assumed: tokens per step are each point's measured accept length"),
        "{text}"
    );
    assert!(dir.join("charts/bound-step.svg").is_file());
    assert!(
        text.contains(
            "![Decode step time against context, beside its floor](charts/bound-step.svg)"
        )
    );

    // `bound` on the run alone grades with what it kept: the same config, the spec's GPU.
    let out = servebench()
        .args(["bound", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("NVIDIA RTX PRO 6000 Blackwell"),
        "{printed}"
    );
    assert!(
        printed.contains(finding.trim_start_matches("- ")),
        "{printed}\nvs the report's: {finding}"
    );

    // Each row's figures are the roofline's on the point's own means.
    let model = k2();
    let layout = Layout {
        tp: 8,
        ..Layout::default()
    };
    let rtx = roofline::gpu::find("rtx-pro-6000").unwrap();
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 2);
    for p in &points {
        let mean = |k: &str| p["metrics"][k]["mean"].as_f64().unwrap();
        let context = mean("prompt_tokens") + mean("completion_tokens") / 2.0;
        // DDTree's verify steps, counted by the server: about the profile's 3 tokens each
        // (1 + Binomial(3, 2/3) a step: sd 0.82, about 32 steps over the point's two requests,
        // so sd 0.15 for the mean; each request's last step, cut at 48 tokens, pulls it down).
        let tokens = mean("accept_length");
        assert!((tokens - 3.0).abs() < 0.5, "{tokens} tokens per step");
        // The verify step puts the profile's 4 draft tokens through the weights, whatever it
        // accepts (the sim's /server_info says speculative_num_draft_tokens: 4).
        let s = step::decode_step(&model, &layout, 1.0, context, 4.0);
        let floor_ms = s.bytes() / rtx.bandwidth() * 1e3;
        let step_ms = tokens / mean("decode_tok_s") / 0.05 * 1e3;
        let id = p["id"].as_str().unwrap();
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| {id} (")))
            .unwrap_or_else(|| panic!("no row for {id}:\n{text}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let printed_step: f64 = cells[4].parse().unwrap();
        let printed_floor: f64 = cells[5].parse().unwrap();
        assert!(
            (printed_step - step_ms).abs() <= step_ms * 0.006,
            "{row}: step {step_ms}"
        );
        assert!(
            (printed_floor - floor_ms).abs() <= floor_ms * 0.006,
            "{row}: floor {floor_ms}"
        );
        let pct: f64 = cells[8].trim_end_matches('%').parse().unwrap();
        let want = floor_ms / step_ms * 100.0;
        assert!((pct - want).abs() <= want * 0.006, "{row}: {want}%");
        // The profile's step is 0.2 ms + 17.8 us x context (within 10%, measured).
        let model_ms = 0.2 + 17.8e-3 * context;
        assert!(
            (step_ms - model_ms).abs() < model_ms * 0.1,
            "{row}: {model_ms} ms"
        );
        // Prefill: the roofline's FLOPs of the prompt over its time, of the bf16 peak.
        let flops = step::prefill(&model, &layout, mean("prompt_tokens"), 0.0).flops();
        let tflops = flops / (mean("prompt_tokens") / mean("prefill_tok_s") / 0.05) / 1e12;
        let printed_tflops: f64 = cells[9].parse().unwrap();
        assert!(
            (printed_tflops - tflops).abs() <= tflops * 0.006,
            "{row}: {tflops} TFLOP/s"
        );
        // `servebench bound` prints the same point with its tokens per step and prefill.
        let line = printed
            .lines()
            .find(|l| l.starts_with(&format!("| {id} |")))
            .unwrap_or_else(|| panic!("no row for {id}:\n{printed}"));
        let cli: Vec<&str> = line.split('|').map(str::trim).collect();
        assert_eq!(cli[4], format!("{tokens:.2}"), "{line}");
        let cli_step: f64 = cli[5].parse().unwrap();
        assert!((cli_step - step_ms).abs() <= step_ms * 0.001, "{line}");
        let cli_tflops: f64 = cli[10].parse().unwrap();
        assert!(
            (cli_tflops - tflops).abs() <= 0.05 + tflops * 0.001,
            "{line}"
        );
    }
}

#[test]
fn a_healthy_kernel_on_the_same_model_and_gpu_is_not_diagnosed() {
    let ws = Workspace::new();
    let healthy = repo("experiments/data/profiles/kimi-k2.6-healthy-attention.yaml");
    let spec = founding_spec("1.0")
        .replace(
            "profile: kimi-k2.6-8x-rtxpro6000",
            &format!("profile: {}", healthy.display()),
        )
        .replace(
            "ctx: [1424, 11405]",
            "ctx: [1024, 8192, 16384, 32768, 65536]",
        )
        .replace("name: kimi-bound", "name: kimi-bound-healthy");
    let spec = spec.split("\nexpect:\n").next().unwrap().to_string();
    let spec = ws.write("healthy.yaml", &spec);
    let (dir, _) = ws.run_ok(&spec);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let text = section(&report);
    assert!(!text.contains("not memory-bound"), "{text}");
    let finding = text
        .lines()
        .find(|l| l.contains("its context-dependent part runs at"))
        .unwrap_or_else(|| panic!("{text}"));
    // The profile reads the cache at 80% of 1,792 GB/s = 1,434 GB/s: a verdict, where the
    // slope's interval allows one, is "memory-bound"; either way the interval covers it (a
    // loaded machine's timings can leave it wider than one verdict, and then none is given).
    if finding.contains("no verdict is given") {
        let low = number_after(finding, "95% interval");
        let high = finding
            .split(" to ")
            .nth(1)
            .map(|s| number_after(&format!("x {s}"), "x"));
        assert!(
            low <= 1433.6 && high.is_none_or(|h| h >= 1433.6),
            "{finding}"
        );
    } else {
        assert!(
            finding.contains("% of peak): attention is memory-bound, as it should be"),
            "{finding}"
        );
    }
    let gb_s = number_after(finding, "runs at");
    assert!((gb_s - 1433.6).abs() < 360.0, "{gb_s} GB/s: {finding}");
}

#[test]
fn a_run_whose_model_config_cannot_be_read_says_so_and_how_to_give_it() {
    let ws = Workspace::new();
    let spec = ws.write(
        "no-config.yaml",
        &sim_spec(
            "no-config",
            "  prompt: { kind: repeat, tokens: 256 }\n  output_tokens: 8\n",
            "",
        ),
    );
    let (dir, _) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let kept = &meta["servers"][0]["model_config"];
    assert!(kept["config"].is_null(), "{kept}");
    assert!(
        kept["missing"]
            .as_str()
            .unwrap()
            .starts_with("no such file: "),
        "{kept}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let text = section(&report);
    assert!(
        text.contains("The points are not graded against the hardware's bound"),
        "{text}"
    );
    assert!(text.contains("/config.json): no such file"), "{text}");
    assert!(text.contains("give `server.model_facts:`"), "{text}");
    assert!(text.contains("give `server.gpu:`"), "{text}");
    // `bound` without --model-config says what the run could not read, and the flag to use.
    let out = servebench()
        .args(["bound", dir.to_str().unwrap(), "--gpu", "h100-sxm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "the run could not read its model config (local:test-model/config.json: no such file"
        ),
        "{err}"
    );
    assert!(err.contains("give --model-config FILE"), "{err}");
}

#[test]
fn validate_names_a_missing_config_and_an_unknown_gpu_at_their_lines() {
    let ws = Workspace::new();
    ws.write("bad.json", "{\"hidden_size\": 8}");
    let spec = ws.write(
        "bad.yaml",
        "name: bad\nserver:\n  engine: sim\n  model: m\n  args: { profile: fast }\n  model_facts: nowhere/config.json\n  gpu: tesla-t4\nworkload:\n  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 8\n",
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.yaml:6:"), "{err}");
    assert!(err.contains("nowhere/config.json"), "{err}");
    assert!(err.contains("relative to the spec's folder"), "{err}");
    assert!(err.contains("bad.yaml:7:"), "{err}");
    assert!(
        err.contains("`tesla-t4` is not in the GPU catalogue"),
        "{err}"
    );
    assert!(err.contains("rtx-pro-6000"), "{err}");
    // A file that is JSON but not a model's config is refused for what it lacks.
    let spec = ws.write(
        "bad2.yaml",
        "name: bad2\nserver:\n  engine: sim\n  model: m\n  args: { profile: fast }\n  model_facts: bad.json\nworkload:\n  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 8\n",
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad2.yaml:6:"), "{err}");
    assert!(err.contains("not a config the roofline can read"), "{err}");
}

#[test]
fn the_config_is_read_from_the_model_directory_and_measured_speculative_steps_are_used() {
    let ws = Workspace::new();
    let model_dir = ws.path().join("Kimi-K2.6");
    std::fs::create_dir(&model_dir).unwrap();
    std::fs::copy(
        repo("experiments/data/kimi-k2.6-config.json"),
        model_dir.join("config.json"),
    )
    .unwrap();
    let text = founding_spec("0.05");
    let spec: String = text
        .lines()
        .filter(|l| !l.contains("model_facts:") && !l.contains("speculative-num-draft-tokens"))
        .map(|l| {
            if l.starts_with("  model: ") {
                format!("  model: {}\n", model_dir.display())
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let spec = spec.split("\nexpect:\n").next().unwrap().to_string();
    let spec = ws.write("from-host.yaml", &spec);
    let (dir, _) = ws.run_ok(&spec);
    let meta = read_json(&dir.join("meta.json"));
    let kept = &meta["servers"][0]["model_config"];
    assert_eq!(
        kept["origin"],
        format!("local:{}/config.json", model_dir.display())
    );
    assert_eq!(kept["config"]["num_hidden_layers"], 61);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let text = section(&report);
    // The profile's DDTree is on (3 tokens a step on average): the server counts its verify
    // steps, and each point is graded with its own accept length, listed under the table.
    assert!(
        text.contains("each point's measured accept length in decode tokens per step"),
        "{text}"
    );
    assert!(text.contains("Tokens per step: p001 ("), "{text}");
    assert!(!text.contains("tokens per step are not known"), "{text}");
    assert!(text.contains("| p001 ("), "{text}");
}

/// The first runs a user makes are graded: the quickstart (an 8B model on an H100, by its
/// profile) and the founding case as a user runs it (`kimi-3-streaming.yaml`) both show each
/// point's fraction of peak, from their profiles' facts, without `model_facts:` or `gpu:`.
#[test]
fn the_shipped_experiments_are_graded_from_their_profiles_facts() {
    let ws = Workspace::new();
    let quickstart = std::fs::read_to_string(repo("experiments/quickstart.yaml"))
        .unwrap()
        .replace("ctx: [1024, 4096, 16384]", "ctx: [1024, 4096]")
        .replace("concurrency: [1, 4]", "concurrency: [1]")
        .replace("requests: 4", "requests: 2");
    let kimi = std::fs::read_to_string(repo("experiments/kimi-3-streaming.yaml"))
        .unwrap()
        .replace(
            "ctx: [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]",
            "ctx: [1024, 2048]",
        )
        .replace(
            "    chunked-prefill-size: 4096\n  env:",
            "    chunked-prefill-size: 4096\n    sim-time-scale: 0.05\n  env:",
        );
    let kimi = kimi.split("\nexpect:\n").next().unwrap().to_string();
    for (name, text, profile, gpu) in [
        (
            "quickstart.yaml",
            quickstart,
            "h100-llama8b",
            "NVIDIA H100 SXM",
        ),
        (
            "kimi-3-streaming.yaml",
            kimi,
            "kimi-k2.6-8x-rtxpro6000",
            "NVIDIA RTX PRO 6000 Blackwell",
        ),
    ] {
        assert!(!text.contains("model_facts:") && !text.contains("\n  gpu:"));
        let spec = ws.write(name, &text);
        let (dir, _) = ws.run_ok(&spec);
        let meta = read_json(&dir.join("meta.json"));
        let kept = &meta["servers"][0]["model_config"];
        assert_eq!(
            kept["origin"],
            format!("the simulator profile `{profile}` (its facts:)"),
            "{kept}"
        );
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        let text = section(&report);
        assert!(!text.contains("not graded against the hardware"), "{text}");
        assert!(text.contains(&format!("over {gpu}")), "{text}");
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| p00")).collect();
        assert_eq!(rows.len(), 2, "{text}");
        for row in rows {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let pct: f64 = cells[8].trim_end_matches('%').parse().unwrap();
            assert!(pct > 0.0 && pct <= 100.0, "{row}");
        }
    }
}
