//! Trace files: one request a line, JSON. The arrival time is `at` (seconds) or Mooncake's
//! `timestamp` (milliseconds); `output_tokens` (or Mooncake's `output_length`) sets the
//! request's `max_tokens`; `input_tokens` (or `input_length`) is kept for the workload's
//! generator: the request's prompt is generated and calibrated at that length. Other fields
//! are ignored, so existing traces load as they are.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Largest trace file read (a million lines of Mooncake's trace is about 100 MB).
pub(crate) const TRACE_BYTE_LIMIT: u64 = 256 << 20;

/// One line of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TraceEntry {
    /// Seconds from the trace's first arrival (before the time scale).
    pub at_s: f64,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u32>,
}

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
    #[error("{path}:{line}: {message}")]
    Line {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("trace {path} is larger than {limit} bytes; cut it, or replay part of it")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("trace {path} has more than {TRACE_LINE_LIMIT} requests (one schedule's limit)")]
    TooManyLines { path: PathBuf },
    /// A directory, FIFO, device or socket: reading one could block forever or never end.
    #[error("trace {path} is {kind}, not a regular file")]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("trace {path} has no requests")]
    Empty { path: PathBuf },
}

/// Reads a trace file. Times are made relative to the earliest arrival and sorted.
pub(crate) fn read(path: &Path) -> Result<Vec<TraceEntry>, TraceError> {
    let mut entries = Vec::new();
    scan(path, |e| entries.push(e))?;
    entries.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let first = entries[0].at_s;
    for e in &mut entries {
        e.at_s -= first;
    }
    Ok(entries)
}

/// What a trace holds, read without keeping its lines (what `validate` needs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TraceSummary {
    pub requests: usize,
    /// Seconds from its earliest arrival to its latest (before the time scale).
    pub span_s: f64,
}

/// Reads a trace file through, checking every line as [`read`] does, in memory that does not
/// grow with its length.
pub(crate) fn summarize(path: &Path) -> Result<TraceSummary, TraceError> {
    let (mut requests, mut first, mut last) = (0usize, f64::INFINITY, f64::NEG_INFINITY);
    scan(path, |e| {
        requests += 1;
        first = first.min(e.at_s);
        last = last.max(e.at_s);
    })?;
    Ok(TraceSummary {
        requests,
        span_s: last - first,
    })
}

/// Every line of the trace at `path`, parsed, to `visit`; refuses what is not a regular file
/// (before opening it: opening a FIFO blocks until a writer comes), past its byte or line
/// budget, a bad line, or no line at all.
fn scan(path: &Path, visit: impl FnMut(TraceEntry)) -> Result<(), TraceError> {
    scan_within(path, TRACE_LINE_LIMIT, visit)
}

