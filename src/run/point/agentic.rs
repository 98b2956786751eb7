//! The `agentic` load model: agent sessions (jobs) replayed from a session trace
//! (`load::agentic`), `live` of them at once; when one ends the next starts. Each session sends
//! its turns in order, waiting the trace's think or tool time after each one ends, runs its
//! subagents side by side, and makes each turn's prompt of the trace's blocks
//! (`prompt::blocks`, salted per session: a trace's ids are local to its session), so the
//! history the trace records is what the server sees.
//!
//! A turn whose prompt and output would not fit the server's context is not sent: its
//! session stops there, with the reason in its record. `stop.duration` starts no session
//! after it and stops the live ones at their next turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use crate::client::{Client, GenerationRequest};
use crate::load::agentic::{SessionCorpus, Step, TurnTrace};
use crate::prompt::blocks::{BlockLedger, BlockText, PromptBuilder, mix};
use servebench_model::catalog::FlagKind;
use servebench_model::results::jobs::{ContextBand, JOBS_KEPT, JobRecord, JobTurn, JobsView};
use servebench_model::results::records::{Flag, RequestRecord, RequestRole};
use servebench_model::spec::Point;
use servebench_model::spec::load_model::AgenticSpec;
use servebench_report::measure::summary::PointFold;

use super::{PointRunner, Prompts, generation_request, prepare};

/// Where the bands of turns' context (prompt tokens) start, for TTFT against context:
/// doubling from 1,024 to 256k.
const BANDS: [u64; 10] = [
    0, 1_024, 2_048, 4_096, 8_192, 16_384, 32_768, 65_536, 131_072, 262_144,
];

