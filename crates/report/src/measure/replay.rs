//! Three ways a replay's cache hits go wrong that the field's tools did not notice, told
//! apart from the records:
//!
//! - **the replay's**: an agent's turn did not re-send its previous turn's prompt exactly
//!   where its trace keeps it (`JobTurn::history_sent_tokens` short of `history_tokens`,
//!   which the client checks on the bytes it sent), so the server could not find what the
//!   theoretical hit counts (AIPerf's reconstruction trimmed the previous user message:
//!   InferenceX saw 83/47/12% hits against a 97% ceiling). `history-diverged`, naming the
//!   first turn where it happened.
//! - **the server's**: requests that re-sent blocks the round had already sent, with their
//!   history exact, found none of them cached (vLLM's hybrid sliding-window models, vllm
//!   #42948). `no-prefix-hits`.
//! - **the client's**: a closed loop whose records never held the concurrency asked in
//!   flight (inference-perf held 41 to 50 whatever 40 to 192 were asked, #648), or agent
//!   sessions whose turns went out late against the trace's timing (`JobTurn::due_at`).
//!   `client-limited`, naming asked and achieved.

use std::collections::{BTreeMap, HashSet};

use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, RequestRecord};

use super::timeline::Timeline;

/// Requests that could have found more than a block and found at most the tolerance, over
/// which `no-prefix-hits` is judged: fewer than this say too little.
const NO_HITS_MIN_REQUESTS: usize = 2;

/// What a point's records say about its replay's history and the server's hits.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReplayTally {
    /// Turns that say what of their previous turn they had to re-send (more than nothing).
    with_history: usize,
    /// Of them, those whose prompt as sent did not carry all of it.
    diverged: usize,
    /// Their theoretical and server hits, summed; how many found less than their
    /// theoretical hit by over the tolerance.
    diverged_theoretical: u64,
    diverged_cached: u64,
    diverged_below: usize,
    /// The chains (session, subagent) that diverged.
    chains: HashSet<(u32, Option<String>)>,
    /// The first turn that diverged (by its send): (sent_at, session, turn, agent, history
    /// tokens, of them sent).
    first: Option<(f64, u32, u32, Option<String>, u64, u64)>,
    /// Requests whose blocks promised more than the tolerance, their history exact (or not
    /// told): how many, and of them how many found more than the tolerance; their
    /// theoretical and server hits.
    could_hit: usize,
    did_hit: usize,
    could_theoretical: u64,
    could_cached: u64,
}

impl ReplayTally {
    /// A successful request made of trace blocks (`theoretical` its theoretical hit,
    /// `cached` the server's), judged within `tolerance` tokens.
    pub(crate) fn add(&mut self, r: &RequestRecord, theoretical: u64, cached: u64, tolerance: u64) {
        let history = r
            .job
            .as_ref()
            .and_then(|j| Some((j, j.history_tokens?, j.history_sent_tokens?)))
            .filter(|(_, h, _)| *h > 0);
        if let Some((j, history, sent)) = history {
            self.with_history += 1;
            if sent < history {
                self.diverged += 1;
                self.diverged_theoretical += theoretical;
                self.diverged_cached += cached;
                self.diverged_below += usize::from(cached + tolerance < theoretical);
                self.chains.insert((j.session, j.agent.clone()));
                if self.first.as_ref().is_none_or(|f| r.sent_at < f.0) {
                    self.first =
                        Some((r.sent_at, j.session, j.turn, j.agent.clone(), history, sent));
                }
                return;
            }
        }
        if theoretical > tolerance {
            self.could_hit += 1;
            self.did_hit += usize::from(cached > tolerance);
            self.could_theoretical += theoretical;
            self.could_cached += cached;
        }
    }

