//! GPU telemetry (issue 22 items 1-3) against a fake `nvidia-smi` each test writes: a shell
//! script on `PATH` that prints known readings for two GPUs every `-lms` milliseconds until
//! SIGTERM, so headroom, throttling, energy and cost can be checked by hand.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;
use crate::faulty::{flag_kinds, measured_requests};

/// What the fake prints for each GPU every interval.
pub(crate) struct Readings {
    pub power_w: f64,
    /// Free MiB of GPU 0 and GPU 1.
    pub free_mib: [f64; 2],
    /// The clock event reasons of GPU 0 and GPU 1 (NVML's bitmask).
    pub throttle: [u64; 2],
    /// Refuses `clocks_event_reasons.active` as an old driver does (it knows only the older
    /// `clocks_throttle_reasons.active`).
    pub old_driver: bool,
}

const TOTAL_MIB: f64 = 143_771.0;

/// Writes the fake into `dir/bin/nvidia-smi`; it appends each argument vector to `dir/args`.
pub(crate) fn fake_nvidia_smi(dir: &Path, r: &Readings) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let line = |i: usize| {
        format!(
            "{i}, GPU-0000000{i}, NVIDIA H200, {used}, {free}, {TOTAL_MIB}, 1980, 3201, 90, {p:.2}, 700.00, 61, 0x{t:016x}",
            used = TOTAL_MIB - r.free_mib[i],
            free = r.free_mib[i],
            p = r.power_w,
            t = r.throttle[i],
        )
    };
    let refuse = if r.old_driver {
        "case \"$*\" in *clocks_event_reasons*) echo 'Field \"clocks_event_reasons.active\" is not a valid field to query.' >&2; exit 2;; esac\n"
    } else {
        ""
    };
    let script = format!(
        "#!/bin/sh\n{facts}echo \"$@\" >> '{args}'\n{refuse}ms=1000\nwhile [ $# -gt 0 ]; do\n  case \"$1\" in -lms) ms=$2; shift;; esac\n  shift\ndone\ntrap 'exit 0' TERM\nsecs=$(awk \"BEGIN {{ print $ms / 1000 }}\")\nwhile :; do\n  printf '%s\\n' '{l0}' '{l1}'\n  sleep \"$secs\" & wait $!\ndone\n",
        // The one-off query of the host's facts (meta.json's server_host) is answered and
        // not logged with the sampler's runs.
        facts = "case \"$*\" in *driver_version*) printf '%s\\n' 'NVIDIA H200, 570.86.15, 143771, 700.00' 'NVIDIA H200, 570.86.15, 143771, 700.00'; exit 0;; esac\n",
        args = dir.join("args").display(),
        l0 = line(0),
        l1 = line(1),
    );
    let path = bin.join("nvidia-smi");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// `PATH` with `first` in front (None: without any directory holding an `nvidia-smi`).
pub(crate) fn path_with(first: Option<&Path>) -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|d| !d.join("nvidia-smi").exists())
        .collect();
    if let Some(f) = first {
        dirs.insert(0, f.to_path_buf());
    }
    std::env::join_paths(dirs)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

pub(crate) fn run(ws: &Workspace, spec: &Path, path: &str) -> Output {
    let _turn = exclusive();
    servebench()
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .env("PATH", path)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .expect("run servebench")
}

/// Two rounds of four sequential requests of 200 output tokens on the fast profile: each
/// round's window is a second or so, many 100 ms readings.
pub(crate) fn spec(ws: &Workspace, name: &str, extra: &str) -> PathBuf {
    ws.write(
        &format!("{name}.yaml"),
        &sim_spec(
            name,
            "  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 200",
            &format!("requests: 4\nrepeat: 2\n{extra}"),
        ),
    )
}

