//! The report's "GPU telemetry and cost" section: what the GPUs of the server's host did over
//! each point (headroom, throttling, power, energy per token and request) and the cost per
//! million tokens at the spec's price per GPU-hour, at each point and at a search's capacity.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::catalog::Metric;
use servebench_model::results::records::PointRecord;
use servebench_model::spec::types::Experiment;
use servebench_model::text::sig3;

/// The section; None in a run without telemetry or cost.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct GpuSection {
    /// One row per point with telemetry or a cost.
    pub rows: Vec<GpuRow>,
    /// Hosts without telemetry, in words (`no GPU telemetry: nvidia-smi not found on local`).
    pub missing: Vec<String>,
    /// What read the GPUs, in words (`read with nvidia-smi in its looping mode`), from the
    /// points' recorded source (runs that did not record one were read with nvidia-smi).
    pub read_with: String,
    /// How the energy was computed.
    pub energy_method: String,
    /// How the cost was computed (None without `cost:`).
    pub cost_method: Option<String>,
    /// The cost at each capacity search's answer.
    pub at_capacity: Vec<CapacityCost>,
    /// Each point's GPU power draw and free memory over time (`charts/gpu-*.svg`).
    pub charts: Vec<super::chart_link::ChartLink>,
}

/// One point's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct GpuRow {
    /// `p003 (concurrency=8)`.
    pub point: String,
    /// GPUs seen, readings taken during the point and of them inside the measured window.
    pub gpus: usize,
    pub samples: usize,
    pub in_window: usize,
    /// The least free memory, GiB, the GPU and seconds into the point it was seen at.
    pub min_free_gib: Option<f64>,
    pub min_free_where: Option<String>,
    /// Throttle reasons inside the measured window, in words; empty when none.
    pub throttle: Vec<String>,
    /// Mean power of all GPUs over the window, W.
    pub power_w: Option<f64>,
    pub energy_per_output_token_j: Option<f64>,
    pub energy_per_request_j: Option<f64>,
    pub cost_per_m_input_usd: Option<f64>,
    pub cost_per_m_output_usd: Option<f64>,
    /// For a point that failed (the server ran out of memory, crashed): the last reading
    /// before it ended, in words.
    pub last_reading: Option<String>,
}

/// The cost at a capacity search's answer.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CapacityCost {
    /// What was searched (`load.rate`) and the answer's probe point.
    pub over: String,
    pub point: String,
    pub capacity_text: String,
    pub cost_per_m_input_usd: Option<f64>,
    pub cost_per_m_output_usd: Option<f64>,
    pub energy_per_output_token_j: Option<f64>,
}

const ENERGY_METHOD: &str = "Energy is the power all GPUs of the server's host drew (each reading's power draw, summed over GPUs) integrated over each measured window by trapezoids between readings, cut at the window's edges by linear interpolation; seconds at an edge that no reading reaches (the first reading comes after the window opened) are counted at the covered part's mean power. Warm-up and cool-down requests, flushes and calibration are outside the windows. Per output token and per request: the windows' energy / the output tokens (or the successful requests) of their measured requests.";

