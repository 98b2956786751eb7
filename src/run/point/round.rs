//! One round of a point: the cache prepared as the policy says, the point's probes opened,
//! one sender run (closed loop, two-point pairs, an arrival schedule or sessions), the probes
//! closed. Which probes watch the rounds is chosen here, once per point, from what the server
//! group offers.

use crate::client::Client;
use crate::prompt::nonce;
use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, RequestRecord, RequestRole};
use servebench_model::spec::Point;
use servebench_model::spec::types::{CachePolicy, Measure};
use servebench_report::measure::summary::PointFold;
use servebench_report::measure::system::Observed;

use super::workload::RoundPlan;
use super::{Planned, PointRunner, Prompts, generation_request};
use crate::run::probe::{Probes, Window};
use crate::run::probe::{gpu, profiler, scrape, validity, workers};

/// What a round adds to as it runs: the point's flags, what the client observed, the fold.
pub(super) type Tally<'t> = (&'t mut Vec<Flag>, &'t mut Observed, &'t mut PointFold);

impl PointRunner {
    /// The probes that watch every round of `point`: the server's `/metrics` (when its
    /// surface has them and scrapes have a sink), the workers behind a router, the GPUs as
    /// `telemetry:` asks, the engine's profiler as `profile:` asks, and the validity checks
    /// under load (`checks`, made before the first round).
    pub(super) fn probes(&self, point: &Point, checks: Option<validity::Checks>) -> Probes {
        let exp = &point.experiment;
        let mut probes = Probes::default();
        if let (Some(sink), Some(surface)) = (&self.metrics_sink, &self.surface)
            && surface.metrics
        {
            probes.push(scrape::ServerScrape::new(
                sink.clone(),
                self.scrape_interval,
            ));
        }
        let targets = self.worker_targets(exp);
        if !targets.is_empty() {
            probes.push(workers::Workers::new(
                targets,
                self.metrics_sink.clone(),
                self.scrape_interval,
            ));
        }
        if let Some((sink, host, here)) = &self.gpu
            && let Some(g) = gpu::PointGpu::new(exp, sink.clone(), host, *here)
        {
            probes.push(gpu::Gpu::new(g));
        }
        if exp.profiler.is_some() {
            probes.push(profiler::Profiler::new(
                exp.clone(),
                self.profile_dir.clone(),
                self.interrupt.clone(),
            ));
        }
        if let Some(checks) = checks {
            probes.push(validity::UnderLoad::new(checks));
        }
        probes
    }

    /// One round: prepares the cache as the policy says (a flush, or a priming request), opens
    /// the probes, sends the round's measured requests with the point's sender (each record
    /// folded into the tally's fold), closes the probes. Returns whether an interrupt
    /// stopped it.
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
        if let Some(spec) = exp.agentic() {
            // Agent sessions make their own prompts from their trace's blocks.
            let window = Window::new();
            probes.open(client, &point.id, round, &window).await;
            let done_before = fold.done().requests;
            window.open();
            let stopped = self
                .run_agentic(client, point, round, prompts, spec, flags, fold)
                .await;
            window.close();
            let completed = (fold.done().requests - done_before) as usize;
            probes.close(completed, &mut observed.unmeasured).await;
            return stopped;
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

        let sending = Sending {
            plan: &plan,
            schedule: schedule.as_ref(),
            warm_prefix: &warm_prefix,
        };
        self.send(
            client,
            point,
            round,
            prompts,
            sending,
            probes,
            (flags, observed, fold),
        )
        .await
    }

    /// Sends a round planned already with the point's sender, its probes open around it.
    /// Returns whether an interrupt stopped it.
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &mut self,
        client: &Client,
        point: &Point,
        round: u32,
        prompts: &Prompts,
        sending: Sending<'_, '_>,
        probes: &mut Probes,
        (flags, observed, fold): Tally<'_>,
    ) -> bool {
        let exp = &point.experiment;
        let (policy, plan) = (exp.cache.policy, sending.plan);
        let warm_prefix = sending.warm_prefix;
        let window = Window::new();
        probes.open(client, &point.id, round, &window).await;
        let done_before = fold.done().requests;
        let stopped = match (exp.sessions(), sending.schedule) {
            (Some(sessions), _) => {
                window.open();
                let (records, stopped) = self
                    .send_sessions(client, point, round, prompts, plan, sessions, flags)
                    .await;
                records.iter().for_each(|r| fold.add(r));
                stopped
            }
            (None, Some(schedule)) => {
                let planned = with_nonces(plan, policy, exp.cache.nonce, warm_prefix);
                let (stopped, seen) = self
                    .send_scheduled(
                        client,
                        point,
                        round,
                        schedule,
                        planned,
                        &prompts.target,
                        (flags, fold),
                        &window,
                    )
                    .await;
                *observed = seen;
                stopped
            }
            (None, None) => {
                let planned = with_nonces(plan, policy, exp.cache.nonce, warm_prefix);
                // The closed loop's measured window is the whole round.
                window.open();
                let (records, stopped) = match exp.method.resolve() {
                    Measure::Streaming => {
                        let sent = (plan.len(), planned);
                        self.send_closed_loop(client, point, round, sent, &prompts.target, flags)
                            .await
                    }
                    Measure::TwoPoint { a, b } => {
                        self.send_pairs(
                            client,
                            point,
                            round,
                            (a, b),
                            planned,
                            &prompts.target,
                            flags,
                        )
                        .await
                    }
                };
                records.iter().for_each(|r| fold.add(r));
                stopped
            }
        };
        window.close();
        let completed = (fold.done().requests - done_before) as usize;
        probes.close(completed, &mut observed.unmeasured).await;
        stopped
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
        let mut primed = std::collections::HashSet::new();
        for p in plan.requests().filter(|p| p.nonce) {
            if primed.contains(&p.text) {
                continue;
            }
            let prompt = format!("{prefix}{}", p.text);
            primed.insert(p.text);
            let mut req = generation_request(exp, prompt, &prompts.target);
            req.max_tokens = p.max_tokens;
            let m = tokio::select! {
                m = client.stream(&req, exp.request_timeout) => m,
                _ = self.interrupt.wait() => return true,
            };
            let rec: RequestRecord = m.into_record(
                &point.id,
                round,
                0,
                RequestRole::Prime,
                exp.workload.api,
                p.max_tokens,
                p.requested,
            );
            if !self.append(&rec) {
                return true;
            }
        }
        false
    }
}

/// A round planned: its requests, the arrival schedule they follow (an open loop's), the
/// warm policy's prefix.
struct Sending<'p, 'a> {
    plan: &'p RoundPlan<'a>,
    schedule: Option<&'p crate::load::Schedule>,
    warm_prefix: &'p str,
}

/// The round's requests, each made (and given the policy's nonce) as it is taken.
fn with_nonces<'p>(
    plan: &'p RoundPlan<'_>,
    policy: CachePolicy,
    cold_nonce: bool,
    warm_prefix: &'p str,
) -> impl Iterator<Item = Planned> + 'p {
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
