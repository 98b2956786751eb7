//! A point's arrival schedule: every request's send time (seconds from the point's start) and
//! phase, computed before the first request from the load model and its seed alone. Being a
//! plain function of the point's values, a sweep or a capacity search sets `load.rate` and
//! gets the schedule that rate means.

use std::path::Path;
use std::sync::Arc;

use servebench_model::results::records::Phase;
use servebench_model::spec::load_model::{Arrivals, LoadSpec, PhaseSpec, RampSpec, StopSpec};
use servebench_model::spec::types::Experiment;

use super::arrival::{RateCurve, UnitGaps};
use super::trace::{self, TraceError};

/// Most requests one schedule holds (80 MB of schedule; 1,000 req/s for almost three hours): as
/// many as a trace may have lines.
pub(crate) const SCHEDULE_LIMIT: usize = trace::TRACE_LINE_LIMIT;

/// Longest a schedule may span, seconds (a week): a request due later would be waited for
/// by a run no one watches, and a span of centuries (a trace's wild timestamp) forever.
pub(crate) const MAX_SPAN_S: f64 = 7.0 * 24.0 * 3600.0;

/// One request's place in the schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scheduled {
    /// Seconds from the point's start to the request's intended send time.
    pub at_s: f64,
    pub phase: Phase,
    /// `max_tokens` from a trace line (None: the workload's `output_tokens`).
    pub max_tokens: Option<u32>,
    /// Prompt tokens from a trace line (None: the workload's prompt).
    pub input_tokens: Option<u64>,
    /// A trace line's prefix blocks (`hash_ids`), in [`TracedLines::ids`] (None: the
    /// prompt is generated).
    pub blocks: Option<trace::BlockRange>,
}

/// A trace's lines as a round plans its requests from them: each line's lengths and blocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TracedLines<'a> {
    /// By request, the schedule's lines (empty for a rate or ramp).
    pub lines: &'a [Scheduled],
    /// Every line's block ids.
    pub ids: &'a [u64],
    /// Tokens each block stands for.
    pub block_size: u32,
}

impl Default for TracedLines<'_> {
    fn default() -> Self {
        TracedLines {
            lines: &[],
            ids: &[],
            block_size: 512,
        }
    }
}

impl<'a> TracedLines<'a> {
    /// The block ids of request `i` (empty when its prompt is generated).
    pub(crate) fn ids_of(&self, i: usize) -> &'a [u64] {
        match self.lines.get(i).and_then(|s| s.blocks) {
            Some(b) => self
                .ids
                .get(b.start as usize..(b.start + b.len) as usize)
                .unwrap_or(&[]),
            None => &[],
        }
    }

    /// Whether any request is made of blocks.
    pub(crate) fn has_blocks(&self) -> bool {
        !self.ids.is_empty()
    }
}

/// The arrivals of one point, in time order. Not held in memory: the arrivals are a function
/// of the load model and its seed, so [`Schedule::iter`] makes them again as they are due (a
/// point of a million requests would otherwise hold 40 MB before its first is sent). Only a
/// trace's lines, read from its file (bounded), are kept.
#[derive(Clone)]
pub struct Schedule {
    /// Makes the arrivals from the start, the same every time.
    arrivals: Arc<dyn Fn() -> Box<dyn Iterator<Item = Arrival> + Send> + Send + Sync>,
    phases: Phases,
    len: usize,
    measured: usize,
    /// A trace's schedule, which carries its lines' lengths (empty for a rate or ramp).
    traced: Vec<Scheduled>,
    /// A trace's block ids, and the tokens each stands for.
    ids: Arc<Vec<u64>>,
    block_size: u32,
    /// A SageMaker capture's requests: request `i` of the schedule replays `captured[i]`.
    captured: Option<Arc<Vec<super::capture::CapturedRequest>>>,
    /// Most requests in flight (None: no cap).
    pub max_in_flight: Option<u32>,
}

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("len", &self.len)
            .field("measured", &self.measured)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

