//! Whether an agent's turn re-sent its history exactly: each turn's prompt as sent against
//! the previous turn's as sent, over the leading blocks the trace says it keeps. servebench's
//! own replays carry it byte for byte; a replay that trims or rewrites it (AIPerf's
//! reconstruction re-sent each turn with the previous user message trimmed: InferenceX's
//! hit-rate anomaly) leaves the server nothing to find past the change, however high the
//! theoretical hit, and its records say so (`JobTurn::history_sent_tokens`, flagged
//! `history-diverged`).
//!
//! `SERVEBENCH_TEST_TRIM_HISTORY=1` makes this client that faulty replay, for the tests
//! that prove the check: each turn goes out with the previous turn's new blocks cut to
//! their first half. Only the bytes sent change; the check compares those bytes.
//!
//! A prompt here is its blocks' shared texts ([`Prompt`]): the copy kept of the last one
//! sent holds references, not its text again.

use crate::prompt::pieces::Prompt;

/// One agent's chain of turns: its last prompt as sent.
#[derive(Debug, Default)]
pub(super) struct History {
    last: Option<Last>,
    trim: bool,
}

#[derive(Debug)]
struct Last {
    text: Prompt,
    /// Its blocks as made: where each one's text ends (bytes) and its tokens.
    ends: Vec<usize>,
    tokens: Vec<u32>,
    /// Leading blocks it shared with the turn before it (the rest were its new message).
    shared: usize,
}

/// What a turn carried of its previous turn's prompt, in the trace's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Carried {
    /// The tokens of the blocks the trace says it keeps.
    pub history_tokens: u64,
    /// Of those, the tokens its prompt as sent began with, byte for byte.
    pub sent_tokens: u64,
}

impl History {
    pub(super) fn new() -> History {
        History {
            last: None,
            trim: std::env::var_os("SERVEBENCH_TEST_TRIM_HISTORY").is_some_and(|v| v == "1"),
        }
    }

    /// The prompt a turn sends: `built`, made of its blocks (the test fault trims the
    /// previous turn's new blocks in it). `shared`: its leading blocks kept from that turn.
    pub(super) fn outgoing(&self, built: &Prompt, shared: usize) -> Prompt {
        let Some(l) = self.last.as_ref().filter(|_| self.trim) else {
            return built.clone();
        };
        let kept = shared.min(l.ends.len());
        if l.shared >= kept {
            return built.clone();
        }
        let start = l.shared.checked_sub(1).map_or(0, |j| l.ends[j]);
        let end = l.ends[kept - 1].min(built.len());
        let mut cut = start + end.saturating_sub(start) / 2;
        while cut < end && !built.is_char_boundary(cut) {
            cut += 1;
        }
        if cut >= end {
            return built.clone();
        }
        let mut out = built.slice(0, cut);
        out.append(&built.slice(end, built.len()));
        out
    }

    /// Records a turn's prompt as `sent` (`built` as its blocks made it, whose ends and
    /// tokens are `blocks`; `shared` leading blocks kept from the turn before): what it
    /// carried of the previous turn's prompt (None for the chain's first turn).
    pub(super) fn record(
        &mut self,
        sent: Prompt,
        built: &Prompt,
        (ends, tokens): (&[usize], &[u32]),
        shared: usize,
    ) -> Option<Carried> {
        let carried = self.last.as_ref().map(|l| {
            let same = sent.common_prefix(&l.text).min(sent.common_prefix(built));
            let n = shared.min(l.ends.len()).min(ends.len());
            let mut c = Carried {
                history_tokens: 0,
                sent_tokens: 0,
            };
            let mut whole = true;
            for j in 0..n {
                // Only the last block of a prompt is partial: the two turns' shared blocks
                // are the same text up to the shorter one's end.
                let t = u64::from(l.tokens[j].min(tokens[j]));
                c.history_tokens += t;
                whole &= l.ends[j].min(ends[j]) <= same;
                if whole {
                    c.sent_tokens += t;
                }
            }
            c
        });
        self.last = Some(Last {
            text: sent,
            ends: ends.to_vec(),
            tokens: tokens.to_vec(),
            shared,
        });
        carried
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three turns of 2, 4 and 6 blocks of 4 bytes ("aaaa", "bbbb", ...), each keeping the
    /// one before it.
    fn turn(n: usize) -> (Prompt, Vec<usize>, Vec<u32>) {
        let mut text = Prompt::default();
        for i in 0..n {
            text.push(char::from(b'a' + i as u8).to_string().repeat(4).into());
        }
        let ends = (1..=n).map(|i| i * 4).collect();
        (text, ends, vec![16; n])
    }

    #[test]
    fn an_exact_replay_carries_its_whole_history() {
        let mut h = History::default();
        let (t, e, k) = turn(2);
        assert_eq!(h.record(h.outgoing(&t, 0), &t, (&e, &k), 0), None);
        let (t, e, k) = turn(4);
        let c = h.record(h.outgoing(&t, 2), &t, (&e, &k), 2).unwrap();
        assert_eq!((c.history_tokens, c.sent_tokens), (32, 32));
    }

    #[test]
    fn a_trimmed_previous_message_is_found_where_it_was_cut() {
        let mut h = History {
            last: None,
            trim: true,
        };
        let (t, e, k) = turn(2);
        let sent = h.outgoing(&t, 0);
        assert_eq!(
            sent.render(),
            t.render(),
            "a first turn has nothing to trim"
        );
        h.record(sent, &t, (&e, &k), 0);
        let (t, e, k) = turn(4);
        // The previous turn's new blocks (both of them, 8 bytes) lose their second half.
        let sent = h.outgoing(&t, 2);
        assert_eq!(sent.render(), "aaaaccccdddd");
        let c = h.record(sent, &t, (&e, &k), 2).unwrap();
        assert_eq!((c.history_tokens, c.sent_tokens), (32, 16));
        // The next turn trims blocks 2-3 and re-sends block 1 whole: the server cached
        // "aaaacccc...", so only block 0 is history sent as it was.
        let (t, e, k) = turn(6);
        let sent = h.outgoing(&t, 4);
        assert_eq!(sent.render(), "aaaabbbbcccceeeeffff");
        let c = h.record(sent, &t, (&e, &k), 4).unwrap();
        assert_eq!((c.history_tokens, c.sent_tokens), (64, 16));
    }
}
