//! Trace files: one request a line, JSON. The arrival time is `at` (seconds) or Mooncake's
//! `timestamp` (milliseconds); `output_tokens` (or Mooncake's `output_length`) sets the
//! request's `max_tokens`; `input_tokens` (or `input_length`) is kept for the workload's
//! generator: the request's prompt is generated and calibrated at that length. Mooncake's
//! `hash_ids` (the prefix blocks of the prompt, `block_size` tokens each) are kept, unless
//! `load.trace.hash_ids: ignore`: the prompt is then made of those blocks (`prompt::blocks`),
//! so requests share what the trace says they share. Other fields are ignored, so existing
//! traces load as they are, except AIPerf's `mooncake_trace` fields servebench does not
//! replay (`delay`, `session_id`, `text_input`, `messages`, `payload`), which are refused
//! where they stand.
//! `load.trace.format: burstgpt` reads BurstGPT's CSV instead (`super::burstgpt`).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use servebench_model::spec::load_model::{HashIds, TraceFormat};

pub use super::trace_line::{BlockRange, TraceError};
pub(crate) use super::trace_line::{
    LineError, MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS, TRACE_BYTE_LIMIT, TRACE_ID_LIMIT,
    TRACE_LINE_BYTES, TRACE_LINE_LIMIT, TraceEntry, open_regular,
};

/// Most `hash_ids` one line may name.
pub(crate) const IDS_PER_LINE: usize = 65_536;

/// How a trace's `hash_ids` are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceOptions {
    /// Tokens each block id stands for.
    pub block_size: u32,
    pub hash_ids: HashIds,
    pub format: TraceFormat,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            block_size: 512,
            hash_ids: HashIds::Auto,
            format: TraceFormat::Mooncake,
        }
    }
}

impl TraceOptions {
    /// The options `load.trace` gives.
    pub(crate) fn of(spec: &servebench_model::spec::load_model::TraceSpec) -> TraceOptions {
        TraceOptions {
            block_size: match spec.format {
                // Bailian's blocks are 16 tokens (its README); `validate` refuses another size.
                TraceFormat::Bailian => servebench_model::spec::load_model::BAILIAN_BLOCK_SIZE,
                _ => spec.block_size.max(1),
            },
            hash_ids: spec.hash_ids,
            format: spec.format,
        }
    }
}

/// A trace read whole: its lines in time order, and every line's block ids in one list.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Trace {
    pub entries: Vec<TraceEntry>,
    pub ids: Vec<u64>,
    /// A SageMaker capture's requests, line for line with `entries` (empty for other formats).
    pub captured: Vec<super::capture::CapturedRequest>,
}

impl Trace {
    /// The block ids of a line (empty when it has none).
    #[cfg(test)]
    pub(crate) fn ids_of(&self, blocks: Option<BlockRange>) -> &[u64] {
        match blocks {
            Some(b) => &self.ids[b.start as usize..(b.start + b.len) as usize],
            None => &[],
        }
    }
}

/// Reads a trace file. Times are made relative to the earliest arrival and sorted.
pub(crate) fn read(path: &Path, options: TraceOptions) -> Result<Trace, TraceError> {
    if options.format == TraceFormat::SagemakerCapture {
        let capture = super::capture::read(path)?;
        // Said once a run (the schedule is made again for each round and estimate).
        static SAID: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
        let first = SAID.lock().is_ok_and(|mut said| {
            let new = !said.iter().any(|p| p == path);
            if new {
                said.push(path.to_path_buf());
            }
            new
        });
        if first && !capture.dropped.is_empty() {
            let names: Vec<String> = capture
                .dropped
                .iter()
                .map(|(name, n)| format!("`{name}` ({n})"))
                .collect();
            tracing::warn!(
                "{}: fields of the captured requests not sent (servebench's own model, stream and sampling fields go instead): {}",
                path.display(),
                names.join(", ")
            );
        }
        return Ok(Trace {
            entries: capture
                .requests
                .iter()
                .map(|r| TraceEntry {
                    at_s: r.at_s,
                    input_tokens: None,
                    output_tokens: r.max_tokens,
                    blocks: None,
                })
                .collect(),
            ids: Vec::new(),
            captured: capture.requests,
        });
    }
    let mut trace = Trace::default();
    let mut too_many = false;
    scan(path, options, |mut e, ids| {
        if !ids.is_empty() {
            if trace.ids.len() + ids.len() > TRACE_ID_LIMIT {
                too_many = true;
                return false;
            }
            e.blocks = Some(BlockRange {
                start: trace.ids.len() as u32,
                len: ids.len() as u32,
            });
            trace.ids.extend_from_slice(ids);
        }
        trace.entries.push(e);
        true
    })?;
    if too_many {
        return Err(TraceError::TooManyIds {
            path: path.to_path_buf(),
        });
    }
    trace.entries.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let first = trace.entries[0].at_s;
    for e in &mut trace.entries {
        e.at_s -= first;
    }
    Ok(trace)
}

