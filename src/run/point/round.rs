//! One round of a point: the cache prepared as the policy says, the point's probes opened,
//! one sender run (closed loop, two-point pairs, an arrival schedule or sessions), the probes
//! closed. Which probes watch the rounds is chosen here, once per point, from what the server
//! group offers.

use crate::client::Client;
use crate::prompt::nonce;
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, RequestRole};
use servebench_model::spec::Point;
use servebench_model::spec::types::{CachePolicy, Experiment, Measure};
use servebench_report::measure::summary::PointFold;
use servebench_report::measure::system::Observed;

use super::closed_loop::ClosedLoop;
use super::planned::{Planned, generation_request};
use super::prompts::Prompts;
use super::runner::PointRunner;
use super::scheduled::ScheduledRound;
use super::sender::Sender;
use super::sessions::Sessions;
use super::two_point::TwoPoint;
use super::workload::RoundPlan;
use crate::run::probe::{Probes, Window};
use crate::run::probe::{setup, validity};
use crate::run::request::RoundTally;
use crate::run::request::{Outgoing, RequestPath, Sent};

/// What a round adds to as it runs: the point's flags, what the client observed, the fold.
pub(super) type Tally<'t> = (&'t mut Vec<Flag>, &'t mut Observed, &'t mut PointFold);

impl PointRunner {
    /// The probes that watch every round of `point` (chosen in [`setup::choose`] from the
    /// group's site and this runner's sinks; `checks` made before the first round).
    pub(super) fn probes(&self, point: &Point, checks: Option<validity::Checks>) -> Probes {
        setup::choose(
            &point.experiment,
            (&self.site, &self.sinks),
            self.surface.as_ref(),
            &self.interrupt,
            checks,
        )
    }

    /// One round: its sender prepared outside the measured window ([`prepare`](Self::prepare):
    /// the cache as the policy says, a trace read, block text calibrated, requests planned; a
    /// warm round's prompts primed), then sent through one [`RequestPath`] with the probes
    /// open around it, each record folded into the tally's fold as it is written. Returns
    /// whether an interrupt stopped it.
    pub(super) async fn round(
        &mut self,
        client: &Client,
        point: &Point,
        round: u32,
        prompts: &Prompts,
        probes: &mut Probes,
        (flags, observed, fold): Tally<'_>,
    ) -> bool {
        let exp = &point.experiment;
        // An open-loop point sends as many requests as its schedule holds, each when it is due.
        let schedule = match exp
            .open_loop()
            .map(|_| crate::load::Schedule::of(exp, &self.spec_dir))
        {
            None => None,
            Some(Ok(s)) => Some(s),
            Some(Err(e)) => {
                flags.push(Flag::new(
                    FlagKind::ScheduleFailed,
                    format!("could not make the arrival schedule: {e}"),
                ));
                return false;
            }
        };
        let prepared = match self
            .prepare(client, point, round, prompts, schedule.as_ref(), flags)
            .await
        {
            Ok(p) => p,
            Err(stopped) => return stopped,
        };
        let planned;
        let sender: Box<dyn Sender<'_> + '_> = match prepared {
            Prepared::Agentic(s) => s,
            Prepared::Captured(schedule) => Box::new(ScheduledRound {
                exp,
                schedule,
                requests: Box::new(captured_requests(exp, schedule.len())),
                target: &prompts.target,
            }),
            Prepared::Conversations(c) => Box::new(super::sessions::Conversations {
                exp,
                spec: exp
                    .sessions()
                    .expect("conversations come from a sessions load"),
                conversations: c,
                target: &prompts.target,
            }),
            Prepared::Planned(p) => {
                planned = *p;
                // Warm: each distinct prompt primed once behind the round's nonce.
                if exp.cache.policy == CachePolicy::Warm
                    && exp.sessions().is_none()
                    && self.prime(client, point, round, prompts, &planned).await
                {
                    return true;
                }
                self.closed_or_open(exp, &planned, &prompts.target)
            }
        };
        let window = Window::new();
        probes.open(client, &point.id, round, &window).await;
        let done_before = fold.done().requests;
        if let Some(tokens) = sender.block_tokens() {
            fold.set_block_tokens(tokens);
        }
        let tally = RoundTally::new(std::mem::replace(fold, PointFold::new(exp)));
        let path = RequestPath::new(self.path_parts(client, point, round), Some(tally));
        let end = sender.send(&path, &window).await;
        window.close();
        let (tally, lost) = path.finish(end.planned).await;
        if let Some(tally) = tally {
            *fold = tally.fold;
            if let Some(mut seen) = end.observed {
                (seen.warmup, seen.cooldown) = (tally.warmup, tally.cooldown);
                seen.unmeasured = tally.unmeasured;
                *observed = seen;
            }
        }
        if let Some(n) = end.expect {
            fold.expect(n);
        }
        if end.jobs.is_some() {
            fold.jobs = end.jobs;
        }
        flags.extend(end.flags);
        flags.extend(lost);
        let completed = (fold.done().requests - done_before) as usize;
        probes.close(completed, &mut observed.unmeasured).await;
        self.interrupt.is_set()
    }

