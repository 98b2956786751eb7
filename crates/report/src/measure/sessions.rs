//! Agent sessions' roll-ups from their records: each session's duration (first send to last
//! end, however it ended) and its successful turns' tokens as the server counted them, filled
//! into the runner's view of the sessions, and how many the point's end cut short; with
//! `slo.agent`, each session judged against it (`super::agents`).

use std::collections::BTreeMap;

use servebench_model::results::jobs::{JOBS_KEPT, JobsView};
use servebench_model::results::records::RequestRecord;
use servebench_model::spec::agentx::is_context_overflow;
use servebench_model::spec::load_model::AgentSlo;

/// Per session (those kept one by one): first send and last end (Unix seconds), and the
/// successful turns' prompt, output and cached tokens.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionFold {
    sessions: BTreeMap<u32, Acc>,
    /// Over every session's turns: sent, succeeded, streamed (a first token) and refused for
    /// context.
    sent: usize,
    ok: usize,
    streamed: usize,
    overflows: usize,
    /// Successful turns that returned fewer output tokens (the server's count) than asked.
    short: usize,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Acc {
    first: Option<f64>,
    last: Option<f64>,
    prompt: u64,
    completion: u64,
    cached: u64,
    /// Its turns by the worker the router sent them to (those whose worker is known).
    workers: BTreeMap<String, u32>,
    /// What the per-agent SLO judges: each turn's latencies and generation time.
    pub(crate) turns: super::agents::AgentTurns,
}

impl SessionFold {
    /// Folds in a record (one without a session's turn gives nothing).
    pub(crate) fn add(&mut self, r: &RequestRecord) {
        let Some(j) = &r.job else { return };
        self.sent += 1;
        match &r.error {
            None => {
                self.ok += 1;
                self.streamed += usize::from(r.chunks.iter().any(|c| c.tokens > 0));
                self.short += usize::from(
                    r.completion_tokens
                        .is_some_and(|n| n < u64::from(r.max_tokens)),
                );
            }
            Some(e) => {
                let text = format!("{} {}", e.message, e.body_head.as_deref().unwrap_or(""));
                self.overflows += usize::from(is_context_overflow(&text));
            }
        }
        if j.session as usize >= JOBS_KEPT {
            return;
        }
        let a = self.sessions.entry(j.session).or_default();
        a.first = Some(a.first.map_or(r.sent_at, |f| f.min(r.sent_at)));
        let end = r.sent_at + r.end_s.unwrap_or(0.0);
        a.last = Some(a.last.map_or(end, |l| l.max(end)));
        if r.error.is_none() {
            a.prompt += r.prompt_tokens.unwrap_or(0);
            a.completion += r.completion_tokens.unwrap_or(0);
            a.cached += r.cached_tokens.unwrap_or(0);
        }
        if let Some(w) = &r.worker {
            *a.workers.entry(w.clone()).or_default() += 1;
        }
        a.turns.add(r);
    }

