//! Datasets in the formats people already have: ShareGPT conversations (a JSON list), JSONL
//! with a prompt or an input length and an output length per line (vLLM's `custom`), AIPerf's
//! `single_turn` files and SGLang's `custom` conversations. Read from disk within the prompt
//! files' budgets; never downloaded.

use std::path::Path;

use serde::Deserialize;

use servebench_model::spec::types::DatasetFormat;

use super::dist::MAX_LENGTH;
use super::file::{MAX_PROMPT_BYTES, MAX_PROMPTS, PromptError, read_bounded};

/// Most output tokens one entry may ask for (the spec's own limit).
const MAX_OUTPUT_TOKENS: u64 = 1_000_000;

/// One request of a dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetEntry {
    /// What the request sends: its own text, or generated text of a length.
    pub input: DatasetInput,
    /// Output tokens the entry asks for, when it says.
    pub output_tokens: Option<u64>,
    /// The reply in the dataset (ShareGPT): its length in the server's tokens is the output
    /// length when `output_tokens` is not given.
    pub reply: Option<String>,
}

/// A dataset request's input.
#[derive(Debug, Clone, PartialEq)]
pub enum DatasetInput {
    Text(String),
    /// Generated text of this many tokens (calibrated like a `random` prompt).
    Tokens(u64),
}

/// Reads a dataset file.
pub fn load_dataset(format: DatasetFormat, path: &Path) -> Result<Vec<DatasetEntry>, PromptError> {
    let text = read_bounded(path)?;
    let entries = match format {
        DatasetFormat::Jsonl => jsonl(path, &text)?,
        DatasetFormat::Sharegpt => sharegpt(path, &text)?,
        DatasetFormat::AiperfSingleTurn => lines(path, &text, aiperf_single_turn)?,
        DatasetFormat::SglangCustom => lines(path, &text, sglang_custom)?,
    };
    if entries.is_empty() {
        return Err(PromptError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(entries)
}

/// One JSONL line. Other fields are allowed (datasets carry ids, sources, timestamps).
#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

fn jsonl(path: &Path, text: &str) -> Result<Vec<DatasetEntry>, PromptError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |column: usize, message: String| PromptError::DatasetLine {
            path: path.to_path_buf(),
            line: i + 1,
            column,
            message,
        };
        let parsed: Line = serde_json::from_str(line).map_err(|e| at(e.column(), e.to_string()))?;
        let input = match (parsed.prompt, parsed.input_tokens) {
            (Some(p), None) if p.len() > MAX_PROMPT_BYTES => {
                return Err(at(
                    1,
                    format!(
                        "the prompt is {} bytes; one prompt is limited to {MAX_PROMPT_BYTES} bytes",
                        p.len()
                    ),
                ));
            }
            (Some(p), None) => DatasetInput::Text(p),
            (None, Some(n)) if (1..=MAX_LENGTH).contains(&n) => DatasetInput::Tokens(n),
            (None, Some(n)) => {
                return Err(at(
                    1,
                    format!("input_tokens {n} is outside 1..={MAX_LENGTH}"),
                ));
            }
            (Some(_), Some(_)) => {
                return Err(at(1, "give `prompt` or `input_tokens`, not both".into()));
            }
            (None, None) => {
                return Err(at(
                    1,
                    "no `prompt` (text) or `input_tokens` (a length): give one".into(),
                ));
            }
        };
        if let Some(n) = parsed.output_tokens
            && !(1..=MAX_OUTPUT_TOKENS).contains(&n)
        {
            return Err(at(
                1,
                format!("output_tokens {n} is outside 1..={MAX_OUTPUT_TOKENS}"),
            ));
        }
        if out.len() == MAX_PROMPTS {
            return Err(PromptError::TooMany {
                path: path.to_path_buf(),
            });
        }
        out.push(DatasetEntry {
            input,
            output_tokens: parsed.output_tokens,
            reply: None,
        });
    }
    Ok(out)
}

/// What is wrong with one line: the 1-based byte column and the message (with its fix).
type LineProblem = (usize, String);

