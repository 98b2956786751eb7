//! How a run fails before anything could be recorded: the run directory, bad input found by the
//! checks before anything starts, a host that cannot be used, a run that cannot be resumed.

use std::path::PathBuf;

/// Failures before anything could be recorded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error("cannot create the run directory under {out}: {source}")]
    CreateDir { out: String, source: std::io::Error },
    #[error("cannot write {what}: {source}")]
    Write {
        what: String,
        source: std::io::Error,
    },
    /// Checks before anything ran found bad input (prompt files, templates): every problem,
    /// one per line.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Preflight(Vec<Preflight>),
    /// The SSH host cannot be used (unreachable, refused, an unknown host key).
    #[error("cannot use the host: {0}")]
    Host(#[source] crate::host::HostError),
    /// `run --resume` cannot continue the run it was given.
    #[error("{0}")]
    Resume(#[from] ResumeError),
    /// The server's URL cannot be used by the client.
    #[error(transparent)]
    Client(#[from] crate::client::ClientError),
}

/// A problem found before anything starts.
#[derive(Debug, PartialEq, thiserror::Error)]
pub(crate) enum Preflight {
    #[error("the spec expands to no points")]
    NoPoints,
    #[error("{0}")]
    Prompt(String),
    #[error(
        "report.template {} does not exist (use a built-in template: {builtins}; or a path relative to the spec)",
        .path.display()
    )]
    MissingTemplate { path: PathBuf, builtins: String },
    /// A multi-node server the pool or the engine cannot run.
    #[error("{0}")]
    Nodes(String),
}

/// Why a run cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResumeError {
    #[error(transparent)]
    RunDir(#[from] servebench_model::results::RunDirError),
    #[error("cannot read the run's spec.yaml: {0}")]
    SpecCopy(#[source] std::io::Error),
    #[error(
        "{spec} changed since the run started and the run's copy has redacted secrets; restore the spec file to resume"
    )]
    Redacted { spec: String },
    #[error("the run's spec no longer loads:\n{0}")]
    Invalid(#[source] servebench_model::spec::SpecErrors),
}
