//! A capacity search's SVG chart: achieved throughput (top) and the first SLO target's value
//! with its bound (bottom) against the probed value, passing probes as filled circles and
//! failing ones as crosses. Pure: the same search always draws the same bytes.

use plotters::prelude::*;

use super::capacity::CapacityView;
use super::chart_error::ChartError;

const SIZE: (u32, u32) = (720, 620);
const LINE: RGBColor = RGBColor(0, 114, 178);
const PASS: RGBColor = RGBColor(0, 158, 115);
const FAIL: RGBColor = RGBColor(213, 94, 0);
const BOUND: RGBColor = RGBColor(120, 120, 120);

/// Draws the search's chart.
pub fn render_svg(view: &CapacityView) -> Result<String, ChartError> {
    let file = super::capacity::chart_file(&view.seed);
    let err = |e: &dyn std::fmt::Display| ChartError {
        file: file.clone(),
        message: e.to_string(),
    };
    let mut probes: Vec<_> = view.probes.iter().collect();
    probes.sort_by(|a, b| a.value.total_cmp(&b.value));
    let x_max = probes.iter().map(|p| p.value).fold(0.0, f64::max).max(1e-9) * 1.05;
    let x_label = format!("{} ({})", view.over, view.unit);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(
                &format!("Capacity search {}", view.label),
                ("sans-serif", 20),
            )
            .map_err(|e| err(&e))?;
        let (top, bottom) = root.split_vertically(290);
        // Top: achieved throughput.
        let tput: Vec<(f64, f64, bool)> = probes
            .iter()
            .map(|p| (p.value, p.throughput_req_s, p.passes))
            .collect();
        panel(
            &top,
            &tput,
            x_max,
            &x_label,
            "achieved (req/s)",
            None,
            &file,
        )?;
        // Bottom: the first target's value (ms for latencies), with its bound.
        if let Some(name) = view.targets.first() {
            let scale = if name == "attainment" { 100.0 } else { 1e3 };
            let unit = if name == "attainment" { "%" } else { "ms" };
            let ys: Vec<(f64, f64, bool)> = probes
                .iter()
                .filter_map(|p| Some((p.value, p.slo_values.first().copied()?? * scale, p.passes)))
                .collect();
            let bound = view.limits.first().map(|l| l * scale);
            panel(
                &bottom,
                &ys,
                x_max,
                &x_label,
                &format!("{name} ({unit})"),
                bound,
                &file,
            )?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// One panel: a line through the probes by value, each marked passing or failing; a dashed
/// bound when given.
fn panel(
    area: &Area<'_>,
    pts: &[(f64, f64, bool)],
    x_max: f64,
    x_label: &str,
    y_label: &str,
    bound: Option<f64>,
    file: &str,
) -> Result<(), ChartError> {
    let e = |x: &dyn std::fmt::Display| ChartError {
        file: file.to_string(),
        message: x.to_string(),
    };
    let y_max = pts
        .iter()
        .map(|p| p.1)
        .chain(bound)
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.2;
    let mut plot = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|x| e(&x))?;
    plot.configure_mesh()
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .x_desc(x_label)
        .y_desc(y_label)
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(220, 220, 220))
        .draw()
        .map_err(|x| e(&x))?;
    plot.draw_series(std::iter::once(PathElement::new(
        pts.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>(),
        LINE.stroke_width(2),
    )))
    .map_err(|x| e(&x))?;
    if let Some(b) = bound {
        // Dashes of 1/60 of the axis, as far apart.
        let step = x_max / 60.0;
        plot.draw_series((0..30).map(|i| {
            let x0 = 2.0 * i as f64 * step;
            PathElement::new(vec![(x0, b), (x0 + step, b)], BOUND.stroke_width(1))
        }))
        .map_err(|x| e(&x))?
        .label("SLO bound")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BOUND.stroke_width(1)));
    }
    plot.draw_series(
        pts.iter()
            .filter(|p| p.2)
            .map(|p| Circle::new((p.0, p.1), 4, PASS.filled())),
    )
    .map_err(|x| e(&x))?
    .label("passes")
    .legend(|(x, y)| Circle::new((x + 10, y), 4, PASS.filled()));
    plot.draw_series(
        pts.iter()
            .filter(|p| !p.2)
            .map(|p| Cross::new((p.0, p.1), 5, FAIL.stroke_width(2))),
    )
    .map_err(|x| e(&x))?
    .label("fails")
    .legend(|(x, y)| Cross::new((x + 10, y), 5, FAIL.stroke_width(2)));
    super::chart_style::draw_legend(&mut plot, SeriesLabelPosition::UpperLeft, 13)
        .map_err(|x| e(&x))?;
    Ok(())
}

/// Every search's answer side by side (a search per policy or prefill:decode ratio): the
/// highest passing value as a bar, a line up to the lowest failing one (the bracket: the
/// capacity lies in it), and what the server completed there as a dot. Searches without an
/// answer get no bar, and their label says so.
pub(crate) fn render_variants_svg(searches: &[CapacityView]) -> Result<String, ChartError> {
    let file = super::capacity::VARIANTS_CHART.to_string();
    let err = |e: &dyn std::fmt::Display| ChartError {
        file: file.clone(),
        message: e.to_string(),
    };
    let n = searches.len().max(1);
    let y_max = searches
        .iter()
        .flat_map(|s| [s.capacity, s.above, s.achieved_at_capacity])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.2;
    let unit = searches.first().map_or("", |s| s.unit.as_str());
    let over = searches.first().map_or("", |s| s.over.as_str());
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(
                &format!("Capacity of each search ({over})"),
                ("sans-serif", 20),
            )
            .map_err(|e| err(&e))?;
        let labels: Vec<String> = searches
            .iter()
            .map(|s| match s.capacity {
                Some(_) => s.label.clone(),
                None => format!("{} (none passed)", s.label),
            })
            .collect();
        let mut plot = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..y_max)
            .map_err(|x| err(&x))?;
        plot.configure_mesh()
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .y_desc(format!("{over} ({unit})"))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(220, 220, 220))
            .draw()
            .map_err(|x| err(&x))?;
        for (i, s) in searches.iter().enumerate() {
            let x = i as f64;
            let Some(c) = s.capacity else { continue };
            plot.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.3, 0.0), (x + 0.3, c)],
                PASS.mix(0.5).filled(),
            )))
            .map_err(|e| err(&e))?;
            if let Some(a) = s.above.filter(|a| a.is_finite()) {
                plot.draw_series(std::iter::once(PathElement::new(
                    vec![(x, c), (x, a)],
                    FAIL.stroke_width(2),
                )))
                .map_err(|e| err(&e))?;
            }
            if let Some(done) = s.achieved_at_capacity {
                plot.draw_series(std::iter::once(Circle::new((x, done), 5, LINE.filled())))
                    .map_err(|e| err(&e))?;
            }
        }
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::super::capacity::answered;
    use super::*;

    #[test]
    fn the_variants_chart_draws_a_bar_per_answered_search_and_names_the_others() {
        let s = [
            answered("decode=1", Some(4.0), Some(4.2)),
            answered("decode=2", Some(8.0), Some(8.4)),
            answered("decode=3", None, Some(1.0)),
        ];
        let svg = render_variants_svg(&s).unwrap();
        assert_eq!(svg.matches("fill=\"#009E73\"").count(), 2, "{svg}");
        assert!(svg.contains("decode=3 (none passed)"), "{svg}");
        assert_eq!(
            render_variants_svg(&s).unwrap(),
            svg,
            "the same bytes each time"
        );
    }
}
