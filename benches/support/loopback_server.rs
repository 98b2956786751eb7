//! What the known-timing bench servers share (`client_ttft`, `client_streams`): a loopback
//! listener whose connections are read on one thread, the deadline-ordered jobs its writer
//! thread keeps, and the bytes-level HTTP/1.1 helpers.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

/// A write due at `deadline`; a max-heap of these pops the earliest first.
pub struct Due<T> {
    pub deadline: Instant,
    pub item: T,
}

impl<T> PartialEq for Due<T> {
    fn eq(&self, other: &Self) -> bool {
        self.deadline == other.deadline
    }
}
impl<T> Eq for Due<T> {}
impl<T> PartialOrd for Due<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Due<T> {
    // Earliest deadline first out of a max-heap.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.deadline.cmp(&self.deadline)
    }
}

/// Listens on loopback (a backlog of 4,096 for 512 simultaneous connects: std's is 128) and
/// hands each connection to `on_conn`, all on one thread running a single-threaded async
/// runtime, so a burst of 512 connections costs no thread spawns. Returns the address.
pub fn listen<F, Fut>(on_conn: F) -> SocketAddr
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (bound, addr) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("server runtime");
        rt.block_on(async move {
            let socket = tokio::net::TcpSocket::new_v4().expect("socket");
            socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            let listener = socket.listen(4096).expect("listen");
            bound
                .send(listener.local_addr().expect("addr"))
                .expect("bound");
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(on_conn(conn));
            }
        });
    });
    addr.recv().expect("address")
}

/// The length of the complete request at the start of `got`, if there is one: the head, then
/// `content-length` bytes of body.
pub fn complete_request(got: &[u8]) -> Option<usize> {
    let end = got.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap_or(0));
    (got.len() >= end + 4 + length).then_some(end + 4 + length)
}

/// Writes all of `bytes` to a non-blocking socket (a full send buffer is waited out by
/// spinning).
pub fn write_fully(socket: &mut TcpStream, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        match socket.write(bytes) {
            Ok(0) => return,
            Ok(k) => bytes = &bytes[k..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(_) => return,
        }
    }
}
