//! The history as Markdown: per experiment its runs with what changed, its change points
//! (each attributed to its run's changes), its trend charts and one table per metric. Pure.

use serde::Serialize;

use super::charts;
use super::model::*;
use crate::report::ReportError;
use crate::report::compare::Verdict;
use crate::report::templates::{HISTORY_TEMPLATE, render_own};
use servebench_model::catalog::Metric;
use servebench_model::text::{self, plain};

/// Renders the history through `templates/history.md.j2`; `charts_dir` is where the charts
/// are linked from (None: no links, as for `--stdout`).
pub fn render(model: &HistoryModel, charts_dir: Option<&str>) -> Result<String, ReportError> {
    let (name, source) = HISTORY_TEMPLATE;
    render_own(&view(model, charts_dir), name, source)
}

/// What the template reads: the model's own text, and what takes arithmetic or looks across
/// runs (changes, verdicts, attributions, table cells) worked out here.
#[derive(Serialize)]
struct View<'a> {
    run_count: usize,
    change_point_count: usize,
    sources: &'a [String],
    skipped: &'a [SkippedRun],
    notes: &'a [String],
    level_runs: usize,
    threshold_pct: String,
    charts_dir: Option<&'a str>,
    max_lines: usize,
    experiments: Vec<ExperimentView<'a>>,
}

#[derive(Serialize)]
struct ExperimentView<'a> {
    name: &'a str,
    runs: Vec<RunRow<'a>>,
    run_labels: Vec<&'a str>,
    change_points: Vec<Step<'a>>,
    set_aside: Vec<Step<'a>>,
    charts: Vec<ChartLink>,
    tables: Vec<MetricTable<'a>>,
}

/// A trend chart as the text links it, with the points it left out.
#[derive(Serialize)]
struct ChartLink {
    title: String,
    file: String,
    left_out: usize,
}

#[derive(Serialize)]
struct RunRow<'a> {
    label: &'a str,
    started_at: &'a str,
    status: &'a str,
    tool_version: &'a str,
    commit: Option<&'a str>,
    path: &'a str,
    /// What changed: the summary, with what makes it not comparable and the settings.
    what: String,
}

/// A step of a series: a change point, or one set aside (unresolved, or the client's).
#[derive(Serialize)]
struct Step<'a> {
    run: &'a str,
    series: &'a str,
    point: &'a str,
    change: String,
    verdict: &'static str,
    against: &'a str,
    reason: &'a str,
    client_flags: bool,
    attribution: String,
}

#[derive(Serialize)]
struct MetricTable<'a> {
    label: &'a str,
    unit: &'a str,
    rows: Vec<MetricRow<'a>>,
}

#[derive(Serialize)]
struct MetricRow<'a> {
    point: &'a str,
    /// One per run: the value, marked (see [`entry_cell`]), or `—`.
    cells: Vec<String>,
    latest: Option<Latest<'a>>,
}

/// The newest run against the last good level: judged against `good`, or why not (`reason`).
#[derive(Serialize)]
struct Latest<'a> {
    change: String,
    verdict: &'static str,
    good: Option<&'a str>,
    reason: &'a str,
}

fn view<'a>(model: &'a HistoryModel, charts_dir: Option<&'a str>) -> View<'a> {
    View {
        run_count: model.experiments.iter().map(|e| e.runs.len()).sum(),
        change_point_count: model
            .experiments
            .iter()
            .map(|e| e.change_points().len())
            .sum(),
        sources: &model.sources,
        skipped: &model.skipped,
        notes: &model.notes,
        level_runs: super::build::LEVEL_RUNS,
        threshold_pct: plain(model.threshold_pct),
        charts_dir,
        max_lines: charts::MAX_LINES,
        experiments: model.experiments.iter().map(experiment).collect(),
    }
}

/// One experiment's section: its runs, change points, charts and metric tables.
fn experiment(e: &ExperimentHistory) -> ExperimentView<'_> {
    let mut set_aside: Vec<(&Series, &SeriesEntry)> = e
        .series
        .iter()
        .flat_map(|s| s.entries.iter().map(move |x| (s, x)))
        .filter(|(_, x)| !x.change_point && (x.unresolved || x.client_step))
        .collect();
    set_aside.sort_by_key(|(_, x)| x.run);
    ExperimentView {
        name: &e.name,
        runs: e.runs.iter().map(run_row).collect(),
        run_labels: e.runs.iter().map(|r| r.label.as_str()).collect(),
        change_points: e.change_points().into_iter().map(|x| step(e, x)).collect(),
        set_aside: set_aside.into_iter().map(|x| step(e, x)).collect(),
        charts: charts::charts(e)
            .into_iter()
            .map(|c| ChartLink {
                title: c.title,
                file: c.file,
                left_out: c.left_out,
            })
            .collect(),
        tables: metric_tables(e),
    }
}

