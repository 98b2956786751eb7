//! `llama-server`'s command line (common/arg.cpp, tools/server/README.md), resolved onto the
//! simulator's timing model (`--api llama.cpp`).
//!
//! Short and long spellings as llama.cpp has them (`-m/--model`, `-c/--ctx-size`,
//! `-np/--parallel`, `-kvu/--kv-unified`, `-b/--batch-size`, `-ub/--ubatch-size`,
//! `-a/--alias`, `-t/--threads`, `-ngl/--gpu-layers/--n-gpu-layers`, `-fa/--flash-attn`, ...),
//! `--flag value` only (llama.cpp has no `--flag=value` form and no underscore spelling),
//! boolean pairs as separate spellings (`--slots` / `--no-slots`). An argument llama.cpp does
//! not know is an error (`error: invalid argument: X`, exit status 1, as `llama-server`
//! exits); flags llama.cpp has that the simulator does not model are accepted with a
//! warning. Source: docs/reference/llama-cpp-facts.md §1, docs/reference/llama-cpp-observed.md.

use super::api::Api;
use super::config::{SimConfig, speculative_model};
use super::llamacpp_options::LlamaOptions;
use super::profile::Profile;
use std::sync::Arc;

/// What the command line asked for.
#[derive(Debug)]
pub(crate) struct LlamaParsed {
    /// The resolved configuration.
    pub config: SimConfig,
    /// Warnings to print (flags accepted but not modelled).
    pub warnings: Vec<String>,
    /// `-h/--help` was given.
    pub help: bool,
}

/// A command line `llama-server` refuses (it prints the message and exits 1).
#[derive(Debug, thiserror::Error)]
pub(crate) enum LlamaArgError {
    /// Unknown argument.
    #[error("error: invalid argument: {0}{hint}", hint = .1.as_deref().map(|h| format!("\n(did you mean {h}?)")).unwrap_or_default())]
    Invalid(String, Option<String>),
    /// A flag without its value.
    #[error("error: expected value for argument {0}")]
    MissingValue(String),
    /// A value that does not parse.
    #[error("error while handling argument \"{0}\": {1}")]
    BadValue(String, String),
    /// The profile could not be loaded (a simulator flag).
    #[error("servebench sim: error: {0}")]
    Profile(#[from] super::profile::ProfileError),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// No value.
    Bool,
    /// One value.
    Value,
    /// Two values (`--control-vector-layer-range START END`).
    Two,
}

struct Flag {
    names: &'static [&'static str],
    kind: Kind,
    modelled: bool,
    help: &'static str,
}

const fn m(names: &'static [&'static str], kind: Kind, help: &'static str) -> Flag {
    Flag {
        names,
        kind,
        modelled: true,
        help,
    }
}

/// Every option of the llama-server build the simulator imitates (common/arg.cpp of the
/// llama.cpp vendored in llama-cpp-python 0.3.36), written by
/// `src/engine/flags/llamacpp_from_arg_cpp.py`: `KIND SPELLING... [| NEGATED...]`.
const ENGINE_FLAGS: &str = include_str!("llamacpp_flags.txt");

/// llama-server's options as [`Flag`]s (not modelled), a switch's negated spellings apart.
fn engine_flags() -> &'static [Flag] {
    static PARSED: std::sync::LazyLock<Vec<Flag>> = std::sync::LazyLock::new(|| {
        let mut out = Vec::new();
        for line in ENGINE_FLAGS.lines().filter(|l| !l.starts_with('#')) {
            let mut words = line.split_whitespace();
            let kind = match words.next() {
                Some("switch") => Bool,
                Some("value") => Value,
                Some("value2") => Kind::Two,
                _ => continue,
            };
            let rest: Vec<&'static str> = words.collect();
            let mut groups = rest.split(|w| *w == "|");
            for names in groups.by_ref() {
                out.push(Flag {
                    names: Vec::leak(names.to_vec()),
                    kind,
                    modelled: false,
                    help: "",
                });
            }
        }
        out
    });
    &PARSED
}

use Kind::{Bool, Value};

