//! llama-server's connection handling, below axum: every response advertises
//! `Keep-Alive: timeout=5, max=100` (cpp-httplib's header, and no `Connection: close`), a
//! non-streamed response keeps the connection, and the connection is closed once a streamed
//! response has been sent in full.
//!
//! Why llama.cpp does that: its chunked content provider returns `false` on its last call,
//! which cpp-httplib's `write_content_chunked` takes for a cancelled write, so its keep-alive
//! loop closes the socket after the terminating chunk (docs/reference/llama-cpp-facts.md §6;
//! observed in docs/reference/llama-cpp-observed.md). Here each connection is served by
//! hyper directly; a handler marks a streamed response with [`CloseAfterBody`], its body
//! signals when it ends, and the connection task then shuts the connection down gracefully:
//! hyper finishes writing the response (the head went out long before, without any
//! `Connection: close`) and closes the socket. The 100th request on one connection gets
//! `Connection: close`, as cpp-httplib's `max` count does. The 5-second idle timeout is not
//! modelled: idle connections stay open.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use futures_util::{Stream, StreamExt};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

/// Marks a response whose connection closes once its body has been sent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CloseAfterBody;

/// Requests one connection serves before it says `Connection: close` (cpp-httplib's `max`).
const MAX_REQUESTS: u32 = 100;

/// Serves `app` on `listener` until `stop` resolves, each connection as llama-server does.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (stop_tx, mut stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        stop.await;
        let _ = stop_tx.send(true);
    });
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                match accepted {
                    Ok((tcp, _)) => {
                        let _ = tcp.set_nodelay(true);
                        conns.spawn(connection(tcp, app.clone(), stop_rx.clone()));
                    }
                    // Out of file descriptors and the like: wait a moment, as hyper-util does.
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
                }
            }
            _ = stop_rx.changed() => break,
        }
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
    Ok(())
}

async fn connection(tcp: TcpStream, app: Router, mut stop: watch::Receiver<bool>) {
    let close = Arc::new(Notify::new());
    let served = Arc::new(AtomicU32::new(0));
    let on_end = close.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let app = app.clone();
        let on_end = on_end.clone();
        let n = served.fetch_add(1, Ordering::Relaxed) + 1;
        // A client that asked to close gets `Connection: close` and no Keep-Alive header, as
        // from cpp-httplib (checked against the real llama-server).
        let client_closes = req
            .headers()
            .get(header::CONNECTION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        async move {
            let Ok(mut resp) = app.oneshot(req).await;
            let headers = resp.headers_mut();
            headers.insert(header::SERVER, HeaderValue::from_static("llama.cpp"));
            if n >= MAX_REQUESTS || client_closes {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            } else {
                headers.insert("keep-alive", HeaderValue::from_static("timeout=5, max=100"));
            }
            if resp.extensions().get::<CloseAfterBody>().is_some() {
                let (parts, body) = resp.into_parts();
                let body = Body::from_stream(NotifyAtEnd {
                    inner: body.into_data_stream(),
                    on_end: Some(on_end),
                });
                resp = axum::response::Response::from_parts(parts, body);
            }
            Ok::<_, Infallible>(resp)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = close.notified() => {}
        _ = stop.changed() => {}
    }
    // Finish the response in flight (hyper writes the last chunk), then close: keep-alive off.
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// A body stream that signals when it has yielded its last chunk.
struct NotifyAtEnd<S> {
    inner: S,
    on_end: Option<Arc<Notify>>,
}

impl<S> Stream for NotifyAtEnd<S>
where
    S: Stream<Item = Result<Bytes, axum::Error>> + Unpin,
{
    type Item = Result<Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = self.inner.poll_next_unpin(cx);
        if let Poll::Ready(None) = item
            && let Some(n) = self.on_end.take()
        {
            n.notify_one();
        }
        item
    }
}
