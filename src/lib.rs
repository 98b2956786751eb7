//! servebench: declarative experiments against LLM inference servers (SGLang first).
//!
//! Data flows one way: spec -> plan -> run -> run directory -> report.

pub mod cli;
pub mod client;
pub mod engine;
pub mod error;
pub mod host;
pub mod load;
pub(crate) mod mlflow;
pub mod plan;
pub mod prompt;
pub mod run;

/// Exit codes, documented in `--help`.
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// The run failed, was interrupted, or some point has no numbers (it failed); a check did
    /// not hold. What was measured is on disk.
    pub const FAILED: i32 = 1;
    /// The spec or the command line is invalid.
    pub const BAD_INPUT: i32 = 2;
    /// The run measured every point, but some are degraded: more requests failed than the
    /// spec's `error_budget` allows (their numbers cover fewer requests).
    pub const DEGRADED: i32 = 3;
}

/// Parses arguments, runs the command, and maps errors to an exit code.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    cli::run(args)
}
