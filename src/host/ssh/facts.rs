//! What the host is: OS, CPU, GPUs, SGLang version, for the run's provenance. Gathered in one
//! command; a missing tool leaves its field empty.

use serde::Serialize;

use super::{SshError, SshHost};

/// Facts about a host. Each field is None when the host could not tell.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostFacts {
    pub hostname: Option<String>,
    /// PRETTY_NAME from /etc/os-release, e.g. "Ubuntu 22.04.4 LTS".
    pub os: Option<String>,
    /// `uname -srm`: kernel name, release and machine.
    pub kernel: Option<String>,
    /// CPU model name from /proc/cpuinfo (or lscpu).
    pub cpu_model: Option<String>,
    /// Online logical CPUs.
    pub cpu_count: Option<u32>,
    /// GPUs reported by nvidia-smi; None when nvidia-smi is absent or fails.
    pub gpus: Option<Vec<Gpu>>,
    /// `sglang.__version__` as imported by the given python.
    pub sglang_version: Option<String>,
}

/// One GPU as nvidia-smi reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    pub name: String,
    pub driver_version: String,
    /// Total memory in MiB.
    pub memory_total_mib: Option<u64>,
    /// The power limit in watts (`power.limit`); None where nvidia-smi says `[N/A]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
}

/// Prints one "@section" line before each fact. $1 is the python to ask about SGLang, $2 the
/// seconds each tool may take (20 by default). nvidia-smi can hang on a wedged driver, hence
/// the timeout when `timeout` exists, with `-k`: a tool that ignores SIGTERM is killed 2 s
/// later, not left running.
pub(crate) const FACTS: &str = r#"
secs=${2:-20}
t() { if command -v timeout >/dev/null 2>&1; then timeout -k 2 "$secs" "$@"; else "$@"; fi; }
echo @hostname; hostname 2>/dev/null || uname -n
echo @os; (. /etc/os-release 2>/dev/null && printf '%s\n' "$PRETTY_NAME")
echo @kernel; uname -srm
echo @cpu_model
m=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2-)
[ -n "$m" ] || m=$(lscpu 2>/dev/null | grep -m1 '^Model name' | cut -d: -f2-)
printf '%s\n' "$m"
echo @cpu_count; getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null
echo @gpus
if command -v nvidia-smi >/dev/null 2>&1; then
  t nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader,nounits 2>/dev/null && echo @gpus_ok
fi
echo @sglang; t "$1" -c 'import sglang; print(sglang.__version__)' 2>/dev/null
echo @end
"#;

/// This machine's facts (its GPUs from nvidia-smi, as an SSH host's are read), each tool
/// given `secs`; SGLang's version is not asked (`/server_info` says it once the server is
/// up). None when the script cannot run at all.
///
/// The script runs in a process group of its own, killed whole when it overruns (a tool stuck
/// where even SIGKILL waits, a `timeout` missing) or when the future is dropped (Ctrl-C):
/// nothing of it is left running.
pub(crate) async fn local_facts(secs: u32) -> Option<HostFacts> {
    facts_here(secs, None).await
}

