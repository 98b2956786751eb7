//! Progress: a bar on a terminal (points done, the current point and how long it has run,
//! requests in flight, time left; redrawn every 200 ms, so a long prefill shows life), plain
//! lines otherwise.
//!
//! With a plan estimate the ETA is the estimate of what is left, scaled by how the finished
//! part compared with its estimate: a context sweep's last points are its longest, so a rate
//! of requests (indicatif's own ETA) would be far too hopeful.

use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::plan::estimate::Estimate;
use servebench_model::catalog::Metric;
use servebench_model::results::records::PointRecord;
use servebench_model::spec::Point;
use servebench_model::text::duration as fmt_duration;

/// Time left, from a plan estimate corrected by the run so far. On a host pool the time
/// left is the pool's wall time for what is left (groups in parallel, as `plan::pool`
/// schedules them), not the sum of it.
#[derive(Debug, Clone)]
pub(crate) struct Eta {
    /// Estimated seconds of each point not yet finished, with its group.
    points: HashMap<String, (String, f64)>,
    /// Estimated seconds to ready of each group not yet launched.
    launches: HashMap<String, f64>,
    /// The groups in plan order, with how many of the pool's hosts each takes at once.
    groups: Vec<(String, usize)>,
    /// Estimated seconds of what has finished, per group.
    done: HashMap<String, f64>,
    /// Hosts in the pool (1 off a pool).
    hosts: usize,
    /// Seconds of run when the last launch or point settled ([`Eta::mark`]): the pace is
    /// measured up to there, and the time since counts down what is left. None: up to now.
    settled_at: Option<f64>,
}

impl Eta {
    #[cfg(test)]
    /// The ETA of `est` on one host.
    pub(crate) fn new(est: &Estimate) -> Eta {
        Eta::on_pool(est, 1, |_| 1)
    }

    /// The ETA of `est` on a pool of `hosts`, where group `g` takes `need(g)` of them at once.
    pub(crate) fn on_pool(est: &Estimate, hosts: usize, need: impl Fn(&str) -> usize) -> Eta {
        let mut points = HashMap::new();
        let mut launches = HashMap::new();
        for g in &est.groups {
            launches.insert(g.id.clone(), g.launch_s.unwrap_or(0.0));
            for p in &g.points {
                points.insert(p.id.clone(), (g.id.clone(), p.seconds.unwrap_or(0.0)));
            }
        }
        Eta {
            points,
            launches,
            groups: est
                .groups
                .iter()
                .map(|g| (g.id.clone(), need(&g.id)))
                .collect(),
            done: HashMap::new(),
            hosts: hosts.max(1),
            settled_at: None,
        }
    }

    /// Something settled (a launch, a point) `elapsed` seconds into the run.
    pub(crate) fn mark(&mut self, elapsed: f64) {
        self.settled_at = Some(elapsed);
    }

    /// A group's server is ready (a relaunch of the same group counts nothing more).
    pub(crate) fn launched(&mut self, group: &str) {
        if let Some(s) = self.launches.remove(group) {
            *self.done.entry(group.to_string()).or_default() += s;
        }
    }

    /// A point was measured.
    pub(crate) fn finished(&mut self, point: &str) {
        if let Some((group, s)) = self.points.remove(point) {
            *self.done.entry(group).or_default() += s;
        }
    }

    /// A point will not be measured (skipped, or its server never started).
    pub(crate) fn dropped(&mut self, point: &str) {
        self.points.remove(point);
    }

    /// Estimated seconds left of each group, in plan order.
    fn rest(&self) -> Vec<(String, usize, f64)> {
        self.groups
            .iter()
            .map(|(g, need)| {
                let points: f64 = self
                    .points
                    .values()
                    .filter(|(pg, _)| pg == g)
                    .map(|(_, s)| s)
                    .sum();
                let launch = self.launches.get(g).copied().unwrap_or(0.0);
                (g.clone(), *need, points + launch)
            })
            .collect()
    }

    /// The pool's wall time for `groups` (their sum where the pool cannot hold one).
    fn wall(&self, groups: &[(String, usize, f64)]) -> f64 {
        crate::plan::pool::schedule(groups, self.hosts)
            .map(|s| s.wall_s)
            .unwrap_or_else(|_| groups.iter().map(|g| g.2).sum())
    }

