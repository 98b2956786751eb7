//! One path for every request a round sends: each sender's, the warm prime's and the validity
//! checks'. A request is made by its sender; here it is marked in its block ledger, streamed,
//! stamped, decorated, attributed to the router's worker and written through the record
//! writer, which folds it into the round's tally in the same step (off the async workers), and
//! then judged for a lost server. Whether the round may send more (an interrupt, a lost
//! server) is asked here by every sender. A new per-request field is one edit: [`Outgoing`]
//! and [`RequestPath::send`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::header::{HeaderName, HeaderValue};

use crate::client::{Client, GenerationRequest, Measured};
use crate::prompt::blocks::LedgerEntry;
use servebench_model::catalog::FlagKind;
use servebench_model::results::jobs::JobTurn;
use servebench_model::results::records::{
    CacheShare, ErrorKind, Flag, Phase, RequestRecord, RequestRole,
};
use servebench_model::spec::load_model::SessionHeaders;
use servebench_model::spec::types::{Api, ErrorBudget, Experiment};

use crate::run::interrupt::Interrupt;
use crate::run::probe::Window;
use crate::run::progress::Progress;

mod tally;
mod writer;

pub(crate) use tally::RoundTally;
use writer::TallyCell;
pub(crate) use writer::{RecordSink, RecordWriter};

/// One request as its sender made it, with what its record carries beside the stream.
pub(crate) struct Outgoing {
    pub req: GenerationRequest,
    /// Its place in the round.
    pub index: u32,
    pub role: RequestRole,
    /// The prompt length asked for (None for given texts).
    pub requested: Option<u64>,
    pub share: Option<CacheShare>,
    pub mix: Option<String>,
    /// A prompt of a trace's blocks: the tokens its leading blocks already sent could find.
    pub theoretical: Option<u64>,
    /// A captured request replayed: what its capture recorded (`RequestRecord::captured`).
    pub captured: Option<servebench_model::results::records::Captured>,
    /// An open loop's: when it was due (Unix seconds) and its phase.
    pub scheduled_at: Option<f64>,
    pub phase: Option<Phase>,
    /// An agent session's turn.
    pub job: Option<JobTurn>,
    /// A session's request: the ids its session headers carry (its own, a subagent's
    /// parent's), set by [`Affinity::stamp`].
    pub session_id: Option<String>,
    pub parent_session_id: Option<String>,
    /// Keep the whole generated text on every API (the validity checks judge answers).
    pub keep_text: bool,
    /// The slot it holds of the round's in-flight limit: given back as its stream ends, or,
    /// when it could not connect, once the server is judged (so no request follows a lost
    /// server).
    pub slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Outgoing {
    pub(crate) fn new(req: GenerationRequest, index: u32, role: RequestRole) -> Outgoing {
        Outgoing {
            req,
            index,
            role,
            requested: None,
            share: None,
            mix: None,
            theoretical: None,
            captured: None,
            scheduled_at: None,
            phase: None,
            job: None,
            session_id: None,
            parent_session_id: None,
            keep_text: false,
            slot: None,
        }
    }
}

/// Session affinity (`load.session_headers`): the headers that name each request's session to
/// a router, so a router that hashes them (SMG's `consistent_hashing`, Dynamo's session
/// affinity) keeps a conversation on the worker that holds its cache. Ids are unique to the
/// round (a random stem), the same on every turn of a session.
#[derive(Clone, Default)]
pub(crate) struct Affinity {
    session: Vec<HeaderName>,
    parent: Vec<HeaderName>,
    stem: String,
}

impl Affinity {
    /// The spec's session headers for a round (none unless `load.session_headers` names
    /// some; names were checked when the spec was).
    pub(crate) fn of(exp: &Experiment) -> Affinity {
        match exp.load.as_ref().and_then(|l| l.session_headers()) {
            Some(headers) => Affinity::named(headers),
            None => Affinity::default(),
        }
    }