    /// Prepares a round's sender, outside its measured window: the cache reset a cold
    /// policy asks for, then an agentic point's sessions (their trace read, their block text
    /// calibrated), or the round's requests planned (an open loop's from its `schedule`).
    /// Err: whether an interrupt stopped it (a failure is flagged).
    async fn prepare<'p>(
        &mut self,
        client: &Client,
        point: &'p Point,
        round: u32,
        prompts: &'p Prompts,
        schedule: Option<&'p crate::load::Schedule>,
        flags: &mut Vec<Flag>,
    ) -> Result<Prepared<'p>, bool> {
        let exp = &point.experiment;
        if exp.cache.policy == CachePolicy::Cold
            && let Err(e) = self.reset_cache(client).await
        {
            flags.push(Flag::new(
                FlagKind::FlushFailed,
                format!("{e}; the point ran without a cache reset"),
            ));
        }
        // Agent sessions make their own prompts from their trace's blocks.
        if let Some(spec) = exp.agentic() {
            return self
                .prepare_agentic(client, point, round, prompts, spec, flags)
                .await
                .map(|a| Prepared::Agentic(Box::new(a)));
        }
        // Conversations from a file bring their own turns.
        if let Some((file, s)) = exp.sessions().and_then(|s| s.file.as_ref().map(|f| (f, s))) {
            let read = crate::prompt::load_sessions_file(s, &self.spec_dir.join(file)).and_then(
                |mut c| {
                    crate::prompt::draw_missing_outputs(
                        &mut c,
                        &exp.workload,
                        &self.spec_dir,
                        round,
                    )
                    .map(|()| c)
                },
            );
            return match read {
                Ok(c) => Ok(Prepared::Conversations(std::sync::Arc::new(c))),
                Err(e) => {
                    flags.push(Flag::new(
                        FlagKind::ScheduleFailed,
                        format!("could not read the conversations: {e}"),
                    ));
                    Err(false)
                }
            };
        }
        // A capture's requests bring their literal messages: nothing to generate or calibrate.
        if let Some(s) = schedule.filter(|s| s.captured().is_some()) {
            return Ok(Prepared::Captured(s));
        }
        let count = match (exp.sessions(), schedule) {
            (Some(s), _) => s.users.max(1) * s.turns.unwrap_or(1).max(1),
            (None, Some(s)) => s.len() as u32,
            (None, None) => exp.requests,
        };
        // A trace's own lengths, where its lines give them, replace the workload's draws.
        let lengths = schedule.map_or_else(Default::default, |s| s.traced());
        match self
            .plan_round(client, exp, prompts, round, count, lengths, flags)
            .await
        {
            // Warm: one nonce per point and round, so points do not share prefixes.
            // Sessions open each conversation with a tag of their own.
            Ok(plan) => Ok(Prepared::Planned(Box::new(PlannedRound {
                plan,
                schedule,
                warm_prefix: nonce(),
            }))),
            Err((kind, message)) => {
                let stopped = self.interrupt.is_set();
                if !stopped {
                    flags.push(Flag::new(kind, message));
                }
                Err(stopped)
            }
        }
    }

    /// The sender of a round planned already: sessions, an arrival schedule, or a closed
    /// loop of single requests or two-point pairs.
    fn closed_or_open<'p>(
        &self,
        exp: &'p Experiment,
        planned: &'p PlannedRound<'_>,
        target: &'p super::planned::RequestTarget,
    ) -> Box<dyn Sender<'p> + 'p> {
        let policy = exp.cache.policy;
        let (plan, schedule) = (&planned.plan, planned.schedule);
        let warm_prefix = planned.warm_prefix.as_str();
        if let Some(spec) = exp.sessions() {
            return Box::new(Sessions {
                exp,
                spec,
                messages: Box::new(plan.requests()),
                target,
            });
        }
        let requests = Box::new(with_nonces(plan, policy, exp.cache.nonce, warm_prefix));
        if let Some(schedule) = schedule {
            return Box::new(ScheduledRound {
                exp,
                schedule,
                requests,
                target,
            });
        }
        match exp.method.resolve() {
            Measure::Streaming => Box::new(ClosedLoop {
                exp,
                count: plan.len(),
                requests,
                target,
            }),
            Measure::TwoPoint { a, b } => Box::new(TwoPoint {
                exp,
                count: plan.len(),
                lengths: (a, b),
                requests,
                target,
                reset: self.cache_reset(),
            }),
        }
    }

    /// Primes a warm round: each distinct prompt sent once behind the round's `prefix`, so
    /// the measured requests find it cached. Returns whether an interrupt (or a failed write)
    /// stopped it.
    async fn prime(
        &mut self,
        client: &Client,
        point: &Point,
        round: u32,
        prompts: &Prompts,
        planned: &PlannedRound<'_>,
    ) -> bool {
        let exp = &point.experiment;
        let (plan, prefix) = (&planned.plan, &planned.warm_prefix);
        let path = RequestPath::new(self.path_parts(client, point, round), None);
        let mut primed = std::collections::HashSet::new();
        for p in plan.requests().filter(|p| p.nonce) {
            if primed.contains(&p.text) {
                continue;
            }
            let prompt = format!("{prefix}{}", p.text);
            primed.insert(p.text);
            let mut req = generation_request(exp, prompt, &prompts.target);
            req.max_tokens = p.max_tokens;
            let mut out = Outgoing::new(req, 0, RequestRole::Prime);
            out.requested = p.requested;
            match path.send(out, None).await {
                Sent::Answered(_) => {}
                Sent::NotWritten | Sent::Interrupted => return true,
            }
        }
        path.finish(0).await;
        false
    }
}

