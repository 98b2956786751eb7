//! One point on a launched server: what a launch's points share (the run's context, its tally,
//! how the launch ended) and `Launch::point`, which measures a point, records it, and
//! says whether the server crashed, stopped answering, or the host was lost. `launch` loops
//! over a group's points with it; `search` measures a search's probes with it.

use std::sync::Arc;
use std::time::Duration;

use crate::host::Host;
use crate::plan::failure::{AfterCrash, FailurePolicy};
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, PointRecord, PointStatus};
use servebench_model::results::rundir::RunDir;
use servebench_model::spec::Point;
use servebench_model::text::last_lines;

use super::errors::RunError;
use super::interrupt::Interrupt;
use super::measurer::Measurer;
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
    /// Where the server writes profiler traces on its host (`profiler:`); None: its default.
    pub profile_dir: Option<&'a str>,
}

/// Counts the run keeps across launches.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// One line per problem, for the run's status.
    pub problems: Vec<String>,
    /// Points with at least one successful request.
    pub measured_points: usize,
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
    pub(crate) async fn point(
        &mut self,
        point: &Point,
        amend: &mut dyn FnMut(&mut servebench_model::results::records::PointRecord),
    ) -> Result<Option<One>, RunError> {
        let cx = self.cx;
        let handle = &mut *self.handle;
        let tally = &mut *self.tally;
        let profiling = point
            .experiment
            .profiler
            .as_ref()
            .filter(|p| p.covers(&point.id));
        let traces_before = match profiling {
            Some(_) => super::server::traces::before(cx.host, cx.profile_dir).await,
            None => Vec::new(),
        };
        let watched =
            super::server::watch::while_measuring(handle, self.measurer.measure(point, cx.group))
                .await;
        let lost_part = watched.lost;
        let outcome = match watched.out {
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
        if !watched.ended.is_empty() {
            let msg = watched.ended.join("; ");
            record.flags.push(Flag::new(FlagKind::ServerPartEnded, msg));
        }
        if let (Some(spec), Some(capture)) = (profiling, record.profiler.as_mut()) {
            let flags = bring_traces(cx, capture, &traces_before, spec.max_bytes()).await;
            record.flags.extend(flags);
        }
        let agent_lost = record.has_flag(&FlagKind::AgentLost);
        let suspicious = !outcome.interrupted && suspicious(&record, lost_part.is_some());
        let grace = if suspicious {
            Duration::from_secs(3)
        } else {
            Duration::ZERO
        };
        let mut crashed = None;
        if let Some(cause) = handle.crashed_within(grace).await {
            let msg = crashed_during(handle, &mut record, cause, lost_part.as_deref());
            cx.progress.line(&format!("    ⚠ server-crashed: {msg}"));
            tally.problems.push(format!("{}: {msg}", record.id));
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
            server_lost(&mut record, &msg);
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
        let end = PointEnd {
            interrupted: outcome.interrupted || cx.interrupt.is_set(),
            lost,
            crashed,
            link_suspect: agent_lost || record.incomplete || record.errors > 0,
        };
        Ok(self.goes_on(point, end).await.map(One::End))
    }

    /// How the launch ends after a point that ended as `end` says; None when it goes on.
    async fn goes_on(&mut self, point: &Point, end: PointEnd) -> Option<LaunchEnd> {
        if end.interrupted {
            return Some(LaunchEnd::Interrupted);
        }
        if let Some(msg) = end.lost {
            return Some(LaunchEnd::ServerLost(msg));
        }
        if let Some(cause) = end.crashed {
            return Some(match self.policy.after_crash(point, cause.label()) {
                AfterCrash::Relaunch => LaunchEnd::Crashed,
                AfterCrash::Abort(why) => LaunchEnd::Aborted(why),
            });
        }
        // Any failure on a remote host may be the link: check it before the next point. A
        // dropped link is re-established by the host; if it cannot be, the host is gone and
        // the run stops with what it has.
        if end.link_suspect
            && self.cx.remote
            && let Err(e) = self.cx.host.check_link().await
        {
            return Some(LaunchEnd::HostLost(format!(
                "the host cannot be reached any more: {e}"
            )));
        }
        None
    }
}

/// How a recorded point ended, for what the launch does next.
struct PointEnd {
    /// The run was interrupted.
    interrupted: bool,
    /// The server stopped answering (a server servebench did not start): why.
    lost: Option<String>,
    /// The server crashed during the point: how.
    crashed: Option<crate::engine::CrashCause>,
    /// The point failed in a way a lost link to a remote host could explain.
    link_suspect: bool,
}

/// Whether a point's failures may mean the server is dying: broken connections, a failed
/// calibration, a lost agent or server, part of its requests lost (`lost_part`).
fn suspicious(record: &PointRecord, lost_part: bool) -> bool {
    record.has_flag(&FlagKind::AgentLost)
        || lost_part
        || ["connect", "reset", "incomplete"]
            .iter()
            .any(|k| record.error_kinds.contains_key(*k))
        || record.has_flag(&FlagKind::CalibrationFailed)
        || record.has_flag(&FlagKind::ServerLost)
}

/// Marks the point as cut short by a server that stopped answering (`msg`, first among its
/// flags so the point's reason is the lost server, not what it caused).
fn server_lost(record: &mut PointRecord, msg: &str) {
    record
        .flags
        .insert(0, Flag::new(FlagKind::ServerLost, msg.to_string()));
    record.incomplete = true;
    record.status = Some(if record.ok > 0 {
        PointStatus::Degraded
    } else {
        PointStatus::Failed
    });
    record.failure = Some(servebench_model::catalog::Failure::Lost.label().to_string());
}

/// Brings a point's profiler traces into the run directory (those not in `before`, at most
/// `max_bytes`), says on the console which it kept or why there are none, and returns the
/// capture's flags.
async fn bring_traces(
    cx: &LaunchContext<'_>,
    capture: &mut servebench_model::results::records::ProfilerCapture,
    before: &[String],
    max_bytes: u64,
) -> Vec<Flag> {
    super::server::traces::collect(capture, cx.host, cx.run_dir, cx.group, before, max_bytes).await;
    let flags = super::probe::profiler::flags(capture);
    // The point's own line is printed already: the capture gets lines of its own.
    let kept: Vec<&str> = capture
        .files
        .iter()
        .filter_map(|f| f.path.as_deref())
        .collect();
    if !kept.is_empty() {
        cx.progress
            .line(&format!("    profiled: {}", kept.join(", ")));
    }
    for f in flags.iter().filter(|f| f.kind == FlagKind::ProfileFailed) {
        cx.progress
            .line(&format!("    ⚠ profile-failed: {}", f.message));
    }
    flags
}

/// Marks `record` as the point the server died in (`cause`): its flag names the crash, the
/// last GPU reading when the GPUs were watched and the log's tail; the launch's outcome says
/// so. Returns the crash's message.
fn crashed_during(
    handle: &mut ServerHandle,
    record: &mut servebench_model::results::records::PointRecord,
    cause: crate::engine::CrashCause,
    lost_part: Option<&str>,
) -> String {
    let tail = handle.log_tail(2000);
    let msg = format!(
        "the server died during this point{}{}: {}{} ({})",
        handle
            .crash_origin()
            .map(|o| format!(" ({o})"))
            .unwrap_or_default(),
        lost_part
            .map(|w| format!(" ({w}; servebench stopped the rest)"))
            .unwrap_or_default(),
        cause.label(),
        handle
            .exit_note()
            .map(|n| format!(", {n}"))
            .unwrap_or_default(),
        crate::engine::explain(handle.engine, cause)
    );
    // What the GPUs said last, when they were watched: an out-of-memory crash with the
    // memory it left free.
    let gpu = record
        .gpu
        .as_ref()
        .and_then(|g| g.last.as_ref())
        .map(|last| {
            let start = record.wall.as_ref().map(|w| w.started_at);
            format!(
                "\nlast GPU reading: {}",
                servebench_report::measure::gpu::reading_text(last, start)
            )
        })
        .unwrap_or_default();
    record.flags.push(Flag::new(
        FlagKind::ServerCrashed,
        format!("{msg}{gpu}\nlog tail:\n{}", last_lines(&tail, 8)),
    ));
    record.incomplete = true;
    record.status = Some(if record.ok > 0 {
        PointStatus::Degraded
    } else {
        PointStatus::Failed
    });
    record.failure = Some(cause.label().to_string());
    handle.record.outcome = Some(format!("crashed: {}", cause.label()));
    msg
}
