//! Measuring one point: cache preparation, prompts, requests with bounded concurrency, and the
//! point's aggregate with its validity flags.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::client::Client;
use crate::prompt::{
    Calibrated, Calibrator, CountError, PromptSource, TextGenerator, WorkloadSource, nonce,
};
use servebench_model::catalog::FlagKind;
use servebench_model::results::meta::{CacheReset, ServerSurface};
use servebench_model::results::records::{Calibration, Flag, PointRecord, RequestRecord};
use servebench_model::results::rundir::RunDir;
use servebench_model::spec::Point;
use servebench_model::spec::types::{CachePolicy, Experiment};

use super::progress::Progress;
use crate::run::interrupt::Interrupt;

mod agentic;
mod closed_loop;
mod history;
mod planned;
use planned::{
    RequestTarget, generation_request, reasoning_markers, request_model, reset_cache_with,
};
mod round;
mod scheduled;
mod sender;
mod sessions;
mod two_point;
mod workload;

use super::probe::setup::{ProbeSinks, ProbeSite};
pub(crate) use super::request::RecordSink;
use super::request::RecordWriter;

/// The sink that appends to a run directory's `requests.jsonl`; a failed write (a full disk)
/// stops the run through `interrupt`.
pub(crate) fn run_dir_sink(dir: Arc<RunDir>, interrupt: Interrupt) -> RecordSink {
    Arc::new(move |r: &RequestRecord| {
        dir.append_request(r).inspect_err(|e| {
            interrupt.write_failed(
                &dir.file(servebench_model::results::rundir::REQUESTS_FILE),
                e,
            );
        })
    })
}

/// Shared state for measuring points within a run.
pub(crate) struct PointRunner {
    /// Where every record goes (`requests.jsonl`, or the agent's stdout), written from a
    /// thread of its own that also folds it into its round.
    pub(super) writer: Arc<RecordWriter>,
    pub progress: Progress,
    pub interrupt: Interrupt,
    pub spec_dir: PathBuf,
    /// Calibrated text lengths, by (model, generator, target tokens): calibration is paid once.
    calibrations: HashMap<String, (Calibrated, Calibration)>,
    /// Dataset replies' lengths in the server's tokens, counted once each.
    reply_tokens: HashMap<String, u64>,
    /// What the server measured now offers (its cache reset, tokenize endpoint, context
    /// length); None when it was not probed (an older agent's request): `/flush_cache` then.
    surface: Option<ServerSurface>,
    /// The served model's attention layers, in words, where its config is known
    /// (`attention_layout`): a point whose server cached nothing names it.
    attention: Option<String>,
    /// Where the probes' readings go (the run directory, or the agent's stdout).
    sinks: ProbeSinks,
    /// What the probes watch of the server group measured now.
    site: ProbeSite,
    /// Which worker a launched deployment's router sent each request to.
    pub(super) routing: Arc<super::server::routing::RoutingBook>,
}

/// A measured point and whether the run was interrupted during it.
pub(crate) struct PointOutcome {
    pub record: PointRecord,
    pub interrupted: bool,
}

impl PointOutcome {
    /// A point that could not send its measured requests: flagged and marked incomplete.
    fn abandoned(
        mut record: PointRecord,
        kind: FlagKind,
        message: String,
        interrupted: bool,
    ) -> Self {
        record.flags.push(Flag::new(kind, message));
        record.incomplete = true;
        record.status = Some(servebench_model::results::records::PointStatus::Failed);
        PointOutcome {
            record,
            interrupted,
        }
    }
}

impl PointRunner {
    pub(crate) fn new(
        sink: RecordSink,
        progress: Progress,
        interrupt: Interrupt,
        spec_dir: PathBuf,
    ) -> Self {
        let routing = Arc::new(super::server::routing::RoutingBook::default());
        PointRunner {
            writer: Arc::new(RecordWriter::start(sink, routing.clone())),
            routing,
            progress,
            interrupt,
            spec_dir,
            calibrations: HashMap::new(),
            reply_tokens: HashMap::new(),
            surface: None,
            attention: None,
            sinks: ProbeSinks::default(),
            site: ProbeSite::default(),
        }
    }

