//! The simulated model calls tools. A chat request that declares `tools` (and a `tool_choice`
//! other than `none`) to a server launched with SGLang's `--tool-call-parser` gets its answer
//! as one streamed call in `delta.tool_calls` (OpenAI's shape: the first piece carries `id`,
//! `type` and `function.name`, then `function.arguments` in pieces, one per answer token):
//! the named function of `tool_choice`, else the first tool, with arguments made from its
//! schema (its required properties, each a value of its type).
//!
//! Without the parser SGLang 0.5.23 does not split calls from text (serving_chat.py parses
//! calls only `if self.tool_call_parser`), so the simulator then streams the call as content
//! text, as the model wrote it: the client sees no call.
//!
//! The fault `--sim-broken-tool-calls-above-batch N` breaks the arguments (not JSON) of a
//! call made while more than N chat requests are live, as a server that breaks under load.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, Value, json};

/// Bytes of arguments one answer token carries.
const PIECE_BYTES: usize = 8;

/// The call one request makes.
#[derive(Debug)]
pub(crate) struct PlannedCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
    /// The parser splits it into `tool_calls` (else it is content text).
    pub parsed: bool,
    /// Holds the request's place among live tool-calling requests until the stream ends.
    _live: Live,
}

/// One live chat request that calls a tool, counted while it is held.
#[derive(Debug)]
struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The call `body` asks for, if any: tools declared and `tool_choice` not `none`.
pub(crate) fn plan(
    body: &Value,
    parsed: bool,
    broken_above: Option<u64>,
    live: &Arc<AtomicUsize>,
    rid: &str,
) -> Option<PlannedCall> {
    let tools = body.get("tools")?.as_array().filter(|t| !t.is_empty())?;
    let choice = body.get("tool_choice");
    if choice.and_then(Value::as_str) == Some("none") {
        return None;
    }
    let named = choice
        .and_then(|c| c.pointer("/function/name"))
        .and_then(Value::as_str);
    let tool = match named {
        Some(n) => tools
            .iter()
            .find(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(n))?,
        None => &tools[0],
    };
    let name = tool.pointer("/function/name")?.as_str()?.to_string();
    let now = live.fetch_add(1, Ordering::Relaxed) + 1;
    let mut arguments = value_for(&tool["function"]["parameters"], 0).to_string();
    if broken_above.is_some_and(|n| now as u64 > n) {
        // Cut mid-value: what a server whose constrained decoding broke would stream.
        arguments.truncate(arguments.len() / 2);
    }
    Some(PlannedCall {
        id: format!("call_{rid}"),
        name,
        arguments,
        parsed,
        _live: Live(Arc::clone(live)),
    })
}

/// A value satisfying `schema`'s type, enum and required properties.
fn value_for(schema: &Value, depth: u32) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return first.clone();
    }
    let ty = match &schema["type"] {
        Value::String(s) => s.as_str(),
        Value::Array(list) => list.first().and_then(Value::as_str).unwrap_or("string"),
        _ => "object",
    };
    match ty {
        "object" if depth < 8 => {
            let mut map = Map::new();
            for name in schema["required"].as_array().into_iter().flatten() {
                if let Some(n) = name.as_str() {
                    map.insert(n.into(), value_for(&schema["properties"][n], depth + 1));
                }
            }
            Value::Object(map)
        }
        "object" => json!({}),
        "array" => json!([value_for(&schema["items"], depth + 1)]),
        "integer" => json!(1),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "null" => Value::Null,
        _ => json!("sim"),
    }
}

impl PlannedCall {
    /// The delta of answer tokens `from..from + count` (0-based), `last` when the final
    /// ones (the rest goes with them): a `tool_calls` entry when parsed, else content text;
    /// None when the call is all sent.
    pub(crate) fn delta(&self, from: u64, count: u64, last: bool) -> Option<(&'static str, Value)> {
        let whole = if self.parsed {
            self.arguments.clone()
        } else {
            self.text()
        };
        let start = (from as usize).saturating_mul(PIECE_BYTES).min(whole.len());
        let end = if last {
            whole.len()
        } else {
            ((from + count) as usize)
                .saturating_mul(PIECE_BYTES)
                .min(whole.len())
        };
        if from > 0 && start >= end {
            return None;
        }
        let piece = whole.get(start..end).unwrap_or("");
        if !self.parsed {
            return Some(("content", piece.into()));
        }
        let mut call = json!({"index": 0, "function": {"arguments": piece}});
        if from == 0 {
            call["id"] = self.id.clone().into();
            call["type"] = "function".into();
            call["function"]["name"] = self.name.clone().into();
        }
        Some(("tool_calls", json!([call])))
    }

    /// The call as the model's raw text (without a parser).
    pub(crate) fn text(&self) -> String {
        format!(
            "<tool_call>{{\"name\": \"{}\", \"arguments\": {}}}</tool_call>",
            self.name, self.arguments
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(choice: Value) -> Value {
        json!({"tools": [
            {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "b", "parameters": {"type": "object",
                "properties": {"n": {"type": "integer"}, "u": {"enum": ["c", "f"]},
                               "xs": {"type": "array", "items": {"type": "string"}}},
                "required": ["n", "u", "xs"]}}}],
            "tool_choice": choice})
    }

    #[test]
    fn a_call_names_the_chosen_tool_with_arguments_from_its_schema() {
        let live = Arc::new(AtomicUsize::new(0));
        let c = plan(
            &body(json!({"type": "function", "function": {"name": "b"}})),
            true,
            None,
            &live,
            "r",
        )
        .unwrap();
        assert_eq!(c.name, "b");
        let args: Value = serde_json::from_str(&c.arguments).unwrap();
        assert_eq!(args, json!({"n": 1, "u": "c", "xs": ["sim"]}));
        assert_eq!(
            plan(&body(json!("auto")), true, None, &live, "r")
                .unwrap()
                .name,
            "a"
        );
        assert!(plan(&body(json!("none")), true, None, &live, "r").is_none());
        // The pieces put the arguments back together.
        let mut joined = String::new();
        let mut k = 0;
        while let Some((_, p)) = c.delta(k, 1, false) {
            joined.push_str(p[0]["function"]["arguments"].as_str().unwrap());
            k += 1;
        }
        assert_eq!(joined, c.arguments);
        drop(c);
        assert_eq!(live.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn calls_break_above_the_fault_batch() {
        let live = Arc::new(AtomicUsize::new(0));
        let first = plan(&body(json!("required")), true, Some(1), &live, "1").unwrap();
        assert!(serde_json::from_str::<Value>(&first.arguments).is_ok());
        let b = body(json!({"type": "function", "function": {"name": "b"}}));
        let second = plan(&b, true, Some(1), &live, "2").unwrap();
        assert!(serde_json::from_str::<Value>(&second.arguments).is_err());
    }
}
