//! A real PostgreSQL server on 127.0.0.1 for tests, from Debian's `postgresql` package:
//! `initdb` into a temporary directory (a user `sbtest` with a password, SCRAM logins only),
//! then `postgres` in the foreground on a free port as a child of the test, killed when the
//! server is dropped. As root the server runs as the package's `postgres` user (PostgreSQL
//! refuses root). Missing binaries fail the test with the command that installs them:
//! nothing is skipped.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The test login.
pub const USER: &str = "sbtest";
/// Its password.
pub const PASSWORD: &str = "sbtest-password-1";

/// A running server.
pub struct PgServer {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

/// The newest `/usr/lib/postgresql/<version>/bin`.
fn bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL's server is not installed (no /usr/lib/postgresql/*/bin/initdb): \
             `apt-get install -y postgresql` (as root)"
        ),
    }
}

/// The uid and gid of the package's `postgres` user, when this process is root.
fn run_as() -> Option<(u32, u32)> {
    if !nix::unistd::Uid::effective().is_root() {
        return None;
    }
    let user = nix::unistd::User::from_name("postgres")
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            panic!("no `postgres` user to run the server as: `apt-get install -y postgresql`")
        });
    Some((user.uid.as_raw(), user.gid.as_raw()))
}

fn command(bin: PathBuf, user: Option<(u32, u32)>) -> Command {
    let mut c = Command::new(bin);
    if let Some((uid, gid)) = user {
        c.uid(uid).gid(gid);
    }
    c
}

impl PgServer {
    /// Starts a server and waits until it accepts logins.
    pub fn start() -> PgServer {
        let bin = bin_dir();
        let user = run_as();
        let dir = tempfile::tempdir().expect("tempdir");
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown");
        }
        let data = dir.path().join("data");
        let pwfile = dir.path().join("pw");
        std::fs::write(&pwfile, PASSWORD).unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&pwfile, Some(uid), Some(gid)).expect("chown");
        }
        let out = command(bin.join("initdb"), user)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                USER,
                "--auth=scram-sha-256",
                "--no-sync",
                "-E",
                "UTF8",
            ])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let log = std::fs::File::create(dir.path().join("postgres.log")).unwrap();
        let child = command(bin.join("postgres"), user)
            .arg("-D")
            .arg(&data)
            .args([
                "-p",
                &port.to_string(),
                "-h",
                "127.0.0.1",
                "-c",
                "fsync=off",
            ])
            .arg("-k")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        let server = PgServer { dir, port, child };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if postgres::Client::connect(&server.url(), postgres::NoTls).is_ok() {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept logins in 60 s: {}",
                std::fs::read_to_string(server.dir.path().join("postgres.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The URL without a password: it comes from `PGPASSWORD` or a `.pgpass`.
    pub fn url_without_password(&self, user: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL that logs in.
    pub fn url(&self) -> String {
        format!(
            "postgres://{USER}:{PASSWORD}@127.0.0.1:{}/postgres",
            self.port
        )
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
