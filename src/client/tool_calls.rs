//! Streamed tool calls (`delta.tool_calls` on chat streams, OpenAI's shape: each piece names
//! its call by `index`, the first piece carries `id` and `function.name`, `function.arguments`
//! comes in pieces), assembled within bounds and judged against the declared tools.
//!
//! Some servers repeat the whole `function.name` (and `id`) in every piece of a call
//! (MiniMax through NVIDIA NIM, Fireworks): a piece of the same call whose name is the name
//! so far is that repeat, not more of the name, as those servers mean it. A piece without an
//! `index` belongs to the call its `id` names, else to the last call.
//!
//! The arguments are judged by the `jsonschema` crate against the tool's `parameters`, in
//! the draft the schema declares (`$schema`), 2020-12 when it declares none: every keyword
//! of that draft (`minimum`, `pattern`, `oneOf`, `$ref` within the schema, ...). It resolves
//! no `$ref` over the network or from files: a schema it cannot compile (such a `$ref`, an
//! unknown `$schema`) leaves its calls judged by their name and JSON only
//! (docs/guide/tools.md says so).

use std::sync::{Arc, Mutex};

use serde_json::Value;

/// Bytes of a call's name kept at most.
pub(crate) const NAME_BYTES: usize = 256;
/// Bytes of a call's arguments kept at most.
pub(crate) const ARGUMENT_BYTES: usize = 64 * 1024;
/// Calls of one request assembled at most.
pub(crate) const CALLS: usize = 16;

/// One call as assembled so far.
#[derive(Debug, Default, Clone, PartialEq)]
struct Call {
    index: u64,
    /// The call's `id`, when a piece gave one.
    id: Option<String>,
    name: String,
    arguments: String,
    /// The name or the arguments passed their bound: what is kept is their start only.
    cut: bool,
}

/// The calls of one stream.
#[derive(Debug, Default)]
pub(crate) struct ToolCalls {
    calls: Vec<Call>,
    /// More calls came than [`CALLS`].
    too_many: bool,
}

/// How a request's calls were judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// Calls the stream made.
    pub count: u32,
    /// Whether every call was valid; None when it made none.
    pub valid: Option<bool>,
    /// Why a call was not (the first found).
    pub invalid: Option<String>,
}

impl ToolCalls {
    /// Takes one delta's `tool_calls` list.
    pub(crate) fn delta(&mut self, pieces: &[Value]) {
        for piece in pieces {
            let id = piece["id"].as_str().filter(|id| !id.is_empty());
            let found = match piece["index"].as_u64() {
                Some(index) => self.calls.iter().position(|c| c.index == index),
                None => match id {
                    Some(id) => self.calls.iter().position(|c| c.id.as_deref() == Some(id)),
                    None => self.calls.len().checked_sub(1),
                },
            };
            let at = match found {
                Some(at) => at,
                None if self.calls.len() < CALLS => {
                    let index = piece["index"].as_u64().unwrap_or(self.calls.len() as u64);
                    self.calls.push(Call {
                        index,
                        ..Call::default()
                    });
                    self.calls.len() - 1
                }
                None => {
                    self.too_many = true;
                    continue;
                }
            };
            let call = &mut self.calls[at];
            if call.id.is_none() {
                call.id = id.map(|id| id.chars().take(NAME_BYTES).collect());
            }
            let f = &piece["function"];
            if let Some(name) = f["name"].as_str()
                // The whole name again, in a later piece of the same call: a repeat.
                && (call.name.is_empty() || name != call.name)
            {
                call.cut |= !push_bounded(&mut call.name, name, NAME_BYTES);
            }
            if let Some(args) = f["arguments"].as_str() {
                call.cut |= !push_bounded(&mut call.arguments, args, ARGUMENT_BYTES);
            }
        }
    }

    /// The calls judged against `tools` (the declared OpenAI function tools).
    pub(crate) fn judge(&self, tools: &[Value]) -> Judged {
        let count = self.calls.len() as u32;
        let invalid = self
            .too_many
            .then(|| format!("more than {CALLS} calls (servebench judges {CALLS})"))
            .or_else(|| self.calls.iter().find_map(|c| invalid_call(c, tools)));
        Judged {
            count,
            valid: (count > 0).then_some(invalid.is_none()),
            invalid,
        }
    }
}

/// Appends `s` to `out` up to `limit` bytes (on a char boundary); false when it was cut.
fn push_bounded(out: &mut String, s: &str, limit: usize) -> bool {
    let room = limit.saturating_sub(out.len());
    if s.len() <= room {
        out.push_str(s);
        return true;
    }
    let mut end = room;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.push_str(&s[..end]);
    false
}