/// A JSONL dataset read a line at a time by `parse` (None: the line is skipped, as its
/// format's own reader skips it), within the prompts' count budget.
fn lines(
    path: &Path,
    text: &str,
    parse: fn(&str) -> Result<Option<DatasetEntry>, LineProblem>,
) -> Result<Vec<DatasetEntry>, PromptError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let entry = parse(line).map_err(|(column, message)| PromptError::DatasetLine {
            path: path.to_path_buf(),
            line: i + 1,
            column,
            message,
        })?;
        if let Some(entry) = entry {
            if out.len() == MAX_PROMPTS {
                return Err(PromptError::TooMany {
                    path: path.to_path_buf(),
                });
            }
            out.push(entry);
        }
    }
    Ok(out)
}

/// The line as a JSON object.
fn object(line: &str) -> Result<serde_json::Map<String, serde_json::Value>, LineProblem> {
    match serde_json::from_str::<serde_json::Value>(line) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err((1, "each line must be a JSON object".into())),
        Err(e) => Err((e.column().max(1), format!("not a JSON object: {e}"))),
    }
}

/// The 1-based column of `"name"` in the line (1 when it is not there).
fn column_of(line: &str, name: &str) -> usize {
    line.find(&format!("\"{name}\"")).map_or(1, |i| i + 1)
}

/// A prompt's text, within the prompt budget.
fn prompt_text(line: &str, name: &str, text: &str) -> Result<String, LineProblem> {
    if text.len() > MAX_PROMPT_BYTES {
        return Err((
            column_of(line, name),
            format!(
                "`{name}` is {} bytes; one prompt is limited to {MAX_PROMPT_BYTES} bytes",
                text.len()
            ),
        ));
    }
    Ok(text.to_string())
}

/// AIPerf's `single_turn` line (`aiperf/dataset/loader/models.py` `SingleTurn`): its one
/// text and output length. What servebench would not send as AIPerf does is refused.
fn aiperf_single_turn(line: &str) -> Result<Option<DatasetEntry>, LineProblem> {
    let obj = object(line)?;
    let refuse = |name: &str, why: &str| Err((column_of(line, name), format!("`{name}`: {why}")));
    for name in ["timestamp", "delay"] {
        if obj.get(name).is_some_and(|v| !v.is_null()) {
            return refuse(
                name,
                "AIPerf's timing is not replayed with dataset prompts (they go at the point's own arrivals): remove it, or replay the timing as a trace of lengths (`load: { kind: trace }`)",
            );
        }
    }
    if obj.get("session_id").is_some_and(|v| !v.is_null()) {
        return refuse(
            "session_id",
            "AIPerf sends a session's lines as one conversation with its replies; servebench sends each line alone: remove it, or use `load: { kind: sessions }`",
        );
    }
    for name in [
        "image",
        "images",
        "image_uuids",
        "audio",
        "audios",
        "video",
        "videos",
        "extra",
    ] {
        if obj.get(name).is_some_and(|v| !v.is_null()) {
            return refuse(
                name,
                "servebench sends text prompts only, with its own request body: remove it",
            );
        }
    }
    if let Some(role) = obj.get("role").filter(|v| !v.is_null())
        && role.as_str() != Some("user")
    {
        return refuse("role", "servebench sends each prompt as the user's turn");
    }
    let text = match (obj.get("text"), obj.get("texts")) {
        (Some(serde_json::Value::String(t)), None) => prompt_text(line, "text", t)?,
        (None, Some(serde_json::Value::Array(list))) => match list.as_slice() {
            [serde_json::Value::String(t)] => prompt_text(line, "texts", t)?,
            [serde_json::Value::Object(o)] => match o.get("contents") {
                Some(serde_json::Value::Array(c)) => match c.as_slice() {
                    [serde_json::Value::String(t)] => prompt_text(line, "texts", t)?,
                    _ => {
                        return refuse(
                            "texts",
                            "one prompt a request: AIPerf's client-side batches (several texts) are not sent",
                        );
                    }
                },
                _ => {
                    return refuse(
                        "texts",
                        "a text object holds its prompt in `contents`: [\"...\"]",
                    );
                }
            },
            _ => {
                return refuse(
                    "texts",
                    "one prompt a request: AIPerf's client-side batches (several texts) are not sent",
                );
            }
        },
        (Some(_), Some(_)) => return refuse("texts", "give `text` or `texts`, not both"),
        (Some(_), None) => return refuse("text", "the prompt must be a string"),
        (None, Some(_)) => return refuse("texts", "a list of one string: `\"texts\": [\"...\"]`"),
        (None, None) => {
            return Err((
                1,
                "no `text`: give the line its prompt, `{\"text\": \"...\"}`".into(),
            ));
        }
    };
    let output_tokens = match obj.get("output_length") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_OUTPUT_TOKENS).contains(&n) => Some(n),
            _ => {
                return refuse(
                    "output_length",
                    &format!("{v} is not a whole number of tokens in 1..={MAX_OUTPUT_TOKENS}"),
                );
            }
        },
    };
    Ok(Some(DatasetEntry {
        input: DatasetInput::Text(text),
        output_tokens,
        reply: None,
    }))
}

