//! The workers probe: each worker behind a router (a launched deployment's, an attached
//! router's `server.workers`) scraped through every round, and the point's worker table: what
//! the router sent each worker (its log), what each worker counted itself.

use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::client::Client;
use crate::measure::server_view::{self, Finished};
use crate::results::records::{PointRecord, WorkerView};
use crate::results::server_view::MetricsScrape;
use crate::run::server::deployment::WorkerTarget;

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
