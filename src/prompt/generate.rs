//! Text generators: `repeat`, `random` and `file`.

use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use servebench_model::spec::types::PromptSpec;

use super::file::{PromptError, load_prompt_file};

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
    /// Generated text whose length is drawn per request (and bucketed to 2%).
    Drawn {
        generator: TextGenerator,
        lengths: super::dist::LengthSampler,
        calibrate: bool,
    },
    /// Dataset entries, used in order and wrapping around.
    Dataset {
        entries: std::sync::Arc<Vec<super::dataset::DatasetEntry>>,
        /// Seed of the text generated for entries that give a length.
        seed: u64,
    },
    /// Groups of requests sharing a prefix (SGLang's generated shared prefix).
    SharedPrefix {
        groups: u32,
        prefix_tokens: u64,
        suffix_tokens: u64,
        seed: u64,
    },
}

impl PromptSource {
    /// Builds the source for a prompt spec; `spec_dir` resolves relative file paths.
    pub(crate) fn load(spec: &PromptSpec, spec_dir: &Path) -> Result<PromptSource, PromptError> {
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
            } => {
                let lengths = super::dist::LengthSampler::load(tokens, spec_dir)?;
                let generator = TextGenerator::Random { seed: *seed };
                match lengths {
                    super::dist::LengthSampler::Fixed(n) => PromptSource::Generated {
                        generator,
                        target_tokens: n,
                        calibrate: *calibrate,
                    },
                    lengths => PromptSource::Drawn {
                        generator,
                        lengths,
                        calibrate: *calibrate,
                    },
                }
            }
            PromptSpec::Dataset { format, file } => PromptSource::Dataset {
                entries: std::sync::Arc::new(super::dataset::load_dataset(
                    *format,
                    &spec_dir.join(file),
                )?),
                seed: 0,
            },
            PromptSpec::SharedPrefix {
                groups,
                prefix_tokens,
                suffix_tokens,
                seed,
            } => PromptSource::SharedPrefix {
                groups: (*groups).max(1),
                prefix_tokens: *prefix_tokens,
                suffix_tokens: *suffix_tokens,
                seed: *seed,
            },
            PromptSpec::File { path } => {
                let full = spec_dir.join(path);
                PromptSource::Fixed(load_prompt_file(&full)?)
            }
        })
    }

    /// The requested prompt length in tokens, when the spec gives one.
    pub(crate) fn target_tokens(&self) -> Option<u64> {
        match self {
            PromptSource::Generated { target_tokens, .. } => Some(*target_tokens),
            PromptSource::SharedPrefix {
                prefix_tokens,
                suffix_tokens,
                ..
            } => Some(prefix_tokens + suffix_tokens),
            PromptSource::Fixed(_) | PromptSource::Drawn { .. } | PromptSource::Dataset { .. } => {
                None
            }
        }
    }
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
pub(crate) const WORDS: &[&str] = &[
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
    pub(crate) fn text(&self, chars: usize) -> String {
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
        out.truncate(servebench_model::text::floor_char_boundary(&out, chars));
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
}
