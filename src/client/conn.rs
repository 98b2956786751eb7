//! One HTTP/1.1 connection: a TCP connect the client times itself, hyper's low-level client
//! over it, and a socket wrapper that records when a request's bytes were written (stamped
//! before each write, with the write's end) and whether any response byte came back.
//!
//! The connection's driver (hyper's `Connection` future) is not spawned: the task that uses the
//! connection polls it together with what it waits for ([`Conn::drive`]), so a chunk is
//! stamped in the same task poll that read it from the socket, with no hand-over between
//! tasks in between. An idle connection is polled once without waiting when it is taken
//! ([`Conn::still_open`]), which is when a close the server sent meanwhile is noticed.
//!
//! Each read also records when its bytes reached this host: on Linux the kernel's receive
//! stamp (`kernel_stamp`), elsewhere the read's own return.

use std::error::Error as _;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// What the socket saw since the current request began. Each write is stamped just before
/// the call that wrote its bytes, so a stamp is never later than the bytes it stands for
/// (a client descheduled between a write and a stamp taken after it made TTFT too short).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Wire {
    /// When the first write of the request's bytes began (the call that wrote them).
    pub first_write: Option<Instant>,
    /// When the latest write that wrote bytes began: once the response head is back, the
    /// write of the request's last byte. Its bytes left no earlier than this.
    pub last_write: Option<Instant>,
    /// When that latest write returned.
    pub last_write_done: Option<Instant>,
    /// Response bytes read.
    pub read_bytes: u64,
    /// When the bytes of the latest read reached this host (never before an earlier read's).
    pub last_arrival: Option<Instant>,
}

/// The [`Wire`] of one connection, shared between its socket (inside hyper) and its user.
#[derive(Debug, Default)]
pub(super) struct WireLog(Mutex<Wire>);

impl WireLog {
    /// Starts a request: forgets what the previous one wrote and read.
    pub(crate) fn begin(&self) {
        *self.lock() = Wire::default();
    }

