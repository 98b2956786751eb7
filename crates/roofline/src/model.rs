//! A model's shape, as a Hugging Face `config.json` describes it: what a step has to read and
//! compute. Reads the families servebench meets (Llama, Qwen, Mistral, Mixtral, Gemma,
//! DeepSeek V2/V3 and Kimi K2, gpt-oss and any config in their layout); a multimodal config's
//! `text_config` is the language model. What the config does not say is listed in
//! [`ModelFacts::unknown`] with what was assumed, never filled in silently.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::facts_error::whole;
use crate::quant::Quantization;

pub use crate::facts_error::FactsError;

/// A model's architecture: enough to count the bytes and FLOPs of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelFacts {
    /// The config's `model_type` (e.g. `llama`, `deepseek_v3`), when given.
    #[serde(default)]
    pub model_type: Option<String>,
    pub hidden_size: u64,
    pub num_attention_heads: u64,
    pub vocab_size: u64,
    /// Whether the output head shares the input embedding's weights (read once per step either way).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Intermediate size of a dense (non-expert) MLP; None when no layer is dense.
    #[serde(default)]
    pub intermediate_size: Option<u64>,
    pub attention: Attention,
    /// Mixture-of-experts shape; None for a dense model.
    #[serde(default)]
    pub moe: Option<Moe>,
    /// Every decoder layer in order: its attention and whether its MLP is a MoE block.
    pub layers: Vec<Layer>,
    /// The checkpoint's element type (`bfloat16`, `float16`, `float32`, `float8_e4m3fn`).
    pub dtype: String,
    /// How the checkpoint's weights are quantized, when they are.
    #[serde(default)]
    pub quantization: Option<Quantization>,
    /// Longest context the model was built for, tokens.
    #[serde(default)]
    pub max_position_embeddings: Option<u64>,
    /// What the config did not say, each with what was assumed instead.
    #[serde(default)]
    pub unknown: Vec<String>,
}

/// How a layer attends, which sets what its KV cache holds per token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum Attention {
    /// Multi-head or grouped-query attention: a key and a value of `head_dim` per KV head.
    Gqa { kv_heads: u64, head_dim: u64 },
    /// Multi-head latent attention (DeepSeek V2/V3, Kimi K2): one compressed latent of
    /// `kv_lora_rank` plus a shared rotary key of `qk_rope_head_dim` per token and layer.
    Mla {
        #[serde(default)]
        q_lora_rank: Option<u64>,
        kv_lora_rank: u64,
        qk_nope_head_dim: u64,
        qk_rope_head_dim: u64,
        v_head_dim: u64,
    },
}

/// The mixture-of-experts shape of the MoE layers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub experts: u64,
    /// Routed experts each token goes through.
    pub experts_per_token: u64,
    /// Intermediate size of one routed expert.
    pub expert_intermediate_size: u64,
    /// Intermediate size of the always-on shared experts together (0: none).
    #[serde(default)]
    pub shared_intermediate_size: u64,
}

/// One decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    pub attention: LayerKind,
    /// Whether its MLP is a mixture of experts.
    pub moe: bool,
}

/// What a layer's attention keeps per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum LayerKind {
    /// Attends over the whole context: its KV cache grows with every token.
    Full,
    /// Attends over the last `window` tokens: its KV cache stops growing there.
    Sliding { window: u64 },
    /// A linear-attention or state-space layer: a fixed-size state, no KV per token. Its state
    /// is not counted (the config does not give its size in one layout).
    Linear,
}

/// The largest value each field may hold: generous bounds over every published model (the
/// largest have under 200 layers, a hidden size under 32k, 512 experts, a vocabulary under
/// 300k), so that what is past them is a typo or hostile input, refused before anything is
/// sized by it.
pub mod limits {
    pub const LAYERS: u64 = 1024;
    pub(crate) const HIDDEN: u64 = 1 << 17;
    pub(crate) const HEADS: u64 = 1024;
    pub(crate) const HEAD_DIM: u64 = 4096;
    pub(crate) const VOCAB: u64 = 1 << 22;
    pub(crate) const INTERMEDIATE: u64 = 1 << 20;
    pub(crate) const EXPERTS: u64 = 1 << 14;
    pub(crate) const LORA_RANK: u64 = 1 << 16;
    /// Context lengths and windows, tokens.
    pub(crate) const CONTEXT: u64 = 1 << 32;
}