/// SGLang's `custom` line (`sglang/benchmark/datasets/custom.py`): the first turn's text as
/// the prompt and the second's as the reply; a line of fewer turns is skipped, as SGLang
/// skips it. Images are not sent: a line with one is refused.
fn sglang_custom(line: &str) -> Result<Option<DatasetEntry>, LineProblem> {
    let obj = object(line)?;
    if obj.get("image").is_some_and(|v| !v.is_null()) {
        return Err((
            column_of(line, "image"),
            "`image`: servebench sends text prompts only: remove it".into(),
        ));
    }
    let (name, turns) = match (obj.get("conversations"), obj.get("conversation")) {
        (Some(t), _) => ("conversations", t),
        (None, Some(t)) => ("conversation", t),
        (None, None) => return Ok(None),
    };
    let Some(turns) = turns.as_array() else {
        return Err((
            column_of(line, name),
            format!("`{name}` must be a list of turns: [{{\"content\": \"...\"}}, ...]"),
        ));
    };
    let [first, second, ..] = turns.as_slice() else {
        return Ok(None);
    };
    let text = |turn: &serde_json::Value| -> Result<String, LineProblem> {
        let t = turn.get("content").or_else(|| turn.get("value"));
        match t {
            Some(serde_json::Value::String(t)) => prompt_text(line, name, t),
            None => Ok(String::new()),
            Some(other) => Err((
                column_of(line, name),
                format!("a turn's `content` must be text, found {other}"),
            )),
        }
    };
    let (prompt, reply) = (text(first)?, text(second)?);
    if prompt.trim().is_empty() || reply.trim().is_empty() {
        // SGLang prunes prompts and replies under two tokens; an empty one is surely under.
        return Ok(None);
    }
    Ok(Some(DatasetEntry {
        input: DatasetInput::Text(prompt),
        output_tokens: None,
        reply: Some(reply),
    }))
}

#[derive(Deserialize)]
struct Conversation {
    #[serde(default)]
    conversations: Vec<Turn>,
}

#[derive(Deserialize)]
struct Turn {
    #[serde(default)]
    from: String,
    #[serde(default)]
    value: String,
}

/// ShareGPT: conversations whose first turn is the human's and the second the model's, as
/// SGLang's `bench_serving` samples them; shorter ones are skipped.
fn sharegpt(path: &Path, text: &str) -> Result<Vec<DatasetEntry>, PromptError> {
    use serde::de::{DeserializeSeed, Error as _, SeqAccess, Visitor};

    struct Bounded;
    impl<'de> DeserializeSeed<'de> for Bounded {
        type Value = Vec<DatasetEntry>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_seq(self)
        }
    }
    impl<'de> Visitor<'de> for Bounded {
        type Value = Vec<DatasetEntry>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of {\"conversations\": [{\"from\": ..., \"value\": ...}]}")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(c) = seq.next_element::<Conversation>()? {
                let [first, second, ..] = c.conversations.as_slice() else {
                    continue;
                };
                if !is_human(&first.from) || is_human(&second.from) {
                    continue;
                }
                if first.value.len() > MAX_PROMPT_BYTES || second.value.len() > MAX_PROMPT_BYTES {
                    return Err(A::Error::custom(format!(
                        "a turn longer than {MAX_PROMPT_BYTES} bytes"
                    )));
                }
                if first.value.trim().is_empty() || second.value.trim().is_empty() {
                    continue;
                }
                if out.len() == MAX_PROMPTS {
                    return Err(A::Error::custom(format!(
                        "more than {MAX_PROMPTS} conversations, the limit: use a sample"
                    )));
                }
                out.push(DatasetEntry {
                    input: DatasetInput::Text(first.value.clone()),
                    output_tokens: None,
                    reply: Some(second.value.clone()),
                });
            }
            Ok(out)
        }
    }

    let mut de = serde_json::Deserializer::from_str(text);
    Bounded
        .deserialize(&mut de)
        .and_then(|list| de.end().map(|()| list))
        .map_err(|e| PromptError::DatasetLine {
            path: path.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })
}

