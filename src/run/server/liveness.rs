//! How a launched server is asked whether it still serves once a long-running process of its
//! group ended (see `watch.rs`): its `/health`, within a bound.

use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::client::Client;
use crate::host::{Liveness, NotServing};

/// How long a server is given to answer its health check after a process of its group ended:
/// SGLang's `/health` waits up to 20 s (`SGLANG_HEALTH_CHECK_TIMEOUT`) for its scheduler
/// before it answers 503.
const LIVENESS_WAIT: Duration = Duration::from_secs(25);

/// Asks the server at `url` for `/health` within [`LIVENESS_WAIT`]: what every engine
/// answers 200 while it serves (SGLang's runs a one-token generation through its scheduler).
pub(super) fn health_probe(url: &str, api_key: Option<String>) -> Liveness {
    let url = url.to_string();
    std::sync::Arc::new(move || -> BoxFuture<'static, Result<(), NotServing>> {
        let client = Client::new(&url, api_key.clone());
        Box::pin(async move {
            let client = client.map_err(|e| NotServing(format!("could not be asked: {e}")))?;
            match tokio::time::timeout(LIVENESS_WAIT, client.health()).await {
                Ok(Ok(200)) => Ok(()),
                Ok(Ok(code)) => Err(NotServing(format!("answered /health with HTTP {code}"))),
                Ok(Err(e)) => Err(NotServing(format!("did not answer /health ({e})"))),
                Err(_) => Err(NotServing(format!(
                    "did not answer /health within {} s",
                    LIVENESS_WAIT.as_secs()
                ))),
            }
        })
    })
}
