//! Each surface's command line to a [`SimConfig`]: SGLang's (`args`), vLLM's (`vllm_args`) or
//! llama.cpp's (`llamacpp_args`), chosen by `--api`.

use super::api::Api;
use super::args;
use super::config::SimConfig;

/// A command line the engine's own parser refuses, in its words.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct EngineArgsError(Refused);

/// Which parser refused it (each parser's error stays private to the simulator).
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error(transparent)]
    Sglang(#[from] args::SimArgError),
    #[error(transparent)]
    Vllm(#[from] super::vllm_args::VllmArgError),
    #[error(transparent)]
    LlamaCpp(#[from] super::llamacpp_args::LlamaArgError),
}

impl<E: Into<Refused>> From<E> for EngineArgsError {
    fn from(e: E) -> Self {
        EngineArgsError(e.into())
    }
}

impl SimConfig {
    /// Parses `servebench sim` arguments for `api` (`--api` itself already taken out); the
    /// engine's own warnings come back with the config.
    pub fn from_engine_args(
        api: Api,
        args: &[String],
    ) -> Result<(SimConfig, Vec<String>), EngineArgsError> {
        match api {
            Api::Sglang => {
                let parsed = args::parse(args)?;
                let warnings = parsed.warnings.clone();
                Ok((Self::from_parsed(parsed)?, warnings))
            }
            Api::Vllm => Ok(super::vllm_args::parse(args).map(|p| (p.config, p.warnings))?),
            Api::LlamaCpp => Ok(super::llamacpp_args::parse(args).map(|p| (p.config, p.warnings))?),
        }
    }
}