/// Why a schedule could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("the point has no open-loop `load:` block")]
    NotLoad,
    #[error(
        "the schedule would hold more than {SCHEDULE_LIMIT} requests; lower `stop.duration` or the rate, or set `stop.requests`"
    )]
    TooLong,
    #[error("`rate: inf` sends everything at once: give `stop.requests` (how many)")]
    UnboundedInf,
    #[error(
        "`{field}` is {}, longer than a schedule may span ({}); give a shorter one",
        servebench_model::text::duration(*.seconds),
        servebench_model::text::duration(MAX_SPAN_S)
    )]
    PhaseTooLong { field: &'static str, seconds: f64 },
    #[error(
        "request {index} would be due {} after the point's start, later than a schedule may span ({}); {}",
        servebench_model::text::duration(*.at_s),
        servebench_model::text::duration(MAX_SPAN_S),
        if *.traced { "cut the trace, or lower `load.trace.time_scale`" } else { "shorten `stop.duration`, or raise the rate" }
    )]
    TooLate {
        index: usize,
        at_s: f64,
        traced: bool,
    },
    #[error(transparent)]
    Trace(#[from] TraceError),
}

type MakeArrivals = Arc<dyn Fn() -> Box<dyn Iterator<Item = Arrival> + Send> + Send + Sync>;

/// Refuses a phase (or a ramp) longer than a schedule may span.
fn check_spans(exp: &Experiment, load: &LoadSpec, stop: &StopSpec) -> Result<(), ScheduleError> {
    let phase_limits = [
        (
            "warmup.duration",
            exp.warmup.as_ref().and_then(|w| w.duration),
        ),
        ("stop.duration", stop.duration),
        (
            "cooldown.duration",
            exp.cooldown.as_ref().and_then(|c| c.duration),
        ),
        ("load.ramp.over", load.ramp().map(|r| r.over)),
    ];
    for (field, d) in phase_limits {
        if let Some(seconds) = d.map(|d| d.as_secs_f64()).filter(|&s| s > MAX_SPAN_S) {
            return Err(ScheduleError::PhaseTooLong { field, seconds });
        }
    }
    Ok(())
}

/// How a load makes its arrivals, with a trace's blocks when it replays one.
struct ArrivalSource {
    /// (send time, output tokens, prompt tokens, blocks): the lengths and blocks only from a
    /// trace.
    make: MakeArrivals,
    /// A trace's block ids and the tokens each stands for; None for a rate or a ramp.
    blocks: Option<(Arc<Vec<u64>>, u32)>,
    /// A SageMaker capture's requests, one per arrival.
    captured: Option<Arc<Vec<super::capture::CapturedRequest>>>,
}

/// The arrivals of an open-loop `load`: a constant rate, a ramp, or a trace read from its
/// file (relative to `spec_dir`).
fn arrival_source(load: &LoadSpec, spec_dir: &Path) -> Result<ArrivalSource, ScheduleError> {
    let make: MakeArrivals = match load {
        LoadSpec::Rate { rate, arrivals, .. } => {
            let rate = rate.per_second();
            let Arrivals {
                arrival,
                burstiness,
                seed,
            } = *arrivals;
            if rate.is_infinite() {
                Arc::new(|| Box::new(std::iter::repeat((0.0, None, None, None))))
            } else {
                Arc::new(move || {
                    curve_arrivals(
                        RateCurve::Constant(rate),
                        UnitGaps::new(arrival, burstiness, seed),
                    )
                })
            }
        }
        LoadSpec::Ramp { ramp, arrivals, .. } => {
            let curve = ramp_curve(ramp);
            let Arrivals {
                arrival,
                burstiness,
                seed,
            } = *arrivals;
            Arc::new(move || {
                curve_arrivals(curve.clone(), UnitGaps::new(arrival, burstiness, seed))
            })
        }
        LoadSpec::Sessions { .. } | LoadSpec::Agentic { .. } => {
            return Err(ScheduleError::NotLoad);
        }
        LoadSpec::Trace { trace: t, .. } => {
            let scale = t.time_scale;
            let options = trace::TraceOptions::of(t);
            let read = trace::read(&spec_dir.join(&t.file), options)?;
            let entries = Arc::new(read.entries);
            let captured = (!read.captured.is_empty()).then(|| Arc::new(read.captured));
            return Ok(ArrivalSource {
                captured,
                make: Arc::new(move || {
                    let entries = entries.clone();
                    Box::new((0..entries.len()).map(move |i| {
                        let e = &entries[i];
                        (e.at_s * scale, e.output_tokens, e.input_tokens, e.blocks)
                    }))
                }),
                blocks: Some((Arc::new(read.ids), options.block_size)),
            });
        }
    };
    Ok(ArrivalSource {
        make,
        blocks: None,
        captured: None,
    })
}

