//! Tool calls: `workload.tools` (OpenAI function tools, written inline or read from a JSON
//! file) and `workload.tool_choice`, and `validate`'s checks of what the schema cannot say:
//! every tool named, no name twice, `parameters` a JSON Schema object, the chat API only.

use std::collections::HashSet;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::validate::{Problem, Target};

/// Bytes read at most from a `tools: { file }` file.
pub(crate) const MAX_TOOLS_FILE_BYTES: u64 = 1024 * 1024;

/// The tools sent with every chat request: a list of OpenAI function tools
/// (`{ type: function, function: { name, description, parameters } }`), or `{ file: path }`
/// to a JSON file holding that list (read relative to the spec, at most 1 MiB).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ToolsSpec {
    /// The tools, written in the spec.
    Inline(Vec<Value>),
    /// A JSON file holding the list.
    File {
        /// Path of the JSON file, relative to the spec.
        file: PathBuf,
    },
}

/// `tool_choice`: `auto` (the model decides), `none`, `required`, or a function's name
/// (`{ function: get_weather }`, sent as OpenAI's `{type: function, function: {name}}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ToolChoice {
    /// `auto`, `none` or `required`.
    Mode(ToolMode),
    /// One named function.
    Named {
        /// The function's name (one of `tools`).
        function: String,
    },
}

/// The modes of `tool_choice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ToolMode {
    Auto,
    None,
    Required,
}

impl ToolChoice {
    /// The request body's `tool_choice`.
    pub fn to_json(&self) -> Value {
        match self {
            ToolChoice::Mode(ToolMode::Auto) => "auto".into(),
            ToolChoice::Mode(ToolMode::None) => "none".into(),
            ToolChoice::Mode(ToolMode::Required) => "required".into(),
            ToolChoice::Named { function } => {
                serde_json::json!({"type": "function", "function": {"name": function}})
            }
        }
    }
}

/// Problems in a list of tools (`list` as read from the spec or its file); pointers are
/// `base` + `/N/...`.
pub(crate) fn tool_list_problems(list: &Value, base: &str) -> Vec<Problem> {
    let problem = |pointer: String, target: Target, message: String, hint: &str| Problem {
        pointer,
        target,
        message,
        hint: Some(hint.to_string()),
    };
    let Some(tools) = list.as_array() else {
        return vec![problem(
            base.to_string(),
            Target::Value,
            "`tools` must be a list of function tools".into(),
            "write `[{ type: function, function: { name: NAME, parameters: { type: object, properties: {...} } } }]`",
        )];
    };
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let at = format!("{base}/{i}");
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            out.push(problem(
                at.clone(),
                Target::Value,
                format!("tool {i} is not a function tool (`type: function`)"),
                "OpenAI's chat API takes `{ type: function, function: { name, description, parameters } }`",
            ));
            continue;
        }
        let Some(function) = tool.get("function").and_then(Value::as_object) else {
            out.push(problem(
                at.clone(),
                Target::Parent,
                format!("tool {i} has no `function`"),
                "add `function: { name: NAME, parameters: { type: object, properties: {...} } }`",
            ));
            continue;
        };
        let at = format!("{at}/function");
        match function.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => {
                if !seen.insert(name.to_string()) {
                    out.push(problem(
                        format!("{at}/name"),
                        Target::Value,
                        format!("the tool name `{name}` is declared twice"),
                        "give each tool its own name: a call names the one it means",
                    ));
                }
            }
            _ => out.push(problem(
                at.clone(),
                Target::Parent,
                format!("tool {i} has no name"),
                "add `name: NAME` (letters, digits, `_` and `-`)",
            )),
        }
        if let Some(params) = function.get("parameters")
            && let Some(message) = not_an_object_schema(params)
        {
            out.push(problem(
                format!("{at}/parameters"),
                Target::Value,
                message,
                "write `parameters: { type: object, properties: { NAME: { type: string } }, required: [NAME] }`",
            ));
        }
    }
    out
}

