//! A launched server watched while a point runs: a server that lost a part of itself (its
//! supervisor killed, its scheduler dead behind a live HTTP front) is stopped at once, so the
//! point's requests end with broken connections instead of waiting out their timeout, and the
//! point says what was lost.

use std::future::Future;
use std::time::Duration;

use super::ServerHandle;

/// The slowest look at a server while a point runs: a look reads the process table.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// Runs `work` (a point's measurement) while looking at `handle`'s process as often as
/// [`LOOK_EVERY`] (or its host's slower poll); `work`'s output and what the server lost, if
/// it lost anything meanwhile.
pub(crate) async fn while_measuring<T>(
    handle: &mut ServerHandle,
    work: impl Future<Output = T>,
) -> (T, Option<String>) {
    let Some(process) = handle.process.as_mut() else {
        return (work.await, None);
    };
    let every = process.poll_interval().max(LOOK_EVERY);
    let mut lost = None;
    let look = async {
        loop {
            tokio::time::sleep(every).await;
            if let Some(what) = process.lost_process().await {
                tracing::warn!("the server lost a process mid-point: {what}");
                lost = Some(what);
                return std::future::pending::<()>().await;
            }
        }
    };
    tokio::pin!(work);
    let out = tokio::select! {
        out = &mut work => out,
        () = look => unreachable!("the look never ends"),
    };
    (out, lost)
}
