//! A real one-node Slurm cluster on 127.0.0.1 for tests: Debian's `slurm-wlm` and `munge`,
//! every file in a temporary directory (config, munge key and socket, state, spool, logs),
//! its own ports, and the daemons in the foreground as children of the test process: started
//! once, by a thread that lives as long as the process (a parent-death signal fires when the
//! thread that forked a child ends), shared by every test, and killed with the process. Each
//! test proves its own jobs and processes are gone. Missing binaries fail the test with the
//! command that installs them: nothing is skipped.
//!
//! ```ignore
//! let cluster = SlurmCluster::get();
//! cluster.command("squeue")          // a std Command with SLURM_CONF set
//! ```

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const BINARIES: &[&str] = &[
    "/usr/sbin/munged",
    "/usr/sbin/mungekey",
    "/usr/sbin/slurmctld",
    "/usr/sbin/slurmd",
    "/usr/bin/sbatch",
    "/usr/bin/srun",
    "/usr/bin/squeue",
    "/usr/bin/scontrol",
    "/usr/bin/scancel",
];

/// The node's name in the test cluster (slurmd is told it with -N).
pub const NODE: &str = "sbtest";

/// A running test cluster.
pub struct SlurmCluster {
    pub dir: tempfile::TempDir,
    /// The `slurm.conf` every Slurm command of the tests (and servebench) is pointed at.
    pub conf: PathBuf,
    daemons: Mutex<Vec<Child>>,
}

static SHARED: Mutex<Option<Arc<SlurmCluster>>> = Mutex::new(None);
static KEEPER: OnceLock<()> = OnceLock::new();

