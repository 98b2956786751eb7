//! A time series per point: requests in flight as the client saw them (a mean per bin, folded
//! request by request in [`InFlight`]), and the server's own running and queued requests from
//! its `/metrics` scrapes, against seconds into the point. Pure, like [`super::charts`]: the
//! same files give byte-identical SVG.

use indexmap::IndexMap;
use plotters::prelude::*;

use super::chart_error::ChartError;
use super::chart_style::{PALETTE, draw_legend, draw_line};
use servebench_model::results::gpu::GpuSample;
use servebench_model::results::records::PointRecord;
use servebench_model::results::server_view::MetricsScrape;

const SIZE: (u32, u32) = (720, 360);
/// The palette's first three, cycled.
const COLORS: &[RGBColor] = PALETTE.split_at(3).0;

/// One point's time series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Timeline {
    /// File name inside `charts/` (`timeline-p003.svg`).
    pub file: String,
    /// Caption and alt text.
    pub title: String,
    /// (label, (seconds into the point, value) steps).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Seconds per bin of the client's in-flight series, which is a mean per bin (None when
    /// the point had no measured request, or the chart has no client series).
    pub client_bin_s: Option<f64>,
    /// What the y axis counts (`requests`, `W`, `GiB free`).
    pub y_desc: String,
}

/// The prefix of every GPU chart's file (`gpu-power-p001.svg`, `gpu-memory-p001.svg`).
pub(crate) const GPU_FILE_PREFIX: &str = "gpu-";

/// Most points a GPU series is drawn with (every k-th reading past it): about a pixel each.
const GPU_POINTS: usize = BINS;

/// Two charts per point that has GPU readings (`gpu.jsonl`): each GPU's power draw, and each
/// GPU's free memory, against seconds since the point's first reading (its rounds one after
/// another, as they ran).
pub(crate) fn gpu_timelines(samples: &[GpuSample]) -> Vec<Timeline> {
    let mut points: Vec<&str> = Vec::new();
    for s in samples.iter().filter(|s| s.cut.is_none()) {
        if !points.contains(&s.point.as_str()) {
            points.push(&s.point);
        }
    }
    let mut out = Vec::new();
    for id in points {
        let mine: Vec<&GpuSample> = samples
            .iter()
            .filter(|s| s.point == id && s.cut.is_none())
            .collect();
        let t0 = mine.iter().map(|s| s.t).fold(f64::INFINITY, f64::min);
        let step = mine.len().div_ceil(GPU_POINTS).max(1);
        let mut indexes: Vec<u32> = mine
            .iter()
            .flat_map(|s| s.gpus.iter().map(|g| g.index))
            .collect();
        indexes.sort_unstable();
        indexes.dedup();
        for (what, y_desc, value) in [
            (
                "power",
                "W",
                (|g: &servebench_model::results::gpu::GpuReading| g.power_w)
                    as fn(&servebench_model::results::gpu::GpuReading) -> Option<f64>,
            ),
            ("memory", "GiB free", |g| {
                g.memory_free_mib.map(|m| m / 1024.0)
            }),
        ] {
            let series: Vec<(String, Vec<(f64, f64)>)> = indexes
                .iter()
                .map(|i| {
                    let xy = mine
                        .iter()
                        .step_by(step)
                        .filter_map(|s| {
                            let g = s.gpus.iter().find(|g| g.index == *i)?;
                            Some((s.t - t0, value(g)?))
                        })
                        .collect();
                    (format!("GPU {i}"), xy)
                })
                .filter(|(_, xy): &(String, Vec<(f64, f64)>)| !xy.is_empty())
                .collect();
            if series.is_empty() {
                continue;
            }
            out.push(Timeline {
                file: format!("{GPU_FILE_PREFIX}{what}-{id}.svg"),
                title: format!(
                    "{id}: GPU {} over time",
                    if what == "power" {
                        "power draw"
                    } else {
                        "free memory"
                    }
                ),
                series,
                client_bin_s: None,
                y_desc: y_desc.to_string(),
            });
        }
    }
    out
}