/// A round's sender as [`PointRunner::prepare`] leaves it.
enum Prepared<'p> {
    /// The two senders' states are boxed: large beside the others.
    Agentic(Box<super::agentic::Agentic<'p>>),
    /// A SageMaker capture's schedule: its requests carry their own messages.
    Captured(&'p crate::load::Schedule),
    /// A sessions load's conversations from its file.
    Conversations(std::sync::Arc<Vec<crate::prompt::Conversation>>),
    Planned(Box<PlannedRound<'p>>),
}

/// A round's requests planned, its arrival schedule (an open loop), and a warm round's
/// nonce.
struct PlannedRound<'p> {
    plan: RoundPlan<'p>,
    schedule: Option<&'p crate::load::Schedule>,
    warm_prefix: String,
}

/// A capture's `len` requests as planned: no text of servebench's (the sender puts each
/// record's messages in), no nonce (the literal prompts share what the recorded traffic
/// shared), the workload's fixed `output_tokens` for a record without `max_tokens` (validate
/// refuses a distribution then).
fn captured_requests(
    exp: &Experiment,
    len: usize,
) -> impl Iterator<Item = Planned> + Send + 'static {
    let max_tokens = exp
        .workload
        .output_tokens
        .fixed()
        .unwrap_or(1)
        .min(u64::from(u32::MAX)) as u32;
    (0..len).map(move |_| Planned {
        text: String::new(),
        max_tokens,
        requested: None,
        share: None,
        mix: None,
        nonce: false,
        theoretical_cached: None,
        ledger: None,
    })
}

/// The round's requests, each made (and given the policy's nonce) as it is taken.
fn with_nonces<'p>(
    plan: &'p RoundPlan<'_>,
    policy: CachePolicy,
    cold_nonce: bool,
    warm_prefix: &'p str,
) -> impl Iterator<Item = Planned> + Send + 'p {
    plan.requests().map(move |mut p| {
        if p.nonce {
            p.text = match policy {
                CachePolicy::Cold if cold_nonce => format!("{}{}", nonce(), p.text),
                CachePolicy::Warm => format!("{warm_prefix}{}", p.text),
                _ => p.text,
            };
        }
        p
    })
}
