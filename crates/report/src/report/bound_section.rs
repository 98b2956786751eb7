//! The report's "Against the hardware" section: every closed-loop point's decode step and
//! prefill graded against what the GPU allows (`bound::grade_on`), from the model config the
//! run kept (`meta.servers[].model_config`) and the spec's `server.gpu` or the host's facts.
//! What could not be known leaves the points ungraded, with the reason and the fix.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use roofline::{GpuSpec, ModelFacts};
use servebench_model::results::meta::{ModelConfigRecord, RunMeta};
use servebench_model::results::records::PointRecord;
use servebench_model::spec::types::{GpuChoice, ModelFactsSource};

use super::bound::{self, BoundOptions, BoundReport};
use super::chart_link::ChartLink;

/// Where the section's chart is drawn, in the run directory.
pub(crate) const CHART_FILE: &str = "bound-step.svg";

/// Every closed-loop point graded against the GPU's peak bandwidth and FLOP/s.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct BoundSection {
    /// Why the points are not graded, each with how to give what is missing; empty when they
    /// are.
    pub missing: Vec<String>,
    /// Where the model's `config.json` came from (`spec file ...`, `local:/models/x/config.json`).
    pub model_config_origin: Option<String>,
    /// The GPU graded against, with its figures' source; None when not known.
    pub gpu: Option<GpuBasis>,
    /// Tensor-parallel ranks (GPUs a layer is split over).
    pub tp: u32,
    /// Pipeline stages.
    pub pp: u32,
    /// The KV cache's element type as the server was told (`auto`/None: the model's).
    pub kv_cache_dtype: Option<String>,
    /// Tokens one decode step gives each sequence (1 unless speculative decoding's mean accept
    /// length is known).
    pub tokens_per_step: f64,
    /// Whether the points were graded with their own measured accept lengths (each row's
    /// `tokens_per_step`) rather than one figure for the run.
    pub tokens_per_step_per_point: bool,
    /// The precision prefills are graded at (`bf16`, `fp8`).
    pub prefill_precision: String,
    /// What was assumed or not said by the config or the run, one sentence each.
    pub assumptions: Vec<String>,
    /// One row per graded point, in record order.
    pub rows: Vec<BoundRow>,
    /// Points left ungraded, each with why the measurement does not isolate their steps.
    pub not_graded: Vec<String>,
    /// What the grades say is wrong beyond the sweeps (a prefill above the peak FLOP/s).
    pub findings: Vec<String>,
    /// One line per set of points that share every setting that changes a step (batch,
    /// layout, KV dtype, speculation and its verify width), with two contexts or more.
    pub sweeps: Vec<BoundSweep>,
    /// Measured step time against context beside the floor (`charts/bound-step.svg`).
    pub chart: Option<ChartLink>,
}

/// The GPU's peak figures.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct GpuBasis {
    pub name: String,
    /// Peak memory bandwidth, GB/s.
    pub bandwidth_gb_s: f64,
    /// Dense peak TFLOP/s at the prefill's precision.
    pub prefill_peak_tflops: f64,
    /// Where the figures come from.
    pub source: String,
}

/// One point against the hardware.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct BoundRow {
    /// Point id (`p003`).
    pub point: String,
    /// Human label, as in the results tables.
    pub label: String,
    /// The sweep line it is on (`batch 1, speculative (verify width 4)`).
    pub line: String,
    /// Mean context during decode: prompt plus half the output, tokens.
    pub context_tokens: f64,
    /// Sequences decoding together (the point's concurrency).
    pub batch: f64,
    /// Decode tokens per step per sequence this point was graded with (its measured accept
    /// length under speculative decoding).
    pub tokens_per_step: f64,
    /// Tokens per sequence a step puts through the weights: the verify width under
    /// speculative decoding (whatever it accepts), else the tokens per step.
    pub verify_tokens_per_step: f64,
    /// Measured seconds per decode step: tokens per step over the per-request decode tok/s
    /// (divided by the simulator's time scale).
    pub step_s: f64,
    /// Seconds the step's bytes take at peak bandwidth: no kernel can be faster.
    pub step_floor_s: f64,
    /// Weight bytes each GPU reads per step.
    pub weight_bytes_per_gpu: f64,
    /// KV cache bytes each GPU reads per step at this context.
    pub kv_bytes_per_gpu: f64,
    /// (weights + KV) per GPU over the step time, GB/s.
    pub effective_bandwidth_gbs: f64,
    /// Effective over peak bandwidth (1.0: at the floor).
    pub decode_bw_fraction: f64,
    /// Prefill FLOPs per GPU of the mean prompt (linear layers and attention); None without a
    /// prefill speed.
    pub prefill_flops_per_gpu: Option<f64>,
    /// Those FLOPs over the prefill time (prompt tokens / prefill tok/s), TFLOP/s per GPU.
    pub prefill_tflops: Option<f64>,
    /// Achieved over the GPU's dense peak at the prefill's precision.
    pub prefill_flops_fraction: Option<f64>,
}

