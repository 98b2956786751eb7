//! `servebench import`: another tool's result files made into a servebench run directory
//! (`meta.json` naming the tool, its recorded configuration and how its method differs;
//! `points.jsonl` with the metrics the files hold, in servebench's units), so `compare` and
//! `history` set them beside servebench's runs. The readers (`import_aiperf`, `import_vllm`)
//! are pure functions from bytes to an [`Imported`]; reading within budgets and writing are
//! here. What the files lack is absent, never invented.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::json;

use servebench_model::results::meta::{HostFacts, RunMeta, RunStatus};

use super::{import_aiperf, import_guidellm, import_inference_perf, import_vllm};

pub use super::import_common::{ImportError, MAX_INPUT_BYTES};
use super::import_common::{Imported, read_bounded};

/// The tools whose files `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// AIPerf 0.13: `profile_export.jsonl` and `profile_export_aiperf.json`.
    Aiperf,
    /// `vllm bench serve --save-result` (`--save-detailed` for per-request values).
    VllmBench,
    /// GuideLLM 0.8.1: `benchmarks.json` (`--output kind=json`).
    Guidellm,
    /// inference-perf 0.7: its report folder (`stage_N_lifecycle_metrics.json`, `config.yaml`).
    InferencePerf,
}

impl From {
    /// The names `--from` takes.
    pub fn names() -> &'static [&'static str] {
        &["aiperf", "vllm-bench", "guidellm", "inference-perf"]
    }
}

/// A `--from` that names no tool servebench imports.
#[derive(Debug, thiserror::Error)]
#[error("`{0}`: use one of {choices}", choices = From::names().join(", "))]
pub struct UnknownTool(String);

impl std::str::FromStr for From {
    type Err = UnknownTool;
    fn from_str(s: &str) -> Result<Self, UnknownTool> {
        match s {
            "aiperf" => Ok(From::Aiperf),
            "vllm-bench" => Ok(From::VllmBench),
            "guidellm" => Ok(From::Guidellm),
            "inference-perf" => Ok(From::InferencePerf),
            _ => Err(UnknownTool(s.to_string())),
        }
    }
}

/// Which tool wrote `path` (a file or an AIPerf artifact folder), from its names and first
/// bytes; an error naming the choices when it cannot tell.
pub fn detect(path: &Path) -> Result<From, ImportError> {
    let unsure = |why: &str| ImportError::File {
        path: path.to_path_buf(),
        message: format!(
            "{why}; name the tool with --from ({})",
            From::names().join(", ")
        ),
    };
    if path.is_dir() {
        if path.join(import_aiperf::RECORDS).is_file()
            || path.join(import_aiperf::AGGREGATE).is_file()
        {
            return Ok(From::Aiperf);
        }
        if path.join(import_guidellm::FILE).is_file()
            || path.join(import_guidellm::YAML_FILE).is_file()
        {
            return Ok(From::Guidellm);
        }
        if path.join(import_inference_perf::SUMMARY).is_file() {
            return Ok(From::InferencePerf);
        }
        return Err(unsure(
            "a folder without AIPerf's, GuideLLM's or inference-perf's result files",
        ));
    }
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with("profile_export") {
        return Ok(From::Aiperf);
    }
    if name.ends_with("_lifecycle_metrics.json") {
        return Ok(From::InferencePerf);
    }
    let bytes = read_bounded(path)?;
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(1 << 20)]);
    let has = |key: &str| head.contains(&format!("\"{key}\""));
    match (
        has("mean_ttft_ms") || (has("request_throughput") && has("num_prompts")),
        has("schema_version") && has("time_to_first_token"),
        (has("guidellm_version") && has("benchmarks"))
            || (head.contains("guidellm_version:") && head.contains("benchmarks:")),
    ) {
        (true, false, false) => Ok(From::VllmBench),
        (false, true, false) => Ok(From::Aiperf),
        (false, false, true) => Ok(From::Guidellm),
        _ => Err(unsure("cannot tell which tool wrote this file")),
    }
}

/// Reads `path` as `from`'s files and writes the run directory `out`; returns it.
/// `name` is the experiment the run joins in `history` (default `<tool>-import`).
pub fn import(
    path: &Path,
    from: Option<From>,
    out: &Path,
    name: Option<&str>,
) -> Result<PathBuf, ImportError> {
    let from = match from {
        Some(f) => f,
        None => detect(path)?,
    };
    let mut imported = match from {
        From::Aiperf => import_aiperf::read(path)?,
        From::VllmBench => import_vllm::read(path)?,
        From::Guidellm => import_guidellm::read(path)?,
        From::InferencePerf => import_inference_perf::read(path)?,
    };
    if let Some(name) = name {
        imported.name = Some(name.to_string());
    }
    write(&imported, out)?;
    Ok(out.to_path_buf())
}

