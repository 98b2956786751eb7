//! Parsing `sglang.launch_server` flags the way its argparse parser does.
//!
//! Every action of sglang 0.5.23's parser is in `sglang_options.txt` (generated from the
//! parser itself by `scripts/real-engines/sglang_flags.py`): its option strings, how it reads
//! its value (`int`, `float`, SGLang's `human_readable_int` with SI and IEC suffixes, JSON,
//! ...), its nargs and its choices. `--flag value` and `--flag=value`, unique-prefix
//! abbreviations (`--tp` -> `--tp-size`), bare booleans and `--no-X` where 0.5.23 defines one.
//! A prefix of several (`--pp`) is argparse's "ambiguous option", a flag 0.5.23 does not have
//! (`--stream-output`) "unrecognized arguments", a value of the wrong type or outside the
//! choices "invalid ... value" / "invalid choice", all exit 2 with argparse's words
//! (sglang-facts section 9). Flags the simulator does not model are checked the same way,
//! then accepted with a warning.

use super::flags::{FLAGS, Flag, Kind, SECTIONS, dest};
use super::python::{human_readable_int, py_float_parse, py_int, py_str};
use indexmap::IndexMap;
use serde_json::Value;
use std::sync::OnceLock;

/// A command-line error; the process exits with status 2.
#[derive(Debug, thiserror::Error)]
pub enum SimArgError {
    /// The value does not parse as the flag's type, or is not one of its choices: argparse's
    /// `argument --FLAG[/--ALIAS]: MESSAGE`.
    #[error("argument {option}: {message}")]
    BadValue {
        /// The flag's option strings as argparse names them (`--tp-size/--tensor-parallel-size`).
        option: String,
        /// argparse's words (`invalid int value: 'x'`), or the type function's own.
        message: String,
    },
    /// The flag needs a value and none followed (its option strings).
    #[error("argument {0}: expected one argument")]
    MissingValue(String),
    /// The flag takes one or more values and none followed.
    #[error("argument {0}: expected at least one argument")]
    MissingValues(String),
    /// An abbreviation matched several flags.
    #[error("ambiguous option: {given} could match {candidates}")]
    Ambiguous {
        /// What was given (with its `=value`, as argparse quotes it).
        given: String,
        /// The flags it could mean.
        candidates: String,
    },
    /// A flag without a value was given one with `=`.
    #[error("argument {option}: ignored explicit argument {}", py_str(value))]
    UnexpectedValue {
        /// The flag's option strings.
        option: String,
        /// What followed the `=`.
        value: String,
    },
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
    /// SGLang's argument resolution raised after parsing (its traceback's last lines); the
    /// process exits 1, as an uncaught Python exception does.
    #[error("{}", .0.lines().last().unwrap_or_default())]
    Raised(String),
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

/// sglang 0.5.23's parser, one action a line (see the module documentation).
const OPTIONS_TABLE: &str = include_str!("sglang_options.txt");

/// The simulator's own flags, on top of SGLang's (each one value, any string).
const SIM_ONLY: &[&str] = &[
    "profile",
    "sim-time-scale",
    "sim-thinking-tokens",
    "sim-broken-tool-calls-above-batch",
    "sim-repeat-tool-call-names",
    "sim-no-prefix-hits",
    "sim-kv-transfer-gbps",
    "sim-kv-transfer-latency-ms",
];

/// How an action reads its value (the table's KIND column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueKind {
    /// No value: `store_true`, `BooleanOptionalAction` (`--no-X` stores false).
    Flag,
    /// Any string.
    Str,
    /// Python's `int`.
    Int,
    /// Python's `float`.
    Float,
    /// SGLang's `human_readable_int`.
    HumanInt,
    /// `json.loads`.
    Loads,
    /// SGLang's `json_list_type` (orjson).
    JsonList,
    /// `parse_cuda_graph_backend_arg`: refuses the retired `tc_piecewise`.
    CudaGraphBackend,
    /// A parser the simulator does not imitate: the value is taken as it is.
    Any,
}

/// How many values an action takes (argparse's nargs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nargs {
    /// None (a flag).
    Zero,
    /// Exactly one.
    One,
    /// Zero or one (`?`).
    Optional,
    /// Any number (`*`).
    Many,
    /// At least one (`+`).
    AtLeastOne,
}

/// One action of the parser.
#[derive(Debug)]
pub(crate) struct Action {
    /// Its option strings without `--`, in argparse's order.
    pub options: Vec<&'static str>,
    /// How it reads its value.
    pub kind: ValueKind,
    /// How many values it takes.
    pub nargs: Nargs,
    /// The values it allows, if restricted.
    pub choices: Option<Vec<&'static str>>,
}

