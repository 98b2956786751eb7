//! Reproducing published numbers: the two-point method, expectations and `servebench check`.

use crate::common::*;

fn flag_kinds(point: &serde_json::Value) -> Vec<String> {
    point["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .filter(|k| k != "client-read-late")
        .collect()
}

#[test]
fn two_point_without_a_flush_is_flagged_as_cache_reuse_never_nan() {
    let ws = Workspace::new();
    let spec = ws.write(
        "naive.yaml",
        &sim_spec(
            "naive",
            "  prompt: { kind: repeat, tokens: \"{{ ctx }}\" }\n  output_tokens: 64",
            "method: two-point\ncache: { policy: as-is }\nsweep:\n  ctx: [1024, 4096]\nexpect:\n  - { where: { ctx: 1024 }, flag: cache-reuse-suspected, source: naive script }\n  - { where: { ctx: 4096 }, metric: ttft_s, value: 1000, tolerance: 1% }\n",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points.len(), 2);
    for p in &points {
        assert!(
            flag_kinds(p).contains(&"cache-reuse-suspected".to_string()),
            "{p}"
        );
        assert!(p["metrics"].get("decode_tok_s").is_none(), "{p}");
        assert!(p["metrics"]["t_a_s"]["mean"].as_f64().unwrap() > 0.0);
        assert!(p["metrics"]["t_b_s"]["mean"].as_f64().unwrap() > 0.0);
    }
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let b: Vec<_> = requests
        .iter()
        .filter(|r| r["role"] == "two-point-b")
        .collect();
    assert_eq!(b.len(), 2);
    for r in b {
        assert_eq!(r["max_tokens"], 17);
        let cached = r["cached_tokens"].as_u64().unwrap();
        let prompt = r["prompt_tokens"].as_u64().unwrap();
        assert!(
            cached + 1 >= prompt,
            "the second request hit the cache: {r}"
        );
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("cache reuse suspected: the second request skipped prefill"));
    assert!(report.contains("**without a flush in between**"));
    assert!(
        !report.contains("NaN") && !report.contains(" inf "),
        "{report}"
    );
    assert!(report.contains("## Reproduction"), "{report}");
    assert!(report.contains("1 of 2 expectations hold"), "{report}");
    assert!(
        report.contains("✅ flagged cache-reuse-suspected, as published"),
        "{report}"
    );
    assert!(report.contains("Sources: naive script."), "{report}");

    let check = servebench().arg("check").arg(&dir).output().unwrap();
    assert_eq!(check.status.code(), Some(1), "{}", show(&check));
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        text.contains("ok   p001 (ctx=1024) flag cache-reuse-suspected"),
        "{text}"
    );
    assert!(
        text.contains("FAIL p002 (ctx=4096) ttft_s: measured"),
        "{text}"
    );
    assert!(text.contains("-> off by -"), "{text}");
    assert!(text.contains("1 of 2 expectations hold"), "{text}");
}

#[test]
fn two_point_with_a_flush_measures_decode_from_two_full_prefills() {
    let ws = Workspace::new();
    let spec = ws.write(
        "flushed.yaml",
        &sim_spec(
            "flushed",
            "  prompt: { kind: repeat, tokens: 2048 }\n  output_tokens: 64",
            "method: { kind: two-point, a: 1, b: 33 }\ncache: { policy: cold }\nrequests: 2\n",
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    assert!(flag_kinds(p).is_empty(), "{p}");
    assert_eq!(p["ok"], 4, "two pairs, four requests: {p}");
    let requests = read_jsonl(&dir.join("requests.jsonl"));
    let pairs: Vec<(&serde_json::Value, &serde_json::Value)> = (0..2)
        .map(|i| {
            let find = |role: &str| {
                requests
                    .iter()
                    .find(|r| r["role"] == role && r["index"] == i)
                    .unwrap()
            };
            (find("two-point-a"), find("two-point-b"))
        })
        .collect();
    // The point's decode speed is exactly the mean of (b - a) / (t_b - t_a) over the pairs.
    let mut speeds = Vec::new();
    for (a, b) in &pairs {
        assert_eq!(a["prompt_tokens"], b["prompt_tokens"]);
        assert_eq!(b["cached_tokens"], 0, "flushed: {b}");
        assert_eq!(a["max_tokens"], 1);
        assert_eq!(b["max_tokens"], 33);
        let (ta, tb) = (a["end_s"].as_f64().unwrap(), b["end_s"].as_f64().unwrap());
        assert!(tb > ta);
        let n = b["completion_tokens"].as_f64().unwrap() - a["completion_tokens"].as_f64().unwrap();
        assert_eq!(n, 32.0);
        speeds.push(n / (tb - ta));
    }
    let mean = speeds.iter().sum::<f64>() / 2.0;
    let got = p["metrics"]["decode_tok_s"]["mean"].as_f64().unwrap();
    assert!((got - mean).abs() < 1e-9 * mean, "{got} vs {mean}");
    // A flush before the point and one inside each pair.
    let log = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
    assert!(
        log.matches("Cache flushed successfully!").count() >= 3,
        "{log}"
    );
}

// The Kimi K2.6 replay (experiments/kimi-*.yaml): the three published steps, run as written
// except that the simulator runs faster. `sim-time-scale` shrinks every simulated duration and
// the check scales the published numbers to match, so the spec's own expect list is judged.
// What does not shrink: HTTP round trips, and the simulator's own work on a prompt (tokenizing,
// the radix cache: ~1 us per prompt token in a debug build, ~50 ms for 46k tokens). At 0.1
// that is a few percent on the long prefills and ~10% on the 1.4k-token ones, more when other
// builds share the two cores. So the tests assert the verdicts that stay clear of their
// tolerance (flags, the crash, token counts, the 11k and 46k prefills) and, for the rest, that
// `run --check` and `check` agree (same verdicts, exit 1 exactly when one fails).

/// A replay spec from `experiments/`, written to `ws` with `sim-time-scale: scale`, no warm-up
/// wait (the profile's 60 s of weight loading is not what these tests are about) and a short
/// ready timeout.
fn replay_spec(ws: &Workspace, file: &str, scale: f64) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("experiments")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\n  args:\n") && text.contains("\n  ready_timeout: 10m\n"));
    let text = text
        .replacen(
            "\n  args:\n",
            &format!("\n  args:\n    sim-time-scale: {scale}\n    skip-server-warmup: true\n"),
            1,
        )
        .replacen("\n  ready_timeout: 10m\n", "\n  ready_timeout: 30s\n", 1);
    ws.write(file, &text)
}

/// The verdict lines `run --check` and `check` print: (holds, line).
fn verdict_lines(stdout: &[u8]) -> Vec<(bool, String)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| {
            l.strip_prefix("ok   ")
                .map(|rest| (true, rest.to_string()))
                .or_else(|| {
                    l.strip_prefix("FAIL ")
                        .map(|rest| (false, rest.to_string()))
                })
        })
        .collect()
}

