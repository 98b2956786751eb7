//! The real-engine tier: servebench against the real SGLang 0.5.23 server on CPU and against
//! llama.cpp's `llama-server`, with the simulator held to both (`cargo test real_engine`).
//!
//! Everything comes from `scripts/real-engines/provision.sh`, which builds into
//! `$SERVEBENCH_REAL_ENGINES_DIR` (default `~/.cache/servebench/real-engines`): SGLang's
//! virtualenv, the `sgl_kernel` stand-in, a tiny random Llama, `llama-server`, a tiny GGUF and
//! the real `sglang-router` in a venv of its own.
//! Without it each test says so loudly on stderr and passes, unless
//! `SERVEBENCH_REAL_ENGINES=required` (CI), where it fails naming the command.
//!
//! One real SGLang server runs at a time (4-5.5 GB each): the tests that only send requests
//! share one, started on first use ([`with_sglang`]); a test that launches its own through
//! servebench first stops the shared one ([`sglang_slot`]). Each start costs ~30 s.

#[path = "real_engine/aiperf.rs"]
mod aiperf;
#[path = "real_engine/conversations.rs"]
mod conversations;
#[path = "real_engine/deploy.rs"]
mod deploy;
#[path = "real_engine/differential.rs"]
mod differential;
#[path = "real_engine/llamacpp.rs"]
mod llamacpp;
#[path = "real_engine/mlflow.rs"]
mod mlflow;
#[path = "real_engine/router.rs"]
mod router;
#[path = "real_engine/sglang.rs"]
mod sglang;
#[path = "real_engine/thinking.rs"]
mod thinking;
#[path = "real_engine/timing.rs"]
mod timing;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The command that provisions the tier, as the messages print it.
pub fn provision_command() -> String {
    format!(
        "bash {}/scripts/real-engines/provision.sh",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The tier's cache directory.
pub fn tier_dir() -> PathBuf {
    match std::env::var_os("SERVEBENCH_REAL_ENGINES_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
            .join(".cache/servebench/real-engines"),
    }
}

/// Which engine a test needs.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Part {
    Sglang,
    LlamaCpp,
    /// The real `sglang-router` (in front of simulated workers that serve the tier's model
    /// directory, so the router loads its tokenizer from disk).
    Router,
    /// Its successor, the Shepherd Model Gateway (`smg` 1.13.0, `smg launch`), the same way.
    Smg,
    /// AIPerf 0.13's models, which read `servebench export --format aiperf`'s files.
    Aiperf,
    /// MLflow 3.17.2's tracking server, which `servebench mlflow` logs runs to.
    Mlflow,
}

impl Part {
    /// The provisioning stamps this engine's tests need.
    fn stamps(self) -> &'static [&'static str] {
        match self {
            Part::Sglang => &["sglang-venv", "stand-in", "model-hf", "model-think"],
            Part::LlamaCpp => &["llama-server", "model-gguf", "model-think"],
            Part::Router => &["router-venv", "model-hf"],
            Part::Smg => &["smg-venv", "model-hf"],
            Part::Aiperf => &["aiperf-venv"],
            Part::Mlflow => &["mlflow-venv"],
        }
    }
}

/// The provisioned tier's paths.
#[derive(Clone, Debug)]
pub struct Tier {
    pub dir: PathBuf,
}

impl Tier {
    pub fn python(&self) -> PathBuf {
        self.dir.join("sglang-venv/bin/python")
    }
    pub fn stand_in(&self) -> PathBuf {
        self.dir.join("stand-in")
    }
    pub fn model_hf(&self) -> PathBuf {
        self.dir.join("model-hf")
    }
    /// The python of the router's own venv (`python -m sglang_router.launch_router`).
    pub fn router_python(&self) -> PathBuf {
        self.dir.join("router-venv/bin/python")
    }
    /// The Shepherd Model Gateway's command (`smg launch ...`).
    pub fn smg(&self) -> PathBuf {
        self.dir.join("smg-venv/bin/smg")
    }
    /// The python of AIPerf's venv.
    pub fn aiperf_python(&self) -> PathBuf {
        self.dir.join("aiperf-venv/bin/python")
    }
    /// The `mlflow` command of MLflow's venv (`mlflow server ...`).
    pub fn mlflow(&self) -> PathBuf {
        self.dir.join("mlflow-venv/bin/mlflow")
    }
    pub fn llama_server(&self) -> PathBuf {
        self.dir.join("llama-server")
    }
    pub fn gguf(&self) -> PathBuf {
        self.dir.join("model.gguf")
    }
    /// The deterministic thinking model for SGLang (`make_model.py hf-think`).
    pub fn think_hf(&self) -> PathBuf {
        self.dir.join("model-think-hf")
    }
    /// The deterministic thinking model for llama.cpp (`make_model.py gguf-think`).
    pub fn think_gguf(&self) -> PathBuf {
        self.dir.join("model-think.gguf")
    }
}

