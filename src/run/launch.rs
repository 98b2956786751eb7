//! One server launch: measure the group's pending points on it until they are done, the server
//! crashes (the failure policy decides what follows), the host is lost, or the run stops.

use std::path::Path;

use crate::client::Client;
use crate::plan::failure::FailurePolicy;
use servebench_model::catalog::FlagKind;
use servebench_model::spec::Point;

use super::agent::session::AgentPlace;
use super::errors::RunError;
use super::measurer::{InProcess, Measurer, OnHost};
use super::on_server::{Launch, One};
use super::point::PointRunner;
use super::probe::setup::ProbeSite;
use super::records::{append_point, failed_point};
use super::server::ServerHandle;

pub(crate) use super::on_server::{LaunchContext, LaunchEnd, Tally};

/// Measures pending points on one launched server until the group is done, the server
/// crashes, or the run stops. A point with a `search:` block is a capacity search: its probes
/// are measured here, one after another, on this launch ([`super::search`]).
pub(crate) async fn run_launch<'p, I: Iterator<Item = &'p Point>>(
    handle: &mut ServerHandle,
    pending: &mut std::iter::Peekable<I>,
    policy: &mut FailurePolicy,
    cx: &LaunchContext<'_>,
    measurer: &mut dyn Measurer,
    tally: &mut Tally,
) -> Result<LaunchEnd, RunError> {
    loop {
        let Some(point) = pending.next() else {
            return Ok(LaunchEnd::Finished);
        };
        if let Some(msg) = policy.skip_reason(point) {
            cx.progress.line(&format!("{}: {msg}", point.id));
            append_point(
                cx.run_dir,
                cx.progress,
                &failed_point(point, cx.group, FlagKind::Skipped, &msg),
            )?;
            continue;
        }
        let mut on = Launch {
            handle,
            policy,
            cx,
            measurer,
            tally,
        };
        let end = match point.experiment.search.clone() {
            Some(search) => super::search::run_search(point, search, &mut on).await?,
            None => on.point(point, &mut |_| {}).await?,
        };
        match end {
            None => {}
            Some(One::End(end)) => return Ok(end),
            Some(One::Unavailable(msg)) => {
                // Nothing can be measured on this launch: record the rest as failed.
                for p in pending.by_ref() {
                    append_point(
                        cx.run_dir,
                        cx.progress,
                        &failed_point(p, cx.group, FlagKind::AgentFailed, &msg),
                    )?;
                }
                return Ok(LaunchEnd::Finished);
            }
        }
    }
}

/// What picks the measurer for a launch.
pub(crate) struct Measuring<'a> {
    pub runner: &'a mut PointRunner,
    /// Where the agent measures (`client: host`): the SSH host, or the Slurm allocation.
    pub agent_host: Option<&'a AgentPlace>,
    pub server: &'a servebench_model::spec::types::Server,
    pub spec_dir: &'a Path,
}

/// Measures a launch's points with the measurer its placement calls for, then releases it.
pub(crate) async fn run_on_launch<'p, I: Iterator<Item = &'p servebench_model::spec::Point>>(
    handle: &mut ServerHandle,
    pending: &mut std::iter::Peekable<I>,
    policy: &mut FailurePolicy,
    cx: &LaunchContext<'_>,
    m: Measuring<'_>,
    tally: &mut Tally,
) -> Result<LaunchEnd, RunError> {
    let api_key = servebench_model::secrets::api_key(m.server);
    // What the probes watch of this launch, chosen once for all its points.
    let site = ProbeSite {
        profile_dir: cx.profile_dir.map(str::to_string),
        workers: handle.workers.clone(),
    };
    let mut measurer: Box<dyn Measurer + '_> = match m.agent_host {
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
        None => Box::new(InProcess {
            runner: {
                m.runner.set_surface(handle.record.surface.clone());
                m.runner
                    .set_model_config(handle.record.model_config.as_ref());
                m.runner.set_site(site, handle.router_log());
                m.runner
            },
            client: Client::new(&handle.url, api_key)?,
        }),
    };
    let end = run_launch(handle, pending, policy, cx, measurer.as_mut(), tally).await;
    measurer.close().await;
    m.runner.set_site(ProbeSite::default(), None);
    end
}
