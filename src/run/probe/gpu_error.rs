//! Why a polled GPU source gave no reading (amd-smi run and read, a DCGM exporter scraped):
//! one type for both readers and the sampler that polls them (a file of its own, so neither
//! reader names the sampler).

use std::time::Duration;

/// Why a reading of a polled GPU source failed; the message is what the report says.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("nvidia-smi is not polled")]
    NotPolled,
    #[error(transparent)]
    Amd(#[from] AmdError),
    #[error(transparent)]
    Dcgm(#[from] DcgmError),
}

/// Why `amd-smi metric --json` gave no reading.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AmdError {
    #[error("cannot start {program}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("{program}: {source}")]
    Wait {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} printed more than {max} bytes")]
    TooMuch { program: String, max: usize },
    /// It ran (`outcome`: gave no reading, or failed with its status) and said `why`.
    #[error("{program} metric --json {outcome}: {why}")]
    NoReading {
        program: String,
        outcome: String,
        why: String,
    },
    #[error("{program} metric --json took longer than {timeout:?}")]
    Timeout { program: String, timeout: Duration },
}

/// Why `amd-smi metric --json` output holds no list of GPUs.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AmdParseError {
    #[error("no JSON in its output")]
    NoJson,
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("no `gpu_data` list")]
    NoGpuData,
    #[error("not a list of GPUs")]
    NotAList,
}

/// Why a DCGM exporter cannot be read, or gave no reading.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DcgmError {
    #[error("`telemetry.dcgm_url` is not a URL: {0}")]
    NotAUrl(String),
    #[error("`telemetry.dcgm_url` has no host")]
    NoHost,
    #[error("`telemetry.dcgm_url` is not an absolute URL; write http://host:9400/metrics")]
    NotAbsolute,
    #[error("`telemetry.dcgm_url` cannot be used: {0}")]
    Unusable(crate::client::ClientError),
    #[error("the DCGM exporter at {url} did not answer: {why}")]
    NoAnswer { url: String, why: String },
    #[error("the DCGM exporter at {url} sent no metrics: {why}")]
    NoMetrics { url: String, why: String },
    #[error("the DCGM exporter at {url} listed no GPU (no DCGM_FI_DEV_ series)")]
    NoGpu { url: String },
}
