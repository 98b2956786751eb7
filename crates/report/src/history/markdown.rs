//! The history as Markdown: per experiment its runs with what changed, its change points
//! (each attributed to its run's changes), its trend charts and one table per metric. Pure.

use std::fmt::Write;

use super::charts;
use super::model::*;
use crate::report::compare::Verdict;
use servebench_model::catalog::Metric;
use servebench_model::text::{self, plain};

/// Renders the history; `charts_dir` is where the charts are linked from (None: no links,
/// as for `--stdout`).
pub fn render(model: &HistoryModel, charts_dir: Option<&str>) -> String {
    let mut out = String::new();
    let runs: usize = model.experiments.iter().map(|e| e.runs.len()).sum();
    let changes: usize = model
        .experiments
        .iter()
        .map(|e| e.change_points().len())
        .sum();
    let _ = writeln!(out, "# History\n");
    let _ = writeln!(
        out,
        "{} of {} from {}; {}.{}\n",
        text::count_s(runs, "run"),
        text::count_s(model.experiments.len(), "experiment"),
        model
            .sources
            .iter()
            .map(|s| format!("`{}`", cell(s)))
            .collect::<Vec<_>>()
            .join(", "),
        text::count_s(changes, "change point"),
        if model.skipped.is_empty() {
            String::new()
        } else {
            format!(
                " {} could not be read and {} left out (listed at the end).",
                text::count_s(model.skipped.len(), "run directory"),
                if model.skipped.len() == 1 {
                    "is"
                } else {
                    "are"
                }
            )
        }
    );
    let _ = writeln!(
        out,
        "Each run is judged against its level, as `servebench compare` judges two runs: each \
         of the newest {} earlier runs that may serve as one (since the last change point), \
         a regression (or an improvement) against any of them kept, so one noisy run cannot \
         move the level. A change is a step (a change point) only when it is larger than {}% \
         and both runs' 95% confidence intervals, from evidence that stands for run-to-run \
         noise, do not overlap; a larger change the evidence does not settle is *unresolved* \
         and never becomes a level. A failed or flagged point is shown, never judged; a point \
         whose flags say the client shaped its numbers (`client-read-late`, `high-variance`) \
         is shown with them and not judged as a server change. Runs that differ by \
         construction (prompts, cache policy, method, client placement) are not judged \
         against each other.\n",
        super::build::LEVEL_RUNS,
        plain(model.threshold_pct)
    );
    for note in &model.notes {
        let _ = writeln!(out, "- Note: {}", cell(note));
    }
    if !model.notes.is_empty() {
        out.push('\n');
    }
    for e in &model.experiments {
        experiment(&mut out, e, charts_dir);
    }
    if !model.skipped.is_empty() {
        let _ = writeln!(out, "## Left out\n");
        let _ = writeln!(out, "| run directory | why |\n|---|---|");
        for s in &model.skipped {
            let _ = writeln!(out, "| `{}` | {} |", cell(&s.path), cell(&s.why));
        }
        out.push('\n');
    }
    out
}

/// One experiment's section: its runs, change points, charts and metric tables.
fn experiment(out: &mut String, e: &ExperimentHistory, charts_dir: Option<&str>) {
    let _ = writeln!(
        out,
        "## {} ({})\n",
        e.name,
        text::count_s(e.runs.len(), "run")
    );
    runs_table(out, e);
    change_points(out, e);
    chart_links(out, e, charts_dir);
    metric_tables(out, e);
}

