//! `servebench compare`: several runs side by side, the first as the baseline.
//!
//! Points are matched by their sweep values; a change is called a regression or an improvement
//! only when it exceeds the noise (the 95% confidence intervals do not overlap, or it is larger
//! than `--threshold`). [`build`] is pure; only [`load`] reads the disk.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use crate::results::meta::RunMeta;
use crate::results::records::{PointRecord, Stat};
use crate::results::rundir::{RunDir, RunDirError};

use super::model::{metric_def, value_text};
use super::{ReportError, render_named};
pub use crate::catalog::Direction;
use crate::catalog::Metric;
use crate::text::plain as num;

/// The compare template, compiled into the binary.
pub const COMPARE_TEMPLATE: &str = include_str!("../../reports/templates/compare.md.j2");

/// Name the compare template has in error messages.
pub const COMPARE_TEMPLATE_NAME: &str = "compare.md.j2";

/// Version of [`CompareModel`]; bumped when a field changes meaning or is removed.
pub const COMPARE_MODEL_VERSION: u32 = 1;

/// One run directory, read.
#[derive(Debug, Clone)]
pub struct LoadedRun {
    /// The directory as given on the command line.
    pub path: PathBuf,
    pub meta: RunMeta,
    pub points: Vec<PointRecord>,
    /// Lines of `points.jsonl` skipped as cut off mid-record.
    pub truncated_lines: Vec<usize>,
}

/// Reads a run directory's `meta.json` and `points.jsonl`.
pub fn load(path: &Path) -> Result<LoadedRun, RunDirError> {
    let dir = RunDir::open(path)?;
    let meta = dir.read_meta()?;
    let points = dir.read_points_detailed()?;
    Ok(LoadedRun {
        path: path.to_path_buf(),
        meta,
        points: points.records,
        truncated_lines: points.truncated_lines,
    })
}

/// The direction of a metric by its name; None for counts (never judged) and names the
/// catalogue does not know.
pub fn direction(metric: &str) -> Option<Direction> {
    Metric::from_name(metric).and_then(Metric::direction)
}

/// What a change means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Worse than the baseline, beyond the noise.
    Regression,
    /// Better than the baseline, beyond the noise.
    Improvement,
    /// The difference may be noise.
    WithinNoise,
    /// Not compared: a value is missing, or a run flagged the point.
    NotCompared,
}

/// A metric of one run against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Decision {
    /// What the change means.
    pub verdict: Verdict,
    /// (other - baseline) / |baseline| in percent; None when the baseline mean is 0.
    pub change_pct: Option<f64>,
    /// Why: `95% CIs do not overlap`, `above the 5% threshold`, `95% CIs overlap`, ...
    pub reason: String,
}

/// Judges `other` against `base`. With confidence intervals on both sides, a change is marked
/// only when they do not overlap (and, given a threshold, the change is also larger than it: a
/// real but negligible change is not worth a review). Without intervals, the threshold alone
/// decides. Everything else is within noise.
pub fn decide(
    base: &Stat,
    other: &Stat,
    direction: Option<Direction>,
    threshold_pct: Option<f64>,
) -> Decision {
    let change_pct = (base.mean != 0.0 && base.mean.is_finite() && other.mean.is_finite())
        .then(|| (other.mean - base.mean) / base.mean.abs() * 100.0);
    let intervals = match (
        base.ci95_low,
        base.ci95_high,
        other.ci95_low,
        other.ci95_high,
    ) {
        (Some(al), Some(ah), Some(bl), Some(bh)) => Some(al <= bh && bl <= ah),
        _ => None,
    };
    let over = |t: f64| change_pct.is_some_and(|c| c.abs() > t);
    let beyond = match (intervals, threshold_pct) {
        (Some(false), None) => Some("95% CIs do not overlap".to_string()),
        (Some(false), Some(t)) if over(t) => Some(format!(
            "95% CIs do not overlap and above the {}% threshold",
            num(t)
        )),
        (None, Some(t)) if over(t) => Some(format!("above the {}% threshold", num(t))),
        _ => None,
    };
    let verdict = match (beyond.is_some(), direction) {
        (true, Some(d)) => {
            let worse = match d {
                Direction::Lower => other.mean > base.mean,
                Direction::Higher => other.mean < base.mean,
            };
            if worse {
                Verdict::Regression
            } else {
                Verdict::Improvement
            }
        }
        _ => Verdict::WithinNoise,
    };
    let reason = match (beyond, intervals, threshold_pct) {
        (Some(r), ..) if direction.is_some() => r,
        (_, Some(true), _) => "95% CIs overlap".to_string(),
        (_, _, Some(t)) => format!("within the {}% threshold", num(t)),
        _ => "no confidence intervals and no --threshold".to_string(),
    };
    Decision {
        verdict,
        change_pct,
        reason,
    }
}

