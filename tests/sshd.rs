//! A real OpenSSH server on 127.0.0.1 for tests, as the current user, with throwaway keys:
//! a temporary host key, a client key in a temporary authorized_keys, a known_hosts that
//! holds the host key, and a temporary remote $HOME (sshd's SetEnv), so tests never touch
//! ~/.ssh or the real home. The server is killed on drop.
//!
//! ```ignore
//! let Some(sshd) = Sshd::start() else { return };   // prints why when sshd is missing
//! let host = SshHost::connect(&sshd.target()).await.unwrap();
//! ```

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use servebench::host::ssh::{HostKeyCheck, SshHost, SshTarget};

pub const SSHD: &str = "/usr/sbin/sshd";

/// A running sshd and the files a client needs.
pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// Private key whose public half is in authorized_keys.
    pub client_key: PathBuf,
    /// known_hosts with the server's key for `[127.0.0.1]:port`.
    pub known_hosts: PathBuf,
    /// $HOME of remote sessions.
    pub home: PathBuf,
    log: PathBuf,
    child: Child,
}

impl Sshd {
    /// This server as one entry of a spec's `hosts:` list (its `- ssh:` item), then `extra`
    /// (more keys of the entry, indented as they are).
    pub fn host_entry(&self, extra: &str) -> String {
        format!(
            "  - ssh: 127.0.0.1\n    port: {port}\n    identity: {key}\n    known_hosts: {kh}\n    remote_dir: {home}/sb\n{extra}",
            port = self.port,
            key = self.client_key.display(),
            kh = self.known_hosts.display(),
            home = self.home.display(),
        )
    }

    /// Starts a server, or prints why not and returns None when OpenSSH's sshd is absent
    /// (CI installs it, so there these tests always run).
    pub fn start() -> Option<Sshd> {
        Sshd::start_with_env(&[])
    }

    /// [`start`](Self::start), with `env` set in every remote session (sshd's `SetEnv`), as a
    /// cluster's login node sets `SLURM_CONF` for its users.
    pub fn start_with_env(env: &[(&str, &str)]) -> Option<Sshd> {
        if !Path::new(SSHD).exists() {
            eprintln!("skipped: {SSHD} is not installed (apt-get install openssh-server)");
            return None;
        }
        // As root, sshd insists on its privilege separation directory.
        if is_root() {
            std::fs::create_dir_all("/run/sshd").expect("create /run/sshd");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let host_key = keygen(dir.path(), "host_key");
        let client_key = keygen(dir.path(), "client_key");
        std::fs::copy(pub_path(&client_key), dir.path().join("authorized_keys"))
            .expect("authorized_keys");
        let home = dir.path().join("home");
        std::fs::create_dir(&home).expect("home");
        let known_hosts = dir.path().join("known_hosts");
        let log = dir.path().join("sshd.log");
        // The free port can be taken before sshd binds it: try a few.
        for _ in 0..5 {
            let port = servebench::host::free_port().expect("free port");
            let config = dir.path().join("sshd_config");
            std::fs::write(
                &config,
                sshd_config(dir.path(), &host_key, port, &home, env),
            )
            .expect("sshd_config");
            let mut child = spawn_sshd(&config, &log);
            if !wait_listening(&mut child, port, &log) {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                assert!(
                    text.contains("Address already in use"),
                    "sshd did not start:\n{text}"
                );
                continue;
            }
            let sshd = Sshd {
                dir,
                port,
                client_key,
                known_hosts,
                home,
                log,
                child,
            };
            std::fs::write(&sshd.known_hosts, sshd.known_hosts_line(&host_key))
                .expect("known_hosts");
            return Some(sshd);
        }
        panic!("sshd could not find a free port");
    }

    /// A target for this server: strict host keys against the test known_hosts, the test
    /// client key, and a short connect timeout.
    pub fn target(&self) -> SshTarget {
        let mut t = SshTarget::new("127.0.0.1");
        t.port = Some(self.port);
        t.identity = Some(self.client_key.clone());
        t.known_hosts = Some(self.known_hosts.clone());
        t.host_key_check = HostKeyCheck::Strict;
        t.connect_timeout = Duration::from_secs(5);
        t
    }

    /// A connection to this server with [`target`](Self::target).
    pub async fn connect(&self) -> SshHost {
        match SshHost::connect(&self.target()).await {
            Ok(h) => h,
            Err(e) => panic!("connect: {e}\n--- sshd log ---\n{}", self.log_text()),
        }
    }

    /// A fresh key pair in the test directory (not authorized anywhere); the private key.
    pub fn new_key(&self, name: &str) -> PathBuf {
        keygen(self.dir.path(), name)
    }

    /// A known_hosts file named `name` holding `text`.
    pub fn known_hosts_file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("known_hosts");
        p
    }