/// Why `schema` is not a JSON Schema for an object of arguments, if it is not.
fn not_an_object_schema(schema: &Value) -> Option<String> {
    let Some(map) = schema.as_object() else {
        return Some("`parameters` must be a JSON Schema (a mapping)".into());
    };
    if map.get("type").and_then(Value::as_str) != Some("object") {
        return Some("`parameters` must be a JSON Schema of an object (`type: object`)".into());
    }
    if let Some(p) = map.get("properties")
        && !p.is_object()
    {
        return Some("`parameters.properties` must be a mapping of names to schemas".into());
    }
    if let Some(r) = map.get("required")
        && !r.as_array().is_some_and(|r| r.iter().all(Value::is_string))
    {
        return Some("`parameters.required` must be a list of property names".into());
    }
    None
}

/// `validate`'s checks on the raw spec: inline tools' shapes, tools on an API other than
/// chat, and a named `tool_choice` that names no declared tool.
pub(crate) fn checks(raw: &Value) -> Vec<Problem> {
    let Some(workload) = raw.get("workload") else {
        return Vec::new();
    };
    let tools = workload.get("tools").filter(|t| !t.is_null());
    let choice = workload.get("tool_choice").filter(|t| !t.is_null());
    let mut out = Vec::new();
    let api = workload
        .get("api")
        .and_then(Value::as_str)
        .unwrap_or("sglang-generate");
    if api != "openai-chat" {
        for (key, value) in [("tools", tools), ("tool_choice", choice)] {
            if value.is_some() {
                out.push(Problem {
                    pointer: format!("/workload/{key}"),
                    target: Target::Key,
                    message: format!("`{key}` is sent only on the chat API, not on `{api}`"),
                    hint: Some("use `workload.api: openai-chat`".into()),
                });
            }
        }
        return out;
    }
    if let Some(list) = tools.filter(|t| t.is_array()) {
        out.extend(tool_list_problems(list, "/workload/tools"));
        if let Some(name) = choice
            .and_then(|c| c.get("function"))
            .and_then(Value::as_str)
        {
            out.extend(undeclared_choice(list, name, "`tools`"));
        }
    }
    if choice.is_some() && tools.is_none() {
        out.push(Problem {
            pointer: "/workload/tool_choice".into(),
            target: Target::Key,
            message: "`tool_choice` without `tools`: there is nothing to choose from".into(),
            hint: Some("add `workload.tools`, or remove `tool_choice`".into()),
        });
    }
    out
}

/// The problem of a named `tool_choice` (`name`) that `list` (`where_`, as the message
/// names it) does not declare, if it does not.
fn undeclared_choice(list: &Value, name: &str, where_: &str) -> Option<Problem> {
    let names: Vec<&str> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
        .collect();
    if names.contains(&name) {
        return None;
    }
    let shown: Vec<String> = names.iter().take(5).map(|n| format!("`{n}`")).collect();
    let more = if names.len() > 5 { ", ..." } else { "" };
    Some(Problem {
        pointer: "/workload/tool_choice/function".into(),
        target: Target::Value,
        message: format!("`tool_choice` names `{name}`, which {where_} does not declare"),
        hint: Some(format!(
            "name one of the tools ({}{more}), or use `auto` or `required`",
            shown.join(", ")
        )),
    })
}

