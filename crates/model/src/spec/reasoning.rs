//! Thinking markers: where a reasoning model's thinking ends in a text stream that the server
//! does not split for the client (SGLang's `/generate`, the completions APIs), by the reasoning
//! parser the server was launched with (`server.args.reasoning-parser`).
//!
//! Chat streams need none of this: with a reasoning parser the server sends thinking in its
//! own field (`delta.reasoning_content` on SGLang and llama.cpp, `delta.reasoning` on vLLM).
//! The markers below are SGLang 0.5.23's (`sglang/srt/parser/reasoning_parser.py`,
//! `ReasoningParser.DetectorMap` and each detector's `__init__`); a parser whose markers depend
//! on the tokenizer or on a state machine of its own is not listed, and `validate` refuses it
//! where markers would be needed.

use serde::Deserialize;
use serde_json::Value;

use super::types::Engine;
use super::validate::{Problem, Target};

/// The markers of one reasoning parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinkMarkers {
    /// Text that opens thinking (stripped when the output starts with it).
    pub start: &'static str,
    /// Text that closes thinking: what follows is the answer.
    pub end: &'static str,
    /// The parser takes the output to be thinking from its first token, start marker or not
    /// (SGLang's `force_reasoning`: DeepSeek-R1's template opens the block in the prompt).
    pub starts_thinking: bool,
    /// Text that ends thinking without the end marker: a tool call opened inside it
    /// (SGLang's `tool_start_token`).
    pub tool_start: Option<&'static str>,
}

const THINK: (&str, &str) = ("<think>", "</think>");

const fn think(starts_thinking: bool, tool_start: Option<&'static str>) -> ThinkMarkers {
    ThinkMarkers {
        start: THINK.0,
        end: THINK.1,
        starts_thinking,
        tool_start,
    }
}

/// SGLang 0.5.23's parser names (`--reasoning-parser` choices) and their markers.
const SGLANG: &[(&str, ThinkMarkers)] = &[
    ("deepseek-r1", think(true, None)),
    ("step3", think(true, None)),
    ("step3p5", think(true, None)),
    ("gigachat35", think(true, None)),
    ("qwen3", think(false, Some("<tool_call>"))),
    // `qwen3-thinking` and `minimax` force reasoning (ReasoningParser.__init__).
    ("qwen3-thinking", think(true, Some("<tool_call>"))),
    ("minimax", think(true, Some("<tool_call>"))),
    ("nanbeige", think(false, Some("<tool_call>"))),
    ("dots", think(false, Some("<tool_call>"))),
    ("interns1", think(false, Some("<tool_call>"))),
    ("deepseek-v3", think(false, Some("<tool_call>"))),
    ("mimo", think(false, Some("<tool_call>"))),
    ("poolside_v1", think(false, Some("<tool_call>"))),
    (
        "kimi_k2",
        think(false, Some("<|tool_calls_section_begin|>")),
    ),
    ("glm45", think(false, Some("<tool_call>"))),
    ("nemotron_3", think(false, Some("<tool_call>"))),
    ("granite_thinking_parser", think(false, Some("<tool_call>"))),
    ("minimax-append-think", think(false, None)),
    (
        "kimi",
        ThinkMarkers {
            start: "◁think▷",
            end: "◁/think▷",
            starts_thinking: false,
            tool_start: None,
        },
    ),
    (
        "mistral",
        ThinkMarkers {
            start: "[THINK]",
            end: "[/THINK]",
            starts_thinking: false,
            tool_start: None,
        },
    ),
    (
        "minimax-m3",
        ThinkMarkers {
            start: "<mm:think>",
            end: "</mm:think>",
            starts_thinking: false,
            tool_start: None,
        },
    ),
    (
        "gpt-oss",
        ThinkMarkers {
            start: "<|channel|>analysis<|message|>",
            end: "<|end|>",
            starts_thinking: true,
            tool_start: None,
        },
    ),
    (
        "apertus2509",
        ThinkMarkers {
            start: "<|inner_prefix|>",
            end: "<|inner_suffix|>",
            starts_thinking: false,
            tool_start: None,
        },
    ),
    (
        "cohere_command4",
        ThinkMarkers {
            start: "<|START_THINKING|>",
            end: "<|END_THINKING|>",
            starts_thinking: false,
            tool_start: None,
        },
    ),
];

