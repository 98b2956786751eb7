//! What no model or layout has is refused, naming the field, before any number is computed
//! from it: no allocation sized by a config (`num_hidden_layers: 1000000000000` aborted the
//! process), no NaN or negative fraction of peak, no silent fill-in.

use roofline::grade::{self, Finding, NoLine, SweepPoint};
use roofline::step::{self, Layout, LayoutError};
use roofline::{FactsError, ModelFacts, gpu};
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/configs/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `base` with `path` (dotted) set to `value`, or removed when `value` is None.
fn with(mut base: Value, path: &str, value: Option<Value>) -> Value {
    let keys: Vec<&str> = path.split('.').collect();
    let mut at = &mut base;
    for k in &keys[..keys.len() - 1] {
        at = at.get_mut(*k).unwrap();
    }
    let last = keys[keys.len() - 1];
    match value {
        Some(v) => {
            at[last] = v;
        }
        None => {
            at.as_object_mut().unwrap().remove(last);
        }
    }
    base
}

#[track_caller]
fn refused(config: &Value, field: &str) -> String {
    let e = ModelFacts::from_hf_config(config).unwrap_err();
    match &e {
        FactsError::Invalid { field: f, .. } => assert_eq!(f, field, "{e}"),
        other => panic!("not an invalid field: {other}"),
    }
    assert_eq!(
        e.pointer().unwrap(),
        format!("/{}", field.replace('.', "/"))
    );
    e.to_string()
}

#[test]
fn every_model_fact_has_a_bound_and_a_refusal_at_its_field() {
    let llama = fixture("llama-3.1-8b");
    let k2 = fixture("kimi-k2-thinking");
    let huge = json!(18_446_744_073_709_551_615u64);
    for (base, field, value) in [
        (&llama, "num_hidden_layers", json!(1_000_000_000_000u64)),
        (&llama, "hidden_size", huge.clone()),
        (&llama, "num_attention_heads", json!(0)),
        (&llama, "num_key_value_heads", json!(0)),
        (&llama, "num_key_value_heads", json!(64)),
        (&llama, "head_dim", json!(0)),
        (&llama, "vocab_size", json!(-5)),
        (&llama, "intermediate_size", json!(1e308)),
        (&llama, "max_position_embeddings", json!(-1)),
        (&k2, "n_routed_experts", huge.clone()),
        (&k2, "num_experts_per_tok", json!(500)),
        (&k2, "num_experts_per_tok", json!(0)),
        (&k2, "moe_intermediate_size", Value::Null),
        (&k2, "kv_lora_rank", json!(-512)),
        (&k2, "first_k_dense_replace", json!(1000)),
        (&k2, "tie_word_embeddings", json!("no")),
    ] {
        let text = refused(&with(base.clone(), field, Some(value.clone())), field);
        assert!(
            text.starts_with(&format!("the config's `{field}` is ")),
            "{text}"
        );
        assert!(text.len() < 300, "{text}");
    }
    // The field in a multimodal config's text_config is named there.
    let nested = json!({ "model_type": "llava", "text_config": with(llama.clone(), "num_hidden_layers", Some(json!(1e12))) });
    refused(&nested, "text_config.num_hidden_layers");
}

#[test]
fn quantization_figures_no_checkpoint_has_are_refused() {
    let llama = fixture("llama-3.1-8b");
    let awq = |bits: Value| {
        with(
            llama.clone(),
            "quantization_config",
            Some(json!({"quant_method": "awq", "bits": bits, "group_size": 128})),
        )
    };
    for bits in [json!(-4), json!(1e308), json!(0), json!(4.5)] {
        let text = refused(&awq(bits), "quantization_config.bits");
        assert!(text.contains("a whole number from 2 to 8"), "{text}");
    }
    refused(
        &with(
            llama.clone(),
            "quantization_config",
            Some(json!({"quant_method": "gptq", "bits": 4, "group_size": 0})),
        ),
        "quantization_config.group_size",
    );
    // GPTQ's -1 is one group per channel, as the checkpoints write it.
    let per_channel = with(
        llama.clone(),
        "quantization_config",
        Some(json!({"quant_method": "gptq", "bits": 4, "group_size": -1})),
    );
    let m = ModelFacts::from_hf_config(&per_channel).unwrap();
    assert_eq!(m.quantization.unwrap().bits_per_weight, Some(4.0));
    refused(
        &with(
            llama.clone(),
            "quantization_config",
            Some(json!({"quant_method": "fp8", "weight_block_size": [0, -3]})),
        ),
        "quantization_config.weight_block_size",
    );
    let k2 = fixture("kimi-k2-thinking");
    refused(
        &with(
            k2,
            "quantization_config.config_groups.group_0.weights.num_bits",
            Some(json!(1e308)),
        ),
        "quantization_config.config_groups.group_0.weights.num_bits",
    );
}

