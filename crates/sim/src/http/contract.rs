//! sglang 0.5.23's JSON contract gate for `/generate` (`entrypoints/api_contract.py` over the
//! generated `sglang/api/v1/api_types.py`): after FastAPI admitted the body, the schema's own
//! decoder checks it again and a violation is a 400 `{"error": "<text>"}` (a string there, not
//! an object), in serde's words (the decoder imitates the Rust server's serde). The simulator
//! checks the fields it reads and the whole of `sampling_params`; the request's other fields
//! are not checked.

use crate::python::py_float;
use serde_json::Value;

/// `SamplingParams`' fields in the generated decoder's order (its `_FIELDS_SamplingParams`,
/// which the unknown-field message lists), each with how its value is decoded.
const SAMPLING_PARAMS: &[(&str, Decode)] = &[
    ("max_new_tokens", Decode::Int),
    ("stop", Decode::StringOrList),
    ("stop_token_ids", Decode::IntList),
    ("stop_regex", Decode::StringOrList),
    ("temperature", Decode::Float),
    ("top_p", Decode::Float),
    ("top_k", Decode::Int),
    ("min_p", Decode::Float),
    ("frequency_penalty", Decode::Float),
    ("presence_penalty", Decode::Float),
    ("repetition_penalty", Decode::Float),
    ("min_new_tokens", Decode::Int),
    ("n", Decode::Int),
    ("json_schema", Decode::Str),
    ("regex", Decode::Str),
    ("ebnf", Decode::Str),
    ("structural_tag", Decode::Str),
    ("ignore_eos", Decode::Bool),
    ("skip_special_tokens", Decode::Bool),
    ("spaces_between_special_tokens", Decode::Bool),
    ("no_stop_trim", Decode::Bool),
    ("stream_interval", Decode::Int),
    ("logit_bias", Decode::FloatMap),
    ("sampling_seed", Decode::Int),
    ("custom_params", Decode::Any),
    ("beam_width", Decode::Int),
    ("watermark", Decode::Watermark),
    ("choice", Decode::StrList),
];

/// `WatermarkRequestConfig`'s fields.
const WATERMARK: &[(&str, Decode)] = &[
    ("enabled", Decode::Bool),
    ("key", Decode::Str),
    ("context_window", Decode::Int),
];

/// How the generated decoder reads one value (`null` is always the default).
#[derive(Clone, Copy)]
enum Decode {
    Int,
    Float,
    Bool,
    Str,
    StringOrList,
    StrList,
    IntList,
    FloatMap,
    Watermark,
    Any,
}

/// serde's `Unexpected` display of a value, as `_unexpected` writes it.
fn unexpected(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) if n.is_f64() => {
            format!("floating point `{}`", py_float(n.as_f64().unwrap_or(0.0)))
        }
        Value::Number(n) => format!("integer `{n}`"),
        Value::String(s) => format!("string \"{s}\""),
        Value::Array(_) => "sequence".into(),
        Value::Object(_) => "map".into(),
    }
}

fn invalid_type(v: &Value, expected: &str) -> ContractError {
    ContractError::InvalidType {
        found: unexpected(v),
        expected: expected.to_string(),
    }
}

/// A body the contract refuses, in serde's words (the text of SGLang's 400).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum ContractError {
    /// serde's `invalid_type`: what was found, as serde names it, and what was expected.
    #[error("invalid type: {found}, expected {expected}")]
    InvalidType { found: String, expected: String },
    /// serde's `unknown_field`: the key, and which fields were expected (`expected one of
    /// ...`, `there are no fields`).
    #[error("unknown field `{key}`, {expected}")]
    UnknownField { key: String, expected: String },
}

fn is_int(v: &Value) -> bool {
    v.as_i64().is_some() || v.as_u64().is_some()
}

fn expect_int(v: &Value, expected: &str) -> Result<(), ContractError> {
    if is_int(v) {
        Ok(())
    } else {
        Err(invalid_type(v, expected))
    }
}

fn expect_str(v: &Value, expected: &str) -> Result<(), ContractError> {
    if v.is_string() {
        Ok(())
    } else {
        Err(invalid_type(v, expected))
    }
}

fn expect_bool(v: &Value, expected: &str) -> Result<(), ContractError> {
    if v.is_boolean() {
        Ok(())
    } else {
        Err(invalid_type(v, expected))
    }
}

fn expect_seq<'a>(v: &'a Value, expected: &str) -> Result<&'a [Value], ContractError> {
    v.as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| invalid_type(v, expected))
}

fn string_or_list(v: &Value, what: &str) -> Result<(), ContractError> {
    match v {
        Value::Array(items) => items.iter().try_for_each(|e| expect_str(e, "a string")),
        v => expect_str(v, &format!("a value or an array of values for {what}")),
    }
}

fn token_ids(v: &Value) -> Result<(), ContractError> {
    expect_seq(v, "a sequence")?
        .iter()
        .try_for_each(|e| expect_int(e, "i64"))
}

fn token_ids_or_list(v: &Value) -> Result<(), ContractError> {
    match v {
        // [] and [number, ...] are one flat list; anything else is a batch.
        Value::Array(items) if items.first().is_none_or(Value::is_number) => token_ids(v),
        Value::Array(items) => items.iter().try_for_each(token_ids),
        v => Err(invalid_type(
            v,
            "a value or an array of values for TokenIdsOrList",
        )),
    }
}

