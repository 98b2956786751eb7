//! A point's tool calls, from its successful records that were sent tools: how many made a
//! call and how many calls were valid (the point's `tool_call_rate` and
//! `tool_call_valid_rate`), the first invalid one, and the `invalid-tool-calls` flag when too
//! many were not (a server that returns broken calls under load measures output nobody can
//! use).

use indexmap::IndexMap;

use servebench_model::catalog::{FlagKind, Metric};
use servebench_model::results::records::{Flag, RequestRecord, Stat};
use servebench_model::results::tool_calls::{InvalidCall, ToolCallsView};

/// Share of requests that called a tool whose calls may be invalid before the point is
/// flagged (a request's calls are judged together: one invalid call makes it invalid).
pub(crate) const INVALID_SHARE_FLAGGED: f64 = 0.05;

/// What a point's records said about tool calls, folded one record at a time (in any
/// order).
#[derive(Debug, Clone, Default)]
pub(crate) struct ToolTally {
    /// Successful requests sent tools, those that called, and those whose calls were valid.
    sent: usize,
    called: usize,
    valid: usize,
    /// The first invalid call, by the order the point sent its requests: (order key, call).
    first_invalid: Option<(u64, InvalidCall)>,
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
            Some(false) => {
                let order = super::metrics::order_key(r);
                if self.first_invalid.as_ref().is_none_or(|(o, _)| order < *o) {
                    let reason = r.tool_call_invalid.clone().unwrap_or_default();
                    let call = InvalidCall {
                        request: r.index,
                        reason,
                    };
                    self.first_invalid = Some((order, call));
                }
            }
            None => {}
        }
    }

    /// The point's view of its calls; None when no successful request was sent tools.
    pub(crate) fn view(&self) -> Option<ToolCallsView> {
        (self.sent > 0).then(|| ToolCallsView {
            sent: self.sent,
            called: self.called,
            valid: self.valid,
            first_invalid: self.first_invalid.as_ref().map(|(_, c)| c.clone()),
        })
    }

    /// Puts the point's shares in `metrics`: `tool_call_rate` when a request was sent tools,
    /// `tool_call_valid_rate` when one called. One value per point; `count` is the requests
    /// the share is over.
    pub(crate) fn put_metrics(&self, metrics: &mut IndexMap<String, Stat>) {
        for (metric, part, whole) in [
            (Metric::ToolCallRate, self.called, self.sent),
            (Metric::ToolCallValidRate, self.valid, self.called),
        ] {
            if whole == 0 {
                continue;
            }
            let share = part as f64 / whole as f64;
            metrics.insert(
                metric.name().to_string(),
                Stat {
                    count: whole,
                    mean: share,
                    p50: share,
                    p90: share,
                    p99: share,
                    min: share,
                    max: share,
                    ..Stat::default()
                },
            );
        }
    }

    /// The point's flags.
    pub(crate) fn flags(&self) -> Vec<Flag> {
        let invalid = self.called - self.valid;
        if self.called == 0 || (invalid as f64) <= INVALID_SHARE_FLAGGED * self.called as f64 {
            return Vec::new();
        }
        let (index, why) = self
            .first_invalid
            .as_ref()
            .map(|(_, c)| (c.request, c.reason.clone()))
            .unwrap_or_default();
        vec![Flag::new(
            FlagKind::InvalidToolCalls,
            format!(
                "{invalid} of {} requests that called a tool made an invalid call (above {:.0}%; {} of {} requests sent tools called one; first: request {index}, {why}): the point measures a server whose calls cannot be used",
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
            tool_call_invalid: valid
                .is_some_and(|v| !v)
                .then(|| format!("not JSON ({index})")),
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
        // It counts requests (a request's calls are judged together), and says so.
        assert!(
            flags[0]
                .message
                .starts_with("2 of 21 requests that called a tool made an invalid call"),
            "{}",
            flags[0].message
        );
        assert!(
            flags[0]
                .message
                .contains("21 of 22 requests sent tools called one"),
            "{}",
            flags[0].message
        );
        assert!(flags[0].message.contains("request 3, not JSON (3)"));
    }

    /// The shares: calls made of the requests sent tools, valid ones of those that called;
    /// the first invalid call is the first the point sent, whatever order records come in.
    #[test]
    fn the_shares_count_requests_sent_tools_and_those_that_called() {
        let mut t = ToolTally::default();
        for r in [
            rec(5, Some(1), Some(false)),
            rec(0, Some(1), Some(true)),
            rec(1, Some(2), Some(true)),
            rec(2, Some(0), None),
            rec(3, Some(1), Some(false)),
            rec(4, None, None),
        ] {
            t.add(&r);
        }
        let mut metrics = IndexMap::new();
        t.put_metrics(&mut metrics);
        let rate = &metrics["tool_call_rate"];
        assert_eq!((rate.count, rate.mean), (5, 0.8));
        let valid = &metrics["tool_call_valid_rate"];
        assert_eq!((valid.count, valid.mean), (4, 0.5));
        let view = t.view().unwrap();
        assert_eq!(
            (view.sent, view.called, view.valid, view.invalid()),
            (5, 4, 2, 2)
        );
        let first = view.first_invalid.unwrap();
        assert_eq!((first.request, first.reason.as_str()), (3, "not JSON (3)"));
        // No call made: no valid share; nothing sent tools: no view at all.
        let mut text_only = ToolTally::default();
        text_only.add(&rec(0, Some(0), None));
        let mut m = IndexMap::new();
        text_only.put_metrics(&mut m);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["tool_call_rate"]);
        assert_eq!(m["tool_call_rate"].mean, 0.0);
        assert!(ToolTally::default().view().is_none());
    }
}
