//! End to end: `servebench run` on the built-in simulator.

use crate::common::*;

fn metric(point: &serde_json::Value, name: &str, field: &str) -> f64 {
    point["metrics"][name][field]
        .as_f64()
        .unwrap_or_else(|| panic!("no {name}.{field} in {point}"))
}

/// The point's flags that question its validity: `high-variance` only says the spread is wide
/// (it comes and goes with machine load), so it is left out.

#[test]
fn a_cold_context_sweep_measures_every_point_and_writes_the_run_directory() {
    let ws = Workspace::new();
    let spec = ws.write(
        "sweep.yaml",
        &sim_spec(
            "sweep",
            "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 16",
            "sweep:\n  ctx: [256, 2048]\nrequests: 3\nconcurrency: 2\ncache: { policy: cold, verify: true }",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    for f in [
        "spec.yaml",
        "resolved.yaml",
        "meta.json",
        "requests.jsonl",
        "points.jsonl",
        "report.md",
        "server-g1.log",
    ] {
        assert!(dir.join(f).is_file(), "missing {f}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("spec.yaml")).unwrap(),
        std::fs::read_to_string(&spec).unwrap()
    );

    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let measured: Vec<_> = requests.iter().filter(|r| r["role"] == "measure").collect();
    assert_eq!(measured.len(), 6);
    for r in &measured {
        assert!(r.get("error").is_none(), "{r}");
        assert_eq!(r["completion_tokens"], 16, "{r}");
        assert_eq!(
            r["cached_tokens"], 0,
            "cold requests must not hit the cache: {r}"
        );
        let sum: u64 = r["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["tokens"].as_u64().unwrap())
            .sum();
        assert_eq!(
            sum, 16,
            "chunk token counts add up to completion_tokens: {r}"
        );
    }

    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 2);
    for (p, target) in points.iter().zip([256.0, 2048.0]) {
        assert_eq!(p["ok"], 3);
        assert_eq!(p["errors"], 0);
        assert!(validity_flags(p).is_empty(), "{p}");
        let prompt = metric(p, "prompt_tokens", "mean");
        assert!(
            (prompt - target).abs() / target <= 0.02 + 1e-9,
            "calibrated within 2%: {prompt} vs {target}"
        );
        assert!(metric(p, "ttft_s", "mean") > 0.0);
        assert!(metric(p, "decode_tok_s", "mean") > 0.0);
    }
    // More context costs more prefill time.
    assert!(metric(&points[1], "ttft_s", "mean") > metric(&points[0], "ttft_s", "mean"));

    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "complete");
    assert_eq!(meta["servers"][0]["engine"], "sim");
    assert!(
        meta["servers"][0]["server_info"]["max_total_num_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        meta["servers"][0]["outcome"]
            .as_str()
            .unwrap()
            .contains("confirmed gone")
    );
    let log = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
    assert!(log.contains("The server is fired up and ready to roll!"));
    assert!(log.contains("Cache flushed successfully!"));
}

#[test]
fn warm_policy_reuses_the_cache_and_a_disabled_cache_is_flagged() {
    let ws = Workspace::new();
    let spec = ws.write(
        "warm.yaml",
        &sim_spec(
            "warm",
            "  prompt: { kind: random, tokens: 1024, seed: 3 }\n  output_tokens: 8",
            "cache: { policy: warm }\nrequests: 2\nsweep:\n  server.args.disable-radix-cache: [false, true]",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points.len(), 2);
    assert_eq!(points[0]["group"], "g1");
    assert_eq!(
        points[1]["group"], "g2",
        "a server dimension means a second launch"
    );
    assert!(validity_flags(&points[0]).is_empty(), "{}", points[0]);
    assert!(metric(&points[0], "cached_tokens", "mean") > 900.0);
    let flags = points[1]["flags"].as_array().unwrap();
    assert!(
        flags.iter().any(|f| f["kind"] == "warm-cache-miss"),
        "{}",
        points[1]
    );
    // Contaminated requests are not averaged in; the server's throughput (what it completed
    // over the window) is all the point keeps.
    let system = [
        "throughput_req_s",
        "input_tok_s",
        "output_tok_s",
        "total_tok_s",
    ];
    assert!(
        points[1]["metrics"]
            .as_object()
            .unwrap()
            .keys()
            .all(|k| system.contains(&k.as_str())),
        "contaminated requests are not averaged in: {}",
        points[1]
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("warm-cache-miss"),
        "the report shows the flag"
    );
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(requests.iter().filter(|r| r["role"] == "prime").count(), 2);
}

#[test]
fn every_api_streams_and_counts_tokens() {
    for api in ["sglang-generate", "openai-completions", "openai-chat"] {
        let ws = Workspace::new();
        let spec = ws.write(
            "api.yaml",
            &sim_spec(
                "api",
                &format!(
                    "  api: {api}\n  prompt: {{ kind: repeat, tokens: 512 }}\n  output_tokens: 12"
                ),
                "requests: 2",
            ),
        );
        let out = ws.run(&spec);
        assert!(out.status.success(), "{api}: {}", show(&out));
        let dir = run_dir(&out);
        let points = read_jsonl(&dir.join("points.jsonl"));
        assert_eq!(points[0]["ok"], 2, "{api}: {}", points[0]);
        assert_eq!(
            metric(&points[0], "completion_tokens", "mean"),
            12.0,
            "{api}"
        );
        let prompt = metric(&points[0], "prompt_tokens", "mean");
        assert!((prompt - 512.0).abs() <= 0.02 * 512.0, "{api}: {prompt}");
    }
}

#[test]
fn server_errors_are_recorded_with_their_message() {
    let ws = Workspace::new();
    // 12000 tokens do not fit the 8192-token context: the server answers 400.
    let spec = ws.write(
        "toolong.yaml",
        &sim_spec(
            "toolong",
            "  prompt: { kind: repeat, tokens: 12000, calibrate: false }\n  output_tokens: 4",
            "requests: 2",
        ),
    );
    let out = ws.run(&spec);
    // Every request failed: the errors are recorded as data, and the point (so the run) failed.
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("run failed: 1 of 1 point failed: p001 (2 of 2 requests failed"),
        "{stderr}"
    );
    let dir = run_dir(&out);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "failed");
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(requests.len(), 2);
    for r in &requests {
        let msg = r["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("longer than the model's context length"),
            "{r}"
        );
    }
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points[0]["errors"], 2);
    assert_eq!(points[0]["status"], "failed");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("**1 failed** (no successful request)"),
        "{report}"
    );
    assert!(
        report.contains("longer than the model's context length"),
        "{report}"
    );
}

