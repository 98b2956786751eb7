//! Arrival processes in operational time: gaps of mean 1, which a rate (constant, or varying
//! through a ramp) then maps onto seconds. A Poisson process of rate r is exponential gaps of
//! mean 1/r; a varying rate r(t) is the same process seen through the inverse of its integral
//! (time rescaling), so one generator serves rates and ramps alike.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1, Gamma};

use servebench_model::spec::load_model::Arrival;

/// Gaps of mean 1 for an arrival process, seeded: the same seed gives the same gaps.
pub(crate) struct UnitGaps {
    rng: ChaCha8Rng,
    kind: GapKind,
}

enum GapKind {
    Constant,
    Exponential,
    Gamma(Gamma<f64>),
}

impl UnitGaps {
    /// `burstiness` is the gamma shape (used by `Arrival::Gamma` only; 1 is exponential).
    pub(crate) fn new(arrival: Arrival, burstiness: f64, seed: u64) -> UnitGaps {
        let kind = match arrival {
            Arrival::Constant => GapKind::Constant,
            Arrival::Poisson => GapKind::Exponential,
            // Shape k, scale 1/k: mean 1, coefficient of variation 1/sqrt(k).
            Arrival::Gamma => match Gamma::new(burstiness, 1.0 / burstiness) {
                Ok(g) => GapKind::Gamma(g),
                Err(_) => GapKind::Exponential,
            },
        };
        UnitGaps {
            rng: ChaCha8Rng::seed_from_u64(seed),
            kind,
        }
    }

    /// The next gap (mean 1).
    pub(crate) fn next_gap(&mut self) -> f64 {
        match &self.kind {
            GapKind::Constant => 1.0,
            GapKind::Exponential => Exp1.sample(&mut self.rng),
            GapKind::Gamma(g) => g.sample(&mut self.rng),
        }
    }
}

/// The integrated rate of a load over time, `Λ(t) = ∫ r`, and its inverse: arrival `k` of the
/// unit process at operational time `s` happens at `t = Λ⁻¹(s)`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RateCurve {
    /// A fixed rate (requests/s).
    Constant(f64),
    /// From `from` to `to` linearly over `over` seconds.
    Linear { from: f64, to: f64, over: f64 },
    /// `steps` equal steps over `over` seconds, rates evenly from `from` to `to`.
    Steps {
        from: f64,
        to: f64,
        over: f64,
        steps: u32,
    },
}

impl RateCurve {
    /// The rate at `t` seconds.
    pub(crate) fn rate_at(&self, t: f64) -> f64 {
        match *self {
            RateCurve::Constant(r) => r,
            RateCurve::Linear { from, to, over } => from + (to - from) * (t / over).clamp(0.0, 1.0),
            RateCurve::Steps {
                from,
                to,
                over,
                steps,
            } => step_rate(from, to, steps, step_index(t, over, steps)),
        }
    }

    /// `t` with `Λ(t) = s`, or None when the curve ends before reaching `s`.
    pub(crate) fn time_of(&self, s: f64) -> Option<f64> {
        match *self {
            RateCurve::Constant(r) => Some(s / r),
            RateCurve::Linear { from, to, over } => {
                // Λ(t) = from t + a t² / 2 with a = (to - from) / over.
                let a = (to - from) / over;
                let total = from * over + a * over * over / 2.0;
                if s > total {
                    return None;
                }
                if a.abs() < 1e-12 {
                    return Some(s / from);
                }
                // The root of a/2 t² + from t - s = 0 in [0, over], in a form that stays
                // accurate when `a` is small.
                let disc = (from * from + 2.0 * a * s).max(0.0);
                Some(2.0 * s / (from + disc.sqrt()))
            }
            RateCurve::Steps {
                from,
                to,
                over,
                steps,
            } => {
                let width = over / f64::from(steps);
                let mut acc = 0.0;
                for k in 0..steps {
                    let r = step_rate(from, to, steps, k);
                    let area = r * width;
                    if s <= acc + area && r > 0.0 {
                        return Some(f64::from(k) * width + (s - acc) / r);
                    }
                    acc += area;
                }
                None
            }
        }
    }
}

fn step_index(t: f64, over: f64, steps: u32) -> u32 {
    ((t / over * f64::from(steps)).floor().max(0.0) as u32).min(steps - 1)
}

fn step_rate(from: f64, to: f64, steps: u32, k: u32) -> f64 {
    if steps <= 1 {
        return to;
    }
    from + (to - from) * f64::from(k) / f64::from(steps - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_have_mean_one_and_the_seed_fixes_them() {
        for arrival in [Arrival::Constant, Arrival::Poisson, Arrival::Gamma] {
            let mut g = UnitGaps::new(arrival, 0.5, 7);
            let gaps: Vec<f64> = (0..20_000).map(|_| g.next_gap()).collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            assert!((mean - 1.0).abs() < 0.03, "{arrival}: mean {mean}");
            let mut again = UnitGaps::new(arrival, 0.5, 7);
            assert_eq!(again.next_gap(), gaps[0]);
        }
        let mut a = UnitGaps::new(Arrival::Poisson, 1.0, 1);
        let mut b = UnitGaps::new(Arrival::Poisson, 1.0, 2);
        assert_ne!(a.next_gap(), b.next_gap());
    }

    #[test]
    fn gamma_burstiness_sets_the_spread() {
        // CV of gamma gaps is 1/sqrt(shape): 0.25 -> 2, 4 -> 0.5.
        for (shape, cv) in [(0.25, 2.0), (4.0, 0.5)] {
            let mut g = UnitGaps::new(Arrival::Gamma, shape, 3);
            let gaps: Vec<f64> = (0..50_000).map(|_| g.next_gap()).collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
            let got = var.sqrt() / mean;
            assert!((got - cv).abs() < cv * 0.08, "shape {shape}: cv {got}");
        }
    }

    #[test]
    fn the_curves_invert_their_integral() {
        let linear = RateCurve::Linear {
            from: 2.0,
            to: 10.0,
            over: 8.0,
        };
        // Λ(8) = 2*8 + 1*64/2 = 48; Λ(4) = 8 + 8 = 16.
        assert!((linear.time_of(16.0).unwrap() - 4.0).abs() < 1e-9);
        assert!((linear.time_of(48.0).unwrap() - 8.0).abs() < 1e-9);
        assert_eq!(linear.time_of(48.1), None);
        let steps = RateCurve::Steps {
            from: 1.0,
            to: 3.0,
            over: 6.0,
            steps: 3,
        };
        // Steps of 2 s at 1, 2, 3 req/s: Λ = 2 at t=2, 6 at t=4, 12 at t=6.
        assert!((steps.time_of(2.0).unwrap() - 2.0).abs() < 1e-9);
        assert!((steps.time_of(4.0).unwrap() - 3.0).abs() < 1e-9);
        assert!((steps.time_of(12.0).unwrap() - 6.0).abs() < 1e-9);
        assert_eq!(steps.rate_at(5.0), 3.0);
        assert_eq!(RateCurve::Constant(4.0).time_of(2.0), Some(0.5));
    }
}