/// The run's `meta.json`: an external server, the tool's recorded fields, the import.
fn meta(imported: &Imported) -> Result<RunMeta, serde_json::Error> {
    let tool = imported.from.tool.clone();
    let mut experiment = json!({
        "name": imported.name.clone().unwrap_or_else(|| format!("{tool}-import")),
        "description": format!("Imported from {tool}'s result files by servebench import."),
        "server": { "url": "http://unrecorded.invalid" },
        "workload": { "api": "openai-chat", "prompt": { "kind": "random", "tokens": 1 }, "output_tokens": 1 },
        "repeat": 1, "requests": 1, "concurrency": 1, "request_timeout": "10m",
    });
    merge(&mut experiment, &imported.experiment);
    let mut recorded = IndexMap::new();
    super::comparable::flatten("", &imported.experiment, &mut recorded);
    let mut from = imported.from.clone();
    from.recorded = recorded.into_keys().collect();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let started = imported.started_at.clone().unwrap_or_else(|| now.clone());
    serde_json::from_value(json!({
        "tool_version": env!("CARGO_PKG_VERSION"),
        "spec_file": imported.from.files.first().cloned().unwrap_or_default(),
        "spec_sha256": "",
        "experiment": experiment,
        "dimensions": imported.points.first().map(|p| p.values.keys().collect::<Vec<_>>()).unwrap_or_default(),
        "started_at": started,
        "ended_at": started,
        "status": RunStatus::Complete,
        "client_host": HostFacts::default(),
        "imported": from,
    }))
}

/// `patch`'s leaves over `base`'s.
fn merge(base: &mut serde_json::Value, patch: &serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

/// Writes `meta.json` and `points.jsonl` into `out`, which must not hold a run already.
fn write(imported: &Imported, out: &Path) -> Result<(), ImportError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImportError::Io { path, source }
    };
    let meta_path = out.join("meta.json");
    if meta_path.exists() {
        return Err(ImportError::File {
            path: out.to_path_buf(),
            message: "holds a run already (meta.json): nothing written; give another --out".into(),
        });
    }
    std::fs::create_dir_all(out).map_err(io(out))?;
    let meta = meta(imported).map_err(|e| ImportError::File {
        path: out.to_path_buf(),
        message: format!("the imported run does not make a servebench run: {e}"),
    })?;
    // Whatever a tool recorded of its command (an API key, an auth header, a hub token) is
    // redacted by the rule every other writer follows, before it reaches the disk.
    let mut meta = serde_json::to_value(&meta).expect("meta serialises");
    redact_secrets(&mut meta);
    let meta_text = serde_json::to_string_pretty(&meta).expect("meta serialises");
    std::fs::write(&meta_path, meta_text).map_err(io(&meta_path))?;
    let points = out.join("points.jsonl");
    std::fs::write(&points, jsonl(&imported.points)).map_err(io(&points))?;
    if !imported.requests.is_empty() {
        let requests = out.join("requests.jsonl");
        std::fs::write(&requests, jsonl(&imported.requests)).map_err(io(&requests))?;
    }
    Ok(())
}

/// Replaces each string that is a secret under its key (`servebench_model::redact::is_secret`:
/// `api_key`, `token`, `password`, a `Bearer` value under any name), and each `Name: value`
/// header string whose value is one, with the redaction mark; walks every object and list.
fn redact_secrets(v: &mut serde_json::Value) {
    use servebench_model::redact::{REDACTED, is_secret};
    let header = |s: &str| {
        s.split_once(':')
            .is_some_and(|(name, value)| is_secret(name.trim(), value.trim()))
    };
    match v {
        serde_json::Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                match child {
                    serde_json::Value::String(s) if is_secret(key, s) || header(s) => {
                        *s = REDACTED.into();
                    }
                    _ => redact_secrets(child),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                match item {
                    serde_json::Value::String(s) if header(s) => *s = REDACTED.into(),
                    _ => redact_secrets(item),
                }
            }
        }
        _ => {}
    }
}

/// One JSON line per item.
fn jsonl<T: serde::Serialize>(items: &[T]) -> String {
    items
        .iter()
        .map(|i| serde_json::to_string(i).expect("a record serialises") + "\n")
        .collect()
}
