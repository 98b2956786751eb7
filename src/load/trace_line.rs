//! What a trace line is once read, and what is wrong with one: shared by the trace reader
//! (`super::trace`) and the formats it reads (`super::burstgpt`).

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