/// The flags the simulator models (with help); the rest of llama-server's are in
/// [`engine_flags`], accepted with a warning.
const FLAGS: &[Flag] = &[
    m(
        &["-m", "--model"],
        Value,
        "GGUF path; names the model in /v1/models and /props. Nothing is read; a path starting with /, ./, ../ or ~ must exist (else llama.cpp's load failure).",
    ),
    m(
        &["--host"],
        Value,
        "Address to listen on (default 127.0.0.1).",
    ),
    m(
        &["--port"],
        Value,
        "Port (default 8080; 0 = any free port, the chosen one is logged).",
    ),
    m(
        &["-c", "--ctx-size"],
        Value,
        "Total KV context in tokens (default: the profile's context length, as llama.cpp's 0 = from the model).",
    ),
    m(
        &["-np", "--parallel"],
        Value,
        "Slots: most requests decoding at once (default -1 = auto: 4 slots, unified KV).",
    ),
    m(
        &["-kvu", "--kv-unified"],
        Bool,
        "One KV buffer for all slots (each slot's context is -c); without it each slot gets -c / -np.",
    ),
    m(
        &["-no-kvu", "--no-kv-unified"],
        Bool,
        "Per-slot KV buffers.",
    ),
    m(
        &["-b", "--batch-size"],
        Value,
        "Logical batch (default 2048): most prompt tokens per request per step.",
    ),
    m(
        &["-ub", "--ubatch-size"],
        Value,
        "Physical batch (default 512): the prefill chunk of the timing model.",
    ),
    m(&["--metrics"], Bool, "Serve /metrics (llamacpp: names)."),
    m(&["--slots"], Bool, "Serve GET /slots (on by default)."),
    m(&["--no-slots"], Bool, "No GET /slots (501)."),
    m(
        &["--slot-save-path"],
        Value,
        "Enables POST /slots/{id}?action=erase|save|restore (501 without).",
    ),
    m(
        &["-a", "--alias"],
        Value,
        "Model name(s) for the API, comma-separated.",
    ),
    m(
        &["--api-key"],
        Value,
        "Keys (comma-separated) required as `Authorization: Bearer KEY`.",
    ),
    m(&["--api-key-file"], Value, "A file with one key per line."),
    m(
        &["-n", "--predict", "--n-predict"],
        Value,
        "Server-wide output cap (default -1: until the slot's context is full).",
    ),
    m(
        &["--cache-prompt"],
        Bool,
        "Prefix caching per slot (on by default).",
    ),
    m(&["--no-cache-prompt"], Bool, "No prefix caching."),
    m(
        &["-md", "--model-draft"],
        Value,
        "A draft model: turns on the profile's speculative model.",
    ),
    m(
        &["--draft", "--draft-n", "--spec-draft-n-max", "--draft-max"],
        Value,
        "Most draft tokens per step (speculative decoding emits up to this + 1).",
    ),
    m(&["-t", "--threads"], Value, "Accepted; ignored."),
    m(&["-tb", "--threads-batch"], Value, "Accepted; ignored."),
    m(
        &["-ngl", "--gpu-layers", "--n-gpu-layers"],
        Value,
        "Accepted; ignored (the profile is the GPU).",
    ),
    m(
        &["-fa", "--flash-attn"],
        Value,
        "on|off|auto (this build needs the value); ignored.",
    ),
    m(
        &["--cache-reuse"],
        Value,
        "Accepted; KV shifting is not modelled.",
    ),
    m(&["--no-webui"], Bool, "Accepted; there is no web UI."),
    m(
        &["-s", "--seed"],
        Value,
        "Seed for generated tokens and speculative accept lengths.",
    ),
    m(
        &["--profile"],
        Value,
        "(simulator) Timing profile: a built-in name or a YAML file.",
    ),
    m(
        &["--sim-time-scale"],
        Value,
        "(simulator) Multiply every modelled duration by this.",
    ),
    m(
        &["--sim-thinking-tokens"],
        Value,
        "(simulator) Thinking tokens the model writes before each answer.",
    ),
    m(
        &["--sim-broken-tool-calls-above-batch"],
        Value,
        "(simulator) Fault: tool calls made while more than N chat requests are live have broken arguments.",
    ),
];

