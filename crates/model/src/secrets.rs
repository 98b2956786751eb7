//! Secrets (API keys, tokens, passwords) never land in results: what counts as a secret, the
//! `${NAME}` references that keep them out of spec files, and redaction of server sections,
//! argv and JSON before anything is written or printed.

use crate::spec::types::{ArgValue, Server};

use crate::redact::is_secret_name;
pub use crate::redact::{REDACTED, is_secret};

/// An argument's value as text, for [`is_secret`] (`api-key: 12345678` is still a key).
fn arg_text(v: &ArgValue) -> String {
    match v {
        ArgValue::Str(s) => s.clone(),
        ArgValue::Int(i) => i.to_string(),
        ArgValue::Float(f) => f.to_string(),
        ArgValue::Bool(b) => b.to_string(),
    }
}

/// The API key the client must send, from `server.args.api-key` (SGLang's flag).
pub fn api_key(server: &Server) -> Option<String> {
    match server.args.get("api-key") {
        Some(ArgValue::Str(s)) => expand_env_ref(s).ok(),
        _ => None,
    }
}

/// A value written exactly as `${NAME}` is read from servebench's environment at launch, so
/// secrets can stay out of spec files (and so out of the run directory).
pub(crate) fn expand_env_ref(value: &str) -> Result<String, UnsetVariable> {
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
    for v in s
        .args
        .values_mut()
        .chain(s.engine_args.values_mut().flat_map(|m| m.values_mut()))
    {
        if let ArgValue::Str(text) = v {
            *text = expand_env_ref(text)?;
        }
    }
    for v in s.env.values_mut() {
        *v = expand_env_ref(v)?;
    }
    // A deployment's own flags and the router's variables take references too.
    if let Some(d) = s.deployment.as_mut() {
        for v in d
            .worker_args
            .iter_mut()
            .flat_map(|m| m.values_mut())
            .chain(d.prefill_args.values_mut())
            .chain(d.decode_args.values_mut())
            .chain(d.router.args.values_mut())
        {
            if let ArgValue::Str(text) = v {
                *text = expand_env_ref(text)?;
            }
        }
        for v in d.router.env.values_mut() {
            *v = expand_env_ref(v)?;
        }
    }
    Ok(s)
}

/// Every flag of a server section with its value: `args`, then each `engine_args` section.
fn all_args(server: &Server) -> impl Iterator<Item = (&String, &ArgValue)> {
    server
        .args
        .iter()
        .chain(server.engine_args.values().flat_map(|m| m.iter()))
}

/// The secret values a server section holds or points to: values of secret-named flags
/// (`args`, `engine_args`) and variables (`env`), the values of `${NAME}` references there that
/// are set (a reference under a secret name, or to a secret-named variable), secret flag
/// values in `launcher`, and the credentials of `url`.
pub(crate) fn server_secrets(server: &Server) -> Vec<String> {
    let mut out = Vec::new();
    let mut note = |name: &str, value: &str| {
        let referenced = value
            .strip_prefix("${")
            .and_then(|v| v.strip_suffix('}'))
            .filter(|_| crate::redact::is_env_ref(value));
        match referenced {
            Some(var) if is_secret_name(name) || is_secret_name(var) => {
                if let Ok(v) = std::env::var(var) {
                    out.push(v);
                }
            }
            Some(_) => {}
            None if is_secret(name, value) => out.push(value.to_string()),
            None => {}
        }
    };
    for (k, v) in all_args(server) {
        note(k, &arg_text(v));
    }
    for (k, v) in &server.env {
        note(k, v);
    }
    if let Some(launcher) = &server.launcher {
        let mut after: Option<&str> = None;
        for a in launcher {
            match (
                after.take(),
                a.strip_prefix("--").and_then(|f| f.split_once('=')),
            ) {
                (_, Some((flag, value))) => note(flag, value),
                (Some(flag), None) => note(flag, a),
                (None, None) => {}
            }
            if a.starts_with('-') && !a.contains('=') {
                after = Some(a.as_str());
            }
        }
    }
    // A deployment's workers' and router's flags and the router's variables.
    if let Some(d) = &server.deployment {
        for (k, v) in d
            .worker_args
            .iter()
            .flat_map(|m| m.iter())
            .chain(&d.prefill_args)
            .chain(&d.decode_args)
            .chain(&d.router.args)
        {
            note(k, &arg_text(v));
        }
        for (k, v) in &d.router.env {
            note(k, v);
        }
    }
    if let Some(url) = &server.url {
        out.extend(url_credentials(url));
    }
    out
}

