//! A point's system-wide numbers (throughputs over the measured window, concurrency, goodput)
//! and its SLO verdict, from its measured request records. Pure, like `summary`.
//!
//! Under `load:`, a request's latency to the user counts from its scheduled send time, so the
//! client's lag (and a wait for a slot under `max_in_flight`) is in `ttft_sched_s` and
//! `e2e_sched_s`; `ttft_s` and `e2e_s` keep counting from the last byte written. SLOs judge the
//! scheduled ones (what a user arriving on schedule saw). Closed-loop points have no schedule:
//! their SLO is judged from the send.

use indexmap::IndexMap;

use servebench_model::catalog::{FlagKind, Metric};
use servebench_model::results::records::{
    Flag, LoadSummary, RequestRecord, SloCheck, SloVerdict, Stat,
};
use servebench_model::spec::load_model::{LoadSpec, SloMetric, SloSpec, SloTarget};
use servebench_model::spec::types::Experiment;

use super::metrics::request_metrics;
use super::samples::Samples;
use super::stats::seed_for;
use super::timeline::Timeline;

/// What the runner observed besides the records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Recorded warm-up and cool-down requests.
    pub warmup: usize,
    pub cooldown: usize,
    /// Requests/s the schedule offered over the measured phase.
    pub offered_req_s: Option<f64>,
    /// The client's CPU time / wall time during the point (1.0 = one core).
    pub client_cpu: Option<f64>,
    /// `stop.errors` ended the point.
    pub stopped_on_errors: bool,
    /// Warm-up and cool-down requests finished while `/metrics` was scraped: the server's
    /// counters include them.
    pub unmeasured: super::server_view::Finished,
}

/// One request's latencies as the load metrics see them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Judged {
    pub ok: bool,
    /// From the scheduled time under `load:`, else from the send.
    pub ttft_s: Option<f64>,
    /// The first answer token, from the same origin as `ttft_s`.
    pub ttfa_s: Option<f64>,
    pub e2e_s: Option<f64>,
    pub tpot_s: Option<f64>,
    pub lag_s: Option<f64>,
}

/// The latencies of `r` whose metrics are `m`.
fn judged(r: &RequestRecord, m: &super::metrics::RequestMetrics) -> Judged {
    let lag = r.lag_s.unwrap_or(0.0);
    Judged {
        ok: r.error.is_none(),
        ttft_s: m.ttft_s.map(|t| t + lag),
        ttfa_s: m.ttfa_s.map(|t| t + lag),
        e2e_s: r.end_s.map(|e| e + lag),
        tpot_s: m.tpot_s,
        lag_s: r.lag_s,
    }
}

/// True when `j` meets every per-request threshold of `slo` (a failed request never does).
pub(crate) fn is_good(j: &Judged, slo: &SloSpec) -> bool {
    let within = |v: Option<f64>, limit: Option<std::time::Duration>| match limit {
        None => true,
        Some(l) => v.is_some_and(|v| v <= l.as_secs_f64()),
    };
    j.ok && within(j.ttft_s, slo.ttft)
        && within(j.ttfa_s, slo.ttfa)
        && within(j.tpot_s, slo.tpot)
        && within(j.e2e_s, slo.e2e)
}

/// System metrics (for `load:` points), SLO metrics (with `slo:`), extra percentiles and the
/// flags they imply, added to `metrics`. Returns the point's load summary (None for a closed
/// loop without `slo:`). The same as folding each record into a [`SystemFold`].
pub fn add(
    exp: &Experiment,
    measured: &[RequestRecord],
    observed: &Observed,
    metrics: &mut IndexMap<String, Stat>,
    flags: &mut Vec<Flag>,
) -> Option<LoadSummary> {
    let mut fold = SystemFold::new(exp);
    for r in measured {
        fold.add(r);
    }
    fold.finish(exp, observed, metrics, flags)
}

/// A point's system metrics built one measured record at a time, in memory bounded by the
/// caps of [`Samples`] and [`Timeline`], whatever the number of requests: per-request
/// distributions, the window, token and request counts, the timeline, the SLO's counts.
///
/// Every streamed point gets its throughputs (requests and tokens per second), open or closed
/// loop; the rest (distributions from the schedule, the timeline, the SLO) only `load:` points
/// and points with `slo:`.
#[derive(Debug, Clone)]
pub struct SystemFold {
    /// Whether the point has throughputs (every point but a two-point one, whose pairs run
    /// one at a time with a flush between: nothing a server sustains).
    counted: bool,
    /// Whether the point has the rest of the system metrics (`load:` or `slo:`).
    active: bool,
    /// The point's SLO, which judges each request as it comes.
    slo: Option<SloSpec>,
    /// Measured records folded.
    measured: usize,
    /// Successful ones, and their prompt and output tokens.
    done: usize,
    input_tokens: u64,
    output_tokens: u64,
    /// Requests that met every per-request SLO threshold.
    good: usize,
    /// Earliest scheduled (or sent) time and latest end, unix seconds.
    start: f64,
    end: f64,
    /// The same per round of a closed loop (`repeat`: flushes and calibration between rounds
    /// are no part of any window), with what it completed.
    rounds: Vec<RoundWindow>,
    /// Successful requests with inter-token gaps (what an ITL target is judged on).
    itl_requests: usize,
    /// Successful requests' latencies from the schedule (from the send in a closed loop).
    ttft_sched: Samples,
    /// The first answer token's, from the same origin (requests that answered).
    ttfa_sched: Samples,
    /// Successful requests judged on a first-answer target (those that never answered count
    /// as beyond any limit).
    ttfa_judged: usize,
    e2e_sched: Samples,
    /// Every measured request's schedule lag.
    lag: Samples,
    /// Successful requests' TPOT, ITL (every gap), and TTFT and E2E from the send.
    tpot: Samples,
    itl: Samples,
    ttft_sent: Samples,
    e2e_sent: Samples,
    timeline: Timeline,
}

