//! Metrics, statistics, cache-policy verification, and a point's summary from its records.
pub mod agents;
pub mod agentx;
pub mod gpu;
pub(crate) mod interactivity;
pub mod metrics;
pub(crate) mod reasoning;
pub(crate) mod replay;
pub(crate) mod samples;
pub mod server_view;
pub(crate) mod sessions;
pub(crate) mod shared;
pub mod speculative;
pub(crate) mod spread;
pub(crate) mod stats;
pub mod summary;
pub mod system;
pub(crate) mod timeline;
pub(crate) mod tool_calls;
pub(crate) mod twopoint;
pub(crate) mod usage;
pub(crate) mod verify;

pub use stats::percentile_sorted;
