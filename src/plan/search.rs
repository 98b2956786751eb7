//! Capacity search: the highest value of a load dimension (concurrency, or a request rate)
//! whose point meets its SLO targets. As `vllm bench sweep serve_sla` does, it doubles from
//! `start` while probes pass, then bisects the bracket [highest passing, lowest failing]
//! until it is narrower than `resolution` (relative to its lower end); unlike it, it also
//! stops doubling on saturation: when a passing probe's throughput grew less than
//! [`SATURATION_GAIN`] over the previous doubling, every probe already on that plateau
//! (throughput within 5% of it) counts as the bracket's top (more load only queues), and the
//! search bisects below the lowest of them: the answer is the knee.
//!
//! The search is a pure state machine over probe verdicts, so it is tested without a server;
//! each probe is meant to be an ordinary recorded point.

/// Less growth than this (5%) over a doubling of the load is saturation.
pub(crate) const SATURATION_GAIN: f64 = 0.05;

/// What to search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SearchSpec {
    /// The first value probed (> 0).
    pub start: f64,
    /// The highest value probed.
    pub max: f64,
    /// Stop when (fail - pass) / pass is at most this (0.05 = 5%).
    pub resolution: f64,
    /// Probe whole numbers only (concurrency).
    pub integer: bool,
}

impl From<&servebench_model::spec::search::SearchSpec> for SearchSpec {
    fn from(s: &servebench_model::spec::search::SearchSpec) -> Self {
        SearchSpec {
            start: s.start,
            max: s.max,
            resolution: s.resolution.fraction(),
            integer: matches!(
                s.over,
                servebench_model::spec::search::SearchOver::Concurrency
                    | servebench_model::spec::search::SearchOver::LiveSessions
            ),
        }
    }
}

/// One probe's outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Probe {
    /// The value probed.
    pub value: f64,
    /// Whether its point met every SLO target.
    pub passes: bool,
    /// Its achieved throughput (requests or tokens per second: any measure that grows with
    /// the load served).
    pub throughput: f64,
}

/// The search's answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    /// The highest passing value probed; None when even the lowest failed.
    pub capacity: Option<f64>,
    /// The lowest value known not to do better: a failing probe, or the saturated one; None
    /// when `max` passed (the capacity is at least `max`).
    pub above: Option<f64>,
    /// The probe where throughput stopped growing, if it did.
    pub saturated_at: Option<f64>,
    /// Probes run.
    pub probes: usize,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Next {
    /// Measure a point at this value.
    Probe(f64),
    /// The search is over.
    Done(Answer),
}

/// The search's state: the probes so far.
#[derive(Debug, Clone)]
pub(crate) struct CapacitySearch {
    spec: SearchSpec,
    probes: Vec<Probe>,
    /// Doubling ended (a failure, saturation or `max`).
    bracketed: bool,
    saturated_at: Option<f64>,
    /// The saturated probe's throughput.
    plateau: Option<f64>,
}

impl CapacitySearch {
    /// A search that has probed nothing.
    pub(crate) fn new(spec: SearchSpec) -> Self {
        CapacitySearch {
            spec,
            probes: Vec::new(),
            bracketed: false,
            saturated_at: None,
            plateau: None,
        }
    }

    /// The probes so far, in order.
    pub(crate) fn probes(&self) -> &[Probe] {
        &self.probes
    }

    /// Records a probe's verdict (for the value [`next`](Self::next) asked for).
    pub(crate) fn record(&mut self, probe: Probe) {
        if !self.bracketed {
            let previous = self.probes.iter().rev().find(|p| p.passes).copied();
            if !probe.passes || probe.value >= self.spec.max {
                self.bracketed = true;
            } else if let Some(prev) = previous
                && probe.throughput < prev.throughput * (1.0 + SATURATION_GAIN)
            {
                self.bracketed = true;
                self.saturated_at = Some(probe.value);
                self.plateau = Some(probe.throughput);
            }
        }
        self.probes.push(probe);
    }

