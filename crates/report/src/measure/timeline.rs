//! The measured requests' timeline in bounded memory, for the point-level figures that need
//! every request's place in time: the busy time (Little's law), the most requests in flight
//! at once, and the most output tokens in a one-second bucket of the window.
//!
//! Every event is kept (the figures exact) up to a cap; past it, events are counted in
//! [`SLOT_S`] slots of wall-clock time, so memory grows with the point's duration (one small
//! entry per occupied slot), not with its requests, and the figures from slots say so
//! ([`Estimate::Slots`](servebench_model::results::records::Estimate::Slots)).

use std::collections::BTreeMap;

/// Events (request spans and token chunks) kept exactly: 16 bytes each, 2 MiB at the cap.
pub(crate) const EXACT_EVENTS: usize = 131_072;

/// Width of a slot past the cap, seconds.
pub(crate) const SLOT_S: f64 = 0.01;

/// The requests' spans and token chunks.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    cap: usize,
    exact: Option<Events>,
    /// Past the cap: per slot (unix time / [`SLOT_S`], floored), what happened in it.
    slots: BTreeMap<i64, Slot>,
    /// Past the cap: the sum of the spans' lengths, seconds.
    busy_s: f64,
}

#[derive(Debug, Clone, Default)]
struct Events {
    /// (order key, sent at, seconds to the end) of each request with an end.
    spans: Vec<(u64, f64, f64)>,
    /// (unix time, tokens) of each token chunk of a successful request.
    tokens: Vec<(f64, u32)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    starts: u32,
    ends: u32,
    tokens: u64,
}

/// A figure and whether it came from slots rather than every event.
pub(crate) type Figure<T> = (T, bool);

impl Default for Timeline {
    fn default() -> Self {
        Timeline::with_cap(EXACT_EVENTS)
    }
}

impl Timeline {
    /// Keeps up to `cap` events exactly (tests pass a small one).
    pub(crate) fn with_cap(cap: usize) -> Self {
        Timeline {
            cap,
            exact: Some(Events::default()),
            slots: BTreeMap::new(),
            busy_s: 0.0,
        }
    }

    fn slot(&mut self, at: f64) -> &mut Slot {
        self.slots.entry((at / SLOT_S).floor() as i64).or_default()
    }

    /// A request sent at `sent_at` (unix seconds) that ended `end_s` later; `order` places it
    /// among the others (the busy time is summed in that order, as over a sorted slice).
    pub(crate) fn span(&mut self, order: u64, sent_at: f64, end_s: f64) {
        match &mut self.exact {
            Some(e) => {
                e.spans.push((order, sent_at, end_s));
                self.spill();
            }
            None => self.add_span(sent_at, end_s),
        }
    }

    /// `tokens` output tokens that arrived at `at` (unix seconds).
    pub(crate) fn tokens(&mut self, at: f64, tokens: u32) {
        match &mut self.exact {
            Some(e) => {
                e.tokens.push((at, tokens));
                self.spill();
            }
            None => self.slot(at).tokens += u64::from(tokens),
        }
    }

    fn add_span(&mut self, sent_at: f64, end_s: f64) {
        self.busy_s += end_s;
        self.slot(sent_at).starts += 1;
        self.slot(sent_at + end_s).ends += 1;
    }

    /// Past the cap, every kept event goes into the slots.
    fn spill(&mut self) {
        let full = self
            .exact
            .as_ref()
            .is_some_and(|e| e.spans.len() + e.tokens.len() > self.cap);
        if !full {
            return;
        }
        let Some(mut e) = self.exact.take() else {
            return;
        };
        e.spans.sort_by_key(|s| s.0);
        for (_, sent, end) in e.spans {
            self.add_span(sent, end);
        }
        for (at, n) in e.tokens {
            self.slot(at).tokens += u64::from(n);
        }
    }

