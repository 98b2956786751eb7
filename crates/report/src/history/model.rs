//! What `servebench history` sees: experiments, their runs in time order with what changed in
//! each, and one series per point and headline metric with its change points. Built by
//! `build` from loaded runs alone; rendered by `markdown`, `charts` and `page`.

use serde::Serialize;

use crate::report::compare::{Direction, Verdict};
use servebench_model::results::records::Stat;

/// Version of [`HistoryModel`]; bumped when a field changes meaning or is removed.
pub(crate) const HISTORY_MODEL_VERSION: u32 = 2;

/// Every experiment's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryModel {
    /// [`HISTORY_MODEL_VERSION`].
    pub model_version: u32,
    /// Where the runs were found, as given (`runs/`, `git:REPO@main~40..main`).
    pub sources: Vec<String>,
    /// The smallest change, in percent, that is judged (`--threshold`, default 5).
    pub threshold_pct: f64,
    /// Experiments by name, in the order their first run started.
    pub experiments: Vec<ExperimentHistory>,
    /// Run directories that could not be read, each named with why; none of their numbers
    /// entered a series.
    pub skipped: Vec<SkippedRun>,
    /// What the reader said of the runs it read (a run changed by several commits of a git
    /// range, read as the newest holds it).
    pub notes: Vec<String>,
}

/// A run directory left out of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedRun {
    /// The directory (or `commit:path` in a git repository).
    pub path: String,
    /// Why, for people: `meta.json: expected value at line 3 column 1`.
    pub why: String,
}

/// One experiment's runs and series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExperimentHistory {
    /// The experiment's `name`.
    pub name: String,
    /// Its runs, oldest first (by start time).
    pub runs: Vec<HistoryRun>,
    /// One series per point and metric, points in their first run's order.
    pub series: Vec<Series>,
}

impl ExperimentHistory {
    /// The series grouped by metric, metrics in the order they first appear (never empty
    /// groups): a table, a chart and a page chart per group.
    pub fn series_by_metric(&self) -> Vec<Vec<&Series>> {
        let mut groups: Vec<Vec<&Series>> = Vec::new();
        for s in &self.series {
            match groups.iter_mut().find(|g| g[0].metric == s.metric) {
                Some(g) => g.push(s),
                None => groups.push(vec![s]),
            }
        }
        groups
    }

    /// The change points of every series, in run order.
    pub fn change_points(&self) -> Vec<(&Series, &SeriesEntry)> {
        let mut out: Vec<(&Series, &SeriesEntry)> = self
            .series
            .iter()
            .flat_map(|s| {
                s.entries
                    .iter()
                    .filter(|e| e.change_point)
                    .map(move |e| (s, e))
            })
            .collect();
        out.sort_by_key(|(_, e)| e.run);
        out
    }
}

/// A run in an experiment's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryRun {
    /// `#1`, `#2`, ... in start order.
    pub label: String,
    /// The run directory (or `commit:path`).
    pub path: String,
    /// RFC 3339 UTC start time.
    pub started_at: String,
    /// `complete`, `incomplete`, `failed` or `running`.
    pub status: String,
    /// servebench's version that ran it.
    pub tool_version: String,
    /// The experiments repository's commit when it ran (with `+dirty`), when recorded.
    pub commit: Option<String>,
    /// What changed since the run before it.
    pub changes: RunChanges,
}

/// What changed between a run and the one before it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunChanges {
    /// `first run`, `nothing changed`, `one setting changed`, `3 settings changed`.
    pub summary: String,
    /// The settings, server flags first.
    pub settings: Vec<SettingChange>,
    /// How the run differs from the one before by construction (prompts, cache policy,
    /// method, client placement): its numbers are not judged against earlier runs.
    pub not_comparable: Vec<String>,
}

/// One setting's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettingChange {
    /// Dotted path in the resolved spec (`server.args.chunked-prefill-size`), `servebench
    /// version`, `server version`, `hardware` or `host`.
    pub name: String,
    /// The value before (`—` when unset).
    pub before: String,
    /// The value now.
    pub after: String,
}

impl std::fmt::Display for SettingChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} → {}", self.name, self.before, self.after)
    }
}

/// One metric at one point across the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    /// The point as `compare` labels it: `ctx=1024, concurrency=4` (`all` without dimensions).
    pub point: String,
    /// Metric name (`ttft_s`).
    pub metric: String,
    /// Its label (`TTFT`).
    pub label: String,
    /// Its display unit (`ms`, `tok/s`).
    pub unit: String,
    /// Which way is better.
    pub better: Option<Direction>,
    /// One entry per run that measured the point, in run order.
    pub entries: Vec<SeriesEntry>,
    /// The newest run against the series' last good level, for `--fail-on-regression`.
    pub latest: Option<LatestCheck>,
}

/// One run's value in a series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeriesEntry {
    /// Index of the run in [`ExperimentHistory::runs`].
    pub run: usize,
    /// The point's id in that run.
    pub id: String,
    /// The statistic (None when the point did not measure the metric).
    pub stat: Option<Stat>,
    /// Why the point is not judged (failed, incomplete, a warning flag), one line each; such
    /// an entry is shown, never judged, and never a reference level.
    pub problems: Vec<String>,
    /// Flags of the point that say the client shaped its numbers (`client-read-late`,
    /// `high-variance`): shown; a step of such a point is a change point only when a
    /// setting changed, and the point is a level only when no clean one is at hand.
    pub client_flags: Vec<String>,
    /// The level it is judged against: of the newest earlier comparable runs that may serve as
    /// one (up to three, since the last change point), the one whose verdict is kept (a
    /// regression or an improvement against any, else the newest). None for the first entry,
    /// a problem, or after a change of construction.
    pub against: Option<usize>,
    /// The verdict against that run.
    pub verdict: Option<Verdict>,
    /// Relative change against that run, in percent.
    pub change_pct: Option<f64>,
    /// Why the verdict (or why none).
    pub reason: String,
    /// A step beyond the noise: a regression or an improvement against its level.
    pub change_point: bool,
    /// A step of a point with client flags and no recorded change since its level: likelier
    /// the client's than the server's, so neither a change point nor a level.
    pub client_step: bool,
    /// A step above the threshold that the evidence does not settle (the intervals overlap,
    /// or too few rounds): never a level for later runs.
    pub unresolved: bool,
    /// May serve as a level for later steps: judged without a problem, client flag or
    /// unresolved step.
    pub level: bool,
    /// May serve as a level for the gate: a level that was not itself a regression (or an
    /// unresolved step) against the gate's levels.
    pub good: bool,
}

/// The newest run of a series against the series' good levels: the newest earlier comparable
/// entries (up to three) that were levels and not themselves regressions; the verdict kept is
/// a regression against any of them, so one noisy run cannot launder a slowdown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatestCheck {
    /// The newest run's index.
    pub run: usize,
    /// The last good level's run, None when there is none to judge against.
    pub good: Option<usize>,
    /// The verdict (None when not judged).
    pub verdict: Option<Verdict>,
    /// Relative change against the last good level, in percent.
    pub change_pct: Option<f64>,
    /// A change above the threshold that the evidence does not settle.
    pub unresolved: bool,
    /// Why.
    pub reason: String,
}
