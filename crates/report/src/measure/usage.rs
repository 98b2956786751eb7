//! A point's streams against their budgets, and the servers' counts against what the streams
//! carried and the requests asked: requests whose events passed their chunk budget
//! (`stream-budget`: their gaps are not kept one by one) and usage that cannot be right
//! (`impossible-usage`: more thinking than output, more output than `max_tokens`, no call
//! where `tool_choice` requires one), which degrades the point as invalid output does.

use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, ReasoningSource, RequestRecord, TokenSource};
use servebench_model::spec::tools::{ToolChoice, ToolMode};
use servebench_model::spec::types::Experiment;

/// What a point's successful records said about their streams' budgets and usage, folded
/// one record at a time (in any order).
#[derive(Debug, Clone, Default)]
pub(crate) struct UsageTally {
    /// The point's `tool_choice` requires a call (`required`, or a named function).
    requires_call: bool,
    ok: usize,
    /// Requests whose events passed the chunk budget, and the first (order, index, events).
    folded: usize,
    first_folded: Option<(u64, u32, u64)>,
    /// Requests whose usage cannot be right, and the first (order, index, why).
    impossible: usize,
    first_impossible: Option<(u64, u32, String)>,
}

impl UsageTally {
    pub(crate) fn new(exp: &Experiment) -> UsageTally {
        let requires_call = matches!(
            exp.workload.tool_choice,
            Some(ToolChoice::Mode(ToolMode::Required) | ToolChoice::Named { .. })
        );
        UsageTally {
            requires_call,
            ..UsageTally::default()
        }
    }

    /// Folds in a successful record.
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        self.ok += 1;
        let order = super::metrics::order_key(r);
        if let Some(n) = r.chunks_folded.filter(|n| *n > 0) {
            self.folded += 1;
            if self.first_folded.is_none_or(|(o, _, _)| order < o) {
                self.first_folded = Some((order, r.index, n));
            }
        }
        if let Some(why) = impossible(r, self.requires_call) {
            self.impossible += 1;
            if self
                .first_impossible
                .as_ref()
                .is_none_or(|(o, _, _)| order < *o)
            {
                self.first_impossible = Some((order, r.index, why));
            }
        }
    }

    /// The point's flags.
    pub(crate) fn flags(&self) -> Vec<Flag> {
        let mut flags = Vec::new();
        if let Some((_, index, n)) = self.first_folded {
            flags.push(Flag::new(
                FlagKind::StreamBudget,
                format!(
                    "{} of {} requests streamed more events than their chunk budget (4,096 + 4 per max_tokens; first: request {index}, {n} events past it): past it their tokens were folded into their last chunks (`chunks_folded`), so their gaps between tokens are not kept one by one",
                    self.folded, self.ok
                ),
            ));
        }
        if let Some((_, index, why)) = &self.first_impossible {
            flags.push(Flag::new(
                FlagKind::ImpossibleUsage,
                format!(
                    "{} of {} requests counted usage their stream or request contradicts (first: request {index}, {why}): the point measures output that cannot be right",
                    self.impossible, self.ok
                ),
            ));
        }
        flags
    }
}

