//! What the end-to-end load benches share: the `load:` spec they run against the built-in
//! simulator (fast profile, 32-token prompts, 8 output tokens) and the run that makes it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes a load spec named `name` into `dir`: `load` is the rest of the `load:` block
/// (`rate: 1000, arrival: poisson`), `requests` the measured count, `sim_args` more
/// simulator flags (`, enable-metrics: true`, or empty).
pub fn write_spec(dir: &Path, name: &str, load: &str, requests: u32, sim_args: &str) -> PathBuf {
    let spec = dir.join("bench.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: {name}\nserver:\n  engine: sim\n  model: m\n  args: {{ profile: fast, context-length: 4096, max-running-requests: 20000{sim_args} }}\n  ready_timeout: 60s\n\
             workload:\n  prompt: {{ kind: random, tokens: 32, calibrate: false }}\n  output_tokens: 8\n\
             cache: {{ policy: as-is, verify: false }}\nrequest_timeout: 120s\n\
             load: {{ kind: rate, {load}, max_in_flight: 20000, lag_limit: 1ms }}\nstop: {{ requests: {requests} }}\n"
        ),
    )
    .expect("write spec");
    spec
}

/// Runs `servebench run <spec> --quiet` with its runs under `dir`; the run directory, or
/// why there is none (the run's stderr).
pub fn run(bin: &str, spec: &Path, dir: &Path) -> Result<PathBuf, String> {
    let out = Command::new(bin)
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(dir.join("runs"))
        .arg("--quiet")
        .output()
        .expect("run servebench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("run directory: "))
        .map(|run| PathBuf::from(run.trim()))
        .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
}