/// `tools: { file }` read (relative to `spec_dir`, at most [`MAX_TOOLS_FILE_BYTES`]) and put
/// in the spec's place, so that every later step (and an agent on another host) sees the list
/// sent; problems are reported at `/workload/tools/file`, and a named `choice` the file does
/// not declare at `/workload/tool_choice/function`.
pub(crate) fn inline_file(
    tools: &mut Option<ToolsSpec>,
    choice: Option<&ToolChoice>,
    spec_dir: &std::path::Path,
) -> Vec<Problem> {
    use std::io::Read;
    let Some(ToolsSpec::File { file }) = &*tools else {
        return Vec::new();
    };
    let full = spec_dir.join(file);
    let shown = full.display().to_string();
    let problem = |message: String, hint: &str| Problem {
        pointer: "/workload/tools/file".into(),
        target: Target::Value,
        message,
        hint: Some(hint.to_string()),
    };
    let mut text = String::new();
    let read = crate::input_file::open_regular(&full, MAX_TOOLS_FILE_BYTES).map(|f| {
        f.take(MAX_TOOLS_FILE_BYTES)
            .read_to_string(&mut text)
            .map_err(crate::input_file::Refused::Io)
    });
    let refused = match read {
        Ok(Ok(_)) => None,
        Ok(Err(e)) | Err(e) => Some(e),
    };
    if let Some(e) = refused {
        let why = match e {
            crate::input_file::Refused::Io(e) => e.to_string(),
            crate::input_file::Refused::NotAFile(kind) => format!("it is {kind}"),
            crate::input_file::Refused::TooLarge(n) => {
                format!("it is {n} bytes, above the 1 MiB limit")
            }
        };
        return vec![problem(
            format!("cannot read the tools file `{shown}`: {why}"),
            "point `file` at a JSON file (at most 1 MiB) holding a list of function tools",
        )];
    }
    let list: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return vec![problem(
                format!("the tools file `{shown}` is not JSON: {e}"),
                "write the list as JSON: `[{\"type\": \"function\", \"function\": {...}}]`",
            )];
        }
    };
    let found = tool_list_problems(&list, "");
    if let Some(first) = found.first() {
        return vec![problem(
            format!(
                "in the tools file `{shown}` at `{}`: {}",
                first.pointer, first.message
            ),
            first.hint.as_deref().unwrap_or(""),
        )];
    }
    let undeclared = match choice {
        Some(ToolChoice::Named { function }) => {
            undeclared_choice(&list, function, &format!("the tools file `{shown}`"))
        }
        _ => None,
    };
    if let Value::Array(list) = list {
        *tools = Some(ToolsSpec::Inline(list));
    }
    undeclared.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, params: Value) -> Value {
        json!({"type": "function", "function": {"name": name, "parameters": params}})
    }

    #[test]
    fn nameless_twice_named_and_schemaless_tools_are_refused_where_written() {
        let obj = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let list = json!([
            tool("a", obj.clone()),
            tool("a", obj.clone()),
            {"type": "function", "function": {"parameters": obj}},
            tool("b", json!({"type": "string"})),
            tool("c", json!({"type": "object", "properties": []})),
        ]);
        let p = tool_list_problems(&list, "/workload/tools");
        let pointers: Vec<&str> = p.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/workload/tools/1/function/name",
                "/workload/tools/2/function",
                "/workload/tools/3/function/parameters",
                "/workload/tools/4/function/parameters",
            ],
            "{p:?}"
        );
        assert!(p[0].message.contains("twice"));
        assert!(p[1].message.contains("no name"));
    }

    #[test]
    fn tools_belong_to_the_chat_api() {
        let spec = |api: &str| {
            json!({"workload": {"api": api, "tools": [tool("f", json!({"type": "object"}))],
                                "tool_choice": "auto"}})
        };
        assert!(checks(&spec("openai-chat")).is_empty());
        let p = checks(&spec("openai-completions"));
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0].pointer, "/workload/tools");
        let named = json!({"workload": {"api": "openai-chat",
            "tools": [tool("f", json!({"type": "object"}))], "tool_choice": {"function": "g"}}});
        assert_eq!(checks(&named)[0].pointer, "/workload/tool_choice/function");
    }

    /// A named choice is checked against the tools a file declares, as against inline ones.
    #[test]
    fn a_named_choice_is_checked_against_the_tools_file() {
        let dir = tempfile::tempdir().unwrap();
        let list = json!([tool("get_weather", json!({"type": "object"}))]);
        std::fs::write(dir.path().join("tools.json"), list.to_string()).unwrap();
        let read = |name: &str| {
            let mut tools = Some(ToolsSpec::File {
                file: "tools.json".into(),
            });
            let choice = ToolChoice::Named {
                function: name.into(),
            };
            let p = inline_file(&mut tools, Some(&choice), dir.path());
            (p, tools)
        };
        let (p, tools) = read("get_weather");
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(
            tools,
            Some(ToolsSpec::Inline(list.as_array().unwrap().clone()))
        );
        let (p, _) = read("get_wether");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].pointer, "/workload/tool_choice/function");
        assert!(
            p[0].message
                .contains("`get_wether`, which the tools file `"),
            "{}",
            p[0].message
        );
        assert_eq!(
            p[0].hint.as_deref(),
            Some("name one of the tools (`get_weather`), or use `auto` or `required`")
        );
    }
}