/// A ramp's rate over time: in `steps` equal steps, or a straight line.
fn ramp_curve(ramp: &RampSpec) -> RateCurve {
    let over = ramp.over.as_secs_f64().max(1e-9);
    match ramp.steps {
        Some(steps) if steps >= 1 => RateCurve::Steps {
            from: ramp.from,
            to: ramp.to,
            over,
            steps,
        },
        _ => RateCurve::Linear {
            from: ramp.from,
            to: ramp.to,
            over,
        },
    }
}

impl Schedule {
    /// The schedule of `exp`'s point; `spec_dir` resolves a trace's path. Counts its
    /// requests (one pass over the arrivals) without keeping them.
    pub fn of(exp: &Experiment, spec_dir: &Path) -> Result<Schedule, ScheduleError> {
        let load = exp.load.as_ref().ok_or(ScheduleError::NotLoad)?;
        let stop = exp.stop.clone().unwrap_or_default();
        check_spans(exp, load, &stop)?;
        let phases = Phases::new(
            exp.warmup.clone().unwrap_or_default(),
            stop,
            exp.cooldown.clone().unwrap_or_default(),
        );
        let source = arrival_source(load, spec_dir)?;
        let unbounded_inf =
            load.rate().is_some_and(|r| r.per_second().is_infinite()) && !phases.bounded_by_count();
        if unbounded_inf {
            return Err(ScheduleError::UnboundedInf);
        }
        let traced = source.blocks.is_some();
        let captured = source.captured;
        let (ids, block_size) = source.blocks.unwrap_or_else(|| (Arc::new(Vec::new()), 512));
        let mut schedule = Schedule {
            arrivals: source.make,
            phases,
            len: SCHEDULE_LIMIT + 1,
            measured: 0,
            traced: Vec::new(),
            ids,
            block_size,
            captured,
            max_in_flight: load.open_loop().and_then(|o| o.max_in_flight),
        };
        schedule.count(traced)?;
        Ok(schedule)
    }

    /// Counts the requests, and those measured, in one pass over the arrivals; keeps a
    /// trace's lines (`traced`). Refuses a schedule too long or due too late.
    fn count(&mut self, traced: bool) -> Result<(), ScheduleError> {
        let (mut len, mut measured) = (0usize, 0usize);
        for s in self.iter() {
            if len >= SCHEDULE_LIMIT {
                return Err(ScheduleError::TooLong);
            }
            if s.at_s.is_nan() || s.at_s > MAX_SPAN_S {
                return Err(ScheduleError::TooLate {
                    index: len,
                    at_s: s.at_s,
                    traced,
                });
            }
            len += 1;
            measured += usize::from(s.phase == Phase::Measure);
        }
        self.len = len;
        self.measured = measured;
        if traced {
            self.traced = self.iter().collect();
        }
        Ok(())
    }