/// The experiment's runs, one row each, with what changed in each.
fn runs_table(out: &mut String, e: &ExperimentHistory) {
    let _ = writeln!(
        out,
        "| run | started | status | servebench | commit | what changed | directory |\n|---|---|---|---|---|---|---|"
    );
    for r in &e.runs {
        let mut what = r.changes.summary.clone();
        if !r.changes.not_comparable.is_empty() {
            what = format!(
                "**not comparable** ({}); {what}",
                r.changes.not_comparable.join("; ")
            );
        }
        if !r.changes.settings.is_empty() {
            let list: Vec<String> = r
                .changes
                .settings
                .iter()
                .map(|s| format!("`{}` {} → {}", s.name, s.before, s.after))
                .collect();
            what = format!("{what}: {}", list.join(", "));
        }
        let _ = writeln!(
            out,
            "| **{}** | {} | {} | {} | {} | {} | `{}` |",
            r.label,
            r.started_at,
            r.status,
            cell(&r.tool_version),
            r.commit.as_deref().unwrap_or("—"),
            cell(&what),
            cell(&r.path)
        );
    }
    out.push('\n');
}

/// The experiment's change points, each attributed to its run's changes; or that it has none.
fn change_points(out: &mut String, e: &ExperimentHistory) {
    let points = e.change_points();
    let mut set_aside: Vec<(&Series, &SeriesEntry)> = e
        .series
        .iter()
        .flat_map(|s| s.entries.iter().map(move |x| (s, x)))
        .filter(|(_, x)| !x.change_point && (x.unresolved || x.client_step))
        .collect();
    set_aside.sort_by_key(|(_, x)| x.run);
    if points.is_empty() {
        let _ = writeln!(out, "No change point: no step beyond the noise.\n");
    } else {
        let _ = writeln!(out, "### Change points\n");
        for (s, entry) in points {
            let run = &e.runs[entry.run];
            let against = entry
                .against
                .map_or("—".into(), |j| e.runs[j].label.clone());
            let _ = writeln!(
                out,
                "- **{}**, {} at {}: {} **{}** against {} ({}). Attributed to {}",
                run.label,
                s.label,
                s.point,
                change(entry.change_pct),
                verdict_word(entry.verdict),
                against,
                entry.reason,
                attribution(e, entry)
            );
        }
        out.push('\n');
    }
    if !set_aside.is_empty() {
        let _ = writeln!(out, "### Steps not judged as server changes\n");
        for (s, entry) in set_aside {
            let run = &e.runs[entry.run];
            let against = entry
                .against
                .map_or("—".into(), |j| e.runs[j].label.clone());
            let why = if entry.client_flags.is_empty() {
                "unresolved: the evidence does not settle it, so it is no level for later runs"
                    .to_string()
            } else {
                format!("attributed to {}", attribution(e, entry))
            };
            let _ = writeln!(
                out,
                "- **{}**, {} at {}: {} {} against {}: {}.",
                run.label,
                s.label,
                s.point,
                change(entry.change_pct),
                verdict_word(entry.verdict),
                against,
                why
            );
        }
        out.push('\n');
    }
}

/// The experiment's trend charts, linked from `charts_dir` (None: no links), each saying the
/// points it left out.
fn chart_links(out: &mut String, e: &ExperimentHistory, charts_dir: Option<&str>) {
    for c in charts::charts(e) {
        if let Some(dir) = charts_dir {
            let _ = writeln!(out, "![{}]({dir}/{})\n", c.title, c.file);
        }
        if c.left_out > 0 {
            let _ = writeln!(
                out,
                "The chart draws the first {} points; {} more are in the table.\n",
                charts::MAX_LINES,
                c.left_out
            );
        }
    }
}