impl Action {
    /// The name argparse gives it in errors: `--tp-size/--tensor-parallel-size`.
    pub fn display(&self) -> String {
        self.options
            .iter()
            .map(|o| format!("--{o}"))
            .collect::<Vec<_>>()
            .join("/")
    }
}

/// Every action of sglang 0.5.23's parser, and the simulator's own.
pub(crate) fn actions() -> &'static [Action] {
    static ACTIONS: OnceLock<Vec<Action>> = OnceLock::new();
    ACTIONS.get_or_init(|| {
        let mut all: Vec<Action> = OPTIONS_TABLE
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| {
                let cols: Vec<&'static str> = l.split('\t').collect();
                let kind = match cols.get(1).copied() {
                    Some("flag") => ValueKind::Flag,
                    Some("int") => ValueKind::Int,
                    Some("float") => ValueKind::Float,
                    Some("human_int") => ValueKind::HumanInt,
                    Some("loads") => ValueKind::Loads,
                    Some("json_list") => ValueKind::JsonList,
                    Some("cuda_graph_backend") => ValueKind::CudaGraphBackend,
                    Some("str") => ValueKind::Str,
                    _ => ValueKind::Any,
                };
                let nargs = match cols.get(2).copied() {
                    Some("0") => Nargs::Zero,
                    Some("?") => Nargs::Optional,
                    Some("*") => Nargs::Many,
                    Some("+") => Nargs::AtLeastOne,
                    _ => Nargs::One,
                };
                let choices = cols
                    .get(3)
                    .filter(|c| **c != "-")
                    .map(|c| c.split(' ').collect());
                Action {
                    options: cols[0].split('/').collect(),
                    kind,
                    nargs,
                    choices,
                }
            })
            .collect();
        all.extend(SIM_ONLY.iter().map(|o| {
            let kind = match modelled(o).map(|f| f.kind) {
                Some(Kind::Int) => ValueKind::Int,
                Some(Kind::Float) => ValueKind::Float,
                Some(Kind::Bool) => ValueKind::Flag,
                _ => ValueKind::Str,
            };
            Action {
                options: vec![*o],
                kind,
                nargs: if kind == ValueKind::Flag {
                    Nargs::Zero
                } else {
                    Nargs::One
                },
                choices: None,
            }
        }));
        all
    })
}

/// Every option string argparse would know: SGLang's, and the simulator's own.
fn option_strings() -> impl Iterator<Item = &'static str> {
    actions().iter().flat_map(|a| a.options.iter().copied())
}

/// The action an exact option string belongs to.
fn action_of(option: &str) -> Option<&'static Action> {
    actions().iter().find(|a| a.options.contains(&option))
}

/// The flag the simulator models under an option string, if any.
fn modelled(option: &str) -> Option<&'static Flag> {
    FLAGS
        .iter()
        .find(|f| f.name == option || f.aliases.contains(&option))
}

