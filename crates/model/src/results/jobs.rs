//! What a replayed trace's requests record beyond a request's own numbers: the prefix-cache
//! hits its blocks promise (a trace with `hash_ids`), and for agent sessions (jobs) each
//! turn's place in its session and each session's course.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A turn's place in an agent session (`load: { kind: agentic }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobTurn {
    /// The session, by the order it started in the point (from 0).
    pub session: u32,
    /// The turn within the session, by send order (from 0), subagents' turns included.
    pub turn: u32,
    /// The subagent the turn belongs to (its `agent_id` in the trace); None for the main
    /// agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Prompt tokens the trace gives the turn: its context so far.
    pub context_tokens: u64,
    /// Tokens of the agent's previous turn's prompt that the trace says this turn re-sends
    /// (its leading blocks shared with that turn): the history it must carry exactly. None
    /// for an agent's first turn, and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_tokens: Option<u64>,
    /// Of `history_tokens`, those this turn's prompt as sent began with: its leading blocks
    /// byte for byte the previous turn's prompt as sent. Less than `history_tokens`: the
    /// replay did not carry its history exactly (flagged `history-diverged`). None when
    /// `history_tokens` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_sent_tokens: Option<u64>,
    /// When the trace said the turn was due (Unix seconds): its recorded gap after the turn
    /// it waits on, or its session's start. `sent_at - due_at` is how late the client sent
    /// it. None in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<f64>,
}

/// A point's trace blocks: what its requests could have found in the prefix cache (their
/// leading blocks already sent in the round) against what the server says they found.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct TraceCache {
    /// Successful measured requests made of blocks whose server reported cached tokens.
    pub requests: usize,
    /// Their prompt tokens, as the server counted them.
    pub prompt_tokens: u64,
    /// Their prompt tokens as the trace gives them (its `in`): against `prompt_tokens`, how
    /// far the blocks' text came out from the trace's unit in the server's (a BOS a request
    /// where blocks are made with the server's tokenizer; up to 2% where it has none).
    #[serde(default)]
    pub requested_prompt_tokens: u64,
    /// Tokens their leading blocks already sent could have served (the ceiling a prefix
    /// cache that never evicts reaches).
    pub theoretical_cached_tokens: u64,
    /// Tokens the server reported cached.
    pub cached_tokens: u64,
    /// Requests that found less than their theoretical hit (by more than `tolerance_tokens`):
    /// the server evicted, or a request came while the one that holds its blocks was still in
    /// prefill.
    pub below: usize,
    /// Requests that found more than their theoretical hit (by more than `tolerance_tokens`) and more
    /// than a sibling sent before their first token could have left: they are excluded from
    /// the point's numbers, as contamination.
    pub above: usize,
    /// Requests that found more than their theoretical hit, but no more than siblings made
    /// after them and sent before their first token could have left there: the server served
    /// the two in the other order than they were made. A real hit, kept in the numbers.
    #[serde(default)]
    pub reordered: usize,
    /// Successful requests made of blocks whose server did not report cached tokens.
    pub unreported: usize,
    /// How far a request's hit may be from its theoretical one before it is counted below or
    /// above: one block of the trace, and at least 64 tokens (a chat template's head), plus
    /// the request's own length error (`length_error_*`): the theoretical hit is in the
    /// trace's tokens and the server's hit in its own.
    #[serde(default)]
    pub tolerance_tokens: u64,
    /// The smallest and largest length error of these requests: the server's prompt tokens
    /// less the trace's (`in`, `input_length`), the drift of block text sized in one unit and
    /// counted in another (a chat template's head included). None: no request had both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_error_min: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_error_max: Option<i64>,
    /// The largest length error as a share of the trace's length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_error_share_max: Option<f64>,
}

