//! The load section's SVG charts: TTFT and TPOT (p50 and p99) against achieved throughput,
//! goodput and throughput against the offered rate, and the Pareto frontier of per-user
//! against total output tok/s per server variant. Pure, like `charts`: the same section
//! always draws the same bytes.

use plotters::prelude::*;

use super::chart_error::ChartError;
use super::chart_link::ChartLink;
use super::chart_style::{PALETTE, draw_legend, draw_line};
use super::load::LoadSection;

const SIZE: (u32, u32) = (720, 440);
/// The palette's first four, cycled.
const COLORS: &[RGBColor] = PALETTE.split_at(4).0;

/// Every file a load chart can have.
pub(crate) const FILES: [&str; 4] = [
    "load-ttft.svg",
    "load-tpot.svg",
    "load-goodput.svg",
    "load-pareto.svg",
];

/// One load chart: lines of (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadChart {
    pub file: &'static str,
    pub title: &'static str,
    pub x_label: &'static str,
    pub y_label: &'static str,
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
    /// Points drawn as hollow markers in the colour of the line of the same index, without a
    /// line through them (a variant's points off its frontier); empty or one entry per line.
    pub dots: Vec<Vec<(f64, f64)>>,
    /// The legend sits in the upper right (where a frontier leaves room) instead of the left.
    pub legend_right: bool,
}

impl LoadChart {
    pub(crate) fn link(&self) -> ChartLink {
        ChartLink {
            title: self.title.to_string(),
            path: format!("charts/{}", self.file),
        }
    }
}

/// The charts the section has data for (two points or more on a line).
pub fn charts(section: &LoadSection) -> Vec<LoadChart> {
    let rows = &section.rows;
    let by = |x: fn(&super::load::LoadRow) -> Option<f64>,
              y: &dyn Fn(&super::load::LoadRow) -> Option<f64>| {
        let mut pts: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((x(r)?, y(r)?)))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    };
    let tput = |r: &super::load::LoadRow| r.throughput_req_s;
    let offered = |r: &super::load::LoadRow| r.offered_req_s;
    let all = [
        LoadChart {
            file: FILES[0],
            title: "TTFT against achieved throughput",
            x_label: "achieved throughput (req/s)",
            y_label: "TTFT from schedule (s)",
            lines: vec![
                ("p50".into(), by(tput, &|r| r.ttft.as_ref().map(|s| s.p50))),
                ("p99".into(), by(tput, &|r| r.ttft.as_ref().map(|s| s.p99))),
            ],
            dots: Vec::new(),
            legend_right: false,
        },
        LoadChart {
            file: FILES[1],
            title: "TPOT against achieved throughput",
            x_label: "achieved throughput (req/s)",
            y_label: "TPOT (ms)",
            lines: vec![
                (
                    "p50".into(),
                    by(tput, &|r| r.tpot.as_ref().map(|s| s.p50 * 1e3)),
                ),
                (
                    "p99".into(),
                    by(tput, &|r| r.tpot.as_ref().map(|s| s.p99 * 1e3)),
                ),
            ],
            dots: Vec::new(),
            legend_right: false,
        },
        LoadChart {
            file: FILES[2],
            title: "Goodput and throughput against offered rate",
            x_label: "offered (req/s)",
            y_label: "req/s",
            lines: vec![
                ("throughput".into(), by(offered, &|r| r.throughput_req_s)),
                ("goodput".into(), by(offered, &|r| r.goodput_req_s)),
            ],
            dots: Vec::new(),
            legend_right: false,
        },
    ];
    let mut drawn: Vec<LoadChart> = all
        .into_iter()
        .map(|mut c| {
            c.lines.retain(|(_, pts)| pts.len() >= 2);
            c
        })
        .filter(|c| !c.lines.is_empty())
        .collect();
    drawn.extend(pareto(&section.pareto));
    drawn
}

/// The Pareto chart: per variant, a line through its frontier (by total tok/s) and hollow
/// markers for its dominated points; None without points (fewer than two in the run).
fn pareto(points: &[super::pareto::ParetoPoint]) -> Option<LoadChart> {
    if points.is_empty() {
        return None;
    }
    let xy = |p: &super::pareto::ParetoPoint| (p.output_tok_s, p.user_tok_s);
    let (mut lines, mut dots) = (Vec::new(), Vec::new());
    for variant in super::pareto::variants(points) {
        let mine = || points.iter().filter(|p| p.variant == variant);
        let mut front: Vec<(f64, f64)> = mine().filter(|p| p.variant_frontier).map(xy).collect();
        front.sort_by(|a, b| a.0.total_cmp(&b.0));
        lines.push((variant.clone(), front));
        dots.push(mine().filter(|p| !p.variant_frontier).map(xy).collect());
    }
    Some(LoadChart {
        file: FILES[3],
        title: "Pareto frontier: tok/s per user against total tok/s",
        x_label: "total output tok/s",
        y_label: "tok/s per user (decode p50)",
        lines,
        dots,
        legend_right: true,
    })
}

/// Draws a chart: linear axes from zero, one line and markers per series, a legend.
pub fn render_svg(chart: &LoadChart) -> Result<String, ChartError> {
    let err = |e: &dyn std::fmt::Display| ChartError {
        file: chart.file.to_string(),
        message: e.to_string(),
    };
    let pts = || {
        chart
            .lines
            .iter()
            .flat_map(|(_, p)| p.iter())
            .chain(chart.dots.iter().flatten())
    };
    let x_max = pts().map(|p| p.0).fold(0.0, f64::max).max(1e-9) * 1.05;
    let y_max = pts().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.25;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut plot = ChartBuilder::on(&root)
            .caption(chart.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        plot.configure_mesh()
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 16))
            .x_desc(chart.x_label)
            .y_desc(chart.y_label)
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(220, 220, 220))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (label, points)) in chart.lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            draw_line(&mut plot, points.clone(), color, Some(label)).map_err(|e| err(&e))?;
            plot.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
            let dots = chart.dots.get(i).map_or(&[][..], Vec::as_slice);
            plot.draw_series(
                dots.iter()
                    .map(|&p| Circle::new(p, 3, color.stroke_width(1))),
            )
            .map_err(|e| err(&e))?;
        }
        draw_legend(
            &mut plot,
            if chart.legend_right {
                SeriesLabelPosition::UpperRight
            } else {
                SeriesLabelPosition::UpperLeft
            },
            14,
        )
        .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}