/// Each round's measured window (first send to last end, unix seconds) and the output tokens
/// of its successful requests, from `requests.jsonl`, as the summary defines them.
pub(crate) fn windows(dir: &Path) -> Vec<(f64, f64, f64)> {
    let mut by_round: std::collections::BTreeMap<u64, (f64, f64, f64)> = Default::default();
    for r in measured_requests(dir) {
        let sent = r["sent_at"].as_f64().unwrap();
        let begin = r["scheduled_at"].as_f64().unwrap_or(sent).min(sent);
        let w = by_round.entry(r["round"].as_u64().unwrap()).or_insert((
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
        ));
        w.0 = w.0.min(begin);
        if let Some(end) = r["end_s"].as_f64() {
            w.1 = w.1.max(sent + end);
        }
        if r["error"].is_null() {
            w.2 += r["completion_tokens"].as_f64().unwrap();
        }
    }
    by_round.into_values().collect()
}

/// No process still runs the fake (it was stopped with its round).
#[track_caller]
fn assert_no_fake_left(bin: &Path) {
    let fake = bin.join("nvidia-smi").display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd);
        assert!(
            !cmd.contains(&fake),
            "nvidia-smi still runs: {}",
            cmd.replace('\0', " ")
        );
    }
}

/// Item 1-4: constant 300 W on each of 2 GPUs is 600 W, so a window of W seconds draws
/// exactly 600 x W joules (the trapezoids of a constant are exact, and the edges no reading
/// reaches count at the covered mean, 600 W). With O output tokens over both rounds' windows
/// (W1 + W2 seconds): energy per output token = 600 (W1 + W2) / O. At $3.60 per GPU-hour,
/// 2 GPUs for (W1 + W2) s cost 3.6 x 2 x (W1 + W2) / 3600 = 0.002 (W1 + W2) dollars, so per
/// million output tokens 2000 (W1 + W2) / O.
#[test]
fn the_simulator_with_a_fake_nvidia_smi_gets_exact_energy_and_cost_per_token() {
    let ws = Workspace::new();
    let bin = fake_nvidia_smi(
        ws.path(),
        &Readings {
            power_w: 300.0,
            free_mib: [40_960.0, 81_920.0],
            throttle: [0x0, 0x1],
            old_driver: false,
        },
    );
    let spec = spec(
        &ws,
        "gpu-energy",
        "telemetry: { gpu: nvidia-smi, interval: 100ms }\ncost: { gpu_hour: 3.6 }\n",
    );
    let out = run(&ws, &spec, &path_with(Some(&bin)));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    assert_no_fake_left(&bin);

    // nvidia-smi was asked for the fields, in its looping mode at the interval, per round.
    let args = std::fs::read_to_string(ws.path().join("args")).unwrap();
    assert_eq!(args.lines().count(), 2, "{args}");
    assert!(
        args.lines().all(|l| l
            == "--query-gpu=index,uuid,name,memory.used,memory.free,memory.total,clocks.sm,clocks.mem,utilization.gpu,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active --format=csv,noheader,nounits -lms 100"),
        "{args}"
    );

    // The host's facts (meta.json) list each GPU's model, memory, driver and power limit,
    // for a local run as for an SSH host.
    let meta = read_json(&dir.join("meta.json"));
    let gpus = meta["server_host"]["gpus"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", meta["server_host"]));
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0]["name"], "NVIDIA H200");
    assert_eq!(gpus[0]["driver_version"], "570.86.15");
    assert_eq!(gpus[0]["memory_total_mib"], 143771);
    assert_eq!(gpus[0]["power_limit_w"], 700.0);

    // Each point gets its GPUs' power and free memory over time, linked from the report.
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for chart in ["gpu-power-p001.svg", "gpu-memory-p001.svg"] {
        let svg = std::fs::read_to_string(dir.join("charts").join(chart))
            .unwrap_or_else(|e| panic!("{chart}: {e}"));
        assert!(svg.contains("GPU 0") && svg.contains("GPU 1"), "{chart}");
        assert!(
            report.contains(&format!("charts/{chart}")),
            "the report links {chart}"
        );
    }

    // Every reading holds both GPUs, tagged with its point and round.
    let readings = read_jsonl(&dir.join("gpu.jsonl"));
    assert!(readings.len() >= 6, "{} readings", readings.len());
    for r in &readings {
        assert_eq!(r["point"], "p001", "{r}");
        assert_eq!(r["gpus"].as_array().unwrap().len(), 2, "{r}");
        assert_eq!(r["gpus"][0]["power_w"].as_f64(), Some(300.0), "{r}");
        assert_eq!(r["gpus"][0]["name"], "NVIDIA H200", "{r}");
    }
    let rounds: std::collections::BTreeSet<u64> = readings
        .iter()
        .map(|r| r["round"].as_u64().unwrap())
        .collect();
    assert_eq!(rounds.into_iter().collect::<Vec<_>>(), [0, 1]);

    let points = read_jsonl(&dir.join("points.jsonl"));
    let p = &points[0];
    let gpu = &p["gpu"];
    assert_eq!(gpu["gpus"], 2, "{gpu}");
    assert_eq!(gpu["min_free_mib"].as_f64(), Some(40_960.0), "{gpu}");
    assert_eq!(gpu["min_free_gpu"], 0, "{gpu}");
    assert!(
        gpu["throttle_reasons"].is_null(),
        "idle is no throttling: {gpu}"
    );
    let w = windows(&dir);
    assert_eq!(w.len(), 2);
    let seconds: f64 = w.iter().map(|(a, b, _)| b - a).sum();
    let output: f64 = w.iter().map(|(_, _, o)| o).sum();
    assert_eq!(output, 2.0 * 4.0 * 200.0);
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
    assert!(close(metric("energy_per_request_j"), 600.0 * seconds / 8.0));
    assert!(close(metric("gpu_power_w"), 600.0));
    assert!(close(
        metric("cost_per_m_output_usd"),
        2000.0 * seconds / output
    ));
    assert!(close(metric("gpu_memory_free_min_gib"), 40.0));
    let kinds = flag_kinds(p);
    assert!(
        !kinds.iter().any(|k| k.starts_with("gpu-")),
        "no GPU flag: {kinds:?}"
    );

    // The report's section, and the CSV's columns.
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("## GPU telemetry and cost"), "{report}");
    assert!(report.contains("trapezoids between readings"), "{report}");
    assert!(report.contains("Cost = 3.60 $/GPU-hour"), "{report}");
    assert!(!report.contains("no GPU telemetry"), "{report}");
    let csv = std::fs::read_to_string(dir.join("points.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| {
        let i = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} in {header:?}"));
        row[i].parse::<f64>().unwrap()
    };
    assert!(close(
        col("energy_per_output_token_j_mean"),
        600.0 * seconds / output
    ));
    assert!(close(
        col("cost_per_m_output_usd_mean"),
        2000.0 * seconds / output
    ));

    // `compare` shows them (one value per point: shown, not judged).
    let cmp = servebench()
        .arg("compare")
        .arg(&dir)
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&cmp.stdout);
    assert!(text.contains("J/out_tok"), "{}", show(&cmp));
    assert!(text.contains("$/M out"), "{}", show(&cmp));
}