#[test]
fn a_server_that_cannot_start_fails_the_run_but_keeps_a_report() {
    let ws = Workspace::new();
    let spec = ws.write(
        "nostart.yaml",
        "name: nostart\nserver:\n  engine: sglang\n  model: m\n  launcher: [sh, -c, 'echo \"ModuleNotFoundError: No module named sglang\"; exit 1', sh]\n  ready_timeout: 20s\nworkload:\n  prompt: { kind: repeat, tokens: 100 }\n  output_tokens: 4\n",
    );
    let out = ws.run(&spec);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "failed");
    assert!(
        meta["status_reason"]
            .as_str()
            .unwrap()
            .contains("startup-error"),
        "{meta}"
    );
    assert!(dir.join("report.md").is_file());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ModuleNotFoundError"),
        "the log tail is shown: {stderr}"
    );
}

#[test]
fn an_external_server_is_used_as_is_and_recorded() {
    let ws = Workspace::new();
    let mut sim = ExternalSim::start("ext-model", &[], &[]);
    let spec = ws.write(
        "ext.yaml",
        &format!(
            "name: ext\nserver:\n  url: {}\n  ready_timeout: 10s\nworkload:\n  prompt: {{ kind: repeat, tokens: 300 }}\n  output_tokens: 4\n",
            sim.url()
        ),
    );
    let out = ws.run(&spec);
    let alive = sim.is_running();
    drop(sim);
    assert!(out.status.success(), "{}", show(&out));
    assert!(alive, "servebench must not stop a server it did not start");
    // Nor says it starts one.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("starting the server"), "{err}");
    assert!(
        err.contains("g1: connecting to the server (external http://127.0.0.1:"),
        "{err}"
    );
    let meta = read_json(&run_dir(&out).join("meta.json"));
    assert_eq!(meta["servers"][0]["engine"], "external");
    assert_eq!(meta["servers"][0]["server_info"]["model_path"], "ext-model");
}

