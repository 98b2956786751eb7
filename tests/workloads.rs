//! Workloads end to end on the simulator: length distributions, datasets, shared prefixes
//! with verified per-group cache hits, weighted mixes, and multi-turn sessions.

use std::path::Path;

use crate::common::*;

/// The repository's `experiments/data` folder (the sample datasets ship there).
fn data(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("experiments/data")
        .join(file)
        .display()
        .to_string()
}

/// Measured requests in the order they were drawn (round, then index).
fn measured(dir: &Path) -> Vec<serde_json::Value> {
    let mut rs: Vec<serde_json::Value> = read_jsonl(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["role"] == "measure")
        .collect();
    rs.sort_by_key(|r| (r["round"].as_u64(), r["index"].as_u64()));
    rs
}

fn kinds(point: &serde_json::Value) -> Vec<String> {
    validity_flags(point)
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn drawn_lengths_follow_their_distributions_in_the_servers_tokens() {
    let ws = Workspace::new();
    let spec = ws.write(
        "dist.yaml",
        &sim_spec(
            "dist",
            "  prompt: { kind: random, tokens: { dist: uniform, min: 200, max: 600 } }\n  \
             output_tokens: { dist: normal, mean: 20, std: 4, min: 8, max: 32 }\n  seed: 5",
            "requests: 60\nconcurrency: 8",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    assert!(kinds(&points[0]).is_empty(), "{}", points[0]);
    let rs = measured(&dir);
    assert_eq!(rs.len(), 60);
    let mut prompts = Vec::new();
    let mut outputs = Vec::new();
    for r in &rs {
        let asked = u(&r["requested_prompt_tokens"]);
        let got = u(&r["prompt_tokens"]);
        assert!((200 * 99 / 100..=600 * 101 / 100).contains(&asked), "{r}");
        // Calibrated per 2% bucket: the server's count is within the calibrator's tolerance
        // (plus the nonce's few tokens).
        assert!(
            (got as f64 - asked as f64).abs() <= 0.02 * asked as f64 + 12.0,
            "{got} tokens for a target of {asked}"
        );
        prompts.push(asked as f64);
        let out = u(&r["completion_tokens"]);
        assert_eq!(out, u(&r["max_tokens"]));
        assert!((8..=32).contains(&out), "{r}");
        outputs.push(out as f64);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    // Uniform 200-600: mean 400, standard deviation 115, so the mean of 60 is within 4
    // standard errors (59) of 400; normal(20, 4): within 4 standard errors (2.1).
    assert!((mean(&prompts) - 400.0).abs() < 60.0, "{}", mean(&prompts));
    assert!((mean(&outputs) - 20.0).abs() < 2.1, "{}", mean(&outputs));
    let distinct: std::collections::BTreeSet<u64> = prompts.iter().map(|p| *p as u64).collect();
    assert!(distinct.len() > 10, "lengths vary: {distinct:?}");

    // The same seed sends the same lengths.
    let (dir2, _) = ws.run_ok(&spec);
    let again: Vec<u64> = measured(&dir2)
        .iter()
        .map(|r| u(&r["requested_prompt_tokens"]) * 1000 + u(&r["max_tokens"]))
        .collect();
    let first: Vec<u64> = rs
        .iter()
        .map(|r| u(&r["requested_prompt_tokens"]) * 1000 + u(&r["max_tokens"]))
        .collect();
    assert_eq!(first, again);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("uniform 200-600"), "{report}");
    assert!(report.contains("normal mean 20 std 4 in 8-32"), "{report}");
}

#[test]
fn lognormal_and_empirical_lengths_are_drawn_within_bounds() {
    let ws = Workspace::new();
    let spec = ws.write(
        "ln.yaml",
        &sim_spec(
            "ln",
            &format!(
                "  prompt: {{ kind: random, tokens: {{ dist: lognormal, mean: 300, sigma: 0.4, min: 100, max: 900 }} }}\n  \
                 output_tokens: {{ dist: empirical, file: {} }}",
                data("output-lengths.txt")
            ),
            "requests: 40\nconcurrency: 8",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    let allowed = [16u64, 24, 32, 48, 64, 96, 128];
    for r in measured(&dir) {
        assert!(allowed.contains(&u(&r["completion_tokens"])), "{r}");
        let asked = u(&r["requested_prompt_tokens"]);
        assert!((99..=909).contains(&asked), "{r}");
    }
}

#[test]
fn a_sharegpt_dataset_sends_its_prompts_and_its_replies_lengths() {
    let ws = Workspace::new();
    let spec = ws.write(
        "sg.yaml",
        &sim_spec(
            "sg",
            &format!(
                "  prompt: {{ kind: dataset, format: sharegpt, file: {} }}\n  output_tokens: 1",
                data("sharegpt-sample.json")
            ),
            "requests: 12\nconcurrency: 4",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    let rs = measured(&dir);
    assert_eq!(rs.len(), 12);
    // Each reply's length in the simulator's tokens is its request's output length.
    let sample: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("sharegpt-sample.json")).unwrap())
            .unwrap();
    let replies: Vec<&str> = sample
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["conversations"].as_array().unwrap().len() >= 2)
        .map(|c| c["conversations"][1]["value"].as_str().unwrap())
        .collect();
    let lengths: Vec<u64> = rs.iter().map(|r| u(&r["max_tokens"])).collect();
    let distinct: std::collections::BTreeSet<u64> = lengths.iter().copied().collect();
    assert!(distinct.len() > 5, "{lengths:?}");
    for (r, reply) in rs.iter().zip(&replies) {
        assert_eq!(u(&r["completion_tokens"]), u(&r["max_tokens"]), "{r}");
        // The simulator's tokenizer: words with their leading space, punctuation apart.
        let words = reply.split_whitespace().count() as u64;
        let got = u(&r["max_tokens"]);
        assert!(got >= words && got <= words * 3, "{got} for {reply:?}");
    }
}

#[test]
fn a_jsonl_dataset_sends_texts_and_lengths_as_written() {
    let ws = Workspace::new();
    let spec = ws.write(
        "jl.yaml",
        &sim_spec(
            "jl",
            &format!(
                "  prompt: {{ kind: dataset, format: jsonl, file: {} }}\n  output_tokens: 1",
                data("requests-sample.jsonl")
            ),
            "requests: 4",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    let rs = measured(&dir);
    let outs: Vec<u64> = rs.iter().map(|r| u(&r["completion_tokens"])).collect();
    assert_eq!(outs, vec![24, 12, 40, 6]);
    // Lines with input_tokens get generated text calibrated to that length.
    for (r, target) in [(&rs[1], 300u64), (&rs[3], 900)] {
        // Asked for in its 2% bucket, within 1% of the line's length.
        let asked = u(&r["requested_prompt_tokens"]);
        assert!(asked.abs_diff(target) * 100 <= target, "{r}");
        let got = u(&r["prompt_tokens"]) as f64;
        assert!(
            (got - target as f64).abs() <= 0.02 * target as f64 + 12.0,
            "{r}"
        );
    }
    // A bad line is refused before the run, with its file, line and column.
    let bad = ws.write(
        "bad.jsonl",
        "{\"prompt\": \"ok\"}\n{\"output_tokens\": 3}\n",
    );
    let spec = ws.write(
        "bad.yaml",
        &sim_spec(
            "bad",
            &format!(
                "  prompt: {{ kind: dataset, format: jsonl, file: {} }}\n  output_tokens: 1",
                bad.display()
            ),
            "",
        ),
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.jsonl:2:1"), "{stderr}");
}

#[test]
fn a_weighted_mix_draws_its_entries_by_weight() {
    let ws = Workspace::new();
    let spec = ws.write(
        "mix.yaml",
        &sim_spec(
            "mix",
            "  prompt: { kind: random, tokens: 120 }\n  output_tokens: 4\n  mix:\n    \
             - { weight: 3, name: short }\n    \
             - { weight: 1, name: long, prompt: { kind: random, tokens: 600 }, output_tokens: 9 }",
            "requests: 80\nconcurrency: 8",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    let rs = measured(&dir);
    let long: Vec<_> = rs.iter().filter(|r| r["mix"] == "long").collect();
    let short = rs.iter().filter(|r| r["mix"] == "short").count();
    assert_eq!(long.len() + short, 80);
    // Binomial(80, 0.25): mean 20, standard deviation 3.9; 4 of them either side.
    assert!((5..=36).contains(&long.len()), "{}", long.len());
    for r in &rs {
        let (tokens, out) = if r["mix"] == "long" {
            (600, 9)
        } else {
            (120, 4)
        };
        assert_eq!(u(&r["requested_prompt_tokens"]), tokens, "{r}");
        assert_eq!(u(&r["completion_tokens"]), out, "{r}");
    }
}

/// Two shared-prefix entries in one mix: each entry's groups are its own (numbered apart), so
/// the 1024-token entry sends 1024-token prefixes and the 128-token one 128-token prefixes,
/// whichever entry drew a group number first.
#[test]
fn shared_prefix_entries_of_a_mix_keep_their_own_prefixes() {
    let ws = Workspace::new();
    let spec = ws.write(
        "mixsp.yaml",
        &sim_spec(
            "mixsp",
            "  prompt: { kind: random, tokens: 100 }\n  output_tokens: 2\n  mix:\n    \
             - { weight: 1, name: short, prompt: { kind: shared-prefix, groups: 2, prefix_tokens: 128, suffix_tokens: 32 } }\n    \
             - { weight: 1, name: long, prompt: { kind: shared-prefix, groups: 2, prefix_tokens: 1024, suffix_tokens: 32 } }",
            "requests: 16\nconcurrency: 1",
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points[0]["status"], "ok", "{}", points[0]);
    let rs = measured(&dir);
    let mut groups: std::collections::BTreeMap<String, std::collections::BTreeSet<u64>> =
        Default::default();
    for r in &rs {
        let (wanted, name) = if r["mix"] == "long" {
            (1024 + 32, "long")
        } else {
            (128 + 32, "short")
        };
        assert_eq!(u(&r["requested_prompt_tokens"]), wanted, "{r}");
        let sent = u(&r["prompt_tokens"]);
        assert!(
            sent + 40 >= wanted && sent <= wanted + 40,
            "{name}: sent {sent} tokens for {wanted}: {r}"
        );
        groups
            .entry(name.into())
            .or_default()
            .insert(u(&r["share"]["group"]));
    }
    assert_eq!(groups.len(), 2, "both entries drawn: {groups:?}");
    assert!(
        groups["long"].is_disjoint(&groups["short"]),
        "each entry's groups are its own: {groups:?}"
    );
}

/// A shared-prefix spec: 3 groups of 3 requests, one at a time so each group's later
/// requests come after its first's prefill.
fn shared_prefix_spec(name: &str, extra: &str) -> String {
    sim_spec(
        name,
        "  prompt: { kind: shared-prefix, groups: 3, prefix_tokens: 800, suffix_tokens: 60 }\n  output_tokens: 4",
        &format!("requests: 9\nconcurrency: 1\n{extra}"),
    )
}

#[test]
fn shared_prefix_groups_hit_their_prefix_and_verification_says_so_per_group() {
    let ws = Workspace::new();
    let spec = ws.write("sp.yaml", &shared_prefix_spec("sp", ""));
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    assert_eq!(p["status"], "ok", "{p}");
    assert!(kinds(p).is_empty(), "{p}");
    let rows = p["prefix_cache"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{p}");
    for (g, row) in rows.iter().enumerate() {
        assert_eq!(u(&row["group"]), g as u64);
        assert_eq!(u(&row["requests"]), 3);
        assert_eq!(u(&row["must_miss"]), 1, "the group's first request: {row}");
        assert_eq!(u(&row["must_hit"]), 2, "{row}");
        assert_eq!(u(&row["hits"]), 2, "{row}");
        let expected = row["expected_cached_tokens"].as_f64().unwrap();
        assert!((expected - 800.0).abs() <= 20.0, "{row}");
    }
    for r in measured(&dir) {
        let share = &r["share"];
        let cached = u(&r["cached_tokens"]);
        if r["index"].as_u64().unwrap() < 3 {
            assert!(cached < 10, "first of its group: {r}");
        } else {
            let shared = u(&share["shared_tokens"]);
            assert!(cached + 2 >= shared && cached <= shared + 2, "{r}");
        }
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Prefix cache"), "{report}");
}

#[test]
fn a_flushed_cache_between_shared_prefix_requests_is_flagged() {
    // The radix cache is off: no group finds its prefix, and verification must say so.
    let ws = Workspace::new();
    let spec = ws.write(
        "spf.yaml",
        &shared_prefix_spec("spf", "sweep:\n  server.args.disable-radix-cache: [true]"),
    );
    let (_, points) = ws.run_ok(&spec);
    let p = &points[0];
    let flag = validity_flags(p)
        .into_iter()
        .find(|f| f["kind"] == "prefix-cache-miss")
        .unwrap_or_else(|| panic!("no prefix-cache-miss: {p}"));
    assert!(
        flag["message"]
            .as_str()
            .unwrap()
            .starts_with("6 of 6 requests"),
        "{flag}"
    );
    for row in p["prefix_cache"].as_array().unwrap() {
        assert_eq!((u(&row["must_hit"]), u(&row["hits"])), (2, 0), "{row}");
    }
}

#[test]
fn shared_prefixes_left_over_from_an_earlier_round_are_flagged_as_contamination() {
    // Without nonces the prefixes are the same text every round; as-is does not flush, so
    // the second round's first requests find their prefix already cached.
    let ws = Workspace::new();
    let spec = ws.write(
        "spc.yaml",
        &shared_prefix_spec("spc", "repeat: 2\ncache: { policy: as-is, nonce: false }"),
    );
    let (_, points) = ws.run_ok(&spec);
    let p = &points[0];
    let flag = validity_flags(p)
        .into_iter()
        .find(|f| f["kind"] == "unexpected-cache-hit")
        .unwrap_or_else(|| panic!("no unexpected-cache-hit: {p}"));
    assert!(
        flag["message"].as_str().unwrap().starts_with("3 requests"),
        "{flag}"
    );
    assert_eq!(u(&p["ok"]), 18);
    // The three are left out of the numbers.
    assert_eq!(u(&p["metrics"]["ttft_s"]["count"]), 15, "{p}");
}

fn sessions_spec(name: &str, api: &str, think: &str, extra: &str) -> String {
    sim_spec(
        name,
        &format!(
            "  api: {api}\n  prompt: {{ kind: random, tokens: {{ dist: uniform, min: 100, max: 200 }} }}\n  output_tokens: 12"
        ),
        &format!(
            "load: {{ kind: sessions, sessions: {{ users: 3, turns: 4, think: {think}, think_dist: exponential }} }}\n{extra}"
        ),
    )
}

#[test]
fn sessions_send_growing_histories_and_each_turn_finds_the_last_one_cached() {
    for api in ["openai-chat", "sglang-generate"] {
        let ws = Workspace::new();
        // OpenAI APIs report cached tokens when the server is asked to (as SGLang).
        let spec = ws.write(
            "s.yaml",
            &sessions_spec("sess", api, "20ms", "").replace(
                "context-length: 8192",
                "context-length: 8192, enable-cache-report: true",
            ),
        );
        let (dir, points) = ws.run_ok(&spec);
        let p = &points[0];
        assert_eq!(p["status"], "ok", "{api}: {p}");
        assert!(kinds(p).is_empty(), "{api}: {p}");
        let rs = measured(&dir);
        assert_eq!(rs.len(), 12, "3 users x 4 turns");
        for user in 0..3u64 {
            let turns: Vec<_> = rs.iter().filter(|r| r["share"]["group"] == user).collect();
            assert_eq!(turns.len(), 4);
            for pair in turns.windows(2) {
                let (prev, next) = (pair[0], pair[1]);
                // The history grows by the reply and a new message of 100-200 tokens.
                let grown = u(&next["prompt_tokens"]) - u(&prev["prompt_tokens"]);
                assert!((100..260).contains(&grown), "{api}: grew by {grown}");
                assert_eq!(
                    u(&next["share"]["shared_tokens"]),
                    u(&prev["prompt_tokens"])
                );
                // All of the previous turn is a hit, but for the last token (always
                // recomputed) or, in chat, the template's assistant cue (`assistant:`, three
                // tokens), which the next prompt replaces with the reply.
                let cached = u(&next["cached_tokens"]);
                let slack = if api == "openai-chat" { 4 } else { 1 };
                assert!(
                    cached + slack >= u(&prev["prompt_tokens"]),
                    "{api}: turn found {cached} of {}",
                    u(&prev["prompt_tokens"])
                );
            }
            // SGLang's OpenAI usage leaves cached_tokens out when it is 0.
            let first = turns[0]["cached_tokens"].as_u64().unwrap_or(0);
            assert!(first < 10, "{api}: {}", turns[0]);
        }
        let rows = p["prefix_cache"].as_array().unwrap();
        assert_eq!(rows.len(), 4, "one row per turn: {p}");
        assert_eq!(u(&rows[0]["must_miss"]), 3);
        for row in &rows[1..] {
            assert_eq!(
                (u(&row["must_hit"]), u(&row["hits"])),
                (3, 3),
                "{api}: {row}"
            );
        }
    }
}

#[test]
fn a_cache_flushed_between_turns_is_caught() {
    let ws = Workspace::new();
    // Long think times; a flusher empties the cache while the users think.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let spec = ws.write(
        "sf.yaml",
        &sessions_spec("sf", "sglang-generate", "400ms", "").replace(
            "  model: test-model\n",
            &format!("  model: test-model\n  port: {port}\n"),
        ),
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A flush is refused while a request runs; the think times leave gaps.
                if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                    use std::io::{Read, Write};
                    let _ = s.write_all(
                        b"POST /flush_cache HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    let _ = s.read_to_end(&mut Vec::new());
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        })
    };
    let (_, points) = ws.run_ok(&spec);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flusher.join().unwrap();
    let p = &points[0];
    let flag = validity_flags(p)
        .into_iter()
        .find(|f| f["kind"] == "prefix-cache-miss")
        .unwrap_or_else(|| panic!("no prefix-cache-miss: {p}"));
    assert!(
        flag["message"]
            .as_str()
            .unwrap()
            .contains("their conversation's history"),
        "{flag}"
    );
}
