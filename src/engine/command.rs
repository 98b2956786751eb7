//! `engine: command`: any other server (TGI, TensorRT-LLM's serve, your own). `launcher` is its
//! whole command line with `{model}`, `{host}` and `{port}` filled in; `args` follow as `--flag
//! value`. Its readiness is `/health` (or `server.ready_line`), its crashes are classified with
//! every known engine's lines, and what it offers is probed once it is ready.

use super::adapter::{Adapter, FalseFlag, LaunchCommand, LaunchError, ModelArg, common_hint};
use servebench_model::catalog::Failure;
use servebench_model::spec::types::Server;

pub(crate) static COMMAND: Adapter = Adapter {
    display: "command",
    launcher: &[],
    model_arg: ModelArg::Positional,
    reserved: &[],
    false_flag: FalseFlag::Omit,
    ready_lines: &[],
    flags: None,
    crash_lines: &[
        ("CUDA out of memory", Failure::OutOfMemory),
        ("OutOfMemoryError", Failure::OutOfMemory),
        ("out of memory", Failure::OutOfMemory),
        ("Address already in use", Failure::PortInUse),
        ("address already in use", Failure::PortInUse),
        ("couldn't bind", Failure::PortInUse),
        ("is not a valid model identifier", Failure::ModelNotFound),
        ("No such file or directory", Failure::ModelNotFound),
    ],
    hint: common_hint,
    sim_api: "sglang",
    profiler: Err(
        "an `engine: command` server's profiler is unknown to servebench (profile it with its own tools)",
    ),
};

pub(crate) fn launch(
    server: &Server,
    model: &str,
    host: &str,
    port: u16,
    mut flags: Vec<String>,
) -> Result<LaunchCommand, LaunchError> {
    let template = server.launcher.as_ref().ok_or(LaunchError::NoCommand)?;
    if template.is_empty() {
        return Err(LaunchError::EmptyLauncher);
    }
    if !template.iter().any(|a| a.contains("{port}")) {
        return Err(LaunchError::NoPortPlaceholder);
    }
    let mut argv: Vec<String> = template
        .iter()
        .map(|a| {
            a.replace("{model}", model)
                .replace("{host}", host)
                .replace("{port}", &port.to_string())
        })
        .collect();
    argv.append(&mut flags);
    let program = argv.remove(0);
    Ok(LaunchCommand {
        program,
        args: argv,
    })
}