/// Everything the compare template sees.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CompareModel {
    /// Version of this model (`COMPARE_MODEL_VERSION`).
    pub model_version: u32,
    /// The runs in command-line order; the first is the baseline.
    pub runs: Vec<RunRef>,
    /// `--threshold` in percent, when given.
    pub threshold_pct: Option<f64>,
    /// Settings that differ between the runs (server flags first), one value per run.
    pub differences: Vec<Difference>,
    /// Sweep dimensions that identify a point across runs, in order.
    pub dimensions: Vec<String>,
    /// Points every run measured, in the baseline's order.
    pub points: Vec<SharedPoint>,
    /// One table per compared metric.
    pub metrics: Vec<MetricTable>,
    /// Points missing from at least one run.
    pub unmatched: Vec<UnmatchedPoint>,
    /// Counts over all tables.
    pub summary: Summary,
    /// Problems reading the runs (skipped lines, duplicate points); empty when clean.
    pub data_notes: Vec<String>,
}

/// A run in the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct RunRef {
    /// `A`, `B`, `C`, ... in command-line order.
    pub label: String,
    /// True for the first run.
    pub baseline: bool,
    /// The run directory as given.
    pub path: String,
    /// The experiment's name.
    pub name: String,
    /// RFC 3339 UTC start time.
    pub started_at: String,
    /// `complete`, `incomplete`, `failed` or `running`.
    pub status: String,
    /// Points in its `points.jsonl`.
    pub points: usize,
}

/// A setting whose value differs between runs.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Difference {
    /// Dotted path in the resolved spec (`server.args.chunked-prefill-size`), a sweep dimension,
    /// or `servebench version` / `server version`.
    pub name: String,
    /// Formatted value per run, `—` where unset.
    pub values: Vec<String>,
}

/// A point measured by every run.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SharedPoint {
    /// `ctx=1024, concurrency=4` (`all` without dimensions).
    pub label: String,
    /// Values of `dimensions`, formatted.
    pub values: Vec<String>,
    /// The point's id in each run.
    pub ids: Vec<String>,
    /// Why the point is not compared (failed, incomplete, flagged); empty when it is.
    pub problems: Vec<PointProblem>,
}

/// Why a run's point is not compared.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PointProblem {
    /// Run label.
    pub run: String,
    /// Point id in that run.
    pub id: String,
    /// A flag kind, `incomplete` or `failed`.
    pub kind: String,
    /// What happened, for people.
    pub message: String,
}

/// One metric across the shared points.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct MetricTable {
    /// Metric name (`ttft_s`).
    pub name: String,
    /// Label (`TTFT`).
    pub label: String,
    /// Display unit (`s`, `ms`, `tok/s`).
    pub unit: String,
    /// Which way is better.
    pub better: Option<Direction>,
    /// One row per shared point, in `points` order.
    pub rows: Vec<MetricRow>,
}

/// A metric at one shared point.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct MetricRow {
    /// The point's label.
    pub point: String,
    /// The point's dimension values, formatted.
    pub values: Vec<String>,
    /// One cell per run; the baseline's has no change or verdict.
    pub cells: Vec<Cell>,
}

/// One run's value of a metric at a point.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Cell {
    /// The statistic (None when not measured).
    pub stat: Option<Stat>,
    /// Relative change against the baseline in percent.
    pub change_pct: Option<f64>,
    /// `+12.3%`, `-0.4%`, or `—`.
    pub change: String,
    /// None for the baseline.
    pub verdict: Option<Verdict>,
    /// Why the verdict.
    pub reason: Option<String>,
}