    /// The arrivals in time order, made again from the start.
    pub fn iter(&self) -> impl Iterator<Item = Scheduled> + Send + 'static {
        let mut phases = self.phases.clone();
        (self.arrivals)()
            .map_while(move |(at_s, max_tokens, input_tokens, blocks)| {
                phases.place(at_s).map(|phase| Scheduled {
                    at_s,
                    phase,
                    max_tokens,
                    input_tokens,
                    blocks,
                })
            })
            .take(self.len)
    }

    /// Requests in the schedule.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the schedule sends nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Requests in the measured phase.
    pub(crate) fn measured(&self) -> usize {
        self.measured
    }

    /// A SageMaker capture's requests, by request (None for every other schedule).
    pub(crate) fn captured(&self) -> Option<&Arc<Vec<super::capture::CapturedRequest>>> {
        self.captured.as_ref()
    }

    /// A trace's schedule, whose lines may give each request's lengths and blocks; empty
    /// for a rate or ramp (their lengths are the workload's).
    pub(crate) fn traced(&self) -> TracedLines<'_> {
        TracedLines {
            lines: &self.traced,
            ids: &self.ids,
            block_size: self.block_size,
        }
    }
}

/// One arrival: its time (seconds from the start), and a trace line's output and prompt
/// tokens and blocks.
type Arrival = (f64, Option<u32>, Option<u64>, Option<trace::BlockRange>);

/// Arrivals of the unit process mapped through a rate curve: the first at 0, then gaps.
fn curve_arrivals(
    curve: RateCurve,
    mut gaps: UnitGaps,
) -> Box<dyn Iterator<Item = Arrival> + Send> {
    let mut s = 0.0;
    let mut first = true;
    // A ramp starting at rate 0 has its first arrival after its first unit of work.
    if curve.rate_at(0.0) <= 0.0 {
        first = false;
    }
    Box::new(std::iter::from_fn(move || {
        if first {
            first = false;
        } else {
            s += gaps.next_gap();
        }
        curve.time_of(s).map(|t| (t, None, None, None))
    }))
}

/// Which phase each arrival falls in, as arrivals come in time order.
#[derive(Clone)]
struct Phases {
    warmup: PhaseSpec,
    stop: StopSpec,
    cooldown: PhaseSpec,
    /// Requests placed so far in the current phase.
    count: u32,
    current: Phase,
    /// When the current phase began (seconds; None until its first arrival when the previous
    /// phase ended by count).
    began: f64,
}

impl Phases {
    fn new(warmup: PhaseSpec, stop: StopSpec, cooldown: PhaseSpec) -> Phases {
        Phases {
            warmup,
            stop,
            cooldown,
            count: 0,
            current: Phase::Warmup,
            began: 0.0,
        }
    }

    fn bounded_by_count(&self) -> bool {
        self.stop.requests.is_some()
    }

