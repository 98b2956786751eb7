//! A round's sender: how its measured requests go out (a closed loop, two-point pairs, an
//! arrival schedule, simulated users, agent sessions). The point runner makes one per round
//! outside the measured window (traces read, block text calibrated, the round planned, a warm
//! round primed); `send` runs inside it, every request through the round's
//! [`RequestPath`](crate::run::request::RequestPath), which writes, folds and judges it.
//!
//! A new way of sending a round is a new sender: one type implementing [`Sender`], made in
//! `PointRunner::sender` (`round.rs`).

use futures_util::future::BoxFuture;

use servebench_model::results::jobs::JobsView;
use servebench_model::results::records::Flag;
use servebench_report::measure::system::Observed;

use crate::run::probe::Window;
use crate::run::request::RequestPath;

/// A round ready to send.
pub(super) trait Sender<'p>: Send + 'p {
    /// The tokens a trace block stands for, where the round's prompts are a trace's blocks:
    /// the tolerance its hits are judged within.
    fn block_tokens(&self) -> Option<u32> {
        None
    }

    /// Sends the round's requests through `path`, opening `window` as its first measured
    /// request goes out (and closing it once its last measured one ended, where it knows).
    fn send<'s>(
        self: Box<Self>,
        path: &'s RequestPath,
        window: &'s Window,
    ) -> BoxFuture<'s, SendEnd>
    where
        'p: 's;
}

/// What a sender leaves beside the records its path folded.
#[derive(Default)]
pub(super) struct SendEnd {
    /// Requests the round was to send (a lost server's flag says how far it got).
    pub planned: usize,
    pub flags: Vec<Flag>,
    /// What the client observed of an open loop (its offered rate, its CPU, a stop on errors).
    pub observed: Option<Observed>,
    /// Measured requests the point plans, where the point's shape does not say.
    pub expect: Option<usize>,
    /// Agent sessions: the point's view of them.
    pub jobs: Option<JobsView>,
}

impl SendEnd {
    /// A round that is to send `planned` requests, `expect` of them measured (where the
    /// point's shape does not say).
    pub(super) fn planned(planned: usize, expect: Option<usize>) -> SendEnd {
        SendEnd {
            planned,
            expect,
            ..SendEnd::default()
        }
    }
}
