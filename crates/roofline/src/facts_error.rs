//! Why a model's config could not be read, and the check of a whole-number field that the
//! model's facts and its quantization share (a file of its own: both use it, neither owns it).

use serde_json::Value;

/// Why a config could not be read as a model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FactsError {
    #[error(
        "the config has no `{0}` (a whole number); give it, or the model's facts in `model_facts:`"
    )]
    Missing(&'static str),
    /// A field holds what no model has; `field` is its path in the config (`num_hidden_layers`,
    /// `quantization_config.bits`, `text_config.hidden_size`).
    #[error("the config's `{field}` is {value}: {why}")]
    Invalid {
        field: String,
        value: String,
        why: String,
    },
    #[error("the config is not a JSON object")]
    NotAnObject,
}

impl FactsError {
    /// The field's place in the config as a JSON pointer (`/quantization_config/bits`), for
    /// an error at its line; None for a field that is missing or the whole config.
    pub fn pointer(&self) -> Option<String> {
        match self {
            FactsError::Invalid { field, .. } => Some(format!("/{}", field.replace('.', "/"))),
            _ => None,
        }
    }

    pub(crate) fn invalid(field: &str, value: &Value, why: impl Into<String>) -> FactsError {
        FactsError::Invalid {
            field: field.to_string(),
            value: shown(value),
            why: why.into(),
        }
    }
}

/// A config value as an error quotes it, cut to a readable length.
fn shown(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 48 {
        format!("{}...", text.chars().take(45).collect::<String>())
    } else {
        text
    }
}

/// A JSON number that is a whole number from `min` to `max` (`4096.0` too).
pub(crate) fn whole(v: &Value, min: u64, max: u64) -> Option<u64> {
    let n = v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= max as f64)
            .map(|f| f as u64)
    })?;
    (min..=max).contains(&n).then_some(n)
}
