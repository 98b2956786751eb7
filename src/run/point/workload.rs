//! A round's draws turned into requests: generated text calibrated once per length bucket,
//! shared prefixes with the cache hits they imply, dataset replies' lengths counted on the
//! server.

use std::collections::HashMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::catalog::FlagKind;
use crate::client::Client;
use crate::prompt::{InputDraw, OutputDraw, TextGenerator, nonce};
use crate::results::records::{CacheShare, Flag};
use crate::spec::types::{Api, Experiment};

use super::{Body, Planned, PointRunner, Prompts, count_tokens};

/// Most output tokens a request may ask for (the spec's own limit).
const MAX_OUTPUT_TOKENS: u64 = 1_000_000;

/// Calibrated texts of one round, by generator and target.
type Bodies = HashMap<String, (String, Option<u64>)>;

impl PointRunner {
    /// The requests of `round`: its draws, with text calibrated to each drawn length (each 2%
    /// bucket once per run) and output lengths in the server's tokens. `lengths[i]`, where
    /// present (a trace line's), replaces request `i`'s drawn lengths: (prompt tokens, output
    /// tokens), the prompt generated and calibrated like a drawn one.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn plan_round(
        &mut self,
        client: &Client,
        exp: &Experiment,
        prompts: &Prompts,
        round: u32,
        count: u32,
        lengths: &[(Option<u64>, Option<u32>)],
        flags: &mut Vec<Flag>,
    ) -> Result<Vec<Planned>, (FlagKind, String)> {
        let mut draws = prompts.source.draw(round, count);
        for (d, &(input, output)) in draws.iter_mut().zip(lengths) {
            if let Some(n) = input {
                d.input = traced_input(&d.input, n);
            }
            if let Some(n) = output {
                d.output = OutputDraw::Tokens(u64::from(n));
            }
        }
        let mixed = prompts.source.entries.len() > 1;
        let mut bodies = Bodies::new();
        // Each group's prefix for this round: a fresh tag first, so no other point or run
        // shares it.
        let mut prefixes: HashMap<u32, String> = HashMap::new();
        let mut out = Vec::with_capacity(draws.len());
        for (i, d) in draws.into_iter().enumerate() {
            let mix = mixed.then(|| prompts.source.entries[d.entry].name.clone());
            let max_tokens = match d.output {
                OutputDraw::Tokens(n) => n,
                OutputDraw::LengthOf(reply) => {
                    self.reply_length(client, exp, &prompts.model, reply)
                        .await?
                }
            }
            .clamp(1, MAX_OUTPUT_TOKENS) as u32;
            let planned = match d.input {
                InputDraw::Text(text) => Planned {
                    text,
                    max_tokens,
                    requested: None,
                    share: None,
                    mix,
                    nonce: true,
                },
                InputDraw::Generated {
                    generator,
                    tokens,
                    calibrate,
                } => {
                    let (text, _) = self
                        .body(
                            client,
                            exp,
                            prompts,
                            &generator,
                            tokens,
                            calibrate,
                            &mut bodies,
                            flags,
                        )
                        .await?;
                    Planned {
                        text,
                        max_tokens,
                        requested: Some(tokens),
                        share: None,
                        mix,
                        nonce: true,
                    }
                }
                InputDraw::SharedPrefix {
                    group,
                    prefix_tokens,
                    suffix_tokens,
                    seed,
                } => {
                    let (prefix, counted) = self
                        .body(
                            client,
                            exp,
                            prompts,
                            &TextGenerator::Random { seed },
                            prefix_tokens,
                            true,
                            &mut bodies,
                            flags,
                        )
                        .await?;
                    let (suffix, _) = self
                        .body(
                            client,
                            exp,
                            prompts,
                            &TextGenerator::Random {
                                seed: seed.wrapping_add(1),
                            },
                            suffix_tokens,
                            true,
                            &mut bodies,
                            flags,
                        )
                        .await?;
                    let fresh = exp.cache.nonce;
                    let prefix = prefixes
                        .entry(group)
                        .or_insert_with(|| {
                            format!("{}{prefix}", tag(fresh, seed, &[u64::from(group)]))
                        })
                        .clone();
                    let unique = tag(fresh, seed, &[u64::from(round), i as u64, 1 << 40]);
                    // Calibration counted the text behind a nonce of the tag's shape: that
                    // count is the prefix's tokens.
                    let shared = counted.unwrap_or(prefix_tokens);
                    Planned {
                        text: format!("{prefix}\n{unique}{suffix}"),
                        max_tokens,
                        requested: Some(prefix_tokens + suffix_tokens),
                        share: Some(CacheShare {
                            group,
                            turn: None,
                            shared_tokens: shared,
                            reusable_tokens: shared,
                        }),
                        mix,
                        nonce: false,
                    }
                }
            };
            out.push(planned);
        }
        Ok(out)
    }

    /// Text for `tokens` of `generator`, calibrated (once per run and bucket), and the server's
    /// count of it behind a nonce.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn body(
        &mut self,
        client: &Client,
        exp: &Experiment,
        prompts: &Prompts,
        generator: &TextGenerator,
        tokens: u64,
        calibrate: bool,
        bodies: &mut Bodies,
        flags: &mut Vec<Flag>,
    ) -> Result<(String, Option<u64>), (FlagKind, String)> {
        let key = format!("{generator:?}|{tokens}|{calibrate}");
        if let Some(b) = bodies.get(&key) {
            return Ok(b.clone());
        }
        let Body {
            text, flag, tokens, ..
        } = self
            .body_text(client, exp, generator, tokens, calibrate, &prompts.model)
            .await
            .map_err(|(e, _)| (FlagKind::CalibrationFailed, e))?;
        if let Some(f) = flag
            && !flags.contains(&f)
        {
            flags.push(f);
        }
        bodies.insert(key, (text.clone(), tokens));
        Ok((text, tokens))
    }

    /// A dataset reply's length in the server's tokens (counted once per run).
    async fn reply_length(
        &mut self,
        client: &Client,
        exp: &Experiment,
        model: &Option<String>,
        reply: String,
    ) -> Result<u64, (FlagKind, String)> {
        if let Some(n) = self.reply_tokens.get(&reply) {
            return Ok(*n);
        }
        let api = exp.workload.api;
        let tokenize = self
            .surface
            .as_ref()
            .and_then(|s| s.tokenize.clone())
            .filter(|_| api != Api::OpenaiChat);
        let counted = tokio::select! {
            c = count_tokens(client, api, tokenize, &reply, model.clone(), exp.request_timeout) => c,
            _ = self.interrupt.wait() => {
                return Err((FlagKind::PromptError, "interrupted while counting dataset replies".into()));
            }
        };
        let n = counted.map_err(|e| {
            (
                FlagKind::PromptError,
                format!("could not count a dataset reply's tokens on the server: {e:?}"),
            )
        })?;
        self.reply_tokens.insert(reply, n);
        Ok(n.max(1))
    }
}

