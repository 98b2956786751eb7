//! AIPerf's `multi_turn` conversations (`aiperf/dataset/loader/multi_turn.py`, the models in
//! `loader/models.py`, AIPerf 0.13): one JSON object a line, `{"session_id", "turns": [{"text",
//! "delay", "output_length"}, ...]}`, replayed by `load: { kind: sessions }` as AIPerf sends
//! them (its `deltas_without_responses` mode): each turn appends its text to the conversation
//! with the server's live replies before it, and goes out its `delay` (milliseconds) after the
//! previous turn's answer ended; a session's first turn goes when the session starts (AIPerf
//! reads a turn's delay only once the turn before it returned). Lines that share a
//! `session_id` are one conversation, their turns in file order, as AIPerf groups them. A
//! leading text-only `role: "system"` turn is the conversation's system message (AIPerf hoists
//! it on chat endpoints), sent before every turn.
//!
//! What servebench would not send as AIPerf does is refused at its `file:line:column`: a
//! `timestamp` (AIPerf's fixed schedule), a negative delay or one over an hour, images, audio,
//! video, `extra` body fields, batches of several texts, any other role. The file is read
//! within the prompt files' budgets (bytes, prompt length) and its turns within
//! [`MAX_PROMPTS`], counted as they are parsed, before a line is held.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, IgnoredAny};

use servebench_model::spec::types::{SessionsFormat, SessionsSpec};

use super::conversation::{Conversation, ConversationTurn};
use super::file::{MAX_PROMPT_BYTES, MAX_PROMPTS, PromptError, read_bounded};
use super::json_locate::{array_items, key_start, object_keys, skip_ws};

/// Longest `delay` taken from a file: a pause over an hour is a new session.
pub(crate) const MAX_DELAY_MS: f64 = 3_600_000.0;
/// Most output tokens one turn may ask for (the spec's own limit).
const MAX_OUTPUT_TOKENS: u64 = 1_000_000;

/// Reads a sessions file (`spec.file`, at `path`) in its format.
pub(crate) fn load_sessions_file(
    spec: &SessionsSpec,
    path: &Path,
) -> Result<Vec<Conversation>, PromptError> {
    match spec.format {
        SessionsFormat::AiperfMultiTurn => load_conversations(path),
        SessionsFormat::SglangAgenticTrace => {
            super::agentic_trace::load_agentic_trace(path, spec.max_turns)
        }
    }
}

/// Turns the file gives no output length draw theirs from the workload's `output_tokens` (a
/// fixed length is the request's own already): seeded by the workload's seed and the round, so
/// a distribution is never sent as one length, nor as the single token a request without a
/// fixed length would ask.
pub(crate) fn draw_missing_outputs(
    conversations: &mut [Conversation],
    workload: &servebench_model::spec::types::Workload,
    spec_dir: &Path,
    round: u32,
) -> Result<(), PromptError> {
    use rand::SeedableRng;
    if workload.output_tokens.fixed().is_some() {
        return Ok(());
    }
    let sampler = super::dist::LengthSampler::load(&workload.output_tokens, spec_dir)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
        workload.seed ^ (u64::from(round) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x7475_726e,
    );
    for turn in conversations
        .iter_mut()
        .flat_map(|c| c.turns.iter_mut())
        .filter(|t| t.output_tokens.is_none())
    {
        turn.output_tokens = Some(u32::try_from(sampler.draw(&mut rng)).unwrap_or(u32::MAX));
    }
    Ok(())
}

