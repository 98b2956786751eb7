//! What servebench knows about an engine, as data each engine's file fills in: its launcher,
//! how it takes the model and `false` flags, its ready and crash lines, its hints; and the
//! launch command built from it, with why one cannot be built.

use servebench_model::catalog::Failure;

/// A launch command: program and arguments, never passed through a shell.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LaunchCommand {
    pub program: String,
    pub args: Vec<String>,
}

impl LaunchCommand {
    /// Program and arguments as one list, for the record.
    pub(crate) fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// How the model is given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModelArg {
    /// `--model-path M`, `-m M`.
    Flag(&'static str),
    /// `vllm serve M`: right after the launcher.
    Positional,
}

/// What a `false` flag value becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FalseFlag {
    /// Left out (SGLang's flags are off by default).
    Omit,
    /// `--no-NAME` (vLLM's booleans are `BooleanOptionalAction`s: `false` must switch a
    /// default-on feature off).
    NoPrefix,
}

/// What servebench knows about an engine.
pub(crate) struct Adapter {
    /// How people write its name: `SGLang`, `vLLM`, `llama.cpp`.
    pub display: &'static str,
    /// The program (and its first arguments) that starts it, unless `server.launcher` says.
    pub launcher: &'static [&'static str],
    pub model_arg: ModelArg,
    /// Flags servebench sets itself (model, host, port): refused in `server.args`.
    pub reserved: &'static [&'static str],
    pub false_flag: FalseFlag,
    /// Log lines that mean the server is ready (besides `/health` answering 200).
    pub ready_lines: &'static [&'static str],
    /// Its flags, one per line without the leading `--` (short ones with their `-`), and
    /// whether the list is the whole set (then an unknown flag near a known one is a typo).
    pub flags: Option<(&'static str, &'static str)>,
    /// (substring of its log, failure), in the order they are tried.
    pub crash_lines: &'static [(&'static str, Failure)],
    /// What to try after each failure, in its own flags.
    pub hint: fn(Failure) -> &'static str,
    /// `servebench sim --api` value that imitates it.
    pub sim_api: &'static str,
    /// Its profiler endpoints, or why it has none.
    pub profiler: Result<super::profiler::ProfilerApi, &'static str>,
}

/// Why a launch command cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LaunchError {
    #[error("server.launcher is empty: give the program to run")]
    EmptyLauncher,
    #[error(
        "engine: command needs `server.launcher`: the command line, with {{model}}, {{host}} and {{port}} where they go"
    )]
    NoCommand,
    #[error(
        "server.launcher for engine: command must contain {{port}}, so servebench can pick the port it measures"
    )]
    NoPortPlaceholder,
    #[error("server.args has an invalid flag name {0:?}")]
    BadFlagName(String),
    #[error("server.args.{name} is set by servebench: use server.model / server.port instead")]
    Reserved { name: String },
    #[error(
        "server.deployment.router.launcher is empty: give the router's command, e.g. [python, -m, sglang_router.launch_router]"
    )]
    EmptyRouterLauncher,
}

/// Hints shared by the engines for the failures that do not depend on the engine.
pub(crate) fn common_hint(f: Failure) -> &'static str {
    match f {
        Failure::PortInUse => "the port is already in use: omit server.port to pick a free one",
        Failure::ModelNotFound => {
            "the model was not found: give server.model as a local path that exists on the host, or a repository id the host can download"
        }
        Failure::StartupError => "the server rejected its arguments or could not import a module",
        Failure::ReadyTimeout => "the server was not ready in time: raise server.ready_timeout",
        Failure::Unknown => "the server exited; see the log excerpt",
        other => other.explain(),
    }
}
