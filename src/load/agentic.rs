//! Session traces of agents (`load: { kind: agentic }`) in the kv-cache-tester format of
//! SemiAnalysis's AgentX traces, which AIPerf reads as its `weka` trace: `{"id", "block_size",
//! "requests": [...]}`, each request `{"t", "type": "n"|"s", "in", "out", "hash_ids",
//! "think_time", "api_time", "stop"}` and each subagent `{"t", "type": "subagent",
//! "agent_id", "duration_ms", "status", "requests": [...]}`. Read as published: a folder of
//! one session a file (`*.json`, in name order; `*.jsonl` files in it hold one a line), or one
//! file of one session a line.
//!
//! Replayed with the history it records: a request's `hash_ids` are its whole context as
//! blocks (`prompt::blocks`), so each turn resends what the ones before it sent and the
//! server's prefix cache sees the sharing the trace saw. The corpus hashes whole blocks only
//! (`len(hash_ids) == floor(in / block_size)`): the rest of `in` is a block of its own that
//! nothing shares, as it shared nothing when recorded (a block of 1 to `block_size` tokens
//! last, AIPerf's convention, reads too).
//!
//! Timing, as the trace records it: a main-agent turn waits its `think_time` (else the gap
//! from the previous main turn's end, `t + api_time`, to its `t`) counted from the previous
//! main turn's end, whatever subagents ran between. A subagent starts at its recorded offset
//! from that end: the corpus writes a subagent's `t` when it returned and its requests' `t`
//! from its own start (its first at 0), so it ran from `t - duration_ms`; a subagent whose
//! requests' `t` are not before its own started at `t`. The main agent waits for a subagent
//! only at its first turn the trace shows after the subagent's end (AIPerf infers joins the
//! same way), and then for the recorded gap from that end; one the trace shows still
//! running (`status: async_launched`) runs beside the main agent's next turns. A subagent or
//! turn without times is waited for (the format's rule: the parent's next request comes after
//! its subagents complete).
//!
//! Every number is bounded where it is read, before it is believed: a negative or non-finite
//! time is refused at its `file:line:column`. A session is parsed into typed fields, its block
//! ids straight into the trace's list within the id budget, so a long line costs its ids
//! (8 bytes each), not a tree of JSON values.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use servebench_model::spec::load_model::{AgenticFormat, AgenticSpec};

mod tracelab;

/// Largest session trace file read.
pub(crate) const FILE_BYTES: u64 = 256 << 20;
/// Most bytes read through a folder of session files: each session is checked as it is read,
/// and only the blocks of the sessions replayed are held.
pub(crate) const FOLDER_BYTES: u64 = 4 << 30;
/// Longest line or file of one session: a long coding session names a few hundred thousand ids.
pub(crate) const LINE_BYTES: usize = 64 << 20;
/// Most sessions a trace may hold (and entries a folder may list).
pub(crate) const SESSION_LIMIT: usize = 100_000;
/// Most requests one session may hold (its subagents' included).
pub(crate) const REQUESTS_PER_SESSION: usize = 100_000;
/// Most ids one request may name.
pub(crate) const IDS_PER_REQUEST: usize = 65_536;
/// Most ids the sessions replayed may name (128 MB held while they replay).
pub(crate) const ID_LIMIT: usize = 16 << 20;
/// Longest think or tool time taken from a trace, seconds: a day's pause is a new session.
pub(crate) const MAX_GAP_S: f64 = 3600.0;
/// Largest time a trace may give (`t`, `think_time`, `api_time`; `duration_ms` in ms/1000):
/// about 31 years, past any recording.
const MAX_TIME_S: f64 = 1e9;
/// Two recorded times this close are the same instant (the traces' timestamps are rounded).
const SAME_INSTANT_S: f64 = 1e-6;

/// One request of a session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TurnTrace {
    /// Seconds to wait before sending it: a main-agent turn's from the previous main turn's
    /// end, a subagent's from its previous turn's end (its first goes at the subagent's start).
    pub gap_s: f64,
    /// Prompt tokens (the context so far).
    pub input_tokens: u64,
    pub output_tokens: u32,
    /// Its block ids in [`SessionCorpus::ids`]: `len` from `start`.
    pub start: u32,
    pub len: u32,
    /// How many leading block ids it shares with the turn before it in its chain (the main
    /// agent's turns, or one subagent's), found once as the trace is read so that a turn's
    /// prompt is made from its new blocks alone, whatever the length of its history.
    pub shared: u32,
}

/// A subagent: its own chain of turns.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentTrace {
    pub id: String,
    /// Seconds from the end of the main agent's turn before it to its start, as recorded.
    pub gap_s: f64,
    /// The step of the main agent's turn that waits for it (the first the trace shows after
    /// its end) and the seconds from its end to that turn's `t`, as recorded. None: nothing
    /// waits for it but the session's end.
    pub join: Option<(usize, f64)>,
    pub turns: Vec<TurnTrace>,
}

/// One step of the main agent: a turn, or subagents started side by side.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    Turn(TurnTrace),
    Subagents(Vec<AgentTrace>),
}

/// One session (job).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SessionTrace {
    pub id: String,
    /// Tokens a block stands for, as the trace says.
    pub block_size: Option<u32>,
    pub steps: Vec<Step>,
}

impl SessionTrace {
    /// Its turns, the subagents' included.
    pub(crate) fn turns(&self) -> usize {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Turn(_) => 1,
                Step::Subagents(a) => a.iter().map(|a| a.turns.len()).sum(),
            })
            .sum()
    }
}

/// A session trace read whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct SessionCorpus {
    pub sessions: Vec<SessionTrace>,
    pub ids: Vec<u64>,
}

impl SessionCorpus {
    /// A turn's block ids.
    pub(crate) fn ids_of(&self, t: &TurnTrace) -> &[u64] {
        &self.ids[t.start as usize..(t.start + t.len) as usize]
    }
}

