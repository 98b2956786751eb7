//! Progress: a bar on a terminal (points done, requests in flight, ETA), plain lines otherwise.
//!
//! With a plan estimate the ETA is the estimate of what is left, scaled by how the finished
//! part compared with its estimate: a context sweep's last points are its longest, so a rate
//! of requests (indicatif's own ETA) would be far too hopeful.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::catalog::Metric;
use crate::plan::estimate::Estimate;
use crate::results::records::PointRecord;
use crate::spec::Point;
use crate::text::duration as fmt_duration;

/// Time left, from a plan estimate corrected by the run so far.
#[derive(Debug, Clone)]
pub struct Eta {
    /// Estimated seconds of each point not yet finished.
    points: HashMap<String, f64>,
    /// Estimated seconds to ready of each group not yet launched.
    launches: HashMap<String, f64>,
    /// Estimated seconds of what has finished (the ratio's denominator).
    done_est: f64,
}

impl Eta {
    pub fn new(est: &Estimate) -> Eta {
        let mut points = HashMap::new();
        let mut launches = HashMap::new();
        for g in &est.groups {
            launches.insert(g.id.clone(), g.launch_s.unwrap_or(0.0));
            for p in &g.points {
                points.insert(p.id.clone(), p.seconds.unwrap_or(0.0));
            }
        }
        Eta {
            points,
            launches,
            done_est: 0.0,
        }
    }

    /// A group's server is ready (a relaunch of the same group counts nothing more).
    pub fn launched(&mut self, group: &str) {
        self.done_est += self.launches.remove(group).unwrap_or(0.0);
    }

    /// A point was measured.
    pub fn finished(&mut self, point: &str) {
        self.done_est += self.points.remove(point).unwrap_or(0.0);
    }

    /// A point will not be measured (skipped, or its server never started).
    pub fn dropped(&mut self, point: &str) {
        self.points.remove(point);
    }

    /// Seconds left after `elapsed` seconds of run: the estimate of what is left times how
    /// long the finished part took against its estimate (1 before anything finished).
    pub fn left(&self, elapsed: f64) -> f64 {
        let rest: f64 = self.points.values().sum::<f64>() + self.launches.values().sum::<f64>();
        let pace = if self.done_est > 0.0 {
            elapsed / self.done_est
        } else {
            1.0
        };
        rest * pace
    }
}

/// Reports progress of a run.
#[derive(Clone)]
pub struct Progress {
    bar: Option<ProgressBar>,
    points_total: usize,
    points_done: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    current: Arc<std::sync::Mutex<String>>,
    /// Prints nothing (the remote agent: its stdout carries records, not progress).
    silent: bool,
    eta: Arc<Mutex<Option<Eta>>>,
    started: Instant,
}

