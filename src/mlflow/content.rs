//! What a run directory becomes in MLflow, without a server: the parent run's params and
//! tags, and each point's (a child run): its swept values and its server group's flags as
//! params, its figures as metrics under catalogue names. Keys follow MLflow's rules
//! (`mlflow/utils/validation.py`: letters, digits, `_ - . /`, space; at most 250 characters)
//! and values its limits (a param 6,000 characters, a tag 8,000).

use indexmap::IndexMap;
use sha2::{Digest, Sha256};

use servebench_model::results::meta::{RunMeta, RunStatus};
use servebench_model::results::records::PointRecord;

/// MLflow's longest key (`MAX_ENTITY_KEY_LENGTH`).
const MAX_KEY: usize = 250;
/// MLflow's longest param value (`MAX_PARAM_VAL_LENGTH`).
pub(super) const MAX_PARAM_VALUE: usize = 6000;
/// MLflow's longest tag value (`MAX_TAG_VAL_LENGTH`).
const MAX_TAG_VALUE: usize = 8000;

/// The tag holding servebench's identity of a run, on the parent and every child: what makes a
/// second log of the same run update it.
pub(super) const RUN_ID_TAG: &str = "servebench.run_id";
/// The tag naming a child's point (`p001`); the parent has none.
pub(super) const POINT_TAG: &str = "servebench.point";
/// MLflow's own tag that puts a run under its parent.
pub(super) const PARENT_TAG: &str = "mlflow.parentRunId";

/// One MLflow run's content.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Content {
    pub name: String,
    /// Milliseconds since the Unix epoch.
    pub start_ms: i64,
    pub end_ms: Option<i64>,
    pub params: IndexMap<String, String>,
    pub tags: IndexMap<String, String>,
    /// Key and value; each is logged at `end_ms` (else `start_ms`), step 0, so logging the
    /// same run again adds no row (MLflow drops a metric identical in key, value, time, step).
    pub metrics: IndexMap<String, f64>,
    /// Params left out, each with why (a value over MLflow's limit).
    pub omitted: Vec<String>,
}

/// servebench's identity of a run, as `history` counts runs: its experiment, start time, spec
/// and client host (a copy of the run directory elsewhere is the same run), hashed.
pub(crate) fn run_id(meta: &RunMeta) -> String {
    let mut h = Sha256::new();
    for part in [
        meta.experiment.name.as_str(),
        meta.started_at.as_str(),
        meta.spec_sha256.as_str(),
        meta.client_host.hostname.as_str(),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..12])
}

/// MLflow's status for a run's.
pub(crate) fn status(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Running => "RUNNING",
        RunStatus::Complete | RunStatus::Degraded => "FINISHED",
        RunStatus::Incomplete => "KILLED",
        RunStatus::Failed => "FAILED",
    }
}

/// The parent run: the experiment, spec and versions as params, servebench's status as tags.
pub(crate) fn parent(meta: &RunMeta, run_dir_name: &str, points: usize) -> Content {
    let mut c = Content {
        name: format!("{} {run_dir_name}", meta.experiment.name),
        start_ms: rfc3339_ms(&meta.started_at).unwrap_or(0),
        end_ms: meta.ended_at.as_deref().and_then(rfc3339_ms),
        ..Content::default()
    };
    let e = &meta.experiment;
    param(&mut c, "servebench_version", &meta.tool_version);
    param(&mut c, "experiment", &e.name);
    param(&mut c, "spec_file", &meta.spec_file);
    param(&mut c, "spec_sha256", &meta.spec_sha256);
    param(&mut c, "engine", &e.server.engine.to_string());
    if let Some(model) = &e.server.model {
        param(&mut c, "model", model);
    }
    param(&mut c, "method", e.method.name());
    if !meta.dimensions.is_empty() {
        param(&mut c, "dimensions", &meta.dimensions.join(","));
    }
    // Each dimension's values: what the children are spread over.
    for (dim, values) in e.sweep.iter() {
        let values = serde_json::to_value(values).unwrap_or_default();
        param(&mut c, &format!("sweep.{dim}"), &compact(&values));
    }
    for s in &meta.servers {
        if let Some(v) = engine_version(s.server_info.as_ref()) {
            param(&mut c, &format!("engine_version.{}", s.group), &v);
        }
    }
    tag(&mut c, RUN_ID_TAG, &run_id(meta));
    // Tags, not params: they change as a resumed run grows, and MLflow keeps a param's first
    // value (it refuses another).
    tag(&mut c, "servebench.points", &points.to_string());
    tag(&mut c, "servebench.status", &meta.status.to_string());
    if let Some(r) = &meta.status_reason {
        tag(&mut c, "servebench.status_reason", r);
    }
    if let Some(g) = &meta.git {
        tag(&mut c, "mlflow.source.git.commit", &g.commit);
        tag(&mut c, "servebench.git_dirty", &g.dirty.to_string());
    }
    tag(&mut c, "mlflow.source.name", "servebench");
    tag(&mut c, "mlflow.user", &meta.client_host.hostname);
    c
}

