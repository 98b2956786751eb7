//! E2E normalized interactivity (AIPerf's `e2e_normalized_interactivity_p90` and `_p75`,
//! InferenceX's agentic chart axis): `1 / p(E2E / completion_tokens)`, the percentile of each
//! request's seconds per output token inverted (the percentile of the inverse would land the
//! interpolation elsewhere). Request-weighted: one sample a request, over the requests whose
//! E2E, completion_tokens, TTFT and prompt_tokens (where counted) are above 0 (AIPerf's filter,
//! `e2e_normalized_interactivity_analyzer.py`).

use indexmap::IndexMap;

use servebench_model::catalog::Metric;
use servebench_model::results::records::{Estimate, RequestRecord, Stat};

use super::samples::Samples;

/// The percentiles AIPerf reports, each with its metric.
const PERCENTILES: [(Metric, f64); 2] = [
    (Metric::E2eInteractivityP90, 90.0),
    (Metric::E2eInteractivityP75, 75.0),
];

/// A point's seconds per output token, one a request (exact up to the samples' cap).
#[derive(Debug, Clone, Default)]
pub(crate) struct InteractivityTally {
    ratios: Samples,
}

impl InteractivityTally {
    /// Folds in a successful measured record (others give no sample).
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        if let Some(ratio) = seconds_per_token(r) {
            self.ratios
                .push(super::metrics::order_key(r), r.round, &[ratio]);
        }
    }

    /// Puts both percentiles in `metrics` (one value per point, `count` the requests it is
    /// over); nothing without a sample.
    pub(crate) fn put_metrics(&self, metrics: &mut IndexMap<String, Stat>) {
        let count = self.ratios.finite_count();
        if count == 0 {
            return;
        }
        for (metric, q) in PERCENTILES {
            let p = self.ratios.percentile(q);
            let value = 1.0 / p;
            if p.is_nan() || p <= 0.0 || !value.is_finite() {
                continue;
            }
            metrics.insert(
                metric.name().to_string(),
                Stat {
                    count,
                    mean: value,
                    p50: value,
                    p90: value,
                    p99: value,
                    min: value,
                    max: value,
                    estimate: (!self.ratios.is_exact()).then_some(Estimate::Histogram),
                    ..Stat::default()
                },
            );
        }
    }
}

/// A request's E2E over its output tokens (seconds a token), when it qualifies: measured,
/// successful, and E2E, completion_tokens, TTFT and prompt_tokens (where counted) above 0.
fn seconds_per_token(r: &RequestRecord) -> Option<f64> {
    if r.error.is_some() || r.role != servebench_model::results::records::RequestRole::Measure {
        return None;
    }
    let e2e = r.end_s.filter(|e| e.is_finite() && *e > 0.0)?;
    let osl = r.completion_tokens.filter(|n| *n > 0)? as f64;
    r.chunks
        .iter()
        .find(|c| c.tokens > 0)
        .filter(|c| c.t_s > 0.0 && r.prompt_tokens != Some(0))?;
    Some(e2e / osl).filter(|x| x.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::{Chunk, ErrorKind, RequestError};

    fn rec(index: u32, e2e: f64, completion: u64) -> RequestRecord {
        RequestRecord {
            index,
            chunks: vec![Chunk {
                t_s: e2e / 4.0,
                tokens: 1,
                reasoning: 0,
            }],
            end_s: Some(e2e),
            prompt_tokens: Some(100),
            completion_tokens: Some(completion),
            ..RequestRecord::fixture()
        }
    }

    /// numpy's `np.percentile(x, q)` (linear): what AIPerf and InferenceX call.
    fn numpy_percentile(mut x: Vec<f64>, q: f64) -> f64 {
        x.sort_by(f64::total_cmp);
        let h = (x.len() - 1) as f64 * q / 100.0;
        let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
        x[lo] + (h - lo as f64) * (x[hi] - x[lo])
    }

    /// Recomputed from the records: 1 / numpy percentile of E2E / output tokens, over the
    /// requests that qualify; a failed one, one without output and one without a first token
    /// are left out.
    #[test]
    fn interactivity_is_the_inverted_percentile_of_seconds_per_token() {
        let good: Vec<(f64, u64)> = vec![(1.0, 100), (2.0, 100), (0.5, 10), (3.0, 60), (1.2, 40)];
        let mut t = InteractivityTally::default();
        for (i, (e2e, n)) in good.iter().enumerate() {
            t.add(&rec(i as u32, *e2e, *n));
        }
        let mut failed = rec(10, 9.0, 1);
        failed.error = Some(RequestError {
            kind: ErrorKind::Timeout,
            message: "t".into(),
            status: None,
            body_head: None,
        });
        t.add(&failed);
        t.add(&rec(11, 9.0, 0));
        let mut no_token = rec(12, 9.0, 1);
        no_token.chunks.clear();
        t.add(&no_token);
        let mut metrics = IndexMap::new();
        t.put_metrics(&mut metrics);
        let ratios: Vec<f64> = good.iter().map(|(e, n)| e / *n as f64).collect();
        // [0.01, 0.02, 0.05, 0.05, 0.03]: p90 = 0.05, p75 = 0.05 (sorted 0.01 0.02 0.03 0.05 0.05).
        for (name, q) in [
            ("e2e_normalized_interactivity_p90", 90.0),
            ("e2e_normalized_interactivity_p75", 75.0),
        ] {
            let s = &metrics[name];
            let want = 1.0 / numpy_percentile(ratios.clone(), q);
            assert!((s.mean - want).abs() < 1e-9, "{name}: {} != {want}", s.mean);
            assert_eq!(s.count, 5);
            assert_eq!(s.estimate, None);
        }
        // Interpolated between two requests, and not the percentile of the inverse.
        let mut t = InteractivityTally::default();
        for (i, (e2e, n)) in [(1.0, 10), (2.0, 10), (4.0, 10)].into_iter().enumerate() {
            t.add(&rec(i as u32, e2e, n));
        }
        let mut m = IndexMap::new();
        t.put_metrics(&mut m);
        // p90 of [0.1, 0.2, 0.4] = 0.2 + 0.8 * 0.2 = 0.36: 2.777.. tok/s (p10 of the rates would be 3.0).
        assert!((m["e2e_normalized_interactivity_p90"].mean - 1.0 / 0.36).abs() < 1e-9);
        // p75: 0.2 + 0.5 * 0.2 = 0.3.
        assert!((m["e2e_normalized_interactivity_p75"].mean - 1.0 / 0.3).abs() < 1e-9);
        let mut none = IndexMap::new();
        InteractivityTally::default().put_metrics(&mut none);
        assert!(none.is_empty());
    }
}
