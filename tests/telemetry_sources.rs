//! GPU telemetry from the sources beside nvidia-smi (issue 22 item 1): a DCGM exporter's
//! `/metrics`, served here by a fake exporter on a fresh port with known readings for two
//! GPUs, and `amd-smi metric --json`, a fake script on `PATH`. Energy, headroom and throttling
//! are checked by hand against the readings, as `telemetry.rs` does for nvidia-smi.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::*;
use crate::faulty::flag_kinds;
use crate::telemetry::{run, spec, windows};

/// A fake dcgm-exporter: answers every request with `body` (the exporter's Prometheus text)
/// and counts the requests; it serves until the test process ends.
struct FakeExporter {
    port: u16,
    scrapes: Arc<AtomicUsize>,
}

impl FakeExporter {
    fn serve(body: String) -> FakeExporter {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let scrapes = Arc::new(AtomicUsize::new(0));
        let counted = scrapes.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let (body, counted) = (body.clone(), counted.clone());
                std::thread::spawn(move || {
                    // One request per connection: read its head, answer, close.
                    let (mut head, mut b) = (Vec::new(), [0u8; 1024]);
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                        match s.read(&mut b) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&b[..n]),
                        }
                    }
                    let path_ok = head.starts_with(b"GET /metrics ");
                    let (status, body) = if path_ok {
                        counted.fetch_add(1, Ordering::SeqCst);
                        ("200 OK", body)
                    } else {
                        ("404 Not Found", "not found\n".to_string())
                    };
                    let _ = write!(
                        s,
                        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        FakeExporter { port, scrapes }
    }
}

/// The exporter's text for two H200s at `power_w` each, `free_mib` free and the clock event
/// reasons `reasons`, in the shape dcgm-exporter writes (HELP and TYPE lines, its labels).
fn dcgm_text(power_w: f64, free_mib: [f64; 2], reasons: [u64; 2]) -> String {
    let mut t = String::new();
    for (field, help, v) in [
        (
            "DCGM_FI_DEV_SM_CLOCK",
            "SM clock frequency (in MHz).",
            [1980.0; 2],
        ),
        ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", [61.0; 2]),
        (
            "DCGM_FI_DEV_POWER_USAGE",
            "Power draw (in W).",
            [power_w; 2],
        ),
        ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", [90.0; 2]),
        (
            "DCGM_FI_DEV_FB_FREE",
            "Framebuffer memory free (in MiB).",
            free_mib,
        ),
        (
            "DCGM_FI_DEV_FB_USED",
            "Framebuffer memory used (in MiB).",
            free_mib.map(|f| 143_771.0 - f),
        ),
        (
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "Current clock event reasons (bitmask).",
            reasons.map(|r| r as f64),
        ),
    ] {
        t.push_str(&format!("# HELP {field} {help}\n# TYPE {field} gauge\n"));
        for (i, v) in v.iter().enumerate() {
            t.push_str(&format!(
                "{field}{{gpu=\"{i}\",UUID=\"GPU-0000000{i}\",pci_bus_id=\"00000000:0{i}:00.0\",device=\"nvidia{i}\",modelName=\"NVIDIA H200\",Hostname=\"gpu-node\",DCGM_FI_DRIVER_VERSION=\"570.124.06\"}} {v}\n"
            ));
        }
    }
    t
}