    fn named(headers: &SessionHeaders) -> Affinity {
        let (session, parent) = headers.names();
        let parse = |names: &[String]| -> Vec<HeaderName> {
            names
                .iter()
                .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
                .collect()
        };
        Affinity {
            session: parse(session),
            parent: parse(parent),
            stem: format!("sb-{:08x}", rand::random::<u32>()),
        }
    }

    /// The id of the round's session `n`.
    pub(crate) fn session_id(&self, n: u32) -> String {
        format!("{}-{n}", self.stem)
    }

    /// The id of `agent`, a subagent of the session `parent`: the trace's agent id, kept to
    /// what a header value holds.
    pub(crate) fn agent_id(parent: &str, agent: &str) -> String {
        let clean: String = agent
            .chars()
            .take(64)
            .map(|c| match c.is_ascii_alphanumeric() || "-_.".contains(c) {
                true => c,
                false => '_',
            })
            .collect();
        format!("{parent}.{clean}")
    }

    /// Marks `out` as a request of session `id` (a subagent's: `parent` is its parent's):
    /// its headers, and the ids its record keeps. Nothing when no headers are named.
    pub(crate) fn stamp(&self, out: &mut Outgoing, id: String, parent: Option<String>) {
        if self.session.is_empty() && self.parent.is_empty() {
            return;
        }
        let value = |v: &str| HeaderValue::from_str(v).ok();
        if let Some(v) = value(&id) {
            out.req
                .headers
                .extend(self.session.iter().map(|n| (n.clone(), v.clone())));
        }
        if let Some(v) = parent.as_deref().and_then(value) {
            out.req
                .headers
                .extend(self.parent.iter().map(|n| (n.clone(), v.clone())));
        }
        out.session_id = (!self.session.is_empty()).then_some(id);
        out.parent_session_id = parent.filter(|_| !self.parent.is_empty());
    }
}

/// A request's blocks in what its round (or session) has sent: marked as it goes out, asked
/// once it is answered what it could have found from prompts made after it.
pub(crate) trait BlockMarks: Send {
    fn mark_sent(&mut self);
    /// The most it could have found, its first token at `first_token_at` (Unix seconds).
    fn reachable(&self, first_token_at: f64) -> Option<u64>;
}

impl BlockMarks for LedgerEntry {
    fn mark_sent(&mut self) {
        LedgerEntry::mark_sent(self);
    }

    fn reachable(&self, first_token_at: f64) -> Option<u64> {
        LedgerEntry::reachable(self, first_token_at)
    }
}

/// A request that went out and was answered (or failed), and was written.
pub(crate) struct Answered {
    /// Its record as written, without the detail no aggregate reads.
    pub record: RequestRecord,
    /// The text it generated (on the native API only when `keep_text` asked).
    pub text: String,
    /// The whole measurement, when `keep_text` asked for it.
    pub measured: Option<Measured>,
}

/// How a request ended on the path.
pub(crate) enum Sent {
    Answered(Box<Answered>),
    /// Its record could not be written: the sink has stopped the run.
    NotWritten,
    /// An interrupt came while it was in flight: abandoned, never finished, not recorded.
    Interrupted,
}

/// The path of one round's requests (cheap to clone: every task of the round holds one).
#[derive(Clone)]
pub(crate) struct RequestPath {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    writer: Arc<RecordWriter>,
    progress: Progress,
    interrupt: Interrupt,
    point: String,
    round: u32,
    timeout: Duration,
    /// The server leaves a cached count of 0 out of its usage (see [`fill_omitted_cached`]).
    omitted_is_zero: bool,
    /// None: the path's records are not a round's (the validity checks').
    tally: Option<TallyCell>,
    /// A request could not connect and neither could a health check.
    gone: AtomicBool,
    /// Requests that went out (measured or not).
    sent: AtomicUsize,
    /// `stop.errors`: once more measured requests failed than it allows, the round sends no
    /// more (judged here, for every sender, as each measured record is written).
    errors: Option<ErrorBudget>,
    /// The measured requests the round plans (0: not said; a share then counts the finished).
    planned: AtomicUsize,
    /// Why the round stopped on its errors (set once).
    stopped: std::sync::OnceLock<Flag>,
    /// `stop.duration` where the path judges it (not an open loop's, whose schedule holds it).
    duration: Option<Duration>,
    /// When the round's duration ends: set when its measured window opens.
    deadline: std::sync::OnceLock<Instant>,
    /// The duration stopped something: a request not sent, or one due past it.
    reached: AtomicBool,
}

/// Why a round sends no more: judged on its path, the same for every sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Halt {
    /// The run was interrupted (Ctrl-C).
    Interrupted,
    /// A request could not connect, nor could a health check.
    ServerGone,
    /// Measured requests failed past `stop.errors`.
    Errors,
    /// `stop.duration` passed since the measured window opened.
    Duration,
}

