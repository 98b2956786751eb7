//! Amazon SageMaker Data Capture files (`load.trace.format: sagemaker-capture`), read as
//! AIPerf 0.13's `sagemaker_data_capture` loader reads them: a JSONL file, or a folder whose
//! `.jsonl` files (recursively, by path) are read in turn; each record
//! (`captureData.endpointInput`/`endpointOutput` with `data` in `encoding` JSON or BASE64,
//! `eventMetadata.inferenceTime` in ISO 8601) is one request, sent at its time with the
//! captured request's literal `messages` and `tools` and its `max_tokens` (else
//! `max_completion_tokens`); the captured response's `usage.prompt_tokens` is kept as the
//! recorded count. Other fields of the captured body are dropped (and named once); nothing a
//! record holds is written anywhere but the request to the server.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value};

use super::trace_line::{
    LineError, MAX_OUTPUT_TOKENS, TRACE_BYTE_LIMIT, TRACE_LINE_LIMIT, TraceError, open_regular,
};

/// Longest record, bytes: a real-time endpoint's request and response (6 MB each at most,
/// SageMaker's payload limit) base64-encoded in one line.
pub(crate) const CAPTURE_LINE_BYTES: usize = 32 << 20;

/// Most bytes of decoded request payloads held while a capture replays (its messages and
/// tools): the trace's own byte budget.
pub(crate) const CAPTURE_HELD_BYTES: usize = TRACE_BYTE_LIMIT as usize;

/// Most `.jsonl` files a capture folder may hold, and how deep they may lie.
const MAX_FILES: usize = 10_000;
const MAX_DEPTH: usize = 16;

/// The latest time a record may carry (year 9999): past it, no server ran it.
const MAX_UNIX_S: f64 = 253_402_300_799.0;

/// Body fields sent as captured; every other one is dropped (servebench's own `model`,
/// `stream`, `stream_options`, `temperature`, `ignore_eos` go instead, as for every request).
const SENT: [&str; 4] = ["messages", "tools", "max_tokens", "max_completion_tokens"];

/// Most names of dropped fields kept to say so.
const DROPPED_NAMES: usize = 32;

/// One captured request, as replayed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CapturedRequest {
    /// Seconds from the capture's earliest record (before the time scale), once read whole.
    pub at_s: f64,
    pub messages: Arc<Vec<Value>>,
    pub tools: Option<Arc<Vec<Value>>>,
    /// `max_tokens`, else `max_completion_tokens` (None: the workload's `output_tokens`).
    pub max_tokens: Option<u32>,
    /// The captured response's `usage.prompt_tokens` (the recorded server's count).
    pub prompt_tokens: Option<u64>,
}

/// A capture read whole: its records in time order, and the body fields it dropped.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Capture {
    pub requests: Vec<CapturedRequest>,
    /// Each dropped field's name and how many records had it.
    pub dropped: BTreeMap<String, usize>,
}

/// Reads the capture at `path` (a file or a folder of `.jsonl` files), records in time order,
/// times relative to the earliest.
pub(crate) fn read(path: &Path) -> Result<Capture, TraceError> {
    let mut capture = Capture::default();
    let mut held = 0usize;
    scan(path, &mut |r, dropped| {
        held += r.held_bytes;
        for name in dropped {
            if capture.dropped.len() < DROPPED_NAMES || capture.dropped.contains_key(&name) {
                *capture.dropped.entry(name).or_default() += 1;
            }
        }
        capture.requests.push(r.request);
        held <= CAPTURE_HELD_BYTES
    })?;
    if held > CAPTURE_HELD_BYTES {
        return Err(TraceError::TooLarge {
            path: path.to_path_buf(),
            limit: CAPTURE_HELD_BYTES as u64,
        });
    }
    capture.requests.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let first = capture.requests[0].at_s;
    for r in &mut capture.requests {
        r.at_s -= first;
    }
    Ok(capture)
}