/// A context sweep's line and what it means.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct BoundSweep {
    /// What its points share (`batch 1`, `batch 1, speculative (verify width 4)`).
    pub line: String,
    pub batch: f64,
    /// Points on the line.
    pub points: usize,
    /// The line in words (`step = 0.200 ms + 17.800 us x context`); None without a line.
    pub equation: Option<String>,
    /// Why there is no line (the KV cache read does not change over the contexts, ...).
    pub no_line: Option<String>,
    /// The line at zero context, seconds per step.
    pub fixed_s: f64,
    /// Seconds per step one more token of context adds (at the shortest context).
    pub slope_s_per_token: f64,
    /// Whether the KV bytes per token of context are the same over the sweep (no window ends
    /// inside it), so the line is `fixed + slope x context`.
    pub linear_in_context: bool,
    /// Seconds per step one more GB of KV cache read per GPU adds.
    pub slope_s_per_gb: f64,
    /// The bandwidth attention reads the cache at: one over the slope per byte of KV cache
    /// read per GPU, GB/s.
    pub marginal_gb_s: f64,
    /// That over peak bandwidth.
    pub marginal_fraction: f64,
    /// Its 95% interval, GB/s (the upper end None where it is unbounded); None without one.
    pub marginal_interval_gb_s: Option<(f64, Option<f64>)>,
    /// The weights' read time at peak bandwidth, seconds.
    pub weight_floor_s: f64,
    /// What the line means, one sentence each (`its context-dependent part runs at ...`).
    pub findings: Vec<String>,
}

/// The section for a run, None when no point has a decode speed to grade (open-loop runs,
/// runs whose points all failed).
pub(crate) fn section(
    meta: &RunMeta,
    points: &[PointRecord],
    labels: &IndexMap<String, String>,
) -> Option<BoundSection> {
    if meta.experiment.load.is_some() || !points.iter().any(gradable) {
        return None;
    }
    let mut missing = Vec::new();
    let record = meta.servers.iter().find_map(|s| s.model_config.as_ref());
    let origin = record.map(|r| r.origin.clone()).or_else(|| {
        matches!(
            meta.experiment.server.model_facts,
            Some(ModelFactsSource::Inline(_))
        )
        .then(|| "inline in the spec (server.model_facts)".to_string())
    });
    let model = model_of(meta, record, origin.as_deref(), &mut missing);
    let mut assumptions = Vec::new();
    let gpu = gpu_of(
        meta,
        record,
        origin.as_deref(),
        &mut missing,
        &mut assumptions,
    );
    let (Some(model), Some(gpu)) = (model, gpu) else {
        return Some(ungraded(missing, origin));
    };
    let opts = BoundOptions {
        model,
        gpu: None,
        tp: None,
        pp: None,
        kv_cache_dtype: None,
        tokens_per_step: None,
    };
    match bound::grade_on(meta, points, &opts, gpu, assumptions) {
        Ok(r) => Some(graded(&r, origin, labels)),
        Err(e) => Some(ungraded(vec![e.to_string()], origin)),
    }
}

/// The model's facts from the config the run kept (or the spec's inline one); None, with why
/// and the fix in `missing`, when there is none or it cannot be read.
fn model_of(
    meta: &RunMeta,
    record: Option<&ModelConfigRecord>,
    origin: Option<&str>,
    missing: &mut Vec<String>,
) -> Option<ModelFacts> {
    let config = record.and_then(|r| r.config.clone()).or_else(|| {
        match &meta.experiment.server.model_facts {
            Some(ModelFactsSource::Inline(m)) => {
                Some(serde_json::Value::Object(m.clone().into_iter().collect()))
            }
            _ => None,
        }
    });
    match (config, record.and_then(|r| r.missing.as_ref())) {
        (Some(c), _) => match ModelFacts::from_hf_config(&c) {
            Ok(m) => Some(m),
            Err(e) => {
                missing.push(format!(
                    "the model config ({}) cannot be read as a Hugging Face config: {e}; fix it or give another in `server.model_facts:`",
                    origin.unwrap_or("the run")
                ));
                None
            }
        },
        (None, Some(why)) => {
            missing.push(format!(
                "the model's config.json could not be read ({}): {why}",
                origin.unwrap_or("?")
            ));
            None
        }
        (None, None) => {
            missing.push("the run kept no model config: give `server.model_facts:` (a path to the model's config.json, relative to the spec, or the config inline) and run it again, or grade it with `servebench bound RUN_DIR --model-config FILE`".into());
            None
        }
    }
}

