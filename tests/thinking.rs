//! Thinking models end to end on the simulator: each engine's own fields and flags (SGLang's
//! and vLLM's `--reasoning-parser`, llama.cpp's `--reasoning-format`), the time to the first
//! answer token against TTFT, the thinking and answer tokens, a request that never answered,
//! the engines' refusals of a parser they do not know, and the shipped reasoning study.

use std::path::Path;

use crate::common::{Workspace, read_jsonl, servebench};

fn metric(p: &serde_json::Value, name: &str) -> Option<f64> {
    p["metrics"][name]["mean"].as_f64()
}

/// A one-point spec on the simulator: `args` beside `profile: fast`, thinking `think` tokens
/// of `output` on `api`. `engine` is `sim` (SGLang's surface) or an engine simulated.
fn spec(name: &str, engine: &str, args: &str, api: &str, think: u32, output: u32) -> String {
    let engine = match engine {
        "sim" => "sim".to_string(),
        other => format!("{other}\n  simulate: true"),
    };
    format!(
        "name: {name}
server:
  engine: {engine}
  model: test-model
  args: {{ profile: fast, sim-thinking-tokens: {think}, {args} }}
  ready_timeout: 30s
workload:
  api: {api}
  prompt: {{ kind: random, tokens: 256 }}
  output_tokens: {output}
requests: 3
"
    )
}

/// Thinking 32 of 96 tokens on every surface and API: TTFT is the first thinking token,
/// TTFA at least 32 decode steps later, the split is the server's count where it gives one.
#[test]
fn every_engine_streams_thinking_in_its_own_fields_and_servebench_times_both() {
    let ws = Workspace::new();
    let cases = [
        (
            "sglang-chat",
            "sim",
            "reasoning-parser: qwen3",
            "openai-chat",
        ),
        (
            "sglang-generate",
            "sim",
            "reasoning-parser: qwen3",
            "sglang-generate",
        ),
        (
            "sglang-completions",
            "sim",
            "reasoning-parser: deepseek-r1",
            "openai-completions",
        ),
        (
            "vllm-chat",
            "vllm",
            "reasoning-parser: qwen3",
            "openai-chat",
        ),
        (
            "llamacpp-chat",
            "llama.cpp",
            "reasoning-format: deepseek",
            "openai-chat",
        ),
    ];
    for (name, engine, args, api) in cases {
        let path = ws.write(
            &format!("{name}.yaml"),
            &spec(name, engine, args, api, 32, 96),
        );
        let (dir, points) = ws.run_ok(&path);
        let p = &points[0];
        let (ttft, ttfa) = (metric(p, "ttft_s").unwrap(), metric(p, "ttfa_s"));
        let ttfa = ttfa.unwrap_or_else(|| panic!("{name}: no TTFA in {}", p["metrics"]));
        // fast: a decode step is at least 1.2 ms, and at least 30 steps lie between the two
        // (where the engine splits the thinking, its `<think>` token streams no text, so the
        // first token seen is the second one).
        assert!(
            ttfa - ttft > 30.0 * 1.2e-3,
            "{name}: TTFT {ttft} TTFA {ttfa}"
        );
        assert_eq!(metric(p, "reasoning_tokens"), Some(32.0), "{name}");
        assert_eq!(metric(p, "answer_tokens"), Some(64.0), "{name}");
        assert!(metric(p, "reasoning_tok_s").is_some(), "{name}");
        let records = read_jsonl(&dir.join("requests.jsonl"));
        for r in records.iter().filter(|r| r["role"] == "measure") {
            assert_eq!(r["reasoning_tokens"], 32, "{name}: {r}");
            assert!(r.get("unknown_fields").is_none(), "{name}: {r}");
            // Each record names its own first answer and split, as the guide says, without
            // a reader deriving them from `chunks`.
            assert_eq!(r["answer_tokens"], 64, "{name}: {r}");
            let first_answer = r["chunks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["tokens"].as_u64().unwrap() > c["reasoning"].as_u64().unwrap_or(0))
                .map(|c| c["t_s"].as_f64().unwrap());
            assert_eq!(r["ttfa_s"].as_f64(), first_answer, "{name}: {r}");
        }
        // requests.csv carries the same three, row for row.
        let mut csv = csv::Reader::from_path(dir.join("requests.csv")).unwrap();
        let header: Vec<String> = csv.headers().unwrap().iter().map(String::from).collect();
        let col = |h: &str| {
            header
                .iter()
                .position(|x| x == h)
                .unwrap_or_else(|| panic!("{h}"))
        };
        let (ttfa, think, answer) = (
            col("ttfa_ms"),
            col("reasoning_tokens"),
            col("answer_tokens"),
        );
        let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), records.len(), "{name}");
        for (row, r) in rows.iter().zip(&records) {
            if r["role"] != "measure" {
                continue;
            }
            let ms: f64 = row[ttfa].parse().unwrap();
            assert!(
                (ms - r["ttfa_s"].as_f64().unwrap() * 1e3).abs() < 1e-9,
                "{name}"
            );
            assert_eq!((&row[think], &row[answer]), ("32", "64"), "{name}");
        }
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(report.contains("## Thinking and answering"), "{name}");
    }
}

