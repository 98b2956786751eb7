//! SVG line charts beside the report: TTFT, prefill and decode speed against context length.
//!
//! [`charts`] picks from the report model alone which charts have enough data and what their
//! lines are; [`render_svg`] draws one as a string. Both are pure: the same model always yields
//! byte-identical SVG, so a re-rendered report's charts do not change.

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::prelude::*;

pub(crate) use super::chart_error::ChartError;
pub(crate) use super::chart_link::ChartLink;
use super::chart_style::{PALETTE, draw_legend, draw_line};
use super::model::{NameValue, PointRow, ReportModel};
use servebench_model::catalog::Metric;

/// A result row with its server group's sweep values.
type Row<'a> = (&'a [NameValue], &'a PointRow);

/// Width and height of every chart, in SVG pixels.
const SIZE: (u32, u32) = (720, 440);

/// The charts a report can have: (file, metric, title, y-axis label).
const KINDS: &[(&str, Metric, &str, &str)] = &[
    (
        "ttft.svg",
        Metric::Ttft,
        "TTFT against context length",
        "TTFT (ms)",
    ),
    (
        "prefill.svg",
        Metric::Prefill,
        "Prefill speed against context length",
        "prefill (tok/s)",
    ),
    (
        "decode.svg",
        Metric::Decode,
        "Decode speed against context length",
        "decode (tok/s)",
    ),
];

/// Every file name a chart can have, so a re-render can remove one that no longer applies.
pub(crate) fn chart_files() -> impl Iterator<Item = &'static str> {
    KINDS.iter().map(|(file, ..)| *file)
}

/// One chart's data, ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// File name inside the run directory's `charts/` folder.
    pub file: &'static str,
    /// Metric plotted on the y axis (`ttft_s`, ...).
    pub metric: &'static str,
    /// Caption and alt text.
    pub title: &'static str,
    /// Y-axis label with its unit.
    pub y_label: &'static str,
    /// One line per combination of the swept values that do not change the context length.
    pub series: Vec<Series>,
}

impl Chart {
    /// The link the report shows for this chart.
    pub(crate) fn link(&self) -> ChartLink {
        ChartLink {
            title: self.title.to_string(),
            path: format!("charts/{}", self.file),
        }
    }
}

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text: the differing dimension values (`concurrency=4`); empty for a lone line.
    pub label: String,
    /// The points, ordered by context length.
    pub points: Vec<ChartPoint>,
}

/// One point of a line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChartPoint {
    /// Mean prompt tokens the server counted, or the requested length when it counted none.
    pub context_tokens: f64,
    /// Mean of the metric over the point's successful requests, in its shown unit (ms for
    /// TTFT).
    pub value: f64,
    /// Its 95% confidence interval in the same unit, drawn as a bar (None without one).
    pub interval: Option<(f64, f64)>,
    /// True when a warning doubts the point's numbers (cache hit, failed requests, ...; not a
    /// wide spread): its marker is drawn hollow, so a doubtful number does not pass for a
    /// clean one.
    pub warned: bool,
}

/// The charts the model has data for, in report order. A chart is left out when no swept
/// dimension changes the context length or fewer than two points measured its metric.
pub fn charts(model: &ReportModel) -> Vec<Chart> {
    let rows: Vec<Row> = model
        .tables
        .iter()
        .flat_map(|t| t.rows.iter().map(move |r| (t.server_values.as_slice(), r)))
        .collect();
    let context_dims = context_dimensions(&model.point_dimensions, &rows);
    if context_dims.is_empty() {
        return Vec::new();
    }
    let labels = series_labels(model, &rows, &context_dims);
    KINDS
        .iter()
        .filter_map(|&(file, metric, title, y_label)| {
            let metric = metric.name();
            let mut series: Vec<Series> = Vec::new();
            for ((_, row), label) in rows.iter().zip(&labels) {
                let Some(point) = chart_point(row, metric) else {
                    continue;
                };
                match series.iter_mut().find(|s| &s.label == label) {
                    Some(s) => s.points.push(point),
                    None => series.push(Series {
                        label: label.clone(),
                        points: vec![point],
                    }),
                }
            }
            let measured: usize = series.iter().map(|s| s.points.len()).sum();
            if measured < 2 {
                return None;
            }
            for s in &mut series {
                s.points
                    .sort_by(|a, b| a.context_tokens.total_cmp(&b.context_tokens));
            }
            Some(Chart {
                file,
                metric,
                title,
                y_label,
                series,
            })
        })
        .collect()
}

