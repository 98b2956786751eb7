//! The `agentic` load model: agent sessions (jobs) replayed from a session trace
//! (`load::agentic`), `live` of them at once; when one ends the next starts. Each session sends
//! its turns in order, waiting the trace's think or tool time after each one ends, runs its
//! subagents side by side, and makes each turn's prompt of the trace's blocks
//! (`prompt::blocks`, salted per session: a trace's ids are local to its session), so the
//! history the trace records is what the server sees.
//!
//! A turn whose prompt and output would not fit the server's context is not sent: its
//! session stops there, with the reason in its record. Every stop (an interrupt, a lost
//! server, `stop.errors`, `stop.duration`) is judged on the round's request path: after it no
//! session starts, and the live ones stop at their next turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::task::JoinSet;

use crate::client::{Client, GenerationRequest};
use crate::load::agentic::{SessionCorpus, Step, TurnTrace};
use crate::prompt::blocks::{BlockLedger, BlockText, PromptBuilder, mix};
use crate::prompt::pieces::BlockStore;
use servebench_model::catalog::FlagKind;
use servebench_model::results::jobs::{ContextBand, JOBS_KEPT, JobRecord, JobTurn, JobsView};
use servebench_model::results::records::{Flag, RequestRecord, RequestRole};
use servebench_model::spec::Point;
use servebench_model::spec::load_model::AgenticSpec;

use super::history::History;
use super::planned::{generation_request, prepare, response_ended, task_died};
use super::prompts::Prompts;
use super::runner::PointRunner;
use super::sender::{SendEnd, Sender};
use crate::run::probe::Window;
use crate::run::request::{Affinity, BlockMarks, Halt, Outgoing, RequestPath, Sent};

/// Where the bands of turns' context (prompt tokens) start, for TTFT against context:
/// doubling from 1,024 to 256k.
const BANDS: [u64; 10] = [
    0, 1_024, 2_048, 4_096, 8_192, 16_384, 32_768, 65_536, 131_072, 262_144,
];

/// A round of agent sessions, ready: its trace read and its block text calibrated, both
/// before the measured window (neither the parse nor the calibration's requests are in it).
pub(super) struct Agentic<'p> {
    spec: &'p AgenticSpec,
    corpus: Arc<SessionCorpus>,
    texts: HashMap<u32, BlockText>,
    template: GenerationRequest,
    /// The server's context length, where it says: a turn past it is not sent.
    context_limit: Option<u64>,
    affinity: Affinity,
}

impl PointRunner {
    /// Reads the point's session trace and calibrates the block text of each block size it
    /// uses. Err: whether an interrupt stopped it (a failure is flagged).
    pub(super) async fn prepare_agentic<'p>(
        &mut self,
        client: &Client,
        point: &'p Point,
        round: u32,
        prompts: &Prompts,
        spec: &'p AgenticSpec,
        flags: &mut Vec<Flag>,
    ) -> Result<Agentic<'p>, bool> {
        let exp = &point.experiment;
        let corpus = match crate::load::agentic::read(&self.spec_dir.join(&spec.file), spec) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                flags.push(Flag::new(
                    FlagKind::ScheduleFailed,
                    format!("could not read the session trace: {e}"),
                ));
                return Err(false);
            }
        };
        let texts = self
            .block_texts(client, point, round, prompts, (spec, &corpus), flags)
            .await?;
        Ok(Agentic {
            spec,
            corpus,
            texts,
            template: generation_request(exp, String::new(), &prompts.target),
            context_limit: self.surface.as_ref().and_then(|s| s.context_length),
            affinity: Affinity::of(exp),
        })
    }

    /// The block text of each block size the trace's sessions use, each calibrated once (a
    /// trace has one size, as a rule). Err: whether an interrupt stopped it (a failure is
    /// flagged).
    async fn block_texts(
        &mut self,
        client: &Client,
        point: &Point,
        round: u32,
        prompts: &Prompts,
        (spec, corpus): (&AgenticSpec, &crate::load::agentic::SessionCorpus),
        flags: &mut Vec<Flag>,
    ) -> Result<HashMap<u32, BlockText>, bool> {
        let exp = &point.experiment;
        let mut texts: HashMap<u32, BlockText> = HashMap::new();
        for s in &corpus.sessions {
            let bs = spec.block_size.or(s.block_size).unwrap_or(512);
            if texts.contains_key(&bs) {
                continue;
            }
            match self
                .block_text(client, exp, prompts, bs, round, flags)
                .await
            {
                Ok(t) => {
                    texts.insert(bs, t);
                }
                Err((kind, message)) => {
                    let stopped = self.interrupt.is_set();
                    if !stopped {
                        flags.push(Flag::new(kind, message));
                    }
                    return Err(stopped);
                }
            }
        }
        Ok(texts)
    }
}

