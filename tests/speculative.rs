//! Speculative decoding end to end on the simulator: accept lengths recorded per request match
//! the profile's model, a spec on/off pair reports its speed-up and names the crossover, and
//! near-zero acceptance raises `spec-low-acceptance`.

use crate::common::{Workspace, read_jsonl};

/// The on/off study on `fast-spec` at 1k context: concurrency 1 and 32.
const ON_OFF: &str = "name: spec-on-off
server:
  engine: sim
  model: test-model
  args: { profile: fast-spec, speculative-num-steps: 3, speculative-eagle-topk: 1, speculative-num-draft-tokens: 4 }
  ready_timeout: 30s
workload:
  api: sglang-generate
  prompt: { kind: repeat, tokens: 1024 }
  output_tokens: 64
  ignore_eos: true
cache: { policy: cold, verify: true }
requests: 32
sweep:
  server.args.speculative-algorithm: [false, EAGLE]
  concurrency: [1, 32]
";

fn metric(p: &serde_json::Value, name: &str) -> Option<f64> {
    p["metrics"][name]["mean"].as_f64()
}

#[test]
fn spec_on_off_records_accept_lengths_and_names_the_crossover() {
    let ws = Workspace::new();
    let spec = ws.write("spec.yaml", ON_OFF);
    let (dir, points) = ws.run_ok(&spec);
    let on: Vec<&serde_json::Value> = points
        .iter()
        .filter(|p| p["values"]["server.args.speculative-algorithm"] == "EAGLE")
        .collect();
    let off: Vec<&serde_json::Value> = points
        .iter()
        .filter(|p| p["values"]["server.args.speculative-algorithm"] == false)
        .collect();
    assert_eq!((on.len(), off.len()), (2, 2));
    // The profile's model: 3.0 - context / 4096 tokens per step; a 1028-token prompt decoding
    // 64 tokens averages about 1060 tokens of context: 2.74. The last step of each request is
    // cut at max_new_tokens, so the measured mean is a little lower: within 5%.
    for p in &on {
        let a = metric(p, "accept_length").expect("accept length measured");
        assert!((a - 2.74).abs() / 2.74 < 0.05, "accept length {a}");
        assert!(metric(p, "verify_step_s").is_some());
    }
    for p in &off {
        assert_eq!(
            metric(p, "accept_length"),
            None,
            "plain decoding has no verify steps"
        );
    }
    // Every request of an on point carries its steps from the server.
    let records = read_jsonl(&dir.join("requests.jsonl"));
    let on_ids: Vec<&str> = on.iter().map(|p| p["id"].as_str().unwrap()).collect();
    for r in records
        .iter()
        .filter(|r| on_ids.contains(&r["point"].as_str().unwrap()))
    {
        assert_eq!(r["verify_steps_source"], "server", "{r}");
        let steps = r["verify_steps"].as_u64().unwrap();
        let accept = r["accept_length"].as_f64().unwrap();
        assert!((accept - 63.0 / steps as f64).abs() < 1e-9, "{r}");
    }
    // requests.csv ends with the same two figures, empty for plain decoding.
    let mut csv = csv::Reader::from_path(dir.join("requests.csv")).unwrap();
    let header: Vec<String> = csv.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        header[header.len() - 3..],
        ["error", "verify_steps", "accept_length"]
    );
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), records.len());
    for (row, r) in rows.iter().zip(&records) {
        let n = row.len();
        match r["verify_steps"].as_u64() {
            Some(steps) => {
                assert_eq!(row[n - 2], steps.to_string());
                let a: f64 = row[n - 1].parse().unwrap();
                assert_eq!(a, r["accept_length"].as_f64().unwrap());
            }
            None => assert_eq!((&row[n - 2], &row[n - 1]), ("", "")),
        }
    }
    // Speed-up = decode on / off: over 1 at concurrency 1, under 1 at 32 (the profile's verify
    // cost, 0.136 ms per request, outgrows what 2.7 tokens per step buy past about 13).
    let decode = |set: &[&serde_json::Value], c: u64| {
        let p = set
            .iter()
            .find(|p| p["values"]["concurrency"] == c)
            .unwrap();
        metric(p, "decode_tok_s").unwrap()
    };
    let low = decode(&on, 1) / decode(&off, 1);
    let high = decode(&on, 32) / decode(&off, 32);
    assert!(low > 1.5, "speed-up at concurrency 1: {low}");
    assert!(high < 1.0, "speed-up at concurrency 32: {high}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Speculative decoding"), "{report}");
    assert!(report.contains("### Speculation on against off"));
    assert!(
        report.contains(&format!(
            "Speculation pays up to concurrency 1 ({low:.2}x) and stops paying by concurrency 32 ({high:.2}x): the crossover lies between concurrency 1 and 32."
        )),
        "{report}"
    );
}