    /// Fills each kept session's duration and tokens, and the sessions cut short; with a
    /// per-agent SLO, each session's verdict and the count that met it.
    pub(crate) fn fill(&self, view: &mut JobsView, agent: Option<&AgentSlo>) {
        for s in &mut view.sessions {
            if let Some(a) = self.sessions.get(&s.session) {
                s.duration_s = a.first.zip(a.last).map(|(f, l)| l - f);
                s.prompt_tokens = a.prompt;
                s.completion_tokens = a.completion;
                s.cached_tokens = a.cached;
                s.workers = a.workers.clone();
                s.affinity = s.worker_share();
                s.slo = agent.and_then(|slo| a.turns.verdict(slo));
            }
        }
        view.truncated = view.sessions.iter().filter(|s| s.truncated()).count();
        (view.turns_sent, view.turns_ok) = (self.sent, self.ok);
        (view.turns_streamed, view.context_overflows) = (self.streamed, self.overflows);
        view.turns_short_output = self.short;
        view.agents_judged = view.sessions.iter().filter(|s| s.slo.is_some()).count();
        view.agents_met = view
            .sessions
            .iter()
            .filter(|s| s.slo.as_ref().is_some_and(|v| v.met))
            .count();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::jobs::{JobRecord, JobTurn};
    use servebench_model::results::records::{ErrorKind, RequestError};

    fn turn(session: u32, sent_at: f64, end_s: f64, ok: bool) -> RequestRecord {
        RequestRecord {
            sent_at,
            end_s: Some(end_s),
            prompt_tokens: Some(100),
            completion_tokens: Some(10),
            cached_tokens: Some(60),
            error: (!ok).then(|| RequestError {
                kind: ErrorKind::Http,
                message: "HTTP 500".into(),
                status: Some(500),
                body_head: None,
            }),
            job: Some(JobTurn {
                session,
                turn: 0,
                agent: None,
                context_tokens: 100,
                history_tokens: None,
                history_sent_tokens: None,
                due_at: None,
            }),
            ..RequestRecord::fixture()
        }
    }

    #[test]
    fn a_sessions_duration_and_tokens_come_from_its_records() {
        let mut f = SessionFold::default();
        // Session 0: three turns, one failed (its tokens not counted), the last ending last.
        f.add(&turn(0, 100.0, 2.0, true));
        f.add(&turn(0, 103.0, 1.5, false));
        f.add(&turn(0, 101.0, 9.0, true));
        // Session 1: one turn; a record of no session changes nothing.
        f.add(&turn(1, 200.0, 0.5, true));
        f.add(&RequestRecord::fixture());
        let job = |session, stopped: Option<&str>| JobRecord {
            session,
            stopped: stopped.map(str::to_string),
            ..JobRecord::default()
        };
        let mut view = JobsView {
            sessions: vec![
                job(0, Some("a turn failed: turn 1, HTTP 500")),
                job(
                    1,
                    Some("`stop.duration` ended the point: before its next turn"),
                ),
                job(2, Some("interrupted: the run was stopped")),
            ],
            ..JobsView::default()
        };
        f.fill(&mut view, None);
        let s = &view.sessions;
        assert_eq!(s[0].duration_s, Some(10.0));
        assert_eq!(
            (
                s[0].prompt_tokens,
                s[0].completion_tokens,
                s[0].cached_tokens
            ),
            (200, 20, 120)
        );
        assert_eq!(s[1].duration_s, Some(0.5));
        assert_eq!(s[1].completion_tokens, 10);
        // A session that sent nothing has no duration.
        assert_eq!((s[2].duration_s, s[2].prompt_tokens), (None, 0));
        // A failure is its own course; the point's end and an interrupt cut short.
        assert_eq!(view.truncated, 2);
    }

    #[test]
    fn a_sessions_worker_share_is_its_busiest_workers_turns_over_its_routed_turns() {
        let mut f = SessionFold::default();
        let on = |session, worker: Option<&str>| RequestRecord {
            worker: worker.map(str::to_string),
            ..turn(session, 100.0, 1.0, true)
        };
        // Session 0 kept on one worker; session 1 split 3:1 (a turn of unknown worker left
        // out); session 2 with no worker known.
        for w in ["worker1", "worker1", "worker1"] {
            f.add(&on(0, Some(w)));
        }
        for w in [
            Some("worker0"),
            Some("worker1"),
            Some("worker0"),
            Some("worker0"),
            None,
        ] {
            f.add(&on(1, w));
        }
        f.add(&on(2, None));
        let mut view = JobsView {
            sessions: (0..3)
                .map(|session| JobRecord {
                    session,
                    ..JobRecord::default()
                })
                .collect(),
            ..JobsView::default()
        };
        f.fill(&mut view, None);
        let s = &view.sessions;
        assert_eq!(s[0].affinity, Some(1.0));
        assert_eq!(s[1].affinity, Some(0.75));
        assert_eq!(s[1].workers.get("worker0"), Some(&3));
        assert_eq!((s[2].affinity, s[2].workers.len()), (None, 0));
    }
}
