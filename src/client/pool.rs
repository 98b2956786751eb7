//! The client's connections to one server, kept by the client itself so that reuse is a
//! measured choice:
//!
//! - [`Pool::prepare`] opens the connections a point needs before its clock starts, so no
//!   measured request waits for a handshake behind the others.
//! - A request takes the most recently used idle connection that is still open, else opens
//!   one (its connect time is recorded, apart from TTFT).
//! - The pool learns whether the server closes a connection after each streamed response
//!   (llama.cpp's server does, while advertising keep-alive): it watches the first streamed
//!   responses' connections for a moment after they end, in a task of its own, so the request
//!   is handed back at its end (one that comes meanwhile takes another connection, or opens
//!   one). Once it knows, such connections are
//!   never reused, and each one that closes is replaced right away by a fresh one, so the next
//!   request finds a connection ready.
//! - A request whose connection turns out stale (closed by the server while idle, noticed only
//!   when the request was written: no response byte came back, soon after the write) never
//!   reached the server's generation: it is sent once more on a fresh connection, and the
//!   first attempt is recorded as `stale-connection`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use tokio::time::timeout_at;

use super::conn::{Body, Conn, Wire, closed_by_peer, describe};
use servebench_model::results::records::{ConnectionUse, ErrorKind, RequestError};

/// How long establishing a TCP connection may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after a streamed response's end the pool watches its connection, while it does
/// not yet know whether the server closes connections after streams. A server that does
/// closes at once (its close follows the last chunk), so a moment is enough; when the close
/// comes later still, the stale-connection retry catches it.
const LEARN_WAIT: Duration = Duration::from_millis(50);

/// Streamed responses whose connection stayed open before the pool takes it that the server
/// keeps connections open.
const LEARN_STREAMS: u32 = 2;

/// A failure before any response byte counts as a stale connection only this soon after the
/// request was written: a connection the server had closed fails within a round trip, while
/// one that fails later had reached the server (it was working on the request), so that is
/// the server's reset and the request is not sent again.
const STALE_WINDOW: Duration = Duration::from_secs(1);

/// What the server does with a connection once a streamed response has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterStream {
    /// Not known yet: `kept` streamed responses left their connection open so far.
    Unknown { kept: u32 },
    /// Keeps it open for the next request.
    KeepsOpen,
    /// Closes it (with or without saying so).
    Closes,
}

struct State {
    /// Open connections nobody uses, most recently used last.
    idle: Vec<Conn>,
    /// Connections to keep ready (set by [`Pool::prepare`]): one that closes is replaced.
    target: usize,
    /// Connections open or being opened, idle or in use.
    live: usize,
    after_stream: AfterStream,
    /// Requests sent again after a stale connection.
    stale: u64,
    /// Of those, the ones whose connection had last served a stream.
    stale_after_stream: u64,
}

/// The connections to one server.
pub(super) struct Pool {
    /// `host:port`, resolved on the first connect.
    authority: String,
    addrs: Mutex<Vec<SocketAddr>>,
    state: Mutex<State>,
}

/// Why no connection could be had.
pub(super) struct ConnectFailure {
    pub kind: ErrorKind,
    pub message: String,
}

/// A connection in use. Dropped without [`Pool::release`] (a failure, a timeout, an abandoned
/// request), the connection is closed.
pub(super) struct Lease {
    conn: Option<Conn>,
    pool: Arc<Pool>,
}

impl Lease {
    pub(crate) fn conn(&mut self) -> &mut Conn {
        self.conn
            .as_mut()
            .expect("a lease holds its connection until released")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.conn.take().is_some() {
            self.pool.state().live -= 1;
        }
    }
}

/// The outcome of sending one request: the response head and the connection it arrived on, or
/// why there is none, with what the sending cost.
pub(super) struct Exchange {
    /// The connection, when a response head arrived.
    pub lease: Option<Lease>,
    pub result: Result<hyper::Response<Incoming>, RequestError>,
    /// How the (last attempt's) connection came to be; None when none was had.
    pub how: Option<ConnectionUse>,
    /// Its connect time, when it was opened for this request.
    pub connect_s: Option<f64>,
    /// What the last attempt's socket wrote and read.
    pub wire: Wire,
    /// The first attempt's failure, when the request was sent again.
    pub first_attempt: Option<RequestError>,
}

impl Pool {
    /// A pool for the server at `authority` (`host:port`); connects nothing yet.
    /// `host:port` it connects to.
    pub(crate) fn authority(&self) -> &str {
        &self.authority
    }

