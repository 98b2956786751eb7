//! A point's output validity (`validity:`): the requests that check what the server answers,
//! and the verdicts.
//!
//! Canaries and the consistency prompt alone run before the point's first round (before its
//! cache reset, so a cold round starts from an empty cache); the consistency prompt under
//! load runs beside the first round's measured requests. Every one of these requests is
//! greedy (temperature 0), starts with a nonce of its own (it shares no prefix with a
//! measured request, so cache verification never sees it) and is recorded in
//! `requests.jsonl` with role `canary` or `consistency`, which no statistic counts.

use tokio::sync::watch;

use crate::client::{GenerationRequest, Measured};
use crate::prompt::canary;
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, RequestRecord, RequestRole};
use servebench_model::results::validity::{
    CanaryResult, ConsistencyResult, EXCERPT_BYTES, ValidityView, Verdict,
};
use servebench_model::spec::validity::{CanarySpec, ConsistencySpec};

use super::WindowState;

/// Prompt tokens of the checks for a point whose prompts have no one length (a file, a
/// dataset, a mix).
pub(crate) const UNSIZED_PROMPT_TOKENS: u64 = 1024;

/// Most prompt tokens of the consistency prompt unless the spec says (sent three times and
/// more, alone and under load).
pub(crate) const CONSISTENCY_PROMPT_TOKENS: u64 = 4096;

/// A point's checks as they run: what the canaries found, the consistency prompt alone,
/// then its verdict under load.
pub(crate) struct Checks {
    asker: Asker,
    pub view: ValidityView,
    pub solo: Option<Solo>,
}

impl Checks {
    pub(crate) fn new(asker: Asker) -> Checks {
        Checks {
            asker,
            view: ValidityView::default(),
            solo: None,
        }
    }

    /// Consistency could not even start (`why`).
    pub(crate) fn unjudged_consistency(&mut self, why: String) {
        self.view.consistency = Some(ConsistencyResult {
            verdict: Verdict::Unjudged,
            prompt_tokens: None,
            under_load: 0,
            differed: 0,
            solo: String::new(),
            differing: None,
            note: why,
        });
    }

    /// Starts the consistency requests under load, when the answer alone is there to
    /// compare them with.
    pub(crate) fn start_under_load(
        &self,
        state: watch::Receiver<WindowState>,
    ) -> Option<tokio::task::JoinHandle<Vec<Loaded>>> {
        let solo = self.solo.as_ref().filter(|s| s.answer.is_ok())?;
        Some(under_load(self.asker.clone(), solo, state))
    }

    /// Judges the answers under load once the round has ended; each is counted among the
    /// round's unmeasured requests (the server's counters include it).
    pub(crate) async fn end_under_load(
        &mut self,
        task: tokio::task::JoinHandle<Vec<Loaded>>,
        unmeasured: &mut servebench_report::measure::server_view::Finished,
    ) {
        let loaded = task.await.unwrap_or_default();
        for l in &loaded {
            unmeasured.add(&l.record);
        }
        if let Some(solo) = &self.solo {
            self.view.consistency = Some(judge(solo, &loaded));
        }
    }

    /// What was found; a consistency prompt never sent under load is judged on nothing.
    pub(crate) fn finish(mut self) -> ValidityView {
        if self.view.consistency.is_none()
            && let Some(solo) = &self.solo
        {
            self.view.consistency = Some(judge(solo, &[]));
        }
        self.view
    }
}

/// What every check request of a point shares: where it goes and how it is recorded.
#[derive(Clone)]
pub(crate) struct Asker {
    /// The point's request, its prompt and output length replaced for each check.
    pub template: GenerationRequest,
    /// The checks' requests go out and are recorded on it (not folded: they are not the
    /// point's numbers).
    pub path: crate::run::request::RequestPath,
}

impl Asker {
    /// Sends `prompt` greedily for up to `max_tokens`, records it with `role`; None when an
    /// interrupt stopped it.
    async fn send(
        &self,
        prompt: String,
        max_tokens: u32,
        role: RequestRole,
        index: u32,
    ) -> Option<(Measured, RequestRecord)> {
        let mut req = self.template.clone();
        req.prompt = prompt;
        req.max_tokens = max_tokens;
        req.temperature = 0.0;
        req.ignore_eos = false;
        req.history.clear();
        let mut out = crate::run::request::Outgoing::new(req, index, role);
        out.keep_text = true;
        match self.path.send(out, None).await {
            crate::run::request::Sent::Answered(a) => {
                let crate::run::request::Answered {
                    record, measured, ..
                } = *a;
                Some((measured?, record))
            }
            // A record that cannot be written has stopped the run already (the sink says so):
            // the check goes on as it did, its answer judged.
            crate::run::request::Sent::NotWritten => None,
            crate::run::request::Sent::Interrupted => None,
        }
    }
}

