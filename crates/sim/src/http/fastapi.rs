//! What SGLang's HTTP framework (FastAPI on Starlette, pydantic models) answers before a
//! handler runs: a body that is not JSON or does not fit the endpoint's model (a
//! `RequestValidationError`, which SGLang's handler in `entrypoints/http_server.py` turns into
//! a 400 OpenAI error object with `type: "Bad Request"`), and a path or method no route has
//! (Starlette's `{"detail": ...}`).

use super::json_response;
use crate::python::{py_repr, py_str};
use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

/// One pydantic error, written as Python prints its dict (`{'type': 'missing', 'loc': ...}`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PydanticError(pub String);

impl PydanticError {
    /// A required field is absent: `{'type': 'missing', 'loc': ('body', FIELD), ...}`.
    pub fn missing(field: &str, input: &Value) -> PydanticError {
        PydanticError(format!(
            "{{'type': 'missing', 'loc': ('body', {}), 'msg': 'Field required', 'input': {}}}",
            py_str(field),
            py_repr(input)
        ))
    }

    /// A field of the wrong JSON type: `kind` is pydantic's error type (`list_type`), `msg`
    /// its words (`Input should be a valid list`).
    pub(crate) fn wrong_type(field: &str, kind: &str, msg: &str, input: &Value) -> PydanticError {
        PydanticError(format!(
            "{{'type': {}, 'loc': ('body', {}), 'msg': {}, 'input': {}}}",
            py_str(kind),
            py_str(field),
            py_str(msg),
            py_repr(input)
        ))
    }

    /// A field validator raised `ValueError(message)`.
    pub(crate) fn value_error(field: &str, message: &str, input: &Value) -> PydanticError {
        PydanticError(format!(
            "{{'type': 'value_error', 'loc': ('body', {}), 'msg': {}, 'input': {}, 'ctx': {{'error': ValueError({})}}}}",
            py_str(field),
            py_str(&format!("Value error, {message}")),
            py_repr(input),
            py_str(message)
        ))
    }

    /// The body is JSON but not an object, where the endpoint's model is a dataclass.
    pub(crate) fn not_a_dict(class: &str, input: &Value) -> PydanticError {
        PydanticError(format!(
            "{{'type': 'dataclass_type', 'loc': ('body',), 'msg': {}, 'input': {}, 'ctx': {{'class_name': {}}}}}",
            py_str(&format!(
                "Input should be a dictionary or an instance of {class}"
            )),
            py_repr(input),
            py_str(class)
        ))
    }

    /// The body is not JSON: `pos` is the character offset of the error.
    pub fn json_invalid(pos: usize, error: &str) -> PydanticError {
        PydanticError(format!(
            "{{'type': 'json_invalid', 'loc': ('body', {pos}), 'msg': 'JSON decode error', 'input': {{}}, 'ctx': {{'error': {}}}}}",
            py_str(error)
        ))
    }
}

/// The 400 SGLang answers for a `RequestValidationError`: the OpenAI error object with
/// `type: "Bad Request"` and pydantic's errors in the message. The real message then quotes
/// the server's own source file and line, which a simulator has not got: it stops before.
pub(crate) fn validation_error(errors: &[PydanticError]) -> Response {
    let n = errors.len();
    let mut message = format!("{n} validation error{}:", if n == 1 { "" } else { "s" });
    for e in errors {
        message.push_str("\n  ");
        message.push_str(&e.0);
    }
    json_response(
        StatusCode::BAD_REQUEST,
        &json!({"object": "error", "message": message, "type": "Bad Request", "param": null, "code": 400}),
    )
}