    /// Seconds left after `elapsed` seconds of run: the pool's estimated wall time for what
    /// is left, times how long the finished part took against its estimated wall time (1
    /// before anything finished), less the time since the last thing settled (the point
    /// being measured counts down; a pace taken to now would count its time as done work's
    /// and grow the time left as it runs). On one host the wall times are plain sums.
    pub(crate) fn left(&self, elapsed: f64) -> f64 {
        let rest = self.rest();
        let all: Vec<(String, usize, f64)> = rest
            .iter()
            .map(|(g, need, s)| {
                (
                    g.clone(),
                    *need,
                    s + self.done.get(g).copied().unwrap_or(0.0),
                )
            })
            .collect();
        let left = self.wall(&rest);
        let done = self.wall(&all) - left;
        let at = self.settled_at.unwrap_or(elapsed).min(elapsed);
        let pace = if done > 0.0 && at > 0.0 {
            at / done
        } else {
            1.0
        };
        (left * pace - (elapsed - at)).max(0.0)
    }
}

/// How often the bar is redrawn when nothing happens (a long prefill): the spinner turns and
/// the clocks move, so a quiet run never looks hung.
const TICK: Duration = Duration::from_millis(200);

/// What the bar shows besides its counts; shared with the bar's redraw on every tick.
#[derive(Debug, Default)]
struct Shown {
    /// Points recorded (measured, skipped, failed): each counted once.
    settled: HashSet<String>,
    /// The point being measured (id, label) and when it started.
    current: Option<(String, String, Instant)>,
}

/// Reports progress of a run.
#[derive(Clone)]
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    points_total: usize,
    shown: Arc<Mutex<Shown>>,
    in_flight: Arc<AtomicUsize>,
    /// Prints nothing (the remote agent: its stdout carries records, not progress).
    silent: bool,
    eta: Arc<Mutex<Option<Eta>>>,
    started: Instant,
    /// What the run waits for between points (a Slurm job in the queue), on the bar.
    waiting: Arc<Mutex<Option<String>>>,
}

impl Progress {
    /// A bar when stderr is a terminal and `quiet` is off; plain lines otherwise.
    pub(crate) fn new(points_total: usize, requests_total: u64, quiet: bool) -> Progress {
        let mut p = Progress {
            bar: None,
            points_total,
            shown: Arc::default(),
            in_flight: Arc::default(),
            silent: false,
            eta: Arc::default(),
            started: Instant::now(),
            waiting: Arc::default(),
        };
        if !quiet && std::io::stderr().is_terminal() {
            let b =
                ProgressBar::with_draw_target(Some(requests_total), ProgressDrawTarget::stderr());
            b.set_style(p.style());
            b.enable_steady_tick(TICK);
            // Log lines and console lines go above the bar, not through it.
            servebench_model::console::set_bar(Some(b.clone()));
            p.bar = Some(b);
        }
        p
    }

