//! `vllm serve`'s command line, the way vLLM's `FlexibleArgumentParser` reads it, resolved onto
//! the simulator's timing model (`--api vllm`).
//!
//! The model is a positional argument (`--model` still works, with vLLM's warning); `--flag
//! value` and `--flag=value`; underscores in names (`--max_model_len`); unique prefixes
//! (argparse's default); booleans as `--x` / `--no-x`, with `--enable-x` / `--disable-x`
//! accepted for each other; JSON flags as a JSON string or dotted keys
//! (`--speculative-config.num_speculative_tokens 3`). Source: docs/reference/vllm-facts.md §1
//! (utils/argparse_utils.py, engine/arg_utils.py, entrypoints/common/cli_args.py).
//!
//! Flags vLLM has but the simulator does not model are accepted with a warning; flags vLLM does
//! not have are refused like argparse refuses them (`vllm serve: error: unrecognized arguments:
//! ...`, exit status 2), with a did-you-mean.

use super::api::Api;
use super::config::{SimConfig, kv_pool_tokens, speculative_model};
use super::log::SimLog;
use super::profile::Profile;
use super::vllm_flags;
use super::vllm_options::VllmOptions;
use indexmap::IndexMap;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// vLLM's default model when none is given (config/model.py `ModelConfig.model`).
pub(crate) const DEFAULT_MODEL: &str = "Qwen/Qwen3-0.6B";

/// A command line vLLM's parser would refuse.
#[derive(Debug, thiserror::Error)]
pub(crate) enum VllmArgError {
    /// argparse's refusal: printed after the usage line, exit status 2.
    #[error("usage: vllm serve [model_tag] [options]\nvllm serve: error: {0}")]
    Usage(String),
    /// The profile could not be loaded (a simulator flag).
    #[error("servebench sim: error: {0}")]
    Profile(#[from] super::profile::ProfileError),
}

/// What the command line asked for.
#[derive(Debug)]
pub(crate) struct VllmParsed {
    /// The resolved configuration.
    pub config: SimConfig,
    /// Warnings to print (flags accepted but not modelled, `--model`).
    pub warnings: Vec<String>,
    /// `--help` was given.
    pub help: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Bool,
    Int,
    /// An integer that accepts `1k` (1000), `1K` (1024), `1m`, `1M`, ...
    HumanInt,
    Float,
    Str,
    /// One or more values (`nargs='+'`).
    Many,
    Json,
}

struct Flag {
    name: &'static str,
    aliases: &'static [&'static str],
    kind: Kind,
    help: &'static str,
}

const fn f(name: &'static str, kind: Kind, help: &'static str) -> Flag {
    Flag {
        name,
        aliases: &[],
        kind,
        help,
    }
}