/// Reads an AIPerf `multi_turn` file: its conversations in the order their first line comes.
pub(crate) fn load_conversations(path: &Path) -> Result<Vec<Conversation>, PromptError> {
    let text = read_bounded(path)?;
    let mut out: Vec<Conversation> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut turns_left = MAX_PROMPTS;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |(column, message): LineProblem| PromptError::DatasetLine {
            path: path.to_path_buf(),
            line: i + 1,
            column,
            message,
        };
        let (id, turns) = parse_line(line, &mut turns_left).map_err(at)?;
        let known = id.as_ref().and_then(|id| by_id.get(id).copied());
        let index = match known {
            Some(known) => known,
            None => {
                // A line without a `session_id` is a session of its own (AIPerf names it).
                if let Some(id) = &id {
                    by_id.insert(id.clone(), out.len());
                }
                let id = id.unwrap_or_else(|| format!("line-{}", i + 1));
                out.push(Conversation {
                    id,
                    system: None,
                    turns: Vec::new(),
                });
                out.len() - 1
            }
        };
        let conversation = &mut out[index];
        for (k, turn) in turns.into_iter().enumerate() {
            let leading = conversation.turns.is_empty() && conversation.system.is_none();
            let t = checked_turn(turn, leading)
                .map_err(|(name, message)| at((turn_column(line, k, name), message)))?;
            match t {
                Checked::System(s) => conversation.system = Some(s),
                Checked::Turn(mut t) => {
                    if conversation.turns.is_empty() {
                        t.delay = Duration::ZERO;
                    }
                    conversation.turns.push(t);
                }
            }
        }
    }
    // A conversation of its system turn alone: AIPerf sends that turn as it stands.
    if let Some(c) = out.iter().find(|c| c.turns.is_empty()) {
        return Err(PromptError::DatasetLine {
            path: path.to_path_buf(),
            line: 1,
            column: 1,
            message: format!(
                "session `{}` has a system turn and no user turn: give it a turn to send",
                c.id
            ),
        });
    }
    if out.is_empty() {
        return Err(PromptError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

/// What is wrong with one line: the 1-based byte column and the message (with its fix).
type LineProblem = (usize, String);

/// One line as AIPerf's `MultiTurn`: its `session_id` (None: a session of its own) and turns.
#[derive(Deserialize)]
struct RawLine {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    turns: Option<RawTurns>,
}

/// A line's turns, counted against the file's turn budget as they are parsed.
struct RawTurns(Vec<RawTurn>);

thread_local! {
    static TURNS_LEFT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl<'de> Deserialize<'de> for RawTurns {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Turns;
        impl<'de> de::Visitor<'de> for Turns {
            type Value = RawTurns;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of turns")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawTurns, A::Error> {
                let mut turns = Vec::new();
                while let Some(t) = seq.next_element::<RawTurn>()? {
                    let left = TURNS_LEFT.with(|c| c.get());
                    if left == 0 {
                        return Err(de::Error::custom(format!(
                            "the file holds more than {MAX_PROMPTS} turns: replay a part of it"
                        )));
                    }
                    TURNS_LEFT.with(|c| c.set(left - 1));
                    turns.push(t);
                }
                Ok(RawTurns(turns))
            }
        }
        d.deserialize_seq(Turns)
    }
}

/// One turn as AIPerf's `SingleTurn` (other fields are allowed, as AIPerf allows them).
#[derive(Deserialize)]
struct RawTurn {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    texts: Option<serde_json::Value>,
    #[serde(default)]
    timestamp: Option<IgnoredAny>,
    #[serde(default)]
    delay: Option<f64>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    output_length: Option<serde_json::Value>,
    #[serde(default)]
    extra: Option<IgnoredAny>,
    #[serde(default)]
    image: Option<IgnoredAny>,
    #[serde(default)]
    images: Option<IgnoredAny>,
    #[serde(default)]
    image_uuids: Option<IgnoredAny>,
    #[serde(default)]
    audio: Option<IgnoredAny>,
    #[serde(default)]
    audios: Option<IgnoredAny>,
    #[serde(default)]
    video: Option<IgnoredAny>,
    #[serde(default)]
    videos: Option<IgnoredAny>,
}

fn parse_line(
    line: &str,
    turns_left: &mut usize,
) -> Result<(Option<String>, Vec<RawTurn>), LineProblem> {
    TURNS_LEFT.with(|c| c.set(*turns_left));
    let parsed: Result<RawLine, _> = serde_json::from_str(line);
    *turns_left = TURNS_LEFT.with(|c| c.get());
    let raw = parsed.map_err(|e| {
        (
            e.column().max(1),
            format!("not an AIPerf multi_turn line ({e}): {FORMAT_HINT}"),
        )
    })?;
    match raw.turns {
        Some(RawTurns(t)) if !t.is_empty() => Ok((raw.session_id, t)),
        Some(_) => Err((
            column_of_key(line, "turns"),
            format!("`turns` is empty: AIPerf refuses a session without turns; {FORMAT_HINT}"),
        )),
        None => Err((1, format!("no `turns`: {FORMAT_HINT}"))),
    }
}

const FORMAT_HINT: &str = "write one session a line, {\"session_id\": \"s1\", \"turns\": [{\"text\": \"Hello\"}, {\"text\": \"And then?\", \"delay\": 1000}]}";

enum Checked {
    System(String),
    Turn(ConversationTurn),
}

/// A turn checked against what servebench sends: Err names the field and the fix.
fn checked_turn(t: RawTurn, leading: bool) -> Result<Checked, (&'static str, String)> {
    let media = [
        ("image", t.image.is_some()),
        ("images", t.images.is_some()),
        ("image_uuids", t.image_uuids.is_some()),
        ("audio", t.audio.is_some()),
        ("audios", t.audios.is_some()),
        ("video", t.video.is_some()),
        ("videos", t.videos.is_some()),
    ];
    if let Some((name, _)) = media.iter().find(|(_, set)| *set) {
        return Err((
            name,
            format!("`{name}`: servebench sends text turns only: remove it"),
        ));
    }
    if t.extra.is_some() {
        return Err((
            "extra",
            "`extra`: AIPerf merges these fields into the request body; servebench sends its own body (set sampling in the spec): remove it".into(),
        ));
    }
    if t.timestamp.is_some() {
        return Err((
            "timestamp",
            "`timestamp`: AIPerf sends such a turn at that time from the run's start (its fixed schedule); servebench sends each turn its `delay` after the previous answer: write `delay` (milliseconds) instead".into(),
        ));
    }
    let delay = match t.delay {
        None => Duration::ZERO,
        Some(d) if d < 0.0 => {
            return Err((
                "delay",
                format!("`delay` {d} is negative (AIPerf sends such a turn at once): write 0"),
            ));
        }
        Some(d) if d > MAX_DELAY_MS => {
            return Err((
                "delay",
                format!(
                    "`delay` {d} ms is over an hour, the longest pause servebench waits: cut the session there"
                ),
            ));
        }
        Some(d) => Duration::from_secs_f64(d / 1000.0),
    };
    let output_tokens = match &t.output_length {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_OUTPUT_TOKENS).contains(&n) => Some(n as u32),
            _ => {
                return Err((
                    "output_length",
                    format!(
                        "`output_length` {v} is not a whole number of tokens in 1..={MAX_OUTPUT_TOKENS}"
                    ),
                ));
            }
        },
    };
    let text = turn_text(&t)?;
    match t.role.as_deref() {
        None | Some("user") => {}
        // AIPerf's hoist: a leading system turn with text alone, no timing or length.
        Some("system") if leading && t.delay.is_none() && output_tokens.is_none() => {
            return Ok(Checked::System(text));
        }
        Some("system") => {
            return Err((
                "role",
                "`role: system` is read as the conversation's system message only on its first turn, with text alone (no `delay`, `output_length`): move it first, or make it a user turn".into(),
            ));
        }
        Some(other) => {
            return Err((
                "role",
                format!(
                    "`role: {other}`: servebench sends each turn as the user's, with the server's own replies between them: remove it"
                ),
            ));
        }
    }
    Ok(Checked::Turn(ConversationTurn {
        before: Vec::new(),
        role: "user",
        text,
        delay,
        output_tokens,
    }))
}