impl SystemFold {
    pub(crate) fn new(exp: &Experiment) -> SystemFold {
        SystemFold::with_caps(
            exp,
            super::samples::EXACT_CAP,
            super::timeline::EXACT_EVENTS,
        )
    }

    /// Like [`new`](Self::new), keeping `values` of each distribution and `events` of the
    /// timeline exactly (tests pass small ones).
    pub(crate) fn with_caps(exp: &Experiment, values: usize, events: usize) -> SystemFold {
        let samples = || Samples::with_cap(values);
        SystemFold {
            counted: !matches!(
                exp.method.resolve(),
                servebench_model::spec::types::Measure::TwoPoint { .. }
            ),
            active: exp.open_loop().is_some() || exp.slo.is_some(),
            slo: exp.slo.clone(),
            measured: 0,
            done: 0,
            input_tokens: 0,
            output_tokens: 0,
            good: 0,
            start: f64::INFINITY,
            end: f64::NEG_INFINITY,
            rounds: Vec::new(),
            itl_requests: 0,
            ttft_sched: samples(),
            ttfa_sched: samples(),
            ttfa_judged: 0,
            e2e_sched: samples(),
            lag: samples(),
            tpot: samples(),
            itl: samples(),
            ttft_sent: samples(),
            e2e_sent: samples(),
            timeline: Timeline::with_cap(events),
        }
    }

