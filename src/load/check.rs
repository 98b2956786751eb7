//! What `validate` checks of a `load:` point's schedule: what [`Schedule::of`] would refuse
//! when the point starts, reported at the spec's field that causes it. A trace file is read
//! through once, without keeping its lines (the file missing, not a regular file, over its
//! byte or line budget, a line that does not parse, no requests, a span past a schedule's);
//! a rate or ramp's schedule is counted as the run would count it (`rate: inf` without a
//! count, more than [`SCHEDULE_LIMIT`] requests, a request due past [`MAX_SPAN_S`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use servebench_model::spec::Check;
use servebench_model::spec::load_model::LoadSpec;
use servebench_model::spec::types::Experiment;
use servebench_model::spec::validate::{Problem, Target};

use super::schedule::{MAX_SPAN_S, SCHEDULE_LIMIT, Schedule, ScheduleError};
use super::trace::{self, TraceError, TraceSummary};

/// What a trace file holds, or its problem (message, hint).
type TraceFound = Result<TraceSummary, (String, String)>;

/// [`Check`] of load schedules. Each trace file is read once, however many points replay it.
#[derive(Debug, Default)]
pub(crate) struct ScheduleCheck {
    /// A trace's full path (and how its blocks are read) to what it holds, or its problem.
    files: RefCell<HashMap<(PathBuf, String), TraceFound>>,
}

impl Check for ScheduleCheck {
    fn check(&self, experiment: &Experiment, spec_dir: &Path) -> Vec<Problem> {
        let Some(load) = &experiment.load else {
            return Vec::new();
        };
        let problem = |pointer: &str, (message, hint): (String, String)| Problem {
            pointer: pointer.into(),
            target: Target::Value,
            message,
            hint: Some(hint),
        };
        match load {
            LoadSpec::Agentic { agentic: a, .. } => {
                match super::agentic::summarize(&spec_dir.join(&a.file), a) {
                    Ok(_) => Vec::new(),
                    Err(e) => vec![problem("/load/agentic/file", super::agentic::described(e))],
                }
            }
            LoadSpec::Trace { trace: t, .. } => {
                let full = spec_dir.join(&t.file);
                let options = trace::TraceOptions::of(t);
                let summary = self
                    .files
                    .borrow_mut()
                    .entry((full.clone(), format!("{options:?}")))
                    .or_insert_with(|| trace::summarize(&full, options).map_err(described))
                    .clone();
                match summary {
                    Err(found) => vec![problem("/load/trace/file", found)],
                    Ok(s) if s.span_s * t.time_scale > MAX_SPAN_S => vec![problem(
                        "/load/trace/file",
                        (
                            format!(
                                "the trace spans {} from its first arrival to its last (at time_scale {}), longer than a schedule may span ({})",
                                servebench_model::text::duration(s.span_s * t.time_scale),
                                t.time_scale,
                                servebench_model::text::duration(MAX_SPAN_S)
                            ),
                            "cut the trace, or lower `load.trace.time_scale`".into(),
                        ),
                    )],
                    Ok(s)
                        if s.without_output > 0
                            && t.format
                                == servebench_model::spec::load_model::TraceFormat::SagemakerCapture
                            && experiment.workload.output_tokens.fixed().is_none() =>
                    {
                        vec![problem(
                            "/workload/output_tokens",
                            (
                                format!(
                                    "{} of the capture's {} requests have no `max_tokens`, and `workload.output_tokens` is a distribution: servebench sends its fixed value in their place",
                                    s.without_output, s.requests
                                ),
                                "give `workload.output_tokens` a number (AIPerf sends no limit for them)".into(),
                            ),
                        )]
                    }
                    // Its phases are checked with the schedule at the point's start (they
                    // need the lines, which are not kept here).
                    Ok(_) => Vec::new(),
                }
            }
            // A sessions file is read with the prompts (`prompt::PromptCheck`).
            LoadSpec::Sessions { .. } => Vec::new(),
            _ => match Schedule::of(experiment, spec_dir) {
                Ok(_) => Vec::new(),
                Err(e) => vec![problem(pointer(&e), schedule_described(e))],
            },
        }
    }
}

/// The spec field a schedule's problem comes from.
fn pointer(e: &ScheduleError) -> &'static str {
    match e {
        ScheduleError::UnboundedInf => "/load/rate",
        ScheduleError::PhaseTooLong { field, .. } => match *field {
            "warmup.duration" => "/warmup/duration",
            "cooldown.duration" => "/cooldown/duration",
            "load.ramp.over" => "/load/ramp/over",
            _ => "/stop/duration",
        },
        ScheduleError::TooLong | ScheduleError::TooLate { .. } => "/stop",
        ScheduleError::Trace(_) => "/load/trace/file",
        ScheduleError::NotLoad => "/load",
    }
}

/// A schedule's problem and a hint at the fix.
fn schedule_described(e: ScheduleError) -> (String, String) {
    let hint = match &e {
        ScheduleError::Trace(_) => return described_trace(e),
        ScheduleError::UnboundedInf => {
            "add `stop: { requests: 500 }`: `rate: inf` sends that many at once"
        }
        ScheduleError::TooLong => "lower `stop.duration` or the rate, or set `stop.requests`",
        ScheduleError::PhaseTooLong { .. } | ScheduleError::TooLate { .. } => {
            "a point lasts hours at most: shorten it, or raise the rate"
        }
        ScheduleError::NotLoad => "give the `load:` block its parameters",
    };
    let message = match &e {
        ScheduleError::TooLong => {
            format!("the schedule would hold more than {SCHEDULE_LIMIT} requests")
        }
        _ => e.to_string(),
    };
    (message, hint.into())
}

fn described_trace(e: ScheduleError) -> (String, String) {
    match e {
        ScheduleError::Trace(t) => described(t),
        other => (other.to_string(), String::new()),
    }
}

/// The error's message and a hint at the fix.
fn described(e: TraceError) -> (String, String) {
    let hint = match &e {
        TraceError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            "the path is relative to the spec's folder"
        }
        TraceError::Io { .. } => "give a readable file: one JSON object a line",
        TraceError::Line { hint: Some(h), .. } => h,
        TraceError::Line { .. } => {
            "each line is an object like {\"at\": 0.5, \"input_tokens\": 512, \"output_tokens\": 128} (or Mooncake's timestamp, input_length, output_length, hash_ids); for BurstGPT's CSV set `load.trace.format: burstgpt`"
        }
        TraceError::LineTooLong { .. } => "split or cut the line: one request a line",
        TraceError::TooManyIds { .. } => {
            "replay a part of the trace, or set `load.trace.hash_ids: ignore`"
        }
        TraceError::TooLarge { .. } | TraceError::TooManyLines { .. } => {
            "replay a part of the trace: cut it to fewer lines"
        }
        TraceError::NotAFile { .. } => "give a regular file: one JSON object a line",
        TraceError::Empty { .. } => "write one request a line: {\"at\": 0.5}",
        TraceError::TooManyFiles { .. } => {
            "replay a part of the capture: point `file` at a sub-folder"
        }
    };
    (e.to_string(), hint.to_string())
}