/// The GPU graded against: the spec's `server.gpu`, else the one the model facts came with,
/// else the host's; None, with why and the fix in `missing`, when none is known. What was
/// assumed goes to `assumptions`.
fn gpu_of(
    meta: &RunMeta,
    record: Option<&ModelConfigRecord>,
    origin: Option<&str>,
    missing: &mut Vec<String>,
    assumptions: &mut Vec<String>,
) -> Option<GpuSpec> {
    match &meta.experiment.server.gpu {
        Some(GpuChoice::Catalogue(name)) => match bound::find_gpu(name) {
            Ok(g) => Some(g),
            Err(e) => {
                missing.push(format!("server.gpu: {e}"));
                None
            }
        },
        Some(GpuChoice::Custom(c)) if super::bound_check::custom_gpu_problem(c).is_some() => {
            let (field, why) = super::bound_check::custom_gpu_problem(c).unwrap_or_default();
            missing.push(format!("server.gpu.{field}: {why}"));
            None
        }
        Some(GpuChoice::Custom(c)) => Some(GpuSpec {
            id: "custom".into(),
            name: c.name.clone(),
            memory_gb: 0.0,
            bandwidth_gb_s: c.bandwidth_gb_s,
            bf16_tflops: c.bf16_tflops,
            fp8_tflops: c.fp8_tflops,
            fp4_tflops: c.fp4_tflops,
            source: format!("given in the spec: {}", c.source),
        }),
        None if record.and_then(|r| r.gpu.as_ref()).is_some() => {
            let name = record.and_then(|r| r.gpu.clone()).unwrap_or_default();
            match bound::find_gpu(&name) {
                Ok(g) => {
                    assumptions.push(format!(
                        "GPU: {}, the one the model facts came with ({})",
                        g.name,
                        origin.unwrap_or("the run")
                    ));
                    Some(g)
                }
                Err(e) => {
                    missing.push(format!("the model facts' GPU: {e}"));
                    None
                }
            }
        }
        None => match bound::host_gpu(meta) {
            Some(name) => match bound::find_gpu(&name) {
                Ok(g) => {
                    assumptions.push(format!("GPU: {name}, from the host's facts"));
                    Some(g)
                }
                Err(e) => {
                    missing.push(format!(
                        "the host's GPU: {e} (or give its figures in `server.gpu:`)"
                    ));
                    None
                }
            },
            None => {
                missing.push(format!(
                    "the run does not say which GPU served it (only SSH and Slurm hosts record nvidia-smi's names): give `server.gpu:` (one of {}, or `{{ name, bandwidth_gb_s, bf16_tflops, source }}`)",
                    bound::known()
                ));
                None
            }
        },
    }
}

/// A point `grade_on` can grade: it finished with a decode speed and a prompt length.
fn gradable(p: &PointRecord) -> bool {
    p.ok > 0
        && ["decode_tok_s", "prompt_tokens"]
            .iter()
            .all(|k| p.metrics.get(*k).is_some_and(|s| s.count > 0))
}

fn ungraded(missing: Vec<String>, origin: Option<String>) -> BoundSection {
    BoundSection {
        missing,
        model_config_origin: origin,
        gpu: None,
        tp: 1,
        pp: 1,
        kv_cache_dtype: None,
        tokens_per_step: 1.0,
        tokens_per_step_per_point: false,
        prefill_precision: "bf16".into(),
        assumptions: Vec::new(),
        rows: Vec::new(),
        not_graded: Vec::new(),
        findings: Vec::new(),
        sweeps: Vec::new(),
        chart: None,
    }
}

