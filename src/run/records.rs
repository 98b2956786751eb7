//! What a run writes as it goes: a point's record (a failed one made here), `meta.json`, the
//! server's `/metrics` scrapes, and the labels and versions `meta.json` names.

use std::sync::Arc;

use servebench_model::catalog::FlagKind;
use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::{Flag, PointRecord};
use servebench_model::results::rundir::RunDir;

use super::errors::RunError;
use super::probe::scrape;
use super::progress::Progress;

/// A point that produced no measurement: flagged with `kind` and marked incomplete.
pub(crate) fn failed_point(
    p: &servebench_model::spec::Point,
    group: &str,
    kind: FlagKind,
    msg: &str,
) -> PointRecord {
    let mut record = PointRecord::empty(p, group);
    record.flags.push(Flag::new(kind, msg));
    record.incomplete = true;
    record.status = Some(servebench_model::results::records::PointStatus::Failed);
    record
}

/// Writes a point's record; a point that was never measured (skipped, failed before it ran)
/// also leaves the ETA's estimate here, so every such path is counted alike.
pub(crate) fn append_point(
    dir: &RunDir,
    progress: &Progress,
    p: &PointRecord,
) -> Result<(), RunError> {
    progress.point_recorded(&p.id);
    // The point graded against the hardware, as the report will grade it, so the figures are
    // data `compare`, `history` and `expect:` follow (meta.json holds the model config and
    // GPU by the time a point ends; a run without them keeps the point as it is).
    let graded;
    let p = match dir.read_meta() {
        Ok(meta) => match servebench_report::report::point_bounds(&meta, std::slice::from_ref(p))
            .shift_remove(&p.id)
        {
            Some(bound) => {
                graded = PointRecord {
                    bound: Some(bound),
                    ..p.clone()
                };
                &graded
            }
            None => p,
        },
        Err(_) => p,
    };
    dir.append_point(p).map_err(|source| RunError::Write {
        what: dir
            .file(servebench_model::results::rundir::POINTS_FILE)
            .display()
            .to_string(),
        source,
    })
}

pub(crate) fn write_meta(dir: &RunDir, meta: &RunMeta) -> Result<(), RunError> {
    dir.write_meta(meta).map_err(|source| RunError::Write {
        what: dir
            .file(servebench_model::results::rundir::META_FILE)
            .display()
            .to_string(),
        source,
    })
}

pub(crate) fn server_label(s: &servebench_model::spec::types::Server) -> String {
    let one = format!("{} {}", s.engine, s.model.as_deref().unwrap_or(""))
        .trim()
        .to_string();
    match (&s.url, &s.deployment) {
        (Some(u), _) => format!("external {u}"),
        (None, Some(d)) => {
            let workers = if d.disaggregated() {
                format!(
                    "{} prefill + {} decode",
                    d.prefill.unwrap_or(0),
                    d.decode.unwrap_or(0)
                )
            } else {
                d.workers.unwrap_or(1).to_string()
            };
            format!(
                "sglang-router {} over {workers} {} workers",
                d.router.policy, s.engine
            )
        }
        (None, None) => one,
    }
}

/// The python that runs SGLang on the host (for its version in meta.json).
pub(crate) fn python_of(exp: &servebench_model::spec::types::Experiment) -> String {
    match &exp.server.launcher {
        Some(l) if l.first().is_some_and(|p| p.contains("python")) => l[0].clone(),
        _ => "python3".into(),
    }
}

/// The sink that appends each `/metrics` scrape to the run directory's `metrics.jsonl`. A
/// scrape that cannot be written is lost, not fatal: the server's view is a side channel.
pub(crate) fn metrics_sink(dir: Arc<RunDir>) -> scrape::MetricsSink {
    Arc::new(move |m| dir.append_metrics(m))
}

/// The sink that appends each GPU reading to the run directory's `gpu.jsonl` (lost, not
/// fatal, when it cannot be written: telemetry is a side channel).
pub(crate) fn gpu_sink(dir: Arc<RunDir>) -> super::probe::gpu_sampler::GpuSink {
    Arc::new(move |g| dir.append_gpu(g))
}
