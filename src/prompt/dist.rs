//! Length distributions, drawn per request from a seed, and the 2% buckets that let each
//! drawn length share one calibration.

use std::path::{Path, PathBuf};

use rand::{Rng, RngExt};
use rand_distr::{Distribution, LogNormal, Normal};

use servebench_model::spec::types::{Length, LengthDist};

use super::file::{MAX_PROMPTS, PromptError, read_bounded};

/// Largest length a distribution may give, in tokens (the spec's own limit).
pub(crate) const MAX_LENGTH: u64 = 10_000_000;

/// Redraws of a truncated normal or lognormal before a draw is clamped to the bounds: enough
/// for any truncation that keeps 1% of the mass, never an endless loop on one that keeps none.
const MAX_REDRAWS: u32 = 1000;

/// Relative width of a bucket: drawn lengths are rounded to the nearest power of 1.02, so a
/// lognormal from 64 to 8192 tokens needs about 245 calibrations, not one per length.
pub const BUCKET_STEP: f64 = 0.02;

/// A length distribution ready to draw from.
#[derive(Debug, Clone, PartialEq)]
pub enum LengthSampler {
    Fixed(u64),
    Uniform {
        min: u64,
        max: u64,
    },
    Normal {
        dist: Normal<f64>,
        min: u64,
        max: u64,
    },
    Lognormal {
        dist: LogNormal<f64>,
        min: u64,
        max: u64,
    },
    /// Lengths read from a file, each equally likely.
    Empirical(Vec<u64>),
}

impl LengthSampler {
    /// Checks `length` and reads its file, if any (relative to `spec_dir`).
    pub(crate) fn load(length: &Length, spec_dir: &Path) -> Result<LengthSampler, PromptError> {
        let bad = |why: String| Err(PromptError::BadDistribution(why));
        let bounds = |min: u64, max: u64| -> Result<(), PromptError> {
            if min == 0 || min > max || max > MAX_LENGTH {
                return Err(PromptError::BadDistribution(format!(
                    "min {min} and max {max} must satisfy 1 <= min <= max <= {MAX_LENGTH}"
                )));
            }
            Ok(())
        };
        Ok(match length {
            Length::Fixed(0) | Length::Dist(LengthDist::Fixed { value: 0 }) => {
                return bad("a length of 0 tokens: give at least 1".into());
            }
            Length::Fixed(n) | Length::Dist(LengthDist::Fixed { value: n }) => {
                LengthSampler::Fixed(*n)
            }
            Length::Dist(LengthDist::Uniform { min, max }) => {
                bounds(*min, *max)?;
                LengthSampler::Uniform {
                    min: *min,
                    max: *max,
                }
            }
            Length::Dist(LengthDist::Normal {
                mean,
                std,
                min,
                max,
            }) => {
                bounds(*min, *max)?;
                let Ok(dist) = Normal::new(*mean, *std) else {
                    return bad(format!(
                        "normal with mean {mean} and std {std}: std must be a finite number >= 0"
                    ));
                };
                LengthSampler::Normal {
                    dist,
                    min: *min,
                    max: *max,
                }
            }
            Length::Dist(LengthDist::Lognormal {
                mean,
                sigma,
                min,
                max,
            }) => {
                bounds(*min, *max)?;
                if !(mean.is_finite() && *mean >= 1.0 && sigma.is_finite() && *sigma >= 0.0) {
                    return bad(format!(
                        "lognormal with mean {mean} and sigma {sigma}: the mean must be at least 1 token and sigma >= 0"
                    ));
                }
                // The untruncated mean is exp(mu + sigma^2 / 2).
                let mu = mean.ln() - sigma * sigma / 2.0;
                let Ok(dist) = LogNormal::new(mu, *sigma) else {
                    return bad(format!("lognormal with sigma {sigma}"));
                };
                LengthSampler::Lognormal {
                    dist,
                    min: *min,
                    max: *max,
                }
            }
            Length::Dist(LengthDist::Empirical { file }) => {
                LengthSampler::Empirical(load_lengths(&spec_dir.join(file))?)
            }
        })
    }

    /// One length, in `[min, max]`.
    pub(crate) fn draw(&self, rng: &mut impl Rng) -> u64 {
        match self {
            LengthSampler::Fixed(n) => *n,
            LengthSampler::Uniform { min, max } => rng.random_range(*min..=*max),
            LengthSampler::Normal { dist, min, max } => truncated(|| dist.sample(rng), *min, *max),
            LengthSampler::Lognormal { dist, min, max } => {
                truncated(|| dist.sample(rng), *min, *max)
            }
            LengthSampler::Empirical(list) => list[rng.random_range(0..list.len())],
        }
    }

    /// True when every draw is the same length.
    pub(crate) fn is_fixed(&self) -> bool {
        matches!(self, LengthSampler::Fixed(_))
    }
}

