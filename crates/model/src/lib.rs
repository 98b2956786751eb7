//! servebench's data model, the bottom of its crate graph: what a spec says and what a run
//! directory holds, and the small parts every later stage writes with.
//!
//! Layers inside the crate (`tests/architecture.rs`): `catalog`, `text`, `redact`, `console`
//! use nothing above them; `spec` uses those; `secrets` and `results` use `spec`.

pub mod catalog;
pub mod console;
pub mod input_file;
pub mod redact;
pub mod results;
pub mod secrets;
pub mod spec;
pub mod text;
