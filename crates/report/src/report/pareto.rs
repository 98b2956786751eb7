//! The Pareto frontier of a load run: what one user sees (their output speed) against what the
//! deployment serves (total output tok/s), across the run's server variants and points. A
//! point is on the frontier when no other point beats it on one axis without losing on the
//! other: the trade-offs worth choosing between. Pure, on the points the load section makes
//! of its rows (`load`, which holds them).

use schemars::JsonSchema;
use serde::Serialize;

/// How the two axes are made, in words, for the report.
pub(crate) const DEFINITION: &str = "x: `output_tok_s`, completion tokens of all completed measured requests / the measured window (what the deployment serves); y: tok/s per user, the median (p50) of the measured requests' `decode_tok_s` (what one user's stream sees). A point is on the frontier when no other point has at least as much of both and more of one.";

/// One load point placed on the Pareto chart.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ParetoPoint {
    /// Point id (`p003`).
    pub id: String,
    /// Human label, as in the results tables.
    pub label: String,
    /// The server variant: its results table's title (the server sweep values, or the group).
    pub variant: String,
    /// Total output tokens per second over the measured window (`output_tok_s`), tok/s.
    pub output_tok_s: f64,
    /// Output tokens per second one user sees: the p50 of `decode_tok_s`, tok/s.
    pub user_tok_s: f64,
    /// No other point of the same variant dominates it.
    pub variant_frontier: bool,
    /// No other point of the run dominates it.
    pub frontier: bool,
}

/// Which of `points` (x, y; more is better on both) no other point dominates: `a` dominates
/// `b` when it has at least as much of both and strictly more of one. Equal points do not
/// dominate each other, so both stay.
pub(crate) fn non_dominated(points: &[(f64, f64)]) -> Vec<bool> {
    points
        .iter()
        .map(|&(x, y)| {
            !points
                .iter()
                .any(|&(ox, oy)| ox >= x && oy >= y && (ox > x || oy > y))
        })
        .collect()
}

/// `points` marked on or off the frontier, run-wide and within their variant, in the order
/// given; empty when fewer than two, where a frontier says nothing.
pub(crate) fn frontier(mut points: Vec<ParetoPoint>) -> Vec<ParetoPoint> {
    if points.len() < 2 {
        return Vec::new();
    }
    let xy = |p: &ParetoPoint| (p.output_tok_s, p.user_tok_s);
    let all: Vec<(f64, f64)> = points.iter().map(xy).collect();
    for (p, on) in points.iter_mut().zip(non_dominated(&all)) {
        p.frontier = on;
    }
    for variant in variants(&points) {
        let idx: Vec<usize> = (0..points.len())
            .filter(|&i| points[i].variant == variant)
            .collect();
        let mine: Vec<(f64, f64)> = idx.iter().map(|&i| xy(&points[i])).collect();
        for (i, on) in idx.into_iter().zip(non_dominated(&mine)) {
            points[i].variant_frontier = on;
        }
    }
    points
}

/// The variants, in order of first appearance.
pub fn variants(points: &[ParetoPoint]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in points {
        if !names.contains(&p.variant) {
            names.push(p.variant.clone());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_beaten_on_both_axes_is_off_the_frontier() {
        // (10, 50) beats (8, 40); (20, 30) and (30, 10) trade off against it; (20, 30) ties
        // (20, 30) and neither drops; (25, 5) loses to (30, 10).
        let pts = [
            (10.0, 50.0),
            (8.0, 40.0),
            (20.0, 30.0),
            (30.0, 10.0),
            (20.0, 30.0),
            (25.0, 5.0),
        ];
        assert_eq!(non_dominated(&pts), [true, false, true, true, true, false]);
    }

    #[test]
    fn equal_on_one_axis_and_better_on_the_other_dominates() {
        assert_eq!(non_dominated(&[(10.0, 5.0), (10.0, 6.0)]), [false, true]);
        assert_eq!(non_dominated(&[(10.0, 5.0), (11.0, 5.0)]), [false, true]);
    }
}
