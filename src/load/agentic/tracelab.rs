//! TraceLab's agentic-coding corpus (`load.agentic.format: tracelab`; uw-syfi/TraceLab, its
//! released `syfi_coding_trace.jsonl.gz` and `example_sessions/sanitized/round_trace.jsonl`):
//! JSONL, one LLM round a line, read as AIPerf 0.13's `tracelab` loader reads it
//! (`_tracelab_convert.py`) into the sessions the kv-cache-tester reader makes.
//!
//! - Rounds are grouped by `session_id` and ordered by their submission time (the latest
//!   `user_message`/`tool_result` event, else the first output event), `round_index` breaking
//!   ties, file order the rest. A round's `api_time` is its last output event after that.
//! - Blocks: a round's input is `input_tokens_total // block_size` whole blocks (the rest a
//!   block of its own); the first `min(prefix_tokens, input) // block_size` of them are the
//!   previous round's, the others new. So a round shares the recorded `prefix_tokens` with
//!   the round before it, to a block. A session's first round shares nothing.
//! - Subagents: TraceLab records no parent link. A session is a subagent of the tightest
//!   window that holds its whole span (every event and tool time), among the same `user` and
//!   `project`'s spawn windows: a Claude `Agent`/`Task` tool call of 10 s or more (emitted to
//!   result), or a Codex session's first `spawn_agent` to its last `wait_agent` result. A
//!   subagent whose parent is itself a subagent is a session of its own (one level nests).
//!
//! Where servebench differs from AIPerf it is said in the guide ("TraceLab"): every row must
//! be replayable (AIPerf skips rows without a session or times), a subagent runs from its
//! own first round to its last round's end (AIPerf: from the spawning call to its result),
//! and `output_tokens` is the round's output (AIPerf adds `reasoning_output_tokens`, which
//! the publisher documents as part of it).
//!
//! The file is read through once, each row held as a few numbers (not its JSON): its events
//! and tools are folded as they are parsed. Blocks are made only for the sessions replayed.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::{
    FOLDER_BYTES, ID_LIMIT, IDS_PER_REQUEST, LINE_BYTES, MAX_TIME_S, PARSE, ParseProblem,
    ParseState, REQUESTS_PER_SESSION, RawEntry, RawSession, Reader, SESSION_LIMIT,
    SessionTraceError, bounded, build_session, refuse,
};

/// Tokens a block stands for unless `load.agentic.block_size` says: AIPerf's default for this
/// corpus, so the same file makes the same blocks in both.
pub(crate) const DEFAULT_BLOCK_SIZE: u32 = 64;
/// A Claude spawning call shorter than this is not a subagent's window (AIPerf's
/// `DEFAULT_MIN_SPAWN_MS`: short calls are no-ops or errors).
const MIN_SPAWN_MS: f64 = 10_000.0;
/// Claude's tools that run a subagent to its end.
const CLAUDE_SPAWN_TOOLS: [&str; 2] = ["Agent", "Task"];
/// Most rows a file may hold (a trace's line limit: each row is one request).
const ROW_LIMIT: usize = crate::load::trace::TRACE_LINE_LIMIT;
/// Times are whole microseconds from 1970 to the end of 9999.
const MAX_MICROS: i64 = 253_402_300_800_000_000;

const HINT: &str = "each line is one TraceLab round: {\"session_id\": \"claude:...\", \"round_index\": 0, \"input_tokens_total\": 32272, \"prefix_tokens\": 27217, \"output_tokens\": 931, \"timing_events\": [{\"event_type\": \"user_message\", \"timestamp\": \"2026-06-01T05:40:20.151Z\"}, ...], \"tools\": [...]}";

/// One round, as few numbers.
struct Row {
    line: usize,
    round_index: u64,
    /// Submitted (µs), and the last output event after it (s).
    submitted: i64,
    api_s: Option<f64>,
    input: u64,
    prefix: u64,
    output: u64,
}

/// One `session_id`'s rounds and what linking it needs.
struct SessionRows {
    id: String,
    first_line: usize,
    /// `user` and `project` of its first row: a subagent is looked for within the same.
    ident: (Option<String>, Option<String>),
    codex: bool,
    rows: Vec<Row>,
    /// Its earliest and latest time (µs), events and tools.
    span: (i64, i64),
    /// Claude spawning calls long enough: (emitted, result) µs.
    windows: Vec<(i64, i64)>,
    /// Codex: its first `spawn_agent` emitted, its last `wait_agent` result.
    spawn_first: Option<i64>,
    wait_last: Option<i64>,
}

