//! The failure catalogue: why a server could not serve a point, as recorded on the point
//! (`failure`) and named by `expect: failure:`.

/// Why a server failed during (or before) a point. Classified from its log by the engine's
/// adapter, or from how the wait for it ended.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::Display, strum::EnumIter,
)]
#[strum(serialize_all = "kebab-case")]
pub enum Failure {
    /// Out of (GPU) memory while serving.
    OutOfMemory,
    /// The KV cache pool did not fit at start-up.
    KvPoolTooSmall,
    /// The port was taken.
    PortInUse,
    /// The model path or repository does not exist (or cannot be read).
    ModelNotFound,
    /// The server rejected its arguments or could not import a module.
    StartupError,
    /// Not ready within `server.ready_timeout`.
    ReadyTimeout,
    /// The server exited for a reason its log does not tell.
    Unknown,
    /// Slurm ended the job at its time limit (`JobState=TIMEOUT`).
    TimeLimit,
    /// Slurm preempted the job for another (`PREEMPTED`).
    Preempted,
    /// A node of the allocation failed (`NODE_FAIL`).
    NodeFailure,
    /// Slurm's memory enforcement killed the server (`OUT_OF_MEMORY`, an oom_kill event).
    OomKilled,
    /// The job was cancelled by someone else (`scancel`, an administrator).
    JobCancelled,
    /// A rank of a multi-node server lost another rank (it died, or the network between
    /// them broke): the whole server stops.
    RankLost,
    /// A signal ended the server (SIGKILL: the kernel's OOM killer, a `kill -9`) and its log
    /// says nothing of why.
    Killed,
    /// A server servebench did not start (`url:`) stopped answering: nothing listens at its
    /// address any more.
    Lost,
}

impl Failure {
    /// Every cause's name, in catalogue order.
    pub(crate) fn names() -> impl Iterator<Item = &'static str> {
        <Failure as strum::IntoEnumIterator>::iter().map(Failure::name)
    }

    /// The kebab-case name points and specs use.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The name, as the crash classifier has always called it.
    pub fn label(&self) -> &'static str {
        (*self).into()
    }

    /// What it means and what to try.
    pub fn explain(&self) -> &'static str {
        match self {
            Failure::OutOfMemory => {
                "CUDA out of memory while serving: lower --mem-fraction-static, or use a smaller --chunked-prefill-size"
            }
            Failure::KvPoolTooSmall => {
                "not enough memory for the KV cache pool at start-up: increase --mem-fraction-static"
            }
            Failure::PortInUse => "the port is already in use: omit server.port to pick a free one",
            Failure::ModelNotFound => "the model was not found: check server.model",
            Failure::StartupError => {
                "the server rejected its arguments or could not import a module"
            }
            Failure::ReadyTimeout => "the server was not ready in time: raise server.ready_timeout",
            Failure::Unknown => "the server exited; see the log excerpt",
            Failure::TimeLimit => {
                "Slurm ended the job at its time limit: raise host.slurm.time, or measure fewer points per group"
            }
            Failure::Preempted => {
                "Slurm preempted the job for another: use a partition or qos that is not preemptible, then `run --resume`"
            }
            Failure::NodeFailure => {
                "a node of the Slurm allocation failed: `run --resume` measures the rest on a new allocation"
            }
            Failure::OomKilled => {
                "Slurm's memory limit killed the server: ask for more memory (host.slurm.sbatch: [\"--mem=0\"])"
            }
            Failure::JobCancelled => {
                "the Slurm job was cancelled from outside servebench (scancel); `run --resume` measures the rest"
            }
            Failure::RankLost => {
                "a rank of the multi-node server lost another rank: read the failed rank's log excerpt (its host, its GPUs, the network between the nodes)"
            }
            Failure::Killed => {
                "a signal killed the server and its log does not say why: the kernel's OOM killer (see `dmesg`) or someone's `kill`; `run --resume` measures the rest"
            }
            Failure::Lost => {
                "the server at `server.url` stopped answering (servebench did not start it, so it cannot restart it): start it again, then `run --resume`"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_recorded_ones() {
        let names: Vec<&str> = Failure::names().collect();
        assert_eq!(
            names,
            [
                "out-of-memory",
                "kv-pool-too-small",
                "port-in-use",
                "model-not-found",
                "startup-error",
                "ready-timeout",
                "unknown",
                "time-limit",
                "preempted",
                "node-failure",
                "oom-killed",
                "job-cancelled",
                "rank-lost",
                "killed",
                "lost"
            ]
        );
    }
}
