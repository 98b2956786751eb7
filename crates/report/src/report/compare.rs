//! `servebench compare`: several runs side by side, the first as the baseline.
//!
//! Points are matched by their sweep values, open-loop load points by the rate they were
//! offered (`offered`); a change is called a regression or an improvement
//! only when it exceeds the noise (the 95% confidence intervals do not overlap, or it is larger
//! than `--threshold`). [`build`] is pure; only [`load`] reads the disk.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::{PointRecord, Stat};
use servebench_model::results::rundir::{RunDir, RunDirError};

use super::ReportError;
use super::format::value_text;
use super::metric_def::metric_def;
use super::offered;
use super::templates::render_named;
pub use super::verdict::Verdict;
pub(crate) use servebench_model::catalog::Direction;
use servebench_model::catalog::Metric;
use servebench_model::text::plain as num;

/// The compare template, compiled into the binary.
pub(crate) const COMPARE_TEMPLATE: &str = include_str!("../../templates/compare.md.j2");

/// Name the compare template has in error messages.
pub(crate) const COMPARE_TEMPLATE_NAME: &str = "compare.md.j2";

/// Version of [`CompareModel`]; bumped when a field changes meaning or is removed.
pub(crate) const COMPARE_MODEL_VERSION: u32 = 1;

/// One run directory, read.
#[derive(Debug, Clone)]
pub struct LoadedRun {
    /// The directory as given on the command line.
    pub path: PathBuf,
    pub meta: RunMeta,
    pub points: Vec<PointRecord>,
    /// Lines of `points.jsonl` skipped as cut off mid-record.
    pub truncated_lines: Vec<usize>,
    /// Set when the run was split by a sweep dimension (`compare --by`): `DIM=VALUE`.
    pub part: Option<String>,
    /// The run's capacity searches (`search.json`; None without one).
    pub searches: Option<servebench_model::results::search::SearchFile>,
}

/// `compare --split-by` named a dimension the run did not sweep.
#[derive(Debug, thiserror::Error)]
#[error("{run}: `{dim}` is not a sweep dimension of this run (it sweeps {swept})")]
pub struct NotADimension {
    run: String,
    dim: String,
    swept: String,
}

/// Splits a run into one part per value of sweep dimension `dim` (in the order the values
/// first appear), so one run that swept, say, `server.engine` compares engine against engine.
/// Each part keeps the points with that value, its dimensions without `dim`, and the server
/// settings its own launches recorded (engine and flags), so what differs between the parts
/// is listed like what differs between runs.
pub fn split_by(run: LoadedRun, dim: &str) -> Result<Vec<LoadedRun>, NotADimension> {
    if !run.meta.dimensions.iter().any(|d| d == dim) {
        return Err(NotADimension {
            run: run.path.display().to_string(),
            dim: dim.to_string(),
            swept: if run.meta.dimensions.is_empty() {
                "nothing".to_string()
            } else {
                run.meta.dimensions.join(", ")
            },
        });
    }
    let mut values: Vec<serde_json::Value> = Vec::new();
    for p in &run.points {
        if let Some(v) = p.values.get(dim)
            && !values.contains(v)
        {
            values.push(v.clone());
        }
    }
    Ok(values
        .into_iter()
        .map(|v| {
            let points: Vec<PointRecord> = run
                .points
                .iter()
                .filter(|p| p.values.get(dim) == Some(&v))
                .cloned()
                .map(|mut p| {
                    p.values.shift_remove(dim);
                    p
                })
                .collect();
            let mut meta = run.meta.clone();
            meta.dimensions.retain(|d| d != dim);
            let groups: Vec<&String> = points.iter().map(|p| &p.group).collect();
            meta.servers.retain(|s| groups.contains(&&s.group));
            // The part's own server: its launches' engine and flags.
            if let Some(launch) = meta.servers.first() {
                let engine = launch.engine.trim_end_matches(" (simulated)");
                if let Ok(e) = serde_json::from_value(serde_json::json!(engine)) {
                    meta.experiment.server.engine = e;
                }
                if let Ok(args) =
                    serde_json::from_value(serde_json::to_value(&launch.args).unwrap_or_default())
                {
                    meta.experiment.server.args = args;
                }
            }
            let text = value_text(&v);
            LoadedRun {
                path: run.path.clone(),
                meta,
                points,
                truncated_lines: run.truncated_lines.clone(),
                part: Some(format!("{dim}={text}")),
                searches: None,
            }
        })
        .collect())
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
        part: None,
        searches: dir.read_search()?,
    })
}