impl Halt {
    /// What a request or turn that was not sent says of it.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Halt::Interrupted => "interrupted: the run was stopped",
            Halt::ServerGone => "the server was lost: no more turns were sent",
            Halt::Errors => "the point's turns failed past `stop.errors`: no more turns were sent",
            Halt::Duration => "`stop.duration` ended the point: before its next turn",
        }
    }
}

/// What a path is made of: the runner's parts that every request of a round uses.
pub(crate) struct PathParts {
    pub client: Client,
    pub writer: Arc<RecordWriter>,
    pub progress: Progress,
    pub interrupt: Interrupt,
    pub point: String,
    pub round: u32,
    pub timeout: Duration,
    pub omitted_is_zero: bool,
    /// The point's `stop.errors`.
    pub errors: Option<ErrorBudget>,
    /// The point's `stop.duration`, where the path judges it (None for an open loop: its
    /// schedule holds its arrivals within it).
    pub duration: Option<Duration>,
}

impl RequestPath {
    /// A round's path; its written records are folded into `tally` (None: not folded).
    pub(crate) fn new(parts: PathParts, tally: Option<RoundTally>) -> RequestPath {
        RequestPath {
            inner: Arc::new(Inner {
                client: parts.client,
                writer: parts.writer,
                progress: parts.progress,
                interrupt: parts.interrupt,
                point: parts.point,
                round: parts.round,
                timeout: parts.timeout,
                omitted_is_zero: parts.omitted_is_zero,
                tally: tally.map(|t| Arc::new(std::sync::Mutex::new(Some(t)))),
                gone: AtomicBool::new(false),
                sent: AtomicUsize::new(0),
                errors: parts.errors,
                planned: AtomicUsize::new(0),
                stopped: std::sync::OnceLock::new(),
                duration: parts.duration,
                deadline: std::sync::OnceLock::new(),
                reached: AtomicBool::new(false),
            }),
        }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn interrupt(&self) -> &Interrupt {
        &self.inner.interrupt
    }

    pub(crate) fn round(&self) -> u32 {
        self.inner.round
    }

    /// Opens the round's measured window (its first measured request is going out) and
    /// starts its `stop.duration`. A second call changes nothing.
    pub(crate) fn open(&self, window: &Window) {
        window.open();
        if let Some(d) = self.inner.duration {
            self.inner.deadline.get_or_init(|| Instant::now() + d);
        }
    }

    /// Why the round may send no more, if it may not: an interrupt came, the server was found
    /// gone, its measured requests failed past `stop.errors`, or `stop.duration` passed.
    pub(crate) fn halted(&self) -> Option<Halt> {
        if self.inner.interrupt.is_set() {
            Some(Halt::Interrupted)
        } else if self.is_gone() {
            Some(Halt::ServerGone)
        } else if self.stopped_on_errors() {
            Some(Halt::Errors)
        } else if self.deadline().is_some_and(|d| Instant::now() >= d) {
            self.inner.reached.store(true, Ordering::Relaxed);
            Some(Halt::Duration)
        } else {
            None
        }
    }

    /// Whether the round may send another request (see [`halted`](Self::halted)).
    pub(crate) fn may_send(&self) -> bool {
        self.halted().is_none()
    }

    /// Whether `stop.duration` ended the round: a request was held back by it, or one was due
    /// past it.
    pub(crate) fn reached_duration(&self) -> bool {
        self.inner.reached.load(Ordering::Relaxed)
    }

    /// When the round's `stop.duration` ends (None: none, or its window has not opened).
    fn deadline(&self) -> Option<Instant> {
        self.inner.deadline.get().copied()
    }

    /// Waits until `until` for a request due then: stops at once when the round's duration
    /// ends first (nothing is sent past it), or when an interrupt comes meanwhile.
    pub(crate) async fn wait_until(&self, until: Instant) -> Result<(), Halt> {
        if self.deadline().is_some_and(|end| until >= end) {
            self.inner.reached.store(true, Ordering::Relaxed);
            return Err(Halt::Duration);
        }
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => Ok(()),
            _ = self.inner.interrupt.wait() => Err(Halt::Interrupted),
        }
    }