/// The start of an answer, redacted and bounded, for the record.
pub(crate) fn excerpt(text: &str) -> String {
    let redacted = servebench_model::redact::text(text);
    servebench_model::text::truncate(&redacted, EXCERPT_BYTES)
}

/// Why the checks have no filler text: what calibrating it to the server's tokens met.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no filler text for the check: {0}")]
pub(crate) struct NoFiller(pub String);

/// Sends one canary per position of `spec`, each with the fact in `filler` (Err: the
/// filler could not be made), and judges each answer.
pub(crate) async fn canaries(
    asker: &Asker,
    spec: &CanarySpec,
    filler: Result<&str, &NoFiller>,
) -> Vec<CanaryResult> {
    let mut out = Vec::new();
    for (i, &position) in spec.positions.iter().enumerate() {
        let fact = canary::fact();
        let mut result = CanaryResult {
            position: position.to_string(),
            expected: fact.clone(),
            prompt_tokens: None,
            verdict: Verdict::Unjudged,
            answer: String::new(),
            note: None,
        };
        let filler = match filler {
            Ok(f) => f,
            Err(why) => {
                result.note = Some(why.to_string());
                out.push(result);
                continue;
            }
        };
        let prompt = canary::prompt(&crate::prompt::nonce(), filler, &fact, position);
        let sent = asker
            .send(prompt, spec.max_tokens, RequestRole::Canary, i as u32)
            .await;
        let Some((m, _)) = sent else {
            result.note = Some("interrupted".into());
            out.push(result);
            break;
        };
        result.prompt_tokens = m.prompt_tokens;
        result.answer = excerpt(&m.text);
        match &m.error {
            Some(e) => result.note = Some(format!("the request failed: {}", e.message)),
            None if canary::answers(&m.text, &fact) => result.verdict = Verdict::Passed,
            None => result.verdict = Verdict::Failed,
        }
        out.push(result);
    }
    out
}

/// The consistency prompt and its answers alone.
pub(crate) struct Solo {
    pub prompt: String,
    pub spec: ConsistencySpec,
    pub prompt_tokens: Option<u64>,
    /// The answer alone, when both solo runs agreed on it; else why it is not judged.
    pub answer: Result<String, NotJudged>,
}

/// Why consistency is not judged: the prompt alone gave no one answer to compare with.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum NotJudged {
    /// The request alone failed: the client's words.
    #[error("the prompt alone failed: {0}")]
    AloneFailed(String),
    /// The two answers alone differ (excerpts).
    #[error(
        "engine not deterministic enough: the same greedy prompt alone was answered \"{first}\" and then \"{second}\"; consistency not judged"
    )]
    NotDeterministic { first: String, second: String },
}

/// Sends the consistency prompt (made of `filler`) alone twice; an engine whose two greedy
/// answers differ is not deterministic enough to be judged under load.
pub(crate) async fn solo(asker: &Asker, spec: &ConsistencySpec, filler: &str) -> Option<Solo> {
    let prompt = canary::continuation(&crate::prompt::nonce(), filler);
    let mut answers = Vec::new();
    let mut prompt_tokens = None;
    for i in 0..2 {
        let (m, _) = asker
            .send(prompt.clone(), spec.max_tokens, RequestRole::Consistency, i)
            .await?;
        prompt_tokens = prompt_tokens.or(m.prompt_tokens);
        if let Some(e) = &m.error {
            return Some(Solo {
                prompt,
                spec: spec.clone(),
                prompt_tokens,
                answer: Err(NotJudged::AloneFailed(e.message.clone())),
            });
        }
        answers.push(m.text);
    }
    let answer = if answers[0] == answers[1] {
        Ok(answers.swap_remove(0))
    } else {
        Err(NotJudged::NotDeterministic {
            first: excerpt(&answers[0]),
            second: excerpt(&answers[1]),
        })
    };
    Some(Solo {
        prompt,
        spec: spec.clone(),
        prompt_tokens,
        answer,
    })
}

/// One answer under load, and whether the load still ran when it ended.
pub(crate) struct Loaded {
    pub measured: Measured,
    pub record: RequestRecord,
    pub under_load: bool,
}