    /// Says what the probes watch of the server group measured next (its workers, where it
    /// writes profiler traces) and where its router logs the worker of each request (a
    /// launched deployment's: its copy here, or relayed to the agent).
    pub(crate) fn set_site(
        &mut self,
        site: ProbeSite,
        router_log: Option<super::server::routing::RouterLog>,
    ) {
        let names = site
            .workers
            .iter()
            .map(|w| (w.url_on_host.clone(), w.name.clone()))
            .collect();
        self.routing.follow(router_log.map(|log| (log, names)));
        self.site = site;
    }

    /// Sends the probes' readings to `sinks` during every round.
    pub(crate) fn with_probe_sinks(mut self, sinks: ProbeSinks) -> Self {
        self.sinks = sinks;
        self
    }

    /// Says what the server measured next offers (probed when it became ready).
    pub(crate) fn set_surface(&mut self, surface: Option<ServerSurface>) {
        self.surface = surface;
    }

    /// Says the served model's config (read when its server was ready), for its attention
    /// layout.
    pub(crate) fn set_model_config(
        &mut self,
        config: Option<&servebench_model::results::meta::ModelConfigRecord>,
    ) {
        self.attention = config
            .and_then(|c| c.config.as_ref())
            .and_then(attention_layout);
    }

    /// Whether the server said its usage leaves out a cached count of 0.
    pub(super) fn cached_omitted_is_zero(&self) -> bool {
        self.surface
            .as_ref()
            .is_some_and(|s| s.cached_tokens_omitted_when_zero)
    }

    /// Measures `point` against the server at `client` (all rounds).
    pub(crate) async fn measure(
        &mut self,
        client: &Client,
        point: &Point,
        group: &str,
    ) -> PointOutcome {
        self.measure_with(client, point, group, None).await
    }

    /// Like [`measure`](Self::measure), with the prompts given instead of read from the spec's
    /// prompt file (the remote agent has no access to the user's files).
    pub(crate) async fn measure_with(
        &mut self,
        client: &Client,
        point: &Point,
        group: &str,
        prompts: Option<Vec<String>>,
    ) -> PointOutcome {
        let started_at = crate::client::unix_now();
        let mut outcome = self.rounds(client, point, group, prompts).await;
        outcome.record.wall = Some(servebench_model::results::records::Wall {
            started_at,
            ended_at: crate::client::unix_now(),
        });
        outcome
    }

    async fn rounds(
        &mut self,
        client: &Client,
        point: &Point,
        group: &str,
        prompts: Option<Vec<String>>,
    ) -> PointOutcome {
        let exp = &point.experiment;
        let mut record = PointRecord::empty(point, group);
        self.progress.point_started(&point.id, &point.label());
        let mut flags: Vec<Flag> = Vec::new();
        let prompts = match self.prompts(client, exp, prompts, &mut flags).await {
            Ok(p) => p,
            Err((kind, message, calibration)) => {
                let interrupted = self.interrupt.is_set();
                record.calibration = calibration;
                let outcome = PointOutcome::abandoned(record, kind, message, interrupted);
                // Every point says how it ended on the console, a failed one too.
                self.progress.point_finished(
                    &point.id,
                    &super::progress::point_line(point, &outcome.record),
                );
                return outcome;
            }
        };
        // Agent sessions' prompts are their traces' blocks, not the workload's prompt.
        record.requested_prompt_tokens = prompts.requested().filter(|_| exp.agentic().is_none());
        record.calibration = prompts.calibration.clone();
        // Before the first round and its cache reset: outside every measured window.
        let checks = match exp.validity.any() {
            true => self.validity_before(client, point, &prompts).await,
            false => None,
        };

        // Every measured record is folded in as it finishes (it is in requests.jsonl already).
        let mut fold = servebench_report::measure::summary::PointFold::new(exp);
        let mut probes = self.probes(point, checks);
        let mut interrupted = false;
        let mut observed = servebench_report::measure::system::Observed::default();
        for round in 0..exp.repeat {
            if self.interrupt.is_set() {
                interrupted = true;
                break;
            }
            let stopped = self
                .round(
                    client,
                    point,
                    round,
                    &prompts,
                    &mut probes,
                    (&mut flags, &mut observed, &mut fold),
                )
                .await;
            if stopped {
                interrupted = true;
                break;
            }
        }

        if let Some(cause @ crate::run::interrupt::StopCause::WriteFailed { .. }) =
            self.interrupt.cause()
        {
            flags.push(Flag::new(
                FlagKind::WriteFailed,
                format!("{cause}; the point stopped there"),
            ));
        }
        finish_record(
            &mut record,
            exp,
            fold,
            probes,
            &observed,
            (flags, interrupted),
        );
        if let Some(layout) = &self.attention {
            for f in &mut record.flags {
                if f.kind == FlagKind::NoPrefixHits {
                    f.message
                        .push_str(&format!(". The model's attention: {layout}"));
                }
            }
        }
        self.progress
            .point_finished(&point.id, &super::progress::point_line(point, &record));
        PointOutcome {
            record,
            interrupted,
        }
    }