/// The flags the simulator models (or that only shape its output), in help order.
const FLAGS: &[Flag] = &[
    f(
        "model",
        Kind::Str,
        "The model (prefer the positional form); names it in /v1/models and responses. Nothing is loaded.",
    ),
    f(
        "host",
        Kind::Str,
        "Address to bind (default: every interface, logged as 0.0.0.0).",
    ),
    f(
        "port",
        Kind::Int,
        "Port (default 8000; 0 = any free port, the chosen one is logged).",
    ),
    f(
        "reasoning-parser",
        Kind::Str,
        "Chat streams carry the model's thinking in `delta.reasoning`, the usage its count.",
    ),
    f(
        "enable-auto-tool-choice",
        Kind::Bool,
        "With --tool-call-parser: chat takes any `tool_choice` and streams calls in `delta.tool_calls`.",
    ),
    f(
        "tool-call-parser",
        Kind::Str,
        "The tool parser --enable-auto-tool-choice needs (a name vLLM registers).",
    ),
    f(
        "per-request-spec-decode-metrics",
        Kind::Str,
        "none, summary or detailed: the final usage chunk carries the request's speculative counts.",
    ),
    f(
        "served-model-name",
        Kind::Many,
        "Names the model is served under (the first in responses and metrics).",
    ),
    f(
        "api-key",
        Kind::Many,
        "Keys required as `Authorization: Bearer KEY` on /v1 paths (also VLLM_API_KEY).",
    ),
    f(
        "max-model-len",
        Kind::HumanInt,
        "Context length in tokens (1k, 32K, -1 or auto = what fits the KV cache). Default: the profile's.",
    ),
    Flag {
        name: "gpu-memory-utilization",
        aliases: &["device-memory-utilization"],
        kind: Kind::Float,
        help: "Fraction of GPU memory for weights, KV cache and activations (default 0.92): sizes the KV cache from the profile's memory model; too little fails start-up with vLLM's ValueError.",
    },
    f(
        "kv-cache-memory-bytes",
        Kind::HumanInt,
        "KV cache size in bytes (overrides --gpu-memory-utilization for the cache).",
    ),
    f(
        "num-gpu-blocks-override",
        Kind::Int,
        "KV cache size in blocks.",
    ),
    f(
        "block-size",
        Kind::Int,
        "Tokens per KV block (default 16): prefix cache hits count whole blocks.",
    ),
    f(
        "max-num-seqs",
        Kind::Int,
        "Most requests running at once; the rest wait. Default: the profile's.",
    ),
    f(
        "max-num-batched-tokens",
        Kind::HumanInt,
        "Most tokens per scheduler step: the prefill chunk. Default: the profile's.",
    ),
    f(
        "enable-chunked-prefill",
        Kind::Bool,
        "Split long prompts over steps (on by default).",
    ),
    f(
        "enable-prefix-caching",
        Kind::Bool,
        "Prefix caching (on by default; --no-enable-prefix-caching turns it off).",
    ),
    Flag {
        name: "tensor-parallel-size",
        aliases: &[],
        kind: Kind::Int,
        help: "Tensor parallelism (-tp): splits weights and KV bytes per token in the KV cache size.",
    },
    f(
        "pipeline-parallel-size",
        Kind::Int,
        "Accepted (-pp); no effect.",
    ),
    f(
        "data-parallel-size",
        Kind::Int,
        "Accepted (-dp); no effect.",
    ),
    f(
        "profiler-config",
        Kind::Json,
        "JSON; `profiler` set (`torch`) serves /start_profile and /stop_profile, which write a small trace to `torch_profiler_dir`.",
    ),
    f(
        "speculative-config",
        Kind::Json,
        "JSON (-sc); num_speculative_tokens K turns on the profile's speculative model with at most K+1 tokens per step.",
    ),
    f(
        "spec-method",
        Kind::Str,
        "Shortcut for speculative-config.method.",
    ),
    f(
        "spec-model",
        Kind::Str,
        "Shortcut for speculative-config.model.",
    ),
    f(
        "spec-tokens",
        Kind::Int,
        "Shortcut for speculative-config.num_speculative_tokens.",
    ),
    f(
        "enable-prompt-tokens-details",
        Kind::Bool,
        "Report usage.prompt_tokens_details.cached_tokens.",
    ),
    f(
        "enable-force-include-usage",
        Kind::Bool,
        "Usage (and continuous usage) on every stream.",
    ),
    f(
        "enable-log-requests",
        Kind::Bool,
        "Log each request (off by default; --disable-log-requests is the old spelling of off).",
    ),
    f(
        "disable-log-stats",
        Kind::Bool,
        "No periodic stats lines (every VLLM_LOG_STATS_INTERVAL s, default 10).",
    ),
    f(
        "stream-interval",
        Kind::Int,
        "Tokens buffered per streamed chunk (default 1).",
    ),
    f(
        "seed",
        Kind::Int,
        "Seed for generated tokens and speculative accept lengths.",
    ),
    f("dtype", Kind::Str, "Accepted; echoed in /server_info."),
    f(
        "kv-cache-dtype",
        Kind::Str,
        "Accepted; echoed in /server_info.",
    ),
    f(
        "quantization",
        Kind::Str,
        "Accepted (-q); echoed in /server_info.",
    ),
    f("trust-remote-code", Kind::Bool, "Accepted; no effect."),
    f("enforce-eager", Kind::Bool, "Accepted; no effect."),
    f(
        "disable-uvicorn-access-log",
        Kind::Bool,
        "No access log line per request.",
    ),
    f(
        "uvicorn-log-level",
        Kind::Str,
        "Accepted; `warning` and above hide the access log.",
    ),
    f(
        "profile",
        Kind::Str,
        "(simulator) Timing profile: a built-in name or a YAML file.",
    ),
    f(
        "sim-time-scale",
        Kind::Float,
        "(simulator) Multiply every modelled duration by this.",
    ),
    f(
        "sim-thinking-tokens",
        Kind::Int,
        "(simulator) Thinking tokens the model writes before each answer.",
    ),
    f(
        "sim-broken-tool-calls-above-batch",
        Kind::Int,
        "(simulator) Fault: tool calls made while more than N chat requests are live have broken arguments.",
    ),
    f(
        "sim-no-prefix-hits",
        Kind::Bool,
        "(simulator) Fault: prefix caching is on and finds nothing (vllm #42948, hybrid sliding-window models).",
    ),
];

fn lookup_exact(name: &str) -> Option<&'static Flag> {
    FLAGS
        .iter()
        .find(|fl| fl.name == name || fl.aliases.contains(&name))
}

