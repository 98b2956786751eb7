//! The report's Capacity section: each capacity search's answer with its uncertainty, its
//! probes in order (value, verdict, achieved throughput, the SLO targets' values) and a chart
//! of both against the probed value. Built from `search.json` and `points.jsonl` alone.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::records::PointRecord;
use servebench_model::results::search::{SearchFile, SearchRecord};
use servebench_model::text::sig3;

use super::chart_link::ChartLink;

/// The Capacity section (None in a run without a search).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CapacitySection {
    /// One per search, in plan order.
    pub searches: Vec<CapacityView>,
    /// With several searches (a sweep of server variants: policies, prefill:decode ratios),
    /// which one serves the highest rate, in words, and whether its bracket is told apart
    /// from the runner-up's. None with fewer than two answers.
    pub best: Option<String>,
    /// With two answers or more: the chart of every search's capacity side by side
    /// (`charts/capacity-variants.svg`), the curve over the variants (policies, ratios).
    pub variants_chart: Option<ChartLink>,
}

/// The chart of several searches' answers side by side.
pub(crate) const VARIANTS_CHART: &str = "capacity-variants.svg";

/// One search as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CapacityView {
    /// Which search: the other sweep dimensions' values, or `all`.
    pub label: String,
    /// The plan point it started from.
    pub seed: String,
    /// `load.rate` or `concurrency`.
    pub over: String,
    /// The unit of the searched value (`req/s`, `in flight`).
    pub unit: String,
    pub start: f64,
    pub max: f64,
    /// Relative width of the final bracket asked for (0.05 = 5%).
    pub resolution: f64,
    /// The highest passing value (None when no probe passed).
    pub capacity: Option<f64>,
    /// `capacity` written as the probe table writes it (`—` without one).
    pub capacity_text: String,
    /// The lowest value known not to do better (None when `max` passed).
    pub above: Option<f64>,
    /// The probe where throughput stopped growing, if it did.
    pub saturated_at: Option<f64>,
    /// False when the search stopped before its answer.
    pub complete: bool,
    /// False when verdicts contradict each other (a value failed below one that passed).
    pub monotonic: bool,
    /// Each contradiction in words: `0.281 failed below 0.313 passing`.
    pub inversions: Vec<String>,
    /// The answer in words, with its uncertainty.
    pub answer: String,
    /// The SLO targets the probes were judged by, as written (`e2e_p99`).
    pub targets: Vec<String>,
    /// Each target's bound, in `targets` order (seconds; a share for attainment).
    pub limits: Vec<f64>,
    /// Requests/s the server completed over the window of the probe that set `capacity`
    /// (None without one). Short of the offered rate when the window's tail or a queue still
    /// growing at the probe's end held completions back.
    pub achieved_at_capacity: Option<f64>,
    /// A live-sessions search's answer as agents at the SLO, per GPU and per megawatt, in
    /// words, each figure with its source (None for other searches).
    pub agents: Option<String>,
    /// Every probe, in the order run.
    pub probes: Vec<ProbeRow>,
    /// The rule a probe's sample had to meet to be judged, in words.
    pub sample_rule: String,
    /// The chart of this search (`charts/capacity-<seed>.svg`), when it has two probes or more.
    pub chart: Option<ChartLink>,
}

/// One probe.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ProbeRow {
    /// From 1.
    pub probe: usize,
    /// The point's id (`p001-s3`).
    pub id: String,
    /// The value probed.
    pub value: f64,
    /// The value written with the digits that tell every probe of the search apart
    /// (`0.313`, `0.281`, `0.266`).
    pub value_text: String,
    pub passes: bool,
    /// Too few measured requests to judge a target: counted as failing, never judged.
    pub insufficient: bool,
    /// Measured requests of the probe.
    pub measured: Option<usize>,
    /// Achieved requests/s.
    pub throughput_req_s: f64,
    /// Each target's value (seconds; a share for attainment), in `targets` order; None when
    /// the point had none.
    pub slo_values: Vec<Option<f64>>,
    /// Why it does not pass (None when it passes).
    pub why: Option<String>,
}

/// `charts/capacity-p001.svg`.
pub(crate) fn chart_file(seed: &str) -> String {
    format!("capacity-{seed}.svg")
}