/// A point's agent sessions (jobs).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct JobsView {
    /// Sessions asked to be live at once (`load.agentic.live`).
    pub live: u32,
    /// Mean sessions live over the point's window (from the first session's start to the
    /// last one's end), time-weighted.
    pub live_mean: f64,
    /// Seconds from the first session's first send to the last session's last end.
    pub window_s: f64,
    pub started: usize,
    /// Sessions whose every turn completed.
    pub completed: usize,
    /// Sessions stopped before their last turn (see each one's `stopped`).
    pub stopped: usize,
    /// Of `stopped`, those the point's end cut short (`stop.duration`, an interrupt) rather
    /// than their own course (a failed turn, the server's context).
    #[serde(default)]
    pub truncated: usize,
    /// Completed sessions per hour of the window.
    pub jobs_per_hour: f64,
    /// Agents (sessions that sent a turn, of those kept) judged against `slo.agent`, and of
    /// them those that met it; 0 and 0 without a per-agent SLO.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub agents_judged: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub agents_met: usize,
    /// Turns sent (answered or failed), of all sessions; of them, those that succeeded and
    /// those of them that streamed their first token (from the records).
    #[serde(default)]
    pub turns_sent: usize,
    #[serde(default)]
    pub turns_ok: usize,
    #[serde(default)]
    pub turns_streamed: usize,
    /// Successful turns that returned fewer output tokens (the server's count) than they
    /// asked for: the model stopped early.
    #[serde(default)]
    pub turns_short_output: usize,
    /// Failed turns whose server said the prompt was past its context (AIPerf 0.13's
    /// classification of the error's text).
    #[serde(default)]
    pub context_overflows: usize,
    /// `stop.duration` ended the point: a session had a turn due after it, or sessions were
    /// left to start (false when every session ended before it, or without a duration).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reached_duration: bool,
    /// The longest time, seconds, no turn was in flight between the first send and the last
    /// (the client's view); None in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_idle_s: Option<f64>,
    /// Each turn's TTFT by its context (prompt tokens the trace gives it), in bands.
    pub ttft_by_context: Vec<ContextBand>,
    /// Each session (the first [`JOBS_KEPT`] started).
    pub sessions: Vec<JobRecord>,
}

/// Sessions kept one by one in a point's record; past this only the counts grow.
pub const JOBS_KEPT: usize = 10_000;

/// The turns whose context falls in [from, to) tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextBand {
    pub from_tokens: u64,
    /// None for the last, open band.
    pub to_tokens: Option<u64>,
    /// Successful turns in the band.
    pub turns: usize,
    /// Seconds from send to first token: median, 90th percentile, largest.
    pub ttft_p50_s: f64,
    pub ttft_p90_s: f64,
    pub ttft_max_s: f64,
}

/// One agent session (job).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct JobRecord {
    /// Its order of start in the point (from 0).
    pub session: u32,
    /// The trace's id of the session.
    pub trace_id: String,
    /// Turns the trace holds (subagents' included).
    pub turns: u32,
    /// Turns sent; of them, those that failed.
    pub sent: u32,
    pub failed: u32,
    /// Seconds from its first turn's send to its last turn's end, when every turn completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_s: Option<f64>,
    /// Why it stopped before its last turn, as `kind: details` (`past the server's context`,
    /// `a turn failed`, `` `stop.duration` ended the point``, `interrupted`); None when it
    /// completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Seconds from its first turn's send to its last turn's end, however it ended (None when
    /// it sent nothing): from its records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Its successful turns' tokens, as the server counted them: prompt, output and cached
    /// prompt tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub cached_tokens: u64,
    /// Its verdict against the per-agent SLO (`slo.agent`); None without one, or when it sent
    /// nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<AgentVerdict>,
    /// Behind a router: its turns by the worker the router's log names (turns whose worker is
    /// not known are left out); empty when no turn's worker is known.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workers: BTreeMap<String, u32>,
    /// The share of those turns its busiest worker served ([`JobRecord::affinity`]: 1.0 when
    /// the router kept the session on one worker); None when no turn's worker is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<f64>,
}

/// One agent (session) judged against `slo.agent`, from its turns' records.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct AgentVerdict {
    /// It met every per-agent target, with no turn failed.
    pub met: bool,
    /// The `slo.agent.percentile` of its successful turns' TTFT (or first answer), seconds from
    /// each turn's due time; None without a latency target or a successful turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_s: Option<f64>,
    /// Its output tokens per second of generation over the session (successful turns' output
    /// tokens over their summed first-token-to-end seconds); None when nothing was generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tok_s: Option<f64>,
    /// Turns judged (successful ones) and failed.
    pub turns: u32,
    pub failed: u32,
    /// Why it missed, in words (None when it met the SLO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The stop reasons of a session the point's end cut short (the kinds its runner writes
/// before `: `).
const CUT_BY_THE_END: [&str; 2] = ["`stop.duration` ended the point", "interrupted"];

impl JobRecord {
    /// The share of its routed turns that its busiest worker served, from `workers` (1.0: the router kept the
    /// whole session on one worker); None when no turn's worker is known.
    pub fn worker_share(&self) -> Option<f64> {
        let total: u32 = self.workers.values().sum();
        let most = self.workers.values().copied().max()?;
        (total > 0).then(|| f64::from(most) / f64::from(total))
    }

    /// Whether the point's end (`stop.duration`, an interrupt) cut it short.
    pub fn truncated(&self) -> bool {
        self.stopped.as_deref().is_some_and(|r| {
            let kind = r.split_once(": ").map_or(r, |(k, _)| k);
            CUT_BY_THE_END.contains(&kind)
        })
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
