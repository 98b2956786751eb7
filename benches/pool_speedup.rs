//! How much faster does a pool of two SSH hosts run four server groups than one host?
//!
//! Starts two real OpenSSH servers on loopback ports (the tests' `sshd.rs`: throwaway keys, a
//! temporary home), then runs the same four-group spec (the simulator launched as the `sglang`
//! engine, a profile slowed so each group takes several seconds) with `hosts:` holding one of
//! them, then both, and prints each wall time and the speed-up. Both "hosts" are this machine,
//! so the groups share its cores: the figure is the pool's scheduling, not extra hardware.
//!
//! Run: `cargo bench --bench pool_speedup` (`POOL_BENCH_ROUNDS=3` for more rounds; needs
//! /usr/sbin/sshd).

#[allow(dead_code)]
#[path = "../tests/sshd.rs"]
mod sshd;

use std::time::{Duration, Instant};

use sshd::Sshd;

const BIN: &str = env!("CARGO_BIN_EXE_servebench");

fn host_entry(s: &Sshd) -> String {
    format!(
        "  - ssh: 127.0.0.1\n    port: {}\n    identity: {}\n    known_hosts: {}\n    remote_dir: {}/sb\n",
        s.port,
        s.client_key.display(),
        s.known_hosts.display(),
        s.home.display()
    )
}

fn spec(name: &str, hosts: &[&Sshd]) -> String {
    let hosts: String = hosts.iter().map(|h| host_entry(h)).collect();
    format!(
        "name: {name}\nhosts:\n{hosts}client: host\n\
         server:\n  engine: sglang\n  launcher: [{BIN}, sim]\n  model: bench-model\n  args: {{ profile: fast, context-length: 16384, sim-time-scale: 20 }}\n  ready_timeout: 60s\n\
         workload:\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 64\n\
         sweep:\n  server.args.chunked-prefill-size: [1024, 2048, 4096, 8192]\n  ctx: [2048, 4096]\nrequests: 3\n"
    )
}

/// Wall time of `servebench run` on `spec_text`, which must succeed.
fn run(dir: &std::path::Path, name: &str, spec_text: &str) -> Duration {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, spec_text).expect("write spec");
    let start = Instant::now();
    let out = std::process::Command::new(BIN)
        .arg("run")
        .arg(&path)
        .arg("--out")
        .arg(dir.join("runs"))
        .arg("--quiet")
        .output()
        .expect("servebench run");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{name} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn main() {
    let (Some(a), Some(b)) = (Sshd::start(), Sshd::start()) else {
        eprintln!("pool_speedup: needs /usr/sbin/sshd");
        return;
    };
    let rounds: usize = std::env::var("POOL_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let dir = tempfile::tempdir().expect("tempdir");
    println!("four server groups (2 points x 3 requests each), simulated sglang over SSH");
    println!(
        "{:>5} {:>12} {:>12} {:>9}",
        "round", "one host", "two hosts", "speed-up"
    );
    for round in 1..=rounds {
        let one = run(
            dir.path(),
            &format!("one-{round}"),
            &spec(&format!("one-{round}"), &[&a]),
        );
        let two = run(
            dir.path(),
            &format!("two-{round}"),
            &spec(&format!("two-{round}"), &[&a, &b]),
        );
        println!(
            "{round:>5} {:>11.1}s {:>11.1}s {:>8.2}x",
            one.as_secs_f64(),
            two.as_secs_f64(),
            one.as_secs_f64() / two.as_secs_f64()
        );
    }
}
