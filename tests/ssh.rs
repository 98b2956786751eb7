//! The SSH host layer against a real OpenSSH server on loopback (see `sshd.rs`).

use std::time::{Duration, Instant};

use indexmap::IndexMap;
use servebench::host::local::StopOutcome;
use servebench::host::ssh::{HostKeyCheck, SshError, SshHost};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::sshd::{Sshd, group_members};

/// The server for one test, or return early (with the reason printed) when sshd is missing.
macro_rules! sshd {
    () => {
        match Sshd::start() {
            Some(s) => s,
            None => return,
        }
    };
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn connects_and_runs_commands() {
    let sshd = sshd!();
    let host = sshd.connect().await;
    let out = host.run(&["echo", "hello"]).await.unwrap();
    assert_eq!(text(&out.stdout), "hello\n");
    let out = host
        .run(&["sh", "-c", "echo oops >&2; exit 3"])
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(text(&out.stderr), "oops\n");
    let e = host.run(&["no-such-program-xyz"]).await.unwrap_err();
    assert!(matches!(e, SshError::CommandNotFound { .. }), "{e}");
    // The remote HOME is the harness's, not the real one.
    let home = host.run_checked(&["sh", "-c", "echo $HOME"]).await.unwrap();
    assert_eq!(text(&home).trim(), sshd.home.display().to_string());
}

#[tokio::test]
async fn an_unknown_host_key_is_refused_under_strict_checking() {
    let sshd = sshd!();
    let mut t = sshd.target();
    t.known_hosts = Some(sshd.known_hosts_file("empty_known_hosts", ""));
    let e = SshHost::connect(&t).await.unwrap_err();
    assert!(matches!(e, SshError::HostKeyUnknown { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("ssh-keyscan") && msg.contains("accept-new"),
        "{msg}"
    );
    assert_eq!(std::fs::read_to_string(t.known_hosts.unwrap()).unwrap(), "");
}

#[tokio::test]
async fn a_changed_host_key_is_refused_with_a_warning_even_with_accept_new() {
    let sshd = sshd!();
    let other = sshd.new_key("other_host_key");
    let wrong = sshd.known_hosts_line(&other);
    for check in [HostKeyCheck::Strict, HostKeyCheck::AcceptNew] {
        let mut t = sshd.target();
        t.known_hosts = Some(sshd.known_hosts_file("wrong_known_hosts", &wrong));
        t.host_key_check = check;
        let e = SshHost::connect(&t).await.unwrap_err();
        assert!(matches!(e, SshError::HostKeyMismatch { .. }), "{e:?}");
        assert!(e.to_string().contains("man-in-the-middle"), "{e}");
        // Never replaced.
        assert_eq!(
            std::fs::read_to_string(t.known_hosts.unwrap()).unwrap(),
            wrong
        );
    }
}

#[tokio::test]
async fn accept_new_adds_an_unknown_key() {
    let sshd = sshd!();
    let mut t = sshd.target();
    let kh = sshd.known_hosts_file("new_known_hosts", "");
    t.known_hosts = Some(kh.clone());
    t.host_key_check = HostKeyCheck::AcceptNew;
    let host = SshHost::connect(&t).await.unwrap();
    assert!(host.run(&["true"]).await.unwrap().status.success());
    // The entry may be hashed (HashKnownHosts): compare the key itself.
    let added = std::fs::read_to_string(&kh).unwrap();
    let expected = std::fs::read_to_string(&sshd.known_hosts).unwrap();
    let key = expected.split_whitespace().nth(2).unwrap();
    assert!(added.contains(key), "{added}");
}

#[tokio::test]
async fn a_wrong_identity_is_refused_authentication() {
    let sshd = sshd!();
    let mut t = sshd.target();
    t.identity = Some(sshd.new_key("stranger"));
    let e = SshHost::connect(&t).await.unwrap_err();
    assert!(matches!(e, SshError::AuthRefused { .. }), "{e:?}");
    assert!(e.to_string().contains("identity file"), "{e}");
}

#[tokio::test]
async fn a_closed_port_is_unreachable() {
    let sshd = sshd!();
    let mut t = sshd.target();
    t.port = Some(servebench::host::free_port().unwrap());
    let e = SshHost::connect(&t).await.unwrap_err();
    assert!(matches!(e, SshError::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains("Connection refused"), "{e}");
}

#[tokio::test]
async fn extra_options_reach_ssh() {
    let sshd = sshd!();
    let mut t = sshd.target();
    // Without the option the default port 22 would be used.
    t.port = None;
    t.options = vec![("Port".into(), sshd.port.to_string())];
    let host = SshHost::connect(&t).await.unwrap();
    assert!(host.run(&["true"]).await.unwrap().status.success());
}

#[tokio::test]
async fn hostile_arguments_arrive_byte_exact_without_side_effects() {
    let sshd = sshd!();
    let host = sshd.connect().await;
    let trap = sshd.dir.path().join("pwned");
    let t = trap.display();
    let hostile = [
        "two words".to_string(),
        "it's".into(),
        "say \"hi\"".into(),
        format!("$(touch {t}1)"),
        format!("`touch {t}2`"),
        format!("; touch {t}3"),
        format!("&& touch {t}4"),
        format!("line\ntouch {t}5"),
        "*".into(),
        "~".into(),
        "$HOME".into(),
        "!!".into(),
        "".into(),
        "back\\slash\ttab".into(),
        "-n".into(),
        "A=b".into(),
    ];
    for v in &hostile {
        let out = host.run_checked(&["printf", "%s", v]).await.unwrap();
        assert_eq!(text(&out), *v);
        let out = host
            .run_script("printf '%s' \"$1\"", &[v.as_str()])
            .await
            .unwrap();
        assert_eq!(text(&out.stdout), *v);
    }
    // A program named like an assignment is a program, not an assignment.
    let e = host.run(&["A=b", "true"]).await.unwrap_err();
    assert!(matches!(e, SshError::CommandNotFound { .. }), "{e:?}");
    let left: Vec<_> = std::fs::read_dir(sshd.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pwned"))
        .collect();
    assert!(left.is_empty(), "a value was run as shell code: {left:?}");
}

#[tokio::test]
async fn a_detached_group_survives_the_connection_and_stops_as_a_whole() {
    let sshd = sshd!();
    let host = sshd.connect().await;
    let base = sshd.dir.path().join("runs");
    let dir = host
        .remote_dir(Some(base.to_str().unwrap()), "run 1")
        .await
        .unwrap();
    assert_eq!(dir, base.join("run 1").display().to_string());
    let log = format!("{dir}/server.log");
    let pid_path = format!("{dir}/server.pid");
    let mut env = IndexMap::new();
    env.insert(
        "GREETING".to_string(),
        "hi $(touch pwned) 'x' \"y\"".to_string(),
    );
    // A parent with a grandchild; both must go.
    let argv = [
        "sh",
        "-c",
        "echo \"$GREETING\"; pwd; sleep 7301 & sleep 7302",
    ];
    let p = host
        .spawn_detached(&argv, &env, Some(&dir), &log, &pid_path)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&pid_path).unwrap().trim(),
        p.pid.to_string()
    );
    // The launching connection is gone; the process is not.
    host.close().await.unwrap();
    let host = sshd.connect().await;
    assert!(host.alive(p.pid).await.unwrap());
    assert!(host.group_alive(p.pgid).await.unwrap());
    let members = wait_for(|| {
        let m = group_members(p.pgid);
        (m.iter().any(|l| l.contains("sleep 7301")) && m.iter().any(|l| l.contains("sleep 7302")))
            .then_some(m)
    });
    assert!(members.len() >= 3, "{members:?}");
    let outcome = host
        .stop_group(p.pgid, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(outcome, StopOutcome::Terminated);
    assert!(
        group_members(p.pgid).is_empty(),
        "{:?}",
        group_members(p.pgid)
    );
    assert!(!host.alive(p.pid).await.unwrap());
    assert!(!host.group_alive(p.pgid).await.unwrap());
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged, format!("hi $(touch pwned) 'x' \"y\"\n{dir}\n"));
    assert!(!base.join("run 1/pwned").exists());
    // Stopping again finds nothing.
    assert_nothing_left_to_stop(&host, p.pgid).await;
}

#[tokio::test]
async fn a_group_that_ignores_term_is_killed_and_exit_codes_are_kept() {
    let sshd = sshd!();
    let host = sshd.connect().await;
    let dir = sshd.dir.path().display().to_string();
    let none = IndexMap::new();
    let stubborn = host
        .spawn_detached(
            &["sh", "-c", "trap '' TERM; sleep 7303"],
            &none,
            None,
            &format!("{dir}/a.log"),
            &format!("{dir}/a.pid"),
        )
        .await
        .unwrap();
    let quick = host
        .spawn_detached(
            &["sh", "-c", "exit 7"],
            &none,
            None,
            &format!("{dir}/b.log"),
            &format!("{dir}/b.pid"),
        )
        .await
        .unwrap();
    let outcome = host
        .stop_group(stubborn.pgid, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(outcome, StopOutcome::Killed);
    assert!(group_members(stubborn.pgid).is_empty());
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(c) = host.exit_code(&quick).await.unwrap() {
            break c;
        }
        assert!(Instant::now() < deadline, "no exit status recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(code, 7);
    assert_eq!(host.exit_code(&stubborn).await.unwrap(), None);
    assert_nothing_left_to_stop(&host, quick.pgid).await;
}

#[tokio::test]
async fn files_are_read_from_an_offset() {
    let sshd = sshd!();
    let host = sshd.connect().await;
    let path = sshd.dir.path().join("some log");
    std::fs::write(&path, b"first\nsecond\n").unwrap();
    let p = path.to_str().unwrap();
    assert_eq!(host.read_from(p, 0).await.unwrap(), b"first\nsecond\n");
    assert_eq!(host.read_from(p, 6).await.unwrap(), b"second\n");
    assert_eq!(host.read_from(p, 13).await.unwrap(), b"");
    assert_eq!(host.read_from(p, 1000).await.unwrap(), b"");
    let e = host.read_from("/no/such/file", 0).await.unwrap_err();
    assert!(e.to_string().contains("/no/such/file"), "{e}");
}

#[tokio::test]
async fn uploads_land_atomically_and_the_binary_is_installed_once() {
    use std::os::unix::fs::PermissionsExt;
    let sshd = sshd!();
    let host = sshd.connect().await;
    let local = sshd.dir.path().join("payload");
    std::fs::write(&local, b"bytes \x00\xff 'quoted'").unwrap();
    let remote = sshd.dir.path().join("up/loaded file");
    host.upload(&local, remote.to_str().unwrap(), 0o640)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(&remote).unwrap(),
        std::fs::read(&local).unwrap()
    );
    let mode = std::fs::metadata(&remote).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640);

    // A stand-in for servebench: answers --version, and is small.
    let exe = sshd.dir.path().join("servebench");
    std::fs::write(&exe, "#!/bin/sh\necho \"servebench 0.1.0\"\n").unwrap();
    let first = host.ensure_binary(&exe).await.unwrap();
    assert!(first.uploaded);
    let expected_dir = sshd.home.join(".cache/servebench/bin");
    assert!(
        first.path.starts_with(expected_dir.to_str().unwrap()),
        "{}",
        first.path
    );
    assert_eq!(
        std::fs::read(&first.path).unwrap(),
        std::fs::read(&exe).unwrap()
    );
    let second = host.ensure_binary(&exe).await.unwrap();
    assert_eq!((second.uploaded, second.path), (false, first.path));

    // Bytes that are not a program for this host: not portable.
    let broken = sshd.dir.path().join("broken");
    std::fs::write(&broken, b"\x7fELF not really").unwrap();
    let e = host.ensure_binary(&broken).await.unwrap_err();
    assert!(matches!(e, SshError::NotPortable { .. }), "{e:?}");
    assert!(e.to_string().contains("static build"), "{e}");
}

#[tokio::test]
async fn a_local_port_forward_reaches_a_server_on_the_host() {
    let sshd = sshd!();
    let host = sshd.connect().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let remote_port = listener.local_addr().unwrap().port();
    tokio::spawn(serve_hello(listener));
    let local_port = host.forward_local("127.0.0.1", remote_port).await.unwrap();
    assert_ne!(local_port, remote_port);
    assert_eq!(http_get(local_port).await, "hello");
}

#[tokio::test]
async fn a_killed_master_is_reconnected_and_forwards_come_back() {
    let sshd = sshd!();
    let host = sshd.connect().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let remote_port = listener.local_addr().unwrap().port();
    tokio::spawn(serve_hello(listener));
    let local_port = host.forward_local("127.0.0.1", remote_port).await.unwrap();
    let old = host.master_pid().await.expect("master pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for(|| (!std::path::Path::new(&format!("/proc/{old}")).exists()).then_some(()));
    assert_eq!(host.master_pid().await, None);
    let out = host.run_checked(&["echo", "back"]).await.unwrap();
    assert_eq!(text(&out), "back\n");
    let new = host.master_pid().await.expect("a new master");
    assert_ne!(new, old);
    assert_eq!(http_get(local_port).await, "hello");
}

#[tokio::test]
async fn reconnection_gives_up_after_bounded_attempts() {
    let mut sshd = sshd!();
    let host = sshd.connect().await;
    sshd.stop();
    let e = host.run(&["true"]).await.unwrap_err();
    match &e {
        SshError::Reconnect { attempts, last, .. } => {
            assert_eq!(*attempts, 3);
            assert!(matches!(**last, SshError::Unreachable { .. }), "{last:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("Connection refused"), "{e}");
}

#[tokio::test]
async fn host_facts_are_gathered() {
    let sshd = sshd!();
    let host = sshd.connect().await;
    let facts = host.host_facts("/no/such/python3").await.unwrap();
    let uname = std::process::Command::new("uname")
        .arg("-srm")
        .output()
        .unwrap();
    assert_eq!(facts.kernel.as_deref(), Some(text(&uname.stdout).trim()));
    assert!(facts.hostname.is_some());
    assert!(facts.cpu_count.is_some_and(|n| n > 0));
    assert_eq!(facts.sglang_version, None);
    if std::path::Path::new("/etc/os-release").exists() {
        assert!(facts.os.is_some());
    }
    let json = serde_json::to_value(&facts).unwrap();
    for key in [
        "hostname",
        "os",
        "kernel",
        "cpu_model",
        "cpu_count",
        "gpus",
        "sglang_version",
    ] {
        assert!(json.get(key).is_some(), "{key} missing in {json}");
    }
}

#[tokio::test]
async fn a_piped_agent_streams_lines_back() {
    let sshd = sshd!();
    let host = sshd.connect().await;
    let mut child = host
        .spawn_piped(&[
            "sh",
            "-c",
            "while read -r l; do echo \"{\\\"got\\\":\\\"$l\\\"}\"; done",
        ])
        .await
        .unwrap();
    let mut stdin = child.stdin().take().unwrap();
    stdin.write_all(b"a\nb\n").await.unwrap();
    drop(stdin);
    let mut out = String::new();
    child
        .stdout()
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert_eq!(out, "{\"got\":\"a\"}\n{\"got\":\"b\"}\n");
    assert!(child.wait().await.unwrap().success());
}

/// Stopping group `pgid` finds no process of it.
async fn assert_nothing_left_to_stop(host: &SshHost, pgid: i32) {
    let outcome = host.stop_group(pgid, Duration::from_secs(1)).await.unwrap();
    assert!(
        matches!(outcome, StopOutcome::AlreadyExited(_)),
        "{outcome:?}"
    );
}

/// Polls `f` every 20 ms for up to 10 s.
#[track_caller]
fn wait_for<T>(f: impl FnMut() -> Option<T>) -> T {
    crate::common::poll_until(Duration::from_secs(10), "condition", f)
}

async fn serve_hello(listener: tokio::net::TcpListener) {
    while let Ok((mut conn, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf).await;
            let _ = conn
                .write_all(b"HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\nhello")
                .await;
        });
    }
}

async fn http_get(port: u16) -> String {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    conn.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut resp = String::new();
    conn.read_to_string(&mut resp).await.unwrap();
    resp.split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

/// The test known_hosts, extended with the server's key under the name `localhost`.
fn known_as_localhost_too(sshd: &Sshd) -> std::path::PathBuf {
    let known = std::fs::read_to_string(&sshd.known_hosts).unwrap();
    let as_localhost = known.replace("[127.0.0.1]", "[localhost]");
    sshd.known_hosts_file("both_names", &format!("{known}{as_localhost}"))
}

fn accepted_logins(sshd: &Sshd) -> usize {
    sshd.log_text().matches("Accepted publickey").count()
}

#[tokio::test]
async fn connects_through_a_jump_host_with_the_targets_key_and_known_hosts() {
    let sshd = sshd!();
    // The same sshd is the bastion, named "localhost" (ssh refuses a jump to the destination's
    // own name): ssh logs in twice, once to jump and once through it.
    let mut t = sshd.target();
    t.known_hosts = Some(known_as_localhost_too(&sshd));
    t.jump = Some(format!("localhost:{}", sshd.port));
    let before = accepted_logins(&sshd);
    let host = match SshHost::connect(&t).await {
        Ok(h) => h,
        Err(e) => panic!("connect: {e}\n--- sshd log ---\n{}", sshd.log_text()),
    };
    let out = host.run_checked(&["echo", "through"]).await.unwrap();
    assert_eq!(text(&out), "through\n");
    let logins = wait_for(|| Some(accepted_logins(&sshd) - before).filter(|n| *n >= 2));
    assert_eq!(logins, 2, "{}", sshd.log_text());
}

#[tokio::test]
async fn a_jump_host_with_an_unknown_key_is_refused_under_strict_checking() {
    let sshd = sshd!();
    // known_hosts names the server as [127.0.0.1]:PORT; as "localhost" it is unknown.
    let mut t = sshd.target();
    t.jump = Some(format!("localhost:{}", sshd.port));
    let e = SshHost::connect(&t).await.unwrap_err();
    match &e {
        SshError::HostKeyUnknown { host, .. } => {
            assert_eq!(
                host,
                &format!("localhost:{}", sshd.port),
                "the jump is named"
            )
        }
        other => panic!("{other:?}"),
    }
    // The bastion's key was not added behind our back.
    let known = std::fs::read_to_string(t.known_hosts.unwrap()).unwrap();
    assert!(!known.contains("[localhost]"), "{known}");
}

#[tokio::test]
async fn a_jump_host_that_cannot_reach_the_target_is_named_in_the_error() {
    let sshd = sshd!();
    let mut t = sshd.target();
    t.known_hosts = Some(known_as_localhost_too(&sshd));
    t.jump = Some(format!("localhost:{}", sshd.port));
    // Nothing listens on port 1 (privileged, never a test's sshd); the bastion lets us in.
    t.port = Some(1);
    let e = SshHost::connect(&t).await.unwrap_err();
    assert!(matches!(e, SshError::Unreachable { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("the jump host localhost:{} lets us in", sshd.port)),
        "{msg}"
    );
}