/// What a capture holds, read through without keeping its messages (what `validate` needs):
/// records, those without `max_tokens`, the span in seconds.
pub(crate) fn summarize(path: &Path) -> Result<(usize, usize, f64), TraceError> {
    let (mut n, mut without, mut first, mut last) = (0, 0, f64::INFINITY, f64::NEG_INFINITY);
    scan(path, &mut |r, _| {
        n += 1;
        without += usize::from(r.request.max_tokens.is_none());
        first = first.min(r.request.at_s);
        last = last.max(r.request.at_s);
        true
    })?;
    Ok((n, without, last - first))
}

/// A record read, with the bytes it holds.
struct Read1 {
    request: CapturedRequest,
    held_bytes: usize,
}

/// Every record of the capture at `path` to `visit` (with the body fields it drops; false
/// stops), within the byte, record and file budgets; a bad record is an error at its file,
/// line and column; no record at all is an error.
fn scan(path: &Path, visit: &mut dyn FnMut(Read1, Vec<String>) -> bool) -> Result<(), TraceError> {
    let files = files_of(path)?;
    let (mut bytes, mut records) = (0u64, 0usize);
    for file in &files {
        if !scan_file(file, &mut bytes, &mut records, visit)? {
            break;
        }
    }
    if records == 0 {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// The files of a capture: `path` itself, or a folder's `.jsonl` files by path (links not
/// followed: a loop would never end).
fn files_of(path: &Path) -> Result<Vec<PathBuf>, TraceError> {
    let io = |p: &Path, source| TraceError::Io {
        path: p.to_path_buf(),
        source,
    };
    let meta = std::fs::symlink_metadata(path).map_err(|e| io(path, e))?;
    let meta = if meta.file_type().is_symlink() {
        std::fs::metadata(path).map_err(|e| io(path, e))?
    } else {
        meta
    };
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut folders = vec![(path.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = folders.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
            let entry = entry.map_err(|e| io(&dir, e))?;
            let kind = entry.file_type().map_err(|e| io(&entry.path(), e))?;
            let p = entry.path();
            if kind.is_dir() && depth < MAX_DEPTH {
                folders.push((p, depth + 1));
            } else if kind.is_file() && p.extension().is_some_and(|e| e == "jsonl") {
                files.push(p);
                if files.len() > MAX_FILES {
                    return Err(TraceError::TooManyFiles {
                        path: path.to_path_buf(),
                        limit: MAX_FILES,
                    });
                }
            }
        }
    }
    if files.is_empty() {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    files.sort();
    Ok(files)
}

/// One file's records to `visit`; false when `visit` stopped.
fn scan_file(
    path: &Path,
    bytes: &mut u64,
    records: &mut usize,
    visit: &mut dyn FnMut(Read1, Vec<String>) -> bool,
) -> Result<bool, TraceError> {
    let file = open_regular(path)?;
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = BufReader::new(file.take(TRACE_BYTE_LIMIT + 1));
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(CAPTURE_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(io)?;
        if n == 0 {
            return Ok(true);
        }
        number += 1;
        if n > CAPTURE_LINE_BYTES {
            return Err(TraceError::Line {
                path: path.to_path_buf(),
                line: number,
                column: 1,
                message: format!("the record is longer than {CAPTURE_LINE_BYTES} bytes"),
                hint: Some("a capture record holds one request and its response: split the file"),
            });
        }
        *bytes += n as u64;
        if *bytes > TRACE_BYTE_LIMIT {
            return Err(TraceError::TooLarge {
                path: path.to_path_buf(),
                limit: TRACE_BYTE_LIMIT,
            });
        }
        let at_line = |e: LineError| TraceError::Line {
            path: path.to_path_buf(),
            line: number,
            column: e.column,
            message: e.message,
            hint: e.hint,
        };
        let Ok(text) = std::str::from_utf8(&line) else {
            return Err(at_line("the line is not UTF-8 text".into()));
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let (read, dropped) = record(text).map_err(at_line)?;
        *records += 1;
        if *records > TRACE_LINE_LIMIT {
            return Err(TraceError::TooManyLines {
                path: path.to_path_buf(),
            });
        }
        if !visit(read, dropped) {
            return Ok(false);
        }
    }
}

/// The fix for a record that is not a chat request's.
const CHAT_ONLY: &str = "only captures of an OpenAI-compatible chat endpoint replay (a JSON body with `messages`, as AIPerf's loader requires): capture such an endpoint";

/// The 1-based column of `"name"` in the line (1 when it is not there).
fn column_of(text: &str, name: &str) -> usize {
    text.find(&format!("\"{name}\"")).map_or(1, |i| i + 1)
}

/// Parses one record; the names of the body fields it drops beside it.
fn record(text: &str) -> Result<(Read1, Vec<String>), LineError> {
    let v: Value = serde_json::from_str(text).map_err(|e| LineError {
        message: format!("not a JSON object: {e}"),
        column: e.column().max(1),
        hint: None,
    })?;
    let obj = v
        .as_object()
        .ok_or("each line must be one capture record, a JSON object")?;
    let at = |name: &str| column_of(text, name);
    let field =
        |o: &Map<String, Value>, name: &str, hint: &'static str| -> Result<Value, LineError> {
            o.get(name).cloned().ok_or_else(|| {
                LineError::with_hint(
                    format!("no `{name}`: not a SageMaker capture record"),
                    1,
                    hint,
                )
            })
        };
    const RECORD: &str = "a record is {\"captureData\": {\"endpointInput\": {\"data\": ..., \"encoding\": \"JSON\"}, \"endpointOutput\": {...}}, \"eventMetadata\": {\"eventId\": ..., \"inferenceTime\": \"2024-05-01T12:00:00Z\"}}";
    let meta = field(obj, "eventMetadata", RECORD)?;
    let time = meta.get("inferenceTime").ok_or_else(|| {
        LineError::with_hint(
            "no `eventMetadata.inferenceTime`".into(),
            at("eventMetadata"),
            RECORD,
        )
    })?;
    let at_s = inference_time(time).map_err(|BadTime(m)| {
        LineError::with_hint(
            m,
            at("inferenceTime"),
            "give an ISO 8601 time like \"2024-05-01T12:00:00.123Z\"",
        )
    })?;
    let data = field(obj, "captureData", RECORD)?;
    let input = data.get("endpointInput").ok_or_else(|| {
        LineError::with_hint(
            "no `captureData.endpointInput`".into(),
            at("captureData"),
            RECORD,
        )
    })?;
    let body = payload(input, "endpointInput")
        .map_err(|(m, h)| LineError::with_hint(m, at("endpointInput"), h))?;
    let Some(Value::Object(body)) = body else {
        return Err(LineError::with_hint(
            "the captured request is not a JSON object".into(),
            at("endpointInput"),
            CHAT_ONLY,
        ));
    };
    let CapturedBody {
        messages,
        tools,
        max_tokens,
    } = captured_body(&body, at("endpointInput"))?;
    let dropped = body
        .keys()
        .filter(|k| !SENT.contains(&k.as_str()))
        .cloned()
        .collect();
    let prompt_tokens = recorded_prompt_tokens(&data, at("endpointOutput"))?;
    let held_bytes = serde_json::to_vec(&messages).map_or(0, |b| b.len())
        + tools
            .as_ref()
            .and_then(|t| serde_json::to_vec(t.as_ref()).ok())
            .map_or(0, |b| b.len());
    Ok((
        Read1 {
            request: CapturedRequest {
                at_s,
                messages: Arc::new(messages),
                tools,
                max_tokens,
                prompt_tokens,
            },
            held_bytes,
        },
        dropped,
    ))
}

/// The captured request's messages, tools and output limit (`max_tokens`, else
/// `max_completion_tokens`), each checked; `column` is where its `endpointInput` stands.
fn captured_body(body: &Map<String, Value>, column: usize) -> Result<CapturedBody, LineError> {
    let messages = match body.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() && m.iter().all(Value::is_object) => m.clone(),
        Some(_) => {
            return Err(LineError::with_hint(
                "the captured request's `messages` is not a list of message objects".into(),
                column,
                CHAT_ONLY,
            ));
        }
        None => {
            return Err(LineError::with_hint(
                "the captured request has no `messages`".into(),
                column,
                CHAT_ONLY,
            ));
        }
    };
    let tools = match body.get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(t)) if t.iter().all(Value::is_object) => Some(Arc::new(t.clone())),
        Some(_) => {
            return Err(LineError::with_hint(
                "the captured request's `tools` is not a list of tool objects".into(),
                column,
                CHAT_ONLY,
            ));
        }
    };
    let mut max_tokens = None;
    for name in ["max_tokens", "max_completion_tokens"] {
        match body.get(name) {
            None | Some(Value::Null) => continue,
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_OUTPUT_TOKENS).contains(&n) => {
                    max_tokens = Some(n as u32);
                    break;
                }
                _ => {
                    return Err(LineError::with_hint(
                        format!(
                            "the captured request's `{name}` is not a whole number from 1 to {MAX_OUTPUT_TOKENS}"
                        ),
                        column,
                        "a capture replays the request's own output limit: fix or remove it (then `workload.output_tokens` is sent)",
                    ));
                }
            },
        }
    }
    Ok(CapturedBody {
        messages,
        tools,
        max_tokens,
    })
}

