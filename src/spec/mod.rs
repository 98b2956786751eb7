//! Experiment specs: types, loading with source positions, validation, sweep expansion.
pub mod types;
// STUB until the spec branch lands.
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
pub struct LoadedSpec {
    pub path: PathBuf,
    pub source: String,
    pub sha256: String,
    pub name: String,
    pub description: String,
    pub dimensions: Vec<String>,
    pub points: Vec<Point>,
}
#[derive(Debug, Clone)]
pub struct Point {
    pub id: String,
    pub values: IndexMap<String, serde_json::Value>,
    pub experiment: types::Experiment,
}
#[derive(Debug)]
pub struct SpecErrors {
    pub diagnostics: Vec<String>,
}
impl std::fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.diagnostics)
    }
}
impl std::error::Error for SpecErrors {}
pub fn load(_path: &Path) -> Result<LoadedSpec, SpecErrors> {
    todo!()
}
pub fn schema_json() -> String {
    todo!()
}