/// The direction of a metric by its name; None for counts (never judged) and names the
/// catalogue does not know.
pub(crate) fn direction(metric: &str) -> Option<Direction> {
    Metric::from_name(metric).and_then(Metric::direction)
}

/// The smallest change worth a verdict, in percent, when `--threshold` is not given: a real but
/// negligible change is not worth a review, and run-to-run drift of a few percent is common.
pub(crate) const DEFAULT_THRESHOLD_PCT: f64 = 5.0;

/// Fewest requests whose spread stands for run-to-run noise (one round, concurrency 1).
pub(crate) const MIN_REQUESTS: usize = 5;

/// What a point's numbers can tell about noise.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Evidence {
    /// The smallest change, in percent, that may be called a regression or an improvement.
    pub threshold_pct: f64,
    /// The point's concurrency (the largest over the runs): queued requests are not
    /// independent samples.
    pub concurrency: u32,
}

/// A metric of one run against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub(crate) struct Decision {
    /// What the change means.
    pub verdict: Verdict,
    /// (other - baseline) / |baseline| in percent; None when the baseline mean is 0.
    pub change_pct: Option<f64>,
    /// Why: `95% CIs do not overlap`, `above the 5% threshold`, `95% CIs overlap`, ...
    pub reason: String,
}

/// Judges `other` against `base`.
///
/// A change is a regression or an improvement only when (1) it is larger than the threshold,
/// (2) both runs carry a noise estimate that stands for run-to-run noise, and (3) their 95%
/// confidence intervals do not overlap. A noise estimate stands when it comes from three or
/// more rounds (round means vary as runs do), or from at least [`MIN_REQUESTS`] requests sent
/// one at a time (independent samples). Requests that queued behind each other
/// (concurrency > 1) in one round, a single request, or identical samples (a zero-width
/// interval) say nothing about how a rerun would vary: such a change is "not enough evidence",
/// with the number of rounds that would settle it.
pub(crate) fn decide(
    base: &Stat,
    other: &Stat,
    direction: Option<Direction>,
    evidence: Evidence,
) -> Decision {
    let change_pct = (base.mean != 0.0 && base.mean.is_finite() && other.mean.is_finite())
        .then(|| (other.mean - base.mean) / base.mean.abs() * 100.0);
    let t = evidence.threshold_pct;
    let decision = |verdict, reason: String| Decision {
        verdict,
        change_pct,
        reason,
    };
    let Some(change) = change_pct else {
        return decision(
            Verdict::WithinNoise,
            "no relative change: the baseline is 0".into(),
        );
    };
    let below = change.abs() <= t;
    if let Some(why) = lacking_evidence(base, other, evidence.concurrency) {
        if below {
            return decision(
                Verdict::WithinNoise,
                format!("within the {}% minimum effect", num(t)),
            );
        }
        return decision(Verdict::NotEnoughEvidence, why);
    }
    let overlap = match (
        base.ci95_low,
        base.ci95_high,
        other.ci95_low,
        other.ci95_high,
    ) {
        (Some(al), Some(ah), Some(bl), Some(bh)) => al <= bh && bl <= ah,
        _ => true,
    };
    if overlap && below {
        return decision(
            Verdict::WithinNoise,
            format!("within the {}% minimum effect, and 95% CIs overlap", num(t)),
        );
    }
    if overlap {
        let more = rounds_needed(base, other)
            .map(|n| format!("; about {n} rounds would tell"))
            .unwrap_or_default();
        return decision(Verdict::WithinNoise, format!("95% CIs overlap{more}"));
    }
    if below {
        // Not noise: the intervals are apart. Only smaller than the change worth a verdict.
        return match direction {
            None => decision(Verdict::WithinNoise, "a count, not judged".into()),
            Some(_) => decision(
                Verdict::BelowThreshold,
                format!(
                    "real (95% CIs do not overlap) but within the {}% minimum effect",
                    num(t)
                ),
            ),
        };
    }
    let verdict = match direction {
        Some(Direction::Lower) if other.mean > base.mean => Verdict::Regression,
        Some(Direction::Higher) if other.mean < base.mean => Verdict::Regression,
        Some(_) => Verdict::Improvement,
        None => return decision(Verdict::WithinNoise, "a count, not judged".into()),
    };
    decision(
        verdict,
        format!(
            "95% CIs do not overlap and the change is above the {}% minimum effect",
            num(t)
        ),
    )
}

