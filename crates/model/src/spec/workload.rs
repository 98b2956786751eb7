//! Spec types of workloads beyond one prompt: length distributions, datasets, and the
//! `sessions` load model (multi-turn conversations). Kept apart from `types.rs` so the load
//! model's other kinds can join without conflicts; it uses nothing of `types.rs` (a weighted
//! mix's entry, which holds a prompt, is there, beside the workload it belongs to).

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::patterns::DURATION_PATTERN;

/// A length in tokens (as the server counts them): a number, or a distribution drawn per
/// request from `workload.seed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Length {
    /// Every request the same.
    Fixed(#[schemars(range(min = 1, max = 10000000))] u64),
    /// Drawn per request.
    Dist(LengthDist),
}

impl From<u64> for Length {
    fn from(n: u64) -> Self {
        Length::Fixed(n)
    }
}

impl Length {
    /// The fixed value, when there is no distribution.
    pub fn fixed(&self) -> Option<u64> {
        match self {
            Length::Fixed(n) | Length::Dist(LengthDist::Fixed { value: n }) => Some(*n),
            Length::Dist(_) => None,
        }
    }

    /// A representative length for estimates and labels: the fixed value, the distribution's
    /// mean (clamped to its bounds), or its upper bound for an empirical file (not read here).
    pub fn nominal(&self) -> u64 {
        match self {
            Length::Fixed(n) => *n,
            Length::Dist(d) => match d {
                LengthDist::Fixed { value } => *value,
                LengthDist::Uniform { min, max } => (min + max) / 2,
                LengthDist::Normal { mean, min, max, .. }
                | LengthDist::Lognormal { mean, min, max, .. } => {
                    (mean.round().max(1.0) as u64).clamp(*min, (*max).max(*min))
                }
                LengthDist::Empirical { .. } => 1024,
            },
        }
    }

    /// The most a draw can give, when known without reading a file.
    pub fn upper(&self) -> Option<u64> {
        match self {
            Length::Fixed(n) => Some(*n),
            Length::Dist(d) => match d {
                LengthDist::Fixed { value } => Some(*value),
                LengthDist::Uniform { max, .. }
                | LengthDist::Normal { max, .. }
                | LengthDist::Lognormal { max, .. } => Some(*max),
                LengthDist::Empirical { .. } => None,
            },
        }
    }
}

/// A length distribution. Draws are whole tokens within `[min, max]`; normal and lognormal
/// draws outside the bounds are drawn again (a truncated distribution, not a pile-up at the
/// bounds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "dist", rename_all = "kebab-case", deny_unknown_fields)]
pub enum LengthDist {
    /// Always `value`.
    Fixed {
        #[schemars(range(min = 1, max = 10000000))]
        value: u64,
    },
    /// Every length in `[min, max]` equally likely.
    Uniform {
        #[schemars(range(min = 1, max = 10000000))]
        min: u64,
        #[schemars(range(min = 1, max = 10000000))]
        max: u64,
    },
    /// Normal with `mean` and standard deviation `std`, truncated to `[min, max]`.
    Normal {
        mean: f64,
        #[schemars(range(min = 0.0))]
        std: f64,
        #[schemars(range(min = 1, max = 10000000))]
        min: u64,
        #[schemars(range(min = 1, max = 10000000))]
        max: u64,
    },
    /// Log-normal whose untruncated mean is `mean` tokens and whose logarithm has standard
    /// deviation `sigma` (so the median is `mean / exp(sigma^2 / 2)`), truncated to
    /// `[min, max]`. Request lengths of chat traffic look like this.
    Lognormal {
        #[schemars(range(min = 1.0))]
        mean: f64,
        #[schemars(range(min = 0.0, max = 4.0))]
        sigma: f64,
        #[schemars(range(min = 1, max = 10000000))]
        min: u64,
        #[schemars(range(min = 1, max = 10000000))]
        max: u64,
    },
    /// Lengths drawn (with replacement, equally likely) from a file of whole numbers, one per
    /// line (`#` starts a comment), relative to the spec: lengths measured from real traffic.
    Empirical { file: PathBuf },
}

