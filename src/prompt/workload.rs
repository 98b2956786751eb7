//! A point's workload as draws: for each request, which mix entry it belongs to, what its
//! input is (text, or generated text of a length still to be calibrated) and how many tokens it
//! asks for. Draws are a pure function of `workload.seed`, the round and the request's index,
//! so a rerun sends the same requests.

use std::path::Path;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use servebench_model::spec::types::{Length, Workload};

use super::dataset::DatasetInput;
use super::dist::{LengthSampler, bucket};
use super::file::PromptError;
use super::generate::{PromptSource, TextGenerator};

/// One entry of the workload (the workload itself, or one entry of its mix).
#[derive(Debug, Clone)]
pub struct WorkloadEntry {
    /// `mix-1`, ... or the entry's name; empty without a mix.
    pub name: String,
    pub weight: f64,
    pub prompt: PromptSource,
    pub output: LengthSampler,
}

/// Every entry of a workload, loaded and checked.
#[derive(Debug, Clone)]
pub struct WorkloadSource {
    pub entries: Vec<WorkloadEntry>,
    seed: u64,
}

/// What one request sends, before calibration turns lengths into text.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestDraw {
    /// Its mix entry (0 without a mix).
    pub entry: usize,
    pub input: InputDraw,
    pub output: OutputDraw,
}

/// A request's input.
#[derive(Debug, Clone, PartialEq)]
pub enum InputDraw {
    /// Generated text of `tokens` (a 2% bucket of the drawn length when it varies).
    Generated {
        generator: TextGenerator,
        tokens: u64,
        calibrate: bool,
    },
    /// Text as given (a file or dataset prompt).
    Text(String),
    /// Group `group`'s shared prefix, then unique text.
    SharedPrefix {
        group: u32,
        prefix_tokens: u64,
        suffix_tokens: u64,
        seed: u64,
    },
}

/// A request's output length.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputDraw {
    Tokens(u64),
    /// As many tokens as this reply is on the server (a ShareGPT reply): counted once.
    LengthOf(String),
}

impl WorkloadSource {
    /// Loads the workload's prompt sources and length distributions (files read here, within
    /// their budgets).
    pub(crate) fn load(w: &Workload, spec_dir: &Path) -> Result<WorkloadSource, PromptError> {
        let entry = |name: String, weight: f64, prompt, output: &Length| {
            Ok::<_, PromptError>(WorkloadEntry {
                name,
                weight,
                prompt: with_seed(PromptSource::load(prompt, spec_dir)?, w.seed),
                output: LengthSampler::load(output, spec_dir)?,
            })
        };
        let entries = if w.mix.is_empty() {
            vec![entry(String::new(), 1.0, &w.prompt, &w.output_tokens)?]
        } else {
            let weights_ok = w
                .mix
                .iter()
                .all(|m| m.weight.is_finite() && m.weight >= 0.0)
                && w.mix.iter().map(|m| m.weight).sum::<f64>() > 0.0;
            if !weights_ok {
                return Err(PromptError::BadWeights);
            }
            w.mix
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    entry(
                        m.name.clone().unwrap_or_else(|| format!("mix-{}", i + 1)),
                        m.weight,
                        m.prompt.as_ref().unwrap_or(&w.prompt),
                        m.output_tokens.as_ref().unwrap_or(&w.output_tokens),
                    )
                })
                .collect::<Result<_, _>>()?
        };
        Ok(WorkloadSource {
            entries,
            seed: w.seed,
        })
    }

    /// The workload with `prompt` in place of its own (prompts the remote agent is given).
    pub(crate) fn single(
        prompt: PromptSource,
        w: &Workload,
        spec_dir: &Path,
    ) -> Result<WorkloadSource, PromptError> {
        Ok(WorkloadSource {
            entries: vec![WorkloadEntry {
                name: String::new(),
                weight: 1.0,
                prompt,
                output: LengthSampler::load(&w.output_tokens, spec_dir)?,
            }],
            seed: w.seed,
        })
    }

    /// True when every request sends the same prompt spec and output length: the point's
    /// records and report read as before (one target length).
    pub(crate) fn is_single(&self) -> bool {
        self.entries.len() == 1
            && self.entries[0].output.is_fixed()
            && matches!(
                self.entries[0].prompt,
                PromptSource::Generated { .. } | PromptSource::Fixed(_)
            )
    }

    #[cfg(test)]
    /// The draws of `count` requests of `round`.
    pub(crate) fn draw(&self, round: u32, count: u32) -> Vec<RequestDraw> {
        self.draws(round).take(count as usize).collect()
    }

    /// The draws of `round`'s requests, one at a time (the same as [`draw`](Self::draw)'s, in
    /// order, without holding them all): endless, the caller takes as many as it sends.
    pub(crate) fn draws(&self, round: u32) -> Draws<'_> {
        Draws {
            source: self,
            rng: ChaCha8Rng::seed_from_u64(
                self.seed ^ (u64::from(round) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ),
            total: self.entries.iter().map(|e| e.weight).sum(),
            taken: vec![0usize; self.entries.len()],
        }
    }
}