/// Sends the consistency prompt `solo.spec.requests` times, all at once as soon as `state`
/// says the round's load runs; each answer notes whether the load still ran when it ended.
/// Nothing is sent when the load ends before it starts.
pub(crate) fn under_load(
    asker: Asker,
    solo: &Solo,
    mut state: watch::Receiver<WindowState>,
) -> tokio::task::JoinHandle<Vec<Loaded>> {
    let (prompt, spec) = (solo.prompt.clone(), solo.spec.clone());
    tokio::spawn(async move {
        if state
            .wait_for(|s| *s != WindowState::Pending)
            .await
            .map_or(true, |s| *s == WindowState::Closed)
        {
            return Vec::new();
        }
        let sends = (0..spec.requests).map(|i| {
            let (asker, prompt, state) = (asker.clone(), prompt.clone(), state.clone());
            async move {
                let (measured, record) = asker
                    .send(prompt, spec.max_tokens, RequestRole::Consistency, 2 + i)
                    .await?;
                let under_load = *state.borrow() == WindowState::Open;
                Some(Loaded {
                    measured,
                    record,
                    under_load,
                })
            }
        });
        futures_util::future::join_all(sends)
            .await
            .into_iter()
            .flatten()
            .collect()
    })
}

/// The consistency verdict from the answer alone and the answers under load.
pub(crate) fn judge(solo: &Solo, loaded: &[Loaded]) -> ConsistencyResult {
    let mut result = ConsistencyResult {
        verdict: Verdict::Unjudged,
        prompt_tokens: solo.prompt_tokens,
        under_load: 0,
        differed: 0,
        solo: String::new(),
        differing: None,
        note: String::new(),
    };
    let alone = match &solo.answer {
        Ok(a) => a,
        Err(why) => {
            result.note = why.to_string();
            return result;
        }
    };
    result.solo = excerpt(alone);
    let compared: Vec<&Loaded> = loaded
        .iter()
        .filter(|l| l.under_load && l.measured.error.is_none())
        .collect();
    result.under_load = compared.len() as u32;
    let differing: Vec<&&Loaded> = compared
        .iter()
        .filter(|l| &l.measured.text != alone)
        .collect();
    result.differed = differing.len() as u32;
    result.differing = differing.first().map(|l| excerpt(&l.measured.text));
    let asked = solo.spec.requests;
    (result.verdict, result.note) = if compared.is_empty() {
        (
            Verdict::Unjudged,
            format!(
                "none of the {asked} answers under load finished while the point's load ran \
                 (or each failed); consistency not judged"
            ),
        )
    } else if result.differed > 0 {
        (
            Verdict::Failed,
            format!(
                "{} of {} answers under load differed from the answer alone",
                result.differed, result.under_load
            ),
        )
    } else {
        (
            Verdict::Passed,
            format!(
                "{} under load {} the answer alone",
                servebench_model::text::count_s(result.under_load as usize, "answer"),
                if result.under_load == 1 {
                    "equals"
                } else {
                    "equal"
                }
            ),
        )
    };
    result
}

/// The point's flags from what was found: `invalid-output` for a wrong answer,
/// `validity-unjudged` for a check that could not be judged.
pub(crate) fn flags(view: &ValidityView) -> Vec<Flag> {
    let mut flags = Vec::new();
    let failed: Vec<&CanaryResult> = view.failed_canaries().collect();
    if !failed.is_empty() {
        let positions: Vec<&str> = failed.iter().map(|c| c.position.as_str()).collect();
        flags.push(Flag::new(
            FlagKind::InvalidOutput,
            format!(
                "canary at {} not answered: asked for the secret number {}, the server answered \"{}\"",
                positions.join(", "),
                failed[0].expected,
                failed[0].answer
            ),
        ));
    }
    let unjudged: Vec<String> = view
        .canaries
        .iter()
        .filter(|c| c.verdict == Verdict::Unjudged)
        .map(|c| {
            format!(
                "canary at {}: {}",
                c.position,
                c.note.as_deref().unwrap_or("not judged")
            )
        })
        .collect();
    if let Some(c) = &view.consistency {
        match c.verdict {
            Verdict::Failed => flags.push(Flag::new(
                FlagKind::InvalidOutput,
                format!(
                    "inconsistent under load: {}; alone \"{}\", under load \"{}\"",
                    c.note,
                    c.solo,
                    c.differing.as_deref().unwrap_or("")
                ),
            )),
            Verdict::Unjudged => flags.push(Flag::new(FlagKind::ValidityUnjudged, c.note.clone())),
            Verdict::Passed => {}
        }
    }
    if !unjudged.is_empty() {
        flags.push(Flag::new(FlagKind::ValidityUnjudged, unjudged.join("; ")));
    }
    flags
}