/// `user:pass` (and `pass`) of `scheme://user:pass@host`; a lone `token@` too.
pub(crate) fn url_credentials(url: &str) -> Vec<String> {
    let Some((_, rest)) = url.split_once("://") else {
        return Vec::new();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let Some((info, _)) = authority.rsplit_once('@') else {
        return Vec::new();
    };
    let mut out = vec![info.to_string()];
    if let Some((_, pass)) = info.split_once(':') {
        out.push(pass.to_string());
    }
    out
}

/// The redactor for a run of these points: every secret any point's server holds (a swept
/// secret differs from point to point), hidden by the one filter every writer and printer
/// applies ([`crate::redact`]).
pub fn redactor<'a>(
    experiments: impl IntoIterator<Item = &'a crate::spec::types::Experiment>,
) -> crate::redact::Redactor {
    crate::redact::Redactor::new(
        experiments
            .into_iter()
            .flat_map(|e| server_secrets(&e.server).into_iter().chain(host_secrets(e))),
    )
}

/// The credentials written into the experiment's hosts: a password in `ssh://user:PASS@host`
/// (also as `user:PASS@host`, how an SSH error names the destination), for each host of a
/// pool and a Slurm cluster's login node.
pub(crate) fn host_secrets(exp: &crate::spec::types::Experiment) -> Vec<String> {
    use crate::spec::types::HostSpec;
    let destination = |d: &str| {
        let url = if d.contains("://") {
            d.to_string()
        } else {
            format!("ssh://{d}")
        };
        // A login name alone is not a secret: only `user:pass` (and its password) is.
        let found = url_credentials(&url);
        if found.len() > 1 { found } else { Vec::new() }
    };
    let mut out = Vec::new();
    for h in exp.pool() {
        match &h {
            HostSpec::Url(u) => out.extend(destination(u)),
            HostSpec::Ssh(s) => out.extend(destination(&s.ssh)),
            HostSpec::Slurm(s) => {
                if let Some(l) = &s.slurm.login {
                    out.extend(destination(&l.ssh));
                }
            }
        }
    }
    out
}

/// `url` with its credentials shown as `***`.
fn redacted_url(url: &str) -> String {
    crate::redact::Redactor::default().text(url).into_owned()
}

/// The server section with secret values redacted (for resolved.yaml and meta.json): secret
/// flags (also per engine) and variables, secret flags in `launcher`, URL credentials.
pub fn redacted_server(server: &Server) -> Server {
    let mut s = server.clone();
    for (k, v) in s
        .args
        .iter_mut()
        .chain(s.engine_args.values_mut().flat_map(|m| m.iter_mut()))
    {
        if is_secret(k, &arg_text(v)) {
            *v = ArgValue::Str(REDACTED.into());
        }
    }
    for (k, v) in s.env.iter_mut() {
        if is_secret(k, v) {
            *v = REDACTED.into();
        }
    }
    if let Some(l) = &s.launcher {
        s.launcher = Some(redact_argv(l));
    }
    if let Some(u) = &s.url {
        s.url = Some(redacted_url(u));
    }
    s
}

pub fn redacted_args(server: &Server) -> indexmap::IndexMap<String, serde_json::Value> {
    server
        .args
        .iter()
        .map(|(k, v)| {
            let v = if is_secret(k, &arg_text(v)) {
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
                if is_secret(k, v) {
                    REDACTED.to_string()
                } else {
                    v.clone()
                },
            )
        })
        .collect()
}

/// Redacts the values that follow secret flags in an argv (`--api-key X`, `--hf-token=X`).
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut flag: Option<&str> = None;
    for a in argv {
        if let Some(f) = flag.take()
            && !a.starts_with("--")
        {
            out.push(if is_secret(f, a) {
                REDACTED.to_string()
            } else {
                a.clone()
            });
            continue;
        }
        match a.strip_prefix("--").and_then(|f| f.split_once('=')) {
            Some((f, v)) if is_secret(f, v) => out.push(format!("--{f}={REDACTED}")),
            Some(_) => out.push(a.clone()),
            None => {
                if a.starts_with('-') && is_secret_name(a) {
                    flag = Some(a);
                }
                out.push(redacted_url(a));
            }
        }
    }
    out
}