    pub(crate) fn get(&self) -> Wire {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Wire> {
        // A poisoned lock only means a panic elsewhere; the stamps are still plain data.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `n` bytes written by a call that began at `began`.
    fn wrote(&self, n: usize, began: Instant) {
        if n > 0 {
            let done = Instant::now();
            let mut w = self.lock();
            w.first_write.get_or_insert(began);
            w.last_write = Some(began);
            w.last_write_done = Some(done);
        }
    }

    /// `n` bytes read that reached this host at `arrived`.
    fn read(&self, n: usize, arrived: Instant) {
        if n > 0 {
            let mut w = self.lock();
            w.read_bytes += n as u64;
            w.last_arrival = Some(w.last_arrival.map_or(arrived, |a| a.max(arrived)));
        }
    }
}

/// A TCP stream that logs its successful writes and reads into a [`WireLog`].
struct StampedStream {
    tcp: TcpStream,
    log: Arc<WireLog>,
    /// Room for the kernel's receive stamp of each read; None where the kernel stamps nothing.
    control: Option<Vec<u8>>,
}

impl StampedStream {
    fn new(tcp: TcpStream, log: Arc<WireLog>) -> StampedStream {
        #[cfg(target_os = "linux")]
        let control = super::kernel_stamp::enable(&tcp).then(super::kernel_stamp::control_space);
        #[cfg(not(target_os = "linux"))]
        let control = None;
        StampedStream { tcp, log, control }
    }

    /// A read through `recvmsg`, which returns the kernel's stamp of the newest bytes read.
    #[cfg(target_os = "linux")]
    fn poll_read_stamped(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        use std::os::fd::AsRawFd;
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let fd = self.tcp.as_raw_fd();
        loop {
            std::task::ready!(self.tcp.poll_read_ready(cx))?;
            let StampedStream { tcp, log, control } = self;
            let control = control
                .as_mut()
                .expect("stamped reads have room for the stamp");
            let dst = buf.initialize_unfilled();
            let got = tcp.try_io(tokio::io::Interest::READABLE, || {
                super::kernel_stamp::recv(fd, dst, control)
            });
            match got {
                Ok((n, stamp)) => {
                    let arrived = super::kernel_stamp::on_monotonic_clock(stamp);
                    buf.advance(n);
                    log.read(n, arrived);
                    return Poll::Ready(Ok(()));
                }
                // Readiness was stale: wait for the next.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncRead for StampedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        #[cfg(target_os = "linux")]
        if self.control.is_some() {
            return self.poll_read_stamped(cx, buf);
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            self.log.read(buf.filled().len() - before, Instant::now());
        }
        polled
    }
}

impl AsyncWrite for StampedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let began = Instant::now();
        let polled = Pin::new(&mut self.tcp).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.log.wrote(n, began);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let began = Instant::now();
        let polled = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            self.log.wrote(n, began);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// The request body type: the whole body, encoded before the request's clock starts.
pub(super) type Body = Full<Bytes>;
type Driver = http1::Connection<TokioIo<StampedStream>, Body>;

/// An open HTTP/1.1 connection.
pub(super) struct Conn {
    sender: http1::SendRequest<Body>,
    /// hyper's connection future; None once it has ended (the connection is closed).
    driver: Option<Driver>,
    /// What the socket wrote and read for the current request.
    pub log: Arc<WireLog>,
    /// Seconds the TCP connect took.
    pub connect_s: f64,
    /// Requests completed on this connection.
    pub served: u32,
    /// The latest request on it was streamed.
    pub last_streamed: bool,
}

impl Conn {
    /// Connects to `addr` and sets up HTTP/1.1 over it, timing the TCP connect.
    pub(crate) async fn open(addr: SocketAddr) -> io::Result<Conn> {
        let start = Instant::now();
        let tcp = TcpStream::connect(addr).await?;
        let connect_s = start.elapsed().as_secs_f64();
        tcp.set_nodelay(true)?;
        let log = Arc::new(WireLog::default());
        let io = TokioIo::new(StampedStream::new(tcp, log.clone()));
        let (sender, driver) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(io::Error::other)?;
        Ok(Conn {
            sender,
            driver: Some(driver),
            log,
            connect_s,
            served: 0,
            last_streamed: false,
        })
    }

    /// Polls the connection once without waiting; false when it has ended (the server closed
    /// it, or it failed).
    pub(crate) fn still_open(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.poll_driver(&mut cx);
        self.driver.is_some() && !self.sender.is_closed()
    }

    /// Waits until the connection ends (for as long as the caller lets it).
    pub(crate) async fn closed(&mut self) {
        std::future::poll_fn(|cx| {
            self.poll_driver(cx);
            if self.driver.is_none() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Awaits `f` while driving the connection, so the socket is read and written meanwhile.
    pub(crate) async fn drive<F: Future>(&mut self, f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| {
            self.poll_driver(cx);
            f.as_mut().poll(cx)
        })
        .await
    }

    /// Sends `req` once the connection is ready for it; resolves with the response head.
    pub(crate) async fn send(
        &mut self,
        req: hyper::Request<Body>,
    ) -> hyper::Result<hyper::Response<hyper::body::Incoming>> {
        std::future::poll_fn(|cx| {
            self.poll_driver(cx);
            self.sender.poll_ready(cx)
        })
        .await?;
        // The response future does not borrow the sender (hyper's is `'static`).
        let response = self.sender.send_request(req);
        self.drive(response).await
    }

    fn poll_driver(&mut self, cx: &mut Context<'_>) {
        if let Some(driver) = self.driver.as_mut()
            && Pin::new(driver).poll(cx).is_ready()
        {
            self.driver = None;
        }
    }
}

/// True when `e` says the peer closed or reset the connection (rather than, say, sending
/// something that is not HTTP).
pub(super) fn closed_by_peer(e: &hyper::Error) -> bool {
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() || e.is_body_write_aborted() {
        return true;
    }
    let mut source = e.source();
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return matches!(
                io.kind(),
                io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::NotConnected
            );
        }
        source = cause.source();
    }
    false
}

/// An error with its causes ("connection error: Connection reset by peer"), which hyper's own
/// Display leaves out. Headers (and so the API key) are never part of it.
pub(super) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_stamped_before_it_began_never_after() {
        let log = WireLog::default();
        let began = Instant::now();
        // The write itself takes a while (the client descheduled inside or after it).
        std::thread::sleep(std::time::Duration::from_millis(20));
        log.wrote(100, began);
        let w = log.get();
        assert_eq!(w.first_write, Some(began));
        assert_eq!(w.last_write, Some(began));
        let took = w.last_write_done.unwrap() - began;
        assert!(took >= std::time::Duration::from_millis(20), "{took:?}");
        // A later write moves the last stamp, not the first.
        let second = Instant::now();
        log.wrote(5, second);
        assert_eq!(log.get().first_write, Some(began));
        assert_eq!(log.get().last_write, Some(second));
        // A call that wrote nothing is no write.
        log.wrote(0, Instant::now());
        assert_eq!(log.get().last_write, Some(second));
    }
}
