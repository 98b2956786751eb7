//! How starting or watching a group's server fails, and how long a server is given to stop:
//! shared by a one-host server (`server`) and a multi-node one (`ranks`).

use std::time::Duration;

use crate::engine;
use crate::host::HostError;

/// Grace period between SIGTERM and SIGKILL when stopping a server.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);

/// Why a server could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServerError {
    #[error("cannot start the server: {0}")]
    Spawn(#[from] HostError),
    #[error("cannot start the server: {0}")]
    Config(String),
    #[error("cannot start the server: {0}")]
    Launch(#[from] engine::LaunchError),
    #[error(
        "the server exited before it was ready ({cause}): {hint}\n--- last lines of {log} ---\n{tail}"
    )]
    DiedAtStart {
        cause: String,
        hint: String,
        log: String,
        tail: String,
    },
    #[error(
        "the server was not ready after {} (no 200 from /health); raise server.ready_timeout or read {log}\n--- last lines ---\n{tail}",
        servebench_model::text::duration(.timeout.as_secs_f64())
    )]
    NotReady {
        timeout: Duration,
        log: String,
        tail: String,
    },
    #[error("the server at {url} does not answer /health: {message}")]
    ExternalDown { url: String, message: String },
    #[error("interrupted while waiting for the server")]
    Interrupted,
}

impl ServerError {
    /// The crash class, when the server itself failed (for expectations and the report).
    pub(crate) fn cause_label(&self) -> Option<String> {
        match self {
            ServerError::DiedAtStart { cause, .. } => Some(cause.clone()),
            ServerError::NotReady { .. } => Some(
                servebench_model::catalog::Failure::ReadyTimeout
                    .name()
                    .into(),
            ),
            _ => None,
        }
    }
}