    /// `history-diverged` and `no-prefix-hits`, where the records show them (the runner adds
    /// the model's attention layout to the second where it knows the model's config).
    pub(crate) fn flags(&self, tolerance: u64) -> Vec<Flag> {
        let mut flags = Vec::new();
        if let Some((_, session, turn, agent, history, sent)) = &self.first {
            let who = match agent {
                Some(a) => format!("session {session}'s subagent {a}, turn {turn}"),
                None => format!("session {session}, turn {turn}"),
            };
            flags.push(Flag::new(
                FlagKind::HistoryDiverged,
                format!(
                    "{} of {} turns that re-send their previous turn's prompt did not send it as it was \
                     ({} of the point's agent chains); the first, {who}, began with {sent} of the {history} \
                     tokens of history its trace keeps. Those turns found {} of their {} theoretical tokens \
                     cached ({}; {} of them short by over {tolerance} tokens): the replay changed the prompts, \
                     so the server could not find what the trace shares, and the hits and TTFTs are another \
                     workload's. Send each turn with the previous turn's prompt exactly (AIPerf's reconstruction \
                     trimmed the previous user message: InferenceX's 83/47/12% against a 97% ceiling)",
                    self.diverged,
                    self.with_history,
                    self.chains.len(),
                    self.diverged_cached,
                    self.diverged_theoretical,
                    share(self.diverged_cached, self.diverged_theoretical),
                    self.diverged_below,
                ),
            ));
        }
        if self.could_hit >= NO_HITS_MIN_REQUESTS && self.did_hit == 0 {
            flags.push(Flag::new(
                FlagKind::NoPrefixHits,
                format!(
                    "the server found no block the point sent again (no request more than {tolerance} tokens): {} requests re-sent blocks the round had \
                     already sent ({} theoretical tokens{}) and found {} ({}). \
                     The server's prefix cache, not the replay: {}. Engines that cache no prefix of some \
                     models do this (vLLM's hybrid sliding-window models, vllm #42948), as does a cache \
                     turned off; the numbers are this server's, without prefix caching",
                    self.could_hit,
                    self.could_theoretical,
                    if self.with_history > 0 {
                        ", their history re-sent byte for byte"
                    } else {
                        ""
                    },
                    self.could_cached,
                    share(self.could_cached, self.could_theoretical),
                    if self.with_history > 0 {
                        "every turn carried its previous turn's prompt exactly"
                    } else {
                        "each request's leading blocks were the same text as before"
                    },
                ),
            ));
        }
        flags
    }
}

/// `part` of `whole` as a percentage, one decimal.
fn share(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "none promised".into();
    }
    format!("{:.1}%", part as f64 * 100.0 / whole as f64)
}

/// A closed loop's requests in flight, from their send and end: whether the client held the
/// concurrency asked.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    /// The concurrency the point asks (its requests a round, where fewer).
    asked: usize,
    spans: Timeline,
    /// Each round's first send and last end (Unix seconds): the windows the mean is over.
    rounds: BTreeMap<u32, (f64, f64)>,
    /// A request failed (it holds no span): the peak says nothing then.
    failed: bool,
    order: u64,
}

impl InFlight {
    pub(crate) fn new(asked: usize) -> InFlight {
        InFlight {
            asked,
            spans: Timeline::default(),
            rounds: BTreeMap::new(),
            failed: false,
            order: 0,
        }
    }

    pub(crate) fn add(&mut self, r: &RequestRecord) {
        let Some(end_s) = r.end_s.filter(|_| r.error.is_none()) else {
            self.failed = true;
            return;
        };
        self.order += 1;
        self.spans.span(self.order, r.sent_at, end_s);
        let w = self
            .rounds
            .entry(r.round)
            .or_insert((r.sent_at, r.sent_at + end_s));
        w.0 = w.0.min(r.sent_at);
        w.1 = w.1.max(r.sent_at + end_s);
    }

    /// `client-limited` when the records never held three quarters of the concurrency asked
    /// in flight: one or two short at the start is the ramp (a short request ended before the
    /// last worker's first send), not a client that cannot hold more.
    pub(crate) fn flag(&self) -> Option<Flag> {
        if self.failed || self.asked < 2 || self.order == 0 {
            return None;
        }
        let (most, _) = self.spans.max_in_flight();
        if most * 4 >= self.asked * 3 {
            return None;
        }
        let window: f64 = self.rounds.values().map(|(a, b)| b - a).sum();
        let mean = if window > 0.0 {
            self.spans.busy_s() / window
        } else {
            0.0
        };
        Some(Flag::new(
            FlagKind::ClientLimited,
            format!(
                "the client never held the concurrency asked: {} requests in flight asked, at most {most} achieved \
                 (mean {}, from the records' send and end times): the server was offered less load than the point \
                 says, and its latencies are for {most}; give the client more workers, connections or CPU \
                 (inference-perf held 41 to 50 in flight whatever 40 to 192 were asked, #648)",
                self.asked,
                servebench_model::text::sig3(mean),
            ),
        ))
    }
}

