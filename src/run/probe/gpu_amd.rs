//! AMD GPUs through `amd-smi metric --json`, run once per interval as an argument vector
//! (never a shell), its JSON read into the same readings nvidia-smi gives. Older amd-smi
//! prints a list of GPUs, newer ones `{"gpu_data": [...]}`; each value is
//! `{"value": N, "unit": "..."}`, a bare number, or `"N/A"` (absent). What amd-smi has no
//! counterpart for (nvidia-smi's clock event bitmask: amd-smi's throttle status is not
//! NVML's bits) or does not print in `metric` (the product name, the UUID) is absent.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use servebench_model::results::gpu::GpuReading;

use super::gpu_error::{AmdError, AmdParseError};

/// The argument vector.
pub(crate) const ARGS: [&str; 2] = ["metric", "--json"];
/// The most bytes read of one run's output (8 MI300X print about 40 KB); beyond it the
/// reading is refused, not cut.
const MAX_OUTPUT: usize = 4 << 20;
/// The most bytes of its stderr kept for a message.
const MAX_ERR: usize = 4096;
/// The most GPUs one reading holds.
const MAX_GPUS: usize = 256;

/// Runs `program metric --json` once, within `timeout`; the GPUs it printed, or why none.
pub(crate) async fn read(program: &Path, timeout: Duration) -> Result<Vec<GpuReading>, AmdError> {
    let name = program.display().to_string();
    let run = async {
        let mut child = tokio::process::Command::new(program)
            .args(ARGS)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // Dropped (the round ended, the timeout passed): killed, never left behind.
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| AmdError::Start {
                program: name.clone(),
                source,
            })?;
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let (out, err) = tokio::join!(bounded(out, MAX_OUTPUT), bounded(err, MAX_ERR));
        let status = child.wait().await.map_err(|source| AmdError::Wait {
            program: name.clone(),
            source,
        })?;
        let (out, over) = out;
        if over {
            return Err(AmdError::TooMuch {
                program: name.clone(),
                max: MAX_OUTPUT,
            });
        }
        let text = String::from_utf8_lossy(&out);
        parse(&text).map_err(|e| {
            let err = String::from_utf8_lossy(&err.0).trim().to_string();
            let why = if err.is_empty() { e.to_string() } else { err };
            AmdError::NoReading {
                program: name.clone(),
                outcome: if status.success() {
                    "gave no reading".to_string()
                } else {
                    format!("failed ({status})")
                },
                why: servebench_model::text::truncate(&why, 200).to_string(),
            }
        })
    };
    tokio::time::timeout(timeout, run)
        .await
        .unwrap_or_else(|_| {
            Err(AmdError::Timeout {
                program: name.clone(),
                timeout,
            })
        })
}

/// Up to `max` bytes of `r`, the rest drained (a full pipe would stop the child); whether
/// there was more.
async fn bounded(r: Option<impl AsyncRead + Unpin>, max: usize) -> (Vec<u8>, bool) {
    let (mut kept, mut over, mut buf) = (Vec::new(), false, [0u8; 8192]);
    let Some(mut r) = r else {
        return (kept, over);
    };
    while let Ok(n) = r.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = max.saturating_sub(kept.len()).min(n);
        over |= room < n;
        kept.extend_from_slice(&buf[..room]);
    }
    (kept, over)
}

/// The GPUs of one `amd-smi metric --json` output, in index order; Err when it holds no JSON
/// list of GPUs. Lines before the JSON (amd-smi's warnings) are skipped.
pub(crate) fn parse(text: &str) -> Result<Vec<GpuReading>, AmdParseError> {
    // The JSON starts the first line that opens a list or an object (a warning may hold
    // brackets of its own).
    let mut offset = 0;
    let mut start = None;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with(['[', '{']) {
            start = Some(offset);
            break;
        }
        offset += line.len();
    }
    let start = start.ok_or(AmdParseError::NoJson)?;
    let v: Value = serde_json::from_str(text[start..].trim()).map_err(AmdParseError::NotJson)?;
    let list = match &v {
        Value::Array(a) => a.as_slice(),
        Value::Object(o) => match o.get("gpu_data") {
            Some(Value::Array(a)) => a.as_slice(),
            _ if o.contains_key("gpu") => std::slice::from_ref(&v),
            _ => return Err(AmdParseError::NoGpuData),
        },
        _ => return Err(AmdParseError::NotAList),
    };
    let mut gpus: Vec<GpuReading> = list.iter().filter_map(reading).take(MAX_GPUS).collect();
    gpus.sort_by_key(|g| g.index);
    Ok(gpus)
}

fn reading(g: &Value) -> Option<GpuReading> {
    let index = u32::try_from(g.get("gpu")?.as_u64()?).ok()?;
    let at = |path: &[&str]| path.iter().try_fold(g, |v, k| v.get(k));
    let first = |paths: &[&[&str]]| paths.iter().find_map(|p| at(p).and_then(amount));
    let mib = |key: &str| at(&["mem_usage", key]).and_then(amount).and_then(to_mib);
    let plain = |paths: &[&[&str]]| first(paths).map(|(v, _)| v);
    let power = first(&[
        &["power", "socket_power"],
        &["power", "average_socket_power"],
        &["power", "current_socket_power"],
    ])
    .map(|(v, unit)| if unit == Some("mW") { v / 1000.0 } else { v });
    Some(GpuReading {
        index,
        memory_used_mib: mib("used_vram"),
        memory_free_mib: mib("free_vram"),
        memory_total_mib: mib("total_vram"),
        // An MI300's eight compute dies each have a clock; the first stands for the GPU.
        sm_mhz: plain(&[&["clock", "gfx_0", "clk"], &["clock", "gfx", "clk"]]),
        mem_mhz: plain(&[&["clock", "mem_0", "clk"], &["clock", "mem", "clk"]]),
        util_pct: plain(&[&["usage", "gfx_activity"]]),
        power_w: power,
        // The hottest point first: an MI300 has no edge sensor.
        temp_c: plain(&[&["temperature", "hotspot"], &["temperature", "edge"]]),
        ..GpuReading::default()
    })
}