/// Why `call` is not a valid call of one of `tools`, if it is not.
fn invalid_call(call: &Call, tools: &[Value]) -> Option<String> {
    if call.cut {
        return Some(format!(
            "call `{}` is longer than servebench keeps (name {NAME_BYTES} B, arguments {} KiB)",
            call.name,
            ARGUMENT_BYTES / 1024
        ));
    }
    let Some(tool) = tools
        .iter()
        .find(|t| t["function"]["name"].as_str() == Some(call.name.as_str()))
    else {
        return Some(format!("`{}` is not a declared tool", call.name));
    };
    let args: Value = match serde_json::from_str(&call.arguments) {
        Ok(v) => v,
        Err(e) => return Some(format!("arguments of `{}` are not JSON: {e}", call.name)),
    };
    let schema = &tool["function"]["parameters"];
    if schema.is_null() {
        return None;
    }
    schema_problem(schema, &args).map(|p| {
        format!(
            "arguments of `{}` do not satisfy its schema: {p}",
            call.name
        )
    })
}

/// Compiled schemas kept (a point's tools are few; compiling is the slow part).
const VALIDATORS_KEPT: usize = 64;

/// A tool's `parameters` compiled, None where the crate cannot compile them.
type Compiled = Option<Arc<jsonschema::Validator>>;

/// The schemas compiled so far, by their text (the same tools are judged for every request).
static VALIDATORS: Mutex<Vec<(Value, Compiled)>> = Mutex::new(Vec::new());

/// `schema` compiled in the draft it declares (2020-12 without `$schema`), from the cache.
fn compiled(schema: &Value) -> Compiled {
    let mut kept = VALIDATORS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, v)) = kept.iter().find(|(s, _)| s == schema) {
        return v.clone();
    }
    let v = jsonschema::validator_for(schema).ok().map(Arc::new);
    if kept.len() >= VALIDATORS_KEPT {
        kept.remove(0);
    }
    kept.push((schema.clone(), v.clone()));
    v
}

