//! A point's error budget: how many failed requests it tolerates. Shared by the experiment
//! (`error_budget:`) and its SLOs (`slo.errors`), so it sits below both.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How many failed requests a point tolerates: a count or a percentage of its requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ErrorBudget {
    /// At most this many failed requests.
    Count(u32),
    /// At most this share of the point's requests, e.g. `5%`.
    Percent(#[schemars(regex(pattern = r"^\s*[0-9]+(\.[0-9]+)?\s*%\s*$"))] String),
}

impl Default for ErrorBudget {
    fn default() -> Self {
        ErrorBudget::Count(0)
    }
}

impl ErrorBudget {
    /// True when `errors` failures out of `total` requests stay within the budget.
    pub fn allows(&self, errors: usize, total: usize) -> bool {
        match self {
            ErrorBudget::Count(n) => errors <= *n as usize,
            ErrorBudget::Percent(p) => {
                let pct: f64 = p.trim().trim_end_matches('%').trim().parse().unwrap_or(0.0);
                total == 0 || (errors as f64) <= pct / 100.0 * total as f64 + 1e-9
            }
        }
    }
}