    /// Whether the round's measured requests failed past `stop.errors`.
    pub(crate) fn stopped_on_errors(&self) -> bool {
        self.inner.stopped.get().is_some()
    }

    /// Says how many measured requests the round plans, so that a share in `stop.errors` is
    /// of them (without it, of those finished).
    pub(crate) fn plan_measured(&self, n: usize) {
        self.inner.planned.store(n, Ordering::Relaxed);
    }

    /// Whether the server was found gone (a request could not connect, nor a health check).
    pub(crate) fn is_gone(&self) -> bool {
        self.inner.gone.load(Ordering::Relaxed)
    }

    /// Requests that went out on this path so far.
    pub(crate) fn sent(&self) -> usize {
        self.inner.sent.load(Ordering::Relaxed)
    }

    /// Measured records written and folded so far, and of them the failed.
    pub(crate) fn measured(&self) -> (usize, usize) {
        match &self.inner.tally {
            Some(t) => t
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map_or((0, 0), |t| (t.measured, t.failed)),
            None => (0, 0),
        }
    }

    /// Sends `out` and records it: marks its blocks as it goes, streams it (abandoned when an
    /// interrupt comes), stamps and decorates its record, writes it (attributed to its worker
    /// and folded by the writer's thread), then judges a connect failure with a health check.
    pub(crate) async fn send(&self, out: Outgoing, mut marks: Option<&mut dyn BlockMarks>) -> Sent {
        let path = &*self.inner;
        path.progress.request_started();
        if let Some(m) = marks.as_deref_mut() {
            m.mark_sent();
        }
        path.sent.fetch_add(1, Ordering::Relaxed);
        let stream = async {
            let _held = match in_flight_fault() {
                Some(cap) => cap.acquire().await.ok(),
                None => None,
            };
            match out.keep_text {
                true => path.client.stream_text(&out.req, path.timeout).await,
                false => path.client.stream(&out.req, path.timeout).await,
            }
        };
        let m = tokio::select! {
            m = stream => m,
            _ = path.interrupt.wait() => {
                path.progress.request_finished();
                return Sent::Interrupted;
            }
        };
        let mut slot = out.slot;
        if m.error
            .as_ref()
            .is_none_or(|e| e.kind != ErrorKind::Connect)
        {
            slot = None;
        }
        let text = m.text.clone();
        let measured = out.keep_text.then(|| m.clone());
        let mut rec = m.into_record(
            &path.point,
            path.round,
            out.index,
            out.role,
            out.req.api,
            out.req.max_tokens,
            out.requested,
        );
        if let Some(at) = out.scheduled_at {
            rec.scheduled_at = Some(at);
            rec.lag_s = Some(rec.sent_at - at);
        }
        rec.phase = out.phase;
        rec.share = out.share;
        rec.mix = out.mix;
        rec.job = out.job;
        rec.session_id = out.session_id;
        rec.parent_session_id = out.parent_session_id;
        rec.theoretical_cached_tokens = out.theoretical;
        rec.captured = out.captured;
        rec.reachable_cached_tokens = match (marks.as_deref(), first_token_at(&rec)) {
            (Some(m), Some(at)) => m.reachable(at),
            _ => None,
        };
        fill_omitted_cached(&mut rec, path.omitted_is_zero);
        let written = path.writer.write(rec, path.tally.clone()).await;
        path.progress.request_finished();
        let Some(mut record) = written else {
            return Sent::NotWritten;
        };
        self.judge_gone(&record).await;
        self.judge_errors();
        drop(slot);
        record.drop_detail();
        Sent::Answered(Box::new(Answered {
            record,
            text,
            measured,
        }))
    }

