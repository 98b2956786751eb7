//! `servebench bound`: a run's decode steps graded against the hardware's physical bound.
//!
//! Each closed-loop point at concurrency 1 has its decode speed turned into a step time
//! (tokens per step over the per-request decode tok/s), set against the bytes a step must read
//! per GPU at the point's mean context (`roofline::step`) under its server group's layout, and
//! graded: floor, effective bandwidth, fraction of peak. Points that share everything that
//! changes a step (layout, KV dtype, speculation and its verify width, batch) form a context
//! sweep, whose line says what the context-dependent and the fixed parts cost
//! (`roofline::grade::context_sweep`), with a verdict only where the slope's interval supports
//! it. The model comes from its `config.json`, the GPU from the spec, the host's facts or
//! `--gpu`, the layout from the server's flags or `/server_info`; what was assumed is printed
//! with the result, and what the measurement cannot isolate is left ungraded and said why.

use std::fmt::Write as _;

use roofline::grade::{self, ContextSweep, SweepPoint};
use roofline::step::{self, Layout, LayoutError};
use roofline::{GpuSpec, ModelFacts, Precision, gpu};

use servebench_model::results::meta::{RunMeta, ServerLaunch};
use servebench_model::results::records::{PointRecord, PointStatus};

/// Most tokens one decode step may give a sequence (a verify width past any engine's).
pub const MAX_TOKENS_PER_STEP: f64 = 256.0;

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
    #[error("no point's decode steps can be graded: {0}")]
    NotIsolated(String),
    #[error("server group {group}'s layout: {source}")]
    Layout {
        group: String,
        #[source]
        source: LayoutError,
    },
}

/// One graded point.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundRow {
    pub point: String,
    /// The sweep line the point is on (`batch 1`, `batch 1, speculative: verify width 4`).
    pub line: String,
    /// Mean context during decode: prompt plus half the output, tokens.
    pub context: f64,
    pub batch: f64,
    pub step: grade::DecodeGrade,
    /// The step's standard error, seconds (from the point's 95% intervals); None without one.
    pub step_se: Option<f64>,
    pub weight_bytes: f64,
    pub kv_bytes: f64,
    /// Mean prompt tokens.
    pub prompt_tokens: f64,
    /// The prefill's achieved FLOP/s per GPU (None without a prefill speed: under concurrency
    /// or with cached prompts).
    pub prefill: Option<grade::PrefillGrade>,
    /// Decode tokens per step per sequence this point was graded with (its measured accept
    /// length under speculative decoding).
    pub tokens_per_step: f64,
    /// Tokens per sequence a step puts through the weights: the verify width under
    /// speculative decoding, else the tokens per step.
    pub verify_tokens: f64,
}

/// A run's grades.
#[derive(Debug, Clone)]
pub struct BoundReport {
    pub gpu: GpuSpec,
    /// The first graded group's layout (each point is graded with its own group's).
    pub layout: Layout,
    pub tokens_per_step: f64,
    /// The precision prefills are graded at.
    pub precision: Precision,
    /// What was assumed or taken from where, one sentence each.
    pub assumptions: Vec<String>,
    pub rows: Vec<BoundRow>,
    /// One line per set of points that share every setting that changes a step, with two
    /// contexts or more: its label, and the line or why there is none.
    pub sweeps: Vec<(String, Result<ContextSweep, grade::NoLine>)>,
    /// Points left ungraded, each with why (the measurement does not isolate their steps).
    pub not_graded: Vec<String>,
    /// What the grades say is wrong beyond the sweeps: prefills above the peak FLOP/s.
    pub findings: Vec<String>,
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

/// A server group's decode steps: its layout, speculation and tokens per step, as its flags
/// and `/server_info` say (`opts` first), with what was assumed.
pub(crate) struct Basis {
    pub layout: Layout,
    /// Tokens a step gives each sequence where no point measured its own.
    pub tokens_per_step: f64,
    /// Under speculative decoding, the tokens per sequence a verify step puts through the
    /// weights (`speculative_num_draft_tokens`; vLLM's `num_speculative_tokens` + 1); None
    /// without speculation, or where it is not known (then the accepted tokens are counted,
    /// and said).
    pub verify_width: Option<f64>,
    pub speculative: bool,
    /// The simulator's time scale steps are divided by (1 off the simulator).
    pub unscale: f64,
    pub assumptions: Vec<String>,
}

/// Reads a group's layout from its server launch: its flags, then `/server_info` (SGLang's
/// `tp_size`, `pp_size`, `dp_size`, `enable_dp_attention`, `kv_cache_dtype`,
/// `speculative_algorithm`, `speculative_num_draft_tokens`).
pub(crate) fn basis(
    meta: &RunMeta,
    server: Option<&ServerLaunch>,
    points: &[&PointRecord],
    opts: &BoundOptions,
) -> Basis {
    let mut assumptions = Vec::new();
    let launch = Launch { server };
    let layout = launch.layout(opts, &mut assumptions);
    let time_scale = launch.time_scale(&mut assumptions);
    let (speculative, width) = launch.speculation();
    let verify_width = if speculative { width } else { None };
    if speculative {
        match verify_width {
            Some(w) => assumptions.push(format!(
                "speculative decoding: a verify step puts {w} tokens per sequence through the weights (its verify width), whatever it accepts"
            )),
            None => assumptions.push(
                "speculative decoding is on but its verify width is not known (speculative_num_draft_tokens): a step's weights are counted for the tokens it accepted, fewer than it verifies, so its floor is low".into(),
            ),
        }
    }
    // A verify step emits at most its draft width: at one, exactly one token per step.
    let one_wide = width == Some(1.0);
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
        layout,
        tokens_per_step,
        verify_width,
        speculative,
        unscale: time_scale.unwrap_or(1.0),
        assumptions,
    }
}