/// Parses a request body as SGLang's FastAPI app does before the handler: an empty body is a
/// missing one; one that is not JSON is orjson's decode error (SGLang's `ORJSONRequest`).
/// The error goes to [`validation_error`].
pub(crate) fn parse_body(body: &Bytes) -> Result<Value, PydanticError> {
    if body.is_empty() {
        return Err(PydanticError(
            "{'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}".into(),
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        let text = String::from_utf8_lossy(body);
        let pos = char_offset(&text, e.line(), e.column());
        let words = e.to_string();
        let words = words
            .rsplit_once(" at line ")
            .map_or(words.as_str(), |(w, _)| w);
        let (pos, words) = orjson_words(&text, pos, words);
        PydanticError::json_invalid(pos, &words)
    })
}

/// orjson's words (and position) for serde's decode error: the two parsers stop at the same
/// place for the same reasons; where serde has no counterpart its own words stay.
fn orjson_words(text: &str, pos: usize, serde: &str) -> (usize, String) {
    let same = |w: &str| (pos, w.to_string());
    if serde.starts_with("EOF while parsing") {
        return (text.chars().count(), "unexpected end of data".into());
    }
    match serde {
        "key must be a string" => same("unexpected character, expected a string key"),
        "expected `:`" => same("unexpected character, expected ':' after key"),
        "expected `,` or `}`" => same("unexpected character, expected ',' or '}'"),
        "expected `,` or `]`" => same("unexpected character, expected ',' or ']'"),
        "expected value" | "expected ident" => same("unexpected character, expected a JSON value"),
        "trailing characters" => same("unexpected content after document"),
        // serde stops at the bracket after the comma, orjson at the comma.
        "trailing comma" => {
            let chars: Vec<char> = text.chars().collect();
            let comma = chars[..pos.min(chars.len())]
                .iter()
                .rposition(|c| *c == ',')
                .unwrap_or(pos);
            (comma, "trailing comma is not allowed".into())
        }
        "invalid escape" => same("invalid escaped sequence in string"),
        w if w.starts_with("control character") => same("unexpected control character in string"),
        w => same(w),
    }
}

/// The character offset of serde's 1-based line and column (a column of 0 means the end).
fn char_offset(text: &str, line: usize, column: usize) -> usize {
    let mut offset = 0;
    for (i, l) in text.split('\n').enumerate() {
        if i + 1 == line {
            return offset + column.saturating_sub(1).min(l.chars().count());
        }
        offset += l.chars().count() + 1;
    }
    text.chars().count()
}

/// Starlette's answer for a path no route has: 404 `{"detail":"Not Found"}`.
pub async fn not_found() -> Response {
    json_response(StatusCode::NOT_FOUND, &json!({"detail": "Not Found"}))
}

/// Starlette's answer for a route's path with a method it does not take: 405
/// `{"detail":"Method Not Allowed"}` (axum adds the `allow` header, as Starlette does).
pub async fn method_not_allowed() -> Response {
    json_response(
        StatusCode::METHOD_NOT_ALLOWED,
        &json!({"detail": "Method Not Allowed"}),
    )
}

/// The `allow` header of a 405 as Starlette writes it (`POST, PUT`; axum writes `POST,PUT`).
/// Starlette's order comes from a set, so it changes from process to process.
pub(crate) async fn allow_as_starlette_writes_it(mut r: Response) -> Response {
    let spaced = r
        .headers()
        .get(header::ALLOW)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(',').map(str::trim).collect::<Vec<_>>().join(", "))
        .and_then(|v| HeaderValue::from_str(&v).ok());
    if let Some(v) = spaced {
        r.headers_mut().insert(header::ALLOW, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pydantic_errors_read_as_sglang_prints_them() {
        // The first part of what 0.5.23 answered a completions request without a prompt.
        assert_eq!(
            PydanticError::missing("prompt", &json!({"model": "tiny", "max_tokens": 4})).0,
            "{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required', 'input': {'model': 'tiny', 'max_tokens': 4}}"
        );
        assert_eq!(
            PydanticError::value_error("max_tokens", "max_tokens must be positive", &json!(0)).0,
            "{'type': 'value_error', 'loc': ('body', 'max_tokens'), 'msg': 'Value error, max_tokens must be positive', 'input': 0, 'ctx': {'error': ValueError('max_tokens must be positive')}}"
        );
        let e = parse_body(&Bytes::from_static(b"{not json")).unwrap_err();
        assert_eq!(validation_error(&[e]).status(), StatusCode::BAD_REQUEST);
        // Where 0.5.23 (orjson) stops and what it says, for four malformed bodies.
        let words = |body: &str| {
            let e = serde_json::from_str::<Value>(body).unwrap_err();
            let w = e.to_string();
            let w = w
                .rsplit_once(" at line ")
                .map_or(w.as_str(), |(w, _)| w)
                .to_string();
            orjson_words(body, char_offset(body, e.line(), e.column()), &w)
        };
        assert_eq!(
            words("{not json"),
            (1, "unexpected character, expected a string key".into())
        );
        assert_eq!(
            words("{\"a\":1,}"),
            (6, "trailing comma is not allowed".into())
        );
        assert_eq!(
            words("{\"a\" 1}"),
            (5, "unexpected character, expected ':' after key".into())
        );
        assert_eq!(words("tru"), (3, "unexpected end of data".into()));
        assert_eq!(
            words("{} x"),
            (3, "unexpected content after document".into())
        );
        assert_eq!(char_offset("ab\ncd", 2, 2), 4);
    }
}
