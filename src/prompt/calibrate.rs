//! Scaling generated text until the server's token count hits the target, without ever sending
//! more than the server accepts.
//!
//! Tokenizers differ by a factor of three in characters per token (English prose is about 4
//! for large vocabularies, about 1.45 for small models' tokenizers), so guessing 4 can send
//! 2.8 times the target: a 400 on a 32k-context server, or minutes of prefill. The calibrator
//! first learns the ratio from two short probes, caps every attempt below the server's limit,
//! steps down when the server says the prompt is too long, and records every attempt.

use std::future::Future;
use std::time::Instant;

use super::generate::TextGenerator;

/// The text length that gives the target token count on this server.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibrated {
    /// Characters of generated text (after the nonce prefix).
    pub chars: usize,
    /// The server's `prompt_tokens` for the last attempt (nonce included).
    pub actual_tokens: u64,
    /// Counting requests it took, probes included.
    pub attempts: u32,
    /// Whether `actual_tokens` is within the tolerance of the target.
    pub within_tolerance: bool,
}

pub use servebench_model::results::records::{
    CalibrationAttempt as Attempt, CalibrationAttemptKind as AttemptKind,
};

/// Why one count gave no number.
#[derive(Debug, Clone, PartialEq)]
pub enum CountError {
    /// The server refused the prompt as longer than its context; its limit, when it said.
    TooLong { limit: Option<u64> },
    /// Anything else (connection, timeout, another HTTP error), as text.
    Failed(String),
}

/// Why calibration could not finish.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The counting request failed; its error, as text.
    #[error("calibration request failed: {0}")]
    Request(String),
    #[error("the server counted 0 prompt tokens for {chars} characters of text")]
    ZeroTokens { chars: usize },
    /// The target (plus the output) does not fit what the server accepts.
    #[error(
        "{target} prompt tokens do not fit: the server accepts at most {limit} (its context{}); lower the target or raise the server's context length",
        if *.output > 0 { format!(", less {} output tokens", .output) } else { String::new() }
    )]
    TooLong {
        target: u64,
        limit: u64,
        output: u64,
    },
    /// Every attempt was refused as too long, down to the smallest.
    #[error("the server refused every attempt as longer than its context")]
    NeverFits,
}

/// Calibration settings.
#[derive(Debug, Clone)]
pub struct Calibrator {
    /// Accepted relative error, e.g. 0.02 for 2%.
    pub tolerance: f64,
    /// Most requests per calibration, probes included.
    pub max_attempts: u32,
    /// Characters per token assumed before anything is known (English prose is about 4); used
    /// only to size the probes, and for prompts that are not calibrated.
    pub initial_chars_per_token: f64,
    /// The most prompt tokens the server accepts (None: unknown; a refusal then teaches it).
    pub limit: Option<u64>,
    /// Output tokens each measured request asks for: they must fit beside the prompt.
    pub output_tokens: u64,
}

impl Default for Calibrator {
    fn default() -> Self {
        Calibrator {
            tolerance: 0.02,
            max_attempts: 10,
            initial_chars_per_token: 4.0,
            limit: None,
            output_tokens: 0,
        }
    }
}

/// Characters of the two probes: short enough to be cheap anywhere, long enough that the
/// prefix's few tokens do not dominate the slope.
const PROBES: [usize; 2] = [400, 1600];

