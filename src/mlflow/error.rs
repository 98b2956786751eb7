//! Why a run could not be logged to MLflow, and the environment variables its credentials
//! come from (named in the messages).

use servebench_model::results::rundir::RunDirError;

/// The environment variables MLflow's own client reads for credentials.
pub(super) const TOKEN_ENV: &str = "MLFLOW_TRACKING_TOKEN";
pub(super) const USER_ENV: &str = "MLFLOW_TRACKING_USERNAME";
pub(super) const PASSWORD_ENV: &str = "MLFLOW_TRACKING_PASSWORD";

/// Why a run could not be logged. The run directory is untouched whatever happens.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MlflowError {
    #[error("the MLflow tracking URI `{uri}` cannot be used: {reason}")]
    Uri { uri: String, reason: String },
    #[error(transparent)]
    Run(#[from] RunDirError),
    #[error("the MLflow server at {server} did not answer {call}: {message}")]
    Unreachable {
        server: String,
        call: String,
        message: String,
    },
    #[error(
        "the MLflow server at {server} refused {call}: HTTP {status}{}{}{}",
        if code.is_empty() { String::new() } else { format!(" {code}") },
        if message.is_empty() { String::new() } else { format!(": {message}") },
        if matches!(status, 401 | 403) {
            format!(" (servebench sends {TOKEN_ENV} as a bearer token, or {USER_ENV} and {PASSWORD_ENV} as basic credentials, from the environment)")
        } else {
            String::new()
        }
    )]
    Refused {
        server: String,
        call: String,
        status: u16,
        /// MLflow's `error_code` (empty when the answer had none).
        code: String,
        message: String,
    },
    #[error(
        "the server at {server} answered {call} with HTTP {status} and not MLflow's JSON: {body}"
    )]
    NotMlflow {
        server: String,
        call: String,
        status: u16,
        body: String,
    },
    #[error(
        "the MLflow experiment `{name}` on {server} is deleted: restore it or name another with --experiment"
    )]
    DeletedExperiment { server: String, name: String },
}
