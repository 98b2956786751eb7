//! From loaded runs to the [`HistoryModel`]: runs grouped by experiment and put in time
//! order, what changed in each, a series per point and metric, and each entry judged against
//! the newest earlier good one with `compare`'s own matching and verdict (the pair of runs is
//! built as `compare` builds it), so `history` and `compare` never disagree about a change.

use std::collections::HashMap;

use indexmap::IndexMap;

use super::model::*;
use crate::report::comparable::incomparable;
use crate::report::compare::{self, CompareModel, LoadedRun, Verdict};
use crate::report::metric_def::metric_def;
use servebench_model::catalog::{Graded, Metric};
use servebench_model::results::records::{PointRecord, Stat};

/// The metrics a history follows when none is asked for: the report's headline metrics and
/// request throughput (a server that queues more shows there first).
pub fn default_metrics() -> Vec<Metric> {
    Metric::headline()
        .chain(std::iter::once(Metric::ThroughputReq))
        .collect()
}

/// Builds the history of `runs` (any order, any experiments). `threshold_pct` is compare's
/// `--threshold` (None: its default); `metrics` the series' metrics.
pub fn build(
    runs: Vec<LoadedRun>,
    skipped: Vec<SkippedRun>,
    sources: Vec<String>,
    threshold_pct: Option<f64>,
    metrics: &[Metric],
) -> HistoryModel {
    let names: Vec<&str> = metrics.iter().map(|m| m.name()).collect();
    build_names(runs, skipped, sources, threshold_pct, &names)
}

/// [`build`] with the series named: a metric of the catalogue (`ttft_s`) or a figure the
/// bound grades a point with (`decode_bw_fraction`, `catalog::Graded`), read from the
/// point's `bound`.
pub fn build_names(
    runs: Vec<LoadedRun>,
    skipped: Vec<SkippedRun>,
    sources: Vec<String>,
    threshold_pct: Option<f64>,
    metrics: &[&str],
) -> HistoryModel {
    let mut skipped = skipped;
    let mut by_name: IndexMap<String, Vec<LoadedRun>> = IndexMap::new();
    // One run, one identity: the run itself says which it is (its experiment, start time,
    // spec and client host), so a copy of a run directory elsewhere is the same run.
    let mut seen: HashMap<(String, String, String, String), String> = HashMap::new();
    for run in runs {
        let id = (
            run.meta.experiment.name.clone(),
            run.meta.started_at.clone(),
            run.meta.spec_sha256.clone(),
            run.meta.client_host.hostname.clone(),
        );
        if let Some(first) = seen.get(&id) {
            skipped.push(SkippedRun {
                path: run.path.display().to_string(),
                why: format!(
                    "the same run as {first} (same experiment, start time, spec and client host): counted once"
                ),
            });
            continue;
        }
        seen.insert(id, run.path.display().to_string());
        by_name
            .entry(run.meta.experiment.name.clone())
            .or_default()
            .push(run);
    }
    let mut experiments: Vec<ExperimentHistory> = by_name
        .into_iter()
        .map(|(name, mut runs)| {
            runs.sort_by(|a, b| {
                (a.meta.started_at.as_str(), &a.path).cmp(&(b.meta.started_at.as_str(), &b.path))
            });
            experiment(name, &runs, threshold_pct, metrics)
        })
        .collect();
    experiments.sort_by(|a, b| {
        let first = |e: &ExperimentHistory| e.runs.first().map(|r| r.started_at.clone());
        (first(a), &a.name).cmp(&(first(b), &b.name))
    });
    HistoryModel {
        model_version: HISTORY_MODEL_VERSION,
        sources,
        threshold_pct: threshold_pct.unwrap_or(compare::DEFAULT_THRESHOLD_PCT),
        experiments,
        skipped,
        notes: Vec::new(),
    }
}

/// Pairs of runs built as `compare` builds them, each once.
struct Pairs<'a> {
    runs: &'a [LoadedRun],
    threshold_pct: Option<f64>,
    built: HashMap<(usize, usize), CompareModel>,
}

