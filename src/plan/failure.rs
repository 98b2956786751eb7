//! The failure policy as data: what happens to a group's remaining points after its server
//! crashed (`on_failure: continue | skip-larger | abort`). Pure, so it is decided and tested
//! apart from the runner that applies it.

use servebench_model::spec::Point;
use servebench_model::spec::types::{OnFailure, PromptSpec};

/// What to do after a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AfterCrash {
    /// Relaunch the server and go on with the next point.
    Relaunch,
    /// Stop the run (what was measured is kept); the reason, for the run's status.
    Abort(String),
}

/// A group's failure policy and the crashes it has seen.
#[derive(Debug, Clone)]
pub(crate) struct FailurePolicy {
    pub on_failure: OnFailure,
    /// (context, concurrency, point id) of points whose server crashed, for `skip-larger`.
    crashed_at: Vec<(Option<u64>, u32, String)>,
}

impl FailurePolicy {
    pub(crate) fn new(on_failure: OnFailure) -> FailurePolicy {
        FailurePolicy {
            on_failure,
            crashed_at: Vec::new(),
        }
    }

    /// Records that the server crashed during `point` (its cause named by `cause`) and says
    /// what to do next.
    pub(crate) fn after_crash(&mut self, point: &Point, cause: &str) -> AfterCrash {
        match self.on_failure {
            OnFailure::Continue => AfterCrash::Relaunch,
            OnFailure::SkipLarger => {
                let (ctx, conc) = point_size(point);
                self.crashed_at.push((ctx, conc, point.id.clone()));
                AfterCrash::Relaunch
            }
            OnFailure::Abort => AfterCrash::Abort(format!(
                "stopped after {} ({cause}) as on_failure is abort",
                point.id
            )),
        }
    }

    /// Why `point` is skipped without being measured, or None to measure it: under
    /// `skip-larger`, a point at least as large as one that crashed would fail the same way.
    pub(crate) fn skip_reason(&self, point: &Point) -> Option<String> {
        let size = point_size(point);
        self.crashed_at
            .iter()
            .find(|(ctx, conc, _)| covers(size, (*ctx, *conc)))
            .map(|(_, _, at)| {
                format!(
                    "skipped: the server crashed at {at}, which is no larger than this point (on_failure: skip-larger)"
                )
            })
    }

    /// True when a server that does not start stops the run.
    pub(crate) fn aborts_on_start_failure(&self) -> bool {
        self.on_failure == OnFailure::Abort
    }
}

/// A point's requested context (prompt tokens) and concurrency.
fn point_size(p: &Point) -> (Option<u64>, u32) {
    let ctx = match &p.experiment.workload.prompt {
        PromptSpec::Repeat { tokens, .. } => Some(*tokens),
        PromptSpec::Random { tokens, .. } => tokens.upper(),
        PromptSpec::SharedPrefix {
            prefix_tokens,
            suffix_tokens,
            ..
        } => Some(prefix_tokens + suffix_tokens),
        PromptSpec::File { .. } | PromptSpec::Dataset { .. } => None,
    };
    (ctx, p.experiment.concurrency)
}

/// True when a point of `size` is at least as large as a crashed one in both context and
/// concurrency: it would fail the same way.
fn covers(size: (Option<u64>, u32), crashed: (Option<u64>, u32)) -> bool {
    let ctx_ok = match (size.0, crashed.0) {
        (Some(a), Some(b)) => a >= b,
        _ => true,
    };
    ctx_ok && size.1 >= crashed.1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(id: &str, ctx: u64, concurrency: u32, on_failure: &str) -> Point {
        let yaml = format!(
            "name: t\nserver: {{ engine: sim }}\non_failure: {on_failure}\nconcurrency: {concurrency}\n\
             workload: {{ prompt: {{ kind: repeat, tokens: {ctx} }}, output_tokens: 4 }}\n"
        );
        let spec = servebench_model::spec::load_str("t.yaml", &yaml).expect("spec loads");
        let mut p = spec.points[0].clone();
        p.id = id.to_string();
        p
    }

    #[test]
    fn skip_larger_skips_points_at_least_as_large_in_both() {
        let crashed = point("p002", 8192, 4, "skip-larger");
        let mut policy = FailurePolicy::new(OnFailure::SkipLarger);
        assert_eq!(
            policy.after_crash(&crashed, "out-of-memory"),
            AfterCrash::Relaunch
        );
        let larger = point("p003", 16384, 4, "skip-larger");
        assert!(
            policy
                .skip_reason(&larger)
                .unwrap()
                .contains("crashed at p002")
        );
        assert!(
            policy
                .skip_reason(&point("p004", 8192, 8, "skip-larger"))
                .is_some()
        );
        // Smaller in either dimension: measured.
        assert_eq!(
            policy.skip_reason(&point("p001", 4096, 4, "skip-larger")),
            None
        );
        assert_eq!(
            policy.skip_reason(&point("p005", 16384, 2, "skip-larger")),
            None
        );
    }

    #[test]
    fn continue_relaunches_and_abort_stops() {
        let p = point("p001", 1024, 1, "continue");
        let mut go_on = FailurePolicy::new(OnFailure::Continue);
        assert_eq!(go_on.after_crash(&p, "out-of-memory"), AfterCrash::Relaunch);
        assert_eq!(go_on.skip_reason(&point("p002", 9999, 9, "continue")), None);
        let mut stop = FailurePolicy::new(OnFailure::Abort);
        assert_eq!(
            stop.after_crash(&p, "out-of-memory"),
            AfterCrash::Abort("stopped after p001 (out-of-memory) as on_failure is abort".into())
        );
        assert!(stop.aborts_on_start_failure());
        assert!(!go_on.aborts_on_start_failure());
    }
}