#[test]
fn nothing_is_filled_in_silently() {
    let llama = fixture("llama-3.1-8b");
    let text = refused(
        &with(llama.clone(), "torch_dtype", Some(json!("banana"))),
        "torch_dtype",
    );
    assert!(text.contains("bfloat16, float16, float32"), "{text}");
    // A layer_types list that is not one per layer.
    let types = json!(vec!["full_attention"; 31]);
    let text = refused(
        &with(llama.clone(), "layer_types", Some(types)),
        "layer_types",
    );
    assert!(text.contains("num_hidden_layers: 32"), "{text}");
    // K2 without its expert size would take the dense layer's (18432 for 2048: 170 GB a GPU).
    let k2 = fixture("kimi-k2-thinking");
    let text = refused(
        &with(k2.clone(), "moe_intermediate_size", None),
        "moe_intermediate_size",
    );
    assert!(text.contains("give the routed expert's size"), "{text}");
    // A MoE model that does not say how many experts a token goes through.
    assert_eq!(
        ModelFacts::from_hf_config(&with(k2, "num_experts_per_tok", None)).unwrap_err(),
        FactsError::Missing("num_experts_per_tok")
    );
    // A float32 checkpoint is served in 16-bit, and that is said.
    let m = ModelFacts::from_hf_config(&with(llama.clone(), "torch_dtype", Some(json!("float32"))))
        .unwrap();
    assert_eq!(m.dtype_bytes(), 2.0);
    assert!(
        m.unknown
            .iter()
            .any(|u| u.contains("engines serve a float32 checkpoint in 16-bit")),
        "{:?}",
        m.unknown
    );
    let bf16 = ModelFacts::from_hf_config(&llama).unwrap();
    assert_eq!(
        step::weights_per_gpu(&m, &Layout::default()),
        step::weights_per_gpu(&bf16, &Layout::default())
    );
}