/// A point's child run: its swept values, its group and the group's launch flags as params,
/// and every figure `points.jsonl` holds for it as metrics.
pub(crate) fn child(meta: &RunMeta, p: &PointRecord) -> Content {
    let label: Vec<String> = p
        .values
        .iter()
        .map(|(k, v)| format!("{k}={}", compact(v)))
        .collect();
    let mut c = Content {
        name: format!("{} {}", p.id, label.join(" "))
            .trim_end()
            .to_string(),
        start_ms: p
            .wall
            .as_ref()
            .map_or(0, |w| (w.started_at * 1000.0) as i64),
        end_ms: p.wall.as_ref().map(|w| (w.ended_at * 1000.0) as i64),
        ..Content::default()
    };
    if c.start_ms == 0 {
        c.start_ms = rfc3339_ms(&meta.started_at).unwrap_or(0);
    }
    for (k, v) in &p.values {
        param(&mut c, &format!("sweep.{k}"), &compact(v));
    }
    param(&mut c, "group", &p.group);
    if let Some(s) = meta.servers.iter().find(|s| s.group == p.group) {
        param(&mut c, "engine", &s.engine);
        if let Some(v) = engine_version(s.server_info.as_ref()) {
            param(&mut c, "engine_version", &v);
        }
        for (flag, v) in &s.args {
            param(&mut c, &format!("flag.{flag}"), &compact(v));
        }
    }
    tag(&mut c, RUN_ID_TAG, &run_id(meta));
    tag(&mut c, POINT_TAG, &p.id);
    // A point measured again after a resume may run on another host of a pool.
    if let Some(h) = &p.host {
        tag(&mut c, "servebench.host", h);
    }
    tag(&mut c, "servebench.point_status", &p.status().to_string());
    if let Some(f) = &p.failure {
        tag(&mut c, "servebench.failure", f);
    }
    point_metrics(&mut c, p);
    c
}

/// A point's figures: each metric's mean under its catalogue name, its p50, p90 and p99 as
/// `NAME.p50` and so on, the graded figures by name, and the request counts.
fn point_metrics(c: &mut Content, p: &PointRecord) {
    let mut put = |key: String, v: f64| {
        if v.is_finite() {
            c.metrics.insert(sanitize(&key), v);
        }
    };
    put("requests_ok".into(), p.ok as f64);
    put("requests_failed".into(), p.errors as f64);
    for (name, s) in &p.metrics {
        if s.count == 0 {
            continue;
        }
        put(name.clone(), s.mean);
        put(format!("{name}.p50"), s.p50);
        put(format!("{name}.p90"), s.p90);
        put(format!("{name}.p99"), s.p99);
    }
    if let Some(b) = &p.bound {
        for (name, v) in &b.figures {
            put(name.clone(), *v);
        }
    }
}

/// A server's version as its `/server_info` says it (SGLang's `version`).
fn engine_version(info: Option<&serde_json::Value>) -> Option<String> {
    let v = info?.get("version")?;
    Some(v.as_str().map_or_else(|| v.to_string(), str::to_string))
}

fn param(c: &mut Content, key: &str, value: &str) {
    let key = sanitize(key);
    let value = servebench_model::redact::text(value).into_owned();
    if value.chars().count() > MAX_PARAM_VALUE {
        c.omitted.push(format!(
            "{key} ({} characters; MLflow keeps at most {MAX_PARAM_VALUE})",
            value.chars().count()
        ));
        return;
    }
    c.params.insert(key, value);
}

fn tag(c: &mut Content, key: &str, value: &str) {
    let value = servebench_model::redact::text(value);
    c.tags
        .insert(sanitize(key), value.chars().take(MAX_TAG_VALUE).collect());
}

/// A JSON value as a param: strings bare, the rest compact JSON.
fn compact(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// A key MLflow accepts: a character outside letters, digits, `_ - . ` and space becomes `_`
/// (a `/` too, since MLflow refuses names that resolve to other paths), cut to 250.
pub(crate) fn sanitize(key: &str) -> String {
    let mut out: String = key
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.' | ' ') {
                ch
            } else {
                '_'
            }
        })
        .take(MAX_KEY)
        .collect();
    // `..` and a name of dots alone resolve to other paths.
    while out.contains("..") {
        out = out.replace("..", "._");
    }
    if out.is_empty() || out.chars().all(|c| c == '.') {
        out = format!("_{out}");
    }
    out
}

fn rfc3339_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_ones_mlflow_accepts() {
        assert_eq!(sanitize("ttft_s.p99"), "ttft_s.p99");
        assert_eq!(sanitize("flag.tp-size"), "flag.tp-size");
        assert_eq!(
            sanitize("sweep.server.env.A=b/c:d"),
            "sweep.server.env.A_b_c_d"
        );
        assert_eq!(sanitize("a..b"), "a._b");
        assert_eq!(sanitize(".."), "._");
        assert_eq!(sanitize(""), "_");
        assert_eq!(sanitize(&"k".repeat(300)).len(), 250);
    }

    #[test]
    fn a_param_over_mlflow_s_limit_is_left_out_and_said() {
        let mut c = Content::default();
        param(&mut c, "big", &"x".repeat(MAX_PARAM_VALUE + 1));
        param(&mut c, "small", "y");
        assert_eq!(c.params.len(), 1);
        assert!(
            c.omitted[0].starts_with("big (6001 characters"),
            "{:?}",
            c.omitted
        );
    }

    #[test]
    fn statuses_are_mlflow_s() {
        assert_eq!(status(RunStatus::Complete), "FINISHED");
        assert_eq!(status(RunStatus::Degraded), "FINISHED");
        assert_eq!(status(RunStatus::Incomplete), "KILLED");
        assert_eq!(status(RunStatus::Failed), "FAILED");
    }
}
