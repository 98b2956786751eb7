//! SGLang bench_serving's `agentic-trace` dataset (`sglang/benchmark/datasets/agentic_trace.py`
//! and `serving.py`'s `_normalize_round_messages`, 0.5.23): one JSON document,
//! `{"metadata", "conversations": [[{"messages": [{"role", "content"}, ...], "prompt_tokens"},
//! ...], ...]}`, each turn (round) holding only the messages it adds. Read as SGLang reads it:
//! a round's `messages` may be a string (one user message); a round without messages (missing,
//! null, empty) is dropped, and so is a conversation left without rounds; each message is sent
//! as its `role` and `content` alone (its `tool_call_id`, `tool_calls` and `name` are dropped,
//! as SGLang drops them); `prompt_tokens` is SGLang's information only (the first turn's is
//! read with `int()`), never sent.
//!
//! What SGLang's bench would stop on, or its chat endpoint refuse, is refused at the file's
//! `line:column` with the fix: a round that is neither a string nor a list of messages with
//! `role` and `content`, a role SGLang's chat request model does not admit (`user` as written,
//! `system`, `assistant`, `tool`, `function`, `developer`, `latest_reminder` and `root` in any
//! case), a first `prompt_tokens` `int()` fails on. Content that is not a string is refused too
//! (servebench sends text messages). The document is read within the prompt files' byte budget,
//! its conversations and turns within [`MAX_PROMPTS`] each and its messages within [`MAX_MESSAGES`], counted as they
//! are parsed, before they are held; a conversation's messages within [`MAX_PROMPT_BYTES`].

use std::cell::Cell;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::conversation::{Conversation, ConversationTurn, TurnMessage};
use super::file::{MAX_PROMPT_BYTES, MAX_PROMPTS, PromptError, read_bounded};
use super::json_locate::{array_items, key_start, object_keys, skip_ws};

/// Most messages one file may hold, every round's together (each is held for the run).
pub(crate) const MAX_MESSAGES: usize = 1_000_000;
/// Largest first-turn `prompt_tokens` taken: far past any model's context.
const MAX_PROMPT_TOKENS: f64 = 100_000_000.0;

/// The roles SGLang's `ChatCompletionMessageGenericParam` admits, in any case (protocol.py
/// lowercases them); `user` is its own model's and must be written so.
const GENERIC_ROLES: [&str; 7] = [
    "system",
    "assistant",
    "tool",
    "function",
    "developer",
    "latest_reminder",
    "root",
];

const FORMAT_HINT: &str = "write one JSON document, {\"conversations\": [[{\"messages\": [{\"role\": \"system\", \"content\": \"...\"}, {\"role\": \"user\", \"content\": \"...\"}]}, {\"messages\": [{\"role\": \"tool\", \"content\": \"...\"}]}]]}";

