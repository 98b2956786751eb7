//! The point runner: what every sender of a run's points needs (where records go, the
//! console, the interrupt, what the server measured now offers, what the probes watch and
//! where their readings go), and the server's cache reset and a round's request path made
//! from it. The files beside it add to it: `prompts` (a point's prompts and calibrated
//! texts), `measure` (a point's rounds), `round`, `workload` and `agentic` (a round's sender).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::client::Client;
use crate::prompt::Calibrated;
use servebench_model::results::meta::{CacheReset, ServerSurface};
use servebench_model::results::records::{Calibration, RequestRecord};
use servebench_model::results::rundir::RunDir;
use servebench_model::spec::Point;

use super::planned::reset_cache_with;
use crate::run::interrupt::Interrupt;
use crate::run::probe::setup::{ProbeSinks, ProbeSite};
use crate::run::progress::Progress;
pub(crate) use crate::run::request::RecordSink;
use crate::run::request::RecordWriter;

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
    pub(super) calibrations: HashMap<String, (Calibrated, Calibration)>,
    /// Dataset replies' lengths in the server's tokens, counted once each.
    pub(super) reply_tokens: HashMap<String, u64>,
    /// What the server measured now offers (its cache reset, tokenize endpoint, context
    /// length); None when it was not probed (an older agent's request): `/flush_cache` then.
    pub(super) surface: Option<ServerSurface>,
    /// The served model's attention layers, in words, where its config is known
    /// (`attention_layout`): a point whose server cached nothing names it.
    pub(super) attention: Option<String>,
    /// Where the probes' readings go (the run directory, or the agent's stdout).
    pub(super) sinks: ProbeSinks,
    /// What the probes watch of the server group measured now.
    pub(super) site: ProbeSite,
    /// Which worker a launched deployment's router sent each request to.
    pub(crate) routing: Arc<crate::run::server::routing::RoutingBook>,
}

impl PointRunner {
    pub(crate) fn new(
        sink: RecordSink,
        progress: Progress,
        interrupt: Interrupt,
        spec_dir: PathBuf,
    ) -> Self {
        let routing = Arc::new(crate::run::server::routing::RoutingBook::default());
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
        router_log: Option<crate::run::server::routing::RouterLog>,
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
    pub(super) fn cache_reset(&self) -> Option<CacheReset> {
        match &self.surface {
            Some(s) => s.cache_reset.clone(),
            None => Some(CacheReset::FlushCache),
        }
    }

    /// What every request path of `point`'s round `round` is made of.
    pub(super) fn path_parts(
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
            errors: point
                .experiment
                .stop
                .as_ref()
                .and_then(|s| s.errors.clone()),
            duration: point
                .experiment
                .stop
                .as_ref()
                .and_then(|s| s.duration)
                .filter(|_| point.experiment.open_loop().is_none()),
        }
    }
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
