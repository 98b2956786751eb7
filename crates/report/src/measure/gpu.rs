//! A point's GPU telemetry summed up: the least free memory and when, the throttle reasons
//! inside the measured window, the energy drawn over it (and per token and request), and the
//! cost per million tokens at a price per GPU-hour.

use indexmap::IndexMap;

use servebench_model::catalog::{FlagKind, Metric};
use servebench_model::results::gpu::{GpuSample, GpuView};
use servebench_model::results::records::{Flag, Stat};
use servebench_model::spec::telemetry::CostSpec;
use servebench_model::text::sig3;

use super::system::{MeasuredWindow, single};

const MIB_PER_GIB: f64 = 1024.0;

/// NVML's clock event reasons, bit by bit (`nvmlClocksEventReasons`); idle (0x1) is no
/// throttling.
const REASONS: &[(u64, &str)] = &[
    (0x1, "GPU idle"),
    (0x2, "applications clocks setting"),
    (0x4, "SW power cap"),
    (0x8, "HW slowdown"),
    (0x10, "sync boost"),
    (0x20, "SW thermal slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake slowdown"),
    (0x100, "display clocks setting"),
];
const IDLE: u64 = 0x1;

/// The reasons set in `mask`, in words (an unknown bit by its value).
pub(crate) fn reasons(mask: u64) -> Vec<String> {
    let mut out: Vec<String> = REASONS
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|(_, name)| name.to_string())
        .collect();
    let known: u64 = REASONS.iter().map(|(b, _)| b).sum();
    if mask & !known != 0 {
        out.push(format!("reasons 0x{:x}", mask & !known));
    }
    out
}

/// What the point's telemetry is judged with.
#[derive(Debug, Clone)]
pub struct Judge<'a> {
    /// Free memory at or below this many MiB raises `gpu-memory-tight`.
    pub margin_mib: f64,
    pub cost: Option<&'a CostSpec>,
    /// Set when the readings cover only part of the server's GPUs (rank 0's node of a
    /// multi-node server), in words: no energy then, and a cost only from `cost.gpus`.
    pub partial: Option<String>,
}

/// The point's view of its GPUs, with the metrics and flags it adds. `samples` are the
/// point's readings in arrival order; `windows` its measured windows.
pub fn summarize(
    host: &str,
    samples: &[GpuSample],
    windows: &[MeasuredWindow],
    judge: &Judge,
    metrics: &mut IndexMap<String, Stat>,
    flags: &mut Vec<Flag>,
) -> GpuView {
    let readings: Vec<&GpuSample> = samples.iter().filter(|s| !s.gpus.is_empty()).collect();
    let mut view = GpuView {
        host: host.to_string(),
        samples: readings.len(),
        gpus: readings.iter().map(|s| s.gpus.len()).max().unwrap_or(0),
        last: readings.last().map(|s| (*s).clone()),
        ..GpuView::default()
    };
    let inside = |s: &GpuSample| {
        windows
            .iter()
            .any(|w| w.round.is_none_or(|r| r == s.round) && s.t >= w.start && s.t <= w.end)
    };
    let in_window: Vec<&GpuSample> = readings.iter().copied().filter(|s| inside(s)).collect();
    view.in_window = in_window.len();
    // Headroom: the whole point, warm-up included (memory runs out whenever it does).
    put_headroom(&readings, judge, &mut view, metrics, flags);
    // Throttling: inside the measured window only.
    put_throttling(&in_window, &mut view, flags);
    view.partial = judge.partial.clone();
    put_energy(&readings, windows, &mut view, metrics);
    if let Some(cost) = judge.cost {
        let seen = (view.gpus > 0 && view.partial.is_none()).then_some(view.gpus as u32);
        let gpus = cost.gpus.or(seen);
        put_cost(cost.gpu_hour, gpus, windows, metrics);
    }
    view
}

/// The least free memory over `readings` (which GPU, when) into `view`, its metric, and the
/// `gpu-memory-tight` flag when it came within the judge's margin.
fn put_headroom(
    readings: &[&GpuSample],
    judge: &Judge,
    view: &mut GpuView,
    metrics: &mut IndexMap<String, Stat>,
    flags: &mut Vec<Flag>,
) {
    for s in readings {
        for g in &s.gpus {
            if let Some(free) = g.memory_free_mib
                && view.min_free_mib.is_none_or(|m| free < m)
            {
                view.min_free_mib = Some(free);
                view.min_free_gpu = Some(g.index);
                view.min_free_at = Some(s.t);
            }
        }
    }
    let Some(free) = view.min_free_mib else {
        return;
    };
    metrics.insert(
        Metric::GpuMemoryFreeMin.name().into(),
        single(free / MIB_PER_GIB),
    );
    if free <= judge.margin_mib {
        flags.push(Flag::new(
            FlagKind::GpuMemoryTight,
            format!(
                "GPU {} had {} GiB free at its lowest, within the {} GiB margin (telemetry.memory_margin_gib)",
                view.min_free_gpu.unwrap_or(0),
                sig3(free / MIB_PER_GIB),
                sig3(judge.margin_mib / MIB_PER_GIB)
            ),
        ));
    }
}

