//! Metrics, statistics and cache-policy verification.
pub mod metrics;
pub mod spread;
pub mod stats;
pub mod twopoint;
pub mod verify;
