//! Trend charts: one per experiment and metric, a line per point across the runs (x: the
//! run's number in start order), each value with its 95% interval, change points ringed and
//! failed or flagged points drawn hollow. Pure: the same model draws byte-identical SVG.

use plotters::prelude::*;

use super::model::{ExperimentHistory, Series};
use crate::report::chart_error::ChartError;
use crate::report::chart_style::{PALETTE, draw_legend, draw_line};
use servebench_model::catalog::Metric;

/// Width and height, in SVG pixels.
const SIZE: (u32, u32) = (760, 420);

/// Lines a chart draws at most: past it the chart would be unreadable, and the table lists
/// every series.
pub(crate) const MAX_LINES: usize = 8;

/// One trend chart.
#[derive(Debug, Clone, PartialEq)]
pub struct TrendChart {
    /// File name: `<experiment>-<metric>.svg`.
    pub file: String,
    /// The metric's name (`ttft_s`).
    pub metric: String,
    /// Title.
    pub title: String,
    /// Y-axis label with its unit.
    pub y_label: String,
    /// Runs on the x axis.
    pub runs: usize,
    /// The lines: (point label, [(run index, shown value, interval, flagged, change point)]).
    pub lines: Vec<(String, Vec<TrendPoint>)>,
    /// Series left out past [`MAX_LINES`].
    pub left_out: usize,
}

/// One value on a trend line, in the metric's shown unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrendPoint {
    /// The run's index (0-based).
    pub run: usize,
    /// The mean, shown unit.
    pub value: f64,
    /// The 95% interval, shown unit.
    pub interval: Option<(f64, f64)>,
    /// Failed or flagged: drawn hollow, never judged.
    pub flagged: bool,
    /// A change point.
    pub change_point: bool,
}

/// A file name made of the experiment's name (letters, digits, `-`, `_`, `.` kept).
pub(crate) fn chart_file(experiment: &str, metric: &str) -> String {
    let safe: String = experiment
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}-{metric}.svg")
}

/// The points of a series in its metric's shown unit.
pub(crate) fn trend_points(series: &Series) -> Vec<TrendPoint> {
    let metric = Metric::from_name(&series.metric);
    let shown = |x: f64| metric.map_or(x, |m| m.shown(x));
    series
        .entries
        .iter()
        .filter_map(|e| {
            let s = e.stat.as_ref()?;
            Some(TrendPoint {
                run: e.run,
                value: shown(s.mean),
                interval: s
                    .ci95_low
                    .zip(s.ci95_high)
                    .map(|(l, h)| (shown(l), shown(h))),
                flagged: !e.problems.is_empty() || e.client_step,
                change_point: e.change_point,
            })
        })
        .filter(|p| p.value.is_finite())
        .collect()
}

/// The charts of an experiment with two or more runs: one per metric its series have.
pub fn charts(experiment: &ExperimentHistory) -> Vec<TrendChart> {
    if experiment.runs.len() < 2 {
        return Vec::new();
    }
    experiment
        .series_by_metric()
        .into_iter()
        .filter_map(|all| {
            let metric = all[0].metric.as_str();
            let first = all.first()?;
            let lines: Vec<(String, Vec<TrendPoint>)> = all
                .iter()
                .take(MAX_LINES)
                .map(|s| (s.point.clone(), trend_points(s)))
                .filter(|(_, p)| !p.is_empty())
                .collect();
            if lines.is_empty() {
                return None;
            }
            Some(TrendChart {
                file: chart_file(&experiment.name, metric),
                metric: metric.to_string(),
                title: format!("{}: {} across runs", experiment.name, first.label),
                y_label: format!("{} ({})", first.label, first.unit),
                runs: experiment.runs.len(),
                left_out: all.len().saturating_sub(MAX_LINES),
                lines,
            })
        })
        .collect()
}

/// Draws a trend chart as SVG.
pub fn render_svg(chart: &TrendChart) -> Result<String, ChartError> {
    let err = |e: &dyn std::fmt::Display| ChartError {
        file: chart.file.clone(),
        message: e.to_string(),
    };
    let all = || chart.lines.iter().flat_map(|(_, p)| p);
    let y_max = all()
        .map(|p| p.interval.map_or(p.value, |(_, hi)| hi.max(p.value)))
        .fold(0.0, f64::max);
    let y_top = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let legend_share = ((20 * chart.lines.len() + 14) as f64 / 330.0).min(0.5);
    let y_top = y_top / (1.0 - legend_share);
    let x_end = chart.runs as f64 + 0.5;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut plot = ChartBuilder::on(&root)
            .caption(&chart.title, ("sans-serif", 18))
            .margin(12)
            // Room for half the last x label (`#1000`), centred on the plot's right edge.
            .margin_right(28)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.5..x_end, 0.0..y_top)
            .map_err(|e| err(&e))?;
        let ticks = chart.runs.min(12);
        plot.configure_mesh()
            .x_labels(ticks)
            .x_label_formatter(&|x| {
                if (x - x.round()).abs() < 1e-6 && *x >= 1.0 {
                    format!("#{}", x.round() as usize)
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|v| crate::report::charts::value_label(*v))
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .x_desc("run (in start order)")
            .y_desc(&chart.y_label)
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (label, points)) in chart.lines.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let xy: Vec<(f64, f64)> = points
                .iter()
                .map(|p| (p.run as f64 + 1.0, p.value))
                .collect();
            draw_line(&mut plot, xy.clone(), color, Some(label)).map_err(|e| err(&e))?;
            let bars = points.iter().zip(&xy).filter_map(|(p, &(x, _))| {
                let (lo, hi) = p.interval?;
                Some(PathElement::new(
                    vec![(x, lo), (x, hi)],
                    color.stroke_width(1),
                ))
            });
            plot.draw_series(bars).map_err(|e| err(&e))?;
            let markers = points.iter().zip(&xy).map(|(p, &at)| {
                if p.flagged {
                    Circle::new(at, 4, color.stroke_width(2))
                } else {
                    Circle::new(at, 3, color.filled())
                }
            });
            plot.draw_series(markers).map_err(|e| err(&e))?;
            let rings = points
                .iter()
                .zip(&xy)
                .filter(|(p, _)| p.change_point)
                .map(|(_, &at)| Circle::new(at, 8, RGBColor(200, 0, 0).stroke_width(2)));
            plot.draw_series(rings).map_err(|e| err(&e))?;
        }
        draw_legend(&mut plot, SeriesLabelPosition::UpperLeft, 13).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}