/// Item 2: free memory within the margin raises `gpu-memory-tight`, a power cap inside the
/// window `gpu-throttled`; readings on the safe side of both (and idle, which is no throttling)
/// raise neither. The second fake is an old driver's, which refuses the newer spelling of the
/// reasons' field: the sampler asks again with the older one.
#[test]
fn headroom_and_throttle_flags_follow_the_readings_that_cross_them() {
    let ws = Workspace::new();
    let bin = fake_nvidia_smi(
        ws.path(),
        &Readings {
            power_w: 650.0,
            free_mib: [60_000.0, 512.0],
            throttle: [0x1, 0x4],
            old_driver: false,
        },
    );
    let spec_tight = spec(
        &ws,
        "gpu-tight",
        "telemetry: { gpu: nvidia-smi, interval: 100ms }\n",
    );
    let out = run(&ws, &spec_tight, &path_with(Some(&bin)));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let kinds = flag_kinds(p);
    assert!(kinds.contains(&"gpu-memory-tight".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"gpu-throttled".to_string()), "{kinds:?}");
    assert_eq!(
        p["gpu"]["throttle_reasons"][0], "SW power cap",
        "{}",
        p["gpu"]
    );
    assert_eq!(p["gpu"]["min_free_gpu"], 1);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("SW power cap"), "{report}");

    // 2 GiB free is outside a 1 GiB margin; idle alone is not throttling.
    let ws = Workspace::new();
    let bin = fake_nvidia_smi(
        ws.path(),
        &Readings {
            power_w: 100.0,
            free_mib: [2048.0, 3000.0],
            throttle: [0x1, 0x0],
            old_driver: true,
        },
    );
    let spec_roomy = spec(
        &ws,
        "gpu-roomy",
        "telemetry: { gpu: nvidia-smi, interval: 100ms, memory_margin_gib: 1 }\n",
    );
    let out = run(&ws, &spec_roomy, &path_with(Some(&bin)));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let kinds = flag_kinds(p);
    assert!(!kinds.iter().any(|k| k.starts_with("gpu-")), "{kinds:?}");
    assert_eq!(
        p["gpu"]["min_free_mib"].as_f64(),
        Some(2048.0),
        "{}",
        p["gpu"]
    );
    let args = std::fs::read_to_string(ws.path().join("args")).unwrap();
    assert!(
        args.lines()
            .any(|l| l.contains("clocks_throttle_reasons.active")),
        "{args}"
    );
    assert_no_fake_left(&bin);
}