fn graded(
    r: &BoundReport,
    origin: Option<String>,
    labels: &IndexMap<String, String>,
) -> BoundSection {
    let precision = serde_json::to_value(r.precision)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let rows: Vec<BoundRow> = r
        .rows
        .iter()
        .map(|row| BoundRow {
            point: row.point.clone(),
            label: labels
                .get(&row.point)
                .cloned()
                .unwrap_or_else(|| row.point.clone()),
            line: row.line.clone(),
            context_tokens: row.context,
            batch: row.batch,
            tokens_per_step: row.tokens_per_step,
            verify_tokens_per_step: row.verify_tokens,
            step_s: row.step.step_s,
            step_floor_s: row.step.floor_s,
            weight_bytes_per_gpu: row.weight_bytes,
            kv_bytes_per_gpu: row.kv_bytes,
            effective_bandwidth_gbs: row.step.effective_gb_s,
            decode_bw_fraction: row.step.fraction_of_peak,
            prefill_flops_per_gpu: row.prefill.map(|p| p.flops),
            prefill_tflops: row.prefill.map(|p| p.achieved_tflops),
            prefill_flops_fraction: row.prefill.map(|p| p.fraction_of_peak),
        })
        .collect();
    let chart = (rows.len() >= 2).then(|| ChartLink {
        title: "Decode step time against context, beside its floor".into(),
        path: format!("charts/{CHART_FILE}"),
    });
    BoundSection {
        missing: Vec::new(),
        model_config_origin: origin,
        gpu: Some(GpuBasis {
            name: r.gpu.name.clone(),
            bandwidth_gb_s: r.gpu.bandwidth_gb_s,
            prefill_peak_tflops: r.gpu.peak_flops(r.precision) / 1e12,
            source: r.gpu.source.clone(),
        }),
        tp: r.layout.tp,
        pp: r.layout.pp,
        kv_cache_dtype: r.layout.kv_cache_dtype.clone(),
        tokens_per_step: r.tokens_per_step,
        tokens_per_step_per_point: r
            .rows
            .iter()
            .any(|row| row.tokens_per_step != r.tokens_per_step),
        prefill_precision: precision,
        assumptions: r.assumptions.clone(),
        rows,
        not_graded: r.not_graded.clone(),
        findings: r.findings.clone(),
        sweeps: r
            .sweeps
            .iter()
            .map(|(line, sweep)| {
                let batch = r
                    .rows
                    .iter()
                    .find(|row| &row.line == line)
                    .map_or(1.0, |row| row.batch);
                let points = r.rows.iter().filter(|row| &row.line == line).count();
                match sweep {
                    Ok(s) => BoundSweep {
                        line: line.clone(),
                        batch,
                        points: s.points,
                        equation: Some(super::bound::line_text(s)),
                        no_line: None,
                        fixed_s: s.fixed_s,
                        slope_s_per_token: s.slope_s_per_token,
                        linear_in_context: s.linear_in_context,
                        slope_s_per_gb: s.slope_s_per_gb,
                        marginal_gb_s: s.marginal_gb_s,
                        marginal_fraction: s.marginal_fraction,
                        marginal_interval_gb_s: s.marginal_interval_gb_s,
                        weight_floor_s: s.weight_floor_s,
                        findings: s.findings.iter().map(ToString::to_string).collect(),
                    },
                    Err(why) => BoundSweep {
                        line: line.clone(),
                        batch,
                        points,
                        equation: None,
                        no_line: Some(why.to_string()),
                        fixed_s: 0.0,
                        slope_s_per_token: 0.0,
                        linear_in_context: true,
                        slope_s_per_gb: 0.0,
                        marginal_gb_s: 0.0,
                        marginal_fraction: 0.0,
                        marginal_interval_gb_s: None,
                        weight_floor_s: 0.0,
                        findings: Vec::new(),
                    },
                }
            })
            .collect(),
        chart,
    }
}

/// Each graded point's bound as `points.jsonl` keeps it: its figures, the GPU, the layout and
/// what was assumed (graded as the report grades the run's `points`).
pub fn point_bounds(
    meta: &RunMeta,
    points: &[PointRecord],
) -> IndexMap<String, servebench_model::results::records::PointBound> {
    let section = section(meta, points, &IndexMap::new());
    let Some(s) = section.as_ref() else {
        return IndexMap::new();
    };
    let Some(gpu) = &s.gpu else {
        return IndexMap::new();
    };
    graded_values(Some(s))
        .into_iter()
        .map(|(id, figures)| {
            let bound = servebench_model::results::records::PointBound {
                figures: figures
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                gpu: gpu.name.clone(),
                peak_bandwidth_gb_s: gpu.bandwidth_gb_s,
                peak_tflops: gpu.prefill_peak_tflops,
                gpu_source: gpu.source.clone(),
                tp: s.tp,
                pp: s.pp,
                assumptions: s.assumptions.clone(),
            };
            (id, bound)
        })
        .collect()
}

/// Each graded point's figures by metric name (`decode_bw_fraction`, ...), for `expect:` and
/// `compare`.
pub(crate) fn graded_values(
    section: Option<&BoundSection>,
) -> IndexMap<String, IndexMap<&'static str, f64>> {
    section
        .into_iter()
        .flat_map(|s| &s.rows)
        .map(|r| {
            let mut m = IndexMap::new();
            m.insert("step_s", r.step_s);
            m.insert("step_floor_s", r.step_floor_s);
            m.insert("effective_bandwidth_gbs", r.effective_bandwidth_gbs);
            m.insert("decode_bw_fraction", r.decode_bw_fraction);
            if let Some(t) = r.prefill_tflops {
                m.insert("prefill_tflops", t);
            }
            if let Some(f) = r.prefill_flops_fraction {
                m.insert("prefill_flops_fraction", f);
            }
            (r.point.clone(), m)
        })
        .collect()
}