/// Why the two statistics cannot tell a change from noise, or None when they can.
fn lacking_evidence(base: &Stat, other: &Stat, concurrency: u32) -> Option<String> {
    use servebench_model::results::records::CiMethod;
    const FIX: &str = "measure with `repeat: 3` or more";
    let pair = [base, other];
    if pair
        .iter()
        .any(|s| s.ci_method.is_none() || s.ci95_low.is_none())
    {
        return Some(format!(
            "not enough evidence: one sample, no noise estimate; {FIX}"
        ));
    }
    if pair
        .iter()
        .any(|s| s.ci95_low == s.ci95_high || s.std == Some(0.0))
    {
        return Some(format!(
            "not enough evidence: identical samples (a zero-width interval) say nothing about noise; {FIX}"
        ));
    }
    let rounds = pair.iter().all(|s| s.ci_method == Some(CiMethod::Repeats));
    if rounds {
        return None;
    }
    if concurrency > 1 {
        return Some(format!(
            "not enough evidence: at concurrency {concurrency} requests queue behind each other, so their spread in one round is not run-to-run noise; {FIX}"
        ));
    }
    let fewest = pair.iter().map(|s| s.count).min().unwrap_or(0);
    if fewest < MIN_REQUESTS {
        return Some(format!(
            "not enough evidence: {fewest} requests; send {MIN_REQUESTS} or more one at a time, or {FIX}"
        ));
    }
    None
}

/// About how many rounds per run would give intervals narrow enough to separate the two means
/// (each interval's half-width under half the difference), from the spread seen so far; None
/// without round intervals.
fn rounds_needed(base: &Stat, other: &Stat) -> Option<usize> {
    use servebench_model::results::records::CiMethod;
    let delta = (other.mean - base.mean).abs();
    if delta == 0.0 {
        return None;
    }
    let sd = |s: &Stat| -> Option<f64> {
        (s.ci_method == Some(CiMethod::Repeats)).then_some(())?;
        s.std
    };
    let spread = sd(base)?.max(sd(other)?);
    // Half-width ~ 2 s / sqrt(n) < delta / 2  =>  n > (4 s / delta)^2.
    let n = (4.0 * spread / delta).powi(2).ceil();
    (3.0..1e6).contains(&n).then_some(n as usize)
}