/// The section for `points`, or None when none has telemetry or cost.
pub(crate) fn section(
    exp: &Experiment,
    points: &[PointRecord],
    labels: &indexmap::IndexMap<String, String>,
) -> Option<GpuSection> {
    let mut missing = Vec::new();
    let mut rows = Vec::new();
    for p in points {
        let metric = |m: Metric| p.metrics.get(m.name()).map(|s| s.mean);
        let has_cost = metric(Metric::CostPerMOutput).is_some();
        let view = p.gpu.as_ref();
        if let Some(why) = view.and_then(|v| v.missing.as_ref()) {
            let line = format!("no GPU telemetry: {why}");
            if !missing.contains(&line) {
                missing.push(line);
            }
        }
        if let Some(partial) = view.and_then(|v| v.partial.as_ref()) {
            missing.push(format!("{}: {partial}", p.id));
        }
        let sampled = view.is_some_and(|v| v.samples > 0);
        if !sampled && !has_cost {
            continue;
        }
        let start = p.wall.as_ref().map(|w| w.started_at);
        let min_free_where = view.and_then(|v| {
            let gpu = v.min_free_gpu?;
            let at = v.min_free_at?;
            Some(match start {
                Some(s) => format!("GPU {gpu}, {} s into the point", sig3(at - s)),
                None => format!("GPU {gpu}"),
            })
        });
        let failed = p.failure.is_some();
        let last_reading = view
            .filter(|_| failed)
            .and_then(|v| v.last.as_ref())
            .map(|last| {
                format!(
                    "last reading before the {}: {}",
                    p.failure.as_deref().unwrap_or("failure"),
                    crate::measure::gpu::reading_text(last, start)
                )
            });
        rows.push(GpuRow {
            point: match labels.get(&p.id) {
                Some(l) if l.starts_with(p.id.as_str()) => l.clone(),
                Some(l) if !l.is_empty() => format!("{} ({l})", p.id),
                _ => p.id.clone(),
            },
            gpus: view.map_or(0, |v| v.gpus),
            samples: view.map_or(0, |v| v.samples),
            in_window: view.map_or(0, |v| v.in_window),
            min_free_gib: view.and_then(|v| v.min_free_mib).map(|m| m / 1024.0),
            min_free_where,
            throttle: view.map(|v| v.throttle_reasons.clone()).unwrap_or_default(),
            power_w: metric(Metric::GpuPower),
            energy_per_output_token_j: metric(Metric::EnergyPerOutputToken),
            energy_per_request_j: metric(Metric::EnergyPerRequest),
            cost_per_m_input_usd: metric(Metric::CostPerMInput),
            cost_per_m_output_usd: metric(Metric::CostPerMOutput),
            last_reading,
        });
    }
    if exp.cost.is_some() && !rows.iter().any(|r| r.cost_per_m_output_usd.is_some()) {
        missing.push(
            "no cost per token: no point had GPUs to charge (`cost.gpus` is not set and no GPU telemetry counted them) and measured tokens".into(),
        );
    }
    if rows.is_empty() && missing.is_empty() {
        return None;
    }
    let cost_method = exp.cost.as_ref().map(|c| {
        format!(
            "Cost = {} $/GPU-hour x GPU-hours, GPU-hours = the measured windows' seconds / 3600 x {}; per million input tokens it is that cost / the windows' prompt tokens x 10^6, per million output tokens the same cost / their output tokens x 10^6 (each charges the whole cost to one kind of token).",
            sig3(c.gpu_hour),
            c.gpus.map_or_else(
                || "the GPUs the telemetry saw on the host".to_string(),
                |g| format!("{g} GPUs (cost.gpus)")
            )
        )
    });
    let mut sources: Vec<&str> = Vec::new();
    for p in points {
        if let Some(v) = p.gpu.as_ref().filter(|v| v.samples > 0) {
            let s = v.source.as_deref().unwrap_or("nvidia-smi");
            if !sources.contains(&s) {
                sources.push(s);
            }
        }
    }
    let read_with = sources
        .iter()
        .map(|s| match *s {
            "nvidia-smi" => "read with `nvidia-smi` in its looping mode",
            "amd-smi" => "read with `amd-smi metric --json`, run every interval",
            "dcgm" => "read from a DCGM exporter's `/metrics`, polled every interval",
            _ => "read by an unknown sampler",
        })
        .collect::<Vec<_>>()
        .join("; ");
    let read_with = if read_with.is_empty() {
        "sampled (no reading was taken)".to_string()
    } else {
        read_with
    };
    Some(GpuSection {
        rows,
        missing,
        read_with,
        energy_method: ENERGY_METHOD.to_string(),
        cost_method,
        at_capacity: Vec::new(),
        charts: Vec::new(),
    })
}

