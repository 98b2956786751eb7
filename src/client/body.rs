//! Reading a response body piece by piece from a pooled connection, bounded by a deadline: the
//! one read both streamed responses and small admin answers go through.

use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::timeout_at;

use super::pool::Lease;

/// One read of a response body.
pub(crate) enum Read {
    /// Bytes of the body.
    Data(Bytes),
    /// The body ended (the connection is at a message boundary).
    End,
    /// The connection failed.
    Failed(hyper::Error),
    /// The deadline passed.
    TimedOut,
}

/// Reads the next piece of `body`, driving its connection, until `deadline`.
pub(crate) async fn read(lease: &mut Lease, body: &mut Incoming, deadline: Instant) -> Read {
    loop {
        let frame = timeout_at(deadline.into(), lease.conn().drive(body.frame())).await;
        return match frame {
            Err(_) => Read::TimedOut,
            Ok(None) => Read::End,
            Ok(Some(Err(e))) => Read::Failed(e),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(bytes) => Read::Data(bytes),
                // Trailers carry nothing measured.
                Err(_) => continue,
            },
        };
    }
}
