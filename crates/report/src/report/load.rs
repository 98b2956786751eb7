//! The report's load section: per `load:` point (or point judged against `slo:`), what was
//! offered and served, the SLO verdict and the client's self-check, with each metric's
//! definition. Built from `points.jsonl` alone. Its charts (`load_charts`) are drawn from the
//! finished section, so `build` adds their links.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::catalog::{Method, Metric};
use servebench_model::results::records::{PointRecord, Stat};

use super::metric_def::MetricDef;
use super::pareto::ParetoPoint;

/// The load section (None in a report without load points or SLOs).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct LoadSection {
    /// Where the `*_sched_s` latencies count from, in words.
    pub origin: String,
    /// One row per load point, in run order.
    pub rows: Vec<LoadRow>,
    /// The extra percentiles the spec asked for (`p99.9`), shown per point.
    pub percentile_names: Vec<String>,
    /// Definitions of the load metrics, by name.
    pub defs: IndexMap<String, MetricDef>,
    /// The load charts drawn beside the report (`charts/load-*.svg`).
    pub charts: Vec<super::chart_link::ChartLink>,
    /// Every point with both Pareto figures, marked on or off the frontier (run-wide and
    /// within its variant); empty with fewer than two such points.
    pub pareto: Vec<ParetoPoint>,
    /// How the Pareto chart's axes and frontier are defined, in words.
    pub pareto_definition: String,
    /// The fewest measured requests an SLO target is judged on, in words.
    pub sample_rule: String,
}

/// One load point.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct LoadRow {
    pub id: String,
    /// The point's sweep values (`load.rate=8`).
    pub label: String,
    /// The server variant the point ran on: its results table's title.
    pub variant: String,
    /// `rate`, `ramp`, `trace` or `closed`.
    pub kind: String,
    /// Requests/s offered over the measured phase.
    pub offered_req_s: Option<f64>,
    pub throughput_req_s: Option<f64>,
    pub goodput_req_s: Option<f64>,
    pub slo_attainment: Option<f64>,
    pub output_tok_s: Option<f64>,
    pub total_tok_s: Option<f64>,
    /// Output tok/s one user sees: the p50 of the point's `decode_tok_s`.
    pub user_tok_s: Option<f64>,
    pub concurrency_mean: Option<f64>,
    pub concurrency_max: Option<f64>,
    /// TTFT and E2E from the schedule, TPOT.
    pub ttft: Option<Stat>,
    pub tpot: Option<Stat>,
    pub e2e: Option<Stat>,
    /// The client self-check: schedule lag and CPU.
    pub lag: Option<Stat>,
    pub client_cpu: Option<f64>,
    /// Whether the point met its SLO targets (None without `slo:`).
    pub slo_met: Option<bool>,
    /// The targets it missed, as `ttft_p99 1300 ms > 1000 ms`.
    pub slo_missed: Vec<String>,
    /// The targets it had too few measured requests to judge, with the counts.
    pub slo_unjudged: Vec<String>,
    /// Flagged `client-limited`: its latencies describe the client.
    pub client_limited: bool,
    /// Flagged `invalid-output` (`validity:` found its answers wrong): kept off the Pareto
    /// frontier.
    pub invalid_output: bool,
    /// Extra percentiles per metric: `{"ttft_sched_s": {"p99.9": 1.2}}`.
    pub percentiles: IndexMap<String, IndexMap<String, f64>>,
    /// Measured window, seconds; warm-up and cool-down requests recorded.
    pub window_s: f64,
    pub warmup: usize,
    pub cooldown: usize,
}