/// What a `--name` means: a modelled flag (with the value a bare boolean spelling gives), or
/// a vLLM flag the simulator ignores.
enum Resolved {
    Known(&'static Flag, Option<bool>),
    Ignored(String),
}

/// Every option string argparse would know, for prefix matching and did-you-mean.
fn option_strings() -> Vec<String> {
    let mut all: Vec<String> = vllm_flags::ALL.iter().map(|s| s.to_string()).collect();
    for fl in FLAGS {
        all.push(fl.name.to_string());
        all.extend(fl.aliases.iter().map(|a| a.to_string()));
        if fl.kind == Kind::Bool {
            all.push(format!("no-{}", fl.name));
            if let Some(rest) = fl.name.strip_prefix("enable-") {
                all.push(format!("disable-{rest}"));
            }
            if let Some(rest) = fl.name.strip_prefix("disable-") {
                all.push(format!("enable-{rest}"));
            }
        }
    }
    all.sort();
    all.dedup();
    all
}

fn resolve_exact(name: &str) -> Option<Resolved> {
    if let Some(fl) = lookup_exact(name) {
        return Some(Resolved::Known(fl, None));
    }
    let bool_flag = |n: &str| lookup_exact(n).filter(|fl| fl.kind == Kind::Bool);
    if let Some(fl) = name.strip_prefix("no-").and_then(bool_flag) {
        return Some(Resolved::Known(fl, Some(false)));
    }
    if let Some(fl) = name
        .strip_prefix("disable-")
        .and_then(|r| bool_flag(&format!("enable-{r}")))
    {
        return Some(Resolved::Known(fl, Some(false)));
    }
    if let Some(fl) = name
        .strip_prefix("enable-")
        .and_then(|r| bool_flag(&format!("disable-{r}")))
    {
        return Some(Resolved::Known(fl, Some(false)));
    }
    let base = name.strip_prefix("no-").unwrap_or(name);
    if vllm_flags::ALL.contains(&name) || (name != base && vllm_flags::is_boolean(base)) {
        return Some(Resolved::Ignored(name.to_string()));
    }
    None
}

// A String error (one of the workspace's few, on purpose): its text is argparse's own usage
// line, which the simulator prints as vLLM does and nothing reads back.
fn resolve(name: &str) -> Result<Option<Resolved>, String> {
    if let Some(r) = resolve_exact(name) {
        return Ok(Some(r));
    }
    let hits: Vec<String> = option_strings()
        .into_iter()
        .filter(|o| o.starts_with(name))
        .collect();
    match hits.len() {
        0 => Ok(None),
        1 => Ok(resolve_exact(&hits[0])),
        _ => Err(format!(
            "ambiguous option: --{name} could match {}",
            hits.iter()
                .map(|h| format!("--{h}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn did_you_mean(name: &str) -> Option<String> {
    option_strings()
        .into_iter()
        .map(|o| (strsim::jaro_winkler(name, &o), o))
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, o)| o)
}

/// vLLM's `human_readable_int`: `k`/`m`/`g` are powers of 1000, `K`/`M`/`G` of 1024;
/// decimals allowed with a suffix (`25.6k`).
pub(crate) fn human_int(raw: &str) -> Option<i64> {
    let raw = raw.trim();
    if let Ok(n) = raw.parse::<i64>() {
        return Some(n);
    }
    let (num, suffix) = raw.split_at(raw.len().checked_sub(1)?);
    let mult: f64 = match suffix {
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let x: f64 = num.parse().ok()?;
    x.is_finite().then(|| (x * mult).round() as i64)
}

// A String error on purpose, as `resolve`'s: argparse's own words, printed and never matched.
fn typed(fl: &Flag, raw: &str) -> Result<Value, String> {
    let bad = |what: &str| format!("argument --{}: invalid {what} value: '{raw}'", fl.name);
    Ok(match fl.kind {
        Kind::Int => Value::from(raw.trim().parse::<i64>().map_err(|_| bad("int"))?),
        Kind::HumanInt => {
            if fl.name == "max-model-len" && raw.trim().eq_ignore_ascii_case("auto") {
                Value::from(-1)
            } else {
                Value::from(human_int(raw).ok_or_else(|| bad("human_readable_int"))?)
            }
        }
        Kind::Float => {
            let x = raw.trim().parse::<f64>().map_err(|_| bad("float"))?;
            if !x.is_finite() {
                return Err(bad("float"));
            }
            Value::from(x)
        }
        Kind::Str => Value::from(raw),
        Kind::Json => serde_json::from_str::<Value>(raw)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| bad("loads"))?,
        Kind::Many | Kind::Bool => Value::from(raw),
    })
}

fn is_flag(arg: &str) -> bool {
    arg.starts_with('-') && arg.len() > 1 && arg.parse::<f64>().is_err()
}

/// Parses the arguments after `servebench sim --api vllm`.
pub(crate) fn parse(args: &[String]) -> Result<VllmParsed, VllmArgError> {
    let usage = VllmArgError::Usage;
    let mut given: IndexMap<&'static str, Value> = IndexMap::new();
    let mut json: Map<String, Value> = Map::new();
    let mut positional: Vec<String> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut warnings = Vec::new();
    let mut help = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "-h" || arg == "--help" || arg.starts_with("--help=") {
            help = true;
            continue;
        }
        if !is_flag(arg) {
            positional.push(arg.clone());
            continue;
        }
        let long: String = if let Some(body) = arg.strip_prefix("--") {
            body.to_string()
        } else if let Some(long) = expand_short(&arg[1..]) {
            long
        } else {
            unknown.push(arg.clone());
            continue;
        };
        let (name_raw, inline) = match long.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (long.clone(), None),
        };
        // Underscores are dashes up to the first `.` (JSON sub-keys keep theirs).
        let (head, json_key) = match name_raw.split_once('.') {
            Some((h, k)) => (h.replace('_', "-"), Some(k.to_string())),
            None => (name_raw.replace('_', "-"), None),
        };
        let resolved = resolve(&head).map_err(usage)?;
        let (fl, bare) = match resolved {
            None => {
                unknown.push(format!("--{head}"));
                if inline.is_none() && args.get(i).is_some_and(|v| !is_flag(v)) {
                    // argparse reports the value as unrecognized too.
                    unknown.push(args[i].clone());
                    i += 1;
                }
                continue;
            }
            Some(Resolved::Ignored(n)) => {
                warnings.push(format!(
                    "WARNING: servebench sim does not model vLLM's --{n}; accepted and ignored"
                ));
                let base = n.strip_prefix("no-").unwrap_or(&n);
                if inline.is_none() && !vllm_flags::is_boolean(base) {
                    take_value(args, &mut i, &inline);
                }
                continue;
            }
            Some(Resolved::Known(fl, bare)) => (fl, bare),
        };
        if let Some(key) = json_key {
            if fl.kind != Kind::Json {
                return Err(usage(format!("unrecognized arguments: --{name_raw}")));
            }
            let Some(v) = take_value(args, &mut i, &inline) else {
                return Err(usage(format!(
                    "argument --{}: expected one argument",
                    fl.name
                )));
            };
            let v = serde_json::from_str::<Value>(&v).unwrap_or(Value::String(v));
            json.insert(key.replace('-', "_"), v);
            continue;
        }
        let value = flag_value(fl, &head, bare, inline, args, &mut i)?;
        given.insert(fl.name, value);
    }
    let model_flag = given
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string);
    if positional.len() > 1 {
        unknown.extend(positional.drain(1..));
    }
    if !unknown.is_empty() {
        return Err(unrecognized(&unknown));
    }
    let model = choose_model(positional.pop(), model_flag, &given, &mut warnings)?;
    merge_speculative_flags(&given, &mut json);
    let config = resolve_config(&given, &json, model)?;
    Ok(VllmParsed {
        config,
        warnings,
        help,
    })
}

/// A short form's long name (`tp=2` → `tensor-parallel-size=2`, `O3` →
/// `optimization-level=3`), or `None` when vLLM has no such short form.
fn expand_short(body: &str) -> Option<String> {
    let (name, inline) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (body, None),
    };
    let expanded = vllm_flags::SHORT
        .iter()
        .find(|(s, _)| *s == name)
        .map(|(_, l)| (l.to_string(), inline.map(str::to_string)))
        .or_else(|| {
            name.strip_prefix('O')
                .filter(|lvl| !lvl.is_empty())
                .map(|lvl| ("optimization-level".to_string(), Some(lvl.to_string())))
        });
    match expanded {
        Some((l, Some(v))) => Some(format!("{l}={v}")),
        Some((l, None)) => Some(l),
        None => None,
    }
}