/// Element types a config's `torch_dtype` may name, as [`dtype_bytes`] reads them.
pub(crate) const WEIGHT_DTYPES: &str =
    "bfloat16, float16, float32, float8_e4m3fn, float8_e5m2 (or bf16, fp16, half, fp32, fp8)";

impl ModelFacts {
    /// Reads a Hugging Face `config.json` (parsed). A multimodal config's `text_config` is the
    /// language model; its `quantization_config` may sit at the top. Every field is checked
    /// against [`limits`] and against the others (KV heads dividing the heads, experts per
    /// token within the experts, `layer_types` one per layer): what no model has is an error
    /// naming the field, never a number computed from it.
    pub fn from_hf_config(config: &Value) -> Result<ModelFacts, FactsError> {
        let top = config.as_object().ok_or(FactsError::NotAnObject)?;
        let (c, prefix) = match top.get("text_config") {
            Some(Value::Object(t)) if t.contains_key("hidden_size") => (t, "text_config."),
            _ => (top, ""),
        };
        let cfg = Cfg {
            text: c,
            top,
            prefix,
        };
        let mut unknown = Vec::new();

        let model_type = cfg
            .get("model_type")
            .and_then(Value::as_str)
            .map(str::to_string);
        let family = model_type.as_deref().unwrap_or("");
        let need = |k: &'static str, max: u64| cfg.whole(k, 1, max)?.ok_or(FactsError::Missing(k));
        let hidden_size = need("hidden_size", limits::HIDDEN)?;
        let num_layers = need("num_hidden_layers", limits::LAYERS)?;
        let num_attention_heads = need("num_attention_heads", limits::HEADS)?;
        let vocab_size = need("vocab_size", limits::VOCAB)?;

        let attention = attention_shape(&cfg, hidden_size, num_attention_heads, &mut unknown)?;

        let moe = moe_shape(&cfg, family)?;
        let moe_layer = moe_layers(&cfg, num_layers, moe.is_some())?;
        let attention_kinds = layer_kinds(&cfg, family, num_layers, &mut unknown)?;
        let layers = attention_kinds
            .into_iter()
            .zip(moe_layer)
            .map(|(attention, moe)| Layer { attention, moe })
            .collect::<Vec<_>>();
        let any_dense = layers.iter().any(|l| !l.moe);
        if let Some(moe) = &moe
            && (any_dense || moe.shared_intermediate_size > 0)
            && cfg.get("moe_intermediate_size").is_none()
        {
            // gpt-oss and Mixtral name the expert's size `intermediate_size` and have no
            // dense MLP; a model with dense layers or shared experts has its own.
            return Err(FactsError::Invalid {
                field: format!("{prefix}moe_intermediate_size"),
                value: "not given".into(),
                why: "the model has dense layers or shared experts, whose size `intermediate_size` is; give the routed expert's size".into(),
            });
        }
        let intermediate_size = if any_dense {
            match cfg.whole("intermediate_size", 1, limits::INTERMEDIATE)? {
                Some(n) => Some(n),
                None => {
                    unknown.push("intermediate_size: not given, dense MLPs not counted".into());
                    None
                }
            }
        } else {
            None
        };

        let dtype = weight_dtype(&cfg, &mut unknown)?;
        let quantization = match top.get("quantization_config") {
            Some(q) if !q.is_null() => Some(("quantization_config".to_string(), q)),
            _ => c
                .get("quantization_config")
                .filter(|q| !q.is_null())
                .map(|q| (format!("{prefix}quantization_config"), q)),
        }
        .map(|(at, q)| Quantization::from_hf(q, &at, &mut unknown))
        .transpose()?;

        let tie_word_embeddings = match cfg.get("tie_word_embeddings") {
            None => false,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| cfg.invalid("tie_word_embeddings", "true or false"))?,
        };
        Ok(ModelFacts {
            model_type,
            hidden_size,
            num_attention_heads,
            vocab_size,
            tie_word_embeddings,
            intermediate_size,
            attention,
            moe,
            layers,
            dtype,
            quantization,
            max_position_embeddings: cfg.whole("max_position_embeddings", 1, limits::CONTEXT)?,
            unknown,
        })
    }

    /// Decoder layers.
    pub(crate) fn num_layers(&self) -> u64 {
        self.layers.len() as u64
    }

    /// Bytes of one element of the dtype the weights are served in.
    pub fn dtype_bytes(&self) -> f64 {
        dtype_bytes(&self.dtype).unwrap_or(2.0)
    }
}