/// One table per metric: a row per point, a column per run, and the newest run judged against
/// the last good level.
fn metric_tables(out: &mut String, e: &ExperimentHistory) {
    let mut metrics: Vec<&str> = Vec::new();
    for s in &e.series {
        if !metrics.contains(&s.metric.as_str()) {
            metrics.push(&s.metric);
        }
    }
    for metric in metrics {
        let series: Vec<&Series> = e.series.iter().filter(|s| s.metric == metric).collect();
        let first = series[0];
        let _ = writeln!(out, "### {} ({})\n", first.label, first.unit);
        let _ = writeln!(
            out,
            "| point | {} | newest against the last good level |",
            e.runs
                .iter()
                .map(|r| r.label.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(out, "|---|{}---|", "---:|".repeat(e.runs.len()));
        for s in series {
            let mut cells = vec!["—".to_string(); e.runs.len()];
            for entry in &s.entries {
                cells[entry.run] = entry_cell(s, entry);
            }
            let latest = s.latest.as_ref().map_or("—".to_string(), |l| match l.good {
                Some(g) => format!(
                    "{} {} against {}",
                    change(l.change_pct),
                    verdict_word(l.verdict),
                    e.runs[g].label
                ),
                None => l.reason.clone(),
            });
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                cell(&s.point),
                cells.join(" | "),
                cell(&latest)
            );
        }
        out.push('\n');
    }
}

/// `+12.3%` or `—`.
fn change(pct: Option<f64>) -> String {
    pct.map_or("—".to_string(), |c| format!("{c:+.1}%"))
}

/// A verdict as the comparison writes it.
pub(crate) fn verdict_word(v: Option<Verdict>) -> &'static str {
    match v {
        Some(Verdict::Regression) => "regression",
        Some(Verdict::Improvement) => "improvement",
        Some(Verdict::WithinNoise) => "within noise",
        Some(Verdict::BelowThreshold) => "real, below the threshold",
        Some(Verdict::NotEnoughEvidence) => "not enough evidence",
        Some(Verdict::NotCompared) | None => "not judged",
    }
}

/// What a step of `entry` is attributed to, after "Attributed to ": the recorded changes of
/// every run since its level (`#3: one setting changed (...)`), the client's flags when the
/// point carries any (first when nothing recorded changed: the likelier cause), or that
/// nothing recorded changed.
pub(crate) fn attribution(e: &ExperimentHistory, entry: &SeriesEntry) -> String {
    let from = entry.against.map_or(entry.run, |j| j + 1);
    let changed: Vec<String> = (from..=entry.run)
        .filter(|&k| !e.runs[k].changes.settings.is_empty())
        .map(|k| format!("{}: {}", e.runs[k].label, run_changes(&e.runs[k])))
        .collect();
    let flags = entry
        .client_flags
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let run = &e.runs[entry.run].label;
    match (changed.is_empty(), flags.is_empty()) {
        (true, true) => format!(
            "{run}: nothing recorded changed (the engine, its flags, the model, the hardware, \
             the host, servebench and the spec are the same): noise beyond the intervals, or a \
             change servebench does not see"
        ),
        (true, false) => format!(
            "{run}: the client, more likely than the server: the point carries {flags} (the \
             client read late or its samples spread widely) and nothing recorded changed"
        ),
        (false, true) => changed.join("; "),
        (false, false) => format!(
            "{}; the point also carries {flags} (the client shaped its numbers too)",
            changed.join("; ")
        ),
    }
}

/// A run's changes in words: `one setting changed (`name` a → b)`.
fn run_changes(run: &HistoryRun) -> String {
    let list: Vec<String> = run
        .changes
        .settings
        .iter()
        .map(|s| format!("`{}` {} → {}", s.name, s.before, s.after))
        .collect();
    format!("{} ({})", run.changes.summary, list.join(", "))
}

/// A value in the series table: the mean, a mark for a change point, `flagged` for a point
/// not judged.
fn entry_cell(s: &Series, e: &SeriesEntry) -> String {
    let metric = Metric::from_name(&s.metric);
    let value = e
        .stat
        .as_ref()
        .map_or("—".to_string(), |st| text::metric_value(metric, st.mean));
    if !e.problems.is_empty() {
        return format!("{value} (flagged)");
    }
    if !e.client_flags.is_empty() {
        return format!("{value} (client: {})", e.client_flags.join(", "));
    }
    if e.unresolved {
        return format!("{value} ({} unresolved)", change(e.change_pct));
    }
    if e.change_point {
        let arrow = match e.verdict {
            Some(Verdict::Regression) => "▼",
            _ => "▲",
        };
        return format!("**{value}** {arrow} {}", change(e.change_pct));
    }
    value
}

/// Text safe in a Markdown table cell.
fn cell(s: &str) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    text::cut_words(&one_line, 400).replace('|', "\\|")
}