fn step<'a>(e: &'a ExperimentHistory, (s, entry): (&'a Series, &'a SeriesEntry)) -> Step<'a> {
    Step {
        run: &e.runs[entry.run].label,
        series: &s.label,
        point: &s.point,
        change: change(entry.change_pct),
        verdict: verdict_word(entry.verdict),
        against: entry.against.map_or("—", |j| e.runs[j].label.as_str()),
        reason: &entry.reason,
        client_flags: !entry.client_flags.is_empty(),
        attribution: attribution(e, entry),
    }
}

/// A run's row, with what changed in it.
fn run_row(r: &HistoryRun) -> RunRow<'_> {
    let mut what = r.changes.summary.clone();
    if !r.changes.not_comparable.is_empty() {
        what = format!(
            "**not comparable** ({}); {what}",
            r.changes.not_comparable.join("; ")
        );
    }
    if !r.changes.settings.is_empty() {
        what = format!("{what}: {}", settings(r));
    }
    RunRow {
        label: &r.label,
        started_at: &r.started_at,
        status: &r.status,
        tool_version: &r.tool_version,
        commit: r.commit.as_deref(),
        path: &r.path,
        what,
    }
}

/// One table per metric: a row per point, a column per run, and the newest run judged against
/// the last good level.
fn metric_tables(e: &ExperimentHistory) -> Vec<MetricTable<'_>> {
    e.series_by_metric()
        .into_iter()
        .map(|series| {
            let rows = series
                .iter()
                .map(|s| {
                    let mut cells = vec!["—".to_string(); e.runs.len()];
                    for entry in &s.entries {
                        cells[entry.run] = entry_cell(s, entry);
                    }
                    MetricRow {
                        point: &s.point,
                        cells,
                        latest: s.latest.as_ref().map(|l| Latest {
                            change: change(l.change_pct),
                            verdict: verdict_word(l.verdict),
                            good: l.good.map(|g| e.runs[g].label.as_str()),
                            reason: &l.reason,
                        }),
                    }
                })
                .collect();
            MetricTable {
                label: &series[0].label,
                unit: &series[0].unit,
                rows,
            }
        })
        .collect()
}

/// `+12.3%` or `—`.
pub(crate) fn change(pct: Option<f64>) -> String {
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
    format!("{} ({})", run.changes.summary, settings(run))
}

