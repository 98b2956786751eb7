//! Measured steps against what the hardware allows.
//!
//! A decode step cannot take less than its bytes over the peak bandwidth (the **floor**); the
//! ratio of floor to measured time is the fraction of peak it ran at. A prefill's FLOPs over its
//! time is its achieved FLOP/s. Across a context sweep at one batch size, step time against
//! context is a line: its slope over the KV bytes one token of context adds is the bandwidth of
//! the context-dependent part (attention reading the cache), its fixed part is what the weights
//! (and everything else that does not grow with context) cost.

use std::fmt;

use crate::gpu::{GpuSpec, Precision};
use crate::step::{DecodeStep, PrefillWork};

/// A decode step's measured time against its floor, on one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeGrade {
    /// Measured seconds per step.
    pub step_s: f64,
    /// Seconds the step's bytes take at peak bandwidth.
    pub floor_s: f64,
    /// Bytes per GPU per step.
    pub bytes: f64,
    /// Bytes per second the step moved, GB/s.
    pub effective_gb_s: f64,
    /// Effective over peak bandwidth (1.0: at the floor).
    pub fraction_of_peak: f64,
}

/// Grades one decode step that took `step_s` seconds.
pub fn decode(step: &DecodeStep, gpu: &GpuSpec, step_s: f64) -> DecodeGrade {
    let bytes = step.bytes();
    let effective = bytes / step_s;
    DecodeGrade {
        step_s,
        floor_s: bytes / gpu.bandwidth(),
        bytes,
        effective_gb_s: effective / 1e9,
        fraction_of_peak: effective / gpu.bandwidth(),
    }
}

/// A prefill's achieved FLOP/s on one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillGrade {
    pub seconds: f64,
    pub flops: f64,
    pub achieved_tflops: f64,
    pub precision: Precision,
    /// Achieved over the GPU's dense peak at `precision`.
    pub fraction_of_peak: f64,
}

/// Grades a prefill of `work` (per GPU) that took `seconds`.
pub fn prefill(
    work: &PrefillWork,
    gpu: &GpuSpec,
    precision: Precision,
    seconds: f64,
) -> PrefillGrade {
    let achieved = work.flops() / seconds;
    PrefillGrade {
        seconds,
        flops: work.flops(),
        achieved_tflops: achieved / 1e12,
        precision,
        fraction_of_peak: achieved / gpu.peak_flops(precision),
    }
}

/// A prefill above this fraction of the GPU's peak FLOP/s is impossible: the measurement or
/// the model facts are wrong (fewer FLOPs are done than they say, or the prompt was cached).
pub const PREFILL_ABOVE_PEAK: f64 = 1.0 / FLOOR_TOLERANCE;

/// The fraction of peak under which the context-dependent part is called not memory-bound.
pub(crate) const NOT_MEMORY_BOUND_BELOW: f64 = 0.10;
/// The fraction of peak from which it is called at bandwidth.
pub(crate) const AT_BANDWIDTH_FROM: f64 = 0.50;
/// How far under the floor a measured step may be before the facts are called wrong (clocks,
/// rounding of datasheet figures and measurement noise stay inside it).
pub(crate) const FLOOR_TOLERANCE: f64 = 0.95;

