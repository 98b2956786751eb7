//! The `sessions` load model: simulated users, each holding a multi-turn conversation. Every
//! turn sends the whole history (earlier messages and the server's replies, as chat messages
//! or written into one prompt) plus a new message, after the user has thought for a while.
//! Each turn records what it must find in the prefix cache: the previous turn's prompt, as the
//! server counted it.

use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use tokio::task::JoinSet;

use crate::client::{ChatMessage, Client};
use servebench_model::results::records::{CacheShare, Flag, RequestRecord, RequestRole};
use servebench_model::spec::Point;
use servebench_model::spec::types::{Api, SessionsSpec, ThinkDist};

use super::workload::{RoundPlan, tag};
use super::{Planned, PointRunner, Prompts, generation_request, prepare};

/// Think times of one user, one per turn after the first.
pub(crate) fn think_times(spec: &SessionsSpec, seed: u64, round: u32, user: u32) -> Vec<Duration> {
    let gaps = spec.turns.saturating_sub(1) as usize;
    match spec.think_dist {
        ThinkDist::Fixed => vec![spec.think; gaps],
        ThinkDist::Exponential => {
            let mean = spec.think.as_secs_f64();
            if mean <= 0.0 {
                return vec![Duration::ZERO; gaps];
            }
            let mut rng = ChaCha8Rng::seed_from_u64(
                seed ^ 0x7468_696e_6b00_0000 ^ (u64::from(round) << 32) ^ u64::from(user),
            );
            let exp = Exp::new(1.0 / mean).expect("a positive rate");
            (0..gaps)
                .map(|_| Duration::from_secs_f64(exp.sample(&mut rng).min(3600.0)))
                .collect()
        }
    }
}

impl PointRunner {
    /// One round of sessions: every user's conversation, users at once, turns in order, the
    /// `plan`'s messages taken `turns` a user.
    /// Returns the records (by user, then turn) and whether an interrupt stopped it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn send_sessions(
        &self,
        client: &Client,
        point: &Point,
        round: u32,
        prompts: &Prompts,
        plan: &RoundPlan<'_>,
        spec: &SessionsSpec,
        flags: &mut Vec<Flag>,
    ) -> (Vec<RequestRecord>, bool) {
        let exp = &point.experiment;
        let (users, turns) = (spec.users.max(1), spec.turns.max(1));
        prepare(client, users as usize).await;
        let mut tasks: JoinSet<Vec<RequestRecord>> = JoinSet::new();
        let mut messages = plan.requests();
        for user in 0..users {
            let conversation: Vec<Planned> = messages.by_ref().take(turns as usize).collect();
            let thinks = think_times(spec, exp.workload.seed, round, user);
            // Each conversation opens with its own tag, so users share nothing.
            let opening = tag(
                exp.cache.nonce,
                exp.workload.seed,
                &[u64::from(user), u64::from(round), 2 << 40],
            );
            let user_run = UserRun {
                client: client.clone(),
                sink: self.sink.clone(),
                routing: self.routing.clone(),
                progress: self.progress.clone(),
                interrupt: self.interrupt.clone(),
                point: point.id.clone(),
                round,
                user,
                turns,
                requests: conversation
                    .into_iter()
                    .map(|p| {
                        let mut r = generation_request(exp, p.text, &prompts.target);
                        r.max_tokens = p.max_tokens;
                        r
                    })
                    .collect(),
                mix: None,
                opening,
                thinks,
                timeout: exp.request_timeout,
                omitted_is_zero: self.cached_omitted_is_zero(),
            };
            tasks.spawn(user_run.run());
        }
        let mut records = Vec::new();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(rs) => records.extend(rs),
                Err(e) => flags.extend(super::task_died(e)),
            }
        }
        records.sort_by_key(|r| r.index);
        (records, self.interrupt.is_set())
    }
}

