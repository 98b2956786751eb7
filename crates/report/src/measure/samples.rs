//! One metric's samples over a point in bounded memory: every value kept (exact statistics,
//! the same as [`summarize_requests`] over them) up to a cap, and past the cap a fixed-size
//! log-bucketed histogram for percentiles beside exact running count, mean, min, max and
//! standard deviation.
//!
//! Past the cap a [`Stat`] says so (`estimate: histogram`): its percentiles are within
//! [`RELATIVE_ERROR`] of the exact ones (each bucket's representative is within that share of
//! every value in the bucket, and numpy's interpolation between two such values stays within
//! it), and its interval is Student's t over round means (three or more rounds, exact as
//! below the cap) or else a normal interval over requests from the exact running sums (see
//! [`RequestSums`]), in place of the bootstrap, which needs every request's values.

use std::collections::BTreeMap;

use servebench_model::results::records::{CiMethod, Estimate, Stat};

use super::stats::{RequestSamples, round_t_from, summarize_requests};

/// Values a metric keeps exactly before it changes to the histogram: 65,536 values take
/// 512 KiB, plus 16 bytes per request.
pub(crate) const EXACT_CAP: usize = 65_536;

/// Largest relative error of a percentile read from the histogram (0.1%).
pub(crate) const RELATIVE_ERROR: f64 = 0.001;

/// A metric's samples, exact up to a cap. Requests are pushed in any order with an order key;
/// below the cap they are summarised in the key's order (the bootstrap resamples by position,
/// so the order is part of the answer).
#[derive(Debug, Clone)]
pub(crate) struct Samples {
    cap: usize,
    /// Every value, while there are at most `cap` (None past it).
    exact: Option<Exact>,
    /// Past the cap: every value, bucketed.
    histogram: LogHistogram,
    running: Running,
    /// Per round: the sum and count of its finite values (the t interval over round means).
    rounds: BTreeMap<u32, (f64, usize)>,
    requests: RequestSums,
}

/// Every value pushed so far, and which request each came from.
#[derive(Debug, Clone, Default)]
struct Exact {
    values: Vec<f64>,
    /// Per request: its order key, its round and how many of `values` (in push order) are its.
    requests: Vec<(u64, u32, u32)>,
}

impl Default for Samples {
    fn default() -> Self {
        Samples::with_cap(EXACT_CAP)
    }
}

impl Samples {
    /// Keeps up to `cap` values exactly (tests pass a small one).
    pub(crate) fn with_cap(cap: usize) -> Self {
        Samples {
            cap,
            exact: Some(Exact::default()),
            histogram: LogHistogram::default(),
            running: Running::default(),
            rounds: BTreeMap::new(),
            requests: RequestSums::default(),
        }
    }

    /// Whether no request has given a value yet.
    pub(crate) fn is_empty(&self) -> bool {
        match &self.exact {
            Some(e) => e.requests.is_empty(),
            None => self.running.count == 0,
        }
    }

    /// One request's values (several for per-gap metrics), `order` placing it among the
    /// others (round and index), `round` its round. No values: no sample.
    pub(crate) fn push(&mut self, order: u64, round: u32, values: &[f64]) {
        if values.is_empty() {
            return;
        }
        let finite = values.iter().copied().filter(|v| v.is_finite());
        let (mut sum, mut n) = (0.0, 0usize);
        for v in finite {
            self.running.add(v);
            sum += v;
            n += 1;
            if self.exact.is_none() {
                self.histogram.add(v);
            }
        }
        if n > 0 {
            let r = self.rounds.entry(round).or_default();
            r.0 += sum;
            r.1 += n;
            self.requests.add(sum, n);
        }
        if let Some(e) = &mut self.exact {
            e.values.extend_from_slice(values);
            e.requests.push((order, round, values.len() as u32));
            if e.values.len() > self.cap {
                for v in e.values.iter().filter(|v| v.is_finite()) {
                    self.histogram.add(*v);
                }
                self.exact = None;
            }
        }
    }

