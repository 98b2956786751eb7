//! A round's draws turned into requests: generated text calibrated once per length bucket,
//! shared prefixes with the cache hits they imply, dataset replies' lengths counted on the
//! server.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::client::Client;
use crate::load::TracedLines;
use crate::prompt::blocks::{BlockLedger, BlockText, LedgerEntry};
use crate::prompt::{InputDraw, OutputDraw, RequestDraw, TextGenerator, nonce};
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{CacheShare, Flag};
use servebench_model::spec::types::{Api, Experiment};

use super::planned::Planned;
use super::prompts::{Body, Prompts, count_tokens};
use super::runner::PointRunner;

/// Most output tokens a request may ask for (the spec's own limit).
const MAX_OUTPUT_TOKENS: u64 = 1_000_000;

/// Seed of the random words a block's length is calibrated on (each block's own words are
/// seeded by its id and the round's salt).
const BLOCK_SEED: u64 = 0x626c_6f63_6b73;

/// Calibrated texts of one round, by generator and target.
type Bodies = HashMap<String, (String, Option<u64>)>;

/// A round's requests, made one at a time as they are sent: everything the server had to be
/// asked (calibrated texts, dataset replies' lengths, each group's prefix) was asked before the
/// round, so making a request is drawing it and putting its text together, and the round never
/// holds more than one request's text (plus one per length bucket and group).
pub(super) struct RoundPlan<'a> {
    prompts: &'a Prompts,
    round: u32,
    count: usize,
    /// Per request, a trace line's lengths and blocks, where it gives them (empty: none).
    lengths: TracedLines<'a>,
    /// The text of the trace's blocks this round (None when no line has blocks).
    blocks: Option<BlockText>,
    /// Without nonces, shared-prefix tags are drawn from the seed; with them, fresh.
    fresh: bool,
    /// Whether generated prompts are sent behind a nonce (and so calibrated behind one).
    behind_nonce: bool,
    /// Calibrated texts of the round, by [`body_key`], with the server's count of each.
    bodies: Bodies,
    /// Dataset replies' lengths in the server's tokens.
    replies: HashMap<String, u64>,
    /// Each group's prefix for this round: a fresh tag first, so no other point or run
    /// shares it; with the server's count of the prefix as sent, where it counts without a
    /// prefill.
    prefixes: HashMap<u32, (String, Option<u64>)>,
}

/// What a draw's request needs from the server before it is made.
enum Need {
    Body {
        generator: TextGenerator,
        tokens: u64,
        calibrate: bool,
        /// Sent behind a nonce-shaped prefix (a nonce, a tag), so counted behind one.
        behind_nonce: bool,
    },
    Reply(String),
}

