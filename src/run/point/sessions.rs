//! The `sessions` load model: simulated users, each holding a multi-turn conversation. Every
//! turn sends the whole history (earlier messages and the server's replies, as chat messages
//! or written into one prompt) plus a new message, after the user has thought for a while.
//! Each turn records what it must find in the prefix cache: the previous turn's prompt, as the
//! server counted it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use tokio::task::JoinSet;

use crate::client::{ChatMessage, GenerationRequest};
use crate::prompt::Conversation;
use servebench_model::results::records::{CacheShare, RequestRole};
use servebench_model::spec::types::{Api, Experiment, SessionsSpec, ThinkDist};

use super::planned::{
    Planned, RequestTarget, generation_request, prepare, response_ended, task_died,
};
use super::sender::{SendEnd, Sender};
use super::workload::tag;
use crate::run::probe::Window;
use crate::run::request::{Affinity, Outgoing, RequestPath, Sent};

/// Think times of one user, one per turn after the first.
pub(crate) fn think_times(spec: &SessionsSpec, seed: u64, round: u32, user: u32) -> Vec<Duration> {
    let gaps = spec.turns.unwrap_or(1).saturating_sub(1) as usize;
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

/// One round of sessions: every user's conversation, users at once, turns in order, the
/// round's messages taken `turns` a user.
pub(super) struct Sessions<'p> {
    pub exp: &'p Experiment,
    pub spec: &'p SessionsSpec,
    pub messages: Box<dyn Iterator<Item = Planned> + Send + 'p>,
    pub target: &'p RequestTarget,
}

impl<'p> Sender<'p> for Sessions<'p> {
    fn send<'s>(
        self: Box<Self>,
        path: &'s RequestPath,
        window: &'s Window,
    ) -> BoxFuture<'s, SendEnd>
    where
        'p: 's,
    {
        Box::pin(async move {
            let Sessions {
                exp,
                spec,
                mut messages,
                target,
            } = *self;
            let (users, turns) = (spec.users.max(1), spec.turns.unwrap_or(1).max(1));
            let mut end = SendEnd {
                planned: (users * turns) as usize,
                ..SendEnd::default()
            };
            path.plan_measured(end.planned);
            prepare(path.client(), users as usize).await;
            path.open(window);
            let round = path.round();
            let mut tasks: JoinSet<()> = JoinSet::new();
            let affinity = Affinity::of(exp);
            for user in 0..users {
                let conversation: Vec<Planned> = messages.by_ref().take(turns as usize).collect();
                // Each conversation opens with its own tag, so users share nothing.
                let opening = tag(
                    exp.cache.nonce,
                    exp.workload.seed,
                    &[u64::from(user), u64::from(round), 2 << 40],
                );
                let user_run = UserRun {
                    path: path.clone(),
                    user,
                    first_index: user * turns,
                    system: None,
                    befores: Vec::new(),
                    requests: conversation
                        .into_iter()
                        .map(|p| {
                            let mut r = generation_request(exp, p.text, target);
                            r.max_tokens = p.max_tokens;
                            r
                        })
                        .collect(),
                    opening,
                    thinks: think_times(spec, exp.workload.seed, round, user),
                    session_id: affinity.session_id(user),
                    affinity: affinity.clone(),
                };
                tasks.spawn(user_run.run());
            }
            while let Some(done) = tasks.join_next().await {
                if let Err(e) = done {
                    end.flags.extend(task_died(e));
                }
            }
            end
        })
    }
}

/// One round of conversations from a file (`sessions.file`: AIPerf's `multi_turn`, or SGLang's
/// `agentic-trace`, whose rounds carry several messages and no pause): each sent once, `users`
/// at once; when one ends the next starts.
pub(super) struct Conversations<'p> {
    pub exp: &'p Experiment,
    pub spec: &'p SessionsSpec,
    pub conversations: Arc<Vec<Conversation>>,
    pub target: &'p RequestTarget,
}

/// Each turn's messages before its last, as chat messages.
fn befores(c: &Conversation) -> Vec<Vec<ChatMessage>> {
    c.turns
        .iter()
        .map(|t| {
            t.before
                .iter()
                .map(|m| ChatMessage {
                    role: m.role,
                    content: m.content.clone(),
                })
                .collect()
        })
        .collect()
}

