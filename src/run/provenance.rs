//! Facts about where and from what a run was made.

use std::path::Path;
use std::process::Command;

use servebench_model::results::meta::{GitState, HostFacts};

/// Commit and dirty flag of the git repository holding `dir` (None outside git or without git).
pub(crate) fn git_state(dir: &Path) -> Option<GitState> {
    let run = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    let commit = String::from_utf8_lossy(&run(&["rev-parse", "HEAD"])?.stdout)
        .trim()
        .to_string();
    let status = run(&["status", "--porcelain"])?;
    Some(GitState {
        commit,
        dirty: !status.stdout.is_empty(),
    })
}

/// This machine: hostname, OS and CPU count.
pub(crate) fn host_facts() -> HostFacts {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("PRETTY_NAME=")
                    .map(|v| v.trim_matches('"').to_string())
            })
        })
        .unwrap_or_else(|| std::env::consts::OS.to_string());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    HostFacts { hostname, os, cpus }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_state_outside_a_repo_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert!(git_state(d.path()).is_none());
    }

    #[test]
    fn host_facts_are_filled() {
        let h = host_facts();
        assert!(h.cpus >= 1);
        assert!(!h.hostname.is_empty());
    }
}