/// The tier when `part` is provisioned. Otherwise `None` after a loud line on stderr, or a
/// failure naming the provisioning command when `SERVEBENCH_REAL_ENGINES=required`.
#[track_caller]
pub fn tier(part: Part) -> Option<Tier> {
    let dir = tier_dir();
    let missing: Vec<&str> = part
        .stamps()
        .iter()
        .copied()
        .filter(|s| !dir.join(format!(".stamp-{s}")).is_file())
        .collect();
    if missing.is_empty() {
        return Some(Tier { dir });
    }
    let what = format!(
        "real-engine tier not provisioned ({} missing in {}), run `{}`",
        missing.join(", "),
        dir.display(),
        provision_command()
    );
    if std::env::var("SERVEBENCH_REAL_ENGINES").as_deref() == Ok("required") {
        panic!("SERVEBENCH_REAL_ENGINES=required: {what}");
    }
    // Straight to the process's stderr: the test harness captures `eprintln!` of a passing
    // test, and a skip must be seen.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: {what} (SERVEBENCH_REAL_ENGINES=required makes this a failure) ***"
    );
    None
}

/// A server the tests started themselves (not through servebench): its own process group,
/// killed with the test process (parent-death signal) and when dropped.
pub struct RealServer {
    child: Child,
    pub base: String,
    pub log: PathBuf,
    pub started_in: Duration,
    _dir: tempfile::TempDir,
}

impl RealServer {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process group's id (the leader's pid).
    pub fn pgid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Stops the whole group: SIGTERM, then SIGKILL after 10 s.
    pub fn stop(&mut self) {
        let pg = nix::unistd::Pid::from_raw(-self.pgid());
        let _ = nix::sys::signal::kill(pg, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) && group_gone(self.pgid()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = nix::sys::signal::kill(pg, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for RealServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// True when no live process is in process group `pgid`.
pub fn group_gone(pgid: i32) -> bool {
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        None::<nix::sys::signal::Signal>,
    )
    .is_err()
        || processes(|p| p.pgid == pgid && !p.zombie).is_empty()
}

/// One process of the process table.
#[derive(Debug)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub zombie: bool,
    pub cmdline: String,
    pub environ: String,
}

/// The processes `keep` selects (from /proc).
pub fn processes(keep: impl Fn(&Proc) -> bool) -> Vec<Proc> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() < 3 {
            continue;
        }
        let read = |name: &str| {
            String::from_utf8_lossy(&std::fs::read(entry.path().join(name)).unwrap_or_default())
                .replace('\0', " ")
        };
        let p = Proc {
            pid,
            ppid: fields[1].parse().unwrap_or(0),
            pgid: fields[2].parse().unwrap_or(0),
            zombie: fields[0] == "Z",
            cmdline: read("cmdline"),
            environ: read("environ"),
        };
        if keep(&p) {
            out.push(p);
        }
    }
    out
}

/// Live processes whose environment holds `marker` (every launch here sets a unique one).
pub fn live_with_marker(marker: &str) -> Vec<String> {
    processes(|p| !p.zombie && p.environ.contains(marker))
        .iter()
        .map(|p| format!("{} (pgid {}): {}", p.pid, p.pgid, p.cmdline))
        .collect()
}