/// What a context sweep shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Finding {
    /// A measured step took less than its bytes allow: the model facts, the layout or the GPU
    /// entry are wrong (fewer bytes are read than they say, or the GPU is faster).
    FasterThanTheFloor {
        context: f64,
        step_s: f64,
        floor_s: f64,
    },
    /// The context-dependent part runs far below bandwidth.
    ContextNotMemoryBound {
        marginal_gb_s: f64,
        times_below_peak: f64,
    },
    /// The context-dependent part runs near bandwidth: attention is memory-bound, as it should be.
    ContextAtBandwidth { marginal_gb_s: f64, fraction: f64 },
    /// The context-dependent part runs faster than memory allows: the cache holds fewer bytes
    /// per token than the facts say (its dtype, the layout), or the line does not fit.
    ContextAbovePeak { marginal_gb_s: f64, fraction: f64 },
    /// Between the two.
    ContextBelowBandwidth { marginal_gb_s: f64, fraction: f64 },
    /// The slope's 95% interval spans more than one of the verdicts above (or no interval
    /// could be had), so none is given.
    ContextUncertain {
        marginal_gb_s: f64,
        /// The interval's ends, GB/s (None: the interval reaches zero slope, any bandwidth).
        low_gb_s: Option<f64>,
        high_gb_s: Option<f64>,
        why: &'static str,
    },
    /// The line's fixed part is below the weight-read floor, and the sweep resolves it: the
    /// model facts (bytes per weight, experts, layout) overstate what a step reads.
    FixedBelowTheFloor { fixed_s: f64, floor_s: f64 },
    /// The fixed part is below the floor, but the context term is most of even the shortest
    /// point's step, so the sweep cannot tell the fixed part apart from zero.
    FixedUnresolved {
        fixed_s: f64,
        floor_s: f64,
        context_share: f64,
        context: f64,
    },
    /// The fixed part is at or above the weight-read floor: the weights are read at this
    /// fraction of peak.
    FixedCost {
        fixed_s: f64,
        floor_s: f64,
        fraction: f64,
    },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Finding::FasterThanTheFloor {
                context,
                step_s,
                floor_s,
            } => write!(
                f,
                "at {} context a step took {}, under the {} its bytes need at peak bandwidth: the model facts, the layout or the GPU entry are wrong",
                tokens(context),
                ms(step_s),
                ms(floor_s)
            ),
            Finding::ContextNotMemoryBound {
                marginal_gb_s,
                times_below_peak,
            } => write!(
                f,
                "its context-dependent part runs at {}, about {:.0}x below bandwidth: attention is not memory-bound here",
                gb_s(marginal_gb_s),
                times_below_peak
            ),
            Finding::ContextAtBandwidth {
                marginal_gb_s,
                fraction,
            } => write!(
                f,
                "its context-dependent part runs at {} ({:.0}% of peak): attention is memory-bound, as it should be",
                gb_s(marginal_gb_s),
                fraction * 100.0
            ),
            Finding::ContextAbovePeak {
                marginal_gb_s,
                fraction,
            } => write!(
                f,
                "its context-dependent part runs at {} ({:.0}% of peak), faster than memory allows: the KV cache holds fewer bytes per token than the model facts and layout say (its dtype, its split over ranks), or the points do not lie on a line",
                gb_s(marginal_gb_s),
                fraction * 100.0
            ),
            Finding::ContextBelowBandwidth {
                marginal_gb_s,
                fraction,
            } => write!(
                f,
                "its context-dependent part runs at {} ({:.0}% of peak): below bandwidth, not far below",
                gb_s(marginal_gb_s),
                fraction * 100.0
            ),
            Finding::ContextUncertain {
                marginal_gb_s,
                low_gb_s,
                high_gb_s,
                why,
            } => {
                write!(
                    f,
                    "its context-dependent part runs at {}",
                    gb_s(marginal_gb_s)
                )?;
                match (low_gb_s, high_gb_s) {
                    (Some(lo), Some(hi)) => {
                        write!(f, " (95% interval {} to {})", gb_s(lo), gb_s(hi))?
                    }
                    (Some(lo), None) => {
                        write!(f, " (95% interval from {} up, unbounded)", gb_s(lo))?
                    }
                    _ => {}
                }
                write!(
                    f,
                    ": {why}, so no verdict is given (more requests per point, or more contexts, narrow it)"
                )
            }
            Finding::FixedBelowTheFloor { fixed_s, floor_s } => write!(
                f,
                "the fixed cost ({}) is below the weight-read floor ({}): the model facts are wrong",
                ms(fixed_s),
                ms(floor_s)
            ),
            Finding::FixedUnresolved {
                fixed_s,
                floor_s,
                context_share,
                context,
            } => write!(
                f,
                "the line's fixed part ({}) is under the weight-read floor ({}), but the context term is {:.0}% of the step even at {}: the sweep cannot resolve the fixed cost (add a shorter context)",
                ms(fixed_s),
                ms(floor_s),
                context_share * 100.0,
                tokens(context)
            ),
            Finding::FixedCost {
                fixed_s,
                floor_s,
                fraction,
            } => write!(
                f,
                "the fixed cost ({}) reads the weights at {:.0}% of peak (floor {})",
                ms(fixed_s),
                fraction * 100.0,
                ms(floor_s)
            ),
        }
    }
}

fn ms(s: f64) -> String {
    let ms = s * 1e3;
    if ms.abs() >= 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.2} ms")
    }
}

fn gb_s(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} GB/s")
    } else if v >= 1.0 {
        format!("{v:.1} GB/s")
    } else {
        format!("{v:.3} GB/s")
    }
}

fn tokens(n: f64) -> String {
    if n >= 1000.0 {
        format!("{:.1}k", n / 1000.0)
    } else {
        format!("{n:.0}")
    }
}

/// One measured point of a context sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepPoint {
    /// Mean context during decode, tokens.
    pub context: f64,
    /// Measured seconds per step.
    pub step_s: f64,
    /// Standard error of that mean step (from the point's 95% interval); None without one.
    pub step_se: Option<f64>,
}