/// Reads an SGLang agentic-trace document: its conversations in file order, each turn its
/// round's messages, no pause before it; each conversation cut to its first `max_turns`
/// rounds with messages where given (SGLang's `--agentic-max-turns`: the rounds after are
/// never sent, so never checked).
pub(crate) fn load_agentic_trace(
    path: &Path,
    max_turns: Option<u32>,
) -> Result<Vec<Conversation>, PromptError> {
    let max_turns = max_turns.map_or(usize::MAX, |n| n as usize);
    let text = read_bounded(path)?;
    let at = |(line, column, message): (usize, usize, String)| PromptError::DatasetLine {
        path: path.to_path_buf(),
        line,
        column,
        message,
    };
    TURNS_LEFT.with(|c| c.set(MAX_PROMPTS));
    MESSAGES_LEFT.with(|c| c.set(MAX_MESSAGES));
    CONVERSATIONS_LEFT.with(|c| c.set(MAX_PROMPTS));
    let doc: RawDoc = serde_json::from_str(&text).map_err(|e| {
        at((
            e.line().max(1),
            e.column().max(1),
            format!("not an SGLang agentic-trace document ({e}): {FORMAT_HINT}"),
        ))
    })?;
    let place = |p: Place, message: String| {
        let (line, column) = locate(&text, &p);
        at((line, column, message))
    };
    let conversations = match doc.conversations {
        Some(c) if !c.is_empty() => c,
        Some(_) => {
            return Err(place(
                Place::key("conversations"),
                format!("`conversations` is empty: SGLang refuses such a trace; {FORMAT_HINT}"),
            ));
        }
        None => {
            return Err(place(
                Place::key("conversations"),
                format!("no `conversations`: SGLang refuses such a trace; {FORMAT_HINT}"),
            ));
        }
    };
    let mut out = Vec::new();
    for (ci, conversation) in conversations.into_iter().enumerate() {
        if let Some(first) = conversation.first() {
            first_prompt_tokens(&first.prompt_tokens).map_err(|BadPromptTokens(m)| {
                place(Place::turn(ci, 0).field("prompt_tokens"), m)
            })?;
        }
        let mut turns = Vec::new();
        let mut bytes = 0usize;
        for (ti, turn) in conversation.into_iter().enumerate() {
            if turns.len() == max_turns {
                break;
            }
            // SGLang keeps a turn only `if turn.get("messages")`.
            let Some(messages) = round_messages(turn.messages, ci, ti, &place)? else {
                continue;
            };
            bytes += messages.iter().map(|m| m.content.len()).sum::<usize>();
            if bytes > MAX_PROMPT_BYTES {
                return Err(place(
                    Place::turn(ci, ti),
                    format!(
                        "conversation {} holds {bytes} bytes of messages by this turn, before the server's replies; one prompt is limited to {MAX_PROMPT_BYTES} bytes: cut the conversation before this turn (SGLang's `--agentic-max-turns`)",
                        ci + 1
                    ),
                ));
            }
            let mut before = messages;
            let last = before.pop().expect("a kept round has a message");
            turns.push(ConversationTurn {
                before,
                role: last.role,
                text: last.content,
                // SGLang sends each round when the previous reply ended.
                delay: Duration::ZERO,
                output_tokens: None,
            });
        }
        // SGLang drops a conversation without a round with messages.
        if !turns.is_empty() {
            out.push(Conversation {
                id: format!("conversation-{}", ci + 1),
                system: None,
                turns,
            });
        }
    }
    if out.is_empty() {
        return Err(place(
            Place::key("conversations"),
            "no conversation has a turn with `messages`: SGLang refuses such a trace (\"No usable conversations\"); give a turn its messages".into(),
        ));
    }
    Ok(out)
}

/// Round `ti` of conversation `ci` as the messages SGLang sends (a string is one user
/// message), None for a round SGLang skips (no messages), each message checked.
fn round_messages(
    round: RawRound,
    ci: usize,
    ti: usize,
    place: &dyn Fn(Place, String) -> PromptError,
) -> Result<Option<Vec<TurnMessage>>, PromptError> {
    Ok(Some(match round {
        RawRound::Falsy => return Ok(None),
        RawRound::Text(s) => vec![TurnMessage {
            role: "user",
            content: s,
        }],
        RawRound::Messages(list) => {
            let mut messages = Vec::with_capacity(list.len());
            for (mi, m) in list.into_iter().enumerate() {
                let here = || Place::turn(ci, ti).field("messages").message(mi);
                messages.push(
                    checked_message(m).map_err(|(field, m)| place(here().field_opt(field), m))?,
                );
            }
            messages
        }
        RawRound::Bad(kind) => {
            return Err(place(
                Place::turn(ci, ti).field("messages"),
                format!(
                    "`messages` is {kind}: SGLang's bench stops on such a round (`_normalize_round_messages` takes a string or a list of {{\"role\", \"content\"}} messages); write [{{\"role\": \"user\", \"content\": \"...\"}}]"
                ),
            ));
        }
    }))
}