/// Without a parser the engine does not split: the thinking is answer text (what a client
/// sees), and TTFA is TTFT; a request that thinks past max_tokens never answers and says why.
#[test]
fn without_a_parser_thinking_is_content_and_a_cut_request_has_no_first_answer() {
    let ws = Workspace::new();
    let plain = ws.write(
        "plain.yaml",
        &spec(
            "plain",
            "sim",
            "enable-cache-report: true",
            "openai-chat",
            32,
            64,
        ),
    );
    let (_, points) = ws.run_ok(&plain);
    assert_eq!(
        metric(&points[0], "ttfa_s"),
        None,
        "{}",
        points[0]["metrics"]
    );
    let cut = ws.write(
        "cut.yaml",
        &spec(
            "cut",
            "sim",
            "reasoning-parser: qwen3",
            "openai-chat",
            100,
            40,
        ),
    );
    let (dir, points) = ws.run_ok(&cut);
    let p = &points[0];
    assert_eq!(metric(p, "ttfa_s"), None, "{}", p["metrics"]);
    assert!(metric(p, "ttft_s").is_some());
    let flags: Vec<&str> = p["flags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(flags.contains(&"no-answer"), "{flags:?}");
    // None answered: the flag says the point has no TTFA, never that it covers 0 requests.
    let message = p["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "no-answer")
        .and_then(|f| f["message"].as_str())
        .unwrap();
    assert!(message.ends_with("the point has no TTFA"), "{message}");
    for r in read_jsonl(&dir.join("requests.jsonl"))
        .iter()
        .filter(|r| r["role"] == "measure")
    {
        assert_eq!(r["no_answer"], "out-of-tokens-while-thinking", "{r}");
    }
}

/// SGLang refuses a parser it does not know (argparse, exit 2) and servebench's `validate`
/// refuses it first, at its place; vLLM refuses it as its API server starts (exit 1).
#[test]
fn a_reasoning_parser_the_engine_does_not_know_is_refused_as_the_engine_refuses_it() {
    let ws = Workspace::new();
    let path = ws.write(
        "bad.yaml",
        &spec("bad", "sim", "reasoning-parser: qwen", "openai-chat", 0, 8),
    );
    let out = servebench().arg("validate").arg(&path).output().unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("bad.yaml:5:"), "{text}");
    assert!(text.contains("did you mean `qwen3`?"), "{text}");
    let sglang = servebench()
        .args(["sim", "--port", "0", "--reasoning-parser", "qwen"])
        .output()
        .unwrap();
    assert_eq!(sglang.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&sglang.stderr).contains("invalid choice: 'qwen'"));
    let vllm = servebench()
        .args([
            "sim",
            "--api",
            "vllm",
            "m",
            "--port",
            "0",
            "--reasoning-parser",
            "qwen",
        ])
        .output()
        .unwrap();
    assert_eq!(vllm.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&vllm.stderr).contains("Reasoning parser 'qwen' not found"),
        "{}",
        String::from_utf8_lossy(&vllm.stderr)
    );
    let llama = servebench()
        .args([
            "sim",
            "--api",
            "llama.cpp",
            "-m",
            "m.gguf",
            "--port",
            "0",
            "--reasoning-format",
            "deep",
        ])
        .output()
        .unwrap();
    assert!(!llama.status.success());
    assert!(String::from_utf8_lossy(&llama.stderr).contains("Unknown reasoning format: deep"));
}