/// The prefix of every timeline file, so a re-render can remove stale ones.
pub(crate) const FILE_PREFIX: &str = "timeline-";

/// Each scraped point's time origin: Unix seconds of its first scrape, in `points` order.
/// Only these points get a timeline; fold their requests with
/// [`super::digest::RequestDigest::with_timelines`].
pub(crate) fn origins(points: &[PointRecord], scrapes: &[MetricsScrape]) -> Vec<(String, f64)> {
    points
        .iter()
        .filter_map(|p| {
            let t0 = scrapes
                .iter()
                .filter(|s| s.point == p.id)
                .map(|s| s.t)
                .fold(f64::INFINITY, f64::min);
            t0.is_finite().then(|| (p.id.clone(), t0))
        })
        .collect()
}

/// A timeline per point that has scrapes. `in_flight` holds the client's side, folded from
/// `requests.jsonl` from the [`origins`] of the same scrapes; a point missing there had no
/// measured request.
pub(crate) fn timelines(
    points: &[PointRecord],
    in_flight: &IndexMap<String, InFlight>,
    scrapes: &[MetricsScrape],
) -> Vec<Timeline> {
    origins(points, scrapes)
        .into_iter()
        .map(|(id, t0)| {
            let mine: Vec<&MetricsScrape> = scrapes.iter().filter(|s| s.point == id).collect();
            let client = in_flight.get(&id).cloned().unwrap_or(InFlight::new(t0));
            let mut series = vec![("in flight (client)".to_string(), client.series())];
            for (label, names) in [
                (
                    "running (server)",
                    [
                        "sglang:num_running_reqs",
                        "vllm:num_requests_running",
                        "llamacpp:requests_processing",
                    ],
                ),
                (
                    "queued (server)",
                    [
                        "sglang:num_queue_reqs",
                        "vllm:num_requests_waiting",
                        "llamacpp:requests_deferred",
                    ],
                ),
            ] {
                let xy: Vec<(f64, f64)> = mine
                    .iter()
                    .filter_map(|s| {
                        let v = names.iter().find_map(|n| s.values.get(*n))?;
                        Some((s.t - t0, *v))
                    })
                    .collect();
                if !xy.is_empty() {
                    series.push((label.to_string(), xy));
                }
            }
            Timeline {
                file: format!("{FILE_PREFIX}{id}.svg"),
                title: format!("{id}: requests in flight over time"),
                series,
                client_bin_s: client.bin_s(),
                y_desc: "requests".into(),
            }
        })
        .collect()
}

/// Bins an [`InFlight`] holds at most: about one per pixel of the chart's plot area, so the
/// drawn line loses nothing a pixel could show.
pub(crate) const BINS: usize = 512;

/// Width of a bin before the first request past `BINS` of them: fine enough that a short point
/// (the tests' are tenths of a second) is drawn at millisecond steps.
const FIRST_BIN_S: f64 = 1e-3;

/// The client's measured requests in flight over one point (from each request's send to its
/// end), folded one request at a time into at most [`BINS`] bins of equal width: memory is
/// fixed whatever the number of requests. A request that falls past the last bin doubles the
/// width, each pair of bins merged into one, so the bins always span the requests seen.
///
/// Each bin keeps the count and the sum of the send times and of the end times that fall in
/// it; from those the seconds × requests in flight over any bin follow exactly (see
/// [`InFlight::series`]), so the chart shows the mean in flight per bin, not a sample.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InFlight {
    /// Unix seconds of second 0 (the point's first scrape); earlier times count as 0.
    origin: f64,
    /// Seconds per bin.
    width: f64,
    /// [`BINS`] bins, bin `k` spanning `[k·width, (k+1)·width)` seconds after the origin.
    bins: Vec<Edges>,
    /// The latest send or end, seconds after the origin (None before the first request).
    last: Option<f64>,
}