/// A flag's one value: the inline `=value`, or the next argument when it is not a flag
/// (then `i` moves past it).
fn take_value(args: &[String], i: &mut usize, inline: &Option<String>) -> Option<String> {
    match inline {
        Some(v) => Some(v.clone()),
        None => {
            let v = args.get(*i).filter(|v| !is_flag(v)).cloned();
            if v.is_some() {
                *i += 1;
            }
            v
        }
    }
}

/// The value of a known flag, by its kind, taking its arguments from `args` at `i`.
fn flag_value(
    fl: &Flag,
    head: &str,
    bare: Option<bool>,
    inline: Option<String>,
    args: &[String],
    i: &mut usize,
) -> Result<Value, VllmArgError> {
    let usage = VllmArgError::Usage;
    Ok(match fl.kind {
        Kind::Bool => {
            if inline.is_some() {
                return Err(usage(format!(
                    "argument --{head}: ignored explicit argument '{}'",
                    inline.unwrap_or_default()
                )));
            }
            Value::Bool(bare.unwrap_or(true))
        }
        Kind::Many => {
            let mut vals = Vec::new();
            if let Some(v) = inline.clone() {
                vals.push(Value::from(v));
            } else {
                while let Some(v) = args.get(*i).filter(|v| !is_flag(v)) {
                    vals.push(Value::from(v.clone()));
                    *i += 1;
                }
            }
            if vals.is_empty() {
                return Err(usage(format!(
                    "argument --{}: expected at least one argument",
                    fl.name
                )));
            }
            Value::Array(vals)
        }
        _ => {
            let Some(v) = take_value(args, i, &inline) else {
                return Err(usage(format!(
                    "argument --{}: expected one argument",
                    fl.name
                )));
            };
            typed(fl, &v).map_err(usage)?
        }
    })
}

/// argparse's refusal of unknown arguments, with a did-you-mean for each long flag.
fn unrecognized(unknown: &[String]) -> VllmArgError {
    let hints: Vec<String> = unknown
        .iter()
        .filter_map(|u| {
            let n = u.trim_start_matches('-').replace('_', "-");
            u.starts_with("--")
                .then(|| did_you_mean(&n))
                .flatten()
                .map(|m| format!("--{n}: did you mean --{m}?"))
        })
        .collect();
    let mut msg = format!("unrecognized arguments: {}", unknown.join(" "));
    if !hints.is_empty() {
        msg.push_str(&format!(" ({})", hints.join("; ")));
    }
    VllmArgError::Usage(msg)
}

/// The model: the positional one, else `--model` (with vLLM's warning), else the default.
fn choose_model(
    positional: Option<String>,
    model_flag: Option<String>,
    given: &IndexMap<&'static str, Value>,
    warnings: &mut Vec<String>,
) -> Result<String, VllmArgError> {
    Ok(match (positional, model_flag) {
        (Some(m), _) => m,
        (None, Some(m)) => {
            warnings.push(
                "WARNING: With `vllm serve`, you should provide the model as a positional argument or in a config file instead of via the `--model` option. The `--model` option will be removed in a future version."
                    .into(),
            );
            m
        }
        (None, None) => {
            if given.contains_key("served-model-name") {
                return Err(VllmArgError::Usage(
                    "`model` should be provided as the first positional argument when using `vllm serve`. i.e. `vllm serve <model>`"
                        .into(),
                ));
            }
            DEFAULT_MODEL.to_string()
        }
    })
}

