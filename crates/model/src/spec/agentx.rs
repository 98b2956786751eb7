//! The `agentx` preset of an agentic load (`load.agentic.preset: agentx`): the replay rules
//! AIPerf 0.13 locks for InferenceX's AgentX benchmark (its `inferencex-agentx-mvp`
//! scenario), so a servebench point can stand beside an InferenceX agentic point. Each value
//! below is read from AIPerf 0.13.0's sources, named where it is used; the guide's
//! "AgentX-comparable runs" lists them. The spec's contradictions are refused here
//! (`checks`), its unset values filled (`apply`); the report crate judges the point.

use std::time::Duration;

use serde_json::Value;

use super::load_model::{AgenticPreset, AgenticSpec, LoadSpec, StopSpec};
use super::types::Experiment;
use super::validate::{Problem, Target};

/// The scenario's name in AIPerf (`aiperf/common/scenario/inferencex_agentx_mvp.py`).
pub const SCENARIO: &str = "inferencex-agentx-mvp";

/// Where the rules are read from.
pub const SOURCE: &str = "AIPerf 0.13.0, aiperf/common/scenario/inferencex_agentx_mvp.py";

/// `min_benchmark_duration_seconds=900`: shorter runs are refused ("to reach steady state and
/// trigger KV offloading", `validator.py`).
pub const MIN_DURATION: Duration = Duration::from_secs(900);

/// `default_benchmark_duration_seconds=1800`: the duration when the spec sets none.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(1800);

/// `system_idle_gap_cap_seconds=10.0`: AIPerf shifts pending turns when no request has been
/// in flight for 10 s; servebench does not shift them, and judges the longest such gap.
pub const SYSTEM_IDLE_CAP_S: f64 = 10.0;

/// `Environment.AGENTX.CONTEXT_OVERFLOW_RATE_LIMIT = 0.01` (`aiperf/common/environment.py`):
/// a run whose context-overflow responses are more than this share of its responses is not
/// a valid submission (equal is accepted).
pub const OVERFLOW_RATE_LIMIT: f64 = 0.01;

/// `Environment.AGENTX.CONTEXT_OVERFLOW_SUBSTRINGS`: a failed response whose body holds one
/// of these (any case) is a context overflow.
pub const OVERFLOW_SUBSTRINGS: [&str; 4] = [
    "context length",
    "maximum context",
    "context_length_exceeded",
    "prompt is too long",
];

/// Sessions a preset point may start when `load.agentic.sessions` is unset: the trace
/// replayed again and again (each replay's text salted apart) until the duration ends it,
/// as AIPerf's lanes recycle their traces.
pub const REPLAYS: usize = 10_000_000;

/// The agentic load's spec when it applies the `agentx` preset.
pub fn preset_of(exp: &Experiment) -> Option<&AgenticSpec> {
    match &exp.load {
        Some(LoadSpec::Agentic { agentic, .. })
            if agentic.preset == Some(AgenticPreset::Agentx) =>
        {
            Some(agentic)
        }
        _ => None,
    }
}

/// Whether a failed response's text says the prompt was past the server's context, as
/// AIPerf 0.13 classifies it (`aiperf/common/scenario/context_overflow.py`).
pub fn is_context_overflow(text: &str) -> bool {
    let lower = text.to_lowercase();
    OVERFLOW_SUBSTRINGS.iter().any(|s| lower.contains(s))
}

/// Fills what the preset sets when the spec leaves it: the duration (1800 s).
pub(crate) fn apply(exp: &mut Experiment) {
    if preset_of(exp).is_none() {
        return;
    }
    let stop = exp.stop.get_or_insert_with(StopSpec::default);
    if stop.duration.is_none() {
        stop.duration = Some(DEFAULT_DURATION);
    }
}

