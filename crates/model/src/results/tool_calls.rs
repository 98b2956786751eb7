//! What a point's tool calls were (`workload.tools`), counted from its successful measured
//! requests that were sent tools; the shares are the point's metrics `tool_call_rate` and
//! `tool_call_valid_rate`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A point's tool calls.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallsView {
    /// Successful measured requests sent tools.
    pub sent: usize,
    /// Of them, requests whose stream made a call (the others answered in text).
    pub called: usize,
    /// Of those, requests whose every call named a declared tool with arguments satisfying
    /// its schema.
    pub valid: usize,
    /// The first request, in the order the point sent them, whose call was invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_invalid: Option<InvalidCall>,
}

/// A request whose tool call was invalid, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InvalidCall {
    /// The request's index in its round (`index` in requests.jsonl).
    pub request: u32,
    /// The first problem found (`tool_call_invalid`).
    pub reason: String,
}

impl ToolCallsView {
    /// Requests that called with an invalid call.
    pub fn invalid(&self) -> usize {
        self.called.saturating_sub(self.valid)
    }
}