    /// The sum of every span's length, seconds (in order, below the cap).
    pub(crate) fn busy_s(&self) -> f64 {
        match &self.exact {
            Some(e) => {
                let mut spans: Vec<&(u64, f64, f64)> = e.spans.iter().collect();
                spans.sort_by_key(|s| s.0);
                spans.iter().map(|s| s.2).sum()
            }
            None => self.busy_s,
        }
    }

    /// The most requests in flight at once: a sweep over [sent, end), ends before starts on
    /// ties. From slots: requests that start in a slot count as in flight together with those
    /// that end in it (an upper bound).
    pub(crate) fn max_in_flight(&self) -> Figure<usize> {
        let Some(e) = &self.exact else {
            let (mut now, mut most) = (0i64, 0i64);
            for s in self.slots.values() {
                now += i64::from(s.starts);
                most = most.max(now);
                now -= i64::from(s.ends);
            }
            return (most.max(0) as usize, true);
        };
        let mut events: Vec<(f64, i32)> = e
            .spans
            .iter()
            .flat_map(|&(_, sent, end)| [(sent, 1), (sent + end, -1)])
            .collect();
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut now, mut most) = (0i32, 0i32);
        for (_, d) in events {
            now += d;
            most = most.max(now);
        }
        (most.max(0) as usize, false)
    }

    /// The most output tokens in any one-second bucket of the window starting at `start`
    /// (unix seconds) and lasting `span` seconds, per second. From slots: each slot's tokens
    /// go to the bucket its start falls in.
    pub(crate) fn peak_output(&self, start: f64, span: f64) -> Figure<f64> {
        let buckets = span.ceil().max(1.0) as usize;
        let mut tokens = vec![0u64; buckets];
        let mut put = |at: f64, n: u64| {
            let i = ((at - start).max(0.0) as usize).min(buckets - 1);
            tokens[i] += n;
        };
        let estimated = match &self.exact {
            Some(e) => {
                for &(at, n) in &e.tokens {
                    put(at, u64::from(n));
                }
                false
            }
            None => {
                for (&k, s) in &self.slots {
                    put(k as f64 * SLOT_S, s.tokens);
                }
                true
            }
        };
        let most = tokens.into_iter().max().unwrap_or(0) as f64;
        (most / span.min(1.0), estimated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests every 1 ms from t = 1000 s, each 50 ms long with 10 tokens at its end.
    fn fill(t: &mut Timeline, n: u64) {
        for i in 0..n {
            let sent = 1000.0 + i as f64 * 0.001;
            t.span(i, sent, 0.05);
            t.tokens(sent + 0.05, 10);
        }
    }

    #[test]
    fn past_the_cap_slots_bound_the_exact_figures() {
        let (mut exact, mut slotted) = (Timeline::with_cap(1 << 20), Timeline::with_cap(100));
        fill(&mut exact, 5_000);
        fill(&mut slotted, 5_000);
        let (most, est) = exact.max_in_flight();
        assert!(!est);
        // 50 ms spans every 1 ms: 50 in flight (an end at the same time as a start goes first).
        assert!((50..=51).contains(&most), "{most}");
        let (upper, est) = slotted.max_in_flight();
        assert!(est);
        // Starts within a 10 ms slot overlap: at most one slot's starts too many (10, or 11
        // where floating-point times fall on a slot's edge).
        assert!(upper >= most && upper <= most + 11, "{upper} vs {most}");
        assert!((exact.busy_s() - slotted.busy_s()).abs() < 1e-9);
        // 1,000 requests' tokens per second: 10,000 tok/s; a slot's tokens (100) either way.
        let window = (1000.0, 5.05);
        let (peak, est) = exact.peak_output(window.0, window.1);
        assert!(!est);
        let (approx, est) = slotted.peak_output(window.0, window.1);
        assert!(est);
        assert!((peak - 10_000.0).abs() <= 10.0, "{peak}");
        assert!((approx - peak).abs() <= 2.0 * 100.0, "{approx} vs {peak}");
    }
}