impl Calibrator {
    /// Finds the text length for `target` tokens. `prefix()` gives the nonce each attempt
    /// starts with (fresh every time, so calibration requests never prime the cache for
    /// measured prompts); `count(prompt)` asks the server how many tokens `prompt` is. Every
    /// counting request is appended to `history`, whether calibration succeeds or not.
    pub(crate) async fn calibrate<P, C, Fut>(
        &self,
        generator: &TextGenerator,
        target: u64,
        mut prefix: P,
        mut count: C,
        history: &mut Vec<Attempt>,
    ) -> Result<Calibrated, CalibrationError>
    where
        P: FnMut() -> String,
        C: FnMut(String) -> Fut,
        Fut: Future<Output = Result<u64, CountError>>,
    {
        self.check_room(target)?;
        let mut limit = self.limit;
        let mut attempt = async |kind: AttemptKind, chars: usize, history: &mut Vec<Attempt>| {
            let prompt = format!("{}{}", prefix(), generator.text(chars));
            record(kind, chars, count(prompt), history).await
        };

        // Learn characters per token (the slope) and the prefix's tokens (the offset).
        let mut points: Vec<(usize, u64)> = Vec::new();
        for chars in PROBES {
            match attempt(AttemptKind::Probe, chars, history).await {
                Ok(0) => return Err(CalibrationError::ZeroTokens { chars }),
                Ok(n) => points.push((chars, n)),
                Err(CountError::TooLong { limit: l }) => {
                    // A tiny context: what it said is the limit; the proportional steps below
                    // still find the length.
                    limit = tighter(l, limit);
                    break;
                }
                Err(CountError::Failed(e)) => return Err(CalibrationError::Request(e)),
            }
        }
        let line = TokenLine::from_probes(&points, self.initial_chars_per_token);
        let mut chars = line.chars_for(target as f64);
        if let Some(c) = line.cap(limit) {
            chars = chars.min(c);
        }
        let mut best: Option<Calibrated> = None;
        let used = history.len() as u32;
        for _ in used..self.max_attempts {
            let n = match attempt(AttemptKind::Fit, chars, history).await {
                Ok(0) => return Err(CalibrationError::ZeroTokens { chars }),
                Ok(n) => n,
                Err(CountError::TooLong { limit: l }) => {
                    // Step down below what the server says it takes (or by a tenth).
                    limit = tighter(l, limit);
                    let down = match line.cap(limit) {
                        Some(c) if c < chars => c,
                        _ => chars * 9 / 10,
                    };
                    if down == 0 || down == chars {
                        return Err(CalibrationError::NeverFits);
                    }
                    chars = down;
                    continue;
                }
                Err(CountError::Failed(e)) => return Err(CalibrationError::Request(e)),
            };
            let err = (n as f64 - target as f64).abs() / target as f64;
            let within = err <= self.tolerance;
            keep_closer(
                &mut best,
                Calibrated {
                    chars,
                    actual_tokens: n,
                    attempts: history.len() as u32,
                    within_tolerance: within,
                },
                target,
            );
            if within {
                break;
            }
            chars = line.next_chars(chars, n, target, limit);
        }
        let mut best = best.ok_or(CalibrationError::NeverFits)?;
        best.attempts = history.len() as u32;
        Ok(best)
    }
}

impl Calibrator {
    /// Refuses a `target` that cannot fit beside the output in the server's known limit.
    fn check_room(&self, target: u64) -> Result<(), CalibrationError> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        if target > limit.saturating_sub(self.output_tokens) {
            return Err(CalibrationError::TooLong {
                target,
                limit,
                output: self.output_tokens,
            });
        }
        Ok(())
    }
}

/// Tokens against characters of text on this server: `tokens = offset + chars / slope`.
#[derive(Debug, Clone, Copy)]
struct TokenLine {
    /// Characters per token of the generated text.
    slope: f64,
    /// Tokens that do not scale with the text (the nonce prefix's, the chat template's).
    offset: f64,
}

impl TokenLine {
    /// The line through the probes' `(chars, tokens)`: through both when they differ, through
    /// zero from one, or `initial` characters per token without any.
    fn from_probes(points: &[(usize, u64)], initial: f64) -> Self {
        let (slope, offset) = match points {
            [(c1, n1), (c2, n2)] if n2 > n1 => {
                let slope = (*c2 - *c1) as f64 / (*n2 - *n1) as f64;
                (slope, (*n1 as f64 - *c1 as f64 / slope).max(0.0))
            }
            [(c, n), ..] => (*c as f64 / *n as f64, 0.0),
            [] => (initial, 0.0),
        };
        TokenLine { slope, offset }
    }

    /// The most text expected to stay under `limit` tokens, with a margin for the estimate's
    /// error; None when the limit is not known.
    fn cap(&self, limit: Option<u64>) -> Option<usize> {
        limit.map(|l| ((l as f64 * 0.98 - self.offset) * self.slope).max(1.0) as usize)
    }

    /// The characters expected to give `tokens`.
    fn chars_for(&self, tokens: f64) -> usize {
        ((tokens - self.offset).max(1.0) * self.slope)
            .round()
            .max(1.0) as usize
    }

    /// The next attempt's characters after `chars` gave `n` tokens, aiming at `target` under
    /// `limit`: a proportional step on the part that scales with text (the prefix's tokens do
    /// not), which converges in a step or two; one character when it would not move.
    fn next_chars(&self, chars: usize, n: u64, target: u64, limit: Option<u64>) -> usize {
        let per_char = (n as f64 - self.offset).max(1.0) / chars as f64;
        let mut next = ((target as f64 - self.offset).max(1.0) / per_char)
            .round()
            .max(1.0) as usize;
        if let Some(c) = self.cap(limit) {
            next = next.min(c);
        }
        if next != chars {
            next
        } else if n < target {
            chars + 1
        } else {
            chars.saturating_sub(1).max(1)
        }
    }
}

/// Keeps `this` as the best attempt when it came closer to `target` than the best so far.
fn keep_closer(best: &mut Option<Calibrated>, this: Calibrated, target: u64) {
    let off = |c: &Calibrated| (c.actual_tokens as f64 - target as f64).abs();
    if best.as_ref().is_none_or(|b| off(b) > off(&this)) {
        *best = Some(this);
    }
}