    /// A connect failure is checked with a health request: when that cannot connect either,
    /// nothing listens at the address any more and the round sends no more.
    async fn judge_gone(&self, rec: &RequestRecord) {
        let refused = rec
            .error
            .as_ref()
            .is_some_and(|e| e.kind == ErrorKind::Connect);
        if refused && !self.is_gone() && self.inner.client.health().await.is_err() {
            self.inner.gone.store(true, Ordering::Relaxed);
        }
    }

    /// Once the measured requests written so far failed past `stop.errors`, the round stops
    /// (not when the server is gone: that is said as such).
    fn judge_errors(&self) {
        let Some(budget) = &self.inner.errors else {
            return;
        };
        if self.stopped_on_errors() || self.is_gone() {
            return;
        }
        let (finished, failed) = self.measured();
        let total = self.inner.planned.load(Ordering::Relaxed).max(finished);
        if !budget.allows(failed, total) {
            let _ = self.inner.stopped.set(Flag::new(
                FlagKind::StoppedOnErrors,
                format!(
                    "{failed} of {finished} measured requests failed, past `stop.errors`; no more requests were sent"
                ),
            ));
        }
    }

    /// Waits until every record sent on the path is written and folded, then gives the tally
    /// back (None when the path had none, or it was given back already), with the flags of why
    /// it stopped early: a lost server (`planned` requests were to go out), its errors.
    pub(crate) async fn finish(&self, planned: usize) -> (Option<RoundTally>, Vec<Flag>) {
        self.inner.writer.drain().await;
        let lost = self.is_gone().then(|| {
            Flag::new(
                FlagKind::ServerLost,
                format!(
                    "the server stopped answering (a request could not connect, nor could a health check): no more requests were sent ({} of {planned} sent)",
                    self.sent()
                ),
            )
        });
        let tally = self
            .inner
            .tally
            .as_ref()
            .and_then(|t| t.lock().unwrap_or_else(|p| p.into_inner()).take());
        let flags = lost.into_iter().chain(self.inner.stopped.get().cloned());
        (tally, flags.collect())
    }
}

/// When `rec` got its first token, in Unix seconds, as the client stamped it (None without
/// one): its send's own stamp, not the caller's, so a client short of CPU between the two
/// does not move it.
pub(crate) fn first_token_at(rec: &RequestRecord) -> Option<f64> {
    let first = rec.chunks.iter().find(|c| c.tokens > 0).map(|c| c.t_s)?;
    Some(rec.sent_at + first)
}

/// A completed OpenAI-API request whose usage arrived without a cached count, from a server
/// that leaves the count out when it is 0 (SGLang with `--enable-cache-report`), reported 0.
pub(crate) fn fill_omitted_cached(rec: &mut RequestRecord, omitted_is_zero: bool) {
    if omitted_is_zero
        && rec.api != Api::SglangGenerate
        && rec.error.is_none()
        && rec.prompt_tokens.is_some()
        && rec.cached_tokens.is_none()
    {
        rec.cached_tokens = Some(0);
    }
}