#[test]
fn secrets_never_reach_the_run_directory() {
    let ws = Workspace::new();
    let spec = ws.write(
        "secret.yaml",
        "name: secret\nserver:\n  engine: sim\n  model: m\n  args: { profile: fast, api-key: sk-very-secret-1 }\n  env: { HF_TOKEN: hf-very-secret-2 }\nworkload:\n  prompt: { kind: repeat, tokens: 100 }\n  output_tokens: 4\n",
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    for f in [
        "meta.json",
        "requests.jsonl",
        "points.jsonl",
        "report.md",
        "resolved.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(
            !text.contains("sk-very-secret-1") && !text.contains("hf-very-secret-2"),
            "secret in {f}"
        );
    }
}

#[test]
fn as_is_with_a_repeated_prompt_hits_the_cache_and_says_so() {
    let ws = Workspace::new();
    let spec = ws.write(
        "asis.yaml",
        &sim_spec(
            "asis",
            "  prompt: { kind: repeat, tokens: 1024 }\n  output_tokens: 4",
            "cache: { policy: as-is }\nrequests: 3",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let cached: Vec<u64> = requests
        .iter()
        .map(|r| r["cached_tokens"].as_u64().unwrap())
        .collect();
    // The first request may find calibration's cached text too, but the repeats must hit.
    assert!(cached[1] > 900 && cached[2] > 900, "{cached:?}");
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points[0]["ok"], 3, "as-is hits are reported, not excluded");
    assert!(metric(&points[0], "cached_tokens", "mean") > 600.0);
    assert!(
        points[0]["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "cache-hits"),
        "{}",
        points[0]
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("cache-hits"));
}

#[test]
fn a_deliberately_contaminated_cold_point_is_flagged_and_kept_out_of_the_numbers() {
    let ws = Workspace::new();
    // Without the nonce, the flush only helps the first request: the next two reuse its prefix.
    let spec = ws.write(
        "contaminated.yaml",
        &sim_spec(
            "contaminated",
            "  prompt: { kind: repeat, tokens: 2048 }\n  output_tokens: 4",
            "cache: { policy: cold, nonce: false, verify: true }\nrequests: 3",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    assert_eq!(
        requests[0]["cached_tokens"], 0,
        "the flush before the point worked"
    );
    assert!(requests[1]["cached_tokens"].as_u64().unwrap() > 2000);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let p = &points[0];
    let flag = p["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "cold-cache-hit")
        .expect("flagged");
    assert!(
        flag["message"].as_str().unwrap().contains("2 of 3"),
        "{flag}"
    );
    assert_eq!(
        metric(p, "ttft_s", "count"),
        1.0,
        "only the clean request is averaged in"
    );
    assert_eq!(metric(p, "cached_tokens", "max"), 0.0);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("cold-cache-hit"),
        "the report shows the flag"
    );
}

#[test]
fn the_quickstart_runs_end_to_end() {
    let ws = Workspace::new();
    let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.yaml");
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 6);
    for p in &points {
        assert_eq!(p["ok"], 4, "{p}");
        assert!(validity_flags(p).is_empty(), "{p}");
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("# quickstart"));
    assert!(
        report.contains("| 16384 |"),
        "the table has the largest context"
    );
    // Re-rendering from the stored files gives the same report.
    let again = servebench()
        .arg("report")
        .arg(&dir)
        .arg("--stdout")
        .output()
        .unwrap();
    assert!(again.status.success());
    assert_eq!(String::from_utf8_lossy(&again.stdout), report);

    // Each point records its wall-clock span; `plan --from` estimates a rerun from them.
    let loaded = servebench_model::spec::load(&spec).unwrap();
    let plan = servebench::plan::Plan::new(&loaded.points);
    let walls: Vec<f64> = points
        .iter()
        .map(|p| {
            let w = &p["wall"];
            let span = w["ended_at"].as_f64().unwrap() - w["started_at"].as_f64().unwrap();
            assert!(span > 0.0, "{p}");
            span
        })
        .collect();
    // The report's point details say how long each point took.
    for (p, w) in points.iter().zip(&walls) {
        let took = format!(
            "<b>{} (ctx={}, concurrency={})</b> · server g1 · 4 ok / 0 failed · took {}",
            p["id"].as_str().unwrap(),
            p["values"]["ctx"],
            p["values"]["concurrency"],
            servebench_model::text::duration(*w)
        );
        assert!(report.contains(&took), "{took}");
    }
    // Before the last point the runner said how long was left: the last point's own time.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("[5/6]"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let left: f64 = line
        .rsplit_once(" · ~")
        .and_then(|(_, t)| t.strip_suffix(" s left"))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        (0.5..=2.0).contains(&(left / walls[5])),
        "said {left} s left; the last point took {} s",
        walls[5]
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.starts_with("[6/6]") && l.contains("left"))
    );
    let meta = read_json(&dir.join("meta.json"));
    let ready = meta["servers"][0]["ready_after_s"].as_f64().unwrap();
    let measured = servebench::plan::estimate::from_run(&plan, &dir).unwrap();
    assert!(measured.unknown_points().is_empty());
    for (p, w) in points.iter().zip(&walls) {
        assert_eq!(measured.point(p["id"].as_str().unwrap()), Some(*w));
    }
    let actual = ready + walls.iter().sum::<f64>();
    assert!((measured.total_s() - actual).abs() < 1e-9);
    // The sim profile's timing model predicts the same run (model time only, so a little under).
    let spec_dir = spec.parent().unwrap();
    let model = servebench::plan::estimate::from_model(&plan, None, spec_dir).unwrap();
    let ratio = model.total_s() / actual;
    assert!(
        (0.7..=1.15).contains(&ratio),
        "model {} s vs measured {actual} s",
        model.total_s()
    );
    let text = servebench()
        .args([
            "plan",
            spec.to_str().unwrap(),
            "--from",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("estimate: ~") && text.contains("from the point times measured in"),
        "{text}"
    );
}

#[test]
fn an_out_of_memory_crash_is_classified_recorded_and_the_run_goes_on() {
    let ws = Workspace::new();
    // The fast profile, plus SGLang's out-of-memory crash for a prefill batch over 6000 tokens.
    let fast = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/sim/profiles/fast.yaml"),
    )
    .unwrap();
    let profile = ws.write("oom.yaml", &format!("{fast}\noom_prefill_tokens: 6000\n"));
    let spec = ws.write(
        "crash.yaml",
        &format!(
            "name: crash\nserver:\n  engine: sim\n  model: m\n  args: {{ profile: {}, chunked-prefill-size: 16384, context-length: 16384 }}\n  ready_timeout: 30s\nworkload:\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 4\nsweep:\n  ctx: [1024, 8192, 2048]\nrequests: 2\n",
            profile.display()
        ),
    );
    let out = ws.run(&spec);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a crash makes the run incomplete: {}",
        show(&out)
    );
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 3, "every point is recorded");
    assert_eq!(
        points[0]["ok"], 2,
        "what was measured before the crash is kept"
    );
    let crashed = &points[1];
    assert_eq!(crashed["incomplete"], true);
    let flag = crashed["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "server-crashed")
        .expect("crash flagged");
    assert!(
        flag["message"].as_str().unwrap().contains("out-of-memory"),
        "{flag}"
    );
    assert!(
        flag["message"]
            .as_str()
            .unwrap()
            .contains("CUDA out of memory"),
        "the log excerpt is kept: {flag}"
    );
    assert_eq!(
        points[2]["ok"], 2,
        "the server was relaunched for the next point: {}",
        points[2]
    );
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "incomplete");
    assert!(
        meta["status_reason"]
            .as_str()
            .unwrap()
            .contains("out-of-memory"),
        "{meta}"
    );
    assert_eq!(
        meta["servers"].as_array().unwrap().len(),
        2,
        "two launches: {meta}"
    );
    assert!(
        meta["servers"][0]["outcome"]
            .as_str()
            .unwrap()
            .contains("crashed: out-of-memory"),
        "{meta}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("server-crashed"),
        "the report shows the crash next to the table"
    );
}

