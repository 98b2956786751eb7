//! Prompt generators, nonces, and token-length calibration against the server.
//!
//! Target lengths are in tokens as the *server* counts them. servebench ships no tokenizer for
//! the model under test, so `calibrate` scales the text until the server's reported
//! `prompt_tokens` is within tolerance of the target.

mod agentic_trace;
pub mod blocks;
mod calibrate;
pub(crate) mod canary;
mod check;
mod conversation;
mod conversations;
mod dataset;
mod dist;
mod file;
mod generate;
mod json_locate;
pub mod pieces;
pub(crate) use generate::WORDS;
mod nonce;
mod workload;

pub use calibrate::{
    Attempt, AttemptKind, Calibrated, CalibrationError, Calibrator, CountError, too_long_limit,
};
pub(crate) use check::PromptCheck;
pub(crate) use conversation::Conversation;
pub(crate) use conversations::{draw_missing_outputs, load_sessions_file};
pub use dataset::{DatasetEntry, DatasetInput, load_dataset};
pub use dist::{BUCKET_STEP, LengthSampler, bucket};
pub use file::{
    MAX_PROMPT_BYTES, MAX_PROMPT_FILE_BYTES, MAX_PROMPTS, PromptError, load_prompt_file,
};
pub use generate::{PromptSource, TextGenerator};
pub(crate) use nonce::nonce;
pub use workload::{InputDraw, OutputDraw, RequestDraw, WorkloadEntry, WorkloadSource};
