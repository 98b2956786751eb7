//! How many bytes a weight takes: the checkpoint's `quantization_config` read for the bits per
//! weight (scales and zero points included) and for which modules it leaves in the base dtype.
//!
//! Modules are matched by the names Hugging Face checkpoints give them, one representative name
//! per [`WeightClass`] (`model.layers.1.self_attn.q_proj`, `model.layers.1.mlp.experts.0.up_proj`,
//! ...), against compressed-tensors' `ignore` (exact names or `re:` regexes, matched from the
//! start as Python's `re.match`) and `modules_to_not_convert` (names or `*` globs, matched as a
//! prefix or a part of the name). Embeddings and the router are never quantized by these
//! methods; the output head only when no list leaves it out and the method quantizes it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::facts_error::FactsError;

/// The kinds of weights a step reads, each with its own bytes per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WeightClass {
    Attention,
    DenseMlp,
    Router,
    RoutedExpert,
    SharedExpert,
    Embedding,
    LmHead,
}

impl WeightClass {
    pub const ALL: [WeightClass; 7] = [
        WeightClass::Attention,
        WeightClass::DenseMlp,
        WeightClass::Router,
        WeightClass::RoutedExpert,
        WeightClass::SharedExpert,
        WeightClass::Embedding,
        WeightClass::LmHead,
    ];

    /// Names a checkpoint gives a module of this class (any one ignored leaves the class
    /// unquantized).
    fn module_names(self) -> &'static [&'static str] {
        match self {
            WeightClass::Attention => &[
                "model.layers.1.self_attn.q_proj",
                "model.layers.1.self_attn.o_proj",
                "model.layers.1.self_attn.kv_a_proj_with_mqa",
            ],
            WeightClass::DenseMlp => &[
                "model.layers.0.mlp.gate_proj",
                "model.layers.0.mlp.down_proj",
            ],
            WeightClass::Router => &["model.layers.1.mlp.gate", "model.layers.1.mlp.router"],
            WeightClass::RoutedExpert => &[
                "model.layers.1.mlp.experts.0.gate_proj",
                "model.layers.1.mlp.experts.0.down_proj",
            ],
            WeightClass::SharedExpert => &[
                "model.layers.1.mlp.shared_experts.gate_proj",
                "model.layers.1.mlp.shared_expert.gate_proj",
            ],
            WeightClass::Embedding => &["model.embed_tokens"],
            WeightClass::LmHead => &["lm_head"],
        }
    }
}

/// A checkpoint's quantization, as it bears on bytes read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Quantization {
    /// `quant_method` as the config names it (`fp8`, `compressed-tensors`, `awq`, `gptq`, `mxfp4`, ...).
    pub method: String,
    /// Bits per quantized weight, its share of scales and zero points included; None when the
    /// method is not known (its weights are then counted in the base dtype, and said).
    pub bits_per_weight: Option<f64>,
    /// Module names or patterns left in the base dtype.
    #[serde(default)]
    pub not_converted: Vec<String>,
    /// Whether the output head is quantized when no pattern leaves it out.
    #[serde(default)]
    pub quantizes_lm_head: bool,
    /// Whether the matrix multiplies run in FP8 (weights and activations in 8-bit floats:
    /// `fp8`, `fbgemm_fp8`, compressed-tensors with float 8-bit weights), so a prefill's peak
    /// is the GPU's FP8 one.
    #[serde(default)]
    pub fp8_matmuls: bool,
}

/// Largest quantization group or block side, weights.
const MAX_GROUP: u64 = 1 << 20;