/// The sends and ends that fall in one bin.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Edges {
    /// Requests sent in the bin.
    starts: u64,
    /// Their send times summed, seconds after the origin.
    start_sum: f64,
    /// Requests that ended in the bin.
    ends: u64,
    /// Their end times summed, seconds after the origin.
    end_sum: f64,
}

impl InFlight {
    /// No requests yet; seconds count from `origin` (Unix seconds).
    pub(crate) fn new(origin: f64) -> InFlight {
        InFlight {
            origin,
            width: FIRST_BIN_S,
            bins: vec![Edges::default(); BINS],
            last: None,
        }
    }

    /// Adds a request sent at `sent_at` (Unix seconds) that ended `end_s` seconds later (None:
    /// it never ended, and stays in flight to the end of the chart).
    pub(crate) fn add(&mut self, sent_at: f64, end_s: Option<f64>) {
        let start = (sent_at - self.origin).max(0.0);
        if !start.is_finite() {
            return;
        }
        let k = self.bin_of(start);
        self.bins[k].starts += 1;
        self.bins[k].start_sum += start;
        self.last = Some(self.last.map_or(start, |l| l.max(start)));
        let Some(end_s) = end_s else { return };
        // An end before its send (a corrupt record) would count a request out before it
        // came in.
        let end = (sent_at + end_s - self.origin).max(start);
        if !end.is_finite() {
            return;
        }
        let k = self.bin_of(end);
        self.bins[k].ends += 1;
        self.bins[k].end_sum += end;
        self.last = Some(self.last.map_or(end, |l| l.max(end)));
    }

    /// The bin that holds `t` (finite, ≥ 0), widening the bins until one does.
    fn bin_of(&mut self, t: f64) -> usize {
        while t >= self.width * BINS as f64 {
            for k in 0..BINS / 2 {
                let (a, b) = (self.bins[2 * k], self.bins[2 * k + 1]);
                self.bins[k] = Edges {
                    starts: a.starts + b.starts,
                    start_sum: a.start_sum + b.start_sum,
                    ends: a.ends + b.ends,
                    end_sum: a.end_sum + b.end_sum,
                };
            }
            self.bins[BINS / 2..].fill(Edges::default());
            self.width *= 2.0;
        }
        ((t / self.width) as usize).min(BINS - 1)
    }

    /// Seconds per bin of the series (None before the first request).
    pub(crate) fn bin_s(&self) -> Option<f64> {
        self.last.map(|_| self.width)
    }

    /// The mean requests in flight per bin as steps `(seconds after the origin, requests)`,
    /// from 0 to the latest send or end, the last step at that time with the requests still
    /// in flight then (those that never ended). `[(0, 0)]` without requests.
    pub(crate) fn series(&self) -> Vec<(f64, f64)> {
        let Some(last) = self.last else {
            return vec![(0.0, 0.0)];
        };
        let last_bin = ((last / self.width) as usize).min(BINS - 1);
        let mut out = Vec::with_capacity(2 * last_bin + 3);
        // Requests in flight at the start of the bin: sent in an earlier bin, not ended there.
        let mut n: i64 = 0;
        for (k, e) in self.bins[..=last_bin].iter().enumerate() {
            let a = k as f64 * self.width;
            let b = if k == last_bin {
                last
            } else {
                (k + 1) as f64 * self.width
            };
            let span = b - a;
            if span > 0.0 {
                // Seconds × requests over [a, b): those in flight at `a` for the whole span,
                // each send in the bin from its time to `b`, less each end from its time to `b`.
                let area = n as f64 * span + (e.starts as f64 * b - e.start_sum)
                    - (e.ends as f64 * b - e.end_sum);
                let mean = area / span;
                out.push((a, mean));
                out.push((b, mean));
            }
            n += e.starts as i64 - e.ends as i64;
        }
        out.push((last, n as f64));
        out
    }
}