/// A ready line is a hint, never the proof (issue 18 item 3): a "server" that prints SGLang's
/// ready line but never listens is not ready, and the launch ends as not ready in time (it
/// used to count as ready, and every request then failed to connect).
#[test]
fn sglangs_ready_line_without_an_answering_server_is_not_ready() {
    let ws = Workspace::new();
    let spec = ws.write(
        "readyline.yaml",
        "name: readyline\nserver:\n  engine: sglang\n  launcher: [sh, -c, 'echo \"The server is fired up and ready to roll!\"; sleep 30', sh]\n  ready_timeout: 2s\nworkload:\n  prompt: { kind: file, path: prompts.txt }\n  output_tokens: 4\n",
    );
    ws.write("prompts.txt", "hello\n");
    let started = std::time::Instant::now();
    let out = ws.run(&spec);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{}",
        show(&out)
    );
    assert!(!out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not ready after"), "{stderr}");
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    assert!(meta["servers"][0]["ready_after_s"].is_null(), "{meta}");
}

#[test]
fn a_launched_engine_is_estimated_from_its_last_run() {
    let ws = Workspace::new();
    let workload = "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 8";
    let sim = ws.write(
        "sim.yaml",
        &sim_spec("est", workload, "sweep:\n  ctx: [256, 512]\nrequests: 2\n"),
    );
    let out = ws.run(&sim);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    // The run says its own estimate first: the fast profile's model.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("estimate: ~") && stderr.contains("sim profile `fast`"),
        "{stderr}"
    );

    // The same experiment on SGLang has no timing model: plan uses the run above.
    let real = ws.write(
        "real.yaml",
        &std::fs::read_to_string(&sim)
            .unwrap()
            .replace("engine: sim", "engine: sglang"),
    );
    let plan = |out_dir: &std::path::Path| {
        let o = servebench()
            .args([
                "plan",
                real.to_str().unwrap(),
                "--out",
                out_dir.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let text = plan(&ws.path().join("runs"));
    assert!(
        text.contains(&format!(
            "from the point times measured in {}",
            dir.display()
        )),
        "{text}"
    );
    let points = read_jsonl(&dir.join("points.jsonl"));
    let first = &points[0]["wall"];
    let span = first["ended_at"].as_f64().unwrap() - first["started_at"].as_f64().unwrap();
    let shown = format!("~{}", servebench_model::text::duration(span));
    assert!(text.contains(&shown), "p001 took {span} s: {text}");
    // No earlier run: no estimate, and what would give one.
    let text = plan(&ws.path().join("elsewhere"));
    assert!(
        text.contains("estimate: none") && text.contains("--profile NAME"),
        "{text}"
    );
    // A source named on the command line that cannot answer is an error.
    for bad in [["--from", "/no/such/run"], ["--profile", "no-such-profile"]] {
        let o = servebench()
            .args(["plan", real.to_str().unwrap()])
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(bad[1]), "{err}");
    }
}

/// Issue 18 item 2: `plan` of every experiment the simulator runs, counted from its load
/// model and within 25% of its real run time. Affordable: the quickstart is run in full by
/// `the_quickstart_runs_end_to_end` (its estimate against its measured run); the others are
/// checked by the estimate's arithmetic here, without running them: an open-loop point is
/// never estimated shorter than its own schedule (its last arrival), its requests are its
/// schedule's (not one per point), and the long load experiments' totals are within 25% of
/// their wall times measured on the simulator (`servebench run experiments/NAME.yaml`:
/// capacity-search 112 s, load-rate-sweep 3m 30s, the figure the issue gives).
#[test]
fn plan_counts_every_simulator_experiment_from_its_load_model() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let measured_s = [("capacity-search", 112.0), ("load-rate-sweep", 210.0)];
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let spec = servebench_model::spec::load(&path).unwrap();
        let plan = servebench::plan::Plan::new(&spec.points);
        // Real engines have no timing model: nothing to compare on the simulator.
        let Ok(est) = servebench::plan::estimate::from_model(&plan, None, &root) else {
            continue;
        };
        checked += 1;
        let count = plan.request_count(&root);
        let (mut sent, mut any_load) = (0u64, false);
        for p in plan.groups.iter().flat_map(|g| &g.points) {
            let e = &p.experiment;
            if e.open_loop().is_none() || e.search.is_some() {
                sent += servebench::plan::point_requests(p, &root).sent;
                continue;
            }
            any_load = true;
            let schedule = servebench::load::Schedule::of(e, &root).unwrap();
            let last = schedule.iter().last().unwrap().at_s;
            let seconds = est.point(&p.id).unwrap();
            assert!(
                seconds >= last,
                "{}: {} estimated {seconds} s, its schedule lasts {last} s",
                spec.name,
                p.id
            );
            assert!(schedule.len() > 1, "{}", p.id);
            sent += schedule.len() as u64;
        }
        assert_eq!(count.sent, sent, "{}", spec.name);
        if any_load {
            assert!(count.sent > plan.point_count() as u64, "{}", spec.name);
        }
        if let Some((_, real)) = measured_s.iter().find(|(n, _)| *n == spec.name) {
            let ratio = est.total_s() / real;
            assert!(
                (0.75..=1.25).contains(&ratio),
                "{}: estimated {} s, ran {real} s",
                spec.name,
                est.total_s()
            );
        }
    }
    assert!(checked >= 10, "{checked} experiments with a timing model");
}