/// The section, when some point has a load summary. `labels` and `variants` map a point id to
/// its label and to its server variant's name (its results table's title).
pub(crate) fn section(
    points: &[PointRecord],
    labels: &IndexMap<String, String>,
    variants: &IndexMap<String, String>,
) -> Option<LoadSection> {
    let rows: Vec<LoadRow> = points
        .iter()
        .filter_map(|p| {
            row(
                p,
                labels.get(&p.id).cloned().unwrap_or_else(|| p.id.clone()),
                variants
                    .get(&p.id)
                    .cloned()
                    .unwrap_or_else(|| p.group.clone()),
            )
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let scheduled = rows.iter().any(|r| r.kind != "closed");
    let mut percentile_names: Vec<String> = Vec::new();
    for r in &rows {
        for row in r.percentiles.values() {
            for name in row.keys() {
                if !percentile_names.contains(name) {
                    percentile_names.push(name.clone());
                }
            }
        }
    }
    let mut section = LoadSection {
        origin: if scheduled {
            "TTFT and E2E here count from each request's scheduled send time (the arrival schedule), so a request the client sent late, or that waited for a slot under `max_in_flight`, carries that wait as a user would; the results tables above count from the last byte written.".into()
        } else {
            "Closed loop: latencies count from the last byte written.".into()
        },
        rows,
        percentile_names,
        defs: Metric::of_load()
            .chain([Metric::Tpot])
            .map(|m| {
                (
                    m.name().to_string(),
                    MetricDef::of(m, Method::Streaming, 0, 0),
                )
            })
            .collect(),
        charts: Vec::new(),
        pareto: Vec::new(),
        pareto_definition: super::pareto::DEFINITION.to_string(),
        sample_rule: crate::measure::system::MIN_SAMPLES_RULE.to_string(),
    };
    section.pareto = super::pareto::frontier(pareto_points(&section.rows));
    Some(section)
}

/// The Pareto chart's points: every row with both figures (finite) whose output was not
/// found wrong, in run order, not yet marked on or off the frontier.
fn pareto_points(rows: &[LoadRow]) -> Vec<ParetoPoint> {
    rows.iter()
        .filter(|r| !r.invalid_output)
        .filter_map(|r| {
            let (x, y) = (r.output_tok_s?, r.user_tok_s?);
            (x.is_finite() && y.is_finite()).then(|| ParetoPoint {
                id: r.id.clone(),
                label: r.label.clone(),
                variant: r.variant.clone(),
                output_tok_s: x,
                user_tok_s: y,
                variant_frontier: false,
                frontier: false,
            })
        })
        .collect()
}

fn row(p: &PointRecord, label: String, variant: String) -> Option<LoadRow> {
    let load = p.load.as_ref()?;
    let stat = |m: Metric| p.metrics.get(m.name()).filter(|s| s.count > 0).cloned();
    let mean = |m: Metric| stat(m).map(|s| s.mean);
    let scheduled = load.kind != "closed";
    Some(LoadRow {
        id: p.id.clone(),
        label,
        variant,
        kind: load.kind.clone(),
        offered_req_s: load.offered_req_s,
        throughput_req_s: mean(Metric::ThroughputReq),
        goodput_req_s: mean(Metric::Goodput),
        slo_attainment: mean(Metric::SloAttainment),
        output_tok_s: mean(Metric::OutputTok),
        total_tok_s: mean(Metric::TotalTok),
        user_tok_s: stat(Metric::Decode).map(|s| s.p50),
        concurrency_mean: mean(Metric::ConcurrencyMean),
        concurrency_max: mean(Metric::ConcurrencyMax),
        ttft: stat(if scheduled {
            Metric::TtftFromSchedule
        } else {
            Metric::Ttft
        }),
        tpot: stat(Metric::Tpot),
        e2e: stat(if scheduled {
            Metric::E2eFromSchedule
        } else {
            Metric::E2e
        }),
        lag: stat(Metric::ScheduleLag),
        client_cpu: mean(Metric::ClientCpu),
        slo_met: load.slo.as_ref().map(|v| v.met),
        slo_missed: load
            .slo
            .iter()
            .flat_map(|v| &v.checks)
            .filter(|c| !c.met && !c.insufficient())
            .map(|c| c.missed_text())
            .collect(),
        slo_unjudged: load
            .slo
            .iter()
            .flat_map(|v| v.unjudged())
            .map(|c| c.unjudged_text())
            .collect(),
        client_limited: p.has_flag(&servebench_model::catalog::FlagKind::ClientLimited),
        invalid_output: p.flags.iter().any(|f| f.kind.voids_output()),
        percentiles: load.percentiles.clone(),
        window_s: load.window_s,
        warmup: load.warmup,
        cooldown: load.cooldown,
    })
}
