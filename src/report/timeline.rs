//! A time series per point: requests in flight as the client saw them, and the server's own
//! running and queued requests from its `/metrics` scrapes, against seconds into the point.
//! Pure, like [`super::charts`]: the same files give byte-identical SVG.

use plotters::prelude::*;

use super::charts::ChartError;
use crate::results::records::{PointRecord, RequestRecord, RequestRole};
use crate::results::server_view::MetricsScrape;

const SIZE: (u32, u32) = (720, 360);
const COLORS: &[RGBColor] = &[
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
];

/// One point's time series.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// File name inside `charts/` (`timeline-p003.svg`).
    pub file: String,
    /// Caption and alt text.
    pub title: String,
    /// (label, (seconds into the point, value) steps).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// The prefix of every timeline file, so a re-render can remove stale ones.
pub const FILE_PREFIX: &str = "timeline-";

/// A timeline per point that has scrapes.
pub fn timelines(
    points: &[PointRecord],
    requests: &[RequestRecord],
    scrapes: &[MetricsScrape],
) -> Vec<Timeline> {
    points
        .iter()
        .filter_map(|p| {
            let mine: Vec<&MetricsScrape> = scrapes.iter().filter(|s| s.point == p.id).collect();
            let t0 = mine.iter().map(|s| s.t).fold(f64::INFINITY, f64::min);
            if !t0.is_finite() {
                return None;
            }
            let mut series = vec![("in flight (client)".to_string(), in_flight(p, requests, t0))];
            for (label, names) in [
                (
                    "running (server)",
                    [
                        "sglang:num_running_reqs",
                        "vllm:num_requests_running",
                        "llamacpp:requests_processing",
                    ],
                ),
                (
                    "queued (server)",
                    [
                        "sglang:num_queue_reqs",
                        "vllm:num_requests_waiting",
                        "llamacpp:requests_deferred",
                    ],
                ),
            ] {
                let xy: Vec<(f64, f64)> = mine
                    .iter()
                    .filter_map(|s| {
                        let v = names.iter().find_map(|n| s.values.get(*n))?;
                        Some((s.t - t0, *v))
                    })
                    .collect();
                if !xy.is_empty() {
                    series.push((label.to_string(), xy));
                }
            }
            Some(Timeline {
                file: format!("{FILE_PREFIX}{}.svg", p.id),
                title: format!("{}: requests in flight over time", p.id),
                series,
            })
        })
        .collect()
}

/// The client's requests in flight (from each measured request's send to its end) as steps.
fn in_flight(p: &PointRecord, requests: &[RequestRecord], t0: f64) -> Vec<(f64, f64)> {
    let mut events: Vec<(f64, f64)> = Vec::new();
    for r in requests
        .iter()
        .filter(|r| r.point == p.id && r.role == RequestRole::Measure)
    {
        events.push((r.sent_at - t0, 1.0));
        if let Some(e) = r.end_s {
            events.push((r.sent_at + e - t0, -1.0));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut n = 0.0;
    let mut out = vec![(0.0, 0.0)];
    for (t, d) in events {
        out.push((t.max(0.0), n));
        n += d;
        out.push((t.max(0.0), n));
    }
    out
}

/// Draws a timeline as SVG: seconds on x, requests on y, a line per series.
pub fn render_svg(t: &Timeline) -> Result<String, ChartError> {
    let err = |e: &dyn std::fmt::Display| ChartError {
        file: t.file.clone(),
        message: e.to_string(),
    };
    let all = || t.series.iter().flat_map(|(_, xy)| xy.iter());
    let x_max = all().map(|p| p.0).fold(0.0, f64::max).max(1e-3) * 1.02;
    let y_max = all().map(|p| p.1).fold(0.0, f64::max).max(1.0) * 1.3;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut plot = ChartBuilder::on(&root)
            .caption(t.title.as_str(), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(52)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        plot.configure_mesh()
            .x_desc("seconds into the point")
            .y_desc("requests")
            .label_style(("sans-serif", 14))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(220, 220, 220))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (label, xy)) in t.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            plot.draw_series(std::iter::once(PathElement::new(
                xy.clone(),
                color.stroke_width(2),
            )))
            .map_err(|e| err(&e))?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        plot.configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(160, 160, 160))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}