/// Refuses, on one point's raw value, what contradicts the preset's rules (unless
/// `preset_override`).
pub(crate) fn checks(raw: &Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    let load = raw.get("load");
    let agentic = load.and_then(|l| l.get("agentic"));
    let field = |k: &str| agentic.and_then(|a| a.get(k)).filter(|v| !v.is_null());
    if field("preset_override") == Some(&Value::Bool(true)) && field("preset").is_none() {
        problems.push(problem(
            "/load/agentic/preset_override",
            Target::Key,
            "`preset_override` overrides a preset's rules, and this load names no `preset`".into(),
            "remove it, or add `preset: agentx`",
        ));
    }
    if load.and_then(|l| l.get("kind")).and_then(Value::as_str) != Some("agentic")
        || agentic
            .and_then(|a| a.get("preset"))
            .and_then(Value::as_str)
            != Some("agentx")
        || agentic
            .and_then(|a| a.get("preset_override"))
            .and_then(Value::as_bool)
            == Some(true)
    {
        return problems;
    }
    let hint = |fix: &str| {
        format!(
            "{fix}, or set `load.agentic.preset_override: true` for a run that is not AgentX-comparable (a smoke run)"
        )
    };
    let mut refuse = |pointer: &str, message: String, fix: &str| {
        problems.push(problem(pointer, Target::Value, message, &hint(fix)));
    };
    if let Some(scale) = agentic
        .and_then(|a| a.get("think_scale"))
        .and_then(Value::as_f64)
        .filter(|&s| s != 1.0)
    {
        refuse(
            "/load/agentic/think_scale",
            format!(
                "`think_scale: {scale}` breaks the `agentx` preset: AgentX replays the trace's think and tool time as recorded (AIPerf 0.13 refuses `--ignore-trace-delays` and any inter-turn delay cap)"
            ),
            "remove `think_scale` (1 under the preset)",
        );
    }
    if raw.pointer("/workload/ignore_eos") == Some(&Value::Bool(false)) {
        refuse(
            "/workload/ignore_eos",
            "`ignore_eos: false` breaks the `agentx` preset: AgentX asks every turn for its whole recorded output (AIPerf 0.13 injects `ignore_eos: true` and refuses false)".into(),
            "remove `ignore_eos` (true by default)",
        );
    }
    if raw.pointer("/cache/nonce") == Some(&Value::Bool(false)) {
        refuse(
            "/cache/nonce",
            "`cache.nonce: false` breaks the `agentx` preset: AgentX busts the cache at each play's first turn so no play finds another's text (AIPerf 0.13 locks `--cache-bust first_turn_prefix`), and without the nonce two runs send the same text".into(),
            "remove `nonce` (true by default)",
        );
    }
    if let Some(text) = raw.pointer("/stop/duration").and_then(Value::as_str)
        && !text.contains("{{")
        && let Ok(d) = humantime::parse_duration(text.trim())
        && d < MIN_DURATION
    {
        refuse(
            "/stop/duration",
            format!(
                "`stop.duration: {text}` breaks the `agentx` preset: AgentX runs at least 900 s (AIPerf 0.13's `min_benchmark_duration_seconds`; 1800 s when unset)"
            ),
            "set `duration: 900s` or more, or remove it (1800 s)",
        );
    }
    problems
}

fn problem(pointer: &str, target: Target, message: String, hint: &str) -> Problem {
    Problem {
        pointer: pointer.into(),
        target,
        message,
        hint: Some(hint.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(raw: Value) -> Vec<(String, String)> {
        checks(&raw)
            .into_iter()
            .map(|p| (p.pointer, p.message))
            .collect()
    }

    fn spec(agentic: Value, rest: Value) -> Value {
        let mut raw = json!({"load": {"kind": "agentic", "agentic": agentic}});
        for (k, v) in rest.as_object().unwrap() {
            raw[k] = v.clone();
        }
        raw
    }

    #[test]
    fn the_preset_refuses_each_contradiction_where_it_stands() {
        let bad = spec(
            json!({"file": "s.jsonl", "live": 2, "preset": "agentx", "think_scale": 0.25}),
            json!({"workload": {"ignore_eos": false}, "cache": {"nonce": false}, "stop": {"duration": "60s"}}),
        );
        let found = messages(bad.clone());
        let at: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            at,
            [
                "/load/agentic/think_scale",
                "/workload/ignore_eos",
                "/cache/nonce",
                "/stop/duration"
            ]
        );
        assert!(found[3].1.contains("at least 900 s"), "{}", found[3].1);
        // The same spec under the override, without the preset, or within the rules: nothing.
        let mut over = bad.clone();
        over["load"]["agentic"]["preset_override"] = json!(true);
        assert!(messages(over).is_empty());
        let mut plain = bad.clone();
        plain["load"]["agentic"]
            .as_object_mut()
            .unwrap()
            .remove("preset");
        assert!(messages(plain).is_empty());
        // An override of no preset says so.
        let mut nothing = bad;
        let a = nothing["load"]["agentic"].as_object_mut().unwrap();
        a.remove("preset");
        a.insert("preset_override".into(), json!(true));
        assert_eq!(
            messages(nothing),
            [(
                "/load/agentic/preset_override".to_string(),
                "`preset_override` overrides a preset's rules, and this load names no `preset`"
                    .to_string()
            )]
        );
        let good = spec(
            json!({"file": "s.jsonl", "live": 2, "preset": "agentx", "think_scale": 1}),
            json!({"workload": {"ignore_eos": true}, "stop": {"duration": "15m"}}),
        );
        assert!(messages(good).is_empty());
    }

    #[test]
    fn overflow_bodies_are_classified_as_aiperf_does() {
        assert!(is_context_overflow(
            r#"{"error": {"message": "This model's Maximum Context length is 4096 tokens"}}"#
        ));
        assert!(is_context_overflow("context_length_exceeded"));
        assert!(!is_context_overflow("HTTP 500: out of memory"));
    }
}