impl Pairs<'_> {
    fn get(&mut self, base: usize, other: usize) -> &CompareModel {
        let (runs, threshold) = (self.runs, self.threshold_pct);
        self.built.entry((base, other)).or_insert_with(|| {
            if other == base + 1 {
                compare::build(&runs[base..=other], threshold)
            } else {
                compare::build(&[runs[base].clone(), runs[other].clone()], threshold)
            }
        })
    }

    /// The verdict on `metric` at the point `ids` (base's, other's) as `compare` judges it.
    fn judge(
        &mut self,
        base: (usize, &str),
        other: (usize, &str),
        metric: &str,
    ) -> (Option<Verdict>, Option<f64>, String) {
        let model = self.get(base.0, other.0);
        let at = model
            .points
            .iter()
            .position(|p| p.ids.len() == 2 && p.ids[0] == base.1 && p.ids[1] == other.1);
        let row = at.and_then(|i| {
            model
                .metrics
                .iter()
                .find(|t| t.name == metric)
                .and_then(|t| t.rows.get(i))
        });
        match row.and_then(|r| r.cells.get(1)) {
            Some(cell) => (
                cell.verdict,
                cell.change_pct,
                cell.reason.clone().unwrap_or_default(),
            ),
            None => (
                None,
                None,
                "compare did not pair this point with the earlier run's".to_string(),
            ),
        }
    }
}

fn experiment(
    name: String,
    runs: &[LoadedRun],
    threshold_pct: Option<f64>,
    metrics: &[&str],
) -> ExperimentHistory {
    let mut pairs = Pairs {
        runs,
        threshold_pct,
        built: HashMap::new(),
    };
    let history_runs: Vec<HistoryRun> = (0..runs.len())
        .map(|i| {
            let r = &runs[i];
            let changes = if i == 0 {
                RunChanges {
                    summary: "first run".to_string(),
                    settings: Vec::new(),
                    not_comparable: Vec::new(),
                }
            } else {
                changes(&runs[i - 1], r, pairs.get(i - 1, i))
            };
            HistoryRun {
                label: format!("#{}", i + 1),
                path: r.path.display().to_string(),
                started_at: r.meta.started_at.clone(),
                status: r.meta.status.to_string(),
                tool_version: r.meta.tool_version.clone(),
                commit: r.meta.git.as_ref().map(|g| {
                    let short: String = g.commit.chars().take(12).collect();
                    if g.dirty {
                        format!("{short}+dirty")
                    } else {
                        short
                    }
                }),
                changes,
            }
        })
        .collect();
    // A change of construction ends every series' comparable stretch at that run.
    let breaks: Vec<bool> = history_runs
        .iter()
        .map(|r| !r.changes.not_comparable.is_empty())
        .collect();
    // Runs in which a recorded setting changed (the engine, its flags, versions, hardware).
    let changed: Vec<bool> = history_runs
        .iter()
        .map(|r| !r.changes.settings.is_empty())
        .collect();

    // Points by their key over all the experiment's runs, as compare keys them.
    let dims = compare::key_dimensions(runs);
    let mut points: IndexMap<String, Vec<(usize, &PointRecord)>> = IndexMap::new();
    for (i, run) in runs.iter().enumerate() {
        let exp = serde_json::to_value(&run.meta.experiment).unwrap_or_default();
        let mut seen: Vec<String> = Vec::new();
        for p in &run.points {
            let key: Vec<String> = dims
                .iter()
                .map(|d| compare::dim_value(p, &exp, d))
                .collect();
            let label = compare::point_label(&dims, &key);
            if seen.contains(&label) {
                continue; // compare keeps the first point with a key
            }
            seen.push(label.clone());
            points.entry(label).or_default().push((i, p));
        }
    }

    let mut series = Vec::new();
    for (point, found) in &points {
        for &name in metrics {
            if !found.iter().any(|(_, p)| value(p, name).is_some()) {
                continue;
            }
            series.push(one_series(
                point,
                name,
                found,
                (&breaks, &changed),
                &mut pairs,
            ));
        }
    }
    ExperimentHistory {
        name,
        runs: history_runs,
        series,
    }
}

/// How many earlier runs make a level: a step is judged against each of the newest this many
/// comparable runs that may serve as one, so a single noisy run cannot move the level.
pub(crate) const LEVEL_RUNS: usize = 3;

/// Flags that say the client, not the server, shaped a point's numbers: a point carrying one
/// is shown with it and never judged as a server change, nor used as a level.
pub(crate) const CLIENT_FLAGS: &[&str] = &[
    "client-read-late",
    "high-variance",
    "ttft-below-server",
    "client-limited",
    "client-failed",
];

