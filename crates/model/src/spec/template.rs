//! `{{ name }}` templates inside spec strings.
//!
//! Only plain substitution of a sweep variable is supported: no filters, expressions or blocks,
//! so that a spec stays declarative and every value can be checked before anything runs.

use serde_json::Value;

/// One piece of a templated string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Literal text.
    Text(String),
    /// A variable reference; `offset` is the character offset of `{{` in the string.
    Var { name: String, offset: usize },
}

/// Why a template could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateError {
    /// Character offset of the problem in the string.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

/// Whether a string contains template syntax at all.
pub(crate) fn has_template(s: &str) -> bool {
    s.contains("{{") || s.contains("{%")
}

/// Splits a string into text and variable pieces.
pub(crate) fn parse(s: &str) -> Result<Vec<Piece>, TemplateError> {
    if let Some(i) = s.find("{%") {
        return Err(TemplateError {
            offset: s[..i].chars().count(),
            message: "template blocks (`{% ... %}`) are not supported".into(),
            hint: Some("only `{{ name }}` substitution of a sweep variable is supported".into()),
        });
    }
    let mut pieces = Vec::new();
    let mut rest = s;
    let mut consumed = 0; // characters before `rest`
    while let Some(open) = rest.find("{{") {
        let offset = consumed + rest[..open].chars().count();
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_string()));
        }
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err(TemplateError {
                offset,
                message: "unclosed template: `{{` without `}}`".into(),
                hint: Some("write `{{ name }}`".into()),
            });
        };
        let inner = after[..close].trim();
        if !is_identifier(inner) {
            let general = "only `{{ name }}` with the name of a sweep variable is supported";
            let (message, hint) = if let Some((var, _)) = inner.split_once('|') {
                let var = var.trim();
                let hint = if is_identifier(var) {
                    format!(
                        "write `{{{{ {var} }}}}`: the value is substituted with its type, so no filter is needed"
                    )
                } else {
                    general.to_string()
                };
                (
                    format!("template filters are not supported: `{{{{ {inner} }}}}`"),
                    hint,
                )
            } else if inner.is_empty() {
                (
                    "empty template `{{ }}`".to_string(),
                    "write a sweep variable's name inside, e.g. `{{ ctx }}`".to_string(),
                )
            } else {
                (
                    format!("unsupported template expression `{{{{ {inner} }}}}`"),
                    general.to_string(),
                )
            };
            return Err(TemplateError {
                offset,
                message,
                hint: Some(hint),
            });
        }
        pieces.push(Piece::Var {
            name: inner.to_string(),
            offset,
        });
        let used = open + 2 + close + 2;
        consumed += rest[..used].chars().count();
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    Ok(pieces)
}

/// A template variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Substitutes variables. A string that is exactly one template (spaces around it allowed)
/// becomes the variable's typed value; otherwise values are interpolated as text. Unknown
/// variables are left as written (they are reported separately).
pub(crate) fn render(pieces: &[Piece], lookup: &dyn Fn(&str) -> Option<Value>) -> Value {
    let only_var: Vec<&Piece> = pieces
        .iter()
        .filter(|p| !matches!(p, Piece::Text(t) if t.trim().is_empty()))
        .collect();
    if let [Piece::Var { name, .. }] = only_var.as_slice()
        && let Some(v) = lookup(name)
    {
        return v;
    }
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Var { name, .. } => match lookup(name) {
                Some(Value::String(s)) => out.push_str(&s),
                Some(v) => out.push_str(&v.to_string()),
                None => {
                    out.push_str("{{ ");
                    out.push_str(name);
                    out.push_str(" }}");
                }
            },
        }
    }
    Value::String(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lookup(name: &str) -> Option<Value> {
        (name == "ctx").then(|| json!(1024))
    }

    #[test]
    fn exact_template_is_typed() {
        assert_eq!(render(&parse(" {{ ctx }} ").unwrap(), &lookup), json!(1024));
        assert_eq!(
            render(&parse("n={{ctx}}!").unwrap(), &lookup),
            json!("n=1024!")
        );
    }

    #[test]
    fn rejects_filters_and_unclosed() {
        assert!(
            parse("{{ ctx | int }}")
                .unwrap_err()
                .message
                .contains("filters")
        );
        assert!(parse("a {{ ctx").unwrap_err().message.contains("unclosed"));
        assert!(parse("{% if x %}").is_err());
        assert_eq!(
            parse("é{{ x }}").unwrap()[1],
            Piece::Var {
                name: "x".into(),
                offset: 1
            }
        );
    }
}
