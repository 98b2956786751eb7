//! What the hardware allows, and how far a measured number is from it.
//!
//! A decode step of a transformer reads every active weight once and the KV cache of every
//! sequence in the batch; a prefill multiplies every new token through the active weights and
//! attends over its context. Given the model's shape ([`ModelFacts`], from its Hugging Face
//! `config.json`), how it is spread over GPUs ([`Layout`]) and the GPU's datasheet figures
//! ([`gpu::GpuSpec`]), this crate says how many bytes and FLOPs a step needs per GPU
//! ([`step`]), the time that takes at the datasheet's peak, and grades a measured step against
//! it ([`grade`]): the effective bandwidth, its fraction of peak, and across a context sweep the
//! marginal bandwidth of the context-dependent part.
//!
//! Every figure is a stated model: the functions document what they count and what they leave
//! out, and what could not be known from the inputs is said ([`ModelFacts::unknown`]), never
//! guessed.

mod facts_error;
pub mod gpu;
pub mod grade;
pub mod model;
pub mod params;
pub(crate) mod quant;
pub mod step;

pub use gpu::{GpuSpec, Precision};
pub use model::{Attention, FactsError, LayerKind, ModelFacts, Moe};
pub use quant::{Quantization, WeightClass};
pub use step::Layout;