impl<'p> Sender<'p> for Agentic<'p> {
    /// Hits are judged within a block of the trace's (its largest, where sessions differ).
    fn block_tokens(&self) -> Option<u32> {
        self.corpus
            .sessions
            .iter()
            .map(|s| self.spec.block_size.or(s.block_size).unwrap_or(512))
            .max()
    }

    /// `spec.live` sessions at a time until the trace's sessions (or `spec.sessions`) are
    /// done, `stop.duration` passes or an interrupt comes (every live session then ends at
    /// its next step, and says why). Each turn is folded as it is written; the sessions'
    /// view is the point's.
    fn send<'s>(
        self: Box<Self>,
        path: &'s RequestPath,
        window: &'s Window,
    ) -> BoxFuture<'s, SendEnd>
    where
        'p: 's,
    {
        Box::pin(async move {
            let Agentic {
                spec,
                corpus,
                texts,
                template,
                context_limit,
                affinity,
            } = *self;
            let mut end = SendEnd::default();
            let live = spec.live.max(1) as usize;
            // Under a preset the trace is replayed until the duration ends the point.
            let (total, recycled) = match (spec.sessions, spec.preset) {
                (Some(n), _) => (n as usize, false),
                (None, Some(_)) => (servebench_model::spec::agentx::REPLAYS, true),
                (None, None) => (corpus.sessions.len(), false),
            };
            // Replayed until the duration, the point plans one pass of the trace (a share
            // in `stop.errors` is then of the turns finished, past the first pass), and says
            // at its end the turns of the sessions it started.
            let pass = corpus.sessions.len();
            end.planned = planned_turns(&corpus, if recycled { pass } else { total });
            path.plan_measured(end.planned);
            // A connection ready for each session's main agent and its widest group of
            // subagents, so that no turn pays a handshake when due.
            prepare(path.client(), live.min(total) * (1 + widest(&corpus))).await;
            path.open(window);
            let started = Instant::now();
            let shared = Arc::new(Shared {
                path: path.clone(),
                corpus: corpus.clone(),
                template,
                think_scale: spec.think_scale.max(0.0),
                context_limit,
                index: AtomicU32::new(0),
                ttft: Mutex::new(vec![Vec::new(); BANDS.len()]),
                affinity,
                idle: Mutex::default(),
            });
            let mut tasks: JoinSet<JobRecord> = JoinSet::new();
            let mut view = JobsView {
                live: spec.live,
                ..JobsView::default()
            };
            let (mut area, mut last, mut first_start, mut last_end) = (0.0, started, None, started);
            let mut next = 0usize;
            loop {
                while tasks.len() < live && next < total && path.may_send() {
                    let now = Instant::now();
                    area += tasks.len() as f64 * (now - last).as_secs_f64();
                    last = now;
                    first_start.get_or_insert(now);
                    tasks.spawn(SessionRun::new(&shared, spec, &texts, next).run());
                    view.started += 1;
                    next += 1;
                }
                // Sessions are never aborted: each one ends at its next step after an
                // interrupt and says so, its turns already folded.
                let Some(done) = tasks.join_next().await else {
                    break;
                };
                let now = Instant::now();
                area += tasks.len().saturating_add(1) as f64 * (now - last).as_secs_f64();
                last = now;
                last_end = now;
                match done {
                    Ok(job) => session_done(job, &mut view),
                    Err(e) => end.flags.extend(task_died(e)),
                }
            }
            let window_s = first_start.map_or(0.0, |f| (last_end - f).as_secs_f64());
            let ttft = std::mem::take(&mut *shared.ttft.lock().unwrap_or_else(|p| p.into_inner()));
            close_view(&mut view, ttft, window_s, area);
            // A session had a turn due past `stop.duration`, or sessions were left to start
            // when it passed: it ended the point.
            view.reached_duration = path.reached_duration();
            view.longest_idle_s = shared
                .idle
                .lock()
                .ok()
                .and_then(|c| c.longest)
                .map(|d| d.as_secs_f64());
            if recycled {
                end.planned = planned_turns(&corpus, view.started);
            }
            end.expect = Some(path.sent());
            end.jobs = Some(view);
            end
        })
    }
}