impl Reader<'_> {
    /// A TraceLab file: rows grouped into sessions, subagents linked, and the sessions made
    /// (those held with their blocks).
    pub(super) fn tracelab(&mut self, path: &Path) -> Result<(), SessionTraceError> {
        let sessions = read_rows(path)?;
        let parent = link(&sessions);
        // One level nests: a subagent of a subagent is a session of its own.
        let mut children: Vec<Vec<(usize, i64)>> = vec![Vec::new(); sessions.len()];
        for (c, p) in parent.iter().enumerate() {
            if let Some((p, start)) = *p
                && parent[p].is_none()
            {
                children[p].push((c, start));
            }
        }
        let nested: Vec<bool> = (0..sessions.len())
            .map(|c| parent[c].is_some_and(|(p, _)| parent[p].is_none()))
            .collect();
        let block_size = self.spec.block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
        // The sessions in order of first appearance, each with its subagents; then, in the
        // same order, the subagents that could not be placed, as sessions of their own.
        let mut unplaced = Vec::new();
        for s in (0..sessions.len()).filter(|&s| !nested[s]) {
            if self.done() {
                return Ok(());
            }
            unplaced.extend(self.make(&sessions, s, &children[s], block_size, path)?);
        }
        unplaced.sort_unstable();
        for s in unplaced {
            if self.done() {
                break;
            }
            self.make(&sessions, s, &[], block_size, path)?;
        }
        Ok(())
    }

    /// Session `s` with its subagents `kids` made and counted (held, if within `sessions:`);
    /// its subagents that could not be placed.
    fn make(
        &mut self,
        sessions: &[SessionRows],
        s: usize,
        kids: &[(usize, i64)],
        block_size: u32,
        path: &Path,
    ) -> Result<Vec<usize>, SessionTraceError> {
        let at = |line: usize, message: String, hint: &'static str| SessionTraceError::Line {
            path: path.to_path_buf(),
            line,
            column: 1,
            message,
            hint,
        };
        let held = self.summary.sessions < self.hold;
        let budget = if held {
            ID_LIMIT.saturating_sub(self.corpus.ids.len())
        } else {
            ID_LIMIT
        };
        let (raw, scratch, unplaced) = make_session(sessions, s, kids, block_size, budget)
            .map_err(|(line, m, h)| at(line, m, h))?;
        // A session not held is checked against the budget of its own ids alone.
        let mut own = Vec::new();
        let ids = if held { &mut self.corpus.ids } else { &mut own };
        let session = build_session(raw, self.spec, &scratch, ids, &mut self.fresh)
            .map_err(|(m, h)| at(sessions[s].first_line, m, h))?;
        self.summary.sessions += 1;
        self.summary.turns += session.turns();
        if held {
            self.corpus.sessions.push(session);
        }
        Ok(unplaced)
    }
}

/// Where a TraceLab row is refused: its file, line and column, with the fix.
fn line_error(
    path: &Path,
    line: usize,
    column: usize,
    message: String,
    hint: &'static str,
) -> SessionTraceError {
    SessionTraceError::Line {
        path: path.to_path_buf(),
        line,
        column,
        message,
        hint,
    }
}

/// The file opened within the budget of a folder read through (the corpus is larger than a
/// session file; each row is kept as a few numbers), refused if it is a folder. TraceLab
/// releases its corpus gzip-compressed (`syfi_coding_trace.jsonl.gz`): a gzip file is read
/// as AIPerf reads it, decompressed as it streams, the budget counting the decompressed bytes.
fn open_rows(path: &Path, limit: u64) -> Result<BufReader<Box<dyn Read>>, SessionTraceError> {
    use servebench_model::input_file::{self, Refused};
    let io = |source| SessionTraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    if std::fs::metadata(path).map_err(io)?.is_dir() {
        return Err(line_error(
            path,
            1,
            1,
            "a TraceLab trace is one JSONL file, not a folder".into(),
            "give the file: `file: syfi_coding_trace.jsonl.gz`",
        ));
    }
    let file = input_file::open_regular(path, limit).map_err(|r| match r {
        Refused::Io(source) => io(source),
        Refused::NotAFile(kind) => SessionTraceError::NotAFile {
            path: path.to_path_buf(),
            kind,
        },
        Refused::TooLarge(_) => SessionTraceError::TooLarge {
            path: path.to_path_buf(),
            limit,
        },
    })?;
    let mut raw = BufReader::new(file);
    let gzip = raw.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    let stream: Box<dyn Read> = if gzip {
        Box::new(DamagedGzip(flate2::bufread::MultiGzDecoder::new(raw)))
    } else {
        Box::new(raw)
    };
    Ok(BufReader::new(Box::new(stream.take(limit + 1))))
}

/// A gzip stream whose read errors say it is the compressed file that is damaged.
struct DamagedGzip<R>(R);

impl<R: Read> Read for DamagedGzip<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("its gzip stream is damaged ({e}): check the download with `gzip -t`"),
            )
        })
    }
}

/// Reads the file's rows within its budgets, grouped by `session_id` in order of first
/// appearance.
fn read_rows(path: &Path) -> Result<Vec<SessionRows>, SessionTraceError> {
    let at = |line: usize, column: usize, message: String, hint: &'static str| {
        line_error(path, line, column, message, hint)
    };
    let io = |source| SessionTraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let limit = FOLDER_BYTES;
    let mut reader = open_rows(path, limit)?;
    let mut sessions = Sessions::default();
    let mut line = Vec::new();
    let (mut number, mut read_bytes, mut rows) = (0usize, 0u64, 0usize);
    loop {
        line.clear();
        let n = (&mut reader)
            .take(LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(io)?;
        if n == 0 {
            break;
        }
        number += 1;
        read_bytes += n as u64;
        if read_bytes > limit {
            return Err(SessionTraceError::TooLarge {
                path: path.to_path_buf(),
                limit,
            });
        }
        if n > LINE_BYTES {
            return Err(at(
                number,
                1,
                format!("the line is longer than {LINE_BYTES} bytes"),
                "a round is one line: cut its timing events",
            ));
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| at(number, 1, "the line is not UTF-8 text".into(), HINT))?;
        if text.trim().is_empty() {
            continue;
        }
        rows += 1;
        if rows > ROW_LIMIT {
            return Err(at(
                number,
                1,
                format!("the trace holds more than {ROW_LIMIT} rounds"),
                "replay a part of it: cut it to fewer lines",
            ));
        }
        let raw = parse_row(text.trim_end())
            .map_err(|(_, column, message, hint)| at(number, column, message, hint))?;
        sessions
            .add(number, raw)
            .map_err(|(message, hint)| at(number, 1, message, hint))?;
    }
    Ok(sessions.list)
}

/// The sessions read so far, in order of first appearance, and where each `session_id` is.
#[derive(Default)]
struct Sessions {
    list: Vec<SessionRows>,
    index: HashMap<String, usize>,
}