    /// The point's prompts: read from its files (or given), with every length distribution
    /// ready to draw from; a single generated prompt is calibrated here, before any round.
    /// Fails with the flag that abandons the point.
    async fn prompts(
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

    /// The validity checks that run before the point's first round: its canaries, and the
    /// consistency prompt alone. None when an interrupt stopped them.
    async fn validity_before(
        &mut self,
        client: &Client,
        point: &Point,
        prompts: &Prompts,
    ) -> Option<super::probe::validity::Checks> {
        use super::probe::validity;
        use crate::prompt::canary;
        let exp = &point.experiment;
        let asker = validity::Asker {
            template: generation_request(exp, String::new(), &prompts.target),
            path: crate::run::request::RequestPath::new(self.path_parts(client, point, 0), None),
        };
        let length = prompts
            .requested()
            .unwrap_or(validity::UNSIZED_PROMPT_TOKENS);
        let mut checks = validity::Checks::new(asker.clone());
        if let Some(spec) = exp.validity.canaries() {
            let target = length.saturating_sub(canary::OVERHEAD_TOKENS).max(16);
            let filler = self.filler(client, exp, prompts, target).await;
            checks.view.canaries = validity::canaries(&asker, &spec, filler.as_deref()).await;
        }
        if let Some(spec) = exp.validity.consistency() {
            let tokens = spec
                .prompt_tokens
                .unwrap_or(length.min(validity::CONSISTENCY_PROMPT_TOKENS));
            let target = tokens.saturating_sub(canary::OVERHEAD_TOKENS).max(16);
            match self.filler(client, exp, prompts, target).await {
                Ok(filler) => checks.solo = Some(validity::solo(&asker, &spec, &filler).await?),
                Err(why) => checks.unjudged_consistency(why.to_string()),
            }
        }
        if self.interrupt.is_set() {
            return None;
        }
        Some(checks)
    }

    /// The validity checks' filler text at `target` tokens behind a nonce: calibrated like
    /// the point's prompt (not when its spec says not to), once per target.
    async fn filler(
        &mut self,
        client: &Client,
        exp: &Experiment,
        prompts: &Prompts,
        target: u64,
    ) -> Result<String, super::probe::validity::NoFiller> {
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
        .map_err(|(e, _)| super::probe::validity::NoFiller(e))
    }

    /// Empties the server's prefix cache the way it offers. A server without a way is left
    /// as it is: unique nonces keep cold prompts apart, and `verify` checks the server's own
    /// cached_tokens (a clean point, not a failed flush).
    pub(super) async fn reset_cache(
        &self,
        client: &Client,
    ) -> Result<(), crate::client::surface::CacheResetError> {
        match self.cache_reset() {
            Some(how) => reset_cache_with(client, &how, &self.interrupt).await,
            None => Ok(()),
        }
    }

    /// How the server measured now empties its prefix cache (None: it has no way).
    fn cache_reset(&self) -> Option<CacheReset> {
        match &self.surface {
            Some(s) => s.cache_reset.clone(),
            None => Some(CacheReset::FlushCache),
        }
    }

    /// What every request path of `point`'s round `round` is made of.
    fn path_parts(
        &self,
        client: &Client,
        point: &Point,
        round: u32,
    ) -> crate::run::request::PathParts {
        crate::run::request::PathParts {
            client: client.clone(),
            writer: self.writer.clone(),
            progress: self.progress.clone(),
            interrupt: self.interrupt.clone(),
            point: point.id.clone(),
            round,
            timeout: point.experiment.request_timeout,
            omitted_is_zero: self.cached_omitted_is_zero(),
        }
    }

    /// The text of a generated prompt: calibrated to the server's token count (once per
    /// model, generator and target; reused by later points), or sized at four characters per
    /// token when the spec says not to calibrate. Returns the text, a flag when calibration
    /// ended outside its tolerance, and what calibration did. `behind_nonce`: the text is
    /// sent behind a nonce-shaped prefix, so it is counted behind one.
    #[allow(clippy::too_many_arguments)]
    async fn body_text(
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
async fn count_tokens(
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
struct Prompts {
    source: WorkloadSource,
    target: RequestTarget,
    /// How a single generated prompt was calibrated (None otherwise).
    calibration: Option<Calibration>,
}

impl Prompts {
    /// Whether generated texts are calibrated: as the point's single generated prompt says,
    /// else yes.
    fn calibrates(&self) -> bool {
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
    fn requested(&self) -> Option<u64> {
        match self.source.entries.as_slice() {
            [only] => only.prompt.target_tokens(),
            _ => None,
        }
    }
}

/// A generated text sized to a token target.
struct Body {
    text: String,
    /// Set when calibration ended outside its tolerance.
    flag: Option<Flag>,
    /// How it was calibrated (None when not calibrated).
    record: Option<Calibration>,
    /// The server's count of the text behind a nonce (None when not calibrated).
    tokens: Option<u64>,
}

/// A model's attention layers in words, from its Hugging Face config (None where it cannot
/// be read): "18 sliding-window (128 tokens) and 18 full-attention layers". Sliding and
/// linear layers keep no whole prefix, which some engines' prefix caches cannot serve.
fn attention_layout(config: &serde_json::Value) -> Option<String> {
    use roofline::{LayerKind, ModelFacts};
    let facts = ModelFacts::from_hf_config(config).ok()?;
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for l in &facts.layers {
        let name = match l.attention {
            LayerKind::Full => "full-attention".to_string(),
            LayerKind::Sliding { window } => format!("sliding-window ({window} tokens)"),
            LayerKind::Linear => "linear-attention".to_string(),
        };
        match kinds.iter_mut().find(|(k, _)| *k == name) {
            Some((_, n)) => *n += 1,
            None => kinds.push((name, 1)),
        }
    }
    let parts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    match parts.split_last()? {
        (last, []) => Some(format!("{last} layers")),
        (last, rest) => Some(format!("{} and {last} layers", rest.join(", "))),
    }
}

/// The point's record from its rounds: the summary of the folded records, the client's
/// load figures, each probe's part, a cost without telemetry, and a failed client's verdict.
fn finish_record(
    record: &mut PointRecord,
    exp: &Experiment,
    fold: servebench_report::measure::summary::PointFold,
    probes: super::probe::Probes,
    observed: &servebench_report::measure::system::Observed,
    (flags, interrupted): (Vec<Flag>, bool),
) {
    let mut fold = fold;
    let summary = fold.finish(exp, flags, interrupted);
    record.ok = summary.ok;
    record.errors = summary.errors;
    record.error_kinds = summary.error_kinds;
    record.metrics = summary.metrics;
    record.flags = summary.flags;
    record.load = fold
        .system
        .finish(exp, observed, &mut record.metrics, &mut record.flags);
    record.incomplete = summary.incomplete;
    record.status = Some(summary.status);
    record.prefix_cache = summary.prefix_cache;
    (record.trace_cache, record.jobs) = (summary.trace_cache, summary.jobs);
    if let Some(agent) = exp.slo.as_ref().and_then(|s| s.agent.as_ref()) {
        // The per-agent SLO judges the sessions, known only once the jobs are filled.
        servebench_report::measure::agents::put_check(agent, record);
    }
    record.tool_calls = summary.tool_calls;
    let end = super::probe::PointEnd {
        exp,
        fold: &fold,
        observed,
        routed: &summary.routed,
        rerouted: &summary.rerouted,
    };
    probes.fill(&end, record);
    if record.gpu.is_none()
        && let Some(cost) = &exp.cost
    {
        // No telemetry: the cost needs the GPU count from the spec.
        let windows = fold.system.measured_windows(exp.open_loop().is_some());
        servebench_report::measure::gpu::put_cost(
            cost.gpu_hour,
            cost.gpus,
            &windows,
            &mut record.metrics,
        );
    }
    // A part of the client died: what it sent is not the point's measurement.
    if record.has_flag(&FlagKind::ClientFailed) {
        record.incomplete = true;
        record.status = Some(servebench_model::results::records::PointStatus::Failed);
    }
}
