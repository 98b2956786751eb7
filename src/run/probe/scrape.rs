//! Scraping the server's `/metrics` while a round of a point runs: once before its first
//! measured request, every interval while they run, and once after the last, each scrape
//! recorded (`metrics.jsonl`) as it arrives. [`ServerScrape`] is the probe that does it for the
//! server measured, and gives the point its server view.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::client::Client;
use crate::client::prometheus;
use servebench_model::results::server_view::MetricsScrape;

/// Where each scrape goes as it arrives: the run directory's `metrics.jsonl`.
pub(crate) type MetricsSink = Arc<dyn Fn(&MetricsScrape) -> std::io::Result<()> + Send + Sync>;

/// How often `/metrics` is read while requests run (AIPerf reads every 100 ms, servebench's
/// design every second: a scrape costs the server a little work too).
pub(crate) const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
/// A server may count a finished request a moment after its last byte: the end scrape is
/// taken again, this often and at most this many times, while it counts fewer finished
/// requests than the client saw.
const SETTLE_STEP: Duration = Duration::from_millis(50);
const SETTLE_TRIES: u32 = 10;

/// A scraper running for one round.
pub(crate) struct Scraper {
    client: Client,
    point: String,
    round: u32,
    sink: MetricsSink,
    scrapes: Arc<Mutex<Vec<MetricsScrape>>>,
    /// The router's worker scraped (`server.workers`); None: the server itself.
    worker: Option<String>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Scraper {
    /// Takes the round's first scrape and starts the ticker. A scrape that fails is
    /// recorded with its cause like one that answers (the server view counts and says them).
    /// `worker`: the scraped server is that worker behind the router.
    pub(crate) async fn start(
        client: &Client,
        point: &str,
        round: u32,
        sink: MetricsSink,
        interval: Duration,
        worker: Option<&str>,
    ) -> Scraper {
        let client = client.with_own_connections();
        let worker = worker.map(str::to_string);
        let first = take(&client, point, round, "start", worker.as_deref()).await;
        let _ = sink(&first);
        let scrapes = Arc::new(Mutex::new(vec![kept(first)]));
        let (stop, mut stopped) = oneshot::channel();
        let task = {
            let (client, point, sink, scrapes, worker) = (
                client.clone(),
                point.to_string(),
                sink.clone(),
                scrapes.clone(),
                worker.clone(),
            );
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(interval);
                tick.tick().await;
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = &mut stopped => return,
                    }
                    let s = take(&client, &point, round, "tick", worker.as_deref()).await;
                    let _ = sink(&s);
                    if let Ok(mut v) = scrapes.lock() {
                        v.push(kept(s));
                    }
                }
            })
        };
        Scraper {
            client,
            point: point.to_string(),
            round,
            sink,
            scrapes,
            worker,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops the ticker and takes the end scrape, waiting briefly for the server to count
    /// `completed` finished requests; returns the round's scrapes.
    pub(crate) async fn finish(mut self, completed: usize) -> Vec<MetricsScrape> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let mut scrapes = self.scrapes.lock().map(|v| v.clone()).unwrap_or_default();
        let mut end = None;
        for attempt in 0..SETTLE_TRIES {
            if attempt > 0 {
                tokio::time::sleep(SETTLE_STEP).await;
            }
            let e = take(
                &self.client,
                &self.point,
                self.round,
                "end",
                self.worker.as_deref(),
            )
            .await;
            let counted =
                servebench_report::measure::server_view::requests_counted(&scrapes[0], &e);
            end = Some(e);
            if counted.is_none_or(|n| n >= completed as f64) {
                break;
            }
        }
        if let Some(e) = end {
            let _ = (self.sink)(&e);
            scrapes.push(kept(e));
        }
        scrapes
    }
}

/// One scrape, answered or failed (its cause in `error`).
async fn take(
    client: &Client,
    point: &str,
    round: u32,
    at: &str,
    worker: Option<&str>,
) -> MetricsScrape {
    let scraped = prometheus::scrape(client).await;
    let mut s = MetricsScrape {
        point: point.to_string(),
        round,
        t: crate::client::unix_now(),
        at: at.to_string(),
        values: Default::default(),
        error: None,
        cut: None,
        worker: worker.map(str::to_string),
    };
    match scraped {
        Ok(got) => {
            s.values = got.values;
            s.cut = got.cut;
        }
        Err(e) => s.error = Some(e.to_string()),
    }
    s
}

/// What the point keeps of a scrape in memory (the names its server view reads); the whole
/// scrape went to the sink.
fn kept(mut s: MetricsScrape) -> MetricsScrape {
    s.values = servebench_report::measure::server_view::retained(&s.values);
    s
}

/// The server-scrape probe: the measured server's `/metrics` through every round, summarized
/// into the point's server view (and what it contradicts of the client's count).
pub(crate) struct ServerScrape {
    sink: MetricsSink,
    interval: Duration,
    running: Option<Scraper>,
    /// Every round's scrapes, as kept in memory.
    scrapes: Vec<MetricsScrape>,
}

impl ServerScrape {
    pub(crate) fn new(sink: MetricsSink, interval: Duration) -> ServerScrape {
        ServerScrape {
            sink,
            interval,
            running: None,
            scrapes: Vec::new(),
        }
    }
}

impl super::Probe for ServerScrape {
    fn open<'a>(
        &'a mut self,
        round: super::RoundStart<'a>,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            let s = Scraper::start(
                round.client,
                round.point,
                round.round,
                self.sink.clone(),
                self.interval,
                None,
            )
            .await;
            self.running = Some(s);
        })
    }

    fn close<'a>(
        &'a mut self,
        completed: usize,
        _unmeasured: &'a mut servebench_report::measure::server_view::Finished,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(s) = self.running.take() {
                self.scrapes.extend(s.finish(completed).await);
            }
        })
    }

    fn fill(
        self: Box<Self>,
        end: &super::PointEnd<'_>,
        record: &mut servebench_model::results::records::PointRecord,
    ) {
        use servebench_report::measure::server_view;
        let mut server = server_view::summarize(&self.scrapes);
        if let Some(view) = &mut server {
            record.flags.extend(server_view::contradictions(
                view,
                end.fold.done(),
                &end.observed.unmeasured,
            ));
        }
        record.server = server;
    }
}
