//! Secrets (API keys, tokens, passwords) never land in results: what counts as a secret, the
//! `${NAME}` references that keep them out of spec files, and redaction of server sections,
//! argv and JSON before anything is written or printed.

use crate::spec::types::{ArgValue, Server};

/// Names whose values never land in results: API keys, tokens, passwords.
pub fn is_secret(name: &str) -> bool {
    // Word match, so `max-total-tokens` is not a secret but `HF_TOKEN` is; "token" only as the
    // last word (`token_capacity` counts tokens, `access_token` is one).
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(['-', '_', '.'])
        .filter(|w| !w.is_empty())
        .collect();
    words.last() == Some(&"token")
        || words.iter().any(|w| {
            matches!(
                *w,
                "key" | "apikey" | "secret" | "password" | "passwd" | "credential" | "credentials"
            )
        })
}

pub const REDACTED: &str = "<redacted>";

/// The API key the client must send, from `server.args.api-key` (SGLang's flag).
pub fn api_key(server: &Server) -> Option<String> {
    match server.args.get("api-key") {
        Some(ArgValue::Str(s)) => expand_env_ref(s).ok(),
        _ => None,
    }
}

/// A value written exactly as `${NAME}` is read from servebench's environment at launch, so
/// secrets can stay out of spec files (and so out of the run directory).
pub fn expand_env_ref(value: &str) -> Result<String, UnsetVariable> {
    match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
        Some(name) => std::env::var(name).map_err(|_| UnsetVariable {
            name: name.to_string(),
        }),
        None => Ok(value.to_string()),
    }
}

/// A `${NAME}` reference to a variable that is not set.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("environment variable {name} (referenced as ${{{name}}} in the spec) is not set")]
pub struct UnsetVariable {
    pub name: String,
}

/// [`crate::spec::Check`] of `${NAME}` references: a variable the launch would find unset is
/// an error at `validate`, at the value that names it.
#[derive(Debug, Default, Clone, Copy)]
pub struct EnvRefCheck;

impl crate::spec::Check for EnvRefCheck {
    fn check(
        &self,
        experiment: &crate::spec::types::Experiment,
        _spec_dir: &std::path::Path,
    ) -> Vec<crate::spec::validate::Problem> {
        use crate::spec::yaml::push_pointer;
        let server = &experiment.server;
        let args = server.args.iter().filter_map(|(k, v)| match v {
            ArgValue::Str(s) => Some((push_pointer("/server/args", k), s)),
            _ => None,
        });
        let env = server
            .env
            .iter()
            .map(|(k, v)| (push_pointer("/server/env", k), v));
        args.chain(env)
            .filter_map(|(pointer, value)| {
                let UnsetVariable { name } = expand_env_ref(value).err()?;
                Some(crate::spec::validate::Problem {
                    pointer,
                    target: crate::spec::validate::Target::Value,
                    message: format!(
                        "environment variable `{name}` is not set: `${{{name}}}` is read from the environment when the server launches"
                    ),
                    hint: Some(format!(
                        "set it before running (`export {name}=...`), or write the value here"
                    )),
                })
            })
            .collect()
    }
}

/// The server section with `${NAME}` references replaced by their values.
pub fn with_env_refs_expanded(server: &Server) -> Result<Server, UnsetVariable> {
    let mut s = server.clone();
    for v in s.args.values_mut() {
        if let ArgValue::Str(text) = v {
            *text = expand_env_ref(text)?;
        }
    }
    for v in s.env.values_mut() {
        *v = expand_env_ref(v)?;
    }
    Ok(s)
}

/// Literal secret values in a server section (for scrubbing copies of the spec).
pub fn literal_secrets(server: &Server) -> Vec<String> {
    let args = server.args.iter().filter_map(|(k, v)| match v {
        ArgValue::Str(s) if is_secret(k) => Some(s.clone()),
        _ => None,
    });
    let env = server
        .env
        .iter()
        .filter(|(k, _)| is_secret(k))
        .map(|(_, v)| v.clone());
    args.chain(env)
        .filter(|s| s.len() >= 4 && !s.starts_with("${"))
        .collect()
}

/// Replaces every literal secret in `text` with `<redacted>`.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_string(), |t, s| t.replace(s.as_str(), REDACTED))
}