impl PointRunner {
    /// One round of agent sessions: `spec.live` at a time until the trace's sessions (or
    /// `spec.sessions`) are done, `stop.duration` passes or an interrupt comes. Each session's
    /// records are folded into `fold` as it ends, and the sessions' view is given to it.
    /// Returns whether an interrupt stopped it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_agentic(
        &mut self,
        client: &Client,
        point: &Point,
        round: u32,
        prompts: &Prompts,
        spec: &AgenticSpec,
        flags: &mut Vec<Flag>,
        fold: &mut PointFold,
    ) -> bool {
        let exp = &point.experiment;
        let corpus = match crate::load::agentic::read(&self.spec_dir.join(&spec.file), spec) {
            Ok(c) => Arc::new(c),
            Err(e) => {
                flags.push(Flag::new(
                    FlagKind::ScheduleFailed,
                    format!("could not read the session trace: {e}"),
                ));
                return false;
            }
        };
        let texts = match self
            .block_texts(client, point, round, prompts, (spec, &corpus), flags)
            .await
        {
            Ok(t) => t,
            Err(stopped) => return stopped,
        };
        // Hits are judged within a block of the trace's (its largest, where sessions differ).
        if let Some(bs) = corpus
            .sessions
            .iter()
            .map(|s| spec.block_size.or(s.block_size).unwrap_or(512))
            .max()
        {
            fold.set_block_tokens(bs);
        }
        let live = spec.live.max(1) as usize;
        let total = spec.sessions.map_or(corpus.sessions.len(), |n| n as usize);
        // A connection ready for each session's main agent and its widest group of subagents,
        // so that no turn pays a handshake when due.
        let widest = corpus
            .sessions
            .iter()
            .flat_map(|s| &s.steps)
            .map(|s| match s {
                Step::Subagents(a) => a.len(),
                Step::Turn(_) => 0,
            })
            .max()
            .unwrap_or(0);
        prepare(client, live.min(total) * (1 + widest)).await;
        let started = Instant::now();
        let deadline = exp
            .stop
            .as_ref()
            .and_then(|s| s.duration)
            .map(|d| started + d);
        let shared = Arc::new(Shared {
            client: client.clone(),
            sink: self.sink.clone(),
            routing: self.routing.clone(),
            progress: self.progress.clone(),
            interrupt: self.interrupt.clone(),
            point: point.id.clone(),
            round,
            corpus: corpus.clone(),
            template: generation_request(exp, String::new(), &prompts.target),
            think_scale: spec.think_scale.max(0.0),
            context_limit: self.surface.as_ref().and_then(|s| s.context_length),
            deadline,
            timeout: exp.request_timeout,
            omitted_is_zero: self.cached_omitted_is_zero(),
            index: AtomicU32::new(0),
        });
        let mut tasks: JoinSet<(Vec<RequestRecord>, JobRecord)> = JoinSet::new();
        let mut view = JobsView {
            live: spec.live,
            ..JobsView::default()
        };
        let mut ttft: Vec<Vec<f64>> = vec![Vec::new(); BANDS.len()];
        let (mut area, mut last, mut first_start, mut last_end) = (0.0, started, None, started);
        let mut next = 0usize;
        let mut stopped = false;
        let mut sent = 0usize;
        loop {
            while !stopped
                && tasks.len() < live
                && next < total
                && deadline.is_none_or(|d| Instant::now() < d)
            {
                let now = Instant::now();
                area += tasks.len() as f64 * (now - last).as_secs_f64();
                last = now;
                first_start.get_or_insert(now);
                let trace = next % corpus.sessions.len();
                let bs = spec
                    .block_size
                    .or(corpus.sessions[trace].block_size)
                    .unwrap_or(512);
                let mut text = texts[&bs].clone();
                // Ids are local to a session, and a replay of the trace is another session.
                text.salt = mix(text.salt, next as u64);
                let run = SessionRun {
                    shared: shared.clone(),
                    session: next as u32,
                    trace,
                    text,
                    ledger: Arc::new(Mutex::new(BlockLedger::default())),
                    turn: Arc::new(AtomicU32::new(0)),
                };
                tasks.spawn(run.run());
                view.started += 1;
                next += 1;
            }
            if tasks.is_empty() {
                break;
            }
            tokio::select! {
                done = tasks.join_next() => {
                    let now = Instant::now();
                    area += tasks.len().saturating_add(1) as f64 * (now - last).as_secs_f64();
                    last = now;
                    last_end = now;
                    match done {
                        Some(Ok((records, job))) => {
                            sent += records.len();
                            session_done(&records, job, fold, &mut view, &mut ttft);
                        }
                        Some(Err(e)) => flags.extend(super::task_died(e)),
                        None => {}
                    }
                }
                _ = self.interrupt.wait(), if !stopped => {
                    // Turns in flight are abandoned: they never finished.
                    stopped = true;
                    tasks.abort_all();
                }
            }
        }
        let window = first_start.map_or(0.0, |f| (last_end - f).as_secs_f64());
        close_view(&mut view, ttft, window, area);
        fold.expect(sent);
        fold.jobs = Some(view);
        stopped
    }
}

