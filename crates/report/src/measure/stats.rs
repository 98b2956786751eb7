//! Summary statistics over samples: percentiles, spread and 95% confidence intervals.
//!
//! Intervals are deterministic, so a report re-rendered from the same records shows the same
//! numbers: the bootstrap draws from a fixed-seed PRNG (splitmix64, written out here so that no
//! crate update can change the stream).

use std::collections::BTreeMap;

use servebench_model::results::records::{CiMethod, Stat};

/// Bootstrap resamples per interval.
pub(crate) const BOOTSTRAP_RESAMPLES: usize = 2000;

/// Rounds from which the interval is taken across round means instead of by bootstrap.
pub(crate) const MIN_ROUNDS_FOR_T: usize = 3;

/// One request's values of a metric, with the round it ran in. Most metrics give one value per
/// request; ITL and ICL give one per gap, and the bootstrap keeps a request's gaps together.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct RequestSamples {
    /// Round (0-based) the request ran in.
    pub round: u32,
    /// The request's values; non-finite ones are ignored.
    pub values: Vec<f64>,
}

/// Count, mean, p50, p90, p99, min and max of the finite values in `values` (NaN and infinities
/// are dropped, never propagated), with their standard deviation and coefficient of variation.
/// None when no finite value remains. No confidence interval: see [`summarize_requests`].
///
/// Percentiles use numpy's default linear interpolation (`np.percentile(a, q)`), so they match
/// SGLang's `bench_serving.py`.
pub(crate) fn summarize(values: &[f64]) -> Option<Stat> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let count = sorted.len();
    let mean = sorted.iter().sum::<f64>() / count as f64;
    let std = sample_std(&sorted, mean);
    Some(Stat {
        count,
        mean,
        p50: percentile_sorted(&sorted, 50.0),
        p90: percentile_sorted(&sorted, 90.0),
        p99: percentile_sorted(&sorted, 99.0),
        min: sorted[0],
        max: sorted[count - 1],
        std,
        cv: std.filter(|_| mean != 0.0).map(|s| s / mean.abs()),
        ..Stat::default()
    })
}

/// [`summarize`] over every value of every request, plus a 95% confidence interval of the mean:
/// across round means (Student's t) when the requests span [`MIN_ROUNDS_FOR_T`] rounds or more,
/// otherwise a percentile bootstrap over requests seeded with `seed`. No interval from a single
/// request.
pub(crate) fn summarize_requests(samples: &[RequestSamples], seed: u64) -> Option<Stat> {
    let all: Vec<f64> = samples
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .collect();
    let mut stat = summarize(&all)?;
    let ci = round_t_interval(samples)
        .map(|ci| (ci, CiMethod::Repeats))
        .or_else(|| bootstrap_interval(samples, seed).map(|ci| (ci, CiMethod::BootstrapRequests)));
    if let Some(((low, high), method)) = ci {
        stat.ci95_low = Some(low);
        stat.ci95_high = Some(high);
        stat.ci_method = Some(method);
    }
    Some(stat)
}

/// The `q`-th percentile (0..=100) of ascending, finite, non-empty `sorted`, interpolating
/// linearly between the two nearest ranks like numpy's default (`method="linear"`): the one
/// percentile rule of every figure servebench states (NaN when `sorted` is empty).
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

/// Sample standard deviation (n - 1); None with fewer than two values.
fn sample_std(values: &[f64], mean: f64) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
    Some((ss / (values.len() - 1) as f64).sqrt())
}

/// Sum and count of a request's finite values; None when it has none.
fn sum_count(values: &[f64]) -> Option<(f64, usize)> {
    let finite = values.iter().filter(|v| v.is_finite());
    let (sum, n) = finite.fold((0.0, 0), |(s, n), v| (s + v, n + 1));
    (n > 0).then_some((sum, n))
}

/// mean of round means ± t(0.975, k-1) · s / √k over k >= 3 rounds, where each round's mean
/// pools all its values. None with fewer rounds.
fn round_t_interval(samples: &[RequestSamples]) -> Option<(f64, f64)> {
    let mut rounds: BTreeMap<u32, (f64, usize)> = BTreeMap::new();
    for s in samples {
        if let Some((sum, n)) = sum_count(&s.values) {
            let r = rounds.entry(s.round).or_default();
            r.0 += sum;
            r.1 += n;
        }
    }
    round_t_from(&rounds)
}

/// The interval of [`round_t_interval`] from each round's sum and count of finite values.
pub(crate) fn round_t_from(rounds: &BTreeMap<u32, (f64, usize)>) -> Option<(f64, f64)> {
    let means: Vec<f64> = rounds.values().map(|(s, n)| s / *n as f64).collect();
    if means.len() < MIN_ROUNDS_FOR_T {
        return None;
    }
    let k = means.len();
    let mean = means.iter().sum::<f64>() / k as f64;
    let half = t975(k - 1) * sample_std(&means, mean)? / (k as f64).sqrt();
    Some((mean - half, mean + half))
}