/// A group's server launch, read for the settings a bound depends on.
struct Launch<'a> {
    server: Option<&'a ServerLaunch>,
}

/// A count from a flag or `/server_info` value; one that does not fit is kept too large, for
/// `Layout::check` to refuse.
fn as_u32(v: &serde_json::Value) -> Option<u32> {
    v.as_u64()
        .or_else(|| v.as_str()?.parse().ok())
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// A switch from a flag or `/server_info` value (a boolean, or the string `true`).
fn as_bool(v: &serde_json::Value) -> Option<bool> {
    v.as_bool().or_else(|| v.as_str().map(|s| s == "true"))
}

/// A number from a flag or `/server_info` value (a number, or a string that parses).
fn as_f64(v: &serde_json::Value) -> Option<f64> {
    v.as_f64().or_else(|| v.as_str()?.parse().ok())
}

impl<'a> Launch<'a> {
    /// The first of the flags `names` the server was launched with.
    fn flag(&self, names: &[&str]) -> Option<&'a serde_json::Value> {
        self.server
            .and_then(|s| names.iter().find_map(|n| s.args.get(*n)))
    }

    /// `/server_info`'s `key`, where it is there and not null.
    fn info(&self, key: &str) -> Option<&'a serde_json::Value> {
        self.server
            .and_then(|s| s.server_info.as_ref())
            .and_then(|i| i.get(key))
            .filter(|v| !v.is_null())
    }

    /// The parallel layout and KV cache dtype (`opts` first, then the flags, then
    /// `/server_info`), saying in `assumptions` what was taken.
    fn layout(&self, opts: &BoundOptions, assumptions: &mut Vec<String>) -> Layout {
        let (flag, info) = (|n: &[&str]| self.flag(n), |k: &str| self.info(k));
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
        if pp > 1 {
            assumptions.push(format!(
                "pipeline parallelism {pp}: a token passes the {pp} stages one after another, so a step's floor is every stage's reads in series (each stage's GPU reads its share)"
            ));
        }
        let dp = flag(&["dp-size", "dp"])
            .and_then(as_u32)
            .or_else(|| info("dp_size").and_then(as_u32))
            .unwrap_or(1);
        // Expert parallelism (SGLang `--ep-size`, vLLM `--enable-expert-parallel`) puts whole
        // experts on each GPU instead of a slice of every one: under uniform routing a GPU's
        // mean read is the same, the busiest GPU's more. The floor is the mean's, and said so.
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
        Layout {
            tp,
            pp,
            dp,
            dp_attention,
            kv_cache_dtype,
        }
    }

    /// The simulator's time scale, where it ran at one other than 1 (said in `assumptions`).
    fn time_scale(&self, assumptions: &mut Vec<String>) -> Option<f64> {
        // The simulator at `sim-time-scale: s` runs every modelled duration s times as long
        // (0.1: ten times faster): a step measured there is s times the model's step.
        let time_scale = self
            .flag(&["sim-time-scale"])
            .and_then(as_f64)
            .or_else(|| self.info("sim_time_scale").and_then(as_f64))
            .filter(|s| s.is_finite() && *s > 0.0 && *s != 1.0);
        if let Some(s) = time_scale {
            assumptions.push(format!(
                "the simulator ran at sim-time-scale {s}: measured steps are divided by {s}"
            ));
        }
        time_scale
    }

    /// Whether speculative decoding is on, and the verify pass's width where a flag or
    /// `/server_info` gives one (whether or not it is on).
    fn speculation(&self) -> (bool, Option<f64>) {
        let (flag, info) = (|n: &[&str]| self.flag(n), |k: &str| self.info(k));
        // The draft-shape flags alone do nothing (SGLang ignores them without an algorithm).
        let speculative = self
            .server
            .is_some_and(|s| super::speculative::switched_on(&s.args))
            || info("speculative_algorithm").is_some()
            || info("internal_states")
                .and_then(|v| v.get(0)?.get("avg_spec_accept_length"))
                .is_some_and(|v| !v.is_null());
        // The verify pass's width: SGLang's draft tokens, vLLM's speculative tokens and the
        // one it verifies them after.
        let vllm_width = flag(&["speculative-config"])
            .and_then(|v| match v {
                serde_json::Value::String(s) => serde_json::from_str::<serde_json::Value>(s).ok(),
                other => Some(other.clone()),
            })
            .and_then(|c| c.get("num_speculative_tokens")?.as_u64())
            .map(|n| n + 1);
        let width = flag(&["speculative-num-draft-tokens"])
            .and_then(as_u32)
            .map(u64::from)
            .or_else(|| info("speculative_num_draft_tokens").and_then(|v| v.as_u64()))
            .or(vllm_width)
            .filter(|w| (1..=MAX_TOKENS_PER_STEP as u64).contains(w))
            .map(|w| w as f64);
        (speculative, width)
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
/// fp8 (its dtype, `quant_method: fp8`, compressed-tensors with float 8-bit weights and
/// activations), else bf16 (int4/int8 weights are widened to bf16 for the multiply).
pub(crate) fn prefill_precision(model: &ModelFacts) -> Precision {
    let fp8 = model.dtype.contains("float8")
        || model.dtype.contains("fp8")
        || model.quantization.as_ref().is_some_and(|q| q.fp8_matmuls);
    if fp8 { Precision::Fp8 } else { Precision::Bf16 }
}

/// The relative standard error of a metric's mean, from its 95% interval.
fn relative_se(p: &PointRecord, metric: &str) -> Option<f64> {
    let s = p.metrics.get(metric)?;
    let (lo, hi) = (s.ci95_low?, s.ci95_high?);
    (s.mean > 0.0 && hi >= lo).then(|| (hi - lo) / (2.0 * 1.96) / s.mean)
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
    assumptions.push(
        "weights per GPU as SGLang and vLLM lay them out over tensor-parallel ranks: MLA's down-projections and the MoE router whole on every rank, GQA's k and v split over at most the KV heads, the rest split evenly".into(),
    );
    let precision = prefill_precision(&opts.model);
    let mut rows = Vec::new();
    let mut ungraded: Vec<(f64, Vec<String>)> = Vec::new();
    let mut findings = Vec::new();
    let mut first_basis: Option<Basis> = None;
    // Each group is graded with its own launch's layout.
    for group in distinct_groups(points) {
        let members: Vec<&PointRecord> = points.iter().filter(|p| p.group == group).collect();
        let server = meta
            .servers
            .iter()
            .find(|s| s.group == group)
            .or(meta.servers.first());
        let b = basis(meta, server, &members, opts);
        b.layout
            .check(&opts.model)
            .map_err(|source| BoundError::Layout {
                group: group.to_string(),
                source,
            })?;
        for a in &b.assumptions {
            if !assumptions.contains(a) {
                assumptions.push(a.clone());
            }
        }
        for p in members {
            if meta.experiment.load.is_some() || p.status() == PointStatus::Failed || p.ok == 0 {
                continue;
            }
            let default_batch = f64::from(meta.experiment.concurrency);
            if let Some(row) =
                grade_point(p, opts, &b, &gpu, precision, default_batch, &mut ungraded)
            {
                if let Some(pf) = row.prefill
                    && pf.fraction_of_peak > grade::PREFILL_ABOVE_PEAK
                {
                    findings.push(format!(
                        "{}: its prefill ran at {:.0}% of the GPU's peak {} FLOP/s, which no GPU can: the measurement (a cached prompt counted as new) or the model facts (fewer FLOPs than they say) are wrong",
                        p.id,
                        pf.fraction_of_peak * 100.0,
                        precision_name(precision)
                    ));
                }
                rows.push((row, b.layout.clone(), b.verify_width));
            }
        }
        if first_basis.is_none() {
            first_basis = Some(b);
        }
    }
    let not_graded = not_graded_notes(ungraded);
    if rows.is_empty() && !not_graded.is_empty() {
        return Err(BoundError::NotIsolated(not_graded.join("; ")));
    }
    if rows.is_empty() {
        return Err(BoundError::NothingToGrade);
    }
    let first = first_basis.expect("a graded row has a basis");
    let sweeps = sweeps(&rows, opts, &gpu);
    let rows: Vec<BoundRow> = rows.into_iter().map(|(r, _, _)| r).collect();
    // Measured per point: the run's figure is their mean (each row keeps its own).
    let tokens_per_step = if rows
        .iter()
        .any(|r| r.tokens_per_step != first.tokens_per_step)
    {
        rows.iter().map(|r| r.tokens_per_step).sum::<f64>() / rows.len() as f64
    } else {
        first.tokens_per_step
    };
    Ok(BoundReport {
        gpu,
        layout: first.layout,
        tokens_per_step,
        precision,
        assumptions,
        rows,
        sweeps,
        not_graded,
        findings,
    })
}

/// The points' groups, each once, in the order they first appear.
fn distinct_groups(points: &[PointRecord]) -> Vec<&str> {
    let mut groups: Vec<&str> = points.iter().map(|p| p.group.as_str()).collect();
    groups.dedup();
    let mut seen = std::collections::HashSet::new();
    groups.retain(|g| seen.insert(*g));
    groups
}

/// One line per batch of points not graded (their ids), saying why the measurement cannot
/// grade them.
fn not_graded_notes(ungraded: Vec<(f64, Vec<String>)>) -> Vec<String> {
    ungraded
        .into_iter()
        .map(|(batch, ids)| {
            format!(
                "{} (concurrency {batch:.0}): other requests' prefills run between a request's decode steps (as each starts, and as a finished one is replaced in the closed loop), so a request's decode speed is not its steps' alone and the measurement cannot grade them; points at concurrency 1 are graded",
                ids.join(", ")
            )
        })
        .collect()
}

/// Fits each sweep: the rows that share layout, verify width and batch (their `line`), at
/// two contexts or more.
fn sweeps(
    rows: &[(BoundRow, Layout, Option<f64>)],
    opts: &BoundOptions,
    gpu: &GpuSpec,
) -> Vec<(String, Result<ContextSweep, grade::NoLine>)> {
    let mut lines: Vec<String> = Vec::new();
    for (r, _, _) in rows {
        if !lines.contains(&r.line) {
            lines.push(r.line.clone());
        }
    }
    lines
        .into_iter()
        .filter_map(|line| {
            let on: Vec<&(BoundRow, Layout, Option<f64>)> =
                rows.iter().filter(|(r, _, _)| r.line == line).collect();
            let (head, layout, _) = on[0];
            let mut contexts: Vec<f64> = on.iter().map(|(r, _, _)| r.context).collect();
            contexts.sort_by(f64::total_cmp);
            contexts.dedup();
            if contexts.len() < 2 {
                return None;
            }
            let pts: Vec<SweepPoint> = on
                .iter()
                .map(|(r, _, _)| SweepPoint {
                    context: r.context,
                    step_s: r.step.step_s,
                    step_se: r.step_se,
                })
                .collect();
            // The floor line at the points' mean tokens through the weights (the verify width
            // under speculation: the same for every point of the line).
            let verify = on.iter().map(|(r, _, _)| r.verify_tokens).sum::<f64>() / on.len() as f64;
            let at = |ctx: f64| step::decode_step(&opts.model, layout, head.batch, ctx, verify);
            Some((
                line,
                grade::context_sweep(&pts, at, gpu, crate::measure::stats::t975),
            ))
        })
        .collect()
}

/// One point graded under its group's basis, or None (its id in `not_graded`, by batch, where
/// the measurement does not isolate its steps).
fn grade_point(
    p: &PointRecord,
    opts: &BoundOptions,
    b: &Basis,
    gpu: &GpuSpec,
    precision: Precision,
    default_batch: f64,
    not_graded: &mut Vec<(f64, Vec<String>)>,
) -> Option<BoundRow> {
    let mean = |k: &str| {
        p.metrics
            .get(k)
            .map(|s| s.mean)
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    let (decode, prompt) = (mean("decode_tok_s")?, mean("prompt_tokens")?);
    let context = prompt + mean("completion_tokens").unwrap_or(0.0) / 2.0;
    let batch = p
        .values
        .get("concurrency")
        .and_then(|v| v.as_f64())
        .unwrap_or(default_batch)
        .max(1.0);
    if batch > 1.0 {
        match not_graded.iter_mut().find(|(b, _)| *b == batch) {
            Some((_, ids)) => ids.push(p.id.clone()),
            None => not_graded.push((batch, vec![p.id.clone()])),
        }
        return None;
    }
    // A measured accept length is the point's own; `--tokens-per-step` overrides it.
    let tokens_per_step = opts
        .tokens_per_step
        .or_else(|| measured_tokens_per_step(p))
        .unwrap_or(b.tokens_per_step);
    let verify_tokens = b.verify_width.unwrap_or(tokens_per_step);
    let s = step::decode_step(&opts.model, &b.layout, batch, context, verify_tokens);
    let step_s = tokens_per_step / decode / b.unscale;
    // The step's uncertainty: with measured verify steps, their time's (each request's
    // decode time over its verify steps); else the decode speed's.
    let measured_steps = opts.tokens_per_step.is_none() && measured_tokens_per_step(p).is_some();
    let relative = if measured_steps {
        relative_se(p, "verify_step_s")
    } else {
        relative_se(p, "decode_tok_s")
    };
    let step_se = relative.map(|r| r * step_s);
    // prefill_tok_s is measured over requests that found nothing cached: the whole prompt
    // is new, and its time is the prompt over the speed.
    let prefill = mean("prefill_tok_s").map(|speed| {
        let work = step::prefill(&opts.model, &b.layout, prompt, 0.0);
        grade::prefill(&work, gpu, precision, prompt / speed / b.unscale)
    });
    let line = line_label(batch, &b.layout, b.speculative, b.verify_width);
    Some(BoundRow {
        point: p.id.clone(),
        line,
        context,
        batch,
        step: grade::decode(&s, gpu, step_s),
        step_se,
        weight_bytes: s.weight_bytes,
        kv_bytes: s.kv_bytes,
        prompt_tokens: prompt,
        prefill,
        tokens_per_step,
        verify_tokens,
    })
}

/// What sets a sweep's line apart: the batch, and every setting that changes a step.
fn line_label(batch: f64, layout: &Layout, speculative: bool, verify: Option<f64>) -> String {
    let mut label = format!("batch {batch:.0}");
    if layout.tp != 1 || layout.pp != 1 {
        let _ = write!(label, ", tp {} pp {}", layout.tp, layout.pp);
    }
    if layout.dp_attention {
        let _ = write!(label, ", dp attention {}", layout.dp);
    }
    if let Some(kv) = layout.kv_cache_dtype.as_deref().filter(|k| *k != "auto") {
        let _ = write!(label, ", KV cache {kv}");
    }
    if speculative {
        match verify {
            Some(w) => {
                let _ = write!(label, ", speculative (verify width {w:.0})");
            }
            None => label.push_str(", speculative"),
        }
    }
    label
}

pub(crate) fn precision_name(p: Precision) -> String {
    serde_json::to_value(p)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The GPU named in the server host's facts (SSH and Slurm hosts record `nvidia-smi`'s names).
pub(crate) fn host_gpu(meta: &RunMeta) -> Option<String> {
    let facts = meta.server_host.as_ref()?;
    let gpus = facts.get("gpus")?.as_array()?;
    gpus.first()?.get("name")?.as_str().map(str::to_string)
}

/// A sweep's line in words: per token of context where the KV bytes grow evenly over it,
/// per GB of KV cache read where a window ends inside it.
pub(crate) fn line_text(s: &ContextSweep) -> String {
    if s.linear_in_context {
        format!(
            "step = {:.3} ms + {:.3} us x context",
            s.fixed_s * 1e3,
            s.slope_s_per_token * 1e6
        )
    } else {
        format!(
            "step = {:.3} ms + {:.3} ms per GB of KV cache read per GPU (a window ends inside the sweep)",
            s.fixed_s * 1e3,
            s.slope_s_per_gb * 1e3
        )
    }
}