/// `server.workers`: each worker's own `/metrics` is scraped around every round, so the point
/// says what each served. Here the "router" is worker A itself (no router needed to test the
/// mechanism): A finished every request, B none, and the report says the spread is unknown
/// rather than inventing one.
#[test]
fn the_workers_behind_a_router_are_counted_by_their_own_metrics() {
    let ws = Workspace::new();
    let sims: Vec<ExternalSim> = (0..2)
        .map(|_| ExternalSim::start("m", &["--enable-metrics"], &[]))
        .collect();
    let ports: Vec<u16> = sims.iter().map(|s| s.port).collect();
    let spec = ws.write(
        "workers.yaml",
        &format!(
            "name: workers\nserver:\n  url: http://127.0.0.1:{a}\n  workers: [http://127.0.0.1:{a}, http://127.0.0.1:{b}]\n  ready_timeout: 10s\nworkload:\n  prompt: {{ kind: repeat, tokens: 64, calibrate: false }}\n  output_tokens: 4\nrequests: 6\nrepeat: 2\n",
            a = ports[0],
            b = ports[1]
        ),
    );
    let out = ws.run(&spec);
    drop(sims);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let workers = p["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{p}");
    // Two rounds of six: twelve on A (its counters count each round's requests), none on B.
    assert_eq!(workers[0]["view"]["requests"], 12.0, "{}", workers[0]);
    assert_eq!(
        workers[0]["view"]["generation_tokens"], 48.0,
        "{}",
        workers[0]
    );
    assert_eq!(workers[1]["view"]["requests"], 0.0, "{}", workers[1]);
    let scrapes = read_jsonl(&dir.join("metrics.jsonl"));
    assert!(
        scrapes
            .iter()
            .any(|s| s["worker"] == format!("http://127.0.0.1:{}", ports[1])),
        "worker scrapes are tagged with the worker"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let section = &report[report
        .find("## Workers behind the router")
        .expect("section")..];
    assert!(section.contains("| 12 | 100.0% |"), "{section}");
    assert!(section.contains("the spread is unknown"), "{section}");
}

/// `server.workers`: a worker that answered its `/metrics` and then died mid-point is a loss
/// the point carries (`worker-lost`, degraded), not a note under the worker table: the run
/// does not exit 0. The "router" is worker A itself, as above; B is killed mid-point.
#[test]
fn a_worker_lost_behind_a_router_given_by_url_degrades_the_point() {
    let ws = Workspace::new();
    let mut sims: Vec<ExternalSim> = (0..2)
        .map(|_| ExternalSim::start("m", &["--enable-metrics", "--sim-time-scale", "20"], &[]))
        .collect();
    let ports: Vec<u16> = sims.iter().map(|s| s.port).collect();
    let spec = ws.write(
        "lost.yaml",
        &format!(
            "name: lost\nserver:\n  url: http://127.0.0.1:{a}\n  workers: [http://127.0.0.1:{a}, http://127.0.0.1:{b}]\n  ready_timeout: 10s\nworkload:\n  prompt: {{ kind: repeat, tokens: 64, calibrate: false }}\n  output_tokens: 32\nrequests: 40\n",
            a = ports[0],
            b = ports[1]
        ),
    );
    let runs = ws.path().join("runs");
    let out = std::thread::scope(|s| {
        let run = s.spawn(|| {
            servebench()
                .arg("run")
                .arg(&spec)
                .arg("--out")
                .arg(&runs)
                .output()
                .unwrap()
        });
        poll_until(
            std::time::Duration::from_secs(60),
            "requests recorded",
            || {
                let dir = std::fs::read_dir(runs.join("lost"))
                    .ok()?
                    .next()?
                    .ok()?
                    .path();
                let n = std::fs::read_to_string(dir.join("requests.jsonl"))
                    .ok()?
                    .lines()
                    .count();
                (n >= 3).then_some(())
            },
        );
        drop(sims.pop());
        run.join().unwrap()
    });
    drop(sims);
    assert_eq!(out.status.code(), Some(3), "degraded: {}", show(&out));
    let dir = run_dir(&out);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    assert_eq!(p["status"], "degraded", "{p}");
    let lost = p["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "worker-lost")
        .unwrap_or_else(|| panic!("no worker-lost flag: {p}"));
    assert!(
        lost["message"]
            .as_str()
            .unwrap()
            .contains(&format!("127.0.0.1:{}", ports[1])),
        "{lost}"
    );
}

/// A deployment whose router cannot start is named as the router, with what to do, and
/// its workers are stopped (the run fails; nothing is left).
#[test]
fn a_deployment_whose_router_is_not_installed_says_so_and_stops_its_workers() {
    let ws = Workspace::new();
    let marker = format!("no-router-{}", std::process::id());
    let spec = ws.write(
        "d.yaml",
        &sim_spec(
            "no-router",
            "  prompt: { kind: repeat, tokens: 16, calibrate: false }\n  output_tokens: 2",
            "requests: 2",
        )
        .replace(
            "  ready_timeout: 30s\n",
            &format!(
                "  ready_timeout: 30s\n  env: {{ MARKER: {marker} }}\n  deployment:\n    workers: 2\n    router:\n      launcher: [sh, -c, \"echo \\\"No module named 'sglang_router'\\\" >&2; exit 1\"]\n"
            ),
        ),
    );
    let out = ws.run(&spec);
    assert!(!out.status.success(), "{}", show(&out));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("router, one of 3 processes on local, log server-g1.log: the router is not installed for that python: `pip install sglang-router`"),
        "{text}"
    );
    let dir = run_dir(&out);
    // Its workers were stopped with it: no process holds the marker in its environment.
    let left = crate::real_engine::live_with_marker(&marker);
    assert!(left.is_empty(), "workers left: {left:?}");
    for w in ["server-g1.worker0.log", "server-g1.worker1.log"] {
        assert!(dir.join(w).is_file(), "{w} kept");
    }
}
