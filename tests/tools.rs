//! Tool calls end to end: `workload.tools` refused at `validate` where it is wrong, and sent.

use crate::common::{Workspace, servebench};

/// A one-point chat spec on the simulator with `tools` (YAML flow text) and `extra` workload
/// lines.
fn spec(name: &str, args: &str, tools: &str, extra: &str) -> String {
    format!(
        "name: {name}
server:
  engine: sim
  model: test-model
  args: {{ profile: fast, {args} }}
  ready_timeout: 30s
workload:
  api: openai-chat
  prompt: {{ kind: random, tokens: 64 }}
  output_tokens: 32
  tools: {tools}
{extra}requests: 3
"
    )
}

fn validate(ws: &Workspace, file: &str, text: &str) -> (bool, String) {
    let path = ws.write(file, text);
    let out = servebench().arg("validate").arg(&path).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    (out.status.success(), text)
}

const CITY: &str = "{ type: object, properties: { city: { type: string } }, required: [city] }";

/// A nameless tool, a name twice, `parameters` that is no object schema, tools on a text API
/// and a bad tools file are each refused at their place in the spec.
#[test]
fn tools_that_are_not_function_schemas_are_refused_at_their_place() {
    let ws = Workspace::new();
    let tool = |name: &str, params: &str| {
        format!("{{ type: function, function: {{ name: {name}, parameters: {params} }} }}")
    };
    let twice = format!("[{}, {}]", tool("f", CITY), tool("f", CITY));
    let (ok, text) = validate(&ws, "twice.yaml", &spec("twice", "", &twice, ""));
    assert!(!ok);
    assert!(text.contains("twice.yaml:11:178"), "{text}");
    assert!(text.contains("`f` is declared twice"), "{text}");
    let nameless = format!("[{{ type: function, function: {{ parameters: {CITY} }} }}]");
    let (ok, text) = validate(&ws, "nameless.yaml", &spec("nameless", "", &nameless, ""));
    assert!(!ok && text.contains("has no name"), "{text}");
    let schemaless = format!("[{}]", tool("f", "{ type: string }"));
    let (ok, text) = validate(&ws, "schemaless.yaml", &spec("s", "", &schemaless, ""));
    assert!(!ok && text.contains("JSON Schema of an object"), "{text}");
    let good = format!("[{}]", tool("f", CITY));
    let text_api = spec("t", "", &good, "").replace("openai-chat", "openai-completions");
    let (ok, text) = validate(&ws, "text.yaml", &text_api);
    assert!(!ok && text.contains("only on the chat API"), "{text}");
    let (ok, text) = validate(
        &ws,
        "good.yaml",
        &spec("good", "", &good, "  tool_choice: auto\n"),
    );
    assert!(ok, "{text}");
    ws.write("tools.json", "[{\"type\": \"function\", \"function\": {}}]");
    let (ok, text) = validate(
        &ws,
        "file.yaml",
        &spec("file", "", "{ file: tools.json }", ""),
    );
    assert!(
        !ok && text.contains("file.yaml:11:") && text.contains("no name"),
        "{text}"
    );
}

/// The shipped example (experiments/tool-calling.yaml): every request calls the declared
/// tool; alone, every call satisfies its schema; above the simulator's fault batch, calls
/// arrive broken and say why.
#[test]
fn the_tool_calling_example_grades_calls_under_load() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("experiments/tool-calling.yaml")).unwrap();
    let ws = Workspace::new();
    let path = ws.write(
        "tool-calling.yaml",
        &text.replace("requests: 16", "requests: 8"),
    );
    // A degraded point (the broken calls) makes the run exit 3.
    let out = ws.run(&path);
    assert_eq!(out.status.code(), Some(3), "{}", crate::common::show(&out));
    let dir = crate::common::run_dir(&out);
    let points = crate::common::read_jsonl(&dir.join("points.jsonl"));
    assert_eq!(points.len(), 2);
    let records = crate::common::read_jsonl(&dir.join("requests.jsonl"));
    let of = |point: &str| -> Vec<&serde_json::Value> {
        records
            .iter()
            .filter(|r| r["point"] == point && r["role"] == "measure")
            .collect()
    };
    let alone = of("p001");
    assert!(!alone.is_empty());
    for r in &alone {
        assert_eq!(r["tool_calls"], 1, "{r}");
        assert_eq!(r["tool_call_valid"], true, "{r}");
        // The call's pieces are the output: TTFT is the first of them.
        assert!(r["chunks"].as_array().is_some_and(|c| !c.is_empty()), "{r}");
    }
    let loaded = of("p002");
    let broken = loaded
        .iter()
        .filter(|r| r["tool_call_valid"] == false)
        .count();
    assert!(broken > 0, "{loaded:?}");
    let why = loaded
        .iter()
        .find_map(|r| r["tool_call_invalid"].as_str())
        .unwrap();
    assert!(why.contains("not JSON"), "{why}");
    // Broken calls under load flag the point and degrade it, as invalid output does.
    let kinds = |p: &serde_json::Value| -> Vec<String> {
        p["flags"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["kind"].as_str().map(str::to_string))
            .collect()
    };
    assert!(!kinds(&points[0]).contains(&"invalid-tool-calls".to_string()));
    assert!(
        kinds(&points[1]).contains(&"invalid-tool-calls".to_string()),
        "{}",
        points[1]
    );
    assert_eq!(points[1]["status"], "degraded", "{}", points[1]);
    // The shares are the point's metrics, counted from its records.
    let share = |p: &serde_json::Value, m: &str| p["metrics"][m]["mean"].as_f64().unwrap();
    assert_eq!(share(&points[0], "tool_call_rate"), 1.0);
    assert_eq!(share(&points[0], "tool_call_valid_rate"), 1.0);
    let valid = loaded
        .iter()
        .filter(|r| r["tool_call_valid"] == true)
        .count();
    assert_eq!(
        share(&points[1], "tool_call_valid_rate"),
        valid as f64 / loaded.len() as f64
    );
    assert_eq!(points[1]["tool_calls"]["called"], loaded.len());
    assert_eq!(points[1]["tool_calls"]["sent"], loaded.len());
    assert_eq!(points[1]["tool_calls"]["valid"], valid);
    // The report's table and the example's expectations (all valid alone, flagged loaded).
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## Tool calls"), "{report}");
    assert!(report.contains("2 of 2 expectations hold"), "{report}");
}