/// Item 1: a host without nvidia-smi has no telemetry, and the report says so (for
/// `gpu: nvidia-smi`; `auto` on the simulator, which uses no GPU, samples nothing and says
/// nothing).
#[test]
fn a_host_without_nvidia_smi_is_named_in_the_report() {
    let ws = Workspace::new();
    let spec_missing = spec(&ws, "gpu-missing", "telemetry: { gpu: nvidia-smi }\n");
    let out = run(&ws, &spec_missing, &path_with(None));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("no GPU telemetry: nvidia-smi not found on local"),
        "{report}"
    );
    assert!(!dir.join("gpu.jsonl").exists());

    let spec_auto = spec(&ws, "gpu-auto", "");
    let out = run(&ws, &spec_auto, &path_with(None));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(!report.contains("GPU telemetry"), "{report}");
    assert!(read_jsonl(&dir.join("points.jsonl"))[0]["gpu"].is_null());
}

/// A hostile `nvidia-smi` at `dir/bin`: answers the facts query, then runs `body` (sh).
fn hostile_nvidia_smi(dir: &Path, body: &str) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\ncase \"$*\" in *driver_version*) echo 'NVIDIA H200, 570.86.15, 143771, 700.00'; exit 0;; esac\ntrap 'exit 0' TERM\n{body}"
    );
    let path = bin.join("nvidia-smi");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Issue 35 items 11 and 13: a sampler that never prints is named as giving nothing, one that
