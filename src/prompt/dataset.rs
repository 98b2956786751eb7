//! Datasets in the formats people already have: ShareGPT conversations (a JSON list) and JSONL
//! with a prompt or an input length and an output length per line. Read from disk within the
//! prompt files' budgets; never downloaded.

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