    /// The bar's look: counts, then [`Progress::state`] recomputed on every redraw.
    fn style(&self) -> ProgressStyle {
        let me = self.clone();
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} requests · {state}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "state",
            move |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&me.state(s.eta().as_secs_f64()));
            },
        )
    }

    /// `point 3/6 ctx=8192 (1m 02s) · 2 in flight · ~5m 10s left`: the point number never
    /// passes the total; the time left is the estimate's when there is one, else the rate's
    /// (`rate_eta_s`).
    fn state(&self, rate_eta_s: f64) -> String {
        let (settled, current) = {
            let shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
            (shown.settled.len(), shown.current.clone())
        };
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let point = match current {
            None if waiting.is_some() => waiting.unwrap_or_default(),
            Some((_, label, since)) => format!(
                "point {}/{} {label} ({})",
                (settled + 1).min(self.points_total),
                self.points_total,
                clock(since.elapsed())
            ),
            None => format!(
                "{}/{} points",
                settled.min(self.points_total),
                self.points_total
            ),
        };
        let left = match self.left_text() {
            l if l.is_empty() && rate_eta_s > 0.0 => {
                format!(" · ETA {}", fmt_duration(rate_eta_s))
            }
            l => l,
        };
        format!(
            "{point} · {} in flight{left}",
            self.in_flight.load(Ordering::Relaxed)
        )
    }

    #[cfg(test)]
    /// Uses `est` for the ETA (on the bar, and on each finished point's line).
    pub(crate) fn set_estimate(&self, est: &Estimate) {
        self.set_eta(Eta::new(est));
    }

    /// Uses `eta` for the time left (a pool's: [`Eta::on_pool`]).
    pub(crate) fn set_eta(&self, mut eta: Eta) {
        eta.mark(self.started.elapsed().as_secs_f64());
        if let Ok(mut e) = self.eta.lock() {
            *e = Some(eta);
        }
    }

    /// `f` on the ETA, and the moment marked: each use is something settling.
    fn with_eta(&self, f: impl FnOnce(&mut Eta)) {
        let now = self.started.elapsed().as_secs_f64();
        if let Ok(mut e) = self.eta.lock()
            && let Some(eta) = e.as_mut()
        {
            f(eta);
            eta.mark(now);
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
    pub(crate) fn launched(&self, group: &str) {
        self.with_eta(|e| e.launched(group));
    }

    /// Marks `point` as settled (once); the number of settled points.
    fn settle(&self, point: &str) -> usize {
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        if shown.current.as_ref().is_some_and(|(id, _, _)| id == point) {
            shown.current = None;
        }
        shown.settled.insert(point.to_string());
        shown.settled.len()
    }

    /// A point's record was written: if it was never measured (skipped, or its server never
    /// started), its estimate leaves the time left; a measured point was counted already.
    pub(crate) fn point_recorded(&self, point: &str) {
        self.settle(point);
        self.with_eta(|e| e.dropped(point));
    }

    /// Reports nothing.
    pub(crate) fn silent() -> Progress {
        Progress {
            silent: true,
            ..Progress::new(0, 0, true)
        }
    }

    /// Counts a request measured elsewhere (the remote agent) as started and finished.
    pub(crate) fn request_done_elsewhere(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    /// A plain status line (printed above the bar, or to stderr).
    pub(crate) fn line(&self, text: &str) {
        if self.silent {
            return;
        }
        match &self.bar {
            // The bar prints itself, not through the console: hide secrets here.
            Some(b) => b.println(servebench_model::redact::text(text)),
            None => servebench_model::console::errln(text),
        }
    }

    /// What the run waits for now (`g1: Slurm job 12 pending (Priority)`): a line, and the
    /// bar's state until the next point starts.
    pub(crate) fn waiting(&self, text: &str) {
        *self.waiting.lock().unwrap_or_else(|e| e.into_inner()) = Some(text.to_string());
        self.line(text);
    }

    /// Point `id` (shown as `label`) starts.
    pub(crate) fn point_started(&self, id: &str, label: &str) {
        *self.waiting.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let mut shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
        let label = servebench_model::redact::text(label).into_owned();
        shown.current = Some((id.to_string(), label, Instant::now()));
    }

    pub(crate) fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn request_finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    /// Point `point` was measured: its line, `[3/6] ...`, with the time left before the last.
    pub(crate) fn point_finished(&self, point: &str, summary: &str) {
        let done = self.settle(point);
        self.with_eta(|e| e.finished(point));
        let left = if done < self.points_total {
            self.left_text()
        } else {
            String::new()
        };
        self.line(&finished_line(
            done.min(self.points_total),
            self.points_total,
            summary,
            &left,
        ));
    }

    pub(crate) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
            servebench_model::console::set_bar(None);
        }
    }
}

/// `[3/6] <the point's line><time left>`, then its warnings: the time left ends the point's
/// own line, not the last warning under it.
fn finished_line(done: usize, total: usize, summary: &str, left: &str) -> String {
    let (head, warnings) = match summary.split_once('\n') {
        Some((head, rest)) => (head, format!("\n{rest}")),
        None => (summary, String::new()),
    };
    format!("[{done}/{total}] {head}{left}{warnings}")
}

/// A running clock in whole seconds (`7 s`, `4m 02s`): a tenth of a second changing at every
/// tick reads as noise.
fn clock(elapsed: Duration) -> String {
    match elapsed.as_secs() {
        s if s < 60 => format!("{s} s"),
        s => fmt_duration(s as f64),
    }
}