/// Turns of `total` sessions, the trace taken round: whole passes counted once.
fn planned_turns(corpus: &SessionCorpus, total: usize) -> usize {
    let n = corpus.sessions.len().max(1);
    let pass: Vec<usize> = corpus.sessions.iter().map(|s| s.turns()).collect();
    let whole: usize = pass.iter().sum();
    (total / n).saturating_mul(whole) + pass.iter().take(total % n).sum::<usize>()
}

/// The most subagents any step of the trace runs side by side.
fn widest(corpus: &SessionCorpus) -> usize {
    corpus
        .sessions
        .iter()
        .flat_map(|s| &s.steps)
        .map(|s| match s {
            Step::Subagents(a) => a.len(),
            Step::Turn(_) => 0,
        })
        .max()
        .unwrap_or(0)
}

/// A session ended: counted as completed or stopped (and kept, up to [`JOBS_KEPT`]).
fn session_done(job: JobRecord, view: &mut JobsView) {
    if job.stopped.is_some() {
        view.stopped += 1;
    } else {
        view.completed += 1;
    }
    if view.sessions.len() < JOBS_KEPT {
        view.sessions.push(job);
    }
}

/// The point's view of its sessions once they ended: the window (first start to last end,
/// seconds), live sessions time-weighted over it (`area`: live sessions x seconds), jobs per
/// hour, sessions in order, TTFT by context band.
fn close_view(view: &mut JobsView, ttft: Vec<Vec<f64>>, window: f64, area: f64) {
    view.window_s = window;
    if window > 0.0 {
        view.live_mean = area / window;
        view.jobs_per_hour = view.completed as f64 * 3600.0 / window;
    }
    view.sessions.sort_by_key(|j| j.session);
    view.ttft_by_context = bands(ttft);
}

/// Seconds from a record's send to its first token.
fn first_token_s(r: &RequestRecord) -> Option<f64> {
    r.chunks.iter().find(|c| c.tokens > 0).map(|c| c.t_s)
}

/// The bands that hold turns, each with its TTFT's median, 90th percentile and largest.
fn bands(ttft: Vec<Vec<f64>>) -> Vec<ContextBand> {
    ttft.into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, mut v)| {
            v.sort_by(f64::total_cmp);
            let at = |q: f64| servebench_report::measure::percentile_sorted(&v, q * 100.0);
            ContextBand {
                from_tokens: BANDS[k],
                to_tokens: BANDS.get(k + 1).copied(),
                turns: v.len(),
                ttft_p50_s: at(0.5),
                ttft_p90_s: at(0.9),
                ttft_max_s: v[v.len() - 1],
            }
        })
        .collect()
}

/// What every session of a round shares.
struct Shared {
    path: RequestPath,
    corpus: Arc<SessionCorpus>,
    /// Every turn's request but its prompt and output length.
    template: GenerationRequest,
    think_scale: f64,
    /// The server's context length, where it says: a turn past it is not sent.
    context_limit: Option<u64>,
    /// The next record's index in the round.
    index: AtomicU32,
    /// Successful turns' TTFT by context band.
    ttft: Mutex<Vec<Vec<f64>>>,
    /// The session headers each turn carries.
    affinity: Affinity,
    /// Turns in flight and the longest time none was.
    idle: Mutex<IdleClock>,
}

/// The longest stretch with no turn in flight, between the first send and the last end (the
/// `agentx` preset judges it against AgentX's 10 s cap on a system's idle time).
#[derive(Debug, Default)]
struct IdleClock {
    in_flight: usize,
    idle_since: Option<Instant>,
    longest: Option<Duration>,
}

