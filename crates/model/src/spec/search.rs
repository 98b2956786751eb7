//! The spec's `search:` block: a capacity search over one load dimension (the highest
//! `load.rate` or `concurrency` whose point meets the SLO targets). The search itself is
//! `plan::search`; each probe the runner makes is an ordinary point.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::validate::{Problem, Target};

/// `search: { over: load.rate, start: 1, max: 1024, resolution: 5% }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchSpec {
    /// The dimension searched: `load.rate` (requests/s of an open-loop `load: { kind: rate }`)
    /// or `concurrency` (requests in flight of the closed loop).
    pub over: SearchOver,
    /// The first value probed (> 0): requests/s, or requests in flight.
    #[schemars(range(min = 0.0001, max = 10000000.0))]
    pub start: f64,
    /// The highest value probed (at least `start`).
    #[schemars(range(min = 0.0001, max = 10000000.0))]
    pub max: f64,
    /// How narrow the final bracket [passing, failing] must be, relative to its lower end:
    /// `5%` (the default) or a fraction like `0.05`; between 0 and 1, both excluded.
    #[serde(default = "default_resolution")]
    pub resolution: Resolution,
}

/// The most clients a closed loop runs (`Experiment::concurrency`'s schema bound).
const MAX_CONCURRENCY: f64 = 4096.0;

/// The dimension a search moves.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::Display,
)]
pub enum SearchOver {
    /// Requests per second of `load: { kind: rate }`.
    #[serde(rename = "load.rate")]
    #[strum(serialize = "load.rate")]
    LoadRate,
    /// Requests in flight of the closed loop.
    #[serde(rename = "concurrency")]
    #[strum(serialize = "concurrency")]
    Concurrency,
    /// Agent sessions live at once of `load: { kind: agentic }`: how many concurrent agent
    /// sessions meet the SLO.
    #[serde(rename = "load.agentic.live")]
    #[strum(serialize = "load.agentic.live")]
    LiveSessions,
}

impl SearchOver {
    /// The unit of the searched value, for the report and the plan.
    pub fn unit(self) -> &'static str {
        match self {
            SearchOver::LoadRate => "req/s",
            SearchOver::Concurrency => "in flight",
            SearchOver::LiveSessions => "live sessions",
        }
    }
}

/// A relative resolution: `5%` or `0.05`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Resolution {
    /// A fraction, e.g. `0.05`.
    Fraction(f64),
    /// A percentage, e.g. `5%`.
    Percent(#[schemars(regex(pattern = r"^\s*[0-9.]+\s*%\s*$"))] String),
}

impl Resolution {
    /// The resolution as a fraction (0.05 for `5%`); NaN when it does not parse (validation
    /// reports it).
    pub fn fraction(&self) -> f64 {
        match self {
            Resolution::Fraction(f) => *f,
            Resolution::Percent(s) => super::load_model::parse_percent(s)
                .map(|p| p / 100.0)
                .unwrap_or(f64::NAN),
        }
    }
}

fn default_resolution() -> Resolution {
    Resolution::Percent("5%".into())
}

/// Checks the schema cannot express, on the whole spec: the searched dimension exists and is
/// not swept, the bounds are ordered, and there are SLO targets to judge probes by.
pub(crate) fn checks(raw: &Value) -> Vec<Problem> {
    let Some(search) = raw.get("search").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    let over = search.get("over").and_then(Value::as_str);
    dimension_checks(raw, over, &mut problems);
    bound_checks(search, over, &mut problems);
    let has_targets = raw
        .get("slo")
        .and_then(|s| s.get("targets"))
        .and_then(Value::as_object)
        .is_some_and(|t| !t.is_empty())
        || raw.get("slo").and_then(|s| s.get("agent")).is_some();
    if !has_targets {
        problems.push(problem(
            "/search",
            Target::Key,
            "a capacity search needs SLO targets to judge its probes by, and `slo.targets` has none"
                .into(),
            "add e.g. `slo: { targets: { ttft_p99: 500ms } }` (or, over agent sessions, `slo: { agent: { ttft: 2s, output_tok_s: 20 } }`)",
        ));
    }
    problems
}

