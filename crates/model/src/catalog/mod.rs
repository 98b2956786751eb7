//! What servebench knows about its numbers and its warnings, in one place: every metric (name,
//! label, unit, definition, direction of better, how it moves with the simulator's time scale)
//! every flag kind (with whether it doubts a point's numbers and where the report shows it), and
//! every failure cause a point can record.
//!
//! A leaf module: it depends on nothing else in the crate, so `spec` can validate `expect:`
//! names against it and `measure`, `report` and `run` all read the same entries. A new metric is
//! one entry here plus its computation in `measure`.

mod failure;
mod flag;
mod graded;
mod metric;

pub use failure::Failure;
pub use flag::FlagKind;
pub(crate) use graded::GRADED;
pub use graded::Graded;
pub use metric::{Direction, Display, Method, Metric};

/// A live-sessions search's headline figures an expectation (`expect:`) may name, judged on the
/// probe that set its capacity (`results::search::AgentsAtSlo`): they are the search's, not a
/// point's metrics.
pub const AGENTS_FIGURES: [&str; 3] = [
    "agents_at_slo",
    "agents_at_slo_per_gpu",
    "agents_at_slo_per_mw",
];