impl IdleClock {
    fn sending(&mut self, now: Instant) {
        if self.in_flight == 0
            && let Some(since) = self.idle_since
        {
            let gap = now.saturating_duration_since(since);
            self.longest = Some(self.longest.map_or(gap, |l| l.max(gap)));
        }
        self.longest.get_or_insert(Duration::ZERO);
        self.in_flight += 1;
    }

    fn ended(&mut self, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.in_flight == 0 {
            self.idle_since = Some(now);
        }
    }
}

/// One session.
#[derive(Clone)]
struct SessionRun {
    shared: Arc<Shared>,
    session: u32,
    /// Its place in the trace.
    trace: usize,
    text: BlockText,
    /// What the session's turns have sent so far (its subagents' too).
    ledger: Arc<Mutex<BlockLedger>>,
    /// Its blocks' texts, made once for its agents (its salt is its own: sessions share none).
    store: Arc<Mutex<BlockStore>>,
    /// The session's next turn number.
    turn: Arc<AtomicU32>,
}

/// How a chain of turns ended early.
enum Stop {
    Reason(String),
    /// The round's path sends no more (an interrupt, a lost server, `stop.errors`,
    /// `stop.duration`).
    Halted(Halt),
}

/// What a chain of turns sent: how many, how many failed, the first send and the last end
/// (Unix seconds). Kept instead of the records, which are written and folded as they end.
#[derive(Default, Clone, Copy)]
struct Turns {
    sent: u32,
    failed: u32,
    first_sent: Option<f64>,
    last_end: Option<f64>,
}

impl Turns {
    fn add(&mut self, r: &RequestRecord) {
        self.sent += 1;
        self.failed += u32::from(r.error.is_some());
        self.first_sent = Some(self.first_sent.map_or(r.sent_at, |f| f.min(r.sent_at)));
        let end = end_at(r);
        self.last_end = Some(self.last_end.map_or(end, |l| l.max(end)));
    }

    fn merge(&mut self, o: Turns) {
        self.sent += o.sent;
        self.failed += o.failed;
        self.first_sent = match (self.first_sent, o.first_sent) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_end = match (self.last_end, o.last_end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

/// A session turn's blocks in its session's ledger: marked as it goes out, asked what it
/// could have found once answered (a subagent made after it may have reached the server
/// first if it was sent before this turn's first token).
struct SessionMarks<'a> {
    prompt: &'a mut PromptBuilder,
    ledger: &'a Mutex<BlockLedger>,
    theoretical: u64,
}

impl BlockMarks for SessionMarks<'_> {
    fn mark_sent(&mut self) {
        if let Ok(mut ledger) = self.ledger.lock() {
            self.prompt.mark_sent(&mut ledger, self.theoretical);
        }
    }

    fn reachable(&self, first_token_at: f64) -> Option<u64> {
        let ledger = self.ledger.lock().ok()?;
        Some(
            self.prompt
                .reachable(&ledger, self.theoretical, first_token_at),
        )
    }
}

impl SessionRun {
    /// Runs the session's steps in order; its record says how far it got and why it stopped.
    /// Each main-agent turn goes its gap after the previous main turn's end, and not before
    /// the subagents the trace shows it waited for have ended (each's recorded gap after
    /// it); subagents start their gap after the main turn before them and run beside the
    /// main agent. The session ends when its main agent and every subagent have.
    async fn run(self) -> JobRecord {
        let trace = &self.shared.corpus.sessions[self.trace];
        let mut turns = Turns::default();
        let mut stop = None;
        let mut prompt = (PromptBuilder::sharing(self.store.clone()), History::new());
        // Which subagents each main turn waits for: (step, subagent, seconds after its end).
        let mut joins: HashMap<usize, Vec<(usize, usize, f64)>> = HashMap::new();
        for (i, step) in trace.steps.iter().enumerate() {
            if let Step::Subagents(agents) = step {
                for (k, a) in agents.iter().enumerate() {
                    if let Some((at, after)) = a.join {
                        joins.entry(at).or_default().push((i, k, after));
                    }
                }
            }
        }
        let mut agents: JoinSet<AgentDone> = JoinSet::new();
        // When each subagent that ended did.
        let mut ended: HashMap<(usize, usize), Instant> = HashMap::new();
        let mut main_end = Instant::now();
        for (i, step) in trace.steps.iter().enumerate() {
            match step {
                Step::Turn(t) => {
                    let mut until = main_end + self.scaled(t.gap_s);
                    for &(step, k, after) in joins.get(&i).into_iter().flatten() {
                        while !ended.contains_key(&(step, k)) {
                            let Some(done) = agents.join_next().await else {
                                break;
                            };
                            collect(done, &mut turns, &mut ended, &mut stop);
                        }
                        if let Some(end) = ended.get(&(step, k)) {
                            until = until.max(*end + self.scaled(after));
                        }
                    }
                    if stop.is_some() {
                        break;
                    }
                    match self.turn(t, None, until, &mut prompt, &mut turns).await {
                        Ok(end) => main_end = end,
                        Err(s) => {
                            stop = Some(s);
                            break;
                        }
                    }
                }
                Step::Subagents(list) => {
                    for k in 0..list.len() {
                        agents.spawn(self.clone().agent(i, k, main_end));
                    }
                }
            }
        }
        while let Some(done) = agents.join_next().await {
            collect(done, &mut turns, &mut ended, &mut stop);
        }
        let completion_s = match (&stop, turns.first_sent, turns.last_end) {
            (None, Some(first), Some(end)) => Some(end - first),
            _ => None,
        };
        JobRecord {
            session: self.session,
            trace_id: trace.id.clone(),
            turns: trace.turns() as u32,
            sent: turns.sent,
            failed: turns.failed,
            completion_s,
            stopped: stop.map(|s| match s {
                Stop::Reason(r) => r,
                Stop::Halted(h) => h.reason().into(),
            }),
            // Duration and tokens are the records' (the point's fold fills them).
            ..JobRecord::default()
        }
    }

