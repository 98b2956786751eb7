//! `vllm bench serve --save-result` read into servebench's metrics (vllm/benchmarks/serve.py:
//! `result` and its top-level fields). With `--save-detailed` the file holds each request's
//! `ttfts` and `latencies` (seconds), `itls` (each request's chunk gaps, seconds),
//! `input_lens`, `output_lens` and `errors`, summarised here as servebench does; without it,
//! only the run's rates (`request_throughput`, `output_throughput`, `total_token_throughput`)
//! are imported, as its mean/median/p99 alone are not a distribution servebench can keep.
//!
//! vLLM's ITL is the gap between streamed chunks (servebench's `icl_s`); its TPOT is
//! (latency - TTFT) / (output tokens - 1), servebench's `tpot_s`. A success's `input_lens` and
//! `output_lens` are the server's usage counts where the stream carries them (vLLM's openai
//! backends ask for them), else its client tokenizer's; a failure keeps the client's prompt
//! count, a 0 output and a 0 TTFT, so it is left out as vLLM's own summary leaves it out.
//! Checked on a file vLLM 0.33.0 wrote (tests/fixtures/import/vllm-bench).

use std::path::Path;

use indexmap::IndexMap;
use serde_json::{Value, json};

use servebench_model::results::meta::ImportedFrom;
use servebench_model::results::records::Stat;

use super::import_common::{ImportError, Imported, json_error, point, read_bounded, stat_of};

pub(crate) fn read(path: &Path) -> Result<Imported, ImportError> {
    let bytes = read_bounded(path)?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| json_error(path, 0, &e))?;
    if v.get("request_throughput").is_none() || v.get("completed").is_none() {
        return Err(ImportError::File {
            path: path.to_path_buf(),
            message:
                "not a `vllm bench serve --save-result` file (no `completed`, `request_throughput`)"
                    .into(),
        });
    }
    let nums = |k: &str| -> Vec<f64> {
        v.get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default()
    };
    // Failed requests keep a 0 TTFT and an error text; only successes are measured.
    let errors: Vec<bool> = v
        .get("errors")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|e| e.as_str().is_some_and(|s| !s.is_empty()))
                .collect()
        })
        .unwrap_or_default();
    let ok_only = |xs: Vec<f64>| -> Vec<f64> {
        xs.into_iter()
            .enumerate()
            .filter(|(i, _)| !errors.get(*i).copied().unwrap_or(false))
            .map(|(_, x)| x)
            .collect()
    };
    let ttfts = ok_only(nums("ttfts"));
    let latencies = ok_only(nums("latencies"));
    let outs = ok_only(nums("output_lens"));
    let itls: Vec<f64> = v
        .get("itls")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .enumerate()
                .filter(|(i, _)| !errors.get(*i).copied().unwrap_or(false))
                .filter_map(|(_, r)| r.as_array())
                .flatten()
                .filter_map(Value::as_f64)
                .collect()
        })
        .unwrap_or_default();
    let tpots: Vec<f64> = latencies
        .iter()
        .zip(&ttfts)
        .zip(&outs)
        .filter(|(_, o)| **o > 1.0)
        .map(|((l, t), o)| (l - t) / (o - 1.0))
        .collect();
    let mut metrics: IndexMap<String, Stat> = IndexMap::new();
    for (name, xs) in [
        ("ttft_s", ttfts),
        ("e2e_s", latencies),
        ("tpot_s", tpots),
        ("icl_s", itls),
        ("prompt_tokens", ok_only(nums("input_lens"))),
        ("completion_tokens", outs),
    ] {
        if let Some(s) = stat_of(&xs) {
            metrics.insert(name.to_string(), s);
        }
    }
    for (key, name) in [
        ("request_throughput", "throughput_req_s"),
        ("output_throughput", "output_tok_s"),
        ("total_token_throughput", "total_tok_s"),
    ] {
        if let Some(s) = v
            .get(key)
            .and_then(Value::as_f64)
            .and_then(|x| stat_of(&[x]))
        {
            metrics.insert(name.to_string(), s);
        }
    }
    let count = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
    let p = point(count("completed"), count("failed"), metrics);
    Ok(imported(path, &v, p))
}

/// The run's provenance: what vLLM recorded of its command, and its method.
fn imported(
    path: &Path,
    v: &Value,
    point: servebench_model::results::records::PointRecord,
) -> Imported {
    let keep = [
        "date",
        "endpoint_type",
        "backend",
        "label",
        "model_id",
        "tokenizer_id",
        "num_prompts",
        "request_rate",
        "burstiness",
        "max_concurrency",
        "duration",
    ];
    let config: serde_json::Map<String, Value> = keep
        .iter()
        .filter_map(|k| v.get(*k).map(|x| (k.to_string(), x.clone())))
        .collect();
    let mut values = IndexMap::new();
    let mut experiment = json!({});
    if let Some(c) = v.get("max_concurrency").filter(|c| c.is_u64()) {
        values.insert("concurrency".to_string(), c.clone());
        experiment["concurrency"] = c.clone();
    } else if let Some(r) = v.get("request_rate").filter(|r| r.is_number()) {
        values.insert("rate".to_string(), r.clone());
    }
    if let Some(m) = v.get("model_id").filter(|m| m.is_string()) {
        experiment["server"] = json!({ "model": m });
    }
    let mut notes = Vec::new();
    if v.get("ttfts").is_none() {
        notes.push("saved without --save-detailed: no per-request values, so only the run's rates are imported (its mean, median and p99 alone are not a distribution)".to_string());
    }
    let method = [
        (
            "TTFT origin",
            "request sent → first streamed chunk with content (vLLM `ttft`, client clock)",
        ),
        (
            "ITL",
            "gaps between streamed chunks (vLLM `itl`, imported as `icl_s`); TPOT (latency − TTFT) / (output tokens − 1) as `tpot_s`",
        ),
        ("warm-up", "one test request before the run, not counted"),
        (
            "cache state",
            "not controlled: no flush, no per-request nonce",
        ),
        ("client placement", "not recorded"),
        ("prompts", "vLLM's dataset sampler (`--dataset-name`)"),
    ];
    Imported {
        from: ImportedFrom {
            tool: "vllm-bench".into(),
            version: None,
            files: vec![path.display().to_string()],
            config: Some(Value::Object(config)),
            method: method
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            recorded: Vec::new(),
            notes,
        },
        points: vec![{
            let mut point = point;
            point.values = values;
            point
        }],
        requests: Vec::new(),
        experiment,
        started_at: None,
        name: None,
    }
}
