//! `history.html`: the history's Markdown as a self-contained page (trend charts inlined),
//! with interactive trend charts: hover a run for its value, interval, verdict and what
//! changed; click a point's legend entry to hide its line.

use serde_json::json;

use super::charts::{MAX_LINES, trend_points};
use super::markdown::{attribution, change, verdict_word};
use super::model::HistoryModel;
use crate::report::{ReportError, html};

/// The page, its charts read from `charts_dir` for inlining.
pub fn render(
    model: &HistoryModel,
    markdown: &str,
    charts_dir: &std::path::Path,
) -> Result<String, ReportError> {
    let mut charts = Vec::new();
    for e in &model.experiments {
        if e.runs.len() < 2 {
            continue;
        }
        for all in e.series_by_metric() {
            let first = all[0];
            let series: Vec<serde_json::Value> = all
                .iter()
                .take(MAX_LINES)
                .map(|s| {
                    let points: Vec<serde_json::Value> = trend_points(s)
                        .iter()
                        .zip(s.entries.iter().filter(|x| x.stat.is_some()))
                        .map(|(p, entry)| {
                            let run = &e.runs[p.run];
                            let mut note = if !entry.problems.is_empty() {
                                format!("not judged: {}", entry.problems.join("; "))
                            } else if entry.client_step {
                                format!(
                                    "{} {}, not judged as a server change: {}",
                                    change(entry.change_pct),
                                    verdict_word(entry.verdict),
                                    attribution(e, entry)
                                )
                            } else {
                                match entry.change_pct {
                                    Some(_) => format!(
                                        "{} {}",
                                        change(entry.change_pct),
                                        verdict_word(entry.verdict)
                                    ),
                                    None => entry.reason.clone(),
                                }
                            };
                            if p.change_point {
                                note = format!(
                                    "{note}; change point, attributed to {}",
                                    attribution(e, entry)
                                );
                            } else if p.run > 0 {
                                note = format!("{note}; {}", run.changes.summary);
                            }
                            json!({
                                "x": (p.run + 1) as f64,
                                "y": p.value,
                                "lo": p.interval.map(|i| i.0),
                                "hi": p.interval.map(|i| i.1),
                                "label": format!("{} ({})", run.label, run.started_at),
                                "flagged": p.flagged,
                                "mark": p.change_point,
                                "note": note,
                            })
                        })
                        .collect();
                    json!({ "name": s.point, "points": points })
                })
                .collect();
            charts.push(json!({
                "title": format!("{}: {} across runs", e.name, first.label),
                "x_label": "run (in start order)",
                "x_log": false,
                "x_ticks": e.runs.iter().enumerate()
                    .map(|(i, r)| json!({"x": (i + 1) as f64, "label": r.label}))
                    .collect::<Vec<_>>(),
                "y_label": format!("{} ({})", first.label, first.unit),
                "series": series,
            }));
        }
    }
    let base = charts_dir.parent().unwrap_or(charts_dir).to_path_buf();
    let content = html::markdown_to_html(markdown, &|p| html::read_svg(&base, p));
    html::page(
        "servebench history",
        &content,
        &json!({ "charts": charts }),
        None,
    )
}