    /// The highest passing value below any saturation, and the lowest value above it that
    /// failed or saturated.
    fn bracket(&self) -> (Option<f64>, Option<f64>) {
        let top = |p: &&Probe| {
            !p.passes
                || self
                    .plateau
                    .is_some_and(|t| p.throughput >= t * (1.0 - SATURATION_GAIN))
        };
        let above = self
            .probes
            .iter()
            .filter(top)
            .map(|p| p.value)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))));
        let pass = self
            .probes
            .iter()
            .filter(|p| !top(p) && above.is_none_or(|a| p.value < a))
            .map(|p| p.value)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        (pass, above)
    }

    /// The next value to probe, or the answer.
    pub(crate) fn next(&self) -> Next {
        let s = &self.spec;
        let round = |x: f64| if s.integer { x.round() } else { x };
        if self.probes.is_empty() {
            return Next::Probe(round(s.start));
        }
        if !self.bracketed {
            let last = self.probes[self.probes.len() - 1].value;
            return Next::Probe(round((last * 2.0).min(s.max)));
        }
        let (pass, above) = self.bracket();
        let done = |capacity| {
            Next::Done(Answer {
                capacity,
                above,
                saturated_at: self.saturated_at,
                probes: self.probes.len(),
            })
        };
        let Some(hi) = above else {
            return done(pass);
        };
        let lo = pass.unwrap_or(0.0);
        let narrow = pass.is_some_and(|lo| (hi - lo) / lo <= s.resolution);
        let mid = if s.integer {
            ((lo + hi) / 2.0).floor()
        } else {
            (lo + hi) / 2.0
        };
        let tried = self.probes.iter().any(|p| p.value == mid);
        if narrow || mid <= lo || mid >= hi || tried || (s.integer && mid < 1.0) {
            return done(pass);
        }
        Next::Probe(mid)
    }
}

/// The id of probe `k` (from 1) of the search started by `seed`.
pub(crate) fn probe_id(seed: &str, k: usize) -> String {
    format!("{seed}-s{k}")
}

/// The point probing `value` (probe `k`): the seed with the searched field set, the value
/// among its sweep values (so its label shows it).
pub(crate) fn probe_point(
    seed: &servebench_model::spec::Point,
    over: servebench_model::spec::search::SearchOver,
    value: f64,
    k: usize,
) -> servebench_model::spec::Point {
    use servebench_model::spec::search::SearchOver;
    let mut p = seed.clone();
    p.id = probe_id(&seed.id, k);
    let json = if value.fract() == 0.0 && value.abs() < 1e15 {
        serde_json::Value::from(value as i64)
    } else {
        serde_json::Value::from(value)
    };
    p.values.insert(over.to_string(), json);
    match over {
        SearchOver::LoadRate => {
            if let Some(servebench_model::spec::load_model::LoadSpec::Rate { rate, .. }) =
                p.experiment.load.as_mut()
            {
                *rate = servebench_model::spec::load_model::Rate::PerSecond(value);
            }
        }
        SearchOver::Concurrency => p.experiment.concurrency = value.max(1.0) as u32,
        SearchOver::LiveSessions => {
            if let Some(servebench_model::spec::load_model::LoadSpec::Agentic { agentic, .. }) =
                p.experiment.load.as_mut()
            {
                agentic.live = value.max(1.0) as u32;
            }
        }
    }
    p
}

