//! Redaction: the one filter every writer and printer applies, so a secret never lands in a
//! file of the run directory, a report, a mirrored server log or the console.
//!
//! A [`Redactor`] hides, in any text:
//! - the literal secret values it was built with (`secrets::redactor` collects them from the
//!   spec: API keys, values of secret-named flags and variables, values of `${NAME}`
//!   references, URL credentials, swept secret values), with their JSON-escaped, Python-escaped
//!   and base64 forms; values shorter than [`MIN_SECRET_LEN`] are not searched for in free text
//!   (they would match ordinary words and numbers) and are hidden by the two rules below only;
//! - credentials in URLs: `http://user:pass@host` is shown as `http://***@host` (an
//!   `ssh://user@host` login name without a password is not a credential and stays);
//! - values written next to a secret name: `api_key='sk-..'` (SGLang's `server_args` line),
//!   `"hf_token": ".."`, `HF_TOKEN=..`, `--api-key ..`, `Authorization: Bearer ..`.
//!
//! In JSON, the values of secret-named keys are replaced whole, at any depth, and every other
//! string goes through the text rules. Which names are secret is [`is_secret_name`]; which
//! values under them are is [`is_secret`].
//!
//! The process has one current redactor ([`install`], [`current`]): a run installs the one for
//! its spec before it writes anything; until then the rules without literal values apply.
//!
//! A leaf module: it uses nothing else in the crate.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock, RwLock};

use regex::bytes::{Captures, Regex};

/// What a hidden value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Literal secret values shorter than this (in bytes) are not searched for in free text: a
/// 3-character key would turn every `abc` in a log into stars. They are still hidden where
/// they sit under a secret name (spec copies, flags, `name=value` in logs, JSON keys) and in
/// URL credentials.
pub(crate) const MIN_SECRET_LEN: usize = 8;

/// How long a line the server-log relay scrubs at once; a longer line is scrubbed in pieces
/// of this size (a secret cut by a piece boundary is still caught by its name's rule).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The environment variable that hands `servebench supervise` the secrets to scrub from the
/// server's output (a JSON array of strings); the server itself never sees it.
pub const ENV_VAR: &str = "SERVEBENCH_REDACT";

/// Words (between `-`, `_`, `.`) that make a name a credential's, whatever its value.
const CREDENTIAL_WORDS: &[&str] = &[
    "key",
    "keys",
    "apikey",
    "secret",
    "secrets",
    "password",
    "passwd",
    "credential",
    "credentials",
    "authorization",
];

/// How a name relates to secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NameKind {
    /// `api-key`, `DB_PASSWORD`: every value is a secret.
    Credential,
    /// `HF_TOKEN`, `hf-token-file`: a value is a secret unless it is a number (then the name
    /// counts tokens: `long-prefill-token-threshold: 2048`).
    Token,
}

/// Words after `key` that make the name a setting about keys, not a key.
const KEY_DESCRIBERS: &[&str] = &[
    "check",
    "checking",
    "type",
    "types",
    "size",
    "bits",
    "algorithm",
    "algorithms",
    "format",
];

/// Words after `token` that still name the token: where it is kept.
const TOKEN_HOLDERS: &[&str] = &["file", "path"];

fn name_kind(name: &str) -> Option<NameKind> {
    let lower = name.trim_start_matches('-').to_ascii_lowercase();
    // Every credential word and `token` contains one of these: most names (a record's fields)
    // are settled without splitting them into words.
    const STEMS: &[&str] = &[
        "key",
        "secret",
        "passw",
        "credential",
        "authorization",
        "token",
    ];
    if !STEMS.iter().any(|stem| lower.contains(stem)) {
        return None;
    }
    // A Prometheus metric in an engine's namespace (`sglang:num_unique_running_routing_keys`,
    // `vllm:...`, `llamacpp:...`) names a measurement: its values are numbers, never secrets.
    if is_metric_name(&lower) {
        return None;
    }
    let words: Vec<&str> = lower
        .split(['-', '_', '.', ' '])
        .filter(|w| !w.is_empty())
        .collect();
    // `key` before a word that describes keys names a setting, not a key:
    // `host_key_check: strict`, `key_type: ed25519`; attention's key and value heads
    // (`num_key_value_heads` in every model's config.json) are a count.
    let credential = words.iter().enumerate().any(|(i, w)| {
        CREDENTIAL_WORDS.contains(w)
            && !(matches!(*w, "key" | "keys")
                && (words
                    .get(i + 1)
                    .is_some_and(|next| KEY_DESCRIBERS.contains(next))
                    || matches!(words.get(i + 1..i + 3), Some(["value", "heads" | "head"]))))
    });
    if credential {
        return Some(NameKind::Credential);
    }
    // `token` (not `tokens`, which counts them, nor `tokenizer`) at the end or before where it
    // is kept: `HF_TOKEN`, `access_token`, `hf-token-file`; `token_source` or
    // `speculative-token-map` describe tokens, they are not one.
    let token = words.iter().enumerate().any(|(i, w)| {
        *w == "token"
            && words[i + 1..]
                .iter()
                .all(|rest| TOKEN_HOLDERS.contains(rest))
    });
    token.then_some(NameKind::Token)
}