/// Indexes of the point dimensions that change the requested prompt length: two rows that
/// differ only in that dimension asked for different lengths.
fn context_dimensions(dims: &[String], rows: &[Row]) -> Vec<usize> {
    (0..dims.len())
        .filter(|&d| {
            rows.iter().any(|(sa, a)| {
                rows.iter().any(|(sb, b)| {
                    sa == sb
                        && a.ctx_req.is_some()
                        && b.ctx_req.is_some()
                        && a.ctx_req != b.ctx_req
                        && a.values.get(d) != b.values.get(d)
                        && (0..dims.len()).all(|o| o == d || a.values.get(o) == b.values.get(o))
                })
            })
        })
        .collect()
}

/// Each row's legend text: the values of the dimensions, other than the context ones, that take
/// more than one value in the run (server dimensions first, then point dimensions).
fn series_labels(model: &ReportModel, rows: &[Row], context_dims: &[usize]) -> Vec<String> {
    let varies = |values: Vec<&String>| values.iter().any(|v| Some(v) != values.first());
    let server_dims: Vec<usize> = (0..model.server_dimensions.len())
        .filter(|&i| {
            varies(
                rows.iter()
                    .filter_map(|(s, _)| s.get(i).map(|nv| &nv.value))
                    .collect(),
            )
        })
        .collect();
    let point_dims: Vec<usize> = (0..model.point_dimensions.len())
        .filter(|i| !context_dims.contains(i))
        .filter(|&i| varies(rows.iter().filter_map(|(_, r)| r.values.get(i)).collect()))
        .collect();
    rows.iter()
        .map(|(server, row)| {
            let server_parts = server_dims
                .iter()
                .filter_map(|&i| server.get(i))
                .map(|nv| format!("{}={}", short_name(&nv.name), nv.value));
            let point_parts = point_dims.iter().filter_map(|&i| {
                let name = model.point_dimensions.get(i)?;
                Some(format!("{}={}", short_name(name), row.values.get(i)?))
            });
            server_parts
                .chain(point_parts)
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect()
}

/// `server.args.chunked-prefill-size` reads as `chunked-prefill-size` in a legend.
fn short_name(name: &str) -> &str {
    name.strip_prefix("server.args.").unwrap_or(name)
}

/// The row's point on a chart of `metric`, or None when the metric or the context is missing.
fn chart_point(row: &PointRow, metric: &str) -> Option<ChartPoint> {
    let stat = row.stats.get(metric)?.as_ref()?;
    let shown = |x: f64| Metric::from_name(metric).map_or(x, |m| m.shown(x));
    let value = shown(stat.mean);
    let interval = match (stat.ci95_low, stat.ci95_high) {
        (Some(lo), Some(hi)) if lo.is_finite() && hi.is_finite() && hi > lo => {
            Some((shown(lo), shown(hi)))
        }
        _ => None,
    };
    let measured = row
        .stats
        .get("prompt_tokens")
        .and_then(|s| s.as_ref())
        .map(|s| s.mean)
        .filter(|m| *m > 0.0);
    let context_tokens = measured.or(row.ctx_req.map(|c| c as f64))?;
    (value.is_finite() && context_tokens.is_finite() && context_tokens > 0.0).then_some(
        ChartPoint {
            context_tokens,
            value,
            interval,
            warned: row.doubted,
        },
    )
}

/// Draws a chart as SVG: context on a log-2 axis (ticks 1k, 2k, 4k, ...), the metric on a linear
/// axis from zero, one coloured line per series with a marker per point (hollow for a point with
/// warnings), a legend when there are labels.
pub fn render_svg(chart: &Chart) -> Result<String, ChartError> {
    let err = |e: &dyn std::fmt::Display| ChartError {
        file: chart.file.to_string(),
        message: e.to_string(),
    };
    let points = || chart.series.iter().flat_map(|s| &s.points);
    let (x_range, ticks) = context_axis(points().map(|p| p.context_tokens.log2()))
        .ok_or_else(|| err(&"no points to draw"))?;
    let y_max = points()
        .map(|p| p.interval.map_or(p.value, |(_, hi)| hi.max(p.value)))
        .fold(0.0, f64::max);
    let y_top = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    // Headroom for the legend in the upper left, so it never hides a line that runs high there.
    let labels = chart.series.iter().filter(|s| !s.label.is_empty()).count();
    let legend_share = if labels == 0 {
        0.0
    } else {
        ((20 * labels + 14) as f64 / 345.0).min(0.5)
    };
    let y_top = y_top / (1.0 - legend_share);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut plot = ChartBuilder::on(&root)
            .caption(chart.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(
                ContextAxis {
                    log2: x_range,
                    ticks,
                },
                0.0..y_top,
            )
            .map_err(|e| err(&e))?;
        plot.configure_mesh()
            .y_label_formatter(&|v| value_label(*v))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .x_desc("context (prompt tokens, log scale)")
            .y_desc(chart.y_label)
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(220, 220, 220))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, series) in chart.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let xy: Vec<(f64, f64)> = series
                .points
                .iter()
                .map(|p| (p.context_tokens, p.value))
                .collect();
            let label = Some(series.label.as_str()).filter(|l| !l.is_empty());
            draw_line(&mut plot, xy.clone(), color, label).map_err(|e| err(&e))?;
            // Each point's 95% interval as a vertical bar through its marker.
            let bars = series.points.iter().filter_map(|p| {
                let (lo, hi) = p.interval?;
                Some(PathElement::new(
                    vec![(p.context_tokens, lo), (p.context_tokens, hi)],
                    color.stroke_width(1),
                ))
            });
            plot.draw_series(bars).map_err(|e| err(&e))?;
            let markers = series.points.iter().zip(&xy).map(|(p, &at)| {
                if p.warned {
                    Circle::new(at, 4, color.stroke_width(2))
                } else {
                    Circle::new(at, 3, color.filled())
                }
            });
            plot.draw_series(markers).map_err(|e| err(&e))?;
        }
        if labels > 0 {
            draw_legend(&mut plot, SeriesLabelPosition::UpperLeft, 14).map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// The context axis: tokens placed by their base-2 logarithm, ticks at whole powers of two.
struct ContextAxis {
    /// The axis's extent in log2 of tokens.
    log2: Range<f64>,
    /// Tick positions in log2 of tokens (whole numbers).
    ticks: Vec<f64>,
}

impl Ranged for ContextAxis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, tokens: &f64, limit: (i32, i32)) -> i32 {
        let fraction = (tokens.log2() - self.log2.start) / (self.log2.end - self.log2.start);
        let pixels = f64::from(limit.1 - limit.0) * fraction;
        limit.0 + pixels.round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Only bold (labelled) ticks: light ones between powers of two would be noise.
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        self.ticks.iter().map(|k| k.exp2()).collect()
    }

    fn range(&self) -> Range<f64> {
        self.log2.start.exp2()..self.log2.end.exp2()
    }
}