/// A line fitted through (KV bytes read, step seconds) at one batch size: the KV bytes a step
/// reads at each point's context are the line's x, so sliding windows and hybrid layers
/// (whose cache stops growing) are followed exactly; for full attention it is the line
/// through (context, step) scaled.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextSweep {
    pub points: usize,
    /// Seconds per step that one more token of context adds at the shortest context.
    pub slope_s_per_token: f64,
    /// Whether the KV bytes per token of context are the same over the whole sweep (no
    /// window ends inside it), so `step = fixed + slope x context` is the line.
    pub linear_in_context: bool,
    /// Seconds per step one more GB of KV cache per GPU adds.
    pub slope_s_per_gb: f64,
    /// The line's value at zero context, seconds.
    pub fixed_s: f64,
    /// Standard errors of slope (per token) and fixed part; None for a line through two
    /// points.
    pub slope_se: Option<f64>,
    pub fixed_se: Option<f64>,
    /// The bandwidth the KV cache is read at: one over the slope per byte, GB/s.
    pub marginal_gb_s: f64,
    pub marginal_fraction: f64,
    /// Its 95% interval, GB/s: None where there is none (two points without intervals of
    /// their own); an unbounded upper end where the slope's interval reaches zero.
    pub marginal_interval_gb_s: Option<(f64, Option<f64>)>,
    /// The weights' bytes per GPU over peak bandwidth, seconds.
    pub weight_floor_s: f64,
    pub findings: Vec<Finding>,
}

/// Why a context sweep has no line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoLine {
    #[error("fewer than two distinct contexts")]
    TooFewPoints,
    #[error(
        "the KV cache a step reads is the same at every context of the sweep (each layer's window is shorter than them all), so the context term cannot be told apart"
    )]
    KvConstant,
    #[error("the steps do not grow with the KV cache read, so no bandwidth can be had from them")]
    NotRising,
}

/// Which verdict a marginal fraction of peak gets.
fn verdict(fraction: f64) -> u8 {
    if fraction < NOT_MEMORY_BOUND_BELOW {
        0
    } else if fraction * FLOOR_TOLERANCE > 1.0 {
        3
    } else if fraction >= AT_BANDWIDTH_FROM {
        2
    } else {
        1
    }
}

/// Fits step time against the KV bytes each point's context makes a step read, and says what
/// the line means for `step_at(context)`'s bytes on `gpu`. A verdict on the context term is
/// given only where the slope's 95% interval (from the points' own intervals, `t975(n - 2)`
/// standard errors of the residuals with three points or more, the wider of the two) lies
/// within one verdict.
pub fn context_sweep(
    points: &[SweepPoint],
    step_at: impl Fn(f64) -> DecodeStep,
    gpu: &GpuSpec,
    t975: impl Fn(usize) -> f64,
) -> Result<ContextSweep, NoLine> {
    let xy: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (step_at(p.context).kv_bytes, p.step_s))
        .collect();
    let distinct_contexts = {
        let mut c: Vec<f64> = points.iter().map(|p| p.context).collect();
        c.sort_by(f64::total_cmp);
        c.dedup();
        c.len()
    };
    if distinct_contexts < 2 {
        return Err(NoLine::TooFewPoints);
    }
    let fit = least_squares(&xy).ok_or(NoLine::KvConstant)?;
    if fit.slope <= 0.0 {
        return Err(NoLine::NotRising);
    }
    let shortest = points
        .iter()
        .copied()
        .min_by(|a, b| a.context.total_cmp(&b.context))
        .expect("a fit has points");
    let longest = points
        .iter()
        .copied()
        .max_by(|a, b| a.context.total_cmp(&b.context))
        .expect("a fit has points");
    let (min_ctx, step_at_min) = (shortest.context, shortest.step_s);
    let reference = step_at(min_ctx);
    let per_token = reference.kv_bytes_per_context_token;
    let linear_in_context = per_token == step_at(longest.context).kv_bytes_per_context_token;
    let marginal = 1.0 / fit.slope;
    let marginal_fraction = marginal / gpu.bandwidth();
    let weight_floor_s = reference.weight_bytes / gpu.bandwidth();
    let mut findings = floor_findings(points, &step_at, gpu);
    let half = slope_half_width(points, &xy, &fit, t975);
    let marginal_interval = half.map(|h| {
        let high = (fit.slope - h > 0.0).then(|| 1.0 / (fit.slope - h));
        (1.0 / (fit.slope + h), high)
    });
    let marginal_gb_s = marginal / 1e9;
    let interval_gb_s = marginal_interval.map(|(lo, hi)| (lo / 1e9, hi.map(|h| h / 1e9)));
    findings.push(context_finding(
        marginal_gb_s,
        marginal_fraction,
        marginal_interval,
        gpu,
    ));
    let context_share = (fit.slope * reference.kv_bytes) / step_at_min;
    findings.push(fixed_finding(&fit, weight_floor_s, context_share, min_ctx));
    Ok(ContextSweep {
        points: points.len(),
        slope_s_per_token: fit.slope * per_token,
        linear_in_context,
        slope_s_per_gb: fit.slope * 1e9,
        fixed_s: fit.intercept,
        slope_se: fit.slope_se.map(|se| se * per_token),
        fixed_se: fit.intercept_se,
        marginal_gb_s,
        marginal_fraction,
        marginal_interval_gb_s: interval_gb_s,
        weight_floor_s,
        findings,
    })
}