/// The most probes a search can take: the doublings from `start` to `max`, then the
/// bisections of a bracket one doubling wide down to `resolution` (what `plan` bounds the
/// search's time with).
pub(crate) fn probe_bound(spec: &SearchSpec) -> usize {
    let doublings = (spec.max / spec.start).log2().ceil().max(0.0) as usize + 1;
    let bisections = (1.0 / spec.resolution.max(1e-6)).log2().ceil().max(0.0) as usize;
    doublings + bisections
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against `model` (value -> (passes, throughput)).
    fn run(spec: SearchSpec, model: impl Fn(f64) -> (bool, f64)) -> Answer {
        let mut s = CapacitySearch::new(spec);
        for _ in 0..100 {
            match s.next() {
                Next::Probe(v) => {
                    let (passes, throughput) = model(v);
                    s.record(Probe {
                        value: v,
                        passes,
                        throughput,
                    });
                }
                Next::Done(a) => {
                    assert!(a.probes <= probe_bound(&spec), "{a:?} over the bound");
                    return a;
                }
            }
        }
        panic!("no answer in 100 probes");
    }

    /// The L4 profile's decode step, 5.0 ms + 0.065 ms per request in flight, against a TPOT
    /// SLO of 7 ms: by hand, the highest concurrency meeting it is (7 - 5) / 0.065 = 30.8,
    /// so 30; throughput grows with concurrency all the way.
    #[test]
    fn finds_a_hand_computed_concurrency_capacity_within_resolution() {
        let spec = SearchSpec {
            start: 1.0,
            max: 1024.0,
            resolution: 0.05,
            integer: true,
        };
        let a = run(spec, |c| {
            let tpot_ms = 5.0 + 0.065 * c;
            (tpot_ms <= 7.0, c / tpot_ms)
        });
        let cap = a.capacity.unwrap();
        assert!((cap - 30.0).abs() / 30.0 <= 0.10, "{a:?}");
        assert!(cap <= 30.0, "never above what passes: {a:?}");
        assert!(a.above.unwrap() > cap && (a.above.unwrap() - cap) / cap <= 0.05 + 1e-9);
        assert_eq!(a.saturated_at, None);
    }

    /// A rate search (continuous): an M/M/1-like server with service rate 50 req/s whose
    /// mean latency 1 / (50 - rate) must stay under 0.1 s: capacity 40 req/s by hand.
    #[test]
    fn finds_a_hand_computed_rate_capacity() {
        let spec = SearchSpec {
            start: 1.0,
            max: 1000.0,
            resolution: 0.02,
            integer: false,
        };
        let a = run(spec, |r| {
            let ok = r < 50.0 && 1.0 / (50.0 - r) <= 0.1;
            (ok, r.min(50.0))
        });
        let cap = a.capacity.unwrap();
        assert!((40.0 * 0.98 - 1e-9..=40.0).contains(&cap), "{a:?}");
    }

    /// Throughput that stops growing at 48 while the SLO (loose) still passes: the search
    /// stops doubling at the first flat doubling and bisects down to the knee.
    #[test]
    fn saturation_stops_the_doubling() {
        let spec = SearchSpec {
            start: 4.0,
            max: 4096.0,
            resolution: 0.05,
            integer: true,
        };
        let a = run(spec, |c| (true, c.min(48.0)));
        assert_eq!(a.saturated_at, Some(128.0), "{a:?}");
        let cap = a.capacity.unwrap();
        assert!((44.0..48.0).contains(&cap), "the knee within 5%: {a:?}");
        // The top is the lowest probe already within 5% of the plateau's throughput.
        assert!(a.above.is_some_and(|t| (45.6..=48.0).contains(&t)), "{a:?}");
        assert!(a.probes < probe_bound(&spec));
    }

    #[test]
    fn edges_first_fails_and_max_passes() {
        let spec = SearchSpec {
            start: 8.0,
            max: 64.0,
            resolution: 0.05,
            integer: true,
        };
        let a = run(spec, |c| (c <= 2.0, c));
        assert_eq!(
            a.capacity,
            Some(2.0),
            "bisects below a failing start: {a:?}"
        );
        let a = run(spec, |_| (false, 1.0));
        assert_eq!(a.capacity, None);
        let a = run(spec, |c| (true, c));
        assert_eq!((a.capacity, a.above), (Some(64.0), None), "{a:?}");
        assert_eq!(probe_bound(&spec), 4 + 5);
    }
}