impl Progress {
    /// A bar when stderr is a terminal and `quiet` is off; plain lines otherwise.
    pub fn new(points_total: usize, requests_total: u64, quiet: bool) -> Progress {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::with_draw_target(Some(requests_total), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} requests · {msg} · ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        });
        Progress {
            bar,
            points_total,
            points_done: Arc::default(),
            in_flight: Arc::default(),
            current: Arc::default(),
            silent: false,
            eta: Arc::default(),
            started: Instant::now(),
        }
    }

    /// Uses `est` for the ETA (on the bar, and on each finished point's line).
    pub fn set_estimate(&self, est: &Estimate) {
        if let Ok(mut e) = self.eta.lock() {
            *e = Some(Eta::new(est));
        }
        if let Some(b) = &self.bar {
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} requests · {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
        }
        self.refresh();
    }

    fn with_eta(&self, f: impl FnOnce(&mut Eta)) {
        if let Ok(mut e) = self.eta.lock()
            && let Some(eta) = e.as_mut()
        {
            f(eta);
        }
    }

    /// ` · ~5m 10s left`, or nothing without an estimate.
    fn left_text(&self) -> String {
        let elapsed = self.started.elapsed().as_secs_f64();
        self.eta
            .lock()
            .ok()
            .and_then(|e| e.as_ref().map(|e| e.left(elapsed)))
            .map_or(String::new(), |s| format!(" · ~{} left", fmt_duration(s)))
    }

    /// A group's server is ready.
    pub fn launched(&self, group: &str) {
        self.with_eta(|e| e.launched(group));
        self.refresh();
    }

    /// A point's record was written: if it was never measured (skipped, or its server never
    /// started), its estimate leaves the time left; a measured point was counted already.
    pub fn point_recorded(&self, point: &str) {
        self.with_eta(|e| e.dropped(point));
        self.refresh();
    }

    /// Reports nothing.
    pub fn silent() -> Progress {
        Progress {
            silent: true,
            ..Progress::new(0, 0, true)
        }
    }

    /// Counts a request measured elsewhere (the remote agent) as started and finished.
    pub fn request_done_elsewhere(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
        self.refresh();
    }

    fn refresh(&self) {
        if let Some(b) = &self.bar {
            let cur = self.current.lock().map(|c| c.clone()).unwrap_or_default();
            b.set_message(format!(
                "point {}/{} {cur} · {} in flight{}",
                self.points_done.load(Ordering::Relaxed) + 1,
                self.points_total,
                self.in_flight.load(Ordering::Relaxed),
                self.left_text()
            ));
        }
    }

    /// A plain status line (printed above the bar, or to stderr).
    pub fn line(&self, text: &str) {
        if self.silent {
            return;
        }
        match &self.bar {
            Some(b) => b.println(text),
            None => eprintln!("{text}"),
        }
    }

    pub fn point_started(&self, label: &str) {
        if let Ok(mut c) = self.current.lock() {
            *c = label.to_string();
        }
        self.refresh();
    }

    pub fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.refresh();
    }

    pub fn request_finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.inc(1);
        }
        self.refresh();
    }

    pub fn point_finished(&self, point: &str, summary: &str) {
        let done = self.points_done.fetch_add(1, Ordering::Relaxed) + 1;
        self.with_eta(|e| e.finished(point));
        let left = if done < self.points_total {
            self.left_text()
        } else {
            String::new()
        };
        self.line(&format!("[{done}/{}] {summary}{left}", self.points_total));
        self.refresh();
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// One line per finished point for the terminal: counts, headline means, then each flag.
pub fn point_line(point: &Point, r: &PointRecord) -> String {
    let mean = |m: Metric| {
        r.metrics
            .get(m.name())
            .filter(|s| s.count > 0)
            .map(|s| s.mean)
    };
    let mut s = format!("{}: {} ok, {} err", point.label(), r.ok, r.errors);
    if let Some(v) = mean(Metric::PromptTokens) {
        s.push_str(&format!(" · prompt {v:.0} tok"));
    }
    if let Some(v) = mean(Metric::Ttft) {
        s.push_str(&format!(" · TTFT {v:.3} s"));
    }
    if let Some(v) = mean(Metric::Prefill) {
        s.push_str(&format!(" · prefill {v:.0} tok/s"));
    }
    if let Some(v) = mean(Metric::Decode) {
        s.push_str(&format!(" · decode {v:.1} tok/s"));
    }
    for f in &r.flags {
        s.push_str(&format!("\n    ⚠ {}: {}", f.kind, f.message));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::estimate::{GroupEstimate, PointEstimate};

    fn estimate() -> Estimate {
        let point = |id: &str, s: f64| PointEstimate {
            id: id.into(),
            seconds: Some(s),
        };
        Estimate {
            source: "test".into(),
            groups: vec![
                GroupEstimate {
                    id: "g1".into(),
                    launch_s: Some(10.0),
                    points: vec![point("p001", 10.0), point("p002", 100.0)],
                },
                GroupEstimate {
                    id: "g2".into(),
                    launch_s: Some(10.0),
                    points: vec![point("p003", 200.0)],
                },
            ],
        }
    }

    #[test]
    fn the_eta_is_the_estimate_left_at_the_pace_so_far() {
        let mut eta = Eta::new(&estimate());
        assert_eq!(eta.left(0.0), 330.0);
        eta.launched("g1");
        eta.finished("p001");
        // 20 estimated seconds took 40: the remaining 310 will take about 620.
        assert_eq!(eta.left(40.0), 620.0);
        // A relaunch of g1 adds nothing; a dropped point leaves the estimate, not the pace.
        eta.launched("g1");
        eta.dropped("p003");
        assert_eq!(eta.left(40.0), 2.0 * (100.0 + 10.0));
        eta.finished("p002");
        eta.launched("g2");
        assert_eq!(eta.left(500.0), 0.0);
    }
}
