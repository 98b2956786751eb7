//! What a round's written records add up to, folded as each one is written (by the record
//! writer's thread, in the same step as the write): a record in `requests.jsonl` is in the
//! point's summary, whatever happens to the task that sent it (an interrupt, a lost server).

use servebench_model::results::records::{Phase, RequestRecord};
use servebench_report::measure::server_view::Finished;
use servebench_report::measure::summary::PointFold;

/// A round's records, folded as they are written.
pub(crate) struct RoundTally {
    /// The point's fold: every measured record (warm-up and cool-down ones only by worker).
    pub fold: PointFold,
    /// Measured records folded in this round, and of them the failed.
    pub measured: usize,
    pub failed: usize,
    /// Warm-up and cool-down records (an open loop's), and what they finished: the server's
    /// counters include them.
    pub warmup: usize,
    pub cooldown: usize,
    pub unmeasured: Finished,
}

impl RoundTally {
    pub(crate) fn new(fold: PointFold) -> RoundTally {
        RoundTally {
            fold,
            measured: 0,
            failed: 0,
            warmup: 0,
            cooldown: 0,
            unmeasured: Finished::default(),
        }
    }

    /// Folds a written record: measured ones into the point, an open loop's warm-up and
    /// cool-down among the unmeasured; primes and checks are not the point's numbers.
    pub(crate) fn add(&mut self, rec: &RequestRecord) {
        if !rec.role.is_measured() {
            return;
        }
        match rec.phase {
            Some(Phase::Warmup) | Some(Phase::Cooldown) => {
                if rec.phase == Some(Phase::Warmup) {
                    self.warmup += 1;
                } else {
                    self.cooldown += 1;
                }
                self.unmeasured.add(rec);
                self.fold.add_routed(rec);
            }
            _ => {
                self.measured += 1;
                self.failed += usize::from(rec.error.is_some());
                self.fold.add(rec);
            }
        }
    }
}
