//! A launched server watched while a point runs: a server that lost a part of itself (its
//! supervisor killed, its scheduler dead behind a live HTTP front) is stopped at once, so the
//! point's requests end with broken connections instead of waiting out their timeout, and the
//! point says what was lost. A process that ends while the server still answers its health
//! check (a JIT compiler, a compile worker going idle) is a helper: the point goes on and says
//! so.

use std::future::Future;
use std::time::Duration;

use super::ServerHandle;

/// The slowest look at a server while a point runs: a look reads the process table.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// What a watched point's measurement gave, and what its server lost meanwhile.
pub(crate) struct Watched<T> {
    pub out: T,
    /// The part the server could not serve without (it was stopped).
    pub lost: Option<String>,
    /// Processes of the group that ended while the server still answered.
    pub ended: Vec<String>,
}

/// Runs `work` (a point's measurement) while looking at `handle`'s process as often as
/// [`LOOK_EVERY`] (or its host's slower poll).
pub(crate) async fn while_measuring<T>(
    handle: &mut ServerHandle,
    work: impl Future<Output = T>,
) -> Watched<T> {
    let Some(process) = handle.process.as_mut() else {
        return Watched {
            out: work.await,
            lost: None,
            ended: Vec::new(),
        };
    };
    let every = process.poll_interval().max(LOOK_EVERY);
    let mut lost = None;
    let mut ended = Vec::new();
    let look = async {
        loop {
            tokio::time::sleep(every).await;
            let Some(loss) = process.lost_process().await else {
                continue;
            };
            if !loss.fatal {
                tracing::info!("a process of the server ended mid-point: {}", loss.what);
                ended.push(loss.what);
                continue;
            }
            tracing::warn!("the server lost a process mid-point: {}", loss.what);
            lost = Some(loss.what);
            return std::future::pending::<()>().await;
        }
    };
    tokio::pin!(work);
    let out = tokio::select! {
        out = &mut work => out,
        () = look => unreachable!("the look never ends"),
    };
    Watched { out, lost, ended }
}