#[test]
fn a_layout_no_engine_runs_is_refused() {
    let llama = ModelFacts::from_hf_config(&fixture("llama-3.1-8b")).unwrap();
    let check = |layout: Layout| layout.check(&llama);
    assert_eq!(
        check(Layout {
            tp: 1_000_000,
            ..Layout::default()
        }),
        Err(LayoutError::OutOfRange {
            what: "tp",
            got: 1_000_000
        })
    );
    assert_eq!(
        check(Layout {
            tp: 64,
            ..Layout::default()
        }),
        Err(LayoutError::MoreRanksThanHeads {
            attention_tp: 64,
            heads: 32
        })
    );
    assert_eq!(
        check(Layout {
            pp: 1000,
            ..Layout::default()
        }),
        Err(LayoutError::MoreStagesThanLayers {
            pp: 1000,
            layers: 32
        })
    );
    let e = check(Layout {
        kv_cache_dtype: Some("banana".into()),
        ..Layout::default()
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("fp8_e4m3") && e.to_string().contains("fp4_e2m1"),
        "{e}"
    );
    assert_eq!(
        check(Layout {
            tp: 8,
            pp: 4,
            ..Layout::default()
        }),
        Ok(())
    );
}

#[test]
fn sglangs_fp4_kv_cache_is_half_a_byte_and_its_scales() {
    let llama = ModelFacts::from_hf_config(&fixture("llama-3.1-8b")).unwrap();
    // 4-bit values two to a byte, and a uint8 scale per 16 (SGLang's MHATokenToKVPoolFP4).
    for name in ["fp4_e2m1", "fp4_mx_block16", "nvfp4"] {
        assert_eq!(step::kv_cache_bytes(name), Some(0.5625), "{name}");
        let layout = Layout {
            kv_cache_dtype: Some(name.into()),
            ..Layout::default()
        };
        assert_eq!(layout.check(&llama), Ok(()));
        let s = step::decode_step(&llama, &layout, 1.0, 1000.0, 1.0);
        assert_eq!(s.kv_bytes, 32.0 * 2.0 * 8.0 * 128.0 * 0.5625 * 1000.0);
    }
    assert_eq!(step::kv_cache_bytes("fp8_e4m3"), Some(1.0));
    assert_eq!(step::kv_cache_bytes("mxfp8"), Some(1.03125));
    assert_eq!(step::kv_cache_bytes("banana"), None);
}

#[test]
fn pipeline_stages_run_in_series_for_one_sequence() {
    let llama = ModelFacts::from_hf_config(&fixture("llama-3.1-8b")).unwrap();
    let one = step::decode_step(&llama, &Layout::default(), 1.0, 4096.0, 1.0);
    let pp4 = step::decode_step(
        &llama,
        &Layout {
            pp: 4,
            ..Layout::default()
        },
        1.0,
        4096.0,
        1.0,
    );
    // A token passes the four stages one after another: the floor is all four reads.
    assert_eq!(pp4.bytes(), one.bytes());
    // Each stage's GPU holds a quarter of the weights.
    assert_eq!(
        step::weights_per_gpu(
            &llama,
            &Layout {
                pp: 4,
                ..Layout::default()
            }
        ),
        step::weights_per_gpu(&llama, &Layout::default()) / 4.0
    );
}

fn t975(df: usize) -> f64 {
    [f64::INFINITY, 12.706, 4.303, 3.182, 2.776, 2.571][df.min(5)]
}

#[test]
fn sliding_layers_read_their_cache_up_to_the_window() {
    // Mistral 7B v0.1: every layer slides over 4,096 tokens.
    let m = ModelFacts::from_hf_config(&fixture("mistral-7b-v0.1")).unwrap();
    let layout = Layout::default();
    let below = step::decode_step(&m, &layout, 1.0, 1024.0, 1.0);
    assert_eq!(below.kv_bytes_per_context_token, 131_072.0);
    let past = step::decode_step(&m, &layout, 1.0, 8192.0, 1.0);
    assert_eq!(past.kv_bytes_per_context_token, 0.0);
    // A sweep below the window recovers the bandwidth its steps read the cache at.
    let h100 = gpu::find("h100-sxm").unwrap();
    let at = |ctx: f64| step::decode_step(&m, &layout, 1.0, ctx, 1.0);
    let steps: Vec<SweepPoint> = [512.0, 1024.0, 2048.0, 3072.0]
        .iter()
        .map(|&c| SweepPoint {
            context: c,
            step_s: 0.006 + 131_072.0 * c / 2.0e12,
            step_se: Some(1e-6),
        })
        .collect();
    let sweep = grade::context_sweep(&steps, at, h100, t975).unwrap();
    assert!((sweep.marginal_gb_s - 2000.0).abs() < 1e-6, "{sweep:?}");
    assert!(
        matches!(sweep.findings[0], Finding::ContextAtBandwidth { .. }),
        "{:?}",
        sweep.findings
    );
    // Past the window every context reads the same cache: no line, and why.
    let past: Vec<SweepPoint> = [8192.0, 16384.0]
        .iter()
        .map(|&c| SweepPoint {
            context: c,
            step_s: 0.01 + c * 1e-9,
            step_se: None,
        })
        .collect();
    assert_eq!(
        grade::context_sweep(&past, at, h100, t975).unwrap_err(),
        NoLine::KvConstant
    );
}

#[test]
fn a_context_verdict_needs_an_interval_that_supports_it() {
    let m = ModelFacts::from_hf_config(&fixture("llama-3.1-8b")).unwrap();
    let layout = Layout::default();
    let h100 = gpu::find("h100-sxm").unwrap();
    let at = |ctx: f64| step::decode_step(&m, &layout, 1.0, ctx, 1.0);
    let point = |c: f64, s: f64, se: Option<f64>| SweepPoint {
        context: c,
        step_s: s,
        step_se: se,
    };
    // Two points without intervals: a slope, but nothing says how sure it is.
    let two = [point(1024.0, 0.0100, None), point(4096.0, 0.0103, None)];
    let sweep = grade::context_sweep(&two, at, h100, t975).unwrap();
    let text = sweep.findings[0].to_string();
    assert!(
        matches!(sweep.findings[0], Finding::ContextUncertain { .. }),
        "{text}"
    );
    assert!(text.contains("so no verdict is given"), "{text}");
    // Three noisy points whose slope could be 40% or 95% of peak: no verdict, the interval.
    let noisy = [
        point(1024.0, 0.01000, Some(0.0002)),
        point(4096.0, 0.01025, Some(0.0002)),
        point(8192.0, 0.01020, Some(0.0002)),
    ];
    let sweep = grade::context_sweep(&noisy, at, h100, t975).unwrap();
    let text = sweep.findings[0].to_string();
    assert!(
        matches!(sweep.findings[0], Finding::ContextUncertain { .. }),
        "{text}"
    );
    assert!(text.contains("95% interval"), "{text}");
    // The same line measured tightly is graded.
    let tight = [
        point(1024.0, 0.01, Some(1e-7)),
        point(4096.0, 0.01 + 3072.0 * 131_072.0 / 3.0e12, Some(1e-7)),
        point(8192.0, 0.01 + 7168.0 * 131_072.0 / 3.0e12, Some(1e-7)),
    ];
    let sweep = grade::context_sweep(&tight, at, h100, t975).unwrap();
    assert!(
        matches!(sweep.findings[0], Finding::ContextAtBandwidth { .. }),
        "{:?}",
        sweep.findings
    );
    let (lo, hi) = sweep.marginal_interval_gb_s.unwrap();
    assert!(lo < 3000.0 && hi.unwrap() > 3000.0, "{lo} {hi:?}");
}

#[test]
fn a_compressed_tensors_fp8_checkpoint_multiplies_in_fp8() {
    let llama = fixture("llama-3.1-8b");
    let fp8 = |activations: Value| {
        with(
            llama.clone(),
            "quantization_config",
            Some(json!({
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true},
                    "input_activations": activations
                }},
                "ignore": ["lm_head"]
            })),
        )
    };
    let m = ModelFacts::from_hf_config(&fp8(
        json!({"num_bits": 8, "type": "float", "dynamic": true, "strategy": "token"}),
    ))
    .unwrap();
    let q = m.quantization.unwrap();
    assert!(q.fp8_matmuls);
    assert_eq!(q.bits_per_weight, Some(8.0));
    // Activations kept in 16-bit (weight-only FP8): the multiply is bf16.
    let m = ModelFacts::from_hf_config(&fp8(json!({"num_bits": 16, "type": "float"}))).unwrap();
    assert!(!m.quantization.unwrap().fp8_matmuls);
}
