//! What a spec asks of the GPUs beside the server: telemetry sampled during every point
//! (`telemetry:`) and the price of a GPU-hour the report turns into a cost per token (`cost:`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::patterns::DURATION_PATTERN;
use super::validate::{Problem, Target};

/// The shortest and longest interval a sampler reads the GPUs at.
pub const MIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);
pub const MAX_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// How the GPUs of the server's host are watched while each point runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySpec {
    /// `auto` (the default): sample with `nvidia-smi` when the host has it (`amd-smi` when it
    /// has that and no `nvidia-smi`), and say in the report that there is no GPU telemetry
    /// when it has neither. `nvidia-smi`, `amd-smi`: that one, a host without it named in the
    /// report as a failure to sample. `dcgm`: the DCGM exporter at `dcgm_url`. `off`: no
    /// sampling.
    #[serde(default)]
    pub gpu: GpuTelemetry,
    /// The DCGM exporter's metrics URL, e.g. `http://gpu-box:9400/metrics` (a URL without a
    /// path reads `/metrics`); only with `gpu: dcgm`. It is read from where the client runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcgm_url: Option<String>,
    /// How often the GPUs are read (nvidia-smi's `-lms`, amd-smi's and the exporter's polls),
    /// e.g. `200ms`, `1s`; 50 ms to 60 s.
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
            dcgm_url: None,
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
    /// `amd-smi metric --json`, expected on the host, run every interval.
    AmdSmi,
    /// A DCGM exporter's `/metrics` (`telemetry.dcgm_url`), scraped every interval.
    Dcgm,
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

/// What the schema cannot say: the interval's range, a DCGM exporter without its URL (or a
/// URL no sampler reads), and a cost that has no GPU count to charge (no `cost.gpus`, and no
/// telemetry to count them). The URL's own shape is `client::UrlCheck`'s.
pub(crate) fn checks(raw: &serde_json::Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    let telemetry = raw.get("telemetry");
    if let Some(text) = telemetry
        .and_then(|t| t.get("interval"))
        .and_then(|i| i.as_str())
        && let Ok(d) = humantime::parse_duration(text)
        && !(MIN_INTERVAL..=MAX_INTERVAL).contains(&d)
    {
        problems.push(Problem {
            pointer: "/telemetry/interval".into(),
            target: Target::Value,
            message: format!("`telemetry.interval: {text}` is outside 50ms to 60s"),
            hint: Some("nvidia-smi loops at 50 ms at the fastest; e.g. `interval: 200ms`".into()),
        });
    }
    let gpu = telemetry
        .and_then(|t| t.get("gpu"))
        .and_then(|g| g.as_str());
    let url = telemetry
        .and_then(|t| t.get("dcgm_url"))
        .filter(|u| !u.is_null());
    if gpu == Some("dcgm") && url.is_none() {
        problems.push(Problem {
            pointer: "/telemetry/gpu".into(),
            target: Target::Value,
            message: "`telemetry.gpu: dcgm` needs the exporter's URL".into(),
            hint: Some("add `dcgm_url: http://host:9400/metrics` to `telemetry:`".into()),
        });
    }
    if url.is_some() && gpu != Some("dcgm") {
        problems.push(Problem {
            pointer: "/telemetry/dcgm_url".into(),
            target: Target::Key,
            message: format!(
                "`telemetry.dcgm_url` is read only by `gpu: dcgm`, and `gpu` is `{}`",
                gpu.unwrap_or("auto")
            ),
            hint: Some("set `gpu: dcgm` to read the exporter, or remove `dcgm_url`".into()),
        });
    }
    let off = gpu == Some("off");
    if off
        && let Some(cost) = raw.get("cost").and_then(|c| c.as_object())
        && cost.get("gpus").is_none_or(|g| g.is_null())
    {
        problems.push(Problem {
            pointer: "/cost".into(),
            target: Target::Key,
            message: "`cost:` needs the GPUs to charge, and `telemetry.gpu: off` counts none"
                .into(),
            hint: Some("add `gpus: N` to `cost:`, or let the telemetry count them".into()),
        });
    }
    problems
}
