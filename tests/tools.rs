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