/// The server section with secret values redacted (for resolved.yaml and meta.json).
pub fn redacted_server(server: &Server) -> Server {
    let mut s = server.clone();
    for (k, v) in s.args.iter_mut() {
        if is_secret(k) {
            *v = ArgValue::Str(REDACTED.into());
        }
    }
    for (k, v) in s.env.iter_mut() {
        if is_secret(k) {
            *v = REDACTED.into();
        }
    }
    s
}

pub fn redacted_args(server: &Server) -> indexmap::IndexMap<String, serde_json::Value> {
    server
        .args
        .iter()
        .map(|(k, v)| {
            let v = if is_secret(k) {
                serde_json::json!(REDACTED)
            } else {
                serde_json::to_value(v).unwrap_or_default()
            };
            (k.clone(), v)
        })
        .collect()
}

pub fn redacted_env(server: &Server) -> indexmap::IndexMap<String, String> {
    server
        .env
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                if is_secret(k) {
                    REDACTED.to_string()
                } else {
                    v.clone()
                },
            )
        })
        .collect()
}

/// Redacts the values that follow secret flags in an argv.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for a in argv {
        if hide_next {
            out.push(REDACTED.to_string());
            hide_next = false;
            continue;
        }
        match a.strip_prefix("--").and_then(|f| f.split_once('=')) {
            Some((flag, _)) if is_secret(flag) => out.push(format!("--{flag}={REDACTED}")),
            _ => {
                hide_next = a.starts_with("--") && is_secret(a);
                out.push(a.clone());
            }
        }
    }
    out
}

/// Replaces the values of secret-named keys, at any depth.
pub fn redact_json(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if is_secret(k) && !child.is_null() {
                    *child = serde_json::json!(REDACTED);
                } else {
                    redact_json(child);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact_json),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_from_argv() {
        let argv: Vec<String> = [
            "python",
            "--api-key",
            "sk-123",
            "--hf-token=abc",
            "--tp",
            "8",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let r = redact_argv(&argv);
        assert_eq!(
            r,
            [
                "python",
                "--api-key",
                REDACTED,
                "--hf-token=<redacted>",
                "--tp",
                "8"
            ]
        );
        assert!(!r.join(" ").contains("sk-123"));
    }

    #[test]
    fn env_refs_expand_and_secrets_scrub() {
        assert_eq!(expand_env_ref("plain").unwrap(), "plain");
        assert_eq!(
            expand_env_ref("${PATH}").unwrap(),
            std::env::var("PATH").unwrap()
        );
        assert!(
            expand_env_ref("${SERVEBENCH_NO_SUCH_VAR}")
                .unwrap_err()
                .to_string()
                .contains("SERVEBENCH_NO_SUCH_VAR")
        );
        let server: Server = serde_saphyr::from_str(
            "model: m\nargs: { api-key: sk-abc123 }\nenv: { HF_TOKEN: '${HF}' }\n",
        )
        .unwrap();
        let secrets = literal_secrets(&server);
        assert_eq!(secrets, vec!["sk-abc123".to_string()]);
        assert_eq!(
            scrub("api-key: sk-abc123\n", &secrets),
            "api-key: <redacted>\n"
        );
        let r = redacted_server(&server);
        assert_eq!(r.args["api-key"], ArgValue::Str(REDACTED.into()));
    }

    #[test]
    fn server_info_secrets_are_redacted_at_any_depth() {
        let mut v = serde_json::json!({"api_key": "sk-1", "tp_size": 8, "max_total_num_tokens": 5,
            "internal_states": [{"hf_token": "x", "ssl_keyfile": null}]});
        redact_json(&mut v);
        assert_eq!(v["api_key"], REDACTED);
        assert_eq!(v["internal_states"][0]["hf_token"], REDACTED);
        assert_eq!(v["max_total_num_tokens"], 5);
        assert_eq!(v["tp_size"], 8);
    }

    #[test]
    fn secret_names() {
        assert!(is_secret("HF_TOKEN"));
        assert!(is_secret("api-key"));
        assert!(is_secret("OPENAI_API_KEY"));
        assert!(!is_secret("PYTORCH_CUDA_ALLOC_CONF"));
        assert!(!is_secret("tp-size"));
        assert!(!is_secret("max-total-tokens"));
        assert!(!is_secret("token_capacity"));
        assert!(is_secret("access_token"));
        assert!(!is_secret("--speculative-num-draft-tokens"));
    }
}
