//! The simulated model calls tools. A chat request that declares `tools` (and a `tool_choice`
//! other than `none`) gets its answer as one streamed call: the named function of
//! `tool_choice`, else the first tool, with arguments made from its schema (its required
//! properties, each a value of its type), `PIECE_BYTES` of arguments per answer token. Each
//! surface writes the call's pieces in its engine's own shape ([`CallShape`]), when the engine
//! was launched to split calls from text:
//!
//! - SGLang, with `--tool-call-parser`: serving_chat.py parses calls only `if
//!   self.tool_call_parser` (0.5.23); without it the call is the model's raw text in
//!   `content`, and the client sees no call.
//! - vLLM, with `--enable-auto-tool-choice --tool-call-parser X`: the tool parser is loaded
//!   only with both (parser/parser_manager.py `get_tool_parser`); without it vLLM refuses any
//!   `tool_choice` but `none` (renderers/online_renderer.py `render_chat`), so a call is always
//!   split when one is made.
//! - llama.cpp, with `--jinja` (on by default): without it llama-server refuses `tools`
//!   (server-common.cpp `oaicompat_chat_params_parse`); it reads `tool_choice` as a string, so
//!   a named choice is `auto` there and the model calls the first tool.
//!
//! The fault `--sim-broken-tool-calls-above-batch N` breaks the arguments (not JSON) of a
//! call made while more than N chat requests are live, as a server that breaks under load.
//! `--sim-repeat-tool-call-names` repeats the call's `id` and `function.name` in every piece
//! (MiniMax through NVIDIA NIM, Fireworks), which a client must read as one name.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Map, Value, json};

use crate::config::SimConfig;
use crate::types::Output;

/// Bytes of arguments one answer token carries.
const PIECE_BYTES: usize = 8;

/// How an engine writes a call's pieces in `delta.tool_calls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallShape {
    /// SGLang: the first piece carries `index`, `function.arguments`, `id`, `type` and
    /// `function.name`; the rest `index` and `function.arguments`.
    Sglang,
    /// vLLM (tool_parsers/hermes_tool_parser.py and peers): the name alone first, `{index,
    /// type, id, function: {name}}`, on the call's first token; then `{index, function:
    /// {arguments}}` pieces, each the arguments parsed since the last.
    Vllm,
    /// llama.cpp (server-chat.cpp `server_chat_msg_diff_to_json_oaicompat`): `{index, id,
    /// type, function: {name, arguments}}` first, then `{index, function: {arguments}}`;
    /// empty `arguments` left out.
    LlamaCpp,
}

/// What a surface plans calls with: its shape, whether its engine splits calls from text,
/// and the fault.
pub(crate) struct Caller<'a> {
    pub shape: CallShape,
    /// The engine splits calls into `tool_calls` (else a call is content text).
    pub parsed: bool,
    broken_above: Option<u64>,
    repeat_names: bool,
    live: &'a Arc<AtomicUsize>,
}