/// One problem; an empty `hint` is none.
fn problem(pointer: &str, target: Target, message: String, hint: &str) -> Problem {
    Problem {
        pointer: pointer.into(),
        target,
        message,
        hint: (!hint.is_empty()).then(|| hint.to_string()),
    }
}

/// The searched dimension (`over`) is not swept, and the point has the load it moves.
fn dimension_checks(raw: &Value, over: Option<&str>, problems: &mut Vec<Problem>) {
    if let Some(over) = over
        && raw
            .get("sweep")
            .and_then(Value::as_object)
            .is_some_and(|s| s.contains_key(over))
    {
        problems.push(problem(
            &format!("/sweep/{}", over.replace('~', "~0").replace('/', "~1")),
            Target::Key,
            format!("`{over}` is searched (`search.over`), so it cannot also be swept"),
            "remove it from `sweep:` (the search picks its values), or drop `search:`",
        ));
    }
    if over == Some("load.rate") {
        let kind = raw
            .get("load")
            .and_then(|l| l.get("kind"))
            .and_then(Value::as_str);
        if kind != Some("rate") {
            problems.push(problem(
                "/search/over",
                Target::Value,
                "`search.over: load.rate` needs an open-loop `load: { kind: rate }` to set the rate of"
                    .into(),
                "add `load: { kind: rate, rate: 1 }` with a `stop:`, or search `over: concurrency`",
            ));
        }
    }
    if over == Some("load.agentic.live") {
        let kind = raw
            .get("load")
            .and_then(|l| l.get("kind"))
            .and_then(Value::as_str);
        if kind != Some("agentic") {
            problems.push(problem(
                "/search/over",
                Target::Value,
                "`search.over: load.agentic.live` needs `load: { kind: agentic }` to set the live sessions of"
                    .into(),
                "add `load: { kind: agentic, agentic: { file: sessions.jsonl, live: 1 } }`",
            ));
        }
    }
    if over == Some("concurrency")
        && raw
            .get("load")
            .and_then(|l| l.get("kind"))
            .is_some_and(|k| !k.is_null())
    {
        problems.push(problem(
            "/search/over",
            Target::Value,
            "`search.over: concurrency` moves the closed loop's concurrency, but `load:` replaces the closed loop"
                .into(),
            "search `over: load.rate` for an open loop, or remove `load:`",
        ));
    }
}

/// `start` above 0, `max` not below it (nor above the concurrency bound), and a resolution
/// strictly between 0 and 1.
fn bound_checks(
    search: &serde_json::Map<String, Value>,
    over: Option<&str>,
    problems: &mut Vec<Problem>,
) {
    let num = |k: &str| search.get(k).and_then(Value::as_f64);
    // Each probe becomes the point's `concurrency`: the field's own bound holds for it too.
    if over == Some("concurrency")
        && let Some(max) = num("max")
        && max > MAX_CONCURRENCY
    {
        problems.push(problem(
            "/search/max",
            Target::Value,
            format!("a concurrency search goes up to {MAX_CONCURRENCY} clients (`concurrency`'s own bound), found `max: {max}`"),
            "lower `max` to 4096 or less, or search `over: load.rate` for more load",
        ));
    }
    if let Some(start) = num("start")
        && start <= 0.0
    {
        problems.push(problem(
            "/search/start",
            Target::Value,
            format!("the search starts above 0, found {start}"),
            "e.g. `start: 1`",
        ));
    }
    if let (Some(start), Some(max)) = (num("start"), num("max"))
        && max < start
    {
        problems.push(problem(
            "/search/max",
            Target::Value,
            format!("`max` ({max}) is below `start` ({start})"),
            "raise `max`, or lower `start`",
        ));
    }
    if let Some(r) = search.get("resolution") {
        let fraction = match r {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => super::load_model::parse_percent(s).map(|p| p / 100.0),
            _ => None,
        };
        if !fraction.is_some_and(|f| f > 0.0 && f < 1.0) {
            problems.push(problem(
                "/search/resolution",
                Target::Value,
                format!("the resolution is a share between 0 and 1 (0% and 100%, both excluded), found {r}"),
                "e.g. `resolution: 5%`",
            ));
        }
    }
}
