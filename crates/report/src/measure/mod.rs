//! Metrics, statistics, cache-policy verification, and a point's summary from its records.
pub mod metrics;
pub mod samples;
pub mod server_view;
pub mod shared;
pub mod spread;
pub mod stats;
pub mod summary;
pub mod system;
pub mod timeline;
pub mod twopoint;
pub mod verify;