/// A step larger than the threshold whose evidence cannot settle it (the intervals overlap,
/// or there is too little evidence): neither a change nor a level.
fn unresolved(verdict: Option<Verdict>, change_pct: Option<f64>, threshold_pct: f64) -> bool {
    matches!(
        verdict,
        Some(Verdict::WithinNoise | Verdict::NotEnoughEvidence)
    ) && change_pct.is_some_and(|c| c.abs() > threshold_pct)
}

/// One judgement of a run against a level: the level's run, verdict, change and why.
type Judged = (usize, Option<Verdict>, Option<f64>, String);

/// Judges `(i, id)` against each of `levels` (newest first, with their point ids) and keeps
/// one pair, so `compare` on that pair says the same: a regression against any level when no
/// level saw an improvement, an improvement likewise, else the newest level's verdict.
fn judge_levels(
    pairs: &mut Pairs<'_>,
    levels: &[(usize, String)],
    (i, id): (usize, &str),
    metric: &str,
) -> Option<Judged> {
    let all: Vec<Judged> = levels
        .iter()
        .map(|(j, jid)| {
            let (v, c, r) = pairs.judge((*j, jid.as_str()), (i, id), metric);
            (*j, v, c, r)
        })
        .collect();
    let any = |v: Verdict| all.iter().find(|x| x.1 == Some(v)).cloned();
    match (any(Verdict::Regression), any(Verdict::Improvement)) {
        (Some(r), None) => Some(r),
        (None, Some(i)) => Some(i),
        _ => all.into_iter().next(),
    }
}

/// A point's value of `metric`: its measured stat, or the figure its bound graded it with (one
/// value derived from the point's means: no interval of its own).
fn value(p: &PointRecord, metric: &str) -> Option<Stat> {
    if Graded::from_name(metric).is_none() {
        return p.metrics.get(metric).filter(|s| s.count > 0).cloned();
    }
    let v = *p.bound.as_ref()?.figures.get(metric)?;
    Some(Stat {
        count: 1,
        mean: v,
        p50: v,
        p90: v,
        p99: v,
        min: v,
        max: v,
        ..Stat::default()
    })
}

/// Why a graded figure's steps are shown, not judged.
const GRADED_NOT_JUDGED: &str = "a graded figure (from the point's means, the model and the GPU's datasheet, with no interval of its own): shown, not judged, as compare shows it";

/// A run's entry of a series, before it is judged: its point's stat, problems and client
/// flags.
fn new_entry(i: usize, p: &PointRecord, metric: &str) -> SeriesEntry {
    let problems: Vec<String> = compare::problems("", p)
        .into_iter()
        .map(|x| format!("{}: {}", x.kind, x.message))
        .collect();
    let mut client_flags: Vec<String> = Vec::new();
    for f in &p.flags {
        let name = f.kind.name().to_string();
        if CLIENT_FLAGS.contains(&name.as_str()) && !client_flags.contains(&name) {
            client_flags.push(name);
        }
    }
    let stat = value(p, metric);
    SeriesEntry {
        run: i,
        id: p.id.clone(),
        stat,
        problems,
        client_flags,
        against: None,
        verdict: None,
        change_pct: None,
        reason: String::new(),
        change_point: false,
        client_step: false,
        unresolved: false,
        level: false,
        good: false,
    }
}

/// The gate's word on the newest run of a series: judged against its good levels, or why not.
fn latest_check(
    entries: &[SeriesEntry],
    gate: &[Option<Judged>],
    breaks: &[bool],
    changed: &[bool],
    threshold: f64,
) -> Option<LatestCheck> {
    let last = entries.last()?;
    let latest = {
        let i = last.run;
        let none = |reason: String| LatestCheck {
            run: i,
            good: None,
            verdict: None,
            change_pct: None,
            unresolved: false,
            reason,
        };
        if !last.problems.is_empty() {
            return Some(none(
                "the newest run's point failed or is flagged: not judged".to_string(),
            ));
        }
        match gate.last().cloned().flatten() {
            None => none(if breaks[i] {
                "not comparable with the run before".to_string()
            } else {
                "no earlier good level to judge against".to_string()
            }),
            // As for a change point: a step of a starved client with nothing recorded changed
            // since the level is likelier the client's.
            Some((j, v, _, _))
                if !last.client_flags.is_empty()
                    && matches!(v, Some(Verdict::Regression | Verdict::Improvement))
                    && !(j + 1..=i).any(|k| changed[k]) =>
            {
                none(format!(
                    "not judged as a server change: the newest run's point carries {} (the client shaped these numbers) and nothing recorded changed; rerun on a quieter client",
                    last.client_flags.join(", ")
                ))
            }
            Some((j, verdict, change_pct, reason)) => LatestCheck {
                run: i,
                good: Some(j),
                verdict,
                change_pct,
                unresolved: unresolved(verdict, change_pct, threshold),
                reason,
            },
        }
    };
    Some(latest)
}

