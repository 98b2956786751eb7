//! A run directory logged to an MLflow tracking server (`servebench mlflow`, the spec's
//! `report.mlflow`): the run as a parent MLflow run (the experiment, spec and versions as
//! params, servebench's status as tags, the report, its page and the run's records as
//! artifacts), each point a child run under it (`mlflow.parentRunId`) with its swept values
//! and flags as params and its figures as metrics. A tag with servebench's identity of the
//! run (`servebench.run_id`) makes a second log of the same run update those MLflow runs
//! rather than make new ones. Only the server is written to: the run directory is read.

mod api;
mod content;
mod error;

use std::path::Path;

use bytes::Bytes;

use servebench_model::results::records::PointStatus;
use servebench_model::results::rundir::RunDir;

pub(crate) use error::MlflowError;

/// Largest file uploaded as an artifact; a larger one is left out and said.
const ARTIFACT_BUDGET: u64 = 64 << 20;
/// The run directory's files uploaded to the parent run, when present.
const ARTIFACTS: &[&str] = &[
    "report.md",
    "report.html",
    "spec.yaml",
    "resolved.yaml",
    "meta.json",
    "points.jsonl",
    "points.csv",
];
/// Most chart files uploaded beside `report.md`.
const MAX_CHARTS: usize = 500;

/// Where a run goes.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `http://host:port`.
    pub tracking_uri: String,
    /// The MLflow experiment; None: the spec's name.
    pub experiment: Option<String>,
}

/// What was logged.
#[derive(Debug, Clone)]
pub(crate) struct Logged {
    pub server: String,
    pub experiment: String,
    pub experiment_id: String,
    /// The parent run's id.
    pub run_id: String,
    /// True when the parent was already there (a second log of the same run).
    pub updated: bool,
    /// Child runs, one per point.
    pub points: usize,
    /// Artifacts uploaded to the parent.
    pub artifacts: usize,
    /// What was left out, one sentence each.
    pub notes: Vec<String>,
}

impl Logged {
    /// The parent run's page in MLflow's UI.
    pub(crate) fn url(&self) -> String {
        format!(
            "{}/#/experiments/{}/runs/{}",
            self.server, self.experiment_id, self.run_id
        )
    }
}

/// Logs the run directory at `dir` to `target`.
pub(crate) async fn log_run(dir: &Path, target: &Target) -> Result<Logged, MlflowError> {
    let run = RunDir::open(dir)?;
    let meta = run.read_meta()?;
    let points = run.read_points()?;
    let api = api::Api::new(&target.tracking_uri)?;
    let experiment = target
        .experiment
        .clone()
        .unwrap_or_else(|| meta.experiment.name.clone());
    let experiment_id = api.experiment(&experiment).await?;
    let found = api.find(&experiment_id, &content::run_id(&meta)).await?;
    let dir_name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = content::parent(&meta, &dir_name, points.len());
    let (run_id, artifact_uri, updated) = match found.iter().find(|f| f.point.is_none()) {
        Some(f) => (f.id.clone(), f.artifact_uri.clone(), true),
        None => {
            let f = api.create(&experiment_id, &parent, None).await?;
            (f.id, f.artifact_uri, false)
        }
    };
    let mut notes: Vec<String> = Vec::new();
    for p in &points {
        let c = content::child(&meta, p);
        let id = match found
            .iter()
            .find(|f| f.point.as_deref() == Some(p.id.as_str()))
        {
            Some(f) => f.id.clone(),
            None => api.create(&experiment_id, &c, Some(&run_id)).await?.id,
        };
        let status = match p.status() {
            PointStatus::Failed => "FAILED",
            _ => "FINISHED",
        };
        api.log(&id, &c, status).await?;
        notes.extend(
            c.omitted
                .iter()
                .map(|o| format!("point {}: param {o} left out", p.id)),
        );
    }
    let artifacts = upload_artifacts(&api, &run, &artifact_uri, &mut notes).await?;
    // The parent last: its status and end time say the log is whole.
    api.log(&run_id, &parent, content::status(meta.status))
        .await?;
    notes.extend(parent.omitted.iter().map(|o| format!("param {o} left out")));
    Ok(Logged {
        server: api.server.clone(),
        experiment,
        experiment_id,
        run_id,
        updated,
        points: points.len(),
        artifacts,
        notes,
    })
}

/// Uploads the report, its page, the spec and the run's records (and the report's charts) to
/// the run whose artifacts are at `artifact_uri`; returns how many went. A server that does
/// not proxy artifacts (an `s3://` or local root) gets none, said in `notes`.
async fn upload_artifacts(
    api: &api::Api,
    run: &RunDir,
    artifact_uri: &str,
    notes: &mut Vec<String>,
) -> Result<usize, MlflowError> {
    let Some(root) = proxied_root(artifact_uri) else {
        notes.push(format!(
            "artifacts not uploaded: the run's artifact location is `{artifact_uri}`, which the server does not proxy (start it with --serve-artifacts)"
        ));
        return Ok(0);
    };
    let mut files: Vec<(String, std::path::PathBuf)> = ARTIFACTS
        .iter()
        .map(|n| (n.to_string(), run.file(n)))
        .filter(|(_, p)| p.is_file())
        .collect();
    let charts = run.file(servebench_model::results::rundir::CHARTS_DIR);
    if let Ok(entries) = std::fs::read_dir(&charts) {
        let mut names: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        if names.len() > MAX_CHARTS {
            notes.push(format!(
                "{} charts beyond the first {MAX_CHARTS} not uploaded",
                names.len() - MAX_CHARTS
            ));
        }
        files.extend(
            names
                .into_iter()
                .take(MAX_CHARTS)
                .map(|n| (format!("charts/{n}"), charts.join(&n))),
        );
    }
    let mut sent = 0;
    for (name, path) in files {
        let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if size > ARTIFACT_BUDGET {
            notes.push(format!(
                "{name} not uploaded: {size} bytes, over the {ARTIFACT_BUDGET}-byte budget"
            ));
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            notes.push(format!("{name} not uploaded: it could not be read"));
            continue;
        };
        // Written through the redactor like every file, again: nothing secret leaves.
        let bytes = servebench_model::redact::current()
            .bytes(&bytes)
            .into_owned();
        api.put_artifact(&root, &name, Bytes::from(bytes)).await?;
        sent += 1;
    }
    Ok(sent)
}

/// The path under the server's proxied artifact route of a run's `mlflow-artifacts:/1/ab/artifacts`
/// (or `mlflow-artifacts://host:port/1/ab/artifacts`); None for any other location.
fn proxied_root(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("mlflow-artifacts:")?;
    let path = match rest.strip_prefix("//") {
        Some(authority_and_path) => &authority_and_path[authority_and_path.find('/')?..],
        None => rest,
    };
    let path = path.trim_matches('/');
    (!path.is_empty()).then(|| path.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxied_artifact_root_comes_from_the_run_s_artifact_uri() {
        assert_eq!(
            proxied_root("mlflow-artifacts:/1/ab/artifacts").as_deref(),
            Some("1/ab/artifacts")
        );
        assert_eq!(
            proxied_root("mlflow-artifacts://h:5000/1/ab/artifacts").as_deref(),
            Some("1/ab/artifacts")
        );
        assert_eq!(proxied_root("s3://bucket/1/ab/artifacts"), None);
        assert_eq!(proxied_root("/tmp/mlruns/1/ab/artifacts"), None);
    }
}
