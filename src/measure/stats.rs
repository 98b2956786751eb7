//! Summary statistics over samples.

use crate::results::records::Stat;

/// Count, mean, p50, p90, p99, min and max of the finite values in `values` (NaN and infinities
/// are dropped, never propagated). None when no finite value remains.
///
/// Percentiles use numpy's default linear interpolation (`np.percentile(a, q)`), so they match
/// SGLang's `bench_serving.py`.
pub fn summarize(values: &[f64]) -> Option<Stat> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let count = sorted.len();
    let mean = sorted.iter().sum::<f64>() / count as f64;
    Some(Stat {
        count,
        mean,
        p50: percentile_sorted(&sorted, 50.0),
        p90: percentile_sorted(&sorted, 90.0),
        p99: percentile_sorted(&sorted, 99.0),
        min: sorted[0],
        max: sorted[count - 1],
    })
}

/// The `q`-th percentile (0..=100) of ascending, finite, non-empty `sorted`, interpolating
/// linearly between the two nearest ranks like numpy's default (`method="linear"`).
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    let Some(&last) = sorted.last() else {
        return f64::NAN;
    };
    let rank = (q.clamp(0.0, 100.0) / 100.0) * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    if hi >= sorted.len() {
        return last;
    }
    let frac = rank - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn numpy_percentiles() {
        let s = summarize(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        close(s.p50, 2.5); // np.percentile([1,2,3,4], 50) = 2.5
        close(s.p90, 3.7); // np.percentile([1,2,3,4], 90) = 3.7
        close(s.p99, 3.97); // np.percentile([1,2,3,4], 99) = 3.97
        close(s.mean, 2.5);
        assert_eq!((s.count, s.min, s.max), (4, 1.0, 4.0));
    }

    #[test]
    fn numpy_percentiles_odd_length() {
        let v = [10.0, 0.5, 7.0, 3.0, 2.0];
        let s = summarize(&v).unwrap();
        close(s.p50, 3.0); // np.percentile([10,0.5,7,3,2], 50) = 3.0
        close(s.p90, 8.8); // np.percentile([10,0.5,7,3,2], 90) = 8.8 (7 + 0.6*3)
        close(s.p99, 9.88); // np.percentile([10,0.5,7,3,2], 99) = 9.88 (7 + 0.96*3)
    }

    #[test]
    fn single_value_and_non_finite() {
        let s = summarize(&[f64::NAN, 2.0, f64::INFINITY, f64::NEG_INFINITY]).unwrap();
        assert_eq!((s.count, s.p50, s.p99, s.mean), (1, 2.0, 2.0, 2.0));
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[f64::NAN]), None);
    }
}