/// The throttle reasons (idle aside) the `in_window` readings report into `view`, and the
/// `gpu-throttled` flag naming the GPUs.
fn put_throttling(in_window: &[&GpuSample], view: &mut GpuView, flags: &mut Vec<Flag>) {
    let mut mask = 0u64;
    let mut throttled_gpus = std::collections::BTreeSet::new();
    for s in in_window {
        for g in &s.gpus {
            if let Some(m) = g.throttle
                && m & !IDLE != 0
            {
                mask |= m & !IDLE;
                throttled_gpus.insert(g.index);
            }
        }
    }
    if mask == 0 {
        return;
    }
    view.throttle_reasons = reasons(mask);
    flags.push(Flag::new(
        FlagKind::GpuThrottled,
        format!(
            "GPU {} reported {} during the measured window",
            throttled_gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            view.throttle_reasons.join(", ")
        ),
    ));
}

/// The energy drawn over the measured windows (each integrated on its own, then summed) into
/// `view`, with power and energy per token and request: only when power covers every window
/// and the readings cover every GPU (`view.partial` unset).
fn put_energy(
    readings: &[&GpuSample],
    windows: &[MeasuredWindow],
    view: &mut GpuView,
    metrics: &mut IndexMap<String, Stat>,
) {
    let mut energy = 0.0;
    let mut covered_s = 0.0;
    let mut window_s = 0.0;
    let (mut requests, mut output) = (0.0, 0.0);
    let mut all_covered = !windows.is_empty();
    for w in windows {
        window_s += w.end - w.start;
        let curve: Vec<(f64, f64)> = readings
            .iter()
            .filter(|s| w.round.is_none_or(|r| r == s.round))
            .filter_map(|s| Some((s.t, total_power(s)?)))
            .collect();
        match window_energy(&curve, w.start, w.end) {
            Some((j, covered)) => {
                energy += j;
                covered_s += covered;
                requests += w.requests;
                output += w.output_tokens;
            }
            None => all_covered = false,
        }
    }
    if window_s > 0.0 {
        view.window_s = Some(window_s);
    }
    if !(all_covered && energy > 0.0 && view.partial.is_none()) {
        return;
    }
    view.energy_j = Some(energy);
    view.energy_span_s = Some(covered_s);
    metrics.insert(Metric::GpuPower.name().into(), single(energy / window_s));
    if output > 0.0 {
        metrics.insert(
            Metric::EnergyPerOutputToken.name().into(),
            single(energy / output),
        );
    }
    if requests > 0.0 {
        metrics.insert(
            Metric::EnergyPerRequest.name().into(),
            single(energy / requests),
        );
    }
}

/// The cost per million input and output tokens: `gpu_hour` x GPU-hours (the windows'
/// hours x `gpus`) / the windows' tokens x 10^6. Nothing without a GPU count.
pub fn put_cost(
    gpu_hour: f64,
    gpus: Option<u32>,
    windows: &[MeasuredWindow],
    metrics: &mut IndexMap<String, Stat>,
) {
    let Some(gpus) = gpus else {
        return;
    };
    let (window_s, input, output) = windows.iter().fold((0.0, 0.0, 0.0), |(s, i, o), w| {
        (
            s + (w.end - w.start),
            i + w.input_tokens,
            o + w.output_tokens,
        )
    });
    if window_s <= 0.0 {
        return;
    }
    let dollars = gpu_hour * window_s / 3600.0 * f64::from(gpus);
    if input > 0.0 {
        metrics.insert(
            Metric::CostPerMInput.name().into(),
            single(dollars / input * 1e6),
        );
    }
    if output > 0.0 {
        metrics.insert(
            Metric::CostPerMOutput.name().into(),
            single(dollars / output * 1e6),
        );
    }
}

