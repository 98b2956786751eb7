//! What a point's probes need before they can be chosen, as two values: where their readings go
//! ([`ProbeSinks`], fixed for a runner: the run directory here, the agent's stdout on a host)
//! and what they watch of the server group measured now ([`ProbeSite`], chosen once per group
//! and sent to an agent as one field). [`choose`] is the one place the probes are chosen.

use std::time::Duration;

use servebench_model::results::meta::ServerSurface;
use servebench_model::spec::types::Experiment;

use super::gpu_sampler::GpuSink;
use super::scrape::MetricsSink;
use super::{Probes, gpu, profiler, router, scrape, validity, workers};
use crate::run::interrupt::Interrupt;
use crate::run::server::deployment::WorkerTarget;

/// What the probes watch of the server group measured now.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ProbeSite {
    /// Where the server writes profiler traces on its host (`profiler:`); None: the server's
    /// own default.
    #[serde(default)]
    pub profile_dir: Option<String>,
    /// The workers behind the router, as the measuring side reaches them (a launched
    /// deployment's); empty: the point's `server.workers`.
    #[serde(default)]
    pub workers: Vec<WorkerTarget>,
    /// A launched deployment's router's Prometheus listener, as the measuring side reaches it;
    /// None: no router counters are read.
    #[serde(default)]
    pub router_metrics: Option<String>,
}

/// Where the probes' readings go.
#[derive(Clone)]
pub(crate) struct ProbeSinks {
    /// `/metrics` scrapes; None = the server's view is not scraped.
    pub metrics: Option<MetricsSink>,
    /// How often `/metrics` is scraped while requests run.
    pub scrape_interval: Duration,
    /// GPU readings, the server's host, and whether this machine is it (when it is not, only
    /// a DCGM exporter is read from here); None = no GPU is sampled here.
    pub gpu: Option<(GpuSink, String, bool)>,
}

impl Default for ProbeSinks {
    fn default() -> ProbeSinks {
        ProbeSinks {
            metrics: None,
            scrape_interval: scrape::SCRAPE_INTERVAL,
            gpu: None,
        }
    }
}

/// The probes that watch every round of `exp`: the server's `/metrics` (when its `surface`
/// has them and scrapes have a sink), the workers behind a router, the GPUs as `telemetry:`
/// asks, the engine's profiler as `profiler:` asks, and the validity checks under load
/// (`checks`, made before the first round). A new probe is one line here.
pub(crate) fn choose(
    exp: &Experiment,
    (site, sinks): (&ProbeSite, &ProbeSinks),
    surface: Option<&ServerSurface>,
    interrupt: &Interrupt,
    checks: Option<validity::Checks>,
) -> Probes {
    let mut probes = Probes::default();
    if let (Some(sink), Some(surface)) = (&sinks.metrics, surface)
        && surface.metrics
    {
        probes.push(scrape::ServerScrape::new(
            sink.clone(),
            sinks.scrape_interval,
        ));
    }
    let targets = worker_targets(site, exp);
    if !targets.is_empty() {
        probes.push(workers::Workers::new(
            targets,
            sinks.metrics.clone(),
            sinks.scrape_interval,
        ));
    }
    if let Some(url) = &site.router_metrics {
        probes.push(router::RouterScrape::new(url, exp));
    }
    if let Some((sink, host, here)) = &sinks.gpu
        && let Some(g) = gpu::PointGpu::new(exp, sink.clone(), host, *here)
    {
        probes.push(gpu::Gpu::new(g));
    }
    if exp.profiler.is_some() {
        probes.push(profiler::Profiler::new(
            exp.clone(),
            site.profile_dir.clone(),
            interrupt.clone(),
        ));
    }
    if let Some(checks) = checks {
        probes.push(validity::UnderLoad::new(checks));
    }
    probes
}

/// The workers whose `/metrics` are scraped for `exp`: the site's, else the point's
/// `server.workers`.
fn worker_targets(site: &ProbeSite, exp: &Experiment) -> Vec<WorkerTarget> {
    if !site.workers.is_empty() {
        return site.workers.clone();
    }
    exp.server
        .workers
        .iter()
        .map(|w| WorkerTarget::listed(w))
        .collect()
}