/// Asserts that the verdict on `what` (e.g. `(ctx=8192) ttft_s`) holds.
#[track_caller]
fn assert_holds(verdicts: &[(bool, String)], what: &str) {
    let found: Vec<_> = verdicts.iter().filter(|(_, l)| l.contains(what)).collect();
    assert_eq!(found.len(), 1, "one verdict on {what}: {verdicts:#?}");
    assert!(found[0].0, "{what} should hold: {}", found[0].1);
}

/// `servebench check RUN_DIR` gives the verdicts `run --check` printed, and exits 1 exactly
/// when one of them does not hold.
#[track_caller]
fn assert_check_agrees(run: &std::process::Output, dir: &std::path::Path) {
    let verdicts = verdict_lines(&run.stdout);
    let check = servebench().arg("check").arg(dir).output().unwrap();
    assert_eq!(verdict_lines(&check.stdout), verdicts, "{}", show(&check));
    let want = i32::from(verdicts.iter().any(|(ok, _)| !ok));
    assert_eq!(check.status.code(), Some(want), "{}", show(&check));
    assert_eq!(run.status.code(), Some(want), "{}", show(run));
}

#[test]
fn kimi_step_1_naive_two_point_is_flagged_at_every_length() {
    let ws = Workspace::new();
    let spec = replay_spec(&ws, "kimi-1-two-point-naive.yaml", 0.1);
    let out = ws.run_with(&spec, &["--check"]);
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 3);
    for p in &points {
        assert!(flag_kinds(p).contains(&CACHE_REUSE.to_string()), "{p}");
        assert!(p["metrics"].get("decode_tok_s").is_none(), "never NaN: {p}");
        assert!(p["failure"].is_null(), "{p}");
    }
    let v = verdict_lines(&out.stdout);
    assert_eq!(v.len(), 14, "{}", show(&out));
    for ctx in [1024, 8192, 32768] {
        assert_holds(&v, &format!("(ctx={ctx}) flag {CACHE_REUSE}"));
        // Token counts do not depend on the time scale: the uncalibrated generator overshoots
        // as the published one did.
        assert_holds(&v, &format!("(ctx={ctx}) prompt_tokens"));
    }
    for what in ["ttft_s", "t_a_s"] {
        assert_holds(&v, &format!("(ctx=8192) {what}"));
        assert_holds(&v, &format!("(ctx=32768) {what}"));
    }
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("(simulator time scale 0.1: published times x 0.1, rates / 0.1)"),
        "{}",
        show(&out)
    );
    assert_check_agrees(&out, &dir);
}

const CACHE_REUSE: &str = "cache-reuse-suspected";