/// `namespace:metric_name` in the namespace of an engine servebench scrapes (`sglang:`,
/// `vllm:`, `llamacpp:`), of letters, digits, `_` and colons only.
fn is_metric_name(lower: &str) -> bool {
    const NAMESPACES: &[&str] = &["sglang", "vllm", "llamacpp"];
    lower.split_once(':').is_some_and(|(ns, rest)| {
        NAMESPACES.contains(&ns)
            && !rest.is_empty()
            && rest
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    })
}

/// Whether values under `name` can be secrets: one of its words (between `-`, `_`, `.`) is
/// `key(s)`, `apikey`, `secret(s)`, `password`, `passwd`, `credential(s)`, `authorization`;
/// or its last word is `token`, or `token` is followed only by `file`/`path` (`HF_TOKEN`,
/// `access_token`, `hf-token-file`; not `max-total-tokens`, `tokenizer-path`, `token_source`,
/// `speculative-token-map`).
pub(crate) fn is_secret_name(name: &str) -> bool {
    name_kind(name).is_some()
}

/// Whether `value` under `name` is a secret. Never: an empty value, `None`/`null`/`true`/
/// `false`, a `${NAME}` reference (the secret is in the environment, not here), a value already
/// redacted; under a `token` name, a number or list of numbers (a count or threshold).
pub fn is_secret(name: &str, value: &str) -> bool {
    let v = unquote(value.trim()).trim().trim_matches('`');
    // `Bearer <token>` is a credential under any name (`ROUTER_AUTH`, a header).
    if bearer_value(v) {
        return true;
    }
    let Some(kind) = name_kind(name) else {
        return false;
    };
    // A placeholder in documentation (`-o Key=Value`, `api-key: ...`) holds no secret.
    if v.is_empty()
        || matches!(
            v.to_ascii_lowercase().as_str(),
            "none" | "null" | "~" | "true" | "false" | "value" | "..." | "…"
        )
        || is_env_ref(v)
        || v == REDACTED
        || v == "***"
    {
        return false;
    }
    match kind {
        NameKind::Credential => true,
        NameKind::Token => !number_like(v),
    }
}

/// Whether a pair's value (the bytes after its separator) opens with `Bearer ` (after blanks,
/// a quote or a bracket): a credential whatever the pair's name.
fn bearer_follows(after: &[u8]) -> bool {
    let start = after
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'"' | b'\'' | b'['))
        .unwrap_or(after.len());
    let rest = &after[start..];
    rest.len() > 7 && rest[..6].eq_ignore_ascii_case(b"bearer") && matches!(rest[6], b' ' | b'\t')
}

/// `Bearer X`: an HTTP bearer credential, X one word that is neither a `${NAME}` reference
/// nor already redacted.
fn bearer_value(v: &str) -> bool {
    let Some((scheme, token)) = v.split_once([' ', '\t']) else {
        return false;
    };
    let token = token.trim();
    scheme.eq_ignore_ascii_case("bearer")
        && !token.is_empty()
        && !token.contains(char::is_whitespace)
        && !is_env_ref(token)
        && token != REDACTED
        && !matches!(token, "..." | "…" | "***" | "<token>" | "TOKEN")
}