/// What a trace holds, read without keeping its lines (what `validate` needs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TraceSummary {
    pub requests: usize,
    /// Lines whose prompt is made of their `hash_ids`.
    pub with_blocks: usize,
    /// Seconds from its earliest arrival to its latest (before the time scale).
    pub span_s: f64,
    /// Lines that give no output length (the workload's `output_tokens` is sent).
    pub without_output: usize,
}

/// Reads a trace file through, checking every line as [`read`] does, in memory that does not
/// grow with its length.
pub(crate) fn summarize(path: &Path, options: TraceOptions) -> Result<TraceSummary, TraceError> {
    if options.format == TraceFormat::SagemakerCapture {
        let (requests, without_output, span_s) = super::capture::summarize(path)?;
        return Ok(TraceSummary {
            requests,
            with_blocks: 0,
            span_s,
            without_output,
        });
    }
    let mut without_output = 0usize;
    let (mut requests, mut first, mut last) = (0usize, f64::INFINITY, f64::NEG_INFINITY);
    let (mut with_blocks, mut ids_total) = (0usize, 0usize);
    scan(path, options, |e, ids| {
        requests += 1;
        without_output += usize::from(e.output_tokens.is_none());
        with_blocks += usize::from(!ids.is_empty());
        ids_total += ids.len();
        first = first.min(e.at_s);
        last = last.max(e.at_s);
        true
    })?;
    if ids_total > TRACE_ID_LIMIT {
        return Err(TraceError::TooManyIds {
            path: path.to_path_buf(),
        });
    }
    Ok(TraceSummary {
        requests,
        with_blocks,
        span_s: last - first,
        without_output,
    })
}

/// Every line of the trace at `path`, parsed, to `visit` (with its block ids; it returns
/// false to stop); refuses what is not a regular file (before opening it: opening a FIFO
/// blocks until a writer comes), past its byte or line budget, a bad line, or no line at all.
fn scan(
    path: &Path,
    options: TraceOptions,
    visit: impl FnMut(TraceEntry, &[u64]) -> bool,
) -> Result<(), TraceError> {
    scan_within(path, TRACE_LINE_LIMIT, options, visit)
}

