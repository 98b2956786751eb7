//! The run directory format: reading and writing.
pub mod records;
