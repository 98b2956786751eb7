//! `servebench bound`: a run's decode steps graded against the hardware's physical bound.
//!
//! Each closed-loop point's decode speed is turned into a step time (tokens per step over the
//! per-request decode tok/s), set against the bytes a step must read per GPU at the point's
//! mean context and batch (`roofline::step`), and graded: floor, effective bandwidth, fraction
//! of peak. Points of one batch size form a context sweep, whose line says what the context-
//! dependent part and the fixed part cost (`roofline::grade::context_sweep`). The model comes
//! from its `config.json`, the GPU from the host's facts or `--gpu`, the layout from the
//! server's flags or `/server_info`; what was assumed is printed with the result.

use std::fmt::Write as _;

use roofline::grade::{self, ContextSweep};
use roofline::step::{self, Layout};
use roofline::{GpuSpec, ModelFacts, Precision, gpu};

use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::{PointRecord, PointStatus};

/// What `bound` is told beyond the run directory.
#[derive(Debug, Clone)]
pub struct BoundOptions {
    pub model: ModelFacts,
    /// A catalogue id or a GPU name as nvidia-smi prints it; None: from the host's facts.
    pub gpu: Option<String>,
    pub tp: Option<u32>,
    pub pp: Option<u32>,
    pub kv_cache_dtype: Option<String>,
    /// Tokens one decode step gives each sequence (1 without speculative decoding; the mean
    /// accept length with it).
    pub tokens_per_step: Option<f64>,
}

/// Why a run cannot be graded.
#[derive(Debug, thiserror::Error)]
pub enum BoundError {
    #[error(
        "the run does not say which GPU served it: name it with --gpu (one of: {known}, or a name as nvidia-smi prints it)"
    )]
    NoGpu { known: String },
    #[error("`{name}` is not in the GPU catalogue: use one of {known}")]
    UnknownGpu { name: String, known: String },
    #[error(
        "no point of this run has a decode speed to grade (closed-loop points that finished, with decode_tok_s)"
    )]
    NothingToGrade,
}

/// One graded point.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundRow {
    pub point: String,
    /// Mean context during decode: prompt plus half the output, tokens.
    pub context: f64,
    pub batch: f64,
    pub step: grade::DecodeGrade,
    pub weight_bytes: f64,
    pub kv_bytes: f64,
    /// Mean prompt tokens.
    pub prompt_tokens: f64,
    /// The prefill's achieved FLOP/s per GPU (None without a prefill speed: under concurrency
    /// or with cached prompts).
    pub prefill: Option<grade::PrefillGrade>,
    /// Decode tokens per step per sequence this point was graded with.
    pub tokens_per_step: f64,
}

/// A run's grades.
#[derive(Debug, Clone)]
pub struct BoundReport {
    pub gpu: GpuSpec,
    pub layout: Layout,
    pub tokens_per_step: f64,
    /// The precision prefills are graded at.
    pub precision: Precision,
    /// What was assumed or taken from where, one sentence each.
    pub assumptions: Vec<String>,
    pub rows: Vec<BoundRow>,
    /// A line per batch size with at least two contexts.
    pub sweeps: Vec<(f64, ContextSweep)>,
}

/// Grades the run's points against the GPU `opts.gpu` names (or the host's facts name).
pub fn grade(
    meta: &RunMeta,
    points: &[PointRecord],
    opts: &BoundOptions,
) -> Result<BoundReport, BoundError> {
    let mut assumptions = Vec::new();
    let gpu = match &opts.gpu {
        Some(name) => find_gpu(name)?,
        None => {
            let name = host_gpu(meta).ok_or_else(|| BoundError::NoGpu { known: known() })?;
            let g = find_gpu(&name)?;
            assumptions.push(format!("GPU: {name}, from the host's facts"));
            g
        }
    };
    grade_on(meta, points, opts, gpu, assumptions)
}