/// Everything the compare template sees.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CompareModel {
    /// Version of this model (`COMPARE_MODEL_VERSION`).
    pub model_version: u32,
    /// The runs in command-line order; the first is the baseline.
    pub runs: Vec<RunRef>,
    /// The smallest change, in percent, that is judged (`--threshold`, default 5).
    pub threshold_pct: f64,
    /// The same as written: `5%`, `2.5%`.
    pub threshold: String,
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
    /// How each run differs from the baseline by construction (prompts, cache policy, method,
    /// client placement), one line each: such runs measured different things, so their speed
    /// differences say nothing about the server. Empty when every run is comparable.
    #[serde(default)]
    pub not_comparable: Vec<String>,
    /// Problems reading the runs (skipped lines, duplicate points); empty when clean.
    pub data_notes: Vec<String>,
    /// Compared points that came from different hardware (GPU model, driver, engine
    /// version), one line per mix; empty when every point's hardware matches.
    #[serde(default)]
    pub hardware_notes: Vec<String>,
    /// Capacity searches compared across the runs (empty when the baseline has none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacities: Vec<super::compare_capacity::CapacityCompare>,
    /// Set when some runs have open-loop load points: they are paired by their measured
    /// offered rate when it is within this many percent of the first run's, not by label.
    #[serde(default)]
    pub offered_tolerance_pct: Option<f64>,
    /// Each shared point's grades against the hardware in every run (empty when no run could
    /// be graded: see its report's "Against the hardware" section).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bound: Vec<super::compare_bound::BoundCompareRow>,
    /// Why a run's points are not graded, one line each (`B: ...`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bound_notes: Vec<String>,
    /// Decode speed-ups where the runs (or one run's variants) measured the same points with
    /// speculative decoding on and off; absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<super::speculative::SpeculativeCompare>,
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
    /// Points in its `points.jsonl` (in its part, with `--by`).
    pub points: usize,
    /// With `compare --by DIM`: the value of DIM this part of the run holds (`server.engine=vllm`).
    pub part: Option<String>,
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
    /// Its concurrency (the largest over the runs).
    pub concurrency: u32,
    /// Values of `dimensions`, formatted.
    pub values: Vec<String>,
    /// The point's id in each run.
    pub ids: Vec<String>,
    /// Why the point is not compared (failed, incomplete, flagged); empty when it is.
    pub problems: Vec<PointProblem>,
    /// For open-loop points paired by offered load: each run's offered rate (req/s),
    /// formatted; empty for points matched by their sweep values.
    pub offered: Vec<String>,
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
    /// Each run's offered rate (req/s) for open-loop points; empty otherwise.
    pub offered: Vec<String>,
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
    /// For an open-loop point: each run's offered rate (req/s), `—` where the run has no
    /// point within the tolerance; empty for points matched by their sweep values.
    pub offered: Vec<String>,
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
    /// Cells whose change is real (intervals apart) but under the threshold.
    pub below_threshold: usize,
    /// Cells whose runs carry no usable noise estimate.
    pub not_enough_evidence: usize,
}

impl Summary {
    /// Cells that got a verdict on noise (regression, improvement, below the threshold or
    /// within noise).
    pub fn judged(&self) -> usize {
        self.regressions + self.improvements + self.below_threshold + self.within_noise
    }
}

/// Builds the comparison; `runs[0]` is the baseline. `threshold_pct` is the smallest change
/// judged (None: [`DEFAULT_THRESHOLD_PCT`]).
pub fn build(runs: &[LoadedRun], threshold_pct: Option<f64>) -> CompareModel {
    let threshold_pct = threshold_pct.unwrap_or(DEFAULT_THRESHOLD_PCT);
    let labels: Vec<String> = (0..runs.len()).map(run_label).collect();
    let mut data_notes = truncation_notes(runs, &labels);
    let dimensions = key_dimensions(runs);
    let experiments: Vec<serde_json::Value> = runs
        .iter()
        .map(|r| serde_json::to_value(&r.meta.experiment).unwrap_or_default())
        .collect();

    let keyed = keyed_points(runs, &experiments, &labels, &dimensions, &mut data_notes);
    let mut matched = Matched::default();
    matched.add_swept(&keyed, &experiments, &labels, &dimensions);
    // Open-loop points: paired by the load they were offered.
    let candidates = offered_candidates(runs, &experiments, &dimensions);
    let any_offered = candidates.iter().any(|c| !c.is_empty());
    matched.add_offered(&candidates, &experiments, &labels, &dimensions);
    let Matched {
        points,
        shared_records,
        unmatched,
    } = matched;

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

    let metas: Vec<&RunMeta> = runs.iter().map(|r| &r.meta).collect();
    let hardware_notes = super::hardware::compare_notes(&metas, &labels, &shared_records);
    let (bound, bound_notes) = super::compare_bound::compare(
        &runs
            .iter()
            .map(|r| (&r.meta, r.points.as_slice()))
            .collect::<Vec<_>>(),
        &labels,
        &points
            .iter()
            .map(|p| (p.label.clone(), p.ids.clone()))
            .collect::<Vec<_>>(),
    );
    CompareModel {
        model_version: COMPARE_MODEL_VERSION,
        runs: run_refs(runs, &labels),
        threshold_pct,
        threshold: format!("{}%", num(threshold_pct)),
        differences: differences(runs, &experiments, &dimensions),
        dimensions,
        points,
        metrics,
        unmatched,
        summary,
        not_comparable: not_comparable_notes(runs, &labels),
        data_notes,
        hardware_notes,
        capacities: super::compare_capacity::compare(
            &runs
                .iter()
                .zip(&labels)
                .map(|(r, l)| (l.clone(), r.searches.as_ref()))
                .collect::<Vec<_>>(),
        ),
        offered_tolerance_pct: any_offered.then_some(offered::TOLERANCE_PCT),
        bound,
        bound_notes,
        speculative: super::speculative::compare(
            &runs
                .iter()
                .zip(&labels)
                .map(|(r, l)| (l.as_str(), &r.meta, r.points.as_slice()))
                .collect::<Vec<_>>(),
        ),
    }
}