/// A draw rounded to whole tokens, drawn again while outside `[min, max]`.
fn truncated(mut draw: impl FnMut() -> f64, min: u64, max: u64) -> u64 {
    let mut x = draw();
    for _ in 0..MAX_REDRAWS {
        let n = x.round();
        if n >= min as f64 && n <= max as f64 {
            return n as u64;
        }
        x = draw();
    }
    (x.round().max(0.0) as u64).clamp(min, max)
}

/// The bucket a length falls in: the nearest power of 1.02 (lengths up to 50 are their own
/// bucket), so the bucket is within 1% of the length.
pub fn bucket(n: u64) -> u64 {
    if n <= 50 {
        return n;
    }
    let step = (1.0 + BUCKET_STEP).ln();
    let k = ((n as f64).ln() / step).round();
    ((k * step).exp().round() as u64).max(1)
}

/// Whole numbers, one per line (`#` starts a comment; blank lines are skipped), from a
/// bounded file.
fn load_lengths(path: &Path) -> Result<Vec<u64>, PromptError> {
    let text = read_bounded(path)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let n: u64 = match content.parse() {
            Ok(n) if (1..=MAX_LENGTH).contains(&n) => n,
            _ => {
                let column = line.find(content).unwrap_or(0) + 1;
                return Err(PromptError::BadLength {
                    path: path.to_path_buf(),
                    line: i + 1,
                    column,
                    text: servebench_model::text::truncate(content, 40),
                });
            }
        };
        if out.len() == MAX_PROMPTS {
            return Err(PromptError::TooMany {
                path: path.to_path_buf(),
            });
        }
        out.push(n);
    }
    if out.is_empty() {
        return Err(PromptError::Empty {
            path: PathBuf::from(path),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn draws(length: Length, n: usize) -> Vec<u64> {
        let s = LengthSampler::load(&length, Path::new(".")).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        (0..n).map(|_| s.draw(&mut rng)).collect()
    }

    fn mean(v: &[u64]) -> f64 {
        v.iter().sum::<u64>() as f64 / v.len() as f64
    }

    #[test]
    fn buckets_stay_within_one_percent() {
        for n in 1..20_000u64 {
            let b = bucket(n);
            assert!(
                (b as f64 - n as f64).abs() <= 0.0101 * n as f64 + 0.5,
                "{n} -> {b}"
            );
        }
        let distinct: std::collections::BTreeSet<u64> = (64..=8192).map(bucket).collect();
        assert!(distinct.len() < 260, "{}", distinct.len());
    }

    #[test]
    fn uniform_covers_its_range_evenly() {
        let v = draws(
            Length::Dist(LengthDist::Uniform { min: 10, max: 19 }),
            10_000,
        );
        let mut counts = [0u32; 10];
        for x in &v {
            counts[(*x - 10) as usize] += 1;
        }
        // Each of 10 values expects 1000; 5 standard deviations is about 150.
        for c in counts {
            assert!((850..1150).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn normal_and_lognormal_have_their_moments_and_bounds() {
        let v = draws(
            Length::Dist(LengthDist::Normal {
                mean: 500.0,
                std: 50.0,
                min: 1,
                max: 10_000,
            }),
            20_000,
        );
        assert!((mean(&v) - 500.0).abs() < 2.0, "{}", mean(&v));
        let var = v.iter().map(|x| (*x as f64 - 500.0).powi(2)).sum::<f64>() / v.len() as f64;
        assert!((var.sqrt() - 50.0).abs() < 2.0, "{}", var.sqrt());
        let v = draws(
            Length::Dist(LengthDist::Lognormal {
                mean: 1000.0,
                sigma: 0.5,
                min: 1,
                max: 1_000_000,
            }),
            20_000,
        );
        // The standard error of the mean is 1000 * sqrt(e^0.25 - 1) / sqrt(20000), about 3.8.
        assert!((mean(&v) - 1000.0).abs() < 20.0, "{}", mean(&v));
        let truncated = draws(
            Length::Dist(LengthDist::Lognormal {
                mean: 1000.0,
                sigma: 1.0,
                min: 500,
                max: 600,
            }),
            1000,
        );
        assert!(truncated.iter().all(|x| (500..=600).contains(x)));
    }

    #[test]
    fn bad_distributions_and_length_files_are_refused() {
        let e = LengthSampler::load(
            &Length::Dist(LengthDist::Uniform { min: 9, max: 3 }),
            Path::new("."),
        )
        .unwrap_err();
        assert!(e.to_string().contains("min <= max"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("l.txt"), "# lengths\n12\n\n 40 # long\n").unwrap();
        let s = LengthSampler::load(
            &Length::Dist(LengthDist::Empirical {
                file: "l.txt".into(),
            }),
            dir.path(),
        )
        .unwrap();
        assert_eq!(s, LengthSampler::Empirical(vec![12, 40]));
        std::fs::write(dir.path().join("l.txt"), "12\n  x4\n").unwrap();
        let e = LengthSampler::load(
            &Length::Dist(LengthDist::Empirical {
                file: "l.txt".into(),
            }),
            dir.path(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("l.txt:2:3"), "{e}");
    }
}
