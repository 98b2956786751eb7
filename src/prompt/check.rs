//! What `validate` checks of a point's prompts: what [`PromptSource::load`] would refuse when
//! the run starts (a prompt file missing, unreadable, not a regular file, over its budgets;
//! an empty `repeat` text), reported at the spec's `workload.prompt`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use servebench_model::spec::Check;
use servebench_model::spec::types::{Api, Experiment, PromptSpec, SessionsFormat, Workload};
use servebench_model::spec::validate::{Problem, Target};

use super::{PromptError, PromptSource};

/// [`Check`] of prompts. Each file is read once, however many points use it.
#[derive(Debug, Default)]
pub(crate) struct PromptCheck {
    /// A file's full path to its problem (`None`: it loads).
    files: RefCell<HashMap<PathBuf, Option<(String, String)>>>,
    /// A workload (as written) to its problem, for datasets, length files and mixes.
    workloads: RefCell<HashMap<String, Option<(String, String)>>>,
}

impl Check for PromptCheck {
    fn check(&self, experiment: &Experiment, spec_dir: &Path) -> Vec<Problem> {
        // Conversations from a file (`load.sessions.file`), read once however many points
        // replay them.
        if let Some(s) = experiment.sessions()
            && let Some(file) = &s.file
        {
            if let Some(p) = agentic_trace_workload(s.format, &experiment.workload) {
                return vec![p];
            }
            let full = spec_dir.join(file);
            let found = self
                .files
                .borrow_mut()
                .entry(full.clone())
                .or_insert_with(|| {
                    super::load_sessions_file(s, &full).err().map(|e| {
                        let hint = match s.format {
                            SessionsFormat::AiperfMultiTurn => "AIPerf's multi_turn: one session a line, {\"session_id\": \"s1\", \"turns\": [{\"text\": \"...\"}, {\"text\": \"...\", \"delay\": 1000}]}",
                            SessionsFormat::SglangAgenticTrace => "SGLang's agentic-trace: one JSON document, {\"conversations\": [[{\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]}, ...], ...]}",
                        };
                        (e.to_string(), hint.into())
                    })
                })
                .clone();
            if let Some((message, hint)) = found {
                return vec![Problem {
                    pointer: "/load/sessions/file".into(),
                    target: Target::Value,
                    message,
                    hint: Some(hint),
                }];
            }
        }
        let spec = &experiment.workload.prompt;
        let (pointer, found) = match spec {
            PromptSpec::File { path } => {
                let full = spec_dir.join(path);
                let found = self
                    .files
                    .borrow_mut()
                    .entry(full)
                    .or_insert_with(|| problem(spec, spec_dir))
                    .clone();
                ("/workload/prompt/path", found)
            }
            PromptSpec::Repeat { .. } => ("/workload/prompt/text", problem(spec, spec_dir)),
            // Datasets, length files and mixes: the whole workload loads or not, read once
            // however many points share it.
            _ => ("/workload/prompt", None),
        };
        let found = found.or_else(|| {
            let key = format!("{:?}", experiment.workload);
            self.workloads
                .borrow_mut()
                .entry(key)
                .or_insert_with(|| workload_problem(experiment, spec_dir))
                .clone()
        });
        let pointer = match spec {
            _ if pointer != "/workload/prompt" => pointer,
            PromptSpec::Dataset { .. } => "/workload/prompt/file",
            _ => "/workload",
        };
        found
            .map(|(message, hint)| Problem {
                pointer: pointer.into(),
                target: Target::Value,
                message,
                hint: Some(hint),
            })
            .into_iter()
            .collect()
    }
}

/// What loading the whole workload (prompt, output lengths, mix) says, or `None`.
/// What SGLang's agentic-trace replay needs of the workload: the chat API (SGLang's bench
/// replays it on chat backends only, each round's messages as chat messages) and one output
/// length for every turn (its `--sharegpt-output-len`, 220 by default).
fn agentic_trace_workload(format: SessionsFormat, w: &Workload) -> Option<Problem> {
    if format != SessionsFormat::SglangAgenticTrace {
        return None;
    }
    if w.api != Api::OpenaiChat {
        return Some(Problem {
            pointer: "/workload/api".into(),
            target: Target::Value,
            message: format!(
                "an SGLang agentic-trace is replayed as chat messages, and this workload's API is `{}`",
                w.api
            ),
            hint: Some(
                "write `api: openai-chat` (SGLang's bench replays it on its chat backends only)"
                    .into(),
            ),
        });
    }
    if w.output_tokens.fixed().is_none() {
        return Some(Problem {
            pointer: "/workload/output_tokens".into(),
            target: Target::Value,
            message: "an SGLang agentic-trace asks one output length of every turn, and this is a distribution".into(),
            hint: Some("write `output_tokens: 220` (SGLang's default per turn, its `--sharegpt-output-len`)".into()),
        });
    }
    None
}

fn workload_problem(experiment: &Experiment, spec_dir: &Path) -> Option<(String, String)> {
    let e = super::WorkloadSource::load(&experiment.workload, spec_dir).err()?;
    Some(described(e))
}

/// What loading the prompts says, with a hint, or `None` when they load.
fn problem(spec: &PromptSpec, spec_dir: &Path) -> Option<(String, String)> {
    let e = PromptSource::load(spec, spec_dir).err()?;
    Some(described(e))
}

/// The error's message and a hint at the fix.
fn described(e: PromptError) -> (String, String) {
    let hint = match &e {
        PromptError::EmptyText => "give a sentence to repeat, or remove `text` for the default",
        PromptError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            "the path is relative to the spec's folder"
        }
        PromptError::Read { .. } => "check that the file is readable UTF-8 text",
        PromptError::NotAFile { .. } => {
            "give a regular file: one prompt per line, or a JSON list of strings (`.json`)"
        }
        PromptError::TooLarge { .. }
        | PromptError::TooMany { .. }
        | PromptError::PromptTooLong { .. } => "use a sample of the prompts",
        PromptError::NotAList { .. } => {
            "a `.json` prompt file is a list of strings: [\"first prompt\", \"second prompt\"]"
        }
        PromptError::Empty { .. } => "write one prompt per line",
        PromptError::BadDistribution(_) => {
            "a distribution is { dist: uniform, min, max }, { dist: normal, mean, std, min, max }, { dist: lognormal, mean, sigma, min, max } or { dist: empirical, file }"
        }
        PromptError::BadLength { .. } => "write one whole number of tokens per line",
        PromptError::DatasetLine { .. } => {
            "sharegpt: a JSON list of { conversations: [ { from, value } ] }; jsonl: one { prompt | input_tokens, output_tokens } object per line; aiperf-single-turn: one { text, output_length } a line; sglang-custom: one { conversations: [ { content }, { content } ] } a line"
        }
        PromptError::BadWeights => "give every mix entry a positive weight",
    };
    (e.to_string(), hint.to_string())
}