fn is_human(from: &str) -> bool {
    matches!(from, "human" | "user")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_lines_with_prompts_or_lengths() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("d.jsonl");
        std::fs::write(
            &p,
            "{\"prompt\": \"hello\", \"output_tokens\": 3, \"id\": 1}\n\n{\"input_tokens\": 90}\n",
        )
        .unwrap();
        let d = load_dataset(DatasetFormat::Jsonl, &p).unwrap();
        assert_eq!(d[0].input, DatasetInput::Text("hello".into()));
        assert_eq!(d[0].output_tokens, Some(3));
        assert_eq!(d[1].input, DatasetInput::Tokens(90));
        std::fs::write(&p, "{\"prompt\": \"a\"}\n{\"prompt\": 4}\n").unwrap();
        let e = load_dataset(DatasetFormat::Jsonl, &p).unwrap_err();
        assert!(e.to_string().contains("d.jsonl:2:"), "{e}");
        std::fs::write(&p, "{\"output_tokens\": 4}\n").unwrap();
        let e = load_dataset(DatasetFormat::Jsonl, &p).unwrap_err();
        assert!(e.to_string().contains("d.jsonl:1:1"), "{e}");
        assert!(e.to_string().contains("input_tokens"), "{e}");
    }

    #[test]
    fn aiperf_single_turn_lines_are_prompts_and_what_is_not_replayed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.jsonl");
        // Lines as AIPerf's SingleTurn docstring writes them.
        std::fs::write(
            &p,
            "{\"text\": \"What is deep learning?\"}\n{\"type\": \"single_turn\", \"texts\": [\"Who are you?\"], \"output_length\": 20}\n{\"texts\": [{\"name\": \"a\", \"contents\": [\"Hi\"]}], \"role\": \"user\"}\n",
        )
        .unwrap();
        let d = load_dataset(DatasetFormat::AiperfSingleTurn, &p).unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(
            d[0].input,
            DatasetInput::Text("What is deep learning?".into())
        );
        assert_eq!((d[0].output_tokens, d[1].output_tokens), (None, Some(20)));
        assert_eq!(d[2].input, DatasetInput::Text("Hi".into()));
        for (line, at) in [
            (
                "{\"timestamp\": 1000, \"text\": \"Who are you?\"}",
                "a.jsonl:2:2: `timestamp`",
            ),
            (
                "{\"text\": \"x\", \"delay\": 1234}",
                "a.jsonl:2:15: `delay`",
            ),
            (
                "{\"text\": \"x\", \"image\": \"/p.png\"}",
                "a.jsonl:2:15: `image`",
            ),
            (
                "{\"texts\": [\"Who are you?\", \"Hello world\"]}",
                "a.jsonl:2:2: `texts`: one prompt",
            ),
            (
                "{\"text\": \"x\", \"session_id\": \"s\"}",
                "a.jsonl:2:15: `session_id`",
            ),
            (
                "{\"text\": \"x\", \"output_length\": 0}",
                "a.jsonl:2:15: `output_length`",
            ),
            ("{\"text\": 5}", "a.jsonl:2:2: `text`"),
            ("{\"image\": \"/p.png\"}", "a.jsonl:2:2: `image`"),
            ("{\"output_length\": 5}", "a.jsonl:2:1: no `text`"),
            ("[1, 2]", "a.jsonl:2:1: each line"),
            ("{\"text\": \"x\"", "a.jsonl:2:12: not a JSON object"),
        ] {
            std::fs::write(&p, format!("{{\"text\": \"ok\"}}\n{line}\n")).unwrap();
            let e = load_dataset(DatasetFormat::AiperfSingleTurn, &p).unwrap_err();
            assert!(e.to_string().contains(at), "{at}: {e}");
        }
    }

    #[test]
    fn sglang_custom_lines_take_their_first_two_turns() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        std::fs::write(
            &p,
            "{\"conversations\": [{\"role\": \"user\", \"content\": \"Q1\"}, {\"role\": \"assistant\", \"content\": \"A1\"}, {\"content\": \"Q2\"}]}\n{\"conversation\": [{\"value\": \"alone\"}]}\n{\"conversation\": [{\"value\": \"Q3\"}, {\"value\": \"A3\"}]}\n",
        )
        .unwrap();
        let d = load_dataset(DatasetFormat::SglangCustom, &p).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].input, DatasetInput::Text("Q1".into()));
        assert_eq!(d[0].reply.as_deref(), Some("A1"));
        assert_eq!(d[1].reply.as_deref(), Some("A3"));
        for (line, at) in [
            (
                "{\"conversations\": 3}",
                "c.jsonl:2:2: `conversations` must be a list",
            ),
            (
                "{\"conversations\": [{\"content\": 1}, {\"content\": \"a\"}]}",
                "c.jsonl:2:2: a turn's",
            ),
            (
                "{\"conversations\": [], \"image\": \"x.png\"}",
                "c.jsonl:2:23: `image`",
            ),
            ("\u{0}", "c.jsonl:2:1"),
        ] {
            let ok = "{\"conversations\": [{\"content\": \"Q\"}, {\"content\": \"A\"}]}";
            std::fs::write(&p, format!("{ok}\n{line}\n")).unwrap();
            let e = load_dataset(DatasetFormat::SglangCustom, &p).unwrap_err();
            assert!(e.to_string().contains(at), "{at}: {e}");
        }
        std::fs::write(&p, "{\"conversations\": [{\"content\": \"alone\"}]}\n").unwrap();
        assert!(matches!(
            load_dataset(DatasetFormat::SglangCustom, &p),
            Err(PromptError::Empty { .. })
        ));
    }

    /// Seeded mutations of good lines of the line formats: each read is a dataset or an error
    /// at a line and a column within it, never a panic.
    #[test]
    fn mutated_lines_are_read_or_refused_at_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let seeds: [(DatasetFormat, &str); 3] = [
            (
                DatasetFormat::AiperfSingleTurn,
                "{\"texts\": [{\"name\": \"a\", \"contents\": [\"Hi\"]}], \"output_length\": 20}\n",
            ),
            (
                DatasetFormat::SglangCustom,
                "{\"conversations\": [{\"content\": \"Q1\"}, {\"value\": \"A1\"}]}\n",
            ),
            (
                DatasetFormat::Jsonl,
                "{\"prompt\": \"hello\", \"output_tokens\": 3}\n",
            ),
        ];
        let tokens: [&[u8]; 10] = [
            b"\n",
            b"\"",
            b"{",
            b"}",
            b"[",
            b"]",
            b"-1",
            b"null",
            b"\xff",
            b"18446744073709551616",
        ];
        let texts: Vec<&[u8]> = seeds.iter().map(|(_, s)| s.as_bytes()).collect();
        for (i, bytes) in testkit::mutate::mutations(&texts, &tokens, 0x2545_F491_4F6C_DD1D, 900) {
            let options = seeds[i % seeds.len()].0;
            let p = dir.path().join("d.jsonl");
            std::fs::write(&p, &bytes).unwrap();
            if let Err(PromptError::DatasetLine { line, column, .. }) = load_dataset(options, &p) {
                testkit::mutate::assert_within(&bytes, line, column);
            }
        }
    }

    #[test]
    fn sharegpt_takes_first_turns_and_skips_short_conversations() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        std::fs::write(
            &p,
            r#"[{"id": "a", "conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A1"}, {"from": "human", "value": "Q2"}]},
                {"id": "b", "conversations": [{"from": "human", "value": "alone"}]},
                {"id": "c", "conversations": [{"from": "gpt", "value": "x"}, {"from": "human", "value": "y"}]}]"#,
        )
        .unwrap();
        let d = load_dataset(DatasetFormat::Sharegpt, &p).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].input, DatasetInput::Text("Q1".into()));
        assert_eq!(d[0].reply.as_deref(), Some("A1"));
        std::fs::write(&p, "[{\"conversations\": 3}]").unwrap();
        let e = load_dataset(DatasetFormat::Sharegpt, &p).unwrap_err();
        assert!(e.to_string().contains("s.json:1:"), "{e}");
    }
}