    pub(crate) fn new(authority: String) -> Pool {
        Pool {
            authority,
            addrs: Mutex::new(Vec::new()),
            state: Mutex::new(State {
                idle: Vec::new(),
                target: 0,
                live: 0,
                after_stream: AfterStream::Unknown { kept: 0 },
                stale: 0,
                stale_after_stream: 0,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the pool knows about the server's connections after streams.
    pub(crate) fn after_stream(&self) -> AfterStream {
        self.state().after_stream
    }

    /// Requests sent again after a stale connection so far.
    pub(crate) fn stale_retries(&self) -> u64 {
        self.state().stale
    }

    /// Makes `n` open connections ready and keeps that many from now on (a connection the
    /// server closes is replaced). Idle connections that closed meanwhile are dropped, and any
    /// beyond `n` are closed. Returns the first connect failure, if any.
    pub(crate) async fn prepare(self: &Arc<Self>, n: usize) -> Result<(), ConnectFailure> {
        let missing = {
            let mut st = self.state();
            st.target = n;
            let mut idle = std::mem::take(&mut st.idle);
            let before = idle.len();
            idle.retain_mut(Conn::still_open);
            // Keep the most recently used.
            let surplus = idle.len().saturating_sub(n);
            idle.drain(..surplus);
            st.live -= before - idle.len();
            st.idle = idle;
            n.saturating_sub(st.idle.len())
        };
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let opened =
            futures_util::future::join_all((0..missing).map(|_| self.open(deadline))).await;
        let mut failure = None;
        let mut st = self.state();
        for conn in opened {
            match conn {
                Ok(conn) => st.idle.push(conn),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// A connection for one request: the most recently used idle one that is still open
    /// (unless `fresh`), else a new one.
    async fn acquire(
        self: &Arc<Self>,
        fresh: bool,
        deadline: Instant,
    ) -> Result<(Lease, ConnectionUse, Option<f64>), ConnectFailure> {
        loop {
            let idle = if fresh { None } else { self.state().idle.pop() };
            let Some(mut conn) = idle else {
                break;
            };
            if conn.still_open() {
                let (how, connect_s) = if conn.served > 0 {
                    (ConnectionUse::Reused, None)
                } else {
                    (ConnectionUse::PreOpened, Some(conn.connect_s))
                };
                let lease = Lease {
                    conn: Some(conn),
                    pool: self.clone(),
                };
                return Ok((lease, how, connect_s));
            }
            // Closed while idle after a stream: while the pool is still learning, that is a
            // server closing after streams whose close came late; once it is known to keep
            // them, it is an idle timeout (uvicorn's is 5 s).
            let mut st = self.state();
            st.live -= 1;
            if conn.last_streamed && matches!(st.after_stream, AfterStream::Unknown { .. }) {
                st.after_stream = AfterStream::Closes;
            }
        }
        let conn = self.open(deadline).await?;
        let connect_s = Some(conn.connect_s);
        let lease = Lease {
            conn: Some(conn),
            pool: self.clone(),
        };
        Ok((lease, ConnectionUse::Opened, connect_s))
    }

    /// Opens one connection, counted in `live` from the start (a failed or abandoned connect
    /// gives its count back).
    async fn open(&self, deadline: Instant) -> Result<Conn, ConnectFailure> {
        /// Gives a count in `live` back when dropped armed.
        struct Counted<'a>(&'a Pool, bool);
        impl Drop for Counted<'_> {
            fn drop(&mut self) {
                if self.1 {
                    self.0.state().live -= 1;
                }
            }
        }
        self.state().live += 1;
        let mut counted = Counted(self, true);
        let conn = self.connect(deadline).await?;
        counted.1 = false;
        Ok(conn)
    }

    /// Opens one connection (not counted in `live`: see [`Pool::open`]).
    async fn connect(&self, deadline: Instant) -> Result<Conn, ConnectFailure> {
        let limit = deadline.min(Instant::now() + CONNECT_TIMEOUT);
        let addrs = self.resolve(limit).await?;
        let mut last = String::new();
        for addr in addrs {
            match timeout_at(limit.into(), Conn::open(addr)).await {
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(e)) if out_of_descriptors(&e) => {
                    return Err(ConnectFailure {
                        kind: ErrorKind::ClientResources,
                        message: format!(
                            "connecting to {addr}: {e}: the client has no file descriptor left for a connection (raise `ulimit -n` or lower load.max_in_flight); the server was not asked"
                        ),
                    });
                }
                Ok(Err(e)) => last = format!("connecting to {addr}: {e}"),
                Err(_) => {
                    return Err(ConnectFailure {
                        kind: ErrorKind::Timeout,
                        message: format!(
                            "connecting to {addr}: no connection within the time left"
                        ),
                    });
                }
            }
        }
        Err(ConnectFailure {
            kind: ErrorKind::Connect,
            message: last,
        })
    }

    async fn resolve(&self, limit: Instant) -> Result<Vec<SocketAddr>, ConnectFailure> {
        let cached = self.addrs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if !cached.is_empty() {
            return Ok(cached);
        }
        let failed = |message: String| ConnectFailure {
            kind: ErrorKind::Connect,
            message,
        };
        let found: Vec<SocketAddr> =
            match timeout_at(limit.into(), tokio::net::lookup_host(&self.authority)).await {
                Ok(Ok(addrs)) => addrs.collect(),
                Ok(Err(e)) => return Err(failed(format!("resolving {}: {e}", self.authority))),
                Err(_) => return Err(failed(format!("resolving {}: timed out", self.authority))),
            };
        if found.is_empty() {
            return Err(failed(format!("{} resolves to no address", self.authority)));
        }
        *self.addrs.lock().unwrap_or_else(|p| p.into_inner()) = found.clone();
        Ok(found)
    }

    /// Sends the request `build` makes and waits for the response head, until `deadline`. A
    /// first attempt that meets a stale connection is made again once on a fresh connection.
    pub(crate) async fn exchange(
        self: &Arc<Self>,
        build: impl Fn() -> hyper::Request<Body>,
        deadline: Instant,
        timeout: Duration,
    ) -> Exchange {
        let mut first_attempt: Option<RequestError> = None;
        loop {
            let mut ex = Exchange {
                lease: None,
                result: Err(error(ErrorKind::Timeout, String::new())),
                how: None,
                connect_s: None,
                wire: Wire::default(),
                first_attempt: first_attempt.clone(),
            };
            let timed_out = || {
                error(
                    ErrorKind::Timeout,
                    format!("no response within {timeout:?}"),
                )
            };
            let acquired = timeout_at(
                deadline.into(),
                self.acquire(first_attempt.is_some(), deadline),
            )
            .await;
            let (mut lease, how, connect_s) = match acquired {
                Ok(Ok(got)) => got,
                Ok(Err(f)) => {
                    ex.result = Err(error(f.kind, f.message));
                    return ex;
                }
                Err(_) => {
                    ex.result = Err(timed_out());
                    return ex;
                }
            };
            ex.how = Some(how);
            ex.connect_s = connect_s;
            let conn = lease.conn();
            conn.log.begin();
            let sent = timeout_at(deadline.into(), conn.send(build())).await;
            ex.wire = conn.log.get();
            let e = match sent {
                Ok(Ok(response)) => {
                    ex.lease = Some(lease);
                    ex.result = Ok(response);
                    return ex;
                }
                Err(_) => {
                    ex.result = Err(timed_out());
                    return ex;
                }
                Ok(Err(e)) => e,
            };
            let had_waited = how != ConnectionUse::Opened;
            let soon = ex
                .wire
                .first_write
                .is_none_or(|w| w.elapsed() < STALE_WINDOW);
            if first_attempt.is_none()
                && had_waited
                && ex.wire.read_bytes == 0
                && soon
                && closed_by_peer(&e)
            {
                first_attempt = Some(self.stale(lease, how, &e));
                continue;
            }
            ex.result = Err(send_failure(&e, ex.wire.read_bytes));
            return ex;
        }
    }

    /// Counts a connection the server had closed while it was idle (`lease`, used as `how`;
    /// `e` the send's failure) and says so: the first attempt's error of a request sent
    /// again on a fresh connection.
    fn stale(&self, mut lease: Lease, how: ConnectionUse, e: &hyper::Error) -> RequestError {
        let streamed_before = lease.conn().last_streamed;
        drop(lease);
        {
            // A streamed connection that closed while idle: while the pool is still
            // learning, or when it happens again, that is a server closing after
            // streams (its close came too late to be seen); once it is known to keep
            // them, one stale connection is an idle timeout, not a pattern.
            let mut st = self.state();
            st.stale += 1;
            if streamed_before {
                st.stale_after_stream += 1;
                if st.stale_after_stream > 1
                    || matches!(st.after_stream, AfterStream::Unknown { .. })
                {
                    st.after_stream = AfterStream::Closes;
                }
            }
        }
        let whose = match how {
            ConnectionUse::Reused => "kept from an earlier request",
            _ => "opened ahead of the request",
        };
        error(
            ErrorKind::StaleConnection,
            format!(
                "the server had closed the idle connection ({whose}) before any response \
                 byte: {}; sent again on a fresh connection",
                describe(e)
            ),
        )
    }

    /// Gives a connection back after its response: kept for the next request when the
    /// response was read to its end (`complete`) and the server keeps the connection; otherwise
    /// closed and, when fewer than the prepared number remain, replaced by a fresh one at once,
    /// so the next request finds one ready.
    pub(crate) async fn release(&self, mut lease: Lease, streamed: bool, complete: bool) {
        // The lease keeps the connection counted until the end, however this ends (a run
        // interrupted meanwhile drops it).
        let keep = complete && lease.conn().still_open();
        if complete && streamed {
            if !keep {
                // It ended right after a complete stream: the server closes after streams.
                self.state().after_stream = AfterStream::Closes;
            } else if matches!(self.state().after_stream, AfterStream::Unknown { .. }) {
                // Learning takes a moment after the stream's end: it is watched off the
                // caller's path, so the request it served is handed back at once (a request
                // meanwhile takes another idle connection, or opens one).
                let pool = lease.pool.clone();
                tokio::spawn(async move {
                    let keep = pool.learn(lease.conn()).await;
                    pool.settle(lease, keep, streamed).await;
                });
                return;
            }
        }
        let keep = keep && (!streamed || self.state().after_stream != AfterStream::Closes);
        self.settle(lease, keep, streamed).await;
    }

    /// Keeps a released connection for the next request (`keep`), or closes it and, when
    /// fewer than the prepared number remain, opens a fresh one at once.
    async fn settle(&self, mut lease: Lease, keep: bool, streamed: bool) {
        if keep {
            let mut conn = lease.conn.take().expect("released once");
            conn.served += 1;
            conn.last_streamed = streamed;
            self.state().idle.push(conn);
            return;
        }
        drop(lease);
        let replace = {
            let st = self.state();
            st.live < st.target
        };
        if replace {
            // A failure is left for the next request, which connects itself and records why
            // it could not.
            if let Ok(fresh) = self.open(Instant::now() + CONNECT_TIMEOUT).await {
                self.state().idle.push(fresh);
            }
        }
    }

    /// Whether a connection that stayed open after a complete streamed response may be kept,
    /// learning what the server does while that is not known yet.
    async fn learn(&self, conn: &mut Conn) -> bool {
        match self.state().after_stream {
            AfterStream::KeepsOpen => return true,
            AfterStream::Closes => return false,
            AfterStream::Unknown { .. } => {}
        }
        let closed = tokio::time::timeout(LEARN_WAIT, conn.closed())
            .await
            .is_ok();
        let mut st = self.state();
        if closed {
            st.after_stream = AfterStream::Closes;
            return false;
        }
        if let AfterStream::Unknown { kept } = st.after_stream {
            st.after_stream = if kept + 1 >= LEARN_STREAMS {
                AfterStream::KeepsOpen
            } else {
                AfterStream::Unknown { kept: kept + 1 }
            };
        }
        st.after_stream != AfterStream::Closes
    }
}

/// Whether a connection could not be opened for lack of the client's own file descriptors
/// (the process's `EMFILE` or the system's `ENFILE`), not because of the server.
fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::EMFILE) | Some(nix::libc::ENFILE)
    )
}

fn error(kind: ErrorKind, message: String) -> RequestError {
    RequestError {
        kind,
        message,
        status: None,
        body_head: None,
    }
}

/// Why a request's send failed (`read_bytes` of the response had arrived): not HTTP, closed
/// unanswered, or broken mid-head.
fn send_failure(e: &hyper::Error, read_bytes: u64) -> RequestError {
    if e.is_parse() {
        error(
            ErrorKind::Malformed,
            format!("the response is not valid HTTP/1.1: {}", describe(e)),
        )
    } else if read_bytes == 0 {
        error(
            ErrorKind::Reset,
            format!(
                "the server closed the connection without answering: {}",
                describe(e)
            ),
        )
    } else {
        error(
            ErrorKind::Reset,
            format!(
                "the connection broke before the response head was complete: {}",
                describe(e)
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The client's own descriptors running out is its failure (`client-resources`); a refused
    /// or unreachable server is the server's (`connect`).
    #[test]
    fn only_the_clients_own_descriptors_are_its_failure() {
        let os = std::io::Error::from_raw_os_error;
        assert!(out_of_descriptors(&os(nix::libc::EMFILE)));
        assert!(out_of_descriptors(&os(nix::libc::ENFILE)));
        assert!(!out_of_descriptors(&os(nix::libc::ECONNREFUSED)));
        assert!(!out_of_descriptors(&std::io::Error::other("x")));
    }
}
