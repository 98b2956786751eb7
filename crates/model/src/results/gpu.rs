//! GPU telemetry: each reading of the server's GPUs taken while a point ran (`gpu.jsonl`) and
//! what the point's record keeps of them (`PointRecord::gpu`).

use serde::{Deserialize, Serialize};

/// One reading of every GPU of the host, a line of `gpu.jsonl` (nvidia-smi prints one line per
/// GPU each interval; lines of the same interval are grouped by their arrival).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// The point's id.
    pub point: String,
    /// The round within the point.
    pub round: u32,
    /// Unix seconds when the reading arrived.
    pub t: f64,
    /// One reading per GPU.
    pub gpus: Vec<GpuReading>,
    /// Set on the line that says `gpu.jsonl` reached its budget (no reading after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
}

/// What nvidia-smi said of one GPU. A field it answered `[N/A]` or `[Not Supported]` for is
/// absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    /// nvidia-smi's index of the GPU.
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The product name, e.g. `NVIDIA H200`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Memory in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mib: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_free_mib: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_mib: Option<f64>,
    /// Clocks in MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_mhz: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_mhz: Option<f64>,
    /// GPU utilisation, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_pct: Option<f64>,
    /// Power draw and limit, watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    /// Temperature, °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp_c: Option<f64>,
    /// The active clock event (throttle) reasons, NVML's bitmask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<u64>,
}

/// What a point's GPU telemetry came to, over its measured window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuView {
    /// The host the GPUs are on (`local`, the SSH host's name).
    pub host: String,
    /// What read them: `nvidia-smi`, `amd-smi` or `dcgm` (a DCGM exporter); None in runs
    /// written before it was recorded, and where no sampler ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Why there is no telemetry (`nvidia-smi not found on local`); None when it was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// What the readings leave out, in words (a multi-node server's other nodes); None when
    /// they cover the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
    /// Readings (lines of `gpu.jsonl`) taken during the point, and of those inside the
    /// measured window.
    pub samples: usize,
    pub in_window: usize,
    /// GPUs seen.
    pub gpus: usize,
    /// The smallest free memory any GPU had during the point, MiB; which GPU and when (unix
    /// seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_mib: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_gpu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_at: Option<f64>,
    /// Throttle reasons other than idle seen inside the measured window, in words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttle_reasons: Vec<String>,
    /// Joules drawn by all GPUs over the measured window (trapezoids over the readings inside
    /// it); None with fewer than two readings with power inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// Seconds the energy was integrated over (first to last reading inside the window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_span_s: Option<f64>,
    /// Seconds of measured window (the rounds' windows summed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// The last reading before the point ended (what a point that failed saw last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<GpuSample>,
}