/// A note per points.jsonl line that was cut off mid-record and skipped.
fn truncation_notes(runs: &[LoadedRun], labels: &[String]) -> Vec<String> {
    let mut notes = Vec::new();
    for (run, label) in runs.iter().zip(labels) {
        for line in &run.truncated_lines {
            notes.push(format!(
                "{label}: points.jsonl line {line} was cut off mid-record and was skipped."
            ));
        }
    }
    notes
}

/// Every closed-loop point's key (its sweep values), per run; the first point with a key
/// wins, and a note names each point left out for sharing it.
fn keyed_points<'r>(
    runs: &'r [LoadedRun],
    experiments: &[serde_json::Value],
    labels: &[String],
    dimensions: &[String],
    data_notes: &mut Vec<String>,
) -> Vec<IndexMap<Vec<String>, &'r PointRecord>> {
    let mut keyed: Vec<IndexMap<Vec<String>, &PointRecord>> = Vec::new();
    for ((run, exp), label) in runs.iter().zip(experiments).zip(labels) {
        let mut map = IndexMap::new();
        for p in run
            .points
            .iter()
            .filter(|p| offered::offered_req_s(p).is_none())
        {
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
    keyed
}

/// Each run's open-loop points, with their offered rate and their other dimensions' values.
fn offered_candidates<'r>(
    runs: &'r [LoadedRun],
    experiments: &[serde_json::Value],
    dimensions: &[String],
) -> Vec<Vec<offered::Candidate<'r>>> {
    runs.iter()
        .zip(experiments)
        .map(|(run, exp)| {
            run.points
                .iter()
                .filter_map(|p| {
                    Some(offered::Candidate {
                        point: p,
                        offered: offered::offered_req_s(p)?,
                        rest: dimensions
                            .iter()
                            .filter(|d| !offered::sets_offered_load(d))
                            .map(|d| dim_value(p, exp, d))
                            .collect(),
                    })
                })
                .collect()
        })
        .collect()
}

/// Points sorted into those every run measured (with their records, one per run) and those
/// some run lacks.
#[derive(Default)]
struct Matched<'r> {
    points: Vec<SharedPoint>,
    shared_records: Vec<Vec<&'r PointRecord>>,
    unmatched: Vec<UnmatchedPoint>,
}