#[test]
fn kimi_step_2_flushed_two_point_reproduces_then_runs_out_of_memory() {
    let ws = Workspace::new();
    let spec = replay_spec(&ws, "kimi-2-two-point-flush.yaml", 0.1);
    let out = ws.run_with(&spec, &["--check"]);
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 3);
    for p in &points[..2] {
        assert!(flag_kinds(p).iter().all(|k| k != CACHE_REUSE), "{p}");
        assert_eq!(p["ok"], 6, "three flushed pairs: {p}");
        assert!(p["metrics"]["decode_tok_s"]["mean"].as_f64().unwrap() > 0.0);
    }
    let crashed = &points[2];
    assert_eq!(crashed["values"]["ctx"], 32768);
    assert_eq!(crashed["failure"], "out-of-memory", "{crashed}");
    assert!(flag_kinds(crashed).contains(&"server-crashed".to_string()));
    let v = verdict_lines(&out.stdout);
    assert_eq!(v.len(), 15, "{}", show(&out));
    assert_holds(&v, "(ctx=32768) failure out-of-memory");
    for what in ["prompt_tokens", "ttft_s", "prefill_tok_s", "t_a_s", "t_b_s"] {
        assert_holds(&v, &format!("(ctx=8192) {what}"));
    }
    assert_holds(&v, "(ctx=1024) prompt_tokens");
    // The run goes on after the crash: the server is recorded as crashed, the crashed point
    // (one pair measured before the crash) is degraded; the server was lost, so the run is
    // incomplete (issue 18 item 19), with the cause; the report is rendered with the verdicts
    // (and `--check` exits by them).
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "incomplete", "{meta}");
    assert_eq!(crashed["status"], "degraded", "{crashed}");
    assert!(
        meta["status_reason"]
            .as_str()
            .unwrap()
            .contains("out-of-memory"),
        "{meta}"
    );
    let outcome = meta["servers"][0]["outcome"].as_str().unwrap();
    assert!(outcome.starts_with("crashed: out-of-memory"), "{outcome}");
    let log = std::fs::read_to_string(dir.join("server-g1.log")).unwrap();
    assert!(log.contains("CUDA out of memory"), "{log}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("✅ failed with out-of-memory, as published"),
        "{report}"
    );
    assert_check_agrees(&out, &dir);
}

#[test]
fn kimi_step_3_streaming_sweeps_to_187k_tokens_without_a_crash() {
    let ws = Workspace::new();
    let spec = replay_spec(&ws, "kimi-3-streaming.yaml", 0.01);
    let out = ws.run_with(&spec, &["--check"]);
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let ctx: Vec<u64> = points
        .iter()
        .map(|p| p["values"]["ctx"].as_u64().unwrap())
        .collect();
    assert_eq!(ctx, [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]);
    let records = read_jsonl(&dir.join("requests.jsonl"));
    for p in &points {
        assert_eq!(
            (p["ok"].as_u64(), p["errors"].as_u64()),
            (Some(1), Some(0)),
            "{p}"
        );
        assert!(p["failure"].is_null(), "{p}");
        match p["metrics"]["decode_tok_s"]["mean"].as_f64() {
            Some(decode) => assert!(decode > 0.0, "{p}"),
            // A loaded machine's client can read a short answer's chunks in one read (17
            // tokens in a few ms at this time scale, seen at 1k): no decode time to measure,
            // and no rate made up from it. Only then.
            None => {
                let r = records
                    .iter()
                    .find(|r| r["point"] == p["id"] && r["role"] == "measure")
                    .unwrap();
                let stamps: Vec<f64> = r["chunks"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|c| c["t_s"].as_f64())
                    .collect();
                assert!(
                    stamps.windows(2).any(|w| w[0] == w[1]),
                    "no decode rate, yet every chunk came in a read of its own: {r}"
                );
            }
        }
    }
    let top = points[7]["metrics"]["prompt_tokens"]["mean"]
        .as_f64()
        .unwrap();
    assert!((180_000.0..200_000.0).contains(&top), "{top}");
    let meta = read_json(&dir.join("meta.json"));
    assert_eq!(meta["status"], "complete", "{meta}");
    assert_eq!(
        meta["servers"].as_array().unwrap().len(),
        1,
        "one launch, no crash"
    );
    let v = verdict_lines(&out.stdout);
    assert_eq!(v.len(), 5, "{}", show(&out));
    // At this scale the verdicts are not robust: the simulator's own work on a 46k-token
    // prompt (tokenizing, the radix cache) takes real milliseconds that do not shrink with the
    // time scale (~50 ms in a debug build next to 0.24 s of scaled prefill, -17% on
    // prefill_tok_s), the 1k TTFT is ~5 ms and 16 decoded tokens take 1.5 to 11 ms. What is
    // robust is the shape: TTFT grows and prefill speed falls with the context (the quadratic
    // attention term), decode speed falls with it (each step reads the whole context).
    let mean = |p: &serde_json::Value, m: &str| p["metrics"][m]["mean"].as_f64().unwrap();
    for w in points.windows(2) {
        assert!(
            mean(&w[1], "ttft_s") > mean(&w[0], "ttft_s"),
            "{} {}",
            w[0],
            w[1]
        );
    }
    let first_prefill = mean(&points[1], "prefill_tok_s");
    let last_prefill = mean(&points[7], "prefill_tok_s");
    assert!(
        last_prefill < first_prefill / 2.0,
        "{first_prefill} {last_prefill}"
    );
    assert!(mean(&points[7], "decode_tok_s") < mean(&points[3], "decode_tok_s") / 4.0);
    assert_check_agrees(&out, &dir);
}