impl PointRunner {
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

/// A session ended: its turns folded into the point, each successful one's TTFT in its
/// context band, the session counted as completed or stopped (and kept, up to [`JOBS_KEPT`]).
fn session_done(
    records: &[RequestRecord],
    job: JobRecord,
    fold: &mut PointFold,
    view: &mut JobsView,
    ttft: &mut [Vec<f64>],
) {
    for r in records {
        fold.add(r);
        if r.error.is_none()
            && let (Some(j), Some(t)) = (&r.job, first_token_s(r))
        {
            let band = BANDS
                .iter()
                .rposition(|&b| j.context_tokens >= b)
                .unwrap_or(0);
            ttft[band].push(t);
        }
    }
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
            let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
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
    client: Client,
    sink: super::RecordSink,
    routing: Arc<crate::run::server::routing::RoutingBook>,
    progress: super::Progress,
    interrupt: crate::run::interrupt::Interrupt,
    point: String,
    round: u32,
    corpus: Arc<SessionCorpus>,
    /// Every turn's request but its prompt and output length.
    template: GenerationRequest,
    think_scale: f64,
    /// The server's context length, where it says: a turn past it is not sent.
    context_limit: Option<u64>,
    deadline: Option<Instant>,
    timeout: Duration,
    omitted_is_zero: bool,
    /// The next record's index in the round.
    index: AtomicU32,
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
    /// The session's next turn number.
    turn: Arc<AtomicU32>,
}

/// How a chain of turns ended early.
enum Stop {
    Reason(String),
    Interrupted,
}

impl SessionRun {
    /// Runs the session's steps in order; its record says how far it got and why it stopped.
    /// Each main-agent turn goes its gap after the previous main turn's end, and not before
    /// the subagents the trace shows it waited for have ended (each's recorded gap after
    /// it); subagents start their gap after the main turn before them and run beside the
    /// main agent. The session ends when its main agent and every subagent have.
    async fn run(self) -> (Vec<RequestRecord>, JobRecord) {
        let trace = &self.shared.corpus.sessions[self.trace];
        let mut records = Vec::new();
        let mut stop = None;
        let mut prompt = PromptBuilder::default();
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
                            collect(done, &mut records, &mut ended, &mut stop);
                        }
                        if let Some(end) = ended.get(&(step, k)) {
                            until = until.max(*end + self.scaled(after));
                        }
                    }
                    if stop.is_some() {
                        break;
                    }
                    match self.turn(t, None, until, &mut prompt, &mut records).await {
                        Ok(()) => main_end = Instant::now(),
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
            collect(done, &mut records, &mut ended, &mut stop);
        }
        let failed = records.iter().filter(|r| r.error.is_some()).count() as u32;
        let completion_s = match (
            &stop,
            records.first(),
            records.iter().map(end_at).reduce(f64::max),
        ) {
            (None, Some(_), Some(end)) => {
                let first = records
                    .iter()
                    .map(|r| r.sent_at)
                    .fold(f64::INFINITY, f64::min);
                Some(end - first)
            }
            _ => None,
        };
        let job = JobRecord {
            session: self.session,
            trace_id: trace.id.clone(),
            turns: trace.turns() as u32,
            sent: records.len() as u32,
            failed,
            completion_s,
            stopped: stop.map(|s| match s {
                Stop::Reason(r) => r,
                Stop::Interrupted => "interrupted: the run was stopped".into(),
            }),
        };
        (records, job)
    }

    /// Subagent `k` of the subagents at `step`, started its gap after `from` (the end of the
    /// main agent's turn before it): its turns in order, each its gap after the one before.
    async fn agent(self, step: usize, k: usize, from: Instant) -> AgentDone {
        let trace = &self.shared.corpus.sessions[self.trace];
        let Some(Step::Subagents(agents)) = trace.steps.get(step) else {
            return ((step, k), Vec::new(), Ok(()), Instant::now());
        };
        let agent = &agents[k];
        let mut records = Vec::new();
        let mut until = from + self.scaled(agent.gap_s);
        let mut prompt = PromptBuilder::default();
        for (j, t) in agent.turns.iter().enumerate() {
            if j > 0 {
                until = Instant::now() + self.scaled(t.gap_s);
            }
            if let Err(s) = self
                .turn(t, Some(&agent.id), until, &mut prompt, &mut records)
                .await
            {
                return ((step, k), records, Err(s), Instant::now());
            }
        }
        ((step, k), records, Ok(()), Instant::now())
    }

    /// The most `rec` (made by `prompt`, finding `theoretical` when made) could have found
    /// from its session's own prompts: a subagent made after it may have reached the server
    /// first if it was sent before `rec`'s first token.
    fn reachable(
        &self,
        rec: &RequestRecord,
        prompt: &PromptBuilder,
        theoretical: u64,
    ) -> Option<u64> {
        let first_token = super::first_token_at(rec)?;
        let ledger = self.ledger.lock().ok()?;
        Some(prompt.reachable(&ledger, theoretical, first_token))
    }

    /// `gap_s` of the trace's think or tool time, scaled.
    fn scaled(&self, gap_s: f64) -> Duration {
        Duration::from_secs_f64((gap_s * self.shared.think_scale).clamp(0.0, 86_400.0))
    }

    /// Waits until `until`; stops at the point's deadline or an interrupt.
    async fn wait(&self, until: Instant) -> Result<(), Stop> {
        if self.shared.deadline.is_some_and(|end| until >= end) {
            return Err(Stop::Reason(
                "`stop.duration` ended the point: before its next turn".into(),
            ));
        }
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => Ok(()),
            _ = self.shared.interrupt.wait() => Err(Stop::Interrupted),
        }
    }

    /// Waits until `until` (the turn's gap, worked out by its chain), then sends it and
    /// records it; a failed turn, one past the server's context or the deadline ends the chain.
    async fn turn(
        &self,
        t: &TurnTrace,
        agent: Option<&str>,
        until: Instant,
        prompt: &mut PromptBuilder,
        records: &mut Vec<RequestRecord>,
    ) -> Result<(), Stop> {
        let shared = &self.shared;
        self.wait(until).await?;
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        let needs = t.input_tokens + u64::from(t.output_tokens);
        if let Some(limit) = shared.context_limit.filter(|&l| needs > l) {
            return Err(Stop::Reason(format!(
                "past the server's context: turn {turn} needs {} prompt and {} output tokens, the server holds {limit}; not sent",
                t.input_tokens, t.output_tokens
            )));
        }
        let ids = shared.corpus.ids_of(t);
        let (text, theoretical) = match self.ledger.lock() {
            Ok(mut ledger) => {
                let (text, found) = prompt.turn_after(
                    &self.text,
                    ids,
                    t.shared as usize,
                    Some(t.input_tokens),
                    &mut ledger,
                    0,
                );
                (text.to_string(), found)
            }
            Err(_) => return Err(Stop::Reason("the session's ledger was poisoned".into())),
        };
        let mut req = shared.template.clone();
        req.prompt = text;
        req.max_tokens = t.output_tokens;
        shared.progress.request_started();
        if let Ok(mut ledger) = self.ledger.lock() {
            prompt.mark_sent(&mut ledger, theoretical);
        }
        let m = tokio::select! {
            m = shared.client.stream(&req, shared.timeout) => m,
            _ = shared.interrupt.wait() => return Err(Stop::Interrupted),
        };
        let index = shared.index.fetch_add(1, Ordering::Relaxed);
        let mut rec = m.into_record(
            &shared.point,
            shared.round,
            index,
            RequestRole::Measure,
            req.api,
            req.max_tokens,
            Some(t.input_tokens),
        );
        rec.theoretical_cached_tokens = Some(theoretical);
        rec.reachable_cached_tokens = self.reachable(&rec, prompt, theoretical);
        rec.job = Some(JobTurn {
            session: self.session,
            turn,
            agent: agent.map(str::to_string),
            context_tokens: t.input_tokens,
        });
        super::fill_omitted_cached(&mut rec, shared.omitted_is_zero);
        shared.routing.attribute(&mut rec);
        let written = (shared.sink)(&rec).is_ok();
        shared.progress.request_finished();
        let failed = rec.error.as_ref().map(|e| e.message.clone());
        rec.drop_detail();
        records.push(rec);
        if !written {
            return Err(Stop::Reason(format!(
                "a record could not be written: turn {turn}"
            )));
        }
        if let Some(why) = failed {
            return Err(Stop::Reason(format!("a turn failed: turn {turn}, {why}")));
        }
        Ok(())
    }
}

/// A subagent's end: which it is (step, subagent), its records, how it ended and when.
type AgentDone = (
    (usize, usize),
    Vec<RequestRecord>,
    Result<(), Stop>,
    Instant,
);

/// A subagent that ended: its records kept, its end noted, and its failure (or its task's
/// death) the session's stop if none came before.
fn collect(
    done: Result<AgentDone, tokio::task::JoinError>,
    records: &mut Vec<RequestRecord>,
    ended: &mut HashMap<(usize, usize), Instant>,
    stop: &mut Option<Stop>,
) {
    match done {
        Ok((key, rs, outcome, at)) => {
            records.extend(rs);
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
    }
}