    /// Folds one measured record in.
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        if !self.counted && !self.active {
            return;
        }
        self.measured += 1;
        let begin = r.scheduled_at.unwrap_or(r.sent_at).min(r.sent_at);
        self.start = self.start.min(begin);
        let end = r.end_s.map(|e| r.sent_at + e);
        if let Some(end) = end {
            self.end = self.end.max(end);
        }
        let i = match self.rounds.iter().position(|w| w.round == r.round) {
            Some(i) => i,
            None => {
                self.rounds.push(RoundWindow {
                    round: r.round,
                    start: begin,
                    end: f64::NEG_INFINITY,
                    counts: [0.0; 4],
                });
                self.rounds.len() - 1
            }
        };
        let w = &mut self.rounds[i];
        w.start = w.start.min(begin);
        w.end = end.map_or(w.end, |e| w.end.max(e));
        if r.error.is_none() {
            self.done += 1;
            let (input, output) = (
                r.prompt_tokens.unwrap_or(0),
                r.completion_tokens.unwrap_or(0),
            );
            self.input_tokens += input;
            self.output_tokens += output;
            let (input, output) = (input as f64, output as f64);
            for (c, x) in w
                .counts
                .iter_mut()
                .zip([1.0, input, output, input + output])
            {
                *c += x;
            }
        }
        if !self.active {
            return;
        }
        let order = super::metrics::order_key(r);
        let m = request_metrics(r);
        let j = judged(r, &m);
        self.good += usize::from(self.slo.as_ref().is_some_and(|slo| is_good(&j, slo)));
        if let Some(e) = r.end_s {
            self.timeline.span(order, r.sent_at, e);
        }
        if let Some(l) = j.lag_s {
            self.lag.push(order, 0, &[l]);
        }
        if !j.ok {
            return;
        }
        self.itl_requests += usize::from(!m.itl_s.is_empty());
        for c in &r.chunks {
            self.timeline.tokens(r.sent_at + c.t_s, c.tokens);
        }
        let one = |s: &mut Samples, v: Option<f64>| {
            if let Some(v) = v {
                s.push(order, 0, &[v]);
            }
        };
        one(&mut self.ttft_sched, j.ttft_s);
        // A request that never answered is judged too: beyond any first-answer limit.
        if m.ttft_s.is_some() {
            self.ttfa_judged += 1;
            one(&mut self.ttfa_sched, j.ttfa_s);
        }
        one(&mut self.e2e_sched, j.e2e_s);
        one(&mut self.tpot, j.tpot_s);
        one(&mut self.ttft_sent, m.ttft_s);
        one(&mut self.e2e_sent, r.end_s);
        self.itl.push(order, 0, &m.itl_s);
    }

    /// The measured window: from the first request's scheduled (or sent) time to the last
    /// one's end.
    fn window(&self) -> Option<(f64, f64)> {
        (self.measured > 0 && self.end > self.start).then_some((self.start, self.end))
    }

    /// The measured windows with what each completed: the one window of an open loop (round
    /// None: it spans every round), or each round's of a closed loop (what the GPU telemetry's
    /// energy is integrated over).
    pub fn measured_windows(&self, open_loop: bool) -> Vec<MeasuredWindow> {
        if open_loop {
            return self
                .window()
                .map(|(start, end)| MeasuredWindow {
                    round: None,
                    start,
                    end,
                    requests: self.done as f64,
                    input_tokens: self.input_tokens as f64,
                    output_tokens: self.output_tokens as f64,
                })
                .into_iter()
                .collect();
        }
        self.rounds
            .iter()
            .filter(|w| w.span().is_some())
            .map(|w| MeasuredWindow {
                round: Some(w.round),
                start: w.start,
                end: w.end,
                requests: w.counts[0],
                input_tokens: w.counts[1],
                output_tokens: w.counts[2],
            })
            .collect()
    }

    /// Seconds the throughputs divide by: the measured window of an open loop; of a closed
    /// loop, each round's from its first send to its last end, summed (what runs between
    /// rounds, a flush or a calibration, is no load the server served).
    fn span(&self, open_loop: bool) -> Option<f64> {
        if open_loop {
            return self.window().map(|(a, b)| b - a);
        }
        let total: f64 = self.rounds.iter().filter_map(RoundWindow::span).sum();
        (self.measured > 0 && total > 0.0).then_some(total)
    }

    /// Requests/s, input, output and total tok/s over `span` (any point but a two-point one).
    /// A closed loop of three rounds or more gets each rate per round, their mean and its 95%
    /// interval (Student's t over the rounds, as for latencies): rounds vary as reruns do, so
    /// `compare` can judge a throughput change.
    fn put_throughputs(&self, span: f64, open_loop: bool, metrics: &mut IndexMap<String, Stat>) {
        let (input, output) = (self.input_tokens as f64, self.output_tokens as f64);
        let rounds: Vec<(f64, [f64; 4])> = self
            .rounds
            .iter()
            .filter_map(|w| Some((w.span()?, w.counts)))
            .collect();
        let by_round = !open_loop && rounds.len() >= super::stats::MIN_ROUNDS_FOR_T;
        for (k, (m, x)) in [
            (Metric::ThroughputReq, self.done as f64),
            (Metric::InputTok, input),
            (Metric::OutputTok, output),
            (Metric::TotalTok, input + output),
        ]
        .into_iter()
        .enumerate()
        {
            let stat = if by_round {
                let rates: Vec<f64> = rounds.iter().map(|(s, c)| c[k] / s).collect();
                per_round(&rates).unwrap_or_else(|| single(x / span))
            } else {
                single(x / span)
            };
            metrics.insert(m.name().to_string(), stat);
        }
    }

    /// The system metrics, SLO metrics and flags (see [`add`]) added to `metrics` and `flags`.
    pub fn finish(
        &self,
        exp: &Experiment,
        observed: &Observed,
        metrics: &mut IndexMap<String, Stat>,
        flags: &mut Vec<Flag>,
    ) -> Option<LoadSummary> {
        let load = exp.open_loop();
        let span = self.span(load.is_some());
        if self.counted
            && let Some(span) = span
        {
            self.put_throughputs(span, load.is_some(), metrics);
        }
        if !self.active {
            return None;
        }
        let mut summary = LoadSummary {
            kind: load.map_or("closed".into(), |l| l.kind().to_string()),
            offered_req_s: observed.offered_req_s,
            arrival: load
                .and_then(LoadSpec::arrivals)
                .map(|a| a.arrival.to_string()),
            window_s: span.unwrap_or(0.0),
            warmup: observed.warmup,
            measured: self.measured,
            cooldown: observed.cooldown,
            latency_origin: if load.is_some() { "scheduled" } else { "sent" }.into(),
            stopped_on_errors: observed.stopped_on_errors,
            ..LoadSummary::default()
        };
        if let Some(load) = load {
            self.put_open_loop(load, observed, metrics, flags);
        }
        if let Some(slo) = &exp.slo {
            summary.slo = Some(self.put_slo(slo, span, metrics, flags));
        }
        summary.percentiles = self.percentiles(&exp.percentiles, load.is_some());
        Some(summary)
    }

    /// An open-loop point's latencies from the schedule, its schedule lag, peak output and
    /// concurrency over the window, the client's CPU; flagged `client-limited` when the
    /// client sent late beyond the load's `lag_limit`.
    fn put_open_loop(
        &self,
        load: &LoadSpec,
        observed: &Observed,
        metrics: &mut IndexMap<String, Stat>,
        flags: &mut Vec<Flag>,
    ) {
        for (m, samples) in [
            (Metric::TtftFromSchedule, &self.ttft_sched),
            (Metric::E2eFromSchedule, &self.e2e_sched),
            (Metric::ScheduleLag, &self.lag),
        ] {
            put(metrics, m, samples.stat(seed_for(m.name())));
        }
        if let Some((start, end)) = self.window() {
            let span = end - start;
            let (peak, slots) = self.timeline.peak_output(start, span);
            put(metrics, Metric::PeakOutputTok, Some(estimated(peak, slots)));
            put(
                metrics,
                Metric::ConcurrencyMean,
                Some(single(self.timeline.busy_s() / span)),
            );
            let (most, slots) = self.timeline.max_in_flight();
            put(
                metrics,
                Metric::ConcurrencyMax,
                Some(estimated(most as f64, slots)),
            );
        }
        if let Some(cpu) = observed.client_cpu {
            put(metrics, Metric::ClientCpu, Some(single(cpu)));
        }
        let limit = load.open_loop().map_or(0.0, |o| o.lag_limit.as_secs_f64());
        if let Some(lag) = metrics.get(Metric::ScheduleLag.name())
            && lag.p99 > limit
        {
            flags.push(Flag::new(
                FlagKind::ClientLimited,
                format!(
                    "the client sent its requests late: schedule lag p99 {} ms (max {} ms) is above the {} ms limit, so latencies here describe the client as much as the server{}",
                    servebench_model::text::sig3(lag.p99 * 1e3),
                    servebench_model::text::sig3(lag.max * 1e3),
                    servebench_model::text::sig3(limit * 1e3),
                    observed
                        .client_cpu
                        .map(|c| format!(" (client CPU {c:.2} cores)"))
                        .unwrap_or_default()
                ),
            ));
        }
    }

    /// The SLO's attainment and goodput (over `span`, seconds) when it has thresholds, its
    /// verdict, and the flags for targets missed or judged on too few requests.
    fn put_slo(
        &self,
        slo: &SloSpec,
        span: Option<f64>,
        metrics: &mut IndexMap<String, Stat>,
        flags: &mut Vec<Flag>,
    ) -> SloVerdict {
        let (good, judged) = (self.good, self.measured);
        if slo.has_thresholds() && judged > 0 {
            put(
                metrics,
                Metric::SloAttainment,
                Some(single(good as f64 / judged as f64)),
            );
            if let Some(span) = span {
                put(metrics, Metric::Goodput, Some(single(good as f64 / span)));
            }
        }
        let verdict = self.verdict(slo);
        let missed: Vec<String> = verdict
            .checks
            .iter()
            .filter(|c| !c.met && !c.insufficient())
            .map(|c| c.missed_text())
            .collect();
        if !missed.is_empty() {
            flags.push(Flag::new(
                FlagKind::SloMissed,
                format!("the point misses its SLO targets: {}", missed.join(", ")),
            ));
        }
        let unjudged: Vec<String> = verdict.unjudged().map(|c| c.unjudged_text()).collect();
        if !unjudged.is_empty() {
            flags.push(Flag::new(
                FlagKind::SloUnjudged,
                format!("SLO targets with too few requests: {}", unjudged.join("; ")),
            ));
        }
        verdict
    }

    /// Point-level targets, each with what the point reached.
    fn verdict(&self, slo: &SloSpec) -> SloVerdict {
        let (good, judged) = (self.good, self.measured);
        let mut checks = Vec::new();
        for (name, target) in slo.parsed_targets() {
            let needed = min_samples(&target);
            let (limit, value, held, samples) = match target {
                SloTarget::Attainment(share) => {
                    let value = (judged > 0).then(|| good as f64 / judged as f64);
                    (
                        share,
                        value,
                        value.is_some_and(|v| v + 1e-12 >= share),
                        judged,
                    )
                }
                SloTarget::Percentile {
                    metric,
                    percentile,
                    limit_s,
                } => {
                    let values = self.slo_values(metric);
                    let value = match metric {
                        SloMetric::Ttfa => self.ttfa_percentile(percentile),
                        _ => (!values.is_empty()).then(|| values.percentile(percentile)),
                    };
                    let samples = match metric {
                        // Gaps within one request are not independent: count the requests.
                        SloMetric::Itl => self.itl_requests,
                        SloMetric::Ttfa => self.ttfa_judged,
                        _ => values.finite_count(),
                    };
                    (limit_s, value, value.is_some_and(|v| v <= limit_s), samples)
                }
            };
            checks.push(SloCheck {
                target: name,
                limit,
                value,
                met: held && samples >= needed,
                samples,
                needed,
            });
        }
        SloVerdict {
            met: checks.iter().all(|c| c.met),
            good,
            judged,
            checks,
        }
    }

    /// The first answer token's `percentile` over every request that had a first token,
    /// those that never answered ranked beyond all the others: the answered ones' percentile
    /// at the rank it falls on among them, or None when it falls on an unanswered one.
    fn ttfa_percentile(&self, percentile: f64) -> Option<f64> {
        let answered = self.ttfa_sched.finite_count();
        if answered == 0 {
            return None;
        }
        let rank = percentile * self.ttfa_judged as f64 / answered as f64;
        (rank <= 100.0).then(|| self.ttfa_sched.percentile(rank))
    }

    fn slo_values(&self, metric: SloMetric) -> &Samples {
        match metric {
            SloMetric::Ttft => &self.ttft_sched,
            SloMetric::Ttfa => &self.ttfa_sched,
            SloMetric::Tpot => &self.tpot,
            SloMetric::E2e => &self.e2e_sched,
            SloMetric::Itl => &self.itl,
        }
    }

    /// The percentiles `percentiles:` asks for, per latency metric.
    fn percentiles(&self, wanted: &[f64], load: bool) -> IndexMap<String, IndexMap<String, f64>> {
        let mut columns: Vec<(Metric, &Samples)> = vec![
            (Metric::Ttft, &self.ttft_sent),
            (Metric::Tpot, &self.tpot),
            (Metric::Itl, &self.itl),
            (Metric::E2e, &self.e2e_sent),
        ];
        if load {
            columns.push((Metric::TtftFromSchedule, &self.ttft_sched));
            columns.push((Metric::E2eFromSchedule, &self.e2e_sched));
            columns.push((Metric::ScheduleLag, &self.lag));
        }
        let mut out = IndexMap::new();
        for (metric, values) in columns {
            if values.finite_count() == 0 {
                continue;
            }
            let row: IndexMap<String, f64> = wanted
                .iter()
                .map(|q| (percentile_name(*q), values.percentile(*q)))
                .collect();
            out.insert(metric.name().to_string(), row);
        }
        out
    }
}