/// A finding for each point whose step is faster than its bytes over peak bandwidth allow.
fn floor_findings(
    points: &[SweepPoint],
    step_at: &impl Fn(f64) -> DecodeStep,
    gpu: &GpuSpec,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    for p in points {
        let floor_s = step_at(p.context).bytes() / gpu.bandwidth();
        if p.step_s < floor_s * FLOOR_TOLERANCE {
            findings.push(Finding::FasterThanTheFloor {
                context: p.context,
                step_s: p.step_s,
                floor_s,
            });
        }
    }
    findings
}

/// The slope's 95% half-width. Where every point has its own interval: propagated through
/// the fit (ordinary least squares weights each y by (x - mean x) / Sxx), widened by how
/// far the points scatter about the line beyond those intervals (the Birge ratio,
/// sqrt(chi^2 / (n - 2)), when over 1). Otherwise from the residuals alone (Student's t,
/// three points or more); two points without intervals have none.
fn slope_half_width(
    points: &[SweepPoint],
    xy: &[(f64, f64)],
    fit: &Fit,
    t975: impl Fn(usize) -> f64,
) -> Option<f64> {
    let n = xy.len() as f64;
    let mx = xy.iter().map(|p| p.0).sum::<f64>() / n;
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let ses: Option<Vec<f64>> = points
        .iter()
        .map(|p| p.step_se.filter(|se| se.is_finite() && *se > 0.0))
        .collect();
    match ses {
        Some(ses) => {
            let var: f64 = xy
                .iter()
                .zip(&ses)
                .map(|((x, _), se)| ((x - mx) / sxx * se).powi(2))
                .sum();
            let birge = if xy.len() > 2 {
                let chi2: f64 = xy
                    .iter()
                    .zip(&ses)
                    .map(|((x, y), se)| ((y - fit.intercept - fit.slope * x) / se).powi(2))
                    .sum();
                (chi2 / (n - 2.0)).sqrt().max(1.0)
            } else {
                1.0
            };
            Some(1.96 * var.sqrt() * birge)
        }
        None => fit.slope_se.map(|se| t975(xy.len() - 2) * se),
    }
}

/// The verdict on the context term: the marginal bandwidth's, where its interval (B/s; an
/// unbounded upper end as None) lies within one verdict, else uncertain.
fn context_finding(
    marginal_gb_s: f64,
    marginal_fraction: f64,
    marginal_interval: Option<(f64, Option<f64>)>,
    gpu: &GpuSpec,
) -> Finding {
    let interval_gb_s = marginal_interval.map(|(lo, hi)| (lo / 1e9, hi.map(|h| h / 1e9)));
    let supported = match marginal_interval {
        Some((lo, Some(hi))) => {
            let v = verdict(marginal_fraction);
            verdict(lo / gpu.bandwidth()) == v && verdict(hi / gpu.bandwidth()) == v
        }
        // An unbounded upper end: only "faster than memory allows" holds for all of it.
        Some((lo, None)) => verdict(lo / gpu.bandwidth()) == 3 && verdict(marginal_fraction) == 3,
        None => false,
    };
    if !supported {
        return Finding::ContextUncertain {
            marginal_gb_s,
            low_gb_s: interval_gb_s.map(|i| i.0),
            high_gb_s: interval_gb_s.and_then(|i| i.1),
            why: if marginal_interval.is_none() {
                "two points without intervals of their own give no interval for the slope"
            } else {
                "its 95% interval spans more than one verdict"
            },
        };
    }
    match verdict(marginal_fraction) {
        0 => Finding::ContextNotMemoryBound {
            marginal_gb_s,
            times_below_peak: 1.0 / marginal_fraction,
        },
        3 => Finding::ContextAbovePeak {
            marginal_gb_s,
            fraction: marginal_fraction,
        },
        2 => Finding::ContextAtBandwidth {
            marginal_gb_s,
            fraction: marginal_fraction,
        },
        _ => Finding::ContextBelowBandwidth {
            marginal_gb_s,
            fraction: marginal_fraction,
        },
    }
}