impl Sessions {
    /// Row `raw` of line `number` added to its session, once what it must hold is checked.
    fn add(&mut self, number: usize, raw: RawRow) -> Result<(), (String, &'static str)> {
        let sid = raw
            .session_id
            .filter(|s| !s.is_empty())
            .ok_or(("the round has no `session_id`".to_string(), HINT))?;
        let what = |m: &str| format!("session {sid}, round {}: {m}", raw.round_index.unwrap_or(0));
        let Some((submitted, api_s)) = raw.timing.submission() else {
            return Err((
                what(
                    "no `user_message`, `tool_result`, `text`, `reasoning` or `tool_call` event has a timestamp, so the round has no time to be sent at",
                ),
                "give the round's `timing_events` their timestamps, or drop the row",
            ));
        };
        let input = raw
            .input
            .ok_or_else(|| (what("no `input_tokens_total` (its prompt tokens)"), HINT))?;
        let output = raw
            .output
            .ok_or_else(|| (what("no `output_tokens`"), HINT))?;
        let s = match self.index.get(&sid) {
            Some(&s) => s,
            None => {
                if self.list.len() >= SESSION_LIMIT {
                    return Err((
                        format!("the trace holds more than {SESSION_LIMIT} sessions"),
                        "replay a part of it: cut it to fewer sessions",
                    ));
                }
                self.index.insert(sid.clone(), self.list.len());
                self.list.push(SessionRows {
                    id: sid,
                    first_line: number,
                    ident: (raw.user, raw.project),
                    codex: raw.provider.as_deref() == Some("codex"),
                    rows: Vec::new(),
                    span: (i64::MAX, i64::MIN),
                    windows: Vec::new(),
                    spawn_first: None,
                    wait_last: None,
                });
                self.list.len() - 1
            }
        };
        let session = &mut self.list[s];
        if session.rows.len() >= REQUESTS_PER_SESSION {
            return Err((
                format!(
                    "session {} holds more than {REQUESTS_PER_SESSION} rounds",
                    session.id
                ),
                "cut the session",
            ));
        }
        session.rows.push(Row {
            line: number,
            round_index: raw.round_index.unwrap_or(0),
            submitted,
            api_s,
            input,
            prefix: raw.prefix.unwrap_or(0),
            output,
        });
        for t in [
            raw.timing.first,
            raw.timing.last,
            raw.tools.first,
            raw.tools.last,
        ]
        .into_iter()
        .flatten()
        {
            session.span = (session.span.0.min(t), session.span.1.max(t));
        }
        session.windows.extend(raw.tools.windows);
        session.spawn_first = min_of(session.spawn_first, raw.tools.spawn_first);
        session.wait_last = max_of(session.wait_last, raw.tools.wait_last);
        Ok(())
    }
}

fn min_of(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    a.into_iter().chain(b).min()
}
fn max_of(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    a.into_iter().chain(b).max()
}

/// Each session's parent and its spawn window's start (µs), if it is some session's
/// subagent: the tightest window (then the earliest, then the parent's id) of the same
/// `user` and `project` that holds its whole span, as AIPerf's `build_join_index` finds it.
fn link(sessions: &[SessionRows]) -> Vec<Option<(usize, i64)>> {
    type Ident<'a> = (Option<&'a str>, Option<&'a str>);
    fn ident(s: &SessionRows) -> Ident<'_> {
        (s.ident.0.as_deref(), s.ident.1.as_deref())
    }
    let mut windows: HashMap<Ident<'_>, Vec<(i64, i64, usize)>> = HashMap::new();
    for (p, s) in sessions.iter().enumerate() {
        let list = windows.entry(ident(s)).or_default();
        if s.codex {
            if let (Some(a), Some(b)) = (s.spawn_first, s.wait_last)
                && b > a
            {
                list.push((a, b, p));
            }
        } else {
            list.extend(s.windows.iter().map(|&(a, b)| (a, b, p)));
        }
    }
    sessions
        .iter()
        .enumerate()
        .map(|(c, s)| {
            let (start, end) = s.span;
            windows
                .get(&ident(s))?
                .iter()
                .filter(|&&(a, b, p)| p != c && start >= a && end <= b)
                .min_by(|x, y| {
                    (x.1 - x.0, x.0)
                        .cmp(&(y.1 - y.0, y.0))
                        .then_with(|| sessions[x.2].id.cmp(&sessions[y.2].id))
                })
                .map(|&(a, _, p)| (p, a))
        })
        .collect()
}

/// Session `s`'s rounds in replay order: by submission, then `round_index`, then file order.
fn ordered(s: &SessionRows) -> Vec<&Row> {
    let mut rows: Vec<&Row> = s.rows.iter().collect();
    rows.sort_by_key(|r| (r.submitted, r.round_index));
    rows
}