    /// How many finite values were pushed.
    pub(crate) fn finite_count(&self) -> usize {
        self.running.count
    }

    /// Whether the values are still all kept (statistics exact).
    pub(crate) fn is_exact(&self) -> bool {
        self.exact.is_some()
    }

    /// The metric's statistics and interval (`seed` for the bootstrap below the cap); None
    /// without a finite value.
    pub(crate) fn stat(&self, seed: u64) -> Option<Stat> {
        if let Some(e) = &self.exact {
            return summarize_requests(&e.by_order(), seed);
        }
        let r = &self.running;
        if r.count == 0 {
            return None;
        }
        let std = r.std();
        let mut stat = Stat {
            count: r.count,
            mean: r.mean,
            p50: self.percentile(50.0),
            p90: self.percentile(90.0),
            p99: self.percentile(99.0),
            min: r.min,
            max: r.max,
            std,
            cv: std.filter(|_| r.mean != 0.0).map(|s| s / r.mean.abs()),
            estimate: Some(Estimate::Histogram),
            ..Stat::default()
        };
        let ci = round_t_from(&self.rounds)
            .map(|ci| (ci, CiMethod::Repeats))
            .or_else(|| {
                self.requests
                    .normal_interval()
                    .map(|ci| (ci, CiMethod::NormalRequests))
            });
        if let Some(((low, high), method)) = ci {
            stat.ci95_low = Some(low);
            stat.ci95_high = Some(high);
            stat.ci_method = Some(method);
        }
        Some(stat)
    }

    /// The `q`-th percentile (numpy's linear interpolation) of the finite values: exact below
    /// the cap, within [`RELATIVE_ERROR`] past it. None without a finite value.
    pub(crate) fn percentile(&self, q: f64) -> f64 {
        match &self.exact {
            Some(e) => {
                let mut sorted: Vec<f64> =
                    e.values.iter().copied().filter(|v| v.is_finite()).collect();
                sorted.sort_by(f64::total_cmp);
                super::stats::percentile_sorted(&sorted, q)
            }
            None => {
                let n = self.running.count;
                if n == 0 {
                    return f64::NAN;
                }
                let rank = (q.clamp(0.0, 100.0) / 100.0) * (n - 1) as f64;
                let (lo, hi) = (rank.floor() as u64, rank.ceil() as u64);
                let clamp = |v: f64| v.clamp(self.running.min, self.running.max);
                let a = clamp(self.histogram.value_at(lo));
                let b = clamp(self.histogram.value_at(hi));
                a + (b - a) * (rank - lo as f64)
            }
        }
    }
}

impl Exact {
    /// The requests' samples, ordered by their keys (pushes with equal keys stay in push order).
    fn by_order(&self) -> Vec<RequestSamples> {
        let mut at = 0usize;
        let mut out: Vec<(u64, RequestSamples)> = self
            .requests
            .iter()
            .map(|&(order, round, len)| {
                let values = self.values[at..at + len as usize].to_vec();
                at += len as usize;
                (order, RequestSamples { round, values })
            })
            .collect();
        out.sort_by_key(|(order, _)| *order);
        out.into_iter().map(|(_, s)| s).collect()
    }
}

/// Exact running count, mean, min, max and sum of squared deviations (Welford's update, stable
/// for long runs).
#[derive(Debug, Clone, Copy)]
struct Running {
    count: usize,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
}

