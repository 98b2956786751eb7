//! The run directory format: reading and writing.
pub mod meta;
pub mod records;
pub mod rundir;

pub use rundir::{RunDir, RunDirError};