/// A point some runs lack.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct UnmatchedPoint {
    /// `ctx=1024, concurrency=4`.
    pub label: String,
    /// Values of `dimensions`, formatted.
    pub values: Vec<String>,
    /// The point's id per run, None where the run lacks it.
    pub ids: Vec<Option<String>>,
}

/// Counts over every compared cell.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema, Default)]
pub struct Summary {
    /// Points every run measured.
    pub shared: usize,
    /// Shared points not compared (failed or flagged in some run).
    pub not_compared: usize,
    /// Cells marked as regressions.
    pub regressions: usize,
    /// Cells marked as improvements.
    pub improvements: usize,
    /// Cells whose change may be noise.
    pub within_noise: usize,
}

/// Builds the comparison; `runs[0]` is the baseline.
pub fn build(runs: &[LoadedRun], threshold_pct: Option<f64>) -> CompareModel {
    let labels: Vec<String> = (0..runs.len()).map(run_label).collect();
    let mut data_notes = Vec::new();
    for (run, label) in runs.iter().zip(&labels) {
        for line in &run.truncated_lines {
            data_notes.push(format!(
                "{label}: points.jsonl line {line} was cut off mid-record and was skipped."
            ));
        }
    }
    let dimensions = key_dimensions(runs);
    let experiments: Vec<serde_json::Value> = runs
        .iter()
        .map(|r| serde_json::to_value(&r.meta.experiment).unwrap_or_default())
        .collect();

    // Every point's key, per run; the first point with a key wins.
    let mut keyed: Vec<IndexMap<Vec<String>, &PointRecord>> = Vec::new();
    for ((run, exp), label) in runs.iter().zip(&experiments).zip(&labels) {
        let mut map = IndexMap::new();
        for p in &run.points {
            let key: Vec<String> = dimensions.iter().map(|d| dim_value(p, exp, d)).collect();
            if let Some(first) = map.get(&key) {
                let first: &&PointRecord = first;
                data_notes.push(format!(
                    "{label}: {} has the same sweep values as {}; only {} is compared.",
                    p.id, first.id, first.id
                ));
            } else {
                map.insert(key, p);
            }
        }
        keyed.push(map);
    }

    let mut all_keys: Vec<&Vec<String>> = Vec::new();
    for map in &keyed {
        for key in map.keys() {
            if !all_keys.contains(&key) {
                all_keys.push(key);
            }
        }
    }
    let mut points = Vec::new();
    let mut shared_records: Vec<Vec<&PointRecord>> = Vec::new();
    let mut unmatched = Vec::new();
    for key in all_keys {
        let label = point_label(&dimensions, key);
        let found: Vec<Option<&PointRecord>> = keyed.iter().map(|m| m.get(key).copied()).collect();
        if found.iter().all(Option::is_some) {
            let recs: Vec<&PointRecord> = found.into_iter().flatten().collect();
            points.push(SharedPoint {
                label,
                values: key.clone(),
                ids: recs.iter().map(|p| p.id.clone()).collect(),
                problems: recs
                    .iter()
                    .zip(&labels)
                    .flat_map(|(p, l)| problems(l, p))
                    .collect(),
            });
            shared_records.push(recs);
        } else {
            unmatched.push(UnmatchedPoint {
                label,
                values: key.clone(),
                ids: found.iter().map(|p| p.map(|p| p.id.clone())).collect(),
            });
        }
    }

    let mut summary = Summary {
        shared: points.len(),
        not_compared: points.iter().filter(|p| !p.problems.is_empty()).count(),
        ..Summary::default()
    };
    // A metric no shared point measured is left out.
    let metrics = Metric::compared()
        .map(Metric::name)
        .filter(|m| {
            shared_records
                .iter()
                .any(|recs| recs.iter().any(|p| p.metrics.contains_key(*m)))
        })
        .map(|m| metric_table(m, &points, &shared_records, threshold_pct, &mut summary))
        .collect();

    CompareModel {
        model_version: COMPARE_MODEL_VERSION,
        runs: runs
            .iter()
            .zip(&labels)
            .enumerate()
            .map(|(i, (r, label))| RunRef {
                label: label.clone(),
                baseline: i == 0,
                path: r.path.display().to_string(),
                name: r.meta.experiment.name.clone(),
                started_at: r.meta.started_at.clone(),
                status: r.meta.status.to_string(),
                points: r.points.len(),
            })
            .collect(),
        threshold_pct,
        differences: differences(runs, &experiments, &dimensions),
        dimensions,
        points,
        metrics,
        unmatched,
        summary,
        data_notes,
    }
}