/// What of a captured request's body is sent.
struct CapturedBody {
    messages: Vec<Value>,
    tools: Option<Arc<Vec<Value>>>,
    max_tokens: Option<u32>,
}

/// The prompt tokens the captured response's `usage` recorded, where it has them; `column`
/// is where its `endpointOutput` stands.
fn recorded_prompt_tokens(data: &Value, column: usize) -> Result<Option<u64>, LineError> {
    let prompt_tokens = match data.get("endpointOutput") {
        None => None,
        Some(output) => {
            let answer = payload(output, "endpointOutput")
                .map_err(|(m, h)| LineError::with_hint(m, column, h))?;
            match answer
                .as_ref()
                .and_then(|a| a.get("usage"))
                .and_then(|u| u.get("prompt_tokens"))
            {
                None | Some(Value::Null) => None,
                Some(n) => Some(n.as_u64().ok_or_else(|| {
                    LineError::with_hint(
                        "the captured response's `usage.prompt_tokens` is not a whole number"
                            .into(),
                        column,
                        "fix or remove the response's usage",
                    )
                })?),
            }
        }
    };
    Ok(prompt_tokens)
}

/// A captured payload (`endpointInput` or `endpointOutput`) decoded: its JSON, or None
/// where it holds none (no `data`, or a CSV or other encoding). Err: the message and fix.
fn payload(entry: &Value, what: &str) -> Result<Option<Value>, (String, &'static str)> {
    let Some(data) = entry.get("data").filter(|d| !d.is_null()) else {
        return Ok(None);
    };
    let Some(data) = data.as_str() else {
        return Err((format!("`{what}.data` is not a string"), CHAT_ONLY));
    };
    // AIPerf's default when a record names none.
    let encoding = entry
        .get("encoding")
        .and_then(Value::as_str)
        .unwrap_or("BASE64");
    let bytes = match encoding {
        "JSON" => data.as_bytes().to_vec(),
        // Decoded, the payload is smaller than its line (within the line's budget).
        "BASE64" => base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| {
                (
                    format!("`{what}.data` is not base64: {e}"),
                    "the record is damaged: fix or remove it",
                )
            })?,
        "CSV" if what == "endpointInput" => {
            return Err((
                format!("`{what}.encoding` is CSV: not a chat request"),
                CHAT_ONLY,
            ));
        }
        _ => return Ok(None),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        (
            format!("`{what}.data` ({encoding}) is not JSON: {e}"),
            "a captured chat body is JSON; a streamed response (server-sent events) is not read: capture without streaming",
        )
    })
}

