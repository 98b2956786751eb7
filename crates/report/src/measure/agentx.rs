//! A point judged against the `agentx` preset's rules (`servebench_model::spec::agentx`):
//! each rule AIPerf 0.13 locks for InferenceX's AgentX benchmark, with what the point did, from
//! its settings and its sessions' records. A rule servebench cannot judge (the corpus's
//! identity) is said, never counted as met.

use servebench_model::results::agentx::{AgentxRule, AgentxRuleKind as Kind, AgentxVerdict};
use servebench_model::results::jobs::JobsView;
use servebench_model::results::records::PointRecord;
use servebench_model::spec::agentx::{
    MIN_DURATION, OVERFLOW_RATE_LIMIT, SCENARIO, SOURCE, SYSTEM_IDLE_CAP_S, preset_of,
};
use servebench_model::spec::types::Experiment;
use servebench_model::text::count;

/// The point's verdict, None when its load applies no preset. `interrupted`: the run was
/// stopped during the point.
pub fn judge(exp: &Experiment, record: &PointRecord, interrupted: bool) -> Option<AgentxVerdict> {
    let spec = preset_of(exp)?;
    let empty = JobsView::default();
    let jobs = record.jobs.as_ref().unwrap_or(&empty);
    let duration = duration_rule(exp, jobs, interrupted);
    let streaming = rule(
        Kind::Streaming,
        "every turn streamed",
        format!(
            "{} of {} successful turns streamed their first token",
            jobs.turns_streamed, jobs.turns_ok
        ),
        Some(jobs.turns_streamed == jobs.turns_ok),
    );
    let eos = exp.workload.ignore_eos;
    let ignore_eos = rule(
        Kind::IgnoreEos,
        "ignore_eos: every turn asks for its whole recorded output",
        format!(
            "`ignore_eos: {eos}`; {} returned fewer output tokens than asked",
            count(
                jobs.turns_short_output,
                "successful turn",
                "successful turns"
            )
        ),
        Some(eos && jobs.turns_short_output == 0),
    );
    let delays = rule(
        Kind::TraceDelays,
        "the trace's think and tool time as recorded (no scale, no cap)",
        format!("`think_scale: {}`", spec.think_scale),
        Some(spec.think_scale == 1.0),
    );
    let idle = rule(
        Kind::SystemIdle,
        "no turn in flight for at most 10 s at a time (AIPerf shifts pending turns; servebench does not, and measures)",
        jobs.longest_idle_s.map_or_else(
            || "not measured".into(),
            |s| format!("longest with no turn in flight: {} s", round1(s)),
        ),
        jobs.longest_idle_s.map(|s| s <= SYSTEM_IDLE_CAP_S),
    );
    let above = record.trace_cache.as_ref().map_or(0, |t| t.above);
    let nonce = exp.cache.nonce;
    let bust = rule(
        Kind::CacheBust,
        "each play's prompts fresh: no play finds another's or another run's text",
        format!(
            "`cache.nonce: {nonce}` (each session replay salted apart); requests that found more than their blocks promised: {above}"
        ),
        Some(nonce && above == 0),
    );
    let (truncation, overflow) = client_rules(jobs);
    let cancelled = rule(
        Kind::NotCancelled,
        "the run not interrupted",
        if interrupted {
            "interrupted".into()
        } else {
            "ran to its end".into()
        },
        Some(!interrupted),
    );
    let corpus = rule(
        Kind::Corpus,
        "the pinned with-subagents corpus (semianalysisai/cc-traces-weka-062126)",
        format!(
            "`{}`, a local trace: its identity is not verified (AIPerf 0.13 refuses a local folder as unpinned too)",
            spec.file.display()
        ),
        None,
    );
    let rules = vec![
        duration, streaming, ignore_eos, delays, idle, bust, truncation, overflow, cancelled,
        corpus,
    ];
    let overridden = spec.preset_override;
    let conforms = !overridden && rules.iter().all(|r| r.met != Some(false));
    Some(AgentxVerdict {
        scenario: SCENARIO.into(),
        source: SOURCE.into(),
        conforms,
        overridden,
        rules,
    })
}

/// One rule: what AgentX requires, what the point did, and whether that met it (None: not
/// judged).
fn rule(rule: Kind, required: &str, measured: String, met: Option<bool>) -> AgentxRule {
    AgentxRule {
        rule,
        required: required.into(),
        measured,
        met,
    }
}

/// The duration: at least AgentX's floor, and the point ended by it (not by its sessions
/// running out, nor an interrupt).
fn duration_rule(exp: &Experiment, jobs: &JobsView, interrupted: bool) -> AgentxRule {
    let min_s = MIN_DURATION.as_secs_f64();
    let stop_s = exp
        .stop
        .as_ref()
        .and_then(|s| s.duration)
        .map(|d| d.as_secs_f64());
    // The window ends at the last turn's end, before the deadline when no turn was due
    // after it: the point lasted the duration when the deadline ended it.
    let ran_out = !jobs.reached_duration && !interrupted;
    let mut why = Vec::new();
    if let Some(s) = stop_s.filter(|&s| s < min_s) {
        why.push(format!("`stop.duration` {} s", round1(s)));
    }
    if ran_out {
        why.push(format!(
            "every session ended before the duration ({} started)",
            jobs.started
        ));
    }
    if jobs.reached_duration
        && let Some(s) = stop_s.filter(|&s| s >= min_s)
    {
        why.push(format!("until `stop.duration` ({} s) ended it", round1(s)));
    }
    rule(
        Kind::Duration,
        "sessions for at least 900 s (1800 s when unset), until the duration ends them",
        format!(
            "{} s from the first session's start to the last one's end{}",
            round1(jobs.window_s),
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({})", why.join("; "))
            }
        ),
        Some(stop_s.is_some_and(|s| s >= min_s) && jobs.reached_duration),
    )
}

