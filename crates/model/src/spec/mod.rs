//! Experiment specs: types, loading with source positions, validation, sweep expansion.
//!
//! `load` is the one entry point: YAML (with positions) -> sweep and template checks -> one
//! value per point -> schema checks -> typed [`types::Experiment`]. All problems are collected
//! into [`SpecErrors`], each with file, line, column, the offending text and a hint.

pub mod agentx;
pub(crate) mod arg_value;
pub(crate) mod check;
pub mod deployment;
pub mod diagnostics;
pub(crate) mod error_budget;
pub(crate) mod expand;
pub(crate) mod hardware_facts;
pub mod load;
pub mod load_model;
pub(crate) mod patterns;
pub mod profiler;
pub mod reasoning;
pub(crate) mod schema;
pub mod search;
pub(crate) mod span;
pub mod telemetry;
pub(crate) mod template;
pub mod tools;
pub mod types;
pub mod validate;
pub mod validity;
pub(crate) mod workload;
pub mod yaml;

pub use check::Check;
pub use diagnostics::{Diagnostic, SpecErrors};
pub use load::{LoadedSpec, Point, load, load_checked, load_str, same_value};
pub use schema::{each_subschema_mut, schema_json};