/// A message as SGLang sends it (its role and content), or the field at fault and why.
fn checked_message(m: RawMessage) -> Result<TurnMessage, (Option<&'static str>, String)> {
    let (role, content) = match m {
        RawMessage::Object { role, content } => (role, content),
        RawMessage::Other(kind) => {
            return Err((
                None,
                format!(
                    "a message is {kind}: SGLang's bench stops on a round with one that is not {{\"role\", \"content\"}}; write {{\"role\": \"user\", \"content\": \"...\"}}"
                ),
            ));
        }
    };
    let missing = |name: &'static str| {
        Err((
            None,
            format!(
                "a message without `{name}`: SGLang's bench sends only messages with both `role` and `content`; add `{name}`"
            ),
        ))
    };
    let role = match role {
        Scalar::Absent => return missing("role"),
        Scalar::Str(r) => r,
        other => {
            return Err((
                Some("role"),
                format!(
                    "`role` is {}: SGLang's chat endpoint refuses it ('role' must be a string); write one of `user`, {}",
                    other.kind(),
                    roles_list()
                ),
            ));
        }
    };
    let role = admitted_role(&role).ok_or_else(|| {
        let why = if role.eq_ignore_ascii_case("user") {
            "SGLang's chat endpoint admits `user` in lower case only (its user message model is the literal 'user')".to_string()
        } else {
            "SGLang's chat endpoint refuses it (400: 'role' must be one of its roles)".to_string()
        };
        (
            Some("role"),
            format!(
                "`role: {role:?}`: {why}; write one of `user`, {}",
                roles_list()
            ),
        )
    })?;
    let content = match content {
        Scalar::Absent => return missing("content"),
        Scalar::Str(s) => s,
        other => {
            return Err((
                Some("content"),
                format!(
                    "`content` is {}: servebench sends text messages; write the text as a string (\"\" for none)",
                    other.kind()
                ),
            ));
        }
    };
    if content.len() > MAX_PROMPT_BYTES {
        return Err((
            Some("content"),
            format!(
                "the message is {} bytes; one prompt is limited to {MAX_PROMPT_BYTES} bytes",
                content.len()
            ),
        ));
    }
    Ok(TurnMessage { role, content })
}

/// The role as SGLang's request model admits it (the generic roles lowercased, as it does),
/// None where it refuses it.
fn admitted_role(role: &str) -> Option<&'static str> {
    if role == "user" {
        return Some("user");
    }
    GENERIC_ROLES
        .iter()
        .find(|r| r.eq_ignore_ascii_case(role))
        .copied()
}

fn roles_list() -> String {
    GENERIC_ROLES.map(|r| format!("`{r}`")).join(", ")
}

/// The first turn's `prompt_tokens` as SGLang's loader reads it (`int(conversation[0].get(
/// "prompt_tokens", 0))`): informational, but a value `int()` fails on stops SGLang's load.
fn first_prompt_tokens(v: &Scalar) -> Result<(), BadPromptTokens> {
    let n = match v {
        Scalar::Absent | Scalar::Bool => return Ok(()),
        Scalar::Number(n) => *n,
        Scalar::Str(s) => match s.trim().parse::<i64>() {
            Ok(n) => n as f64,
            Err(_) => {
                return Err(BadPromptTokens(format!(
                    "`prompt_tokens` {s:?} is not a number: SGLang's loader reads the first turn's with `int()` and stops on it; write the prompt's length in tokens, or remove it"
                )));
            }
        },
        other => {
            return Err(BadPromptTokens(format!(
                "`prompt_tokens` is {}: SGLang's loader reads the first turn's with `int()` and stops on it; write the prompt's length in tokens, or remove it",
                other.kind()
            )));
        }
    };
    if !(0.0..=MAX_PROMPT_TOKENS).contains(&n) {
        return Err(BadPromptTokens(format!(
            "`prompt_tokens` {n} is not a prompt length in 0..={MAX_PROMPT_TOKENS}: write the prompt's length in tokens, or remove it"
        )));
    }
    Ok(())
}