impl SlurmCluster {
    /// The shared cluster, started by the first test that asks.
    pub fn get() -> Arc<SlurmCluster> {
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = shared.as_ref() {
            return c.clone();
        }
        // Started on a thread that never ends, so the daemons' parent-death signal waits for
        // the process's end, not for this test's thread.
        let (tx, rx) = std::sync::mpsc::channel();
        KEEPER.get_or_init(|| {
            std::thread::spawn(move || {
                let started = std::panic::catch_unwind(SlurmCluster::start);
                let _ = tx.send(started.map(Arc::new).map_err(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                }));
                loop {
                    std::thread::park();
                }
            });
        });
        let c = match rx.recv() {
            Ok(Ok(c)) => c,
            Ok(Err(why)) => panic!("{why}"),
            Err(_) => panic!("the Slurm test cluster failed to start earlier in this run"),
        };
        *shared = Some(c.clone());
        c
    }

    fn start() -> SlurmCluster {
        let missing: Vec<&str> = BINARIES
            .iter()
            .copied()
            .filter(|b| !Path::new(b).exists())
            .collect();
        assert!(
            missing.is_empty(),
            "the Slurm tests need a real Slurm: {} missing; install it with \
             `apt-get install -y slurm-wlm munge` (as root)",
            missing.join(", ")
        );
        assert!(
            nix::unistd::geteuid().is_root(),
            "the Slurm tests start slurmd, which runs jobs as their users: run them as root"
        );
        let dir = tempfile::Builder::new()
            .prefix("servebench-slurm")
            .tempdir()
            .expect("tempdir");
        let d = dir.path();
        for sub in ["state", "spool", "log", "munge"] {
            std::fs::create_dir_all(d.join(sub)).expect("mkdir");
        }
        let key = d.join("munge/munge.key");
        let status = Command::new("/usr/sbin/mungekey")
            .arg("--create")
            .arg(format!("--keyfile={}", key.display()))
            .status()
            .expect("mungekey");
        assert!(status.success(), "mungekey --create failed");
        let socket = d.join("munge/munge.sock");
        let mut daemons = Vec::new();
        daemons.push(spawn(
            Command::new("/usr/sbin/munged")
                .arg("--foreground")
                .arg("--force")
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--socket={}", socket.display()))
                .arg(format!(
                    "--pid-file={}",
                    d.join("munge/munged.pid").display()
                ))
                .arg(format!("--log-file={}", d.join("log/munged.log").display()))
                .arg(format!(
                    "--seed-file={}",
                    d.join("munge/munged.seed").display()
                )),
            &d.join("log/munged.out"),
        ));
        wait_for(Duration::from_secs(10), "munged's socket", || {
            socket.exists()
        });
        let conf = d.join("slurm.conf");
        std::fs::write(&conf, slurm_conf(d, &socket)).expect("slurm.conf");
        daemons.push(spawn(
            Command::new("/usr/sbin/slurmctld")
                .arg("-D")
                .arg("-f")
                .arg(&conf),
            &d.join("log/slurmctld.out"),
        ));
        let cluster = SlurmCluster {
            dir,
            conf,
            daemons: Mutex::new(daemons),
        };
        cluster.wait_answering();
        let slurmd = spawn(
            Command::new("/usr/sbin/slurmd")
                .arg("-D")
                .arg("-N")
                .arg(NODE)
                .arg("-f")
                .arg(&cluster.conf),
            &cluster.dir.path().join("log/slurmd.out"),
        );
        cluster.daemons.lock().unwrap().push(slurmd);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = cluster.output("sinfo", &["--noheader", "--format=%t"]);
            if out.trim() == "idle" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the test cluster's node is not idle ({out:?}); logs:\n{}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        cluster
    }

    fn wait_answering(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self
                .command("squeue")
                .arg("--noheader")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "slurmctld does not answer; logs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A Slurm client command pointed at this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// `program args`'s stdout (stderr appended when it fails).
    pub fn output(&self, program: &str, args: &[&str]) -> String {
        let out = self.command(program).args(args).output().expect(program);
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            text.push_str(&String::from_utf8_lossy(&out.stderr));
        }
        text
    }

    /// The jobs in the queue whose names contain `needle`: `id state name` lines.
    pub fn jobs_named(&self, needle: &str) -> Vec<String> {
        self.output("squeue", &["--noheader", "--format=%i %T %j"])
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }

    /// Cancels, when dropped (a test that fails mid-run included), every job whose name
    /// contains `needle`, while the cluster still runs to end their steps.
    pub fn cancel_on_drop(self: &Arc<Self>, needle: &str) -> CancelOnDrop {
        CancelOnDrop {
            cluster: self.clone(),
            needle: needle.to_string(),
        }
    }

    /// The daemons' logs, for failure messages.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        for f in ["slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"] {
            let text =
                std::fs::read_to_string(self.dir.path().join("log").join(f)).unwrap_or_default();
            let tail: String = text
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            s.push_str(&format!("--- {f}\n{tail}\n"));
        }
        s
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        // Jobs first (so slurmd ends their steps), then the daemons, newest first.
        let _ = self
            .command("scancel")
            .arg("--full")
            .arg("--user=root")
            .stderr(Stdio::null())
            .status();
        let mut daemons = self.daemons.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(mut d) = daemons.pop() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(d.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while d.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

/// Starts a daemon in the foreground, its output in `log`; it dies with the test process.
fn spawn(cmd: &mut Command, log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("log");
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

#[track_caller]
fn wait_for(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A one-node cluster: the node at 127.0.0.1, more CPUs than the machine has (slurmd takes
/// the config's word), memory not scheduled (so jobs never queue behind each other's memory),
/// short kill waits so time limits and cancels end fast.
fn slurm_conf(d: &Path, munge_socket: &Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let host = host.split('.').next().unwrap_or("localhost").to_string();
    let port1 = servebench::host::free_port().expect("port");
    let port2 = servebench::host::free_port().expect("port");
    let p = |s: &str| d.join(s).display().to_string();
    format!(
        "ClusterName=sbtest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmctldPort={port1}
SlurmdPort={port2}
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={state}
SlurmdSpoolDir={spool}
SlurmctldPidFile={ctldpid}
SlurmdPidFile={dpid}
SlurmctldLogFile={ctldlog}
SlurmdLogFile={dlog}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
KillWait=2
ReturnToService=2
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs=16 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
",
        sock = munge_socket.display(),
        state = p("state"),
        spool = p("spool"),
        ctldpid = p("slurmctld.pid"),
        dpid = p("slurmd.pid"),
        ctldlog = p("log/slurmctld.log"),
        dlog = p("log/slurmd.log"),
    )
}

/// See [`SlurmCluster::cancel_on_drop`].
pub struct CancelOnDrop {
    cluster: Arc<SlurmCluster>,
    needle: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        for line in self.cluster.jobs_named(&self.needle) {
            if let Some(id) = line.split_whitespace().next() {
                let _ = self
                    .cluster
                    .command("scancel")
                    .arg(id)
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}