/// `${NAME}`, exactly.
pub(crate) fn is_env_ref(value: &str) -> bool {
    value
        .strip_prefix("${")
        .and_then(|v| v.strip_suffix('}'))
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

fn unquote(v: &str) -> &str {
    for q in ['\'', '"'] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

/// Digits with signs, points, exponents, separators and brackets: `2048`, `0.5`, `[1, 2]`.
fn number_like(v: &str) -> bool {
    v.bytes().any(|b| b.is_ascii_digit())
        && v.bytes().all(|b| {
            b.is_ascii_digit()
                || matches!(
                    b,
                    b'.' | b'-' | b'+' | b'e' | b'E' | b',' | b' ' | b'[' | b']'
                )
        })
}

/// Credentials in a URL: `scheme://userinfo@`.
static URL_USERINFO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)\b([a-z][a-z0-9+.-]*://)([^\s/@?#'"<>\[\]{}]+)@"#).expect("valid regex")
});

/// `name: value`, `name=value`, `"name": "value"`, `name='value'`, `name: ['value']`.
static NAME_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r#"(?i)(?P<name>[a-z0-9_][a-z0-9_.-]*)['"]?(?P<sep>[ \t]*[:=][ \t]*)(?:\[[ \t]*)?"#,
        r#"(?P<scheme>(?:bearer|basic|token)[ \t]+)?"#,
        r#"(?P<val>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|[^\s,;)\]}{'"]+)"#
    ))
    .expect("valid regex")
});

/// A name and its separator, where a [`NAME_VALUE`] pair can start.
static NAME_SEP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)(?P<name>[a-z0-9_][a-z0-9_.-]*)['"]?[ \t]*[:=]"#).expect("valid regex")
});

/// `--name value` on a command line.
static FLAG_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r#"(?i)--(?P<name>[a-z0-9_][a-z0-9_.-]*)[ \t]+"#,
        r#"(?P<val>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|[^\s,;)\]}'"-][^\s,;)\]}'"]*)"#
    ))
    .expect("valid regex")
});

/// Hides secrets in text and JSON (see the module's documentation).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// The literal values as given (for [`Redactor::secrets`] and the supervisor).
    secrets: Vec<String>,
    /// What is searched for: each secret and its escaped and encoded forms, longest first.
    needles: Vec<Vec<u8>>,
}

impl Redactor {
    /// A redactor for these secret values; values shorter than [`MIN_SECRET_LEN`] are not
    /// searched for (the name and URL rules still hide them where they sit).
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut kept: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.len() >= MIN_SECRET_LEN && !is_env_ref(s))
            .collect();
        kept.sort();
        kept.dedup();
        let mut needles: Vec<Vec<u8>> = Vec::new();
        for s in &kept {
            let json = serde_json::to_string(s).unwrap_or_default();
            let json = json[1..json.len().saturating_sub(1).max(1)].to_string();
            let python = s.replace('\\', "\\\\").replace('\'', "\\'");
            for form in [s.clone(), json, python, base64(s.as_bytes())] {
                if form.len() >= MIN_SECRET_LEN && !needles.iter().any(|n| n == form.as_bytes()) {
                    needles.push(form.into_bytes());
                }
            }
        }
        // Longest first, so a secret that contains another is hidden whole.
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        Redactor {
            secrets: kept,
            needles,
        }
    }

    /// The literal values searched for.
    pub fn secrets(&self) -> &[String] {
        &self.secrets
    }

    /// `text` with every secret hidden.
    pub(crate) fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            Cow::Owned(b) => Cow::Owned(String::from_utf8_lossy(&b).into_owned()),
        }
    }

    /// Like [`text`](Self::text), for bytes that need not be UTF-8 (a server's log).
    pub fn bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let mut out: Cow<'a, [u8]> = Cow::Borrowed(bytes);
        let url = memchr::memmem::find(bytes, b"://").is_some();
        if url
            && let Cow::Owned(b) = URL_USERINFO.replace_all(&out, |c: &Captures| {
                let scheme = &c[1];
                let info = &c[2];
                if scheme.eq_ignore_ascii_case(b"ssh://") && !info.contains(&b':') {
                    c[0].to_vec()
                } else {
                    [scheme, b"***@"].concat()
                }
            })
        {
            out = Cow::Owned(b);
        }
        for needle in &self.needles {
            if memchr::memmem::find(&out, needle).is_some() {
                out = Cow::Owned(replace_all(&out, needle, REDACTED.as_bytes()));
            }
        }
        // Each rule needs a literal its match contains (`name: value` a `:` or `=`, a flag
        // `--`): text without it (most of a request record's strings) skips the regex.
        let possible = |rule: usize, t: &[u8]| match rule {
            0 => t.iter().any(|&b| b == b':' || b == b'='),
            _ => memchr::memmem::find(t, b"--").is_some(),
        };
        if possible(0, &out)
            && let Cow::Owned(b) = replace_name_values(&out)
        {
            out = Cow::Owned(b);
        }
        if possible(1, &out)
            && let Cow::Owned(b) = FLAG_VALUE.replace_all(&out, |c: &Captures| {
                redact_value(c).unwrap_or_else(|| c[0].to_vec())
            })
        {
            out = Cow::Owned(b);
        }
        out
    }

    /// Hides secrets in a JSON value: values of secret-named keys (at any depth) are replaced
    /// whole; every other string goes through [`text`](Self::text).
    pub(crate) fn json(&self, v: &mut serde_json::Value) {
        use serde_json::Value;
        match v {
            Value::String(s) => {
                if let Cow::Owned(t) = self.text(s) {
                    *s = t;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.json(i)),
            Value::Object(map) => {
                for (k, child) in map.iter_mut() {
                    if is_secret_name(k) {
                        hide_under(k, child);
                    }
                    self.json(child);
                }
            }
            _ => {}
        }
    }

    /// `value` serialised to JSON, secrets hidden.
    pub(crate) fn to_json_value(
        &self,
        value: &impl serde::Serialize,
    ) -> serde_json::Result<serde_json::Value> {
        let mut v = serde_json::to_value(value)?;
        self.json(&mut v);
        Ok(v)
    }

    /// The secrets as [`ENV_VAR`]'s value, for `servebench supervise`.
    pub fn to_env(&self) -> String {
        serde_json::to_string(&self.secrets).unwrap_or_default()
    }

    /// The redactor [`to_env`](Self::to_env) described (rules only when `text` is not one).
    pub fn from_env(text: &str) -> Redactor {
        Redactor::new(serde_json::from_str::<Vec<String>>(text).unwrap_or_default())
    }
}

