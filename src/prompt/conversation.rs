//! A conversation replayed from a file by the sessions load: its turns, each the messages it
//! appends and the wait before it. Both file readers (`conversations`: AIPerf's `multi_turn`;
//! `agentic_trace`: SGLang's `agentic-trace`) make these.

use std::time::Duration;

/// One conversation (AIPerf's session).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Conversation {
    pub id: String,
    /// The leading system turn's text, sent before every turn.
    pub system: Option<String>,
    pub turns: Vec<ConversationTurn>,
}

/// One turn: the messages it appends to the conversation, then the server's reply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConversationTurn {
    /// The turn's messages before its last (an SGLang agentic-trace round of several; none
    /// for AIPerf's turns).
    pub before: Vec<TurnMessage>,
    /// The role of the turn's last message, `text` (`user` for AIPerf's turns).
    pub role: &'static str,
    pub text: String,
    /// Wait after the previous turn's answer ended (zero for a session's first turn).
    pub delay: Duration,
    /// `output_length`: the turn's `max_tokens` (else the workload's output length).
    pub output_tokens: Option<u32>,
}

/// One message of a turn, as a file gives it: its role and its text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TurnMessage {
    pub role: &'static str,
    pub content: String,
}
