//! What `validate` checks of a trace replay: what [`trace::read`] would refuse when the point
//! starts (the file missing, unreadable, over its byte budget, a line that does not parse,
//! no requests), reported at the spec's `load.trace.file`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::spec::Check;
use crate::spec::load_model::LoadKind;
use crate::spec::types::Experiment;
use crate::spec::validate::{Problem, Target};

use super::trace::{self, TraceError};

/// [`Check`] of trace files. Each file is read once, however many points replay it.
#[derive(Debug, Default)]
pub struct TraceCheck {
    /// A file's full path to its problem (`None`: it reads).
    files: RefCell<HashMap<PathBuf, Option<(String, String)>>>,
}

impl Check for TraceCheck {
    fn check(&self, experiment: &Experiment, spec_dir: &Path) -> Vec<Problem> {
        let Some(load) = &experiment.load else {
            return Vec::new();
        };
        let (LoadKind::Trace, Some(t)) = (load.kind, &load.trace) else {
            return Vec::new();
        };
        let full = spec_dir.join(&t.file);
        self.files
            .borrow_mut()
            .entry(full.clone())
            .or_insert_with(|| trace::read(&full).err().map(described))
            .clone()
            .map(|(message, hint)| Problem {
                pointer: "/load/trace/file".into(),
                target: Target::Value,
                message,
                hint: Some(hint),
            })
            .into_iter()
            .collect()
    }
}

/// The error's message and a hint at the fix.
fn described(e: TraceError) -> (String, String) {
    let hint = match &e {
        TraceError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            "the path is relative to the spec's folder"
        }
        TraceError::Io { .. } => "give a readable file: one JSON object a line",
        TraceError::Line { .. } => {
            "each line is an object like {\"at\": 0.5, \"input_tokens\": 512, \"output_tokens\": 128} (or Mooncake's timestamp, input_length, output_length)"
        }
        TraceError::TooLarge { .. } => "replay a part of the trace: cut it to fewer lines",
        TraceError::Empty { .. } => "write one request a line: {\"at\": 0.5}",
    };
    (e.to_string(), hint.to_string())
}
