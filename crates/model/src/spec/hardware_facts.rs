//! What a spec says about the model's shape and the GPU, so a run's points can be graded
//! against the hardware's physical bound (the report's "Against the hardware" section).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where the model's Hugging Face `config.json` comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ModelFactsSource {
    /// A path to a `config.json`, relative to the spec file (read on this machine).
    Path(String),
    /// The config's fields written inline (`{ model_type: llama, num_hidden_layers: 32, ... }`).
    Inline(IndexMap<String, serde_json::Value>),
}

/// The GPU a point's steps are graded against.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum GpuChoice {
    /// A catalogue id (`h100-sxm`, `rtx-pro-6000`, ...) or a name as nvidia-smi prints it.
    Catalogue(String),
    /// A GPU the catalogue lacks, or one clocked differently: its figures and where they are from.
    Custom(CustomGpu),
}

/// A name, or the figures read as [`CustomGpu`] so that a wrong one is named by its field (an
/// untagged enum would only say no variant matched).
impl<'de> Deserialize<'de> for GpuChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Choice;
        impl<'de> serde::de::Visitor<'de> for Choice {
            type Value = GpuChoice;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a catalogue id or nvidia-smi name, or { name, bandwidth_gb_s, bf16_tflops, source }",
                )
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GpuChoice, E> {
                Ok(GpuChoice::Catalogue(v.to_string()))
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<GpuChoice, A::Error> {
                CustomGpu::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(GpuChoice::Custom)
            }
        }
        d.deserialize_any(Choice)
    }
}

/// One GPU's peak figures, given in the spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomGpu {
    /// What to call it in the report.
    pub name: String,
    /// Peak memory bandwidth, GB/s (10^9 bytes per second).
    #[schemars(range(min = 0.001))]
    pub bandwidth_gb_s: f64,
    /// Dense (no sparsity) BF16 tensor TFLOP/s.
    #[schemars(range(min = 0.001))]
    pub bf16_tflops: f64,
    /// Dense FP8 tensor TFLOP/s, where it has FP8 tensor cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_tflops: Option<f64>,
    /// Dense FP4 tensor TFLOP/s, where it has FP4 tensor cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp4_tflops: Option<f64>,
    /// Where the figures come from (a datasheet, a measurement), shown with every grade.
    #[schemars(length(min = 1))]
    pub source: String,
}