/// The format of a dataset file.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum DatasetFormat {
    /// A JSON list of `{ "conversations": [ { "from": "human", "value": ... }, { "from":
    /// "gpt", "value": ... }, ... ] }` (ShareGPT's export, as SGLang's and vLLM's benches read
    /// it): the first human turn is the prompt, the reply's length in the server's tokens is
    /// the output length (counted once per reply), unless `output_tokens` is given.
    Sharegpt,
    /// One JSON object per line: `prompt` (text) or `input_tokens` (generated text of that
    /// many tokens), and optionally `output_tokens`. vLLM's `custom` dataset (`{"prompt":
    /// ...}` a line) is this.
    Jsonl,
    /// AIPerf's `single_turn` file: one JSON object per line, `text` (or `texts` holding one
    /// prompt) and optionally `output_length`. Its timing (`timestamp`, `delay`), sessions,
    /// media and `extra` body fields are not replayed: lines with them are refused.
    AiperfSingleTurn,
    /// SGLang's `custom` dataset: one JSON object per line, `{"conversations": [{"content":
    /// ...}, {"content": ...}, ...]}` (or `conversation`, `value`): the first turn is the
    /// prompt, the second's length in the server's tokens the output length; lines with
    /// fewer than two turns are skipped, as SGLang skips them.
    SglangCustom,
}

/// The sessions load model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsSpec {
    /// Users holding conversations at once (each sends its next turn when its previous reply
    /// has ended and it has thought).
    #[schemars(range(min = 1, max = 4096))]
    pub users: u32,
    /// Turns (requests) per conversation (not with `file`, whose conversations have their own).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub turns: Option<u32>,
    /// Conversations replayed from a file instead of generated, relative to the spec file, in
    /// `format`: AIPerf's `multi_turn` JSONL (`{"session_id", "turns": [{"text", "delay",
    /// "output_length"}]}` a line) by default. Each conversation is sent once, `users` at
    /// once, each turn after the previous answer (and its `delay`, milliseconds, for AIPerf's),
    /// with the server's replies in its history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<std::path::PathBuf>,
    /// The format of `file`: `aiperf-multi-turn` (the default) or `sglang-agentic-trace`
    /// (SGLang bench_serving's `agentic-trace` JSON document, its rounds sent back to back).
    #[serde(default, skip_serializing_if = "SessionsFormat::is_default")]
    pub format: SessionsFormat,
    /// `sglang-agentic-trace` only: each conversation cut to its first rounds with messages
    /// (SGLang's `--agentic-max-turns`); unset, every round is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_turns: Option<u32>,
    /// Mean think time between a reply's end and the user's next turn, e.g. `2s`, `500ms`.
    #[serde(default = "no_think", with = "humantime_serde")]
    #[schemars(with = "String", regex(pattern = DURATION_PATTERN))]
    pub think: std::time::Duration,
    /// `fixed` (every pause is `think`) or `exponential` (pauses with mean `think`, drawn from
    /// `workload.seed`).
    #[serde(default)]
    pub think_dist: ThinkDist,
}

/// The format of a sessions file.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum SessionsFormat {
    /// AIPerf 0.13's `multi_turn` JSONL: `{"session_id", "turns": [{"text", "delay",
    /// "output_length"}]}` a line, each turn its `delay` (milliseconds) after the previous
    /// answer.
    #[default]
    AiperfMultiTurn,
    /// SGLang bench_serving's `agentic-trace` (`datasets/agentic_trace.py`, 0.5.23): one JSON
    /// document `{"metadata", "conversations": [[{"messages": [{"role", "content"}],
    /// "prompt_tokens"}, ...], ...]}`, each turn its new messages, sent as soon as the
    /// previous reply ended, with `workload.output_tokens` per turn (SGLang's default is 220)
    /// and the chat API only.
    SglangAgenticTrace,
}

impl SessionsFormat {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// How think times are drawn.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum ThinkDist {
    /// Every pause is exactly `think`.
    #[default]
    Fixed,
    /// Exponential pauses with mean `think` (users act independently).
    Exponential,
}

fn no_think() -> std::time::Duration {
    std::time::Duration::ZERO
}

impl Length {
    /// The length as a report writes it: `128`, `uniform 64-256`, `lognormal mean 1024
    /// sigma 0.5 in 64-8192`, `empirical lengths.txt`.
    pub fn describe(&self) -> String {
        match self {
            Length::Fixed(n) => n.to_string(),
            Length::Dist(d) => match d {
                LengthDist::Fixed { value } => value.to_string(),
                LengthDist::Uniform { min, max } => format!("uniform {min}-{max}"),
                LengthDist::Normal {
                    mean,
                    std,
                    min,
                    max,
                } => format!("normal mean {mean} std {std} in {min}-{max}"),
                LengthDist::Lognormal {
                    mean,
                    sigma,
                    min,
                    max,
                } => format!("lognormal mean {mean} sigma {sigma} in {min}-{max}"),
                LengthDist::Empirical { file } => format!("empirical {}", file.display()),
            },
        }
    }
}