/// How late an agent turn may go out after the trace said it was due before the client is
/// said to be the limit: a turn's prompt is made and its connection taken in that time (a
/// 128k-token prompt of shared blocks is assembled in a few milliseconds on this kind of
/// machine); later than that in more than one turn in a hundred, the client was short.
const TURN_LATE_LIMIT_S: f64 = 0.050;

/// Agent turns' lateness, `sent_at - due_at`: whether the client kept the trace's timing at
/// the live sessions asked. Flat in memory: counts and the largest.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnLateness {
    /// The live sessions the point asks (0: not an agentic point).
    live: u32,
    turns: u64,
    late: u64,
    latest_s: f64,
}

impl TurnLateness {
    pub(crate) fn new(live: u32) -> TurnLateness {
        TurnLateness {
            live,
            ..TurnLateness::default()
        }
    }

    pub(crate) fn add(&mut self, r: &RequestRecord) {
        let Some(due) = r.job.as_ref().and_then(|j| j.due_at) else {
            return;
        };
        let late = r.sent_at - due;
        self.turns += 1;
        if late > TURN_LATE_LIMIT_S {
            self.late += 1;
        }
        self.latest_s = self.latest_s.max(late);
    }

    /// `client-limited` when more than 1% of the turns went out later than
    /// [`TURN_LATE_LIMIT_S`] (the 99th percentile past it), and at least two (one late turn
    /// of a short point is a pause of the machine, not a client that cannot keep up): the
    /// server was offered the trace's load later than recorded, so its latencies and hits are
    /// for less than the point says.
    pub(crate) fn flag(&self) -> Option<Flag> {
        if self.late < 2 || self.late * 100 <= self.turns {
            return None;
        }
        Some(Flag::new(
            FlagKind::ClientLimited,
            format!(
                "the client sent agent turns late: {} of {} turns went out more than {:.0} ms after the trace said they were due (the latest {} ms), at {} live sessions asked; \
                 the server was offered the sessions' load later than recorded, so its latencies and hits describe the client as much as the server; \
                 give the client more CPU, connections or workers, or lower `load.agentic.live`",
                self.late,
                self.turns,
                TURN_LATE_LIMIT_S * 1e3,
                servebench_model::text::sig3(self.latest_s * 1e3),
                self.live,
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::jobs::JobTurn;

    /// A turn of `session` that had `history` tokens to re-send and sent `sent` of them;
    /// `theoretical` and `cached` its hits.
    fn turn(session: u32, turn: u32, at: f64, (history, sent): (u64, u64)) -> RequestRecord {
        RequestRecord {
            sent_at: at,
            job: Some(JobTurn {
                session,
                turn,
                agent: None,
                context_tokens: history + 128,
                history_tokens: Some(history),
                history_sent_tokens: Some(sent),
                due_at: None,
            }),
            ..RequestRecord::fixture()
        }
    }

    fn kinds(flags: &[Flag]) -> Vec<&str> {
        flags.iter().map(|f| f.kind.name()).collect()
    }

    #[test]
    fn the_first_turn_that_diverged_by_its_send_is_named() {
        let mut t = ReplayTally::default();
        t.add(&turn(0, 1, 10.0, (128, 128)), 128, 128, 64);
        t.add(&turn(1, 2, 12.0, (256, 64)), 256, 128, 64);
        t.add(&turn(0, 2, 11.0, (256, 48)), 256, 120, 64);
        let flags = t.flags(64);
        assert_eq!(kinds(&flags), ["history-diverged"]);
        let m = &flags[0].message;
        assert!(m.starts_with("2 of 3 turns"), "{m}");
        assert!(m.contains("(2 of the point's agent chains)"), "{m}");
        assert!(
            m.contains("the first, session 0, turn 2, began with 48 of the 256"),
            "{m}"
        );
        assert!(
            m.contains("found 248 of their 512 theoretical tokens cached (48.4%; 2 of them"),
            "{m}"
        );
    }

    #[test]
    fn no_prefix_hits_needs_every_promising_request_to_find_nothing() {
        let none = |n: usize, cached: u64| {
            let mut t = ReplayTally::default();
            for i in 0..n {
                t.add(
                    &turn(0, i as u32 + 1, i as f64, (128, 128)),
                    128,
                    cached,
                    64,
                );
            }
            // A first turn promises nothing: it is not counted.
            t.add(&RequestRecord::fixture(), 0, 0, 64);
            kinds(&t.flags(64)).contains(&"no-prefix-hits")
        };
        assert!(none(3, 0));
        // A chat template's head, within the tolerance, is no hit.
        assert!(none(3, 64));
        assert!(!none(3, 65));
        assert!(!none(1, 0), "one request says too little");
        // Diverged turns are the replay's: they leave the server's verdict to the others.
        let mut t = ReplayTally::default();
        t.add(&turn(0, 1, 1.0, (128, 64)), 128, 0, 64);
        t.add(&turn(0, 2, 2.0, (256, 64)), 256, 0, 64);
        assert_eq!(kinds(&t.flags(64)), ["history-diverged"]);
    }

    #[test]
    fn in_flight_below_the_concurrency_asked_is_client_limited() {
        let span = |round: u32, at: f64, end_s: f64| RequestRecord {
            round,
            sent_at: at,
            end_s: Some(end_s),
            ..RequestRecord::fixture()
        };
        // Two workers' worth of requests, each 1 s, where 3 were asked.
        let mut f = InFlight::new(3);
        for i in 0..4 {
            f.add(&span(0, f64::from(i / 2), 1.0));
        }
        let m = f.flag().unwrap().message;
        assert!(
            m.contains("3 requests in flight asked, at most 2 achieved (mean 2"),
            "{m}"
        );
        // 3 of 4 asked: the ramp, not a limit.
        let mut f = InFlight::new(4);
        for i in 0..6 {
            f.add(&span(0, f64::from(i / 3), 1.0));
        }
        assert!(f.flag().is_none());
        // A failed request holds no span: nothing is concluded.
        let mut f = InFlight::new(3);
        f.add(&span(0, 0.0, 1.0));
        f.add(&RequestRecord {
            end_s: None,
            ..RequestRecord::fixture()
        });
        assert!(f.flag().is_none());
    }

    /// A turn sent `late` seconds after it was due.
    fn late_turn(late: f64) -> RequestRecord {
        let mut r = turn(0, 0, 1000.0 + late, (0, 0));
        if let Some(j) = r.job.as_mut() {
            j.due_at = Some(1000.0);
        }
        r
    }

    /// One turn in a hundred past 50 ms is the client's tail, two are a client too slow for
    /// the trace: the flag says how many, of how many, and the latest.
    #[test]
    fn agent_turns_late_past_one_in_a_hundred_are_client_limited() {
        let mut t = TurnLateness::new(4);
        for k in 0..99 {
            t.add(&late_turn(0.001 * f64::from(k % 5)));
        }
        t.add(&late_turn(0.2));
        assert!(t.flag().is_none());
        t.add(&late_turn(0.3));
        let f = t.flag().expect("client-limited");
        assert_eq!(f.kind, FlagKind::ClientLimited);
        assert!(
            f.message
                .contains("2 of 101 turns went out more than 50 ms"),
            "{}",
            f.message
        );
        assert!(
            f.message
                .contains("(the latest 300 ms), at 4 live sessions asked"),
            "{}",
            f.message
        );
        // One late turn of ten is not a pattern.
        let mut short = TurnLateness::new(1);
        for k in 0..10 {
            short.add(&late_turn(if k == 3 { 0.4 } else { 0.002 }));
        }
        assert!(short.flag().is_none());
        // Records without a due time (other loads, older files) are not judged.
        let mut none = TurnLateness::new(0);
        none.add(&turn(0, 0, 1000.0, (0, 0)));
        assert!(none.flag().is_none());
    }
}