/// `SERVEBENCH_TEST_MAX_IN_FLIGHT=N`, a fault for tests only: a client that holds at most N
/// requests in flight whatever the point asks (inference-perf's worker pool held 41 to 50
/// whatever 40 to 192 sessions asked, kubernetes-sigs/inference-perf #648). A request waits
/// for room before its send is stamped, as a client short of workers does; the tests of
/// `client-limited` run it.
fn in_flight_fault() -> Option<&'static tokio::sync::Semaphore> {
    static CAP: std::sync::OnceLock<Option<tokio::sync::Semaphore>> = std::sync::OnceLock::new();
    CAP.get_or_init(|| {
        std::env::var("SERVEBENCH_TEST_MAX_IN_FLIGHT")
            .ok()?
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .map(tokio::sync::Semaphore::new)
    })
    .as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::spec::load_model::SessionHeaderNames;

    fn affinity(h: SessionHeaders) -> Affinity {
        Affinity::named(&h)
    }

    fn stamped(a: &Affinity, id: &str, parent: Option<&str>) -> Outgoing {
        let req = crate::client::GenerationRequest {
            api: Api::OpenaiChat,
            prompt: String::new(),
            max_tokens: 1,
            ignore_eos: false,
            temperature: 0.0,
            model: None,
            history: Vec::new(),
            prompt_role: "user",
            messages: None,
            spec_tokens_details: false,
            reasoning_markers: None,
            chat_template_kwargs: Default::default(),
            tools: None,
            tool_choice: None,
            headers: Vec::new(),
        };
        let mut out = Outgoing::new(req, 0, RequestRole::Measure);
        a.stamp(&mut out, id.into(), parent.map(str::to_string));
        out
    }

    fn wire(out: &Outgoing) -> Vec<(String, String)> {
        out.req
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
            .collect()
    }

    #[test]
    fn session_headers_carry_the_sessions_id_and_a_subagents_parent() {
        let a = affinity(SessionHeaders::default());
        let s0 = a.session_id(0);
        assert_ne!(s0, a.session_id(1));
        assert_ne!(
            s0,
            affinity(SessionHeaders::default()).session_id(0),
            "rounds apart"
        );
        let main = stamped(&a, &s0, None);
        assert_eq!(
            wire(&main),
            [
                ("x-correlation-id".into(), s0.clone()),
                ("x-smg-routing-key".into(), s0.clone()),
                ("x-dynamo-session-id".into(), s0.clone()),
            ]
        );
        assert_eq!(
            (
                main.session_id.as_deref(),
                main.parent_session_id.as_deref()
            ),
            (Some(&*s0), None)
        );
        let sub = Affinity::agent_id(&s0, "agent 7/é");
        assert_eq!(sub, format!("{s0}.agent_7__"));
        let out = stamped(&a, &sub, Some(&s0));
        assert_eq!(wire(&out)[2], ("x-dynamo-session-id".into(), sub.clone()));
        assert_eq!(
            wire(&out)[3],
            ("x-dynamo-parent-session-id".into(), s0.clone())
        );
        assert_eq!(out.parent_session_id.as_deref(), Some(&*s0));
        // `off`: nothing on the wire, nothing recorded.
        let off = stamped(&affinity(SessionHeaders::Off("off".into())), &s0, Some("p"));
        assert!(
            off.req.headers.is_empty()
                && off.session_id.is_none()
                && off.parent_session_id.is_none()
        );
        // A custom name only.
        let custom = SessionHeaders::Named(SessionHeaderNames {
            session: vec!["X-Conv".into()],
            parent: Vec::new(),
        });
        let out = stamped(&affinity(custom), &sub, Some(&s0));
        assert_eq!(wire(&out), [("x-conv".into(), sub.clone())]);
        assert!(out.parent_session_id.is_none());
    }
}
