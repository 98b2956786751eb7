//! One server launch: measure the group's pending points on it until they are done, the server
//! crashes (the failure policy decides what follows), the host is lost, or the run stops.

use std::sync::Arc;
use std::time::Duration;

use crate::catalog::FlagKind;
use crate::host::Host;
use crate::plan::failure::{AfterCrash, FailurePolicy};
use crate::results::records::{Flag, PointStatus};
use crate::results::rundir::RunDir;
use crate::spec::Point;
use crate::text::last_lines;

use std::path::Path;

use crate::client::Client;

use super::agent_session::AgentPlace;
use super::errors::RunError;
use super::interrupt::Interrupt;
use super::measurer::{InProcess, Measurer, OnHost};
use super::point::PointRunner;
use super::progress::Progress;
use super::records::{append_point, failed_point};
use super::server::ServerHandle;

/// How one server launch ended.
pub(crate) enum LaunchEnd {
    /// Every pending point of the group was measured.
    Finished,
    /// The server died; relaunch for the rest.
    Crashed,
    Interrupted,
    /// `on_failure: abort` after a crash.
    Aborted(String),
    /// The host cannot be reached any more.
    HostLost(String),
    /// A server servebench did not start (`url:`) stopped answering: it cannot be relaunched.
    ServerLost(String),
}

impl LaunchEnd {
    /// Why the server is stopped after this end (recorded on the launch).
    pub(crate) fn stop_reason(&self, more_pending: bool) -> &'static str {
        match self {
            LaunchEnd::Crashed if more_pending => "relaunching after a crash",
            LaunchEnd::Crashed => "crashed with no point left to measure",
            LaunchEnd::Interrupted => "interrupted",
            LaunchEnd::Aborted(_) => "aborted after a crash",
            LaunchEnd::HostLost(_) => "the host connection was lost",
            LaunchEnd::ServerLost(_) => "the server stopped answering",
            LaunchEnd::Finished => "group finished",
        }
    }
}

/// What a launch's loop needs from the run.
pub(crate) struct LaunchContext<'a> {
    pub group: &'a str,
    pub run_dir: &'a Arc<RunDir>,
    pub progress: &'a Progress,
    pub interrupt: &'a Interrupt,
    pub host: &'a dyn Host,
    /// True when the host is remote: any failure may be the link, checked before going on.
    pub remote: bool,
}

/// Counts the run keeps across launches.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// One line per problem, for the run's status.
    pub problems: Vec<String>,
    /// Points with at least one successful request.
    pub measured_points: usize,
}

