//! Runs logged to a real MLflow 3.17.2 tracking server (`mlflow server`, a sqlite backend and
//! proxied artifacts in a temp dir, on a free port) and read back through its REST API: the
//! run a parent, one child per point with its params and metrics, the artifacts listed and
//! downloadable, and a second log of the same run leaving the same runs.

use std::process::Command;

use serde_json::{Value, json};

use super::*;
use crate::common::*;

/// A real `mlflow server` of the tier, stopped (its whole process group) when dropped.
fn start_mlflow(tier: &Tier) -> RealServer {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let log = dir.path().join("mlflow.log");
    let mut cmd = Command::new(tier.mlflow());
    cmd.arg("server")
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--workers",
            "1",
        ])
        .arg("--backend-store-uri")
        .arg(format!(
            "sqlite:///{}",
            dir.path().join("mlflow.db").display()
        ))
        .arg("--artifacts-destination")
        .arg(dir.path().join("artifacts"))
        .current_dir(dir.path());
    let start = Instant::now();
    let mut child = spawn_kept(cmd, &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_healthy(&mut child, &base, "/health", &log, Duration::from_secs(180));
    RealServer {
        child,
        base,
        log,
        started_in: start.elapsed(),
        _dir: dir,
    }
}

#[track_caller]
fn api(server: &RealServer, path: &str, body: Option<Value>) -> Value {
    let r = match body {
        Some(b) => http::post(&server.base, path, &b),
        None => http::get(&server.base, path),
    }
    .unwrap();
    assert_eq!(r.status, 200, "{path}: {}", r.body);
    r.json()
}

/// Every run of the experiment, as `runs/search` gives them.
fn runs(server: &RealServer, experiment_id: &str) -> Vec<Value> {
    let v = api(
        server,
        "/api/2.0/mlflow/runs/search",
        Some(json!({ "experiment_ids": [experiment_id], "max_results": 1000 })),
    );
    v["runs"].as_array().cloned().unwrap_or_default()
}

fn kv<'a>(run: &'a Value, what: &str, key: &str) -> Option<&'a Value> {
    run["data"][what]
        .as_array()?
        .iter()
        .find(|e| e["key"] == key)
        .map(|e| &e["value"])
}

#[test]
fn mlflow_logs_a_sweep_as_a_parent_with_a_child_per_point_and_a_second_log_updates_it() {
    let Some(tier) = tier(Part::Mlflow) else {
        return;
    };
    let server = start_mlflow(&tier);
    eprintln!(
        "mlflow server ready in {:.1} s",
        server.started_in.as_secs_f64()
    );
    let ws = Workspace::new();
    let spec = ws.write(
        "logged.yaml",
        &sim_spec(
            "logged",
            "  prompt: { kind: random, tokens: 64 }\n  output_tokens: 8",
            &format!(
                "requests: 3\nsweep: {{ concurrency: [1, 2] }}\nreport: {{ mlflow: {{ tracking_uri: \"{}\", experiment: team-bench }} }}",
                server.base
            ),
        ),
    );
    // The spec's `report.mlflow`: logged as the run ends.
    let out = ws.run(&spec);
    let text = show(&out);
    assert!(out.status.success(), "{text}\n{}", server.log_text());
    assert!(text.contains("mlflow: logged run"), "{text}");
    let dir = run_dir(&out);
    let points = read_jsonl(&dir.join("points.jsonl"));
    let experiment = api(
        &server,
        "/api/2.0/mlflow/experiments/get-by-name?experiment_name=team-bench",
        None,
    );
    let eid = experiment["experiment"]["experiment_id"]
        .as_str()
        .unwrap()
        .to_string();
    let first = runs(&server, &eid);
    check_runs(&server, &first, &points, &dir);

    // `servebench mlflow` on the same run: the same runs, updated; no metric row twice.
    let out = servebench()
        .args([
            "mlflow",
            dir.to_str().unwrap(),
            "--tracking-uri",
            &server.base,
        ])
        .args(["--experiment", "team-bench"])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let parent = first
        .iter()
        .find(|r| kv(r, "tags", "mlflow.parentRunId").is_none())
        .unwrap();
    let parent_id = parent["info"]["run_id"].as_str().unwrap();
    assert!(
        show(&out).contains(&format!("mlflow: updated run {parent_id}")),
        "{}",
        show(&out)
    );
    let second = runs(&server, &eid);
    let ids = |rs: &[Value]| {
        let mut v: Vec<String> = rs.iter().map(|r| r["info"]["run_id"].to_string()).collect();
        v.sort();
        v
    };
    assert_eq!(ids(&second), ids(&first), "a second log made new runs");
    check_runs(&server, &second, &points, &dir);
    for child in second
        .iter()
        .filter(|r| kv(r, "tags", "mlflow.parentRunId").is_some())
    {
        let id = child["info"]["run_id"].as_str().unwrap();
        let h = api(
            &server,
            &format!("/api/2.0/mlflow/metrics/get-history?run_id={id}&metric_key=ttft_s"),
            None,
        );
        assert_eq!(h["metrics"].as_array().unwrap().len(), 1, "{h}");
    }
    grown_run_updates_its_parent(&server, &ws, &dir, &points);
}