/// The rule [`min_samples`] applies, in words (the report and the flag state it).
pub const MIN_SAMPLES_RULE: &str = "a pQ target is judged on at least 100 / (100 - Q) measured requests (p50: 2, p90: 10, p99: 100, p99.9: 1,000), so that at least one lies beyond the percentile (with fewer, the pQ is the sample's maximum or an interpolation towards it); an attainment target of a share s on at least 1 / (1 - s) (95%: 20)";

/// The fewest measured values `target` is judged on ([`MIN_SAMPLES_RULE`]): a pQ on
/// ceil(100 / (100 - Q)), an attainment of share s on ceil(1 / (1 - s)) (1 for 100%).
pub(crate) fn min_samples(target: &SloTarget) -> usize {
    let tail = match target {
        SloTarget::Percentile { percentile, .. } => 1.0 - percentile / 100.0,
        SloTarget::Attainment(share) => 1.0 - share,
    };
    if tail <= 1e-9 {
        return 1;
    }
    // The epsilon keeps 100 / (100 - 99) at 100, not 101 from rounding.
    ((1.0 / tail) - 1e-6).ceil().max(1.0) as usize
}

/// The fewest measured requests every target of `slo` is judged on (1 without targets).
pub fn min_requests(slo: &SloSpec) -> usize {
    slo.parsed_targets()
        .iter()
        .map(|(_, t)| min_samples(t))
        .max()
        .unwrap_or(1)
}

