//! What SGLang (a Python program) writes and reads the way Python does: `repr` of values in
//! its messages, and the number parsers its command line uses (`int`, `float`, SGLang's
//! `human_readable_int`).

use serde_json::Value;

/// Python's `repr` of a parsed JSON value (dicts, lists, `None`, `True`, quoted strings).
pub(crate) fn py_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => py_float(f),
            _ => n.to_string(),
        },
        Value::String(s) => py_str(s),
        Value::Array(a) => format!("[{}]", a.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", py_str(k), py_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Python's `repr` of a str: single quotes unless the text has one and no double quote.
pub(crate) fn py_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr` of a float (`8.0`, `1e+16`, `1e-05`).
pub(crate) fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    // Rust's Debug is the shortest round-trip form, as Python's repr, and switches to an
    // exponent at the same magnitudes; only the exponent is written differently.
    let s = format!("{f:?}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// Digits with Python's optional single underscores between them (`1_000`), without them.
fn digits(s: &str) -> Option<String> {
    if s.is_empty() || s.starts_with('_') || s.ends_with('_') || s.contains("__") {
        return None;
    }
    let out: String = s.chars().filter(|c| *c != '_').collect();
    out.chars().all(|c| c.is_ascii_digit()).then_some(out)
}

/// Python's `int(text)` for base 10: surrounding whitespace, a sign, underscores between
/// digits. `None` where Python raises (or the value does not fit 64 bits).
pub(crate) fn py_int(text: &str) -> Option<i64> {
    let t = text.trim();
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let d = digits(body)?;
    let n: i128 = d.parse().ok()?;
    i64::try_from(if neg { -n } else { n }).ok()
}

/// Python's `float(text)` for finite numbers (underscores between digits allowed); `None`
/// where Python raises, and for `inf` and `nan`, which the simulator does not take.
pub(crate) fn py_float_parse(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() || t.contains("__") || t.starts_with('_') || t.ends_with('_') {
        return None;
    }
    // An underscore only between two digits.
    let b = t.as_bytes();
    for (i, c) in b.iter().enumerate() {
        if *c == b'_'
            && !(b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            return None;
        }
    }
    let plain: String = t.chars().filter(|c| *c != '_').collect();
    if !plain
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
    {
        return None;
    }
    plain.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// A value SGLang's `human_readable_int` refuses, in its words.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum HumanIntError {
    #[error(
        "Invalid integer value: '{0}'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). Suffixes are case-sensitive."
    )]
    Invalid(String),
    #[error(
        "Decimals are not allowed with IEC suffixes like '{suffix}'. Use an integer IEC value such as '{whole}{suffix}', or an SI value such as '{number}{}'.",
        &suffix[..1]
    )]
    IecDecimals {
        suffix: &'static str,
        whole: String,
        number: String,
    },
}

/// SGLang's `human_readable_int` (srt/utils/common.py), the type of `--context-length`,
/// `--max-total-tokens`, `--max-prefill-tokens` and `--cuda-graph-prefill-max-context`: a
/// plain integer (Python's `int`), or a number with an SI suffix (`k`, `M`, `G`, `T`; decimals
/// allowed, the product truncated: `25.6k` is 25600) or an IEC one (`Ki`, `Mi`, `Gi`, `Ti`;
/// whole numbers only). Suffixes are case-sensitive. The error is the function's own
/// message, which argparse prints after `argument --FLAG: `.
pub(crate) fn human_readable_int(value: &str) -> Result<i64, HumanIntError> {
    let value = value.trim();
    let invalid = || HumanIntError::Invalid(value.to_string());
    const SUFFIXES: &[(&str, i128, bool)] = &[
        ("Ki", 1 << 10, true),
        ("Mi", 1 << 20, true),
        ("Gi", 1 << 30, true),
        ("Ti", 1 << 40, true),
        ("k", 1_000, false),
        ("M", 1_000_000, false),
        ("G", 1_000_000_000, false),
        ("T", 1_000_000_000_000, false),
    ];
    for (suffix, mult, iec) in SUFFIXES {
        let Some(number) = value.strip_suffix(suffix) else {
            continue;
        };
        // `(\d+(?:\.\d+)?)` before the suffix.
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        let is_digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        if !is_digits(int) || (number.contains('.') && !is_digits(frac)) {
            break;
        }
        if *iec && number.contains('.') {
            let whole: String = int.trim_start_matches('0').to_string();
            let whole = if whole.is_empty() { "0".into() } else { whole };
            return Err(HumanIntError::IecDecimals {
                suffix,
                whole,
                number: number.to_string(),
            });
        }
        // int(Decimal(number) * mult), exactly: (int.frac * 10^len(frac)) * mult / 10^len(frac).
        let scale = 10i128.checked_pow(frac.len() as u32).ok_or_else(invalid)?;
        let mantissa: i128 = format!("{int}{frac}").parse().map_err(|_| invalid())?;
        let n = mantissa.checked_mul(*mult).ok_or_else(invalid)? / scale;
        return i64::try_from(n).map_err(|_| invalid());
    }
    py_int(value).ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_reprs() {
        assert_eq!(
            py_repr(&json!({"model": "tiny", "max_tokens": 4, "x": [true, null, 2.5]})),
            "{'model': 'tiny', 'max_tokens': 4, 'x': [True, None, 2.5]}"
        );
        assert_eq!(py_str("it's"), "\"it's\"");
        assert_eq!(py_str("a'\"b\n"), "'a\\'\"b\\n'");
        assert_eq!(py_float(8.0), "8.0");
        assert_eq!(py_float(1e16), "1e+16");
        assert_eq!(py_float(1.5e-5), "1.5e-05");
        assert_eq!(py_float(1e15), "1000000000000000.0");
    }

    #[test]
    fn numbers_as_python_reads_them() {
        assert_eq!(py_int(" 1_000 "), Some(1000));
        assert_eq!(py_int("+7"), Some(7));
        assert_eq!(py_int("-0012"), Some(-12));
        for bad in ["", "1__0", "_1", "1_", "1.0", "0x10", "lots"] {
            assert_eq!(py_int(bad), None, "{bad}");
        }
        assert_eq!(py_float_parse("0.5"), Some(0.5));
        assert_eq!(py_float_parse("1_0.2_5"), Some(10.25));
        assert_eq!(py_float_parse("1e3"), Some(1000.0));
        for bad in ["", "1__0", "x", "inf", "nan", "1_.0"] {
            assert_eq!(py_float_parse(bad), None, "{bad}");
        }
    }

    /// What sglang 0.5.23's parser made of these (`--max-total-tokens V`, checked by running
    /// it): accepted values and the refusals' words.
    #[test]
    fn human_readable_ints_as_sglang_0_5_23_reads_them() {
        assert_eq!(human_readable_int("64k"), Ok(64_000));
        assert_eq!(human_readable_int("25.6k"), Ok(25_600));
        assert_eq!(human_readable_int("1.0001k"), Ok(1_000));
        assert_eq!(human_readable_int("1Ki"), Ok(1024));
        assert_eq!(human_readable_int("2Mi"), Ok(2 << 20));
        assert_eq!(human_readable_int("1_000"), Ok(1000));
        assert_eq!(human_readable_int(" 4096 "), Ok(4096));
        assert_eq!(human_readable_int("-1"), Ok(-1));
        assert_eq!(
            human_readable_int("lots").unwrap_err().to_string(),
            "Invalid integer value: 'lots'. Use a plain integer, SI suffixes (1k, 1M), or IEC \
             suffixes (1Ki, 1Mi). Suffixes are case-sensitive."
        );
        assert_eq!(
            human_readable_int("1.5Ki").unwrap_err().to_string(),
            "Decimals are not allowed with IEC suffixes like 'Ki'. Use an integer IEC value \
             such as '1Ki', or an SI value such as '1.5K'."
        );
        for bad in ["64K", "1m", "-1k", "1.k", "k", "1e3"] {
            assert!(human_readable_int(bad).is_err(), "{bad}");
        }
    }
}
