//! Verification of requests that share prompt prefixes by design (shared-prefix groups,
//! session histories): each one's expected cache hit follows from what was sent before it,
//! and the server's own `cached_tokens` says whether it happened.
//!
//! The rule is causal: a server caches a prompt's tokens once its prefill has ended, and the
//! first output token arrives after that. So a request sent after an earlier request of its
//! group had its first token must find the group's shared tokens cached; a request sent before
//! any other of its group could not have found anything; one sent while an earlier request was
//! still in prefill is not judged (it may or may not hit). Nor is a group's first request when
//! a sibling was sent before its first token: the two may reach the server (a router, a queue
//! that orders by prefix) in the other order, and the first one sent then really finds the
//! prefix its sibling left. Only a request no sibling could have overtaken must miss.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{CacheShare, Flag, PrefixCacheRow, RequestRecord};

use super::verify::COLD_TOLERATED_CACHED_TOKENS;

/// Tokens a hit may fall short of the shared part (page granularity, the last token that is
/// always recomputed, a token merged across the join), at most half the shared part.
pub(crate) const SHARE_SHORTFALL_TOKENS: u64 = 64;

/// What the shared-prefix requests of a point found.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ShareVerdict {
    /// Indexes (into the slice given) of requests whose numbers must not be averaged in.
    pub contaminated: Vec<usize>,
    pub flags: Vec<Flag>,
    pub rows: Vec<PrefixCacheRow>,
}

/// How one request's cache count was judged.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Judgement {
    Hit,
    Miss,
    ColdAsExpected,
    Unexpected,
    NotJudged,
}

/// Judges every successful request that carries a [`CacheShare`](servebench_model::results::records::CacheShare).
pub(crate) fn verify_shares(requests: &[&RequestRecord]) -> ShareVerdict {
    let mut v = ShareVerdict::default();
    let shared: Vec<(usize, &RequestRecord)> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| r.error.is_none() && r.share.is_some())
        .map(|(i, r)| (i, *r))
        .collect();
    if shared.is_empty() {
        return v;
    }
    let sessions = shared
        .iter()
        .any(|(_, r)| r.share.as_ref().is_some_and(|s| s.turn.is_some()));
    let timing = GroupTiming::of(&shared);
    let mut tally = Tally {
        sessions,
        ..Tally::default()
    };
    for (i, r) in &shared {
        tally.add(*i, r, &timing);
    }
    tally.average_rows();
    v.flags = tally.flags(shared.len());
    v.contaminated = tally.contaminated;
    v.rows = tally.rows.into_values().collect();
    v
}

/// Per round, group and worker: the earliest send, and the earliest first token (a
/// request's own first token comes after its send, so taking it into the minimum changes
/// nothing). Behind a router each worker has its own cache: a group's prefix is held by
/// the workers its requests went to, so the rule holds per worker (the router's log names
/// it; without one, `worker` is None and the whole server is one).
type GroupKey<'a> = (u32, u32, Option<&'a str>);

/// When the requests of each group were sent and got their first tokens.
struct GroupTiming<'a> {
    /// Per round, group and worker: the earliest send and the earliest first token.
    earliest: HashMap<GroupKey<'a>, (f64, f64)>,
    /// Per round, group and worker: every send, in order.
    sends: HashMap<GroupKey<'a>, Vec<f64>>,
    /// Per round and group, on any worker: the earliest first token.
    anywhere: HashMap<(u32, u32), f64>,
}

