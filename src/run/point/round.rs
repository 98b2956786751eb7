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
use super::scheduled::ScheduledRound;
use super::sender::Sender;
use super::sessions::Sessions;
use super::two_point::TwoPoint;
use super::workload::RoundPlan;
use super::{PointRunner, Prompts};
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

    /// One round: prepares the cache as the policy says (a flush, or a priming request), makes
    /// the round's sender outside the measured window (its trace read, its block text
    /// calibrated, its requests planned), opens the probes, sends the round's requests through
    /// one [`RequestPath`] (each record folded into the tally's fold as it is written), closes
    /// the probes. Returns whether an interrupt stopped it.
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
        let policy = exp.cache.policy;
        if policy == CachePolicy::Cold
            && let Err(e) = self.reset_cache(client).await
        {
            flags.push(Flag::new(
                FlagKind::FlushFailed,
                format!("{e}; the point ran without a cache reset"),
            ));
        }
        // Agent sessions make their own prompts from their trace's blocks.
        if let Some(spec) = exp.agentic() {
            let sender = match self
                .prepare_agentic(client, point, round, prompts, spec, flags)
                .await
            {
                Ok(s) => s,
                Err(stopped) => return stopped,
            };
            return self
                .send(
                    client,
                    point,
                    round,
                    Box::new(sender),
                    probes,
                    (flags, observed, fold),
                )
                .await;
        }
        // An open-loop point sends as many requests as its schedule holds, each when it is due.
        let schedule = match exp.open_loop() {
            Some(_) => match crate::load::Schedule::of(exp, &self.spec_dir) {
                Ok(s) => Some(s),
                Err(e) => {
                    flags.push(Flag::new(
                        FlagKind::ScheduleFailed,
                        format!("could not make the arrival schedule: {e}"),
                    ));
                    return false;
                }
            },
            None => None,
        };
        let count = match (exp.sessions(), &schedule) {
            (Some(s), _) => s.users.max(1) * s.turns.max(1),
            (None, Some(s)) => s.len() as u32,
            (None, None) => exp.requests,
        };
        // A trace's own lengths, where its lines give them, replace the workload's draws.
        let lengths = schedule
            .as_ref()
            .map_or_else(Default::default, |s| s.traced());
        let plan = match self
            .plan_round(client, exp, prompts, round, count, lengths, flags)
            .await
        {
            Ok(p) => p,
            Err((kind, message)) => {
                let stopped = self.interrupt.is_set();
                if !stopped {
                    flags.push(Flag::new(kind, message));
                }
                return stopped;
            }
        };
        // Warm: one nonce per point and round, so points do not share prefixes; each distinct
        // prompt primed once. Sessions open each conversation with a tag of their own.
        let warm_prefix = nonce();
        if policy == CachePolicy::Warm
            && exp.sessions().is_none()
            && self
                .prime(client, point, round, prompts, &plan, &warm_prefix)
                .await
        {
            return true;
        }
        let sender =
            self.closed_or_open(exp, &plan, schedule.as_ref(), &warm_prefix, &prompts.target);
        self.send(
            client,
            point,
            round,
            sender,
            probes,
            (flags, observed, fold),
        )
        .await
    }

    /// The sender of a round planned already: sessions, an arrival schedule, or a closed
    /// loop of single requests or two-point pairs.
    fn closed_or_open<'p>(
        &self,
        exp: &'p Experiment,
        plan: &'p RoundPlan<'_>,
        schedule: Option<&'p crate::load::Schedule>,
        warm_prefix: &'p str,
        target: &'p super::planned::RequestTarget,
    ) -> Box<dyn Sender<'p> + 'p> {
        let policy = exp.cache.policy;
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

    /// Sends a round with its sender, through one request path, its probes open around it.
    /// Returns whether an interrupt stopped it.
    async fn send(
        &mut self,
        client: &Client,
        point: &Point,
        round: u32,
        sender: Box<dyn Sender<'_> + '_>,
        probes: &mut Probes,
        (flags, observed, fold): Tally<'_>,
    ) -> bool {
        let exp = &point.experiment;
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

    /// Primes a warm round: each distinct prompt sent once behind the round's `prefix`, so
    /// the measured requests find it cached. Returns whether an interrupt (or a failed write)
    /// stopped it.
    async fn prime(
        &mut self,
        client: &Client,
        point: &Point,
        round: u32,
        prompts: &Prompts,
        plan: &RoundPlan<'_>,
        prefix: &str,
    ) -> bool {
        let exp = &point.experiment;
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