/// Folds the `--spec-*` shorthands and `--speculative-config` into the speculative JSON
/// (dotted keys given first win).
fn merge_speculative_flags(given: &IndexMap<&'static str, Value>, json: &mut Map<String, Value>) {
    for (k, v) in [
        ("method", "spec-method"),
        ("model", "spec-model"),
        ("num_speculative_tokens", "spec-tokens"),
    ] {
        if let Some(x) = given.get(v) {
            json.insert(k.into(), x.clone());
        }
    }
    if let Some(Value::Object(m)) = given.get("speculative-config") {
        for (k, v) in m {
            json.entry(k.clone()).or_insert(v.clone());
        }
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Typed reads of the parsed flags (`given`, keyed by canonical flag name).
struct Given<'a>(&'a IndexMap<&'static str, Value>);

impl Given<'_> {
    fn int(&self, n: &str) -> Option<i64> {
        self.0.get(n).and_then(Value::as_i64)
    }

    fn float(&self, n: &str) -> Option<f64> {
        self.0.get(n).and_then(Value::as_f64)
    }

    fn flag(&self, n: &str) -> Option<bool> {
        self.0.get(n).and_then(Value::as_bool)
    }

    fn str(&self, n: &str) -> Option<&str> {
        self.0.get(n).and_then(Value::as_str)
    }

    fn strs(&self, n: &str) -> Vec<String> {
        self.0
            .get(n)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// An integer flag that must be above zero when given.
    fn positive(&self, n: &str) -> Result<Option<u64>, VllmArgError> {
        match self.int(n) {
            Some(x) if x <= 0 => Err(VllmArgError::Usage(format!(
                "argument --{n}: must be positive, got {x}"
            ))),
            x => Ok(x.map(|x| x as u64)),
        }
    }
}

fn resolve_config(
    given: &IndexMap<&'static str, Value>,
    spec: &Map<String, Value>,
    model: String,
) -> Result<SimConfig, VllmArgError> {
    let usage = VllmArgError::Usage;
    let g = Given(given);
    let profile = sim_profile(&g)?;
    let mut c = SimConfig::engine_defaults(Api::Vllm, profile.clone());
    let port = g.int("port").unwrap_or(8000);
    c.port =
        u16::try_from(port).map_err(|_| usage(format!("argument --port: invalid port {port}")))?;
    let host = g.str("host").map(str::to_string);
    c.host = host.clone().unwrap_or_else(|| "0.0.0.0".into());
    let tp = g.positive("tensor-parallel-size")?.unwrap_or(1);
    let util = g.float("gpu-memory-utilization").unwrap_or(0.92);
    if !(util > 0.0 && util <= 1.0) {
        return Err(usage(format!(
            "argument --gpu-memory-utilization: must be in (0, 1], got {util}"
        )));
    }
    let block_size = g.positive("block-size")?.unwrap_or(16);
    let (pool, kv_cache_gib) = kv_pool(&g, &profile, util, tp, block_size)?;
    let context_length = match g.int("max-model-len") {
        // -1 / auto: the largest that fits the KV cache.
        Some(-1) => profile.context_length.min(pool.max(1) as u64),
        Some(x) if x <= 0 => {
            return Err(usage(format!(
                "argument --max-model-len: invalid value {x}"
            )));
        }
        Some(x) => x as u64,
        None => profile.context_length,
    };
    c.context_length = context_length;
    c.max_total_tokens = pool;
    c.mem_fraction_static = util;
    apply_scheduler_flags(&g, &profile, &mut c)?;
    let spec_tokens = spec
        .get("num_speculative_tokens")
        .and_then(Value::as_i64)
        .filter(|n| *n > 0);
    let spec_on =
        spec_tokens.is_some() || spec.get("method").is_some() || spec.get("model").is_some();
    c.speculative = speculative_model(&profile, spec_on, spec_tokens.map(|k| k + 1));
    c.model_path = model.clone();
    let mut served_names = g.strs("served-model-name");
    if served_names.is_empty() {
        served_names.push(model.clone());
    }
    c.served_model_name = served_names[0].clone();
    c.log = SimLog::stdout();
    // `--reasoning-parser none` (any case) is unset (arg_utils.py `parse_reasoning_parser`).
    c.reasoning_parser = g
        .str("reasoning-parser")
        .filter(|p| !p.is_empty() && !p.eq_ignore_ascii_case("none"))
        .map(str::to_string);
    c.reasoning_split = c.reasoning_parser.is_some();
    // The tool parser is loaded only with both (parser/parser_manager.py `get_tool_parser`);
    // without it every `tool_choice` but `none` is refused.
    c.tool_call_parser = given
        .get("enable-auto-tool-choice")
        .is_some_and(|v| v.as_bool() != Some(false));
    c.tool_parser = g.str("tool-call-parser").map(str::to_string);
    c.broken_tool_calls_above = g
        .int("sim-broken-tool-calls-above-batch")
        .map(|n| n.max(0) as u64);
    c.no_prefix_hits = g.flag("sim-no-prefix-hits").unwrap_or(false);
    let per_request_spec_metrics = per_request_spec_metrics(&g, c.speculative.is_some())?;
    c.vllm = Some(std::sync::Arc::new(VllmOptions {
        non_default: non_default_args(given, &model),
        model,
        served_names,
        api_keys: api_keys(&g),
        prompt_tokens_details: g.flag("enable-prompt-tokens-details").unwrap_or(false),
        force_include_usage: g.flag("enable-force-include-usage").unwrap_or(false),
        log_requests: g.flag("enable-log-requests").unwrap_or(false),
        log_stats: !g.flag("disable-log-stats").unwrap_or(false),
        stats_interval: Duration::from_secs_f64(stats_interval()),
        dev_mode: env_flag("VLLM_SERVER_DEV_MODE"),
        skip_model_validation: env_flag("VLLM_SKIP_MODEL_NAME_VALIDATION"),
        access_log: !g.flag("disable-uvicorn-access-log").unwrap_or(false) && !quiet_access(&g),
        block_size,
        gpu_memory_utilization: util,
        tensor_parallel_size: tp,
        kv_cache_gib,
        host_display: host.unwrap_or_else(|| "0.0.0.0".into()),
        profiler_dir: given
            .get("profiler-config")
            .filter(|p| p["profiler"].is_string())
            .map(|p| {
                p["torch_profiler_dir"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            }),
        per_request_spec_metrics,
    }));
    Ok(c)
}

/// The timing profile, with the simulator's own flags (`--profile`, `--sim-*`) applied.
fn sim_profile(g: &Given) -> Result<Profile, VllmArgError> {
    let usage = VllmArgError::Usage;
    let mut profile = Profile::load(g.str("profile").unwrap_or("fast"))?;
    if let Some(s) = g.float("sim-time-scale") {
        if s <= 0.0 {
            return Err(usage("argument --sim-time-scale: must be positive".into()));
        }
        profile.time_scale = s;
    }
    if let Some(n) = g.int("sim-thinking-tokens") {
        profile.thinking.tokens = u64::try_from(n)
            .map_err(|_| usage("argument --sim-thinking-tokens: must not be negative".into()))?;
    }
    Ok(profile)
}

/// The KV pool in tokens (whole blocks) and its size in GiB, from the memory flags.
fn kv_pool(
    g: &Given,
    profile: &Profile,
    util: f64,
    tp: u64,
    block_size: u64,
) -> Result<(i64, f64), VllmArgError> {
    let m = &profile.memory;
    let kv_bytes_per_token = m.kv_bytes_per_token / tp as f64;
    let mut pool = kv_pool_tokens(m, util, tp as f64);
    if let Some(bytes) = g.int("kv-cache-memory-bytes") {
        pool = (bytes as f64 / kv_bytes_per_token).floor() as i64;
    }
    if let Some(blocks) = g.positive("num-gpu-blocks-override")? {
        pool = (blocks * block_size) as i64;
    }
    // vLLM's pool is whole blocks.
    if pool > 0 {
        pool -= pool % block_size as i64;
    }
    let kv_cache_gib = pool as f64 * kv_bytes_per_token / (1u64 << 30) as f64;
    Ok((pool, kv_cache_gib))
}

/// Batch limits, chunked prefill, prefix caching, stream interval and seed.
fn apply_scheduler_flags(
    g: &Given,
    profile: &Profile,
    c: &mut SimConfig,
) -> Result<(), VllmArgError> {
    if let Some(n) = g.positive("max-num-seqs")? {
        c.max_running_requests = n as usize;
    }
    let batched = g.positive("max-num-batched-tokens")?;
    if g.flag("enable-chunked-prefill") == Some(false) {
        c.chunked_prefill_size = None;
        c.max_prefill_tokens = batched.unwrap_or_else(|| {
            c.context_length
                .max(profile.chunked_prefill_size.max(2048) as u64)
        });
    } else {
        c.chunked_prefill_size = Some(
            batched
                .or(u64::try_from(profile.chunked_prefill_size).ok())
                .unwrap_or(8192),
        );
        c.max_prefill_tokens = c.chunked_prefill_size.unwrap_or(8192);
    }
    // V1's scheduler spends one token budget on decodes and prefill chunks together.
    c.mixed_chunk = c.chunked_prefill_size.is_some();
    c.disable_radix_cache = g.flag("enable-prefix-caching") == Some(false);
    c.enable_metrics = true;
    c.stream_interval = g.positive("stream-interval")?.unwrap_or(1);
    if let Some(seed) = g.int("seed") {
        c.seed = seed as u64;
    }
    Ok(())
}

/// `--api-key`, or `VLLM_API_KEY` when no flag gives one.
fn api_keys(g: &Given) -> Vec<String> {
    let mut api_keys = g.strs("api-key");
    if api_keys.is_empty()
        && let Ok(k) = std::env::var("VLLM_API_KEY")
        && !k.is_empty()
    {
        api_keys.push(k);
    }
    api_keys
}

/// `VLLM_LOG_STATS_INTERVAL` in seconds (10 when unset or not a positive number).
fn stats_interval() -> f64 {
    std::env::var("VLLM_LOG_STATS_INTERVAL")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0 && v.is_finite())
        .unwrap_or(10.0)
}

/// The `non-default args` vLLM logs at startup: every flag given, minus the simulator's own.
fn non_default_args(given: &IndexMap<&'static str, Value>, model: &str) -> IndexMap<String, Value> {
    let mut non_default: IndexMap<String, Value> = IndexMap::new();
    non_default.insert("model_tag".into(), Value::from(model));
    for (k, v) in given {
        if matches!(
            *k,
            "profile"
                | "sim-time-scale"
                | "sim-thinking-tokens"
                | "sim-broken-tool-calls-above-batch"
                | "sim-no-prefix-hits"
                | "model"
        ) {
            continue;
        }
        // Keys stay out of the log (servebench mirrors server logs into run directories).
        let v = if *k == "api-key" {
            json!(["<redacted>"])
        } else {
            v.clone()
        };
        non_default.insert(k.replace('-', "_"), v);
    }
    non_default
}

/// Whether `--uvicorn-log-level` is quiet enough to silence the access log.
fn quiet_access(g: &Given) -> bool {
    g.str("uvicorn-log-level").is_some_and(|l| {
        matches!(
            l.to_ascii_lowercase().as_str(),
            "warning" | "error" | "critical"
        )
    })
}

/// `--per-request-spec-decode-metrics`: a valid choice, and only with speculative decoding.
fn per_request_spec_metrics(g: &Given, speculative: bool) -> Result<bool, VllmArgError> {
    let usage = VllmArgError::Usage;
    let per_request_spec = g.str("per-request-spec-decode-metrics").unwrap_or("none");
    if !["none", "summary", "detailed"].contains(&per_request_spec) {
        return Err(usage(format!(
            "argument --per-request-spec-decode-metrics: invalid choice: '{per_request_spec}' (choose from 'none', 'summary', 'detailed')"
        )));
    }
    if per_request_spec != "none" && !speculative {
        return Err(usage(
            "--per-request-spec-decode-metrics requires speculative decoding to be enabled (via --speculative-config).".into(),
        ));
    }
    Ok(per_request_spec != "none")
}

/// Python's `repr` of a JSON value (`True`, `None`, `'text'`), for `non-default args`.
pub(crate) fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(a) => format!("[{}]", a.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("'{k}': {}", py_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `servebench sim --api vllm --help`.
pub(crate) fn help_text() -> String {
    use std::fmt::Write;
    let mut s = String::from(
        "usage: servebench sim --api vllm [model_tag] [options]\n\n\
         A simulated vLLM server (`vllm serve` compatible, vLLM 0.34): the OpenAI API\n\
         (/v1/completions, /v1/chat/completions, /v1/models), /health, /ping, /version,\n\
         /tokenize, /detokenize, /metrics (vllm: names), and with VLLM_SERVER_DEV_MODE=1\n\
         /reset_prefix_cache and /server_info. Same timing model as the SGLang surface.\n\n\
         Modelled flags (underscores and unique prefixes work; --no-X turns a boolean off):\n",
    );
    for fl in FLAGS {
        let meta = match fl.kind {
            Kind::Bool => "",
            Kind::Int | Kind::HumanInt => " INT",
            Kind::Float => " FLOAT",
            Kind::Str => " STR",
            Kind::Many => " STR [STR ...]",
            Kind::Json => " JSON",
        };
        let _ = writeln!(s, "  --{}{meta}\n      {}", fl.name, fl.help);
    }
    s.push_str(
        "\nEvery other `vllm serve` flag is accepted with a warning; unknown flags exit 2.\n\
         Environment: VLLM_SERVER_DEV_MODE, VLLM_API_KEY, VLLM_LOG_STATS_INTERVAL,\n\
         VLLM_SKIP_MODEL_NAME_VALIDATION.\n",
    );
    s
}

/// vLLM 0.34's registered reasoning parsers (`vllm/reasoning/__init__.py`).
const VLLM_REASONING_PARSERS: &[&str] = &[
    "deepseek_r1",
    "deepseek_v3",
    "deepseek_v4",
    "deepseek_v41",
    "poolside_v1",
    "cohere_command3",
    "cohere_command4",
    "ernie45",
    "gemma4",
    "glm45",
    "glm47",
    "ling3",
    "openai_gptoss",
    "granite",
    "granite_thinking_parser",
    "hf",
    "beam",
    "holo2",
    "hunyuan_a13b",
    "hy_v3",
    "hy_v4",
    "kimi_k2",
    "kimi_k3",
    "k2_horizon",
    "mimo",
    "minicpmv",
    "minimax_m2",
    "minimax_m2_append_think",
    "minimax_m3",
    "mistral",
    "nemotron_v3",
    "olmo3",
    "plamo3",
    "muse",
    "muse_glimmer",
    "musespark",
    "qwen3",
    "ripple",
    "seed_oss",
    "step3",
    "step3p5",
    "step5",
    "inkling",
    "zaya",
];

/// vLLM's refusal of a reasoning parser it has not registered: a `KeyError` from
/// `ReasoningParserManager.get_reasoning_parser` as the API server starts (exit status 1).
pub(crate) fn unknown_reasoning_parser(c: &SimConfig) -> Option<String> {
    let name = c.reasoning_parser.as_deref()?;
    if VLLM_REASONING_PARSERS.contains(&name) {
        return None;
    }
    Some(format!(
        "KeyError: \"Reasoning parser '{name}' not found. Available parsers: {}\"",
        VLLM_REASONING_PARSERS.join(", ")
    ))
}

/// vLLM's registered tool parsers (`vllm/tool_parsers/__init__.py` at 0064cc9, in order).
const VLLM_TOOL_PARSERS: &[&str] = &[
    "deepseek_v3",
    "deepseek_v31",
    "deepseek_v32",
    "deepseek_v4",
    "cohere_command3",
    "cohere_command4",
    "ernie45",
    "glm45",
    "glm47",
    "granite-20b-fc",
    "granite",
    "granite4",
    "hermes",
    "poolside_v1",
    "hunyuan_a13b",
    "hy_v3",
    "internlm",
    "jamba",
    "lfm2",
    "kimi_k2",
    "kimi_k3",
    "llama3_json",
    "llama4_json",
    "llama4_pythonic",
    "longcat",
    "mimo",
    "minimax_m2",
    "minimax_m3",
    "minicpm5",
    "mistral",
    "olmo3",
    "openai",
    "phi4_mini_json",
    "pythonic",
    "qwen3_coder",
    "qwen3_xml",
    "seed_oss",
    "step3",
    "step3p5",
    "inkling",
    "xlam",
    "gigachat3",
    "functiongemma",
    "gemma4",
    "apertus",
    "solar_open2",
];

/// vLLM's refusal of its tool-call flags before it loads anything (exit status 1):
/// `--enable-auto-tool-choice` without `--tool-call-parser` (cli_args.py
/// `validate_parsed_serve_args`), or with a parser it has not registered (api_server.py
/// `validate_api_server_args`).
pub(crate) fn refused_tool_parser(c: &SimConfig) -> Option<String> {
    if !c.tool_call_parser {
        return None;
    }
    match c.tool_parser.as_deref() {
        None | Some("") => {
            Some("TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser".into())
        }
        Some(name) if !VLLM_TOOL_PARSERS.contains(&name) => Some(format!(
            "KeyError: 'invalid tool call parser: {name} (chose from {{ {} }})'",
            VLLM_TOOL_PARSERS.join(",")
        )),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<VllmParsed, VllmArgError> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn the_no_prefix_hits_fault_keeps_caching_on_in_name() {
        let c = p(&["m", "--sim-no-prefix-hits"]).unwrap().config;
        assert!(c.no_prefix_hits && !c.disable_radix_cache);
        assert!(!p(&["m"]).unwrap().config.no_prefix_hits);
    }

    #[test]
    fn positional_model_underscores_prefixes_and_shorts() {
        let r = p(&[
            "org/M",
            "--max_model_len",
            "4k",
            "-tp",
            "2",
            "--gpu-memory-util",
            "0.8",
            "--max-num-seqs=7",
            "--no-enable-prefix-caching",
            "--served-model-name",
            "a",
            "b",
            "--port",
            "0",
        ])
        .unwrap();
        let c = &r.config;
        let v = c.vllm.as_ref().unwrap();
        assert_eq!(c.context_length, 4000);
        assert_eq!(v.tensor_parallel_size, 2);
        assert_eq!(c.mem_fraction_static, 0.8);
        assert_eq!(c.max_running_requests, 7);
        assert!(c.disable_radix_cache);
        assert_eq!(v.served_names, ["a", "b"]);
        assert_eq!(c.served_model_name, "a");
        assert_eq!(c.model_path, "org/M");
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }

    #[test]
    fn enable_disable_spellings_and_speculative_config() {
        let r = p(&[
            "m",
            "--disable-log-requests",
            "--enable-prompt-tokens-details",
            "--speculative-config",
            r#"{"method": "ngram", "num_speculative_tokens": 3}"#,
        ])
        .unwrap();
        let v = r.config.vllm.clone().unwrap();
        assert!(!v.log_requests && v.prompt_tokens_details);
        assert_eq!(r.config.speculative.as_ref().unwrap().num_draft_tokens, 4);
        let r = p(&["m", "--speculative-config.num_speculative_tokens", "2"]).unwrap();
        assert_eq!(r.config.speculative.unwrap().num_draft_tokens, 3);
        assert!(p(&["m"]).unwrap().config.speculative.is_none());
    }

    #[test]
    fn unmodelled_flags_warn_unknown_ones_fail_with_a_hint() {
        let r = p(&[
            "m",
            "--enforce-eager",
            "--load-format",
            "dummy",
            "--headless",
        ])
        .unwrap();
        assert_eq!(r.config.model_path, "m");
        assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
        let e = p(&["m", "--max-model-lenn", "5"]).unwrap_err().to_string();
        assert!(
            e.contains("unrecognized arguments: --max-model-lenn 5"),
            "{e}"
        );
        assert!(e.contains("did you mean --max-model-len?"), "{e}");
        assert!(e.starts_with("usage: vllm serve"), "{e}");
        let e = p(&["m", "--max-num"]).unwrap_err().to_string();
        assert!(e.contains("ambiguous option"), "{e}");
        let e = p(&["m", "n"]).unwrap_err().to_string();
        assert!(e.contains("unrecognized arguments: n"), "{e}");
    }

    #[test]
    fn model_flag_warns_and_defaults() {
        let r = p(&["--model", "x"]).unwrap();
        assert_eq!(r.config.model_path, "x");
        assert!(r.warnings[0].contains("positional argument"));
        assert_eq!(p(&[]).unwrap().config.model_path, DEFAULT_MODEL);
        assert_eq!(p(&[]).unwrap().config.port, 8000);
    }

    #[test]
    fn human_ints() {
        assert_eq!(human_int("1k"), Some(1000));
        assert_eq!(human_int("1K"), Some(1024));
        assert_eq!(human_int("25.6k"), Some(25600));
        assert_eq!(human_int("x"), None);
    }
}