impl<'a> GroupTiming<'a> {
    /// Collects the timing of the shared-prefix requests given.
    fn of(shared: &[(usize, &'a RequestRecord)]) -> Self {
        let mut earliest: HashMap<GroupKey<'a>, (f64, f64)> = HashMap::new();
        let mut sends: HashMap<GroupKey<'a>, Vec<f64>> = HashMap::new();
        let mut anywhere: HashMap<(u32, u32), f64> = HashMap::new();
        for (_, r) in shared {
            let group = r.share.as_ref().expect("filtered").group;
            let e = earliest
                .entry((r.round, group, cache_holder(r)))
                .or_insert((f64::INFINITY, f64::INFINITY));
            e.0 = e.0.min(r.sent_at);
            sends
                .entry((r.round, group, cache_holder(r)))
                .or_default()
                .push(r.sent_at);
            let first_token = first_token_at(r).unwrap_or(f64::INFINITY);
            e.1 = e.1.min(first_token);
            let a = anywhere.entry((r.round, group)).or_insert(f64::INFINITY);
            *a = a.min(first_token);
        }
        for v in sends.values_mut() {
            v.sort_by(f64::total_cmp);
        }
        Self {
            earliest,
            sends,
            anywhere,
        }
    }
}

/// What the judged requests add up to, per row (the group, or the session turn).
#[derive(Default)]
struct Tally<'a> {
    /// Rows are session turns (else shared-prefix groups).
    sessions: bool,
    rows: BTreeMap<u32, PrefixCacheRow>,
    /// Per row: the shared tokens owed and the tokens found cached, summed over must-hits.
    sums: BTreeMap<u32, (f64, f64)>,
    /// (row key, shared tokens, cached) of each miss.
    misses: Vec<(u32, u64, u64)>,
    /// (row key, cached) of each unexpected hit.
    unexpected: Vec<(u32, u64)>,
    /// Requests that carried no cached_tokens.
    unreported: usize,
    /// (row key, worker) of each request the router sent away from its prefix.
    routed_away: Vec<(u32, String)>,
    workers: BTreeMap<u32, BTreeSet<&'a str>>,
    /// Indexes of requests whose numbers must not be averaged in.
    contaminated: Vec<usize>,
}

impl<'a> Tally<'a> {
    /// Judges request `i` and counts it in its row.
    fn add(&mut self, i: usize, r: &'a RequestRecord, timing: &GroupTiming<'a>) {
        let share = r.share.as_ref().expect("filtered");
        let key = if self.sessions {
            share.turn.unwrap_or(0)
        } else {
            share.group
        };
        let sessions = self.sessions;
        let row = self.rows.entry(key).or_insert_with(|| PrefixCacheRow {
            group: (!sessions).then_some(key),
            turn: sessions.then_some(key),
            requests: 0,
            must_hit: 0,
            hits: 0,
            must_miss: 0,
            unexpected: 0,
            expected_cached_tokens: None,
            cached_tokens: None,
            workers: None,
            routed_away: 0,
        });
        if let Some(w) = cache_holder(r) {
            self.workers.entry(key).or_default().insert(w);
        }
        // A missing count is not a 0: the runner fills 0 only where the server said it omits
        // zeros (SGLang with --enable-cache-report, `fill_omitted_cached`).
        let Some(cached) = r.cached_tokens else {
            self.unreported += 1;
            return;
        };
        row.requests += 1;
        let (first_sent, first_token) = timing.earliest[&(r.round, share.group, cache_holder(r))];
        let owed = share.shared_tokens > 0 && first_token <= r.sent_at;
        if let Some(w) = cache_holder(r)
            && share.shared_tokens > 0
            && !owed
            && timing.anywhere[&(r.round, share.group)] <= r.sent_at
        {
            row.routed_away += 1;
            self.routed_away.push((key, w.to_string()));
        }
        // Sent first, and no sibling sent before its first token (its prefill had ended by
        // then): none could have been served ahead of it. Without a first token (not
        // streamed), any sibling might have.
        let own_first_token = first_token_at(r).unwrap_or(f64::INFINITY);
        let group_sends = &timing.sends[&(r.round, share.group, cache_holder(r))];
        let sent_before = group_sends.partition_point(|t| *t < own_first_token);
        let first = r.sent_at <= first_sent && sent_before <= 1;
        let judgement = judge(share, cached, owed, first);
        if owed {
            row.must_hit += 1;
            let s = self.sums.entry(key).or_default();
            s.0 += share.shared_tokens as f64;
            s.1 += cached as f64;
        }
        match judgement {
            Judgement::Hit => row.hits += 1,
            Judgement::Miss => self.misses.push((key, share.shared_tokens, cached)),
            Judgement::ColdAsExpected => row.must_miss += 1,
            Judgement::Unexpected => {
                if !owed {
                    row.must_miss += 1;
                }
                row.unexpected += 1;
                self.unexpected.push((key, cached));
                self.contaminated.push(i);
            }
            Judgement::NotJudged => {}
        }
    }

    /// Fills each row's mean expected and found cached tokens, and its worker count.
    fn average_rows(&mut self) {
        for (key, row) in self.rows.iter_mut() {
            if let Some((expected, cached)) = self.sums.get(key)
                && row.must_hit > 0
            {
                row.expected_cached_tokens = Some(expected / row.must_hit as f64);
                row.cached_tokens = Some(cached / row.must_hit as f64);
            }
        }
        for (key, ws) in &self.workers {
            if let Some(row) = self.rows.get_mut(key) {
                row.workers = Some(ws.len());
            }
        }
    }