/// (line, message, hint)
type RowProblem = (usize, String, &'static str);

/// What `make_session` gives: the session as the kv-cache-tester reader's parse of it, its
/// block ids, and its subagents that could not be placed (no round of it before their spawn:
/// each is replayed as a session of its own, after the others, as AIPerf does).
type Made = (RawSession, Vec<u64>, Vec<usize>);

/// Session `s` (with its subagents `kids`, each with its spawn's start) as a parsed
/// kv-cache-tester session: its rounds' times from its first round's submission, and blocks
/// made from `prefix_tokens` within `budget` ids.
fn make_session(
    sessions: &[SessionRows],
    s: usize,
    kids: &[(usize, i64)],
    block_size: u32,
    budget: usize,
) -> Result<Made, RowProblem> {
    let main = ordered(&sessions[s]);
    let t0 = main[0].submitted;
    let mut blocks = Blocks {
        bs: u64::from(block_size),
        next: 1,
        ids: Vec::new(),
        budget,
    };
    let id = &sessions[s].id;
    let mut entries = rounds(&main, t0, &mut blocks, id)?;
    // Each subagent after the last round submitted at or before its spawn, in spawn order.
    let mut kids: Vec<(usize, i64)> = kids.to_vec();
    kids.sort_by_key(|&(c, start)| (start, c));
    let mut after: Vec<Vec<RawEntry>> = (0..entries.len()).map(|_| Vec::new()).collect();
    let mut unplaced = Vec::new();
    for (c, start) in kids {
        let Some(anchor) = main.iter().rposition(|r| r.submitted <= start) else {
            unplaced.push(c);
            continue;
        };
        let rows = ordered(&sessions[c]);
        let inner = rounds(&rows, t0, &mut blocks, &sessions[c].id)?;
        // It ran from its first round's submission to its last round's end, as recorded.
        let first = inner[0].t.unwrap_or(0.0);
        let end = inner
            .iter()
            .filter_map(|r| Some(r.t? + r.api_time.unwrap_or(0.0)))
            .fold(first, f64::max);
        after[anchor].push(RawEntry {
            kind: Some("subagent".into()),
            t: Some(first),
            input: None,
            output: None,
            hash_ids: None,
            think_time: None,
            api_time: None,
            duration_ms: Some((end - first) * 1e3),
            agent_id: Some(sessions[c].id.clone()),
            requests: Some(inner),
        });
    }
    let mut requests = Vec::with_capacity(entries.len());
    for (main_entry, subs) in entries.drain(..).zip(after) {
        requests.push(main_entry);
        requests.extend(subs);
    }
    Ok((
        RawSession {
            id: Some(id.clone()),
            block_size: Some(block_size),
            requests: Some(requests),
        },
        blocks.ids,
        unplaced,
    ))
}

/// The blocks a session's rounds are made of, ids counted from 1 (its subagents' too: one
/// namespace a session, as AIPerf's minter).
struct Blocks {
    bs: u64,
    next: u64,
    ids: Vec<u64>,
    budget: usize,
}

/// A chain of rounds (the main agent's, or one subagent's) as requests timed from `t0`, each
/// sharing `min(prefix, input) // block_size` blocks with the one before it.
fn rounds(
    rows: &[&Row],
    t0: i64,
    blocks: &mut Blocks,
    session: &str,
) -> Result<Vec<RawEntry>, RowProblem> {
    let mut out = Vec::with_capacity(rows.len());
    let mut prev: Option<(usize, usize)> = None;
    for r in rows {
        let t = (r.submitted - t0) as f64 / 1e6;
        if t > MAX_TIME_S {
            return Err((
                r.line,
                format!(
                    "session {session}: the round is {t:.0} s after the session's first; a session spans at most {MAX_TIME_S} s"
                ),
                "correct the round's timestamps",
            ));
        }
        let n = r.input / blocks.bs;
        if n > IDS_PER_REQUEST as u64 {
            return Err((
                r.line,
                format!(
                    "session {session}: {} input tokens make more than {IDS_PER_REQUEST} blocks of {}",
                    r.input, blocks.bs
                ),
                "set a larger `load.agentic.block_size`",
            ));
        }
        let n = n as usize;
        let reuse = ((r.prefix.min(r.input) / blocks.bs) as usize)
            .min(prev.map_or(0, |p| p.1))
            .min(n);
        if blocks.ids.len() + n > blocks.budget {
            return Err((
                r.line,
                format!("the sessions replayed make more than {ID_LIMIT} blocks in all"),
                "replay a part of the trace: set `load.agentic.sessions`, or a larger `load.agentic.block_size`",
            ));
        }
        let start = blocks.ids.len();
        if let Some((at, _)) = prev {
            blocks.ids.extend_from_within(at..at + reuse);
        }
        for _ in reuse..n {
            blocks.ids.push(blocks.next);
            blocks.next += 1;
        }
        prev = Some((start, n));
        out.push(RawEntry {
            kind: Some("n".into()),
            t: Some(t),
            input: Some(r.input),
            output: Some(r.output),
            hash_ids: Some((start, n)),
            think_time: None,
            api_time: r.api_s,
            duration_ms: None,
            agent_id: None,
            requests: None,
        });
    }
    Ok(out)
}

/// One row's fields that the replay uses; the rest is not read.
#[derive(Deserialize)]
struct RawRow {
    #[serde(default, deserialize_with = "label")]
    session_id: Option<String>,
    #[serde(default, deserialize_with = "label")]
    provider: Option<String>,
    #[serde(default, deserialize_with = "label")]
    user: Option<String>,
    #[serde(default, deserialize_with = "label")]
    project: Option<String>,
    #[serde(default, deserialize_with = "round_index")]
    round_index: Option<u64>,
    #[serde(
        default,
        rename = "input_tokens_total",
        deserialize_with = "input_total"
    )]
    input: Option<u64>,
    #[serde(default, rename = "prefix_tokens", deserialize_with = "prefix")]
    prefix: Option<u64>,
    #[serde(default, rename = "output_tokens", deserialize_with = "output")]
    output: Option<u64>,
    #[serde(default, rename = "timing_events", deserialize_with = "timing_events")]
    timing: Timing,
    #[serde(default, deserialize_with = "tools")]
    tools: Tools,
}

/// Parses one row: its typed fields, every number bounded where it stands.
fn parse_row(text: &str) -> Result<RawRow, ParseProblem> {
    PARSE.with(|p| *p.borrow_mut() = ParseState::default());
    let parsed = serde_json::from_str::<RawRow>(text);
    let hint = PARSE.with(|p| std::mem::take(&mut *p.borrow_mut())).hint;
    parsed.map_err(|e| {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
        let (message, hint) = match hint {
            Some(h) => (message, h),
            None => (format!("not a TraceLab round: {message}"), HINT),
        };
        (e.line().max(1), e.column().max(1), message, hint)
    })
}

/// A name or id: text, or a number written as text.
fn label<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    super::text_or_number(d, "text or a number")
}