/// Why a session trace could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionTraceError {
    #[error("cannot read session trace {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("session trace {path} is {kind}, not a regular file or a folder")]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("session trace {path} is larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path}:{line}:{column}: {message}")]
    Line {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        hint: &'static str,
    },
    #[error("session trace {path} has no sessions")]
    Empty { path: PathBuf },
}

/// What `validate` needs of a session trace: its sessions and turns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CorpusSummary {
    pub sessions: usize,
    pub turns: usize,
}

/// Reads the trace through, checking every session as [`read`] does; the blocks of the
/// sessions a run would hold (`sessions:`, else all) are counted against the id budget, the
/// others are checked and let go.
pub(crate) fn summarize(
    path: &Path,
    spec: &AgenticSpec,
) -> Result<CorpusSummary, SessionTraceError> {
    let mut r = Reader::new(spec, true);
    r.path(path)?;
    if r.summary.sessions == 0 {
        return Err(SessionTraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(r.summary)
}

/// Reads a session trace, within its budgets: the sessions a run replays (its first
/// `sessions:` when that is fewer than it holds; the rest are not read).
pub(crate) fn read(path: &Path, spec: &AgenticSpec) -> Result<SessionCorpus, SessionTraceError> {
    let mut r = Reader::new(spec, false);
    r.path(path)?;
    if r.corpus.sessions.is_empty() {
        return Err(SessionTraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(r.corpus)
}

/// Reads sessions from files and folders.
struct Reader<'a> {
    spec: &'a AgenticSpec,
    corpus: SessionCorpus,
    summary: CorpusSummary,
    /// Sessions whose blocks are held; past them, sessions are checked and let go
    /// (`check_all`) or not read.
    hold: usize,
    check_all: bool,
    /// Blocks of requests without ids, and the unhashed rest of a request's prompt: counted
    /// down from the top, where no trace's ids are.
    fresh: u64,
    /// Bytes read through a folder.
    read_bytes: u64,
}

impl<'a> Reader<'a> {
    fn new(spec: &'a AgenticSpec, check_all: bool) -> Reader<'a> {
        Reader {
            spec,
            corpus: SessionCorpus::default(),
            summary: CorpusSummary {
                sessions: 0,
                turns: 0,
            },
            hold: spec.sessions.map_or(usize::MAX, |n| n as usize),
            check_all,
            fresh: u64::MAX,
            read_bytes: 0,
        }
    }

    /// Whether every session wanted is read.
    fn done(&self) -> bool {
        !self.check_all && self.summary.sessions >= self.hold
    }

    fn path(&mut self, path: &Path) -> Result<(), SessionTraceError> {
        let io = |source| SessionTraceError::Io {
            path: path.to_path_buf(),
            source,
        };
        if self.spec.format == AgenticFormat::Tracelab {
            return self.tracelab(path);
        }
        if std::fs::metadata(path).map_err(io)?.is_dir() {
            return self.folder(path);
        }
        self.file(path, is_whole(path), FILE_BYTES)
    }

    /// A folder of session files: `*.json` one session each, `*.jsonl` one a line, in name
    /// order; other files are not sessions.
    fn folder(&mut self, dir: &Path) -> Result<(), SessionTraceError> {
        let io = |source| SessionTraceError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            let text = name.to_string_lossy();
            if text.starts_with('.') || !(text.ends_with(".json") || text.ends_with(".jsonl")) {
                continue;
            }
            if names.len() >= SESSION_LIMIT {
                return Err(SessionTraceError::Line {
                    path: dir.to_path_buf(),
                    line: 1,
                    column: 1,
                    message: format!("the folder holds more than {SESSION_LIMIT} session files"),
                    hint: "replay a part of it: a folder of fewer files",
                });
            }
            names.push(entry.path());
        }
        names.sort();
        for file in names {
            if self.done() {
                break;
            }
            let left = FOLDER_BYTES.saturating_sub(self.read_bytes);
            self.file(&file, is_whole(&file), left.min(FILE_BYTES))
                .map_err(|e| match e {
                    SessionTraceError::TooLarge { .. } if left < FILE_BYTES => {
                        SessionTraceError::TooLarge {
                            path: dir.to_path_buf(),
                            limit: FOLDER_BYTES,
                        }
                    }
                    e => e,
                })?;
        }
        Ok(())
    }

    /// One file: one session whole (`whole`), or one a line.
    fn file(&mut self, path: &Path, whole: bool, limit: u64) -> Result<(), SessionTraceError> {
        use servebench_model::input_file::{self, Refused};
        let file = input_file::open_regular(path, limit).map_err(|r| match r {
            Refused::Io(source) => SessionTraceError::Io {
                path: path.to_path_buf(),
                source,
            },
            Refused::NotAFile(kind) => SessionTraceError::NotAFile {
                path: path.to_path_buf(),
                kind,
            },
            Refused::TooLarge(_) => SessionTraceError::TooLarge {
                path: path.to_path_buf(),
                limit,
            },
        })?;
        let mut reader = BufReader::new(file.take(limit + 1));
        let mut line = Vec::new();
        let (mut number, mut read_bytes) = (0usize, 0u64);
        loop {
            if self.done() {
                break;
            }
            line.clear();
            let mut session = (&mut reader).take(LINE_BYTES as u64 + 1);
            let n = if whole {
                session.read_to_end(&mut line)
            } else {
                session.read_until(b'\n', &mut line)
            }
            .map_err(|source| SessionTraceError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            if n == 0 {
                break;
            }
            number += 1;
            read_bytes += n as u64;
            self.read_bytes += n as u64;
            let at = |message: String, hint: &'static str| SessionTraceError::Line {
                path: path.to_path_buf(),
                line: number,
                column: 1,
                message,
                hint,
            };
            if read_bytes > limit {
                return Err(SessionTraceError::TooLarge {
                    path: path.to_path_buf(),
                    limit,
                });
            }
            // Budgeted before it is parsed: a session's bytes, then its ids as they are read.
            if n > LINE_BYTES {
                return Err(at(
                    format!(
                        "the {} is longer than {LINE_BYTES} bytes",
                        if whole { "session file" } else { "line" }
                    ),
                    "cut the session, or replay fewer of its requests",
                ));
            }
            let text = std::str::from_utf8(&line)
                .map_err(|_| at("the session is not UTF-8 text".into(), FORMAT_HINT))?;
            if text.trim().is_empty() {
                continue;
            }
            if self.summary.sessions >= SESSION_LIMIT {
                return Err(at(
                    format!("the trace holds more than {SESSION_LIMIT} sessions"),
                    "replay a part of it: cut it to fewer lines",
                ));
            }
            self.session(text.trim_end(), path, number)?;
            if whole {
                break;
            }
        }
        Ok(())
    }

    /// One session's text, the file's line `line` on (or the whole file).
    fn session(&mut self, text: &str, path: &Path, line: usize) -> Result<(), SessionTraceError> {
        let held = self.summary.sessions < self.hold;
        let budget = if held {
            ID_LIMIT.saturating_sub(self.corpus.ids.len())
        } else {
            ID_LIMIT
        };
        let parsed = parse_raw(text, budget);
        let (raw, scratch) =
            parsed.map_err(|(line_in, column, message, hint)| SessionTraceError::Line {
                path: path.to_path_buf(),
                line: line + line_in - 1,
                column,
                message,
                hint,
            })?;
        // A session not held is checked against the budget of its own ids alone.
        let mut own = Vec::new();
        let ids = if held { &mut self.corpus.ids } else { &mut own };
        let session = build_session(raw, self.spec, &scratch, ids, &mut self.fresh).map_err(
            |(message, hint)| SessionTraceError::Line {
                path: path.to_path_buf(),
                line,
                column: 1,
                message,
                hint,
            },
        )?;
        self.summary.sessions += 1;
        self.summary.turns += session.turns();
        if held {
            self.corpus.sessions.push(session);
        }
        Ok(())
    }
}

/// Whether a file holds one session whole (`*.json`) rather than one a line.
fn is_whole(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json")
}

const FORMAT_HINT: &str = "each line is one session: {\"id\": \"s1\", \"block_size\": 64, \"requests\": [{\"t\": 0, \"type\": \"s\", \"in\": 1200, \"out\": 80, \"hash_ids\": [1, 2]}]}";

/// What parsing one session holds: its block ids (each request's, in order), what is left of
/// the id and request budgets, and the fix for the error raised, if any. Thread-local so that
/// serde's field functions can reach it.
#[derive(Default)]
struct ParseState {
    ids: Vec<u64>,
    ids_left: usize,
    requests_left: usize,
    hint: Option<&'static str>,
}

thread_local! {
    static PARSE: RefCell<ParseState> = RefCell::default();
}

/// An error at the parser's place, with its fix.
fn refuse<E: de::Error>(message: String, hint: &'static str) -> E {
    PARSE.with(|p| p.borrow_mut().hint = Some(hint));
    E::custom(message)
}

/// (line within the text, column, message, hint)
type ParseProblem = (usize, usize, String, &'static str);

/// Parses one session's text within `id_budget` ids: its typed fields and its ids.
fn parse_raw(text: &str, id_budget: usize) -> Result<(RawSession, Vec<u64>), ParseProblem> {
    PARSE.with(|p| {
        *p.borrow_mut() = ParseState {
            ids: Vec::new(),
            ids_left: id_budget,
            requests_left: REQUESTS_PER_SESSION,
            hint: None,
        }
    });
    let parsed = serde_json::from_str::<RawSession>(text);
    let state = PARSE.with(|p| std::mem::take(&mut *p.borrow_mut()));
    match parsed {
        Ok(raw) => Ok((raw, state.ids)),
        Err(e) => {
            let full = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            let message = full.strip_suffix(&suffix).unwrap_or(&full).to_string();
            let (message, hint) = match state.hint {
                Some(h) => (message, h),
                None => (format!("not a session: {message}"), FORMAT_HINT),
            };
            Err((e.line().max(1), e.column().max(1), message, hint))
        }
    }
}

#[derive(Deserialize)]
struct RawSession {
    #[serde(default, deserialize_with = "session_id")]
    id: Option<String>,
    #[serde(default, deserialize_with = "block_size")]
    block_size: Option<u32>,
    #[serde(default, deserialize_with = "entries")]
    requests: Option<Vec<RawEntry>>,
}

/// A request, or a subagent with its own requests.
#[derive(Deserialize)]
struct RawEntry {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default, deserialize_with = "time_t")]
    t: Option<f64>,
    #[serde(
        default,
        rename = "in",
        alias = "input_length",
        deserialize_with = "tokens_in"
    )]
    input: Option<u64>,
    #[serde(
        default,
        rename = "out",
        alias = "output_length",
        deserialize_with = "tokens_out"
    )]
    output: Option<u64>,
    #[serde(default, deserialize_with = "hash_ids")]
    hash_ids: Option<(usize, usize)>,
    #[serde(default, deserialize_with = "time_think")]
    think_time: Option<f64>,
    #[serde(default, deserialize_with = "time_api")]
    api_time: Option<f64>,
    #[serde(default, deserialize_with = "time_duration")]
    duration_ms: Option<f64>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default, deserialize_with = "entries")]
    requests: Option<Vec<RawEntry>>,
}