/// The section, when the run has searches.
pub fn section(file: Option<&SearchFile>, points: &[PointRecord]) -> Option<CapacitySection> {
    let file = file.filter(|f| !f.searches.is_empty())?;
    let searches: Vec<CapacityView> = file.searches.iter().map(|s| view(s, points)).collect();
    let answered = searches.iter().filter(|s| s.capacity.is_some()).count();
    Some(CapacitySection {
        best: best_of(&searches),
        variants_chart: (answered >= 2).then(|| ChartLink {
            title: format!("Capacity of each search ({})", searches[0].over),
            path: format!("charts/{VARIANTS_CHART}"),
        }),
        searches,
    })
}

/// Which of several searches found the highest capacity: `decode=2`, its value, the others',
/// and whether the runner-up's bracket reaches it (then the two are not told apart).
fn best_of(searches: &[CapacityView]) -> Option<String> {
    let mut answered: Vec<&CapacityView> =
        searches.iter().filter(|s| s.capacity.is_some()).collect();
    if answered.len() < 2 {
        return None;
    }
    answered.sort_by(|a, b| b.capacity.partial_cmp(&a.capacity).expect("finite"));
    let (top, next) = (answered[0], answered[1]);
    // The runner-up's capacity could be as high as the value it failed at (or unbounded).
    let told_apart = next.above.is_some_and(|a| a <= top.capacity.unwrap_or(0.0));
    let completed = |s: &CapacityView| {
        s.achieved_at_capacity
            .map(|a| format!(", {} completed", sig3(a)))
            .unwrap_or_default()
    };
    let others = answered[1..]
        .iter()
        .map(|s| format!("{}: {}{}", s.label, s.capacity_text, completed(s)))
        .collect::<Vec<_>>()
        .join("; ");
    Some(format!(
        "Of {} searches, {} passes the highest {}: {} {}{} ({others}){}",
        searches.len(),
        top.label,
        top.over,
        top.capacity_text,
        top.unit,
        completed(top),
        if told_apart {
            String::new()
        } else {
            format!(
                "; not told apart from {}, whose bracket reaches it",
                next.label
            )
        }
    ))
}

fn view(s: &SearchRecord, points: &[PointRecord]) -> CapacityView {
    let prefix = format!("{}-s", s.seed);
    let mut mine: Vec<&PointRecord> = points
        .iter()
        .filter(|p| p.id.starts_with(&prefix) && p.search.is_some())
        .collect();
    mine.sort_by_key(|p| p.search.as_ref().map_or(0, |t| t.probe));
    let (targets, limits) = slo_targets(&mine);
    let values: Vec<f64> = mine
        .iter()
        .filter_map(|p| p.search.as_ref().map(|t| t.value))
        .chain([s.capacity, s.above].into_iter().flatten())
        .collect();
    let digits = servebench_model::text::distinguishing_digits(&values);
    let probes: Vec<ProbeRow> = mine
        .iter()
        .filter_map(|p| probe_row(p, &s.over, &targets, digits))
        .collect();
    // What the server completed at the capacity probe (search.json's own figure, or the
    // probe's in runs that predate it).
    let achieved = s.sustained_req_s.or_else(|| {
        s.capacity.and_then(|c| {
            probes
                .iter()
                .find(|p| p.passes && p.value == c)
                .map(|p| p.throughput_req_s)
        })
    });
    let unit = match s.over.as_str() {
        "concurrency" => "in flight",
        "load.agentic.live" => "live sessions",
        _ => "req/s",
    };
    CapacityView {
        label: s.label.clone(),
        seed: s.seed.clone(),
        over: s.over.clone(),
        unit: unit.into(),
        start: s.start,
        max: s.max,
        resolution: s.resolution,
        capacity: s.capacity,
        capacity_text: s.capacity.map_or_else(
            || servebench_model::text::MISSING.to_string(),
            |c| value_text(&s.over, c, digits),
        ),
        above: s.above,
        saturated_at: s.saturated_at,
        complete: s.complete,
        monotonic: s.monotonic(),
        inversions: inversion_lines(s, digits),
        answer: answer_text(s, unit, achieved, digits),
        achieved_at_capacity: achieved,
        agents: s.agents.as_ref().map(agents_text),
        sample_rule: crate::measure::system::MIN_SAMPLES_RULE.to_string(),
        targets,
        limits,
        chart: (probes.len() >= 2).then(|| ChartLink {
            title: format!(
                "Capacity search {}: throughput and SLO against {}",
                s.label, s.over
            ),
            path: format!("charts/{}", chart_file(&s.seed)),
        }),
        probes,
    }
}