/// The first group number of mix entry `entry`: the groups of the shared-prefix entries
/// before it.
fn group_offset(entries: &[WorkloadEntry], entry: usize) -> u32 {
    entries[..entry]
        .iter()
        .map(|e| match &e.prompt {
            PromptSource::SharedPrefix { groups, .. } => *groups,
            _ => 0,
        })
        .fold(0u32, |a, g| a.saturating_add(g))
}

/// A round's draws, in order (see [`WorkloadSource::draws`]).
#[derive(Debug, Clone)]
pub(crate) struct Draws<'a> {
    source: &'a WorkloadSource,
    rng: ChaCha8Rng,
    /// The entries' total weight.
    total: f64,
    /// Per entry: how many of its requests came before (file and dataset entries go in order).
    taken: Vec<usize>,
}

impl Iterator for Draws<'_> {
    type Item = RequestDraw;

    fn next(&mut self) -> Option<RequestDraw> {
        let entries = &self.source.entries;
        let rng = &mut self.rng;
        let entry = if entries.len() == 1 {
            0
        } else {
            pick(entries, self.total, rng.random::<f64>())
        };
        let e = &entries[entry];
        let n = self.taken[entry];
        self.taken[entry] += 1;
        let (input, reply_len) = match &e.prompt {
            PromptSource::Generated {
                generator,
                target_tokens,
                calibrate,
            } => (
                InputDraw::Generated {
                    generator: generator.clone(),
                    tokens: *target_tokens,
                    calibrate: *calibrate,
                },
                None,
            ),
            PromptSource::Drawn {
                generator,
                lengths,
                calibrate,
            } => (
                InputDraw::Generated {
                    generator: generator.clone(),
                    tokens: bucket(lengths.draw(rng)),
                    calibrate: *calibrate,
                },
                None,
            ),
            PromptSource::Fixed(list) => (InputDraw::Text(list[n % list.len()].clone()), None),
            PromptSource::Dataset { entries, seed } => {
                let d = &entries[n % entries.len()];
                let input = match &d.input {
                    DatasetInput::Text(t) => InputDraw::Text(t.clone()),
                    DatasetInput::Tokens(t) => InputDraw::Generated {
                        generator: TextGenerator::Random { seed: *seed },
                        tokens: bucket(*t),
                        calibrate: true,
                    },
                };
                let out = match (d.output_tokens, &d.reply) {
                    (Some(t), _) => Some(OutputDraw::Tokens(t)),
                    (None, Some(r)) => Some(OutputDraw::LengthOf(r.clone())),
                    (None, None) => None,
                };
                (input, out)
            }
            PromptSource::SharedPrefix {
                groups,
                prefix_tokens,
                suffix_tokens,
                seed,
            } => (
                InputDraw::SharedPrefix {
                    // Numbered after the groups of the mix's earlier shared-prefix entries:
                    // each entry's prefixes are its own (a group is one prefix, one length).
                    group: group_offset(entries, entry) + (n % *groups as usize) as u32,
                    prefix_tokens: *prefix_tokens,
                    suffix_tokens: *suffix_tokens,
                    seed: *seed,
                },
                None,
            ),
        };
        // Drawn even when the dataset gives a length, so one entry's draws do not
        // shift another's.
        let drawn = e.output.draw(rng);
        Some(RequestDraw {
            entry,
            input,
            output: reply_len.unwrap_or(OutputDraw::Tokens(drawn)),
        })
    }
}