/// A number of the trace, if given (null: not given), refused if negative, not finite or past
/// `max`, or (`whole`) not a whole number: `name` is its field.
fn bounded<'de, D: Deserializer<'de>>(
    d: D,
    name: &str,
    max: f64,
    whole: bool,
) -> Result<Option<f64>, D::Error> {
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let v = n.as_f64().unwrap_or(f64::NAN);
    if !v.is_finite() || v < 0.0 {
        return Err(refuse(
            format!("`{name}` is {n}: it cannot be negative"),
            "a time or a length is 0 or more: correct the field, or drop it",
        ));
    }
    if v > max || (whole && v.fract() != 0.0) {
        return Err(refuse(
            format!(
                "`{name}` is {n}, not {} from 0 to {max}",
                if whole { "a whole number" } else { "a number" }
            ),
            "correct the field, or drop it",
        ));
    }
    Ok(Some(v))
}

fn time_t<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    bounded(d, "t", MAX_TIME_S, false)
}
fn time_think<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    bounded(d, "think_time", MAX_TIME_S, false)
}
fn time_api<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    bounded(d, "api_time", MAX_TIME_S, false)
}
fn time_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    bounded(d, "duration_ms", MAX_TIME_S * 1e3, false)
}
fn tokens_in<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(bounded(d, "in", super::trace::MAX_INPUT_TOKENS as f64, true)?.map(|v| v as u64))
}
fn tokens_out<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(bounded(d, "out", super::trace::MAX_OUTPUT_TOKENS as f64, true)?.map(|v| v as u64))
}
fn block_size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let v = bounded(d, "block_size", f64::from(1u32 << 20), true)?;
    if v == Some(0.0) {
        return Err(refuse(
            "`block_size` is 0: a block holds 1 token or more".into(),
            "give the block size the trace's hash_ids were made with",
        ));
    }
    Ok(v.map(|v| v as u32))
}