/// Renders the comparison with the built-in template, or a user template given as
/// `(name for errors, source)`.
pub fn render(model: &CompareModel, template: Option<(&str, &str)>) -> Result<String, ReportError> {
    let (name, source) = template.unwrap_or((COMPARE_TEMPLATE_NAME, COMPARE_TEMPLATE));
    render_named(model, name, source)
}

fn run_label(i: usize) -> String {
    if i < 26 {
        char::from(b'A' + i as u8).to_string()
    } else {
        format!("R{}", i + 1)
    }
}

/// Dimensions that tell points apart: every dimension that takes two or more values in some
/// run. A server flag set once per run (swept or not) is a setting, listed among the
/// differences, so runs that differ only by it still match point for point.
fn key_dimensions(runs: &[LoadedRun]) -> Vec<String> {
    let mut dims: Vec<String> = Vec::new();
    for run in runs {
        for d in &run.meta.dimensions {
            let mut seen: Vec<&serde_json::Value> = Vec::new();
            for p in &run.points {
                if let Some(v) = p.values.get(d)
                    && !seen.contains(&v)
                {
                    seen.push(v);
                }
            }
            if seen.len() >= 2 && !dims.contains(d) {
                dims.push(d.clone());
            }
        }
    }
    dims
}

/// A point's value of dimension `dim`: from its sweep values, else the run's resolved spec
/// (`concurrency`, `server.args.…`), else `—`.
fn dim_value(p: &PointRecord, experiment: &serde_json::Value, dim: &str) -> String {
    p.values
        .get(dim)
        .or_else(|| lookup(experiment, dim))
        .map(value_text)
        .unwrap_or_else(|| "—".to_string())
}

/// The value at a dotted path; argument names in `server.args` may contain no dots.
fn lookup<'a>(v: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(v, |v, key| v.get(key))
}