/// Draws a timeline as SVG: seconds on x, requests on y, a line per series.
pub(crate) fn render_svg(t: &Timeline) -> Result<String, ChartError> {
    let err = |e: &dyn std::fmt::Display| ChartError {
        file: t.file.clone(),
        message: e.to_string(),
    };
    let all = || t.series.iter().flat_map(|(_, xy)| xy.iter());
    let x_max = all().map(|p| p.0).fold(0.0, f64::max).max(1e-3) * 1.02;
    let y_max = all().map(|p| p.1).fold(0.0, f64::max).max(1.0) * 1.3;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let mut plot = ChartBuilder::on(&root)
            .caption(t.title.as_str(), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(52)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| err(&e))?;
        plot.configure_mesh()
            .x_desc(x_desc(t.client_bin_s))
            .y_desc(t.y_desc.as_str())
            .label_style(("sans-serif", 14))
            .light_line_style(TRANSPARENT)
            .bold_line_style(RGBColor(220, 220, 220))
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (label, xy)) in t.series.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            draw_line(&mut plot, xy.clone(), color, Some(label)).map_err(|e| err(&e))?;
        }
        draw_legend(&mut plot, SeriesLabelPosition::UpperRight, 13).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// The x axis's words, with the width the client's in-flight series is averaged over.
fn x_desc(bin_s: Option<f64>) -> String {
    match bin_s {
        Some(w) if w < 1.0 => format!(
            "seconds into the point (client in flight: mean per {} ms)",
            servebench_model::text::sig3(w * 1e3)
        ),
        Some(w) => format!(
            "seconds into the point (client in flight: mean per {})",
            servebench_model::text::duration(w)
        ),
        None => "seconds into the point".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds × requests under a step series (each pair of points one flat step).
    fn area(series: &[(f64, f64)]) -> f64 {
        series
            .chunks(2)
            .filter(|w| w.len() == 2)
            .map(|w| (w[1].0 - w[0].0) * w[0].1)
            .sum()
    }

    #[test]
    fn bins_widen_to_span_the_requests_and_keep_their_seconds_in_flight() {
        let mut f = InFlight::new(1000.0);
        // 10,000 requests, one sent every millisecond, each 50 ms long: 50 in flight once the
        // first has ended, 500 request-seconds in all, over 10.05 s (past 512 first bins).
        for i in 0..10_000 {
            f.add(1000.0 + i as f64 * 1e-3, Some(0.05));
        }
        assert_eq!(f.bins.len(), BINS, "memory does not grow with the requests");
        // 1 ms doubled until 512 bins span 10.05 s: 32 ms.
        assert_eq!(f.bin_s(), Some(0.032));
        let series = f.series();
        assert!(series.len() <= 2 * BINS + 1);
        assert!((area(&series) - 500.0).abs() < 1e-6, "{}", area(&series));
        // Steady state: exactly 50 in flight (to rounding) in every bin after the first 50 ms
        // and before the last sends.
        for w in series.chunks(2).filter(|w| w.len() == 2) {
            if w[0].0 >= 0.064 && w[1].0 <= 9.99 {
                assert!((w[0].1 - 50.0).abs() < 1e-6, "{w:?}");
            }
        }
        let (end, left) = *series.last().unwrap();
        assert!((end - 10.049).abs() < 1e-9 && left == 0.0, "{end} {left}");
    }

    #[test]
    fn a_request_that_never_ended_stays_in_flight_and_early_sends_count_from_zero() {
        let mut f = InFlight::new(50.0);
        // Sent before the first scrape: counted from second 0, as the chart starts there.
        f.add(49.0, Some(1.5));
        f.add(50.2, None);
        let series = f.series();
        assert!((area(&series) - (0.5 + 0.3)).abs() < 1e-9, "{series:?}");
        assert_eq!(
            series.last(),
            Some(&(0.5, 1.0)),
            "one still in flight at the end"
        );
        assert_eq!(InFlight::new(0.0).series(), vec![(0.0, 0.0)]);
        assert_eq!(InFlight::new(0.0).bin_s(), None);
    }
}
