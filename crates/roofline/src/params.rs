//! Parameters by kind of weight: the whole model, and what one token goes through.
//!
//! Counts the matrices of each layer (attention projections, gated MLPs of three matrices,
//! routed and shared experts, the router) and the embedding and output head. Biases and norms
//! are left out: they are under 0.1% of any model this is for.

use crate::model::{Attention, ModelFacts};
use crate::quant::WeightClass;

/// Parameters of each [`WeightClass`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Params {
    pub attention: f64,
    pub dense_mlp: f64,
    pub router: f64,
    /// Every routed expert of every MoE layer.
    pub routed_experts: f64,
    pub shared_experts: f64,
    pub embedding: f64,
    pub lm_head: f64,
}

impl Params {
    pub fn get(&self, class: WeightClass) -> f64 {
        match class {
            WeightClass::Attention => self.attention,
            WeightClass::DenseMlp => self.dense_mlp,
            WeightClass::Router => self.router,
            WeightClass::RoutedExpert => self.routed_experts,
            WeightClass::SharedExpert => self.shared_experts,
            WeightClass::Embedding => self.embedding,
            WeightClass::LmHead => self.lm_head,
        }
    }

    pub fn total(&self) -> f64 {
        WeightClass::ALL.iter().map(|c| self.get(*c)).sum()
    }
}

/// Parameters of one layer's attention projections.
pub fn attention_per_layer(m: &ModelFacts) -> f64 {
    attention_split(m).total()
}

/// One layer's attention parameters by how tensor parallelism lays them out.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct AttentionSplit {
    /// Split over the attention ranks: q and o (GQA), q_b (or q), kv_b and o (MLA).
    pub sharded: f64,
    /// GQA's k and v: split over at most the KV heads (replicated past them).
    pub kv: f64,
    /// Whole on every rank: MLA's down-projections `q_a_proj` and `kv_a_proj_with_mqa`
    /// (replicated linear layers in SGLang's and vLLM's DeepSeek models).
    pub replicated: f64,
}

impl AttentionSplit {
    pub fn total(&self) -> f64 {
        self.sharded + self.kv + self.replicated
    }
}

/// One layer's attention parameters, split as the engines lay them out over ranks.
pub(crate) fn attention_split(m: &ModelFacts) -> AttentionSplit {
    let h = m.hidden_size as f64;
    let heads = m.num_attention_heads as f64;
    match m.attention {
        Attention::Gqa { kv_heads, head_dim } => {
            let (kv, d) = (kv_heads as f64, head_dim as f64);
            AttentionSplit {
                sharded: 2.0 * h * heads * d,
                kv: 2.0 * h * kv * d,
                replicated: 0.0,
            }
        }
        Attention::Mla {
            q_lora_rank,
            kv_lora_rank,
            qk_nope_head_dim,
            qk_rope_head_dim,
            v_head_dim,
        } => {
            let qk = (qk_nope_head_dim + qk_rope_head_dim) as f64;
            let (q_a, q_b) = match q_lora_rank {
                Some(r) => (h * r as f64, r as f64 * heads * qk),
                None => (0.0, h * heads * qk),
            };
            let kv_a = h * (kv_lora_rank + qk_rope_head_dim) as f64;
            let kv_b = kv_lora_rank as f64 * heads * (qk_nope_head_dim + v_head_dim) as f64;
            let o = heads * v_head_dim as f64 * h;
            AttentionSplit {
                sharded: q_b + kv_b + o,
                kv: 0.0,
                replicated: q_a + kv_a,
            }
        }
    }
}

/// Every parameter of the model, by kind.
pub fn total(m: &ModelFacts) -> Params {
    let mut p = count(m, |moe| moe.experts as f64);
    if m.tie_word_embeddings {
        // One matrix serves both: counted once, as the embedding.
        p.lm_head = 0.0;
    }
    p
}

/// The parameters one token goes through (its routed experts only); the input embedding is
/// left out (one row of it is read), the output head is in.
pub fn active_per_token(m: &ModelFacts) -> Params {
    let mut p = count(m, |moe| moe.experts_per_token as f64);
    p.embedding = 0.0;
    p
}

/// Parameters with `experts(moe)` routed experts counted per MoE layer.
pub(crate) fn count(m: &ModelFacts, experts: impl Fn(&crate::model::Moe) -> f64) -> Params {
    let h = m.hidden_size as f64;
    let layers = m.layers.len() as f64;
    let moe_layers = m.layers.iter().filter(|l| l.moe).count() as f64;
    let dense_layers = layers - moe_layers;
    let vocab_hidden = m.vocab_size as f64 * h;
    let mut p = Params {
        attention: attention_per_layer(m) * layers,
        dense_mlp: m
            .intermediate_size
            .map_or(0.0, |i| 3.0 * h * i as f64 * dense_layers),
        embedding: vocab_hidden,
        // A tied head is the embedding's weights, still read in full every step.
        lm_head: vocab_hidden,
        ..Params::default()
    };
    if let Some(moe) = &m.moe {
        p.router = h * moe.experts as f64 * moe_layers;
        p.routed_experts =
            experts(moe) * 3.0 * h * moe.expert_intermediate_size as f64 * moe_layers;
        p.shared_experts = 3.0 * h * moe.shared_intermediate_size as f64 * moe_layers;
    }
    p
}
