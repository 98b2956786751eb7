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
/// the timeout when `timeout` exists.
pub(crate) const FACTS: &str = r#"
secs=${2:-20}
t() { if command -v timeout >/dev/null 2>&1; then timeout "$secs" "$@"; else "$@"; fi; }
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
pub(crate) async fn local_facts(secs: u32) -> Option<HostFacts> {
    let run = tokio::process::Command::new("sh")
        .args(["-c", FACTS, "sh", "false", &secs.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(u64::from(secs) * 3), run)
        .await
        .ok()?
        .ok()?;
    Some(parse_facts(&String::from_utf8_lossy(&out.stdout)))
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
