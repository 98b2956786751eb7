//! What a trace line is once read, what is wrong with one, and a trace's budgets: shared by
//! the trace reader (`super::trace`) and the formats it reads (`super::burstgpt`,
//! `super::capture`).

use std::path::{Path, PathBuf};

/// One line of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TraceEntry {
    /// Seconds from the trace's first arrival (before the time scale).
    pub at_s: f64,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u32>,
    /// Where the line's `hash_ids` are in [`super::trace::Trace::ids`] (None: the line has none, or they
    /// are ignored).
    pub blocks: Option<BlockRange>,
}

/// A line's block ids: `len` ids from `start` in the trace's id list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRange {
    pub start: u32,
    pub len: u32,
}

/// The longest output a trace line may ask for (as datasets: `prompt::dataset`).
pub(crate) const MAX_OUTPUT_TOKENS: u64 = 1_000_000;
/// The longest prompt a trace line may ask for: 16 Mi tokens, past every context served today.
pub(crate) const MAX_INPUT_TOKENS: u64 = 16 * 1024 * 1024;

/// What is wrong with a line: the message, where (1-based byte column), and the fix.
#[derive(Debug)]
pub(crate) struct LineError {
    pub message: String,
    pub column: usize,
    pub hint: Option<&'static str>,
}

impl LineError {
    pub(crate) fn with_hint(message: String, column: usize, hint: &'static str) -> LineError {
        LineError {
            message,
            column,
            hint: Some(hint),
        }
    }
}

impl From<String> for LineError {
    fn from(message: String) -> Self {
        LineError {
            message,
            column: 1,
            hint: None,
        }
    }
}

impl From<&str> for LineError {
    fn from(message: &str) -> Self {
        LineError::from(message.to_string())
    }
}

/// Largest trace file read (a million lines of Mooncake's trace is about 100 MB).
pub(crate) const TRACE_BYTE_LIMIT: u64 = 256 << 20;

/// Longest line of a trace, bytes: a line of 16 Mi tokens in 512-token blocks names 32,768
/// ids (about 300 KB).
pub(crate) const TRACE_LINE_BYTES: usize = 1 << 20;

/// Most `hash_ids` a whole trace may name (128 MB held while it replays).
pub(crate) const TRACE_ID_LIMIT: usize = 16 << 20;

/// Most lines (requests) a trace may hold: one schedule's limit (`schedule::SCHEDULE_LIMIT` is
/// this), since each line is one request of the schedule.
pub(crate) const TRACE_LINE_LIMIT: usize = 10_000_000;

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Line {
        path: PathBuf,
        line: usize,
        /// 1-based, in bytes: where in the line the problem is (1 when it is the whole line).
        column: usize,
        message: String,
        /// The fix, where the line's problem has a particular one.
        hint: Option<&'static str>,
    },
    #[error("{path}:{line}:1: the line is longer than {TRACE_LINE_BYTES} bytes")]
    LineTooLong { path: PathBuf, line: usize },
    #[error("trace {path} names more than {TRACE_ID_LIMIT} hash_ids in all")]
    TooManyIds { path: PathBuf },
    #[error("trace {path} is larger than {limit} bytes; cut it, or replay part of it")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("trace {path} has more than {TRACE_LINE_LIMIT} requests (one schedule's limit)")]
    TooManyLines { path: PathBuf },
    /// A directory, FIFO, device or socket: reading one could block forever or never end.
    #[error("trace {path} is {kind}, not a regular file")]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("trace {path} has no requests")]
    Empty { path: PathBuf },
    #[error("capture folder {path} holds more than {limit} .jsonl files")]
    TooManyFiles { path: PathBuf, limit: usize },
}

/// The trace file opened for reading, if it is a regular file within the byte budget.
pub(crate) fn open_regular(path: &Path) -> Result<std::fs::File, TraceError> {
    use servebench_model::input_file::{self, Refused};
    input_file::open_regular(path, TRACE_BYTE_LIMIT).map_err(|refused| match refused {
        Refused::Io(source) => TraceError::Io {
            path: path.to_path_buf(),
            source,
        },
        Refused::NotAFile(kind) => TraceError::NotAFile {
            path: path.to_path_buf(),
            kind,
        },
        Refused::TooLarge(_) => TraceError::TooLarge {
            path: path.to_path_buf(),
            limit: TRACE_BYTE_LIMIT,
        },
    })
}
