//! A point's thinking-model flags, from its successful measured records: requests that never
//! answered (they ran out of tokens, or were stopped, while thinking) and stream fields
//! servebench does not know.

use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, NoAnswer, RequestRecord};

/// What a point's records said about thinking, folded one record at a time.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThinkingTally {
    /// Successful requests, those that thought, and those that thought without answering.
    ok: usize,
    thought: usize,
    out_of_tokens: usize,
    ended: usize,
    /// The first such request's index.
    first_unanswered: Option<u32>,
    /// Requests whose stream carried unknown fields, and the fields (at most 8).
    unknown_requests: usize,
    unknown: Vec<String>,
}

impl ThinkingTally {
    /// Folds in a successful measured record.
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        self.ok += 1;
        self.thought += usize::from(r.thought());
        match r.no_answer {
            Some(NoAnswer::OutOfTokensWhileThinking) => self.out_of_tokens += 1,
            Some(NoAnswer::EndedWhileThinking) => self.ended += 1,
            None => {}
        }
        if r.no_answer.is_some() {
            self.first_unanswered = Some(self.first_unanswered.map_or(r.index, |i| i.min(r.index)));
        }
        if !r.unknown_fields.is_empty() {
            self.unknown_requests += 1;
            for f in &r.unknown_fields {
                if self.unknown.len() < 8 && !self.unknown.contains(f) {
                    self.unknown.push(f.clone());
                }
            }
        }
    }

    /// The point's flags.
    pub(crate) fn flags(&self) -> Vec<Flag> {
        let mut flags = Vec::new();
        let unanswered = self.out_of_tokens + self.ended;
        if unanswered > 0 {
            let mut why = Vec::new();
            if self.out_of_tokens > 0 {
                why.push(format!(
                    "{} reached max_tokens while thinking",
                    self.out_of_tokens
                ));
            }
            if self.ended > 0 {
                why.push(format!("{} ended while thinking", self.ended));
            }
            let answered = self.ok.saturating_sub(unanswered);
            let ttfa = if answered == 0 {
                "the point has no TTFA".to_string()
            } else {
                format!("the point's TTFA covers the {answered} that answered")
            };
            flags.push(Flag::new(
                FlagKind::NoAnswer,
                format!(
                    "{unanswered} of {} requests that thought never answered ({}; first: request {}): they have no time to the first answer token, and {ttfa}",
                    self.thought,
                    why.join(", "),
                    self.first_unanswered.unwrap_or(0),
                ),
            ));
        }
        if self.unknown_requests > 0 {
            flags.push(Flag::new(
                FlagKind::UnknownStreamField,
                format!(
                    "{} of {} requests streamed fields servebench does not know ({}): their text was counted neither as thinking nor as answer, so TTFT, the first answer time and the token split may be wrong",
                    self.unknown_requests,
                    self.ok,
                    self.unknown.join(", ")
                ),
            ));
        }
        flags
    }
}