/// The cost at each search's answer: the point of the passing probe that set its capacity.
pub(crate) fn at_capacity(
    capacity: &super::capacity::CapacitySection,
    points: &[PointRecord],
) -> Vec<CapacityCost> {
    capacity
        .searches
        .iter()
        .filter_map(|s| {
            let answer = s.capacity?;
            let probe = s.probes.iter().find(|p| p.passes && p.value == answer)?;
            let p = points.iter().find(|p| p.id == probe.id)?;
            let metric = |m: Metric| p.metrics.get(m.name()).map(|s| s.mean);
            let row = CapacityCost {
                over: s.over.clone(),
                point: p.id.clone(),
                capacity_text: s.capacity_text.clone(),
                cost_per_m_input_usd: metric(Metric::CostPerMInput),
                cost_per_m_output_usd: metric(Metric::CostPerMOutput),
                energy_per_output_token_j: metric(Metric::EnergyPerOutputToken),
            };
            (row.cost_per_m_output_usd.is_some() || row.energy_per_output_token_j.is_some())
                .then_some(row)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::Stat;

    fn probe(probe: usize, id: &str, value: f64, passes: bool) -> super::super::capacity::ProbeRow {
        super::super::capacity::ProbeRow {
            probe,
            id: id.into(),
            value,
            value_text: value.to_string(),
            passes,
            insufficient: false,
            measured: Some(100),
            throughput_req_s: value,
            slo_values: Vec::new(),
            why: None,
        }
    }

    fn point(id: &str, cost_out: f64) -> PointRecord {
        let mut p: PointRecord = serde_json::from_value(serde_json::json!({
            "id": id, "values": {}, "group": "g1", "ok": 1, "errors": 0, "metrics": {}
        }))
        .unwrap();
        let stat = |x: f64| Stat {
            count: 1,
            mean: x,
            p50: x,
            p90: x,
            p99: x,
            min: x,
            max: x,
            ..Stat::default()
        };
        p.metrics
            .insert("cost_per_m_output_usd".into(), stat(cost_out));
        p.metrics
            .insert("cost_per_m_input_usd".into(), stat(cost_out / 4.0));
        p
    }

    /// The cost at a search's answer is its capacity probe's, not the highest pass above a
    /// failure (a search whose verdicts contradict each other answers below the failure).
    #[test]
    fn the_cost_at_capacity_is_the_probe_that_set_it() {
        let view = super::super::capacity::CapacityView {
            label: "all".into(),
            seed: "p001".into(),
            over: "load.rate".into(),
            unit: "req/s".into(),
            start: 1.0,
            max: 16.0,
            resolution: 0.05,
            capacity: Some(4.0),
            capacity_text: "4".into(),
            above: Some(6.0),
            saturated_at: None,
            complete: true,
            monotonic: false,
            inversions: vec!["6 failed below 8 passing".into()],
            answer: "4 req/s".into(),
            targets: Vec::new(),
            limits: Vec::new(),
            achieved_at_capacity: Some(4.0),
            agents: None,
            probes: vec![
                probe(1, "p001-s1", 2.0, true),
                probe(2, "p001-s2", 4.0, true),
                probe(3, "p001-s3", 8.0, true),
                probe(4, "p001-s4", 6.0, false),
            ],
            sample_rule: String::new(),
            chart: None,
        };
        let section = super::super::capacity::CapacitySection {
            searches: vec![view],
            best: None,
            variants_chart: None,
        };
        let points = [
            point("p001-s1", 3.0),
            point("p001-s2", 2.0),
            point("p001-s3", 1.0),
            point("p001-s4", 1.5),
        ];
        let rows = at_capacity(&section, &points);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].point, "p001-s2");
        assert_eq!(rows[0].cost_per_m_output_usd, Some(2.0));
        assert_eq!(rows[0].cost_per_m_input_usd, Some(0.5));
        assert_eq!(rows[0].energy_per_output_token_j, None);
    }
}