impl<'r> Matched<'r> {
    /// Adds the closed-loop points, matched by their sweep values.
    fn add_swept(
        &mut self,
        keyed: &[IndexMap<Vec<String>, &'r PointRecord>],
        experiments: &[serde_json::Value],
        labels: &[String],
        dimensions: &[String],
    ) {
        let mut all_keys: Vec<&Vec<String>> = Vec::new();
        for map in keyed {
            for key in map.keys() {
                if !all_keys.contains(&key) {
                    all_keys.push(key);
                }
            }
        }
        for key in all_keys {
            let label = point_label(dimensions, key);
            let found: Vec<Option<&PointRecord>> =
                keyed.iter().map(|m| m.get(key).copied()).collect();
            if found.iter().all(Option::is_some) {
                let recs: Vec<&PointRecord> = found.into_iter().flatten().collect();
                let concurrency = recs
                    .iter()
                    .zip(experiments)
                    .filter_map(|(p, exp)| dim_value(p, exp, "concurrency").parse::<u32>().ok())
                    .max()
                    .unwrap_or(1);
                self.points.push(SharedPoint {
                    label,
                    concurrency,
                    values: key.clone(),
                    ids: recs.iter().map(|p| p.id.clone()).collect(),
                    problems: recs
                        .iter()
                        .zip(labels)
                        .flat_map(|(p, l)| problems(l, p))
                        .collect(),
                    offered: Vec::new(),
                });
                self.shared_records.push(recs);
            } else {
                self.unmatched.push(UnmatchedPoint {
                    label,
                    values: key.clone(),
                    ids: found.iter().map(|p| p.map(|p| p.id.clone())).collect(),
                    offered: Vec::new(),
                });
            }
        }
    }

    /// Adds the open-loop points, paired by the load they were offered.
    fn add_offered(
        &mut self,
        candidates: &'r [Vec<offered::Candidate<'r>>],
        experiments: &[serde_json::Value],
        labels: &[String],
        dimensions: &[String],
    ) {
        for group in offered::pair(candidates) {
            let values = offered_values(&group, experiments, dimensions);
            let rates: Vec<String> = group
                .iter()
                .map(|c| {
                    c.map_or("—".to_string(), |c| {
                        servebench_model::text::sig3(c.offered)
                    })
                })
                .collect();
            let label = format!(
                "{} (offered {} req/s)",
                point_label(dimensions, &values),
                rates.join(" / ")
            );
            if group.iter().all(Option::is_some) {
                let recs: Vec<&PointRecord> = group.iter().flatten().map(|c| c.point).collect();
                self.points.push(SharedPoint {
                    label,
                    // Requests of an open loop overlap: the most in flight decides whether
                    // their spread is evidence of run-to-run noise.
                    concurrency: recs
                        .iter()
                        .filter_map(|p| p.metrics.get(Metric::ConcurrencyMax.name()))
                        .map(|s| s.max.ceil() as u32)
                        .max()
                        .unwrap_or(1)
                        .max(1),
                    values,
                    ids: recs.iter().map(|p| p.id.clone()).collect(),
                    problems: recs
                        .iter()
                        .zip(labels)
                        .flat_map(|(p, l)| problems(l, p))
                        .collect(),
                    offered: rates,
                });
                self.shared_records.push(recs);
            } else {
                self.unmatched.push(UnmatchedPoint {
                    label,
                    values,
                    ids: group
                        .iter()
                        .map(|c| c.map(|c| c.point.id.clone()))
                        .collect(),
                    offered: rates,
                });
            }
        }
    }
}

/// An open-loop group's value per dimension: the runs' distinct values joined by ` / `.
fn offered_values(
    group: &[Option<&offered::Candidate>],
    experiments: &[serde_json::Value],
    dimensions: &[String],
) -> Vec<String> {
    dimensions
        .iter()
        .map(|d| {
            let mut seen: Vec<String> = Vec::new();
            for (c, exp) in group.iter().zip(experiments) {
                if let Some(c) = c {
                    let v = dim_value(c.point, exp, d);
                    if !seen.contains(&v) {
                        seen.push(v);
                    }
                }
            }
            seen.join(" / ")
        })
        .collect()
}

/// Why each run cannot be compared with the baseline, one line per difference.
fn not_comparable_notes(runs: &[LoadedRun], labels: &[String]) -> Vec<String> {
    runs.iter()
        .zip(labels)
        .skip(1)
        .flat_map(|(r, l)| {
            let base = &labels[0];
            super::comparable::incomparable(&runs[0].meta, &r.meta)
                .into_iter()
                .map(move |d| format!("{l} against {base}: {d}"))
        })
        .collect()
}