fn round_index<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(bounded(d, "round_index", 1e9, true)?.map(|v| v as u64))
}
fn input_total<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = bounded(
        d,
        "input_tokens_total",
        crate::load::trace::MAX_INPUT_TOKENS as f64,
        true,
    )?;
    if v == Some(0.0) {
        return Err(refuse(
            "`input_tokens_total` is 0: the round recorded no prompt to replay".into(),
            "drop the row, or give its prompt tokens",
        ));
    }
    Ok(v.map(|v| v as u64))
}
fn prefix<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(bounded(
        d,
        "prefix_tokens",
        crate::load::trace::MAX_INPUT_TOKENS as f64,
        true,
    )?
    .map(|v| v as u64))
}
fn output<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(bounded(
        d,
        "output_tokens",
        crate::load::trace::MAX_OUTPUT_TOKENS as f64,
        true,
    )?
    .map(|v| v as u64))
}

/// An ISO-8601 time as whole microseconds: RFC 3339 (`2026-06-01T05:40:20.151Z`,
/// `+08:00`), or without an offset read as UTC (Python's `fromisoformat`, as AIPerf).
fn micros(text: &str) -> Option<i64> {
    use chrono::{DateTime, NaiveDateTime};
    let t = text.trim();
    let us = DateTime::parse_from_rfc3339(t)
        .map(|d| d.timestamp_micros())
        .or_else(|_| {
            NaiveDateTime::parse_from_str(t, "%Y-%m-%dT%H:%M:%S%.f")
                .or_else(|_| NaiveDateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f"))
                .map(|n| n.and_utc().timestamp_micros())
        })
        .ok()?;
    (0..MAX_MICROS).contains(&us).then_some(us)
}

/// A time field: absent, null or empty is none (AIPerf skips them); anything else must be
/// a time.
fn instant<'de, D: Deserializer<'de>>(d: D, name: &str) -> Result<Option<i64>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    if text.is_empty() {
        return Ok(None);
    }
    micros(&text).map(Some).ok_or_else(|| {
        refuse(
            format!(
                "`{name}` is \"{}\", not an ISO-8601 time from 1970 to 9999",
                text.chars().take(40).collect::<String>()
            ),
            "write times as TraceLab does: \"2026-06-01T05:40:20.151Z\"",
        )
    })
}

/// A round's events, folded as they are read.
#[derive(Default)]
struct Timing {
    /// Latest input event, first and last output events (µs).
    input_last: Option<i64>,
    output_first: Option<i64>,
    output_last: Option<i64>,
    /// Earliest and latest event of any kind.
    first: Option<i64>,
    last: Option<i64>,
}

impl Timing {
    /// (submitted µs, api_time s): submitted at its latest input event (a round fed by
    /// several tool results went after the last), else its first output; its api time to its
    /// last output event.
    fn submission(&self) -> Option<(i64, Option<f64>)> {
        let submitted = self.input_last.or(self.output_first)?;
        let api = self
            .output_last
            .map(|o| (o - submitted).max(0) as f64 / 1e6);
        Some((submitted, api))
    }
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(default)]
    event_type: Option<String>,
    #[serde(default, deserialize_with = "event_time")]
    timestamp: Option<i64>,
}

fn event_time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    instant(d, "timestamp")
}

fn timing_events<'de, D: Deserializer<'de>>(d: D) -> Result<Timing, D::Error> {
    struct Events;
    impl<'de> Visitor<'de> for Events {
        type Value = Timing;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of timing events")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Timing, E> {
            Ok(Timing::default())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Timing, A::Error> {
            let mut t = Timing::default();
            while let Some(e) = seq.next_element::<RawEvent>()? {
                let Some(at) = e.timestamp else { continue };
                t.first = min_of(t.first, Some(at));
                t.last = max_of(t.last, Some(at));
                match e.event_type.as_deref() {
                    Some("user_message" | "tool_result") => {
                        t.input_last = max_of(t.input_last, Some(at));
                    }
                    Some("text" | "reasoning" | "tool_call") => {
                        t.output_first = min_of(t.output_first, Some(at));
                        t.output_last = max_of(t.output_last, Some(at));
                    }
                    _ => {}
                }
            }
            Ok(t)
        }
    }
    d.deserialize_any(Events)
}

/// A round's tool calls, folded as they are read.
#[derive(Default)]
struct Tools {
    first: Option<i64>,
    last: Option<i64>,
    /// Claude's `Agent`/`Task` calls of [`MIN_SPAWN_MS`] or more: (emitted, result).
    windows: Vec<(i64, i64)>,
    spawn_first: Option<i64>,
    wait_last: Option<i64>,
}

#[derive(Deserialize)]
struct RawTool {
    #[serde(default, deserialize_with = "label")]
    tool_name: Option<String>,
    #[serde(default, deserialize_with = "emitted_at")]
    emitted_at: Option<i64>,
    #[serde(default, deserialize_with = "result_at")]
    result_at: Option<i64>,
    #[serde(default, deserialize_with = "latency")]
    tool_wall_latency_ms: Option<f64>,
}

fn emitted_at<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    instant(d, "emitted_at")
}
fn result_at<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    instant(d, "result_at")
}
fn latency<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    bounded(d, "tool_wall_latency_ms", MAX_TIME_S * 1e3, false)
}