    /// Subagent `k` of the subagents at `step`, started its gap after `from` (the end of the
    /// main agent's turn before it): its turns in order, each its gap after the one before.
    async fn agent(self, step: usize, k: usize, from: Instant) -> AgentDone {
        let trace = &self.shared.corpus.sessions[self.trace];
        let mut turns = Turns::default();
        let Some(Step::Subagents(agents)) = trace.steps.get(step) else {
            return ((step, k), turns, Ok(()), Instant::now());
        };
        let agent = &agents[k];
        let mut until = from + self.scaled(agent.gap_s);
        let mut prompt = (PromptBuilder::sharing(self.store.clone()), History::new());
        let mut last_end = from;
        for (j, t) in agent.turns.iter().enumerate() {
            if j > 0 {
                until = last_end + self.scaled(t.gap_s);
            }
            match self
                .turn(t, Some(&agent.id), until, &mut prompt, &mut turns)
                .await
            {
                Ok(end) => last_end = end,
                Err(s) => return ((step, k), turns, Err(s), Instant::now()),
            }
        }
        ((step, k), turns, Ok(()), last_end)
    }

    /// `gap_s` of the trace's think or tool time, scaled.
    fn scaled(&self, gap_s: f64) -> Duration {
        Duration::from_secs_f64((gap_s * self.shared.think_scale).clamp(0.0, 86_400.0))
    }