/// The engines example (experiments/tool-calling-engines.yaml): SGLang's, vLLM's and
/// llama.cpp's simulated surfaces, each launched with its own tool-call flags, stream calls
/// in their own shapes that servebench judges alike: all valid alone, broken under load.
#[test]
fn each_engine_streams_calls_servebench_judges_alike() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("experiments/tool-calling-engines.yaml")).unwrap();
    let ws = Workspace::new();
    let path = ws.write(
        "tool-calling-engines.yaml",
        &text.replace("requests: 16", "requests: 6"),
    );
    let out = ws.run(&path);
    assert_eq!(out.status.code(), Some(3), "{}", crate::common::show(&out));
    let dir = crate::common::run_dir(&out);
    let points = crate::common::read_jsonl(&dir.join("points.jsonl"));
    let engines: Vec<(&str, u64, f64, bool)> = points
        .iter()
        .map(|p| {
            let flagged = p["flags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["kind"] == "invalid-tool-calls");
            (
                p["values"]["server.engine"].as_str().unwrap(),
                p["values"]["concurrency"].as_u64().unwrap(),
                p["metrics"]["tool_call_rate"]["mean"].as_f64().unwrap(),
                flagged,
            )
        })
        .collect();
    assert_eq!(
        engines,
        [
            ("sglang", 1, 1.0, false),
            ("sglang", 8, 1.0, true),
            ("vllm", 1, 1.0, false),
            ("vllm", 8, 1.0, true),
            ("llama.cpp", 1, 1.0, false),
            ("llama.cpp", 8, 1.0, true),
        ],
        "{points:?}"
    );
    for p in points.iter().step_by(2) {
        assert_eq!(p["metrics"]["tool_call_valid_rate"]["mean"], 1.0, "{p}");
    }
    // The report's table names each row's engine: the same point labels repeat per server.
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let table = report
        .split("## Tool calls")
        .nth(1)
        .expect("a Tool calls section");
    for engine in ["sglang", "vllm", "llama.cpp"] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("| p0") && l.contains(&format!("server.engine={engine}"))),
            "{engine} not named in the table:\n{table}"
        );
    }
}

/// Without SGLang's `--tool-call-parser` the simulator (as SGLang) streams the call as text:
/// the client counts no call.
#[test]
fn without_a_tool_call_parser_no_call_is_split_from_the_text() {
    let ws = Workspace::new();
    let tools = format!("[{{ type: function, function: {{ name: f, parameters: {CITY} }} }}]");
    let path = ws.write(
        "plain.yaml",
        &spec("plain", "", &tools, "  tool_choice: auto\n"),
    );
    let (dir, _) = ws.run_ok(&path);
    let records = crate::common::read_jsonl(&dir.join("requests.jsonl"));
    let r = records.iter().find(|r| r["role"] == "measure").unwrap();
    assert_eq!(r["tool_calls"], 0, "{r}");
    assert!(r["tool_call_valid"].is_null(), "{r}");
}