#[test]
fn openai_streams_on_sglang_carry_the_servers_verify_steps() {
    // servebench asks SGLang (here its simulator) for `return_spec_tokens_details` on the
    // OpenAI APIs and reads `sglext.spec_tokens_details.spec_verify_ct`: the server's count,
    // not one step per chunk.
    for api in ["openai-completions", "openai-chat"] {
        let ws = Workspace::new();
        let spec = ws.write(
            "spec.yaml",
            &format!(
                "name: spec-openai
server:
  engine: sim
  model: test-model
  args: {{ profile: fast-spec, speculative-algorithm: EAGLE }}
  ready_timeout: 30s
workload:
  api: {api}
  prompt: {{ kind: repeat, tokens: 256 }}
  output_tokens: 48
  ignore_eos: true
requests: 4
"
            ),
        );
        let (dir, points) = ws.run_ok(&spec);
        assert!(metric(&points[0], "accept_length").is_some(), "{api}");
        let records = read_jsonl(&dir.join("requests.jsonl"));
        assert_eq!(records.len(), 4);
        for r in &records {
            assert_eq!(r["verify_steps_source"], "server", "{api}: {r}");
            let steps = r["verify_steps"].as_u64().unwrap();
            assert!((8..48).contains(&steps), "{api}: {r}");
        }
    }
}

#[test]
fn near_zero_acceptance_raises_spec_low_acceptance() {
    let ws = Workspace::new();
    let fast = include_str!("../crates/sim/profiles/fast.yaml");
    let profile = ws.write(
        "wasted.yaml",
        &format!(
            "{fast}\nspeculative:\n  num_draft_tokens: 4\n  accept_length_mean: 1.02\n  step_overhead_ms: 0.3\n"
        ),
    );
    let spec = ws.write(
        "spec.yaml",
        &format!(
            "name: spec-wasted
server:
  engine: sim
  model: test-model
  args: {{ profile: {}, speculative-algorithm: EAGLE }}
  ready_timeout: 30s
workload:
  api: sglang-generate
  prompt: {{ kind: repeat, tokens: 256 }}
  output_tokens: 64
  ignore_eos: true
requests: 8
",
            profile.display()
        ),
    );
    let (dir, points) = ws.run_ok(&spec);
    let a = metric(&points[0], "accept_length").unwrap();
    assert!(a < 1.1, "{a}");
    let flags: Vec<&str> = points[0]["flags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(flags.contains(&"spec-low-acceptance"), "{flags:?}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("spec-low-acceptance"), "{report}");
}

/// vLLM returns no verify steps per request; its `spec_decode_num_*` counters give the point's
/// mean accept length (1 + accepted / drafts), which the report shows as the server's count.
#[test]
fn vllms_counters_give_the_points_accept_length_where_requests_carry_none() {
    let ws = Workspace::new();
    let spec = ws.write(
        "vllm-spec.yaml",
        "name: vllm-spec
server:
  engine: vllm
  simulate: true
  model: test-model
  args: { profile: fast-spec, speculative-config: '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}' }
  ready_timeout: 30s
workload:
  api: openai-completions
  prompt: { kind: repeat, tokens: 1024 }
  output_tokens: 64
  ignore_eos: true
cache: { policy: cold, verify: true }
requests: 8
",
    );
    let (dir, points) = ws.run_ok(&spec);
    assert_eq!(points.len(), 1);
    let p = &points[0];
    // The profile's model at about 1,060 tokens of context: 2.74 tokens per verify step (see
    // the on/off test); the counters also count each request's first decode step, and the
    // last one cut at max_tokens: within 10%.
    let counted = p["server"]["spec_accept_length"]
        .as_f64()
        .unwrap_or_else(|| panic!("no counted accept length: {}", p["server"]));
    assert!((counted - 2.74).abs() / 2.74 < 0.1, "{counted}");
    // The requests carry no count (a multi-token chunk is not taken for a step): the point's
    // figure is the counters', and the report says whose it is.
    assert_eq!(metric(p, "accept_length"), None, "{p}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("Counted by the server (its requests carry no verify steps)"),
        "{report}"
    );
    assert!(report.contains(&format!("p001 {counted:.2}")), "{report}");
}

/// vLLM 0.34 with `--per-request-spec-decode-metrics summary` (PR #48915): each request's
/// final usage chunk carries its verify steps, so the point has an accept length from its
/// requests, as on SGLang, and the profile's model is what they give.
#[test]
fn vllms_per_request_counts_give_each_request_its_verify_steps() {
    let ws = Workspace::new();
    let spec = ws.write(
        "vllm-per-request.yaml",
        "name: vllm-per-request
server:
  engine: vllm
  simulate: true
  model: test-model
  args: { profile: fast-spec, per-request-spec-decode-metrics: summary, speculative-config: '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}' }
  ready_timeout: 30s
workload:
  api: openai-completions
  prompt: { kind: repeat, tokens: 1024 }
  output_tokens: 64
  ignore_eos: true
cache: { policy: cold, verify: true }
requests: 8
",
    );
    let (dir, points) = ws.run_ok(&spec);
    let p = &points[0];
    let a = metric(p, "accept_length").unwrap_or_else(|| panic!("no accept length: {p}"));
    assert!((a - 2.74).abs() / 2.74 < 0.1, "accept length {a}");
    for r in read_jsonl(&dir.join("requests.jsonl"))
        .iter()
        .filter(|r| r["role"] == "measure")
    {
        assert_eq!(r["verify_steps_source"], "server", "{r}");
    }
}