fn lookup(arg: &str) -> Option<&'static Flag> {
    FLAGS
        .iter()
        .chain(engine_flags())
        .find(|f| f.names.contains(&arg))
}

fn did_you_mean(arg: &str) -> Option<String> {
    FLAGS
        .iter()
        .chain(engine_flags())
        .flat_map(|f| f.names.iter())
        .map(|n| (strsim::jaro_winkler(arg, n), *n))
        .filter(|(s, _)| *s >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, n)| n.to_string())
}

/// Parses the arguments after `servebench sim --api llama.cpp`.
pub(crate) fn parse(args: &[String]) -> Result<LlamaParsed, LlamaArgError> {
    let mut given: Vec<(&'static str, Option<String>)> = Vec::new();
    let mut warnings = Vec::new();
    let mut help = false;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "-h" || arg == "--help" || arg == "--usage" {
            help = true;
            continue;
        }
        let Some(flag) = lookup(arg) else {
            return Err(LlamaArgError::Invalid(arg.clone(), did_you_mean(arg)));
        };
        let value = match flag.kind {
            Bool => None,
            Value => {
                let Some(v) = args.get(i) else {
                    return Err(LlamaArgError::MissingValue(arg.clone()));
                };
                i += 1;
                Some(v.clone())
            }
            Kind::Two => {
                if args.len() < i + 2 {
                    return Err(LlamaArgError::MissingValue(arg.clone()));
                }
                i += 2;
                Some(format!("{} {}", args[i - 2], args[i - 1]))
            }
        };
        // llama.cpp's is_truthy / is_falsey / is_autoy (common/arg.cpp).
        if flag.names.contains(&"--flash-attn")
            && let Some(v) = &value
            && ![
                "on", "enabled", "true", "1", "off", "disabled", "false", "0", "auto", "-1",
            ]
            .contains(&v.as_str())
        {
            return Err(LlamaArgError::BadValue(
                arg.clone(),
                format!("error: unknown value for --flash-attn: '{v}'"),
            ));
        }
        if !flag.modelled {
            warnings.push(format!(
                "warning: servebench sim does not model llama-server's {arg}; accepted and ignored"
            ));
        }
        given.push((flag.names[flag.names.len() - 1], value));
        // The canonical name is the last (longest) spelling.
    }
    let config = resolve_config(&given)?;
    Ok(LlamaParsed {
        config,
        warnings,
        help,
    })
}