    /// `[127.0.0.1]:PORT TYPE KEY` for the public half of `key`.
    pub fn known_hosts_line(&self, key: &Path) -> String {
        let public = std::fs::read_to_string(pub_path(key)).expect("public key");
        let mut fields = public.split_whitespace();
        let (kind, blob) = (fields.next().expect("type"), fields.next().expect("key"));
        format!("[127.0.0.1]:{} {kind} {blob}\n", self.port)
    }

    /// What sshd logged, for assertion messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Sshd {
    /// Stops the server and its connections (as if the host went down).
    pub fn stop(&mut self) {
        // Killing the listener leaves its per-connection processes behind (they are in
        // sessions of their own); end those first, while the listener can still reap them.
        let listener = self.child.id();
        for pid in children_of(listener) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while !children_of(listener).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pids whose parent is `parent` (zombies included: they are gone once reaped).
fn children_of(parent: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Fields after the command name: state, ppid, ...
            let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or("");
            after.split_whitespace().nth(1) == Some(&parent.to_string())
        })
        .collect()
}

fn sshd_config(
    dir: &Path,
    host_key: &Path,
    port: u16,
    home: &Path,
    env: &[(&str, &str)],
) -> String {
    let extra: String = env.iter().map(|(k, v)| format!(" {k}={v}")).collect();
    format!(
        "ListenAddress 127.0.0.1\n\
         Port {port}\n\
         HostKey {host_key}\n\
         PidFile {dir}/sshd.pid\n\
         AuthorizedKeysFile {dir}/authorized_keys\n\
         StrictModes no\n\
         UsePAM no\n\
         PermitRootLogin prohibit-password\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         PubkeyAuthentication yes\n\
         AllowTcpForwarding yes\n\
         SetEnv HOME={home}{extra}\n\
         LogLevel VERBOSE\n",
        host_key = host_key.display(),
        dir = dir.display(),
        home = home.display(),
    )
}

/// True once sshd accepts connections; false when it exited (its log says why).
fn wait_listening(child: &mut Child, port: u16, log: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if servebench::host::port_in_use(port) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    panic!(
        "sshd did not listen within 10 s:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

fn spawn_sshd(config: &Path, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("sshd log");
    let mut cmd = Command::new(SSHD);
    cmd.arg("-D")
        .arg("-e")
        .arg("-f")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: prctl is async-signal-safe. If the test process dies without running Drop,
    // the server still goes with it.
    unsafe {
        cmd.pre_exec(|| {
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().expect("start sshd")
}

/// An ed25519 key pair without passphrase; returns the private key path.
fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    let out = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "servebench-test",
            "-f",
        ])
        .arg(&key)
        .stdin(Stdio::null())
        .output()
        .expect("run ssh-keygen");
    assert!(
        out.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    key
}

fn pub_path(key: &Path) -> PathBuf {
    let mut p = key.as_os_str().to_owned();
    p.push(".pub");
    PathBuf::from(p)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    nix::unistd::geteuid().is_root()
}

/// Processes in group `pgid` on this machine (the "remote" host in tests), zombies left out:
/// `ps -eo pid,pgid,stat,args`.
pub fn group_members(pgid: i32) -> Vec<String> {
    let out = Command::new("ps")
        .args(["-eo", "pid=,pgid=,stat=,args="])
        .output()
        .expect("ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 3 && f[1] == pgid.to_string() && !f[2].starts_with('Z')
        })
        .map(str::to_string)
        .collect()
}