/// An `inferenceTime` as Unix seconds: ISO 8601 with a zone (`Z`, `+02:00`), or without one
/// (read as UTC: only the gaps between records matter).
fn inference_time(v: &Value) -> Result<f64, BadTime> {
    let Some(s) = v.as_str() else {
        return Err(BadTime("`inferenceTime` is not a string".into()));
    };
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_micros())
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                .map(|t| t.and_utc().timestamp_micros())
        })
        // The value is not quoted: a run's flags keep this message, and a record's text is
        // not to be written anywhere.
        .map_err(|e| BadTime(format!("`inferenceTime` is not an ISO 8601 time ({e})")))?;
    let secs = t as f64 / 1e6;
    if !(0.0..=MAX_UNIX_S).contains(&secs) {
        return Err(BadTime(
            "`inferenceTime` is before 1970 or after 9999".into(),
        ));
    }
    Ok(secs)
}

/// Why an `inferenceTime` is not read (its value is never quoted).
struct BadTime(String);

#[cfg(test)]
mod tests {
    use super::*;

    /// A record in the documented schema (AWS's Data Capture page, AIPerf's model example).
    fn record(time: &str, body: &Value, usage: Option<u64>, base64: bool) -> String {
        let input = body.to_string();
        let output = serde_json::json!({"choices": [], "usage": usage.map(|n| serde_json::json!({"prompt_tokens": n, "completion_tokens": 8}))}).to_string();
        let (input, output, encoding) = if base64 {
            let b = base64::engine::general_purpose::STANDARD;
            (b.encode(input), b.encode(output), "BASE64")
        } else {
            (input, output, "JSON")
        };
        serde_json::json!({
            "captureData": {
                "endpointInput": {"observedContentType": "application/json", "mode": "INPUT", "data": input, "encoding": encoding},
                "endpointOutput": {"observedContentType": "application/json", "mode": "OUTPUT", "data": output, "encoding": encoding}
            },
            "eventMetadata": {"eventId": "abc-123", "inferenceTime": time},
            "eventVersion": "0"
        })
        .to_string()
    }

    fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    }

    #[test]
    fn records_are_read_in_time_order_with_their_literal_messages_in_either_encoding() {
        let dir = tempfile::tempdir().unwrap();
        let chat = serde_json::json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 50,
            "temperature": 0.7, "tools": [{"type": "function", "function": {"name": "f"}}]});
        let later = serde_json::json!({"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}],
            "max_completion_tokens": 7});
        let p = write(
            dir.path(),
            "c.jsonl",
            &[
                record("2026-04-29T00:03:19.250Z", &later, None, true),
                String::new(),
                record("2026-04-29T00:03:18Z", &chat, Some(12), false),
            ],
        );
        let c = read(&p).unwrap();
        assert_eq!(c.requests.len(), 2);
        let (a, b) = (&c.requests[0], &c.requests[1]);
        assert_eq!((a.at_s, b.at_s), (0.0, 1.25));
        assert_eq!(a.messages.as_ref(), chat["messages"].as_array().unwrap());
        assert_eq!(b.messages.as_ref(), later["messages"].as_array().unwrap());
        assert_eq!((a.max_tokens, b.max_tokens), (Some(50), Some(7)));
        assert_eq!((a.prompt_tokens, b.prompt_tokens), (Some(12), None));
        assert_eq!(a.tools.as_ref().unwrap()[0]["function"]["name"], "f");
        assert!(b.tools.is_none());
        assert_eq!(c.dropped, BTreeMap::from([("temperature".to_string(), 1)]));
        assert_eq!(summarize(&p).unwrap(), (2, 0, 1.25));
    }

    #[test]
    fn a_folder_is_read_through_its_jsonl_files_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        let body = |n: u64| serde_json::json!({"messages": [{"role": "user", "content": format!("m{n}")}]});
        write(
            dir.path(),
            "2026/04/29/01/b.jsonl",
            &[record("2026-04-29T01:00:00+01:00", &body(2), None, false)],
        );
        write(
            dir.path(),
            "2026/04/29/00/a.jsonl",
            &[record("2026-04-29T00:00:01Z", &body(3), None, false)],
        );
        write(dir.path(), "notes.txt", &["not read".to_string()]);
        let c = read(dir.path()).unwrap();
        let firsts: Vec<&Value> = c
            .requests
            .iter()
            .map(|r| &r.messages[0]["content"])
            .collect();
        // 01:00+01:00 is midnight UTC: a second before the other.
        assert_eq!(firsts, ["m2", "m3"]);
        assert_eq!(summarize(dir.path()).unwrap(), (2, 2, 1.0));
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(read(empty.path()), Err(TraceError::Empty { .. })));
    }

    #[test]
    fn records_that_cannot_replay_are_refused_at_their_place_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let good = record(
            "2026-04-29T00:00:00Z",
            &serde_json::json!({"messages": [{"role": "user", "content": "hi"}]}),
            None,
            false,
        );
        let csv = good.replace(r#""encoding":"JSON""#, r#""encoding":"CSV""#);
        let cases: [(String, &str, &str); 7] = [
            (csv, "`endpointInput.encoding` is CSV", "chat endpoint"),
            (
                record(
                    "2026-04-29T00:00:00Z",
                    &serde_json::json!({"inputs": "hi"}),
                    None,
                    false,
                ),
                "has no `messages`",
                "chat endpoint",
            ),
            (
                good.replace("2026-04-29T00:00:00Z", "yesterday"),
                "`inferenceTime` is not an ISO 8601 time",
                "ISO 8601",
            ),
            (
                record(
                    "2026-04-29T00:00:00Z",
                    &serde_json::json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}),
                    None,
                    false,
                ),
                "`max_tokens` is not a whole number",
                "output limit",
            ),
            (
                good.replace(r#""eventMetadata""#, r#""metadata""#),
                "no `eventMetadata`",
                "a record is",
            ),
            (
                good.replace(r#""encoding":"JSON""#, r#""encoding":"BASE64""#),
                "is not base64",
                "damaged",
            ),
            (
                "[1, 2]".to_string(),
                "each line must be one capture record",
                "",
            ),
        ];
        for (bad, message, hint) in cases {
            let p = write(dir.path(), "c.jsonl", &[good.clone(), bad.clone()]);
            let e = read(&p).unwrap_err();
            let TraceError::Line {
                line,
                column,
                message: m,
                hint: h,
                ..
            } = &e
            else {
                panic!("{e}")
            };
            assert_eq!(*line, 2, "{e}");
            assert!(m.contains(message), "{bad}\n{e}");
            assert!(*column >= 1 && *column <= bad.len(), "{column}");
            assert!(h.unwrap_or("").contains(hint), "{e}: {h:?}");
            // Nothing of the record is quoted back: only names and types.
            assert!(
                !e.to_string().contains("hi\\\"") && !e.to_string().contains("yesterday"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_record_past_its_byte_budget_is_refused_without_being_held() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        let mut f = std::fs::File::create(&p).unwrap();
        std::io::Write::write_all(&mut f, &vec![b' '; CAPTURE_LINE_BYTES + 1]).unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("c.jsonl:1:1: the record is longer than"), "{e}");
    }

    /// Seeded mutations of a good record: a capture or an error at a line and a column within
    /// it, never a panic.
    #[test]
    fn mutated_records_are_read_or_refused_at_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let good = record(
            "2026-04-29T00:03:18.5Z",
            &serde_json::json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 50}),
            Some(12),
            false,
        ) + "\n";
        let tokens: [&[u8]; 8] = [b"\n", b",", b"\"", b"{", b"}", b"-1", b"1e999", b"\xff"];
        let p = dir.path().join("c.jsonl");
        for (_, bytes) in testkit::mutate::mutations(&[good.as_bytes()], &tokens, 0x5A6E_4D41, 500)
        {
            std::fs::write(&p, &bytes).unwrap();
            if let Err(TraceError::Line { line, column, .. }) = read(&p) {
                testkit::mutate::assert_within(&bytes, line, column);
            }
        }
    }
}
