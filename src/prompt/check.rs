//! What `validate` checks of a point's prompts: what [`PromptSource::load`] would refuse when
//! the run starts (a prompt file missing, unreadable, not a regular file, over its budgets;
//! an empty `repeat` text), reported at the spec's `workload.prompt`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::spec::Check;
use crate::spec::types::{Experiment, PromptSpec};
use crate::spec::validate::{Problem, Target};

use super::{PromptError, PromptSource};

/// [`Check`] of prompts. Each file is read once, however many points use it.
#[derive(Debug, Default)]
pub struct PromptCheck {
    /// A file's full path to its problem (`None`: it loads).
    files: RefCell<HashMap<PathBuf, Option<(String, String)>>>,
}

impl Check for PromptCheck {
    fn check(&self, experiment: &Experiment, spec_dir: &Path) -> Vec<Problem> {
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
            _ => ("/workload/prompt/text", problem(spec, spec_dir)),
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

/// What loading the prompts says, with a hint, or `None` when they load.
fn problem(spec: &PromptSpec, spec_dir: &Path) -> Option<(String, String)> {
    let e = PromptSource::load(spec, spec_dir).err()?;
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
    };
    Some((e.to_string(), hint.to_string()))
}