/// Why a first turn's `prompt_tokens` stops SGLang's loader, and the fix.
struct BadPromptTokens(String);

thread_local! {
    static TURNS_LEFT: Cell<usize> = const { Cell::new(0) };
    static MESSAGES_LEFT: Cell<usize> = const { Cell::new(0) };
    static CONVERSATIONS_LEFT: Cell<usize> = const { Cell::new(0) };
}

/// Takes one from a budget, or says what the file holds too many of.
fn spend<E: de::Error>(
    left: &'static std::thread::LocalKey<Cell<usize>>,
    max: usize,
    what: &str,
) -> Result<(), E> {
    let n = left.with(Cell::get);
    if n == 0 {
        return Err(E::custom(format!(
            "the file holds more than {max} {what}: replay a part of it"
        )));
    }
    left.with(|c| c.set(n - 1));
    Ok(())
}

/// The document: its `conversations` (None: missing or null); other keys (`metadata`) are
/// SGLang's to ignore, and so servebench's.
struct RawDoc {
    conversations: Option<Vec<Vec<RawTurn>>>,
}

/// One turn: its round and its first-turn-only `prompt_tokens`.
struct RawTurn {
    messages: RawRound,
    prompt_tokens: Scalar,
}

/// A turn's `messages` as SGLang's `_normalize_round_messages` sees it.
enum RawRound {
    /// Missing, null, or what Python reads as false (`[]`, `""`, `{}`, `0`, `false`): the
    /// turn is dropped.
    Falsy,
    /// A string: one user message.
    Text(String),
    Messages(Vec<RawMessage>),
    /// Anything else, by its kind.
    Bad(&'static str),
}

enum RawMessage {
    /// An object: its `role` and `content` (other keys are dropped, as SGLang drops them).
    Object {
        role: Scalar,
        content: Scalar,
    },
    Other(&'static str),
}

/// A value read for its kind, keeping a string or a number.
#[derive(Default)]
enum Scalar {
    #[default]
    Absent,
    Null,
    Bool,
    Number(f64),
    Str(String),
    List,
    Object,
}

impl Scalar {
    fn kind(&self) -> &'static str {
        match self {
            Scalar::Absent => "missing",
            Scalar::Null => "null",
            Scalar::Bool => "a boolean",
            Scalar::Number(_) => "a number",
            Scalar::Str(_) => "a string",
            Scalar::List => "a list",
            Scalar::Object => "an object",
        }
    }
}

/// Consumes a list or an object whole, its items unheld.
fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Null)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar::Bool)
            }
            fn visit_u64<E>(self, n: u64) -> Result<Scalar, E> {
                Ok(Scalar::Number(n as f64))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Scalar, E> {
                Ok(Scalar::Number(n as f64))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Scalar, E> {
                Ok(Scalar::Number(n))
            }
            fn visit_str<E>(self, s: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(s.to_string()))
            }
            fn visit_string<E>(self, s: String) -> Result<Scalar, E> {
                Ok(Scalar::Str(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar, A::Error> {
                drain_seq(seq).map(|()| Scalar::List)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
                drain_map(map).map(|()| Scalar::Object)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RawMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawMessage;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMessage, A::Error> {
                let (mut role, mut content) = (Scalar::Absent, Scalar::Absent);
                // A repeated key: the last one, as Python's json reads it.
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "role" => role = map.next_value()?,
                        "content" => content = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(RawMessage::Object { role, content })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<RawMessage, A::Error> {
                drain_seq(seq).map(|()| RawMessage::Other("a list"))
            }
            fn visit_unit<E>(self) -> Result<RawMessage, E> {
                Ok(RawMessage::Other("null"))
            }
            fn visit_bool<E>(self, _: bool) -> Result<RawMessage, E> {
                Ok(RawMessage::Other("a boolean"))
            }
            fn visit_u64<E>(self, _: u64) -> Result<RawMessage, E> {
                Ok(RawMessage::Other("a number"))
            }
            fn visit_i64<E>(self, _: i64) -> Result<RawMessage, E> {
                Ok(RawMessage::Other("a number"))
            }
            fn visit_f64<E>(self, _: f64) -> Result<RawMessage, E> {
                Ok(RawMessage::Other("a number"))
            }
            fn visit_str<E>(self, _: &str) -> Result<RawMessage, E> {
                Ok(RawMessage::Other("a string"))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RawRound {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawRound;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a round's messages")
            }
            fn visit_unit<E>(self) -> Result<RawRound, E> {
                Ok(RawRound::Falsy)
            }
            fn visit_bool<E>(self, b: bool) -> Result<RawRound, E> {
                Ok(if b {
                    RawRound::Bad("a boolean")
                } else {
                    RawRound::Falsy
                })
            }
            fn visit_u64<E>(self, n: u64) -> Result<RawRound, E> {
                Ok(if n == 0 {
                    RawRound::Falsy
                } else {
                    RawRound::Bad("a number")
                })
            }
            fn visit_i64<E>(self, n: i64) -> Result<RawRound, E> {
                Ok(if n == 0 {
                    RawRound::Falsy
                } else {
                    RawRound::Bad("a number")
                })
            }
            fn visit_f64<E>(self, n: f64) -> Result<RawRound, E> {
                Ok(if n == 0.0 {
                    RawRound::Falsy
                } else {
                    RawRound::Bad("a number")
                })
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawRound, E> {
                self.visit_string(s.to_string())
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<RawRound, E> {
                if s.is_empty() {
                    return Ok(RawRound::Falsy);
                }
                spend::<E>(&MESSAGES_LEFT, MAX_MESSAGES, "messages")?;
                Ok(RawRound::Text(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawRound, A::Error> {
                let mut out = Vec::new();
                while let Some(m) = seq.next_element::<RawMessage>()? {
                    spend::<A::Error>(&MESSAGES_LEFT, MAX_MESSAGES, "messages")?;
                    out.push(m);
                }
                Ok(if out.is_empty() {
                    RawRound::Falsy
                } else {
                    RawRound::Messages(out)
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawRound, A::Error> {
                let mut any = false;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    any = true;
                }
                Ok(if any {
                    RawRound::Bad("an object")
                } else {
                    RawRound::Falsy
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RawTurn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawTurn;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a turn, {\"messages\": [...]}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawTurn, A::Error> {
                let mut turn = RawTurn {
                    messages: RawRound::Falsy,
                    prompt_tokens: Scalar::Absent,
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "messages" => turn.messages = map.next_value()?,
                        "prompt_tokens" => turn.prompt_tokens = map.next_value()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                spend::<A::Error>(&TURNS_LEFT, MAX_PROMPTS, "turns")?;
                Ok(turn)
            }
        }
        d.deserialize_map(V)
    }
}

/// A list of turns (one conversation), or of conversations: a list and nothing else.
struct Turns(Vec<RawTurn>);
struct Conversations(Vec<Vec<RawTurn>>);

impl<'de> Deserialize<'de> for Turns {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Turns;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a conversation, a list of turns")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Turns, A::Error> {
                let mut out = Vec::new();
                while let Some(t) = seq.next_element::<RawTurn>()? {
                    out.push(t);
                }
                Ok(Turns(out))
            }
        }
        d.deserialize_seq(V)
    }
}

impl<'de> Deserialize<'de> for Conversations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Conversations;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of conversations")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Conversations, A::Error> {
                let mut out = Vec::new();
                while let Some(Turns(t)) = seq.next_element::<Turns>()? {
                    spend::<A::Error>(&CONVERSATIONS_LEFT, MAX_PROMPTS, "conversations")?;
                    out.push(t);
                }
                Ok(Conversations(out))
            }
        }
        d.deserialize_seq(V)
    }
}

impl<'de> Deserialize<'de> for RawDoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawDoc;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object, {\"conversations\": [...]}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawDoc, A::Error> {
                let mut doc = RawDoc {
                    conversations: None,
                };
                while let Some(key) = map.next_key::<String>()? {
                    if key == "conversations" {
                        doc.conversations = map
                            .next_value::<Option<Conversations>>()?
                            .map(|Conversations(c)| c);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(doc)
            }
        }
        d.deserialize_map(V)
    }
}

/// Where a problem is: a top-level key, or a conversation's turn, one of its keys, one of its
/// messages, one of the message's keys.
struct Place {
    key: &'static str,
    turn: Option<(usize, usize)>,
    field: Option<&'static str>,
    message: Option<usize>,
    message_field: Option<&'static str>,
}

impl Place {
    fn key(key: &'static str) -> Self {
        Place {
            key,
            turn: None,
            field: None,
            message: None,
            message_field: None,
        }
    }
    fn turn(conversation: usize, turn: usize) -> Self {
        Place {
            turn: Some((conversation, turn)),
            ..Place::key("conversations")
        }
    }
    fn field(mut self, field: &'static str) -> Self {
        if self.message.is_some() {
            self.message_field = Some(field);
        } else {
            self.field = Some(field);
        }
        self
    }
    fn field_opt(self, field: Option<&'static str>) -> Self {
        match field {
            Some(f) => self.field(f),
            None => self,
        }
    }
    fn message(mut self, message: usize) -> Self {
        self.message = Some(message);
        self
    }
}

/// The 1-based line and byte column of a place in the document (the deepest part of it found;
/// 1:1 when the document cannot be walked). The document parsed as JSON already.
fn locate(text: &str, p: &Place) -> (usize, usize) {
    let b = text.as_bytes();
    let key_of = |object: usize, name: &str| {
        object_keys(b, object)
            .into_iter()
            .find(|(k, _)| *k == name.as_bytes())
            .map(|(_, v)| v)
    };
    let mut at = 0;
    let mut walk = || -> Option<()> {
        let top = key_of(skip_ws(b, 0), p.key)?;
        at = key_start(b, top);
        let (ci, ti) = p.turn?;
        let conversation = *array_items(b, top).get(ci)?;
        at = conversation;
        let turn = *array_items(b, conversation).get(ti)?;
        at = turn;
        let field = key_of(turn, p.field?)?;
        at = key_start(b, field);
        let message = *array_items(b, field).get(p.message?)?;
        at = message;
        let mf = key_of(message, p.message_field?)?;
        at = key_start(b, mf);
        Some(())
    };
    walk();
    let before = &b[..at.min(b.len())];
    let line = before.iter().filter(|&&c| c == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    (line, at - line_start + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<Conversation>, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trace.json");
        std::fs::write(&p, text).unwrap();
        load_agentic_trace(&p, None).map_err(|e| {
            let s = e.to_string();
            s[s.find("trace.json").unwrap()..].to_string()
        })
    }

    fn roles(t: &ConversationTurn) -> Vec<&str> {
        t.before
            .iter()
            .map(|m| m.role)
            .chain(std::iter::once(t.role))
            .collect()
    }

    /// SGLang's own test fixture (tests/fixtures/sglang, unchanged): three conversations of
    /// three rounds, a system and a user message first, then a user message a round.
    #[test]
    fn reads_sglangs_published_fixture() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/sglang/agentic_prebuilt.json");
        let c = load_agentic_trace(&path, None).unwrap();
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|c| c.turns.len() == 3 && c.system.is_none()));
        assert_eq!(roles(&c[0].turns[0]), ["system", "user"]);
        assert_eq!(
            c[0].turns[0].before[0].content,
            "fixture pad alpha alpha alpha alpha alpha alpha alpha"
        );
        assert_eq!(c[0].turns[0].text, "fix the failing login test in repo one");
        assert_eq!(roles(&c[2].turns[2]), ["user"]);
        assert_eq!(c[2].turns[2].text, "ship it to production");
        assert!(
            c.iter()
                .flat_map(|c| &c.turns)
                .all(|t| t.delay.is_zero() && t.output_tokens.is_none())
        );
        assert_eq!(c[1].id, "conversation-2");
    }

    #[test]
    fn rounds_are_read_as_sglang_normalises_them() {
        let c = read(
            r#"{"metadata": {"any": [1]}, "conversations": [
  [{"messages": "just text", "prompt_tokens": "12"},
   {"messages": []},
   {"messages": [{"role": "tool", "content": "out 1", "tool_call_id": "x", "name": "sh"},
                 {"role": "TOOL", "content": "out 2"}]},
   {"prompt_tokens": 9},
   {"messages": [{"role": "assistant", "content": "note"}, {"role": "user", "content": "go on"}]}],
  [{"messages": null}, {"messages": ""}],
  [{"messages": [{"role": "Developer", "content": ""}, {"content": "last", "role": "root", "role": "user"}]}]
]}"#,
        )
        .unwrap();
        // The second conversation has no round with messages: dropped, as SGLang drops it.
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].id, "conversation-3");
        let t = &c[0].turns;
        assert_eq!(t.len(), 3, "rounds without messages are dropped");
        assert_eq!(roles(&t[0]), ["user"]);
        assert_eq!(t[0].text, "just text");
        // Roles in SGLang's generic model are lowercased, as its request model does.
        assert_eq!(roles(&t[1]), ["tool", "tool"]);
        assert_eq!(
            (t[1].before[0].content.as_str(), t[1].text.as_str()),
            ("out 1", "out 2")
        );
        assert_eq!(roles(&t[2]), ["assistant", "user"]);
        // A repeated key: the last, as Python's json reads it.
        assert_eq!(roles(&c[1].turns[0]), ["developer", "user"]);
    }

    /// `--agentic-max-turns`: the first rounds with messages, counted after the empty ones
    /// are dropped; the rounds after are never sent, so a role there is not refused.
    #[test]
    fn max_turns_keeps_the_first_rounds_with_messages() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trace.json");
        std::fs::write(
            &p,
            r#"{"conversations": [[{"messages": "a"}, {"messages": []}, {"messages": "b"}, {"messages": [{"role": "User", "content": "c"}]}], [{"messages": "d"}]]}"#,
        )
        .unwrap();
        let c = load_agentic_trace(&p, Some(2)).unwrap();
        let texts: Vec<Vec<&str>> = c
            .iter()
            .map(|c| c.turns.iter().map(|t| t.text.as_str()).collect())
            .collect();
        assert_eq!(texts, [vec!["a", "b"], vec!["d"]]);
        assert!(load_agentic_trace(&p, Some(3)).is_err());
    }

    #[test]
    fn what_sglang_would_stop_on_or_refuse_is_refused_at_its_place() {
        let cases: [(&str, &str); 13] = [
            ("[]", "trace.json:1:1: not an SGLang agentic-trace document"),
            (r#"{"metadata": {}}"#, "trace.json:1:1: no `conversations`"),
            (
                r#"{"conversations": []}"#,
                "trace.json:1:2: `conversations` is empty",
            ),
            (
                r#"{"conversations": [{"messages": "a"}]}"#,
                "trace.json:1:19: not an SGLang agentic-trace document (invalid type: map, expected a conversation",
            ),
            (
                r#"{"conversations": [[{"messages": [{"role": "user", "content": "a"}]}, ["x"]]]}"#,
                "trace.json:1:70: not an SGLang agentic-trace document (invalid type: sequence, expected a turn",
            ),
            (
                r#"{"conversations": [[{"messages": {"role": "user"}}]]}"#,
                "trace.json:1:22: `messages` is an object",
            ),
            (
                "{\"conversations\": [\n  [{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}],\n  [{\"messages\": [{\"role\": \"tool\", \"content\": \"b\"}, {\"role\": \"User\", \"content\": \"c\"}]}]\n]}",
                "trace.json:3:53: `role: \"User\"`: SGLang's chat endpoint admits `user` in lower case only",
            ),
            (
                r#"{"conversations": [[{"messages": [{"role": "observation", "content": "a"}]}]]}"#,
                "trace.json:1:36: `role: \"observation\"`: SGLang's chat endpoint refuses it",
            ),
            (
                r#"{"conversations": [[{"messages": [{"role": "user"}]}]]}"#,
                "trace.json:1:35: a message without `content`",
            ),
            (
                r#"{"conversations": [[{"messages": ["hi"]}]]}"#,
                "trace.json:1:35: a message is a string",
            ),
            (
                r#"{"conversations": [[{"messages": [{"role": "tool", "content": null}]}]]}"#,
                "trace.json:1:52: `content` is null: servebench sends text messages",
            ),
            (
                r#"{"conversations": [[{"messages": "a", "prompt_tokens": null}]]}"#,
                "trace.json:1:39: `prompt_tokens` is null",
            ),
            (
                r#"{"conversations": [[{"messages": []}], [{"messages": 0}]]}"#,
                "trace.json:1:2: no conversation has a turn with `messages`",
            ),
        ];
        for (doc, want) in cases {
            let e = read(doc).unwrap_err();
            assert!(e.starts_with(want), "{doc}\n got {e}\nwant {want}");
        }
        // Later turns' `prompt_tokens` are not read by SGLang, nor refused here.
        read(
            r#"{"conversations": [[{"messages": "a"}, {"messages": "b", "prompt_tokens": [1]}]]}"#,
        )
        .unwrap();
        let e =
            read(r#"{"conversations": [[{"messages": "a", "prompt_tokens": -1}]]}"#).unwrap_err();
        assert!(e.contains("not a prompt length"), "{e}");
    }

    #[test]
    fn budgets_are_counted_as_the_document_is_parsed() {
        // Turns over the budget are refused while parsing, before they are held.
        let turns = (0..MAX_PROMPTS + 1)
            .map(|_| "{}")
            .collect::<Vec<_>>()
            .join(",");
        let e = read(&format!("{{\"conversations\": [[{turns}]]}}")).unwrap_err();
        assert!(e.contains("more than 100000 turns"), "{e}");
        // A conversation's messages are one prompt, limited as one.
        let big = "x".repeat(MAX_PROMPT_BYTES / 2 + 1);
        let e = read(&format!(
            "{{\"conversations\": [[{{\"messages\": \"{big}\"}},\n{{\"messages\": \"{big}\"}}]]}}"
        ))
        .unwrap_err();
        assert!(
            e.starts_with("trace.json:2:1: conversation 1 holds 8388610 bytes"),
            "{}",
            &e[..100.min(e.len())]
        );
    }

    /// Hostile edits of a document are read or refused at a place inside the file, never a
    /// panic.
    #[test]
    fn mutated_documents_are_read_or_refused_at_their_place() {
        let seed = concat!(
            r#"{"metadata": {"n": 2}, "conversations": [[{"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "a"}], "prompt_tokens": 40},"#,
            "\n",
            r#"{"messages": [{"role": "tool", "content": "b"}]}], [{"messages": "c"}]]}"#,
            "\n"
        );
        let tokens: [&[u8]; 12] = [
            b"\n", b",", b"\"", b"{", b"}", b"[", b"]", b"-1", b"1e999", b"\xff", b"\\", b"null",
        ];
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("trace.json");
        for (_, bytes) in testkit::mutate::mutations(&[seed.as_bytes()], &tokens, 0xA6E7, 1000) {
            std::fs::write(&p, &bytes).unwrap();
            if let Err(PromptError::DatasetLine { line, column, .. }) = load_agentic_trace(&p, None)
            {
                testkit::mutate::assert_within(&bytes, line, column);
            }
        }
    }
}