/// [`scan`] with at most `line_limit` requests.
fn scan_within(
    path: &Path,
    line_limit: usize,
    options: TraceOptions,
    mut visit: impl FnMut(TraceEntry, &[u64]) -> bool,
) -> Result<(), TraceError> {
    let file = open_regular(path)?;
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = BufReader::new(file.take(TRACE_BYTE_LIMIT + 1));
    let mut line = Vec::new();
    let mut ids = Vec::new();
    let (mut read_bytes, mut number, mut requests) = (0u64, 0usize, 0usize);
    // A CSV trace's columns, once its header is read.
    let mut columns = None;
    loop {
        line.clear();
        // One line read within its budget: a file of one endless line is not held whole.
        let n = (&mut reader)
            .take(TRACE_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(io)?;
        if n == 0 {
            break;
        }
        if n > TRACE_LINE_BYTES {
            return Err(TraceError::LineTooLong {
                path: path.to_path_buf(),
                line: number + 1,
            });
        }
        read_bytes += n as u64;
        if read_bytes > TRACE_BYTE_LIMIT {
            return Err(TraceError::TooLarge {
                path: path.to_path_buf(),
                limit: TRACE_BYTE_LIMIT,
            });
        }
        number += 1;
        let Ok(text) = std::str::from_utf8(&line) else {
            return Err(TraceError::Line {
                path: path.to_path_buf(),
                line: number,
                column: 1,
                message: "the line is not UTF-8 text".into(),
                hint: None,
            });
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        ids.clear();
        let at_line = |e: LineError| TraceError::Line {
            path: path.to_path_buf(),
            line: number,
            column: e.column,
            message: e.message,
            hint: e.hint,
        };
        let entry = match (options.format, columns) {
            (TraceFormat::Mooncake | TraceFormat::Bailian, _) => {
                parse_line(text, options, &mut ids).map_err(at_line)?
            }
            (TraceFormat::Burstgpt, None) => {
                if options.hash_ids == HashIds::Required {
                    return Err(at_line(LineError::with_hint(
                        "a BurstGPT trace records no blocks, and `load.trace.hash_ids: required` asks every line for them".into(),
                        1,
                        "set `load.trace.hash_ids: auto`: prompts are generated at each row's length",
                    )));
                }
                columns = Some(super::burstgpt::header(text).map_err(at_line)?);
                continue;
            }
            (TraceFormat::Burstgpt, Some(c)) => super::burstgpt::row(text, c).map_err(at_line)?,
            // Read by `super::capture` (`read` and `summarize` hand it over).
            (TraceFormat::SagemakerCapture, _) => {
                return Err(at_line("a SageMaker capture is read whole".into()));
            }
        };
        requests += 1;
        if requests > line_limit {
            return Err(TraceError::TooManyLines {
                path: path.to_path_buf(),
            });
        }
        if !visit(entry, &ids) {
            break;
        }
    }
    if requests == 0 {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The 1-based column of `"name"` in the line (1 when it is not there).
fn column_of(text: &str, name: &str) -> usize {
    text.find(&format!("\"{name}\"")).map_or(1, |i| i + 1)
}

/// Parses one line; its block ids go to `ids` (left empty when it has none).
fn parse_line(
    text: &str,
    options: TraceOptions,
    ids: &mut Vec<u64>,
) -> Result<TraceEntry, LineError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| LineError {
        message: format!("not a JSON object: {e}"),
        column: e.column().max(1),
        hint: None,
    })?;
    let obj = v
        .as_object()
        .ok_or("each line must be a JSON object like {\"at\": 0.5}")?;
    refuse_unreplayed(text, obj)?;
    let at_s = match (obj.get("at"), obj.get("timestamp")) {
        _ if options.format == TraceFormat::Bailian => bailian_time(text, obj)?,
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
        return Err(format!("arrival time {at_s} is not a time").into());
    }
    let count = |names: [&str; 2]| -> Result<Option<u64>, LineError> {
        for name in names {
            if let Some(v) = obj.get(name) {
                return v.as_u64().map(Some).ok_or_else(|| LineError {
                    message: format!("`{name}` must be a whole number of tokens"),
                    column: column_of(text, name),
                    hint: None,
                });
            }
        }
        Ok(None)
    };
    let output = count(["output_tokens", "output_length"])?;
    let output_tokens = match output {
        Some(0) => return Err("an output length of 0 asks for nothing".into()),
        Some(n) if n > MAX_OUTPUT_TOKENS => {
            return Err(format!("output length {n} is over {MAX_OUTPUT_TOKENS} tokens").into());
        }
        Some(n) => Some(n as u32),
        None => None,
    };
    // A prompt of this many tokens is generated in memory before the server's context is
    // known: bound it like every input.
    let input_tokens = count(["input_tokens", "input_length"])?;
    if let Some(n) = input_tokens.filter(|&n| n > MAX_INPUT_TOKENS) {
        return Err(format!("input length {n} is over {MAX_INPUT_TOKENS} tokens").into());
    }
    read_hash_ids(text, obj, input_tokens, options, ids)?;
    Ok(TraceEntry {
        at_s,
        input_tokens,
        output_tokens,
        blocks: None,
    })
}

/// A Bailian line's arrival (`timestamp`, seconds from the trace's start), once its chat
/// fields are checked as AIPerf's `BailianTrace` model reads them: `chat_id` a whole number
/// (a line without one is not Bailian's: a Mooncake trace read as Bailian would run 1,000
/// times slower), `parent_chat_id` and `turn` whole numbers where given.
fn bailian_time(
    text: &str,
    obj: &serde_json::Map<String, serde_json::Value>,
) -> Result<f64, LineError> {
    const HINT: &str = "a Bailian line is {\"chat_id\": 159, \"parent_chat_id\": -1, \"timestamp\": 61.114, \"input_length\": 521, \"output_length\": 132, \"type\": \"text\", \"turn\": 1, \"hash_ids\": [...]}; for Mooncake's lines (milliseconds) set `load.trace.format: mooncake`";
    let whole = |name: &str, required: bool| -> Result<(), LineError> {
        match obj.get(name) {
            None if required => Err(LineError::with_hint(
                format!("no `{name}`: not a Bailian trace line"),
                1,
                HINT,
            )),
            None => Ok(()),
            Some(v) if v.is_i64() => Ok(()),
            Some(v) => Err(LineError::with_hint(
                format!("`{name}` must be a whole number, found {v}"),
                column_of(text, name),
                HINT,
            )),
        }
    };
    whole("chat_id", true)?;
    whole("parent_chat_id", false)?;
    whole("turn", false)?;
    if obj.contains_key("at") {
        return Err(LineError::with_hint(
            "`at` is not Bailian's: its arrival is `timestamp`, in seconds".into(),
            column_of(text, "at"),
            HINT,
        ));
    }
    match obj.get("timestamp") {
        Some(t) => t.as_f64().ok_or_else(|| {
            LineError::with_hint(
                "`timestamp` must be a number of seconds".into(),
                column_of(text, "timestamp"),
                HINT,
            )
        }),
        None => Err(LineError::with_hint(
            "no `timestamp` (seconds from the trace's start)".into(),
            1,
            HINT,
        )),
    }
}

/// AIPerf's `mooncake_trace` lines may carry what servebench does not replay: refused at the
/// field, so a trace is never replayed as something it is not.
fn refuse_unreplayed(
    text: &str,
    obj: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), LineError> {
    let at = |name: &str, message: &str, hint: &'static str| {
        Err(LineError::with_hint(
            message.to_string(),
            column_of(text, name),
            hint,
        ))
    };
    if obj.contains_key("delay") {
        return at(
            "delay",
            "`delay` (AIPerf's wait before a session's turn) is not replayed: servebench sends each line at its own arrival time",
            "give each line its `timestamp` (milliseconds from the trace's start) instead of a `delay`",
        );
    }
    if obj.get("session_id").is_some_and(|v| !v.is_null()) {
        return at(
            "session_id",
            "`session_id` (AIPerf's session, whose lines go one after another's answer) is not replayed: servebench sends each line at its own arrival time",
            "remove `session_id` to replay each line at its `timestamp`, or replay sessions as an agent session trace (`load: { kind: agentic }`)",
        );
    }
    for name in ["text_input", "messages", "payload"] {
        if obj.contains_key(name) {
            return at(
                name,
                &format!(
                    "`{name}` (AIPerf's literal prompt) is not replayed: a trace line's prompt is generated at its `input_length`, or made of its `hash_ids`"
                ),
                "give the line its `input_length` (and `hash_ids`), or send literal prompts as a dataset (`workload.prompt: { kind: dataset }`)",
            );
        }
    }
    Ok(())
}

/// A line's `hash_ids` into `ids`, checked against the block size and its input length, as
/// `options.hash_ids` asks.
fn read_hash_ids(
    text: &str,
    obj: &serde_json::Map<String, serde_json::Value>,
    input_tokens: Option<u64>,
    options: TraceOptions,
    ids: &mut Vec<u64>,
) -> Result<(), LineError> {
    if options.hash_ids == HashIds::Ignore {
        return Ok(());
    }
    let required = options.hash_ids == HashIds::Required;
    let at = |message: String, hint: &'static str| LineError {
        message,
        column: column_of(text, "hash_ids"),
        hint: Some(hint),
    };
    let list = match obj.get("hash_ids") {
        None if required => {
            return Err(at(
                "the line has no `hash_ids`, and `load.trace.hash_ids: required` asks every line for them".into(),
                "give the line its prefix blocks (`\"hash_ids\": [46, 47]`), or set `load.trace.hash_ids: auto` to generate prompts for lines without them",
            ));
        }
        None => return Ok(()),
        Some(serde_json::Value::Array(list)) => list,
        Some(other) => {
            return Err(at(
                format!("`hash_ids` must be a list of block ids, found {other}"),
                "write the prefix blocks as a list of whole numbers: `\"hash_ids\": [46, 47]`, or set `load.trace.hash_ids: ignore`",
            ));
        }
    };
    if list.is_empty() {
        if required {
            return Err(at(
                "`hash_ids` is empty: the line names no prefix block".into(),
                "give the line its prefix blocks, or set `load.trace.hash_ids: auto`",
            ));
        }
        return Ok(());
    }
    if list.len() > IDS_PER_LINE {
        return Err(at(
            format!(
                "`hash_ids` names {} blocks, more than {IDS_PER_LINE} a line may",
                list.len()
            ),
            "cut the line's prompt, or raise `load.trace.block_size` if the trace's blocks are larger",
        ));
    }
    for (k, v) in list.iter().enumerate() {
        let Some(id) = v.as_u64() else {
            return Err(at(
                format!("`hash_ids[{k}]` is {v}, not a whole number of 0 or more"),
                "block ids are whole numbers: `\"hash_ids\": [46, 47]`",
            ));
        };
        ids.push(id);
    }
    let bs = u64::from(options.block_size.max(1));
    if let Some(n) = input_tokens {
        let full = (ids.len() as u64 - 1) * bs;
        if n <= full || n > full + bs {
            let last = n as i128 - full as i128;
            let message = format!(
                "{} hash_ids of {bs} tokens do not fit an input length of {n}: the last block would hold {last} tokens (it must hold 1 to {bs})",
                ids.len()
            );
            ids.clear();
            return Err(at(
                message,
                "set `load.trace.block_size` to the block size the trace was made with (Mooncake's: 512), or correct the line's `input_length`",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_seconds_and_mooncake_milliseconds() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 2.5, \"output_tokens\": 7}\n\n{\"at\": 1.0}\n").unwrap();
        let t = read(&p, TraceOptions::default()).unwrap().entries;
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].at_s, 0.0);
        assert_eq!(t[1].at_s, 1.5);
        assert_eq!(t[1].output_tokens, Some(7));
        std::fs::write(
            &p,
            "{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]}\n{\"timestamp\": 30535, \"input_length\": 6472, \"output_length\": 26}\n",
        )
        .unwrap();
        let trace = read(&p, TraceOptions::default()).unwrap();
        let t = &trace.entries;
        assert!((t[1].at_s - 3.053).abs() < 1e-9);
        assert_eq!(t[0].input_tokens, Some(6955));
        // 6955 tokens are 14 blocks of 512, the last holding 299.
        assert_eq!(trace.ids_of(t[0].blocks).len(), 14);
    }

    #[test]
    fn lengths_past_their_bounds_are_refused_with_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 1, \"input_tokens\": 1000000000000}\n").unwrap();
        let e = read(&p, TraceOptions::default()).unwrap_err().to_string();
        assert!(
            e.contains("t.jsonl:1:1: input length 1000000000000 is over 16777216 tokens"),
            "{e}"
        );
        std::fs::write(&p, "{\"at\": 1}\n{\"at\": 2, \"output_length\": 1000001}\n").unwrap();
        let e = read(&p, TraceOptions::default()).unwrap_err().to_string();
        assert!(
            e.contains("t.jsonl:2:1: output length 1000001 is over 1000000 tokens"),
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
        let e = summarize(&fifo, TraceOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("is a FIFO (named pipe), not a regular file"),
            "{e}"
        );
        // /dev/zero never ends: refused without reading 256 MB of it.
        let started = std::time::Instant::now();
        let e = read(Path::new("/dev/zero"), TraceOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("a character device"), "{e}");
        assert!(started.elapsed().as_secs_f64() < 0.5);
        let e = read(dir.path(), TraceOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("a directory"), "{e}");
    }

    #[test]
    fn a_trace_past_its_line_limit_is_refused_as_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 1}\n{\"at\": 2}\n{\"at\": 3}\n").unwrap();
        let mut seen = 0;
        let e = scan_within(&p, 2, TraceOptions::default(), |_, _| {
            seen += 1;
            true
        })
        .unwrap_err();
        assert!(matches!(e, TraceError::TooManyLines { .. }), "{e}");
        assert_eq!(seen, 2, "stopped at the limit");
        assert!(scan_within(&p, 3, TraceOptions::default(), |_, _| true).is_ok());
    }

    #[test]
    fn a_summary_counts_and_spans_without_keeping_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 5}\n{\"at\": 2}\n\n{\"at\": 9.5}\n").unwrap();
        let s = summarize(&p, TraceOptions::default()).unwrap();
        assert_eq!(s.requests, 3);
        assert!((s.span_s - 7.5).abs() < 1e-12);
    }

    #[test]
    fn a_bad_line_is_named_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"at\": 1}\n{\"when\": 2}\n").unwrap();
        let e = read(&p, TraceOptions::default()).unwrap_err().to_string();
        assert!(e.contains("t.jsonl:2:1: no arrival time"), "{e}");
    }

    fn write(dir: &tempfile::TempDir, text: &str) -> std::path::PathBuf {
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn hash_ids_are_kept_in_time_order_with_their_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "{\"timestamp\": 2000, \"input_length\": 1100, \"output_length\": 4, \"hash_ids\": [0, 1, 5]}\n\
             {\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [0, 1]}\n\
             {\"timestamp\": 3000, \"input_length\": 100}\n",
        );
        let t = read(&p, TraceOptions::default()).unwrap();
        assert_eq!(t.ids_of(t.entries[0].blocks), [0, 1]);
        assert_eq!(t.ids_of(t.entries[1].blocks), [0, 1, 5]);
        assert!(t.entries[2].blocks.is_none(), "a line without ids has none");
        let s = summarize(&p, TraceOptions::default()).unwrap();
        assert_eq!((s.requests, s.with_blocks), (3, 2));
        let ignored = TraceOptions {
            hash_ids: HashIds::Ignore,
            ..TraceOptions::default()
        };
        assert!(read(&p, ignored).unwrap().ids.is_empty());
    }

    #[test]
    fn unusable_hash_ids_are_refused_at_their_line_and_column_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let required = TraceOptions {
            hash_ids: HashIds::Required,
            ..TraceOptions::default()
        };
        let p = write(
            &dir,
            "{\"at\": 0, \"hash_ids\": [1]}\n{\"at\": 1, \"input_length\": 9}\n",
        );
        let e = read(&p, required).unwrap_err();
        assert!(
            e.to_string()
                .contains("t.jsonl:2:1: the line has no `hash_ids`"),
            "{e}"
        );
        // Not a list, a negative id: refused whatever the mode (but `ignore`).
        let p = write(&dir, "{\"at\": 0, \"hash_ids\": \"46\"}\n");
        let e = read(&p, TraceOptions::default()).unwrap_err().to_string();
        assert!(e.contains("t.jsonl:1:11: `hash_ids` must be a list"), "{e}");
        let p = write(&dir, "{\"at\": 0, \"hash_ids\": [3, -1]}\n");
        let e = read(&p, TraceOptions::default()).unwrap_err().to_string();
        assert!(e.contains("`hash_ids[1]` is -1"), "{e}");
        // Three blocks of 512 cannot hold 700 tokens: the block size is another.
        let p = write(
            &dir,
            "{\"at\": 0, \"input_length\": 700, \"hash_ids\": [1, 2, 3]}\n",
        );
        let e = read(&p, TraceOptions::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("the last block would hold -324 tokens"),
            "{e}"
        );
        let TraceError::Line { hint, .. } = e else {
            panic!("{e}")
        };
        assert!(hint.unwrap().contains("load.trace.block_size"));
        let small = TraceOptions {
            block_size: 256,
            ..TraceOptions::default()
        };
        assert!(read(&p, small).is_ok(), "700 tokens are 3 blocks of 256");
    }

    #[test]
    fn a_line_past_its_byte_budget_is_refused_without_being_held() {
        let dir = tempfile::tempdir().unwrap();
        let long = format!(
            "{{\"at\": 0, \"pad\": \"{}\"}}\n",
            "x".repeat(TRACE_LINE_BYTES)
        );
        let p = write(&dir, &long);
        let e = read(&p, TraceOptions::default()).unwrap_err();
        assert!(matches!(e, TraceError::LineTooLong { line: 1, .. }), "{e}");
    }

    fn bailian() -> TraceOptions {
        let spec: servebench_model::spec::load_model::TraceSpec =
            serde_json::from_value(serde_json::json!({"file": "t.jsonl", "format": "bailian"}))
                .unwrap();
        TraceOptions::of(&spec)
    }

    #[test]
    fn a_bailian_trace_is_read_in_seconds_with_16_token_blocks() {
        let dir = tempfile::tempdir().unwrap();
        // The README's and AIPerf's documented lines (hash_ids cut to fit their lengths).
        let p = write(
            &dir,
            concat!(
                r#"{"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 40, "output_length": 132, "type": "text", "turn": 1, "hash_ids": [1089, 1090, 1091]}"#,
                "\n",
                r#"{"chat_id": 160, "parent_chat_id": 159, "timestamp": 62.5, "input_length": 32, "output_length": 80, "type": "text", "turn": 2, "hash_ids": [1089, 1090]}"#,
                "\n",
            ),
        );
        let options = bailian();
        assert_eq!(options.block_size, 16);
        let t = read(&p, options).unwrap();
        assert_eq!(t.entries.len(), 2);
        assert!((t.entries[1].at_s - 1.386).abs() < 1e-9, "{:?}", t.entries);
        assert_eq!(t.entries[0].output_tokens, Some(132));
        assert_eq!(t.ids_of(t.entries[1].blocks), [1089, 1090]);
        // 3 blocks of 16 hold 33 to 48 tokens: 49 does not fit.
        let p = write(
            &dir,
            r#"{"chat_id": 1, "timestamp": 0, "input_length": 49, "output_length": 1, "hash_ids": [1, 2, 3]}"#,
        );
        let e = read(&p, options).unwrap_err().to_string();
        assert!(e.contains("t.jsonl:1:"), "{e}");
        assert!(e.contains("the last block would hold"), "{e}");
    }

    #[test]
    fn a_line_that_is_not_bailians_is_refused_where_it_stands() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            // A Mooncake line (milliseconds) read as Bailian's.
            (
                r#"{"timestamp": 3052, "input_length": 20, "output_length": 4}"#,
                "t.jsonl:1:1: no `chat_id`: not a Bailian trace line",
            ),
            (
                r#"{"chat_id": 1, "parent_chat_id": "root", "timestamp": 1, "input_length": 20}"#,
                "t.jsonl:1:16: `parent_chat_id` must be a whole number",
            ),
            (
                r#"{"chat_id": 1, "at": 1, "input_length": 20}"#,
                "t.jsonl:1:16: `at` is not Bailian's",
            ),
            (
                r#"{"chat_id": 1, "input_length": 20}"#,
                "t.jsonl:1:1: no `timestamp`",
            ),
            (
                r#"{"chat_id": 1, "timestamp": -2, "input_length": 20}"#,
                "t.jsonl:1:1: arrival time -2 is not a time",
            ),
        ];
        for (line, want) in cases {
            let p = write(&dir, &format!("{line}\n"));
            let e = read(&p, bailian()).unwrap_err().to_string();
            let e = &e[e.find("t.jsonl").unwrap()..];
            assert!(e.starts_with(want), "{line}\n got {e}\nwant {want}");
        }
    }

    fn burstgpt() -> TraceOptions {
        TraceOptions {
            format: TraceFormat::Burstgpt,
            ..TraceOptions::default()
        }
    }

    #[test]
    fn a_burstgpt_csv_is_read_by_its_header_in_seconds() {
        let dir = tempfile::tempdir().unwrap();
        // Rows as BurstGPT's README documents them; file 2's times start days in.
        let p = write(
            &dir,
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
             5270414,ChatGPT,472,18,490,Conversation log\n\
             5270454.5,GPT-4,1087,230,1317,API log\n",
        );
        let t = read(&p, burstgpt()).unwrap();
        assert_eq!(t.entries.len(), 2);
        assert_eq!(t.entries[1].at_s, 40.5);
        assert_eq!(
            (t.entries[1].input_tokens, t.entries[1].output_tokens),
            (Some(1087), Some(230))
        );
        assert!(t.ids.is_empty());
        let s = summarize(&p, burstgpt()).unwrap();
        assert_eq!((s.requests, s.with_blocks, s.span_s), (2, 0, 40.5));
        // The same file read as JSONL is refused at its first line, with the format to set.
        let e = read(&p, TraceOptions::default()).unwrap_err().to_string();
        assert!(e.contains("t.jsonl:1:1: not a JSON object"), "{e}");
        let required = TraceOptions {
            hash_ids: HashIds::Required,
            ..burstgpt()
        };
        let e = read(&p, required).unwrap_err().to_string();
        assert!(
            e.contains("t.jsonl:1:1: a BurstGPT trace records no blocks"),
            "{e}"
        );
        // A failed request is refused at its row and column, with the file without them.
        let p = write(
            &dir,
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,0,472,API log\n",
        );
        let e = read(&p, burstgpt()).unwrap_err();
        assert!(
            e.to_string()
                .contains("t.jsonl:2:15: `Response tokens` is 0"),
            "{e}"
        );
        let TraceError::Line { hint, .. } = e else {
            panic!("{e}")
        };
        assert!(hint.unwrap().contains("BurstGPT_without_fails"));
        // A header alone holds no request.
        let p = write(&dir, "Timestamp,Model,Request tokens,Response tokens\n");
        assert!(matches!(
            read(&p, burstgpt()),
            Err(TraceError::Empty { .. })
        ));
    }

    #[test]
    fn aiperf_fields_that_are_not_replayed_are_refused_where_they_stand() {
        let dir = tempfile::tempdir().unwrap();
        for (line, column, what) in [
            ("{\"delay\": 500, \"input_length\": 9}", 2, "`delay`"),
            (
                "{\"timestamp\": 0, \"text_input\": \"hi\"}",
                18,
                "`text_input`",
            ),
            ("{\"timestamp\": 0, \"messages\": []}", 18, "`messages`"),
            ("{\"timestamp\": 0, \"payload\": {}}", 18, "`payload`"),
            (
                "{\"timestamp\": 0, \"session_id\": \"a\"}",
                18,
                "`session_id`",
            ),
        ] {
            let p = write(&dir, &format!("{{\"timestamp\": 0}}\n{line}\n"));
            let e = read(&p, TraceOptions::default()).unwrap_err().to_string();
            assert!(e.contains(&format!("t.jsonl:2:{column}: {what}")), "{e}");
        }
    }

    /// Hostile lines in either format: each an error at `file:line:column`, none a panic.
    #[test]
    fn hostile_lines_are_errors_at_their_place_in_either_format() {
        let dir = tempfile::tempdir().unwrap();
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let jsonl: [&[u8]; 9] = [
            b"{\"at\": 1e400}",
            b"{\"at\": -1}",
            b"{\"timestamp\": \"NaN\"}",
            b"{\"at\": 0, \"input_length\": 99999999999999999999}",
            b"{\"at\": 0, \"output_length\": -5}",
            b"{\"at\": 0, \"hash_ids\": [1.5]}",
            b"\xff\xfe{}",
            deep.as_bytes(),
            b"{\"at\": 0, \"hash_ids\": {\"0\": 1}}",
        ];
        for bad in jsonl {
            let p = dir.path().join("t.jsonl");
            let mut text = b"{\"at\": 0}\n".to_vec();
            text.extend_from_slice(bad);
            std::fs::write(&p, &text).unwrap();
            let e = read(&p, TraceOptions::default()).unwrap_err();
            assert!(matches!(e, TraceError::Line { line: 2, .. }), "{e}");
        }
        let header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
        for bad in [
            "1,a,b,c,d,e",
            "1,ChatGPT,5",
            "-1,ChatGPT,5,5,10,x",
            "1,ChatGPT,5,5000000000,10,x",
            "1,ChatGPT,5,\"5\",10,x",
            "1,ChatGPT,5.25,5,10,x",
        ] {
            let p = write(&dir, &format!("{header}{bad}\n"));
            let e = read(&p, burstgpt()).unwrap_err();
            assert!(matches!(e, TraceError::Line { line: 2, .. }), "{e}");
        }
        let p = write(&dir, "Timestamp;Request tokens;Response tokens\n1;2;3\n");
        let e = read(&p, burstgpt()).unwrap_err().to_string();
        assert!(e.contains("t.jsonl:1:1: the header"), "{e}");
    }

    /// Seeded mutations of good lines of both formats (byte flips, cuts, inserted bytes that
    /// mean something to the parsers): each read is a trace or an error at a line and a
    /// column within it, never a panic.
    #[test]
    fn mutated_lines_of_either_format_are_read_or_refused_at_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let seeds: [(TraceOptions, &str); 3] = [
            (
                bailian(),
                "{\"chat_id\": 160, \"parent_chat_id\": 159, \"timestamp\": 62.5, \"input_length\": 32, \"output_length\": 80, \"type\": \"text\", \"turn\": 2, \"hash_ids\": [1089, 1090]}\n",
            ),
            (
                TraceOptions::default(),
                "{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}\n",
            ),
            (
                burstgpt(),
                "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n",
            ),
        ];
        let tokens: [&[u8]; 12] = [
            b"\n",
            b",",
            b"\"",
            b"{",
            b"}",
            b"[",
            b"]",
            b"-1",
            b"1e999",
            b"\xff",
            b"\xe2\x82",
            b"18446744073709551616",
        ];
        let texts: Vec<&[u8]> = seeds.iter().map(|(_, s)| s.as_bytes()).collect();
        for (i, bytes) in testkit::mutate::mutations(&texts, &tokens, 0x9E37_79B9_7F4A_7C15, 1000) {
            let options = seeds[i % seeds.len()].0;
            let p = dir.path().join("t.jsonl");
            std::fs::write(&p, &bytes).unwrap();
            if let Err(TraceError::Line { line, column, .. }) = read(&p, options) {
                testkit::mutate::assert_within(&bytes, line, column);
            }
        }
    }
}