/// A reading in words (`GPU 0: 139 GiB used, 0.5 GiB free, 612 W; GPU 1: ...`), seconds after
/// `start` when given.
pub fn reading_text(r: &GpuSample, start: Option<f64>) -> String {
    let gib = |m: Option<f64>| m.map_or("—".into(), |m| sig3(m / MIB_PER_GIB));
    let gpus: Vec<String> = r
        .gpus
        .iter()
        .map(|g| {
            format!(
                "GPU {}: {} GiB used, {} GiB free, {} W",
                g.index,
                gib(g.memory_used_mib),
                gib(g.memory_free_mib),
                g.power_w.map_or("—".into(), sig3)
            )
        })
        .collect();
    let when = start.map_or(String::new(), |s| {
        format!(" ({} s into the point)", sig3(r.t - s))
    });
    format!("{}{when}", gpus.join("; "))
}

/// Watts of all GPUs of a reading; None when a GPU did not say its power.
fn total_power(s: &GpuSample) -> Option<f64> {
    s.gpus.iter().map(|g| g.power_w).sum()
}

/// Joules over `[start, end]` of a power curve (time, watts) and the seconds the readings
/// cover: trapezoids between readings, cut at the window's edges by linear interpolation;
/// the seconds at either edge that no reading reaches count at the covered part's mean power.
/// None without two readings inside the window's reach.
pub(crate) fn window_energy(curve: &[(f64, f64)], start: f64, end: f64) -> Option<(f64, f64)> {
    let mut joules = 0.0;
    let mut covered = 0.0;
    for pair in curve.windows(2) {
        let ((t0, p0), (t1, p1)) = (pair[0], pair[1]);
        if t1 <= t0 {
            continue;
        }
        let (a, b) = (t0.max(start), t1.min(end));
        if b <= a {
            continue;
        }
        let at = |t: f64| p0 + (p1 - p0) * (t - t0) / (t1 - t0);
        joules += (at(a) + at(b)) / 2.0 * (b - a);
        covered += b - a;
    }
    if covered <= 0.0 {
        return None;
    }
    let whole = end - start;
    Some((joules * whole / covered, covered))
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::gpu::GpuReading;

    fn sample(t: f64, watts: f64, free_mib: f64, throttle: u64) -> GpuSample {
        let g = |i| GpuReading {
            index: i,
            power_w: Some(watts),
            memory_free_mib: Some(free_mib + i as f64),
            throttle: Some(throttle),
            ..GpuReading::default()
        };
        GpuSample {
            point: "p1".into(),
            round: 0,
            t,
            gpus: vec![g(0), g(1)],
            cut: None,
        }
    }

    fn window(start: f64, end: f64) -> MeasuredWindow {
        MeasuredWindow {
            round: Some(0),
            start,
            end,
            requests: 10.0,
            input_tokens: 1000.0,
            output_tokens: 500.0,
        }
    }

    #[test]
    fn energy_is_the_trapezoids_cut_at_the_window() {
        // A ramp from 100 W at t=0 to 300 W at t=2: over [0.5, 1.5] the power goes 150 -> 250,
        // so 200 J.
        let curve = [(0.0, 100.0), (1.0, 200.0), (2.0, 300.0)];
        let (j, covered) = window_energy(&curve, 0.5, 1.5).unwrap();
        assert!((j - 200.0).abs() < 1e-9, "{j}");
        assert!((covered - 1.0).abs() < 1e-12);
        // Readings from 1.0 on only: [1.0, 1.5] is covered (112.5 J at a mean of 225 W), the
        // 0.5 s before it counts at that mean: 225 J.
        let (j, covered) = window_energy(&curve[1..], 0.5, 1.5).unwrap();
        assert!((j - 225.0).abs() < 1e-9, "{j}");
        assert!((covered - 0.5).abs() < 1e-12);
        assert!(window_energy(&curve[..1], 0.0, 1.0).is_none());
    }

    #[test]
    fn constant_power_gives_exact_energy_per_token_and_cost() {
        // 2 GPUs at 300 W for a 4 s window: 2400 J; 500 output tokens, 10 requests.
        let samples: Vec<GpuSample> = (0..=50)
            .map(|i| sample(99.9 + i as f64 * 0.1, 300.0, 40_000.0, 0))
            .collect();
        let (mut metrics, mut flags) = (IndexMap::new(), Vec::new());
        let cost = CostSpec {
            gpu_hour: 3.6,
            gpus: None,
        };
        let view = summarize(
            "local",
            &samples,
            &[window(100.5, 104.5)],
            &Judge {
                margin_mib: 1024.0,
                cost: Some(&cost),
                partial: None,
            },
            &mut metrics,
            &mut flags,
        );
        assert_eq!(view.gpus, 2);
        assert!((view.energy_j.unwrap() - 2400.0).abs() < 1e-6);
        assert!((metrics["energy_per_output_token_j"].mean - 4.8).abs() < 1e-9);
        assert!((metrics["energy_per_request_j"].mean - 240.0).abs() < 1e-9);
        assert!((metrics["gpu_power_w"].mean - 600.0).abs() < 1e-9);
        // $3.6/GPU-hour x 2 GPUs x 4 s = $0.008; per million of 1000 input tokens: $8, of 500
        // output tokens: $16.
        assert!((metrics["cost_per_m_input_usd"].mean - 8.0).abs() < 1e-9);
        assert!((metrics["cost_per_m_output_usd"].mean - 16.0).abs() < 1e-9);
        assert!((metrics["gpu_memory_free_min_gib"].mean - 40_000.0 / 1024.0).abs() < 1e-9);
        assert!(flags.is_empty(), "{flags:?}");
    }

    #[test]
    fn throttling_inside_the_window_and_tight_memory_are_flagged() {
        // Idle before the window, a power cap inside it; 900 MiB free at its lowest.
        let samples = vec![
            sample(100.0, 100.0, 5000.0, 0x1),
            sample(101.0, 300.0, 900.0, 0x4 | 0x1),
            sample(102.0, 300.0, 2000.0, 0x0),
        ];
        let (mut metrics, mut flags) = (IndexMap::new(), Vec::new());
        let view = summarize(
            "local",
            &samples,
            &[window(100.5, 102.0)],
            &Judge {
                margin_mib: 1024.0,
                cost: None,
                partial: None,
            },
            &mut metrics,
            &mut flags,
        );
        assert_eq!(view.throttle_reasons, ["SW power cap"]);
        assert_eq!(view.min_free_mib, Some(900.0));
        assert_eq!(view.min_free_gpu, Some(0));
        assert_eq!(view.min_free_at, Some(101.0));
        let kinds: Vec<&str> = flags.iter().map(|f| f.kind.name()).collect();
        assert_eq!(kinds, ["gpu-memory-tight", "gpu-throttled"]);
        // Idle alone, or a reason outside the window, is not throttling.
        let (mut metrics, mut flags) = (IndexMap::new(), Vec::new());
        summarize(
            "local",
            &samples,
            &[window(101.5, 102.0)],
            &Judge {
                margin_mib: 512.0,
                cost: None,
                partial: None,
            },
            &mut metrics,
            &mut flags,
        );
        assert!(flags.is_empty(), "{flags:?}");
        assert_eq!(reasons(0x48), ["HW slowdown", "HW thermal slowdown"]);
    }

    /// A multi-node server's rank 0 alone gives no energy, and no GPU count for the cost.
    #[test]
    fn part_of_a_server_gives_no_energy_and_a_cost_only_from_cost_gpus() {
        let samples: Vec<GpuSample> = (0..=50)
            .map(|i| sample(99.9 + i as f64 * 0.1, 300.0, 40_000.0, 0))
            .collect();
        let judge = |cost| Judge {
            margin_mib: 1024.0,
            cost,
            partial: Some("rank 0 only".into()),
        };
        let (mut metrics, mut flags) = (IndexMap::new(), Vec::new());
        let unpriced = CostSpec {
            gpu_hour: 3.6,
            gpus: None,
        };
        let view = summarize(
            "local",
            &samples,
            &[window(100.5, 104.5)],
            &judge(Some(&unpriced)),
            &mut metrics,
            &mut flags,
        );
        assert_eq!(view.energy_j, None);
        assert_eq!(view.partial.as_deref(), Some("rank 0 only"));
        for m in [
            "energy_per_output_token_j",
            "gpu_power_w",
            "cost_per_m_output_usd",
        ] {
            assert!(!metrics.contains_key(m), "{m}");
        }
        assert!(metrics.contains_key("gpu_memory_free_min_gib"));
        // 16 GPUs (cost.gpus) at $3.6 for 4 s: $0.064, over 500 output tokens $128 per million.
        let priced = CostSpec {
            gpu_hour: 3.6,
            gpus: Some(16),
        };
        let mut metrics = IndexMap::new();
        summarize(
            "local",
            &samples,
            &[window(100.5, 104.5)],
            &judge(Some(&priced)),
            &mut metrics,
            &mut flags,
        );
        assert!((metrics["cost_per_m_output_usd"].mean - 128.0).abs() < 1e-9);
    }
}