/// The turn's one text: `text`, or `texts` of one string (or one `{"contents": [...]}` of one).
fn turn_text(t: &RawTurn) -> Result<String, (&'static str, String)> {
    use serde_json::Value;
    let batch = || {
        Err((
            "texts",
            "one text a turn: AIPerf's client-side batches (several texts) are not sent".into(),
        ))
    };
    let text = match (&t.text, &t.texts) {
        (Some(s), None) => s.as_str(),
        (None, Some(Value::Array(list))) => match list.as_slice() {
            [Value::String(s)] => s.as_str(),
            [Value::Object(o)] => match o.get("contents") {
                Some(Value::Array(c)) => match c.as_slice() {
                    [Value::String(s)] => s.as_str(),
                    _ => return batch(),
                },
                _ => {
                    return Err((
                        "texts",
                        "a text object holds its text in `contents`: [\"...\"]".into(),
                    ));
                }
            },
            _ => return batch(),
        },
        (None, Some(_)) => {
            return Err((
                "texts",
                "a list of one string: `\"texts\": [\"...\"]`".into(),
            ));
        }
        (Some(_), Some(_)) => return Err(("texts", "give `text` or `texts`, not both".into())),
        (None, None) => {
            return Err((
                "",
                "a turn without `text`: give it one, {\"text\": \"...\"}".into(),
            ));
        }
    };
    if text.len() > MAX_PROMPT_BYTES {
        return Err((
            if t.text.is_some() { "text" } else { "texts" },
            format!(
                "the turn's text is {} bytes; one prompt is limited to {MAX_PROMPT_BYTES} bytes",
                text.len()
            ),
        ));
    }
    Ok(text.to_string())
}