impl PointRunner {
    /// The requests of `round`: its draws, with text calibrated to each drawn length (each 2%
    /// bucket once per run) and output lengths in the server's tokens, asked of the server
    /// here, before any is sent; the requests themselves are made as they are taken from the
    /// plan. `lengths[i]`, where present (a trace line's), replaces request `i`'s drawn
    /// lengths, the prompt generated and calibrated like a drawn one.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn plan_round<'a>(
        &mut self,
        client: &Client,
        exp: &Experiment,
        prompts: &'a Prompts,
        round: u32,
        count: u32,
        lengths: TracedLines<'a>,
        flags: &mut Vec<Flag>,
    ) -> Result<RoundPlan<'a>, (FlagKind, String)> {
        let blocks = match lengths.has_blocks() {
            true => Some(
                self.block_text(client, exp, prompts, lengths.block_size, round, flags)
                    .await?,
            ),
            false => None,
        };
        let mut plan = RoundPlan {
            prompts,
            round,
            count: count as usize,
            lengths,
            blocks,
            fresh: exp.cache.nonce,
            behind_nonce: super::prompts::behind_nonce(exp),
            bodies: Bodies::new(),
            replies: HashMap::new(),
            prefixes: HashMap::new(),
        };
        for d in plan.draws() {
            for need in needs(&d, plan.behind_nonce) {
                match need {
                    Need::Body {
                        generator,
                        tokens,
                        calibrate,
                        behind_nonce,
                    } => {
                        if let Entry::Vacant(e) =
                            plan.bodies
                                .entry(body_key(&generator, tokens, calibrate, behind_nonce))
                        {
                            let body = self
                                .body(
                                    client,
                                    exp,
                                    prompts,
                                    &generator,
                                    tokens,
                                    calibrate,
                                    behind_nonce,
                                    flags,
                                )
                                .await?;
                            e.insert(body);
                        }
                    }
                    Need::Reply(reply) => {
                        if let Entry::Vacant(e) = plan.replies.entry(reply) {
                            let n = self
                                .reply_length(client, exp, &prompts.target.model, e.key())
                                .await?;
                            e.insert(n);
                        }
                    }
                }
            }
            if let InputDraw::SharedPrefix {
                group,
                prefix_tokens,
                seed,
                ..
            } = d.input
                && !plan.prefixes.contains_key(&group)
            {
                let (prefix, _) =
                    plan.body(&TextGenerator::Random { seed }, prefix_tokens, true, true);
                let tagged = format!("{}{prefix}", tag(plan.fresh, seed, &[u64::from(group)]));
                let counted = self.count_prefix(client, exp, &tagged).await?;
                plan.prefixes.insert(group, (tagged, counted));
            }
        }
        Ok(plan)
    }
    /// The round's block text: characters per block from one calibration of `block_size`
    /// tokens of random words (once per run), salted for the round: fresh, or from the
    /// workload's seed when `cache.nonce: false` (the same spec then sends the same text).
    pub(super) async fn block_text(
        &mut self,
        client: &Client,
        exp: &Experiment,
        prompts: &Prompts,
        block_size: u32,
        round: u32,
        flags: &mut Vec<Flag>,
    ) -> Result<BlockText, (FlagKind, String)> {
        let generator = TextGenerator::Random { seed: BLOCK_SEED };
        let (text, _) = self
            .body(
                client,
                exp,
                prompts,
                &generator,
                u64::from(block_size),
                true,
                false,
                flags,
            )
            .await?;
        let salt = if exp.cache.nonce {
            rand::random()
        } else {
            crate::prompt::blocks::mix(exp.workload.seed, u64::from(round))
        };
        // Blocks exact in the server's tokens where it can count them.
        let words = match self.surface.as_ref().and_then(|s| s.tokenize.clone()) {
            Some(how) => one_token_words(client, &how, exp.request_timeout).await,
            None => None,
        };
        Ok(BlockText {
            chars_per_block: text.len().max(1),
            block_size,
            salt,
            words,
        })
    }

    /// Text for `tokens` of `generator`, calibrated (once per run and bucket), and the server's
    /// count of it (behind a nonce when `behind_nonce`, as it is sent).
    #[allow(clippy::too_many_arguments)]
    async fn body(
        &mut self,
        client: &Client,
        exp: &Experiment,
        prompts: &Prompts,
        generator: &TextGenerator,
        tokens: u64,
        calibrate: bool,
        behind_nonce: bool,
        flags: &mut Vec<Flag>,
    ) -> Result<(String, Option<u64>), (FlagKind, String)> {
        let Body {
            text, flag, tokens, ..
        } = self
            .body_text(
                client,
                exp,
                generator,
                tokens,
                calibrate,
                behind_nonce,
                &prompts.target.model,
            )
            .await
            .map_err(|(e, _)| (FlagKind::CalibrationFailed, e))?;
        if let Some(f) = flag
            && !flags.contains(&f)
        {
            flags.push(f);
        }
        Ok((text, tokens))
    }

    /// The server's count of a group's prefix exactly as it is sent (its tag and text), so
    /// the hit each later request of the group is owed is the server's own number: a nonce
    /// of another draw tokenizes into a token more or less than the group's tag. Counted only
    /// where the server has a tokenize endpoint: a counting generation would prefill the
    /// prefix and put it in the cache before the group's first request. On the chat API the
    /// count leaves out the template's head, which is shared too: the hit owed is a floor.
    async fn count_prefix(
        &mut self,
        client: &Client,
        exp: &Experiment,
        prefix: &str,
    ) -> Result<Option<u64>, (FlagKind, String)> {
        let Some(tokenize) = self.surface.as_ref().and_then(|s| s.tokenize.clone()) else {
            return Ok(None);
        };
        let counted = tokio::select! {
            c = crate::client::surface::count_with(client, &tokenize, prefix, exp.request_timeout) => c,
            _ = self.interrupt.wait() => {
                return Err((FlagKind::PromptError, "interrupted while counting shared prefixes".into()));
            }
        };
        counted.map(Some).map_err(|e| {
            (
                FlagKind::PromptError,
                format!("could not count a shared prefix's tokens on the server: {e}"),
            )
        })
    }

    /// A dataset reply's length in the server's tokens (counted once per run).
    async fn reply_length(
        &mut self,
        client: &Client,
        exp: &Experiment,
        model: &Option<String>,
        reply: &str,
    ) -> Result<u64, (FlagKind, String)> {
        if let Some(n) = self.reply_tokens.get(reply) {
            return Ok(*n);
        }
        let api = exp.workload.api;
        let tokenize = self
            .surface
            .as_ref()
            .and_then(|s| s.tokenize.clone())
            .filter(|_| api != Api::OpenaiChat);
        let counted = tokio::select! {
            c = count_tokens(client, api, tokenize, reply, model.clone(), exp.request_timeout) => c,
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
        self.reply_tokens.insert(reply.to_string(), n);
        Ok(n.max(1))
    }
}