/// One user's conversation.
struct UserRun {
    client: Client,
    sink: super::RecordSink,
    routing: std::sync::Arc<crate::run::server::routing::RoutingBook>,
    progress: super::Progress,
    interrupt: crate::run::interrupt::Interrupt,
    point: String,
    round: u32,
    user: u32,
    turns: u32,
    /// Each turn's new message (as `prompt`) and output length.
    requests: Vec<crate::client::GenerationRequest>,
    mix: Option<String>,
    opening: String,
    thinks: Vec<Duration>,
    timeout: Duration,
    /// The server said its usage leaves out a cached count of 0 (see `fill_omitted_cached`).
    omitted_is_zero: bool,
}

impl UserRun {
    /// Sends the turns in order, each after the previous reply and a think time; stops at a
    /// failed turn (the conversation cannot go on without its reply) or an interrupt.
    async fn run(self) -> Vec<RequestRecord> {
        let mut out = Vec::new();
        let mut history: Vec<ChatMessage> = Vec::new();
        // The conversation so far as one prompt (APIs without messages).
        let mut transcript = String::new();
        let (mut prev_prompt, mut prev_completion) = (0u64, 0u64);
        for (turn, mut req) in self.requests.into_iter().enumerate() {
            if turn > 0 {
                let think = self.thinks.get(turn - 1).copied().unwrap_or_default();
                tokio::select! {
                    _ = tokio::time::sleep(think) => {}
                    _ = self.interrupt.wait() => break,
                }
            }
            let message = if turn == 0 {
                format!("{}{}", self.opening, req.prompt)
            } else {
                std::mem::take(&mut req.prompt)
            };
            if req.api == Api::OpenaiChat {
                req.history = history.clone();
                req.prompt = message.clone();
            } else {
                if !transcript.is_empty() {
                    transcript.push_str("\n\n");
                }
                transcript.push_str(&message);
                req.prompt = transcript.clone();
            }
            self.progress.request_started();
            let m = tokio::select! {
                m = self.client.stream(&req, self.timeout) => m,
                _ = self.interrupt.wait() => break,
            };
            let reply = m.text.clone();
            let mut rec = m.into_record(
                &self.point,
                self.round,
                self.user * self.turns + turn as u32,
                RequestRole::Measure,
                req.api,
                req.max_tokens,
                None,
            );
            rec.share = Some(CacheShare {
                group: self.user,
                turn: Some(turn as u32),
                shared_tokens: prev_prompt,
                reusable_tokens: prev_prompt + prev_completion,
            });
            rec.mix = self.mix.clone();
            super::fill_omitted_cached(&mut rec, self.omitted_is_zero);
            self.routing.attribute(&mut rec);
            let written = (self.sink)(&rec).is_ok();
            self.progress.request_finished();
            let failed = rec.error.is_some();
            prev_prompt = rec.prompt_tokens.unwrap_or(0);
            prev_completion = rec.completion_tokens.unwrap_or(0);
            if written {
                out.push(rec);
            }
            if failed || !written {
                break;
            }
            if req.api == Api::OpenaiChat {
                history.push(ChatMessage {
                    role: "user",
                    content: message,
                });
                history.push(ChatMessage {
                    role: "assistant",
                    content: reply,
                });
            } else {
                transcript.push_str(&reply);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_times_are_seeded_and_have_their_mean() {
        let spec = SessionsSpec {
            users: 1,
            turns: 4001,
            think: Duration::from_millis(500),
            think_dist: ThinkDist::Exponential,
        };
        let a = think_times(&spec, 1, 0, 0);
        assert_eq!(a, think_times(&spec, 1, 0, 0));
        assert_ne!(a, think_times(&spec, 1, 0, 1), "users think apart");
        assert_eq!(a.len(), 4000);
        let mean = a.iter().map(Duration::as_secs_f64).sum::<f64>() / a.len() as f64;
        // Exponential: standard error 0.5 / sqrt(4000), about 0.008.
        assert!((mean - 0.5).abs() < 0.04, "{mean}");
        let fixed = SessionsSpec {
            think_dist: ThinkDist::Fixed,
            turns: 3,
            ..spec
        };
        assert_eq!(
            think_times(&fixed, 1, 0, 0),
            vec![Duration::from_millis(500); 2]
        );
    }
}