/// fails after its first reading is said to stop there, readings no GPU can give (-5 MiB free)
/// are left out rather than raising `gpu-memory-tight`, and the report names its sampler.
#[test]
fn a_silent_or_failing_sampler_is_reported_and_impossible_readings_left_out() {
    let ws = Workspace::new();
    // Never prints.
    let silent = ws.path().join("silent");
    let bin = hostile_nvidia_smi(&silent, "while :; do sleep 1 & wait $!; done\n");
    let s = spec(&ws, "gpu-silent", "telemetry: { gpu: nvidia-smi }\n");
    let out = run(&ws, &s, &path_with(Some(&bin)));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let gpu = &read_jsonl(&dir.join("points.jsonl"))[0]["gpu"];
    assert!(
        gpu["missing"]
            .as_str()
            .is_some_and(|m| m.contains("gave no reading")),
        "{gpu}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("gave no reading"), "{report}");

    // One reading of two GPUs, GPU 1 with -5 MiB free, then a failure.
    let failing = ws.path().join("failing");
    let bin = hostile_nvidia_smi(
        &failing,
        "printf '%s\\n' '0, GPU-0, NVIDIA H200, 1000, 142771, 143771, 1980, 3201, 90, 300.00, 700.00, 61, 0x0' '1, GPU-1, NVIDIA H200, 1000, -5, 143771, 1980, 3201, 150, 300.00, 700.00, 61, 0x0'\necho 'Unable to determine the device handle for GPU0000:01:00.0: GPU is lost' >&2\nexit 15\n",
    );
    let s = spec(&ws, "gpu-failing", "telemetry: { gpu: nvidia-smi }\n");
    let out = run(&ws, &s, &path_with(Some(&bin)));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let gpu = &p["gpu"];
    assert!(gpu["samples"].as_u64().unwrap() >= 1, "{gpu}");
    assert!(
        gpu["partial"]
            .as_str()
            .is_some_and(|m| m.contains("ended by itself") && m.contains("GPU is lost")),
        "{gpu}"
    );
    assert_eq!(gpu["source"], "nvidia-smi", "{gpu}");
    assert!(
        !flag_kinds(p).contains(&"gpu-memory-tight".to_string()),
        "-5 MiB free is no reading: {p}"
    );
    let readings = read_jsonl(&dir.join("gpu.jsonl"));
    let g1 = &readings[0]["gpus"][1];
    assert!(g1["memory_free_mib"].is_null(), "{g1}");
    assert!(g1["util_pct"].is_null(), "{g1}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("read with `nvidia-smi` in its looping mode"),
        "{report}"
    );
    assert!(report.contains("GPU is lost"), "{report}");
}

/// Item 1 over SSH: the agent on the host (`client: host`) samples the host's GPUs, through
/// the same line protocol its requests come back on; the run directory gets the readings and
/// the point its energy, as in a local run. Measured from here (`client: local`), nothing is
/// sampled here: this machine's GPUs are not the server's.
#[test]
fn over_ssh_the_agent_samples_the_hosts_gpus() {
    let ws = Workspace::new();
    let bin = fake_nvidia_smi(
        ws.path(),
        &Readings {
            power_w: 300.0,
            free_mib: [40_960.0, 81_920.0],
            throttle: [0x0, 0x0],
            old_driver: false,
        },
    );
    let path = path_with(Some(&bin));
    let Some(sshd) = crate::sshd::Sshd::start_with_env(&[("PATH", &path)]) else {
        return;
    };
    let spec = |name: &str, client: &str| {
        ws.write(
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\nhost:\n  ssh: 127.0.0.1\n  port: {port}\n  identity: {key}\n  known_hosts: {kh}\n  remote_dir: {home}/sb\nclient: {client}\n\
                 server:\n  engine: sglang\n  launcher: [{bin}, sim]\n  model: test-model\n  args: {{ profile: fast, context-length: 16384 }}\n  ready_timeout: 30s\n\
                 workload:\n  prompt: {{ kind: repeat, tokens: 64 }}\n  output_tokens: 200\nrequests: 4\ntelemetry: {{ gpu: nvidia-smi, interval: 100ms }}\n",
                port = sshd.port,
                key = sshd.client_key.display(),
                kh = sshd.known_hosts.display(),
                home = sshd.home.display(),
                bin = env!("CARGO_BIN_EXE_servebench"),
            ),
        )
    };
    // This machine's PATH has no nvidia-smi: only the host's sessions find the fake.
    let out = run(&ws, &spec("gpu-ssh", "host"), &path_with(None));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let readings = read_jsonl(&dir.join("gpu.jsonl"));
    assert!(readings.len() >= 3, "{} readings", readings.len());
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let w = windows(&dir);
    let seconds: f64 = w.iter().map(|(a, b, _)| b - a).sum();
    let energy = p["gpu"]["energy_j"].as_f64().unwrap();
    assert!(
        (energy - 600.0 * seconds).abs() <= 1e-6 * energy,
        "{energy} J over {seconds} s"
    );
    assert_ne!(p["gpu"]["host"], "local", "{}", p["gpu"]);
    assert_no_fake_left(&bin);

    let out = run(&ws, &spec("gpu-ssh-local", "local"), &path_with(None));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    assert!(!dir.join("gpu.jsonl").exists());
    assert!(read_jsonl(&dir.join("points.jsonl"))[0]["gpu"].is_null());
}

