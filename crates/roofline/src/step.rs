//! What one step moves and computes, per GPU, under a parallel layout.
//!
//! The model (stated, so a reader can check it):
//! - **Decode step**: every weight a step's tokens go through is read once (routed experts: the
//!   distinct experts the step's tokens reach, expected under uniform routing,
//!   `E x (1 - (1 - k/E)^tokens)` per MoE layer; exactly `k` for one token), plus each running
//!   sequence's KV cache up to its context (a sliding-window layer up to its window). A
//!   speculative verify step puts its verify width of tokens per sequence through the weights
//!   but reads the KV cache once.
//! - **Per GPU, as SGLang and vLLM lay the weights out**: column- and row-parallel matrices
//!   (q/o, MLA's q_b and kv_b, MLPs, experts by tensor or expert parallelism alike, the
//!   vocabulary) are split evenly over the tensor-parallel ranks; MLA's down-projections
//!   (`q_a_proj`, `kv_a_proj_with_mqa`: replicated linear layers) and the MoE router (`gate`)
//!   are whole on every rank; a GQA model's k and v projections are split over at most its KV
//!   heads (each rank past that holds a copy of one head's). A GQA cache is split the same way;
//!   an MLA latent is whole on every rank. With data-parallel attention, attention runs with
//!   `tp / dp` ranks per group and the batch is split over the `dp` groups.
//! - **Pipeline stages run in series** for one sequence's token: a step's floor is the reads
//!   of every stage one after another, so `pp` does not divide it (each stage's GPU reads its
//!   share, but the token waits for all of them).
//! - **Prefill FLOPs**: 2 per active parameter per new token (the output head for the last
//!   token only, as engines compute logits once), plus attention: 2 x heads x (qk dim + v dim)
//!   per (new token, context position) pair, causal, capped by a layer's window.

use crate::model::{Attention, LayerKind, ModelFacts, dtype_bytes};
use crate::params::{self, Params};
use crate::quant::WeightClass;

/// How a model is spread over GPUs, and what its KV cache is stored in.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    pub tp: u32,
    pub pp: u32,
    pub dp: u32,
    /// Data-parallel attention (SGLang `--enable-dp-attention`).
    pub dp_attention: bool,
    /// The KV cache's element type (`auto`/None: the model's dtype; one of
    /// [`KV_CACHE_DTYPES`]).
    pub kv_cache_dtype: Option<String>,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            tp: 1,
            pp: 1,
            dp: 1,
            dp_attention: false,
            kv_cache_dtype: None,
        }
    }
}

/// Most GPUs one replica of a model is spread over in any one dimension.
pub(crate) const MAX_PARALLEL: u32 = 4096;

/// KV cache element types SGLang (`--kv-cache-dtype`) and vLLM name, as [`kv_cache_bytes`]
/// reads them.
pub(crate) const KV_CACHE_DTYPES: &str = "auto, bf16, bfloat16, float16, fp16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, mxfp8, fp4_e2m1, fp4_mx_block16, nvfp4";

/// Bytes one KV cache element takes, scales included, for a dtype named as SGLang and vLLM
/// name it; None for `auto` (the model's dtype) and for a name it does not know
/// (see [`Layout::check`]).
/// - `fp8*`: one byte (a per-tensor scale, negligible).
/// - `mxfp8`: one byte and an 8-bit exponent scale per 32 values.
/// - `fp4_e2m1` (SGLang 0.5's name), `fp4_mx_block16`: two 4-bit values per byte and an
///   8-bit scale per 16 values (SGLang's `MHATokenToKVPoolFP4` and `MLATokenToKVPoolFP4`
///   keep a uint8 scale buffer of one per 16 elements): 0.5625 bytes.
/// - `nvfp4`: two 4-bit values per byte and an FP8 scale per 16: 0.5625 bytes.
pub fn kv_cache_bytes(name: &str) -> Option<f64> {
    let n = name.trim().to_ascii_lowercase();
    Some(match n.as_str() {
        "bf16" | "bfloat16" | "float16" | "fp16" | "half" => 2.0,
        "fp8" | "fp8_e4m3" | "fp8_e5m2" | "fp8_inc" => 1.0,
        "mxfp8" => 1.0 + 1.0 / 32.0,
        "fp4_e2m1" | "fp4_mx_block16" | "nvfp4" => 0.5 + 1.0 / 16.0,
        _ => return None,
    })
}