fn tools<'de, D: Deserializer<'de>>(d: D) -> Result<Tools, D::Error> {
    struct List;
    impl<'de> Visitor<'de> for List {
        type Value = Tools;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of tool calls")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Tools, E> {
            Ok(Tools::default())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tools, A::Error> {
            let mut t = Tools::default();
            while let Some(tool) = seq.next_element::<RawTool>()? {
                for at in [tool.emitted_at, tool.result_at].into_iter().flatten() {
                    t.first = min_of(t.first, Some(at));
                    t.last = max_of(t.last, Some(at));
                }
                match (tool.tool_name.as_deref(), tool.emitted_at, tool.result_at) {
                    (Some(name), Some(a), Some(b))
                        if CLAUDE_SPAWN_TOOLS.contains(&name)
                            && tool.tool_wall_latency_ms.is_some_and(|l| l >= MIN_SPAWN_MS) =>
                    {
                        t.windows.push((a, b));
                    }
                    (Some("spawn_agent"), Some(a), _) => {
                        t.spawn_first = min_of(t.spawn_first, Some(a));
                    }
                    (Some("wait_agent"), _, Some(b)) => {
                        t.wait_last = max_of(t.wait_last, Some(b));
                    }
                    _ => {}
                }
            }
            Ok(t)
        }
    }
    d.deserialize_any(List)
}

#[cfg(test)]
mod tests {
    use super::super::{AgentTrace, SessionCorpus, Step, TurnTrace, read, summarize};
    use servebench_model::spec::load_model::{AgenticFormat, AgenticSpec};
    use std::path::PathBuf;

    fn spec() -> AgenticSpec {
        AgenticSpec {
            file: "t.jsonl".into(),
            live: 1,
            sessions: None,
            think_scale: 1.0,
            block_size: None,
            preset: None,
            preset_override: false,
            format: AgenticFormat::Tracelab,
        }
    }

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    /// A time `s` seconds after 2026-06-01T00:00:00Z, as TraceLab writes it.
    fn ts(s: f64) -> String {
        let base = 1_780_272_000_000i64;
        chrono::DateTime::from_timestamp_millis(base + (s * 1e3).round() as i64)
            .unwrap()
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }

    /// A row: its events (type, seconds) and tools (name, emitted, result).
    fn row(
        sid: &str,
        project: &str,
        (input, prefix, out): (u64, u64, u64),
        events: &[(&str, f64)],
        tools: &[(&str, f64, f64)],
    ) -> String {
        let provider = sid.split(':').next().unwrap();
        let events: Vec<String> = events
            .iter()
            .map(|(k, s)| format!(r#"{{"event_type": "{k}", "timestamp": "{}"}}"#, ts(*s)))
            .collect();
        let tools: Vec<String> = tools
            .iter()
            .map(|(name, a, b)| {
                format!(
                    r#"{{"tool_name": "{name}", "emitted_at": "{}", "result_at": "{}", "tool_wall_latency_ms": {}}}"#,
                    ts(*a),
                    ts(*b),
                    ((b - a) * 1e3).round()
                )
            })
            .collect();
        format!(
            r#"{{"provider": "{provider}", "project": "{project}", "session_id": "{sid}", "round_index": 0, "input_tokens_total": {input}, "prefix_tokens": {prefix}, "newly_append_tokens": {}, "output_tokens": {out}, "reasoning_output_tokens": null, "timing_events": [{}], "tools": [{}]}}"#,
            input - prefix.min(input),
            events.join(", "),
            tools.join(", ")
        )
    }

    fn turns(steps: &[Step]) -> Vec<TurnTrace> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Turn(t) => Some(*t),
                Step::Subagents(_) => None,
            })
            .collect()
    }

    fn agents(steps: &[Step]) -> Vec<&AgentTrace> {
        steps
            .iter()
            .flat_map(|s| match s {
                Step::Subagents(a) => a.iter().collect(),
                Step::Turn(_) => Vec::new(),
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn the_published_sample_is_two_sessions_sharing_their_recorded_prefixes() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tracelab/round_trace.jsonl");
        let c: SessionCorpus = read(&path, &spec()).unwrap();
        let s = summarize(&path, &spec()).unwrap();
        assert_eq!((s.sessions, s.turns), (2, 19));
        // Worked out here from the rows: 64-token blocks, a round sharing
        // min(prefix // 64, the previous round's blocks, its own) with the one before it, and
        // waiting from the previous round's last output event to its latest input event.
        let text = std::fs::read_to_string(&path).unwrap();
        let rows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let secs = |v: &serde_json::Value| {
            chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap())
                .unwrap()
                .timestamp_millis() as f64
                / 1e3
        };
        for (session, sid) in c.sessions.iter().zip(["claude:", "codex:"]) {
            assert!(session.id.starts_with(sid), "{}", session.id);
            assert_eq!(session.block_size, Some(64));
            let mine: Vec<&serde_json::Value> = rows
                .iter()
                .filter(|r| r["session_id"].as_str().unwrap().starts_with(sid))
                .collect();
            let got = turns(&session.steps);
            assert_eq!(got.len(), mine.len());
            let (mut prev_blocks, mut prev_end) = (0u64, None::<f64>);
            for (i, (t, r)) in got.iter().zip(&mine).enumerate() {
                let input = r["input_tokens_total"].as_u64().unwrap();
                let prefix = r["prefix_tokens"].as_u64().unwrap();
                let blocks = input / 64;
                let shared = if i == 0 {
                    0
                } else {
                    (prefix.min(input) / 64).min(prev_blocks).min(blocks)
                };
                assert_eq!(t.input_tokens, input);
                assert_eq!(
                    u64::from(t.output_tokens),
                    r["output_tokens"].as_u64().unwrap()
                );
                assert_eq!(u64::from(t.shared), shared, "{sid} round {i}");
                // Whole blocks, and the rest a block of its own.
                assert_eq!(u64::from(t.len), blocks + u64::from(input % 64 > 0));
                let events = r["timing_events"].as_array().unwrap();
                let at = |kinds: &[&str]| -> Vec<f64> {
                    events
                        .iter()
                        .filter(|e| kinds.contains(&e["event_type"].as_str().unwrap()))
                        .map(|e| secs(&e["timestamp"]))
                        .collect()
                };
                let sent = at(&["user_message", "tool_result"])
                    .into_iter()
                    .fold(f64::MIN, f64::max);
                let last_out = at(&["text", "reasoning", "tool_call"])
                    .into_iter()
                    .fold(f64::MIN, f64::max);
                let want = prev_end.map_or(0.0, |e| (sent - e).max(0.0));
                assert!(close(t.gap_s, want), "{sid} round {i}: {} {want}", t.gap_s);
                prev_blocks = blocks;
                prev_end = Some(last_out.max(sent));
            }
            assert!(agents(&session.steps).is_empty());
        }
        // The Codex session's third round shares less than its predecessor held (a new
        // prefix of 3,456 tokens): 54 blocks, the rest made anew.
        assert_eq!(turns(&c.sessions[1].steps)[3].shared, 54);
    }

    #[test]
    fn subagents_are_linked_by_the_tightest_window_that_holds_them() {
        let text = [
            // P spawns C with a 28 s Agent call (2 to 30).
            row(
                "claude:P",
                "p",
                (200, 100, 5),
                &[("user_message", 0.0), ("text", 1.0), ("tool_call", 2.0)],
                &[("Agent", 2.0, 30.0)],
            ),
            // C (3 to 20) holds a 14 s Agent call (5 to 19) that spawns G.
            row(
                "claude:C",
                "p",
                (100, 0, 5),
                &[("user_message", 3.0), ("text", 5.0)],
                &[("Task", 5.0, 19.0)],
            ),
            // X is inside P's window, but of another project; its 5 s Agent call is too
            // short to be a window.
            row(
                "claude:X",
                "q",
                (100, 0, 5),
                &[("user_message", 4.0), ("text", 6.0)],
                &[("Agent", 6.0, 11.0)],
            ),
            // G: inside C's window and P's; C's is tighter, and C is itself a subagent, so G
            // is a session of its own.
            row(
                "claude:G",
                "p",
                (100, 0, 5),
                &[("user_message", 6.0), ("text", 18.0)],
                &[],
            ),
            row(
                "claude:C",
                "p",
                (150, 100, 5),
                &[("tool_result", 8.0), ("text", 20.0)],
                &[],
            ),
            row(
                "claude:P",
                "p",
                (300, 250, 5),
                &[("tool_result", 30.0), ("text", 31.0)],
                &[],
            ),
            // A Codex session: spawn_agent at 1.5, wait_agent's result at 40.
            row(
                "codex:K",
                "k",
                (100, 0, 5),
                &[("user_message", 0.0), ("tool_call", 1.5)],
                &[("spawn_agent", 1.5, 1.6)],
            ),
            row(
                "codex:W",
                "k",
                (100, 0, 5),
                &[("user_message", 3.0), ("text", 4.0)],
                &[],
            ),
            row(
                "codex:K",
                "k",
                (200, 64, 5),
                &[("tool_result", 1.6), ("tool_call", 2.0)],
                &[("wait_agent", 2.0, 40.0)],
            ),
            row(
                "codex:W",
                "k",
                (200, 64, 5),
                &[("tool_result", 30.0), ("text", 35.0)],
                &[],
            ),
            row(
                "codex:K",
                "k",
                (300, 128, 5),
                &[("tool_result", 40.0), ("text", 41.0)],
                &[],
            ),
        ]
        .join("\n");
        let (_d, p) = write(&text);
        let c = read(&p, &spec()).unwrap();
        let ids: Vec<&str> = c.sessions.iter().map(|s| s.id.as_str()).collect();
        // In order of first appearance, the subagents inside their parents.
        assert_eq!(ids, ["claude:P", "claude:X", "claude:G", "codex:K"]);
        let p = &c.sessions[0];
        let main = turns(&p.steps);
        let subs = agents(&p.steps);
        assert_eq!((main.len(), subs.len()), (2, 1));
        assert!(
            matches!(p.steps[1], Step::Subagents(_)),
            "after the spawning round"
        );
        let sub = subs[0];
        assert_eq!(sub.id, "claude:C");
        // C started 1 s after P's first round ended (2 to 3), ran its own chain (its second
        // round 3 s after its first ended: 5 to 8) and ended at 20; P's next round, 28 s
        // after its first ended, waits for it and then 10 s (20 to 30).
        assert!(close(sub.gap_s, 1.0), "{}", sub.gap_s);
        assert!(close(sub.turns[1].gap_s, 3.0));
        assert!(close(main[1].gap_s, 28.0));
        let (at, after) = sub.join.unwrap();
        assert!(at == 2 && close(after, 10.0), "{at} {after}");
        // Blocks: P's second round shares 3 blocks (250 // 64) of its first's 3; C's second
        // shares 1 (100 // 64) with its first, none with P's.
        assert_eq!((main[0].shared, main[1].shared), (0, 3));
        assert_eq!((sub.turns[0].shared, sub.turns[1].shared), (0, 1));
        let (p0, c0) = (c.ids_of(&main[0]), c.ids_of(&sub.turns[0]));
        assert!(c0.iter().all(|id| !p0.contains(id)));
        // Codex: W runs beside K's second round and joins its third (at 40, 5 s after W's
        // end at 35).
        let k = &c.sessions[3];
        assert!(matches!(k.steps[1], Step::Subagents(_)), "{:?}", k.steps);
        let w = agents(&k.steps)[0];
        assert_eq!(w.id, "codex:W");
        assert!(close(w.gap_s, 1.5), "{}", w.gap_s);
        let (at, after) = w.join.unwrap();
        assert!(at == 3 && close(after, 5.0), "{at} {after}");
    }

    #[test]
    fn a_subagent_without_a_round_before_its_spawn_is_a_session_of_its_own() {
        // The Agent call was emitted before P's only dated round was sent: no round of P can
        // spawn it (AIPerf's anchor rule); Q follows the other sessions.
        let text = [
            row(
                "claude:P",
                "p",
                (100, 0, 5),
                &[("tool_result", 20.0), ("text", 21.0)],
                &[("Agent", 1.0, 30.0)],
            ),
            row(
                "claude:Q",
                "p",
                (100, 0, 5),
                &[("user_message", 2.0), ("text", 3.0)],
                &[],
            ),
            row(
                "claude:R",
                "r",
                (100, 0, 5),
                &[("user_message", 2.0), ("text", 3.0)],
                &[],
            ),
        ]
        .join("\n");
        let (_d, p) = write(&text);
        let c = read(&p, &spec()).unwrap();
        let ids: Vec<&str> = c.sessions.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["claude:P", "claude:R", "claude:Q"]);
        assert!(agents(&c.sessions[0].steps).is_empty());
    }

    #[test]
    fn a_bad_row_is_refused_where_it_stands_with_the_fix() {
        let good = row(
            "claude:A",
            "p",
            (100, 0, 5),
            &[("user_message", 0.0), ("text", 1.0)],
            &[],
        );
        for (bad, says, hint) in [
            (
                good.replace("\"prefix_tokens\": 0", "\"prefix_tokens\": -3"),
                "`prefix_tokens` is -3: it cannot be negative",
                "",
            ),
            (
                good.replace("\"input_tokens_total\": 100", "\"input_tokens_total\": 0"),
                "`input_tokens_total` is 0",
                "drop the row",
            ),
            (
                good.replacen("2026-06-01T00:00:00.000Z", "yesterday", 1),
                "`timestamp` is \"yesterday\", not an ISO-8601 time",
                "2026-06-01T05:40:20.151Z",
            ),
            (
                good.replace("\"output_tokens\": 5", "\"output_tokens\": 5.5"),
                "`output_tokens` is 5.5, not a whole number",
                "",
            ),
            (
                good.replace("\"session_id\": \"claude:A\", ", ""),
                "the round has no `session_id`",
                "TraceLab round",
            ),
            (
                good.replace("user_message", "usage_report")
                    .replace("\"text\"", "\"usage_report\""),
                "session claude:A, round 0: no `user_message`",
                "timestamps, or drop the row",
            ),
            (
                good.replace("\"output_tokens\": 5, ", ""),
                "no `output_tokens`",
                "",
            ),
        ] {
            let (_d, p) = write(&format!("{good}\n{bad}\n"));
            let e = read(&p, &spec()).unwrap_err();
            let (message, fix) = super::super::described(e);
            assert!(
                message.contains("t.jsonl:2:") && message.contains(says),
                "{message}"
            );
            assert!(fix.contains(hint), "{fix}");
        }
        // At the value's column.
        let bad = good.replace("\"prefix_tokens\": 0", "\"prefix_tokens\": -3");
        let column = bad.find("-3").unwrap() + 2;
        let (_d, p) = write(&bad);
        let text = read(&p, &spec()).unwrap_err().to_string();
        assert!(
            text.contains(&format!("t.jsonl:1:{column}: ")),
            "{text} ({column})"
        );
    }

    #[test]
    fn the_release_gzip_reads_as_its_jsonl() {
        use std::io::Write;
        let published = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tracelab/round_trace.jsonl");
        let text = std::fs::read(&published).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let gz = dir.path().join("syfi_coding_trace.jsonl.gz");
        // Two gzip members, as `cat a.gz b.gz` makes: the decoder reads on past the first.
        let half = text.iter().position(|&b| b == b'\n').unwrap() + 1;
        let mut out = Vec::new();
        for part in [&text[..half], &text[half..]] {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(part).unwrap();
            out.extend(e.finish().unwrap());
        }
        std::fs::write(&gz, out).unwrap();
        let plain = read(&published, &spec()).unwrap();
        assert_eq!(plain.sessions.len(), 2);
        assert_eq!(read(&gz, &spec()).unwrap(), plain);
    }

    #[test]
    fn a_folder_a_broken_gzip_and_the_id_budget_are_refused_with_the_fix() {
        let (_d, p) = write("");
        std::fs::write(&p, b"\x1f\x8b\x08\x00rest").unwrap();
        let (message, _) = super::super::described(read(&p, &spec()).unwrap_err());
        assert!(message.contains("t.jsonl"), "{message}");
        assert!(message.contains("gzip stream is damaged"), "{message}");
        let dir = tempfile::tempdir().unwrap();
        let (message, _) = super::super::described(read(dir.path(), &spec()).unwrap_err());
        assert!(
            message.contains("one JSONL file, not a folder"),
            "{message}"
        );
        // A round of 16 Mi tokens in 1-token blocks is over the ids a request may name.
        let big = row(
            "claude:A",
            "p",
            (100_000, 0, 5),
            &[("user_message", 0.0)],
            &[],
        );
        let (_d, p) = write(&big);
        let one = super::super::AgenticSpec {
            block_size: Some(1),
            ..spec()
        };
        let (message, fix) = super::super::described(read(&p, &one).unwrap_err());
        assert!(message.contains("more than 65536 blocks of 1"), "{message}");
        assert!(fix.contains("load.agentic.block_size"), "{fix}");
        // `sessions:` holds the first sessions' blocks only; all are checked.
        let two = [
            row("claude:A", "p", (100, 0, 5), &[("user_message", 0.0)], &[]),
            row("claude:B", "p", (100, 0, 5), &[("user_message", 1.0)], &[]),
        ]
        .join("\n");
        let (_d, p) = write(&two);
        let first = super::super::AgenticSpec {
            sessions: Some(1),
            ..spec()
        };
        assert_eq!(read(&p, &first).unwrap().sessions.len(), 1);
        assert_eq!(summarize(&p, &first).unwrap().sessions, 2);
    }
}
