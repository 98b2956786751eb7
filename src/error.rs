//! What a command ends with: a [`Status`] when it ran to its end, an [`Error`] when it could
//! not. [`crate::cli::run`] is the one place that prints an error and turns either into the
//! process's exit code ([`crate::exit`]).
//!
//! Each message carries its causes in its own text (`cannot write X: permission denied`), as
//! the module errors it wraps do, so the edge prints `error: {e}` and never walks the source
//! chain; the sources are still kept for callers that look at them.

use std::path::PathBuf;

use crate::exit;
use crate::plan::estimate::EstimateError;
use crate::run::RunError;
use servebench_model::console;
use servebench_model::results::rundir::RunDirError;
use servebench_model::spec::SpecErrors;
use servebench_report::report::ReportError;

/// How a command that ran to its end came out. A run that measured what it could but is
/// incomplete, a check whose expectations do not hold, or a comparison that found a
/// regression under `--fail-on-regression` ran fine, yet failed: exit 1 with no error, since
/// the command has already said what happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Status {
    /// Exit 0.
    Success,
    /// Exit 3: every point has numbers, some degraded.
    Degraded,
    /// Exit 1.
    Failed,
}

impl Status {
    /// [`exit::OK`] or [`exit::FAILED`].
    pub(crate) fn exit_code(self) -> i32 {
        match self {
            Status::Success => exit::OK,
            Status::Degraded => exit::DEGRADED,
            Status::Failed => exit::FAILED,
        }
    }

    /// Failed when `failed` holds.
    pub(crate) fn failed_if(failed: bool) -> Status {
        if failed {
            Status::Failed
        } else {
            Status::Success
        }
    }
}