/// `99.9` -> `p99.9`, `50` -> `p50`.
pub(crate) fn percentile_name(q: f64) -> String {
    if q.fract() == 0.0 {
        format!("p{q:.0}")
    } else {
        format!("p{q}")
    }
}

/// A measured window (unix seconds) and its successful requests and their tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredWindow {
    /// The closed-loop round it is; None for an open loop's one window.
    pub round: Option<u32>,
    pub start: f64,
    pub end: f64,
    pub requests: f64,
    pub input_tokens: f64,
    pub output_tokens: f64,
}

/// One closed-loop round's window and what it completed.
#[derive(Debug, Clone, Copy)]
struct RoundWindow {
    round: u32,
    /// Earliest send and latest end, unix seconds.
    start: f64,
    end: f64,
    /// Successful requests, their prompt, output and total tokens.
    counts: [f64; 4],
}

impl RoundWindow {
    fn span(&self) -> Option<f64> {
        (self.end > self.start).then_some(self.end - self.start)
    }
}

/// A rate measured once per round: the mean of the rounds' values with Student's t interval.
fn per_round(rates: &[f64]) -> Option<Stat> {
    let rounds: std::collections::BTreeMap<u32, (f64, usize)> = rates
        .iter()
        .enumerate()
        .map(|(i, r)| (i as u32, (*r, 1)))
        .collect();
    let (low, high) = super::stats::round_t_from(&rounds)?;
    let mut stat = super::stats::summarize(rates)?;
    stat.ci95_low = Some(low);
    stat.ci95_high = Some(high);
    stat.ci_method = Some(servebench_model::results::records::CiMethod::Repeats);
    Some(stat)
}

