//! Each engine's flags, to catch a typo before a GPU is allocated: an unknown flag close to a
//! known one is almost certainly a typo; one far from all of them may be newer than the list,
//! so it is passed through with a warning.

use super::{Adapter, adapter};
use servebench_model::spec::types::Engine;

/// What an engine makes of a flag name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlagCheck {
    /// The engine has it (or servebench knows no list for the engine).
    Known,
    /// Not the engine's, but close to `suggestion` (written as the spec would: `max-model-len`).
    Typo {
        suggestion: String,
        source: &'static str,
    },
    /// Not in the engine's list and close to nothing in it: passed through, with a warning.
    Unlisted { source: &'static str },
    /// A prefix of several of the engine's flags: argparse's prefix matching refuses it
    /// ("ambiguous option", exit 2). `candidates` as the spec would write them.
    Ambiguous {
        candidates: Vec<String>,
        source: &'static str,
    },
}

/// Engines whose parser takes a unique prefix of a long flag for the flag (Python's
/// argparse with `allow_abbrev` on: SGLang's `launch_server`, vLLM's `FlexibleArgumentParser`;
/// vllm-facts section 1, sglang-facts section 9).
fn abbreviates(engine: Engine) -> bool {
    matches!(engine, Engine::Sglang | Engine::Sim | Engine::Vllm)
}

/// Checks `name` (as written in `server.args`: `max-model-len`, `-np`) against `engine`'s flags.
pub fn check_flag(engine: Engine, name: &str) -> FlagCheck {
    let a: &Adapter = adapter(engine);
    let Some((list, source)) = a.flags else {
        return FlagCheck::Known;
    };
    let wanted = normalize(engine, name);
    let known = || {
        list.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
    };
    if known().any(|k| normalize(engine, k) == wanted) {
        return FlagCheck::Known;
    }
    // vLLM's booleans also take `no-X`, and `enable-X` / `disable-X` stand for each other.
    if engine == Engine::Vllm {
        let base = wanted
            .strip_prefix("no-")
            .map(str::to_string)
            .or_else(|| {
                wanted
                    .strip_prefix("disable-")
                    .map(|r| format!("enable-{r}"))
            })
            .or_else(|| {
                wanted
                    .strip_prefix("enable-")
                    .map(|r| format!("disable-{r}"))
            });
        if let Some(b) = base
            && known().any(|k| normalize(engine, k) == b)
        {
            return FlagCheck::Known;
        }
    }
    // argparse: a long flag that is not an option string of its own stands for the one
    // option it starts; starting several is an error.
    let short = name.starts_with('-') && !name.starts_with("--");
    if abbreviates(engine) && !short {
        let hits: Vec<&str> = known()
            .filter(|k| !k.starts_with('-'))
            .filter(|k| normalize(engine, k).starts_with(&wanted))
            .collect();
        match hits.len() {
            0 => {}
            1 => return FlagCheck::Known,
            _ => {
                return FlagCheck::Ambiguous {
                    candidates: hits.iter().map(|h| h.to_string()).collect(),
                    source,
                };
            }
        }
    }
    let best = known()
        .map(|k| {
            (
                strsim::damerau_levenshtein(&wanted, &normalize(engine, k)),
                k,
            )
        })
        .min_by_key(|(d, _)| *d);
    match best {
        // An edit per five characters (one to three): a typo, not a flag newer than the list.
        Some((d, k)) if d <= (wanted.len() / 5).clamp(1, 3) => FlagCheck::Typo {
            suggestion: k.to_string(),
            source,
        },
        _ => FlagCheck::Unlisted { source },
    }
}

/// The name as the engine compares it: without leading dashes for long flags; vLLM accepts
/// underscores for dashes.
fn normalize(engine: Engine, name: &str) -> String {
    let short = name.starts_with('-') && !name.starts_with("--");
    let bare = name.trim_start_matches('-');
    let bare = if engine == Engine::Vllm {
        bare.replace('_', "-")
    } else {
        bare.to_string()
    };
    if short { format!("-{bare}") } else { bare }
}

/// Flags only the simulator has (`servebench sim --help`).
const SIM_ONLY: &[&str] = &[
    "profile",
    "sim-time-scale",
    "sim-thinking-tokens",
    "sim-broken-tool-calls-above-batch",
    "sim-repeat-tool-call-names",
    "sim-no-prefix-hits",
    "api",
    "sim-kv-transfer-gbps",
    "sim-kv-transfer-latency-ms",
];

/// What the engines make of a spec's flags: errors (typos, with the flag the engine has) and
/// warnings (flags not in the engine's list, passed through).
#[derive(Debug, Default)]
pub struct SpecFlags {
    pub errors: Vec<servebench_model::spec::Diagnostic>,
    pub warnings: Vec<String>,
}

/// Checks every point's flags against its engine's list (and each `engine_args` section
/// against that engine's), once per flag.
pub fn check_spec(spec: &servebench_model::spec::LoadedSpec) -> SpecFlags {
    let mut out = SpecFlags::default();
    let mut seen: Vec<(Engine, String)> = Vec::new();
    for p in &spec.points {
        let server = &p.experiment.server;
        if server.url.is_some() {
            continue;
        }
        let sections = std::iter::once((server.engine, None))
            .chain(server.engine_args.keys().map(|e| (*e, Some(*e))));
        for (engine, section) in sections {
            let args = match section {
                None => &server.args,
                Some(e) => &server.engine_args[&e],
            };
            let simulated = server.engine == Engine::Sim || server.simulate;
            for name in args.keys() {
                // The simulator's own flags, on top of the engine's it imitates.
                if simulated && SIM_ONLY.contains(&name.trim_start_matches('-')) {
                    continue;
                }
                if seen.contains(&(engine, name.clone())) {
                    continue;
                }
                seen.push((engine, name.clone()));
                let escaped = name.replace('~', "~0").replace('/', "~1");
                let pointers: Vec<String> = match section {
                    None => vec![
                        format!("/server/args/{escaped}"),
                        format!("/sweep/server.args.{escaped}"),
                    ],
                    Some(e) => vec![format!("/server/engine_args/{e}/{escaped}")],
                };
                let display = adapter(engine).display;
                match check_flag(engine, name) {
                    FlagCheck::Known => {}
                    FlagCheck::Typo { suggestion, source } => {
                        out.errors.push(spec.diagnostic(
                            &pointers,
                            true,
                            format!("{display} has no flag `{name}` ({source})"),
                            Some(format!("did you mean `{suggestion}`?")),
                        ));
                    }
                    FlagCheck::Ambiguous { candidates, source } => {
                        out.errors.push(spec.diagnostic(
                            &pointers,
                            true,
                            format!(
                                "{display} refuses `{name}`: it is the start of {} of its flags ({source}: argparse's \"ambiguous option\", exit 2)",
                                candidates.len()
                            ),
                            Some(format!(
                                "write the whole flag: {}",
                                candidates
                                    .iter()
                                    .map(|c| format!("`{c}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )),
                        ));
                    }
                    FlagCheck::Unlisted { source } => out.warnings.push(format!(
                        "{}: `{name}` is not among {display}'s flags ({source}); passed through as written",
                        spec.path.display()
                    )),
                }
            }
        }
    }
    out
}