impl Quantization {
    /// Reads a `quantization_config` found at `at` (`quantization_config`); what it cannot read
    /// goes to `unknown`, what no checkpoint has (bits of -4 or 1e308, a group of 0) is an
    /// error naming the field.
    pub(crate) fn from_hf(
        q: &Value,
        at: &str,
        unknown: &mut Vec<String>,
    ) -> Result<Quantization, FactsError> {
        if !q.is_object() {
            return Err(FactsError::invalid(
                at,
                q,
                "a mapping (quant_method, bits, ...) is needed",
            ));
        }
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let method = s(q, "quant_method")
            .or_else(|| s(q, "quant_algo"))
            .unwrap_or_else(|| "unknown".into())
            .to_ascii_lowercase();
        let mut not_converted: Vec<String> =
            ["ignore", "modules_to_not_convert", "exclude_modules"]
                .iter()
                .filter_map(|k| q.get(*k).and_then(Value::as_array))
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
        let (bits, fp8_matmuls) = weight_bits(&method, q, at, unknown)?;
        if bits.is_none() {
            let shown: String = method.chars().take(40).collect();
            unknown.push(format!(
                "quantization method {shown:?}: its bits per weight are not known, weights counted in the base dtype"
            ));
        }
        if method == "compressed-tensors" && not_converted.is_empty() {
            not_converted.push("lm_head".into());
        }
        Ok(Quantization {
            method,
            bits_per_weight: bits,
            not_converted,
            quantizes_lm_head: false,
            fp8_matmuls,
        })
    }

    /// Bytes per parameter of `class`, `base_bytes` for what stays in the base dtype.
    pub(crate) fn bytes_per_param(&self, class: WeightClass, base_bytes: f64) -> f64 {
        let Some(bits) = self.bits_per_weight else {
            return base_bytes;
        };
        let never = matches!(class, WeightClass::Embedding | WeightClass::Router)
            || (class == WeightClass::LmHead && !self.quantizes_lm_head);
        let left_out = class
            .module_names()
            .iter()
            .any(|name| self.not_converted.iter().any(|p| pattern_matches(p, name)));
        if never || left_out {
            base_bytes
        } else {
            bits / 8.0
        }
    }
}

/// Bits per weight, scales included, of a checkpoint quantized with `method` (lowercase), and
/// whether its matrix multiplies run in FP8; None for a method whose bits are not known.
fn weight_bits(
    method: &str,
    q: &Value,
    at: &str,
    unknown: &mut Vec<String>,
) -> Result<(Option<f64>, bool), FactsError> {
    Ok(match method {
        "fp8" | "fbgemm_fp8" => (Some(fp8_bits(q, at)?), true),
        "mxfp4" => (Some(4.0 + 8.0 / 32.0), false),
        "awq" | "gptq" | "awq_marlin" | "gptq_marlin" => {
            (Some(integer_bits(method, q, at, unknown)?), false)
        }
        "compressed-tensors" => {
            let read = compressed_tensors_bits(q, at)?;
            (read.map(|(bits, _)| bits), read.is_some_and(|(_, fp8)| fp8))
        }
        "bitsandbytes" => {
            let set = |k: &str| q.get(k).and_then(Value::as_bool) == Some(true);
            if set("load_in_4bit") {
                // NF4 with one fp32 absmax per 64 weights.
                (Some(4.0 + 32.0 / 64.0), false)
            } else if set("load_in_8bit") {
                (Some(8.0), false)
            } else {
                (None, false)
            }
        }
        "modelopt" | "nvfp4" | "fp4" => match q
            .get("quant_algo")
            .and_then(Value::as_str)
            .map(str::to_ascii_uppercase)
            .as_deref()
        {
            Some("FP8") => (Some(8.0), true),
            // NVFP4: one fp8 scale per 16 weights.
            _ => (Some(4.0 + 8.0 / 16.0), false),
        },
        _ => (None, false),
    })
}

