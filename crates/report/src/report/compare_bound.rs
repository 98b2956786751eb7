//! `compare`'s "Against the hardware" table: each shared point's graded figures in every run
//! (fraction of peak bandwidth, effective bandwidth, prefill's fraction of peak FLOP/s), from
//! each run's own model config and GPU, as its report grades them.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::PointRecord;

use super::bound_section;

/// One shared point's grades in every run.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct BoundCompareRow {
    /// The point's label (`ctx=1024`).
    pub point: String,
    /// One entry per run, in run order.
    pub runs: Vec<BoundCompareCell>,
}

/// A run's grades at a point; every figure None when the run could not be graded there.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct BoundCompareCell {
    /// Effective over peak bandwidth of a decode step.
    pub decode_bw_fraction: Option<f64>,
    /// Bytes per GPU per step over the step time, GB/s.
    pub effective_bandwidth_gbs: Option<f64>,
    /// The step's floor at peak bandwidth, seconds.
    pub step_floor_s: Option<f64>,
    /// Prefill's achieved over peak FLOP/s.
    pub prefill_flops_fraction: Option<f64>,
}

/// The table and, per run that is not graded, why (`B: the run kept no model config ...`).
/// Empty when no run is graded.
/// `runs`: each run's meta and points, labelled by `labels`; `points`: each shared point's
/// label and its id in every run.
pub(crate) fn compare(
    runs: &[(&RunMeta, &[PointRecord])],
    labels: &[String],
    points: &[(String, Vec<String>)],
) -> (Vec<BoundCompareRow>, Vec<String>) {
    let mut notes = Vec::new();
    let graded: Vec<IndexMap<String, IndexMap<&'static str, f64>>> = runs
        .iter()
        .zip(labels)
        .map(|((meta, records), label)| {
            let section = bound_section::section(meta, records, &IndexMap::new());
            if let Some(s) = &section {
                notes.extend(s.missing.iter().map(|m| format!("{label}: {m}")));
            }
            bound_section::graded_values(section.as_ref())
        })
        .collect();
    if graded.iter().all(IndexMap::is_empty) {
        return (Vec::new(), Vec::new());
    }
    let rows = points
        .iter()
        .map(|(label, ids)| BoundCompareRow {
            point: label.clone(),
            runs: ids
                .iter()
                .zip(&graded)
                .map(|(id, g)| {
                    let v = |k: &str| g.get(id).and_then(|m| m.get(k)).copied();
                    BoundCompareCell {
                        decode_bw_fraction: v("decode_bw_fraction"),
                        effective_bandwidth_gbs: v("effective_bandwidth_gbs"),
                        step_floor_s: v("step_floor_s"),
                        prefill_flops_fraction: v("prefill_flops_fraction"),
                    }
                })
                .collect(),
        })
        .collect();
    (rows, notes)
}
