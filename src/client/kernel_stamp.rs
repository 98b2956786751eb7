//! When a response's bytes reached this host, by the kernel's clock rather than the client's:
//! each TCP segment is stamped as it is received (`SO_TIMESTAMPNS`), and a read returns the
//! stamp of the newest segment it consumed. A client busy with other streams (512 first tokens
//! arriving together, each parsed in turn) reads some of them milliseconds after they came;
//! the kernel's stamp does not move with that, so TTFT and per-token times measure the server
//! and the network, not the client's queue. The stamp is on the real-time clock: it is placed
//! on the monotonic one by its age at the read, and a stamp that cannot be placed (a clock
//! step) leaves the read's own time.

use std::io;
use std::io::IoSliceMut;
use std::os::fd::RawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};
use tokio::net::TcpStream;

/// Asks the kernel to stamp the segments `tcp` receives; false where it will not.
pub(super) fn enable(tcp: &TcpStream) -> bool {
    setsockopt(tcp, sockopt::ReceiveTimestampns, &true).is_ok()
}

/// Room for one stamp's control message.
pub(super) fn control_space() -> Vec<u8> {
    nix::cmsg_space!(nix::sys::time::TimeSpec)
}

/// Reads into `dst` from the socket `fd`; the bytes read and the kernel's receive stamp of the
/// newest of them (real-time clock, since the Unix epoch), where it gave one.
pub(super) fn recv(
    fd: RawFd,
    dst: &mut [u8],
    control: &mut [u8],
) -> io::Result<(usize, Option<Duration>)> {
    let mut iov = [IoSliceMut::new(dst)];
    let msg = recvmsg::<()>(fd, &mut iov, Some(control), MsgFlags::empty())?;
    let stamp = msg.cmsgs().ok().and_then(|mut c| {
        c.find_map(|m| match m {
            ControlMessageOwned::ScmTimestampns(ts) => Some(ts),
            _ => None,
        })
    });
    let stamp = stamp.and_then(|ts| {
        let (secs, nanos) = (
            u64::try_from(ts.tv_sec()).ok()?,
            u32::try_from(ts.tv_nsec()).ok()?,
        );
        (nanos < 1_000_000_000).then(|| Duration::new(secs, nanos))
    });
    Ok((msg.bytes, stamp))
}

/// The monotonic instant a real-time `stamp` stands for, read against both clocks now; `now`
/// itself without a stamp, or for one from the future (the clock was stepped back).
pub(super) fn on_monotonic_clock(stamp: Option<Duration>) -> Instant {
    let now = Instant::now();
    let real_now = SystemTime::now().duration_since(UNIX_EPOCH).ok();
    stamp
        .zip(real_now)
        .and_then(|(at, real)| real.checked_sub(at))
        .and_then(|age| now.checked_sub(age))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_placed_by_its_age_and_one_from_the_future_is_not_used() {
        let before = Instant::now();
        let real = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let placed = on_monotonic_clock(Some(real - Duration::from_millis(30)));
        let after = Instant::now();
        // 30 ms before `real` was read (between `before` and the call's end).
        assert!(
            placed + Duration::from_millis(30) >= before,
            "{placed:?} {before:?}"
        );
        assert!(placed + Duration::from_millis(30) <= after + Duration::from_millis(1));
        let future = on_monotonic_clock(Some(real + Duration::from_secs(60)));
        assert!(
            future >= after,
            "a stamp from the future falls back to the read's time"
        );
        assert!(on_monotonic_clock(None) >= after);
    }
}
