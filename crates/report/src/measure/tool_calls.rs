//! A point's tool calls, from its successful records that were sent tools: how many made a
//! call, how many calls were valid, and the `invalid-tool-calls` flag when too many were not
//! (a server that returns broken calls under load measures output nobody can use).

use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, RequestRecord};

/// Share of calls that may be invalid before the point is flagged.
pub(crate) const INVALID_SHARE_FLAGGED: f64 = 0.05;

/// What a point's records said about tool calls, folded one record at a time.
#[derive(Debug, Clone, Default)]
pub(crate) struct ToolTally {
    /// Successful requests sent tools, those that called, and those whose calls were valid.
    sent: usize,
    called: usize,
    valid: usize,
    /// The first invalid call's request and why.
    first_invalid: Option<(u32, String)>,
}

impl ToolTally {
    /// Folds in a successful record.
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        let Some(calls) = r.tool_calls else {
            return;
        };
        self.sent += 1;
        if calls > 0 {
            self.called += 1;
        }
        match r.tool_call_valid {
            Some(true) => self.valid += 1,
            Some(false) if self.first_invalid.is_none() => {
                self.first_invalid =
                    Some((r.index, r.tool_call_invalid.clone().unwrap_or_default()));
            }
            _ => {}
        }
    }

    /// The point's flags.
    pub(crate) fn flags(&self) -> Vec<Flag> {
        let invalid = self.called - self.valid;
        if self.called == 0 || (invalid as f64) <= INVALID_SHARE_FLAGGED * self.called as f64 {
            return Vec::new();
        }
        let (index, why) = self.first_invalid.clone().unwrap_or_default();
        vec![Flag::new(
            FlagKind::InvalidToolCalls,
            format!(
                "{invalid} of {} tool calls were invalid (above {:.0}%; {} of {} requests called; first: request {index}, {why}): the point measures a server whose calls cannot be used",
                self.called,
                INVALID_SHARE_FLAGGED * 100.0,
                self.called,
                self.sent
            ),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(index: u32, calls: Option<u32>, valid: Option<bool>) -> RequestRecord {
        RequestRecord {
            index,
            tool_calls: calls,
            tool_call_valid: valid,
            tool_call_invalid: valid.is_some_and(|v| !v).then(|| "not JSON".to_string()),
            ..RequestRecord::fixture()
        }
    }

    #[test]
    fn a_point_is_flagged_when_more_than_its_share_of_calls_are_invalid() {
        let mut t = ToolTally::default();
        for i in 0..20 {
            t.add(&rec(i, Some(1), Some(i != 3)));
        }
        t.add(&rec(20, Some(0), None));
        t.add(&rec(21, None, None));
        // 1 of 20 is 5%: not above the share.
        assert!(t.flags().is_empty());
        t.add(&rec(22, Some(1), Some(false)));
        let flags = t.flags();
        assert_eq!(flags[0].kind, FlagKind::InvalidToolCalls);
        assert!(
            flags[0].message.contains("2 of 21 tool calls"),
            "{}",
            flags[0].message
        );
        assert!(flags[0].message.contains("request 3, not JSON"));
    }
}
