//! What a server made of several processes (a multi-node server's ranks, a deployment's
//! router and workers) does the same way whatever they are: bring every log up to date, look
//! as often as the most frequent of them needs, stop them all and say how each went.

use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::host::{ServerProcess, Stopped};

/// Every member's log brought up to date (each future made here, so the one returned holds
/// no reference to a member).
pub(super) fn sync_all<'a>(
    members: impl Iterator<Item = &'a dyn ServerProcess>,
) -> BoxFuture<'a, ()> {
    let each: Vec<BoxFuture<'a, ()>> = members.map(|p| p.sync_log()).collect();
    Box::pin(async move {
        futures_util::future::join_all(each).await;
    })
}

/// The shortest of the members' poll intervals.
pub(super) fn poll_interval<'a>(members: impl Iterator<Item = &'a dyn ServerProcess>) -> Duration {
    members
        .map(|p| p.poll_interval())
        .min()
        .unwrap_or(Duration::from_millis(50))
}

/// How named members' stops went, as one: gone only when every one is, each said by name,
/// the process group the first one's.
pub(super) fn stopped_together(each: &[(String, Stopped)]) -> Stopped {
    Stopped {
        outcome: each
            .iter()
            .map(|(name, s)| {
                format!(
                    "{name}: {}{}",
                    s.outcome,
                    if s.gone { "" } else { " (STILL ALIVE)" }
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        pgid: each.first().map_or(0, |(_, s)| s.pgid),
        gone: each.iter().all(|(_, s)| s.gone),
    }
}