/// Replaces the values under a secret-named JSON key that are secrets.
fn hide_under(name: &str, v: &mut serde_json::Value) {
    use serde_json::Value;
    let secret = match v {
        Value::String(s) => is_secret(name, s),
        Value::Number(n) => is_secret(name, &n.to_string()),
        Value::Array(items) => {
            for i in items.iter_mut() {
                hide_under(name, i);
            }
            false
        }
        _ => false,
    };
    if secret {
        *v = Value::String(REDACTED.into());
    }
}

/// `text` with the value of each `name value` pair whose value is a secret hidden. Pairs are
/// found by their names (`name:` or `name=`), each looked at once, so a pair inside another's
/// value is found too (`--comment=api_key=X`, `http://h/x?token=X`), in linear time: only a
/// name that can be a secret's is matched with its value ([`NAME_VALUE`]). In a query string
/// (`?` or `&` before the name) the value ends at the next `&` or `#`.
fn replace_name_values(text: &[u8]) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut at = 0;
    while let Some(m) = NAME_SEP.captures_at(text, at) {
        let whole = m.get(0).expect("match");
        at = whole.end();
        let name = m.name("name").expect("name");
        if name.start() < copied
            || (name_kind(&String::from_utf8_lossy(name.as_bytes())).is_none()
                && !bearer_follows(&text[whole.end()..]))
        {
            continue;
        }
        let Some(c) = NAME_VALUE
            .captures_at(text, name.start())
            .filter(|c| c.get(0).is_some_and(|w| w.start() == name.start()))
        else {
            continue;
        };
        let Some(mut hidden) = redact_value(&c) else {
            continue;
        };
        let mut end = c.get(0).expect("match").end();
        let query = name.start() > 0 && matches!(text[name.start() - 1], b'?' | b'&');
        if query && let Some(val) = c.name("val") {
            // Keep what follows the value's own end in a query string.
            let cut = val.as_bytes().iter().position(|b| matches!(b, b'&' | b'#'));
            if let Some(cut) = cut {
                end = val.start() + cut;
                hidden = [&text[name.start()..val.start()], REDACTED.as_bytes()].concat();
            }
        }
        let buf = out.get_or_insert_with(|| Vec::with_capacity(text.len()));
        buf.extend_from_slice(&text[copied..name.start()]);
        buf.extend_from_slice(&hidden);
        copied = end;
        at = at.max(end);
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut buf) => {
            buf.extend_from_slice(&text[copied..]);
            Cow::Owned(buf)
        }
    }
}

