//! Running the simulator: scheduler thread + HTTP server until shutdown or a simulated crash.

use super::config::SimConfig;
use super::http::{AppState, router};
use super::scheduler;
use super::state::Shared;
use super::types::Command;
use axum::serve::ListenerExt;
use std::future::Future;
use std::sync::Arc;

/// Serves the simulator on `listener` until `shutdown` resolves (Ok) or the simulated engine
/// crashes (Err with the reason). Warmup runs in the background: `/health` is 503 until done.
pub async fn serve(
    config: SimConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let log = config.log.clone();
    if config.max_total_tokens <= 0 {
        log.info("Scheduler hit an exception: Traceback (most recent call last):");
        log.raw("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.");
        log.info("Received sigquit from a child process. It usually means the child failed.");
        anyhow::bail!(
            "not enough memory for the KV pool: increase --mem-fraction-static or set --max-total-tokens"
        );
    }
    let shared = Arc::new(Shared::default());
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = scheduler::spawn(&config, shared.clone(), rx)?;
    let addr = listener.local_addr()?;
    log.info(&format!(
        "Uvicorn running on http://{addr} (Press CTRL+C to quit)"
    ));
    let state = AppState {
        cfg: Arc::new(config),
        shared: shared.clone(),
        tx: tx.clone(),
        created: super::http::unix_now() as u64,
    };
    let mut crash = shared.crash_watch();
    let stop_tx = tx.clone();
    let stop = async move {
        tokio::select! {
            _ = shutdown => {}
            _ = crash.wait_for(Option::is_some) => {}
        }
        // Ends every open stream so graceful shutdown does not wait on them.
        let _ = stop_tx.send(Command::Shutdown);
    };
    // Small SSE writes must leave at once: Nagle + delayed ACK would add ~40 ms per chunk.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let result = axum::serve(listener, router(state))
        .with_graceful_shutdown(stop)
        .await;
    let _ = tx.send(Command::Shutdown);
    drop(tx);
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    if let Some(msg) = shared.crash_watch().borrow().clone() {
        anyhow::bail!(msg);
    }
    result?;
    Ok(())
}
