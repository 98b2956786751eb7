//! Measurement: per-request metrics and their statistics, derived from request records.

pub mod metrics;
pub mod stats;