/// The replacement for a `name value` match: the value hidden when it is a secret, the rest
/// (quotes, separators, `Bearer `) kept; None when nothing in it is hidden.
fn redact_value(c: &Captures) -> Option<Vec<u8>> {
    let whole = c.get(0).expect("match");
    let (name, val) = (c.name("name")?, c.name("val")?);
    let name_s = String::from_utf8_lossy(name.as_bytes());
    let val_s = String::from_utf8_lossy(val.as_bytes());
    // A lone word before a colon is prose ("time to first token: from ..."), not a setting:
    // only `word=value` counts for it; names like `api-key:` or `HF_TOKEN:` always do.
    let lone_word = !name_s.contains(['-', '_', '.']);
    if lone_word
        && c.name("scheme").is_none()
        && c.name("sep").is_some_and(|s| s.as_bytes().contains(&b':'))
    {
        return None;
    }
    // `Authorization: Bearer X` hides X whatever the header or variable is called; `Basic`
    // and `Token` only under a secret name.
    let bearer = c.name("scheme").is_some_and(|s| {
        String::from_utf8_lossy(s.as_bytes())
            .trim()
            .eq_ignore_ascii_case("bearer")
    }) || (c.name("scheme").is_some() && name_kind(&name_s).is_some());
    if !bearer && !is_secret(&name_s, &val_s) {
        return None;
    }
    let v = val.as_bytes();
    let quoted = v.len() >= 2 && matches!(v[0], b'\'' | b'"') && v[v.len() - 1] == v[0];
    let hidden: Vec<u8> = if quoted {
        [&v[..1], REDACTED.as_bytes(), &v[v.len() - 1..]].concat()
    } else {
        REDACTED.as_bytes().to_vec()
    };
    let start = whole.start();
    Some(
        [
            &whole.as_bytes()[..val.start() - start],
            &hidden[..],
            &whole.as_bytes()[val.end() - start..],
        ]
        .concat(),
    )
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut last = 0;
    for at in memchr::memmem::find_iter(haystack, needle) {
        if at < last {
            continue;
        }
        out.extend_from_slice(&haystack[last..at]);
        out.extend_from_slice(with);
        last = at + needle.len();
    }
    out.extend_from_slice(&haystack[last..]);
    out
}

/// Standard base64 without padding (how a secret shows inside a padded encoding too: its
/// unpadded prefix).
fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(bytes)
}

static CURRENT: RwLock<Option<Arc<Redactor>>> = RwLock::new(None);

/// Adds `redactor`'s secrets to the process's current redactor (a run adds its spec's before
/// it writes or prints anything; a command that loads several specs adds each one's).
pub fn install(redactor: Redactor) {
    let mut current = CURRENT.write().unwrap_or_else(|e| e.into_inner());
    let merged = match current.as_deref() {
        Some(old) if !old.secrets.is_empty() => {
            Redactor::new(old.secrets.iter().chain(&redactor.secrets).cloned())
        }
        _ => redactor,
    };
    *current = Some(Arc::new(merged));
}

/// The process's current redactor: the last one installed, else the rules alone.
pub fn current() -> Arc<Redactor> {
    static RULES_ONLY: LazyLock<Arc<Redactor>> = LazyLock::new(Arc::default);
    CURRENT
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_else(|| RULES_ONLY.clone())
}