/// The verdict on the fixed part (the intercept) against the weights' floor.
fn fixed_finding(fit: &Fit, weight_floor_s: f64, context_share: f64, min_ctx: f64) -> Finding {
    if fit.intercept < weight_floor_s * FLOOR_TOLERANCE {
        // Resolved: the fixed part's interval lies under the floor, and the shortest point's
        // step is not all context (else the intercept is an extrapolation of a small residue).
        let resolved = fit
            .intercept_se
            .is_some_and(|se| fit.intercept + 2.0 * se < weight_floor_s * FLOOR_TOLERANCE)
            && context_share < 0.8;
        if resolved {
            Finding::FixedBelowTheFloor {
                fixed_s: fit.intercept,
                floor_s: weight_floor_s,
            }
        } else {
            Finding::FixedUnresolved {
                fixed_s: fit.intercept,
                floor_s: weight_floor_s,
                context_share,
                context: min_ctx,
            }
        }
    } else {
        Finding::FixedCost {
            fixed_s: fit.intercept,
            floor_s: weight_floor_s,
            fraction: weight_floor_s / fit.intercept,
        }
    }
}

struct Fit {
    slope: f64,
    intercept: f64,
    slope_se: Option<f64>,
    intercept_se: Option<f64>,
}

/// Ordinary least squares of y on x, with standard errors from the residuals (n > 2).
fn least_squares(points: &[(f64, f64)]) -> Option<Fit> {
    let n = points.len() as f64;
    if points.len() < 2 || points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let (slope_se, intercept_se) = if points.len() > 2 {
        let rss: f64 = points
            .iter()
            .map(|p| (p.1 - intercept - slope * p.0).powi(2))
            .sum();
        let s2 = rss / (n - 2.0);
        let sx2: f64 = points.iter().map(|p| p.0 * p.0).sum();
        (Some((s2 / sxx).sqrt()), Some((s2 * sx2 / (n * sxx)).sqrt()))
    } else {
        (None, None)
    };
    Some(Fit {
        slope,
        intercept,
        slope_se,
        intercept_se,
    })
}

#[cfg(test)]
mod tests {
    use super::{Finding, SweepPoint, context_sweep, least_squares};
    use crate::gpu;
    use crate::step::DecodeStep;

    #[test]
    fn a_context_term_faster_than_memory_is_not_called_memory_bound() {
        // 100,000 KV bytes per token of context in 20 ns: 5,000 GB/s on a 3,350 GB/s card.
        let step_at = |ctx: f64| DecodeStep {
            tokens: 1.0,
            weight_bytes: 1e9,
            kv_bytes: 1e5 * ctx,
            kv_bytes_per_context_token: 1e5,
        };
        let h100 = gpu::find("h100-sxm").unwrap();
        let pts: Vec<SweepPoint> = [1024.0, 8192.0, 32768.0]
            .iter()
            .map(|&c| SweepPoint {
                context: c,
                step_s: 1e9 / h100.bandwidth() + 20e-9 * c + 1e-3,
                step_se: None,
            })
            .collect();
        let sweep = context_sweep(&pts, step_at, h100, |_| 12.71).unwrap();
        assert!(
            matches!(sweep.findings[0], Finding::ContextAbovePeak { fraction, .. } if (fraction - 5000.0 / 3350.0).abs() < 1e-6),
            "{:?}",
            sweep.findings
        );
        let text = sweep.findings[0].to_string();
        assert!(
            text.contains("5000 GB/s (149% of peak), faster than memory allows"),
            "{text}"
        );
        assert!(!text.contains("as it should be"), "{text}");
    }

    #[test]
    fn least_squares_recovers_a_line_and_its_errors() {
        let pts: Vec<(f64, f64)> = (0..5)
            .map(|i| (f64::from(i) * 1000.0, 0.002 + 1e-6 * f64::from(i) * 1000.0))
            .collect();
        let f = least_squares(&pts).unwrap();
        assert!((f.slope - 1e-6).abs() < 1e-15);
        assert!((f.intercept - 0.002).abs() < 1e-12);
        assert!(f.slope_se.unwrap() < 1e-12);
        let two = least_squares(&pts[..2]).unwrap();
        assert!(two.slope_se.is_none());
        assert!(least_squares(&[(1.0, 1.0), (1.0, 2.0)]).is_none());
    }
}
