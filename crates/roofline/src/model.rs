//! A model's shape, as a Hugging Face `config.json` describes it: what a step has to read and
//! compute. Reads the families servebench meets (Llama, Qwen, Mistral, Mixtral, Gemma,
//! DeepSeek V2/V3 and Kimi K2, gpt-oss and any config in their layout); a multimodal config's
//! `text_config` is the language model. What the config does not say is listed in
//! [`ModelFacts::unknown`] with what was assumed, never filled in silently.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::quant::Quantization;

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

/// Why a config could not be read as a model.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FactsError {
    #[error(
        "the config has no `{0}` (a whole number); give it, or the model's facts in `model_facts:`"
    )]
    Missing(&'static str),
    #[error("the config's `{field}` is {value}: {why}")]
    Invalid {
        field: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("the config is not a JSON object")]
    NotAnObject,
}

impl ModelFacts {
    /// Reads a Hugging Face `config.json` (parsed). A multimodal config's `text_config` is the
    /// language model; its `quantization_config` may sit at the top.
    pub fn from_hf_config(config: &Value) -> Result<ModelFacts, FactsError> {
        let top = config.as_object().ok_or(FactsError::NotAnObject)?;
        let c = match top.get("text_config") {
            Some(Value::Object(t)) if t.contains_key("hidden_size") => t,
            _ => top,
        };
        let cfg = Cfg { text: c, top };
        let get = |k: &str| cfg.get(k);
        let int = |k: &str| cfg.int(k);
        let need = |k: &'static str| int(k).ok_or(FactsError::Missing(k));
        let mut unknown = Vec::new();

        let model_type = get("model_type")
            .and_then(Value::as_str)
            .map(str::to_string);
        let family = model_type.as_deref().unwrap_or("");
        let hidden_size = need("hidden_size")?;
        let num_layers = need("num_hidden_layers")?;
        let num_attention_heads = need("num_attention_heads")?;
        let vocab_size = need("vocab_size")?;
        if num_layers == 0 || num_attention_heads == 0 || hidden_size == 0 {
            return Err(FactsError::Invalid {
                field: "num_hidden_layers",
                value: format!(
                    "{num_layers} layers, {num_attention_heads} heads, hidden {hidden_size}"
                ),
                why: "a model has at least one layer, one head and a hidden size",
            });
        }

        let attention = match int("kv_lora_rank") {
            Some(kv_lora_rank) => Attention::Mla {
                q_lora_rank: int("q_lora_rank"),
                kv_lora_rank,
                qk_nope_head_dim: need("qk_nope_head_dim")?,
                qk_rope_head_dim: need("qk_rope_head_dim")?,
                v_head_dim: need("v_head_dim")?,
            },
            None => {
                let kv_heads = int("num_key_value_heads").unwrap_or_else(|| {
                    unknown.push(format!(
                        "num_key_value_heads: not given, taken as num_attention_heads ({num_attention_heads}, plain multi-head attention)"
                    ));
                    num_attention_heads
                });
                let head_dim = int("head_dim").unwrap_or(hidden_size / num_attention_heads);
                Attention::Gqa { kv_heads, head_dim }
            }
        };

        let moe = moe_shape(&cfg, family);
        let moe_layer = moe_layers(&cfg, num_layers, moe.is_some());
        let attention_kinds = layer_kinds(&cfg, family, num_layers, &mut unknown);
        let layers = attention_kinds
            .into_iter()
            .zip(moe_layer)
            .map(|(attention, moe)| Layer { attention, moe })
            .collect::<Vec<_>>();
        let any_dense = layers.iter().any(|l| !l.moe);
        // gpt-oss and Mixtral name the expert size `intermediate_size` and have no dense MLP.
        let intermediate_size = if any_dense {
            match int("intermediate_size") {
                Some(n) => Some(n),
                None => {
                    unknown.push("intermediate_size: not given, dense MLPs not counted".into());
                    None
                }
            }
        } else {
            None
        };

        let dtype = match get("torch_dtype")
            .or_else(|| get("dtype"))
            .and_then(Value::as_str)
        {
            Some(d) => d.to_string(),
            None => {
                unknown.push("torch_dtype: not given, weights taken as bfloat16".into());
                "bfloat16".into()
            }
        };
        let quantization = top
            .get("quantization_config")
            .or_else(|| c.get("quantization_config"))
            .map(|q| Quantization::from_hf(q, &mut unknown));

        Ok(ModelFacts {
            model_type,
            hidden_size,
            num_attention_heads,
            vocab_size,
            tie_word_embeddings: get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            intermediate_size,
            attention,
            moe,
            layers,
            dtype,
            quantization,
            max_position_embeddings: int("max_position_embeddings"),
            unknown,
        })
    }

    /// Decoder layers.
    pub fn num_layers(&self) -> u64 {
        self.layers.len() as u64
    }

    /// Bytes of one element of the checkpoint's base dtype.
    pub fn dtype_bytes(&self) -> f64 {
        dtype_bytes(&self.dtype).unwrap_or(2.0)
    }
}