/// Bytes of one element of a weight dtype named as configs and engines name it (`bfloat16`,
/// `bf16`, `float16`, `half`, `float32`, `float8_e4m3fn`, `fp8`, a `torch.` prefix allowed);
/// None for a name it does not know.
pub fn dtype_bytes(name: &str) -> Option<f64> {
    let n = name.trim().to_ascii_lowercase();
    let n = n.strip_prefix("torch.").unwrap_or(&n);
    Some(match n {
        "bfloat16" | "bf16" | "float16" | "fp16" | "half" => 2.0,
        "float32" | "fp32" | "float" => 4.0,
        "float8_e4m3fn" | "float8_e4m3fnuz" | "float8_e5m2" | "float8_e5m2fnuz" | "fp8"
        | "fp8_e4m3" | "fp8_e5m2" => 1.0,
        _ => return None,
    })
}

/// A config's keys: the language model's (`text_config` when there is one), then the top's.
struct Cfg<'a> {
    text: &'a serde_json::Map<String, Value>,
    top: &'a serde_json::Map<String, Value>,
    /// `text_config.` when the language model's keys are there.
    prefix: &'static str,
}

impl<'a> Cfg<'a> {
    /// The key's value; a `null` is no value.
    fn get(&self, k: &str) -> Option<&'a Value> {
        self.text
            .get(k)
            .or_else(|| self.top.get(k))
            .filter(|v| !v.is_null())
    }

    /// Where the key was found, for its error.
    fn path(&self, k: &str) -> String {
        if self.text.contains_key(k) {
            format!("{}{k}", self.prefix)
        } else {
            k.to_string()
        }
    }

    fn invalid(&self, k: &str, why: impl Into<String>) -> FactsError {
        let value = self.text.get(k).or_else(|| self.top.get(k));
        FactsError::invalid(&self.path(k), value.unwrap_or(&Value::Null), why)
    }

    /// A whole number from `min` to `max`; None when absent or null, an error naming the key
    /// when it is anything else.
    fn whole(&self, k: &str, min: u64, max: u64) -> Result<Option<u64>, FactsError> {
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        whole(v, min, max)
            .map(Some)
            .ok_or_else(|| self.invalid(k, format!("a whole number from {min} to {max} is needed")))
    }
}

/// The attention's shape: MLA where `kv_lora_rank` is given, else grouped-query attention
/// (KV heads dividing the heads; a head's dimensions given or hidden_size over the heads).
fn attention_shape(
    cfg: &Cfg,
    hidden_size: u64,
    num_attention_heads: u64,
    unknown: &mut Vec<String>,
) -> Result<Attention, FactsError> {
    let need = |k: &'static str, max: u64| cfg.whole(k, 1, max)?.ok_or(FactsError::Missing(k));
    Ok(match cfg.whole("kv_lora_rank", 1, limits::LORA_RANK)? {
        Some(kv_lora_rank) => Attention::Mla {
            q_lora_rank: cfg.whole("q_lora_rank", 1, limits::LORA_RANK)?,
            kv_lora_rank,
            qk_nope_head_dim: cfg
                .whole("qk_nope_head_dim", 0, limits::HEAD_DIM)?
                .ok_or(FactsError::Missing("qk_nope_head_dim"))?,
            qk_rope_head_dim: cfg
                .whole("qk_rope_head_dim", 0, limits::HEAD_DIM)?
                .ok_or(FactsError::Missing("qk_rope_head_dim"))?,
            v_head_dim: need("v_head_dim", limits::HEAD_DIM)?,
        },
        None => {
            let kv_heads = match cfg.whole("num_key_value_heads", 1, num_attention_heads)? {
                Some(n) => n,
                None => {
                    unknown.push(format!(
                        "num_key_value_heads: not given, taken as num_attention_heads ({num_attention_heads}, plain multi-head attention)"
                    ));
                    num_attention_heads
                }
            };
            if !num_attention_heads.is_multiple_of(kv_heads) {
                return Err(cfg.invalid(
                    "num_key_value_heads",
                    format!(
                        "each KV head serves a whole group of query heads: it must divide num_attention_heads ({num_attention_heads})"
                    ),
                ));
            }
            let head_dim = match cfg.whole("head_dim", 1, limits::HEAD_DIM)? {
                Some(d) => d,
                None if hidden_size >= num_attention_heads => hidden_size / num_attention_heads,
                None => {
                    return Err(cfg.invalid(
                        "hidden_size",
                        format!(
                            "smaller than num_attention_heads ({num_attention_heads}), so a head would have no dimensions; give head_dim"
                        ),
                    ));
                }
            };
            Attention::Gqa { kv_heads, head_dim }
        }
    })
}