impl Default for Running {
    fn default() -> Self {
        Running {
            count: 0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Running {
    fn add(&mut self, v: f64) {
        self.count += 1;
        let d = v - self.mean;
        self.mean += d / self.count as f64;
        self.m2 += d * (v - self.mean);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Sample standard deviation (n - 1); None with fewer than two values.
    fn std(&self) -> Option<f64> {
        (self.count >= 2).then(|| (self.m2.max(0.0) / (self.count - 1) as f64).sqrt())
    }
}

/// Sums over requests of a metric whose request gives `n_i` values summing to `s_i`: enough for
/// the ratio estimator's normal interval, mean = Σs / Σn with variance
/// Σ(s_i − mean·n_i)² / (N (N − 1) n̄²). A request's gaps stay together, as in the bootstrap;
/// with one value per request it is the usual mean ± 1.96 · std / √N.
#[derive(Debug, Clone, Copy, Default)]
struct RequestSums {
    requests: usize,
    s: f64,
    n: f64,
    ss: f64,
    sn: f64,
    nn: f64,
}

impl RequestSums {
    fn add(&mut self, sum: f64, n: usize) {
        let n = n as f64;
        self.requests += 1;
        self.s += sum;
        self.n += n;
        self.ss += sum * sum;
        self.sn += sum * n;
        self.nn += n * n;
    }

    /// mean ± t(0.975, N − 1) · se; None with fewer than two requests.
    fn normal_interval(&self) -> Option<(f64, f64)> {
        let k = self.requests;
        if k < 2 || self.n <= 0.0 {
            return None;
        }
        let kf = k as f64;
        let mean = self.s / self.n;
        let dev = (self.ss - 2.0 * mean * self.sn + mean * mean * self.nn).max(0.0);
        let nbar = self.n / kf;
        let se = (dev / (kf * (kf - 1.0))).sqrt() / nbar;
        let half = super::stats::t975(k - 1) * se;
        Some((mean - half, mean + half))
    }
}

/// Counts of values in logarithmic buckets: bucket `k` holds (γ^(k−1), γ^k] with
/// γ = (1 + α) / (1 − α), α = [`RELATIVE_ERROR`], and stands for 2γ^k / (γ + 1), within α of
/// every value in it. Negative values are bucketed by magnitude, zeros counted apart. Only
/// occupied buckets are stored: at most ln(max / min) / ln γ of them whatever the count
/// (about 11,500 from a microsecond to an hour).
#[derive(Debug, Clone, Default)]
struct LogHistogram {
    positive: BTreeMap<i32, u64>,
    negative: BTreeMap<i32, u64>,
    zeros: u64,
}

fn gamma() -> f64 {
    (1.0 + RELATIVE_ERROR) / (1.0 - RELATIVE_ERROR)
}

impl LogHistogram {
    fn key(magnitude: f64) -> i32 {
        (magnitude.ln() / gamma().ln()).ceil() as i32
    }

    fn representative(key: i32) -> f64 {
        let g = gamma();
        2.0 * g.powi(key) / (g + 1.0)
    }

    fn add(&mut self, v: f64) {
        if v > 0.0 {
            *self.positive.entry(Self::key(v)).or_default() += 1;
        } else if v < 0.0 {
            *self.negative.entry(Self::key(-v)).or_default() += 1;
        } else {
            self.zeros += 1;
        }
    }

    /// The value of rank `rank` (0-based, ascending), as its bucket's representative.
    fn value_at(&self, rank: u64) -> f64 {
        let mut left = rank;
        // Ascending: the most negative first (largest magnitude), then zeros, then positives.
        for (&k, &c) in self.negative.iter().rev() {
            if left < c {
                return -Self::representative(k);
            }
            left -= c;
        }
        if left < self.zeros {
            return 0.0;
        }
        left -= self.zeros;
        for (&k, &c) in &self.positive {
            if left < c {
                return Self::representative(k);
            }
            left -= c;
        }
        self.positive
            .keys()
            .next_back()
            .map_or(0.0, |&k| Self::representative(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::stats::percentile_sorted;

    /// A deterministic spread of latencies over four decades (log-uniform from 1 ms to 10 s).
    fn values(n: usize) -> Vec<f64> {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                1e-3 * 10f64.powf(4.0 * u)
            })
            .collect()
    }

    #[test]
    fn below_the_cap_it_is_summarize_requests_in_key_order() {
        let v = values(500);
        let mut s = Samples::with_cap(1_000);
        // Pushed in reverse, keyed by position: summarised in key order.
        for (i, x) in v.iter().enumerate().rev() {
            s.push(i as u64, 0, &[*x]);
        }
        let want: Vec<RequestSamples> = v
            .iter()
            .map(|x| RequestSamples {
                round: 0,
                values: vec![*x],
            })
            .collect();
        assert!(s.is_exact());
        assert_eq!(s.stat(7), summarize_requests(&want, 7));
        assert_eq!(s.stat(7).unwrap().estimate, None);
    }

    #[test]
    fn past_the_cap_percentiles_are_within_the_stated_error() {
        let v = values(20_000);
        let mut s = Samples::with_cap(1_000);
        for (i, x) in v.iter().enumerate() {
            s.push(i as u64, 0, &[*x]);
        }
        assert!(!s.is_exact(), "20,000 values are past a cap of 1,000");
        let stat = s.stat(7).unwrap();
        let exact = crate::measure::stats::summarize(&v).unwrap();
        assert_eq!(stat.estimate, Some(Estimate::Histogram));
        assert_eq!(stat.count, 20_000);
        assert_eq!((stat.min, stat.max), (exact.min, exact.max));
        let rel = |a: f64, b: f64| (a - b).abs() / b.abs();
        assert!(rel(stat.mean, exact.mean) < 1e-12, "running mean");
        assert!(
            rel(stat.std.unwrap(), exact.std.unwrap()) < 1e-9,
            "running std"
        );
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        for q in [0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            let (got, want) = (s.percentile(q), percentile_sorted(&sorted, q));
            assert!(
                rel(got, want) <= RELATIVE_ERROR,
                "p{q}: {got} vs {want} ({:.5}%)",
                rel(got, want) * 100.0
            );
        }
        // One round: the normal interval over requests, mean ± 1.96 · std / √n.
        assert_eq!(stat.ci_method, Some(CiMethod::NormalRequests));
        let half = 1.96 * exact.std.unwrap() / (20_000f64).sqrt();
        assert!(rel(stat.ci95_high.unwrap() - stat.mean, half) < 1e-6);
        assert!(rel(stat.mean - stat.ci95_low.unwrap(), half) < 1e-6);
    }

    #[test]
    fn past_the_cap_three_rounds_keep_the_exact_t_interval() {
        let v = values(3_000);
        let (mut small, mut big) = (Samples::with_cap(100), Samples::with_cap(10_000));
        for (i, x) in v.iter().enumerate() {
            let round = (i % 3) as u32;
            small.push(i as u64, round, &[*x]);
            big.push(i as u64, round, &[*x]);
        }
        let (a, b) = (small.stat(1).unwrap(), big.stat(1).unwrap());
        assert_eq!(a.ci_method, Some(CiMethod::Repeats));
        assert_eq!(b.ci_method, Some(CiMethod::Repeats));
        let close = |x: f64, y: f64| assert!((x - y).abs() < 1e-12, "{x} vs {y}");
        close(a.ci95_low.unwrap(), b.ci95_low.unwrap());
        close(a.ci95_high.unwrap(), b.ci95_high.unwrap());
    }

    #[test]
    fn negative_and_zero_values_are_ranked_in_order() {
        let mut s = Samples::with_cap(2);
        for (i, x) in [-2.0, 0.0, 0.0, 3.0, -0.5].iter().enumerate() {
            s.push(i as u64, 0, &[*x]);
        }
        // Sorted: -2, -0.5, 0, 0, 3.
        let near = |got: f64, want: f64| assert!((got - want).abs() <= want.abs() * RELATIVE_ERROR);
        near(s.percentile(0.0), -2.0);
        near(s.percentile(25.0), -0.5);
        near(s.percentile(50.0), 0.0);
        near(s.percentile(100.0), 3.0);
    }
}
