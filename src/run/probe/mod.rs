//! What watches a round of a point. A probe reads something beside the round's requests (the
//! server's `/metrics`, the workers behind a router, the GPUs, the engine's profiler, the
//! answers' validity): it is chosen once per point from what the server group offers, opened as
//! each round's sender is about to start (its [`Window`] says when the measured window opens and
//! closes), closed once the round's requests are folded, and fills its own part of the point's
//! record after the last round. Every sender runs every probe. A probe that fails records its
//! cause in the point (a flag, a `missing`, an error in its part); it never fails the point's
//! requests.
//!
//! A new measurement during a round is a new probe: one type implementing [`Probe`], chosen in
//! `setup::choose`, from the group's [`setup::ProbeSite`] and the runner's [`setup::ProbeSinks`].

use futures_util::future::BoxFuture;

use crate::client::Client;
use servebench_model::results::records::PointRecord;
use servebench_model::spec::types::Experiment;
use servebench_report::measure::server_view::Finished;
use servebench_report::measure::summary::PointFold;
use servebench_report::measure::system::Observed;

pub(crate) mod gpu;
mod gpu_amd;
mod gpu_dcgm;
mod gpu_error;
pub(crate) mod gpu_sampler;
pub(crate) mod profiler;
pub(crate) mod router;
pub(crate) mod scrape;
pub(crate) mod setup;
pub(crate) mod validity;
mod window;
pub(crate) mod workers;

pub(crate) use window::{Window, WindowState};

/// A round about to be sent, as a probe sees it.
pub(crate) struct RoundStart<'a> {
    /// The server measured (the router, for a routed deployment).
    pub client: &'a Client,
    pub point: &'a str,
    pub round: u32,
    /// The round's measured window, as its sender moves it.
    pub window: &'a Window,
}

/// What the point's rounds left, for the probes to fill their parts of its record.
pub(crate) struct PointEnd<'a> {
    pub exp: &'a Experiment,
    pub fold: &'a PointFold,
    pub observed: &'a Observed,
    /// Measured requests by the worker the router sent them to: (succeeded, failed).
    pub routed: &'a std::collections::BTreeMap<String, (usize, usize)>,
    /// Measured requests retried elsewhere, by the worker they left.
    pub rerouted: &'a std::collections::BTreeMap<String, usize>,
}

/// Something that watches every round of a point.
pub(crate) trait Probe: Send {
    /// Starts watching a round, before its sender starts (what waits for the measured window
    /// itself watches `round.window`).
    fn open<'a>(&'a mut self, round: RoundStart<'a>) -> BoxFuture<'a, ()>;

    /// Stops watching once the round's requests are folded: `completed` measured requests
    /// finished in it. Requests the probe sent itself, which the server served beside the
    /// measured ones, are added to `unmeasured` (the server's counters include them).
    fn close<'a>(&'a mut self, completed: usize, unmeasured: &'a mut Finished)
    -> BoxFuture<'a, ()>;

    /// Writes what it saw into its part of the point's record, after the last round.
    fn fill(self: Box<Self>, end: &PointEnd<'_>, record: &mut PointRecord);
}

/// A point's probes, opened and closed together.
#[derive(Default)]
pub(crate) struct Probes(Vec<Box<dyn Probe>>);

impl Probes {
    pub(crate) fn push(&mut self, probe: impl Probe + 'static) {
        self.0.push(Box::new(probe));
    }

    /// Opens every probe for a round, in the order they were chosen.
    pub(crate) async fn open(&mut self, client: &Client, point: &str, round: u32, window: &Window) {
        for p in &mut self.0 {
            p.open(RoundStart {
                client,
                point,
                round,
                window,
            })
            .await;
        }
    }

    /// Closes every probe after a round.
    pub(crate) async fn close(&mut self, completed: usize, unmeasured: &mut Finished) {
        for p in &mut self.0 {
            p.close(completed, unmeasured).await;
        }
    }

    /// Every probe's part of the point's record.
    pub(crate) fn fill(self, end: &PointEnd<'_>, record: &mut PointRecord) {
        for p in self.0 {
            p.fill(end, record);
        }
    }
}