/// Why a command could not do its work. [`Error::exit_code`] says which documented code it
/// ends with: 2 when the input (spec, command line, a run directory or file named on it) is
/// at fault, 1 when something failed along the way.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The command line does not parse (clap's own message, usage included).
    #[error("{0}")]
    CommandLine(#[source] clap::Error),
    /// The command line parses but asks for something that cannot be done.
    #[error("{0}")]
    Usage(String),
    /// Spec files with errors, one [`SpecErrors`] per file, each a rustc-style frame per problem.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Spec(Vec<SpecErrors>),
    /// `plan --from` or `plan --profile` named a source that gives no estimate.
    #[error(transparent)]
    Estimate(#[from] EstimateError),
    /// The tokio runtime a command needs could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A run could not start or go on (an unusable host, an unwritable run directory, ...).
    #[error(transparent)]
    Run(#[from] RunError),
    /// A run directory named on the command line is not one (or its records do not read).
    #[error(transparent)]
    OpenRun(RunDirError),
    /// A run directory's records could not be read while checking it.
    #[error(transparent)]
    ReadRun(RunDirError),
    /// `run --check` could not read back the run it just wrote.
    #[error("cannot check the run: {0}")]
    CheckRun(#[source] RunDirError),
    /// A run finished, but its report could not be rendered; the data is on disk. Said after
    /// the run's outcome, not instead of it: `run` goes on (to `--check`) and exits 1.
    #[error(
        "the report could not be rendered: {source}\n(the data is on disk; {} and run `servebench report {}`)",
        if matches!(source, ReportError::Template { .. } | ReportError::ReadTemplate { .. }) {
            "fix the template"
        } else {
            "fix that"
        },
        .dir.display()
    )]
    RunReport {
        dir: PathBuf,
        #[source]
        source: ReportError,
    },
    /// A report or comparison could not be rendered or written.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// `compare --template FILE` cannot be read.
    #[error("{}: cannot read the compare template: {source}", .path.display())]
    CompareTemplate {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An output file named on the command line cannot be written.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `history --db` could not get its history from the database (down, refusing the
    /// login, a newer schema, a damaged row): nothing is built from part of it.
    #[error(transparent)]
    HistoryDb(#[from] servebench_report::history::db::DbError),
    /// `mlflow` could not log the run (a server down or refusing, a run directory that is
    /// not one); the run directory is untouched.
    #[error(transparent)]
    Mlflow(#[from] crate::mlflow::MlflowError),
    /// `down` could not read the run directory or reach its host.
    #[error(transparent)]
    Down(#[from] crate::run::down::DownError),
    /// `import` could not read another tool's files or write the run.
    #[error(transparent)]
    Import(#[from] servebench_report::report::import::ImportError),
}

impl Error {
    /// The exit code this error ends the process with (see [`crate::exit`]).
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Error::CommandLine(_)
            | Error::Usage(_)
            | Error::Spec(_)
            | Error::Estimate(_)
            | Error::Run(RunError::Preflight(_) | RunError::Host(_) | RunError::Resume(_))
            | Error::OpenRun(_)
            | Error::Mlflow(
                crate::mlflow::MlflowError::Uri { .. } | crate::mlflow::MlflowError::Run(_),
            )
            | Error::Import(_)
            | Error::CompareTemplate { .. } => exit::BAD_INPUT,
            Error::Runtime(_)
            | Error::Run(_)
            | Error::ReadRun(_)
            | Error::CheckRun(_)
            | Error::RunReport { .. }
            | Error::Report(_)
            | Error::Write { .. }
            | Error::HistoryDb(_)
            | Error::Mlflow(_)
            | Error::Down(_) => exit::FAILED,
        }
    }

    /// Prints the error to stderr the one way errors reach the user: `error: ` and the message,
    /// except where the text brings its own header.
    pub(crate) fn print(&self) {
        match self {
            // clap writes (and on a terminal colours) its own `error: ...` with the usage.
            Error::CommandLine(e) => {
                let _ = e.print();
            }
            // Every diagnostic is a frame that starts with its own `error: `.
            Error::Spec(_) => console::errln(&self.to_string()),
            // `plan` has always named itself here.
            Error::Estimate(_) => console::errln(&format!("servebench plan: error: {self}")),
            _ => console::errln(&format!("error: {self}")),
        }
    }
}

impl From<SpecErrors> for Error {
    fn from(e: SpecErrors) -> Error {
        Error::Spec(vec![e])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_exits_2_and_failures_exit_1() {
        let io = || std::io::Error::other("boom");
        let not_a_run = || RunDirError::NotARunDir { path: "x".into() };
        for e in [
            Error::Usage("u".into()),
            Error::Spec(vec![SpecErrors::file_error("s.yaml", "bad", None)]),
            Error::Run(RunError::Preflight(vec![crate::run::Preflight::NoPoints])),
            Error::OpenRun(not_a_run()),
            Error::CompareTemplate {
                path: "t".into(),
                source: io(),
            },
            Error::Estimate(EstimateError::NoModel {
                group: "g1".into(),
                external: true,
            }),
        ] {
            assert_eq!(e.exit_code(), exit::BAD_INPUT, "{e:?}");
        }
        for e in [
            Error::Runtime(io()),
            Error::Run(RunError::Write {
                what: "meta.json".into(),
                source: io(),
            }),
            Error::ReadRun(not_a_run()),
            Error::CheckRun(not_a_run()),
            Error::Write {
                path: "out.md".into(),
                source: io(),
            },
            Error::Down(crate::run::down::DownError::Host(
                crate::host::HostError::Unsupported("d".into()),
            )),
            Error::RunReport {
                dir: "runs/x".into(),
                source: ReportError::Template {
                    name: "t".into(),
                    line: None,
                    message: "m".into(),
                },
            },
        ] {
            assert_eq!(e.exit_code(), exit::FAILED, "{e:?}");
        }
        assert_eq!(Status::Success.exit_code(), exit::OK);
        assert_eq!(Status::Failed.exit_code(), exit::FAILED);
        assert_eq!(Status::Success.max(Status::Failed), Status::Failed);
    }

    #[test]
    fn spec_errors_of_several_files_read_as_printed_one_after_another() {
        let a = SpecErrors::file_error("a.yaml", "first", None);
        let b = SpecErrors::file_error("b.yaml", "second", None);
        let both = Error::Spec(vec![a.clone(), b.clone()]).to_string();
        assert_eq!(both, format!("{a}\n{b}"));
    }
}