/// The validity probe: the consistency prompt sent again under the first round's measured
/// load, judged against its answer alone; the point's verdicts and flags in its record.
pub(crate) struct UnderLoad {
    checks: Checks,
    /// The consistency requests under the open round's load.
    running: Option<tokio::task::JoinHandle<Vec<Loaded>>>,
}

impl UnderLoad {
    /// Watches the rounds with `checks`, made before the first round (canaries, the answer
    /// alone).
    pub(crate) fn new(checks: Checks) -> UnderLoad {
        UnderLoad {
            checks,
            running: None,
        }
    }
}

impl super::Probe for UnderLoad {
    fn open<'a>(
        &'a mut self,
        round: super::RoundStart<'a>,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        // The first round only: its load is what the answers are compared under.
        if round.round == 0 {
            self.running = self.checks.start_under_load(round.window.watch());
        }
        Box::pin(async {})
    }

    fn close<'a>(
        &'a mut self,
        _completed: usize,
        unmeasured: &'a mut servebench_report::measure::server_view::Finished,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(task) = self.running.take() {
                self.checks.end_under_load(task, unmeasured).await;
            }
        })
    }

    fn fill(
        self: Box<Self>,
        _end: &super::PointEnd<'_>,
        record: &mut servebench_model::results::records::PointRecord,
    ) {
        let view = self.checks.finish();
        record.flags.extend(flags(&view));
        // Wrong answers: the numbers are no answer to what the deployment serves.
        if view.failed()
            && record.status == Some(servebench_model::results::records::PointStatus::Ok)
        {
            record.status = Some(servebench_model::results::records::PointStatus::Degraded);
        }
        record.validity = Some(view);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(text: &str) -> Measured {
        Measured {
            text: text.into(),
            ..Measured::nothing_yet()
        }
    }

    fn loaded(text: &str, under_load: bool) -> Loaded {
        Loaded {
            measured: measured(text),
            record: RequestRecord::fixture(),
            under_load,
        }
    }

    fn solo(answer: Result<&str, NotJudged>) -> Solo {
        Solo {
            prompt: "p".into(),
            spec: ConsistencySpec::default(),
            prompt_tokens: Some(100),
            answer: answer.map(str::to_string),
        }
    }

    #[test]
    fn answers_under_load_must_equal_the_answer_alone() {
        let s = solo(Ok(" the model"));
        let ok = judge(
            &s,
            &[loaded(" the model", true), loaded(" the model", true)],
        );
        assert_eq!(
            (ok.verdict, ok.under_load, ok.differed),
            (Verdict::Passed, 2, 0)
        );
        let bad = judge(&s, &[loaded(" the model", true), loaded("!!!!", true)]);
        assert_eq!(
            (bad.verdict, bad.under_load, bad.differed),
            (Verdict::Failed, 2, 1)
        );
        assert_eq!(bad.differing.as_deref(), Some("!!!!"));
        let flags = flags(&ValidityView {
            canaries: Vec::new(),
            consistency: Some(bad),
        });
        assert_eq!(flags.len(), 1);
        assert_eq!(flags[0].kind, FlagKind::InvalidOutput);
        assert!(flags[0].message.contains("1 of 2"), "{}", flags[0].message);
    }

    #[test]
    fn answers_after_the_load_or_a_nondeterministic_engine_are_not_judged() {
        let after = judge(&solo(Ok("a")), &[loaded("b", false)]);
        assert_eq!((after.verdict, after.under_load), (Verdict::Unjudged, 0));
        let shaky = judge(
            &solo(Err(NotJudged::NotDeterministic {
                first: "a".into(),
                second: "b".into(),
            })),
            &[loaded("b", true)],
        );
        assert_eq!(shaky.verdict, Verdict::Unjudged);
        assert!(shaky.note.starts_with("engine not deterministic enough"));
        let flags = flags(&ValidityView {
            canaries: Vec::new(),
            consistency: Some(shaky),
        });
        assert_eq!(flags[0].kind, FlagKind::ValidityUnjudged);
    }

    #[test]
    fn an_excerpt_is_bounded() {
        let long = "!".repeat(10_000);
        assert!(excerpt(&long).len() <= EXCERPT_BYTES + "…".len());
    }
}
