//! Number formatting filters for report templates. Every filter maps a missing value (none,
//! undefined, NaN, infinite) to `—`, so a report never shows `NaN` or an empty cell.

use minijinja::{Environment, Value};

/// Shown for a value that was not measured.
pub const MISSING: &str = "—";

/// Registers the filters on a template environment.
pub fn register(env: &mut Environment<'_>) {
    env.add_filter("fmt_s", |v: Value| {
        num(&v).map(fmt_s).unwrap_or_else(missing)
    });
    env.add_filter("fmt_ms", |v: Value| {
        num(&v).map(|s| sig3(s * 1000.0)).unwrap_or_else(missing)
    });
    env.add_filter("fmt_rate", |v: Value| {
        num(&v).map(fmt_rate).unwrap_or_else(missing)
    });
    env.add_filter("fmt_int", |v: Value| {
        num(&v).map(|x| format!("{:.0}", x)).unwrap_or_else(missing)
    });
    env.add_filter("fmt_tok", |v: Value| {
        num(&v).map(fmt_tok).unwrap_or_else(missing)
    });
    env.add_filter("fmt_duration", |v: Value| {
        num(&v).map(fmt_duration).unwrap_or_else(missing)
    });
    env.add_filter("fmt_metric", fmt_metric);
    env.add_filter("cell", |v: Value| cell(&v));
    env.add_filter("stat", stat);
}

/// `stats.ttft_s|stat("mean")`: a field of a statistic that may be missing (none stays none).
fn stat(v: Value, field: &str) -> Value {
    if v.is_undefined() || v.is_none() {
        return Value::from(());
    }
    v.get_attr(field)
        .ok()
        .filter(|x| !x.is_undefined())
        .unwrap_or(Value::from(()))
}

fn missing() -> String {
    MISSING.to_string()
}

/// The value as a finite number, or None.
fn num(v: &Value) -> Option<f64> {
    if v.is_undefined() || v.is_none() {
        return None;
    }
    f64::try_from(v.clone()).ok().filter(|x| x.is_finite())
}

/// Seconds with three significant digits: `0.0123`, `0.512`, `12.3`, `1234`.
pub fn fmt_s(x: f64) -> String {
    sig3(x)
}

/// Three significant digits without exponent notation; values of 1000 and more as integers.
pub fn sig3(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 {
        return "0".to_string();
    }
    if a >= 100.0 {
        return format!("{:.0}", x);
    }
    // Round to three significant digits first, so a carry (0.09996 -> 0.1) picks the decimals.
    let scale = 10f64.powi(2 - a.log10().floor() as i32);
    let r = (x * scale).round() / scale;
    if r.abs() >= 100.0 {
        return format!("{:.0}", r);
    }
    let decimals = (2 - r.abs().log10().floor() as i32).max(0) as usize;
    format!("{:.*}", decimals, r)
}

/// Token rates: no decimals from 100 tok/s up, one below.
pub fn fmt_rate(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{:.0}", x)
    } else {
        format!("{:.1}", x)
    }
}

/// Token counts: integers as integers, means with one decimal (`1024`, `1023.5`).
pub fn fmt_tok(x: f64) -> String {
    if (x - x.round()).abs() < 0.05 {
        format!("{:.0}", x)
    } else {
        format!("{:.1}", x)
    }
}

/// A duration in seconds for people: `42.1 s`, `12m 05s`, `1h 02m 03s`.
pub fn fmt_duration(x: f64) -> String {
    if x < 60.0 {
        return format!("{} s", sig3(x));
    }
    let total = x.round() as u64;
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    if h > 0 {
        format!("{h}h {m:02}m {s:02}s")
    } else {
        format!("{m}m {s:02}s")
    }
}

/// Formats a statistic by its metric name: ITL and ICL in ms, rates, token counts, seconds.
fn fmt_metric(v: Value, metric: &str) -> String {
    let Some(x) = num(&v) else { return missing() };
    match metric {
        "itl_s" | "icl_s" => sig3(x * 1000.0),
        m if m.ends_with("_tok_s") => fmt_rate(x),
        m if m.ends_with("_tokens") => fmt_tok(x),
        m if m.ends_with("_s") => fmt_s(x),
        _ => sig3(x),
    }
}

/// Makes text safe inside a Markdown table cell: one line, `|` escaped, at most 160 characters.
fn cell(v: &Value) -> String {
    if v.is_undefined() || v.is_none() {
        return missing();
    }
    let text = match v.as_str() {
        Some(s) => s.to_string(),
        None => v.to_string(),
    };
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = one_line.chars().take(160).collect();
    if one_line.chars().count() > 160 {
        out.push('…');
    }
    out.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn significant_digits() {
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(0.5123), "0.512");
        assert_eq!(sig3(1.2345), "1.23");
        assert_eq!(sig3(12.345), "12.3");
        assert_eq!(sig3(123.45), "123");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(0.09996), "0.100");
    }

    #[test]
    fn rates_tokens_durations() {
        assert_eq!(fmt_rate(12345.6), "12346");
        assert_eq!(fmt_rate(98.76), "98.8");
        assert_eq!(fmt_tok(1024.0), "1024");
        assert_eq!(fmt_tok(1023.5), "1023.5");
        assert_eq!(fmt_duration(42.13), "42.1 s");
        assert_eq!(fmt_duration(725.0), "12m 05s");
        assert_eq!(fmt_duration(3723.0), "1h 02m 03s");
    }
}