impl<'a> RoundPlan<'a> {
    /// The round's draws, a trace line's lengths in place of drawn ones (a line made of
    /// blocks asks for no generated text).
    fn draws(&self) -> impl Iterator<Item = RequestDraw> + 'a {
        let lengths = self.lengths;
        self.prompts
            .source
            .draws(self.round)
            .take(self.count)
            .enumerate()
            .map(move |(i, mut d)| {
                if let Some(s) = lengths.lines.get(i) {
                    if s.blocks.is_some() {
                        d.input = InputDraw::Text(String::new());
                    } else if let Some(n) = s.input_tokens {
                        d.input = traced_input(&d.input, n);
                    }
                    if let Some(n) = s.max_tokens {
                        d.output = OutputDraw::Tokens(u64::from(n));
                    }
                }
                d
            })
    }

    /// The calibrated text of a body asked for before the round (empty when it was not: a
    /// draw always asks for what it is made of, so it was).
    fn body(
        &self,
        generator: &TextGenerator,
        tokens: u64,
        calibrate: bool,
        behind_nonce: bool,
    ) -> (&str, Option<u64>) {
        match self
            .bodies
            .get(&body_key(generator, tokens, calibrate, behind_nonce))
        {
            Some((text, counted)) => (text, *counted),
            None => ("", None),
        }
    }

    /// How many requests the round has.
    pub(super) fn len(&self) -> usize {
        self.count
    }

    /// The round's requests, in order, each made when it is taken. A request made of blocks
    /// carries the hit its leading blocks already sent in the round could give it.
    pub(super) fn requests(&self) -> impl Iterator<Item = Planned> + '_ {
        let ledger = Arc::new(Mutex::new(BlockLedger::default()));
        self.draws()
            .enumerate()
            .map(move |(i, d)| self.make(i, d, &ledger))
    }

    /// Request `i` of the round from its draw.
    fn make(&self, i: usize, d: RequestDraw, ledger: &Arc<Mutex<BlockLedger>>) -> Planned {
        let mixed = self.prompts.source.entries.len() > 1;
        let mix = mixed.then(|| self.prompts.source.entries[d.entry].name.clone());
        let max_tokens = match &d.output {
            OutputDraw::Tokens(n) => *n,
            OutputDraw::LengthOf(reply) => self.replies.get(reply).copied().unwrap_or(1),
        }
        .clamp(1, MAX_OUTPUT_TOKENS) as u32;
        let ids = self.lengths.ids_of(i);
        if let (Some(blocks), false) = (&self.blocks, ids.is_empty()) {
            let input = self.lengths.lines.get(i).and_then(|s| s.input_tokens);
            let tokens = blocks.block_tokens(ids, input);
            let text = blocks.prompt(ids, &tokens);
            let requested = Some(tokens.iter().map(|&t| u64::from(t)).sum());
            let entry = LedgerEntry::new(ledger.clone(), ids, tokens);
            return Planned {
                text,
                max_tokens,
                requested,
                share: None,
                mix,
                nonce: false,
                theoretical_cached: Some(entry.found()),
                ledger: Some(entry),
            };
        }
        match d.input {
            InputDraw::Text(text) => Planned {
                text,
                max_tokens,
                requested: None,
                share: None,
                mix,
                nonce: true,
                theoretical_cached: None,
                ledger: None,
            },
            InputDraw::Generated {
                generator,
                tokens,
                calibrate,
            } => Planned {
                text: self
                    .body(&generator, tokens, calibrate, self.behind_nonce)
                    .0
                    .to_string(),
                max_tokens,
                requested: Some(tokens),
                share: None,
                mix,
                nonce: true,
                theoretical_cached: None,
                ledger: None,
            },
            InputDraw::SharedPrefix {
                group,
                prefix_tokens,
                suffix_tokens,
                seed,
            } => {
                let (_, counted) =
                    self.body(&TextGenerator::Random { seed }, prefix_tokens, true, true);
                let suffix_generator = TextGenerator::Random {
                    seed: seed.wrapping_add(1),
                };
                let (suffix, _) = self.body(&suffix_generator, suffix_tokens, true, true);
                let (prefix, prefix_counted) = self
                    .prefixes
                    .get(&group)
                    .map_or(("", None), |(text, n)| (text.as_str(), *n));
                let unique = tag(
                    self.fresh,
                    seed,
                    &[u64::from(self.round), i as u64, 1 << 40],
                );
                // The prefix as sent, counted by the server's tokenizer; else calibration's
                // count of the text behind a nonce of the tag's shape, which can differ from
                // the group's tag by a token or two (the verifier's shortfall allows for it).
                let shared = prefix_counted.or(counted).unwrap_or(prefix_tokens);
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
                    theoretical_cached: None,
                    ledger: None,
                }
            }
        }
    }
}

