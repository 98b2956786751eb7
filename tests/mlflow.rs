//! `servebench mlflow` and the spec's `report.mlflow` when the tracking server is down or
//! refuses: the server and its answer are named, the run directory is untouched, the exit is
//! non-zero, and a token from the environment is sent yet never shown. The real server's
//! side is in the real-engine tier (`real_engine::mlflow`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::common::*;

/// A tracking server that answers every request 403 with MLflow's error JSON, echoing the
/// `Authorization` it got (as a careless proxy might); the request lines and that header are
/// recorded.
fn refusing_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let (mut auth, mut length) = (String::new(), 0usize);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
                let lower = h.to_ascii_lowercase();
                if lower.starts_with("authorization:") {
                    auth = h["authorization:".len()..].trim().to_string();
                }
                if let Some(n) = lower.strip_prefix("content-length:") {
                    length = n.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            log.lock()
                .unwrap()
                .push(format!("{} | {auth}", line.trim()));
            let answer = serde_json::json!({
                "error_code": "PERMISSION_DENIED",
                "message": format!("no access for {auth}"),
            })
            .to_string();
            let mut conn = conn;
            let _ = write!(
                conn,
                "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (url, seen)
}

/// Every file of the run directory and its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn small_run(ws: &Workspace, extra: &str) -> std::process::Output {
    let spec = ws.write(
        "mlflow.yaml",
        &sim_spec(
            "mlflow-errors",
            "  prompt: { kind: random, tokens: 32 }\n  output_tokens: 4",
            &format!("requests: 2\n{extra}"),
        ),
    );
    ws.run(&spec)
}

#[test]
fn a_refusing_server_is_named_with_its_answer_and_the_token_is_sent_but_never_shown() {
    let ws = Workspace::new();
    let out = small_run(&ws, "");
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let before = snapshot(&dir);
    let (url, seen) = refusing_server();
    let token = "mlflow-secret-token-4c1d";
    let out = servebench()
        .args(["mlflow", dir.to_str().unwrap(), "--tracking-uri", &url])
        .env("MLFLOW_TRACKING_TOKEN", token)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let text = show(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("the MLflow server at {url} refused"))
            && text.contains("HTTP 403 PERMISSION_DENIED: no access for Bearer")
            && text.contains("MLFLOW_TRACKING_TOKEN"),
        "{text}"
    );
    assert!(!text.contains(token), "the token is shown: {text}");
    let first = seen.lock().unwrap().clone();
    assert_eq!(
        first,
        vec![format!(
            "GET /api/2.0/mlflow/experiments/get-by-name?experiment_name=mlflow-errors HTTP/1.1 | Bearer {token}"
        )]
    );
    assert_eq!(snapshot(&dir), before, "the run directory changed");
    // A user name and password go as basic credentials (RFC 7617), the password never shown.
    let password = "mlflow-password-81f2";
    let out = servebench()
        .args(["mlflow", dir.to_str().unwrap(), "--tracking-uri", &url])
        .env("MLFLOW_TRACKING_USERNAME", "team")
        .env("MLFLOW_TRACKING_PASSWORD", password)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let text = show(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    // base64("team:mlflow-password-81f2")
    let basic = "dGVhbTptbGZsb3ctcGFzc3dvcmQtODFmMg==";
    assert!(
        seen.lock()
            .unwrap()
            .last()
            .unwrap()
            .ends_with(&format!("| Basic {basic}"))
    );
    assert!(!text.contains(password) && !text.contains(basic), "{text}");
}

#[test]
fn a_server_that_is_down_is_named_and_a_run_that_logs_to_it_is_kept() {
    let port = testkit::process::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let ws = Workspace::new();
    let out = small_run(
        &ws,
        &format!("report: {{ mlflow: {{ tracking_uri: \"{url}\" }} }}"),
    );
    let text = show(&out);
    // The run measured and kept everything; the log's failure is said and fails the exit.
    assert_eq!(out.status.code(), Some(1), "{text}");
    let dir = run_dir(&out);
    assert!(dir.join("report.md").is_file() && dir.join("points.jsonl").is_file());
    assert!(
        text.contains("the run was not logged to MLflow: the MLflow server at")
            && text.contains(&format!(
                "{url} did not answer /api/2.0/mlflow/experiments/get-by-name"
            ))
            && text.contains(&format!("servebench mlflow {}", dir.display())),
        "{text}"
    );
    // And the command alone, on the same run: exit 1, the directory untouched.
    let before = snapshot(&dir);
    let out = servebench()
        .args(["mlflow", dir.to_str().unwrap(), "--tracking-uri", &url])
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(show(&out).contains("did not answer"), "{}", show(&out));
    assert_eq!(snapshot(&dir), before);
}

#[test]
fn a_tracking_uri_servebench_cannot_use_is_bad_input() {
    let ws = Workspace::new();
    let spec = ws.write(
        "bad.yaml",
        &sim_spec(
            "bad",
            "  prompt: { kind: random, tokens: 32 }\n  output_tokens: 4",
            "report: { mlflow: { tracking_uri: \"https://mlflow.example\" } }",
        ),
    );
    let out = servebench().arg("validate").arg(&spec).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        show(&out).contains("`report.mlflow.tracking_uri` cannot be used: scheme `https`"),
        "{}",
        show(&out)
    );
    let out = servebench()
        .args([
            "mlflow",
            ws.path().to_str().unwrap(),
            "--tracking-uri",
            "http://127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "not a run directory: {}",
        show(&out)
    );
}
