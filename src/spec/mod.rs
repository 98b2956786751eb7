//! Experiment specs: types, loading with source positions, validation, sweep expansion.
pub mod types;
