//! The modelled KV transfer from a prefill worker to a decode worker: `bytes = prompt tokens
//! x kv_bytes_per_token / tp` (one rank's share, each rank on its own link), `time = latency +
//! bytes / bandwidth`. Transfers share the link one after another: a transfer whose prefill
//! ended while the link was busy starts when the link frees (the wire is busy for
//! `bytes / bandwidth`; the latency is the transfer's own, not the link's).
//!
//! Defaults: 25 GB/s (1e9 bytes a second) and 1 ms, roughly one 200 Gb/s RDMA NIC per GPU.
//! What SGLang reports for a transfer (prefill.py over req_time_stats.py
//! `compute_and_observe_kv_transfer_metrics`): `latency_ms` from the request's entry into the
//! inflight queue (the end of its prefill) to the transfer's end, `total_mb = bytes / 2^20`
//! and `speed_gb_s = total_mb / 1024 / latency_s` (so GiB/s, not the GB/s of the flag).

use std::time::{Duration, Instant};

/// `--sim-kv-transfer-gbps`'s default.
pub(crate) const DEFAULT_GBPS: f64 = 25.0;
/// `--sim-kv-transfer-latency-ms`'s default.
pub(crate) const DEFAULT_LATENCY_MS: f64 = 1.0;

/// A link's speed and a transfer's fixed cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferModel {
    /// Bytes a second.
    pub bytes_per_s: f64,
    /// Fixed time per transfer.
    pub latency: Duration,
}

impl Default for TransferModel {
    fn default() -> Self {
        TransferModel::new(DEFAULT_GBPS, DEFAULT_LATENCY_MS)
    }
}

impl TransferModel {
    /// `gbps` GB/s (1e9 bytes) and `latency_ms` milliseconds.
    pub(crate) fn new(gbps: f64, latency_ms: f64) -> Self {
        TransferModel {
            bytes_per_s: gbps * 1e9,
            latency: Duration::from_secs_f64(latency_ms.max(0.0) / 1e3),
        }
    }

    /// Every duration `scale` times as long (the profile's `time_scale`).
    pub(crate) fn scaled(self, scale: f64) -> Self {
        TransferModel {
            bytes_per_s: self.bytes_per_s / scale,
            latency: self.latency.mul_f64(scale),
        }
    }

    /// How long `bytes` keep the wire busy.
    pub(crate) fn wire(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 / self.bytes_per_s)
    }

    /// A lone transfer's time: latency + bytes / bandwidth.
    pub(crate) fn duration(&self, bytes: u64) -> Duration {
        self.latency + self.wire(bytes)
    }
}

/// Bytes one rank sends for a prompt of `tokens`: its `1/tp` share of the model's KV.
pub(crate) fn kv_bytes(tokens: u64, kv_bytes_per_token: f64, tp: u64) -> u64 {
    (tokens as f64 * kv_bytes_per_token / tp.max(1) as f64).round() as u64
}

/// One prefill worker's outgoing link: transfers in the order their prefills end.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    model: TransferModel,
    free_at: Option<Instant>,
}

/// When a transfer runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Scheduled {
    /// When it is done (the KV is on the decode side).
    pub done: Instant,
    /// From `ready` to `done`: SGLang's `latency_ms`.
    pub latency: Duration,
}

impl Link {
    pub(crate) fn new(model: TransferModel) -> Self {
        Link {
            model,
            free_at: None,
        }
    }

    /// Schedules `bytes` whose prefill ended at `ready`.
    pub(crate) fn schedule(&mut self, ready: Instant, bytes: u64) -> Scheduled {
        let start = self.free_at.map_or(ready, |f| f.max(ready));
        let wire = self.model.wire(bytes);
        self.free_at = Some(start + wire);
        let done = start + self.model.duration(bytes);
        Scheduled {
            done,
            latency: done - ready,
        }
    }
}

/// SGLang's figures for one transfer: (latency ms, total MB, speed "GB/s").
pub(crate) fn reported(bytes: u64, latency: Duration) -> (f64, f64, f64) {
    let latency_s = latency.as_secs_f64();
    let total_mb = bytes as f64 / (1024.0 * 1024.0);
    let speed = if latency_s > 0.0 {
        total_mb / 1024.0 / latency_s
    } else {
        0.0
    };
    (latency_s * 1e3, total_mb, speed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal to the nanosecond (float seconds round at the last one).
    #[track_caller]
    fn same(a: Duration, b: Duration) {
        assert!(a.abs_diff(b) <= Duration::from_nanos(1), "{a:?} != {b:?}");
    }

    /// 1000 tokens of 128 KiB each at 25 GB/s and 1 ms: 131,072,000 bytes in 5.24288 ms on
    /// the wire, 6.24288 ms in all.
    #[test]
    fn time_is_latency_plus_bytes_over_bandwidth() {
        let m = TransferModel::new(25.0, 1.0);
        let bytes = kv_bytes(1000, 131072.0, 1);
        assert_eq!(bytes, 131_072_000);
        same(m.duration(bytes), Duration::from_nanos(6_242_880));
        // tp 4: each rank moves a quarter, in a quarter of the wire time.
        assert_eq!(kv_bytes(1000, 131072.0, 4), 32_768_000);
        // No bytes: the latency alone; 10 GB/s and 0 ms: the wire alone.
        same(m.duration(0), Duration::from_millis(1));
        same(
            TransferModel::new(10.0, 0.0).duration(1_000_000_000),
            Duration::from_millis(100),
        );
        // time_scale 0.5: everything takes half as long.
        same(
            TransferModel::new(25.0, 1.0).scaled(0.5).duration(bytes),
            Duration::from_nanos(3_121_440),
        );
    }

    #[test]
    fn transfers_queue_on_the_link() {
        let m = TransferModel::new(1.0, 2.0);
        let mut link = Link::new(m);
        let t0 = Instant::now();
        // 10 MB at 1 GB/s: 10 ms on the wire, 12 ms in all.
        let a = link.schedule(t0, 10_000_000);
        same(a.done - t0, Duration::from_millis(12));
        same(a.latency, Duration::from_millis(12));
        // Ready 1 ms later: waits for the wire until 10 ms, done at 22 ms.
        let b = link.schedule(t0 + Duration::from_millis(1), 10_000_000);
        same(b.done - t0, Duration::from_millis(22));
        same(b.latency, Duration::from_millis(21));
        // Ready after the link freed: its own time again.
        let c = link.schedule(t0 + Duration::from_millis(50), 0);
        same(c.latency, Duration::from_millis(2));
    }

    #[test]
    fn sglangs_figures() {
        let (ms, mb, speed) = reported(1 << 30, Duration::from_millis(500));
        assert_eq!(ms, 500.0);
        assert_eq!(mb, 1024.0);
        assert_eq!(speed, 2.0);
        assert_eq!(reported(5, Duration::ZERO).2, 0.0);
    }
}