impl<'p> Sender<'p> for Conversations<'p> {
    fn send<'s>(
        self: Box<Self>,
        path: &'s RequestPath,
        window: &'s Window,
    ) -> BoxFuture<'s, SendEnd>
    where
        'p: 's,
    {
        Box::pin(async move {
            let Conversations {
                exp,
                spec,
                conversations,
                target,
            } = *self;
            // Each conversation's first request index: its turns are numbered in file order.
            let firsts: Arc<Vec<u32>> = Arc::new(
                conversations
                    .iter()
                    .scan(0u32, |at, c| {
                        let first = *at;
                        *at += c.turns.len() as u32;
                        Some(first)
                    })
                    .collect(),
            );
            let total: usize = conversations.iter().map(|c| c.turns.len()).sum();
            let mut end = SendEnd::planned(total, Some(exp.repeat.max(1) as usize * total));
            path.plan_measured(total);
            let users = (spec.users.max(1) as usize).min(conversations.len());
            prepare(path.client(), users).await;
            window.open();
            let round = path.round();
            let next = Arc::new(AtomicUsize::new(0));
            let mut tasks: JoinSet<()> = JoinSet::new();
            let affinity = Affinity::of(exp);
            for _ in 0..users {
                let (path, next, conversations, firsts) = (
                    path.clone(),
                    next.clone(),
                    conversations.clone(),
                    firsts.clone(),
                );
                let (affinity, target) = (affinity.clone(), target.clone());
                let (nonce, seed) = (exp.cache.nonce, exp.workload.seed);
                let template = generation_request(exp, String::new(), &target);
                tasks.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(c) = conversations.get(i) else { break };
                        if !path.may_send() {
                            break;
                        }
                        let user = i as u32;
                        let run = UserRun {
                            path: path.clone(),
                            user,
                            first_index: firsts[i],
                            system: c.system.clone(),
                            befores: befores(c),
                            requests: c
                                .turns
                                .iter()
                                .map(|t| {
                                    let mut r = template.clone();
                                    r.prompt = t.text.clone();
                                    r.prompt_role = t.role;
                                    if let Some(n) = t.output_tokens {
                                        r.max_tokens = n;
                                    }
                                    r
                                })
                                .collect(),
                            // As every sessions conversation, it opens with its own tag.
                            opening: tag(
                                nonce,
                                seed,
                                &[u64::from(user), u64::from(round), 2 << 40],
                            ),
                            thinks: c.turns.iter().skip(1).map(|t| t.delay).collect(),
                            session_id: affinity.session_id(user),
                            affinity: affinity.clone(),
                        };
                        run.run().await;
                    }
                });
            }
            while let Some(done) = tasks.join_next().await {
                if let Err(e) = done {
                    end.flags.extend(task_died(e));
                }
            }
            end
        })
    }
}

/// One user's conversation.
struct UserRun {
    path: RequestPath,
    user: u32,
    /// The request index of its first turn.
    first_index: u32,
    /// A system message sent before every turn (a file's leading system turn).
    system: Option<String>,
    /// Each turn's messages before its last (an SGLang agentic-trace round; empty: none).
    befores: Vec<Vec<ChatMessage>>,
    /// Each turn's new message (as `prompt`, its role `prompt_role`) and output length.
    requests: Vec<GenerationRequest>,
    opening: String,
    thinks: Vec<Duration>,
    /// The conversation's id in its session headers.
    session_id: String,
    affinity: Affinity,
}

impl UserRun {
    /// Sends the turns in order, each after the previous reply and a think time; stops at a
    /// failed turn (the conversation cannot go on without its reply), an interrupt or a lost
    /// server.
    async fn run(self) {
        let mut history: Vec<ChatMessage> = Vec::new();
        // The conversation so far as one prompt (APIs without messages).
        let mut transcript = String::new();
        // The tag opens the conversation: in front of its system message where it has one,
        // so conversations that share a system prompt share no cache either.
        let mut opening = self.opening;
        if let Some(system) = self.system {
            let system = format!("{}{system}", std::mem::take(&mut opening));
            transcript.clone_from(&system);
            history.push(ChatMessage {
                role: "system",
                content: system,
            });
        }
        let (mut prev_prompt, mut prev_completion) = (0u64, 0u64);
        // The previous reply's end: a think time counts from it.
        let mut replied = std::time::Instant::now();
        for (turn, mut req) in self.requests.into_iter().enumerate() {
            if turn > 0 {
                let think = self.thinks.get(turn - 1).copied().unwrap_or_default();
                tokio::select! {
                    _ = tokio::time::sleep_until((replied + think).into()) => {}
                    _ = self.path.interrupt().wait() => break,
                }
            }
            if !self.path.may_send() {
                break;
            }
            let mut before = self.befores.get(turn).cloned().unwrap_or_default();
            // The tag goes on the conversation's first message, whichever carries it.
            if let Some(first) = before.first_mut() {
                first.content = format!("{}{}", std::mem::take(&mut opening), first.content);
            }
            let message = if turn == 0 {
                format!("{}{}", std::mem::take(&mut opening), req.prompt)
            } else {
                std::mem::take(&mut req.prompt)
            };
            if req.api == Api::OpenaiChat {
                history.extend(before);
                req.history = history.clone();
                req.prompt = message.clone();
            } else {
                for m in before.iter().map(|m| &m.content).chain([&message]) {
                    if !transcript.is_empty() {
                        transcript.push_str("\n\n");
                    }
                    transcript.push_str(m);
                }
                req.prompt = transcript.clone();
            }
            let (api, role) = (req.api, req.prompt_role);
            let mut out = Outgoing::new(req, self.first_index + turn as u32, RequestRole::Measure);
            self.affinity.stamp(&mut out, self.session_id.clone(), None);
            out.share = Some(CacheShare {
                group: self.user,
                turn: Some(turn as u32),
                shared_tokens: prev_prompt,
                reusable_tokens: prev_prompt + prev_completion,
            });
            let answered = match self.path.send(out, None).await {
                Sent::Answered(a) => a,
                Sent::NotWritten | Sent::Interrupted => break,
            };
            if answered.record.error.is_some() {
                break;
            }
            replied = response_ended(&answered.record);
            prev_prompt = answered.record.prompt_tokens.unwrap_or(0);
            prev_completion = answered.record.completion_tokens.unwrap_or(0);
            let reply = answered.text;
            if api == Api::OpenaiChat {
                history.push(ChatMessage {
                    role,
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn think_times_are_seeded_and_have_their_mean() {
        let spec = SessionsSpec {
            users: 1,
            turns: Some(4001),
            file: None,
            format: Default::default(),
            max_turns: None,
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
            turns: Some(3),
            ..spec
        };
        assert_eq!(
            think_times(&fixed, 1, 0, 0),
            vec![Duration::from_millis(500); 2]
        );
    }
}