/// [`scan`] with at most `line_limit` requests.
fn scan_within(
    path: &Path,
    line_limit: usize,
    mut visit: impl FnMut(TraceEntry),
) -> Result<(), TraceError> {
    let file = open_regular(path)?;
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = BufReader::new(file.take(TRACE_BYTE_LIMIT + 1));
    let mut line = String::new();
    let (mut read_bytes, mut number, mut requests) = (0u64, 0usize, 0usize);
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(io)?;
        if n == 0 {
            break;
        }
        read_bytes += n as u64;
        if read_bytes > TRACE_BYTE_LIMIT {
            return Err(TraceError::TooLarge {
                path: path.to_path_buf(),
                limit: TRACE_BYTE_LIMIT,
            });
        }
        number += 1;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let entry = parse_line(text).map_err(|message| TraceError::Line {
            path: path.to_path_buf(),
            line: number,
            message,
        })?;
        requests += 1;
        if requests > line_limit {
            return Err(TraceError::TooManyLines {
                path: path.to_path_buf(),
            });
        }
        visit(entry);
    }
    if requests == 0 {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The trace file opened for reading, if it is a regular file within the byte budget.
fn open_regular(path: &Path) -> Result<std::fs::File, TraceError> {
    use crate::input_file::{self, Refused};
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

/// The longest output a trace line may ask for (as datasets: `prompt::dataset`).
pub(crate) const MAX_OUTPUT_TOKENS: u64 = 1_000_000;
/// The longest prompt a trace line may ask for: 16 Mi tokens, past every context served today.
pub(crate) const MAX_INPUT_TOKENS: u64 = 16 * 1024 * 1024;

fn parse_line(text: &str) -> Result<TraceEntry, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
    let obj = v
        .as_object()
        .ok_or("each line must be a JSON object like {\"at\": 0.5}")?;
    let at_s = match (obj.get("at"), obj.get("timestamp")) {
        (Some(at), _) => at.as_f64().ok_or("`at` must be a number of seconds")?,
        (None, Some(ms)) => {
            ms.as_f64()
                .ok_or("`timestamp` must be a number of milliseconds")?
                / 1000.0
        }
        (None, None) => {
            return Err(
                "no arrival time: give `at` (seconds) or `timestamp` (milliseconds)".into(),
            );
        }
    };
    if !at_s.is_finite() || at_s < 0.0 {
        return Err(format!("arrival time {at_s} is not a time"));
    }
    let count = |names: [&str; 2]| -> Result<Option<u64>, String> {
        for name in names {
            if let Some(v) = obj.get(name) {
                return v
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| format!("`{name}` must be a whole number of tokens"));
            }
        }
        Ok(None)
    };
    let output = count(["output_tokens", "output_length"])?;
    let output_tokens = match output {
        Some(0) => return Err("an output length of 0 asks for nothing".into()),
        Some(n) if n > MAX_OUTPUT_TOKENS => {
            return Err(format!(
                "output length {n} is over {MAX_OUTPUT_TOKENS} tokens"
            ));
        }
        Some(n) => Some(n as u32),
        None => None,
    };
    // A prompt of this many tokens is generated in memory before the server's context is
    // known: bound it like every input.
    let input_tokens = count(["input_tokens", "input_length"])?;
    if let Some(n) = input_tokens.filter(|&n| n > MAX_INPUT_TOKENS) {
        return Err(format!(
            "input length {n} is over {MAX_INPUT_TOKENS} tokens"
        ));
    }
    Ok(TraceEntry {
        at_s,
        input_tokens,
        output_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_seconds_and_mooncake_milliseconds() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 2.5, \"output_tokens\": 7}\n\n{\"at\": 1.0}\n").unwrap();
        let t = read(&p).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].at_s, 0.0);
        assert_eq!(t[1].at_s, 1.5);
        assert_eq!(t[1].output_tokens, Some(7));
        std::fs::write(
            &p,
            "{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46]}\n{\"timestamp\": 30535, \"input_length\": 6472, \"output_length\": 26}\n",
        )
        .unwrap();
        let t = read(&p).unwrap();
        assert!((t[1].at_s - 3.053).abs() < 1e-9);
        assert_eq!(t[0].input_tokens, Some(6955));
    }

    #[test]
    fn lengths_past_their_bounds_are_refused_with_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 1, \"input_tokens\": 1000000000000}\n").unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains("t.jsonl:1: input length 1000000000000 is over 16777216 tokens"),
            "{e}"
        );
        std::fs::write(&p, "{\"at\": 1}\n{\"at\": 2, \"output_length\": 1000001}\n").unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(
            e.contains("t.jsonl:2: output length 1000001 is over 1000000 tokens"),
            "{e}"
        );
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("t.jsonl");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        // Opened, this would block until a writer came: it is refused first.
        let e = summarize(&fifo).unwrap_err().to_string();
        assert!(
            e.contains("is a FIFO (named pipe), not a regular file"),
            "{e}"
        );
        // /dev/zero never ends: refused without reading 256 MB of it.
        let started = std::time::Instant::now();
        let e = read(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("a character device"), "{e}");
        assert!(started.elapsed().as_secs_f64() < 0.5);
        let e = read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
    }

    #[test]
    fn a_trace_past_its_line_limit_is_refused_as_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 1}\n{\"at\": 2}\n{\"at\": 3}\n").unwrap();
        let mut seen = 0;
        let e = scan_within(&p, 2, |_| seen += 1).unwrap_err();
        assert!(matches!(e, TraceError::TooManyLines { .. }), "{e}");
        assert_eq!(seen, 2, "stopped at the limit");
        assert!(scan_within(&p, 3, |_| {}).is_ok());
    }

    #[test]
    fn a_summary_counts_and_spans_without_keeping_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 5}\n{\"at\": 2}\n\n{\"at\": 9.5}\n").unwrap();
        let s = summarize(&p).unwrap();
        assert_eq!(s.requests, 3);
        assert!((s.span_s - 7.5).abs() < 1e-12);
    }

    #[test]
    fn a_bad_line_is_named_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 1}\n{\"when\": 2}\n").unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("t.jsonl:2: no arrival time"), "{e}");
    }
}