/// Why `r`'s counts cannot be right, if they cannot: the server's thinking count above its
/// output count, its output count above `max_tokens`, or no call where one was required (a
/// request that never answered, out of tokens while thinking, is not asked for one).
fn impossible(r: &RequestRecord, requires_call: bool) -> Option<String> {
    let output = r
        .completion_tokens
        .filter(|_| r.token_source != TokenSource::ChunkCount);
    if let (Some(thinking), Some(out), Some(ReasoningSource::Server)) =
        (r.reasoning_tokens, output, r.reasoning_source)
        && thinking > out
    {
        return Some(format!("{thinking} thinking tokens of {out} output tokens"));
    }
    if let Some(out) = output
        && out > u64::from(r.max_tokens)
    {
        return Some(format!(
            "{out} output tokens, above its max_tokens {}",
            r.max_tokens
        ));
    }
    if requires_call && r.tool_calls == Some(0) && r.no_answer.is_none() {
        return Some("no tool call, under a tool_choice that requires one".to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(choice: &str) -> Experiment {
        let text = format!(
            "name: t\nserver: {{ url: http://127.0.0.1:1 }}\nworkload: {{ api: openai-chat, prompt: {{ kind: random, tokens: 64 }}, output_tokens: 10, tools: [{{ type: function, function: {{ name: f, parameters: {{ type: object }} }} }}], tool_choice: {choice} }}\nrequests: 1\n"
        );
        servebench_model::spec::load_str("t.yaml", &text)
            .unwrap()
            .points[0]
            .experiment
            .clone()
    }

    fn rec(index: u32) -> RequestRecord {
        RequestRecord {
            index,
            max_tokens: 10,
            completion_tokens: Some(10),
            token_source: TokenSource::Usage,
            tool_calls: Some(1),
            ..RequestRecord::fixture()
        }
    }

    /// 2^64-1 thinking tokens of 10 output, 11 output tokens of max_tokens 10 and a call-free
    /// answer under `required` are each impossible; the same counts from chunks, or a request
    /// cut while thinking, are not judged.
    #[test]
    fn usage_that_contradicts_the_stream_or_the_request_is_impossible() {
        let mut t = UsageTally::new(&exp("required"));
        t.add(&rec(0));
        assert!(t.flags().is_empty());
        let thinking = RequestRecord {
            reasoning_tokens: Some(u64::MAX),
            reasoning_source: Some(ReasoningSource::Server),
            ..rec(3)
        };
        let over = RequestRecord {
            completion_tokens: Some(11),
            ..rec(1)
        };
        let no_call = RequestRecord {
            tool_calls: Some(0),
            ..rec(2)
        };
        for r in [&thinking, &over, &no_call] {
            let mut one = UsageTally::new(&exp("required"));
            one.add(r);
            let flags = one.flags();
            assert_eq!(flags.len(), 1, "{r:?}");
            assert_eq!(flags[0].kind, FlagKind::ImpossibleUsage);
            assert!(flags[0].kind.voids_output());
        }
        for r in [thinking, over, no_call] {
            t.add(&r);
        }
        let flags = t.flags();
        assert!(
            flags[0]
                .message
                .starts_with("3 of 4 requests counted usage their stream or request contradicts (first: request 1, 11 output tokens, above its max_tokens 10)"),
            "{}",
            flags[0].message
        );
        let m = &UsageTally::new(&exp("required"));
        let mut m = m.clone();
        m.add(&RequestRecord {
            reasoning_tokens: Some(u64::MAX),
            reasoning_source: Some(ReasoningSource::Server),
            ..rec(0)
        });
        assert!(
            m.flags()[0]
                .message
                .contains(&format!("{} thinking tokens of 10 output tokens", u64::MAX))
        );
        // Not judged: counts the client made, a call not required, an unanswered request.
        let mut quiet = UsageTally::new(&exp("auto"));
        quiet.add(&RequestRecord {
            completion_tokens: Some(11),
            token_source: TokenSource::ChunkCount,
            tool_calls: Some(0),
            ..rec(0)
        });
        let mut cut = UsageTally::new(&exp("required"));
        cut.add(&RequestRecord {
            tool_calls: Some(0),
            no_answer: Some(servebench_model::results::records::NoAnswer::OutOfTokensWhileThinking),
            ..rec(0)
        });
        assert!(quiet.flags().is_empty() && cut.flags().is_empty());
    }

    #[test]
    fn folded_streams_are_named_with_the_first() {
        let mut t = UsageTally::new(&exp("auto"));
        for (i, folded) in [(4, Some(9)), (2, None), (1, Some(3_000_000))] {
            t.add(&RequestRecord {
                chunks_folded: folded,
                ..rec(i)
            });
        }
        let flags = t.flags();
        assert_eq!(flags[0].kind, FlagKind::StreamBudget);
        assert!(
            flags[0].message.starts_with("2 of 3 requests streamed more events than their chunk budget (4,096 + 4 per max_tokens; first: request 1, 3000000 events past it)"),
            "{}",
            flags[0].message
        );
        assert!(!flags[0].kind.voids_output());
    }
}