/// A run logged with one point, then again with two (as `run --resume` grows it): the same
/// parent, now with two children, and no param refused.
fn grown_run_updates_its_parent(server: &RealServer, ws: &Workspace, dir: &Path, points: &[Value]) {
    let part = ws.path().join("part").join(dir.file_name().unwrap());
    std::fs::create_dir_all(&part).unwrap();
    for f in ["meta.json", "spec.yaml", "report.md"] {
        std::fs::copy(dir.join(f), part.join(f)).unwrap();
    }
    let first_line = std::fs::read_to_string(dir.join("points.jsonl")).unwrap();
    let first_line = first_line.lines().next().unwrap().to_string() + "\n";
    std::fs::write(part.join("points.jsonl"), first_line).unwrap();
    let log = |d: &Path| {
        let out = servebench()
            .args([
                "mlflow",
                d.to_str().unwrap(),
                "--tracking-uri",
                &server.base,
            ])
            .args(["--experiment", "grown"])
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", show(&out));
        show(&out)
    };
    assert!(log(&part).contains("logged run"));
    assert!(log(dir).contains("updated run"));
    let e = api(
        server,
        "/api/2.0/mlflow/experiments/get-by-name?experiment_name=grown",
        None,
    );
    let all = runs(server, e["experiment"]["experiment_id"].as_str().unwrap());
    assert_eq!(all.len(), points.len() + 1, "{all:#?}");
    let parent = all
        .iter()
        .find(|r| kv(r, "tags", "mlflow.parentRunId").is_none())
        .unwrap();
    assert_eq!(kv(parent, "tags", "servebench.points"), Some(&json!("2")));
}

/// One parent and a child per point: params, tags, metrics equal to points.jsonl's, and the
/// report's files among the parent's artifacts, byte for byte.
fn check_runs(server: &RealServer, runs: &[Value], points: &[Value], dir: &Path) {
    assert_eq!(runs.len(), points.len() + 1, "{runs:#?}");
    let parents: Vec<&Value> = runs
        .iter()
        .filter(|r| kv(r, "tags", "mlflow.parentRunId").is_none())
        .collect();
    assert_eq!(parents.len(), 1);
    let parent = parents[0];
    let parent_id = parent["info"]["run_id"].as_str().unwrap();
    assert_eq!(parent["info"]["status"], "FINISHED");
    assert_eq!(kv(parent, "params", "experiment"), Some(&json!("logged")));
    assert_eq!(kv(parent, "params", "engine"), Some(&json!("sim")));
    assert_eq!(
        kv(parent, "params", "sweep.concurrency"),
        Some(&json!("[1,2]"))
    );
    assert!(kv(parent, "params", "servebench_version").is_some());
    assert_eq!(
        kv(parent, "tags", "servebench.status"),
        Some(&json!("complete"))
    );
    for p in points {
        let id = p["id"].as_str().unwrap();
        let child = runs
            .iter()
            .find(|r| kv(r, "tags", "servebench.point") == Some(&json!(id)))
            .unwrap_or_else(|| panic!("no child run for {id}"));
        assert_eq!(
            kv(child, "tags", "mlflow.parentRunId"),
            Some(&json!(parent_id))
        );
        let concurrency = p["values"]["concurrency"].to_string();
        assert_eq!(
            kv(child, "params", "sweep.concurrency"),
            Some(&json!(concurrency))
        );
        assert_eq!(kv(child, "params", "flag.profile"), Some(&json!("fast")));
        for name in ["ttft_s", "e2e_s", "decode_tok_s"] {
            let want = p["metrics"][name]["mean"].as_f64().unwrap();
            let got = kv(child, "metrics", name).and_then(Value::as_f64);
            assert_eq!(got, Some(want), "{id} {name}");
            let p99 = p["metrics"][name]["p99"].as_f64().unwrap();
            assert_eq!(
                kv(child, "metrics", &format!("{name}.p99")).and_then(Value::as_f64),
                Some(p99)
            );
        }
        assert_eq!(
            kv(child, "metrics", "requests_ok").and_then(Value::as_f64),
            Some(3.0)
        );
    }
    let listed = api(
        server,
        &format!("/api/2.0/mlflow/artifacts/list?run_id={parent_id}"),
        None,
    );
    let files: Vec<&str> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    for f in [
        "report.md",
        "report.html",
        "spec.yaml",
        "meta.json",
        "points.jsonl",
    ] {
        assert!(files.contains(&f), "{f} not in {files:?}");
    }
    let root = listed["root_uri"]
        .as_str()
        .unwrap()
        .trim_start_matches("mlflow-artifacts:/")
        .to_string();
    let page = http::get(
        &server.base,
        &format!("/api/2.0/mlflow-artifacts/artifacts/{root}/report.md"),
    )
    .unwrap();
    assert_eq!(page.status, 200);
    let written = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert_eq!(page.body, written);
}
