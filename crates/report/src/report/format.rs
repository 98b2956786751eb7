//! Number formatting filters for report templates: the rules of [`servebench_model::text`], plus a
//! missing value (none, undefined, NaN, infinite) shown as `—`, so a report never shows `NaN`
//! or an empty cell; and [`value_text`], how a sweep or flag value is written wherever a report
//! or a comparison shows one.

use minijinja::{Environment, Value};

use servebench_model::catalog::Metric;
use servebench_model::text::{self, MISSING};

/// Registers the filters on a template environment.
pub(crate) fn register(env: &mut Environment<'_>) {
    env.add_filter("fmt_s", |v: Value| {
        num(&v).map(text::seconds).unwrap_or_else(missing)
    });
    env.add_filter("fmt_ms", |v: Value| {
        num(&v)
            .map(|s| text::sig3(s * 1000.0))
            .unwrap_or_else(missing)
    });
    env.add_filter("fmt_rate", |v: Value| {
        num(&v).map(text::rate).unwrap_or_else(missing)
    });
    // Ratios and tokens per step: two decimals (2.47, 0.93).
    env.add_filter("fmt_ratio", |v: Value| {
        num(&v).map_or_else(missing, |x| format!("{x:.2}"))
    });
    env.add_filter("fmt_int", |v: Value| {
        num(&v).map(|x| format!("{:.0}", x)).unwrap_or_else(missing)
    });
    env.add_filter("fmt_tok", |v: Value| {
        num(&v).map(text::tokens).unwrap_or_else(missing)
    });
    env.add_filter("fmt_duration", |v: Value| {
        num(&v).map(text::duration).unwrap_or_else(missing)
    });
    env.add_filter("fmt_metric", fmt_metric);
    // Three significant digits (bandwidths, TFLOP/s); bytes as GB; a fraction as a percentage.
    env.add_filter("fmt_sig", |v: Value| {
        num(&v).map(text::sig3).unwrap_or_else(missing)
    });
    env.add_filter("fmt_gb", |v: Value| {
        num(&v).map(|b| text::sig3(b / 1e9)).unwrap_or_else(missing)
    });
    env.add_filter("fmt_pct", |v: Value| {
        num(&v)
            .map(|f| format!("{}%", text::sig3(f * 100.0)))
            .unwrap_or_else(missing)
    });
    // A metric's label and shown unit by name, from the catalogue (any name: a load metric in
    // a point's details, or one this version does not know, shown as itself without a unit).
    env.add_filter("metric_label", |name: &str| {
        Metric::from_name(name).map_or_else(|| name.to_string(), |m| m.label().to_string())
    });
    env.add_filter("metric_unit", |name: &str| {
        Metric::from_name(name).map_or("", Metric::unit).to_string()
    });
    // `cell` keeps 160 characters; `cell(400)` as many as given.
    env.add_filter("cell", |v: Value, width: Option<usize>| {
        cell(&v, width.unwrap_or(160))
    });
    env.add_filter("count_s", |n: usize, word: &str| text::count_s(n, word));
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

/// Formats a statistic by its metric name in its shown unit: times in ms, rates, token counts.
fn fmt_metric(v: Value, metric: &str) -> String {
    let Some(x) = num(&v) else { return missing() };
    text::metric_value(Metric::from_name(metric), x)
}

/// Makes text safe inside a Markdown table cell: one line, `|` escaped, at most `width`
/// characters (cut at a word).
fn cell(v: &Value, width: usize) -> String {
    if v.is_undefined() || v.is_none() {
        return missing();
    }
    let text = match v.as_str() {
        Some(s) => s.to_string(),
        None => v.to_string(),
    };
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    text::cut_words(&one_line, width).replace('|', "\\|")
}

/// A point's sweep values for display: `ctx=1024, concurrency=4`.
pub(crate) fn values_text(values: &indexmap::IndexMap<String, serde_json::Value>) -> String {
    values
        .iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Formats a sweep or flag value for display: strings without quotes, numbers as written.
pub(crate) fn value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "—".to_string(),
        other => other.to_string(),
    }
}
