//! Which engine's surface the simulator speaks: `servebench sim --api sglang|vllm|llama.cpp`.
//!
//! The engine changes the command line, the endpoints, the response shapes, the log lines, the
//! errors and the connection handling; the timing model underneath (profile, scheduler, cache)
//! is the same for all three.

/// The engine whose surface the simulator speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Api {
    /// `python -m sglang.launch_server` (the default).
    #[default]
    Sglang,
    /// `vllm serve` (vLLM 0.34).
    Vllm,
    /// `llama-server` (llama.cpp, 2026 builds).
    LlamaCpp,
}

impl Api {
    /// Every accepted spelling.
    pub(crate) const NAMES: &'static [&'static str] = &["sglang", "vllm", "llama.cpp"];

    /// Parses `--api`'s value (`llamacpp` and `llama-cpp` are accepted for `llama.cpp`).
    pub fn parse(s: &str) -> Option<Api> {
        match s.to_ascii_lowercase().as_str() {
            "sglang" => Some(Api::Sglang),
            "vllm" => Some(Api::Vllm),
            "llama.cpp" | "llamacpp" | "llama-cpp" | "llama_cpp" => Some(Api::LlamaCpp),
            _ => None,
        }
    }

    /// The canonical name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Api::Sglang => "sglang",
            Api::Vllm => "vllm",
            Api::LlamaCpp => "llama.cpp",
        }
    }
}

impl std::fmt::Display for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A `--api` that names no engine, in argparse's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiArgError {
    #[error("argument --api: expected one argument")]
    Missing,
    #[error("argument --api: invalid choice: {0:?} (choose from {names})", names = Api::NAMES.join(", "))]
    Invalid(String),
}

/// Takes `--api NAME` / `--api=NAME` out of the arguments (anywhere; the last one wins) and
/// returns the engine with the rest, which are that engine's own command line.
pub(crate) fn split(args: &[String]) -> Result<(Api, Vec<String>), ApiArgError> {
    let mut api = Api::default();
    let mut rest = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let value = if arg == "--api" {
            let Some(v) = args.get(i) else {
                return Err(ApiArgError::Missing);
            };
            i += 1;
            v.clone()
        } else if let Some(v) = arg.strip_prefix("--api=") {
            v.to_string()
        } else {
            rest.push(arg.clone());
            continue;
        };
        api = Api::parse(&value).ok_or(ApiArgError::Invalid(value))?;
    }
    Ok((api, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn api_anywhere_and_default() {
        let (a, rest) = split(&s(&["m", "--api", "vllm", "--port", "1"])).unwrap();
        assert_eq!((a, rest), (Api::Vllm, s(&["m", "--port", "1"])));
        let (a, _) = split(&s(&["--api=llama.cpp"])).unwrap();
        assert_eq!(a, Api::LlamaCpp);
        let (a, rest) = split(&s(&["--api-key", "k"])).unwrap();
        assert_eq!((a, rest), (Api::Sglang, s(&["--api-key", "k"])));
        assert!(
            split(&s(&["--api", "tgi"]))
                .unwrap_err()
                .to_string()
                .contains("invalid choice: \"tgi\"")
        );
        assert!(split(&s(&["--api"])).is_err());
    }
}
