//! The run directory format: reading and writing.
pub mod agentx;
pub mod gpu;
pub mod jobs;
pub mod meta;
pub mod records;
pub mod rundir;
pub mod search;
pub mod server_view;
pub mod tool_calls;
pub mod validity;

pub use rundir::{RunDir, RunDirError};
