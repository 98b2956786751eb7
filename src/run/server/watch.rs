//! A launched server watched while a point runs: a server that lost a part of itself (its
//! supervisor killed, its scheduler dead behind a live HTTP front) is stopped at once, so the
//! point's requests end with broken connections instead of waiting out their timeout, and the
//! point says what was lost. A process that ends while the server still answers its health
//! check (a JIT compiler, a compile worker going idle) is a helper: the point goes on and says
//! so.

use std::future::Future;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::client::Client;
use crate::host::Liveness;

use super::ServerHandle;

/// The slowest look at a server while a point runs: a look reads the process table.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// How long a server is given to answer its health check after a process of its group ended:
/// SGLang's `/health` waits up to 20 s (`SGLANG_HEALTH_CHECK_TIMEOUT`) for its scheduler
/// before it answers 503.
const LIVENESS_WAIT: Duration = Duration::from_secs(25);

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

/// Asks the server at `url` for `/health` within [`LIVENESS_WAIT`]: what every engine
/// answers 200 while it serves (SGLang's runs a one-token generation through its scheduler).
pub(crate) fn liveness(url: &str, api_key: Option<String>) -> Liveness {
    let url = url.to_string();
    std::sync::Arc::new(move || -> BoxFuture<'static, Result<(), String>> {
        let client = Client::new(&url, api_key.clone());
        Box::pin(async move {
            let client = client.map_err(|e| format!("could not be asked: {e}"))?;
            match tokio::time::timeout(LIVENESS_WAIT, client.health()).await {
                Ok(Ok(200)) => Ok(()),
                Ok(Ok(code)) => Err(format!("answered /health with HTTP {code}")),
                Ok(Err(e)) => Err(format!("did not answer /health ({e})")),
                Err(_) => Err(format!(
                    "did not answer /health within {} s",
                    LIVENESS_WAIT.as_secs()
                )),
            }
        })
    })
}