/// A number and its unit: `{"value": N, "unit": "MB"}`, a bare number, or a numeric string;
/// None for `"N/A"` and the like.
fn amount(v: &Value) -> Option<(f64, Option<&str>)> {
    let (value, unit) = match v {
        Value::Object(o) => (o.get("value")?, o.get("unit").and_then(Value::as_str)),
        other => (other, None),
    };
    let n = match value {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    n.is_finite().then_some((n, unit))
}

/// amd-smi's memory in MiB: its `MB` are bytes / 2^20.
fn to_mib((v, unit): (f64, Option<&str>)) -> Option<f64> {
    let scale = match unit.unwrap_or("MB") {
        "B" => 1.0 / (1024.0 * 1024.0),
        "KB" | "KiB" => 1.0 / 1024.0,
        "MB" | "MiB" => 1.0,
        "GB" | "GiB" => 1024.0,
        _ => return None,
    };
    Some(v * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// amd-smi 25.x (ROCm 6.4) on two MI300X, trimmed to the sections read and a few beside:
    /// the `gpu_data` wrapper, values with units, `N/A`, eight gfx clocks.
    const NEW: &str = r#"{
  "gpu_data": [
    {
      "gpu": 1,
      "usage": {"gfx_activity": {"value": 0, "unit": "%"}, "umc_activity": {"value": 0, "unit": "%"}},
      "power": {"socket_power": {"value": 141, "unit": "W"}, "gfx_voltage": "N/A", "throttle_status": "UNTHROTTLED"},
      "clock": {"gfx_0": {"clk": {"value": 132, "unit": "MHz"}}, "mem_0": {"clk": {"value": 900, "unit": "MHz"}}},
      "temperature": {"edge": "N/A", "hotspot": {"value": 38, "unit": "C"}, "mem": {"value": 33, "unit": "C"}},
      "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "used_vram": {"value": 283, "unit": "MB"}, "free_vram": {"value": 196309, "unit": "MB"}}
    },
    {
      "gpu": 0,
      "usage": {"gfx_activity": {"value": 87, "unit": "%"}},
      "power": {"socket_power": {"value": 542, "unit": "W"}},
      "clock": {"gfx_0": {"clk": {"value": 2100, "unit": "MHz"}}, "gfx_1": {"clk": {"value": 2090, "unit": "MHz"}}, "mem_0": {"clk": {"value": 1300, "unit": "MHz"}}},
      "temperature": {"edge": "N/A", "hotspot": {"value": 71, "unit": "C"}},
      "mem_usage": {"total_vram": {"value": 192, "unit": "GB"}, "used_vram": {"value": 121344, "unit": "MB"}, "free_vram": "N/A"}
    }
  ]
}"#;

    #[test]
    fn amd_smi_json_becomes_readings_in_index_order() {
        let gpus = parse(NEW).unwrap();
        assert_eq!(gpus.len(), 2);
        let (g0, g1) = (&gpus[0], &gpus[1]);
        assert_eq!(g0.index, 0);
        assert_eq!(g0.power_w, Some(542.0));
        assert_eq!(g0.sm_mhz, Some(2100.0));
        assert_eq!(g0.mem_mhz, Some(1300.0));
        assert_eq!(g0.util_pct, Some(87.0));
        assert_eq!(g0.temp_c, Some(71.0));
        assert_eq!(g0.memory_used_mib, Some(121344.0));
        assert_eq!(g0.memory_total_mib, Some(192.0 * 1024.0));
        assert_eq!(g0.memory_free_mib, None, "N/A is absent");
        assert_eq!(g1.memory_free_mib, Some(196309.0));
        assert_eq!(g1.power_w, Some(141.0));
        // No counterpart in amd-smi's metric output: absent, never 0.
        assert_eq!(g1.throttle, None);
        assert_eq!(g1.name, None);
        assert_eq!(g1.power_limit_w, None);
    }

    #[test]
    fn the_older_list_form_and_its_warnings_are_read() {
        let text = "WARNING: [render, video] groups missing: {uid 1000}\n\
            [{\"gpu\": 0, \"power\": {\"average_socket_power\": 90}, \
            \"temperature\": {\"edge\": {\"value\": 30, \"unit\": \"C\"}}, \
            \"mem_usage\": {\"used_vram\": {\"value\": 1073741824, \"unit\": \"B\"}}}]";
        let gpus = parse(text).unwrap();
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].power_w, Some(90.0));
        assert_eq!(gpus[0].temp_c, Some(30.0));
        assert_eq!(gpus[0].memory_used_mib, Some(1024.0));
        assert!(parse("ERROR: no AMD GPU found").is_err());
        assert!(parse("{\"other\": 1}").is_err());
        assert!(parse("[{\"no_index\": 1}]").unwrap().is_empty());
    }
}
