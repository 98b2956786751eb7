//! Text generators: `repeat`, `random` and `file`.

use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::spec::types::PromptSpec;

/// Why a spec's prompts cannot be had. The texts name the file or field to fix; `run` checks
/// every point's prompts before anything starts, and a point that fails here is abandoned.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// A `repeat` prompt with nothing to repeat.
    #[error("workload.prompt.text is empty: give a sentence to repeat")]
    EmptyText,
    /// A `file` prompt whose file is missing or cannot be read.
    #[error("cannot read prompt file {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `.json` prompt file that is not a list of strings.
    #[error("prompt file {} is not a JSON list of strings: {source}", .path.display())]
    NotAList {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A prompt file with no prompt in it (empty, or blank lines only).
    #[error("prompt file {} has no prompts", .path.display())]
    Empty { path: PathBuf },
}

/// Where a point's prompts come from.
#[derive(Debug, Clone)]
pub enum PromptSource {
    /// Generated text scaled to a token target.
    Generated {
        generator: TextGenerator,
        target_tokens: u64,
        calibrate: bool,
    },
    /// Fixed prompts from a file, used in order and wrapping around.
    Fixed(Vec<String>),
}

impl PromptSource {
    /// Builds the source for a prompt spec; `spec_dir` resolves relative file paths.
    pub fn load(spec: &PromptSpec, spec_dir: &Path) -> Result<PromptSource, PromptError> {
        Ok(match spec {
            PromptSpec::Repeat {
                text,
                tokens,
                calibrate,
            } => {
                if text.trim().is_empty() {
                    return Err(PromptError::EmptyText);
                }
                PromptSource::Generated {
                    generator: TextGenerator::Repeat { text: text.clone() },
                    target_tokens: *tokens,
                    calibrate: *calibrate,
                }
            }
            PromptSpec::Random {
                tokens,
                seed,
                calibrate,
            } => PromptSource::Generated {
                generator: TextGenerator::Random { seed: *seed },
                target_tokens: *tokens,
                calibrate: *calibrate,
            },
            PromptSpec::File { path } => {
                let full = spec_dir.join(path);
                PromptSource::Fixed(load_prompt_file(&full)?)
            }
        })
    }

    /// The requested prompt length in tokens, when the spec gives one.
    pub fn target_tokens(&self) -> Option<u64> {
        match self {
            PromptSource::Generated { target_tokens, .. } => Some(*target_tokens),
            PromptSource::Fixed(_) => None,
        }
    }
}

/// Reads prompts from a file: a JSON list of strings (`.json`) or one prompt per line.
pub fn load_prompt_file(path: &Path) -> Result<Vec<String>, PromptError> {
    let text = std::fs::read_to_string(path).map_err(|source| PromptError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let prompts: Vec<String> = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|source| PromptError::NotAList {
            path: path.to_path_buf(),
            source,
        })?
    } else {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    };
    if prompts.is_empty() {
        return Err(PromptError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(prompts)
}

/// Generates text of a given length in characters; calibration maps tokens to characters.
#[derive(Debug, Clone, PartialEq)]
pub enum TextGenerator {
    /// A sentence repeated (and cut) to length.
    Repeat { text: String },
    /// Seeded random words.
    Random { seed: u64 },
}

/// Words for the random generator: common English words, so tokenizers see ordinary text.
const WORDS: &[&str] = &[
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
    "education",
    "runs",
    "takes",
    "makes",
    "gives",
    "finds",
    "keeps",
    "brings",
    "quickly",
    "slowly",
    "green",
    "bright",
    "quiet",
    "early",
    "simple",
    "strong",
    "river",
    "mountain",
];

impl TextGenerator {
    /// Text of exactly `chars` characters (ASCII, so bytes = characters).
    pub fn text(&self, chars: usize) -> String {
        let mut out = String::with_capacity(chars + 16);
        match self {
            TextGenerator::Repeat { text } => {
                while out.len() < chars {
                    out.push_str(text);
                }
            }
            TextGenerator::Random { seed } => {
                let mut rng = ChaCha8Rng::seed_from_u64(*seed);
                while out.len() < chars {
                    let w = WORDS[rng.random_range(0..WORDS.len())];
                    out.push_str(w);
                    // A sentence break now and then keeps the text ordinary prose.
                    out.push_str(if rng.random_range(0..12) == 0 {
                        ". "
                    } else {
                        " "
                    });
                }
            }
        }
        // Cut on a char boundary (the repeat text may hold non-ASCII characters).
        out.truncate(crate::text::floor_char_boundary(&out, chars));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_cuts_to_length() {
        let g = TextGenerator::Repeat {
            text: "abc ".into(),
        };
        assert_eq!(g.text(10), "abc abc ab");
        assert_eq!(g.text(0), "");
    }

    #[test]
    fn random_is_seeded_and_prefix_stable() {
        let a = TextGenerator::Random { seed: 7 };
        assert_eq!(a.text(500), a.text(500));
        assert!(a.text(800).starts_with(&a.text(500)));
        assert_ne!(a.text(500), TextGenerator::Random { seed: 8 }.text(500));
    }

    #[test]
    fn non_ascii_repeat_text_does_not_panic() {
        let g = TextGenerator::Repeat {
            text: "Grüße, 世界! ".into(),
        };
        for n in 0..40 {
            let t = g.text(n);
            assert!(t.len() <= n);
        }
    }

    #[test]
    fn prompt_file_forms() {
        let dir = tempfile::tempdir().unwrap();
        let txt = dir.path().join("p.txt");
        std::fs::write(&txt, "one\n\ntwo\n").unwrap();
        assert_eq!(load_prompt_file(&txt).unwrap(), vec!["one", "two"]);
        let json = dir.path().join("p.json");
        std::fs::write(&json, r#"["a b", "c"]"#).unwrap();
        assert_eq!(load_prompt_file(&json).unwrap(), vec!["a b", "c"]);
        std::fs::write(&json, r#"{"a": 1}"#).unwrap();
        let e = load_prompt_file(&json).unwrap_err();
        assert!(matches!(e, PromptError::NotAList { .. }), "{e:?}");
        assert!(e.to_string().contains("JSON list"), "{e}");
        let e = load_prompt_file(&dir.path().join("missing.txt")).unwrap_err();
        assert!(matches!(e, PromptError::Read { .. }), "{e:?}");
        assert!(e.to_string().starts_with("cannot read prompt file "), "{e}");
        std::fs::write(&txt, "\n  \n").unwrap();
        let e = load_prompt_file(&txt).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("prompt file {} has no prompts", txt.display())
        );
    }
}
