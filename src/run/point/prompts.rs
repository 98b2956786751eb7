//! A point's prompts: its workload read from its files (or given by the run), and generated
//! texts calibrated to the server's token count, once per model, generator and target.

use crate::client::Client;
use crate::prompt::{
    Calibrated, Calibrator, CountError, PromptSource, TextGenerator, WorkloadSource, nonce,
};
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Calibration, Flag};
use servebench_model::spec::types::{CachePolicy, Experiment};

use super::planned::{RequestTarget, reasoning_markers, request_model};
use super::runner::PointRunner;

impl PointRunner {
    /// The point's prompts: read from its files (or given), with every length distribution
    /// ready to draw from; a single generated prompt is calibrated here, before any round.
    /// Fails with the flag that abandons the point.
    pub(super) async fn prompts(
        &mut self,
        client: &Client,
        exp: &Experiment,
        given: Option<Vec<String>>,
        flags: &mut Vec<Flag>,
    ) -> Result<Prompts, (FlagKind, String, Option<Calibration>)> {
        let source = match given {
            Some(list) => {
                WorkloadSource::single(PromptSource::Fixed(list), &exp.workload, &self.spec_dir)
            }
            None => WorkloadSource::load(&exp.workload, &self.spec_dir),
        }
        .map_err(|e| (FlagKind::PromptError, e.to_string(), None))?;
        let target = RequestTarget {
            model: request_model(exp, self.surface.as_ref()),
            markers: reasoning_markers(exp, self.surface.as_ref()),
        };
        let mut calibration = None;
        if source.is_single()
            && let PromptSource::Generated {
                generator,
                target_tokens,
                calibrate,
            } = &source.entries[0].prompt
        {
            let body = self
                .body_text(
                    client,
                    exp,
                    generator,
                    *target_tokens,
                    *calibrate,
                    behind_nonce(exp),
                    &target.model,
                )
                .await
                .map_err(|(e, record)| (FlagKind::CalibrationFailed, e, record))?;
            flags.extend(body.flag);
            calibration = body.record;
        }
        Ok(Prompts {
            source,
            target,
            calibration,
        })
    }

    /// The validity checks' filler text at `target` tokens behind a nonce: calibrated like
    /// the point's prompt (not when its spec says not to), once per target.
    pub(super) async fn filler(
        &mut self,
        client: &Client,
        exp: &Experiment,
        prompts: &Prompts,
        target: u64,
    ) -> Result<String, crate::run::probe::validity::NoFiller> {
        let generator = TextGenerator::Repeat {
            text: crate::prompt::canary::FILLER.to_string(),
        };
        let calibrate = prompts.calibrates();
        self.body_text(
            client,
            exp,
            &generator,
            target,
            calibrate,
            true,
            &prompts.target.model,
        )
        .await
        .map(|b| b.text)
        .map_err(|(e, _)| crate::run::probe::validity::NoFiller(e))
    }