impl ValueFormatter<f64> for ContextAxis {
    fn format(tokens: &f64) -> String {
        context_label(tokens.log2())
    }
}

/// The x range (in log2 of tokens) and its ticks (whole powers of two) for the given log2
/// contexts. A little margin keeps the end points off the frame; when the data spans less than
/// two powers of two the range widens to the neighbouring ones, so every axis has two labels.
fn context_axis(xs: impl Iterator<Item = f64>) -> Option<(std::ops::Range<f64>, Vec<f64>)> {
    let (lo, hi) =
        xs.filter(|x| x.is_finite())
            .fold(None, |acc: Option<(f64, f64)>, x| match acc {
                None => Some((x, x)),
                Some((lo, hi)) => Some((lo.min(x), hi.max(x))),
            })?;
    let pad = ((hi - lo) * 0.05).max(0.15);
    let (mut start, mut end) = (lo - pad, hi + pad);
    if end.floor() - start.ceil() < 1.0 {
        start = start.min(lo.floor());
        end = end.max(hi.ceil()).max(start.ceil() + 1.0);
    }
    let first = start.ceil() as i64;
    let last = end.floor() as i64;
    // At most about eight labels: every second (or fourth) power of two on wide sweeps.
    let step = ((last - first) / 8 + 1).max(1);
    let ticks = (first..=last)
        .filter(|k| (k - first) % step == 0)
        .map(|k| k as f64)
        .collect();
    Some((start..end, ticks))
}

