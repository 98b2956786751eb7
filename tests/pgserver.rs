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

/// TLS for a test server: its certificate and key (PEM), and whether it takes TLS logins only
/// (`hostssl` in `pg_hba.conf`).
pub struct ServerTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ssl_only: bool,
}

/// Puts `tls`'s certificate and key in the data directory (the key the server's own, 0600)
/// and, for TLS logins only, turns `pg_hba.conf`'s `host` lines into `hostssl`.
fn set_up_tls(data: &std::path::Path, tls: &ServerTls, user: Option<(u32, u32)>) {
    use std::os::unix::fs::PermissionsExt;
    for (from, to) in [(&tls.cert, "server.crt"), (&tls.key, "server.key")] {
        let path = data.join(to);
        std::fs::copy(from, &path).expect("copy the server's certificate");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid)).expect("chown");
        }
    }
    if tls.ssl_only {
        let hba = data.join("pg_hba.conf");
        let text = std::fs::read_to_string(&hba).unwrap();
        let text: Vec<String> = text
            .lines()
            .map(|l| match l.strip_prefix("host ") {
                Some(rest) => format!("hostssl {rest}"),
                None => l.to_string(),
            })
            .collect();
        std::fs::write(&hba, text.join("\n") + "\n").unwrap();
    }
}

impl PgServer {
    /// Starts a server and waits until it accepts logins.
    pub fn start() -> PgServer {
        PgServer::start_with(None)
    }

    /// Starts a server, with TLS when `tls` is given, and waits until it answers logins.
    pub fn start_with(tls: Option<&ServerTls>) -> PgServer {
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
        if let Some(tls) = tls {
            set_up_tls(&data, tls, user);
        }
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
                "-c",
                if tls.is_some() { "ssl=on" } else { "ssl=off" },
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
            // Up when it logs in, or refuses a plain login (TLS only) other than as starting.
            match postgres::Client::connect(&server.url(), postgres::NoTls) {
                Ok(_) => return server,
                Err(e)
                    if e.as_db_error().is_some_and(|d| {
                        *d.code() != postgres::error::SqlState::CANNOT_CONNECT_NOW
                    }) =>
                {
                    return server;
                }
                Err(_) => {}
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