/// A layout that no engine runs the model with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LayoutError {
    #[error("{what} {got}: GPUs are counted from 1 to {MAX_PARALLEL}")]
    OutOfRange { what: &'static str, got: u32 },
    #[error(
        "tensor parallelism {attention_tp} over attention is more than the model's {heads} attention heads: every rank holds at least one"
    )]
    MoreRanksThanHeads { attention_tp: u32, heads: u64 },
    #[error(
        "pipeline parallelism {pp} is more than the model's {layers} layers: every stage holds at least one"
    )]
    MoreStagesThanLayers { pp: u32, layers: u64 },
    #[error("the KV cache dtype `{0}` is not known: one of {KV_CACHE_DTYPES}")]
    UnknownKvDtype(String),
}

impl Layout {
    /// GPUs one replica of the model spans.
    pub fn gpus(&self) -> u32 {
        self.tp.max(1) * self.pp.max(1)
    }

    /// Whether `model` can run under this layout, each figure in range.
    pub fn check(&self, model: &ModelFacts) -> Result<(), LayoutError> {
        for (what, got) in [("tp", self.tp), ("pp", self.pp), ("dp", self.dp)] {
            if got == 0 || got > MAX_PARALLEL {
                return Err(LayoutError::OutOfRange { what, got });
            }
        }
        let attention_tp = self.attention_tp() as u32;
        if u64::from(attention_tp) > model.num_attention_heads {
            return Err(LayoutError::MoreRanksThanHeads {
                attention_tp,
                heads: model.num_attention_heads,
            });
        }
        if u64::from(self.pp) > model.num_layers() {
            return Err(LayoutError::MoreStagesThanLayers {
                pp: self.pp,
                layers: model.num_layers(),
            });
        }
        match self.kv_cache_dtype.as_deref() {
            None | Some("auto") | Some("") => Ok(()),
            Some(d) if kv_cache_bytes(d).is_some() => Ok(()),
            Some(d) => Err(LayoutError::UnknownKvDtype(d.chars().take(40).collect())),
        }
    }

    fn attention_tp(&self) -> f64 {
        let tp = self.tp.max(1) as f64;
        if self.dp_attention {
            (tp / self.dp.max(1) as f64).max(1.0)
        } else {
            tp
        }
    }

    fn attention_groups(&self) -> f64 {
        if self.dp_attention {
            self.dp.max(1) as f64
        } else {
            1.0
        }
    }

    /// Bytes of one KV cache element (scales included).
    pub fn kv_bytes(&self, model: &ModelFacts) -> f64 {
        match self.kv_cache_dtype.as_deref() {
            None | Some("auto") | Some("") => model.dtype_bytes(),
            Some(d) => kv_cache_bytes(d)
                .or_else(|| dtype_bytes(d))
                .unwrap_or_else(|| model.dtype_bytes()),
        }
    }
}

/// KV cache bytes one token adds in one full-attention layer.
pub(crate) fn kv_bytes_per_token_per_layer(model: &ModelFacts, kv_bytes: f64) -> f64 {
    match model.attention {
        Attention::Gqa { kv_heads, head_dim } => 2.0 * kv_heads as f64 * head_dim as f64 * kv_bytes,
        Attention::Mla {
            kv_lora_rank,
            qk_rope_head_dim,
            ..
        } => (kv_lora_rank + qk_rope_head_dim) as f64 * kv_bytes,
    }
}

/// KV cache bytes per token of context over every attention layer, as if no window applied
/// (the figure model cards quote: Llama 3.1 8B in bf16, 131,072).
pub fn kv_bytes_per_token(model: &ModelFacts, kv_bytes: f64) -> f64 {
    let layers = model
        .layers
        .iter()
        .filter(|l| l.attention != LayerKind::Linear)
        .count() as f64;
    layers * kv_bytes_per_token_per_layer(model, kv_bytes)
}

