//! Session traces of agents (`load: { kind: agentic }`): JSONL, one session (a job) a line,
//! in the kv-cache-tester format of SemiAnalysis's AgentX traces, which AIPerf reads as its
//! `weka` trace: `{"id", "block_size", "requests": [...]}`, each request
//! `{"t", "type": "n"|"s", "in", "out", "hash_ids", "think_time", "api_time", "stop"}` and each
//! subagent `{"t", "type": "subagent", "agent_id", "duration_ms", "requests": [...]}`. (One
//! trace a file, as published: `jq -c . traces/*.json > sessions.jsonl` makes the JSONL.)
//!
//! Replayed with the history it records: a request's `hash_ids` are its whole context as
//! blocks (`prompt::blocks`), so each turn resends what the ones before it sent and the
//! server's prefix cache sees the sharing the trace saw. Between turns the client waits the
//! trace's think or tool time: `think_time` where the request gives it, else the gap from
//! the previous request's end (`t + api_time`) to this one's `t`. Consecutive subagents run
//! side by side, each its own chain of turns; the main agent's next turn waits for all of
//! them (the format's rule: the parent's next request comes after its subagents complete).
//! A request with no `hash_ids` gets blocks of its own that no other request names.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use servebench_model::spec::load_model::AgenticSpec;

/// Largest session trace read.
pub(crate) const FILE_BYTES: u64 = 256 << 20;
/// Longest line (one session): a long coding session names a few hundred thousand ids.
pub(crate) const LINE_BYTES: usize = 64 << 20;
/// Most sessions a trace may hold.
pub(crate) const SESSION_LIMIT: usize = 100_000;
/// Most requests one session may hold (its subagents' included).
pub(crate) const REQUESTS_PER_SESSION: usize = 100_000;
/// Most ids one request may name.
pub(crate) const IDS_PER_REQUEST: usize = 65_536;
/// Most ids the whole trace may name (128 MB held while it replays).
pub(crate) const ID_LIMIT: usize = 16 << 20;
/// Longest think or tool time taken from a trace, seconds: a day's pause is a new session.
pub(crate) const MAX_GAP_S: f64 = 3600.0;

/// One request of a session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TurnTrace {
    /// Seconds to wait before sending it, after the step before it ended.
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
    /// Seconds from the step before the subagents to its start.
    pub gap_s: f64,
    pub turns: Vec<TurnTrace>,
}