    /// The text of a generated prompt: calibrated to the server's token count (once per
    /// model, generator and target; reused by later points), or sized at four characters per
    /// token when the spec says not to calibrate. Returns the text, a flag when calibration
    /// ended outside its tolerance, and what calibration did. `behind_nonce`: the text is
    /// sent behind a nonce-shaped prefix, so it is counted behind one.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn body_text(
        &mut self,
        client: &Client,
        exp: &Experiment,
        generator: &TextGenerator,
        target: u64,
        calibrate: bool,
        behind_nonce: bool,
        model: &Option<String>,
    ) -> Result<Body, (String, Option<Calibration>)> {
        let surface = self.surface.clone().unwrap_or_default();
        let calibrator = Calibrator {
            limit: surface.context_length,
            output_tokens: exp.workload.output_tokens.upper().unwrap_or(1),
            ..Calibrator::default()
        };
        if !calibrate {
            let chars = (target as f64 * calibrator.initial_chars_per_token) as usize;
            return Ok(Body {
                text: generator.text(chars),
                flag: None,
                record: None,
                tokens: None,
            });
        }
        let api = exp.workload.api;
        // The tokenize endpoint counts without a prefill; a chat prompt's count needs the
        // chat template, so it is counted by a generation.
        let tokenize = surface
            .tokenize
            .clone()
            .filter(|_| api != servebench_model::spec::types::Api::OpenaiChat);
        let key = format!("{model:?}|{api:?}|{generator:?}|{target}|{behind_nonce}");
        let (cal, record) = match self.calibrations.get(&key) {
            Some((c, first)) => {
                let mut record = first.clone();
                record.reused = true;
                record.attempts.clear();
                (c.clone(), record)
            }
            None => {
                self.calibrate_body(
                    client,
                    exp,
                    generator,
                    target,
                    behind_nonce,
                    model,
                    tokenize,
                    key,
                )
                .await?
            }
        };
        let flag = (!cal.within_tolerance).then(|| Flag {
            kind: FlagKind::Calibration,
            message: format!(
                "prompt calibration reached {} tokens for a target of {target} ({:+.1}%) after {} attempts",
                cal.actual_tokens,
                (cal.actual_tokens as f64 / target as f64 - 1.0) * 100.0,
                cal.attempts
            ),
        });
        Ok(Body {
            text: generator.text(cal.chars),
            flag,
            record: Some(record),
            tokens: Some(cal.actual_tokens),
        })
    }
    /// Calibrates `generator`'s text to `target` tokens of the server's (counted by
    /// `tokenize` where it has one, else by generations), behind a nonce when
    /// `behind_nonce`; kept under `key` for later points.
    #[allow(clippy::too_many_arguments)]
    async fn calibrate_body(
        &mut self,
        client: &Client,
        exp: &Experiment,
        generator: &TextGenerator,
        target: u64,
        behind_nonce: bool,
        model: &Option<String>,
        tokenize: Option<servebench_model::results::meta::Tokenize>,
        key: String,
    ) -> Result<(Calibrated, Calibration), (String, Option<Calibration>)> {
        let surface = self.surface.clone().unwrap_or_default();
        let calibrator = Calibrator {
            limit: surface.context_length,
            output_tokens: exp.workload.output_tokens.upper().unwrap_or(1),
            ..Calibrator::default()
        };
        let api = exp.workload.api;
        let timeout = exp.request_timeout;
        let mut attempts = Vec::new();
        let counted_by = if tokenize.is_some() {
            "tokenize"
        } else {
            "generate"
        };
        // Counted as it is sent: behind a nonce only when one goes in front (a
        // nonce's dozen tokens counted and not sent left prompts short).
        let prefix = move || if behind_nonce { nonce() } else { String::new() };
        let calibration = calibrator.calibrate(
            generator,
            target,
            prefix,
            |prompt: String| {
                let (client, model, tokenize) = (client.clone(), model.clone(), tokenize.clone());
                async move { count_tokens(&client, api, tokenize, &prompt, model, timeout).await }
            },
            &mut attempts,
        );
        // A long prompt's calibration can take a minute on a real server: Ctrl-C must
        // not wait for it.
        let result = tokio::select! {
            c = calibration => Some(c),
            _ = self.interrupt.wait() => None,
        };
        let mut record = Calibration {
            target,
            counted_by: counted_by.into(),
            chars: None,
            reused: false,
            attempts,
        };
        let c = match result {
            None => {
                return Err(("interrupted during prompt calibration".into(), Some(record)));
            }
            Some(Err(e)) => {
                return Err((
                    format!("could not calibrate the prompt to {target} tokens: {e}"),
                    Some(record),
                ));
            }
            Some(Ok(c)) => c,
        };
        record.chars = Some(c.chars);
        self.calibrations.insert(key, (c.clone(), record.clone()));
        Ok((c, record))
    }
}

/// One calibration count: the tokenize endpoint when the server has one, else a one-token
/// generation; a refusal as too long is told apart (calibration steps down from it).
pub(super) async fn count_tokens(
    client: &Client,
    api: servebench_model::spec::types::Api,
    tokenize: Option<servebench_model::results::meta::Tokenize>,
    prompt: &str,
    model: Option<String>,
    timeout: std::time::Duration,
) -> Result<u64, CountError> {
    let counted = match &tokenize {
        Some(how) => crate::client::surface::count_with(client, how, prompt, timeout).await,
        None => client
            .count_prompt_tokens(api, prompt, model.as_deref(), timeout)
            .await
            .map(|(n, _)| n),
    };
    counted.map_err(|e| {
        let text = e.to_string();
        match crate::prompt::too_long_limit(&text) {
            Some(limit) => CountError::TooLong { limit },
            None => CountError::Failed(text),
        }
    })
}

/// Whether a generated prompt is sent behind a nonce-shaped prefix: a cold point's nonce (on
/// unless `cache.nonce: false`), a warm point's per-round one, a conversation's opening tag.
pub(super) fn behind_nonce(exp: &Experiment) -> bool {
    exp.sessions().is_some()
        || match exp.cache.policy {
            CachePolicy::Cold => exp.cache.nonce,
            CachePolicy::Warm => true,
            _ => false,
        }
}

/// A point's workload, ready to draw from, and the model name its requests carry.
pub(super) struct Prompts {
    pub(super) source: WorkloadSource,
    pub(super) target: RequestTarget,
    /// How a single generated prompt was calibrated (None otherwise).
    pub(super) calibration: Option<Calibration>,
}

impl Prompts {
    /// Whether generated texts are calibrated: as the point's single generated prompt says,
    /// else yes.
    pub(super) fn calibrates(&self) -> bool {
        match self.source.entries.as_slice() {
            [only] => !matches!(
                only.prompt,
                PromptSource::Generated {
                    calibrate: false,
                    ..
                }
            ),
            _ => true,
        }
    }

    /// The prompt length every request asks for, when it is one length.
    pub(super) fn requested(&self) -> Option<u64> {
        match self.source.entries.as_slice() {
            [only] => only.prompt.target_tokens(),
            _ => None,
        }
    }
}

/// A generated text sized to a token target.
pub(super) struct Body {
    pub(super) text: String,
    /// Set when calibration ended outside its tolerance.
    pub(super) flag: Option<Flag>,
    /// How it was calibrated (None when not calibrated).
    pub(super) record: Option<Calibration>,
    /// The server's count of the text behind a nonce (None when not calibrated).
    pub(super) tokens: Option<u64>,
}
