//! A metric's definition as a report states it (label, unit, one sentence), from the
//! catalogue: the results, the load section and `compare` all show them.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::catalog::{Method, Metric};

/// A metric's definition.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct MetricDef {
    /// Short label (`TTFT`).
    pub label: String,
    /// Unit as displayed (`s`, `ms`, `tok/s`, `s/tok`, `tok`).
    pub unit: String,
    /// One-sentence definition.
    pub definition: String,
}

/// The definition of a metric by name (`ttft_s`), None for a name the catalogue does not know.
pub(crate) fn metric_def(name: &str) -> Option<MetricDef> {
    Metric::from_name(name).map(|m| MetricDef::of(m, Method::Streaming, 0, 0))
}

impl MetricDef {
    pub(super) fn of(m: Metric, method: Method, a: u32, b: u32) -> MetricDef {
        MetricDef {
            label: m.label_for(method).to_string(),
            unit: m.unit().to_string(),
            definition: m.definition(method, a, b),
        }
    }
}
