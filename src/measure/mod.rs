//! Metrics, statistics and cache-policy verification.
pub mod metrics;
pub mod verify;
