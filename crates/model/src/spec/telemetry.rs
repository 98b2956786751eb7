//! What a spec asks of the GPUs beside the server: telemetry sampled during every point
//! (`telemetry:`) and the price of a GPU-hour the report turns into a cost per token (`cost:`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::patterns::DURATION_PATTERN;

/// How the GPUs of the server's host are watched while each point runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySpec {
    /// `auto` (the default): sample with `nvidia-smi` when the host has it, and say in the
    /// report that there is no GPU telemetry when it has not. `nvidia-smi`: the same, but a
    /// host without it is named in the report as a failure to sample. `off`: no sampling.
    #[serde(default)]
    pub gpu: GpuTelemetry,
    /// How often the GPUs are read (nvidia-smi's `-lms`), e.g. `200ms`, `1s`; 50 ms to 60 s.
    #[serde(default = "default_interval", with = "humantime_serde")]
    #[schemars(with = "String", regex(pattern = DURATION_PATTERN))]
    pub interval: std::time::Duration,
    /// Free GPU memory at or below this many GiB during a point raises `gpu-memory-tight`.
    #[serde(default = "default_margin_gib")]
    #[schemars(range(min = 0.0, max = 1024.0))]
    pub memory_margin_gib: f64,
}

impl Default for TelemetrySpec {
    fn default() -> Self {
        TelemetrySpec {
            gpu: GpuTelemetry::default(),
            interval: default_interval(),
            memory_margin_gib: default_margin_gib(),
        }
    }
}

/// Which GPU sampler runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GpuTelemetry {
    /// `nvidia-smi` when the host has it; nothing otherwise.
    #[default]
    Auto,
    /// Not sampled.
    Off,
    /// `nvidia-smi`, expected on the host.
    NvidiaSmi,
}

/// What the GPUs cost, for a cost per million tokens at each point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CostSpec {
    /// Dollars per GPU-hour.
    #[schemars(range(min = 0.0, max = 100000.0))]
    pub gpu_hour: f64,
    /// GPUs the server uses; absent: every GPU the telemetry saw on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 4096))]
    pub gpus: Option<u32>,
}

fn default_interval() -> std::time::Duration {
    std::time::Duration::from_millis(200)
}

fn default_margin_gib() -> f64 {
    1.0
}
