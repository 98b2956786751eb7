//! Each surface's command line to a [`SimConfig`]: SGLang's (`args`), vLLM's (`vllm_args`) or
//! llama.cpp's (`llamacpp_args`), chosen by `--api`.

use super::api::Api;
use super::args;
use super::config::SimConfig;

impl SimConfig {
    /// Parses `servebench sim` arguments for `api` (`--api` itself already taken out); the
    /// engine's own warnings come back with the config.
    pub fn from_engine_args(api: Api, args: &[String]) -> Result<(SimConfig, Vec<String>), String> {
        match api {
            Api::Sglang => {
                let parsed = args::parse(args).map_err(|e| e.to_string())?;
                let warnings = parsed.warnings.clone();
                Ok((
                    Self::from_parsed(parsed).map_err(|e| e.to_string())?,
                    warnings,
                ))
            }
            Api::Vllm => super::vllm_args::parse(args)
                .map_err(|e| e.to_string())
                .map(|p| (p.config, p.warnings)),
            Api::LlamaCpp => super::llamacpp_args::parse(args)
                .map_err(|e| e.to_string())
                .map(|p| (p.config, p.warnings)),
        }
    }
}