/// A run's changed settings: `` `name` a → b, `other` c → d ``.
fn settings(run: &HistoryRun) -> String {
    let list: Vec<String> = run
        .changes
        .settings
        .iter()
        .map(|s| format!("`{}` {} → {}", s.name, s.before, s.after))
        .collect();
    list.join(", ")
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

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::Stat;

    /// Two runs of one experiment, a step in decode at `ctx=1024`, and values a server or a
    /// path may carry: `|`, line breaks, HTML.
    fn model() -> HistoryModel {
        let run = |label: &str, path: &str, summary: &str| HistoryRun {
            label: label.into(),
            path: path.into(),
            started_at: "2026-12-01T00:00:00Z".into(),
            status: "complete".into(),
            tool_version: "0.1.0".into(),
            commit: None,
            changes: RunChanges {
                summary: summary.into(),
                settings: Vec::new(),
                not_comparable: Vec::new(),
            },
        };
        let entry = |run: usize, mean: f64| SeriesEntry {
            run,
            id: "p001".into(),
            stat: Some(Stat {
                count: 3,
                mean,
                ..Stat::default()
            }),
            problems: Vec::new(),
            client_flags: Vec::new(),
            against: run.checked_sub(1),
            verdict: (run == 1).then_some(Verdict::Regression),
            change_pct: (run == 1).then_some(-30.0),
            reason: "95% CIs do not overlap".into(),
            change_point: run == 1,
            client_step: false,
            unresolved: false,
            level: true,
            good: run == 0,
        };
        let mut second = run("#2", "runs/b|c", "one setting changed");
        second.changes.settings.push(SettingChange {
            name: "server.args.served-model-name".into(),
            before: "x".into(),
            after: "<script>alert(1)</script>".into(),
        });
        HistoryModel {
            model_version: 2,
            sources: vec!["runs".into()],
            threshold_pct: 5.0,
            experiments: vec![ExperimentHistory {
                name: "<b>hist</b>".into(),
                runs: vec![run("#1", "runs/a", "first run"), second],
                series: vec![Series {
                    point: "ctx=1024".into(),
                    metric: "decode_tok_s".into(),
                    label: "decode".into(),
                    unit: "tok/s".into(),
                    better: None,
                    entries: vec![entry(0, 100.0), entry(1, 70.0)],
                    latest: Some(LatestCheck {
                        run: 1,
                        good: Some(0),
                        verdict: Some(Verdict::Regression),
                        change_pct: Some(-30.0),
                        unresolved: false,
                        reason: "95% CIs do not overlap".into(),
                    }),
                }],
            }],
            skipped: vec![SkippedRun {
                path: "runs/broken".into(),
                why: "meta.json: line 1 | column 2:\nnot JSON".into(),
            }],
            notes: vec!["a note | with a pipe\nand a line break".into()],
        }
    }

    #[test]
    fn the_history_is_its_template_rendered_with_cells_made_safe_by_the_engine() {
        let md = render(&model(), Some("charts")).unwrap();
        assert!(md.starts_with("# History\n\n2 runs of 1 experiment from `runs`; 1 change point. 1 run directory could not be read and is left out (listed at the end).\n\n"), "{md}");
        // The `cell` filter: one line, `|` escaped.
        assert!(
            md.contains(
                "- Note: a note \\| with a pipe and a line break\n\n## <b>hist</b> (2 runs)\n\n"
            ),
            "{md}"
        );
        assert!(md.contains("| **#2** | 2026-12-01T00:00:00Z | complete | 0.1.0 | — | one setting changed: `server.args.served-model-name` x → <script>alert(1)</script> | `runs/b\\|c` |\n"), "{md}");
        assert!(
            md.contains("| `runs/broken` | meta.json: line 1 \\| column 2: not JSON |\n"),
            "{md}"
        );
        // The change point, attributed; the metric's table, a column per run.
        assert!(md.contains("### Change points\n\n- **#2**, decode at ctx=1024: -30.0% **regression** against #1 (95% CIs do not overlap). Attributed to #2: one setting changed (`server.args.served-model-name` x → <script>alert(1)</script>)\n\n"), "{md}");
        assert!(
            md.contains("### decode (tok/s)\n\n| point | #1 | #2 | newest against the last good level |\n|---|---:|---:|---|\n| ctx=1024 | 100 | **70.0** ▼ -30.0% | -30.0% regression against #1 |\n\n"),
            "{md}"
        );
        // Another template, the same model: the text is the template's.
        let (name, source) = HISTORY_TEMPLATE;
        let other = render_own(
            &view(&model(), None),
            name,
            &source.replace("# History", "# Trends"),
        )
        .unwrap();
        assert!(other.starts_with("# Trends\n\n2 runs"), "{other}");
    }

    #[test]
    fn the_history_page_escapes_what_the_runs_carry_and_draws_its_tables() {
        let m = model();
        let md = render(&m, None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let html = super::super::page::render(&m, &md, dir.path()).unwrap();
        let content = &html[html.find("<section id=\"sb-content\">").unwrap()..];
        let content = &content[..content.find("</section>").unwrap()];
        assert!(
            content.contains("<h2>&lt;b&gt;hist&lt;/b&gt; (2 runs)</h2>"),
            "{content}"
        );
        assert!(
            content.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{content}"
        );
        assert!(
            !content.contains("<script") && !content.contains("<b>"),
            "{content}"
        );
        assert!(
            content.contains("<th>point</th><th style=\"text-align: right\">#1</th>"),
            "{content}"
        );
        assert!(
            content.contains("<td><code>runs/b|c</code></td>"),
            "{content}"
        );
        // The page's data: no `<` at all.
        let data = &html[html.find("id=\"sb-data\">").unwrap()..];
        let data = &data[..data.find("</script>").unwrap()];
        assert!(
            !data.contains('<') && data.contains("\\u003cscript\\u003e"),
            "{data}"
        );
    }
}