/// Measures pending points on one launched server until the group is done, the server
/// crashes, or the run stops. A point with a `search:` block is a capacity search: its probes
/// are measured here, one after another, on this launch ([`super::search`]).
pub(crate) async fn measure_launch<'p, I: Iterator<Item = &'p Point>>(
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
        let end = if point.experiment.search.is_some() {
            super::search::run_search(point, &mut on).await?
        } else {
            on.measure_one(point, &mut |_| {}).await?
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

/// How measuring one point ended the launch.
pub(crate) enum One {
    /// The launch is over ([`LaunchEnd`] says why).
    End(LaunchEnd),
    /// The measurer cannot measure on this launch (the point is recorded as failed; the
    /// group's other points are to be).
    Unavailable(String),
}

/// One launched server and what measuring on it needs.
pub(crate) struct Launch<'a, 'c> {
    pub handle: &'a mut ServerHandle,
    pub policy: &'a mut FailurePolicy,
    pub cx: &'a LaunchContext<'c>,
    pub measurer: &'a mut dyn Measurer,
    pub tally: &'a mut Tally,
}

impl Launch<'_, '_> {
    /// Measures one point and records it (after `amend` has seen the record: a search tags
    /// its probes there); Some when the launch cannot go on.
    pub(crate) async fn measure_one(
        &mut self,
        point: &Point,
        amend: &mut dyn FnMut(&mut crate::results::records::PointRecord),
    ) -> Result<Option<One>, RunError> {
        let cx = self.cx;
        let handle = &mut *self.handle;
        let tally = &mut *self.tally;
        let outcome = match self.measurer.measure(point, cx.group).await {
            Ok(o) => o,
            Err(unavailable) => {
                let msg = unavailable.to_string();
                tally.problems.push(format!("{}: {msg}", point.id));
                let mut record = failed_point(point, cx.group, FlagKind::AgentFailed, &msg);
                amend(&mut record);
                append_point(cx.run_dir, cx.progress, &record)?;
                return Ok(Some(One::Unavailable(msg)));
            }
        };
        let mut record = outcome.record;
        let agent_lost = record.has_flag(&FlagKind::AgentLost);
        // Broken connections (or a failed calibration) may mean the server is dying.
        let suspicious = !outcome.interrupted
            && (agent_lost
                || ["connect", "reset", "incomplete"]
                    .iter()
                    .any(|k| record.error_kinds.contains_key(*k))
                || record.has_flag(&FlagKind::CalibrationFailed)
                || record.has_flag(&FlagKind::ServerLost));
        let grace = if suspicious {
            Duration::from_secs(3)
        } else {
            Duration::ZERO
        };
        let mut crashed = None;
        if let Some(cause) = handle.crashed_within(grace).await {
            let tail = handle.log_tail(2000);
            let msg = format!(
                "the server died during this point{}: {}{} ({})",
                handle
                    .crash_origin()
                    .map(|o| format!(" ({o})"))
                    .unwrap_or_default(),
                cause.label(),
                handle
                    .exit_note()
                    .map(|n| format!(", {n}"))
                    .unwrap_or_default(),
                crate::engine::explain(handle.engine, cause)
            );
            record.flags.push(Flag::new(
                FlagKind::ServerCrashed,
                format!("{msg}\nlog tail:\n{}", last_lines(&tail, 8)),
            ));
            record.incomplete = true;
            record.status = Some(if record.ok > 0 {
                PointStatus::Degraded
            } else {
                PointStatus::Failed
            });
            record.failure = Some(cause.label().to_string());
            tally.problems.push(format!("{}: {msg}", record.id));
            handle.record.outcome = Some(format!("crashed: {}", cause.label()));
            crashed = Some(cause);
        }
        // A server servebench did not start cannot be watched: after a point that could not
        // reach it, ask it; gone, the point says so and the rest of the group is not sent.
        let mut lost = None;
        if crashed.is_none()
            && suspicious
            && let Err(why) = handle.answers(&point.experiment.server).await
        {
            let msg = format!(
                "the server at {} stopped answering during this point ({why})",
                handle.url
            );
            // First, so the point's reason is the lost server, not what it caused.
            record
                .flags
                .insert(0, Flag::new(FlagKind::ServerLost, msg.clone()));
            record.incomplete = true;
            record.status = Some(if record.ok > 0 {
                PointStatus::Degraded
            } else {
                PointStatus::Failed
            });
            record.failure = Some(crate::catalog::Failure::Lost.label().to_string());
            tally.problems.push(format!("{}: {msg}", record.id));
            lost = Some(msg);
        }
        if record.ok > 0 {
            tally.measured_points += 1;
        }
        if record.incomplete && !outcome.interrupted && crashed.is_none() {
            tally.problems.push(format!("{}: incomplete", record.id));
        }
        amend(&mut record);
        append_point(cx.run_dir, cx.progress, &record)?;
        if outcome.interrupted || cx.interrupt.is_set() {
            return Ok(Some(One::End(LaunchEnd::Interrupted)));
        }
        if let Some(msg) = lost {
            return Ok(Some(One::End(LaunchEnd::ServerLost(msg))));
        }
        if let Some(cause) = crashed {
            return Ok(Some(One::End(
                match self.policy.after_crash(point, cause.label()) {
                    AfterCrash::Relaunch => LaunchEnd::Crashed,
                    AfterCrash::Abort(why) => LaunchEnd::Aborted(why),
                },
            )));
        }
        // Any failure on a remote host may be the link: check it before the next point. A
        // dropped link is re-established by the host; if it cannot be, the host is gone and
        // the run stops with what it has.
        let link_suspect = agent_lost || record.incomplete || record.errors > 0;
        if link_suspect
            && cx.remote
            && let Err(e) = cx.host.check_link().await
        {
            return Ok(Some(One::End(LaunchEnd::HostLost(format!(
                "the host cannot be reached any more: {e}"
            )))));
        }
        Ok(None)
    }
}
/// What picks the measurer for a launch.
pub(crate) struct Measuring<'a> {
    pub runner: &'a mut PointRunner,
    /// Where the agent measures (`client: host`): the SSH host, or the Slurm allocation.
    pub agent_host: Option<&'a AgentPlace>,
    pub server: &'a crate::spec::types::Server,
    pub spec_dir: &'a Path,
}

/// Measures a launch's points with the measurer its placement calls for, then releases it.
pub(crate) async fn measure_on<'p, I: Iterator<Item = &'p crate::spec::Point>>(
    handle: &mut ServerHandle,
    pending: &mut std::iter::Peekable<I>,
    policy: &mut FailurePolicy,
    cx: &LaunchContext<'_>,
    m: Measuring<'_>,
    tally: &mut Tally,
) -> Result<LaunchEnd, RunError> {
    let api_key = crate::secrets::api_key(m.server);
    let mut measurer: Box<dyn Measurer + '_> = match m.agent_host {
        Some(remote) => Box::new(OnHost::new(
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
        )),
        None => Box::new(InProcess {
            runner: {
                m.runner.set_surface(handle.record.surface.clone());
                m.runner
            },
            client: Client::new(&handle.url, api_key)?,
        }),
    };
    let end = measure_launch(handle, pending, policy, cx, measurer.as_mut(), tally).await;
    measurer.close().await;
    end
}