impl<'a> Caller<'a> {
    /// The caller of a server launched as `cfg` says, for its surface's `shape`.
    pub(crate) fn of(cfg: &'a SimConfig, shape: CallShape) -> Caller<'a> {
        Caller {
            shape,
            parsed: cfg.tool_call_parser,
            broken_above: cfg.broken_tool_calls_above,
            repeat_names: cfg.repeat_tool_call_names,
            live: &cfg.live_tool_calls,
        }
    }
}

/// The call one request makes.
#[derive(Debug)]
pub(crate) struct PlannedCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
    shape: CallShape,
    /// The engine splits it into `tool_calls` (else it is content text).
    parsed: bool,
    /// `tool_choice` was `auto` or left out (vLLM's "auto tools called").
    pub auto: bool,
    /// Every piece repeats the call's `id` and name (`--sim-repeat-tool-call-names`).
    repeat_names: bool,
    /// Bytes of the streamed text (arguments, or the raw text) sent so far.
    sent: AtomicUsize,
    /// The call's opening piece (its id and name) is sent.
    opened: AtomicBool,
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

/// The call `body` asks for, if any: tools declared and `tool_choice` not `none`. `id` is
/// the call's id in the engine's format.
pub(crate) fn plan(body: &Value, caller: &Caller<'_>, id: String) -> Option<PlannedCall> {
    let tools = body.get("tools")?.as_array().filter(|t| !t.is_empty())?;
    let choice = body.get("tool_choice");
    if choice.and_then(Value::as_str) == Some("none") {
        return None;
    }
    let named = choice
        .and_then(|c| c.pointer("/function/name"))
        .and_then(Value::as_str)
        .filter(|_| caller.shape != CallShape::LlamaCpp);
    let tool = match named {
        Some(n) => tools
            .iter()
            .find(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(n))?,
        None => &tools[0],
    };
    let name = tool.pointer("/function/name")?.as_str()?.to_string();
    let now = caller.live.fetch_add(1, Ordering::Relaxed) + 1;
    let mut arguments = value_for(&tool["function"]["parameters"], 0).to_string();
    if caller.broken_above.is_some_and(|n| now as u64 > n) {
        // Cut mid-value: what a server whose constrained decoding broke would stream.
        arguments.truncate(arguments.len() / 2);
    }
    Some(PlannedCall {
        id,
        name,
        arguments,
        shape: caller.shape,
        parsed: caller.parsed,
        auto: choice.is_none_or(|c| c.as_str() == Some("auto")),
        repeat_names: caller.repeat_names,
        sent: AtomicUsize::new(0),
        opened: AtomicBool::new(false),
        _live: Live(Arc::clone(caller.live)),
    })
}

/// Answer tokens of `o` (those after the request's `think` thinking tokens): how many it
/// brings, and how many there are with them.
pub(crate) fn answer_tokens(o: &Output, think: u64) -> (u64, u64) {
    let before = o.completion_tokens.saturating_sub(o.new_ids.len() as u64);
    let so_far = o.completion_tokens.saturating_sub(think);
    (so_far.saturating_sub(before.saturating_sub(think)), so_far)
}

/// Adds output `o`'s answer to a non-streamed chat's `content` as its stream would have
/// carried it: `text` (its answer text) without a call; with one, the call's raw text where the
/// engine does not split calls, and after the call the text the model writes on. The split call
/// itself is [`PlannedCall::whole`].
pub(crate) fn gather(
    call: Option<&PlannedCall>,
    o: &Output,
    think: u64,
    text: &str,
    content: &mut String,
) {
    let Some(call) = call else {
        content.push_str(text);
        return;
    };
    let (count, answered) = answer_tokens(o, think);
    if count == 0 {
        return;
    }
    match call.delta(answered, o.finish.is_some()) {
        Some(("content", piece)) => content.push_str(piece.as_str().unwrap_or_default()),
        Some(_) => {}
        None if call.complete() => content.push_str(text),
        None => {}
    }
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
    /// The delta once the request has written `answered` answer tokens (this output's
    /// included; `last` when the request ends with them, and the rest goes with them): a
    /// `tool_calls` entry when the engine splits calls, else content text; None when this
    /// output adds nothing to what was sent.
    pub(crate) fn delta(&self, answered: u64, last: bool) -> Option<(&'static str, Value)> {
        if !self.parsed {
            let raw = self.text();
            let piece = self.advance(&raw, answered, last)?;
            return Some(("content", piece.into()));
        }
        let opened = self.opened.swap(true, Ordering::Relaxed);
        if self.shape == CallShape::Vllm && !opened {
            // The parser sends the name as soon as it has it, the arguments after
            // (`DeltaToolCall`'s fields in their order: id, type, index, function).
            let mut call = json!({"id": self.id, "type": "function", "index": 0,
                                  "function": {"name": self.name}});
            if last && let Some(all) = self.advance(&self.arguments, u64::MAX, true) {
                call["function"]["arguments"] = all.into();
            }
            return Some(("tool_calls", json!([call])));
        }
        let mut call = json!({"index": 0});
        // vLLM's name took the call's first token.
        let tokens = match self.shape {
            CallShape::Vllm => answered.saturating_sub(1),
            CallShape::Sglang | CallShape::LlamaCpp => answered,
        };
        let piece = match self.advance(&self.arguments, tokens, last) {
            Some(p) => p,
            None if !opened => "",
            None => return None,
        };
        match (self.shape, opened) {
            (CallShape::Sglang, false) => {
                call["function"] = json!({"arguments": piece});
                call["id"] = self.id.clone().into();
                call["type"] = "function".into();
                call["function"]["name"] = self.name.clone().into();
            }
            (CallShape::LlamaCpp, false) => {
                call["id"] = self.id.clone().into();
                call["type"] = "function".into();
                call["function"] = json!({"name": self.name});
                if !piece.is_empty() {
                    call["function"]["arguments"] = piece.into();
                }
            }
            _ if self.repeat_names => {
                call["id"] = self.id.clone().into();
                call["type"] = "function".into();
                call["function"] = json!({"name": self.name, "arguments": piece});
            }
            _ => call["function"] = json!({"arguments": piece}),
        }
        Some(("tool_calls", json!([call])))
    }

    /// The whole call is sent: the model writes on after it (under `ignore_eos`), and the
    /// engines' parsers pass text outside a call through as content (SGLang's
    /// `parse_stream_chunk` normal text, vLLM's parsers' `content`, llama.cpp's message diff),
    /// a chunk a token as before the call.
    pub(crate) fn complete(&self) -> bool {
        let whole = if self.parsed {
            if !self.opened.load(Ordering::Relaxed) {
                return false;
            }
            self.arguments.len()
        } else {
            self.text().len()
        };
        self.sent.load(Ordering::Relaxed) >= whole
    }

    /// The next piece of `whole` once `tokens` tokens of it are written (all of it when
    /// `last`); None when there is nothing new.
    fn advance<'w>(&self, whole: &'w str, tokens: u64, last: bool) -> Option<&'w str> {
        let end = if last {
            whole.len()
        } else {
            usize::try_from(tokens)
                .unwrap_or(usize::MAX)
                .saturating_mul(PIECE_BYTES)
                .min(whole.len())
        };
        // Arguments are JSON text of ASCII keys and values the simulator made, but a cut
        // must still fall on a character boundary.
        let end = (0..=end)
            .rev()
            .find(|&i| whole.is_char_boundary(i))
            .unwrap_or(0);
        let start = self.sent.load(Ordering::Relaxed);
        if end <= start {
            return None;
        }
        self.sent.store(end, Ordering::Relaxed);
        whole.get(start..end)
    }

    /// The call as a non-streamed response's `message.tool_calls` entry, what its stream
    /// would have carried; None where the engine does not split calls or the call never began
    /// (no answer token). SGLang's `ToolCall` carries `index` (protocol.py); vLLM's `id`,
    /// `type`, `function` (engine/protocol.py); llama.cpp's `type`, `function`, `id`
    /// (chat.cpp `to_json_oaicompat`).
    pub(crate) fn whole(&self) -> Option<Value> {
        if !self.parsed || !self.opened.load(Ordering::Relaxed) {
            return None;
        }
        let sent = self.sent.load(Ordering::Relaxed);
        let arguments = self.arguments.get(..sent).unwrap_or(&self.arguments);
        let mut call = json!({"id": self.id, "type": "function",
                              "function": {"name": self.name, "arguments": arguments}});
        if self.shape == CallShape::Sglang {
            call["index"] = 0.into();
        }
        Some(call)
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

    fn caller(shape: CallShape, broken_above: Option<u64>, live: &Arc<AtomicUsize>) -> Caller<'_> {
        Caller {
            shape,
            parsed: true,
            broken_above,
            repeat_names: false,
            live,
        }
    }

    /// `--sim-repeat-tool-call-names`: every piece carries the id and the whole name again.
    #[test]
    fn a_repeating_server_names_the_call_in_every_piece() {
        let live = Arc::new(AtomicUsize::new(0));
        let repeating = Caller {
            repeat_names: true,
            ..caller(CallShape::Sglang, None, &live)
        };
        let c = plan(&named_b(), &repeating, "id1".into()).unwrap();
        let d = deltas(&c, 40);
        assert!(d.len() > 2);
        for piece in &d {
            assert_eq!(piece["function"]["name"], "b", "{piece}");
            assert_eq!(piece["id"], "id1", "{piece}");
        }
        assert_eq!(joined(&d), c.arguments);
    }

    fn named_b() -> Value {
        body(json!({"type": "function", "function": {"name": "b"}}))
    }

    /// Every delta of a call written one token at a time until `tokens`, the last one last.
    fn deltas(c: &PlannedCall, tokens: u64) -> Vec<Value> {
        (1..=tokens)
            .filter_map(|k| c.delta(k, k == tokens))
            .map(|(field, v)| {
                assert_eq!(field, "tool_calls");
                v[0].clone()
            })
            .collect()
    }

    fn joined(pieces: &[Value]) -> String {
        pieces
            .iter()
            .filter_map(|p| p["function"]["arguments"].as_str())
            .collect()
    }

    #[test]
    fn a_call_names_the_chosen_tool_with_arguments_from_its_schema() {
        let live = Arc::new(AtomicUsize::new(0));
        let sglang = caller(CallShape::Sglang, None, &live);
        let c = plan(&named_b(), &sglang, "call_r".into()).unwrap();
        assert_eq!(c.name, "b");
        let args: Value = serde_json::from_str(&c.arguments).unwrap();
        assert_eq!(args, json!({"n": 1, "u": "c", "xs": ["sim"]}));
        let auto = plan(&body(json!("auto")), &sglang, "x".into()).unwrap();
        assert_eq!(auto.name, "a");
        assert!(plan(&body(json!("none")), &sglang, "x".into()).is_none());
        // llama.cpp reads `tool_choice` as a string: a named one is `auto` there.
        let llama = caller(CallShape::LlamaCpp, None, &live);
        assert_eq!(plan(&named_b(), &llama, "x".into()).unwrap().name, "a");
        drop((c, auto));
        assert_eq!(live.load(Ordering::Relaxed), 0);
    }

    /// Each engine's first piece, then argument pieces that put the arguments back together,
    /// with nothing after they are all sent.
    #[test]
    fn each_engine_writes_a_call_in_its_own_shape() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut only_b = named_b();
        only_b["tools"].as_array_mut().unwrap().remove(0);
        let plan_as = |shape| plan(&only_b, &caller(shape, None, &live), "id1".into()).unwrap();
        let c = plan_as(CallShape::Sglang);
        let d = deltas(&c, 40);
        assert_eq!(
            d[0],
            json!({"index": 0, "function": {"arguments": &c.arguments[..8], "name": "b"},
                   "id": "id1", "type": "function"})
        );
        assert_eq!(
            d[1],
            json!({"index": 0, "function": {"arguments": &c.arguments[8..16]}})
        );
        assert_eq!(joined(&d), c.arguments);
        assert_eq!(d.len(), c.arguments.len().div_ceil(PIECE_BYTES));

        let c = plan_as(CallShape::Vllm);
        let d = deltas(&c, 40);
        assert_eq!(
            serde_json::to_string(&d[0]).unwrap(),
            r#"{"id":"id1","type":"function","index":0,"function":{"name":"b"}}"#
        );
        assert_eq!(
            d[1],
            json!({"index": 0, "function": {"arguments": &c.arguments[..8]}})
        );
        assert_eq!(joined(&d), c.arguments);

        let c = plan_as(CallShape::LlamaCpp);
        let d = deltas(&c, 40);
        assert_eq!(
            serde_json::to_string(&d[0]).unwrap(),
            format!(
                r#"{{"index":0,"id":"id1","type":"function","function":{{"name":"b","arguments":{}}}}}"#,
                serde_json::to_string(&c.arguments[..8]).unwrap()
            )
        );
        assert_eq!(joined(&d), c.arguments);
    }

    /// Several tokens in one output (a speculative burst) carry their pieces together; a
    /// request that ends early sends the rest of the arguments with its last tokens.
    #[test]
    fn pieces_follow_the_tokens_and_the_last_output_takes_the_rest() {
        let live = Arc::new(AtomicUsize::new(0));
        let vllm = caller(CallShape::Vllm, None, &live);
        let c = plan(&named_b(), &vllm, "id".into()).unwrap();
        // The name takes the first output whole; its other tokens' pieces follow with the next.
        let (_, first) = c.delta(3, false).unwrap();
        assert!(first[0]["function"].get("arguments").is_none(), "{first}");
        let (_, next) = c.delta(4, false).unwrap();
        assert_eq!(next[0]["function"]["arguments"], &c.arguments[..24]);
        let (_, rest) = c.delta(5, true).unwrap();
        assert_eq!(rest[0]["function"]["arguments"], &c.arguments[24..]);
        assert!(c.delta(6, false).is_none());
        // One answer token in all: the name and the arguments in one piece.
        let one = plan(&named_b(), &vllm, "id".into()).unwrap();
        let (_, only) = one.delta(1, true).unwrap();
        assert_eq!(only[0]["function"]["arguments"], one.arguments);
        // Without a parser the call is the model's raw text, in content pieces.
        let raw = Caller {
            parsed: false,
            ..caller(CallShape::Sglang, None, &live)
        };
        let t = plan(&named_b(), &raw, "id".into()).unwrap();
        let text: String = (1..=60)
            .filter_map(|k| t.delta(k, k == 60))
            .map(|(field, v)| {
                assert_eq!(field, "content");
                v.as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(text, t.text());
    }

    #[test]
    fn answer_tokens_leave_out_thinking() {
        let out = |new: usize, completion: u64| Output {
            new_ids: vec![300; new],
            completion_tokens: completion,
            prompt_tokens: 5,
            cached_tokens: 0,
            finish: None,
            spec: None,
            slot: None,
            timings: None,
        };
        assert_eq!(answer_tokens(&out(2, 2), 3), (0, 0));
        assert_eq!(answer_tokens(&out(2, 4), 3), (1, 1));
        assert_eq!(answer_tokens(&out(2, 6), 3), (2, 3));
        assert_eq!(answer_tokens(&out(1, 1), 0), (1, 1));
    }

    #[test]
    fn calls_break_above_the_fault_batch() {
        let live = Arc::new(AtomicUsize::new(0));
        let faulty = caller(CallShape::Sglang, Some(1), &live);
        let first = plan(&body(json!("required")), &faulty, "1".into()).unwrap();
        assert!(serde_json::from_str::<Value>(&first.arguments).is_ok());
        let second = plan(&named_b(), &faulty, "2".into()).unwrap();
        assert!(serde_json::from_str::<Value>(&second.arguments).is_err());
    }
}
