//! How the report links a chart drawn beside it (`charts/*.svg`): every section with charts
//! (results, load, capacity, timelines) holds these, below the modules that draw them.

use schemars::JsonSchema;
use serde::Serialize;

/// A chart as the report links it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ChartLink {
    /// What the chart shows (`TTFT against context length`); the image's alt text.
    pub title: String,
    /// Path relative to the run directory (`charts/ttft.svg`).
    pub path: String,
}