/// argparse's `_parse_optional`: an exact option string, else the one it abbreviates (an
/// error when it abbreviates several), else unknown. `arg` is the whole argument (for the
/// error), `name` its option part without `--`.
fn lookup(arg: &str, name: &str) -> Result<Option<&'static str>, SimArgError> {
    if let Some(exact) = option_strings().find(|o| *o == name) {
        return Ok(Some(exact));
    }
    let hits: Vec<&'static str> = option_strings().filter(|o| o.starts_with(name)).collect();
    match hits.len() {
        0 => Ok(None),
        1 => Ok(Some(hits[0])),
        _ => Err(SimArgError::Ambiguous {
            given: arg.to_string(),
            candidates: hits
                .iter()
                .map(|n| format!("--{n}"))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// argparse's `_negative_number_matcher`: `-1` and `-.5` are values, `-1e5` is not.
fn negative_number(arg: &str) -> bool {
    let Some(rest) = arg.strip_prefix('-') else {
        return false;
    };
    let (int, frac) = match rest.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (rest, None),
    };
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    match frac {
        None => !int.is_empty() && digits(int),
        Some(f) => digits(int) && !f.is_empty() && digits(f),
    }
}

/// Whether argparse takes `arg` as a value rather than a flag: it does not start with `-`,
/// is a lone `-` or a negative number, or has a space and names no option.
fn is_value(arg: &str) -> bool {
    if !arg.starts_with('-') || arg == "-" || negative_number(arg) {
        return true;
    }
    let name = arg.trim_start_matches('-');
    let name = name.split_once('=').map_or(name, |(n, _)| n);
    arg.contains(' ') && !option_strings().any(|o| o.starts_with(name))
}

/// Whether `option` is the `--no-X` argparse's `BooleanOptionalAction` adds to `--X`.
fn is_negation(action: &Action, option: &str) -> bool {
    matches!(action.options.as_slice(), [x, no] if *no == option && no.strip_prefix("no-") == Some(*x))
}

/// One value read by the action's type and checked against its choices, as argparse's
/// `_get_value` and `_check_value` do.
fn typed(action: &Action, raw: &str) -> Result<Value, SimArgError> {
    let bad = |message: String| SimArgError::BadValue {
        option: action.display(),
        message,
    };
    let invalid = |type_name: &str| bad(format!("invalid {type_name} value: {}", py_str(raw)));
    let (value, shown) = match action.kind {
        ValueKind::Int => {
            let n = py_int(raw).ok_or_else(|| invalid("int"))?;
            (Value::from(n), n.to_string())
        }
        ValueKind::HumanInt => {
            let n = human_readable_int(raw).map_err(|e| bad(e.to_string()))?;
            (Value::from(n), n.to_string())
        }
        ValueKind::Float => {
            let x = py_float_parse(raw).ok_or_else(|| invalid("float"))?;
            (Value::from(x), super::python::py_float(x))
        }
        ValueKind::Loads => {
            serde_json::from_str::<Value>(raw).map_err(|_| invalid("loads"))?;
            (Value::from(raw), py_str(raw))
        }
        ValueKind::JsonList => {
            serde_json::from_str::<Value>(raw).map_err(|_| {
                bad(format!(
                    "Invalid JSON list: {raw}. Please provide a valid JSON list."
                ))
            })?;
            (Value::from(raw), py_str(raw))
        }
        ValueKind::CudaGraphBackend if raw == "tc_piecewise" => {
            return Err(bad(
                "tc_piecewise was removed; select breakable, full, or disabled".into(),
            ));
        }
        ValueKind::Flag => (Value::Bool(true), String::new()),
        _ => (Value::from(raw), py_str(raw)),
    };
    if let Some(choices) = &action.choices {
        let allowed = choices.iter().any(|c| match action.kind {
            ValueKind::Int | ValueKind::HumanInt => py_int(c) == value.as_i64(),
            _ => *c == raw,
        });
        if !allowed {
            let listed = choices
                .iter()
                .map(|c| match action.kind {
                    ValueKind::Int | ValueKind::HumanInt => c.to_string(),
                    _ => py_str(c),
                })
                .collect::<Vec<_>>()
                .join(", ");
            return Err(bad(format!(
                "invalid choice: {shown} (choose from {listed})"
            )));
        }
    }
    Ok(value)
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
        // Everything after `--` is positional, and launch_server takes no positionals.
        if arg == "--" {
            unrecognized.extend(args[i..].iter().cloned());
            break;
        }
        let Some(body) = arg.strip_prefix("--").filter(|_| !is_value(arg)) else {
            unrecognized.push(arg.clone());
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let Some(option) = lookup(arg, name)? else {
            // argparse lists the unknown flag and the values after it that nothing took.
            unrecognized.push(arg.clone());
            while inline.is_none() && args.get(i).is_some_and(|v| is_value(v)) {
                unrecognized.push(args[i].clone());
                i += 1;
            }
            continue;
        };
        let Some(action) = action_of(option) else {
            continue;
        };
        // The values the action consumes (argparse's nargs pattern against what follows).
        let mut raw: Vec<String> = Vec::new();
        match (action.nargs, inline) {
            (Nargs::Zero, Some(v)) => {
                return Err(SimArgError::UnexpectedValue {
                    option: action.display(),
                    value: v,
                });
            }
            (Nargs::Zero, None) => {}
            (_, Some(v)) => raw.push(v),
            (nargs, None) => {
                while args.get(i).is_some_and(|v| is_value(v)) {
                    raw.push(args[i].clone());
                    i += 1;
                    if matches!(nargs, Nargs::One | Nargs::Optional) {
                        break;
                    }
                }
                if raw.is_empty() {
                    match nargs {
                        Nargs::One => return Err(SimArgError::MissingValue(action.display())),
                        Nargs::AtLeastOne => {
                            return Err(SimArgError::MissingValues(action.display()));
                        }
                        _ => {}
                    }
                }
            }
        }
        let values = raw
            .iter()
            .map(|r| typed(action, r))
            .collect::<Result<Vec<Value>, _>>()?;
        match modelled(option) {
            Some(flag) => {
                let value = match flag.kind {
                    // `--no-X` of a BooleanOptionalAction stores false.
                    Kind::Bool => Value::Bool(!is_negation(action, option)),
                    _ => values.into_iter().next().unwrap_or(Value::Null),
                };
                out.values.insert(dest(flag.name), value);
            }
            None => out.warnings.push(format!(
                "WARNING: servebench sim does not model SGLang's --{option}; accepted and ignored"
            )),
        }
    }
    if !unrecognized.is_empty() {
        return Err(SimArgError::Positional(unrecognized.join(" ")));
    }
    Ok(out)
}

/// How `launch_server` reports a command line argparse refuses (its `error()`: the usage line,
/// then `PROG: error: MESSAGE`, exit 2; 0.5.23's parser is `sglang serve`'s, for both ways
/// of starting it); `None` for the simulator's own errors.
pub(crate) fn argparse_message(e: &SimArgError) -> Option<String> {
    match e {
        SimArgError::Invalid(_) | SimArgError::Profile(_) | SimArgError::Raised(_) => None,
        _ => Some(format!(
            "usage: sglang serve [-h] --model-path MODEL_PATH [options]\nsglang serve: error: {e}"
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
         attention_ns}, decode{base_ms, per_seq_us, per_ctx_token_ns, min_step_ms}, speculative{\n\
         num_draft_tokens, num_steps, accept_length_mean, accept_length_by_context,\n\
         step_overhead_ms, per_draft_token_us, enabled}, oom_prefill_tokens\n\
         (a prefill batch with more new tokens crashes like a CUDA out-of-memory),\n\
         profiler_stop_ms (how long /stop_profile takes to answer), seed, facts{gpu, tp,\n\
         model_config} (what it models, for grading its runs; the simulator ignores it).\n\
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
        // 0.5.23's parser is `sglang serve`'s, also under `python -m sglang.launch_server`.
        let msg = argparse_message(&p(&["--stream-output"]).unwrap_err()).unwrap();
        assert!(
            msg.ends_with("\nsglang serve: error: unrecognized arguments: --stream-output"),
            "{msg}"
        );
        assert_eq!(
            p(&["--pp=2"]).unwrap_err().to_string(),
            "ambiguous option: --pp=2 could match --pp-size, --pp-max-micro-batch-size, --pp-async-batch-depth"
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

    /// Every flag the simulator models is one of sglang 0.5.23's (or the simulator's own),
    /// read as 0.5.23's parser reads it, and all of a flag's option strings are the one
    /// action's.
    #[test]
    fn modelled_flags_are_sglang_0_5_23_flags() {
        for f in FLAGS {
            let action =
                action_of(f.name).unwrap_or_else(|| panic!("--{} is not sglang 0.5.23's", f.name));
            for n in f.aliases {
                assert!(action.options.contains(n), "--{n} is not --{}'s", f.name);
            }
            let fits = match f.kind {
                Kind::Bool => action.kind == ValueKind::Flag,
                Kind::Int => matches!(action.kind, ValueKind::Int | ValueKind::HumanInt),
                Kind::Float => action.kind == ValueKind::Float,
                Kind::Str => matches!(action.kind, ValueKind::Str | ValueKind::Any),
            };
            assert!(
                fits && action.nargs != Nargs::Many,
                "--{}: {:?} against {action:?}",
                f.name,
                f.kind
            );
        }
    }

    /// The parser's table and the shared list ([`crate::SGLANG_FLAGS`], which
    /// `servebench validate` checks specs against) name the same option strings.
    #[test]
    fn the_table_and_the_shared_list_agree() {
        let list: std::collections::BTreeSet<&str> = crate::SGLANG_FLAGS
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let table: std::collections::BTreeSet<&str> =
            option_strings().filter(|o| !SIM_ONLY.contains(o)).collect();
        assert_eq!(list, table);
    }

    /// What sglang 0.5.23's own parser answered (each checked by running it).
    #[test]
    fn bad_values_are_refused_in_argparse_words() {
        let err = |args: &[&str]| p(args).unwrap_err().to_string();
        assert_eq!(
            err(&["--port", "abc"]),
            "argument --port: invalid int value: 'abc'"
        );
        assert_eq!(
            err(&["--tp", "abc"]),
            "argument --tp-size/--tensor-parallel-size: invalid int value: 'abc'"
        );
        assert_eq!(
            err(&["--model-path"]),
            "argument --model-path/--model: expected one argument"
        );
        assert_eq!(
            err(&["--port", "-1e5"]),
            "argument --port: expected one argument"
        );
        assert!(matches!(
            p(&["--stream"]),
            Err(SimArgError::Ambiguous { .. })
        ));
        assert!(matches!(p(&["stray"]), Err(SimArgError::Positional(_))));
        assert_eq!(
            err(&["--enable-metrics=1"]),
            "argument --enable-metrics: ignored explicit argument '1'"
        );
        assert_eq!(
            err(&["--attention-backend", "no-such-backend"]),
            "argument --attention-backend: invalid choice: 'no-such-backend' (choose from \
             'triton', 'torch_native', 'flex_attention', 'dsa', 'nsa', 'qsa', 'dsv4', \
             'compressed', 'fa3', 'fa4', 'flashinfer', 'llada2_cfg_flashinfer', 'flashmla', \
             'trtllm_mla', 'cutedsl_mla', 'tokenspeed_mla', 'trtllm_mha', 'hpc_ops', \
             'minicpm_flashattn', 'minicpm_flashinfer', 'aiter', 'wave', 'intel_amx', 'ascend', \
             'intel_xpu')"
        );
        assert_eq!(
            err(&["--log-requests-level", "5"]),
            "argument --log-requests-level: invalid choice: 5 (choose from 0, 1, 2, 3)"
        );
        assert_eq!(
            err(&["--max-total-tokens", "lots"]),
            "argument --max-total-tokens: Invalid integer value: 'lots'. Use a plain integer, \
             SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive."
        );
        assert_eq!(
            err(&["--no-enable-metrics"]),
            "unrecognized arguments: --no-enable-metrics"
        );
    }

    /// Every choices-restricted flag the simulator models refuses what 0.5.23 refuses and
    /// takes what it takes.
    #[test]
    fn modelled_flags_with_choices_check_them() {
        let with_choices: Vec<&Flag> = FLAGS
            .iter()
            .filter(|f| action_of(f.name).is_some_and(|a| a.choices.is_some()))
            .collect();
        let names: Vec<&str> = with_choices.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "schedule-policy",
                "attention-backend",
                "disaggregation-mode",
                "disaggregation-transfer-backend",
                "dtype",
                "kv-cache-dtype",
                "quantization",
                "load-format",
                "tool-call-parser",
                "reasoning-parser",
                "grammar-backend",
                "sampling-backend"
            ]
        );
        for f in with_choices {
            let e = p(&[&format!("--{}", f.name), "no-such-value"])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("invalid choice: 'no-such-value' (choose from '"),
                "{e}"
            );
            let first = action_of(f.name).unwrap().choices.as_ref().unwrap()[0];
            let a = p(&[&format!("--{}", f.name), first]).unwrap();
            assert_eq!(a.str(f.name), Some(first));
        }
        // Unmodelled flags are checked too.
        assert!(
            p(&["--tokenizer-mode", "fast"])
                .unwrap_err()
                .to_string()
                .contains("invalid choice")
        );
        assert!(p(&["--tokenizer-worker-num", "x"]).is_err());
        assert!(p(&["--enable-torch-compile-debug-mode=1"]).is_err());
    }

    /// `--context-length`, `--max-total-tokens` and `--max-prefill-tokens` take SGLang's
    /// human-readable integers; the `--no-X` spellings 0.5.23 defines are accepted.
    #[test]
    fn suffixed_integers_and_negations() {
        let a = p(&[
            "--max-total-tokens",
            "64k",
            "--context-length",
            "4Ki",
            "--max-prefill-tokens=1.5k",
        ])
        .unwrap();
        assert_eq!(a.int("max-total-tokens"), Some(64_000));
        assert_eq!(a.int("context-length"), Some(4096));
        assert_eq!(a.int("max-prefill-tokens"), Some(1500));
        assert!(
            p(&["--port", "64k"]).is_err(),
            "a plain int flag takes no suffix"
        );
        let a = p(&[
            "--no-enable-tf32-matmul",
            "--no-dllm-fdfo",
            "--enable-tf32-matmul",
        ])
        .unwrap();
        assert_eq!(a.warnings.len(), 3, "{:?}", a.warnings);
        let negations: Vec<&str> = option_strings().filter(|o| o.starts_with("no-")).collect();
        assert_eq!(negations.len(), 12, "{negations:?}");
        for n in negations {
            p(&[&format!("--{n}")]).unwrap();
        }
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