/// One step of the main agent: a turn, or subagents side by side.
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
    #[error("session trace {path} is {kind}, not a regular file")]
    NotAFile { path: PathBuf, kind: &'static str },
    #[error("session trace {path} is larger than {FILE_BYTES} bytes")]
    TooLarge { path: PathBuf },
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

/// Reads the trace through, checking every line as [`read`] does.
pub(crate) fn summarize(
    path: &Path,
    spec: &AgenticSpec,
) -> Result<CorpusSummary, SessionTraceError> {
    let corpus = read(path, spec)?;
    Ok(CorpusSummary {
        sessions: corpus.sessions.len(),
        turns: corpus.sessions.iter().map(SessionTrace::turns).sum(),
    })
}

/// Reads a session trace, within its budgets.
pub(crate) fn read(path: &Path, spec: &AgenticSpec) -> Result<SessionCorpus, SessionTraceError> {
    use servebench_model::input_file::{self, Refused};
    let file = input_file::open_regular(path, FILE_BYTES).map_err(|r| match r {
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
        },
    })?;
    let mut reader = BufReader::new(file.take(FILE_BYTES + 1));
    let mut corpus = SessionCorpus::default();
    let mut line = Vec::new();
    let (mut number, mut read_bytes) = (0usize, 0u64);
    // Blocks of requests without ids: counted down from the top, where no trace's ids are.
    let mut fresh = u64::MAX;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|source| SessionTraceError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        if n == 0 {
            break;
        }
        number += 1;
        read_bytes += n as u64;
        let at = |column: usize, message: String, hint: &'static str| SessionTraceError::Line {
            path: path.to_path_buf(),
            line: number,
            column,
            message,
            hint,
        };
        if read_bytes > FILE_BYTES {
            return Err(SessionTraceError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        if n > LINE_BYTES {
            return Err(at(
                1,
                format!("the line is longer than {LINE_BYTES} bytes"),
                "cut the session, or replay fewer of its requests",
            ));
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| at(1, "the line is not UTF-8 text".into(), FORMAT_HINT))?
            .trim();
        if text.is_empty() {
            continue;
        }
        if corpus.sessions.len() >= SESSION_LIMIT {
            return Err(at(
                1,
                format!("the trace holds more than {SESSION_LIMIT} sessions"),
                "replay a part of it: cut it to fewer lines",
            ));
        }
        let v: Value = serde_json::from_str(text).map_err(|e| {
            at(
                e.column().max(1),
                format!("not a JSON object: {e}"),
                FORMAT_HINT,
            )
        })?;
        let session = parse_session(&v, spec, &mut corpus.ids, &mut fresh)
            .map_err(|(message, hint)| at(1, message, hint))?;
        corpus.sessions.push(session);
    }
    if corpus.sessions.is_empty() {
        return Err(SessionTraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(corpus)
}

const FORMAT_HINT: &str = "each line is one session: {\"id\": \"s1\", \"block_size\": 64, \"requests\": [{\"t\": 0, \"type\": \"s\", \"in\": 1200, \"out\": 80, \"hash_ids\": [1, 2]}]}";

type LineProblem = (String, &'static str);

fn parse_session(
    v: &Value,
    spec: &AgenticSpec,
    ids: &mut Vec<u64>,
    fresh: &mut u64,
) -> Result<SessionTrace, LineProblem> {
    let obj = v
        .as_object()
        .ok_or_else(|| ("a session must be a JSON object".to_string(), FORMAT_HINT))?;
    let id = match obj.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(("the session has no `id`".into(), FORMAT_HINT)),
    };
    let trace_bs = match obj.get("block_size") {
        None => None,
        Some(b) => Some(
            b.as_u64()
                .filter(|&b| (1..=1 << 20).contains(&b))
                .ok_or_else(|| {
                    (
                        format!("session {id}: `block_size` must be a whole number of tokens from 1 to 1048576, found {b}"),
                        "give the block size the trace's hash_ids were made with",
                    )
                })? as u32,
        ),
    };
    let block_size = spec.block_size.or(trace_bs).unwrap_or(512);
    let requests = obj
        .get("requests")
        .and_then(Value::as_array)
        .ok_or_else(|| (format!("session {id} has no `requests` list"), FORMAT_HINT))?;
    let mut count = 0usize;
    let mut ctx = Ctx {
        session: &id,
        block_size,
        ids,
        fresh,
        count: &mut count,
    };
    let mut steps = Vec::new();
    let mut prev_end: Option<f64> = None;
    let mut k = 0;
    while k < requests.len() {
        let r = &requests[k];
        if r.get("type").and_then(Value::as_str) == Some("subagent") {
            // Consecutive subagents run side by side.
            let mut agents = Vec::new();
            let mut end: Option<f64> = None;
            while let Some(a) = requests
                .get(k)
                .filter(|a| a.get("type").and_then(Value::as_str) == Some("subagent"))
            {
                let (agent, agent_end) = parse_subagent(a, k, prev_end, &mut ctx)?;
                end = match (end, agent_end) {
                    (Some(x), Some(y)) => Some(x.max(y)),
                    (x, y) => x.or(y),
                };
                agents.push(agent);
                k += 1;
            }
            prev_end = end.or(prev_end);
            steps.push(Step::Subagents(agents));
            continue;
        }
        let (turn, turn_end) = parse_request(r, &format!("requests[{k}]"), prev_end, &mut ctx)?;
        prev_end = turn_end;
        steps.push(Step::Turn(turn));
        k += 1;
    }
    mark_shared(&mut steps, ctx.ids);
    if count == 0 {
        return Err((format!("session {id} has no requests"), FORMAT_HINT));
    }
    Ok(SessionTrace {
        id,
        block_size: trace_bs,
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

/// What parsing a session's requests shares.
struct Ctx<'a> {
    session: &'a str,
    block_size: u32,
    ids: &'a mut Vec<u64>,
    fresh: &'a mut u64,
    count: &'a mut usize,
}

fn parse_subagent(
    a: &Value,
    k: usize,
    prev_end: Option<f64>,
    ctx: &mut Ctx<'_>,
) -> Result<(AgentTrace, Option<f64>), LineProblem> {
    let where_ = format!("requests[{k}]");
    let id = a
        .get("agent_id")
        .and_then(Value::as_str)
        .map_or_else(|| format!("subagent-{k}"), str::to_string);
    let t = a.get("t").and_then(Value::as_f64);
    let gap_s = gap(None, t, prev_end);
    let inner = a.get("requests").and_then(Value::as_array).ok_or_else(|| {
        (
            format!(
                "session {}: the subagent at {where_} has no `requests` list",
                ctx.session
            ),
            FORMAT_HINT,
        )
    })?;
    let mut turns = Vec::new();
    let mut end: Option<f64> = None;
    for (j, r) in inner.iter().enumerate() {
        let (turn, turn_end) = parse_request(r, &format!("{where_}.requests[{j}]"), end, ctx)?;
        // The subagent's first turn goes at its start.
        turns.push(if j == 0 {
            TurnTrace { gap_s: 0.0, ..turn }
        } else {
            turn
        });
        end = turn_end;
    }
    let end = match (t, a.get("duration_ms").and_then(Value::as_f64)) {
        (Some(t), Some(ms)) => Some(t + ms / 1000.0),
        _ => end,
    };
    Ok((AgentTrace { id, gap_s, turns }, end))
}

/// Seconds to wait before a request: its `think_time`, else from the previous end to its
/// `t`, never below 0 or above [`MAX_GAP_S`].
fn gap(think: Option<f64>, t: Option<f64>, prev_end: Option<f64>) -> f64 {
    let g = match (think, t, prev_end) {
        (Some(th), _, _) => th,
        (None, Some(t), Some(end)) => t - end,
        _ => 0.0,
    };
    if g.is_finite() {
        g.clamp(0.0, MAX_GAP_S)
    } else {
        0.0
    }
}

fn parse_request(
    r: &Value,
    where_: &str,
    prev_end: Option<f64>,
    ctx: &mut Ctx<'_>,
) -> Result<(TurnTrace, Option<f64>), LineProblem> {
    let session = ctx.session;
    let bad = |message: String, hint: &'static str| {
        (format!("session {session}, {where_}: {message}"), hint)
    };
    let obj = r
        .as_object()
        .ok_or_else(|| bad("a request must be a JSON object".into(), FORMAT_HINT))?;
    *ctx.count += 1;
    if *ctx.count > REQUESTS_PER_SESSION {
        return Err(bad(
            format!("the session holds more than {REQUESTS_PER_SESSION} requests"),
            "cut the session",
        ));
    }
    let number = |name: &str| obj.get(name).and_then(Value::as_f64);
    let input = obj
        .get("in")
        .or_else(|| obj.get("input_length"))
        .and_then(Value::as_u64)
        .filter(|&n| n >= 1)
        .ok_or_else(|| {
            bad(
                "`in` (prompt tokens) must be a whole number of 1 or more".into(),
                FORMAT_HINT,
            )
        })?;
    if input > super::trace::MAX_INPUT_TOKENS {
        return Err(bad(
            format!(
                "`in` is {input}, over {} tokens",
                super::trace::MAX_INPUT_TOKENS
            ),
            "cut the session",
        ));
    }
    let output = obj
        .get("out")
        .or_else(|| obj.get("output_length"))
        .and_then(Value::as_u64)
        .filter(|&n| (1..=super::trace::MAX_OUTPUT_TOKENS).contains(&n))
        .ok_or_else(|| {
            bad(
                format!(
                    "`out` (output tokens) must be a whole number from 1 to {}",
                    super::trace::MAX_OUTPUT_TOKENS
                ),
                FORMAT_HINT,
            )
        })? as u32;
    let bs = u64::from(ctx.block_size);
    let start = ctx.ids.len();
    push_ids(obj.get("hash_ids"), input, ctx, &bad)?;
    let len = ctx.ids.len() - start;
    if ctx.ids.len() > ID_LIMIT {
        return Err(bad(
            format!("the trace names more than {ID_LIMIT} hash_ids in all"),
            "replay a part of it: cut it to fewer sessions",
        ));
    }
    let full = (len as u64 - 1) * bs;
    if input <= full || input > full + bs {
        return Err(bad(
            format!(
                "{len} hash_ids of {bs} tokens do not fit `in` {input}: the last block would hold {} tokens (it must hold 1 to {bs})",
                input as i128 - full as i128
            ),
            "set `load.agentic.block_size` to the block size the trace was made with (its own `block_size`), or correct the request's `in`",
        ));
    }
    let t = number("t");
    let gap_s = gap(number("think_time"), t, prev_end);
    let end = t.map(|t| t + number("api_time").unwrap_or(0.0));
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

/// Pushes a request's block ids (`hash_ids`, or blocks of its own for `input` tokens when it
/// names none) to the session's ids.
fn push_ids(
    hash_ids: Option<&Value>,
    input: u64,
    ctx: &mut Ctx<'_>,
    bad: &dyn Fn(String, &'static str) -> LineProblem,
) -> Result<(), LineProblem> {
    let bs = u64::from(ctx.block_size);
    match hash_ids {
        Some(Value::Array(list)) if !list.is_empty() => {
            if list.len() > IDS_PER_REQUEST {
                return Err(bad(
                    format!(
                        "`hash_ids` names {} blocks, more than {IDS_PER_REQUEST}",
                        list.len()
                    ),
                    "cut the session",
                ));
            }
            for (j, v) in list.iter().enumerate() {
                let id = v.as_u64().ok_or_else(|| {
                    bad(
                        format!("`hash_ids[{j}]` is {v}, not a whole number of 0 or more"),
                        "block ids are whole numbers: `\"hash_ids\": [46, 47]`",
                    )
                })?;
                ctx.ids.push(id);
            }
        }
        None | Some(Value::Array(_)) => {
            // Blocks of its own: it shares nothing.
            for _ in 0..input.div_ceil(bs) {
                ctx.ids.push(*ctx.fresh);
                *ctx.fresh -= 1;
            }
        }
        Some(other) => {
            return Err(bad(
                format!("`hash_ids` must be a list of block ids, found {other}"),
                "write the blocks as a list of whole numbers: `\"hash_ids\": [46, 47]`",
            ));
        }
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
            "give a regular file: one session a line"
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
        // The main agent resumes 1 s after its subagents' end (4 + 2 s).
        let Step::Turn(last) = &s.steps[3] else {
            panic!()
        };
        assert_eq!(last.gap_s, 1.0);
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
        assert!(text.contains("s.jsonl:1:26: not a JSON object"), "{text}");
        let (_d, p) = write("\n\n");
        assert!(matches!(
            read(&p, &spec()),
            Err(SessionTraceError::Empty { .. })
        ));
    }
}
