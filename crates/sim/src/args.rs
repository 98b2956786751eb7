//! Parsing `sglang.launch_server` flags the way argparse does.
//!
//! `--flag value` and `--flag=value`, unique-prefix abbreviations (`--tp` -> `--tp-size`),
//! bare booleans. Abbreviations are matched against every option string of sglang 0.5.23
//! (the engine adapter's list, `engine/flags/sglang.txt`), so a prefix of several (`--pp`,
//! `--cuda-graph-max-bs`) is argparse's "ambiguous option" and a flag 0.5.23 does not have
//! (`--stream-output`) is "unrecognized arguments", both exit 2 as there
//! (sglang-facts section 9). 0.5.23's flags the simulator does not model are accepted with a
//! warning, and a value that follows them is skipped.

use super::flags::{FLAGS, Flag, Kind, SECTIONS, dest};
use indexmap::IndexMap;
use serde_json::Value;

/// A command-line error; the process exits with status 2.
#[derive(Debug, thiserror::Error)]
pub enum SimArgError {
    /// The value does not parse as the flag's type.
    #[error("argument --{flag}: invalid {kind} value: {value:?}")]
    BadValue {
        /// The flag.
        flag: String,
        /// "int" or "float".
        kind: &'static str,
        /// What was given.
        value: String,
    },
    /// The flag needs a value and none followed.
    #[error("argument --{0}: expected one argument")]
    MissingValue(String),
    /// An abbreviation matched several flags.
    #[error("ambiguous option: --{given} could match {candidates}")]
    Ambiguous {
        /// What was given.
        given: String,
        /// The flags it could mean.
        candidates: String,
    },
    /// A boolean flag was given a value with `=`.
    #[error("argument --{0}: ignored explicit argument")]
    UnexpectedValue(String),
    /// Arguments launch_server does not have (flags 0.5.23 lacks, positionals), all of them
    /// as argparse lists them once parsing is done.
    #[error("unrecognized arguments: {0}")]
    Positional(String),
    /// The flag values are inconsistent or out of range.
    #[error("{0}")]
    Invalid(String),
    /// The profile could not be loaded.
    #[error(transparent)]
    Profile(#[from] super::profile::ProfileError),
}

/// What the command line asked for.
#[derive(Debug, Clone, Default)]
pub struct ParsedArgs {
    /// Every known flag's value by `/server_info` key (defaults filled in).
    pub values: IndexMap<String, Value>,
    /// `--help` was given.
    pub help: bool,
    /// Warnings about unknown flags, to print to stderr.
    pub warnings: Vec<String>,
}

impl ParsedArgs {
    /// An integer flag's value, if set.
    pub(crate) fn int(&self, name: &str) -> Option<i64> {
        self.values.get(&dest(name)).and_then(Value::as_i64)
    }
    /// A float flag's value, if set.
    pub(crate) fn float(&self, name: &str) -> Option<f64> {
        self.values.get(&dest(name)).and_then(Value::as_f64)
    }
    /// A string flag's value, if set.
    pub(crate) fn str(&self, name: &str) -> Option<&str> {
        self.values.get(&dest(name)).and_then(Value::as_str)
    }
    /// A boolean flag's value.
    pub(crate) fn flag(&self, name: &str) -> bool {
        self.values
            .get(&dest(name))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// Every option string of sglang 0.5.23's `launch_server` (without `--`): the list the
/// engine adapter checks specs against.
const ENGINE_FLAGS: &str = include_str!("../../../src/engine/flags/sglang.txt");

/// The simulator's own flags, on top of SGLang's.
const SIM_ONLY: &[&str] = &["profile", "sim-time-scale"];

/// What a flag on the command line stands for.
enum Found {
    /// A flag the simulator models.
    Modelled(&'static Flag),
    /// One of SGLang's flags the simulator does not model (its option string).
    Unmodelled(&'static str),
}

/// Every option string argparse would know: SGLang's, and the simulator's own.
fn option_strings() -> impl Iterator<Item = &'static str> {
    ENGINE_FLAGS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .chain(SIM_ONLY.iter().copied())
}

fn found(option: &'static str) -> Found {
    match FLAGS
        .iter()
        .find(|f| f.name == option || f.aliases.contains(&option))
    {
        Some(f) => Found::Modelled(f),
        None => Found::Unmodelled(option),
    }
}

/// argparse's `_parse_optional`: an exact option string, else the one it abbreviates (an
/// error when it abbreviates several), else unknown.
fn lookup(given: &str) -> Result<Option<Found>, SimArgError> {
    if let Some(exact) = option_strings().find(|o| *o == given) {
        return Ok(Some(found(exact)));
    }
    let hits: Vec<&'static str> = option_strings().filter(|o| o.starts_with(given)).collect();
    match hits.len() {
        0 => Ok(None),
        1 => Ok(Some(found(hits[0]))),
        _ => Err(SimArgError::Ambiguous {
            given: given.to_string(),
            candidates: hits
                .iter()
                .map(|n| format!("--{n}"))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Whether `arg` is a value rather than a flag (argparse takes "-1" as a value).
fn is_value(arg: &str) -> bool {
    !arg.starts_with('-') || arg.parse::<f64>().is_ok()
}

fn typed(flag: &Flag, raw: &str) -> Result<Value, SimArgError> {
    let bad = |kind| SimArgError::BadValue {
        flag: flag.name.to_string(),
        kind,
        value: raw.to_string(),
    };
    Ok(match flag.kind {
        Kind::Int => Value::from(raw.trim().parse::<i64>().map_err(|_| bad("int"))?),
        Kind::Float => {
            let x = raw.trim().parse::<f64>().map_err(|_| bad("float"))?;
            if !x.is_finite() {
                return Err(bad("float"));
            }
            Value::from(x)
        }
        Kind::Str => Value::from(raw),
        Kind::Bool => Value::Bool(true),
    })
}

/// Parses the arguments after `servebench sim`.
pub(crate) fn parse(args: &[String]) -> Result<ParsedArgs, SimArgError> {
    let mut out = ParsedArgs::default();
    for f in FLAGS {
        let v: Value = serde_json::from_str(f.default).unwrap_or(Value::Null);
        out.values.insert(dest(f.name), v);
    }
    let mut unrecognized: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--help" || arg == "-h" {
            out.help = true;
            continue;
        }
        let Some(body) = arg.strip_prefix("--") else {
            unrecognized.push(arg.clone());
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let flag = match lookup(name)? {
            Some(Found::Modelled(flag)) => flag,
            Some(Found::Unmodelled(option)) => {
                out.warnings.push(format!(
                    "WARNING: servebench sim does not model SGLang's --{option}; accepted and ignored"
                ));
                if inline.is_none() && args.get(i).is_some_and(|v| is_value(v)) {
                    i += 1;
                }
                continue;
            }
            None => {
                // argparse lists the unknown flag and the values after it that nothing took.
                unrecognized.push(arg.clone());
                while inline.is_none() && args.get(i).is_some_and(|v| is_value(v)) {
                    unrecognized.push(args[i].clone());
                    i += 1;
                }
                continue;
            }
        };
        let value = if flag.kind == Kind::Bool {
            if inline.is_some() {
                return Err(SimArgError::UnexpectedValue(flag.name.to_string()));
            }
            Value::Bool(true)
        } else {
            let raw = match inline {
                Some(v) => v,
                None => {
                    let next = args.get(i).filter(|v| is_value(v));
                    let Some(v) = next else {
                        return Err(SimArgError::MissingValue(flag.name.to_string()));
                    };
                    i += 1;
                    v.clone()
                }
            };
            typed(flag, &raw)?
        };
        out.values.insert(dest(flag.name), value);
    }
    if !unrecognized.is_empty() {
        return Err(SimArgError::Positional(unrecognized.join(" ")));
    }
    Ok(out)
}

/// How `launch_server` reports a command line argparse refuses (its `error()`: the usage line,
/// then `PROG: error: MESSAGE`, exit 2); `None` for the simulator's own errors.
pub(crate) fn argparse_message(e: &SimArgError) -> Option<String> {
    match e {
        SimArgError::Invalid(_) | SimArgError::Profile(_) => None,
        _ => Some(format!(
            "usage: launch_server.py [-h] --model-path MODEL_PATH [options]\nlaunch_server.py: error: {e}"
        )),
    }
}

/// The `--help` text: every flag, what the simulator does with it, and the profiles.
pub(crate) fn help_text() -> String {
    use std::fmt::Write;
    let mut s = String::new();
    s.push_str(
        "servebench sim: a simulated SGLang server (python -m sglang.launch_server compatible).\n\n\
         It serves SGLang's HTTP API (/generate, /v1/completions, /v1/chat/completions,\n\
         /flush_cache, /health, /health_generate, /server_info, /model_info, /v1/models,\n\
         /metrics, /abort_request) with a deterministic tokenizer, a radix prefix cache bounded\n\
         by a KV pool, continuous batching, chunked prefill and a timing model taken from a\n\
         profile. No GPU and no model weights are used. Logs use SGLang's format and lines.\n\n\
         USAGE: servebench sim [--model-path NAME] [--port PORT] [FLAGS...]\n\
         Other engines: servebench sim --api vllm ... (vllm serve flags), servebench sim\n\
         --api llama.cpp ... (llama-server flags); add --help to either for its flags.\n\n\
         Flags take `--flag value` or `--flag=value`; unique prefixes of sglang 0.5.23's\n\
         flags work (`--tp 2`); a prefix of several (`--pp`) and a flag 0.5.23 lacks\n\
         (`--stream-output`) exit 2, as argparse does; its flags not listed here warn.\n",
    );
    for f in FLAGS {
        if let Some((_, title)) = SECTIONS.iter().find(|(first, _)| *first == f.name) {
            let _ = write!(s, "\n{title}:\n");
        }
        let mut names = format!("--{}", f.name);
        for a in f.aliases {
            let _ = write!(names, ", --{a}");
        }
        let meta = match f.kind {
            Kind::Bool => "",
            Kind::Int => " INT",
            Kind::Float => " FLOAT",
            Kind::Str => " STR",
        };
        let _ = write!(s, "  {names}{meta}\n      {}\n", f.help);
    }
    s.push_str("\nProfiles (--profile NAME, or a path to a YAML file with the same fields):\n");
    for (name, text) in super::profile::BUILTIN {
        let desc = super::profile::Profile::parse(name, text)
            .map(|p| p.description)
            .unwrap_or_default();
        let _ = writeln!(s, "  {name:<14} {desc}");
    }
    s.push_str(
        "\nProfile fields (see profiles/fast.yaml): time_scale, warmup_s, context_length,\n\
         max_running_requests, chunked_prefill_size, memory{gpu_gb, weight_gb,\n\
         kv_bytes_per_token, mem_fraction_static, graph_gb, activation{runtime_overhead_mib,\n\
         bytes_per_token, bytes_per_token_ctx}}, prefill{base_ms, per_token_us,\n\
         attention_ns}, decode{base_ms, per_seq_us, per_ctx_token_ns}, speculative{\n\
         num_draft_tokens, accept_length_mean, step_overhead_ms, enabled}, oom_prefill_tokens\n\
         (a prefill batch with more new tokens crashes like a CUDA out-of-memory), seed.\n\
         With memory.activation, a prefill chunk whose activation spike (plus, unless\n\
         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is set, the largest earlier spike\n\
         still reserved) exceeds the memory outside the static pool crashes the same way\n\
         (see profiles/kimi-k2.6-8x-rtxpro6000.yaml).\n\n\
         Exit status: 0 after a clean shutdown (Ctrl-C), 1 on a simulated crash or start-up\n\
         failure, 2 on bad arguments.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<ParsedArgs, SimArgError> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn forms_prefixes_and_booleans() {
        let a = p(&[
            "--model",
            "m",
            "--tp",
            "2",
            "--port=31000",
            "--enable-metrics",
            "--chunked-prefill-size",
            "-1",
            "--mem-fraction",
            "0.5",
        ])
        .unwrap();
        assert_eq!(a.str("model-path"), Some("m"));
        assert_eq!(a.int("tp-size"), Some(2));
        assert_eq!(a.int("port"), Some(31000));
        assert!(a.flag("enable-metrics"));
        assert_eq!(a.int("chunked-prefill-size"), Some(-1));
        assert_eq!(a.float("mem-fraction-static"), Some(0.5));
        assert!(!a.flag("disable-radix-cache"));
    }

    #[test]
    fn unmodelled_flags_of_0_5_23_warn_and_skip_their_value() {
        let a = p(&[
            "--tokenizer-mode",
            "auto",
            "--port",
            "1",
            "--enable-torch-compile-debug-mode",
            "--host",
            "h",
        ])
        .unwrap();
        assert_eq!(a.warnings.len(), 2, "{:?}", a.warnings);
        assert_eq!(a.int("port"), Some(1));
        assert_eq!(a.str("host"), Some("h"));
    }

    /// sglang 0.5.23 refuses these with exit 2 (sglang-facts section 9).
    #[test]
    fn refused_as_sglang_0_5_23_refuses_them() {
        let ambiguous = |args: &[&str]| match p(args) {
            Err(e @ SimArgError::Ambiguous { .. }) => e.to_string(),
            other => panic!("{args:?}: {other:?}"),
        };
        let e = ambiguous(&["--pp", "2"]);
        assert!(
            e.starts_with("ambiguous option: --pp could match --pp-"),
            "{e}"
        );
        assert!(
            e.contains("--pp-size") && e.contains("--pp-max-micro-batch-size"),
            "{e}"
        );
        let e = ambiguous(&["--cuda-graph-max-bs", "8"]);
        assert!(
            e.contains("--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
            "{e}"
        );
        let e = p(&["--port", "1", "--stream-output", "--frobnicate", "7"])
            .unwrap_err()
            .to_string();
        assert_eq!(e, "unrecognized arguments: --stream-output --frobnicate 7");
        let msg = argparse_message(&p(&["--stream-output"]).unwrap_err()).unwrap();
        assert!(
            msg.ends_with("\nlaunch_server.py: error: unrecognized arguments: --stream-output"),
            "{msg}"
        );
        // Whole names and unique prefixes still work.
        let a = p(&[
            "--pp-size",
            "2",
            "--cuda-graph-max-bs-d",
            "8",
            "--tensor-parallel-size",
            "2",
        ])
        .unwrap();
        assert_eq!(a.int("pp-size"), Some(2));
        assert_eq!(a.int("tp-size"), Some(2));
        assert_eq!(a.int("cuda-graph-max-bs-decode"), Some(8));
    }

    /// Every flag the simulator models is one of sglang 0.5.23's (or the simulator's own).
    #[test]
    fn modelled_flags_are_sglang_0_5_23_flags() {
        for f in FLAGS {
            for n in std::iter::once(&f.name).chain(f.aliases) {
                assert!(
                    option_strings().any(|o| o == *n),
                    "--{n} is not sglang 0.5.23's"
                );
            }
        }
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(matches!(
            p(&["--port", "abc"]),
            Err(SimArgError::BadValue { .. })
        ));
        assert!(matches!(p(&["--port"]), Err(SimArgError::MissingValue(_))));
        assert!(matches!(
            p(&["--stream"]),
            Err(SimArgError::Ambiguous { .. })
        ));
        assert!(matches!(p(&["stray"]), Err(SimArgError::Positional(_))));
        assert!(matches!(
            p(&["--enable-metrics=1"]),
            Err(SimArgError::UnexpectedValue(_))
        ));
    }

    #[test]
    fn help_mentions_every_flag_and_profile() {
        let h = help_text();
        for f in FLAGS {
            assert!(h.contains(&format!("--{}", f.name)), "{}", f.name);
        }
        assert!(h.contains("h100-llama8b"));
    }
}
