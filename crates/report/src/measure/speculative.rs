//! Speculative decoding per point: the mean accept length (tokens per verify step) and the
//! flag for acceptance so low that speculation costs and buys nothing.

use indexmap::IndexMap;

use servebench_model::catalog::{FlagKind, Metric};
use servebench_model::results::records::{Flag, Stat};

/// Below this many tokens per verify step, speculation is called wasted: each step pays for
/// drafting and verifying and emits hardly more than the one token plain decoding would.
pub(crate) const LOW_ACCEPTANCE_TOK_PER_STEP: f64 = 1.1;

/// A point's mean output tokens per speculative verify step (its `accept_length` metric's
/// mean), where its requests' verify steps are known; None for plain decoding and where the
/// stream could not tell. This is the tokens per step a roofline grade divides a measured
/// step by.
pub(crate) fn tokens_per_step(metrics: &IndexMap<String, Stat>) -> Option<f64> {
    metrics
        .get(Metric::AcceptLength.name())
        .filter(|s| s.count > 0 && s.mean.is_finite())
        .map(|s| s.mean)
}

/// `spec-low-acceptance` when the mean accept length is under
/// [`LOW_ACCEPTANCE_TOK_PER_STEP`].
pub(crate) fn low_acceptance_flag(metrics: &IndexMap<String, Stat>) -> Option<Flag> {
    let mean = tokens_per_step(metrics).filter(|m| *m < LOW_ACCEPTANCE_TOK_PER_STEP)?;
    let count = metrics
        .get(Metric::AcceptLength.name())
        .map_or(0, |s| s.count);
    Some(Flag::new(
        FlagKind::SpecLowAcceptance,
        format!(
            "speculative decoding accepted {mean:.2} tokens per verify step on average over {count} requests (under {LOW_ACCEPTANCE_TOK_PER_STEP}): each step pays for drafting and verifying and buys almost nothing over plain decoding; check the draft model and its settings, or turn speculation off"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(mean: f64, count: usize) -> IndexMap<String, Stat> {
        let stat = Stat {
            count,
            mean,
            ..Stat::default()
        };
        [("accept_length".to_string(), stat)].into_iter().collect()
    }

    #[test]
    fn acceptance_under_one_point_one_tokens_per_step_is_flagged() {
        assert_eq!(tokens_per_step(&metrics(1.05, 8)), Some(1.05));
        let flag = low_acceptance_flag(&metrics(1.05, 8)).unwrap();
        assert_eq!(flag.kind, FlagKind::SpecLowAcceptance);
        assert!(
            flag.message.contains("1.05 tokens per verify step"),
            "{}",
            flag.message
        );
        assert!(low_acceptance_flag(&metrics(1.1, 8)).is_none());
        assert!(low_acceptance_flag(&metrics(2.4, 8)).is_none());
    }

    #[test]
    fn plain_decoding_has_no_tokens_per_step_and_no_flag() {
        assert_eq!(tokens_per_step(&IndexMap::new()), None);
        assert_eq!(tokens_per_step(&metrics(f64::NAN, 0)), None);
        assert!(low_acceptance_flag(&IndexMap::new()).is_none());
    }
}