/// The first place `value` breaks `schema`, as `at: why` in the crate's words; None when it
/// satisfies it (or the schema cannot be compiled: see the module's note).
pub(crate) fn schema_problem(schema: &Value, value: &Value) -> Option<String> {
    let validator = compiled(schema)?;
    let e = validator.validate(value).err()?;
    let at = e.instance_path().as_str();
    Some(format!("{}: {e}", if at.is_empty() { "/" } else { at }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"},
                           "unit": {"type": "string", "enum": ["c", "f"]},
                           "days": {"type": "array", "items": {"type": "integer"}}},
            "required": ["city"]}}}),
        ]
    }

    fn streamed(pieces: &[Value]) -> ToolCalls {
        let mut calls = ToolCalls::default();
        for p in pieces {
            calls.delta(std::slice::from_ref(p));
        }
        calls
    }

    fn piece(index: u64, name: Option<&str>, args: &str) -> Value {
        let mut f = json!({"arguments": args});
        if let Some(n) = name {
            f["name"] = n.into();
        }
        json!({"index": index, "id": "call_1", "type": "function", "function": f})
    }

    #[test]
    fn arguments_streamed_in_pieces_are_assembled_and_judged_by_the_schema() {
        let good = streamed(&[
            piece(0, Some("get_weather"), ""),
            piece(0, None, "{\"city\": \"Pa"),
            piece(0, None, "ris\", \"days\": [1, 2]}"),
        ]);
        assert_eq!(
            good.judge(&tools()),
            Judged {
                count: 1,
                valid: Some(true),
                invalid: None
            }
        );
        let cases = [
            (piece(0, Some("get_wether"), "{}"), "not a declared tool"),
            (piece(0, Some("get_weather"), "{\"city\": "), "not JSON"),
            (
                piece(0, Some("get_weather"), "{}"),
                "/: \"city\" is a required property",
            ),
            (
                piece(0, Some("get_weather"), "{\"city\": 3}"),
                "/city: 3 is not of type \"string\"",
            ),
            (
                piece(0, Some("get_weather"), "{\"city\": \"x\", \"unit\": \"k\"}"),
                "/unit: \"k\" is not one of ",
            ),
            (
                piece(0, Some("get_weather"), "{\"city\": \"x\", \"days\": [1.5]}"),
                "/days/0: 1.5 is not of type \"integer\"",
            ),
        ];
        for (p, why) in cases {
            let j = streamed(&[p]).judge(&tools());
            assert_eq!(j.valid, Some(false));
            assert!(j.invalid.as_deref().unwrap().contains(why), "{j:?} {why}");
        }
        assert_eq!(ToolCalls::default().judge(&tools()).valid, None);
    }

    /// MiniMax through NVIDIA NIM and Fireworks send `function.name` (and `id`) in every
    /// piece of a call: one name, as they mean it, for each of two calls; pieces without an
    /// `index` go by their `id`.
    #[test]
    fn a_name_repeated_in_every_piece_is_one_name() {
        let repeated = |index: Option<u64>, id: &str, args: &str| {
            let mut p = json!({"id": id, "type": "function",
                               "function": {"name": "get_weather", "arguments": args}});
            if let Some(i) = index {
                p["index"] = i.into();
            }
            p
        };
        let indexed: [fn(u64) -> Option<u64>; 2] = [Some, |_| None];
        for index in indexed {
            let j = streamed(&[
                repeated(index(0), "call_a", ""),
                repeated(index(0), "call_a", "{\"city\": "),
                repeated(index(0), "call_a", "\"Paris\"}"),
                repeated(index(1), "call_b", "{\"city\""),
                repeated(index(1), "call_b", ": \"Oslo\"}"),
            ])
            .judge(&tools());
            assert_eq!(
                j,
                Judged {
                    count: 2,
                    valid: Some(true),
                    invalid: None
                }
            );
        }
        // A name streamed in pieces is still put together.
        let split = streamed(&[
            piece(0, Some("get_"), ""),
            piece(0, Some("weather"), "{\"city\": \"x\"}"),
        ]);
        assert_eq!(split.judge(&tools()).valid, Some(true));
    }

    /// `minimum`, `pattern`, `oneOf` and `$ref` (keywords the old hand-written subset let
    /// through) judge calls as the `jsonschema` crate does, in the draft the schema declares.
    #[test]
    fn arguments_are_judged_by_the_jsonschema_crate_in_the_declared_draft() {
        let schema = json!({
            "type": "object",
            "$defs": {"day": {"type": "integer", "minimum": 1, "maximum": 14}},
            "properties": {
                "city": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
                "days": {"$ref": "#/$defs/day"},
                "unit": {"oneOf": [{"const": "c"}, {"const": "f"}, {"type": "integer"}]},
                "temp": {"type": "number", "minimum": -90}
            },
            "required": ["city"]
        });
        let tools = vec![json!({"type": "function",
                               "function": {"name": "f", "parameters": schema.clone()}})];
        let judge = |args: &str| streamed(&[piece(0, Some("f"), args)]).judge(&tools);
        let oracle = jsonschema::validator_for(&schema).unwrap();
        for args in [
            r#"{"city": "Paris", "days": 3, "unit": "c", "temp": -10}"#,
            r#"{"city": "paris"}"#,
            r#"{"city": "Paris", "days": 0}"#,
            r#"{"city": "Paris", "days": 15}"#,
            r#"{"city": "Paris", "unit": "k"}"#,
            r#"{"city": "Paris", "unit": 2}"#,
            r#"{"city": "Paris", "temp": -100}"#,
        ] {
            let value: Value = serde_json::from_str(args).unwrap();
            let j = judge(args);
            assert_eq!(j.valid, Some(oracle.is_valid(&value)), "{args}: {j:?}");
        }
        let why = |args: &str| judge(args).invalid.unwrap();
        assert!(why(r#"{"city": "paris"}"#).contains("/city: \"paris\" does not match"));
        assert!(
            why(r#"{"city": "Paris", "days": 0}"#)
                .contains("/days: 0 is less than the minimum of 1")
        );
        assert!(why(r#"{"city": "Paris", "unit": "k"}"#).contains("/unit: "));
        // A schema declaring draft-07 is judged as draft-07: there `$ref` beside other
        // keywords replaces them (the `maximum` here is ignored), in 2020-12 it does not.
        let both = |draft: Option<&str>| {
            let mut s = json!({"type": "object", "properties": {"n": {
                "$ref": "#/definitions/n", "maximum": 3}},
                "definitions": {"n": {"type": "integer"}}});
            if let Some(d) = draft {
                s["$schema"] = d.into();
            }
            let tools = vec![json!({"type": "function",
                                   "function": {"name": "f", "parameters": s}})];
            streamed(&[piece(0, Some("f"), r#"{"n": 5}"#)])
                .judge(&tools)
                .valid
        };
        assert_eq!(
            both(Some("http://json-schema.org/draft-07/schema#")),
            Some(true)
        );
        assert_eq!(both(None), Some(false));
        // A schema the crate cannot compile here (a `$ref` over the network, which servebench
        // never fetches; a `$schema` it does not know) leaves the call judged by its name and
        // JSON only, without a panic or a request.
        for parameters in [
            json!({"type": "object", "properties": {"n": {"$ref": "https://example.invalid/n.json"}}}),
            json!({"$schema": "https://example.invalid/my-draft", "type": "object"}),
        ] {
            let tools = vec![json!({"type": "function",
                                   "function": {"name": "f", "parameters": parameters}})];
            let judged = |args: &str| streamed(&[piece(0, Some("f"), args)]).judge(&tools);
            assert_eq!(judged(r#"{"n": 5}"#).valid, Some(true), "{tools:?}");
            assert_eq!(judged(r#"{"n": "#).valid, Some(false), "{tools:?}");
        }
        assert_eq!(
            both(Some("https://json-schema.org/draft/2020-12/schema")),
            Some(false)
        );
    }

    #[test]
    fn calls_are_kept_within_their_bounds() {
        let long = "x".repeat(ARGUMENT_BYTES + 1);
        let j = streamed(&[piece(0, Some("get_weather"), &long)]).judge(&tools());
        assert!(j.invalid.unwrap().contains("longer than"));
        let many: Vec<Value> = (0..CALLS as u64 + 4)
            .map(|i| piece(i, Some("get_weather"), "{\"city\": \"x\"}"))
            .collect();
        let j = streamed(&many).judge(&tools());
        assert_eq!(j.count, CALLS as u32);
        assert!(j.invalid.unwrap().contains("more than 16"));
    }
}