/// SGLang 0.5.23 parser names whose markers come from the tokenizer or a parser of their own
/// (harmony-style channels, special-token tables): SGLang takes them, servebench cannot find
/// their thinking in text.
const SGLANG_WITHOUT_MARKERS: &[&str] = &[
    // Detected from the chat template or the checkpoint at start-up.
    "auto",
    "beam",
    "deepseek-v4",
    "deepseek-v41",
    "ling3",
    "hunyuan",
    "k2_horizon",
    "kimi_k3",
    "muse",
    "gemma4",
    "inkling",
    "iquest_q1",
    "response_template",
];

/// What servebench knows of a parser name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParserKnowledge {
    /// Its markers.
    Markers(ThinkMarkers),
    /// SGLang takes the name, but its thinking cannot be found in text by markers.
    NoMarkers,
    /// SGLang refuses the name at launch.
    Unknown,
}

/// SGLang's reasoning parser `name`, spelled exactly (`--reasoning-parser` is an argparse
/// choice, so `DeepSeek-R1` is refused at launch).
pub fn sglang_parser(name: &str) -> ParserKnowledge {
    if let Some((_, m)) = SGLANG.iter().find(|(n, _)| *n == name) {
        return ParserKnowledge::Markers(*m);
    }
    if SGLANG_WITHOUT_MARKERS.contains(&name) {
        return ParserKnowledge::NoMarkers;
    }
    ParserKnowledge::Unknown
}

/// Every SGLang parser name servebench has markers for, in table order.
pub(crate) fn sglang_parsers_with_markers() -> impl Iterator<Item = &'static str> {
    SGLANG.iter().map(|(n, _)| *n)
}

/// Every name SGLang 0.5.23 accepts for `--reasoning-parser`.
pub fn sglang_parser_names() -> impl Iterator<Item = &'static str> {
    sglang_parsers_with_markers().chain(SGLANG_WITHOUT_MARKERS.iter().copied())
}

/// The reasoning parser a server section launches with: `server.args.reasoning-parser` (or
/// `reasoning_parser`), when it is a string.
pub(crate) fn launched_parser(server: &Value) -> Option<(&'static str, &str)> {
    let args = server.get("args")?.as_object()?;
    for key in ["reasoning-parser", "reasoning_parser"] {
        if let Some(v) = args.get(key).and_then(Value::as_str) {
            return Some((key, v));
        }
    }
    None
}

/// Whether a server section, as written, speaks SGLang's API ([`Engine::speaks_sglang`]); no
/// `engine` is the simulator, the default.
fn speaks_sglang(server: &Value) -> bool {
    let engine = match server.get("engine") {
        None => Some(Engine::default()),
        Some(e) => Engine::deserialize(e).ok(),
    };
    let api = server
        .get("args")
        .and_then(|a| a.get("api"))
        .and_then(Value::as_str);
    engine.is_some_and(|e| e.speaks_sglang(api))
}

