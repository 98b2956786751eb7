//! The charts' shared look: the line colours (Okabe–Ito, readable by colour-blind readers; the
//! interactive page's `page.js` uses the same eight; each chart cycles through the first few
//! it needs), a series' line with its legend entry, and the legend's box.

use plotters::chart::{ChartContext, SeriesLabelPosition};
use plotters::coord::CoordTranslate;
use plotters::coord::ranged1d::Ranged;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::element::PathElement;
use plotters::prelude::{Cartesian2d, DrawingBackend};
use plotters::style::{Color, RGBColor, WHITE};

/// Line colours in the order lines take them.
pub(crate) const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

/// Draws the chart's legend at `at`: its labels at `font_px` in a white box with a grey border.
pub(crate) fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    plot: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
    font_px: u32,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    plot.configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", font_px))
        .draw()
}

/// Draws one series' line through `xy` in `color`, 2 px wide, and names it `label` in the
/// legend (a short stroke of the same line); no label, no legend entry.
pub(crate) fn draw_line<'a, DB, X, Y>(
    plot: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    xy: Vec<(f64, f64)>,
    color: RGBColor,
    label: Option<&str>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let line = plot.draw_series(std::iter::once(PathElement::new(xy, color.stroke_width(2))))?;
    if let Some(label) = label {
        line.label(label).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
        });
    }
    Ok(())
}