/// The catalogue's ids, for messages.
pub(crate) fn known() -> String {
    gpu::catalogue()
        .iter()
        .map(|g| g.id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A catalogue entry by id or nvidia-smi name.
pub(crate) fn find_gpu(name: &str) -> Result<GpuSpec, BoundError> {
    gpu::find(name)
        .cloned()
        .ok_or_else(|| BoundError::UnknownGpu {
            name: name.to_string(),
            known: known(),
        })
}

/// The decode steps' layout and tokens per step, as the server's flags and `/server_info` say
/// (`opts` first), with what was assumed.
pub(crate) struct Basis {
    pub layout: Layout,
    pub tokens_per_step: f64,
    /// The simulator's time scale steps are divided by (1 off the simulator).
    pub unscale: f64,
    pub assumptions: Vec<String>,
}

/// Reads the layout from the first server launch: its flags, then `/server_info` (SGLang's
/// `tp_size`, `pp_size`, `dp_size`, `enable_dp_attention`, `kv_cache_dtype`,
/// `speculative_algorithm`, `speculative_num_draft_tokens`).
pub(crate) fn basis(meta: &RunMeta, points: &[PointRecord], opts: &BoundOptions) -> Basis {
    let mut assumptions = Vec::new();
    let server = meta.servers.first();
    let flag = |names: &[&str]| -> Option<&serde_json::Value> {
        server.and_then(|s| names.iter().find_map(|n| s.args.get(*n)))
    };
    let info = |key: &str| {
        server
            .and_then(|s| s.server_info.as_ref())
            .and_then(|i| i.get(key))
            .filter(|v| !v.is_null())
    };
    let as_u32 = |v: &serde_json::Value| {
        v.as_u64()
            .or_else(|| v.as_str()?.parse().ok())
            .map(|n| n as u32)
    };
    let as_bool = |v: &serde_json::Value| v.as_bool().or_else(|| v.as_str().map(|s| s == "true"));
    let tp = opts
        .tp
        .or_else(|| flag(&["tp-size", "tp", "tensor-parallel-size", "-tp"]).and_then(as_u32))
        .or_else(|| info("tp_size").and_then(as_u32));
    let tp = tp.unwrap_or_else(|| {
        assumptions.push(
            "tensor parallelism: not in the server's flags or /server_info, taken as 1 (give --tp)"
                .into(),
        );
        1
    });
    let pp = opts
        .pp
        .or_else(|| flag(&["pp-size", "pipeline-parallel-size", "-pp"]).and_then(as_u32))
        .or_else(|| info("pp_size").and_then(as_u32))
        .unwrap_or(1);
    let dp = flag(&["dp-size", "dp"])
        .and_then(as_u32)
        .or_else(|| info("dp_size").and_then(as_u32))
        .unwrap_or(1)
        .max(1);
    // Expert parallelism (SGLang `--ep-size`, vLLM `--enable-expert-parallel`) puts whole experts
    // on each GPU instead of a slice of every one: under uniform routing a GPU's mean read is
    // the same, the busiest GPU's more. The floor is the mean's, and said so.
    let ep = flag(&["ep-size", "expert-parallel-size", "ep"])
        .and_then(as_u32)
        .or_else(|| info("ep_size").and_then(as_u32))
        .unwrap_or(1);
    let vllm_ep = flag(&["enable-expert-parallel"])
        .and_then(as_bool)
        .unwrap_or(false);
    if (ep > 1 || vllm_ep) && opts.model.moe.is_some() {
        assumptions.push(format!(
            "expert parallelism{}: each GPU is taken to read its mean share of the routed experts; the busiest GPU reads more, so a measured step can sit above the floor for that reason alone",
            if ep > 1 { format!(" (ep {ep})") } else { String::new() }
        ));
    }
    let dp_attention = flag(&["enable-dp-attention"])
        .and_then(as_bool)
        .or_else(|| info("enable_dp_attention").and_then(as_bool))
        .unwrap_or(false);
    let kv_cache_dtype = opts.kv_cache_dtype.clone().or_else(|| {
        flag(&["kv-cache-dtype"])
            .or_else(|| info("kv_cache_dtype"))
            .and_then(|v| v.as_str().map(str::to_string))
    });
    // The simulator at `sim-time-scale: s` runs every modelled duration s times as long (0.1:
    // ten times faster): a step measured there is s times the model's step.
    let as_f64 = |v: &serde_json::Value| v.as_f64().or_else(|| v.as_str()?.parse().ok());
    let time_scale = flag(&["sim-time-scale"])
        .and_then(as_f64)
        .or_else(|| info("sim_time_scale").and_then(as_f64))
        .filter(|s| s.is_finite() && *s > 0.0 && *s != 1.0);
    if let Some(s) = time_scale {
        assumptions.push(format!(
            "the simulator ran at sim-time-scale {s}: measured steps are divided by {s}"
        ));
    }
    // The draft-shape flags alone do nothing (SGLang ignores them without an algorithm).
    let speculative = server.is_some_and(|s| super::speculative::switched_on(&s.args))
        || info("speculative_algorithm").is_some()
        || info("internal_states")
            .and_then(|v| v.get(0)?.get("avg_spec_accept_length"))
            .is_some_and(|v| !v.is_null());
    // A verify step emits at most its draft width: at one, exactly one token per step.
    let one_wide = flag(&["speculative-num-draft-tokens"])
        .and_then(as_u32)
        .or_else(|| info("speculative_num_draft_tokens").and_then(as_u32))
        == Some(1);
    // Measured per point where the server counted its verify steps (`accept_length`).
    let measured = points
        .iter()
        .filter(|p| p.ok > 0)
        .all(|p| measured_tokens_per_step(p).is_some());
    if opts.tokens_per_step.is_none() && speculative && measured {
        assumptions.push(
            "tokens per step are each point's measured accept length (the server's verify steps, mean over its requests)".into(),
        );
    }
    let tokens_per_step = opts
        .tokens_per_step
        .unwrap_or_else(|| {
            if speculative && !one_wide && !measured {
                assumptions.push(
                    "speculative decoding is on but its tokens per step are not known: steps are counted as one token each, so step times are too short by the accept length (give --tokens-per-step)".into(),
                );
            }
            1.0
        });
    if meta.experiment.load.is_some() {
        assumptions.push("open-loop points are left out: their batch is not fixed".into());
    }
    Basis {
        layout: Layout {
            tp,
            pp,
            dp,
            dp_attention,
            kv_cache_dtype,
        },
        tokens_per_step,
        unscale: time_scale.unwrap_or(1.0),
        assumptions,
    }
}

/// The mean decode tokens one verify step gave each of a point's requests under speculative
/// decoding, as its records measured them (`accept_length`: SGLang's `spec_verify_ct`) or,
/// without them, as its server's counters did (vLLM's `spec_decode_num_*`); None without
/// speculation or where nothing counted the steps.
pub(crate) fn measured_tokens_per_step(p: &PointRecord) -> Option<f64> {
    super::speculative::point_accept_length(p)
}

/// The precision a prefill's matrix multiplies run in, for its peak: fp8 for a checkpoint in
/// fp8 (dtype or `quant_method: fp8`), else bf16 (int4/int8 weights are widened to bf16 for the
/// multiply).
pub(crate) fn prefill_precision(model: &ModelFacts) -> Precision {
    let fp8 = model.dtype.contains("float8")
        || model.dtype.contains("fp8")
        || model
            .quantization
            .as_ref()
            .is_some_and(|q| q.method.eq_ignore_ascii_case("fp8"));
    if fp8 { Precision::Fp8 } else { Precision::Bf16 }
}

/// Grades the run's points on `gpu`; `assumptions` are said first.
pub(crate) fn grade_on(
    meta: &RunMeta,
    points: &[PointRecord],
    opts: &BoundOptions,
    gpu: GpuSpec,
    mut assumptions: Vec<String>,
) -> Result<BoundReport, BoundError> {
    assumptions.extend(opts.model.unknown.iter().cloned());
    let b = basis(meta, points, opts);
    assumptions.extend(b.assumptions);
    let (layout, tokens_per_step, unscale) = (b.layout, b.tokens_per_step, b.unscale);
    let precision = prefill_precision(&opts.model);
    let mut rows = Vec::new();
    for p in points {
        if meta.experiment.load.is_some() || p.status() == PointStatus::Failed || p.ok == 0 {
            continue;
        }
        let mean = |k: &str| {
            p.metrics
                .get(k)
                .map(|s| s.mean)
                .filter(|v| v.is_finite() && *v > 0.0)
        };
        let (Some(decode), Some(prompt)) = (mean("decode_tok_s"), mean("prompt_tokens")) else {
            continue;
        };
        let context = prompt + mean("completion_tokens").unwrap_or(0.0) / 2.0;
        let batch = p
            .values
            .get("concurrency")
            .and_then(|v| v.as_f64())
            .unwrap_or(f64::from(meta.experiment.concurrency))
            .max(1.0);
        // A measured accept length is the point's own; `--tokens-per-step` overrides it.
        let tokens_per_step = opts
            .tokens_per_step
            .or_else(|| measured_tokens_per_step(p))
            .unwrap_or(tokens_per_step);
        let s = step::decode_step(&opts.model, &layout, batch, context, tokens_per_step);
        // prefill_tok_s is measured over requests that found nothing cached: the whole prompt
        // is new, and its time is the prompt over the speed.
        let prefill = mean("prefill_tok_s").map(|speed| {
            let work = step::prefill(&opts.model, &layout, prompt, 0.0);
            grade::prefill(&work, &gpu, precision, prompt / speed / unscale)
        });
        rows.push(BoundRow {
            point: p.id.clone(),
            context,
            batch,
            step: grade::decode(&s, &gpu, tokens_per_step / decode / unscale),
            weight_bytes: s.weight_bytes,
            kv_bytes: s.kv_bytes,
            prompt_tokens: prompt,
            prefill,
            tokens_per_step,
        });
    }
    if rows.is_empty() {
        return Err(BoundError::NothingToGrade);
    }
    let mut batches: Vec<f64> = rows.iter().map(|r| r.batch).collect();
    batches.sort_by(f64::total_cmp);
    batches.dedup();
    let sweeps = batches
        .into_iter()
        .filter_map(|b| {
            let sweep: Vec<&BoundRow> = rows.iter().filter(|r| r.batch == b).collect();
            let pts: Vec<(f64, f64)> = sweep.iter().map(|r| (r.context, r.step.step_s)).collect();
            // The sweep's floor line at its points' mean tokens per step (one without
            // speculation; the accept length varies with context under it).
            let tps = sweep.iter().map(|r| r.tokens_per_step).sum::<f64>() / sweep.len() as f64;
            let at = |ctx: f64| step::decode_step(&opts.model, &layout, b, ctx, tps);
            grade::context_sweep(&pts, at, &gpu).map(|s| (b, s))
        })
        .collect();
    // Measured per point: the run's figure is their mean (each row keeps its own).
    let tokens_per_step = if rows.iter().any(|r| r.tokens_per_step != tokens_per_step) {
        rows.iter().map(|r| r.tokens_per_step).sum::<f64>() / rows.len() as f64
    } else {
        tokens_per_step
    };
    Ok(BoundReport {
        gpu,
        layout,
        tokens_per_step,
        precision,
        assumptions,
        rows,
        sweeps,
    })
}

/// The GPU named in the server host's facts (SSH and Slurm hosts record `nvidia-smi`'s names).
pub(crate) fn host_gpu(meta: &RunMeta) -> Option<String> {
    let facts = meta.server_host.as_ref()?;
    let gpus = facts.get("gpus")?.as_array()?;
    gpus.first()?.get("name")?.as_str().map(str::to_string)
}

/// The grades as Markdown: the basis, a row per point, then what each sweep's line says.
pub fn render(r: &BoundReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Decode steps against {} ({:.0} GB/s peak, {}), tp {} pp {}, {:.2} token(s) per step per sequence{}; prefills against its dense {} peak.\n",
        r.gpu.name,
        r.gpu.bandwidth_gb_s,
        r.gpu.source,
        r.layout.tp,
        r.layout.pp,
        r.tokens_per_step,
        if r.rows
            .iter()
            .any(|row| row.tokens_per_step != r.tokens_per_step)
        {
            " on average (each point's measured accept length, column tok/step)"
        } else {
            ""
        },
        serde_json::to_value(r.precision)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    );
    for a in &r.assumptions {
        let _ = writeln!(out, "- assumed: {a}");
    }
    if !r.assumptions.is_empty() {
        out.push('\n');
    }
    out.push_str("| point | context | batch | tok/step | step (ms) | floor (ms) | weights + KV per GPU (GB) | effective (GB/s) | of peak | prefill TFLOP/s | of peak FLOP/s |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for row in &r.rows {
        let (tflops, fraction) = row.prefill.map_or(("—".into(), "—".into()), |p| {
            (
                format!("{:.1}", p.achieved_tflops),
                format!("{:.1}%", p.fraction_of_peak * 100.0),
            )
        });
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {:.2} | {:.3} | {:.3} | {:.3} + {:.3} | {:.1} | {:.1}% | {tflops} | {fraction} |",
            row.point,
            row.context,
            row.batch,
            row.tokens_per_step,
            row.step.step_s * 1e3,
            row.step.floor_s * 1e3,
            row.weight_bytes / 1e9,
            row.kv_bytes / 1e9,
            row.step.effective_gb_s,
            row.step.fraction_of_peak * 100.0
        );
    }
    for (batch, s) in &r.sweeps {
        let _ = writeln!(
            out,
            "\nAt batch {batch:.0}, over {} contexts: step = {:.3} ms + {:.3} us x context.",
            s.points,
            s.fixed_s * 1e3,
            s.slope_s_per_token * 1e6
        );
        for f in &s.findings {
            let _ = writeln!(out, "- {f}");
        }
    }
    out
}