    /// Waits until `until` (the turn's gap, worked out by its chain), then sends it on the
    /// round's path; a failed turn, one past the server's context or `stop.duration` ends the
    /// chain. Ok: when its response ended, which the next turn's gap counts from.
    async fn turn(
        &self,
        t: &TurnTrace,
        agent: Option<&str>,
        until: Instant,
        (prompt, history): &mut (PromptBuilder, History),
        turns: &mut Turns,
    ) -> Result<Instant, Stop> {
        let shared = &self.shared;
        shared.path.wait_until(until).await.map_err(Stop::Halted)?;
        // When it was due, on the clock its record's send is stamped on.
        let due_at = crate::prompt::blocks::unix_now()
            - Instant::now()
                .saturating_duration_since(until)
                .as_secs_f64();
        if let Some(halt) = shared.path.halted() {
            return Err(Stop::Halted(halt));
        }
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        let needs = t.input_tokens + u64::from(t.output_tokens);
        if let Some(limit) = shared.context_limit.filter(|&l| needs > l) {
            return Err(Stop::Reason(format!(
                "past the server's context: turn {turn} needs {} prompt and {} output tokens, the server holds {limit}; not sent",
                t.input_tokens, t.output_tokens
            )));
        }
        let ids = shared.corpus.ids_of(t);
        let (text, theoretical, carried) = match self.ledger.lock() {
            Ok(mut ledger) => make_prompt(&self.text, ids, t, (prompt, history), &mut ledger),
            Err(_) => return Err(Stop::Reason("the session's ledger was poisoned".into())),
        };
        let mut req = shared.template.clone();
        req.prompt = text;
        req.max_tokens = t.output_tokens;
        let index = shared.index.fetch_add(1, Ordering::Relaxed);
        let mut out = Outgoing::new(req, index, RequestRole::Measure);
        out.requested = Some(t.input_tokens);
        out.theoretical = Some(theoretical);
        out.job = Some(JobTurn {
            session: self.session,
            turn,
            agent: agent.map(str::to_string),
            context_tokens: t.input_tokens,
            history_tokens: carried.map(|c| c.history_tokens),
            history_sent_tokens: carried.map(|c| c.sent_tokens),
            due_at: Some(due_at),
        });
        let own = shared.affinity.session_id(self.session);
        match agent {
            Some(a) => shared
                .affinity
                .stamp(&mut out, Affinity::agent_id(&own, a), Some(own)),
            None => shared.affinity.stamp(&mut out, own, None),
        }
        let mut marks = SessionMarks {
            prompt,
            ledger: &self.ledger,
            theoretical,
        };
        let idle = |f: &dyn Fn(&mut IdleClock)| {
            if let Ok(mut clock) = shared.idle.lock() {
                f(&mut clock);
            }
        };
        idle(&|c| c.sending(Instant::now()));
        let sent = shared.path.send(out, Some(&mut marks)).await;
        idle(&|c| c.ended(Instant::now()));
        let rec = match sent {
            Sent::Answered(a) => a.record,
            Sent::Interrupted => return Err(Stop::Halted(Halt::Interrupted)),
            Sent::NotWritten => {
                return Err(Stop::Reason(format!(
                    "a record could not be written: turn {turn}"
                )));
            }
        };
        turns.add(&rec);
        if rec.error.is_none()
            && let (Some(j), Some(ttft)) = (&rec.job, first_token_s(&rec))
        {
            let band = BANDS
                .iter()
                .rposition(|&b| j.context_tokens >= b)
                .unwrap_or(0);
            if let Ok(mut bands) = shared.ttft.lock() {
                bands[band].push(ttft);
            }
        }
        if let Some(e) = &rec.error {
            return Err(Stop::Reason(format!(
                "a turn failed: turn {turn}, {}",
                e.message
            )));
        }
        Ok(response_ended(&rec))
    }
}

/// A turn's prompt as sent (written out whole here, for its request alone: the chain keeps
/// its blocks' shared texts), the tokens its leading blocks could find cached, and what it
/// carried of its chain's previous prompt.
fn make_prompt(
    text: &BlockText,
    ids: &[u64],
    t: &TurnTrace,
    (prompt, history): (&mut PromptBuilder, &mut History),
    ledger: &mut BlockLedger,
) -> (String, u64, Option<super::history::Carried>) {
    let shared = t.shared as usize;
    let (_, found) = prompt.turn_after(text, ids, shared, Some(t.input_tokens), ledger, 0);
    let built = prompt.prompt();
    let sent = history.outgoing(built, shared);
    let rendered = sent.render();
    let carried = history.record(sent, built, prompt.blocks(), shared);
    (rendered, found, carried)
}

/// A subagent's end: which it is (step, subagent), what it sent, how it ended and when.
type AgentDone = ((usize, usize), Turns, Result<(), Stop>, Instant);

/// A subagent that ended: what it sent counted, its end noted, and its failure (or its task's
/// death) the session's stop if none came before.
fn collect(
    done: Result<AgentDone, tokio::task::JoinError>,
    turns: &mut Turns,
    ended: &mut HashMap<(usize, usize), Instant>,
    stop: &mut Option<Stop>,
) {
    match done {
        Ok((key, sent, outcome, at)) => {
            turns.merge(sent);
            ended.insert(key, at);
            if let (Err(s), None) = (outcome, &stop) {
                *stop = Some(s);
            }
        }
        Err(e) => {
            if stop.is_none() {
                *stop = Some(Stop::Reason(format!("a subagent's task died: {e}")));
            }
        }
    }
}

impl SessionRun {
    /// The `n`th session of the point: the trace's session `n` (taken round), its block
    /// text salted apart (ids are local to a session, and a replay of the trace is another
    /// session).
    fn new(
        shared: &Arc<Shared>,
        spec: &AgenticSpec,
        texts: &HashMap<u32, BlockText>,
        n: usize,
    ) -> SessionRun {
        let trace = n % shared.corpus.sessions.len();
        let bs = spec
            .block_size
            .or(shared.corpus.sessions[trace].block_size)
            .unwrap_or(512);
        let mut text = texts[&bs].clone();
        text.salt = mix(text.salt, n as u64);
        SessionRun {
            shared: shared.clone(),
            session: n as u32,
            trace,
            text,
            ledger: Arc::new(Mutex::new(BlockLedger::default())),
            store: Arc::default(),
            turn: Arc::new(AtomicU32::new(0)),
        }
    }
}

/// Unix time a record's stream ended (its send when it never did).
fn end_at(r: &RequestRecord) -> f64 {
    r.sent_at + r.end_s.unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_hold_their_turns_ttft() {
        let mut v = vec![Vec::new(); BANDS.len()];
        v[0] = vec![0.1, 0.3, 0.2];
        v[3] = vec![2.0];
        let b = bands(v);
        assert_eq!(b.len(), 2);
        assert_eq!(
            (b[0].turns, b[0].ttft_p50_s, b[0].ttft_max_s),
            (3, 0.2, 0.3)
        );
        assert_eq!((b[1].from_tokens, b[1].to_tokens), (4_096, Some(8_192)));
        // One percentile rule everywhere: linear between ranks (nearest rank said 0.3).
        assert!(
            (b[0].ttft_p90_s - 0.28).abs() < 1e-12,
            "{}",
            b[0].ttft_p90_s
        );
    }

    /// Each agent's turns made as the load makes them: its prompt as sent, from its session's
    /// shared block texts.
    fn replay(corpus: &SessionCorpus) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (k, trace) in corpus.sessions.iter().enumerate() {
            let text = BlockText {
                chars_per_block: 24,
                block_size: trace.block_size.unwrap_or(512),
                salt: mix(7, k as u64),
                words: None,
            };
            let store: Arc<Mutex<BlockStore>> = Arc::default();
            let mut ledger = BlockLedger::default();
            let mut chains: Vec<Vec<TurnTrace>> = vec![Vec::new()];
            for step in &trace.steps {
                match step {
                    Step::Turn(t) => chains[0].push(*t),
                    Step::Subagents(a) => chains.extend(a.iter().map(|a| a.turns.clone())),
                }
            }
            for chain in chains {
                let mut agent = (PromptBuilder::sharing(store.clone()), History::default());
                for t in &chain {
                    let ids = corpus.ids_of(t);
                    let (sent, _, _) =
                        make_prompt(&text, ids, t, (&mut agent.0, &mut agent.1), &mut ledger);
                    // What the turn sent before its blocks' texts were shared: the prompt of
                    // its ids made whole.
                    let whole = text.prompt(ids, &text.block_tokens(ids, Some(t.input_tokens)));
                    out.push((sent, whole));
                }
            }
        }
        out
    }

