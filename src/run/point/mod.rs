//! Measuring one point: cache preparation, prompts, requests with bounded concurrency, and the
//! point's aggregate with its validity flags. This file only names the parts: `runner` (what
//! every sender needs), `prompts`, `measure` (a point's rounds), `round` (one round: its
//! sender prepared, then sent through one request path), the senders (`closed_loop`,
//! `scheduled`, `two_point`, `sessions`, `agentic`) and what they share (`planned`, `sender`,
//! `workload`, `history`).

mod agentic;
mod closed_loop;
mod history;
mod measure;
mod planned;
mod prompts;
mod round;
mod runner;
mod scheduled;
mod sender;
mod sessions;
mod two_point;
mod workload;

pub(crate) use measure::PointOutcome;
pub(crate) use runner::{PointRunner, RecordSink, run_dir_sink};
