//! One server launch, in the parts its loop (`pool::measure_launch`) calls: the measurer its
//! placement calls for, a point the failure policy skips, and the rest of a launch nothing can
//! be measured on. The loop measures the group's pending points on the launch until they are
//! done, the server crashes (the failure policy decides what follows), the host is lost, or
//! the run stops.

use std::path::Path;

use crate::client::Client;
use crate::plan::failure::FailurePolicy;
use servebench_model::catalog::FlagKind;
use servebench_model::spec::Point;

use super::agent::session::AgentPlace;
use super::errors::RunError;
use super::measurer::{InProcess, Measurer, OnHost};
use super::point::PointRunner;
use super::probe::setup::ProbeSite;
use super::records::{append_point, failed_point};
use super::server::ServerHandle;

pub(crate) use super::on_server::{Launch, LaunchContext, LaunchEnd, One, Tally};

/// What picks the measurer for a launch.
pub(crate) struct Measuring<'a> {
    pub runner: &'a mut PointRunner,
    /// Where the agent measures (`client: host`): the SSH host, or the Slurm allocation.
    pub agent_host: Option<&'a AgentPlace>,
    pub server: &'a servebench_model::spec::types::Server,
    pub spec_dir: &'a Path,
}

/// The measurer a launch's points are measured with: the agent on the host, or this process
/// with the run's runner (told what the launch offers and what its probes watch). Close it
/// when the launch's points are done, then give the runner `ProbeSite::default()`.
pub(crate) fn measurer<'r>(
    handle: &ServerHandle,
    cx: &LaunchContext<'_>,
    m: Measuring<'r>,
) -> Result<Box<dyn Measurer + 'r>, RunError> {
    let api_key = servebench_model::secrets::api_key(m.server);
    // What the probes watch of this launch, chosen once for all its points.
    let site = ProbeSite {
        profile_dir: cx.profile_dir.map(str::to_string),
        workers: handle.workers.clone(),
        // The agent measures on another host: the router's loopback listener is not its own.
        router_metrics: m
            .agent_host
            .is_none()
            .then(|| handle.router_metrics.clone())
            .flatten(),
    };
    Ok(match m.agent_host {
        Some(remote) => Box::new(
            OnHost::new(
                remote.clone(),
                handle
                    .host_url
                    .clone()
                    .unwrap_or_else(|| handle.url.clone()),
                api_key,
                handle.record.surface.clone(),
                m.spec_dir.to_path_buf(),
                cx.run_dir.clone(),
                cx.progress.clone(),
                cx.interrupt.clone(),
            )
            .with_site(site, handle.router_log()),
        ),
        None => {
            let client = Client::new(&handle.url, api_key)?;
            m.runner.set_surface(handle.record.surface.clone());
            m.runner
                .set_model_config(handle.record.model_config.as_ref());
            m.runner.set_site(site, handle.router_log());
            Box::new(InProcess {
                runner: m.runner,
                client,
            })
        }
    })
}

/// Whether the failure policy skips `point` (recorded as skipped, with its reason).
pub(crate) fn skipped(
    point: &Point,
    policy: &mut FailurePolicy,
    cx: &LaunchContext<'_>,
) -> Result<bool, RunError> {
    let Some(msg) = policy.skip_reason(point) else {
        return Ok(false);
    };
    cx.progress.line(&format!("{}: {msg}", point.id));
    append_point(
        cx.run_dir,
        cx.progress,
        &failed_point(point, cx.group, FlagKind::Skipped, &msg),
    )?;
    Ok(true)
}

/// Nothing can be measured on this launch (`msg`): the rest of the group's points are
/// recorded as failed.
pub(crate) fn fail_rest<'p>(
    pending: impl Iterator<Item = &'p Point>,
    cx: &LaunchContext<'_>,
    msg: &str,
) -> Result<LaunchEnd, RunError> {
    for p in pending {
        append_point(
            cx.run_dir,
            cx.progress,
            &failed_point(p, cx.group, FlagKind::AgentFailed, msg),
        )?;
    }
    Ok(LaunchEnd::Finished)
}