    #[test]
    fn a_replayed_trace_plans_whole_passes_and_the_sessions_left() {
        let spec = AgenticSpec {
            file: "s.jsonl".into(),
            live: 1,
            sessions: None,
            think_scale: 1.0,
            block_size: None,
            preset: None,
            preset_override: false,
            format: Default::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.jsonl");
        let session = |id: &str, turns: usize| {
            let t: Vec<String> = (0..turns)
                .map(|k| format!("{{\"t\": {k}, \"in\": 8, \"out\": 1}}"))
                .collect();
            format!("{{\"id\": \"{id}\", \"requests\": [{}]}}\n", t.join(", "))
        };
        std::fs::write(&file, session("a", 2) + &session("b", 3) + &session("c", 4)).unwrap();
        let corpus = crate::load::agentic::read(&file, &spec).unwrap();
        // 7 sessions: two passes of 9 turns, then a's 2.
        assert_eq!(planned_turns(&corpus, 7), 20);
        assert_eq!(planned_turns(&corpus, 2), 5);
        assert_eq!(planned_turns(&corpus, 0), 0);
        // The preset's ten million sessions, counted without walking them.
        assert_eq!(
            planned_turns(&corpus, servebench_model::spec::agentx::REPLAYS),
            10_000_000 / 3 * 9 + 2
        );
    }

    #[test]
    fn prompts_of_shared_block_texts_are_the_bytes_made_whole() {
        let spec = AgenticSpec {
            file: "s.jsonl".into(),
            live: 1,
            sessions: None,
            think_scale: 1.0,
            block_size: None,
            preset: None,
            preset_override: false,
            format: Default::default(),
        };
        // Subagents that begin from the main agent's first blocks, histories that grow and
        // partial last blocks made whole by the next turn.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.jsonl");
        std::fs::write(
            &file,
            concat!(
                r#"{"id": "s1", "block_size": 4, "requests": ["#,
                r#"{"t": 0, "type": "s", "in": 10, "out": 2, "hash_ids": [1, 2]},"#,
                r#"{"t": 1, "type": "n", "in": 13, "out": 2, "hash_ids": [1, 2, 3]},"#,
                r#"{"t": 2, "type": "subagent", "agent_id": "a1", "requests": [{"t": 0, "type": "s", "in": 13, "out": 1, "hash_ids": [1, 2, 9]}, {"t": 1, "type": "s", "in": 18, "out": 1, "hash_ids": [1, 2, 9, 10]}]},"#,
                r#"{"t": 2, "type": "subagent", "agent_id": "a2", "requests": [{"t": 0, "type": "s", "in": 12, "out": 1, "hash_ids": [1, 2, 11]}]},"#,
                r#"{"t": 5, "type": "s", "in": 20, "out": 2, "hash_ids": [1, 2, 3, 4, 5]}"#,
                "]}\n"
            ),
        )
        .unwrap();
        let corpus = crate::load::agentic::read(&file, &spec).unwrap();
        let turns = replay(&corpus);
        assert_eq!(turns.len(), 6);
        for (i, (sent, whole)) in turns.iter().enumerate() {
            assert_eq!(sent, whole, "turn {i}");
        }
        // The published sessions: histories to 100k tokens, subagents of their own.
        let published = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/kv-cache-tester/traces");
        let corpus = crate::load::agentic::read(&published, &spec).unwrap();
        let turns = replay(&corpus);
        assert!(turns.len() > 40, "{}", turns.len());
        for (i, (sent, whole)) in turns.iter().enumerate() {
            assert!(
                sent == whole,
                "turn {i}: {} bytes sent, {} made whole",
                sent.len(),
                whole.len()
            );
        }
    }

    #[test]
    fn a_sessions_agents_hold_one_text_of_each_block() {
        let text = BlockText {
            chars_per_block: 24,
            block_size: 4,
            salt: 1,
            words: None,
        };
        let store: Arc<Mutex<BlockStore>> = Arc::default();
        let mut ledger = BlockLedger::default();
        let (mut main, mut sub) = (
            PromptBuilder::sharing(store.clone()),
            PromptBuilder::sharing(store.clone()),
        );
        main.turn_after(&text, &[1, 2, 3], 0, None, &mut ledger, 0);
        sub.turn_after(&text, &[1, 2, 9], 0, None, &mut ledger, 0);
        // Blocks 1 and 2 were made once for both.
        assert_eq!(store.lock().unwrap().len(), 4);
        assert_eq!(main.prompt().render()[..48], sub.prompt().render()[..48]);
    }
}