fn one_series(
    point: &str,
    metric: &str,
    found: &[(usize, &PointRecord)],
    (breaks, changed): (&[bool], &[bool]),
    pairs: &mut Pairs<'_>,
) -> Series {
    let def = series_def(metric);
    let threshold = pairs
        .threshold_pct
        .unwrap_or(compare::DEFAULT_THRESHOLD_PCT);
    let mut entries: Vec<SeriesEntry> = Vec::new();
    // Per entry: whether it may be a level for later steps, and for the gate (a level that
    // was not itself a regression against the gate's levels).
    let mut gate: Vec<Option<Judged>> = Vec::new();
    for &(i, p) in found {
        let mut entry = new_entry(i, p, metric);
        let mut gate_judged = None;
        if !entry.problems.is_empty() {
            entry.reason = "failed or flagged: shown, not judged".to_string();
        } else if Graded::from_name(metric).is_some() {
            entry.reason = GRADED_NOT_JUDGED.to_string();
        } else if breaks[i] {
            entry.reason = "not comparable with the run before (see what changed)".to_string();
            entry.level = entry.stat.is_some();
            entry.good = entry.level;
        } else {
            // Levels for a step: since the newest step (a change point starts a new level).
            let since = entries
                .iter()
                .rev()
                .find(|e| e.change_point)
                .map_or(0, |e| e.run);
            let step_levels = levels(&entries, found, i, breaks, |e| e.level && e.run >= since);
            let gate_levels = levels(&entries, found, i, breaks, |e| e.good);
            match judge_levels(pairs, &step_levels, (i, p.id.as_str()), metric) {
                None => entry.reason = "nothing earlier to judge against".to_string(),
                Some((j, verdict, change_pct, reason)) => {
                    entry.against = Some(j);
                    entry.verdict = verdict;
                    entry.change_pct = change_pct;
                    entry.reason = reason;
                    entry.unresolved = unresolved(verdict, change_pct, threshold);
                    let step = matches!(verdict, Some(Verdict::Regression | Verdict::Improvement));
                    // A step of a point whose client shaped its numbers is a server change
                    // only when a setting changed since its level (the likelier cause then).
                    let set = (j + 1..=i).any(|k| changed[k]);
                    entry.change_point = step && (entry.client_flags.is_empty() || set);
                    entry.client_step = step && !entry.change_point;
                    if entry.unresolved {
                        entry.reason = format!(
                            "{}; a step above the {}% threshold that the evidence does not settle: no level for later runs",
                            entry.reason,
                            servebench_model::text::plain(threshold)
                        );
                    }
                }
            }
            if entry.client_step {
                entry.reason = format!(
                    "{}; not judged as a server change: the point carries {} (the client shaped these numbers)",
                    if entry.reason.is_empty() {
                        "—"
                    } else {
                        entry.reason.as_str()
                    },
                    entry.client_flags.join(", ")
                );
            }
            entry.level = !entry.client_step
                && !entry.unresolved
                && entry.stat.is_some()
                && match entry.against {
                    None => true,
                    Some(_) => !matches!(entry.verdict, None | Some(Verdict::NotCompared)),
                };
            gate_judged = judge_levels(pairs, &gate_levels, (i, p.id.as_str()), metric);
            entry.good = entry.level
                && match &gate_judged {
                    None => true,
                    Some((_, v, c, _)) => {
                        *v != Some(Verdict::Regression) && !unresolved(*v, *c, threshold)
                    }
                };
        }
        entries.push(entry);
        gate.push(gate_judged);
    }
    let latest = latest_check(&entries, &gate, breaks, changed, threshold);
    Series {
        point: point.to_string(),
        metric: metric.to_string(),
        label: def.as_ref().map_or(metric.to_string(), |d| d.label.clone()),
        unit: def.map_or(String::new(), |d| d.unit),
        better: series_better(metric),
        entries,
        latest,
    }
}