/// What request `d` needs from the server before it is made.
fn needs(d: &RequestDraw, behind_nonce: bool) -> Vec<Need> {
    let mut out = Vec::new();
    if let OutputDraw::LengthOf(reply) = &d.output {
        out.push(Need::Reply(reply.clone()));
    }
    match &d.input {
        InputDraw::Text(_) => {}
        InputDraw::Generated {
            generator,
            tokens,
            calibrate,
        } => out.push(Need::Body {
            generator: generator.clone(),
            tokens: *tokens,
            calibrate: *calibrate,
            behind_nonce,
        }),
        InputDraw::SharedPrefix {
            prefix_tokens,
            suffix_tokens,
            seed,
            ..
        } => {
            out.push(Need::Body {
                generator: TextGenerator::Random { seed: *seed },
                tokens: *prefix_tokens,
                calibrate: true,
                behind_nonce: true,
            });
            out.push(Need::Body {
                generator: TextGenerator::Random {
                    seed: seed.wrapping_add(1),
                },
                tokens: *suffix_tokens,
                calibrate: true,
                behind_nonce: true,
            });
        }
    }
    out
}

/// A calibrated text's place in a round's [`Bodies`].
fn body_key(generator: &TextGenerator, tokens: u64, calibrate: bool, behind_nonce: bool) -> String {
    format!("{generator:?}|{tokens}|{calibrate}|{behind_nonce}")
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

/// Words of the random text that the server counts as one token each after a line break (with
/// their leading space), asked of its tokenize endpoint once a round: all of them in one count
/// when that adds up, else one by one; with fewer than 16, the single letters that are one
/// token too. None: fewer than 8 in all.
async fn one_token_words(
    client: &crate::client::Client,
    how: &servebench_model::results::meta::Tokenize,
    timeout: std::time::Duration,
) -> Option<Arc<[String]>> {
    use crate::client::surface::count_with;
    let words: Vec<String> = crate::prompt::WORDS
        .iter()
        .map(|w| format!(" {w}"))
        .collect();
    // The line break alone: whatever the server adds (a BOS) is counted in it.
    let base = count_with(client, how, "\n", timeout).await.ok()?;
    let all = format!("\n{}", words.concat());
    let keep: Vec<String> =
        if count_with(client, how, &all, timeout).await.ok()? == base + words.len() as u64 {
            words
        } else {
            let mut keep = Vec::new();
            for w in words {
                if count_with(client, how, &format!("\n{w}"), timeout)
                    .await
                    .ok()?
                    == base + 1
                {
                    keep.push(w);
                }
            }
            keep
        };
    if keep.len() >= 16 {
        return Some(keep.into());
    }
    // A small vocabulary holds few whole words (2 of the 117 in the real-engine tier's 512-token
    // model, whose char-sized blocks then ran 4% long): single letters after a space, one token
    // each there (12 of 26), make its blocks exact too.
    let mut keep = keep;
    for c in 'a'..='z' {
        let w = format!(" {c}");
        if count_with(client, how, &format!("\n{w}"), timeout)
            .await
            .ok()?
            == base + 1
        {
            keep.push(w);
        }
    }
    (keep.len() >= 8).then(|| keep.into())
}