/// Percentile bootstrap (2.5th and 97.5th of [`BOOTSTRAP_RESAMPLES`] resampled means), resampling
/// whole requests so that a request's ITL gaps stay together. None with fewer than two requests.
fn bootstrap_interval(samples: &[RequestSamples], seed: u64) -> Option<(f64, f64)> {
    let requests: Vec<(f64, usize)> = samples
        .iter()
        .filter_map(|s| sum_count(&s.values))
        .collect();
    let n = requests.len();
    if n < 2 {
        return None;
    }
    let mut rng = SplitMix64(seed);
    let mut means: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| {
            let (mut sum, mut count) = (0.0, 0usize);
            for _ in 0..n {
                let (s, c) = requests[rng.below(n)];
                sum += s;
                count += c;
            }
            sum / count as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    Some((
        percentile_sorted(&means, 2.5),
        percentile_sorted(&means, 97.5),
    ))
}

/// Two-sided 95% quantile of Student's t with `df` degrees of freedom (t(0.975, df)). Beyond the
/// table the nearest smaller tabulated df is used, which errs on the wide side; 1.96 past 120.
pub(crate) fn t975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010,
        2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739,
        2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => TABLE[df - 1],
        31..=39 => 2.0423,
        40..=59 => 2.0211,
        60..=119 => 2.0003,
        120..=239 => 1.9799,
        _ => 1.96,
    }
}