/// Item 1: 2 GPUs at a constant 300 W is 600 W, so the windows' W seconds draw exactly
/// 600 x W joules and, at $3.60 per GPU-hour, cost 0.002 W dollars (as for nvidia-smi). GPU 1
/// has 512 MiB free (inside the 1 GiB margin) and a SW power cap (0x4): both flags, with
/// GPU 1 named. The exporter was scraped every interval, from here (the client's place).
#[test]
fn a_dcgm_exporter_gives_energy_headroom_and_throttling() {
    let ws = Workspace::new();
    let exporter = FakeExporter::serve(dcgm_text(300.0, [40_960.0, 512.0], [0x1, 0x4]));
    let spec = spec(
        &ws,
        "gpu-dcgm",
        &format!(
            "telemetry: {{ gpu: dcgm, dcgm_url: \"http://127.0.0.1:{}/metrics\", interval: 100ms }}\ncost: {{ gpu_hour: 3.6 }}\n",
            exporter.port
        ),
    );
    let out = run(&ws, &spec, &no_gpu_programs_path(None));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);

    let readings = read_jsonl(&dir.join("gpu.jsonl"));
    assert!(readings.len() >= 6, "{} readings", readings.len());
    assert!(
        exporter.scrapes.load(Ordering::SeqCst) >= readings.len(),
        "every reading is a scrape"
    );
    for r in &readings {
        let gpus = r["gpus"].as_array().unwrap();
        assert_eq!(gpus.len(), 2, "{r}");
        assert_eq!(gpus[1]["index"], 1, "{r}");
        assert_eq!(gpus[0]["name"], "NVIDIA H200", "{r}");
        assert_eq!(gpus[0]["uuid"], "GPU-00000000", "{r}");
        assert_eq!(gpus[0]["power_w"].as_f64(), Some(300.0), "{r}");
        assert_eq!(gpus[1]["throttle"], 4, "{r}");
        // Not exported: absent, never 0.
        assert!(gpus[0]["power_limit_w"].is_null(), "{r}");
        assert!(gpus[0]["memory_total_mib"].is_null(), "{r}");
    }

    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let gpu = &p["gpu"];
    assert_eq!(gpu["host"], format!("127.0.0.1:{}", exporter.port), "{gpu}");
    assert_eq!(gpu["gpus"], 2, "{gpu}");
    assert_eq!(gpu["min_free_mib"].as_f64(), Some(512.0), "{gpu}");
    assert_eq!(gpu["min_free_gpu"], 1, "{gpu}");
    assert_eq!(gpu["throttle_reasons"][0], "SW power cap", "{gpu}");
    let kinds = flag_kinds(p);
    assert!(kinds.contains(&"gpu-memory-tight".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"gpu-throttled".to_string()), "{kinds:?}");

    let w = windows(&dir);
    let seconds: f64 = w.iter().map(|(a, b, _)| b - a).sum();
    let output: f64 = w.iter().map(|(_, _, o)| o).sum();
    let close = |got: f64, want: f64| (got - want).abs() <= 1e-6 * want.abs();
    let energy = gpu["energy_j"].as_f64().unwrap();
    assert!(
        close(energy, 600.0 * seconds),
        "{energy} J over {seconds} s"
    );
    let metric = |m: &str| p["metrics"][m]["mean"].as_f64().unwrap_or(f64::NAN);
    assert!(close(
        metric("energy_per_output_token_j"),
        600.0 * seconds / output
    ));
    assert!(close(metric("gpu_power_w"), 600.0));
    assert!(close(
        metric("cost_per_m_output_usd"),
        2000.0 * seconds / output
    ));
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## GPU telemetry and cost"), "{report}");
    assert!(report.contains("SW power cap"), "{report}");
    // The report names the sampler used, not nvidia-smi (issue 35 item 13).
    assert_eq!(gpu["source"], "dcgm", "{gpu}");
    assert!(
        report.contains("read from a DCGM exporter's `/metrics`"),
        "{report}"
    );
    assert!(!report.contains("looping mode"), "{report}");
}

/// Item 1: an exporter that does not answer (nothing listens on its port) leaves the point
/// without telemetry, and the report names the URL and the cause; one that answers without a
/// GPU series is named too.
#[test]
fn a_dcgm_exporter_that_does_not_answer_is_named_with_its_cause() {
    let ws = Workspace::new();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{closed}/metrics");
    let spec_down = spec(
        &ws,
        "gpu-dcgm-down",
        &format!("telemetry: {{ gpu: dcgm, dcgm_url: \"{url}\", interval: 100ms }}\n"),
    );
    let out = run(&ws, &spec_down, &no_gpu_programs_path(None));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    assert!(!dir.join("gpu.jsonl").exists());
    let gpu = &read_jsonl(&dir.join("points.jsonl"))[0]["gpu"];
    let missing = gpu["missing"].as_str().unwrap_or_default();
    assert!(
        missing.starts_with(&format!("the DCGM exporter at {url} did not answer: ")),
        "{gpu}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains(&format!("no GPU telemetry: the DCGM exporter at {url}")),
        "{report}"
    );

    let exporter = FakeExporter::serve("up 1\n".into());
    let spec_empty = spec(
        &ws,
        "gpu-dcgm-empty",
        &format!(
            "telemetry: {{ gpu: dcgm, dcgm_url: \"http://127.0.0.1:{}\", interval: 100ms }}\n",
            exporter.port
        ),
    );
    let started = std::time::Instant::now();
    let out = run(&ws, &spec_empty, &no_gpu_programs_path(None));
    let secs = started.elapsed().as_secs_f64();
    assert!(out.status.success(), "{}", show(&out));
    // A failing exporter is asked later and later, not every 100 ms (issue 35 item 13).
    let scrapes = exporter.scrapes.load(Ordering::SeqCst) as f64;
    eprintln!("{scrapes} scrapes in {secs} s");
    assert!(scrapes <= 6.0 + 2.0 * secs, "{scrapes} scrapes in {secs} s");
    let dir = run_dir(&out);
    let gpu = &read_jsonl(&dir.join("points.jsonl"))[0]["gpu"];
    assert!(
        gpu["missing"]
            .as_str()
            .unwrap_or_default()
            .ends_with("listed no GPU (no DCGM_FI_DEV_ series)"),
        "{gpu}"
    );
    assert!(
        exporter.scrapes.load(Ordering::SeqCst) > 0,
        "a URL without a path reads /metrics"
    );
}