/// Inserts `m`'s stat into `metrics` when there is one.
fn put(metrics: &mut IndexMap<String, Stat>, m: Metric, s: Option<Stat>) {
    if let Some(s) = s {
        metrics.insert(m.name().to_string(), s);
    }
}

/// A point-level number (one value per point: throughputs, goodput, the GPU's energy).
pub(super) fn single(x: f64) -> Stat {
    Stat {
        count: 1,
        mean: x,
        p50: x,
        p90: x,
        p99: x,
        min: x,
        max: x,
        ..Stat::default()
    }
}

/// A point-level number from the timeline, marked when it came from slots.
fn estimated(x: f64, slots: bool) -> Stat {
    Stat {
        estimate: slots.then_some(servebench_model::results::records::Estimate::Slots),
        ..single(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::{Chunk, RequestError};
    use servebench_model::spec::load_model::SloMetric;

    /// A measured request scheduled at `sched`, sent `lag` later, first token `ttft` after the
    /// send, done `e2e` after it, with 11 output tokens (TPOT = (e2e - ttft) / 10).
    fn rec(sched: f64, lag: f64, ttft: f64, e2e: f64, failed: bool) -> RequestRecord {
        let sent = 1000.0 + sched + lag;
        RequestRecord {
            sent_at: sent,
            scheduled_at: Some(1000.0 + sched),
            max_tokens: 11,
            chunks: vec![Chunk::new(ttft, 1), Chunk::new(e2e, 10)],
            end_s: Some(e2e),
            prompt_tokens: Some(100),
            completion_tokens: Some(11),
            cached_tokens: Some(0),
            finish_reason: Some("length".into()),
            error: failed.then(|| RequestError {
                kind: servebench_model::results::records::ErrorKind::Http,
                message: "500".into(),
                status: Some(500),
                body_head: None,
            }),
            phase: Some(servebench_model::results::records::Phase::Measure),
            lag_s: Some(lag),
            ..RequestRecord::fixture()
        }
    }

    fn exp() -> Experiment {
        serde_json::from_value(serde_json::json!({
            "name": "t",
            "server": {"engine": "sim"},
            "workload": {"prompt": {"kind": "repeat", "tokens": 100}, "output_tokens": 11},
            "load": {"kind": "rate", "rate": 1},
            "stop": {"requests": 5},
            "slo": {"ttft": "0.5s", "tpot": "0.1s", "targets": {"ttft_p50": "0.4s", "attainment": "50%"}},
        }))
        .unwrap()
    }

    /// A thinking model's SLO on the first answer token: judged from the schedule, a request
    /// that thought until it ran out of tokens misses any limit, and a percentile that falls
    /// on such a request is not reached.
    #[test]
    fn the_first_answer_slo_counts_a_request_that_never_answered_as_missing_it() {
        // Thinking `think` of 11 tokens, first token at 0.1 s after the send (lag 0.1),
        // answer from 0.1 + 0.05 * think; `think` 11 never answers.
        let thinking = |sched: f64, think: u32| {
            let mut r = rec(sched, 0.1, 0.1, 1.0, false);
            r.chunks = (0..11)
                .map(|i| {
                    let mut c = Chunk::new(0.1 + 0.05 * f64::from(i), 1);
                    c.reasoning = u32::from(i < think);
                    c
                })
                .collect();
            r.reasoning_tokens = Some(u64::from(think));
            if think >= 11 {
                r.no_answer =
                    Some(servebench_model::results::records::NoAnswer::OutOfTokensWhileThinking);
            }
            r
        };
        let records = [
            thinking(0.0, 2),
            thinking(1.0, 4),
            thinking(2.0, 11),
            thinking(3.0, 0),
        ];
        let exp: Experiment = serde_json::from_value(serde_json::json!({
            "name": "t",
            "server": {"engine": "sim"},
            "workload": {"prompt": {"kind": "repeat", "tokens": 100}, "output_tokens": 11},
            "load": {"kind": "rate", "rate": 1},
            "stop": {"requests": 4},
            "slo": {"ttfa": "0.35s", "targets": {"ttfa_p50": "0.5s", "ttfa_p90": "0.5s"}},
        }))
        .unwrap();
        let mut metrics = IndexMap::new();
        let mut flags = Vec::new();
        let summary = add(
            &exp,
            &records,
            &Observed::default(),
            &mut metrics,
            &mut flags,
        )
        .unwrap();
        // From the schedule (lag 0.1): 0.3, 0.4, none, 0.2: two of four within 0.35 s.
        assert!(
            (metrics["slo_attainment"].mean - 0.5).abs() < 1e-9,
            "{metrics:?}"
        );
        let slo = summary.slo.unwrap();
        let p50 = slo.checks.iter().find(|c| c.target == "ttfa_p50").unwrap();
        // The p50 of [0.2, 0.3, 0.4, never]: the answered ones' p66.7, 0.333 s.
        assert!(
            (p50.value.unwrap() - (0.3 + 0.1 / 3.0)).abs() < 1e-9,
            "{p50:?}"
        );
        assert!(p50.met);
        // The p90 falls on the request that never answered: not reached.
        let p90 = slo.checks.iter().find(|c| c.target == "ttfa_p90").unwrap();
        assert_eq!((p90.value, p90.met), (None, false));
    }

    #[test]
    fn goodput_and_attainment_by_hand() {
        let records = [
            // good: TTFT from schedule 0.1 + 0.2 = 0.3, TPOT (1.0 - 0.2) / 10 = 0.08.
            rec(0.0, 0.1, 0.2, 1.0, false),
            // TTFT from the send 0.3 meets 0.5, but from the schedule (lag 0.3) 0.6 does not.
            rec(1.0, 0.3, 0.3, 1.0, false),
            // TPOT (2.2 - 0.2) / 10 = 0.2 > 0.1.
            rec(2.0, 0.0, 0.2, 2.2, false),
            // good: 0.0 + 0.4 = 0.4, TPOT 0.06.
            rec(3.0, 0.0, 0.4, 1.0, false),
            // failed: never good.
            rec(4.0, 0.0, 0.1, 0.5, true),
        ];
        let mut metrics = IndexMap::new();
        let mut flags = Vec::new();
        let summary = add(
            &exp(),
            &records,
            &Observed::default(),
            &mut metrics,
            &mut flags,
        )
        .unwrap();
        // Window: first scheduled 1000.0 to the last end: 1000 + 2 + 2.2 = 1004.2 (the failed
        // request ends at 1004.5 but has an end too: it counts for the window's end).
        let window = 4.5;
        assert!(
            (summary.window_s - window).abs() < 1e-9,
            "{}",
            summary.window_s
        );
        let good = 2.0;
        assert!((metrics["goodput_req_s"].mean - good / window).abs() < 1e-9);
        assert!((metrics["slo_attainment"].mean - 0.4).abs() < 1e-9);
        assert!((metrics["throughput_req_s"].mean - 4.0 / window).abs() < 1e-9);
        assert!((metrics["output_tok_s"].mean - 44.0 / window).abs() < 1e-9);
        // TTFT from the schedule of the four successful ones: 0.3, 0.6, 0.2, 0.4: p50 = 0.35.
        assert!((metrics["ttft_sched_s"].p50 - 0.35).abs() < 1e-9);
        let v = summary.slo.unwrap();
        assert_eq!((v.good, v.judged), (2, 5));
        // ttft_p50 0.35 <= 0.4 holds; attainment 40% < 50% fails.
        assert!(v.checks[0].met && !v.checks[1].met && !v.met);
        let missed = flags
            .iter()
            .find(|f| f.kind == FlagKind::SloMissed)
            .expect("slo-missed");
        assert!(
            missed.message.ends_with("attainment 0.400 < 0.500"),
            "{}",
            missed.message
        );
        // Lag p99 of [0.1, 0.3, 0, 0, 0] is far above the 10 ms default.
        assert!(flags.iter().any(|f| f.kind == FlagKind::ClientLimited));
    }

    #[test]
    fn a_percentile_is_judged_on_enough_requests_only() {
        let pct = |q: f64| SloTarget::Percentile {
            metric: SloMetric::Ttft,
            percentile: q,
            limit_s: 1.0,
        };
        assert_eq!(min_samples(&pct(50.0)), 2);
        assert_eq!(min_samples(&pct(90.0)), 10);
        assert_eq!(min_samples(&pct(99.0)), 100);
        assert_eq!(min_samples(&pct(99.9)), 1000);
        assert_eq!(min_samples(&SloTarget::Attainment(0.95)), 20);
        assert_eq!(min_samples(&SloTarget::Attainment(1.0)), 1);
        // Five requests that all meet a p99 target: not judged, so not met, and said so.
        let mut e = exp();
        e.slo = Some(
            serde_json::from_value(serde_json::json!({"targets": {"ttft_p99": "10s"}})).unwrap(),
        );
        let records: Vec<RequestRecord> = (0..5)
            .map(|i| rec(i as f64, 0.0, 0.1, 0.5, false))
            .collect();
        let mut metrics = IndexMap::new();
        let mut flags = Vec::new();
        let summary = add(&e, &records, &Observed::default(), &mut metrics, &mut flags).unwrap();
        let v = summary.slo.unwrap();
        let check = &v.checks[0];
        assert_eq!((check.samples, check.needed), (5, 100));
        assert!(check.insufficient() && !check.met && !v.met, "{v:?}");
        assert!(
            check.value.is_some_and(|x| x <= 10.0),
            "the value itself held"
        );
        assert!(
            !flags.iter().any(|f| f.kind == FlagKind::SloMissed),
            "{flags:?}"
        );
        let unjudged = flags
            .iter()
            .find(|f| f.kind == FlagKind::SloUnjudged)
            .expect("slo-unjudged");
        assert!(
            unjudged
                .message
                .contains("ttft_p99 not judged: 5 measured values, a p99 needs at least 100"),
            "{}",
            unjudged.message
        );
    }

    /// A closed loop without `slo:` has throughputs too: over each round's own window, so the
    /// gap between rounds (a flush) is not counted as time the server served nothing.
    #[test]
    fn a_closed_loop_has_throughput_over_its_rounds_windows() {
        let e: Experiment = serde_json::from_value(serde_json::json!({
            "name": "t",
            "server": {"engine": "sim"},
            "workload": {"prompt": {"kind": "repeat", "tokens": 100}, "output_tokens": 11},
            "concurrency": 2,
            "requests": 2,
            "repeat": 2,
        }))
        .unwrap();
        // Round 0: [0, 1) and [0, 1.5); round 1, 10 s later: [10, 11) and [10.5, 11.5).
        let mut records = vec![
            rec(0.0, 0.0, 0.1, 1.0, false),
            rec(0.0, 0.0, 0.1, 1.5, false),
            rec(10.0, 0.0, 0.1, 1.0, false),
            rec(10.5, 0.0, 0.1, 1.0, false),
        ];
        for (i, r) in records.iter_mut().enumerate() {
            r.round = (i / 2) as u32;
            r.scheduled_at = None;
            r.lag_s = None;
            r.phase = None;
        }
        let mut metrics = IndexMap::new();
        let summary = add(
            &e,
            &records,
            &Observed::default(),
            &mut metrics,
            &mut Vec::new(),
        );
        assert_eq!(summary, None, "no load summary without load: or slo:");
        let span = 1.5 + 1.5;
        assert!((metrics["throughput_req_s"].mean - 4.0 / span).abs() < 1e-9);
        assert!((metrics["output_tok_s"].mean - 44.0 / span).abs() < 1e-9);
        assert!((metrics["input_tok_s"].mean - 400.0 / span).abs() < 1e-9);
        // A two-point point has none: its pairs run one at a time with a flush between.
        let mut two: Experiment = e.clone();
        two.method = serde_json::from_value(serde_json::json!("two-point")).unwrap();
        let mut metrics = IndexMap::new();
        add(
            &two,
            &records,
            &Observed::default(),
            &mut metrics,
            &mut Vec::new(),
        );
        assert!(!metrics.contains_key("throughput_req_s"), "{metrics:?}");
    }

    /// Three rounds: each round's rate, their mean and a t interval (what `compare` judges).
    #[test]
    fn closed_loop_rounds_give_throughput_an_interval() {
        let e: Experiment = serde_json::from_value(serde_json::json!({
            "name": "t",
            "server": {"engine": "sim"},
            "workload": {"prompt": {"kind": "repeat", "tokens": 100}, "output_tokens": 11},
            "requests": 2,
            "repeat": 3,
        }))
        .unwrap();
        // Two requests per round, back to back: rounds of 2 s, 1 s and 4 s -> 1, 2, 0.5 req/s.
        let mut records = Vec::new();
        for (round, (start, each)) in [(0.0, 1.0), (10.0, 0.5), (20.0, 2.0)].iter().enumerate() {
            for i in 0..2 {
                let mut r = rec(start + i as f64 * each, 0.0, 0.1, *each, false);
                r.round = round as u32;
                r.scheduled_at = None;
                r.lag_s = None;
                records.push(r);
            }
        }
        let mut metrics = IndexMap::new();
        add(
            &e,
            &records,
            &Observed::default(),
            &mut metrics,
            &mut Vec::new(),
        );
        let t = &metrics["throughput_req_s"];
        assert_eq!(t.count, 3);
        assert!((t.mean - 3.5 / 3.0).abs() < 1e-9, "{t:?}");
        assert_eq!(
            t.ci_method,
            Some(servebench_model::results::records::CiMethod::Repeats)
        );
        let (lo, hi) = (t.ci95_low.unwrap(), t.ci95_high.unwrap());
        assert!(lo < t.mean && t.mean < hi, "{t:?}");
    }

    #[test]
    fn concurrency_is_an_exact_sweep_and_littles_law() {
        // Three requests: [0, 1), [0.5, 1.5), [1, 2) -> at most 2 at once; busy 3 s over 2 s.
        let records = [
            rec(0.0, 0.0, 0.1, 1.0, false),
            rec(0.5, 0.0, 0.1, 1.0, false),
            rec(1.0, 0.0, 0.1, 1.0, false),
        ];
        let mut metrics = IndexMap::new();
        add(
            &exp(),
            &records,
            &Observed::default(),
            &mut metrics,
            &mut Vec::new(),
        );
        assert_eq!(metrics["concurrency_max"].mean, 2.0);
        assert!((metrics["concurrency_mean"].mean - 1.5).abs() < 1e-9);
    }
}