/// [`local_facts`] with `path` as the script's `PATH` when given (the tests' stand-in tools).
async fn facts_here(secs: u32, path: Option<&std::ffi::OsStr>) -> Option<HostFacts> {
    let mut command = tokio::process::Command::new("sh");
    if let Some(p) = path {
        command.env("PATH", p);
    }
    let child = command
        .args(["-c", FACTS, "sh", "false", &secs.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let group = KillGroupOnDrop(child.id().map(|p| p as i32));
    // Each tool's time and its 2 s to die after SIGTERM; the rest takes no time.
    let limit = std::time::Duration::from_secs(u64::from(secs) * 2 + 5);
    let out = tokio::time::timeout(limit, child.wait_with_output()).await;
    // Whatever a tool left in the group (a child it started) goes with it.
    drop(group);
    Some(parse_facts(&String::from_utf8_lossy(
        &out.ok()?.ok()?.stdout,
    )))
}

/// Kills process group `.0` when dropped (a finished script's group is empty already).
struct KillGroupOnDrop(Option<i32>);

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl SshHost {
    /// Gathers [`HostFacts`]; `python` is the interpreter SGLang is installed for (a venv's
    /// python, or "python3"). Only a broken connection is an error.
    pub async fn host_facts(&self, python: &str) -> Result<HostFacts, SshError> {
        let out = self.run_script(FACTS, &[python]).await?;
        Ok(parse_facts(&String::from_utf8_lossy(&out.stdout)))
    }
}

/// Parses the sectioned output of [`FACTS`].
pub(crate) fn parse_facts(text: &str) -> HostFacts {
    let mut sections: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in text.lines() {
        match line.strip_prefix('@') {
            Some(name) if !name.contains(' ') => sections.push((name, Vec::new())),
            _ => {
                if let Some((_, lines)) = sections.last_mut() {
                    lines.push(line);
                }
            }
        }
    }
    let section = |name: &str| sections.iter().find(|(n, _)| *n == name).map(|(_, l)| l);
    let first = |name: &str| {
        section(name)
            .and_then(|l| l.iter().map(|s| s.trim()).find(|s| !s.is_empty()))
            .map(str::to_string)
    };
    let gpus = section("gpus_ok")
        .and(section("gpus"))
        .map(|lines| lines.iter().filter_map(|l| parse_gpu(l)).collect());
    HostFacts {
        hostname: first("hostname"),
        os: first("os"),
        kernel: first("kernel"),
        cpu_model: first("cpu_model"),
        cpu_count: first("cpu_count").and_then(|n| n.parse().ok()),
        gpus,
        // The version is the last line: importing may print warnings first.
        sglang_version: section("sglang")
            .and_then(|l| l.iter().map(|s| s.trim()).rfind(|s| !s.is_empty()))
            .map(str::to_string),
    }
}

/// `NAME, DRIVER, MEMORY_MIB, POWER_LIMIT_W` (csv,noheader,nounits).
fn parse_gpu(line: &str) -> Option<Gpu> {
    let mut f = line.rsplitn(4, ',').map(str::trim);
    let power = f.next()?;
    let memory = f.next()?;
    let driver = f.next()?;
    let name = f.next()?;
    if name.is_empty() {
        return None;
    }
    Some(Gpu {
        name: name.to_string(),
        driver_version: driver.to_string(),
        memory_total_mib: memory.trim_end_matches(" MiB").parse().ok(),
        power_limit_w: power
            .trim_end_matches(" W")
            .parse::<f64>()
            .ok()
            .filter(|w| w.is_finite()),
    })
}

#[cfg(test)]
mod tests {

    /// A hung nvidia-smi that ignores SIGTERM: `timeout -k` kills it, so nothing is left
    /// running (without `-k` it ran forever, one per run).
    #[test]
    fn a_hung_gpu_tool_is_killed_not_left_running() {
        let dir = tempfile::tempdir().unwrap();
        let marker = format!("6543.{}", std::process::id());
        let smi = dir.path().join("nvidia-smi");
        std::fs::write(
            &smi,
            format!("#!/bin/sh\ntrap '' TERM\nexec sleep {marker}\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!("{}:/usr/bin:/bin", dir.path().display());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let started = std::time::Instant::now();
        let facts = rt
            .block_on(facts_here(1, Some(std::ffi::OsStr::new(&path))))
            .expect("the other facts are read");
        assert!(facts.hostname.is_some());
        assert_eq!(facts.gpus, None, "a tool that timed out tells nothing");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(&marker))
            .collect();
        assert!(left.is_empty(), "left running: {left:?}");
    }
    use super::*;

    #[test]
    fn a_gpu_host_is_parsed() {
        let text = "@hostname\ngpu-01\n@os\nUbuntu 22.04.4 LTS\n@kernel\nLinux 5.15.0 x86_64\n\
            @cpu_model\n AMD EPYC 7763 64-Core Processor\n@cpu_count\n128\n@gpus\n\
            NVIDIA H100 80GB HBM3, 550.54.15, 81559, 700.00\nNVIDIA H100 80GB HBM3, 550.54.15, 81559, [N/A]\n\
            @gpus_ok\n@sglang\n0.4.6\n@end\n";
        let f = parse_facts(text);
        assert_eq!(f.hostname.as_deref(), Some("gpu-01"));
        assert_eq!(f.os.as_deref(), Some("Ubuntu 22.04.4 LTS"));
        assert_eq!(
            f.cpu_model.as_deref(),
            Some("AMD EPYC 7763 64-Core Processor")
        );
        assert_eq!(f.cpu_count, Some(128));
        let gpus = f.gpus.unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(
            gpus[0],
            Gpu {
                name: "NVIDIA H100 80GB HBM3".into(),
                driver_version: "550.54.15".into(),
                memory_total_mib: Some(81559),
                power_limit_w: Some(700.0),
            }
        );
        assert_eq!(gpus[1].power_limit_w, None);
        assert_eq!(f.sglang_version.as_deref(), Some("0.4.6"));
    }

    #[test]
    fn missing_tools_leave_fields_empty() {
        let f = parse_facts(
            "@hostname\nbox\n@os\n@kernel\nLinux 6.1 aarch64\n@cpu_model\n@cpu_count\n4\n@gpus\n@sglang\n@end\n",
        );
        assert_eq!(f.hostname.as_deref(), Some("box"));
        assert_eq!(
            (f.os, f.cpu_model, f.gpus, f.sglang_version),
            (None, None, None, None)
        );
        assert_eq!(parse_facts(""), HostFacts::default());
    }
}