/// `validate`'s checks: an SGLang parser SGLang does not know (it would refuse to start), and
/// a text API (not chat) against a parser whose markers servebench does not know (its
/// thinking could not be told from its answer: every token would count as answer).
pub(crate) fn checks(raw: &Value) -> Vec<Problem> {
    let Some(server) = raw.get("server") else {
        return Vec::new();
    };
    let Some((key, name)) = launched_parser(server) else {
        return Vec::new();
    };
    if !speaks_sglang(server) || super::template::has_template(name) {
        return Vec::new();
    }
    let pointer = format!("/server/args/{key}");
    let api = raw
        .get("workload")
        .and_then(|w| w.get("api"))
        .and_then(Value::as_str)
        .unwrap_or("sglang-generate");
    match sglang_parser(name) {
        ParserKnowledge::Markers(_) => Vec::new(),
        ParserKnowledge::Unknown => vec![Problem {
            pointer,
            target: Target::Value,
            message: format!(
                "`{name}` is not one of SGLang's reasoning parsers (SGLang would refuse to start)"
            ),
            hint: Some(
                super::diagnostics::did_you_mean(name, sglang_parser_names()).unwrap_or_else(
                    || {
                        format!(
                            "SGLang 0.5.23 takes: {}",
                            sglang_parser_names().collect::<Vec<_>>().join(", ")
                        )
                    },
                ),
            ),
        }],
        ParserKnowledge::NoMarkers if api != "openai-chat" => vec![Problem {
            pointer,
            target: Target::Value,
            message: format!(
                "servebench does not know where the thinking of SGLang's `{name}` reasoning parser ends in text, so on `{api}` it could not tell thinking tokens from answer tokens"
            ),
            hint: Some(format!(
                "use `workload.api: openai-chat` (the server then sends thinking in its own field), or a parser with known markers: {}",
                sglang_parsers_with_markers().collect::<Vec<_>>().join(", ")
            )),
        }],
        ParserKnowledge::NoMarkers => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parsers_are_looked_up_as_sglangs_argparse_spells_them() {
        assert_eq!(
            sglang_parser("deepseek-r1"),
            ParserKnowledge::Markers(think(true, None))
        );
        assert_eq!(sglang_parser("DeepSeek-R1"), ParserKnowledge::Unknown);
        assert_eq!(sglang_parser("auto"), ParserKnowledge::NoMarkers);
        let ParserKnowledge::Markers(k) = sglang_parser("kimi") else {
            panic!()
        };
        assert_eq!((k.start, k.end), ("◁think▷", "◁/think▷"));
        assert_eq!(sglang_parser("gemma4"), ParserKnowledge::NoMarkers);
        assert_eq!(sglang_parser("qwen4"), ParserKnowledge::Unknown);
    }

    #[test]
    fn an_unknown_parser_and_markers_servebench_lacks_are_refused_where_they_matter() {
        let spec = |parser: &str, api: &str| {
            json!({"server": {"engine": "sglang", "args": {"reasoning-parser": parser}},
                   "workload": {"api": api}})
        };
        let p = checks(&spec("qwen", "openai-chat"));
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].pointer, "/server/args/reasoning-parser");
        assert!(p[0].hint.as_deref().unwrap().contains("qwen3"), "{p:?}");
        assert!(checks(&spec("gemma4", "openai-chat")).is_empty());
        let p = checks(&spec("gemma4", "sglang-generate"));
        assert!(p[0].message.contains("thinking"), "{p:?}");
        assert!(checks(&spec("qwen3", "openai-completions")).is_empty());
        // vLLM's own names are vLLM's to judge.
        let vllm =
            json!({"server": {"engine": "vllm", "args": {"reasoning-parser": "deepseek_r1"}}});
        assert!(checks(&vllm).is_empty());
    }

    #[test]
    fn the_simulator_speaks_sglang_as_the_run_judges_it_also_when_engine_is_left_out() {
        let spec = |server: Value| json!({"server": server, "workload": {"api": "openai-chat"}});
        let args = json!({"reasoning-parser": "qwen"});
        // No `engine`: the simulator, the default, on its SGLang surface.
        assert_eq!(checks(&spec(json!({"args": args}))).len(), 1);
        assert_eq!(
            checks(&spec(json!({"engine": "sim", "args": args}))).len(),
            1
        );
        let vllm_surface =
            json!({"engine": "sim", "args": {"reasoning-parser": "qwen", "api": "vllm"}});
        assert!(checks(&spec(vllm_surface)).is_empty());
        // The same rule as the typed server's.
        for (engine, api, speaks) in [
            (Engine::Sim, None, true),
            (Engine::Sim, Some("sglang"), true),
            (Engine::Sim, Some("vllm"), false),
            (Engine::Sglang, Some("vllm"), true),
            (Engine::Vllm, None, false),
            (Engine::LlamaCpp, None, false),
            (Engine::Command, None, false),
        ] {
            assert_eq!(engine.speaks_sglang(api), speaks, "{engine} {api:?}");
        }
    }
}