/// A trace line's prompt of `tokens`: the workload's generator at that length (bucketed to 2%,
/// as drawn lengths are), or, for a workload whose prompts are not generated (a file, a
/// dataset, shared prefixes), seeded random words, calibrated.
fn traced_input(drawn: &InputDraw, tokens: u64) -> InputDraw {
    let tokens = crate::prompt::bucket(tokens.max(1));
    match drawn {
        InputDraw::Generated {
            generator,
            calibrate,
            ..
        } => InputDraw::Generated {
            generator: generator.clone(),
            tokens,
            calibrate: *calibrate,
        },
        InputDraw::SharedPrefix { seed, .. } => InputDraw::Generated {
            generator: TextGenerator::Random { seed: *seed },
            tokens,
            calibrate: true,
        },
        InputDraw::Text(_) => InputDraw::Generated {
            generator: TextGenerator::Random { seed: 0 },
            tokens,
            calibrate: true,
        },
    }
}

/// What starts a shared-prefix text: a fresh nonce, or (without nonces) letters drawn from the
/// seed and `parts`, of the nonce's shape, so the same spec sends the same text.
pub(super) fn tag(fresh: bool, seed: u64, parts: &[u64]) -> String {
    if fresh {
        return nonce();
    }
    let mixed = parts.iter().fold(seed, |h, p| {
        (h ^ p).wrapping_mul(0x0100_0000_01b3).rotate_left(17)
    });
    let mut rng = ChaCha8Rng::seed_from_u64(mixed);
    let letters: String = (0..12)
        .map(|_| (b'a' + rng.random_range(0..26u8)) as char)
        .collect();
    format!("{letters}-{}: ", parts.first().copied().unwrap_or(0))
}