/// A unique marker for one launch's environment.
pub fn marker(what: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "sbre-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

pub use testkit::http;
pub use testkit::process::{free_port, spawn_kept, tail, wait_healthy};

/// The SGLang flags every test uses, the way a CPU user runs it (see
/// `docs/real-engines.md`): the KV pool sized explicitly, torch's own attention.
pub const SGLANG_CPU_ARGS: &[(&str, &str)] = &[
    ("device", "cpu"),
    ("attention-backend", "torch_native"),
    ("max-total-tokens", "65536"),
];

/// The environment SGLang needs here: the CPU engine and the stand-in first on the path.
pub fn sglang_env(tier: &Tier, standin_log: &Path, marker: &str) -> Vec<(String, String)> {
    vec![
        ("SGLANG_USE_CPU_ENGINE".into(), "1".into()),
        ("PYTHONPATH".into(), tier.stand_in().display().to_string()),
        (
            "SGL_KERNEL_STANDIN_LOG".into(),
            standin_log.display().to_string(),
        ),
        ("SERVEBENCH_REAL_ENGINE_MARKER".into(), marker.into()),
        // No hub: the model is a local directory and nothing may be downloaded.
        ("HF_HUB_OFFLINE".into(), "1".into()),
        ("TRANSFORMERS_OFFLINE".into(), "1".into()),
    ]
}

/// Starts the real SGLang server from the tier with `extra` flags.
pub fn start_sglang(tier: &Tier, extra: &[&str]) -> RealServer {
    start_sglang_model(tier, &tier.model_hf(), extra)
}

/// Starts the real SGLang server serving `model` with `extra` flags.
pub fn start_sglang_model(tier: &Tier, model: &Path, extra: &[&str]) -> RealServer {
    let dir = tempfile::Builder::new()
        .prefix("servebench-sglang")
        .tempdir()
        .unwrap();
    let port = free_port();
    let log = dir.path().join("server.log");
    let standin = dir.path().join("sgl_kernel.log");
    let mut cmd = Command::new(tier.python());
    cmd.args(["-m", "sglang.launch_server", "--model-path"])
        .arg(model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()]);
    for (k, v) in SGLANG_CPU_ARGS {
        cmd.arg(format!("--{k}")).arg(v);
    }
    cmd.args(extra);
    for (k, v) in sglang_env(tier, &standin, &marker("shared")) {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let mut child = spawn_kept(cmd, &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&mut child, &base, "/health", &log, Duration::from_secs(240));
    RealServer {
        child,
        base,
        log,
        started_in: t0.elapsed(),
        _dir: dir,
    }
}

/// The stand-in's log of the server `s` (lookups and calls of `sgl_kernel`).
pub fn standin_log(s: &RealServer) -> PathBuf {
    s.log.with_file_name("sgl_kernel.log")
}

/// Fails when any `sgl_kernel` kernel was called in the log at `path`.
#[track_caller]
pub fn assert_no_kernel_called(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let calls: Vec<&str> = text.lines().filter(|l| l.starts_with("call ")).collect();
    assert!(
        calls.is_empty(),
        "the CPU path called sgl_kernel (the stand-in cannot run it): {calls:?}"
    );
}

/// The one SGLang slot: the shared server, or nothing while a test launches its own.
static SGLANG: Mutex<Option<RealServer>> = Mutex::new(None);

fn lock_slot() -> MutexGuard<'static, Option<RealServer>> {
    SGLANG.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with the shared real SGLang server (started on first use, without
/// `--enable-metrics`: the tests that read metrics launch their own), in the test's turn.
/// `None` when the tier is not provisioned (and not required).
#[track_caller]
pub fn with_sglang<R>(f: impl FnOnce(&Tier, &RealServer) -> R) -> Option<R> {
    let tier = tier(Part::Sglang)?;
    let mut slot = lock_slot();
    let _turn = crate::common::exclusive();
    if slot.is_none() {
        let s = start_sglang(&tier, &[]);
        eprintln!("real SGLang ready in {:.1?} at {}", s.started_in, s.base);
        *slot = Some(s);
    }
    let server = slot.as_ref().unwrap();
    let out = f(&tier, server);
    assert_no_kernel_called(&standin_log(server));
    Some(out)
}

/// The SGLang slot emptied (the shared server stopped), for a test that launches its own.
pub struct SglangSlot {
    _slot: MutexGuard<'static, Option<RealServer>>,
    pub _turn: crate::common::Turn,
    pub tier: Tier,
}

#[track_caller]
pub fn sglang_slot() -> Option<SglangSlot> {
    let tier = tier(Part::Sglang)?;
    let mut slot = lock_slot();
    *slot = None;
    Some(SglangSlot {
        _slot: slot,
        _turn: crate::common::exclusive(),
        tier,
    })
}

/// The shared llama-server (`--metrics --slots --slot-save-path`, 2 slots, unified KV).
static LLAMA: Mutex<Option<RealServer>> = Mutex::new(None);

/// Starts `llama-server` from the tier with `extra` flags.
pub fn start_llama(tier: &Tier, extra: &[&str]) -> RealServer {
    start_llama_model(tier, &tier.gguf(), extra)
}

/// Starts `llama-server` serving `model` with `extra` flags.
pub fn start_llama_model(tier: &Tier, model: &Path, extra: &[&str]) -> RealServer {
    let dir = tempfile::Builder::new()
        .prefix("servebench-llama")
        .tempdir()
        .unwrap();
    let port = free_port();
    let log = dir.path().join("server.log");
    let slots = dir.path().join("slots");
    std::fs::create_dir_all(&slots).unwrap();
    let mut cmd = Command::new(tier.llama_server());
    cmd.arg("-m")
        .arg(model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--ctx-size",
            "4096",
            "-np",
            "2",
            "--kv-unified",
            "--metrics",
            "--slots",
        ])
        .arg("--slot-save-path")
        .arg(&slots)
        .args(["-t", "2", "-a", "tiny"])
        .args(extra)
        .env("SERVEBENCH_REAL_ENGINE_MARKER", marker("llama"));
    let t0 = Instant::now();
    let mut child = spawn_kept(cmd, &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&mut child, &base, "/health", &log, Duration::from_secs(60));
    RealServer {
        child,
        base,
        log,
        started_in: t0.elapsed(),
        _dir: dir,
    }
}

/// Runs `f` with the shared real llama-server, in the test's turn.
#[track_caller]
pub fn with_llama<R>(f: impl FnOnce(&Tier, &RealServer) -> R) -> Option<R> {
    let tier = tier(Part::LlamaCpp)?;
    let mut slot = LLAMA.lock().unwrap_or_else(|e| e.into_inner());
    let _turn = crate::common::exclusive();
    if slot.is_none() {
        *slot = Some(start_llama(&tier, &[]));
    }
    Some(f(&tier, slot.as_ref().unwrap()))
}

/// The tier's own checks: the provisioning is complete when required, and the skip is loud.
#[test]
fn tier_is_provisioned_or_says_how() {
    for part in [
        Part::Sglang,
        Part::LlamaCpp,
        Part::Router,
        Part::Smg,
        Part::Aiperf,
        Part::Mlflow,
    ] {
        if let Some(t) = tier(part) {
            match part {
                Part::Sglang => {
                    assert!(t.python().is_file(), "{}", t.python().display());
                    assert!(t.stand_in().join("sgl_kernel/__init__.py").is_file());
                    assert!(t.model_hf().join("config.json").is_file());
                }
                Part::LlamaCpp => {
                    assert!(t.llama_server().is_file());
                    assert!(t.gguf().is_file());
                }
                Part::Router => {
                    assert!(
                        t.router_python().is_file(),
                        "{}",
                        t.router_python().display()
                    );
                    assert!(t.model_hf().join("tokenizer.json").is_file());
                }
                Part::Smg => {
                    assert!(t.smg().is_file(), "{}", t.smg().display());
                    assert!(t.model_hf().join("tokenizer.json").is_file());
                }
                Part::Aiperf => {
                    assert!(
                        t.aiperf_python().is_file(),
                        "{}",
                        t.aiperf_python().display()
                    );
                }
                Part::Mlflow => assert!(t.mlflow().is_file(), "{}", t.mlflow().display()),
            }
        }
    }
}
