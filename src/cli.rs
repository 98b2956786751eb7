//! Command-line definitions and dispatch.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "servebench",
    version,
    about = "Declarative experiments against LLM inference servers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the built-in SGLang-compatible simulator (accepts `sglang.launch_server` flags).
    #[command(disable_help_flag = true)]
    Sim {
        /// SGLang launch flags plus `--profile NAME`; `--help` lists them.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                crate::exit::BAD_INPUT
            } else {
                crate::exit::OK
            };
        }
    };
    match cli.command {
        Command::Sim { args } => crate::sim::main(args),
    }
}
