//! Open-loop load: the arrival schedule of a point (a pure function of its load model and
//! seed, computed before the point starts) and the pacer that releases requests on it.
//!
//! A kind of load whose arrivals depend on responses (multi-turn sessions, where a user's next
//! turn follows the previous answer and a think time) does not fit a schedule computed up
//! front: it is a second driver beside [`pacer::Pacer`], releasing requests from its own
//! state, and records the same `scheduled_at`/`phase` fields.

pub(crate) mod agentic;
pub(crate) mod arrival;
mod burstgpt;
pub(crate) mod capture;
pub(crate) mod check;
pub(crate) mod pacer;
pub(crate) mod schedule;
pub(crate) mod trace;
mod trace_line;

pub(crate) use check::ScheduleCheck;
pub use pacer::{Pacer, PacerError};
pub(crate) use schedule::TracedLines;
pub use schedule::{Schedule, ScheduleError, Scheduled};