/// A y tick label: three significant digits without trailing zeros (`0.5`, `1`, `12.5`).
pub(crate) fn value_label(v: f64) -> String {
    let text = servebench_model::text::sig3(v);
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A tick label for 2^v tokens: `512`, `1k`, `64k`, `1M`.
fn context_label(v: f64) -> String {
    let tokens = v.exp2().round() as u64;
    if tokens >= 1 << 20 && tokens.is_multiple_of(1 << 20) {
        format!("{}M", tokens >> 20)
    } else if tokens >= 1024 && tokens.is_multiple_of(1024) {
        format!("{}k", tokens >> 10)
    } else {
        tokens.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_read_in_binary_units() {
        assert_eq!(context_label(9.0), "512");
        assert_eq!(context_label(10.0), "1k");
        assert_eq!(context_label(16.0), "64k");
        assert_eq!(context_label(20.0), "1M");
        assert_eq!(value_label(0.5), "0.5");
        assert_eq!(value_label(1.0), "1");
        assert_eq!(value_label(1500.0), "1500");
        // A history's ticks too: `50` beside `100`, never `50.0`.
        assert_eq!(value_label(50.0), "50");
        assert_eq!(value_label(12.63), "12.6");
    }

    /// A point with a 95% interval gets a vertical bar from its low to its high end; one
    /// without gets none.
    #[test]
    fn intervals_are_drawn_as_bars() {
        let point = |context_tokens, value, interval| ChartPoint {
            context_tokens,
            value,
            interval,
            warned: false,
        };
        let chart = |interval| Chart {
            file: "ttft.svg",
            metric: "ttft_s",
            title: "TTFT against context length",
            y_label: "TTFT (ms)",
            series: vec![Series {
                label: String::new(),
                points: vec![
                    point(1024.0, 50.0, interval),
                    point(4096.0, 200.0, interval.map(|(lo, hi)| (lo * 4.0, hi * 4.0))),
                ],
            }],
        };
        // The series' own thin strokes: its bars (the line itself is 2 px wide).
        let bars = |svg: &str| {
            svg.lines()
                .filter(|l| {
                    l.starts_with("<polyline")
                        && l.contains("stroke=\"#0072B2\" stroke-width=\"1\"")
                })
                .count()
        };
        let with = render_svg(&chart(Some((40.0, 60.0)))).unwrap();
        let without = render_svg(&chart(None)).unwrap();
        assert_eq!(
            (bars(&with), bars(&without)),
            (2, 0),
            "one bar per point with an interval"
        );
    }

    #[test]
    fn axis_has_whole_powers_of_two_as_ticks() {
        let (range, ticks) = context_axis([10.0, 17.0].into_iter()).unwrap();
        assert!(range.start < 10.0 && range.end > 17.0, "{range:?}");
        assert_eq!(ticks, vec![10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0]);

        // Less than one octave still gets two labelled ticks around the data.
        let (range, ticks) = context_axis([10.1, 10.5].into_iter()).unwrap();
        assert_eq!(ticks, vec![10.0, 11.0]);
        assert!(range.start <= 10.0 && range.end >= 11.0, "{range:?}");

        // A wide sweep labels every second power of two.
        let (_, ticks) = context_axis([8.0, 20.0].into_iter()).unwrap();
        assert_eq!(ticks, vec![8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 20.0]);

        assert!(context_axis(std::iter::empty()).is_none());
    }
}
