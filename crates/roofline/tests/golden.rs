//! The arithmetic against figures computed by hand from five published configs (fixtures in
//! `tests/fixtures/configs`, trimmed copies of the models' `config.json`), and against what the
//! model cards state (Llama 3.1 8B: 8.03B parameters; DeepSeek-V3: 671B, 36.6B activated with
//! the 0.9B head; gpt-oss-120b: 116.83B, 5.13B active).

use roofline::grade::{self, Finding, SweepPoint};
use roofline::step::{self, Layout};
use roofline::{LayerKind, ModelFacts, gpu, params};

fn model(name: &str) -> ModelFacts {
    let path = format!(
        "{}/tests/fixtures/configs/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    ModelFacts::from_hf_config(&serde_json::from_str(&text).unwrap()).unwrap()
}

/// Points of a sweep, each step with a standard error of `se` of itself (None: no interval).
fn sweep_points(steps: &[(f64, f64)], se: Option<f64>) -> Vec<SweepPoint> {
    steps
        .iter()
        .map(|&(context, step_s)| SweepPoint {
            context,
            step_s,
            step_se: se.map(|r| r * step_s),
        })
        .collect()
}

/// Student's t at 97.5% for the few degrees of freedom these sweeps have.
fn t975(df: usize) -> f64 {
    [f64::INFINITY, 12.706, 4.303, 3.182, 2.776, 2.571][df.min(5)]
}

#[track_caller]
fn close(got: f64, want: f64, rel: f64) {
    assert!(
        (got - want).abs() <= want.abs() * rel,
        "got {got}, want {want} (within {rel})"
    );
}

#[test]
fn llama_3_1_8b_dense_gqa() {
    let m = model("llama-3.1-8b");
    assert!(m.unknown.is_empty(), "{:?}", m.unknown);
    // 32 layers x (K and V) x 8 KV heads x 128 x 2 bytes.
    assert_eq!(step::kv_bytes_per_token(&m, 2.0), 131_072.0);
    // attention 32 x (2 x 4096 x 4096 + 2 x 4096 x 1024) = 1,342,177,280
    // MLP 32 x 3 x 4096 x 14336 = 5,637,144,576; embedding = head = 128256 x 4096 = 525,336,576
    let total = params::total(&m);
    assert_eq!(total.attention, 1_342_177_280.0);
    assert_eq!(total.dense_mlp, 5_637_144_576.0);
    assert_eq!(total.total(), 8_029_995_008.0);

    // Batch 1 at 1,024 tokens on one GPU: every weight but the embedding, bf16, plus the cache.
    let one = Layout::default();
    let s = step::decode_step(&m, &one, 1.0, 1024.0, 1.0);
    assert_eq!(
        s.weight_bytes,
        (1_342_177_280.0 + 5_637_144_576.0 + 525_336_576.0) * 2.0
    );
    assert_eq!(s.kv_bytes, 131_072.0 * 1024.0);
    let h100 = gpu::find("NVIDIA H100 80GB HBM3").unwrap();
    let g = grade::decode(&s, h100, 0.005);
    close(g.floor_s, 15_143_534_592.0 / 3.35e12, 1e-12);
    close(
        g.fraction_of_peak,
        15_143_534_592.0 / 3.35e12 / 0.005,
        1e-12,
    );

    // tp 2 halves both; at tp 16 the 8 KV heads are split 8 ways, not 16.
    let tp = |n| Layout {
        tp: n,
        ..Layout::default()
    };
    let s2 = step::decode_step(&m, &tp(2), 1.0, 1024.0, 1.0);
    close(s2.weight_bytes, s.weight_bytes / 2.0, 1e-12);
    close(s2.kv_bytes, s.kv_bytes / 2.0, 1e-12);
    let s16 = step::decode_step(&m, &tp(16), 1.0, 1024.0, 1.0);
    close(s16.kv_bytes, s.kv_bytes / 8.0, 1e-12);
    // So are the k and v projections (32 x 2 x 4096 x 8 x 128): past 8 ranks each rank holds
    // a copy of one KV head's, as vLLM's and SGLang's QKVParallelLinear replicate them.
    let kv_proj = 32.0 * 2.0 * 4096.0 * 8.0 * 128.0 * 2.0;
    close(
        s16.weight_bytes,
        (s.weight_bytes - kv_proj) / 16.0 + kv_proj / 8.0,
        1e-12,
    );
    // An fp8 cache halves the cache, not the weights.
    let fp8kv = Layout {
        kv_cache_dtype: Some("fp8_e4m3".into()),
        ..Layout::default()
    };
    close(
        step::decode_step(&m, &fp8kv, 1.0, 1024.0, 1.0).kv_bytes,
        s.kv_bytes / 2.0,
        1e-12,
    );

    // Prefill of 1,024 new tokens: 2 x 6,979,321,856 x 1024 through the layers, the head once,
    // and 32 layers x 524,800 causal pairs x 2 x 32 heads x (128 + 128).
    let p = step::prefill(&m, &one, 1024.0, 0.0);
    assert_eq!(p.linear_flops, 14_294_701_834_240.0);
    assert_eq!(p.attention_flops, 275_146_342_400.0);
}

#[test]
fn deepseek_v3_mla_moe_fp8() {
    let m = model("deepseek-v3");
    assert!(m.unknown.is_empty(), "{:?}", m.unknown);
    // 61 layers x (512 latent + 64 rope) x 2 bytes.
    assert_eq!(step::kv_bytes_per_token(&m, 2.0), 70_272.0);
    assert_eq!(m.layers.iter().filter(|l| !l.moe).count(), 3);
    // Per layer: q 7168x1536 + 1536x128x192, kv_a 7168x576, kv_b 512x128x256, o 128x128x7168.
    assert_eq!(params::attention_per_layer(&m), 187_105_280.0);
    let total = params::total(&m);
    assert_eq!(total.total(), 671_025_397_760.0);
    let active = params::active_per_token(&m);
    // The card: 36.6B activated, 0.9B of it the output head.
    assert_eq!(active.total(), 36_624_596_992.0);
    assert_eq!(active.lm_head, 926_679_040.0);

    // fp8 with one fp32 scale per 128x128 block everywhere in the layers; router and head bf16.
    let s = step::decode_step(&m, &Layout::default(), 1.0, 0.0, 1.0);
    assert_eq!(s.weight_bytes, 37_666_395_824.0);
    // The latent is replicated on every tensor-parallel rank: tp 8 splits weights only.
    let tp8 = Layout {
        tp: 8,
        ..Layout::default()
    };
    let s8 = step::decode_step(&m, &tp8, 1.0, 4096.0, 1.0);
    // MLA's down-projections (61 x 7168 x (1536 + 576), fp8 with block scales) and the router
    // (58 x 7168 x 256, bf16) are whole on every rank; the rest is split 8 ways.
    let replicated = 61.0 * 7168.0 * (1536.0 + 576.0) * (8.0 + 32.0 / 16384.0) / 8.0
        + 58.0 * 7168.0 * 256.0 * 2.0;
    close(
        s8.weight_bytes,
        (s.weight_bytes - replicated) / 8.0 + replicated,
        1e-12,
    );
    assert_eq!(s8.kv_bytes, 70_272.0 * 4096.0);
    // DP attention over 8 groups splits the batch's caches instead.
    let dp8 = Layout {
        tp: 8,
        dp: 8,
        dp_attention: true,
        ..Layout::default()
    };
    close(
        step::decode_step(&m, &dp8, 8.0, 4096.0, 1.0).kv_bytes,
        70_272.0 * 4096.0,
        1e-12,
    );

    // A batch of 64 reaches most experts: 256 x (1 - (1 - 8/256)^64) = 222.44 of 256 per layer.
    let b64 = step::decode_step(&m, &Layout::default(), 64.0, 0.0, 1.0);
    let reached = 256.0 * (1.0 - (1.0f64 - 8.0 / 256.0).powi(64));
    close(reached, 222.44, 1e-4);
    let expert = 3.0 * 7168.0 * 2048.0 * 58.0 * (8.0 + 32.0 / 16384.0) / 8.0;
    close(
        b64.weight_bytes - s.weight_bytes,
        (reached - 8.0) * expert,
        1e-9,
    );
}

#[test]
fn kimi_k2_thinking_int4_experts_only() {
    let m = model("kimi-k2-thinking");
    let active = params::active_per_token(&m);
    // The card: 32B activated of 1T.
    assert_eq!(active.total(), 31_686_066_176.0);
    close(params::total(&m).total(), 1.026e12, 1e-3);
    // Only the routed experts are int4 (4 bits + a bf16 scale per 32: 0.5625 bytes); attention,
    // the shared expert, the dense layer and the head stay bf16 (the `ignore` list).
    let s = step::decode_step(
        &m,
        &Layout {
            tp: 8,
            ..Layout::default()
        },
        1.0,
        0.0,
        1.0,
    );
    // Split over 8 ranks: everything but MLA's q_a and kv_a (61 x 7168 x (1536 + 576)) and
    // the router (60 x 7168 x 384), which every rank holds whole, in bf16: 6.03 GB a rank
    // reads per one-token step (4.12 if it were all split).
    let replicated = (61.0 * 7168.0 * (1536.0 + 576.0) + 60.0 * 7168.0 * 384.0) * 2.0;
    assert_eq!(replicated, 2_177_236_992.0);
    close(
        s.weight_bytes,
        (32_984_399_872.0 - replicated) / 8.0 + replicated,
        1e-12,
    );
    assert_eq!((s.weight_bytes / 1e7).round() / 100.0, 6.03);
    // A verify step of 3 tokens reaches 384 x (1 - (1 - 8/384)^3) experts per MoE layer:
    // 8.91 GB (7.00 if it were all split).
    let verify = step::decode_step(
        &m,
        &Layout {
            tp: 8,
            ..Layout::default()
        },
        1.0,
        0.0,
        3.0,
    );
    let reached = 384.0 * (1.0 - (1.0f64 - 8.0 / 384.0).powi(3));
    let expert = 3.0 * 7168.0 * 2048.0 * 60.0 * 0.5625 / 8.0;
    close(
        verify.weight_bytes,
        s.weight_bytes + (reached - 8.0) * expert,
        1e-12,
    );
    assert_eq!((verify.weight_bytes / 1e7).round() / 100.0, 8.91);
}

#[test]
fn sliding_window_and_hybrid_layers_cap_the_cache() {
    // Mistral 7B v0.1: every layer slides over 4,096 tokens.
    let m = model("mistral-7b-v0.1");
    assert!(
        m.layers
            .iter()
            .all(|l| l.attention == LayerKind::Sliding { window: 4096 })
    );
    assert_eq!(
        step::kv_bytes_of_sequence(&m, 2.0, 2048.0),
        131_072.0 * 2048.0
    );
    assert_eq!(
        step::kv_bytes_of_sequence(&m, 2.0, 8192.0),
        131_072.0 * 4096.0
    );
    // 7,241,732,096 in the checkpoint: the 266,240 norm weights are left out.
    assert_eq!(params::total(&m).total(), 7_241_465_856.0);

    // gpt-oss-120b: 18 sliding (128) and 18 full layers, 8 KV heads of 64, MoE 4 of 128, MXFP4.
    let g = model("gpt-oss-120b");
    assert!(g.unknown.is_empty(), "{:?}", g.unknown);
    let full = g
        .layers
        .iter()
        .filter(|l| l.attention == LayerKind::Full)
        .count();
    assert_eq!(full, 18);
    // 18 x 2048 x 8192 + 18 x 2048 x 128 bytes at 8k.
    assert_eq!(step::kv_bytes_of_sequence(&g, 2.0, 8192.0), 306_708_480.0);
    // Card: 116.83B total, 5.13B active.
    assert_eq!(params::total(&g).total(), 116_788_838_400.0);
    assert_eq!(params::active_per_token(&g).total(), 5_131_100_160.0);
    // Experts in MXFP4 (4.25 bits); attention, router and head bf16.
    let s = step::decode_step(&g, &Layout::default(), 1.0, 0.0, 1.0);
    let want = 3_583_180_800.0 * 4.25 / 8.0 + (955_514_880.0 + 13_271_040.0 + 579_133_440.0) * 2.0;
    close(s.weight_bytes, want, 1e-12);
    // 128 new tokens after 100,000 cached: each full layer sees 128 x 100,000 more pairs; a
    // sliding layer only fills its window (128 x 128 pairs against 128 x 129 / 2 from empty).
    let short = step::prefill(&g, &Layout::default(), 128.0, 0.0).attention_flops;
    let long = step::prefill(&g, &Layout::default(), 128.0, 100_000.0).attention_flops;
    let per_pair = 2.0 * 64.0 * (64.0 + 64.0);
    let pairs = 18.0 * 128.0 * 100_000.0 + 18.0 * (128.0 * 128.0 - 128.0 * 129.0 / 2.0);
    close(long - short, pairs * per_pair, 1e-12);
}

/// The founding case: Kimi K2.6 (K2-shaped, int4 experts) on 8 x RTX PRO 6000 Blackwell, tp 8,
/// decode steps fitted to the published 1k and 8k figures (the sim profile
/// `kimi-k2.6-8x-rtxpro6000`: step = 0.2 ms + 17.8 us x context).
#[test]
fn the_founding_case_is_diagnosed_and_a_healthy_kernel_is_not() {
    let m = model("kimi-k2-thinking");
    let layout = Layout {
        tp: 8,
        ..Layout::default()
    };
    let rtx = gpu::find("NVIDIA RTX PRO 6000 Blackwell Server Edition").unwrap();
    let step_at = |ctx: f64| step::decode_step(&m, &layout, 1.0, ctx, 1.0);
    let published: Vec<(f64, f64)> = [1424.0, 11405.0]
        .iter()
        .map(|&c| (c, 0.2e-3 + 17.8e-6 * c))
        .collect();
    // Each published step with a 2% standard error (16 tokens of 5 to 7 verify steps each).
    let sweep =
        grade::context_sweep(&sweep_points(&published, Some(0.02)), step_at, rtx, t975).unwrap();
    // 70,272 bytes per token of context (the latent is whole on every rank) over 17.8 us.
    close(sweep.marginal_gb_s, 70_272.0 / 17.8e-6 / 1e9, 1e-9);
    let text: Vec<String> = sweep.findings.iter().map(ToString::to_string).collect();
    assert!(
        matches!(sweep.findings[0], Finding::ContextNotMemoryBound { times_below_peak, .. } if (times_below_peak - 454.0).abs() < 1.0),
        "{text:?}"
    );
    assert!(
        text[0]
            .contains("3.9 GB/s, about 454x below bandwidth: attention is not memory-bound here"),
        "{text:?}"
    );
    // Two points, context 99% of the shortest step: the fixed part is not called wrong facts.
    assert!(
        matches!(sweep.findings[1], Finding::FixedUnresolved { .. }),
        "{text:?}"
    );
    assert_eq!(sweep.findings.len(), 2);

    // A healthy kernel: the weights and the cache read at 80% of 1,792 GB/s.
    let floor_w = step_at(0.0).weight_bytes / rtx.bandwidth();
    let per_token = 70_272.0 / (0.8 * rtx.bandwidth());
    let healthy: Vec<(f64, f64)> = [1024.0, 8192.0, 32768.0]
        .iter()
        .map(|&c| (c, floor_w / 0.8 + per_token * c))
        .collect();
    let sweep =
        grade::context_sweep(&sweep_points(&healthy, Some(0.01)), step_at, rtx, t975).unwrap();
    let text: Vec<String> = sweep.findings.iter().map(ToString::to_string).collect();
    assert!(
        matches!(sweep.findings[0], Finding::ContextAtBandwidth { fraction, .. } if (fraction - 0.8).abs() < 1e-6),
        "{text:?}"
    );
    assert!(
        matches!(sweep.findings[1], Finding::FixedCost { fraction, .. } if (fraction - 0.8).abs() < 1e-6),
        "{text:?}"
    );

    // Steps faster than the bytes allow: the facts are wrong, and said so.
    let impossible: Vec<(f64, f64)> = [1024.0, 8192.0]
        .iter()
        .map(|&c| (c, 0.5e-3 + 1e-8 * c))
        .collect();
    let sweep = grade::context_sweep(&sweep_points(&impossible, None), step_at, rtx, t975).unwrap();
    assert!(
        sweep
            .findings
            .iter()
            .any(|f| matches!(f, Finding::FasterThanTheFloor { .. }))
    );
}

#[test]
fn a_config_missing_what_the_arithmetic_needs_says_which_field() {
    let err =
        ModelFacts::from_hf_config(&serde_json::json!({"hidden_size": 64, "num_hidden_layers": 2}))
            .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the config has no `num_attention_heads` (a whole number); give it, or the model's facts in `model_facts:`"
    );
    // What is left out is listed with what was assumed.
    let m = ModelFacts::from_hf_config(&serde_json::json!({
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 512, "intermediate_size": 128
    }))
    .unwrap();
    assert_eq!(m.unknown.len(), 2, "{:?}", m.unknown);
    assert!(m.unknown[0].starts_with("num_key_value_heads"));
    assert!(m.unknown[1].starts_with("torch_dtype"));
}