/// Replaces the values of secret-named keys, at any depth.
pub fn redact_json(v: &mut serde_json::Value) {
    crate::redact::Redactor::default().json(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deployment's secrets (a worker's flag, the router's flag and variable) are the
    /// redactor's too, and its `${NAME}` references are expanded for the launch.
    #[test]
    fn a_deployments_workers_and_router_hold_secrets_too() {
        let server: Server = serde_json::from_value(serde_json::json!({
            "engine": "sim",
            "deployment": {
                "workers": 2,
                "worker_args": [{ "api-key": "sk-worker-0" }],
                "router": {
                    "args": { "api-key": "sk-router" },
                    "env": { "HF_TOKEN": "hf_routertoken", "PLAIN": "1" }
                }
            }
        }))
        .unwrap();
        let found = server_secrets(&server);
        for s in ["sk-worker-0", "sk-router", "hf_routertoken"] {
            assert!(found.iter().any(|f| f == s), "{s} in {found:?}");
        }
        assert!(!found.iter().any(|f| f == "1"), "{found:?}");
        // SAFETY: a variable only this test reads.
        unsafe { std::env::set_var("SERVEBENCH_TEST_ROUTER_SECRET", "from-env") };
        let refs: Server = serde_json::from_value(serde_json::json!({
            "deployment": { "router": { "env": { "TOKEN": "${SERVEBENCH_TEST_ROUTER_SECRET}" } } }
        }))
        .unwrap();
        let expanded = with_env_refs_expanded(&refs).unwrap();
        assert_eq!(expanded.deployment.unwrap().router.env["TOKEN"], "from-env");
    }

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
        let literal: Vec<String> = server_secrets(&server)
            .into_iter()
            .filter(|s| s.len() >= crate::redact::MIN_SECRET_LEN)
            .collect();
        assert_eq!(literal, vec!["sk-abc123".to_string()]);
        let r = redacted_server(&server);
        assert_eq!(r.args["api-key"], ArgValue::Str(REDACTED.into()));
    }

    #[test]
    fn every_place_a_server_section_holds_a_secret_is_collected() {
        // SAFETY: a variable only this test reads; set before anything reads it.
        unsafe { std::env::set_var("SERVEBENCH_TEST_SECRETS_REF", "ref-value-123") };
        let server: Server = serde_saphyr::from_str(concat!(
            "model: m\n",
            "url: http://u:url-pass-123@h:1/\n",
            "args: { api-key: sk-args-123, hf-token-file: /f/tok, tp-size: 8, ",
            "long-prefill-token-threshold: 2048, other: '${SERVEBENCH_TEST_SECRETS_REF}' }\n",
            "engine_args: { vllm: { hf-token: hf-engine-123 } }\n",
            "env: { DB_PASSWORD: '${SERVEBENCH_TEST_SECRETS_REF}', PATH_X: '${HOME}' }\n",
            "launcher: [python, --api-key, sk-launch-123, --admin-api-key=sk-admin-123]\n",
        ))
        .unwrap();
        let found = server_secrets(&server);
        for want in [
            "sk-args-123",
            "/f/tok",
            "hf-engine-123",
            "ref-value-123",
            "sk-launch-123",
            "sk-admin-123",
            "u:url-pass-123",
            "url-pass-123",
        ] {
            assert!(found.iter().any(|f| f == want), "{want} not in {found:?}");
        }
        // A reference from a plain name to a plain variable is not a secret; counts are not.
        assert!(!found.iter().any(|f| f == "2048" || f == "8"), "{found:?}");
        assert!(
            !found.contains(&std::env::var("HOME").unwrap_or_default()),
            "{found:?}"
        );
        let r = redacted_server(&server);
        assert_eq!(r.url.as_deref(), Some("http://***@h:1/"));
        assert_eq!(
            r.engine_args[&crate::spec::types::Engine::Vllm]["hf-token"],
            ArgValue::Str(REDACTED.into())
        );
        assert_eq!(
            r.launcher.unwrap(),
            [
                "python",
                "--api-key",
                REDACTED,
                "--admin-api-key=<redacted>"
            ]
        );
        assert_eq!(r.args["long-prefill-token-threshold"], ArgValue::Int(2048));
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
    fn a_password_in_a_hosts_address_is_a_secret() {
        let exp: crate::spec::types::Experiment = serde_saphyr::from_str(
            "name: x\nhost: ssh://bench:pw-host-12345@gpu:22\nserver: { engine: sim, model: m }\nworkload: { prompt: { kind: repeat, tokens: 8 }, output_tokens: 2 }\n",
        )
        .unwrap();
        let found = host_secrets(&exp);
        assert!(found.iter().any(|s| s == "pw-host-12345"), "{found:?}");
        let r = redactor([&exp]);
        assert_eq!(
            r.text("cannot reach bench:pw-host-12345@gpu:22: refused"),
            "cannot reach <redacted>@gpu:22: refused"
        );
        let plain: crate::spec::types::Experiment = serde_saphyr::from_str(
            "name: x\nhost: ssh://bench@gpu\nserver: { engine: sim, model: m }\nworkload: { prompt: { kind: repeat, tokens: 8 }, output_tokens: 2 }\n",
        )
        .unwrap();
        assert!(
            host_secrets(&plain).is_empty(),
            "a login name is not a secret"
        );
    }

    #[test]
    fn secret_names() {
        assert!(is_secret_name("HF_TOKEN"));
        assert!(is_secret_name("api-key"));
        assert!(is_secret_name("OPENAI_API_KEY"));
        assert!(is_secret_name("hf-token-file"));
        assert!(!is_secret_name("PYTORCH_CUDA_ALLOC_CONF"));
        assert!(!is_secret_name("tp-size"));
        assert!(!is_secret_name("max-total-tokens"));
        assert!(!is_secret("token_capacity", "4096"));
        assert!(is_secret_name("access_token"));
        assert!(!is_secret_name("--speculative-num-draft-tokens"));
    }
}