/// FP8 weights: 8 bits, plus one fp32 scale per `weight_block_size` block when blocked.
fn fp8_bits(q: &Value, at: &str) -> Result<f64, FactsError> {
    let Some(b) = q.get("weight_block_size").filter(|b| !b.is_null()) else {
        return Ok(8.0);
    };
    let field = format!("{at}.weight_block_size");
    let sides = b
        .as_array()
        .filter(|a| a.len() == 2)
        .and_then(|a| {
            a.iter()
                .map(|x| crate::facts_error::whole(x, 1, MAX_GROUP))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| {
            FactsError::invalid(
                &field,
                b,
                format!(
                    "two whole numbers from 1 to {MAX_GROUP} (a block's rows and columns) are needed"
                ),
            )
        })?;
    Ok(8.0 + 32.0 / (sides[0] as f64 * sides[1] as f64))
}

/// AWQ and GPTQ weights: `bits` (or `w_bit`; 4 when neither is given, said in `unknown`) with
/// their groups' scales and, when asymmetric (AWQ's default), zero points.
fn integer_bits(
    method: &str,
    q: &Value,
    at: &str,
    unknown: &mut Vec<String>,
) -> Result<f64, FactsError> {
    let (bits_key, bits) = match q.get("bits").filter(|v| !v.is_null()) {
        Some(v) => ("bits", Some(v)),
        None => ("w_bit", q.get("w_bit").filter(|v| !v.is_null())),
    };
    let bits = match bits {
        Some(v) => crate::facts_error::whole(v, 2, 8).ok_or_else(|| {
            FactsError::invalid(
                &format!("{at}.{bits_key}"),
                v,
                "bits per weight are a whole number from 2 to 8",
            )
        })? as f64,
        None => {
            unknown.push(format!("{method}: bits per weight not given, taken as 4"));
            4.0
        }
    };
    let group = group_size(q, at, &["group_size", "q_group_size"])?;
    let symmetric = q
        .get("sym")
        .and_then(Value::as_bool)
        .unwrap_or(method != "awq" && method != "awq_marlin");
    Ok(group_bits(bits, group, symmetric))
}

/// Bits per weight with a group's share of its scale: a 16-bit scale per `group` weights, and
/// a zero point of `bits` when not `symmetric`.
fn group_bits(bits: f64, group: Option<f64>, symmetric: bool) -> f64 {
    match group.filter(|g| *g > 0.0) {
        Some(g) => bits + 16.0 / g + if symmetric { 0.0 } else { bits / g },
        None => bits,
    }
}

/// A group size (`-1`: one group per output channel, as GPTQ writes it), from the first of
/// `keys` given; an error naming it when it is anything else.
fn group_size(q: &Value, at: &str, keys: &[&str]) -> Result<Option<f64>, FactsError> {
    for k in keys {
        let Some(v) = q.get(*k).filter(|v| !v.is_null()) else {
            continue;
        };
        if v.as_i64() == Some(-1) {
            return Ok(None);
        }
        return crate::facts_error::whole(v, 1, MAX_GROUP)
            .map(|g| Some(g as f64))
            .ok_or_else(|| {
                FactsError::invalid(
                    &format!("{at}.{k}"),
                    v,
                    format!("weights per group: a whole number from 1 to {MAX_GROUP}, or -1 for one group per channel"),
                )
            });
    }
    Ok(None)
}

/// compressed-tensors: the first config group's weight bits (groups of one scheme are the
/// rule), and whether its multiplies run in FP8 (float 8-bit weights, with activations in
/// float 8-bit or not said).
fn compressed_tensors_bits(q: &Value, at: &str) -> Result<Option<(f64, bool)>, FactsError> {
    let Some(groups) = q.get("config_groups").and_then(Value::as_object) else {
        return Ok(None);
    };
    let Some((name, w)) = groups.iter().find_map(|(name, g)| {
        g.get("weights")
            .filter(|w| w.is_object())
            .map(|w| (name, w))
    }) else {
        return Ok(None);
    };
    let here = format!("{at}.config_groups.{name}.weights");
    let Some(b) = w.get("num_bits").filter(|b| !b.is_null()) else {
        return Ok(None);
    };
    let bits = crate::facts_error::whole(b, 1, 16).ok_or_else(|| {
        FactsError::invalid(
            &format!("{here}.num_bits"),
            b,
            "bits per weight are a whole number from 1 to 16",
        )
    })? as f64;
    let strategy = w.get("strategy").and_then(Value::as_str).unwrap_or("group");
    let group = if strategy == "group" || strategy == "tensor_group" {
        group_size(w, &here, &["group_size"])?
    } else {
        None
    };
    let symmetric = w.get("symmetric").and_then(Value::as_bool).unwrap_or(true);
    let float8 = |v: &Value| {
        v.get("type").and_then(Value::as_str) == Some("float")
            && v.get("num_bits").and_then(Value::as_u64) == Some(8)
    };
    let activations = groups
        .get(name)
        .and_then(|g| g.get("input_activations"))
        .filter(|a| !a.is_null());
    let fp8 = float8(w) && activations.is_none_or(float8);
    Ok(Some((group_bits(bits, group, symmetric), fp8)))
}

/// Whether a not-converted entry names `module`: `re:` regexes match from the start (Python's
/// `re.match`); plain names and `*` globs match the whole name, a prefix of it at a dot, or a
/// dotted part of it (`self_attn`, `model.layers.*.self_attn`).
fn pattern_matches(pattern: &str, module: &str) -> bool {
    if let Some(re) = pattern.strip_prefix("re:") {
        return regex::Regex::new(&format!("^(?:{re})")).is_ok_and(|r| r.is_match(module));
    }
    let glob = regex::escape(pattern).replace(r"\*", "[^.]*");
    regex::Regex::new(&format!(r"(^|\.)(?:{glob})($|\.)")).is_ok_and(|r| r.is_match(module))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patterns_match_as_the_checkpoints_mean_them() {
        assert!(pattern_matches(
            "re:.*self_attn.*",
            "model.layers.1.self_attn.q_proj"
        ));
        assert!(!pattern_matches(
            "re:.*self_attn.*",
            "model.layers.1.mlp.experts.0.up_proj"
        ));
        assert!(pattern_matches(
            "model.layers.*.self_attn",
            "model.layers.1.self_attn.q_proj"
        ));
        assert!(pattern_matches("lm_head", "lm_head"));
        assert!(pattern_matches(
            "self_attn",
            "model.layers.1.self_attn.o_proj"
        ));
        assert!(!pattern_matches(
            "gate",
            "model.layers.1.mlp.experts.0.gate_proj"
        ));
        assert!(pattern_matches(
            "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
            "model.layers.0.mlp.gate_proj"
        ));
        assert!(!pattern_matches(
            "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
            "model.layers.1.mlp.experts.0.gate_proj"
        ));
    }

    #[test]
    fn bits_per_weight_count_scales_and_zero_points() {
        let mut unknown = Vec::new();
        let fp8 = Quantization::from_hf(
            &json!({"quant_method": "fp8", "weight_block_size": [128, 128]}),
            "q",
            &mut unknown,
        )
        .unwrap();
        assert!((fp8.bits_per_weight.unwrap() - (8.0 + 32.0 / 16384.0)).abs() < 1e-12);
        let awq = Quantization::from_hf(
            &json!({"quant_method": "awq", "bits": 4, "group_size": 128}),
            "q",
            &mut unknown,
        )
        .unwrap();
        // 4 bits, a 16-bit scale and a 4-bit zero point per 128 weights.
        assert!((awq.bits_per_weight.unwrap() - (4.0 + 16.0 / 128.0 + 4.0 / 128.0)).abs() < 1e-12);
        let mx =
            Quantization::from_hf(&json!({"quant_method": "mxfp4"}), "q", &mut unknown).unwrap();
        assert_eq!(mx.bits_per_weight, Some(4.25));
        assert!(unknown.is_empty());
        let odd =
            Quantization::from_hf(&json!({"quant_method": "hqq"}), "q", &mut unknown).unwrap();
        assert_eq!(odd.bits_per_weight, None);
        assert_eq!(odd.bytes_per_param(WeightClass::RoutedExpert, 2.0), 2.0);
        assert_eq!(unknown.len(), 1);
    }
}