/// KV cache bytes of one sequence of `context` tokens, windows applied.
pub fn kv_bytes_of_sequence(model: &ModelFacts, kv_bytes: f64, context: f64) -> f64 {
    let per_layer = kv_bytes_per_token_per_layer(model, kv_bytes);
    model
        .layers
        .iter()
        .map(|l| match l.attention {
            LayerKind::Full => context,
            LayerKind::Sliding { window } => context.min(window as f64),
            LayerKind::Linear => 0.0,
        })
        .sum::<f64>()
        * per_layer
}

/// How many of a sequence's context tokens each GPU reads per layer, relative to the whole
/// cache: a GQA cache is split over ranks up to one KV head each; an MLA latent is not split.
fn kv_share_per_gpu(model: &ModelFacts, layout: &Layout) -> f64 {
    let tp = layout.attention_tp();
    match model.attention {
        Attention::Gqa { kv_heads, .. } => 1.0 / tp.min(kv_heads.max(1) as f64),
        Attention::Mla { .. } => 1.0,
    }
}

/// Bytes of weights per GPU that a set of parameters takes, along one pipeline (every stage's
/// share: see the module's note on stages in series).
fn weight_bytes_per_gpu(model: &ModelFacts, layout: &Layout, p: &Params) -> f64 {
    let base = model.dtype_bytes();
    let tp = layout.tp.max(1) as f64;
    let attention_tp = layout.attention_tp();
    let split = params::attention_split(model);
    let layers = model.layers.len() as f64;
    // Whatever `p` counts of attention, it is every layer's (the attention of a step).
    let attention_share = if split.total() > 0.0 {
        p.attention / (split.total() * layers)
    } else {
        0.0
    };
    let kv_shards = match model.attention {
        Attention::Gqa { kv_heads, .. } => attention_tp.min(kv_heads.max(1) as f64),
        Attention::Mla { .. } => attention_tp,
    };
    WeightClass::ALL
        .iter()
        .map(|&c| {
            let bytes = match &model.quantization {
                Some(q) => q.bytes_per_param(c, base),
                None => base,
            };
            let per_gpu = match c {
                WeightClass::Attention => {
                    layers
                        * attention_share
                        * (split.sharded / attention_tp + split.kv / kv_shards + split.replicated)
                }
                // The router is a replicated linear layer: whole on every rank.
                WeightClass::Router => p.get(c),
                _ => p.get(c) / tp,
            };
            per_gpu * bytes
        })
        .sum::<f64>()
}

/// All the model's weights on one GPU, bytes (the checkpoint's share each rank holds; a
/// stage's, under pipeline parallelism).
pub fn weights_per_gpu(model: &ModelFacts, layout: &Layout) -> f64 {
    weight_bytes_per_gpu(model, layout, &params::total(model)) / layout.pp.max(1) as f64
}

/// What one decode step reads on one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeStep {
    /// Tokens the step puts through the weights (sequences x tokens each).
    pub tokens: f64,
    /// Weight bytes per GPU.
    pub weight_bytes: f64,
    /// KV cache bytes per GPU at the step's context.
    pub kv_bytes: f64,
    /// KV bytes per GPU that one more token of context adds to every sequence of the batch:
    /// the slope a context sweep measures.
    pub kv_bytes_per_context_token: f64,
}

impl DecodeStep {
    /// Bytes per GPU the step must move.
    pub fn bytes(&self) -> f64 {
        self.weight_bytes + self.kv_bytes
    }
}

