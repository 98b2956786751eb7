//! Scaling generated text until the server's token count hits the target.

use std::future::Future;

use super::generate::TextGenerator;

/// The text length that gives the target token count on this server.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibrated {
    /// Characters of generated text (after the nonce prefix).
    pub chars: usize,
    /// The server's `prompt_tokens` for the last attempt (nonce included).
    pub actual_tokens: u64,
    /// Requests it took.
    pub attempts: u32,
    /// Whether `actual_tokens` is within the tolerance of the target.
    pub within_tolerance: bool,
}

/// Why calibration could not finish.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The counting request failed; its error, as text (any `Display` error the caller's
    /// counting function gives).
    #[error("calibration request failed: {0}")]
    Request(String),
    #[error("the server counted 0 prompt tokens for {chars} characters of text")]
    ZeroTokens { chars: usize },
}

/// Calibration settings.
#[derive(Debug, Clone)]
pub struct Calibrator {
    /// Accepted relative error, e.g. 0.02 for 2%.
    pub tolerance: f64,
    /// Most requests per calibration.
    pub max_attempts: u32,
    /// Characters per token to start from (English prose is about 4).
    pub initial_chars_per_token: f64,
}

impl Default for Calibrator {
    fn default() -> Self {
        Calibrator {
            tolerance: 0.02,
            max_attempts: 8,
            initial_chars_per_token: 4.0,
        }
    }
}

impl Calibrator {
    /// Finds the text length for `target` tokens. `prefix()` gives the nonce each attempt
    /// starts with (fresh every time, so calibration requests never prime the cache for
    /// measured prompts); `count(prompt)` asks the server how many tokens `prompt` is (its
    /// error, of any type that displays, is kept as the text of [`CalibrationError::Request`]).
    pub async fn calibrate<P, C, Fut, E>(
        &self,
        generator: &TextGenerator,
        target: u64,
        mut prefix: P,
        mut count: C,
    ) -> Result<Calibrated, CalibrationError>
    where
        P: FnMut() -> String,
        C: FnMut(String) -> Fut,
        Fut: Future<Output = Result<u64, E>>,
        E: std::fmt::Display,
    {
        let mut chars = ((target as f64) * self.initial_chars_per_token)
            .round()
            .max(1.0) as usize;
        let mut best: Option<Calibrated> = None;
        for attempt in 1..=self.max_attempts {
            let prompt = format!("{}{}", prefix(), generator.text(chars));
            let n = count(prompt)
                .await
                .map_err(|e| CalibrationError::Request(e.to_string()))?;
            if n == 0 {
                return Err(CalibrationError::ZeroTokens { chars });
            }
            let err = (n as f64 - target as f64).abs() / target as f64;
            let within = err <= self.tolerance;
            let this = Calibrated {
                chars,
                actual_tokens: n,
                attempts: attempt,
                within_tolerance: within,
            };
            let better = best.as_ref().is_none_or(|b| {
                (b.actual_tokens as f64 - target as f64).abs() > (n as f64 - target as f64).abs()
            });
            if better {
                best = Some(this.clone());
            }
            if within {
                return Ok(this);
            }
            // Proportional step: text length scales with tokens. The fixed nonce makes this a
            // contraction, so it converges in a few steps even for short targets.
            let next = ((chars as f64) * target as f64 / n as f64).round().max(1.0) as usize;
            chars = if next == chars {
                if n < target {
                    chars + 1
                } else {
                    chars.saturating_sub(1).max(1)
                }
            } else {
                next
            };
        }
        let mut best = best.expect("max_attempts >= 1");
        best.attempts = self.max_attempts;
        Ok(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in server count: 1 token per 3.3 characters plus 5 for the prefix and BOS.
    async fn fake_count(p: String) -> Result<u64, String> {
        Ok((p.len() as f64 / 3.3).ceil() as u64 + 1)
    }

    fn run<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn converges_within_two_percent() {
        let g = TextGenerator::Repeat {
            text: "The quick brown fox jumps over the lazy dog. ".into(),
        };
        for target in [16u64, 100, 1024, 32768, 180_000] {
            let c =
                run(Calibrator::default().calibrate(&g, target, || "[abc-1] ".into(), fake_count))
                    .unwrap();
            assert!(c.within_tolerance, "target {target}: {c:?}");
            let err = (c.actual_tokens as f64 - target as f64).abs() / target as f64;
            assert!(err <= 0.02, "target {target}: {c:?}");
            assert!(c.attempts <= 4, "target {target}: {c:?}");
        }
    }

    #[test]
    fn reports_best_effort_when_unreachable() {
        // A server whose count jumps by 10: a target of 5 cannot be hit within 2%.
        let g = TextGenerator::Repeat { text: "x ".into() };
        let c = run(
            Calibrator::default().calibrate(&g, 5, String::new, |p: String| async move {
                Ok::<_, String>(((p.len() / 40) as u64 + 1) * 10)
            }),
        )
        .unwrap();
        assert!(!c.within_tolerance);
        assert_eq!(c.actual_tokens, 10);
    }

    #[test]
    fn request_errors_surface() {
        let g = TextGenerator::Random { seed: 1 };
        let e = run(
            Calibrator::default().calibrate(&g, 100, String::new, |_p: String| async {
                Err::<u64, _>("connection refused".to_string())
            }),
        )
        .unwrap_err();
        assert!(e.to_string().contains("connection refused"));
    }
}