/// The compared runs as the report names them; the first is the baseline.
fn run_refs(runs: &[LoadedRun], labels: &[String]) -> Vec<RunRef> {
    runs.iter()
        .zip(labels)
        .enumerate()
        .map(|(i, (r, label))| RunRef {
            label: label.clone(),
            baseline: i == 0,
            path: r.path.display().to_string(),
            name: r.meta.experiment.name.clone(),
            started_at: r.meta.started_at.clone(),
            status: r.meta.status.to_string(),
            points: r.points.len(),
            part: r.part.clone(),
        })
        .collect()
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
pub(crate) fn key_dimensions(runs: &[LoadedRun]) -> Vec<String> {
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
pub(crate) fn dim_value(p: &PointRecord, experiment: &serde_json::Value, dim: &str) -> String {
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

pub(crate) fn point_label(dims: &[String], values: &[String]) -> String {
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
pub(crate) fn problems(run: &str, p: &PointRecord) -> Vec<PointProblem> {
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
    threshold_pct: f64,
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
                            let d = decide(
                                b,
                                s,
                                better,
                                Evidence {
                                    threshold_pct,
                                    concurrency: point.concurrency,
                                },
                            );
                            (d.verdict, d.change_pct, d.reason)
                        }
                        _ => (Verdict::NotCompared, None, "not measured".to_string()),
                    };
                    match verdict {
                        Verdict::Regression => summary.regressions += 1,
                        Verdict::Improvement => summary.improvements += 1,
                        Verdict::WithinNoise => summary.within_noise += 1,
                        Verdict::BelowThreshold => summary.below_threshold += 1,
                        Verdict::NotEnoughEvidence => summary.not_enough_evidence += 1,
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
                offered: point.offered.clone(),
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
            super::comparable::flatten("", exp, &mut s);
            for d in &run.meta.dimensions {
                if let Some(v) = run.points.iter().find_map(|p| p.values.get(d)) {
                    s.insert(d.clone(), value_text(v));
                }
            }
            match &run.meta.imported {
                // An imported run states only what its files recorded.
                Some(i) => {
                    s.retain(|k, _| i.recorded.contains(k));
                    let version = i.version.as_deref().unwrap_or("version not recorded");
                    s.insert("tool".into(), format!("{} {version}", i.tool));
                }
                None => {
                    s.insert("servebench version".into(), run.meta.tool_version.clone());
                }
            }
            let versions: Vec<&str> = run
                .meta
                .servers
                .iter()
                .filter_map(|l| {
                    l.server_info
                        .as_ref()
                        .and_then(|i| i.get("version")?.as_str())
                        .or_else(|| l.surface.as_ref()?.version.as_deref())
                })
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

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::CiMethod;

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

    const ONE_AT_A_TIME: Evidence = Evidence {
        threshold_pct: 5.0,
        concurrency: 1,
    };

    fn with(threshold_pct: f64, concurrency: u32) -> Evidence {
        Evidence {
            threshold_pct,
            concurrency,
        }
    }

    fn rounds(mean: f64, ci: (f64, f64), std: f64) -> Stat {
        Stat {
            count: 3,
            mean,
            std: Some(std),
            ci95_low: Some(ci.0),
            ci95_high: Some(ci.1),
            ci_method: Some(CiMethod::Repeats),
            ..Stat::default()
        }
    }

    #[test]
    fn separate_intervals_mark_the_change_by_direction() {
        let a = stat(1.0, Some((0.9, 1.1)));
        let b = stat(1.5, Some((1.4, 1.6)));
        let slower = decide(&a, &b, Some(Direction::Lower), ONE_AT_A_TIME);
        assert_eq!(slower.verdict, Verdict::Regression);
        assert!((slower.change_pct.unwrap() - 50.0).abs() < 1e-9);
        assert_eq!(
            slower.reason,
            "95% CIs do not overlap and the change is above the 5% minimum effect"
        );
        // The same numbers as a rate: higher is better.
        let judge = |x: &Stat, y: &Stat, d| decide(x, y, Some(d), ONE_AT_A_TIME).verdict;
        assert_eq!(judge(&a, &b, Direction::Higher), Verdict::Improvement);
        assert_eq!(judge(&b, &a, Direction::Lower), Verdict::Improvement);
        assert_eq!(judge(&b, &a, Direction::Higher), Verdict::Regression);
    }

    #[test]
    fn overlapping_intervals_or_small_changes_are_noise() {
        let a = stat(1.0, Some((0.8, 1.2)));
        let b = stat(1.1, Some((0.9, 1.3)));
        // +10% with overlapping intervals stays noise.
        let d = decide(&a, &b, Some(Direction::Lower), ONE_AT_A_TIME);
        assert_eq!(
            (d.verdict, d.reason.as_str()),
            (Verdict::WithinNoise, "95% CIs overlap")
        );
        // Separate intervals, but a change under the minimum effect: real, not noise, and
        // too small for a verdict.
        let far = stat(1.5, Some((1.4, 1.6)));
        let d = decide(&a, &far, Some(Direction::Lower), with(60.0, 1));
        assert_eq!(d.verdict, Verdict::BelowThreshold);
        assert_eq!(
            d.reason,
            "real (95% CIs do not overlap) but within the 60% minimum effect"
        );
        // The +3.7% TTFT change of two tight, separate intervals is real, below 5%.
        let near = stat(1.037, Some((1.035, 1.045)));
        let tight = stat(1.0, Some((0.995, 1.005)));
        let d = decide(&tight, &near, Some(Direction::Lower), ONE_AT_A_TIME);
        assert_eq!(d.verdict, Verdict::BelowThreshold, "+3.7% is under 5");
        // Under the threshold with overlapping intervals: noise.
        let close = stat(1.03, Some((0.98, 1.08)));
        let d = decide(&tight, &close, Some(Direction::Lower), ONE_AT_A_TIME);
        assert_eq!(
            (d.verdict, d.reason.as_str()),
            (
                Verdict::WithinNoise,
                "within the 5% minimum effect, and 95% CIs overlap"
            )
        );
        // Touching intervals overlap.
        let c = stat(1.4, Some((1.2, 1.6)));
        assert_eq!(
            decide(&a, &c, Some(Direction::Lower), ONE_AT_A_TIME).verdict,
            Verdict::WithinNoise
        );
    }

    #[test]
    fn request_spread_that_is_not_run_to_run_noise_is_not_evidence() {
        let a = stat(1.0, Some((0.9, 1.1)));
        let b = stat(1.5, Some((1.4, 1.6)));
        // Queued requests (concurrency 4) in one round.
        let d = decide(&a, &b, Some(Direction::Lower), with(5.0, 4));
        assert_eq!(d.verdict, Verdict::NotEnoughEvidence);
        assert!(d.reason.contains("concurrency 4"), "{}", d.reason);
        assert!(d.reason.contains("repeat: 3"), "{}", d.reason);
        // Too few requests.
        let few = Stat {
            count: 4,
            ..a.clone()
        };
        let d = decide(&few, &b, Some(Direction::Lower), ONE_AT_A_TIME);
        assert_eq!(d.verdict, Verdict::NotEnoughEvidence);
        assert!(d.reason.contains("4 requests"), "{}", d.reason);
        // A zero-width interval.
        let flat = stat(1.0, Some((1.0, 1.0)));
        let d = decide(&flat, &b, Some(Direction::Lower), ONE_AT_A_TIME);
        assert_eq!(d.verdict, Verdict::NotEnoughEvidence);
        assert!(d.reason.contains("zero-width"), "{}", d.reason);
        // No interval at all.
        let d = decide(
            &stat(1.0, None),
            &stat(1.5, None),
            Some(Direction::Lower),
            ONE_AT_A_TIME,
        );
        assert_eq!(d.verdict, Verdict::NotEnoughEvidence);
        // Under the minimum effect there is nothing to doubt: noise.
        let d = decide(
            &stat(1.0, None),
            &stat(1.01, None),
            Some(Direction::Lower),
            ONE_AT_A_TIME,
        );
        assert_eq!(d.verdict, Verdict::WithinNoise);
    }

    #[test]
    fn rounds_are_evidence_at_any_concurrency_and_say_how_many_more_would_tell() {
        let a = rounds(1.0, (0.95, 1.05), 0.02);
        let b = rounds(1.2, (1.15, 1.25), 0.02);
        assert_eq!(
            decide(&a, &b, Some(Direction::Lower), with(5.0, 16)).verdict,
            Verdict::Regression
        );
        // Overlapping round intervals: noise, with the rounds that would separate them:
        // s = 0.1, delta = 0.1 -> (4 * 0.1 / 0.1)^2 = 16.
        let wide_a = rounds(1.0, (0.8, 1.2), 0.1);
        let wide_b = rounds(1.1, (0.9, 1.3), 0.1);
        let d = decide(&wide_a, &wide_b, Some(Direction::Lower), with(5.0, 16));
        assert_eq!(d.verdict, Verdict::WithinNoise);
        assert_eq!(d.reason, "95% CIs overlap; about 16 rounds would tell");
    }

    #[test]
    fn a_zero_baseline_has_no_relative_change() {
        let d = decide(
            &stat(0.0, None),
            &stat(1.0, None),
            Some(Direction::Lower),
            ONE_AT_A_TIME,
        );
        assert_eq!((d.verdict, d.change_pct), (Verdict::WithinNoise, None));
    }
}