/// A decode step of `batch` sequences at a mean `context` tokens each, `tokens_per_seq`
/// through the weights per sequence (1 without speculative decoding; the verify width with it).
pub fn decode_step(
    model: &ModelFacts,
    layout: &Layout,
    batch: f64,
    context: f64,
    tokens_per_seq: f64,
) -> DecodeStep {
    let batch = batch.max(1.0);
    let tokens = batch * tokens_per_seq.max(1.0);
    let read = params::count(model, |moe| {
        let (e, k) = (moe.experts as f64, moe.experts_per_token as f64);
        if tokens <= 1.0 {
            k
        } else {
            e * (1.0 - (1.0 - k / e).powf(tokens))
        }
    });
    let read = Params {
        embedding: 0.0,
        ..read
    };
    let kv_bytes = layout.kv_bytes(model);
    let seqs_per_group = batch / layout.attention_groups();
    let share = kv_share_per_gpu(model, layout);
    // Layers whose cache still grows at this context: full ones, and sliding ones below
    // their window.
    let growing = model
        .layers
        .iter()
        .filter(|l| match l.attention {
            LayerKind::Full => true,
            LayerKind::Sliding { window } => context < window as f64,
            LayerKind::Linear => false,
        })
        .count() as f64;
    DecodeStep {
        tokens,
        weight_bytes: weight_bytes_per_gpu(model, layout, &read),
        kv_bytes: kv_bytes_of_sequence(model, kv_bytes, context) * seqs_per_group * share,
        kv_bytes_per_context_token: growing
            * kv_bytes_per_token_per_layer(model, kv_bytes)
            * seqs_per_group
            * share,
    }
}

/// The FLOPs of one sequence's prefill, per GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillWork {
    /// Matrix multiplies through the weights.
    pub linear_flops: f64,
    /// Attention scores and their weighted sum.
    pub attention_flops: f64,
}

impl PrefillWork {
    pub fn flops(&self) -> f64 {
        self.linear_flops + self.attention_flops
    }
}

/// Prefill of `new` tokens after `cached` tokens already in the cache.
pub fn prefill(model: &ModelFacts, layout: &Layout, new: f64, cached: f64) -> PrefillWork {
    let active = params::active_per_token(model);
    let head = active.lm_head;
    let through = active.total() - head;
    let linear = 2.0 * through * new + 2.0 * head;
    let (qk, v) = match model.attention {
        Attention::Gqa { head_dim, .. } => (head_dim as f64, head_dim as f64),
        Attention::Mla {
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
            ..
        } => (
            (qk_nope_head_dim + qk_rope_head_dim) as f64,
            v_head_dim as f64,
        ),
    };
    let per_pair = 2.0 * model.num_attention_heads as f64 * (qk + v);
    let pairs: f64 = model
        .layers
        .iter()
        .map(|l| match l.attention {
            LayerKind::Full => causal_pairs(new, cached, f64::INFINITY),
            LayerKind::Sliding { window } => causal_pairs(new, cached, window as f64),
            LayerKind::Linear => 0.0,
        })
        .sum();
    let gpus = layout.tp.max(1) as f64 * layout.pp.max(1) as f64;
    let attention_gpus = layout.attention_tp() * layout.pp.max(1) as f64;
    PrefillWork {
        linear_flops: linear / gpus,
        attention_flops: pairs * per_pair / attention_gpus,
    }
}

/// (query, key) pairs of a causal prefill of `new` tokens after `cached`, each query seeing at
/// most `window` positions (itself included): the sum over positions p = cached+1 ..=
/// cached+new of min(p, window).
fn causal_pairs(new: f64, cached: f64, window: f64) -> f64 {
    if new <= 0.0 {
        return 0.0;
    }
    let (first, last) = (cached + 1.0, cached + new);
    let sum = |a: f64, b: f64| {
        if b < a {
            0.0
        } else {
            (a + b) * (b - a + 1.0) / 2.0
        }
    };
    if last <= window {
        sum(first, last)
    } else if first > window {
        new * window
    } else {
        sum(first, window.floor()) + (last - window.floor()) * window
    }
}

#[cfg(test)]
mod tests {
    use super::causal_pairs;

    #[test]
    fn causal_pairs_sum_positions_capped_by_the_window() {
        let brute = |new: u32, cached: u32, w: f64| -> f64 {
            (cached + 1..=cached + new).map(|p| (p as f64).min(w)).sum()
        };
        for (n, c, w) in [
            (1, 0, 4.0),
            (10, 0, 4.0),
            (10, 3, 4.0),
            (10, 20, 4.0),
            (7, 2, f64::INFINITY),
            (128, 100, 64.0),
        ] {
            assert_eq!(
                causal_pairs(n as f64, c as f64, w),
                brute(n, c, w),
                "{n} {c} {w}"
            );
        }
    }
}