/// The shipped study (experiments/reasoning-thinking.yaml) as documented, smaller: TTFT
/// stays at the prefill while TTFA grows with the thinking.
#[test]
fn the_reasoning_study_shows_ttfa_growing_with_thinking_while_ttft_stays() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("experiments/reasoning-thinking.yaml")).unwrap();
    let small = text
        .replace("[0, 128, 512, 1024]", "[0, 64, 256]")
        .replace("output_tokens: 1100", "output_tokens: 300")
        .replace("requests: 4", "requests: 2")
        .replace("value: 512", "value: 256")
        .replace("sim-thinking-tokens: 512 }", "sim-thinking-tokens: 256 }");
    let ws = Workspace::new();
    let path = ws.write("study.yaml", &small);
    let (dir, points) = ws.run_ok(&path);
    assert_eq!(points.len(), 3);
    let ttfa: Vec<Option<f64>> = points.iter().map(|p| metric(p, "ttfa_s")).collect();
    assert_eq!(
        ttfa[0], None,
        "no thinking: TTFA is TTFT, not a metric of its own"
    );
    let (a, b) = (ttfa[1].unwrap(), ttfa[2].unwrap());
    assert!(b - a > 190.0 * 1.2e-3, "TTFA {a} then {b}");
    for p in &points[1..] {
        assert!(metric(p, "ttft_s").unwrap() < 0.05, "{}", p["metrics"]);
    }
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("1 of 1 expectation hold"), "{report}");
}

/// servebench's table of SGLang's parser names is the one the simulator's argparse takes
/// (both read from SGLang 0.5.23).
#[test]
fn servebenchs_sglang_parser_names_are_the_simulators_argparse_choices() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let table = std::fs::read_to_string(root.join("crates/sim/src/sglang_options.txt")).unwrap();
    let line = table
        .lines()
        .find(|l| l.starts_with("reasoning-parser\t"))
        .unwrap();
    let mut choices: Vec<&str> = line.split('\t').nth(3).unwrap().split(' ').collect();
    let mut ours: Vec<&str> = servebench_model::spec::reasoning::sglang_parser_names().collect();
    choices.sort_unstable();
    ours.sort_unstable();
    assert_eq!(ours, choices);
}

/// `workload.chat_template_kwargs` goes to the chat template: `enable_thinking: false` turns
/// the simulated Qwen3's thinking off, as SGLang's template does, and the point then has no
/// thinking metrics (TTFA is TTFT).
#[test]
fn a_template_argument_turning_thinking_off_gets_an_answer_at_once() {
    let ws = Workspace::new();
    let text = spec(
        "off",
        "sim",
        "reasoning-parser: qwen3",
        "openai-chat",
        32,
        64,
    )
    .replace(
        "  output_tokens: 64\n",
        "  output_tokens: 64\n  chat_template_kwargs: { enable_thinking: false }\n",
    );
    let (dir, points) = ws.run_ok(&ws.write("off.yaml", &text));
    assert_eq!(
        metric(&points[0], "ttfa_s"),
        None,
        "{}",
        points[0]["metrics"]
    );
    assert_eq!(metric(&points[0], "reasoning_tokens"), None);
    for r in read_jsonl(&dir.join("requests.jsonl"))
        .iter()
        .filter(|r| r["role"] == "measure")
    {
        assert!(r.get("reasoning_tokens").is_none(), "{r}");
    }
}

/// A `url:` SGLang server takes no launch flags in the spec, so the parser its text APIs need
/// is the one it says it runs (`/server_info`'s `reasoning_parser`): `/generate` and
/// completions against an attached thinking server split thinking from answer by its markers,
/// and a server without a parser has thinking servebench cannot see (all answer, no TTFA gap).
#[test]
fn an_attached_servers_own_reasoning_parser_splits_its_text_apis() {
    let ws = Workspace::new();
    let sim = crate::common::ExternalSim::start(
        "test-model",
        &["--reasoning-parser", "qwen3", "--sim-thinking-tokens", "32"],
        &[],
    );
    for api in ["sglang-generate", "openai-completions"] {
        let path = ws.write(
            &format!("{api}.yaml"),
            &format!(
                "name: attached-{api}\nserver:\n  engine: sglang\n  url: {}\n  model: test-model\nworkload:\n  api: {api}\n  prompt: {{ kind: random, tokens: 256 }}\n  output_tokens: 96\nrequests: 3\n",
                sim.url()
            ),
        );
        let (dir, points) = ws.run_ok(&path);
        let p = &points[0];
        assert_eq!(
            metric(p, "reasoning_tokens"),
            Some(32.0),
            "{api}: {}",
            p["metrics"]
        );
        assert_eq!(metric(p, "answer_tokens"), Some(64.0), "{api}");
        let (ttft, ttfa) = (metric(p, "ttft_s").unwrap(), metric(p, "ttfa_s").unwrap());
        assert!(ttfa > ttft, "{api}: TTFT {ttft} TTFA {ttfa}");
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
        let surface = serde_json::to_string(&meta).unwrap();
        assert!(surface.contains("\"reasoning_parser\":\"qwen3\""), "{api}");
    }
}
