//! The SGLang-compatible simulator: `servebench sim`.
//!
//! It accepts `python -m sglang.launch_server` flags and serves SGLang's HTTP API from a
//! deterministic model: a BPE-like tokenizer, a radix prefix cache bounded by a KV pool,
//! an SGLang-like scheduler (continuous batching, chunked prefill, speculative decoding) and
//! a timing profile. See `--help` and `profiles/*.yaml`.
//!
//! Library use (tests, the drift bench, the rest of servebench):
//! ```no_run
//! # async fn f() -> anyhow::Result<()> {
//! use servebench::sim::{SimConfig, serve};
//! let config = SimConfig::from_args(&["--profile".into(), "fast".into()])?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! serve(config, listener, std::future::pending()).await
//! # }
//! ```

mod args;
mod config;
mod flags;
mod http;
mod kv;
mod log;
mod memory;
mod metrics;
mod profile;
mod radix;
mod request;
mod scheduler;
mod server;
mod state;
mod tokenizer;
mod trace;
mod types;

pub use args::{ParsedArgs, SimArgError, help_text, parse as parse_args};
pub use config::SimConfig;
pub use log::SimLog;
pub use profile::{
    ActivationModel, DecodeCost, MemoryModel, PrefillCost, Profile, ProfileError, SpecModel,
};
pub use radix::RadixCache;
pub use server::serve;
pub use tokenizer::encode as tokenize;
pub use trace::{ChunkTrace, EmitEntry, TraceEntry};

/// Entry point of `servebench sim ARGS...`; returns the process exit code
/// (0 clean shutdown, 1 simulated crash or start-up failure, 2 bad arguments).
pub fn main(args: Vec<String>) -> i32 {
    let parsed = match args::parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("servebench sim: error: {e}\nTry `servebench sim --help`.");
            return crate::exit::BAD_INPUT;
        }
    };
    if parsed.help {
        print!("{}", help_text());
        return crate::exit::OK;
    }
    for w in &parsed.warnings {
        eprintln!("{w}");
    }
    let config = match SimConfig::from_parsed(parsed) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("servebench sim: error: {e}");
            return crate::exit::BAD_INPUT;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .thread_name("sim-http")
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("servebench sim: cannot start the runtime: {e}");
            return crate::exit::FAILED;
        }
    };
    runtime.block_on(async move {
        let addr = format!("{}:{}", config.host, config.port);
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                // Uvicorn's wording, which log classifiers recognise as "port in use".
                config.log.info(&format!(
                    "ERROR:    [Errno 98] error while attempting to bind on address ('{}', {}): {e}",
                    config.host, config.port
                ));
                return crate::exit::FAILED;
            }
        };
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        match serve(config, listener, shutdown).await {
            Ok(()) => crate::exit::OK,
            Err(e) => {
                eprintln!("servebench sim: {e}");
                crate::exit::FAILED
            }
        }
    })
}