/// A series' label, unit and definition: the catalogue's metric, or a figure the bound grades.
fn series_def(metric: &str) -> Option<crate::report::metric_def::MetricDef> {
    metric_def(metric).or_else(|| {
        Graded::from_name(metric).map(|g| crate::report::metric_def::MetricDef {
            label: g.label.to_string(),
            unit: g.unit.to_string(),
            definition: g.definition.to_string(),
        })
    })
}

/// Which way a series is better: the catalogue's metric's, or a graded figure's.
fn series_better(metric: &str) -> Option<servebench_model::catalog::Direction> {
    compare::direction(metric).or_else(|| {
        Graded::from_name(metric).map(|g| match g.higher_is_better {
            true => servebench_model::catalog::Direction::Higher,
            false => servebench_model::catalog::Direction::Lower,
        })
    })
}

/// The newest [`LEVEL_RUNS`] entries before run `i` that pass `accept`, within the comparable
/// stretch that ends at `i`, newest first: their runs and point ids. Entries whose point
/// carries a client flag serve only when no other does (a first run on a busy machine).
fn levels(
    entries: &[SeriesEntry],
    found: &[(usize, &PointRecord)],
    i: usize,
    breaks: &[bool],
    accept: impl Fn(&SeriesEntry) -> bool,
) -> Vec<(usize, String)> {
    // The stretch starts at the newest run at or before `i` that changed construction.
    let start = (0..=i).rev().find(|&k| breaks[k]).unwrap_or(0);
    let eligible = || {
        entries
            .iter()
            .rev()
            .filter(|e| e.run >= start && e.run < i)
            .filter(|e| accept(e))
    };
    let clean = eligible().any(|e| e.client_flags.is_empty());
    eligible()
        .filter(|e| !clean || e.client_flags.is_empty())
        .take(LEVEL_RUNS)
        .map(|e| {
            let id = found
                .iter()
                .find(|(r, _)| *r == e.run)
                .map_or(e.id.clone(), |(_, p)| p.id.clone());
            (e.run, id)
        })
        .collect()
}

/// What changed from `before` to `after`: compare's differences of the pair (server flags
/// first, the spec, single-valued sweep dimensions, versions), the hardware and host, and the
/// client's placement; and how they differ by construction.
fn changes(before: &LoadedRun, after: &LoadedRun, pair: &CompareModel) -> RunChanges {
    let mut settings: Vec<SettingChange> = pair
        .differences
        .iter()
        .filter(|d| d.values.len() == 2)
        .map(|d| SettingChange {
            name: d.name.clone(),
            before: d.values[0].clone(),
            after: d.values[1].clone(),
        })
        .collect();
    let machine = |r: &LoadedRun| match r.points.first() {
        Some(p) => crate::report::hardware::machine_of(&r.meta, p),
        None => crate::report::hardware::describe(r.meta.server_host.as_ref(), None),
    };
    let extra = [
        ("hardware", machine(before), machine(after)),
        (
            "host",
            before.meta.client_host.hostname.clone(),
            after.meta.client_host.hostname.clone(),
        ),
    ];
    for (name, b, a) in extra {
        if b != a {
            settings.push(SettingChange {
                name: name.to_string(),
                before: b,
                after: a,
            });
        }
    }
    let not_comparable: Vec<String> = incomparable(&before.meta, &after.meta)
        .iter()
        .map(ToString::to_string)
        .collect();
    for d in incomparable(&before.meta, &after.meta) {
        if !settings.iter().any(|s| s.name == d.setting) {
            settings.push(SettingChange {
                name: d.setting,
                before: d.before,
                after: d.after,
            });
        }
    }
    let summary = match settings.len() {
        0 => "nothing changed".to_string(),
        1 => "one setting changed".to_string(),
        n => format!("{n} settings changed"),
    };
    RunChanges {
        summary,
        settings,
        not_comparable,
    }
}