fn point_label(dims: &[String], values: &[String]) -> String {
    if dims.is_empty() {
        return "all".to_string();
    }
    dims.iter()
        .zip(values)
        .map(|(d, v)| format!("{d}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a point's numbers should not be compared.
fn problems(run: &str, p: &PointRecord) -> Vec<PointProblem> {
    let problem = |kind: &str, message: String| PointProblem {
        run: run.to_string(),
        id: p.id.clone(),
        kind: kind.to_string(),
        message,
    };
    let mut out: Vec<PointProblem> = p
        .flags
        .iter()
        .filter(|f| !f.kind.is_informational())
        .map(|f| problem(f.kind.name(), f.message.clone()))
        .collect();
    if p.ok == 0 {
        out.push(problem(
            "failed",
            format!("no successful request ({} failed)", p.errors),
        ));
    }
    if p.incomplete
        && !out
            .iter()
            .any(|x| x.kind == "incomplete" || x.kind == "interrupted")
    {
        out.push(problem(
            "incomplete",
            "the point did not run to completion".to_string(),
        ));
    }
    out
}

fn metric_table(
    name: &str,
    points: &[SharedPoint],
    records: &[Vec<&PointRecord>],
    threshold_pct: Option<f64>,
    summary: &mut Summary,
) -> MetricTable {
    let def = metric_def(name);
    let better = direction(name);
    let rows = points
        .iter()
        .zip(records)
        .map(|(point, recs)| {
            let stats: Vec<Option<&Stat>> = recs
                .iter()
                .map(|p| p.metrics.get(name).filter(|s| s.count > 0))
                .collect();
            let base = stats[0];
            let cells = stats
                .iter()
                .enumerate()
                .map(|(i, stat)| {
                    let mut cell = Cell {
                        stat: stat.cloned(),
                        change_pct: None,
                        change: "—".to_string(),
                        verdict: None,
                        reason: None,
                    };
                    if i == 0 {
                        return cell;
                    }
                    let (verdict, change_pct, reason) = match (base, stat) {
                        _ if !point.problems.is_empty() => (
                            Verdict::NotCompared,
                            None,
                            "flagged or failed in a run".to_string(),
                        ),
                        (Some(b), Some(s)) => {
                            let d = decide(b, s, better, threshold_pct);
                            (d.verdict, d.change_pct, d.reason)
                        }
                        _ => (Verdict::NotCompared, None, "not measured".to_string()),
                    };
                    match verdict {
                        Verdict::Regression => summary.regressions += 1,
                        Verdict::Improvement => summary.improvements += 1,
                        Verdict::WithinNoise => summary.within_noise += 1,
                        Verdict::NotCompared => {}
                    }
                    cell.change_pct = change_pct;
                    cell.change = change_pct
                        .map(|c| format!("{c:+.1}%"))
                        .unwrap_or_else(|| "—".to_string());
                    cell.verdict = Some(verdict);
                    cell.reason = Some(reason);
                    cell
                })
                .collect();
            MetricRow {
                point: point.label.clone(),
                values: point.values.clone(),
                cells,
            }
        })
        .collect();
    MetricTable {
        name: name.to_string(),
        label: def.as_ref().map_or(name.to_string(), |d| d.label.clone()),
        unit: def.map_or(String::new(), |d| d.unit),
        better,
        rows,
    }
}

/// Settings whose values differ between runs: server flags and environment first, then the
/// rest of the resolved spec, single-valued sweep dimensions and versions.
fn differences(
    runs: &[LoadedRun],
    experiments: &[serde_json::Value],
    key_dims: &[String],
) -> Vec<Difference> {
    let settings: Vec<IndexMap<String, String>> = runs
        .iter()
        .zip(experiments)
        .map(|(run, exp)| {
            let mut s = IndexMap::new();
            flatten("", exp, &mut s);
            for d in &run.meta.dimensions {
                if let Some(v) = run.points.iter().find_map(|p| p.values.get(d)) {
                    s.insert(d.clone(), value_text(v));
                }
            }
            s.insert("servebench version".into(), run.meta.tool_version.clone());
            let versions: Vec<&str> = run
                .meta
                .servers
                .iter()
                .filter_map(|l| l.server_info.as_ref()?.get("version")?.as_str())
                .collect();
            if let Some(v) = versions.first() {
                s.insert("server version".into(), v.to_string());
            }
            s
        })
        .collect();
    let mut names: Vec<&String> = Vec::new();
    for s in &settings {
        for name in s.keys() {
            let skip = key_dims.contains(name) || names.contains(&name);
            if !skip {
                names.push(name);
            }
        }
    }
    // Server settings lead: they are what a comparison is usually about.
    names.sort_by_key(|n| !n.starts_with("server."));
    names
        .into_iter()
        .filter_map(|name| {
            let values: Vec<String> = settings
                .iter()
                .map(|s| s.get(name).cloned().unwrap_or_else(|| "—".to_string()))
                .collect();
            values.iter().any(|v| *v != values[0]).then(|| Difference {
                name: name.clone(),
                values,
            })
        })
        .collect()
}

/// Leaf values of the resolved spec by dotted path. Skipped: what names or describes the run
/// (`name`, `description`, `report`, `expect`), the sweep itself, and the prompt length, which
/// is usually templated from a dimension and resolved for the first point only.
fn flatten(prefix: &str, v: &serde_json::Value, out: &mut IndexMap<String, String>) {
    const SKIP: [&str; 6] = [
        "name",
        "description",
        "report",
        "expect",
        "sweep",
        "workload.prompt.tokens",
    ];
    if SKIP.contains(&prefix) {
        return;
    }
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&path, v, out);
            }
        }
        serde_json::Value::Null => {}
        leaf => {
            out.insert(prefix.to_string(), value_text(leaf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::records::CiMethod;

    fn stat(mean: f64, ci: Option<(f64, f64)>) -> Stat {
        Stat {
            count: 10,
            mean,
            ci95_low: ci.map(|c| c.0),
            ci95_high: ci.map(|c| c.1),
            ci_method: ci.map(|_| CiMethod::BootstrapRequests),
            ..Stat::default()
        }
    }

    #[test]
    fn directions_by_name() {
        assert_eq!(direction("ttft_s"), Some(Direction::Lower));
        assert_eq!(direction("itl_s"), Some(Direction::Lower));
        assert_eq!(direction("decode_tok_s"), Some(Direction::Higher));
        assert_eq!(direction("prefill_tok_s"), Some(Direction::Higher));
        assert_eq!(direction("prompt_tokens"), None);
    }

    #[test]
    fn separate_intervals_mark_the_change_by_direction() {
        let a = stat(1.0, Some((0.9, 1.1)));
        let b = stat(1.5, Some((1.4, 1.6)));
        let slower = decide(&a, &b, Some(Direction::Lower), None);
        assert_eq!(slower.verdict, Verdict::Regression);
        assert!((slower.change_pct.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(slower.reason, "95% CIs do not overlap");
        // The same numbers as a rate: higher is better.
        assert_eq!(
            decide(&a, &b, Some(Direction::Higher), None).verdict,
            Verdict::Improvement
        );
        assert_eq!(
            decide(&b, &a, Some(Direction::Lower), None).verdict,
            Verdict::Improvement
        );
        assert_eq!(
            decide(&b, &a, Some(Direction::Higher), None).verdict,
            Verdict::Regression
        );
    }

    #[test]
    fn overlapping_intervals_are_noise_whatever_the_threshold() {
        let a = stat(1.0, Some((0.8, 1.2)));
        let b = stat(1.1, Some((0.9, 1.3)));
        let d = decide(&a, &b, Some(Direction::Lower), None);
        assert_eq!(
            (d.verdict, d.reason.as_str()),
            (Verdict::WithinNoise, "95% CIs overlap")
        );
        // +10% with overlapping intervals stays noise, even above a 5% threshold.
        let d = decide(&a, &b, Some(Direction::Lower), Some(5.0));
        assert_eq!(
            (d.verdict, d.reason.as_str()),
            (Verdict::WithinNoise, "95% CIs overlap")
        );
        // Separate intervals: marked, unless the change is below the threshold.
        let far = stat(1.5, Some((1.4, 1.6)));
        let d = decide(&a, &far, Some(Direction::Lower), Some(5.0));
        assert_eq!(
            (d.verdict, d.reason.as_str()),
            (
                Verdict::Regression,
                "95% CIs do not overlap and above the 5% threshold"
            )
        );
        let d = decide(&a, &far, Some(Direction::Lower), Some(60.0));
        assert_eq!(d.verdict, Verdict::WithinNoise);
        assert_eq!(d.reason, "within the 60% threshold");
        // Touching intervals overlap.
        let c = stat(1.4, Some((1.2, 1.6)));
        assert_eq!(
            decide(&a, &c, Some(Direction::Lower), None).verdict,
            Verdict::WithinNoise
        );
    }

    #[test]
    fn without_intervals_only_the_threshold_decides() {
        let a = stat(100.0, None);
        let b = stat(90.0, None);
        let d = decide(&a, &b, Some(Direction::Higher), None);
        assert_eq!(d.verdict, Verdict::WithinNoise);
        assert_eq!(d.reason, "no confidence intervals and no --threshold");
        let d = decide(&a, &b, Some(Direction::Higher), Some(2.5));
        assert_eq!(d.verdict, Verdict::Regression);
        assert_eq!(d.reason, "above the 2.5% threshold");
        assert!((d.change_pct.unwrap() + 10.0).abs() < 1e-9);
        // Exactly at the threshold is not above it.
        assert_eq!(
            decide(&a, &b, Some(Direction::Higher), Some(10.0)).verdict,
            Verdict::WithinNoise
        );
        // Counts have no direction and are never marked.
        assert_eq!(
            decide(&a, &b, None, Some(1.0)).verdict,
            Verdict::WithinNoise
        );
    }

    #[test]
    fn a_zero_baseline_has_no_relative_change() {
        let d = decide(
            &stat(0.0, None),
            &stat(1.0, None),
            Some(Direction::Lower),
            Some(5.0),
        );
        assert_eq!((d.verdict, d.change_pct), (Verdict::WithinNoise, None));
    }
}