/// Bytes of one element of a dtype named as configs and servers name them (`bfloat16`,
/// `bf16`, `float16`, `half`, `float32`, `fp8_e4m3`, `float8_e5m2`, ...); None for a name it
/// does not know.
pub fn dtype_bytes(name: &str) -> Option<f64> {
    let n = name.to_ascii_lowercase();
    let n = n.trim_start_matches("torch.");
    Some(match n {
        "bfloat16" | "bf16" | "float16" | "fp16" | "half" => 2.0,
        "float32" | "fp32" | "float" => 4.0,
        _ if n.starts_with("float8") || n.starts_with("fp8") => 1.0,
        "int8" | "uint8" => 1.0,
        "fp4" | "nvfp4" | "mxfp4" | "float4_e2m1fn" => 0.5,
        _ => return None,
    })
}

/// A config's keys: the language model's (`text_config` when there is one), then the top's.
struct Cfg<'a> {
    text: &'a serde_json::Map<String, Value>,
    top: &'a serde_json::Map<String, Value>,
}

impl<'a> Cfg<'a> {
    fn get(&self, k: &str) -> Option<&'a Value> {
        self.text.get(k).or_else(|| self.top.get(k))
    }

    fn int(&self, k: &str) -> Option<u64> {
        self.get(k).and_then(Value::as_u64)
    }
}

/// The routed-expert shape, from whichever names the family uses.
fn moe_shape(cfg: &Cfg, family: &str) -> Option<Moe> {
    let int = |k: &str| cfg.int(k);
    let experts = int("n_routed_experts")
        .or_else(|| int("num_local_experts"))
        .or_else(|| int("num_experts"))
        .filter(|&n| n > 1)?;
    let experts_per_token = int("num_experts_per_tok").or_else(|| int("experts_per_token"))?;
    let expert_intermediate_size =
        int("moe_intermediate_size").or_else(|| int("intermediate_size"))?;
    // DeepSeek: n_shared_experts of the expert's size; Qwen2-MoE: one of its own size.
    let shared_intermediate_size = match int("shared_expert_intermediate_size") {
        Some(n) => n,
        None if family != "qwen3_moe" => {
            int("n_shared_experts").unwrap_or(0) * expert_intermediate_size
        }
        None => 0,
    };
    Some(Moe {
        experts,
        experts_per_token,
        expert_intermediate_size,
        shared_intermediate_size,
    })
}

/// Which layers are MoE blocks: DeepSeek's `first_k_dense_replace` and `moe_layer_freq`,
/// Qwen-MoE's `decoder_sparse_step` and `mlp_only_layers`, otherwise all of them.
fn moe_layers(cfg: &Cfg, layers: u64, is_moe: bool) -> Vec<bool> {
    let get = |k: &str| cfg.get(k);
    let int = |k: &str| cfg.int(k);
    if !is_moe {
        return vec![false; layers as usize];
    }
    let first_dense = int("first_k_dense_replace").unwrap_or(0);
    let freq = int("moe_layer_freq")
        .or_else(|| int("decoder_sparse_step"))
        .unwrap_or(1)
        .max(1);
    let dense_only: Vec<u64> = get("mlp_only_layers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    (0..layers)
        .map(|i| {
            // Qwen-MoE counts its sparse step from 1 ((i + 1) % step == 0); DeepSeek from
            // first_k_dense_replace (i % freq == 0). Both are every layer at 1.
            let on_step = if get("decoder_sparse_step").is_some() {
                (i + 1) % freq == 0
            } else {
                i % freq == 0
            };
            i >= first_dense && on_step && !dense_only.contains(&i)
        })
        .collect()
}

/// Each layer's attention: `layer_types` where given, otherwise the family's sliding-window
/// rule (Gemma 2 alternates, Gemma 3 has a global layer every `sliding_window_pattern`,
/// Qwen 2 slides from `max_window_layers` when `use_sliding_window`, Mistral slides
/// everywhere), otherwise full attention.
fn layer_kinds(cfg: &Cfg, family: &str, layers: u64, unknown: &mut Vec<String>) -> Vec<LayerKind> {
    let get = |k: &str| cfg.get(k);
    let window = get("sliding_window")
        .and_then(Value::as_u64)
        .filter(|&w| w > 0);
    if let Some(types) = get("layer_types").and_then(Value::as_array)
        && types.len() as u64 == layers
    {
        return types
            .iter()
            .map(|t| match t.as_str().unwrap_or("") {
                "sliding_attention" | "chunked_attention" => match window {
                    Some(window) => LayerKind::Sliding { window },
                    None => LayerKind::Full,
                },
                "linear_attention" | "mamba" | "mamba2" | "conv" | "linear" => LayerKind::Linear,
                "full_attention" | "attention" => LayerKind::Full,
                other => {
                    unknown.push(format!(
                        "layer type {other:?}: not known, counted as full attention"
                    ));
                    LayerKind::Full
                }
            })
            .collect();
    }
    let Some(window) = window else {
        return vec![LayerKind::Full; layers as usize];
    };
    if get("use_sliding_window").and_then(Value::as_bool) == Some(false) {
        return vec![LayerKind::Full; layers as usize];
    }
    let sliding = LayerKind::Sliding { window };
    let pattern = get("sliding_window_pattern")
        .and_then(Value::as_u64)
        .or((family == "gemma2").then_some(2));
    (0..layers)
        .map(|i| match pattern {
            // Every `pattern`-th layer attends globally.
            Some(p) if p > 0 => {
                if (i + 1) % p == 0 {
                    LayerKind::Full
                } else {
                    sliding
                }
            }
            _ => match get("max_window_layers").and_then(Value::as_u64) {
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
        .collect()
}