    /// The phase of an arrival at `t`, or None when the schedule is over.
    fn place(&mut self, t: f64) -> Option<Phase> {
        loop {
            let (limit_n, limit_t) = match self.current {
                Phase::Warmup => (self.warmup.requests, self.warmup.duration),
                Phase::Measure => (self.stop.requests, self.stop.duration),
                Phase::Cooldown => (self.cooldown.requests, self.cooldown.duration),
            };
            let limit_t = limit_t.map(|d| d.as_secs_f64());
            // A phase without any limit: warm-up and cool-down are then empty; an unbounded
            // measured phase runs to the end of the arrivals (a ramp's or trace's end).
            let empty = limit_n.is_none() && limit_t.is_none() && self.current != Phase::Measure;
            let full = empty
                || limit_n.is_some_and(|n| self.count >= n)
                || limit_t.is_some_and(|d| t >= self.began + d);
            if !full {
                self.count += 1;
                return Some(self.current);
            }
            let ended_at = match limit_t {
                Some(d) if limit_n.is_none_or(|n| self.count < n) && !empty => self.began + d,
                _ => t,
            };
            self.current = match self.current {
                Phase::Warmup => Phase::Measure,
                Phase::Measure => Phase::Cooldown,
                Phase::Cooldown => return None,
            };
            self.count = 0;
            self.began = ended_at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(yaml_load: serde_json::Value) -> Experiment {
        let mut v = serde_json::json!({
            "name": "t",
            "server": {"engine": "sim"},
            "workload": {"prompt": {"kind": "repeat", "tokens": 100}, "output_tokens": 4},
        });
        for (k, val) in yaml_load.as_object().unwrap() {
            v[k] = val.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    fn of(v: serde_json::Value) -> Vec<Scheduled> {
        Schedule::of(&exp(v), Path::new("."))
            .unwrap()
            .iter()
            .collect()
    }

    #[test]
    fn a_constant_rate_spaces_requests_evenly_and_marks_phases() {
        let s = of(serde_json::json!({
            "load": {"kind": "rate", "rate": 10, "arrival": "constant"},
            "warmup": {"requests": 2},
            "stop": {"requests": 5},
            "cooldown": {"duration": "0.25s"},
        }));
        let phases: Vec<Phase> = s.iter().map(|r| r.phase).collect();
        use Phase::*;
        // 2 warm-up, 5 measured (0.2..0.6), cool-down for 0.25 s after 0.7: 0.7, 0.8, 0.9.
        assert_eq!(
            phases,
            [
                Warmup, Warmup, Measure, Measure, Measure, Measure, Measure, Cooldown, Cooldown,
                Cooldown
            ]
        );
        for (i, r) in s.iter().enumerate() {
            assert!((r.at_s - i as f64 * 0.1).abs() < 1e-9);
        }
    }

    #[test]
    fn a_duration_stops_the_measured_phase() {
        let s = of(serde_json::json!({
            "load": {"kind": "rate", "rate": 100, "arrival": "constant"},
            "warmup": {"duration": "1s"},
            "stop": {"duration": "2s", "requests": 1000},
        }));
        assert_eq!(s.len(), 300);
        assert_eq!(s.iter().filter(|r| r.phase == Phase::Measure).count(), 200);
        assert_eq!(s[100].phase, Phase::Measure);
        assert_eq!(s[99].phase, Phase::Warmup);
    }

    #[test]
    fn inf_sends_everything_at_the_start() {
        let s = of(serde_json::json!({
            "load": {"kind": "rate", "rate": "inf"},
            "stop": {"requests": 50},
        }));
        assert_eq!(s.len(), 50);
        assert!(s.iter().all(|r| r.at_s == 0.0));
        let e = Schedule::of(
            &exp(serde_json::json!({
                "load": {"kind": "rate", "rate": "inf"},
                "stop": {"duration": "5s"},
            })),
            Path::new("."),
        )
        .unwrap_err();
        assert!(matches!(e, ScheduleError::UnboundedInf));
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let v = |seed: u64| {
            serde_json::json!({
                "load": {"kind": "rate", "rate": 50, "arrival": "gamma", "burstiness": 0.5, "seed": seed},
                "stop": {"requests": 100},
            })
        };
        assert_eq!(of(v(3)), of(v(3)));
        assert_ne!(of(v(3)), of(v(4)));
    }

    #[test]
    fn a_linear_ramp_sends_its_integral_and_denser_at_the_end() {
        let s = of(serde_json::json!({
            "load": {"kind": "ramp", "arrival": "constant", "ramp": {"from": 10, "to": 50, "over": "10s"}},
        }));
        // ∫ = (10 + 50) / 2 * 10 = 300 arrivals (the first at 0).
        assert!((s.len() as i64 - 301).abs() <= 1, "{}", s.len());
        let first_second = s.iter().filter(|r| r.at_s < 1.0).count();
        let last_second = s.iter().filter(|r| r.at_s >= 9.0).count();
        assert!((first_second as i64 - 12).abs() <= 1, "{first_second}");
        assert!((last_second as i64 - 48).abs() <= 1, "{last_second}");
    }

    #[test]
    fn a_stepped_ramp_holds_each_rate() {
        let s = of(serde_json::json!({
            "load": {"kind": "ramp", "arrival": "constant", "ramp": {"from": 10, "to": 30, "over": "3s", "steps": 3}},
        }));
        let in_step = |k: f64| s.iter().filter(|r| r.at_s >= k && r.at_s < k + 1.0).count();
        assert_eq!((in_step(0.0), in_step(1.0), in_step(2.0)), (10, 20, 30));
    }

    #[test]
    fn a_trace_replays_its_times_scaled_with_output_lengths() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("t.jsonl"),
            "{\"at\": 10}\n{\"at\": 12, \"output_tokens\": 9}\n{\"at\": 11}\n",
        )
        .unwrap();
        let s = Schedule::of(
            &exp(serde_json::json!({
                "load": {"kind": "trace", "trace": {"file": "t.jsonl", "time_scale": 0.5}},
            })),
            dir.path(),
        )
        .unwrap()
        .iter()
        .collect::<Vec<_>>();
        let at: Vec<f64> = s.iter().map(|r| r.at_s).collect();
        assert_eq!(at, [0.0, 0.5, 1.0]);
        assert_eq!(s[2].max_tokens, Some(9));
    }

    #[test]
    fn a_schedule_past_a_week_is_refused_before_it_starts() {
        let dir = tempfile::tempdir().unwrap();
        // A wild timestamp 1e19 s after the first: it once panicked the pacer mid-point.
        std::fs::write(dir.path().join("t.jsonl"), "{\"at\": 0}\n{\"at\": 1e19}\n").unwrap();
        let trace = exp(serde_json::json!({
            "load": {"kind": "trace", "trace": {"file": "t.jsonl"}},
        }));
        let e = Schedule::of(&trace, dir.path()).unwrap_err();
        assert!(
            matches!(
                e,
                ScheduleError::TooLate {
                    index: 1,
                    traced: true,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("cut the trace"), "{e}");
        // A stop of 100,000,000 hours is refused by its value, before any arrival is made.
        let long = exp(serde_json::json!({
            "load": {"kind": "rate", "rate": 1},
            "stop": {"duration": "100000000h"},
        }));
        let e = Schedule::of(&long, Path::new(".")).unwrap_err();
        assert!(
            matches!(
                e,
                ScheduleError::PhaseTooLong {
                    field: "stop.duration",
                    ..
                }
            ),
            "{e}"
        );
        // At a slow rate, requests a day apart: the eighth is past a week.
        let slow = exp(serde_json::json!({
            "load": {"kind": "rate", "rate": 0.0000115, "arrival": "constant"},
            "stop": {"requests": 20},
        }));
        let e = Schedule::of(&slow, Path::new(".")).unwrap_err();
        assert!(
            matches!(
                e,
                ScheduleError::TooLate {
                    index: 7,
                    traced: false,
                    ..
                }
            ),
            "{e}"
        );
    }

    /// Kolmogorov-Smirnov distance of `gaps` from an exponential distribution of `rate`.
    fn ks_exponential(gaps: &mut [f64], rate: f64) -> f64 {
        gaps.sort_by(f64::total_cmp);
        let n = gaps.len() as f64;
        gaps.iter()
            .enumerate()
            .map(|(i, g)| {
                let f = 1.0 - (-rate * g).exp();
                (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
            })
            .fold(0.0, f64::max)
    }

    fn gaps(arrival: &str) -> Vec<f64> {
        let s = of(serde_json::json!({
            "load": {"kind": "rate", "rate": 100, "arrival": arrival, "burstiness": 4, "seed": 11},
            "stop": {"requests": 2000},
        }));
        s.windows(2).map(|w| w[1].at_s - w[0].at_s).collect()
    }

    #[test]
    fn poisson_gaps_pass_a_kolmogorov_smirnov_test_and_others_fail_it() {
        // Critical value at alpha = 0.01 for n = 1999: 1.628 / sqrt(n) = 0.0364.
        let critical = 1.628 / (1999f64).sqrt();
        let d = ks_exponential(&mut gaps("poisson"), 100.0);
        assert!(d < critical, "poisson: D = {d}");
        let mean = gaps("poisson").iter().sum::<f64>() / 1999.0;
        assert!((mean - 0.01).abs() < 0.001, "mean gap {mean}");
        // The same test rejects evenly spaced and gamma(4) gaps of the same mean.
        assert!(ks_exponential(&mut gaps("constant"), 100.0) > critical);
        assert!(ks_exponential(&mut gaps("gamma"), 100.0) > critical);
    }
}