/// One line per finished point for the terminal: counts, headline means, then each flag.
/// Numbers are written as the report writes them ([`servebench_model::text`]).
pub(crate) fn point_line(point: &Point, r: &PointRecord) -> String {
    use servebench_model::text;
    let mean = |m: Metric| {
        r.metrics
            .get(m.name())
            .filter(|s| s.count > 0)
            .map(|s| s.mean)
    };
    let mut s = format!("{}: {} ok, {} failed", point.label(), r.ok, r.errors);
    if let Some(v) = mean(Metric::PromptTokens) {
        s.push_str(&format!(" · prompt {} tok", text::tokens(v)));
    }
    // Each metric in its catalogue unit, as the report and the CSV write it (times in ms).
    let shown = |m: Metric, v: f64| format!("{} {}", text::metric_value(Some(m), v), m.unit());
    if let Some(v) = mean(Metric::Ttft) {
        s.push_str(&format!(" · TTFT {}", shown(Metric::Ttft, v)));
    }
    if let Some(v) = mean(Metric::Prefill) {
        s.push_str(&format!(" · prefill {} tok/s", text::rate(v)));
    }
    if let Some(v) = mean(Metric::Decode) {
        s.push_str(&format!(" · decode {} tok/s", text::rate(v)));
    }
    // The system's numbers, open loop or closed: what the point's window sustained.
    if let Some(v) = mean(Metric::ThroughputReq) {
        s.push_str(&format!(" · {}", shown(Metric::ThroughputReq, v)));
    }
    if let Some(v) = mean(Metric::OutputTok) {
        s.push_str(&format!(" · {} out", shown(Metric::OutputTok, v)));
    }
    if let Some(v) = mean(Metric::Goodput) {
        s.push_str(&format!(" · goodput {}", shown(Metric::Goodput, v)));
    }
    if let Some(v) = &r.validity {
        let word = if v.failed() { "INVALID" } else { "valid" };
        s.push_str(&format!(" · output {word}: {}", v.summary()));
    }
    if let Some(v) = &r.agentx {
        s.push_str(&agentx_line(v));
    }
    for f in &r.flags {
        s.push_str(&format!("\n    ⚠ {}: {}", f.kind, f.message));
    }
    s
}

