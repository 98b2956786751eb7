//! The "Against the hardware" chart: each sweep line's measured decode step time against
//! context, beside the floor its bytes allow (drawn by the results charts' `render_svg`).

use super::bound_section::{BoundSection, CHART_FILE};
use super::charts::{Chart, ChartPoint, Series};

/// The chart, when the section links one.
pub(crate) fn chart(section: Option<&BoundSection>) -> Option<Chart> {
    let s = section?;
    s.chart.as_ref()?;
    let mut lines: Vec<&str> = Vec::new();
    for r in &s.rows {
        if !lines.contains(&r.line.as_str()) {
            lines.push(&r.line);
        }
    }
    let lone = lines.len() == 1;
    let mut series = Vec::new();
    for l in lines {
        let mut rows: Vec<_> = s.rows.iter().filter(|r| r.line == l).collect();
        rows.sort_by(|x, y| x.context_tokens.total_cmp(&y.context_tokens));
        let line = |name: &str, value: &dyn Fn(&super::bound_section::BoundRow) -> f64| Series {
            label: if lone {
                name.to_string()
            } else {
                format!("{name}, {l}")
            },
            points: rows
                .iter()
                .map(|r| ChartPoint {
                    context_tokens: r.context_tokens,
                    value: value(r) * 1e3,
                    interval: None,
                    warned: false,
                })
                .collect(),
        };
        series.push(line("measured step", &|r| r.step_s));
        series.push(line("floor (bytes at peak bandwidth)", &|r| r.step_floor_s));
    }
    Some(Chart {
        file: CHART_FILE,
        metric: "step_s",
        title: "Decode step time against context, beside its floor",
        y_label: "step (ms)",
        series,
    })
}