/// No turn skipped by the client, and context refusals within AgentX's limit.
fn client_rules(jobs: &JobsView) -> (AgentxRule, AgentxRule) {
    let skipped = jobs
        .sessions
        .iter()
        .filter(|s| {
            s.stopped
                .as_deref()
                .is_some_and(|r| r.starts_with("past the server's context"))
        })
        .count();
    let truncation = rule(
        Kind::NoTruncation,
        "no turn cut or skipped by the client",
        if skipped == 0 {
            "every turn due was sent whole".into()
        } else {
            format!(
                "{} stopped at a turn past the server's context, not sent",
                count(skipped, "session", "sessions")
            )
        },
        Some(skipped == 0),
    );
    let rate = if jobs.turns_sent == 0 {
        0.0
    } else {
        jobs.context_overflows as f64 / jobs.turns_sent as f64
    };
    let overflow = rule(
        Kind::ContextOverflow,
        "at most 1% of responses refused for context",
        format!(
            "{} of {} ({:.2}%)",
            jobs.context_overflows,
            count(jobs.turns_sent, "turn", "turns"),
            rate * 100.0
        ),
        Some(rate <= OVERFLOW_RATE_LIMIT),
    );
    (truncation, overflow)
}

fn round1(s: f64) -> f64 {
    (s * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::jobs::{JobRecord, TraceCache};

    fn exp(agentic: &str) -> Experiment {
        let text = format!(
            "name: x\nserver: {{ engine: sim, model: m }}\nworkload: {{ prompt: {{ kind: random, tokens: 8 }}, output_tokens: 4 }}\nload: {{ kind: agentic, agentic: {agentic} }}\nstop: {{ duration: 900s }}\n"
        );
        servebench_model::spec::load_str("t.yaml", &text)
            .unwrap()
            .points[0]
            .experiment
            .clone()
    }

    fn conforming_jobs() -> JobsView {
        JobsView {
            started: 40,
            window_s: 899.5,
            reached_duration: true,
            turns_sent: 400,
            turns_ok: 400,
            turns_streamed: 400,
            longest_idle_s: Some(2.5),
            sessions: vec![JobRecord {
                stopped: Some("`stop.duration` ended the point: before its next turn".into()),
                ..JobRecord::default()
            }],
            truncated: 1,
            ..JobsView::default()
        }
    }

    fn record(jobs: JobsView) -> PointRecord {
        PointRecord {
            jobs: Some(jobs),
            trace_cache: Some(TraceCache::default()),
            ..PointRecord::default()
        }
    }

    fn broken(v: &AgentxVerdict) -> Vec<Kind> {
        v.rules
            .iter()
            .filter(|r| r.met == Some(false))
            .map(|r| r.rule)
            .collect()
    }

    #[test]
    fn a_point_within_every_rule_conforms_and_the_corpus_is_said_unverified() {
        let e = exp("{ file: s.jsonl, live: 4, preset: agentx }");
        let v = judge(&e, &record(conforming_jobs()), false).unwrap();
        assert!(v.conforms, "{v:?}");
        assert!(broken(&v).is_empty());
        let corpus = v.rules.iter().find(|r| r.rule == Kind::Corpus).unwrap();
        assert_eq!(corpus.met, None);
        // No preset, no verdict.
        assert!(
            judge(
                &exp("{ file: s.jsonl, live: 4 }"),
                &record(conforming_jobs()),
                false
            )
            .is_none()
        );
    }

    #[test]
    fn each_broken_rule_is_named_with_what_the_point_did() {
        let e = exp(
            "{ file: s.jsonl, live: 4, preset: agentx, preset_override: true, think_scale: 0.5 }",
        );
        let mut jobs = conforming_jobs();
        jobs.window_s = 412.0;
        jobs.reached_duration = false;
        jobs.truncated = 0;
        jobs.sessions = vec![JobRecord {
            stopped: Some("past the server's context: turn 7 needs 4314 prompt and 32 output tokens, the server holds 4090; not sent".into()),
            ..JobRecord::default()
        }];
        // 5 of 400 refused for context: 1.25%, over the 1% limit; 4 would be exactly 1%.
        jobs.context_overflows = 5;
        jobs.longest_idle_s = Some(12.0);
        jobs.turns_streamed = 399;
        let v = judge(&e, &record(jobs.clone()), true).unwrap();
        assert!(!v.conforms && v.overridden);
        assert_eq!(
            broken(&v),
            [
                Kind::Duration,
                Kind::Streaming,
                Kind::TraceDelays,
                Kind::SystemIdle,
                Kind::NoTruncation,
                Kind::ContextOverflow,
                Kind::NotCancelled
            ]
        );
        let said = |k| {
            v.rules
                .iter()
                .find(|r| r.rule == k)
                .unwrap()
                .measured
                .clone()
        };
        assert!(
            said(Kind::Duration).contains("412 s"),
            "{}",
            said(Kind::Duration)
        );
        assert!(said(Kind::ContextOverflow).contains("5 of 400 turns (1.25%)"));
        jobs.context_overflows = 4;
        let at_limit = judge(&e, &record(jobs), false).unwrap();
        assert!(!broken(&at_limit).contains(&Kind::ContextOverflow));
        assert_eq!(
            at_limit.rules[0].measured,
            "412 s from the first session's start to the last one's end (every session ended before the duration (40 started))"
        );
        // The override alone, every rule met, never conforms.
        let over = exp("{ file: s.jsonl, live: 4, preset: agentx, preset_override: true }");
        let v = judge(&over, &record(conforming_jobs()), false).unwrap();
        assert!(broken(&v).is_empty() && !v.conforms);
    }
}