/// The point against the `agentx` preset: conforming (the corpus unverified), or each rule it
/// broke with what it did.
fn agentx_line(v: &servebench_model::results::agentx::AgentxVerdict) -> String {
    if v.conforms {
        return " · AgentX: conforms to every rule servebench judges (the corpus's identity not verified)".into();
    }
    let mut s = String::from(" · AgentX: does not conform");
    if v.overridden {
        s.push_str(" (`preset_override`)");
    }
    for r in v.rules.iter().filter(|r| r.met == Some(false)) {
        s.push_str(&format!("\n    ✗ AgentX {}: {}", r.rule, r.measured));
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
    fn the_point_counter_never_passes_the_total() {
        let p = Progress::new(2, 4, true);
        assert_eq!(p.state(0.0), "0/2 points · 0 in flight");
        p.point_started("p001", "ctx=1");
        p.request_started();
        assert!(
            p.state(0.0).starts_with("point 1/2 ctx=1 ("),
            "{}",
            p.state(0.0)
        );
        assert!(p.state(0.0).ends_with(" · 1 in flight"), "{}", p.state(0.0));
        p.request_finished();
        p.point_finished("p001", "ctx=1: done");
        // Its record is written afterwards: counted once.
        p.point_recorded("p001");
        assert_eq!(p.state(0.0), "1/2 points · 0 in flight");
        // A skipped point is never started, only recorded.
        p.point_recorded("p002");
        assert_eq!(p.state(0.0), "2/2 points · 0 in flight");
        // Even a point past the plan (it cannot happen) does not show 3/2.
        p.point_started("p003", "ctx=3");
        assert!(p.state(0.0).starts_with("point 2/2 "), "{}", p.state(0.0));
    }

    #[test]
    fn the_points_clock_counts_whole_seconds() {
        assert_eq!(clock(Duration::from_millis(900)), "0 s");
        assert_eq!(clock(Duration::from_millis(7_400)), "7 s");
        assert_eq!(clock(Duration::from_secs(59)), "59 s");
        assert_eq!(clock(Duration::from_secs(242)), "4m 02s");
    }

    #[test]
    fn without_an_estimate_the_rate_gives_the_time_left() {
        let p = Progress::new(1, 4, true);
        assert_eq!(p.state(90.0), "0/1 points · 0 in flight · ETA 1m 30s");
        p.set_estimate(&estimate());
        assert!(p.state(90.0).ends_with(" left"), "{}", p.state(90.0));
    }

    #[test]
    fn a_point_line_writes_numbers_as_the_report_does() {
        use servebench_model::results::records::Stat;
        let point = servebench_model::spec::load_str(
            "t.yaml",
            "name: t\nserver: { engine: sim }\nworkload:\n  prompt: { kind: repeat, tokens: 100 }\n  output_tokens: 4\n",
        )
        .unwrap()
        .points
        .remove(0);
        let mut r = PointRecord::empty(&point, "g1");
        r.ok = 3;
        r.errors = 1;
        let stat = |mean: f64| Stat {
            count: 3,
            mean,
            ..Stat::default()
        };
        r.metrics.insert("ttft_s".into(), stat(0.012345));
        r.metrics.insert("prefill_tok_s".into(), stat(12345.6));
        r.metrics.insert("decode_tok_s".into(), stat(98.76));
        r.metrics.insert("throughput_req_s".into(), stat(12.34));
        r.metrics.insert("output_tok_s".into(), stat(456.7));
        let line = point_line(&point, &r);
        assert!(line.contains("· 12.3 req/s · 457 tok/s out"), "{line}");
        assert!(line.contains(": 3 ok, 1 failed"), "{line}");
        assert!(line.contains("TTFT 12.3 ms"), "{line}");
        assert!(line.contains("prefill 12346 tok/s"), "{line}");
        assert!(line.contains("decode 98.8 tok/s"), "{line}");
    }

    #[test]
    fn the_time_left_ends_the_points_line_not_its_last_warning() {
        let line = finished_line(
            1,
            3,
            "p001: 4 ok, 0 failed\n    ⚠ errors: 1 of 5 requests failed",
            " · ~2m left",
        );
        assert_eq!(
            line,
            "[1/3] p001: 4 ok, 0 failed · ~2m left\n    ⚠ errors: 1 of 5 requests failed"
        );
        assert_eq!(finished_line(3, 3, "p003: ok", ""), "[3/3] p003: ok");
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

    /// One load point measured after its launch: the time left counts down as it runs (it
    /// grew with it: "~13m 57s left" at 1968 of 2000 requests of a 6 s run).
    #[test]
    fn the_time_left_counts_down_while_a_point_runs() {
        let mut eta = Eta::new(&estimate());
        eta.mark(0.0);
        eta.launched("g1");
        // g1's 10 estimated seconds took 5: the run goes at twice the estimate.
        eta.mark(5.0);
        let mut last = eta.left(5.0);
        assert_eq!(last, 0.5 * 320.0);
        for t in [6.0, 10.0, 20.0, 60.0, 200.0] {
            let left = eta.left(t);
            assert!(left <= last, "{left} s left at {t} s, after {last}");
            last = left;
        }
        assert_eq!(eta.left(5.0 + 160.0), 0.0);
    }

    #[test]
    fn on_a_pool_the_eta_is_the_pools_wall_time_left() {
        // Two hosts: g1 (120 s) and g2 (210 s) run side by side, so 210 s in all.
        let mut eta = Eta::on_pool(&estimate(), 2, |_| 1);
        assert_eq!(eta.left(0.0), 210.0);
        // g2 launched and g1 finished p001: 20 s of g1 and 10 s of g2 done; the wall time
        // left is g2's 200 s, the done part's wall time 10 s (g2's, the longer) took 20 s.
        eta.launched("g1");
        eta.finished("p001");
        eta.launched("g2");
        assert_eq!(eta.left(20.0), 2.0 * 200.0);
        // A two-host group on a two-host pool runs alone: the sum again.
        let eta = Eta::on_pool(&estimate(), 2, |_| 2);
        assert_eq!(eta.left(0.0), 330.0);
    }
}
