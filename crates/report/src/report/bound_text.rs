//! `servebench bound`'s text: a run's grades ([`BoundReport`]) as Markdown through
//! `templates/bound.md.j2`, every number formatted here.

use super::ReportError;
use super::bound::{BoundReport, BoundRow, line_text, precision_name};

/// The grades as Markdown (`templates/bound.md.j2`): the basis, a row per point, then what
/// each sweep's line says.
pub fn render(r: &BoundReport) -> Result<String, ReportError> {
    let (name, source) = BOUND_TEMPLATE;
    super::templates::render_own(&BoundView::of(r), name, source)
}

/// `servebench bound`'s template.
const BOUND_TEMPLATE: (&str, &str) = ("bound.md.j2", include_str!("../../templates/bound.md.j2"));

/// What `bound.md.j2` reads: every number formatted here.
#[derive(serde::Serialize)]
struct BoundView<'a> {
    gpu: &'a str,
    bandwidth: String,
    source: &'a str,
    tp: u32,
    pp: u32,
    tokens_per_step: String,
    /// Whether points were graded with tokens per step of their own (measured accept lengths).
    steps_vary: bool,
    precision: String,
    assumptions: &'a [String],
    not_graded: &'a [String],
    /// A row per point, its cells in the table's order.
    rows: Vec<[String; 11]>,
    findings: &'a [String],
    sweeps: Vec<SweepView<'a>>,
}

/// A sweep's line, or why it has none.
#[derive(serde::Serialize)]
struct SweepView<'a> {
    line: &'a str,
    points: usize,
    line_text: Option<String>,
    findings: Vec<String>,
    why: Option<String>,
}

impl<'a> BoundView<'a> {
    fn of(r: &'a BoundReport) -> Self {
        BoundView {
            gpu: &r.gpu.name,
            bandwidth: format!("{:.0}", r.gpu.bandwidth_gb_s),
            source: &r.gpu.source,
            tp: r.layout.tp,
            pp: r.layout.pp,
            tokens_per_step: format!("{:.2}", r.tokens_per_step),
            steps_vary: r
                .rows
                .iter()
                .any(|row| row.tokens_per_step != r.tokens_per_step),
            precision: precision_name(r.precision),
            assumptions: &r.assumptions,
            not_graded: &r.not_graded,
            rows: r.rows.iter().map(row_cells).collect(),
            findings: &r.findings,
            sweeps: r
                .sweeps
                .iter()
                .map(|(line, sweep)| match sweep {
                    Ok(s) => SweepView {
                        line,
                        points: s.points,
                        line_text: Some(line_text(s)),
                        findings: s.findings.iter().map(|f| f.to_string()).collect(),
                        why: None,
                    },
                    Err(why) => SweepView {
                        line,
                        points: 0,
                        line_text: None,
                        findings: Vec::new(),
                        why: Some(why.to_string()),
                    },
                })
                .collect(),
        }
    }
}

/// A point's row of the table.
fn row_cells(row: &BoundRow) -> [String; 11] {
    let (tflops, fraction) = row.prefill.map_or(("—".into(), "—".into()), |p| {
        (
            format!("{:.1}", p.achieved_tflops),
            format!("{:.1}%", p.fraction_of_peak * 100.0),
        )
    });
    [
        row.point.clone(),
        format!("{:.0}", row.context),
        format!("{:.0}", row.batch),
        format!("{:.2}", row.tokens_per_step),
        format!("{:.3}", row.step.step_s * 1e3),
        format!("{:.3}", row.step.floor_s * 1e3),
        format!("{:.3} + {:.3}", row.weight_bytes / 1e9, row.kv_bytes / 1e9),
        format!("{:.1}", row.step.effective_gb_s),
        format!("{:.1}%", row.step.fraction_of_peak * 100.0),
        tflops,
        fraction,
    ]
}