/// Awaits one count and records it in `history`.
async fn record<Fut>(
    kind: AttemptKind,
    chars: usize,
    fut: Fut,
    history: &mut Vec<Attempt>,
) -> Result<u64, CountError>
where
    Fut: Future<Output = Result<u64, CountError>>,
{
    let started = Instant::now();
    let r = fut.await;
    history.push(Attempt {
        kind,
        chars,
        tokens: r.as_ref().ok().copied(),
        seconds: started.elapsed().as_secs_f64(),
        error: match &r {
            Ok(_) => None,
            Err(CountError::TooLong { .. }) => Some("too-long".into()),
            Err(CountError::Failed(e)) => Some(e.clone()),
        },
    });
    r
}

/// The smaller of two limits where both are known: a refusal naming the model's context
/// (32768) does not loosen what the server said it takes (SGLang's max_req_input_len, 32704).
fn tighter(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The limit a "prompt too long" message states, for the three engines' wordings: SGLang
/// `... longer than the model's context length (C tokens)`, its prompt + output check
/// `Requested token count exceeds the model's maximum context length of C tokens` and its
/// scheduler's `Input length (N tokens) exceeds the maximum allowed length (L tokens)` (L =
/// min(context - 1, KV pool - 1) - 5, the real limit; sglang-facts section 9), vLLM `maximum
/// context length is C tokens`, llama.cpp `exceeds the available context size (C tokens)`.
/// None when the message is not such a refusal; `Some(None)` when it is but names no number.
pub fn too_long_limit(message: &str) -> Option<Option<u64>> {
    let m = message.to_ascii_lowercase();
    let markers = [
        "longer than the model's context length",
        "requested token count exceeds",
        "exceeds the maximum allowed length",
        "maximum context length is",
        "exceeds the available context size",
        "exceed_context_size",
        "context length exceeded",
    ];
    if !markers.iter().any(|k| m.contains(k)) {
        return None;
    }
    let number_after = |key: &str| -> Option<u64> {
        let rest = &m[m.find(key)? + key.len()..];
        let digits: String = rest
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    Some(
        number_after("maximum allowed length (")
            .or_else(|| number_after("context length ("))
            .or_else(|| number_after("maximum context length of"))
            .or_else(|| number_after("maximum context length is"))
            .or_else(|| number_after("available context size ("))
            .or_else(|| number_after("n_ctx")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// A stand-in server: `cpt` characters per token plus 5 for the prefix and BOS; prompts
    /// over `context` tokens are refused as too long.
    fn server(
        cpt: f64,
        context: u64,
    ) -> impl FnMut(String) -> std::future::Ready<Result<u64, CountError>> {
        move |p: String| {
            let n = (p.len() as f64 / cpt).ceil() as u64 + 5;
            std::future::ready(if n > context {
                Err(CountError::TooLong {
                    limit: Some(context),
                })
            } else {
                Ok(n)
            })
        }
    }

    fn fox() -> TextGenerator {
        TextGenerator::Repeat {
            text: "The quick brown fox jumps over the lazy dog. ".into(),
        }
    }

    #[test]
    fn converges_within_two_percent_at_any_ratio() {
        for cpt in [1.45, 3.3, 4.0, 6.0] {
            for target in [16u64, 100, 1024, 32768, 180_000] {
                let c = run(Calibrator::default().calibrate(
                    &fox(),
                    target,
                    || "[abc-1] ".into(),
                    server(cpt, 1_000_000),
                    &mut Vec::new(),
                ))
                .unwrap();
                assert!(c.within_tolerance, "{cpt} c/t, target {target}: {c:?}");
                assert!(c.attempts <= 5, "{cpt} c/t, target {target}: {c:?}");
            }
        }
    }

    #[test]
    fn never_sends_much_more_than_the_target() {
        // The failure this prevents: a 1.45 chars/token tokenizer sent 2.8x the target.
        for target in [1024u64, 8192, 30_000] {
            let mut history = Vec::new();
            let c = run(Calibrator::default().calibrate(
                &fox(),
                target,
                || "[n] ".into(),
                server(1.45, 1_000_000),
                &mut history,
            ))
            .unwrap();
            assert!(c.within_tolerance);
            let largest = history.iter().filter_map(|a| a.tokens).max().unwrap();
            assert!(
                largest as f64 <= target as f64 * 1.1,
                "target {target}: sent {largest}: {history:?}"
            );
        }
    }

    #[test]
    fn a_known_limit_is_never_exceeded_and_a_target_past_it_is_refused() {
        let cal = Calibrator {
            limit: Some(32_768),
            output_tokens: 64,
            ..Calibrator::default()
        };
        let mut history = Vec::new();
        let c = run(cal.calibrate(
            &fox(),
            32_000,
            || "[n] ".into(),
            server(1.45, 32_768),
            &mut history,
        ))
        .unwrap();
        assert!(history.iter().all(|a| a.error.is_none()), "{history:?}");
        assert!(c.within_tolerance);
        let mut refused = Vec::new();
        let e = run(cal.calibrate(
            &fox(),
            32_760,
            || "[n] ".into(),
            server(1.45, 32_768),
            &mut refused,
        ))
        .unwrap_err();
        assert!(
            refused.is_empty(),
            "nothing is sent for a target that cannot fit"
        );
        assert!(
            e.to_string()
                .starts_with("32760 prompt tokens do not fit: the server accepts at most 32768 (its context, less 64 output tokens)"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_limit_is_learned_from_a_refusal_and_stepped_under() {
        // Target 1000 on a server of 1200 tokens whose tokenizer is unknown until probed, with
        // probes that do fit: then a fit that overshoots (a sudden denser text) is refused.
        let mut calls = 0;
        let mut history = Vec::new();
        let c = run(Calibrator::default().calibrate(
            &fox(),
            1000,
            String::new,
            |p: String| {
                calls += 1;
                let n = (p.len() as f64 / 2.0).ceil() as u64;
                // The third request (the first fit) is refused, naming the limit.
                std::future::ready(if calls == 3 {
                    Err(CountError::TooLong { limit: Some(1200) })
                } else {
                    Ok(n)
                })
            },
            &mut history,
        ))
        .unwrap();
        assert!(c.within_tolerance, "{c:?}");
        assert_eq!(history[2].error.as_deref(), Some("too-long"));
    }

    #[test]
    fn reports_best_effort_when_unreachable() {
        // A server whose count jumps by 10: a target of 5 cannot be hit within 2%.
        let g = TextGenerator::Repeat { text: "x ".into() };
        let c = run(Calibrator::default().calibrate(
            &g,
            5,
            String::new,
            |p: String| std::future::ready(Ok(((p.len() / 40) as u64 + 1) * 10)),
            &mut Vec::new(),
        ))
        .unwrap();
        assert!(!c.within_tolerance);
        assert_eq!(c.actual_tokens, 10);
    }

    #[test]
    fn request_errors_surface() {
        let g = TextGenerator::Random { seed: 1 };
        let e = run(Calibrator::default().calibrate(
            &g,
            100,
            String::new,
            |_p: String| std::future::ready(Err(CountError::Failed("connection refused".into()))),
            &mut Vec::new(),
        ))
        .unwrap_err();
        assert!(e.to_string().contains("connection refused"));
    }

    /// A refusal naming the model's context (SGLang's "longer than the model's context length
    /// (32768 tokens)") never loosens the server's own limit (max_req_input_len 32704).
    #[test]
    fn a_refusal_never_loosens_the_known_limit() {
        assert_eq!(tighter(Some(32768), Some(32704)), Some(32704));
        assert_eq!(tighter(Some(1200), None), Some(1200));
        assert_eq!(tighter(None, Some(900)), Some(900));
    }

    #[test]
    fn too_long_messages_of_each_engine() {
        assert_eq!(
            too_long_limit(
                "The input (10671 tokens) is longer than the model's context length (8192 tokens)."
            ),
            Some(Some(8192))
        );
        assert_eq!(
            too_long_limit(
                "This model's maximum context length is 32768 tokens. However, your prompt contains at least 40000 input tokens"
            ),
            Some(Some(32768))
        );
        assert_eq!(
            too_long_limit(
                "request (22000 tokens) exceeds the available context size (16384 tokens), try increasing it"
            ),
            Some(Some(16384))
        );
        assert_eq!(too_long_limit("connection refused"), None);
        // SGLang 0.5.23 (tokenizer_manager.py, managers/utils.py).
        assert_eq!(
            too_long_limit(
                "Requested token count exceeds the model's maximum context length of 32768 tokens. You requested a total of 32800 tokens: 32768 tokens from the input messages and 32 tokens for the completion."
            ),
            Some(Some(32768))
        );
        assert_eq!(
            too_long_limit(
                "Input length (32710 tokens) exceeds the maximum allowed length (32704 tokens). Use a shorter input or enable --allow-auto-truncate."
            ),
            Some(Some(32704))
        );
        // The simulator's refusal, word for word (its behaviour test `in_process` asserts it).
        assert_eq!(
            too_long_limit(
                "Input length (594 tokens) exceeds the maximum allowed length (594 tokens). Use a shorter input or enable --allow-auto-truncate."
            ),
            Some(Some(594))
        );
    }
}
