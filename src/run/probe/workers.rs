//! The workers probe: each worker behind a router (a launched deployment's, an attached
//! router's `server.workers`) scraped through every round, and the point's worker table: what
//! the router sent each worker (its log), what each worker counted itself.

use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::client::Client;
use crate::run::server::deployment::WorkerTarget;
use servebench_model::results::records::{PointRecord, WorkerView};
use servebench_model::results::server_view::MetricsScrape;
use servebench_report::measure::server_view::{self, Finished};

use super::scrape::{MetricsSink, Scraper};
use super::{PointEnd, Probe, RoundStart};

/// The workers behind the router measured.
pub(crate) struct Workers {
    targets: Vec<WorkerTarget>,
    /// Where scrapes go; None: the workers are not scraped (their table has the router's word
    /// alone).
    sink: Option<MetricsSink>,
    interval: Duration,
    running: Vec<Scraper>,
    scrapes: Vec<MetricsScrape>,
}

impl Workers {
    pub(crate) fn new(
        targets: Vec<WorkerTarget>,
        sink: Option<MetricsSink>,
        interval: Duration,
    ) -> Workers {
        Workers {
            targets,
            sink,
            interval,
            running: Vec::new(),
            scrapes: Vec::new(),
        }
    }
}

impl Probe for Workers {
    fn open<'a>(&'a mut self, round: RoundStart<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(sink) = &self.sink else { return };
            for w in &self.targets {
                // Each worker's own counters, whatever the router's surface offers.
                if let Ok(c) = Client::new(&w.url, None) {
                    let s = Scraper::start(
                        &c,
                        round.point,
                        round.round,
                        sink.clone(),
                        self.interval,
                        Some(&w.url),
                    )
                    .await;
                    self.running.push(s);
                }
            }
        })
    }

    fn close<'a>(&'a mut self, _completed: usize, _: &'a mut Finished) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for s in self.running.drain(..) {
                // How many each worker finished is what is being found out: no settling count.
                self.scrapes.extend(s.finish(0).await);
            }
        })
    }

    fn fill(self: Box<Self>, end: &PointEnd<'_>, record: &mut PointRecord) {
        let scrapes = self.scrapes;
        for w in &self.targets {
            let Some(why) = lost_mid_point(&scrapes, &w.url) else {
                continue;
            };
            let name = if w.name != w.url {
                format!("{} ({})", w.name, w.url)
            } else {
                w.url.clone()
            };
            record.flags.push(servebench_model::results::records::Flag::new(
                servebench_model::catalog::FlagKind::WorkerLost,
                format!(
                    "worker {name} stopped answering during the point (its /metrics answered, then: {why}): the router served the rest on the others"
                ),
            ));
            if record.status == Some(servebench_model::results::records::PointStatus::Ok) {
                record.status = Some(servebench_model::results::records::PointStatus::Degraded);
            }
        }
        record.workers = self
            .targets
            .into_iter()
            .map(|w| {
                let mine: Vec<_> = scrapes
                    .iter()
                    .filter(|s| s.worker.as_deref() == Some(w.url.as_str()))
                    .cloned()
                    .collect();
                let rerouted = end.rerouted.get(&w.name).copied().unwrap_or(0);
                let routed = (!end.routed.is_empty())
                    .then(|| end.routed.get(&w.name).copied().unwrap_or_default());
                WorkerView {
                    name: (w.name != w.url).then_some(w.name),
                    role: w.role,
                    host: w.host,
                    routed,
                    rerouted,
                    view: server_view::summarize(&mine),
                    url: w.url,
                }
            })
            .collect();
    }
}

/// Why worker `url` was lost mid-point: a scrape of it that failed after one that answered,
/// within the point's rounds (a worker that never answered is not one that was lost: its
/// metrics may be off).
fn lost_mid_point(scrapes: &[MetricsScrape], url: &str) -> Option<String> {
    let mut answered = false;
    for s in scrapes.iter().filter(|s| s.worker.as_deref() == Some(url)) {
        match &s.error {
            None => answered = true,
            Some(e) if answered => return Some(e.clone()),
            Some(_) => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(worker: &str, error: Option<&str>) -> MetricsScrape {
        MetricsScrape {
            point: "p001".into(),
            round: 1,
            t: 0.0,
            at: "tick".into(),
            values: Default::default(),
            error: error.map(str::to_string),
            cut: None,
            worker: Some(worker.into()),
        }
    }

    #[test]
    fn a_worker_is_lost_when_it_answered_then_stopped() {
        let a = "http://127.0.0.1:1";
        let b = "http://127.0.0.1:2";
        let scrapes = [
            scrape(a, None),
            scrape(b, Some("/metrics answered HTTP 404")),
            scrape(a, Some("connection refused")),
            scrape(b, Some("/metrics answered HTTP 404")),
        ];
        assert_eq!(
            lost_mid_point(&scrapes, a).as_deref(),
            Some("connection refused")
        );
        assert_eq!(
            lost_mid_point(&scrapes, b),
            None,
            "never answered: not lost"
        );
    }
}