/// Item 2: a point the server died in (out of memory) names the last GPU reading before it,
/// in its `server-crashed` flag and in the report's section.
#[test]
fn an_out_of_memory_crash_names_the_last_gpu_reading() {
    let ws = Workspace::new();
    let bin = fake_nvidia_smi(
        ws.path(),
        &Readings {
            power_w: 690.0,
            free_mib: [300.0, 81_920.0],
            throttle: [0x0, 0x0],
            old_driver: false,
        },
    );
    let fast = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/sim/profiles/fast.yaml"),
    )
    .unwrap();
    // SGLang's out-of-memory crash for a prefill batch over 6000 tokens.
    let profile = ws.write("oom.yaml", &format!("{fast}\noom_prefill_tokens: 6000\n"));
    let spec = ws.write(
        "crash.yaml",
        &format!(
            "name: crash\nserver:\n  engine: sim\n  model: m\n  args: {{ profile: {}, chunked-prefill-size: 16384, context-length: 16384 }}\n  ready_timeout: 30s\nworkload:\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 4\nsweep:\n  ctx: [1024, 8192]\nrequests: 2\ntelemetry: {{ gpu: nvidia-smi, interval: 100ms }}\n",
            profile.display()
        ),
    );
    let out = run(&ws, &spec, &path_with(Some(&bin)));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let crashed = &points[1];
    assert_eq!(crashed["failure"], "out-of-memory", "{crashed}");
    let flag = crashed["flags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "server-crashed")
        .expect("crash flagged");
    let message = flag["message"].as_str().unwrap();
    assert!(
        message.contains("last GPU reading: GPU 0: 140 GiB used, 0.293 GiB free, 690 W"),
        "{message}"
    );
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        report.contains("last reading before the out-of-memory"),
        "{report}"
    );
    assert_no_fake_left(&bin);
}

/// Ctrl-C during a point stops nvidia-smi with the round and keeps what was read: the point's
/// record has its telemetry, and no sampler is left running.
#[test]
fn ctrl_c_mid_point_stops_the_sampler_and_keeps_its_readings() {
    let _turn = exclusive();
    let ws = Workspace::new();
    let bin = fake_nvidia_smi(
        ws.path(),
        &Readings {
            power_w: 300.0,
            free_mib: [40_960.0, 81_920.0],
            throttle: [0x0, 0x0],
            old_driver: false,
        },
    );
    let spec = ws.write(
        "long.yaml",
        &sim_spec(
            "gpu-interrupted",
            "  prompt: { kind: repeat, tokens: 200, calibrate: false }\n  output_tokens: 400",
            "requests: 200\ntelemetry: { gpu: nvidia-smi, interval: 100ms }\n",
        ),
    );
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("servebench"))
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .env("PATH", path_with(Some(&bin)))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let root = ws.path().join("runs").join("gpu-interrupted");
    let dir = poll_until(
        std::time::Duration::from_secs(60),
        "no GPU readings and no finished request recorded",
        || {
            let dir = std::fs::read_dir(&root).ok()?.flatten().next()?.path();
            let lines = std::fs::read_to_string(dir.join("gpu.jsonl")).ok()?;
            // A finished request too: Ctrl-C abandons the requests in flight (they are no
            // measurements), and the energy is the measured window's, which its records make.
            let finished = std::fs::read_to_string(dir.join("requests.jsonl")).ok()?;
            (lines.lines().count() >= 3 && finished.lines().count() >= 1).then_some(dir)
        },
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_no_fake_left(&bin);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    assert!(flag_kinds(p).contains(&"interrupted".to_string()), "{p}");
    assert!(p["gpu"]["samples"].as_u64().unwrap() >= 3, "{}", p["gpu"]);
    assert!(p["gpu"]["energy_j"].as_f64().unwrap() > 0.0, "{}", p["gpu"]);
}