/// vLLM refuses `tool_choice: auto` without `--enable-auto-tool-choice --tool-call-parser`
/// (400), as its simulated surface does: every request fails with vLLM's message.
#[test]
fn vllm_refuses_auto_tool_choice_without_its_flags() {
    let ws = Workspace::new();
    let tools = format!("[{{ type: function, function: {{ name: f, parameters: {CITY} }} }}]");
    let text = spec("vllm", "", &tools, "  tool_choice: auto\n")
        .replace("engine: sim", "engine: vllm\n  simulate: true");
    let path = ws.write("vllm.yaml", &text);
    let out = ws.run(&path);
    assert!(!out.status.success());
    let dir = crate::common::run_dir(&out);
    let records = crate::common::read_jsonl(&dir.join("requests.jsonl"));
    let r = records.iter().find(|r| r["role"] == "measure").unwrap();
    assert!(
        r["error"]
            .to_string()
            .contains("requires --enable-auto-tool-choice"),
        "{r}"
    );
}

/// A named `tool_choice` is checked against the tools a file declares, and refused at the
/// choice, naming the file's tools.
#[test]
fn a_named_choice_the_tools_file_does_not_declare_is_refused_at_the_choice() {
    let ws = Workspace::new();
    ws.write(
        "tools.json",
        &format!(
            "[{{\"type\": \"function\", \"function\": {{\"name\": \"get_weather\", \"parameters\": {}}}}}]",
            r#"{"type": "object", "properties": {"city": {"type": "string"}}}"#
        ),
    );
    let text = |name: &str| {
        spec(
            "named",
            "",
            "{ file: tools.json }",
            &format!("  tool_choice: {{ function: {name} }}\n"),
        )
    };
    let (ok, out) = validate(&ws, "named.yaml", &text("get_wether"));
    assert!(!ok, "{out}");
    assert!(out.contains("named.yaml:12:28"), "{out}");
    assert!(
        out.contains("`tool_choice` names `get_wether`, which the tools file"),
        "{out}"
    );
    assert!(
        out.contains("name one of the tools (`get_weather`)"),
        "{out}"
    );
    let (ok, out) = validate(&ws, "good.yaml", &text("get_weather"));
    assert!(ok, "{out}");
}

/// A server that repeats the call's name in every stream piece (MiniMax through NVIDIA NIM,
/// Fireworks; the simulator's `sim-repeat-tool-call-names`): 20 valid calls are 20 valid
/// calls, one name each, and the point is not flagged.
#[test]
fn a_name_repeated_in_every_piece_is_read_as_one_name() {
    let ws = Workspace::new();
    let tools =
        format!("[{{ type: function, function: {{ name: get_weather, parameters: {CITY} }} }}]");
    let text = spec(
        "repeat",
        "tool-call-parser: qwen25, sim-repeat-tool-call-names: true",
        &tools,
        "  tool_choice: required\n",
    )
    .replace("requests: 3", "requests: 20");
    let (dir, points) = ws.run_ok(&ws.write("repeat.yaml", &text));
    let records = crate::common::read_jsonl(&dir.join("requests.jsonl"));
    let measured: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["role"] == "measure").collect();
    assert_eq!(measured.len(), 20);
    for r in &measured {
        assert_eq!(r["tool_calls"], 1, "{r}");
        assert_eq!(r["tool_call_valid"], true, "{r}");
    }
    let p = &points[0];
    assert_eq!(p["status"], "ok", "{p}");
    assert_eq!(p["metrics"]["tool_call_valid_rate"]["mean"], 1.0, "{p}");
    assert!(
        !p["flags"].to_string().contains("invalid-tool-calls"),
        "{p}"
    );
}

/// `tool_choice: required` on a server that split no call from the text (SGLang without
/// `--tool-call-parser`): every answer contradicts the request, so the point is flagged
/// `impossible-usage` and degraded, as invalid output is.
#[test]
fn an_answer_without_a_call_under_required_is_impossible_usage() {
    let ws = Workspace::new();
    let tools = format!("[{{ type: function, function: {{ name: f, parameters: {CITY} }} }}]");
    let path = ws.write(
        "required.yaml",
        &spec("required", "", &tools, "  tool_choice: required\n"),
    );
    let out = ws.run(&path);
    assert_eq!(out.status.code(), Some(3), "{}", crate::common::show(&out));
    let dir = crate::common::run_dir(&out);
    let points = crate::common::read_jsonl(&dir.join("points.jsonl"));
    let p = &points[0];
    assert_eq!(p["status"], "degraded", "{p}");
    let flag = p["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "impossible-usage")
        .unwrap_or_else(|| panic!("{p}"));
    assert!(
        flag["message"]
            .as_str()
            .unwrap()
            .starts_with("3 of 3 requests counted usage their stream or request contradicts (first: request 0, no tool call, under a tool_choice that requires one)"),
        "{flag}"
    );
}
