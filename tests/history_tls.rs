//! `history --db` over TLS, against a real PostgreSQL with `ssl=on` and a certificate signed
//! by a CA the test makes with the `openssl` CLI; and a fake server that asks a client which
//! requires TLS for its password in clear.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

use servebench_report::history;

use crate::common::*;
use crate::pgserver::{PASSWORD, PgServer, ServerTls, USER};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("openssl: {e}: `apt-get install -y openssl`"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA named `name` (`name.pem`, `name.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

/// `server.crt` and `server.key` for localhost and 127.0.0.1, signed by the CA `ca`.
fn make_server_cert(dir: &Path, ca: &str) {
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
            "-out",
            "server.crt",
        ],
    );
}

/// Whether the connection `--db url` makes is TLS, as the server's `pg_stat_ssl` says.
fn connected_over_tls(url: &str) -> Result<bool, String> {
    let mut client = history::db::connect_url(url).map_err(|e| e.to_string())?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

#[test]
fn sslmode_connects_verifies_and_refuses_as_libpq_does() {
    let certs = tempfile::tempdir().unwrap();
    let dir = certs.path();
    make_ca(dir, "ca");
    make_ca(dir, "other-ca");
    make_server_cert(dir, "ca");
    let tls = ServerTls {
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
        ssl_only: true,
    };
    let server = PgServer::start_with(Some(&tls));
    let at = |host: &str, query: &str| {
        format!(
            "postgres://{USER}:{PASSWORD}@{host}:{}/postgres?{query}",
            server.port
        )
    };
    let ca = dir.join("ca.pem").display().to_string();
    let other = dir.join("other-ca.pem").display().to_string();
    // require: TLS, the certificate not checked.
    assert_eq!(
        connected_over_tls(&at("127.0.0.1", "sslmode=require")),
        Ok(true)
    );
    // verify-full with the CA, by address and by name.
    let full = format!("sslmode=verify-full&sslrootcert={ca}");
    assert_eq!(connected_over_tls(&at("127.0.0.1", &full)), Ok(true));
    assert_eq!(
        connected_over_tls(&at("localhost", &format!("{full}&hostaddr=127.0.0.1"))),
        Ok(true)
    );
    // A wrong CA, a wrong host name: refused, saying why and how it was checked.
    let err = connected_over_tls(&at(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    ))
    .unwrap_err();
    assert!(
        err.contains("invalid peer certificate: UnknownIssuer"),
        "{err}"
    );
    assert!(
        err.contains("sslmode=verify-full") && err.contains(&other),
        "{err}"
    );
    assert!(!err.contains(PASSWORD), "{err}");
    let wrong_host = at("db.wrong.test", &format!("{full}&hostaddr=127.0.0.1"));
    let err = connected_over_tls(&wrong_host).unwrap_err();
    assert!(err.contains("not valid for name"), "{err}");
    assert!(err.contains("db.wrong.test"), "{err}");
    // verify-ca checks the chain only: the wrong name connects, the wrong CA does not.
    let ca_only = format!("sslmode=verify-ca&sslrootcert={ca}&hostaddr=127.0.0.1");
    assert_eq!(connected_over_tls(&at("db.wrong.test", &ca_only)), Ok(true));
    let err = connected_over_tls(&at(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={other}"),
    ))
    .unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    // disable against a server that takes TLS logins only: the server's refusal, named.
    let err = connected_over_tls(&at("127.0.0.1", "sslmode=disable")).unwrap_err();
    assert!(
        err.contains("no encryption") && err.contains("SQLSTATE 28000"),
        "{err}"
    );
    // The command: verify-full with PGSSLMODE and PGSSLROOTCERT, the password from PGPASSWORD.
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path().join("runs")).unwrap();
    let out = servebench()
        .args(["history", "--stdout", "--db"])
        .arg(format!(
            "postgres://{USER}@127.0.0.1:{}/postgres",
            server.port
        ))
        .arg(ws.path().join("runs"))
        .env("PGPASSWORD", PASSWORD)
        .env("PGSSLMODE", "verify-full")
        .env("PGSSLROOTCERT", &ca)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let out = servebench()
        .args(["history", "--stdout", "--db"])
        .arg(at("127.0.0.1", "sslmode=on"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sslmode=on is not one libpq knows"));
}

#[test]
fn prefer_falls_back_on_a_server_without_tls_and_require_refuses_it() {
    let server = PgServer::start();
    let at = |query: &str| format!("{}?{query}", server.url());
    assert_eq!(
        connected_over_tls(&server.url()),
        Ok(false),
        "prefer, the default"
    );
    assert_eq!(connected_over_tls(&at("sslmode=prefer")), Ok(false));
    assert_eq!(connected_over_tls(&at("sslmode=allow")), Ok(false));
    let err = connected_over_tls(&at("sslmode=require")).unwrap_err();
    assert!(err.contains("server does not support TLS"), "{err}");
    assert!(err.contains("sslmode=require"), "{err}");
}

/// A server that declines TLS, then asks for the password in clear; what it was sent.
fn clear_text_asker() -> (u16, std::thread::JoinHandle<Vec<u8>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // SSLRequest: 8 bytes. Answer "N": no TLS here.
        let mut req = [0u8; 8];
        if s.read_exact(&mut req).is_err() {
            return got;
        }
        if s.write_all(b"N").is_err() {
            return got;
        }
        // The startup message, if the client goes on; then AuthenticationCleartextPassword.
        if let Ok(n) = s.read(&mut buf)
            && n > 0
        {
            let _ = s.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]);
            // One reply is enough: the socket is then closed, which ends the client.
            if let Ok(n) = s.read(&mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        got
    });
    (port, handle)
}

#[test]
fn a_server_that_asks_for_the_password_in_clear_gets_it_only_when_tls_is_not_required() {
    let secret = "clear-text-secret-7";
    let url = |port: u16, mode: &str| {
        format!("postgres://u:{secret}@127.0.0.1:{port}/db?sslmode={mode}&connect_timeout=5")
    };
    for mode in ["require", "verify-ca", "verify-full"] {
        let (port, asker) = clear_text_asker();
        let err = history::db::connect_url(&url(port, mode))
            .err()
            .expect(mode);
        let sent = asker.join().unwrap();
        assert!(sent.is_empty(), "{mode}: sent {sent:?}");
        let err = err.to_string();
        assert!(
            err.contains("server does not support TLS") && !err.contains(secret),
            "{err}"
        );
    }
    // The fake answers as it should: with prefer (libpq's too) the password goes in clear.
    let (port, asker) = clear_text_asker();
    let _ = history::db::connect_url(&url(port, "prefer"));
    let sent = asker.join().unwrap();
    assert!(
        sent.first() == Some(&b'p') && String::from_utf8_lossy(&sent).contains(secret),
        "{sent:?}"
    );
}
