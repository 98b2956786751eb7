//! Reproducing published numbers: the two-point method, expectations and `servebench check`.

use crate::common::*;

fn flag_kinds(point: &serde_json::Value) -> Vec<String> {
    point["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
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
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
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
