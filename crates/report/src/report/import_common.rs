//! What `import`'s readers share: the imported run's shape, errors, bounded reads and
//! servebench's statistics of a list of values.

use std::io::Read;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::json;

use servebench_model::results::meta::ImportedFrom;
use servebench_model::results::records::{PointRecord, RequestRecord, Stat};

/// Each input file's budget in bytes: a result file of a few thousand requests is a few MB.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// What a reader made of a tool's files: the run's provenance, its points and, where the
/// files hold them, its requests.
#[derive(Debug)]
pub(crate) struct Imported {
    pub(crate) from: ImportedFrom,
    /// One per benchmark the files hold; `values` the tool's `concurrency` or `rate` when it
    /// recorded it.
    pub(crate) points: Vec<PointRecord>,
    /// `requests.jsonl`: each request in servebench's record fields and units; empty when the
    /// files hold no per-request values.
    pub(crate) requests: Vec<RequestRecord>,
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
    point_n(1, ok, errors, metrics)
}

/// The `n`th point record (`p001`, `p002`, ...).
pub(crate) fn point_n(
    n: usize,
    ok: usize,
    errors: usize,
    metrics: IndexMap<String, Stat>,
) -> PointRecord {
    let mut p: PointRecord = serde_json::from_value(json!({
        "id": format!("p{n:03}"), "values": {}, "group": "g1", "ok": ok, "errors": errors,
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
