//! `servebench import`: another tool's result files made into a servebench run directory
//! (`meta.json` naming the tool, its recorded configuration and how its method differs;
//! `points.jsonl` with the metrics the files hold, in servebench's units), so `compare` and
//! `history` set them beside servebench's runs. The readers (`import_aiperf`, `import_vllm`)
//! are pure functions from bytes to an [`Imported`]; reading within budgets and writing are
//! here. What the files lack is absent, never invented.

use std::io::Read;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::json;

use servebench_model::results::meta::{HostFacts, ImportedFrom, RunMeta, RunStatus};
use servebench_model::results::records::{PointRecord, Stat};

use super::{import_aiperf, import_vllm};

/// Each input file's budget in bytes: a result file of a few thousand requests is a few MB.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// The tools whose files `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// AIPerf 0.13: `profile_export.jsonl` and `profile_export_aiperf.json`.
    Aiperf,
    /// `vllm bench serve --save-result` (`--save-detailed` for per-request values).
    VllmBench,
}

impl From {
    /// The names `--from` takes.
    pub fn names() -> &'static [&'static str] {
        &["aiperf", "vllm-bench"]
    }
}

impl std::str::FromStr for From {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "aiperf" => Ok(From::Aiperf),
            "vllm-bench" => Ok(From::VllmBench),
            _ => Err(format!("`{s}`: use one of {}", From::names().join(", "))),
        }
    }
}

/// What a reader made of a tool's files: the run's provenance and one point.
#[derive(Debug)]
pub(crate) struct Imported {
    pub(crate) from: ImportedFrom,
    /// `concurrency` or `rate` when the tool recorded it: the point's sweep values.
    pub(crate) values: IndexMap<String, serde_json::Value>,
    pub(crate) point: PointRecord,
    /// The resolved-spec fields the tool recorded (model, API, requests, concurrency).
    pub(crate) experiment: serde_json::Value,
    pub(crate) started_at: Option<String>,
    /// The experiment's name; None: `<tool>-import`.
    pub(crate) name: Option<String>,
}

/// An import that failed: the file, where in it, what and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    At {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
}

/// A file's bytes, read within [`MAX_INPUT_BYTES`].
pub(crate) fn read_bounded(path: &Path) -> Result<Vec<u8>, ImportError> {
    let io = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file =
        servebench_model::results::rundir::open_regular(path, MAX_INPUT_BYTES).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(ImportError::File {
            path: path.to_path_buf(),
            message: format!(
                "over the import budget of {MAX_INPUT_BYTES} bytes: not read (split the run, or import its aggregate file alone)"
            ),
        });
    }
    Ok(bytes)
}

/// A JSON parse error at its line and column.
pub(crate) fn json_error(path: &Path, line_offset: usize, e: &serde_json::Error) -> ImportError {
    ImportError::At {
        path: path.to_path_buf(),
        line: line_offset + e.line(),
        column: e.column(),
        message: format!("not the JSON the tool writes: {e}"),
    }
}

/// Which tool wrote `path` (a file or an AIPerf artifact folder), from its names and first
/// bytes; an error naming the choices when it cannot tell.
pub fn detect(path: &Path) -> Result<From, ImportError> {
    let unsure = |why: &str| ImportError::File {
        path: path.to_path_buf(),
        message: format!(
            "{why}; name the tool with --from ({})",
            From::names().join(", ")
        ),
    };
    if path.is_dir() {
        if path.join(import_aiperf::RECORDS).is_file()
            || path.join(import_aiperf::AGGREGATE).is_file()
        {
            return Ok(From::Aiperf);
        }
        return Err(unsure("a folder without AIPerf's profile_export files"));
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with("profile_export") {
        return Ok(From::Aiperf);
    }
    let bytes = read_bounded(path)?;
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(1 << 20)]);
    let has = |key: &str| head.contains(&format!("\"{key}\""));
    match (
        has("mean_ttft_ms") || (has("request_throughput") && has("num_prompts")),
        has("schema_version") && has("time_to_first_token"),
    ) {
        (true, false) => Ok(From::VllmBench),
        (false, true) => Ok(From::Aiperf),
        _ => Err(unsure("cannot tell which tool wrote this file")),
    }
}

/// Reads `path` as `from`'s files and writes the run directory `out`; returns it.
/// `name` is the experiment the run joins in `history` (default `<tool>-import`).
pub fn import(
    path: &Path,
    from: Option<From>,
    out: &Path,
    name: Option<&str>,
) -> Result<PathBuf, ImportError> {
    let from = match from {
        Some(f) => f,
        None => detect(path)?,
    };
    let mut imported = match from {
        From::Aiperf => import_aiperf::read(path)?,
        From::VllmBench => import_vllm::read(path)?,
    };
    if let Some(name) = name {
        imported.name = Some(name.to_string());
    }
    write(&imported, out)?;
    Ok(out.to_path_buf())
}