/// The element type the weights are served in: `torch_dtype` (or `dtype`), bfloat16 when
/// not given; a float32 checkpoint is served in 16 bits.
fn weight_dtype(cfg: &Cfg, unknown: &mut Vec<String>) -> Result<String, FactsError> {
    Ok(match cfg.get("torch_dtype").or_else(|| cfg.get("dtype")) {
        None => {
            unknown.push("torch_dtype: not given, weights taken as bfloat16".into());
            "bfloat16".to_string()
        }
        Some(v) => {
            let key = if cfg.get("torch_dtype").is_some() {
                "torch_dtype"
            } else {
                "dtype"
            };
            let name = v
                .as_str()
                .filter(|n| dtype_bytes(n).is_some())
                .ok_or_else(|| {
                    cfg.invalid(
                        key,
                        format!("not an element type servebench knows: one of {WEIGHT_DTYPES}"),
                    )
                })?;
            if dtype_bytes(name) == Some(4.0) {
                // SGLang and vLLM at `--dtype auto` cast a float32 checkpoint to 16 bits.
                unknown.push(format!(
                    "{key}: {name}: engines serve a float32 checkpoint in 16-bit (`--dtype auto` casts it to float16 or bfloat16), so its weights are counted at 2 bytes"
                ));
                "bfloat16".to_string()
            } else {
                name.to_string()
            }
        }
    })
}

/// The routed-expert shape, from whichever names the family uses.
fn moe_shape(cfg: &Cfg, family: &str) -> Result<Option<Moe>, FactsError> {
    let mut experts = None;
    for k in ["n_routed_experts", "num_local_experts", "num_experts"] {
        if let Some(n) = cfg.whole(k, 0, limits::EXPERTS)? {
            experts = Some((k, n));
            break;
        }
    }
    // One expert (or none) is a dense MLP.
    let Some((_, experts)) = experts.filter(|(_, n)| *n > 1) else {
        return Ok(None);
    };
    let per_token_key = if cfg.get("num_experts_per_tok").is_some() {
        "num_experts_per_tok"
    } else {
        "experts_per_token"
    };
    let experts_per_token = cfg
        .whole(per_token_key, 1, experts)
        .map_err(|_| {
            cfg.invalid(
                per_token_key,
                format!("a token goes through 1 to {experts} of the model's {experts} experts"),
            )
        })?
        .ok_or(FactsError::Missing("num_experts_per_tok"))?;
    let expert_intermediate_size = match cfg.whole(
        "moe_intermediate_size",
        1,
        limits::INTERMEDIATE,
    )? {
        Some(n) => n,
        None if cfg.text.contains_key("moe_intermediate_size") => {
            return Err(cfg.invalid(
                "moe_intermediate_size",
                "a MoE model's routed experts need their size (`intermediate_size` is a dense MLP's)",
            ));
        }
        None => cfg
            .whole("intermediate_size", 1, limits::INTERMEDIATE)?
            .ok_or(FactsError::Missing("moe_intermediate_size"))?,
    };
    // DeepSeek: n_shared_experts of the expert's size; Qwen2-MoE: one of its own size.
    let shared_intermediate_size =
        match cfg.whole("shared_expert_intermediate_size", 0, limits::INTERMEDIATE)? {
            Some(n) => n,
            None if family != "qwen3_moe" => {
                cfg.whole("n_shared_experts", 0, 64)?.unwrap_or(0) * expert_intermediate_size
            }
            None => 0,
        };
    Ok(Some(Moe {
        experts,
        experts_per_token,
        expert_intermediate_size,
        shared_intermediate_size,
    }))
}

