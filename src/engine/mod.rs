//! One adapter per engine: everything engine-specific in one place. How it is launched
//! (program, model argument, host and port flags, flag spelling), how readiness shows in its
//! log, which flags it has (for "did you mean" before a GPU is allocated), the log lines that
//! classify its crashes and what to try for each, and the API surface the simulator imitates
//! for it. What a running server actually offers (cache reset, tokenize, metrics) is probed,
//! not assumed: see `client::surface`.
//!
//! The facts come from each engine's source: docs/reference/vllm-facts.md,
//! docs/reference/llama-cpp-facts.md, docs/reference/sglang-facts.md and
//! docs/reference/sglang-extra.md.

mod adapter;
mod command;
pub(crate) mod deployment;
mod flags;
mod llamacpp;
mod profiler;
pub(crate) mod ranks;
mod sglang;
mod vllm;

use indexmap::IndexMap;

use servebench_model::catalog::Failure;
use servebench_model::spec::types::{ArgValue, Engine, Server};

pub use adapter::LaunchError;
pub(crate) use adapter::{Adapter, FalseFlag, LaunchCommand, ModelArg};
pub use flags::{FlagCheck, SpecFlags, check_flag, check_spec};
pub(crate) use profiler::ProfilerApi;

/// The adapter of `engine`.
pub(crate) fn adapter(engine: Engine) -> &'static Adapter {
    match engine {
        Engine::Sim | Engine::Sglang => &sglang::SGLANG,
        Engine::Vllm => &vllm::VLLM,
        Engine::LlamaCpp => &llamacpp::LLAMA_CPP,
        Engine::Command => &command::COMMAND,
    }
}

/// The flags of `server` for its engine: `args` with `engine_args[engine]` merged over them.
pub(crate) fn effective_args(server: &Server) -> IndexMap<String, ArgValue> {
    let mut args = server.args.clone();
    if let Some(extra) = server.engine_args.get(&server.engine) {
        for (k, v) in extra {
            args.insert(k.clone(), v.clone());
        }
    }
    args
}

/// Builds the engine's command line. `self_exe` is servebench's own binary (the simulator runs
/// as `servebench sim`); `port` is the port chosen for this launch, on 127.0.0.1.
pub(crate) fn launch_command(
    server: &Server,
    self_exe: &str,
    port: u16,
) -> Result<LaunchCommand, LaunchError> {
    launch_command_on(server, self_exe, "127.0.0.1", port)
}

/// [`launch_command`] listening on `host` (a deployment's worker that a router on another
/// host reaches listens on its own host's address).
pub(crate) fn launch_command_on(
    server: &Server,
    self_exe: &str,
    host: &str,
    port: u16,
) -> Result<LaunchCommand, LaunchError> {
    let a = adapter(server.engine);
    let model = server
        .model
        .clone()
        .unwrap_or_else(|| "servebench-sim".into());
    let args = effective_args(server);
    let mut flags = flag_args_for(a, &args)?;
    if server.engine == Engine::Command {
        return command::launch(server, &model, host, port, flags);
    }
    let simulated = server.engine == Engine::Sim || server.simulate;
    let mut argv: Vec<String> = match (&server.launcher, simulated) {
        (Some(l), _) if l.is_empty() => return Err(LaunchError::EmptyLauncher),
        (Some(l), _) => l.clone(),
        (None, true) => {
            let mut v = vec![self_exe.to_string(), "sim".into()];
            if a.sim_api != "sglang" {
                v.extend(["--api".into(), a.sim_api.into()]);
            }
            v
        }
        (None, false) => a.launcher.iter().map(|s| s.to_string()).collect(),
    };
    match a.model_arg {
        ModelArg::Positional => argv.push(model),
        ModelArg::Flag(f) => argv.extend([f.to_string(), model]),
    }
    argv.extend([
        "--host".into(),
        host.into(),
        "--port".into(),
        port.to_string(),
    ]);
    argv.append(&mut flags);
    let program = argv.remove(0);
    Ok(LaunchCommand {
        program,
        args: argv,
    })
}

/// `args` as flags, SGLang's way: `true` a bare flag, `false` left out, other values after the
/// flag. (Kept for the plan and the estimate, which read SGLang-spelled flags.)
pub(crate) fn flag_args(args: &IndexMap<String, ArgValue>) -> Result<Vec<String>, LaunchError> {
    flag_args_for(&sglang::SGLANG, args)
}

/// `args` as `engine`'s flags: a name with one leading dash is passed as written (`-np`),
/// others get `--`; `true` is a bare flag; `false` is left out or becomes `--no-NAME`.
pub(crate) fn flag_args_for(
    a: &Adapter,
    args: &IndexMap<String, ArgValue>,
) -> Result<Vec<String>, LaunchError> {
    let mut out = Vec::new();
    for (key, value) in args {
        let short = key.starts_with('-') && !key.starts_with("--");
        let name = key.trim_start_matches('-');
        if name.is_empty() || name.contains(char::is_whitespace) || name.contains('=') {
            return Err(LaunchError::BadFlagName(key.clone()));
        }
        if a.reserved.contains(&name) {
            return Err(LaunchError::Reserved {
                name: name.to_string(),
            });
        }
        let flag = if short {
            format!("-{name}")
        } else {
            format!("--{name}")
        };
        match value {
            ArgValue::Bool(true) => out.push(flag),
            ArgValue::Bool(false) => match a.false_flag {
                FalseFlag::Omit => {}
                FalseFlag::NoPrefix if !short => out.push(format!("--no-{name}")),
                FalseFlag::NoPrefix => {}
            },
            ArgValue::Int(i) => out.extend([flag, i.to_string()]),
            ArgValue::Float(f) => out.extend([flag, f.to_string()]),
            ArgValue::Str(s) => out.extend([flag, s.clone()]),
        }
    }
    Ok(out)
}

/// Why a server process died, read from the tail of its log (one of the catalogue's causes).
pub(crate) use servebench_model::catalog::Failure as CrashCause;

/// Classifies a crash from the log tail with `engine`'s own lines.
pub(crate) fn classify(engine: Engine, log_tail: &str) -> Failure {
    adapter(engine)
        .crash_lines
        .iter()
        .find(|(line, _)| log_tail.contains(line))
        .map_or(Failure::Unknown, |(_, f)| *f)
}

/// What a failure means on `engine` and what to try.
pub(crate) fn explain(engine: Engine, failure: Failure) -> &'static str {
    (adapter(engine).hint)(failure)
}

/// True when `log` holds one of the engine's ready lines (or the spec's own).
pub(crate) fn is_ready_line(server: &Server, log: &str) -> bool {
    server
        .ready_line
        .as_deref()
        .is_some_and(|l| !l.is_empty() && log.contains(l))
        || adapter(server.engine)
            .ready_lines
            .iter()
            .any(|l| log.contains(l))
}

#[cfg(test)]
mod tests;