/// The entry a uniform draw `u` in [0, 1) falls on, by weight.
fn pick(entries: &[WorkloadEntry], total: f64, u: f64) -> usize {
    let mut at = u * total;
    for (i, e) in entries.iter().enumerate() {
        if at < e.weight {
            return i;
        }
        at -= e.weight;
    }
    entries.len() - 1
}

/// Dataset entries that give a length generate text from the workload's seed.
fn with_seed(source: PromptSource, workload_seed: u64) -> PromptSource {
    match source {
        PromptSource::Dataset { entries, .. } => PromptSource::Dataset {
            entries,
            seed: workload_seed,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::spec::types::{Api, LengthDist, MixEntry, PromptSpec};

    fn workload(mix: Vec<MixEntry>, output: Length) -> Workload {
        Workload {
            api: Api::SglangGenerate,
            prompt: PromptSpec::Random {
                tokens: Length::Fixed(100),
                seed: 0,
                calibrate: true,
            },
            output_tokens: output,
            ignore_eos: true,
            temperature: 0.0,
            seed: 3,
            mix,
            chat_template_kwargs: Default::default(),
            tools: None,
            tool_choice: None,
        }
    }

    #[test]
    fn draws_are_seeded_and_mix_weights_hold() {
        let mix = vec![
            MixEntry {
                weight: 3.0,
                prompt: None,
                output_tokens: Some(Length::Fixed(10)),
                name: None,
            },
            MixEntry {
                weight: 1.0,
                prompt: None,
                output_tokens: Some(Length::Fixed(20)),
                name: Some("long".into()),
            },
        ];
        let src = WorkloadSource::load(&workload(mix, Length::Fixed(5)), Path::new(".")).unwrap();
        assert!(!src.is_single());
        assert_eq!(src.entries[1].name, "long");
        let a = src.draw(0, 4000);
        assert_eq!(a, src.draw(0, 4000), "the same seed draws the same");
        assert_ne!(a, src.draw(1, 4000), "each round draws anew");
        let first = a.iter().filter(|d| d.entry == 0).count();
        // Binomial(4000, 0.75): mean 3000, standard deviation about 27.
        assert!((2860..3140).contains(&first), "{first}");
        for d in &a {
            let want = if d.entry == 0 { 10 } else { 20 };
            assert_eq!(d.output, OutputDraw::Tokens(want));
        }
    }

    #[test]
    fn drawn_lengths_are_bucketed() {
        let mut w = workload(vec![], Length::Fixed(5));
        w.prompt = PromptSpec::Random {
            tokens: Length::Dist(LengthDist::Uniform {
                min: 100,
                max: 4000,
            }),
            seed: 0,
            calibrate: true,
        };
        let src = WorkloadSource::load(&w, Path::new(".")).unwrap();
        let lengths: std::collections::BTreeSet<u64> = src
            .draw(0, 2000)
            .iter()
            .map(|d| match d.input {
                InputDraw::Generated { tokens, .. } => tokens,
                _ => unreachable!(),
            })
            .collect();
        assert!(lengths.len() < 200, "{}", lengths.len());
        assert!(lengths.iter().all(|&t| bucket(t) == t));
    }
}