/// The 1-based column of the key `name` of turn `k` of the line (of the turn itself when
/// `name` is empty or not there; 1 when the line cannot be walked).
fn turn_column(line: &str, k: usize, name: &str) -> usize {
    let b = line.as_bytes();
    let turn = object_keys(b, skip_ws(b, 0))
        .into_iter()
        .find(|(key, _)| *key == b"turns")
        .and_then(|(_, v)| array_items(b, v).get(k).copied());
    let Some(start) = turn else { return 1 };
    object_keys(b, start)
        .into_iter()
        .find(|(key, _)| *key == name.as_bytes())
        .map_or(start + 1, |(_, v)| key_start(b, v) + 1)
}

/// The column of a top-level key of the line.
fn column_of_key(line: &str, name: &str) -> usize {
    let b = line.as_bytes();
    object_keys(b, skip_ws(b, 0))
        .into_iter()
        .find(|(key, _)| *key == name.as_bytes())
        .map_or(1, |(_, v)| key_start(b, v) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<Conversation>, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mt.jsonl");
        std::fs::write(&p, text).unwrap();
        load_conversations(&p).map_err(|e| {
            let s = e.to_string();
            s[s.find("mt.jsonl").unwrap()..].to_string()
        })
    }

    #[test]
    fn turns_without_a_length_draw_theirs_from_the_workloads_distribution() {
        let text = concat!(
            r#"{"session_id": "a", "turns": [{"text": "one"}, {"text": "two", "output_length": 7}]}"#,
            "\n",
            r#"{"session_id": "b", "turns": [{"text": "x"}, {"text": "y"}, {"text": "z"}, {"text": "w"}]}"#,
        );
        let workload = |output: serde_json::Value| -> servebench_model::spec::types::Workload {
            serde_json::from_value(serde_json::json!({
                "api": "openai-chat",
                "prompt": {"kind": "random", "tokens": 64},
                "output_tokens": output,
            }))
            .unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let uniform = workload(serde_json::json!({"dist": "uniform", "min": 10, "max": 2000}));
        let mut c = read(text).unwrap();
        draw_missing_outputs(&mut c, &uniform, dir.path(), 0).unwrap();
        assert_eq!(
            c[0].turns[1].output_tokens,
            Some(7),
            "the file's own length is kept"
        );
        let drawn: Vec<u32> = [
            &c[0].turns[0],
            &c[1].turns[0],
            &c[1].turns[1],
            &c[1].turns[2],
        ]
        .iter()
        .map(|t| t.output_tokens.unwrap())
        .collect();
        assert!(drawn.iter().all(|n| (10..=2000).contains(n)), "{drawn:?}");
        assert!(
            drawn.windows(2).any(|w| w[0] != w[1]),
            "one length for all: {drawn:?}"
        );
        // Seeded: the same round draws the same lengths.
        let mut again = read(text).unwrap();
        draw_missing_outputs(&mut again, &uniform, dir.path(), 0).unwrap();
        assert_eq!(c, again);
        // A fixed length is every request's own already: nothing is drawn.
        let mut fixed = read(text).unwrap();
        draw_missing_outputs(&mut fixed, &workload(serde_json::json!(32)), dir.path(), 0).unwrap();
        assert_eq!(fixed[1].turns[0].output_tokens, None);
    }

    #[test]
    fn reads_aiperfs_documented_examples() {
        // The loader's docstring examples 1, 4 and 6 (text-only).
        let c = read(concat!(
            r#"{"session_id": "session_123", "turns": [{"text": "Hello", "delay": 0}, {"text": "Hi there", "delay": 1000}]}"#,
            "\n",
            r#"{"session_id": "s2", "turns": [{"delay": 250, "text": "What is deep learning?"}, {"delay": 1500.5, "text": "Who are you?", "output_length": 7}]}"#,
            "\n\n",
            r#"{"session_id": "s3", "turns": [{"role": "system", "text": "You are a helpful assistant."}, {"text": "What is deep learning?"}, {"texts": ["Explain it for a five year old."], "delay": 1000}]}"#,
            "\n",
        ))
        .unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(c[0].id, "session_123");
        assert_eq!(c[0].turns[1].delay, Duration::from_secs(1));
        // A first turn's delay is not waited: AIPerf reads it only after a previous turn.
        assert_eq!(c[1].turns[0].delay, Duration::ZERO);
        assert_eq!(c[1].turns[1].delay, Duration::from_micros(1_500_500));
        assert_eq!(c[1].turns[1].output_tokens, Some(7));
        assert_eq!(c[2].system.as_deref(), Some("You are a helpful assistant."));
        assert_eq!(c[2].turns.len(), 2);
        assert_eq!(c[2].turns[1].text, "Explain it for a five year old.");
    }

    #[test]
    fn lines_of_one_session_are_one_conversation_and_unnamed_ones_apart() {
        let c = read(concat!(
            r#"{"session_id": "a", "turns": [{"text": "1"}]}"#,
            "\n",
            r#"{"turns": [{"text": "x"}]}"#,
            "\n",
            r#"{"session_id": "a", "turns": [{"text": "2", "delay": 5}]}"#,
            "\n",
            r#"{"turns": [{"text": "y"}]}"#,
            "\n",
        ))
        .unwrap();
        assert_eq!(c.len(), 3);
        let a: Vec<_> = c[0].turns.iter().map(|t| t.text.as_str()).collect();
        assert_eq!(a, ["1", "2"]);
        assert_eq!(c[0].turns[1].delay, Duration::from_millis(5));
    }

    #[test]
    fn what_would_not_go_out_as_aiperf_sends_it_is_refused_at_its_column() {
        let cases: [(&str, &str); 10] = [
            (
                r#"{"turns": [{"text": "a"}, {"text": "b", "timestamp": 1000}]}"#,
                "mt.jsonl:1:41: `timestamp`",
            ),
            (
                r#"{"turns": [{"text": "a"}, {"text": "b", "delay": -5}]}"#,
                "mt.jsonl:1:41: `delay` -5 is negative",
            ),
            (
                r#"{"turns": [{"text": "a", "delay": 3600001}]}"#,
                "mt.jsonl:1:26: `delay` 3600001 ms is over an hour",
            ),
            (
                r#"{"turns": [{"text": "a", "image": "x.png"}]}"#,
                "mt.jsonl:1:26: `image`",
            ),
            (
                r#"{"turns": [{"text": "a", "extra": {"top_k": 1}}]}"#,
                "mt.jsonl:1:26: `extra`",
            ),
            (
                r#"{"turns": [{"texts": ["a", "b"]}]}"#,
                "mt.jsonl:1:13: one text a turn",
            ),
            (
                r#"{"turns": [{"text": "a"}, {"role": "assistant", "text": "b"}]}"#,
                "mt.jsonl:1:28: `role: assistant`",
            ),
            (
                r#"{"turns": [{"text": "a"}, {"role": "system", "text": "b"}]}"#,
                "mt.jsonl:1:28: `role: system` is read",
            ),
            (
                r#"{"turns": [{"text": "a", "output_length": 0}]}"#,
                "mt.jsonl:1:26: `output_length` 0",
            ),
            (r#"{"turns": []}"#, "mt.jsonl:1:2: `turns` is empty"),
        ];
        for (line, want) in cases {
            let e = read(&format!("{line}\n")).unwrap_err();
            assert!(e.starts_with(want), "{line}\n got {e}\nwant {want}");
        }
        let e =
            read("{\"turns\": [{\"text\": \"a\"}]}\n{\"turns\": [{\"delay\": 1}]}\n").unwrap_err();
        assert!(e.starts_with("mt.jsonl:2:12: a turn without `text`"), "{e}");
        let e = read(r#"{"session_id": "s", "turns": [{"role": "system", "text": "sys"}]}"#)
            .unwrap_err();
        assert!(e.contains("no user turn"), "{e}");
        let e = read("{\"turns\": [{\"text\": \"a\"}, oops]}\n").unwrap_err();
        assert!(
            e.starts_with("mt.jsonl:1:27: not an AIPerf multi_turn line"),
            "{e}"
        );
    }

    /// Hostile edits of a documented line are read or refused at a place inside the file,
    /// never a panic (the column walk runs on lines serde accepted, and on these).
    #[test]
    fn mutated_lines_are_read_or_refused_at_their_place() {
        let seed = concat!(
            r#"{"session_id": "s3", "turns": [{"role": "system", "text": "You are a helpful assistant."}, {"text": "What is deep learning?", "output_length": 9}, {"texts": [{"name": "t", "contents": ["Explain it."]}], "delay": 1000}]}"#,
            "\n"
        );
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
            b"\\",
            b"18446744073709551616",
        ];
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("mt.jsonl");
        for (_, bytes) in testkit::mutate::mutations(&[seed.as_bytes()], &tokens, 0x5EED, 1000) {
            std::fs::write(&p, &bytes).unwrap();
            if let Err(PromptError::DatasetLine { line, column, .. }) = load_conversations(&p) {
                testkit::mutate::assert_within(&bytes, line, column);
            }
            let text = String::from_utf8_lossy(&bytes);
            for k in 0..4 {
                turn_column(&text, k, "delay");
            }
            column_of_key(&text, "turns");
        }
    }

    #[test]
    fn the_turn_budget_is_counted_as_turns_are_parsed() {
        let mut left = 2;
        let line = r#"{"turns": [{"text": "a"}, {"text": "b"}, {"text": "c"}]}"#;
        let e = parse_line(line, &mut left).err().unwrap();
        assert!(e.1.contains("more than 100000 turns"), "{e:?}");
        let mut left = 3;
        assert_eq!(parse_line(line, &mut left).unwrap().1.len(), 3);
        assert_eq!(left, 0);
    }
}