/// A stable seed for a metric's bootstrap (FNV-1a of its name), so every metric draws its own
/// deterministic stream.
pub(crate) fn seed_for(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast and good enough for resampling indices.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n (multiply-shift; the bias is below 2^-40 for any n we see).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    fn near(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() < tol, "{a} != {b} (±{tol})");
    }

    /// One value per request, all in round 0.
    fn one_round(values: &[f64]) -> Vec<RequestSamples> {
        values
            .iter()
            .map(|&v| RequestSamples {
                round: 0,
                values: vec![v],
            })
            .collect()
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
    fn numpy_percentiles_at_other_quantiles() {
        let sorted = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0];
        // np.percentile([1,2,4,8,16,32], q) for q = 2.5, 25, 97.5: rank = q/100 * 5.
        close(percentile_sorted(&sorted, 2.5), 1.125); // rank 0.125: 1 + 0.125*1
        close(percentile_sorted(&sorted, 25.0), 2.5); // rank 1.25: 2 + 0.25*2
        close(percentile_sorted(&sorted, 97.5), 30.0); // rank 4.875: 16 + 0.875*16
        close(percentile_sorted(&sorted, 0.0), 1.0);
        close(percentile_sorted(&sorted, 100.0), 32.0);
    }

    #[test]
    fn single_value_and_non_finite() {
        let s = summarize(&[f64::NAN, 2.0, f64::INFINITY, f64::NEG_INFINITY]).unwrap();
        assert_eq!((s.count, s.p50, s.p99, s.mean), (1, 2.0, 2.0, 2.0));
        assert_eq!((s.std, s.cv), (None, None));
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[f64::NAN]), None);
    }

    #[test]
    fn hand_computed_mean_std_cv() {
        // [2, 4, 4, 5, 5]: mean 20/5 = 4; squared deviations 4+0+0+1+1 = 6;
        // sample variance 6/4 = 1.5; std = sqrt(1.5) = 1.224744871391589; CV = std/4.
        let s = summarize(&[5.0, 4.0, 2.0, 5.0, 4.0]).unwrap();
        close(s.mean, 4.0);
        close(s.std.unwrap(), 1.224_744_871_391_589);
        close(s.cv.unwrap(), 0.306_186_217_847_897_2);
        // A mean of 0 has no CV rather than an infinite one.
        let zero = summarize(&[-1.0, 1.0]).unwrap();
        assert_eq!(zero.cv, None);
        close(zero.std.unwrap(), 2f64.sqrt());
    }

    #[test]
    fn t_interval_over_three_round_means() {
        // Rounds with means 1.0, 1.2 and 1.1 (two requests each, pooled within the round).
        let samples: Vec<RequestSamples> = [(0, 0.9), (0, 1.1), (1, 1.1), (1, 1.3), (2, 1.0)]
            .into_iter()
            .chain([(2, 1.2)])
            .map(|(round, v)| RequestSamples {
                round,
                values: vec![v],
            })
            .collect();
        let s = summarize_requests(&samples, 7).unwrap();
        assert_eq!(s.ci_method, Some(CiMethod::Repeats));
        // mean of means 1.1; s = sqrt(((-0.1)^2 + 0.1^2 + 0) / 2) = 0.1;
        // half = t(0.975, 2) * 0.1 / sqrt(3) = 4.3027 * 0.057735026918962 = 0.248416...
        let half = 4.3027 * 0.1 / 3f64.sqrt();
        near(half, 0.248_416, 1e-6);
        near(s.ci95_low.unwrap(), 1.1 - half, 1e-12);
        near(s.ci95_high.unwrap(), 1.1 + half, 1e-12);
        close(s.mean, 1.1);
    }

    #[test]
    fn two_rounds_fall_back_to_the_bootstrap() {
        let samples: Vec<RequestSamples> = [(0, 1.0), (0, 2.0), (1, 3.0)]
            .into_iter()
            .map(|(round, v)| RequestSamples {
                round,
                values: vec![v],
            })
            .collect();
        let s = summarize_requests(&samples, 1).unwrap();
        assert_eq!(s.ci_method, Some(CiMethod::BootstrapRequests));
    }

    #[test]
    fn t_quantiles() {
        assert_eq!(t975(2), 4.3027);
        assert_eq!(t975(30), 2.0423);
        assert_eq!(t975(45), 2.0211);
        assert_eq!(t975(10_000), 1.96);
        assert!(t975(0).is_nan());
        // Wider with fewer degrees of freedom, everywhere.
        for df in 1..300 {
            assert!(t975(df) >= t975(df + 1), "df {df}");
        }
    }

    #[test]
    fn bootstrap_is_deterministic_and_contains_the_mean() {
        let values = [0.48, 0.51, 0.45, 0.47, 0.52, 0.44, 0.50, 0.49, 0.46, 0.53];
        let a = summarize_requests(&one_round(&values), seed_for("ttft_s")).unwrap();
        let b = summarize_requests(&one_round(&values), seed_for("ttft_s")).unwrap();
        assert_eq!(a, b, "same input, same interval");
        assert_eq!(a.ci_method, Some(CiMethod::BootstrapRequests));
        let (low, high) = (a.ci95_low.unwrap(), a.ci95_high.unwrap());
        assert!(low < a.mean && a.mean < high, "{low} < {} < {high}", a.mean);
        // Inside the data's range, and near the normal approximation mean ± 1.96 · std/√n.
        assert!(low > 0.44 && high < 0.53, "[{low}, {high}]");
        let half = 1.96 * a.std.unwrap() / 10f64.sqrt();
        near(high - low, 2.0 * half, 0.3 * 2.0 * half);
    }

    #[test]
    fn bootstrap_interval_shrinks_with_more_samples() {
        // The same spread of values, repeated: 4x the samples halves the interval (roughly).
        let base = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let many: Vec<f64> = base.iter().cycle().take(base.len() * 4).copied().collect();
        let small = summarize_requests(&one_round(&base), 42).unwrap();
        let large = summarize_requests(&one_round(&many), 42).unwrap();
        let width = |s: &Stat| s.ci95_high.unwrap() - s.ci95_low.unwrap();
        assert!(
            width(&large) < 0.7 * width(&small),
            "{} vs {}",
            width(&large),
            width(&small)
        );
    }

    #[test]
    fn bootstrap_keeps_a_requests_gaps_together() {
        // Two requests with identical mean gap: every resample has the same pooled mean.
        let samples = vec![
            RequestSamples {
                round: 0,
                values: vec![0.1, 0.1, 0.1],
            },
            RequestSamples {
                round: 0,
                values: vec![0.1],
            },
        ];
        let s = summarize_requests(&samples, 3).unwrap();
        assert_eq!(s.count, 4);
        close(s.ci95_low.unwrap(), 0.1);
        close(s.ci95_high.unwrap(), 0.1);
    }

    #[test]
    fn a_single_request_has_no_interval() {
        let s = summarize_requests(&one_round(&[0.5]), 1).unwrap();
        assert_eq!((s.ci95_low, s.ci95_high, s.ci_method), (None, None, None));
        // Many ITL gaps from one request are still one request.
        let one = vec![RequestSamples {
            round: 0,
            values: vec![0.1, 0.2, 0.3],
        }];
        assert_eq!(summarize_requests(&one, 1).unwrap().ci_method, None);
        assert_eq!(summarize_requests(&[], 1), None);
    }

    #[test]
    fn splitmix_reference_values() {
        // First outputs of splitmix64 seeded with 0 (reference implementation by Vigna).
        let mut r = SplitMix64(0);
        assert_eq!(r.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next(), 0x6e78_9e6a_a1b9_65f4);
        let mut r = SplitMix64(9);
        assert!((0..1000).all(|_| r.below(7) < 7));
    }
}
