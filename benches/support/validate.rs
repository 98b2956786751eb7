//! `servebench validate` with its peak memory, for the corpus benches.

use std::path::Path;
use std::process::Command;

/// `servebench validate`: whether it passed, and its peak RSS in MB (`VmHWM`).
pub fn validate(bin: &str, spec: &Path) -> (bool, f64) {
    let mut child = Command::new(bin)
        .arg("validate")
        .arg(spec)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run servebench");
    let status = format!("/proc/{}/status", child.id());
    let mut hwm_kb = 0.0f64;
    while child.try_wait().expect("wait").is_none() {
        if let Ok(s) = std::fs::read_to_string(&status)
            && let Some(kb) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        {
            hwm_kb = hwm_kb.max(kb);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("output");
    if !out.status.success() {
        println!("{}", String::from_utf8_lossy(&out.stderr));
    }
    (out.status.success(), hwm_kb / 1024.0)
}