/// Reads of the parsed flags (`given`, canonical name and value, in command-line order).
struct Given<'a>(&'a [(&'static str, Option<String>)]);

impl Given<'_> {
    /// The last value given for `name` (a bare flag reads as "").
    fn last(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_deref().unwrap_or(""))
    }

    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| *n == name)
    }

    /// An integer flag, refused as `std::stoi` refuses it.
    fn int(&self, name: &str) -> Result<Option<i64>, LlamaArgError> {
        self.last(name)
            .map(|v| {
                v.trim().parse::<i64>().map_err(|_| {
                    LlamaArgError::BadValue(name.into(), format!("stoi: invalid value '{v}'"))
                })
            })
            .transpose()
    }

    /// An integer flag that must be above zero, `default` when not given.
    fn positive(&self, name: &str, default: u64) -> Result<u64, LlamaArgError> {
        match self.int(name)? {
            Some(n) if n > 0 => Ok(n as u64),
            Some(n) => Err(LlamaArgError::BadValue(
                name.into(),
                format!("invalid value {n}"),
            )),
            None => Ok(default),
        }
    }

    /// A comma-separated list flag's non-empty items.
    fn list(&self, name: &str) -> Vec<String> {
        self.last(name)
            .map(|a| {
                a.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// An on/off pair where the last one given wins and on is the default.
    fn enabled(&self, on: &str, off: &str) -> bool {
        self.0
            .iter()
            .rev()
            .find(|(n, _)| *n == on || *n == off)
            .is_none_or(|(n, _)| *n != off)
    }
}

fn resolve_config(given: &[(&'static str, Option<String>)]) -> Result<SimConfig, LlamaArgError> {
    let g = Given(given);
    let profile = sim_profile(&g)?;
    let mut c = SimConfig::engine_defaults(Api::LlamaCpp, profile.clone());
    let port = g.int("--port")?.unwrap_or(8080);
    c.port = u16::try_from(port)
        .map_err(|_| LlamaArgError::BadValue("--port".into(), format!("invalid port {port}")))?;
    c.host = g.last("--host").unwrap_or("127.0.0.1").to_string();
    let n_ctx = match g.int("--ctx-size")? {
        Some(n) if n > 0 => n as u64,
        Some(0) | None => profile.context_length,
        Some(n) => {
            return Err(LlamaArgError::BadValue(
                "--ctx-size".into(),
                format!("invalid value {n}"),
            ));
        }
    };
    let np = g.int("--parallel")?.unwrap_or(-1);
    let auto_parallel = np < 0;
    let n_slots = if auto_parallel { 4 } else { np.max(1) as usize };
    let kv_unified = if g.has("--no-kv-unified") {
        false
    } else {
        auto_parallel || g.has("--kv-unified")
    };
    let n_ctx_slot = if kv_unified {
        n_ctx
    } else {
        (n_ctx / n_slots as u64).max(1)
    };
    let n_batch = g.positive("--batch-size", 2048)?;
    let n_ubatch = g.positive("--ubatch-size", 512)?.min(n_batch);
    let model_path = g.last("--model").unwrap_or("sim-model.gguf").to_string();
    let aliases = g.list("--alias");
    let api_keys = api_keys(&g)?;
    c.reasoning_split = reasoning_split(&g)?;
    // Calls are parsed from the model's text through the Jinja template path only
    // (server-common.cpp `oaicompat_chat_params_parse` refuses `tools` without it).
    c.tool_call_parser = jinja(&g);
    c.broken_tool_calls_above = g
        .int("--sim-broken-tool-calls-above-batch")?
        .map(|n| n.max(0) as u64);
    let draft = g.int("--draft-max")?;
    let spec_on = g.has("--model-draft");
    c.speculative = speculative_model(&profile, spec_on, draft.filter(|_| spec_on).map(|d| d + 1));
    if let Some(seed) = g.int("--seed")? {
        c.seed = seed as u64;
    }
    let m = &profile.memory;
    // llama.cpp allocates the whole context's KV cache at load, beside the weights.
    let static_gb = m.weight_gb + n_ctx as f64 * m.kv_bytes_per_token / 1e9;
    c.mem_fraction_static = (static_gb / m.gpu_gb).clamp(0.0, 1.0);
    c.model_path = model_path.clone();
    c.served_model_name = aliases
        .first()
        .cloned()
        .unwrap_or_else(|| model_path.clone());
    c.context_length = n_ctx_slot;
    c.max_total_tokens = n_ctx as i64;
    c.max_running_requests = n_slots;
    c.chunked_prefill_size = Some(n_ubatch);
    c.max_prefill_tokens = n_batch;
    c.disable_radix_cache = false;
    c.enable_metrics = g.has("--metrics");
    c.llama = Some(Arc::new(LlamaOptions {
        model_path,
        aliases,
        n_slots,
        auto_parallel,
        n_ctx,
        n_ctx_slot,
        kv_unified,
        metrics: g.has("--metrics"),
        slots_endpoint: g.enabled("--slots", "--no-slots"),
        slot_save_path: g.last("--slot-save-path").map(str::to_string),
        api_keys,
        n_batch,
        n_ubatch,
        n_predict: g.int("--n-predict")?.unwrap_or(-1),
        cache_prompt: g.enabled("--cache-prompt", "--no-cache-prompt"),
        n_ctx_train: profile.context_length,
    }));
    Ok(c)
}

/// The timing profile, with the simulator's own flags (`--profile`, `--sim-*`) applied.
fn sim_profile(g: &Given) -> Result<Profile, LlamaArgError> {
    let mut profile = Profile::load(g.last("--profile").unwrap_or("fast"))?;
    if let Some(s) = g.last("--sim-time-scale") {
        let scale: f64 = s
            .parse()
            .ok()
            .filter(|x: &f64| *x > 0.0 && x.is_finite())
            .ok_or_else(|| {
                LlamaArgError::BadValue(
                    "--sim-time-scale".into(),
                    "must be a positive number".into(),
                )
            })?;
        profile.time_scale = scale;
    }
    if let Some(n) = g.int("--sim-thinking-tokens")? {
        profile.thinking.tokens = u64::try_from(n).map_err(|_| {
            LlamaArgError::BadValue(
                "--sim-thinking-tokens".into(),
                "must not be negative".into(),
            )
        })?;
    }
    Ok(profile)
}

/// `--api-key` (comma-separated) plus each non-empty line of `--api-key-file`.
fn api_keys(g: &Given) -> Result<Vec<String>, LlamaArgError> {
    let mut api_keys = g.list("--api-key");
    if let Some(path) = g.last("--api-key-file") {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LlamaArgError::BadValue("--api-key-file".into(), e.to_string()))?;
        api_keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string),
        );
    }
    Ok(api_keys)
}

/// Whether thinking is split into `reasoning_content` (`--reasoning-format`, `--no-jinja`).
fn reasoning_split(g: &Given) -> Result<bool, LlamaArgError> {
    // common_reasoning_format_from_name (common/chat.cpp): none, auto (the default),
    // deepseek, deepseek-legacy; anything else throws. Thinking reaches `reasoning_content`
    // only through the Jinja template path (`--jinja`, on by default).
    let format = g.last("--reasoning-format").unwrap_or("auto");
    if !["none", "auto", "deepseek", "deepseek-legacy"].contains(&format) {
        return Err(LlamaArgError::BadValue(
            "--reasoning-format".into(),
            format!("Unknown reasoning format: {format}"),
        ));
    }
    Ok(format != "none" && jinja(g))
}

/// `--jinja`, on by default, unless the last of `--jinja` and `--no-jinja` turns it off.
fn jinja(g: &Given) -> bool {
    g.0.iter()
        .rev()
        .find_map(|(n, _)| match *n {
            "--jinja" => Some(true),
            "--no-jinja" => Some(false),
            _ => None,
        })
        .unwrap_or(true)
}

/// `servebench sim --api llama.cpp --help`.
pub(crate) fn help_text() -> String {
    use std::fmt::Write;
    let mut s = String::from(
        "usage: servebench sim --api llama.cpp [options]\n\n\
         A simulated llama.cpp server (llama-server compatible): /health, /props, /slots,\n\
         /v1/models, /tokenize, /detokenize, /metrics (llamacpp: names, with --metrics),\n\
         /completion, /v1/completions, /v1/chat/completions, and the connection closed after\n\
         every streamed response. Same timing model as the SGLang surface.\n\n\
         Modelled flags:\n",
    );
    for f in FLAGS.iter().filter(|f| f.modelled) {
        let meta = match f.kind {
            Bool => "",
            Value => " N",
            Kind::Two => " A B",
        };
        let _ = writeln!(s, "  {}{meta}\n      {}", f.names.join(", "), f.help);
    }
    let _ = write!(
        s,
        "\nAccepted with a warning: the other {} options of llama-server (llama-cpp-python 0.3.36's \
         llama.cpp, common/arg.cpp).\n\nAny other argument (`--mlock`, `--no-mmap`, ...): \
         `error: invalid argument`, exit status 1 (as llama-server).\n",
        engine_flags().len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<LlamaParsed, LlamaArgError> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    /// Every spelling llama-server 0.3.36's arg.cpp gives is accepted (the modelled ones
    /// without a warning); what that build dropped (`--mlock`, `--no-mmap`) is refused.
    #[test]
    fn every_spelling_of_the_build_and_nothing_else() {
        let mut n = 0;
        for line in ENGINE_FLAGS.lines().filter(|l| !l.starts_with('#')) {
            let mut words = line.split_whitespace();
            let kind = words.next().unwrap();
            for name in words.filter(|w| *w != "|") {
                if [
                    "-h",
                    "--help",
                    "--usage",
                    "--version",
                    "-cl",
                    "--cache-list",
                    "--completion-bash",
                    "--list-devices",
                ]
                .contains(&name)
                {
                    continue;
                }
                let mut args = vec![name.to_string()];
                match kind {
                    "value" => args.push(if name.contains("flash-attn") || name == "-fa" {
                        "on".into()
                    } else {
                        "1".into()
                    }),
                    "value2" => args.extend(["1".into(), "2".into()]),
                    _ => {}
                }
                let parsed = parse(&args);
                assert!(
                    !matches!(parsed, Err(LlamaArgError::Invalid(..))),
                    "{name} refused: {:?}",
                    parsed.err()
                );
                n += 1;
            }
        }
        assert!(n > 400, "{n} spellings");
        for gone in ["--mlock", "--no-mmap", "--model-path"] {
            let e = p(&["-m", "x", gone]).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("error: invalid argument: {gone}")),
                "{e}"
            );
        }
        // Modelled spellings are the build's too (the simulator's own two apart).
        for f in FLAGS {
            for name in f.names {
                if [
                    "--profile",
                    "--sim-time-scale",
                    "--sim-thinking-tokens",
                    "--sim-broken-tool-calls-above-batch",
                ]
                .contains(name)
                {
                    continue;
                }
                assert!(
                    engine_flags().iter().any(|e| e.names.contains(name)),
                    "{name} is not llama-server's"
                );
            }
        }
    }

    #[test]
    fn slots_and_context() {
        let r = p(&[
            "-m",
            "x.gguf",
            "-c",
            "8192",
            "-np",
            "2",
            "--metrics",
            "-a",
            "tiny,t2",
        ])
        .unwrap();
        let l = r.config.llama.clone().unwrap();
        assert_eq!(
            (l.n_slots, l.n_ctx, l.n_ctx_slot, l.kv_unified),
            (2, 8192, 4096, false)
        );
        assert_eq!(r.config.context_length, 4096);
        assert_eq!(r.config.max_running_requests, 2);
        assert_eq!(r.config.served_model_name, "tiny");
        assert!(l.metrics && l.slots_endpoint && l.slot_save_path.is_none());
        let r = p(&["-m", "x.gguf", "-c", "8192", "-np", "2", "-kvu"]).unwrap();
        assert_eq!(r.config.llama.unwrap().n_ctx_slot, 8192);
        let r = p(&["-m", "x.gguf", "-c", "8192"]).unwrap();
        let l = r.config.llama.unwrap();
        assert_eq!((l.n_slots, l.kv_unified, l.auto_parallel), (4, true, true));
    }

    #[test]
    fn spellings_the_observed_build_removed_are_refused() {
        // Checked against the real llama-server (tests/real_engine/llamacpp.rs): each exits 1.
        for flag in [
            "--no-mmap",
            "--mlock",
            "-k",
            "-cd",
            "--ctx-size-draft",
            "--draft-min",
        ] {
            let e = p(&["-m", "x", flag, "2"]).unwrap_err().to_string();
            assert!(e.contains("invalid argument"), "{flag}: {e}");
        }
        assert!(p(&["-m", "x", "--load-mode", "mmap", "--keep", "4"]).is_ok());
    }

    #[test]
    fn ignored_unknown_and_bad() {
        let r = p(&[
            "-m",
            "x",
            "-t",
            "8",
            "-ngl",
            "99",
            "-fa",
            "on",
            "--no-webui",
            "-cram",
            "0",
        ])
        .unwrap();
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        let e = p(&["--model-path", "x"]).unwrap_err().to_string();
        assert!(
            e.starts_with("error: invalid argument: --model-path"),
            "{e}"
        );
        let e = p(&["--ctx-sise", "5"]).unwrap_err().to_string();
        assert!(e.contains("did you mean --ctx-size?"), "{e}");
        assert!(p(&["-c", "abc"]).is_err());
        assert!(p(&["-c"]).is_err());
        // This build's -fa takes a value: a bare one swallows the next argument, as there.
        let e = p(&["-fa", "-m", "y"]).unwrap_err().to_string();
        assert!(e.contains("unknown value for --flash-attn: '-m'"), "{e}");
        assert!(
            !p(&["--no-slots"])
                .unwrap()
                .config
                .llama
                .unwrap()
                .slots_endpoint
        );
    }
}