    /// The flags the tally raises; `shared` is how many shared-prefix requests there were.
    fn flags(&self, shared: usize) -> Vec<Flag> {
        let mut flags = Vec::new();
        let sessions = self.sessions;
        let what = if sessions { "turn" } else { "group" };
        let must_hit: usize = self.rows.values().map(|r| r.must_hit).sum();
        if !self.misses.is_empty() {
            let (key, shared_tokens, cached) = self.misses[0];
            flags.push(Flag::new(
                FlagKind::PrefixCacheMiss,
                format!(
                    "{} of {must_hit} requests that had to find {} cached found less (first: {what} {key}, {cached} of {shared_tokens} tokens): \
                     the server evicted, flushed or never cached it. They are kept in the numbers: the server served them that slowly",
                    self.misses.len(),
                    if sessions {
                        "their conversation's history"
                    } else {
                        "their group's prefix"
                    },
                ),
            ));
        }
        if !self.unexpected.is_empty() {
            let (key, cached) = self.unexpected[0];
            flags.push(Flag::new(
                FlagKind::UnexpectedCacheHit,
                format!(
                    "{} requests found more cached than their {what} could have left there (first: {what} {key}, {cached} tokens): \
                     prompts of another point or run were in the cache; they are excluded from this point's numbers",
                    self.unexpected.len()
                ),
            ));
        }
        if self.unreported > 0 {
            flags.push(Flag::new(
                FlagKind::CacheUnverified,
                format!(
                    "{} of {shared} requests carried no cached_tokens, so their expected cache hits could not be verified \
                     (OpenAI APIs report it only when the server is started to: SGLang --enable-cache-report, vLLM --enable-prompt-tokens-details)",
                    self.unreported
                ),
            ));
        }
        if let Some((key, w)) = self.routed_away.first() {
            let judged: usize = self.rows.values().map(|r| r.must_hit + r.routed_away).sum();
            flags.push(Flag::new(
                FlagKind::PrefixRoutedAway,
                format!(
                    "the router sent {} of {judged} requests to a worker without {} while another worker held it (first: {what} {key} to {w}): \
                     each prefilled it again there",
                    self.routed_away.len(),
                    if sessions {
                        "their conversation's history"
                    } else {
                        "their group's prefix"
                    },
                ),
            ));
        }
        flags
    }
}

/// Judges one request's cache count: `owed` when a sibling's first token came before its
/// send, `first` when no sibling could have been served ahead of it.
fn judge(share: &CacheShare, cached: u64, owed: bool, first: bool) -> Judgement {
    if owed {
        let short = SHARE_SHORTFALL_TOKENS.min(share.shared_tokens / 2);
        if cached + short < share.shared_tokens {
            Judgement::Miss
        } else if cached > share.reusable_tokens + COLD_TOLERATED_CACHED_TOKENS {
            Judgement::Unexpected
        } else {
            Judgement::Hit
        }
    } else if first {
        if cached > COLD_TOLERATED_CACHED_TOKENS {
            Judgement::Unexpected
        } else {
            Judgement::ColdAsExpected
        }
    } else {
        Judgement::NotJudged
    }
}

/// The worker whose cache a request's prompt went through: a disaggregated deployment's
/// prefill worker, else the worker the router sent it to (None: the server is one).
fn cache_holder(r: &RequestRecord) -> Option<&str> {
    r.prefill_worker.as_deref().or(r.worker.as_deref())
}

/// Unix time the request's first output token arrived.
fn first_token_at(r: &RequestRecord) -> Option<f64> {
    r.chunks
        .iter()
        .find(|c| c.tokens > 0)
        .map(|c| r.sent_at + c.t_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::*;

    /// A request of `group` sent at `sent` whose first token came 0.1 s later.
    fn rec(group: u32, sent: f64, shared: u64, cached: u64) -> RequestRecord {
        RequestRecord {
            point: "p1".into(),
            sent_at: sent,
            chunks: vec![Chunk::new(0.1, 1)],
            end_s: Some(0.2),
            prompt_tokens: Some(shared + 100),
            completion_tokens: Some(4),
            cached_tokens: Some(cached),
            finish_reason: Some("length".into()),
            share: Some(CacheShare {
                group,
                turn: None,
                shared_tokens: shared,
                reusable_tokens: shared,
            }),
            ..RequestRecord::fixture()
        }
    }

    #[test]
    fn hits_follow_from_what_was_sent_before() {
        let rs = [
            rec(0, 0.0, 1000, 0),    // first of group 0
            rec(0, 0.05, 1000, 0),   // sent during the first's prefill: not judged
            rec(0, 1.0, 1000, 999),  // after: a hit
            rec(1, 0.0, 1000, 0),    // first of group 1
            rec(1, 1.0, 1000, 10),   // after: a miss (flushed)
            rec(2, 0.0, 1000, 1000), // first of group 2, yet cached: contamination
        ];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let v = verify_shares(&refs);
        assert_eq!(v.contaminated, vec![5]);
        let kinds: Vec<_> = v.flags.iter().map(|f| f.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![FlagKind::PrefixCacheMiss, FlagKind::UnexpectedCacheHit]
        );
        assert!(
            v.flags[0].message.contains("1 of 2"),
            "{}",
            v.flags[0].message
        );
        assert!(
            v.flags[0].message.contains("group 1, 10 of 1000"),
            "{}",
            v.flags[0].message
        );
        let g0 = &v.rows[0];
        // Its first request had a sibling sent during its prefill: either could have been
        // served first, so neither must miss.
        assert_eq!(
            (g0.group, g0.requests, g0.must_hit, g0.hits, g0.must_miss),
            (Some(0), 3, 1, 1, 0)
        );
        assert_eq!(g0.cached_tokens, Some(999.0));
        let g1 = &v.rows[1];
        assert_eq!((g1.must_hit, g1.hits), (1, 0));
        assert_eq!((v.rows[2].must_miss, v.rows[2].unexpected), (1, 1));
    }

    /// Two requests of a group sent 0.3 ms apart reach the worker in the other order (the
    /// router's own timing): the first sent finds the prefix its sibling left. That is a real
    /// hit, not contamination: it stays in the numbers, with no flag and no wrong cause.
    #[test]
    fn a_sibling_sent_close_behind_may_be_served_first_and_then_a_hit_is_no_contamination() {
        let on = |w: &str, r: RequestRecord| RequestRecord {
            worker: Some(w.into()),
            ..r
        };
        let rs = [
            // Sent first, served second: its 1000 cached tokens are its sibling's prefix.
            on("worker0", rec(0, 0.0, 1000, 1000)),
            on("worker0", rec(0, 0.0003, 1000, 0)),
            // Another group, alone until its first token: it must miss, and does.
            on("worker1", rec(1, 0.0, 1000, 0)),
            on("worker1", rec(1, 1.0, 1000, 1000)),
        ];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let v = verify_shares(&refs);
        assert!(v.contaminated.is_empty(), "{:?}", v.contaminated);
        assert!(
            !v.flags
                .iter()
                .any(|f| f.kind == FlagKind::UnexpectedCacheHit),
            "{:?}",
            v.flags
        );
        assert_eq!((v.rows[0].must_miss, v.rows[0].unexpected), (0, 0));
        assert_eq!(
            (v.rows[1].must_miss, v.rows[1].must_hit, v.rows[1].hits),
            (1, 1, 1)
        );
    }

    /// Behind a router each worker has its own cache: a hit is owed only where the group's
    /// prefix was prefilled; a request sent to another worker is routed away, not a miss.
    #[test]
    fn behind_a_router_hits_are_owed_per_worker() {
        let on = |w: &str, r: RequestRecord| RequestRecord {
            worker: Some(w.into()),
            ..r
        };
        let rs = [
            on("worker0", rec(0, 0.0, 1000, 0)), // first of group 0, on worker0
            on("worker1", rec(0, 1.0, 1000, 0)), // worker1 never saw it: routed away
            on("worker0", rec(0, 2.0, 1000, 1000)), // back on worker0: a hit
            on("worker1", rec(0, 3.0, 1000, 999)), // worker1 holds it now: a hit
            on("worker0", rec(1, 0.0, 1000, 0)), // group 1 stays on worker0
            on("worker0", rec(1, 1.0, 1000, 10)), // owed there, missed: a real miss
        ];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let v = verify_shares(&refs);
        let g0 = &v.rows[0];
        assert_eq!(
            (
                g0.must_hit,
                g0.hits,
                g0.must_miss,
                g0.routed_away,
                g0.workers
            ),
            (2, 2, 2, 1, Some(2))
        );
        let g1 = &v.rows[1];
        assert_eq!(
            (g1.must_hit, g1.hits, g1.routed_away, g1.workers),
            (1, 0, 0, Some(1))
        );
        let kinds: Vec<_> = v.flags.iter().map(|f| f.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![FlagKind::PrefixCacheMiss, FlagKind::PrefixRoutedAway]
        );
        assert!(
            v.flags[1]
                .message
                .starts_with("the router sent 1 of 4 requests")
                && v.flags[1].message.contains("group 0 to worker1"),
            "{}",
            v.flags[1].message
        );
    }
}