/// `**2 agents at the SLO**: 1 per GPU (server: tp 2 x pp 1); 7,140 per MW of 280 W
/// (measured: ...)`, or per MW `not measured: why`.
pub(crate) fn agents_text(a: &servebench_model::results::search::AgentsAtSlo) -> String {
    let per_gpu = match (a.agents_at_slo_per_gpu, a.gpus) {
        (Some(v), Some(n)) => format!("{} per GPU over {n} ({})", sig3(v), a.gpus_source),
        _ => format!("per GPU: {}", a.gpus_source),
    };
    let per_mw = match (a.agents_at_slo_per_mw, a.power_w) {
        (Some(v), Some(w)) => format!("{} per MW of {} W ({})", sig3(v), sig3(w), a.power_source),
        _ => format!("per MW: {}", a.power_source),
    };
    // Live agents are whole: `2`, not `2.00`.
    format!(
        "**{} agents at the SLO**: {per_gpu}; {per_mw}.",
        servebench_model::text::sig(a.agents_at_slo, 0)
    )
}

/// The SLO targets the probes were judged on, in the order first met, with their limits.
fn slo_targets(probes: &[&PointRecord]) -> (Vec<String>, Vec<f64>) {
    let mut targets: Vec<String> = Vec::new();
    let mut limits: Vec<f64> = Vec::new();
    for p in probes {
        for c in p
            .load
            .iter()
            .flat_map(|l| l.slo.iter())
            .flat_map(|v| &v.checks)
        {
            if !targets.contains(&c.target) {
                targets.push(c.target.clone());
                limits.push(c.limit);
            }
        }
    }
    (targets, limits)
}

/// A probe's row: its value (over `over`, with `digits`), verdict and what it reached of each
/// of `targets`; None for a point that is not a probe.
fn probe_row(p: &PointRecord, over: &str, targets: &[String], digits: usize) -> Option<ProbeRow> {
    let t = p.search.as_ref()?;
    let checks = p.load.as_ref().and_then(|l| l.slo.as_ref());
    Some(ProbeRow {
        probe: t.probe,
        id: p.id.clone(),
        value: t.value,
        value_text: value_text(over, t.value, digits),
        passes: t.passes,
        insufficient: checks.is_some_and(|v| v.unjudged().next().is_some()),
        measured: p.load.as_ref().map(|l| l.measured),
        throughput_req_s: t.throughput_req_s,
        slo_values: targets
            .iter()
            .map(|name| {
                checks
                    .and_then(|v| v.checks.iter().find(|c| &c.target == name))
                    .and_then(|c| c.value)
            })
            .collect(),
        why: t.why.clone(),
    })
}

/// The search's contradicting verdicts in words (`8 failed below 12 passing`).
fn inversion_lines(s: &SearchRecord, digits: usize) -> Vec<String> {
    s.inversions
        .iter()
        .map(|[f, p]| {
            format!(
                "{} failed below {} passing",
                value_text(&s.over, *f, digits),
                value_text(&s.over, *p, digits)
            )
        })
        .collect()
}

/// A probed value with `digits` significant digits; a concurrency is a whole number of
/// clients: `2`, not `2.00`.
fn value_text(over: &str, x: f64, digits: usize) -> String {
    if counted(over) {
        format!("{x:.0}")
    } else {
        servebench_model::text::sig(x, digits)
    }
}

/// Whether a searched dimension counts whole things (clients, live sessions), not a rate.
fn counted(over: &str) -> bool {
    matches!(over, "concurrency" | "load.agentic.live")
}

