//! A launch flag's value: its own file, so the parts of a server (`types`, `deployment`) share
//! it without using each other.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A launch flag's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ArgValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}
