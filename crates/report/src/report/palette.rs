//! The charts' line colours: Okabe–Ito, readable by colour-blind readers (the interactive
//! page's `page.js` uses the same eight). Each chart cycles through the first few it needs.

use plotters::style::RGBColor;

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