/// What the server sustained: `10.3 req/s completed at 14.0 req/s offered (between 14.0
/// passing and 14.7 failing; resolution 5%)`, `2 in flight, 10.3 req/s completed (between 2
/// passing and 3 failing ...)`, or the edges: `at least 256 req/s (max passed)`, `below 8
/// req/s (start failed)`; then any contradicting verdicts.
pub(crate) fn answer_text(
    s: &SearchRecord,
    unit: &str,
    achieved: Option<f64>,
    digits: usize,
) -> String {
    let pct = format!("{}%", sig3(s.resolution * 100.0));
    let num = |x: f64| value_text(&s.over, x, digits);
    // The headline is what the server completed, not what was offered.
    let v = |x: f64| match (achieved, counted(&s.over)) {
        (Some(a), true) => format!("{} {unit}, {} req/s completed", num(x), sig3(a)),
        (Some(a), _) => format!("{} req/s completed at {} {unit} offered", sig3(a), num(x)),
        (None, _) => format!("{} {unit}", num(x)),
    };
    let found = match (s.capacity, s.above) {
        (Some(c), Some(a)) if s.saturated_at.is_some() => format!(
            "capacity {} (between {} passing and {} where throughput had stopped growing: saturation at {}; resolution {pct})",
            v(c),
            num(c),
            num(a),
            s.saturated_at.map(num).unwrap_or_default()
        ),
        (Some(c), Some(a)) => format!(
            "capacity {} (between {} passing and {} failing; resolution {pct})",
            v(c),
            num(c),
            num(a)
        ),
        (Some(c), None) => format!(
            "capacity at least {} (the search's max passed: raise `search.max` to find it)",
            v(c)
        ),
        (None, Some(a)) if s.saturated_at.is_some() => format!(
            "capacity at or below {} (every probe passed, and throughput was already at its plateau at {}: lower `search.start` to find the knee)",
            v(a),
            num(a)
        ),
        (None, Some(a)) => format!(
            "capacity below {} (no probe passed, down to {}: lower `search.start`)",
            v(a),
            num(a)
        ),
        (None, None) => "no capacity: no probe was measured".to_string(),
    };
    let found = if s.inversions.is_empty() {
        found
    } else {
        let pairs: Vec<String> = s
            .inversions
            .iter()
            .map(|[f, p]| format!("{} failed below {} passing", num(*f), num(*p)))
            .collect();
        format!(
            "{found}; NOT MONOTONIC: {} (the verdicts are noise, or the server changed between probes; the answer is the highest pass below the lowest failure)",
            pairs.join(", ")
        )
    };
    if s.complete {
        found
    } else {
        format!(
            "the search stopped after {} before its answer; so far: {found}",
            servebench_model::text::count_s(s.probes, "probe")
        )
    }
}

/// A search's view with its answer, for tests.
#[cfg(test)]
pub(crate) fn answered(label: &str, capacity: Option<f64>, above: Option<f64>) -> CapacityView {
    CapacityView {
        label: label.into(),
        seed: "p001".into(),
        over: "load.rate".into(),
        unit: "req/s".into(),
        start: 1.0,
        max: 64.0,
        resolution: 0.05,
        capacity,
        capacity_text: capacity.map_or("—".into(), sig3),
        above,
        saturated_at: None,
        complete: true,
        monotonic: true,
        inversions: Vec::new(),
        answer: String::new(),
        targets: Vec::new(),
        limits: Vec::new(),
        achieved_at_capacity: None,
        agents: None,
        probes: Vec::new(),
        sample_rule: String::new(),
        chart: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_of_several_searches_is_named_and_told_apart_only_by_its_bracket() {
        let s = [
            answered("decode=1", Some(4.0), Some(4.2)),
            answered("decode=2", Some(8.0), Some(8.4)),
            answered("decode=3", Some(7.9), Some(8.3)),
        ];
        assert_eq!(
            best_of(&s).unwrap(),
            "Of 3 searches, decode=2 passes the highest load.rate: 8.00 req/s (decode=3: 7.90; decode=1: 4.00); not told apart from decode=3, whose bracket reaches it"
        );
        let s = [
            answered("decode=1", Some(4.0), Some(4.2)),
            answered("decode=2", Some(8.0), Some(8.4)),
            answered("decode=3", None, Some(1.0)),
        ];
        assert_eq!(
            best_of(&s).unwrap(),
            "Of 3 searches, decode=2 passes the highest load.rate: 8.00 req/s (decode=1: 4.00)"
        );
        assert_eq!(best_of(&s[..1]), None);
    }
}
