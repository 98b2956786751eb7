//! Why a host could not do what was asked: the one error every host kind returns, wrapping the
//! SSH layer's and Slurm's own.

/// Why a host could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostError {
    /// The SSH layer failed (connection, authentication, a remote command).
    #[error(transparent)]
    Ssh(#[from] super::ssh::error::SshError),
    /// A local system call or file operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The requested port is taken.
    #[error(
        "port {port} is already in use on {host}: stop what listens there, or omit server.port to pick a free one"
    )]
    PortInUse { port: u16, host: String },
    /// Something the host cannot do, with the reason.
    #[error("{0}")]
    Unsupported(String),
    /// A Slurm command failed (or is missing).
    #[error(transparent)]
    Slurm(#[from] super::slurm::error::SlurmError),
    /// A small file was not read, or a directory not listed (see `small_file`).
    #[error(transparent)]
    File(#[from] super::small_file::FileRefused),
    /// A step inside the Slurm allocation was asked for while no allocation runs.
    #[error("no allocation is running for the {what} step")]
    NoAllocation { what: String },
    /// The run was interrupted while the host waited (for a Slurm allocation).
    #[error("interrupted while waiting for the host")]
    Interrupted,
}

impl HostError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> HostError {
        HostError::Io {
            what: what.into(),
            source,
        }
    }
}
