//! `servebench export` and the spec's `report.export`: a run directory's points written in the
//! formats other tools read (`export_llmd`, `export_aiperf`), into `<run>/export/<format>/`
//! or a folder the caller names. The writers are pure; the files are written here.

use std::path::{Path, PathBuf};

use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::{PointRecord, RequestRecord};
use servebench_model::results::rundir::RunDir;
use servebench_model::spec::types::ExportFormat;

use super::{ReportError, export_aiperf, export_llmd};

/// llm-d Benchmark Reports, one per point: each file's name and its JSON.
pub fn llmd_reports(meta: &RunMeta, points: &[PointRecord]) -> Vec<(String, serde_json::Value)> {
    export_llmd::reports(meta, points)
}

/// One point's AIPerf artifacts: its id, `profile_export.jsonl`'s lines and
/// `profile_export_aiperf.json`.
pub type AiperfPoint = (String, Vec<serde_json::Value>, serde_json::Value);

/// AIPerf's artifacts, one folder per point.
pub fn aiperf_exports(
    meta: &RunMeta,
    points: &[PointRecord],
    requests: &[RequestRecord],
) -> Vec<AiperfPoint> {
    export_aiperf::export(meta, points, requests)
        .into_iter()
        .map(|p| {
            let lines = p
                .records
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_slice(l).expect("the writer wrote JSON"))
                .collect();
            (p.point, lines, p.aggregate)
        })
        .collect()
}

/// Where a format's files go by default, inside the run directory.
pub fn default_dir(run: &Path, format: ExportFormat) -> PathBuf {
    let name: &'static str = format.into();
    run.join("export").join(name)
}

/// Writes `format`'s files for every point of the run into `out` (created when missing) and
/// returns the files written.
pub fn write(dir: &RunDir, format: ExportFormat, out: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let meta = dir.read_meta()?;
    let points = dir.read_points()?;
    let write = |path: PathBuf, bytes: &[u8]| -> Result<PathBuf, ReportError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| ReportError::Write {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        let raw = String::from_utf8_lossy(bytes);
        let text = servebench_model::redact::text(&raw);
        std::fs::write(&path, text.as_bytes()).map_err(|source| ReportError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    };
    let mut written = Vec::new();
    match format {
        ExportFormat::LlmD => {
            for (name, doc) in export_llmd::reports(&meta, &points) {
                let bytes = serde_json::to_vec_pretty(&doc).expect("a Value serialises");
                written.push(write(out.join(name), &bytes)?);
            }
        }
        ExportFormat::Aiperf => {
            let requests = dir.read_requests()?;
            for p in export_aiperf::export(&meta, &points, &requests) {
                let folder = out.join(&p.point);
                written.push(write(folder.join(export_aiperf::RECORDS_FILE), &p.records)?);
                let bytes = serde_json::to_vec_pretty(&p.aggregate).expect("a Value serialises");
                written.push(write(folder.join(export_aiperf::AGGREGATE_FILE), &bytes)?);
            }
        }
    }
    Ok(written)
}

/// The spec's `report.export` formats, each into its default folder (with every report).
pub(crate) fn write_spec_exports(
    dir: &RunDir,
    formats: &[ExportFormat],
) -> Result<(), ReportError> {
    for f in formats {
        write(dir, *f, &default_dir(&dir.path, *f))?;
    }
    Ok(())
}