/// serde's `unknown_field` text.
fn unknown_field(key: &str, fields: &[(&str, Decode)]) -> ContractError {
    let names: Vec<String> = fields.iter().map(|(f, _)| format!("`{f}`")).collect();
    let expected = match names.as_slice() {
        [] => "there are no fields".to_string(),
        [one] => format!("expected {one}"),
        [a, b] => format!("expected {a} or {b}"),
        _ => format!("expected one of {}", names.join(", ")),
    };
    ContractError::UnknownField {
        key: key.to_string(),
        expected,
    }
}

fn decode(v: &Value, how: Decode) -> Result<(), ContractError> {
    if v.is_null() {
        return Ok(());
    }
    match how {
        Decode::Int => expect_int(v, "i64"),
        Decode::Float => {
            if v.is_number() {
                Ok(())
            } else {
                Err(invalid_type(v, "f64"))
            }
        }
        Decode::Bool => expect_bool(v, "a boolean"),
        Decode::Str => expect_str(v, "a string"),
        Decode::StringOrList => string_or_list(v, "StringOrList"),
        Decode::StrList => expect_seq(v, "a sequence")?
            .iter()
            .try_for_each(|e| expect_str(e, "a string")),
        Decode::IntList => expect_seq(v, "a sequence")?
            .iter()
            .try_for_each(|e| expect_int(e, "i64")),
        Decode::FloatMap => v
            .as_object()
            .ok_or_else(|| invalid_type(v, "a map"))?
            .values()
            .try_for_each(|e| {
                if e.is_number() {
                    Ok(())
                } else {
                    Err(invalid_type(e, "f64"))
                }
            }),
        Decode::Watermark => object(v, "struct WatermarkRequestConfig", WATERMARK),
        Decode::Any => Ok(()),
    }
}

/// A struct that rejects unknown keys, checked key by key in the body's order.
fn object(v: &Value, expected: &str, fields: &[(&str, Decode)]) -> Result<(), ContractError> {
    let m = v.as_object().ok_or_else(|| invalid_type(v, expected))?;
    for (key, x) in m {
        let Some((_, how)) = fields.iter().find(|(f, _)| f == key) else {
            return Err(unknown_field(key, fields));
        };
        decode(x, *how)?;
    }
    Ok(())
}

fn sampling_params(v: &Value) -> Result<(), ContractError> {
    match v {
        Value::Array(list) => list
            .iter()
            .try_for_each(|sp| object(sp, "struct SamplingParams", SAMPLING_PARAMS)),
        v => object(
            v,
            "a value or an array of values for SamplingParamsOrList",
            SAMPLING_PARAMS,
        ),
    }
}

/// The contract violation in a `/generate` body (a JSON object), or `Ok`. `GenerateRequest`
/// ignores keys it does not know; the ones checked are those the simulator reads.
pub(crate) fn generate_request(body: &Value) -> Result<(), ContractError> {
    let Some(m) = body.as_object() else {
        return Err(invalid_type(body, "struct GenerateRequest"));
    };
    for (key, x) in m {
        if x.is_null() {
            continue;
        }
        match key.as_str() {
            "rid" | "text" => string_or_list(x, "StringOrList")?,
            "input_ids" => token_ids_or_list(x)?,
            "stream" => expect_bool(x, "a boolean")?,
            "sampling_params" => sampling_params(x)?,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What the real 0.5.23 server answered (its 400 `{"error": ...}` bodies).
    #[test]
    fn words_of_the_real_decoder() {
        let e = generate_request(&json!({"text": "hi", "sampling_params": {"bogus": 1}}))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unknown field `bogus`, expected one of `max_new_tokens`, `stop`, `stop_token_ids`, \
             `stop_regex`, `temperature`, `top_p`, `top_k`, `min_p`, `frequency_penalty`, \
             `presence_penalty`, `repetition_penalty`, `min_new_tokens`, `n`, `json_schema`, \
             `regex`, `ebnf`, `structural_tag`, `ignore_eos`, `skip_special_tokens`, \
             `spaces_between_special_tokens`, `no_stop_trim`, `stream_interval`, `logit_bias`, \
             `sampling_seed`, `custom_params`, `beam_width`, `watermark`, `choice`"
        );
        let sp = |p: Value| generate_request(&json!({"text": "hi", "sampling_params": p}));
        assert_eq!(
            sp(json!({"max_new_tokens": 8.0})).unwrap_err().to_string(),
            "invalid type: floating point `8.0`, expected i64"
        );
        assert_eq!(
            sp(json!({"max_new_tokens": "8"})).unwrap_err().to_string(),
            "invalid type: string \"8\", expected i64"
        );
        assert_eq!(
            sp(json!({"temperature": "x"})).unwrap_err().to_string(),
            "invalid type: string \"x\", expected f64"
        );
        assert_eq!(
            sp(json!({"ignore_eos": 1})).unwrap_err().to_string(),
            "invalid type: integer `1`, expected a boolean"
        );
        assert_eq!(
            generate_request(&json!({"text": "hi", "stream": "yes"}))
                .unwrap_err()
                .to_string(),
            "invalid type: string \"yes\", expected a boolean"
        );
        // Accepted: the fields it knows, nulls, ints as floats, lists of params.
        sp(json!({"max_new_tokens": 8, "temperature": 0, "stop": ["a"], "custom_params": {"x": 1}}))
            .unwrap();
        sp(json!([{"max_new_tokens": null}, {"top_k": 5}])).unwrap();
        generate_request(&json!({"input_ids": [[1, 2], [3]], "unknown_top_level": 1})).unwrap();
        assert_eq!(
            generate_request(&json!({"input_ids": [1, 2.5]}))
                .unwrap_err()
                .to_string(),
            "invalid type: floating point `2.5`, expected i64"
        );
    }
}
