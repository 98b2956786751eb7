//! Progress: a bar on a terminal (points done, requests in flight, ETA), plain lines otherwise.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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
        }
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
                "point {}/{} {cur} · {} in flight",
                self.points_done.load(Ordering::Relaxed) + 1,
                self.points_total,
                self.in_flight.load(Ordering::Relaxed)
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

    pub fn point_finished(&self, summary: &str) {
        let done = self.points_done.fetch_add(1, Ordering::Relaxed) + 1;
        self.line(&format!("[{done}/{}] {summary}", self.points_total));
        self.refresh();
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
