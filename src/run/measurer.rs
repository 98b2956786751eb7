//! Where a point is measured, behind one interface: [`InProcess`] measures from this process
//! (against a local server, or through a port forward); [`OnHost`] drives servebench's agent on
//! the SSH host or in the Slurm allocation next to rank 0, so network latency never enters the
//! numbers.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::client::Client;
use servebench_model::results::rundir::RunDir;
use servebench_model::spec::Point;

use super::agent::AgentRequest;
use super::agent::session::{AgentPlace, AgentSession};
use super::interrupt::Interrupt;
use super::point::{PointOutcome, PointRunner};
use super::probe::setup::ProbeSite;
use super::progress::Progress;

/// Why a measurer cannot measure at all (the point and the rest of its launch are recorded as
/// failed with this).
#[derive(Debug, thiserror::Error)]
#[error("cannot start servebench's agent on the host: {0}")]
pub(crate) struct Unavailable(pub String);

/// Measures points against one launched server.
pub(crate) trait Measurer: Send {
    /// Measures `point` (every round), recording its requests as they complete.
    fn measure<'a>(
        &'a mut self,
        point: &'a Point,
        group: &'a str,
    ) -> BoxFuture<'a, Result<PointOutcome, Unavailable>>;

    /// Releases what the measurer holds (an agent process on the host).
    fn close(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// Measures in this process with the run's [`PointRunner`] (its calibrations are shared by
/// every launch of the run).
pub(crate) struct InProcess<'r> {
    pub runner: &'r mut PointRunner,
    pub client: Client,
}

impl Measurer for InProcess<'_> {
    fn measure<'a>(
        &'a mut self,
        point: &'a Point,
        group: &'a str,
    ) -> BoxFuture<'a, Result<PointOutcome, Unavailable>> {
        Box::pin(async move { Ok(self.runner.measure(&self.client, point, group, None).await) })
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// Measures on the host (SSH, or a Slurm step) through `servebench agent`, started on the
/// first point and again after an agent was lost.
pub(crate) struct OnHost {
    pub host: AgentPlace,
    /// The server as the host sees it.
    pub url: String,
    pub api_key: Option<String>,
    /// What the server offers, for the agent's cache resets.
    pub surface: Option<servebench_model::results::meta::ServerSurface>,
    pub spec_dir: PathBuf,
    pub run_dir: Arc<RunDir>,
    pub progress: Progress,
    pub interrupt: Interrupt,
    session: Option<AgentSession>,
    /// What the agent's probes watch of the group, as the host reaches it.
    site: ProbeSite,
    /// The router's log read here, its sends relayed to the agent (which names each
    /// request's worker), and how late its copy may be.
    relay: Option<(super::server::routing::LogTail, std::time::Duration)>,
}

impl OnHost {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        host: AgentPlace,
        url: String,
        api_key: Option<String>,
        surface: Option<servebench_model::results::meta::ServerSurface>,
        spec_dir: PathBuf,
        run_dir: Arc<RunDir>,
        progress: Progress,
        interrupt: Interrupt,
    ) -> OnHost {
        OnHost {
            host,
            url,
            api_key,
            surface,
            spec_dir,
            run_dir,
            progress,
            interrupt,
            session: None,
            site: ProbeSite::default(),
            relay: None,
        }
    }

    /// What the probes watch of the group (a launched deployment's workers are reached where
    /// the router reaches them, on the host), and the router's log (the run directory's
    /// copy) to relay the router's word on each request from.
    pub(crate) fn with_site(
        mut self,
        mut site: ProbeSite,
        router_log: Option<super::server::routing::RouterLog>,
    ) -> OnHost {
        for w in &mut site.workers {
            w.url = w.url_on_host.clone();
        }
        self.site = site;
        self.relay = router_log.and_then(|log| {
            Some((
                super::server::routing::LogTail::new(log.path?, log.from),
                log.lag,
            ))
        });
        self
    }
}

impl Measurer for OnHost {
    fn measure<'a>(
        &'a mut self,
        point: &'a Point,
        group: &'a str,
    ) -> BoxFuture<'a, Result<PointOutcome, Unavailable>> {
        Box::pin(async move {
            if self.session.is_none() {
                let started = AgentSession::start(&self.host)
                    .await
                    .map_err(|e| Unavailable(e.to_string()))?;
                self.session = Some(started);
            }
            let req = AgentRequest {
                id: point.id.clone(),
                values: point.values.clone(),
                experiment: point.experiment.clone(),
                group: group.to_string(),
                url: self.url.clone(),
                api_key: self.api_key.clone(),
                surface: self.surface.clone(),
                prompts: file_prompts(point, &self.spec_dir),
                probes: self.site.clone(),
                routed_lag_ms: self
                    .relay
                    .as_ref()
                    .map(|(_, lag)| (*lag + super::agent::session::RELAY_LAG).as_millis() as u64),
            };
            let session = self.session.as_mut().expect("started above");
            let outcome = session
                .measure(
                    req,
                    &self.run_dir,
                    &self.progress,
                    &self.interrupt,
                    self.relay.as_mut().map(|(tail, _)| tail),
                )
                .await;
            // A lost agent is replaced for the next point.
            if outcome
                .record
                .has_flag(&servebench_model::catalog::FlagKind::AgentLost)
                && let Some(lost) = self.session.take()
            {
                lost.close().await;
            }
            Ok(outcome)
        })
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            if let Some(s) = self.session {
                s.close().await;
            }
        })
    }
}
/// The prompts of a `file` prompt, read here for the agent on the host.
pub(crate) fn file_prompts(
    p: &servebench_model::spec::Point,
    spec_dir: &Path,
) -> Option<Vec<String>> {
    match crate::prompt::PromptSource::load(&p.experiment.workload.prompt, spec_dir) {
        Ok(crate::prompt::PromptSource::Fixed(list)) => Some(list),
        _ => None,
    }
}