/// Writes a fake `amd-smi` into `dir/bin`: it appends its argument vector to `dir/args` and
/// prints amd-smi 25's JSON for two MI300X at `power_w` each with `free_mib` free.
fn fake_amd_smi(dir: &Path, power_w: f64, free_mib: [f64; 2]) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let gpu = |i: usize| {
        format!(
            r#"{{"gpu": {i}, "usage": {{"gfx_activity": {{"value": 88, "unit": "%"}}}}, "power": {{"socket_power": {{"value": {power_w}, "unit": "W"}}, "throttle_status": "UNTHROTTLED"}}, "clock": {{"gfx_0": {{"clk": {{"value": 2100, "unit": "MHz"}}}}, "mem_0": {{"clk": {{"value": 1300, "unit": "MHz"}}}}}}, "temperature": {{"edge": "N/A", "hotspot": {{"value": 70, "unit": "C"}}}}, "mem_usage": {{"total_vram": {{"value": 196592, "unit": "MB"}}, "used_vram": {{"value": {used}, "unit": "MB"}}, "free_vram": {{"value": {free}, "unit": "MB"}}}}}}"#,
            used = 196_592.0 - free_mib[i],
            free = free_mib[i],
        )
    };
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> '{args}'\ncat <<'JSON'\n{{\"gpu_data\": [{g0}, {g1}]}}\nJSON\n",
        args = dir.join("args").display(),
        g0 = gpu(0),
        g1 = gpu(1),
    );
    let path = bin.join("amd-smi");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `PATH` with `first` in front and no directory holding an `nvidia-smi` or `amd-smi`.
fn no_gpu_programs_path(first: Option<&Path>) -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|d| !d.join("nvidia-smi").exists() && !d.join("amd-smi").exists())
        .collect();
    if let Some(f) = first {
        dirs.insert(0, f.to_path_buf());
    }
    std::env::join_paths(dirs)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// Item 2: `amd-smi metric --json` is run every interval (as an argument vector), its two
/// GPUs at 250 W are 500 W, so the windows' W seconds draw 500 x W joules; GPU 0's 800 MiB
/// free is inside the 1 GiB margin. amd-smi's throttle status is not NVML's bitmask: no
/// reason is read, so no point is flagged throttled. A host without amd-smi is named.
#[test]
fn amd_smi_is_polled_for_energy_and_headroom() {
    let ws = Workspace::new();
    let bin = fake_amd_smi(ws.path(), 250.0, [800.0, 100_000.0]);
    let spec_amd = spec(
        &ws,
        "gpu-amd",
        "telemetry: { gpu: amd-smi, interval: 100ms }\n",
    );
    let out = run(&ws, &spec_amd, &no_gpu_programs_path(Some(&bin)));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);

    let args = std::fs::read_to_string(ws.path().join("args")).unwrap();
    let readings = read_jsonl(&dir.join("gpu.jsonl"));
    assert!(readings.len() >= 6, "{} readings", readings.len());
    assert!(args.lines().count() >= readings.len(), "{args}");
    assert!(args.lines().all(|l| l == "metric --json"), "{args}");
    for r in &readings {
        let gpus = r["gpus"].as_array().unwrap();
        assert_eq!(gpus.len(), 2, "{r}");
        assert_eq!(gpus[0]["power_w"].as_f64(), Some(250.0), "{r}");
        assert_eq!(gpus[0]["sm_mhz"].as_f64(), Some(2100.0), "{r}");
        assert_eq!(gpus[0]["temp_c"].as_f64(), Some(70.0), "{r}");
        assert_eq!(gpus[1]["memory_total_mib"].as_f64(), Some(196_592.0), "{r}");
        assert!(gpus[0]["throttle"].is_null(), "{r}");
    }
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let gpu = &p["gpu"];
    assert_eq!(gpu["host"], "local", "{gpu}");
    assert_eq!(gpu["min_free_mib"].as_f64(), Some(800.0), "{gpu}");
    assert_eq!(gpu["min_free_gpu"], 0, "{gpu}");
    let kinds = flag_kinds(p);
    assert!(kinds.contains(&"gpu-memory-tight".to_string()), "{kinds:?}");
    assert!(!kinds.contains(&"gpu-throttled".to_string()), "{kinds:?}");
    let seconds: f64 = windows(&dir).iter().map(|(a, b, _)| b - a).sum();
    let energy = gpu["energy_j"].as_f64().unwrap();
    assert!(
        (energy - 500.0 * seconds).abs() <= 1e-6 * energy,
        "{energy} J over {seconds} s"
    );

    let out = run(&ws, &spec_amd, &no_gpu_programs_path(None));
    assert!(out.status.success(), "{}", show(&out));
    let report = std::fs::read_to_string(run_dir(&out).join("report.md")).unwrap();
    assert!(
        report.contains("no GPU telemetry: amd-smi not found on local"),
        "{report}"
    );
}