/// Which layers are MoE blocks: DeepSeek's `first_k_dense_replace` and `moe_layer_freq`,
/// Qwen-MoE's `decoder_sparse_step` and `mlp_only_layers`, otherwise all of them.
fn moe_layers(cfg: &Cfg, layers: u64, is_moe: bool) -> Result<Vec<bool>, FactsError> {
    if !is_moe {
        return Ok(vec![false; layers as usize]);
    }
    let first_dense = cfg.whole("first_k_dense_replace", 0, layers)?.unwrap_or(0);
    let sparse_step = cfg.whole("decoder_sparse_step", 1, layers)?;
    let freq = match sparse_step {
        Some(s) => s,
        None => cfg.whole("moe_layer_freq", 1, layers)?.unwrap_or(1),
    };
    let dense_only: Vec<u64> = match cfg.get("mlp_only_layers") {
        None => Vec::new(),
        Some(v) => v
            .as_array()
            .filter(|a| a.len() as u64 <= layers)
            .and_then(|a| {
                a.iter()
                    .map(|i| whole(i, 0, layers - 1))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| {
                cfg.invalid(
                    "mlp_only_layers",
                    format!("a list of layer numbers from 0 to {}", layers - 1),
                )
            })?,
    };
    Ok((0..layers)
        .map(|i| {
            // Qwen-MoE counts its sparse step from 1 ((i + 1) % step == 0); DeepSeek from
            // first_k_dense_replace (i % freq == 0). Both are every layer at 1.
            let on_step = if sparse_step.is_some() {
                (i + 1) % freq == 0
            } else {
                i % freq == 0
            };
            i >= first_dense && on_step && !dense_only.contains(&i)
        })
        .collect())
}

/// Each layer's attention: `layer_types` where given (one per layer), otherwise the family's
/// sliding-window rule (Gemma 2 alternates, Gemma 3 has a global layer every
/// `sliding_window_pattern`, Qwen 2 slides from `max_window_layers` when
/// `use_sliding_window`, Mistral slides everywhere), otherwise full attention.
fn layer_kinds(
    cfg: &Cfg,
    family: &str,
    layers: u64,
    unknown: &mut Vec<String>,
) -> Result<Vec<LayerKind>, FactsError> {
    let window = cfg
        .whole("sliding_window", 0, limits::CONTEXT)?
        .filter(|&w| w > 0);
    if let Some(types) = cfg.get("layer_types") {
        let types = types
            .as_array()
            .filter(|t| t.len() as u64 == layers)
            .ok_or_else(|| {
                cfg.invalid(
                    "layer_types",
                    format!("one entry per layer is needed (num_hidden_layers: {layers})"),
                )
            })?;
        let mut kinds = Vec::with_capacity(types.len());
        for t in types {
            kinds.push(match t.as_str() {
                Some("sliding_attention" | "chunked_attention") => match window {
                    Some(window) => LayerKind::Sliding { window },
                    None => {
                        return Err(cfg.invalid(
                            "sliding_window",
                            "`layer_types` has sliding layers, so their window is needed",
                        ));
                    }
                },
                Some("linear_attention" | "mamba" | "mamba2" | "conv" | "linear") => {
                    LayerKind::Linear
                }
                Some("full_attention" | "attention") => LayerKind::Full,
                Some(other) => {
                    let other: String = other.chars().take(40).collect();
                    unknown.push(format!(
                        "layer type {other:?}: not known, counted as full attention"
                    ));
                    LayerKind::Full
                }
                None => {
                    return Err(cfg.invalid("layer_types", "a list of layer type names"));
                }
            });
        }
        return Ok(kinds);
    }
    let Some(window) = window else {
        return Ok(vec![LayerKind::Full; layers as usize]);
    };
    if cfg.get("use_sliding_window").and_then(Value::as_bool) == Some(false) {
        return Ok(vec![LayerKind::Full; layers as usize]);
    }
    let sliding = LayerKind::Sliding { window };
    let pattern = match cfg.whole("sliding_window_pattern", 0, layers)? {
        Some(p) => Some(p),
        None => (family == "gemma2").then_some(2),
    };
    let full_below = cfg.whole("max_window_layers", 0, limits::CONTEXT)?;
    Ok((0..layers)
        .map(|i| match pattern {
            // Every `pattern`-th layer attends globally.
            Some(p) if p > 0 => {
                if (i + 1) % p == 0 {
                    LayerKind::Full
                } else {
                    sliding
                }
            }
            _ => match full_below {
                Some(full_below) if family.starts_with("qwen") => {
                    if i < full_below {
                        LayerKind::Full
                    } else {
                        sliding
                    }
                }
                _ => sliding,
            },
        })
        .collect())
}
