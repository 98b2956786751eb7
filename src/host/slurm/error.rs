//! Why a Slurm command could not do what was asked.

use std::time::Duration;

use crate::host::ssh::error::SshError;

/// The longest a Slurm command may take (slurmctld answers in milliseconds; a hung one must
/// not hang the run).
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a Slurm command could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error(
        "Slurm's `{program}` cannot be run ({source}): servebench runs Slurm's commands on this machine, or on host.slurm.login over SSH when set: run it on a node that can submit jobs, set host.slurm.login to one, or install the client (apt-get install -y slurm-client)"
    )]
    Missing {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run Slurm's commands on the login node {host}: {source}")]
    Login {
        host: String,
        #[source]
        source: Box<SshError>,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("`{command}` did not answer within {} s", COMMAND_TIMEOUT.as_secs())]
    Timeout { command: String },
    #[error("`{command}` printed what servebench cannot read: {text}")]
    Unreadable { command: String, text: String },
}