/// A session's `id`: text or a number.
fn session_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    text_or_number(d, "a session id: text or a number")
}

/// Text, or a number read as its text (`expecting` names what was wanted); null is none.
fn text_or_number<'de, D: Deserializer<'de>>(
    d: D,
    expecting: &'static str,
) -> Result<Option<String>, D::Error> {
    struct Text(&'static str);
    impl Visitor<'_> for Text {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.0)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(Text(expecting))
}

/// A request's `hash_ids`, pushed as they are read to the session's ids (its place there),
/// each list within [`IDS_PER_REQUEST`] and the whole within the session's id budget.
fn hash_ids<'de, D: Deserializer<'de>>(d: D) -> Result<Option<(usize, usize)>, D::Error> {
    struct Ids;
    impl<'de> Visitor<'de> for Ids {
        type Value = Option<(usize, usize)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of block ids")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let start = PARSE.with(|p| p.borrow().ids.len());
            let mut j = 0usize;
            while let Some(n) = seq.next_element::<serde_json::Number>()? {
                let id = n.as_u64().ok_or_else(|| {
                    refuse(
                        format!("`hash_ids[{j}]` is {n}, not a whole number of 0 or more"),
                        "block ids are whole numbers: `\"hash_ids\": [46, 47]`",
                    )
                })?;
                if j >= IDS_PER_REQUEST {
                    return Err(refuse(
                        format!("`hash_ids` names more than {IDS_PER_REQUEST} blocks"),
                        "cut the session",
                    ));
                }
                let left = PARSE.with(|p| {
                    let mut p = p.borrow_mut();
                    if p.ids_left > 0 {
                        p.ids_left -= 1;
                        p.ids.push(id);
                        true
                    } else {
                        false
                    }
                });
                if !left {
                    return Err(refuse(
                        format!("the sessions replayed name more than {ID_LIMIT} hash_ids in all"),
                        "replay a part of the trace: set `load.agentic.sessions`, or cut the trace to fewer sessions",
                    ));
                }
                j += 1;
            }
            Ok(Some((start, j)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Err(self.wrong(&format!("\"{}\"", v.chars().take(40).collect::<String>())))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Err(self.wrong(&v.to_string()))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Err(self.wrong(&v.to_string()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Err(self.wrong(&v.to_string()))
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Err(self.wrong(&v.to_string()))
        }
        fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(self.wrong("an object"))
        }
    }
    impl Ids {
        fn wrong<E: de::Error>(&self, found: &str) -> E {
            refuse(
                format!("`hash_ids` must be a list of block ids, found {found}"),
                "write the blocks as a list of whole numbers: `\"hash_ids\": [46, 47]`",
            )
        }
    }
    d.deserialize_any(Ids)
}

/// A `requests` list, each entry counted against the session's request budget as it is read.
fn entries<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<RawEntry>>, D::Error> {
    struct Entries;
    impl<'de> Visitor<'de> for Entries {
        type Value = Option<Vec<RawEntry>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of requests")
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(e) = seq.next_element::<RawEntry>()? {
                let left = PARSE.with(|p| {
                    let mut p = p.borrow_mut();
                    let left = p.requests_left > 0;
                    p.requests_left = p.requests_left.saturating_sub(1);
                    left
                });
                if !left {
                    return Err(refuse(
                        format!("the session holds more than {REQUESTS_PER_SESSION} requests"),
                        "cut the session",
                    ));
                }
                out.push(e);
            }
            Ok(Some(out))
        }
    }
    d.deserialize_any(Entries)
}

type LineProblem = (String, &'static str);

/// A parsed session checked and made into steps: its requests' ids copied from `scratch` to
/// `ids` (with a block of its own for each request's unhashed rest).
fn build_session(
    raw: RawSession,
    spec: &AgenticSpec,
    scratch: &[u64],
    ids: &mut Vec<u64>,
    fresh: &mut u64,
) -> Result<SessionTrace, LineProblem> {
    let id = raw
        .id
        .ok_or_else(|| ("the session has no `id`".to_string(), FORMAT_HINT))?;
    let block_size = spec.block_size.or(raw.block_size).unwrap_or(512);
    let requests = raw
        .requests
        .ok_or_else(|| (format!("session {id} has no `requests` list"), FORMAT_HINT))?;
    let mut ctx = Ctx {
        session: &id,
        block_size,
        scratch,
        ids,
        fresh,
        count: 0,
    };
    let mut steps = Vec::new();
    // The main agent's last turn's recorded end, and subagents not yet waited for.
    let mut main_end: Option<f64> = None;
    let mut pending: Vec<(usize, usize, Option<f64>)> = Vec::new();
    let mut k = 0;
    while k < requests.len() {
        if requests[k].kind.as_deref() == Some("subagent") {
            // Consecutive subagents start side by side.
            let mut agents = Vec::new();
            while let Some(a) = requests
                .get(k)
                .filter(|a| a.kind.as_deref() == Some("subagent"))
            {
                let (agent, end) = subagent(a, k, main_end, &mut ctx)?;
                pending.push((steps.len(), agents.len(), end));
                agents.push(agent);
                k += 1;
            }
            steps.push(Step::Subagents(agents));
            continue;
        }
        let r = &requests[k];
        let (turn, end) = request(r, &format!("requests[{k}]"), main_end, &mut ctx)?;
        // It waits for the subagents the trace shows ended before it (or cannot tell).
        let here = steps.len();
        pending.retain(|&(step, a, sub_end)| {
            let after = match (sub_end, r.t) {
                (Some(e), Some(t)) if e > t + SAME_INSTANT_S => return true,
                (Some(e), Some(t)) => (t - e).max(0.0),
                _ => 0.0,
            };
            if let Some(Step::Subagents(list)) = steps.get_mut(step) {
                list[a].join = Some((here, after.min(MAX_GAP_S)));
            }
            false
        });
        main_end = end;
        steps.push(Step::Turn(turn));
        k += 1;
    }
    mark_shared(&mut steps, ctx.ids);
    if ctx.count == 0 {
        return Err((format!("session {id} has no requests"), FORMAT_HINT));
    }
    Ok(SessionTrace {
        id,
        block_size: raw.block_size,
        steps,
    })
}

/// Sets each turn's [`TurnTrace::shared`]: the leading ids it has in common with the turn
/// before it in its chain (the main agent's turns in order; each subagent's own).
fn mark_shared(steps: &mut [Step], ids: &[u64]) {
    let common = |a: &TurnTrace, b: &TurnTrace| {
        let (a, b) = (
            &ids[a.start as usize..(a.start + a.len) as usize],
            &ids[b.start as usize..(b.start + b.len) as usize],
        );
        a.iter().zip(b).take_while(|(x, y)| x == y).count() as u32
    };
    let mut main: Option<TurnTrace> = None;
    for step in steps {
        match step {
            Step::Turn(t) => {
                t.shared = main.as_ref().map_or(0, |m| common(m, t));
                main = Some(*t);
            }
            Step::Subagents(agents) => {
                for agent in agents {
                    let mut before: Option<TurnTrace> = None;
                    for t in &mut agent.turns {
                        t.shared = before.as_ref().map_or(0, |b| common(b, t));
                        before = Some(*t);
                    }
                }
            }
        }
    }
}

/// What building a session's steps shares.
struct Ctx<'a> {
    session: &'a str,
    block_size: u32,
    /// The session's ids as parsed, each request's at its place.
    scratch: &'a [u64],
    ids: &'a mut Vec<u64>,
    fresh: &'a mut u64,
    count: usize,
}

/// A subagent entry at `requests[k]`: its chain of turns, and its recorded end (None: the
/// trace does not say).
fn subagent(
    a: &RawEntry,
    k: usize,
    main_end: Option<f64>,
    ctx: &mut Ctx<'_>,
) -> Result<(AgentTrace, Option<f64>), LineProblem> {
    let where_ = format!("requests[{k}]");
    let id = a
        .agent_id
        .clone()
        .unwrap_or_else(|| format!("subagent-{k}"));
    let inner = a.requests.as_deref().ok_or_else(|| {
        (
            format!(
                "session {}: the subagent at {where_} has no `requests` list",
                ctx.session
            ),
            FORMAT_HINT,
        )
    })?;
    // The corpus writes a subagent's `t` when it returned and its requests' `t` from its own
    // start: requests before its `t` say so.
    let relative = match (a.t, inner.first().and_then(|r| r.t)) {
        (Some(t), Some(first)) => first + SAME_INSTANT_S < t,
        _ => false,
    };
    let duration = a.duration_ms.map(|ms| ms / 1e3);
    let (start, end) = match (a.t, duration) {
        (Some(t), Some(d)) if relative => (Some((t - d).max(0.0)), Some(t)),
        (Some(t), Some(d)) => (Some(t), Some(t + d)),
        (Some(t), None) => {
            // Its end as its requests record it.
            let last = inner
                .iter()
                .filter_map(|r| Some(r.t? + r.api_time.unwrap_or(0.0)))
                .reduce(f64::max);
            (
                Some(t),
                last.map(|l| if relative { t + l } else { l.max(t) }),
            )
        }
        (None, _) => (None, None),
    };
    let gap_s = match (start, main_end) {
        (Some(s), Some(e)) => (s - e).clamp(0.0, MAX_GAP_S),
        _ => 0.0,
    };
    let mut turns = Vec::new();
    let mut end_before: Option<f64> = None;
    for (j, r) in inner.iter().enumerate() {
        if r.kind.as_deref() == Some("subagent") {
            return Err((
                format!(
                    "session {}, {where_}.requests[{j}]: a subagent inside a subagent is not replayed",
                    ctx.session
                ),
                "flatten the trace: give each subagent its own entry in the session's `requests`",
            ));
        }
        let (turn, turn_end) = request(r, &format!("{where_}.requests[{j}]"), end_before, ctx)?;
        // The subagent's first turn goes at its start.
        turns.push(if j == 0 {
            TurnTrace { gap_s: 0.0, ..turn }
        } else {
            turn
        });
        end_before = turn_end;
    }
    Ok((
        AgentTrace {
            id,
            gap_s,
            join: None,
            turns,
        },
        end,
    ))
}

/// Seconds to wait before a request: its `think_time`, else from the previous end to its
/// `t`, never above [`MAX_GAP_S`] (the numbers were bounded as they were read).
fn gap(think: Option<f64>, t: Option<f64>, prev_end: Option<f64>) -> f64 {
    match (think, t, prev_end) {
        (Some(th), _, _) => th,
        (None, Some(t), Some(end)) => t - end,
        _ => 0.0,
    }
    .clamp(0.0, MAX_GAP_S)
}

/// A request at `where_`: its turn, and its recorded end (`t + api_time`).
fn request(
    r: &RawEntry,
    where_: &str,
    prev_end: Option<f64>,
    ctx: &mut Ctx<'_>,
) -> Result<(TurnTrace, Option<f64>), LineProblem> {
    let session = ctx.session;
    let bad = |message: String, hint: &'static str| {
        (format!("session {session}, {where_}: {message}"), hint)
    };
    ctx.count += 1;
    let input = r.input.filter(|&n| n >= 1).ok_or_else(|| {
        bad(
            "`in` (prompt tokens) must be a whole number of 1 or more".into(),
            FORMAT_HINT,
        )
    })?;
    // A recorded 0 (a request that ended before its first token) asks for one, as AIPerf does.
    let output = r
        .output
        .ok_or_else(|| {
            bad(
                format!(
                    "`out` (output tokens) must be a whole number from 0 to {}",
                    super::trace::MAX_OUTPUT_TOKENS
                ),
                FORMAT_HINT,
            )
        })?
        .max(1) as u32;
    let start = ctx.ids.len();
    push_ids(r.hash_ids, input, ctx, &bad)?;
    let len = ctx.ids.len() - start;
    if ctx.ids.len() > ID_LIMIT {
        return Err(bad(
            format!("the sessions replayed name more than {ID_LIMIT} hash_ids in all"),
            "replay a part of the trace: set `load.agentic.sessions`, or cut the trace to fewer sessions",
        ));
    }
    let t = r.t;
    let gap_s = gap(r.think_time, t, prev_end);
    let end = t.map(|t| t + r.api_time.unwrap_or(0.0));
    Ok((
        TurnTrace {
            gap_s,
            input_tokens: input,
            output_tokens: output,
            start: start as u32,
            len: len as u32,
            shared: 0,
        },
        end,
    ))
}

/// Pushes a request's block ids to the trace's ids: its `hash_ids` (at `ids` in the session's
/// scratch), then a block of its own for the rest of `input` past its whole blocks, if any
/// (the corpus hashes whole blocks only); or blocks of its own for all of `input` when it
/// names none.
fn push_ids(
    hash_ids: Option<(usize, usize)>,
    input: u64,
    ctx: &mut Ctx<'_>,
    bad: &dyn Fn(String, &'static str) -> LineProblem,
) -> Result<(), LineProblem> {
    let bs = u64::from(ctx.block_size);
    let own = |n: u64, ctx: &mut Ctx<'_>| {
        for _ in 0..n {
            ctx.ids.push(*ctx.fresh);
            *ctx.fresh -= 1;
        }
    };
    match hash_ids {
        Some((at, len)) if len > 0 => {
            let n = len as u64;
            // AIPerf's convention (the last block holds 1 to `bs`) or the corpus's (whole
            // blocks, the rest under a block unhashed).
            let partial_last = (n - 1) * bs < input && input <= n * bs;
            let rest = input.checked_sub(n * bs).filter(|r| (1..bs).contains(r));
            if !partial_last && rest.is_none() {
                return Err(bad(
                    format!(
                        "{len} hash_ids of {bs} tokens do not fit `in` {input}: they hold {} tokens, and `in` must be over {} and under {} (whole blocks, the last in part or the rest under a block unhashed)",
                        n * bs,
                        (n - 1) * bs,
                        (n + 1) * bs
                    ),
                    "set `load.agentic.block_size` to the block size the trace was made with (its own `block_size`), or correct the request's `in`",
                ));
            }
            ctx.ids.extend_from_slice(&ctx.scratch[at..at + len]);
            if rest.is_some() {
                own(1, ctx);
            }
        }
        // Blocks of its own: it shares nothing.
        _ => own(input.div_ceil(bs), ctx),
    }
    Ok(())
}

/// The error's message and a hint at the fix, for `validate`.
pub(crate) fn described(e: SessionTraceError) -> (String, String) {
    let hint = match &e {
        SessionTraceError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            "the path is relative to the spec's folder"
        }
        SessionTraceError::Io { .. } | SessionTraceError::NotAFile { .. } => {
            "give a file of one session a line, or a folder of one session a file (`*.json`)"
        }
        SessionTraceError::TooLarge { .. } => "replay a part of it: cut it to fewer lines",
        SessionTraceError::Line { hint, .. } => hint,
        SessionTraceError::Empty { .. } => FORMAT_HINT,
    };
    (e.to_string(), hint.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> AgenticSpec {
        AgenticSpec {
            file: "s.jsonl".into(),
            live: 1,
            sessions: None,
            think_scale: 1.0,
            block_size: None,
            preset: None,
            preset_override: false,
            format: Default::default(),
        }
    }

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    #[test]
    fn turns_subagents_and_gaps_are_read_as_the_trace_records_them() {
        let (_d, p) = write(concat!(
            r#"{"id": "s1", "block_size": 4, "requests": ["#,
            r#"{"t": 0, "type": "s", "in": 6, "out": 2, "hash_ids": [1, 2], "api_time": 1.0},"#,
            r#"{"t": 3.5, "type": "n", "in": 10, "out": 2, "hash_ids": [1, 2, 3]},"#,
            r#"{"t": 4, "type": "subagent", "agent_id": "a1", "duration_ms": 2000, "requests": [{"t": 4, "type": "s", "in": 4, "out": 1, "hash_ids": [9]}, {"t": 5, "type": "s", "in": 8, "out": 1, "hash_ids": [9, 10], "think_time": 0.25}]},"#,
            r#"{"t": 4.1, "type": "subagent", "agent_id": "a2", "requests": [{"t": 4.1, "type": "s", "in": 3, "out": 1}]},"#,
            r#"{"t": 7, "type": "s", "in": 14, "out": 2, "hash_ids": [1, 2, 3, 4]}"#,
            "]}\n"
        ));
        let c = read(&p, &spec()).unwrap();
        let s = &c.sessions[0];
        assert_eq!((s.id.as_str(), s.block_size, s.turns()), ("s1", Some(4), 6));
        let Step::Turn(t1) = &s.steps[1] else {
            panic!()
        };
        // 3.5 s after the first ended (t 0 + api_time 1.0).
        assert_eq!(t1.gap_s, 2.5);
        assert_eq!(c.ids_of(t1), [1, 2, 3]);
        let Step::Subagents(agents) = &s.steps[2] else {
            panic!()
        };
        assert_eq!(agents.len(), 2, "consecutive subagents run together");
        assert_eq!(agents[0].turns[1].gap_s, 0.25, "think_time wins");
        // A request without ids gets a block of its own.
        assert_eq!(c.ids_of(&agents[1].turns[0]), [u64::MAX]);
        // Their requests' `t` are not before theirs: they started at their `t`, 0.5 and 0.6 s
        // after the main turn before them ended (3.5).
        assert_eq!(agents[0].gap_s, 0.5);
        assert!((agents[1].gap_s - 0.6).abs() < 1e-9);
        // The main agent's next turn counts its wait from its previous turn's end (7 - 3.5),
        // not from its subagents'; it waits for both, which ended before it (a1 at 4 + 2 s,
        // a2 at its only request's `t`), and then the recorded gap after each.
        let Step::Turn(last) = &s.steps[3] else {
            panic!()
        };
        assert_eq!(last.gap_s, 3.5);
        assert_eq!(agents[0].join, Some((3, 1.0)));
        let (at, after) = agents[1].join.unwrap();
        assert!(at == 3 && (after - 2.9).abs() < 1e-9, "{after}");
        // Each turn knows the ids it shares with the turn before it in its chain: the main
        // agent's across its subagents, each subagent's own.
        let Step::Turn(t0) = &s.steps[0] else {
            panic!()
        };
        assert_eq!((t0.shared, t1.shared, last.shared), (0, 2, 3));
        assert_eq!(
            (agents[0].turns[0].shared, agents[0].turns[1].shared),
            (0, 1)
        );
        assert_eq!(agents[1].turns[0].shared, 0);
    }

    #[test]
    fn a_bad_session_is_refused_at_its_line_with_the_fix() {
        let (_d, p) = write(concat!(
            r#"{"id": "ok", "requests": [{"t": 0, "in": 10, "out": 1, "hash_ids": [1]}]}"#,
            "\n",
            r#"{"id": "s2", "block_size": 4, "requests": [{"t": 0, "in": 10, "out": 1, "hash_ids": [1]}]}"#,
            "\n"
        ));
        let e = read(&p, &spec()).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(
                "s.jsonl:2:1: session s2, requests[0]: 1 hash_ids of 4 tokens do not fit `in` 10"
            ),
            "{text}"
        );
        assert!(described(e).1.contains("load.agentic.block_size"));
        let (_d, p) = write("{\"id\": \"s\", \"requests\": [}\n");
        let text = read(&p, &spec()).unwrap_err().to_string();
        assert!(text.contains("s.jsonl:1:26: not a session: "), "{text}");
        let (_d, p) = write("\n\n");
        assert!(matches!(
            read(&p, &spec()),
            Err(SessionTraceError::Empty { .. })
        ));
    }

    #[test]
    fn whole_blocks_with_an_unhashed_rest_read_and_the_rest_is_a_block_of_its_own() {
        // The corpus's convention: floor(in / 64) ids, the rest (20 and 5 tokens) unhashed;
        // AIPerf's: the last block in part. Both read; the rest is a block nothing shares.
        let (_d, p) = write(concat!(
            r#"{"id": "c", "block_size": 64, "requests": ["#,
            r#"{"t": 0, "in": 148, "out": 0, "hash_ids": [1, 2]},"#,
            r#"{"t": 9, "in": 197, "out": 3, "hash_ids": [1, 2, 3]},"#,
            r#"{"t": 20, "in": 150, "out": 3, "hash_ids": [1, 2, 3]}]}"#,
            "\n"
        ));
        let c = read(&p, &spec()).unwrap();
        let turns: Vec<TurnTrace> = c.sessions[0]
            .steps
            .iter()
            .map(|s| match s {
                Step::Turn(t) => *t,
                Step::Subagents(_) => panic!(),
            })
            .collect();
        assert_eq!(c.ids_of(&turns[0]), [1, 2, u64::MAX]);
        assert_eq!(c.ids_of(&turns[1]), [1, 2, 3, u64::MAX - 1]);
        assert_eq!(c.ids_of(&turns[2]), [1, 2, 3]);
        // Each shares the trace's blocks with the one before it, never the rest.
        assert_eq!((turns[1].shared, turns[2].shared), (2, 3));
        // A recorded 0 output asks for one token.
        assert_eq!(turns[0].output_tokens, 1);
        // A rest of a whole block or more is not the convention: refused.
        let (_d, p) = write(
            "{\"id\": \"x\", \"block_size\": 64, \"requests\": [{\"in\": 192, \"out\": 1, \"hash_ids\": [1]}]}\n",
        );
        let text = read(&p, &spec()).unwrap_err().to_string();
        assert!(
            text.contains("1 hash_ids of 64 tokens do not fit `in` 192"),
            "{text}"
        );
    }

    #[test]
    fn a_folder_of_session_files_reads_in_name_order_with_errors_at_their_file() {
        let dir = tempfile::tempdir().unwrap();
        let one = |id: &str| {
            format!(
                "{{\"id\": \"{id}\",\n \"block_size\": 4,\n \"requests\": [{{\"t\": 0, \"in\": 9, \"out\": 1, \"hash_ids\": [1, 2]}}]}}"
            )
        };
        std::fs::write(dir.path().join("b.json"), one("b")).unwrap();
        std::fs::write(dir.path().join("a.json"), one("a")).unwrap();
        std::fs::write(
            dir.path().join("c.jsonl"),
            format!(
                "{}\n{}\n",
                one("c1").replace('\n', ""),
                one("c2").replace('\n', "")
            ),
        )
        .unwrap();
        std::fs::write(dir.path().join("README.md"), "not a session").unwrap();
        let c = read(dir.path(), &spec()).unwrap();
        let ids: Vec<&str> = c.sessions.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c1", "c2"]);
        let s = summarize(dir.path(), &spec()).unwrap();
        assert_eq!((s.sessions, s.turns), (4, 4));
        // `sessions:` reads the first of them only.
        let two = AgenticSpec {
            sessions: Some(2),
            ..spec()
        };
        assert_eq!(read(dir.path(), &two).unwrap().sessions.len(), 2);
        // A bad file is named with its line and column.
        std::fs::write(
            dir.path().join("b.json"),
            one("b").replace("\"in\": 9", "\"in\": -9"),
        )
        .unwrap();
        let text = read(dir.path(), &spec()).unwrap_err().to_string();
        assert!(
            text.contains("b.json:3:") && text.contains("`in` is -9: it cannot be negative"),
            "{text}"
        );
    }

    #[test]
    fn subagents_run_from_their_recorded_start_and_join_where_the_trace_shows_them_ended() {
        // As the corpus writes them: a subagent's `t` is when it returned, its requests' `t`
        // from its own start. a1 ran from 10.5 to 40 (before the main turn at 45: waited
        // for, 5 s after its end); a2, launched at 10.6 and still running at 45 (its
        // requests end at 10.6 + 60.5), is waited for by the first main turn after it
        // ended (t 80, 9 s after).
        let (_d, p) = write(concat!(
            r#"{"id": "j", "block_size": 4, "requests": ["#,
            r#"{"t": 0, "in": 4, "out": 1, "hash_ids": [1], "api_time": 10},"#,
            r#"{"t": 40, "type": "subagent", "agent_id": "a1", "duration_ms": 29500, "status": "completed", "requests": [{"t": 0, "in": 4, "out": 1, "hash_ids": [7], "api_time": 1}, {"t": 20, "in": 8, "out": 1, "hash_ids": [7, 8]}]},"#,
            r#"{"t": 10.6, "type": "subagent", "agent_id": "a2", "duration_ms": null, "status": "async_launched", "requests": [{"t": 0, "in": 4, "out": 1, "hash_ids": [9]}, {"t": 60, "in": 4, "out": 1, "hash_ids": [9], "api_time": 0.5}]},"#,
            r#"{"t": 45, "in": 8, "out": 1, "hash_ids": [1, 2], "think_time": 35, "api_time": 2},"#,
            r#"{"t": 80, "in": 12, "out": 1, "hash_ids": [1, 2, 3]}"#,
            "]}\n"
        ));
        let c = read(&p, &spec()).unwrap();
        let s = &c.sessions[0];
        let Step::Subagents(a) = &s.steps[1] else {
            panic!()
        };
        assert!((a[0].gap_s - 0.5).abs() < 1e-9, "{}", a[0].gap_s);
        assert!((a[1].gap_s - 0.6).abs() < 1e-9, "{}", a[1].gap_s);
        assert_eq!(a[0].join, Some((2, 5.0)));
        let (at, after) = a[1].join.unwrap();
        assert!(at == 3 && (after - 8.9).abs() < 1e-9, "{at} {after}");
        // Inside a subagent, a turn waits from the end of the one before it (0 + 1 to 20).
        assert_eq!(a[0].turns[1].gap_s, 19.0);
        // The main turns' waits: think_time from the previous main turn's end, else the gap
        // from it (80 - 47).
        let gaps: Vec<f64> = s
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Turn(t) => Some(t.gap_s),
                Step::Subagents(_) => None,
            })
            .collect();
        assert_eq!(gaps, [0.0, 35.0, 33.0]);
    }

    #[test]
    fn every_trace_number_is_bounded_where_it_is_read() {
        for (field, value, says) in [
            (
                "duration_ms",
                "-5",
                "`duration_ms` is -5: it cannot be negative",
            ),
            (
                "think_time",
                "-0.5",
                "`think_time` is -0.5: it cannot be negative",
            ),
            (
                "api_time",
                "1e300",
                "`api_time` is 1e+300, not a number from 0 to",
            ),
            ("t", "-1", "`t` is -1: it cannot be negative"),
        ] {
            let line = format!(
                r#"{{"id": "n", "requests": [{{"t": 1, "type": "subagent", "requests": [{{"in": 5, "out": 1, "{field}": {value}}}]}}]}}"#
            );
            let (_d, p) = write(&format!("{line}\n"));
            let e = read(&p, &spec()).unwrap_err();
            let text = e.to_string();
            // At the value (where the parser stood when it had read it).
            let column = line.find(&format!("\"{field}\": {value}")).unwrap()
                + field.len()
                + 4
                + value.len()
                + 1;
            assert!(
                text.contains(&format!("s.jsonl:1:{column}: {says}")),
                "{text} (column {column})"
            );
            assert!(described(e).1.contains("correct the field"), "{field}");
        }
    }

    #[test]
    fn a_session_is_budgeted_while_it_is_parsed_not_after() {
        // 5,000 ids against a budget of 1,000: refused at the id past it, with no more than
        // the budget held.
        let ids: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
        let text = format!(
            r#"{{"id": "b", "requests": [{{"in": 2560000, "out": 1, "hash_ids": [{}]}}]}}"#,
            ids.join(",")
        );
        let Err((line, column, message, hint)) = parse_raw(&text, 1000) else {
            panic!("parsed past its budget")
        };
        assert_eq!(line, 1);
        let at = text.find("[0,").unwrap() + "0,1,".len();
        assert!(column > at && column < text.len() / 4, "{column}");
        assert!(message.contains("hash_ids in all"), "{message}");
        assert!(hint.contains("load.agentic.sessions"), "{hint}");
        assert!(parse_raw(&text, 5000).is_ok());
        // Requests are counted as they are read.
        let many = format!(
            r#"{{"id": "m", "requests": [{}]}}"#,
            vec![r#"{"in": 1, "out": 1}"#; REQUESTS_PER_SESSION + 1].join(",")
        );
        let Err((_, _, message, _)) = parse_raw(&many, ID_LIMIT) else {
            panic!()
        };
        assert!(message.contains("more than 100000 requests"), "{message}");
    }
}