/// Item 1 on Slurm: the agent runs as a job step next to the server and samples the node's
/// GPUs (the step inherits the run's `PATH`, where the fake is); the readings come back over
/// its stream into the run directory.
#[test]
fn on_slurm_the_agent_step_samples_the_nodes_gpus() {
    let cluster = crate::slurmd::SlurmCluster::get();
    let _cleanup = cluster.cancel_on_drop("servebench-gpu-slurm");
    let ws = Workspace::new();
    let bin = fake_nvidia_smi(
        ws.path(),
        &Readings {
            power_w: 300.0,
            free_mib: [40_960.0, 81_920.0],
            throttle: [0x0, 0x0],
            old_driver: false,
        },
    );
    let spec = ws.write(
        "s.yaml",
        "name: gpu-slurm\nhost:\n  slurm: { time: \"5\" }\nserver:\n  engine: sim\n  model: gpu-slurm-model\n  args: { profile: fast }\n  ready_timeout: 60s\nworkload:\n  prompt: { kind: repeat, tokens: 64, calibrate: false }\n  output_tokens: 200\nrequests: 4\ntelemetry: { gpu: nvidia-smi, interval: 100ms }\n",
    );
    let out = servebench()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .env("SLURM_CONF", &cluster.conf)
        .env("PATH", path_with(Some(&bin)))
        .timeout(std::time::Duration::from_secs(180))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", show(&out), cluster.logs());
    let dir = run_dir(&out);
    assert!(read_jsonl(&dir.join("gpu.jsonl")).len() >= 3);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    let w = windows(&dir);
    let seconds: f64 = w.iter().map(|(a, b, _)| b - a).sum();
    let energy = p["gpu"]["energy_j"].as_f64().unwrap();
    assert!(
        (energy - 600.0 * seconds).abs() <= 1e-6 * energy,
        "{energy} J over {seconds} s"
    );
    // The node's facts are read as a step in the allocation once it exists.
    let meta = read_json(&dir.join("meta.json"));
    let gpus = meta["server_host"]["gpus"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", meta["server_host"]));
    assert_eq!(gpus.len(), 2, "{gpus:?}");
    assert_eq!(gpus[1]["driver_version"], "570.86.15");
    assert_no_fake_left(&bin);
}

/// Multi-turn sessions are sampled like any round: their window's energy is measured too.
#[test]
fn a_sessions_point_is_sampled_like_any_other() {
    let ws = Workspace::new();
    let bin = fake_nvidia_smi(
        ws.path(),
        &Readings {
            power_w: 300.0,
            free_mib: [40_960.0, 81_920.0],
            throttle: [0x0, 0x0],
            old_driver: false,
        },
    );
    let spec = ws.write(
        "sessions.yaml",
        &sim_spec(
            "gpu-sessions",
            "  prompt: { kind: repeat, tokens: 64 }\n  output_tokens: 200",
            "load: { kind: sessions, sessions: { users: 2, turns: 3, think: 10ms } }\ntelemetry: { gpu: nvidia-smi, interval: 100ms }\n",
        ),
    );
    let out = run(&ws, &spec, &path_with(Some(&bin)));
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let p = &read_jsonl(&dir.join("points.jsonl"))[0];
    assert!(p["gpu"]["samples"].as_u64().unwrap() >= 2, "{}", p["gpu"]);
    assert!(p["gpu"]["energy_j"].as_f64().unwrap() > 0.0, "{}", p["gpu"]);
    assert_no_fake_left(&bin);
}