/// `text` through the current redactor.
pub fn text(text: &str) -> Cow<'_, str> {
    current().text(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(secrets: &[&str]) -> Redactor {
        Redactor::new(secrets.iter().map(|s| s.to_string()))
    }

    #[test]
    fn engine_metric_names_are_not_secret_names() {
        // SGLang 0.5.23 exports this gauge; its value was redacted and the run unreadable.
        assert!(!is_secret_name("sglang:num_unique_running_routing_keys"));
        assert!(!is_secret("vllm:prompt_tokens_total", "12"));
        // A credential written `name: value` in text is not a metric name.
        assert!(is_secret_name("api_key"));
        assert!(is_secret("SERVICE_API_KEY", "sk-abcdefgh"));
    }

    #[test]
    fn secret_names_are_whole_words() {
        for name in [
            "api-key",
            "OPENAI_API_KEY",
            "admin-api-key",
            "api-key-file",
            "ssl-keyfile-password",
            "HF_TOKEN",
            "hf-token",
            "hf-token-file",
            "access_token",
            "token",
            "DB_PASSWORD",
            "aws_secret_access_key",
            "Authorization",
            "--api-key",
            "HF_TOKEN_PATH",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "max-total-tokens",
            "tokenizer-path",
            "PYTORCH_CUDA_ALLOC_CONF",
            "tp-size",
            "ssl-keyfile",
            "monkey",
            "host_key_check",
            "num_key_value_heads",
            "cached_tokens",
            "token_source",
            "speculative-token-map",
            "tbo-token-distribution-threshold",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn token_names_with_numbers_count_tokens() {
        assert!(is_secret("HF_TOKEN", "hf_abc"));
        assert!(is_secret("hf-token-file", "/home/me/.hf_token"));
        assert!(!is_secret("long-prefill-token-threshold", "2048"));
        assert!(!is_secret("token_capacity", "123456"));
        assert!(!is_secret("bucket-time-to-first-token", "[0.1, 0.5, 1e1]"));
        assert!(!is_secret("return-tokens-as-token-ids", "true"));
        // A credential's name hides numbers too (a numeric password is a password).
        assert!(is_secret("api-key", "12345678"));
        assert!(!is_secret("api-key", "None"));
        assert!(!is_secret("api-key", "'${SGLANG_API_KEY}'"));
        assert!(!is_secret("allow-credentials", "false"));
        assert!(!is_secret("tp-size", "sk-secret"));
    }

    #[test]
    fn literal_secrets_are_hidden_in_every_form() {
        let red = r(&["sk-Quote\"Back\\slash'1"]);
        let plain = "key sk-Quote\"Back\\slash'1 end";
        assert_eq!(red.text(plain), format!("key {REDACTED} end"));
        let json =
            serde_json::to_string(&serde_json::json!({"m": "x sk-Quote\"Back\\slash'1"})).unwrap();
        assert!(!red.text(&json).contains("sk-Quote"), "{}", red.text(&json));
        let py = "repr 'sk-Quote\"Back\\\\slash\\'1'";
        assert!(!red.text(py).contains("sk-Quote"), "{}", red.text(py));
        let b64 = format!("Basic {}", base64(b"sk-Quote\"Back\\slash'1"));
        assert!(!red.text(&b64).contains(&base64(b"sk-Quote\"Back\\slash'1")));
    }

    #[test]
    fn short_secrets_are_not_searched_in_free_text() {
        let red = r(&["abc"]);
        assert_eq!(red.text("abcdef and abc"), "abcdef and abc");
        assert!(red.secrets().is_empty());
        // ... but hidden under their name.
        assert_eq!(red.text("api_key='abc'"), format!("api_key='{REDACTED}'"));
    }

    #[test]
    fn url_credentials_are_hidden() {
        let red = Redactor::default();
        assert_eq!(
            red.text("external http://user:pa55@127.0.0.1:8/v1 down"),
            "external http://***@127.0.0.1:8/v1 down"
        );
        assert_eq!(red.text("https://tok3n@h/x"), "https://***@h/x");
        assert_eq!(red.text("ssh://root@gpu-box"), "ssh://root@gpu-box");
        assert_eq!(red.text("ssh://root:pw@gpu-box"), "ssh://***@gpu-box");
        assert_eq!(red.text("mail me@example.com"), "mail me@example.com");
    }

    #[test]
    fn values_next_to_secret_names_are_hidden() {
        let red = Redactor::default();
        let cases = [
            (
                "server_args=ServerArgs(model_path='m', api_key='k1', tp_size=1)".to_string(),
                format!("server_args=ServerArgs(model_path='m', api_key='{REDACTED}', tp_size=1)"),
            ),
            (
                r#"{"api_key": "k2", "max_total_tokens": 5}"#.to_string(),
                format!(r#"{{"api_key": "{REDACTED}", "max_total_tokens": 5}}"#),
            ),
            (
                "HF_TOKEN=hf_k3 next".into(),
                format!("HF_TOKEN={REDACTED} next"),
            ),
            (
                "  api-key: k4  # c".into(),
                format!("  api-key: {REDACTED}  # c"),
            ),
            (
                "env: { HF_TOKEN: k5, X: 1 }".into(),
                format!("env: {{ HF_TOKEN: {REDACTED}, X: 1 }}"),
            ),
            (
                "python -m x --api-key k6 --tp 8".into(),
                format!("python -m x --api-key {REDACTED} --tp 8"),
            ),
            ("--hf-token=k7".into(), format!("--hf-token={REDACTED}")),
            (
                "'api_key': ['k8']".into(),
                format!("'api_key': ['{REDACTED}']"),
            ),
            (
                "Authorization: Bearer k9".into(),
                format!("Authorization: Bearer {REDACTED}"),
            ),
            // A bearer credential under a name without a secret word.
            (
                "ROUTER_AUTH=Bearer k9b next".into(),
                format!("ROUTER_AUTH=Bearer {REDACTED} next"),
            ),
            (
                r#"{"ROUTER_AUTH": "Bearer k9c"}"#.into(),
                format!(r#"{{"ROUTER_AUTH": "{REDACTED}"}}"#),
            ),
            // A pair inside another's value: a query string, a flag's value.
            (
                "see http://h:8/v1/models?token=k10&x=1 here".into(),
                format!("see http://h:8/v1/models?token={REDACTED}&x=1 here"),
            ),
            (
                "sbatch --comment=api_key=k11 --exclusive".into(),
                format!("sbatch --comment=api_key={REDACTED} --exclusive"),
            ),
            (
                "description: calls it with api_key=k12 and password=k13".into(),
                format!("description: calls it with api_key={REDACTED} and password={REDACTED}"),
            ),
            (
                "url: https://h/x?a=1&access_token=k14#f".into(),
                format!("url: https://h/x?a=1&access_token={REDACTED}#f"),
            ),
        ];
        for (given, want) in cases {
            assert_eq!(red.text(&given), want, "{given}");
        }
        // Counts, references and flags without values stay.
        for same in [
            "long_prefill_token_threshold=2048",
            "api_key=None",
            "api-key: \"${SGLANG_API_KEY}\"",
            "max_total_tokens=4096",
            "--api-key --tp 8",
            "\"api_key\": {",
            "host_key_check: strict",
            "Time to first token: from the request",
            "Time per output token: (E2E - TTFT)",
            "\"description\": \"Extra ssh options (`-o Key=Value`), e.g. x\"",
        ] {
            assert_eq!(red.text(same), same);
        }
    }

    #[test]
    fn nested_pairs_are_found_in_linear_steps() {
        // A long chain of pairs: each is looked at once, none hides the next.
        let chain = "a=".repeat(200_000) + "api_key=k15";
        let t = std::time::Instant::now();
        let out = Redactor::default().text(&chain).into_owned();
        assert!(
            out.ends_with(&format!("api_key={REDACTED}")),
            "{}",
            &out[out.len() - 40..]
        );
        assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
    }

    #[test]
    fn json_hides_secret_keys_at_any_depth() {
        let red = r(&["sk-literal-123"]);
        let mut v = serde_json::json!({"api_key": "short", "tp_size": 8, "token_capacity": 5,
            "internal_states": [{"hf_token": "x", "ssl_keyfile": null, "api_key": ["a", "b"]}],
            "note": "saw sk-literal-123", "server.env.HF_TOKEN": "hf_swept"});
        red.json(&mut v);
        assert_eq!(v["api_key"], REDACTED);
        assert_eq!(v["internal_states"][0]["hf_token"], REDACTED);
        assert_eq!(v["internal_states"][0]["api_key"][1], REDACTED);
        assert_eq!(
            v["internal_states"][0]["ssl_keyfile"],
            serde_json::Value::Null
        );
        assert_eq!(v["token_capacity"], 5);
        assert_eq!(v["tp_size"], 8);
        assert_eq!(v["note"], format!("saw {REDACTED}"));
        assert_eq!(v["server.env.HF_TOKEN"], REDACTED);
    }

    #[test]
    fn env_round_trip_and_base64() {
        let red = r(&["sk-abcdefgh"]);
        let back = Redactor::from_env(&red.to_env());
        assert_eq!(back.secrets(), red.secrets());
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64(b"ab"), "YWI");
    }
}
