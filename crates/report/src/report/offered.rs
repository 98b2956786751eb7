//! `compare` pairs open-loop load points by the load they were offered, not by their labels:
//! two runs that swept `load.rate: [10, 20]` and `[10.2, 19.8]`, or whose schedules offered
//! slightly different rates, still compare point for point. Pure.

use servebench_model::results::records::PointRecord;

/// How far apart two points' offered rates may be and still pair: 5% of the first run's.
pub(crate) const TOLERANCE_PCT: f64 = 5.0;

/// The requests/s a point was offered over its measured phase, for an open-loop point whose
/// schedule measured one (None for closed loops, sessions and `rate: inf`).
pub(crate) fn offered_req_s(p: &PointRecord) -> Option<f64> {
    let load = p.load.as_ref()?;
    if load.kind == "closed" {
        return None;
    }
    load.offered_req_s.filter(|r| r.is_finite() && *r > 0.0)
}

/// Sweep dimensions that set the offered load rather than telling points apart in another
/// way: their values may differ between paired points.
pub(crate) fn sets_offered_load(dim: &str) -> bool {
    dim == "load.rate" || dim.starts_with("load.ramp.") || dim == "load.trace.time_scale"
}

/// Whether `b` is within the tolerance of `a` (relative to `a`).
pub(crate) fn within(a: f64, b: f64) -> bool {
    (a - b).abs() <= a * TOLERANCE_PCT / 100.0
}

/// One open-loop point of a run: its offered rate and its key without the dimensions that set
/// the offered load.
#[derive(Debug, Clone)]
pub(crate) struct Candidate<'a> {
    pub point: &'a PointRecord,
    pub offered: f64,
    pub rest: Vec<String>,
}

/// Pairs the runs' open-loop points: in run order, each point not yet paired takes, from every
/// other run, the unpaired point with the same other dimensions whose offered rate is nearest
/// its own and within the tolerance. One entry per group, a point (or None) per run.
pub(crate) fn pair<'a>(runs: &'a [Vec<Candidate<'a>>]) -> Vec<Vec<Option<&'a Candidate<'a>>>> {
    let mut used: Vec<Vec<bool>> = runs.iter().map(|r| vec![false; r.len()]).collect();
    let mut groups = Vec::new();
    for (ri, run) in runs.iter().enumerate() {
        for (pi, c) in run.iter().enumerate() {
            if used[ri][pi] {
                continue;
            }
            used[ri][pi] = true;
            let mut group: Vec<Option<&Candidate>> = vec![None; runs.len()];
            group[ri] = Some(c);
            for (rj, other) in runs.iter().enumerate() {
                if rj == ri {
                    continue;
                }
                let best = other
                    .iter()
                    .enumerate()
                    .filter(|(pj, o)| {
                        !used[rj][*pj] && o.rest == c.rest && within(c.offered, o.offered)
                    })
                    .min_by(|a, b| {
                        (a.1.offered - c.offered)
                            .abs()
                            .total_cmp(&(b.1.offered - c.offered).abs())
                    })
                    .map(|(pj, _)| pj);
                if let Some(pj) = best {
                    used[rj][pj] = true;
                    group[rj] = Some(&other[pj]);
                }
            }
            groups.push(group);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tolerance_is_five_percent_of_the_first() {
        assert!(within(10.0, 10.5));
        assert!(within(10.0, 9.5));
        assert!(!within(10.0, 10.6));
    }
}