/// The run's `meta.json`: an external server, the tool's recorded fields, the import.
fn meta(imported: &Imported) -> Result<RunMeta, serde_json::Error> {
    let tool = imported.from.tool.clone();
    let mut experiment = json!({
        "name": imported.name.clone().unwrap_or_else(|| format!("{tool}-import")),
        "description": format!("Imported from {tool}'s result files by servebench import."),
        "server": { "url": "http://unrecorded.invalid" },
        "workload": { "api": "openai-chat", "prompt": { "kind": "random", "tokens": 1 }, "output_tokens": 1 },
        "repeat": 1, "requests": 1, "concurrency": 1, "request_timeout": "10m",
    });
    merge(&mut experiment, &imported.experiment);
    let mut recorded = IndexMap::new();
    super::comparable::flatten("", &imported.experiment, &mut recorded);
    let mut from = imported.from.clone();
    from.recorded = recorded.into_keys().collect();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let started = imported.started_at.clone().unwrap_or_else(|| now.clone());
    serde_json::from_value(json!({
        "tool_version": env!("CARGO_PKG_VERSION"),
        "spec_file": imported.from.files.first().cloned().unwrap_or_default(),
        "spec_sha256": "",
        "experiment": experiment,
        "dimensions": imported.values.keys().collect::<Vec<_>>(),
        "started_at": started,
        "ended_at": started,
        "status": RunStatus::Complete,
        "client_host": HostFacts::default(),
        "imported": from,
    }))
}

/// `patch`'s leaves over `base`'s.
fn merge(base: &mut serde_json::Value, patch: &serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

/// Writes `meta.json` and `points.jsonl` into `out`, which must not hold a run already.
fn write(imported: &Imported, out: &Path) -> Result<(), ImportError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImportError::Io { path, source }
    };
    let meta_path = out.join("meta.json");
    if meta_path.exists() {
        return Err(ImportError::File {
            path: out.to_path_buf(),
            message: "holds a run already (meta.json): nothing written; give another --out".into(),
        });
    }
    std::fs::create_dir_all(out).map_err(io(out))?;
    let meta = meta(imported).map_err(|e| ImportError::File {
        path: out.to_path_buf(),
        message: format!("the imported run does not make a servebench run: {e}"),
    })?;
    let mut point = imported.point.clone();
    point.values = imported.values.clone();
    let meta_text = serde_json::to_string_pretty(&meta).expect("meta serialises");
    std::fs::write(&meta_path, meta_text).map_err(io(&meta_path))?;
    let points = out.join("points.jsonl");
    let line = serde_json::to_string(&point).expect("a point serialises") + "\n";
    std::fs::write(&points, line).map_err(io(&points))?;
    Ok(())
}

/// Statistics of `xs` in servebench's way: linear percentiles, sample standard deviation.
/// None for no values.
pub(crate) fn stat_of(xs: &[f64]) -> Option<Stat> {
    let mut xs: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n as f64;
    let q = |p: f64| {
        let r = p * (n - 1) as f64;
        let (lo, hi) = (r.floor() as usize, r.ceil() as usize);
        xs[lo] + (xs[hi] - xs[lo]) * (r - lo as f64)
    };
    let std = (n >= 2)
        .then(|| (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
    Some(Stat {
        count: n,
        mean,
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        min: xs[0],
        max: xs[n - 1],
        std,
        cv: std.filter(|_| mean != 0.0).map(|s| s / mean),
        ..Stat::default()
    })
}

/// A new point record `p001` with `ok` requests, `errors` failures and `metrics`.
pub(crate) fn point(ok: usize, errors: usize, metrics: IndexMap<String, Stat>) -> PointRecord {
    let mut p: PointRecord = serde_json::from_value(json!({
        "id": "p001", "values": {}, "group": "g1", "ok": ok, "errors": errors,
        "metrics": {}, "flags": [], "incomplete": false,
    }))
    .expect("a point record");
    p.metrics = metrics;
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_are_servebench_s() {
        let s = stat_of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.count, s.mean, s.min, s.max), (4, 2.5, 1.0, 4.0));
        assert!((s.p50 - 2.5).abs() < 1e-12 && (s.p90 - 3.7).abs() < 1e-12);
        assert!((s.std.unwrap() - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!(stat_of(&[]).is_none());
    }
}
