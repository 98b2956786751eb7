//! A run's outcome from its points: how many are ok, degraded or failed, the run's status, and
//! why, in words. Pure: it reads the recorded points, so a resumed run is judged on all of them.

use servebench_model::results::meta::RunStatus;
use servebench_model::results::records::{PointRecord, PointStatus};
use servebench_model::text::{count_s, first_line, truncate};

/// Points by status.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PointCounts {
    pub ok: usize,
    pub degraded: usize,
    pub failed: usize,
}

impl PointCounts {
    pub(crate) fn total(&self) -> usize {
        self.ok + self.degraded + self.failed
    }
}

/// The run's status and reason.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settled {
    pub status: RunStatus,
    /// Why the run is not complete (None when it is).
    pub reason: Option<String>,
    pub points: PointCounts,
}

/// Settles a run: `points` are every recorded point (earlier sessions' included), `planned`
/// how many the plan has, `stopped` why the run stopped early (an interrupt, `abort`, a lost
/// host), if it did.
pub(crate) fn settle(points: &[PointRecord], planned: usize, stopped: Option<&str>) -> Settled {
    let mut counts = PointCounts::default();
    let mut failed = Vec::new();
    let mut degraded = Vec::new();
    // Points during which the server was lost (it died, or stopped answering): whatever
    // they kept, the run did not measure what it planned (README: exit 1).
    let mut lost = Vec::new();
    for p in points {
        if p.status() != PointStatus::Failed
            && let Some(cause) = &p.failure
        {
            lost.push(format!("{} (server {cause})", p.id));
        }
        match p.status() {
            PointStatus::Ok => counts.ok += 1,
            PointStatus::Degraded => {
                counts.degraded += 1;
                degraded.push(format!("{} ({})", p.id, why_degraded(p)));
            }
            PointStatus::Failed => {
                counts.failed += 1;
                failed.push(format!("{} ({})", p.id, why_failed(p)));
            }
        }
    }
    let mut reasons: Vec<String> = Vec::new();
    if let Some(why) = stopped {
        reasons.push(why.to_string());
    }
    if counts.total() < planned && stopped.is_none() {
        reasons.push(format!(
            "{} of {} measured",
            counts.total(),
            count_s(planned, "point")
        ));
    }
    if !failed.is_empty() {
        reasons.push(format!(
            "{} of {} failed: {}",
            failed.len(),
            count_s(planned, "point"),
            failed.join("; ")
        ));
    }
    if !lost.is_empty() {
        reasons.push(format!("the server was lost during {}", lost.join("; ")));
    }
    if !degraded.is_empty() {
        reasons.push(format!(
            "{} of {} degraded: {}",
            degraded.len(),
            count_s(planned, "point"),
            degraded.join("; ")
        ));
    }
    let with_numbers = counts.ok + counts.degraded;
    let status = if stopped.is_some() || counts.total() < planned {
        RunStatus::Incomplete
    } else if with_numbers == 0 {
        RunStatus::Failed
    } else if counts.failed > 0 || !lost.is_empty() {
        RunStatus::Incomplete
    } else if counts.degraded > 0 {
        RunStatus::Degraded
    } else {
        RunStatus::Complete
    };
    Settled {
        status,
        reason: (!reasons.is_empty()).then(|| reasons.join("; ")),
        points: counts,
    }
}

/// The first line of what failed the point: its crash cause, else its first flag.
fn why_failed(p: &PointRecord) -> String {
    if let Some(cause) = &p.failure {
        return format!("server {cause}");
    }
    match p.flags.first() {
        Some(f) => truncate(first_line(&f.message), 160),
        None if p.errors > 0 => format!("all {} requests failed", p.errors),
        None => "no successful request".into(),
    }
}

fn why_degraded(p: &PointRecord) -> String {
    if let Some(cause) = &p.failure {
        return format!("server {cause} during the point");
    }
    if p.errors > 0 {
        return format!("{} of {} requests failed", p.errors, p.ok + p.errors);
    }
    if let Some(f) = p.flags.iter().find(|f| f.kind.voids_output()) {
        return format!("invalid output: {}", truncate(first_line(&f.message), 160));
    }
    "did not run to completion".into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::catalog::FlagKind;
    use servebench_model::results::records::Flag;

    fn point(id: &str, ok: usize, errors: usize, status: PointStatus) -> PointRecord {
        let spec = servebench_model::spec::load_str(
            "t.yaml",
            "name: t\nserver: { engine: sim }\nworkload: { prompt: { kind: repeat, tokens: 8 }, output_tokens: 2 }\n",
        )
        .expect("spec");
        let mut p = PointRecord::empty(&spec.points[0], "g1");
        p.id = id.into();
        (p.ok, p.errors, p.status) = (ok, errors, Some(status));
        p
    }

    #[test]
    fn every_point_ok_is_complete() {
        let s = settle(&[point("p001", 4, 0, PointStatus::Ok)], 1, None);
        assert_eq!((s.status, s.reason), (RunStatus::Complete, None));
    }

    #[test]
    fn degraded_points_are_named_with_their_errors() {
        let s = settle(
            &[
                point("p001", 4, 0, PointStatus::Ok),
                point("p002", 1, 7, PointStatus::Degraded),
            ],
            2,
            None,
        );
        assert_eq!(s.status, RunStatus::Degraded);
        assert_eq!(
            s.reason.as_deref(),
            Some("1 of 2 points degraded: p002 (7 of 8 requests failed)")
        );
        assert_eq!(s.points.degraded, 1);
    }

    #[test]
    fn a_failed_point_makes_the_run_incomplete_and_says_why() {
        let mut lost = point("p002", 0, 0, PointStatus::Failed);
        lost.flags.push(Flag::new(
            FlagKind::CalibrationFailed,
            "could not calibrate the prompt to 8192 tokens: HTTP 400\nmore",
        ));
        let s = settle(&[point("p001", 4, 0, PointStatus::Ok), lost], 2, None);
        assert_eq!(s.status, RunStatus::Incomplete);
        assert_eq!(
            s.reason.as_deref(),
            Some(
                "1 of 2 points failed: p002 (could not calibrate the prompt to 8192 tokens: HTTP 400)"
            )
        );
        // Nothing measured at all: failed.
        let none = settle(&[point("p001", 0, 8, PointStatus::Failed)], 1, None);
        assert_eq!(none.status, RunStatus::Failed);
        assert_eq!(
            none.reason.as_deref(),
            Some("1 of 1 point failed: p001 (all 8 requests failed)")
        );
    }

    #[test]
    fn a_server_lost_during_a_point_makes_the_run_incomplete_whatever_it_kept() {
        // The README's table: the server lost is exit 1, not a degraded run (exit 3).
        let mut cut = point("p001", 3, 5, PointStatus::Degraded);
        cut.failure = Some("killed".into());
        let s = settle(&[cut, point("p002", 4, 0, PointStatus::Ok)], 2, None);
        assert_eq!(s.status, RunStatus::Incomplete);
        let reason = s.reason.unwrap();
        assert!(
            reason.contains("the server was lost during p001 (server killed)"),
            "{reason}"
        );
    }

    #[test]
    fn a_stopped_run_is_incomplete_first_of_all() {
        let s = settle(
            &[point("p001", 4, 0, PointStatus::Ok)],
            3,
            Some("interrupted (Ctrl-C, SIGTERM or SIGHUP); measured data kept"),
        );
        assert_eq!(s.status, RunStatus::Incomplete);
        assert!(s.reason.unwrap().starts_with("interrupted"));
    }
}
