//! Warnings about points whose samples spread so widely that their mean is uncertain.

use indexmap::IndexMap;

use servebench_model::catalog::{FlagKind, Metric};
use servebench_model::results::records::{Flag, Stat};

/// Coefficient of variation above which a headline metric is flagged.
pub(crate) const HIGH_CV: f64 = 0.10;

/// Fewest samples for a CV worth reporting: with two, any difference looks large.
pub(crate) const MIN_SAMPLES: usize = 3;

/// One `high-variance` flag per headline metric (`ttft_s`, `prefill_tok_s`, `decode_tok_s`)
/// whose coefficient of variation is above [`HIGH_CV`] over at least [`MIN_SAMPLES`] samples.
pub(crate) fn spread_flags(metrics: &IndexMap<String, Stat>) -> Vec<Flag> {
    Metric::headline()
        .filter_map(|metric| {
            let label = metric.long_label();
            let stat = metrics.get(metric.name())?;
            let cv = stat
                .cv
                .filter(|cv| *cv > HIGH_CV && stat.count >= MIN_SAMPLES)?;
            Some(Flag {
                kind: FlagKind::HighVariance,
                message: format!(
                    "{label} varies: CV {:.0}% over {} requests; the mean is less certain",
                    cv * 100.0,
                    stat.count
                ),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::stats::summarize;

    fn metrics(entries: &[(&str, &[f64])]) -> IndexMap<String, Stat> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), summarize(v).unwrap()))
            .collect()
    }

    #[test]
    fn flags_only_headline_metrics_above_ten_percent() {
        // TTFT [0.8, 1.0, 1.2]: mean 1.0, std 0.2, CV 20%. Decode [99, 100, 101]: CV 1%.
        // ITL varies a lot but is not a headline metric.
        let m = metrics(&[
            ("ttft_s", &[0.8, 1.0, 1.2]),
            ("decode_tok_s", &[99.0, 100.0, 101.0]),
            ("itl_s", &[0.001, 0.01, 0.1]),
        ]);
        let flags = spread_flags(&m);
        assert_eq!(flags.len(), 1, "{flags:?}");
        assert_eq!(flags[0].kind, FlagKind::HighVariance);
        assert_eq!(
            flags[0].message,
            "TTFT varies: CV 20% over 3 requests; the mean is less certain"
        );
    }

    #[test]
    fn needs_three_samples_and_more_than_ten_percent() {
        // Two samples never flag, however far apart.
        assert!(spread_flags(&metrics(&[("ttft_s", &[1.0, 3.0])])).is_empty());
        // [0.91, 1.0, 1.09]: std 0.09, CV 9%: kept quiet. [0.89, 1.0, 1.11]: CV 11%: flagged.
        assert!(spread_flags(&metrics(&[("prefill_tok_s", &[0.91, 1.0, 1.09])])).is_empty());
        let flags = spread_flags(&metrics(&[("prefill_tok_s", &[0.89, 1.0, 1.11])]));
        assert_eq!(
            flags[0].message,
            "Prefill speed varies: CV 11% over 3 requests; the mean is less certain"
        );
        assert!(spread_flags(&IndexMap::new()).is_empty());
    }
}
