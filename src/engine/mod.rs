//! Per engine: how spec flags become a command line, and what its log lines mean.

use indexmap::IndexMap;

use crate::spec::types::{ArgValue, Engine, Server};

/// The SGLang ready line (also printed by the simulator).
pub const READY_LINE: &str = "The server is fired up and ready to roll!";

/// A launch command: program and arguments, never passed through a shell.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchCommand {
    pub program: String,
    pub args: Vec<String>,
}

impl LaunchCommand {
    /// Program and arguments as one list, for the record.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.clone())
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// Builds the engine's command line. `self_exe` is servebench's own binary (the simulator
/// runs as `servebench sim`); `port` is the port chosen for this launch.
pub fn launch_command(server: &Server, self_exe: &str, port: u16) -> Result<LaunchCommand, String> {
    let mut argv: Vec<String> = match (&server.launcher, server.engine) {
        (Some(l), _) if !l.is_empty() => l.clone(),
        (Some(_), _) => return Err("server.launcher is empty: give the program to run".into()),
        (None, Engine::Sim) => vec![self_exe.to_string(), "sim".into()],
        (None, Engine::Sglang) => vec!["python".into(), "-m".into(), "sglang.launch_server".into()],
    };
    let model = server
        .model
        .clone()
        .unwrap_or_else(|| "servebench-sim".into());
    argv.extend([
        "--model-path".into(),
        model,
        "--host".into(),
        "127.0.0.1".into(),
    ]);
    argv.extend(["--port".into(), port.to_string()]);
    argv.extend(flag_args(&server.args)?);
    let program = argv.remove(0);
    Ok(LaunchCommand {
        program,
        args: argv,
    })
}

/// `args` map to flags: `true` is a bare flag, `false` is left out, other values follow the flag.
pub fn flag_args(args: &IndexMap<String, ArgValue>) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (key, value) in args {
        let name = key.trim_start_matches('-');
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!("server.args has an invalid flag name {key:?}"));
        }
        if matches!(name, "model-path" | "model" | "port" | "host") {
            return Err(format!(
                "server.args.{name} is set by servebench: use server.model / server.port instead"
            ));
        }
        match value {
            ArgValue::Bool(true) => out.push(format!("--{name}")),
            ArgValue::Bool(false) => {}
            ArgValue::Int(i) => out.extend([format!("--{name}"), i.to_string()]),
            ArgValue::Float(f) => out.extend([format!("--{name}"), f.to_string()]),
            ArgValue::Str(s) => out.extend([format!("--{name}"), s.clone()]),
        }
    }
    Ok(out)
}

/// Why a server process died, read from the tail of its log (one of the catalogue's causes).
pub use crate::catalog::Failure as CrashCause;

/// Classifies a crash from the log tail (SGLang's own messages; see sglang-facts.md §4).
pub fn classify_crash(log_tail: &str) -> CrashCause {
    if log_tail.contains("CUDA out of memory") || log_tail.contains("OutOfMemoryError") {
        CrashCause::OutOfMemory
    } else if log_tail.contains("Not enough memory. Please try to increase --mem-fraction-static") {
        CrashCause::KvPoolTooSmall
    } else if log_tail.contains("Address already in use")
        || log_tail.contains("address already in use")
    {
        CrashCause::PortInUse
    } else if log_tail.contains("ModuleNotFoundError")
        || log_tail.contains("ImportError")
        || log_tail.contains("error: unrecognized arguments")
        || log_tail.contains("error: argument")
    {
        CrashCause::StartupError
    } else {
        CrashCause::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(args: &[(&str, ArgValue)]) -> Server {
        let yaml = "engine: sglang\nmodel: m\n";
        let mut s: Server = serde_saphyr::from_str(yaml).unwrap();
        s.args = args
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        s
    }

    #[test]
    fn flags_follow_sglang_conventions() {
        let s = server(&[
            ("tp-size", ArgValue::Int(8)),
            ("mem-fraction-static", ArgValue::Float(0.93)),
            ("enable-metrics", ArgValue::Bool(true)),
            ("disable-radix-cache", ArgValue::Bool(false)),
            ("attention-backend", ArgValue::Str("fa3".into())),
        ]);
        let c = launch_command(&s, "/bin/servebench", 30001).unwrap();
        assert_eq!(c.program, "python");
        assert_eq!(
            c.args.join(" "),
            "-m sglang.launch_server --model-path m --host 127.0.0.1 --port 30001 --tp-size 8 \
             --mem-fraction-static 0.93 --enable-metrics --attention-backend fa3"
        );
    }

    #[test]
    fn hostile_values_stay_single_arguments() {
        let s = server(&[(
            "served-model-name",
            ArgValue::Str("a b; $(rm -rf /)".into()),
        )]);
        let c = launch_command(&s, "x", 1).unwrap();
        assert_eq!(c.args.last().unwrap(), "a b; $(rm -rf /)");
    }

    #[test]
    fn reserved_flags_are_refused() {
        let s = server(&[("port", ArgValue::Int(1))]);
        assert!(
            launch_command(&s, "x", 1)
                .unwrap_err()
                .contains("server.port")
        );
    }

    #[test]
    fn crash_causes() {
        assert_eq!(
            classify_crash(
                "Scheduler hit an exception: Traceback\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB"
            ),
            CrashCause::OutOfMemory
        );
        assert_eq!(
            classify_crash(
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
            ),
            CrashCause::KvPoolTooSmall
        );
        assert_eq!(
            classify_crash("OSError: [Errno 98] Address already in use"),
            CrashCause::PortInUse
        );
        assert_eq!(classify_crash("bye"), CrashCause::Unknown);
    }
}
