//! A point's summary from its request records: success and error counts, cache verification,
//! aggregates and validity flags. Pure: the runner hands in what it recorded, this decides what
//! the numbers are and what doubts them.

use indexmap::IndexMap;

use servebench_model::catalog::FlagKind;
use servebench_model::catalog::Method;
use servebench_model::results::jobs::{JobsView, TraceCache};
use servebench_model::results::records::{
    ChunkTokens, Flag, PointStatus, PrefixCacheRow, RequestRecord, RequestRole, Stat,
};
use servebench_model::spec::types::CachePolicy;
use servebench_model::spec::types::{Experiment, Measure};

use super::metrics::{self, Columns};
use super::server_view::Finished;
use super::system::SystemFold;
use super::{shared, speculative, spread, twopoint, verify};

/// What a point's records add up to.
#[derive(Debug, Clone, PartialEq)]
pub struct PointSummary {
    /// Measured requests that succeeded / failed (both requests of a two-point pair count).
    pub ok: usize,
    pub errors: usize,
    /// Error counts by kind name (`timeout`, `http`, ...).
    pub error_kinds: IndexMap<String, usize>,
    /// Aggregates of the clean requests, by metric name.
    pub metrics: IndexMap<String, Stat>,
    /// The flags given, then what the records imply (errors, cache verification, spread).
    pub flags: Vec<Flag>,
    /// Fewer requests finished than the point planned, or the run was interrupted.
    pub incomplete: bool,
    /// Failed without a successful request; degraded past the error budget or when incomplete.
    pub status: PointStatus,
    /// Expected against observed cache hits, per shared-prefix group or session turn.
    pub prefix_cache: Vec<PrefixCacheRow>,
    /// A routed deployment: the requests the router sent to each worker (by its log, the
    /// worker's name), as (succeeded, failed): the measured ones and a load point's warm-up
    /// and cool-down, the window the workers' counters cover.
    pub routed: std::collections::BTreeMap<String, (usize, usize)>,
    /// Measured requests the router sent to a worker first and then retried on another, by
    /// the worker it left.
    pub rerouted: std::collections::BTreeMap<String, usize>,
    /// Requests made of a trace's blocks: theoretical hits against the server's.
    pub trace_cache: Option<TraceCache>,
    /// Agent sessions, as the runner set them ([`PointFold::jobs`]).
    pub jobs: Option<JobsView>,
    /// The successful requests' tool calls (None when none was sent tools).
    pub tool_calls: Option<servebench_model::results::tool_calls::ToolCallsView>,
}

/// Summarises the measured records of a point of `exp`. `flags` are what the runner already
/// noticed (flush failures, calibration misses); `interrupted` says the run stopped during it.
/// The same as folding each record into a [`PointFold`] (in any order) and finishing it.
pub fn summarize(
    exp: &Experiment,
    measured: &[RequestRecord],
    flags: Vec<Flag>,
    interrupted: bool,
) -> PointSummary {
    let mut fold = PointFold::new(exp);
    for r in measured {
        fold.add(r);
    }
    fold.finish(exp, flags, interrupted)
}

/// A point's summary built one measured record at a time, as requests finish, in memory that
/// does not grow with their number: counts, error kinds, cache verification and per-metric
/// samples (exact up to a cap, see [`Samples`](super::samples::Samples)), and the system
/// metrics beside them ([`SystemFold`]). Records that are judged against others of the point
/// are kept until the end: both requests of two-point pairs (closed loop, one pair at a time)
/// and requests that share a prefix by design (whether one was owed a hit depends on when the
/// others of its group were sent and answered).
#[derive(Debug, Clone)]
pub struct PointFold {
    two_point: bool,
    verify: bool,
    /// Records judged together at the end.
    deferred: Vec<RequestRecord>,
    /// Measured records folded, and of them the successful ones.
    measured: usize,
    ok: usize,
    /// Per error kind: how many, and the order key of the first (the map is ordered by it).
    error_kinds: IndexMap<String, (usize, u64)>,
    /// The first failed request's message, by order key.
    first_error: Option<(u64, String)>,
    /// Requests sent again after a stale connection, and those of them that failed.
    retried: usize,
    retried_failed: usize,
    /// Requests the cache policy and completeness are judged on (first requests of pairs).
    refs: usize,
    policy: verify::Tally,
    /// Clean requests (successful, not contaminated): their samples and chunk counts.
    clean: Columns,
    clean_count: usize,
    chunks: ChunkTally,
    /// The successful measured requests' token counts (set against the server's own).
    done: Finished,
    /// The point's system metrics.
    pub system: SystemFold,
    /// Measured requests by the worker the router sent them to: (succeeded, failed).
    routed: std::collections::BTreeMap<String, (usize, usize)>,
    /// Measured requests retried elsewhere, by the worker they left.
    rerouted: std::collections::BTreeMap<String, usize>,
    /// Measured requests the point plans, when its rounds do not say (an open loop's
    /// schedule); None: `repeat` x `requests` (or users x turns).
    expected: Option<usize>,
    /// Successful requests whose TTFT was shorter than the server's own time to the first
    /// token, and the one shortest against it: (index, TTFT, the server's, seconds).
    below_server: usize,
    worst_below_server: Option<(u32, f64, f64)>,
    /// Successful requests whose server reported its own time to the first token.
    server_timed: usize,
    /// Successful requests whose bytes waited for the client longer than their shortest gap
    /// between tokens, and the one that waited longest: (index, wait, that gap, seconds).
    read_late: usize,
    worst_read_late: Option<(u32, f64, f64)>,
    /// Successful requests that say how long their bytes waited (the kernel stamps arrivals).
    read_timed: usize,
    /// Requests made of a trace's blocks, judged against their theoretical hit (one at a
    /// time: what a request could find follows from what was sent before it, fixed when it
    /// was made). None until the first.
    trace_cache: Option<TraceCache>,
    /// Tokens a trace block stands for (the spec's, or the trace's own as its runner says): a
    /// request's hit is judged against its theoretical one within a block.
    block_tokens: u64,
    /// The cache policy is `as-is`: hits past the theoretical are reported, not excluded.
    as_is: bool,
    /// Agent sessions: the runner's view of the point's sessions.
    pub jobs: Option<JobsView>,
    /// What the successful requests said about thinking (unanswered ones, unknown fields).
    thinking: super::reasoning::ThinkingTally,
    /// What the successful requests' tool calls were (`tool_calls`).
    tools: super::tool_calls::ToolTally,
    /// The successful requests' streams against their budgets, and their usage.
    usage: super::usage::UsageTally,
    /// The clean requests' seconds per output token (E2E normalized interactivity).
    interactivity: super::interactivity::InteractivityTally,
    /// Agent sessions' durations and tokens, from their turns' records.
    sessions: super::sessions::SessionFold,
    /// Trace-block requests' history and hits: the replay's fault or the server's.
    replay: super::replay::ReplayTally,
    /// A closed loop's requests in flight against its concurrency (None for other points).
    in_flight: Option<super::replay::InFlight>,
    /// Agent turns' lateness against the trace's timing.
    lateness: super::replay::TurnLateness,
}

/// How much shorter than the server's own time a client TTFT may be before it is called
/// stamped late: the two clocks' reading grain (seconds).
const BELOW_SERVER_SLACK_S: f64 = 50e-6;

impl PointFold {
    pub fn new(exp: &Experiment) -> PointFold {
        PointFold::with_caps(
            exp,
            super::samples::EXACT_CAP,
            super::timeline::EXACT_EVENTS,
        )
    }

    /// Like [`new`](Self::new), keeping `values` of each metric and `events` of the timeline
    /// exactly (tests pass small ones).
    pub(crate) fn with_caps(exp: &Experiment, values: usize, events: usize) -> PointFold {
        PointFold {
            two_point: matches!(exp.method.resolve(), Measure::TwoPoint { .. }),
            verify: exp.cache.verify,
            deferred: Vec::new(),
            measured: 0,
            ok: 0,
            error_kinds: IndexMap::new(),
            first_error: None,
            retried: 0,
            retried_failed: 0,
            refs: 0,
            policy: verify::Tally::new(exp.cache.policy),
            clean: Columns::with_cap(Method::Streaming, values),
            clean_count: 0,
            chunks: ChunkTally::default(),
            done: Finished::default(),
            system: SystemFold::with_caps(exp, values, events),
            routed: Default::default(),
            rerouted: Default::default(),
            expected: None,
            below_server: 0,
            worst_below_server: None,
            server_timed: 0,
            read_late: 0,
            worst_read_late: None,
            read_timed: 0,
            trace_cache: None,
            block_tokens: match &exp.load {
                Some(servebench_model::spec::load_model::LoadSpec::Trace { trace, .. }) => {
                    u64::from(trace.block_size)
                }
                _ => exp
                    .agentic()
                    .and_then(|a| a.block_size)
                    .map_or(0, u64::from),
            },
            as_is: exp.cache.policy == CachePolicy::AsIs,
            jobs: None,
            thinking: Default::default(),
            tools: Default::default(),
            usage: super::usage::UsageTally::new(exp),
            interactivity: Default::default(),
            sessions: Default::default(),
            replay: Default::default(),
            in_flight: closed_loop(exp)
                .then(|| super::replay::InFlight::new(exp.concurrency.min(exp.requests) as usize)),
            lateness: super::replay::TurnLateness::new(exp.agentic().map_or(0, |a| a.live)),
        }
    }

    /// Says the tokens a trace block stands for, where the trace gives it (the largest of its
    /// sessions'), for the hits' tolerance.
    pub fn set_block_tokens(&mut self, tokens: u32) {
        self.block_tokens = u64::from(tokens);
    }

    /// How far a request made of trace blocks may find more or less than its theoretical hit
    /// before it is counted above or below it: one block (the unit the trace's hits come in;
    /// a server's cache pages are no larger as a rule), and never under
    /// [`verify::COLD_TOLERATED_CACHED_TOKENS`] (a chat template's head, shared by every
    /// prompt, is cached with them).
    fn cache_tolerance(&self) -> u64 {
        self.block_tokens.max(verify::COLD_TOLERATED_CACHED_TOKENS)
    }

    /// Says how many measured requests the point plans (an open loop's schedule counts them).
    pub fn expect(&mut self, requests: usize) {
        self.expected = Some(requests);
    }

    /// Folds one measured record in (records may come in any order).
    /// Counts where the router sent `r` (the worker it names) and nothing else: a load
    /// point's warm-up and cool-down requests are in the workers' own counters too, so the
    /// router's word is compared over the same requests.
    pub fn add_routed(&mut self, r: &RequestRecord) {
        for w in &r.rerouted_from {
            *self.rerouted.entry(w.clone()).or_default() += 1;
        }
        for w in r.worker.iter().chain(&r.prefill_worker) {
            let n = self.routed.entry(w.clone()).or_default();
            if r.error.is_none() {
                n.0 += 1;
            } else {
                n.1 += 1;
            }
        }
    }

    pub fn add(&mut self, r: &RequestRecord) {
        let order = metrics::order_key(r);
        self.measured += 1;
        self.add_routed(r);
        self.system.add(r);
        self.sessions.add(r);
        if let Some(f) = &mut self.in_flight {
            f.add(r);
        }
        self.lateness.add(r);
        match &r.error {
            None => {
                self.ok += 1;
                if r.role == RequestRole::Measure {
                    self.done.add(r);
                }
                self.check_stamp(r);
                self.check_read_wait(r);
                self.thinking.add(r);
                self.tools.add(r);
                self.usage.add(r);
            }
            Some(e) => {
                if r.role == RequestRole::Measure {
                    self.done.add(r);
                }
                let kind = self
                    .error_kinds
                    .entry(e.kind.to_string())
                    .or_insert((0, order));
                kind.0 += 1;
                kind.1 = kind.1.min(order);
                if self.first_error.as_ref().is_none_or(|(o, _)| order < *o) {
                    self.first_error = Some((order, e.message.clone()));
                }
            }
        }
        if r.retried {
            self.retried += 1;
            self.retried_failed += usize::from(r.error.is_some());
        }
        let is_ref = !self.two_point || r.role == RequestRole::TwoPointA;
        self.refs += usize::from(is_ref);
        if self.two_point || r.share.is_some() {
            self.deferred.push(r.clone());
            return;
        }
        if let Some(theoretical) = r.theoretical_cached_tokens {
            let above = self.add_traced(r, theoretical);
            if r.error.is_none() && !(self.verify && above && !self.as_is) {
                self.add_clean(r);
            }
            return;
        }
        // A captured request's literal prompt shares with the replay's earlier ones as the
        // recorded traffic did: its hits are the workload's, not another point's, and no
        // theoretical hit is worked out to judge them by (`cached_tokens` says what it found).
        let contaminated = self.verify && r.captured.is_none() && self.policy.add(r);
        if !contaminated && r.error.is_none() {
            self.add_clean(r);
        }
    }

    /// Counts a request whose TTFT is shorter than the server says it took to the first
    /// token: impossible unless the client stamped its send late.
    fn check_stamp(&mut self, r: &RequestRecord) {
        let Some(server) = r.server_ttft_s else {
            return;
        };
        let Some(ttft) = r.chunks.iter().find(|c| c.tokens > 0).map(|c| c.t_s) else {
            return;
        };
        self.server_timed += 1;
        if ttft + BELOW_SERVER_SLACK_S < server {
            self.below_server += 1;
            let short = server - ttft;
            if self
                .worst_below_server
                .is_none_or(|(_, t, s)| short > s - t)
            {
                self.worst_below_server = Some((r.index, ttft, server));
            }
        }
    }

    /// Counts a request whose bytes waited for the client longer than its shortest gap between
    /// two tokens: tokens that arrived within that wait were read together and share the
    /// later one's arrival stamp.
    fn check_read_wait(&mut self, r: &RequestRecord) {
        let Some(wait) = r.read_wait_s else {
            return;
        };
        self.read_timed += 1;
        let mut times = r.chunks.iter().filter(|c| c.tokens > 0).map(|c| c.t_s);
        let Some(mut last) = times.next() else {
            return;
        };
        let mut gap: Option<f64> = None;
        for t in times {
            let d = t - last;
            if d > 0.0 {
                gap = Some(gap.map_or(d, |g| g.min(d)));
            }
            last = t;
        }
        let Some(gap) = gap else {
            return;
        };
        if wait > gap {
            self.read_late += 1;
            if self.worst_read_late.is_none_or(|(_, w, _)| wait > w) {
                self.worst_read_late = Some((r.index, wait, gap));
            }
        }
    }

    /// Judges a request made of a trace's blocks against `theoretical`, the tokens its
    /// leading blocks already sent could serve; true when the server found more than that
    /// (past what a shared template head explains) and more than its `reachable` hit (what
    /// siblings made after it could have left before its first token): another run's or
    /// point's text was in the cache. Finding less is the server's own behaviour (eviction, a request sent while the
    /// one holding its blocks was in prefill), counted, never excluded.
    fn add_traced(&mut self, r: &RequestRecord, theoretical: u64) -> bool {
        if r.error.is_some() {
            return false;
        }
        let t = self.trace_cache.get_or_insert_with(TraceCache::default);
        let Some(cached) = r.cached_tokens else {
            t.unreported += 1;
            return false;
        };
        // The theoretical hit is in the trace's tokens, the server's in its own: block text
        // sized from a calibration (no `/tokenize` to build it with) comes out a little longer
        // or shorter in the server's tokens, and a cached prefix with it, by no more than the
        // request's own length error when its blocks err alike (they are sized alike). So the
        // tolerance is a block plus that error, measured on the request, never a fixed count.
        let requested = r
            .requested_prompt_tokens
            .or(r.job.as_ref().map(|j| j.context_tokens));
        // A turn that did not carry its history exactly (the client knows: `history-diverged`)
        // is short by the replay's doing, not the tokenizer's: no drift is read from it.
        let diverged = r
            .job
            .as_ref()
            .is_some_and(|j| j.history_sent_tokens < j.history_tokens);
        let error = r
            .prompt_tokens
            .zip(requested)
            .filter(|_| !diverged)
            .map(|(p, q)| p as i64 - q as i64);
        let tolerance = self.cache_tolerance() + error.map_or(0, i64::unsigned_abs);
        let t = self.trace_cache.get_or_insert_with(TraceCache::default);
        t.tolerance_tokens = self.block_tokens.max(verify::COLD_TOLERATED_CACHED_TOKENS);
        if let (Some(e), Some(q)) = (error, requested) {
            t.length_error_min = Some(t.length_error_min.map_or(e, |m| m.min(e)));
            t.length_error_max = Some(t.length_error_max.map_or(e, |m| m.max(e)));
            let share = e.unsigned_abs() as f64 / q.max(1) as f64;
            t.length_error_share_max =
                Some(t.length_error_share_max.map_or(share, |m| m.max(share)));
        }
        t.requests += 1;
        t.prompt_tokens += r.prompt_tokens.unwrap_or(0);
        t.requested_prompt_tokens += r.requested_prompt_tokens.unwrap_or(0);
        t.theoretical_cached_tokens += theoretical;
        t.cached_tokens += cached;
        if cached + tolerance < theoretical {
            t.below += 1;
        }
        // Past the theoretical, but within what siblings made after it and sent before its
        // first token left: served in the other order, a real hit.
        self.replay.add(r, theoretical, cached, tolerance);
        let reachable = r
            .reachable_cached_tokens
            .unwrap_or(theoretical)
            .max(theoretical);
        let above = cached > reachable + tolerance;
        t.reordered += usize::from(!above && cached > theoretical + tolerance);
        t.above += usize::from(above);
        above
    }

    fn add_clean(&mut self, r: &RequestRecord) {
        self.clean_count += 1;
        self.clean.push_request(r);
        self.chunks.add(r);
        self.interactivity.add(r);
    }

    /// The successful measured requests' counts, for [`contradictions`](super::server_view::contradictions).
    pub fn done(&self) -> &Finished {
        &self.done
    }

    /// The point's summary. `flags` are what the runner already noticed; `interrupted` says the
    /// run stopped during it.
    pub fn finish(
        &mut self,
        exp: &Experiment,
        mut flags: Vec<Flag>,
        interrupted: bool,
    ) -> PointSummary {
        // Records judged with their group or pair, in the order the point sent them.
        let mut deferred = std::mem::take(&mut self.deferred);
        deferred.sort_by_key(metrics::order_key);
        let refs: Vec<&RequestRecord> = deferred
            .iter()
            .filter(|r| !self.two_point || r.role == RequestRole::TwoPointA)
            .collect();
        let (contaminated, share_flags, prefix_cache) = self.verify_deferred(&refs);
        let clean: Vec<&RequestRecord> = refs
            .iter()
            .zip(&contaminated)
            .filter(|(r, c)| r.error.is_none() && !**c)
            .map(|(r, _)| *r)
            .collect();
        let (ok, errors) = (self.ok, self.measured - self.ok);
        self.error_kinds.sort_by(|_, a, _, b| a.1.cmp(&b.1));
        let error_kinds: IndexMap<String, usize> = self
            .error_kinds
            .iter()
            .map(|(k, (n, _))| (k.clone(), *n))
            .collect();
        flags.extend(self.failure_flags(errors, &error_kinds));
        if self.verify {
            flags.extend(self.policy.flags());
            flags.extend(share_flags);
        }
        let mut metrics = self.aggregate(&clean, &deferred, &mut flags);
        self.tools.put_metrics(&mut metrics);
        if !self.two_point {
            self.interactivity.put_metrics(&mut metrics);
        }
        if !prefill_is_speed(exp) {
            metrics.shift_remove(servebench_model::catalog::Metric::Prefill.name());
        }
        // At concurrency > 1 per-request spread is queueing by design (the first request waits
        // for nobody, the last for everyone): only a single stream's spread is noise.
        if exp.concurrency == 1 && exp.load.is_none() {
            flags.extend(spread::spread_flags(&metrics));
        }
        flags.extend(speculative::low_acceptance_flag(&metrics));
        flags.extend(self.thinking.flags());
        flags.extend(self.tools.flags());
        flags.extend(self.usage.flags());
        flags.extend(self.client_timing_flags());
        flags.extend(self.trace_cache_flags());
        flags.extend(self.replay.flags(self.cache_tolerance()));
        let per_round = match exp.sessions() {
            Some(s) => s.users as usize * s.turns.unwrap_or(1) as usize,
            None => exp.requests as usize,
        };
        let expected = self.expected.unwrap_or(exp.repeat as usize * per_round);
        let incomplete = interrupted || self.refs < expected;
        if interrupted {
            flags.push(Flag::new(
                FlagKind::Interrupted,
                // The flag's kind already says `interrupted`: the message says how far it got.
                format!(
                    "{} of {expected} requests finished before the run stopped",
                    self.refs
                ),
            ));
        }
        let status = if ok == 0 {
            PointStatus::Failed
        } else if incomplete
            || !exp.error_budget.allows(errors, self.measured)
            // Output nobody can use (broken tool calls) is no answer, as invalid output.
            || flags.iter().any(|f| f.kind.voids_output())
        {
            PointStatus::Degraded
        } else {
            PointStatus::Ok
        };
        PointSummary {
            ok,
            errors,
            error_kinds,
            metrics,
            flags,
            incomplete,
            status,
            prefix_cache,
            routed: std::mem::take(&mut self.routed),
            rerouted: std::mem::take(&mut self.rerouted),
            trace_cache: self.trace_cache.clone(),
            jobs: self.jobs.clone().map(|mut j| {
                let agent = exp.slo.as_ref().and_then(|s| s.agent.as_ref());
                self.sessions.fill(&mut j, agent);
                j
            }),
            tool_calls: self.tools.view(),
        }
    }

    /// Verifies the deferred requests (when verifying): which are contaminated (one flag per
    /// request given), the shared-prefix flags and the prefix-cache rows.
    fn verify_deferred(
        &mut self,
        refs: &[&RequestRecord],
    ) -> (Vec<bool>, Vec<Flag>, Vec<PrefixCacheRow>) {
        let mut contaminated = vec![false; refs.len()];
        if !self.verify {
            return (contaminated, Vec::new(), Vec::new());
        }
        let mut shared = Vec::new();
        for (i, r) in refs.iter().enumerate() {
            if r.share.is_some() {
                shared.push(i);
            } else {
                contaminated[i] = self.policy.add(r);
            }
        }
        let records: Vec<&RequestRecord> = shared.iter().map(|&i| refs[i]).collect();
        let s = shared::verify_shares(&records);
        for i in s.contaminated {
            contaminated[shared[i]] = true;
        }
        (contaminated, s.flags, s.rows)
    }

    /// Flags for failed requests (`errors` of them, by kind) and for stale connections retried.
    fn failure_flags(&self, errors: usize, error_kinds: &IndexMap<String, usize>) -> Vec<Flag> {
        let mut flags = Vec::new();
        if errors > 0 {
            let first = self
                .first_error
                .as_ref()
                .map(|(_, m)| m.clone())
                .unwrap_or_default();
            let kinds: Vec<String> = error_kinds
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            flags.push(Flag::new(
                FlagKind::Errors,
                format!(
                    "{errors} of {} requests failed ({}); first: {}",
                    self.measured,
                    kinds.join(", "),
                    servebench_model::text::truncate(&first, 300)
                ),
            ));
        }
        if self.retried > 0 {
            let mut message = format!(
                "{} of {} requests met a stale connection (the server had closed an idle connection \
                 before the request reached it) and were sent again on a fresh one; not server \
                 errors, measured from the second attempt",
                self.retried, self.measured
            );
            if self.retried_failed > 0 {
                message.push_str(&format!(
                    " ({} failed again, counted above)",
                    self.retried_failed
                ));
            }
            flags.push(Flag::new(FlagKind::StaleConnections, message));
        }
        flags
    }

    /// The clean requests' metrics: per pair for a two-point run, else per request; the
    /// flags the aggregation raises go to `flags`.
    fn aggregate(
        &mut self,
        clean: &[&RequestRecord],
        deferred: &[RequestRecord],
        flags: &mut Vec<Flag>,
    ) -> IndexMap<String, Stat> {
        if self.two_point {
            if clean.is_empty() {
                IndexMap::new()
            } else {
                let pairs = pairs_of(clean, deferred);
                let (stats, pair_flags) = twopoint::aggregate_pairs(&pairs);
                flags.extend(pair_flags);
                stats
            }
        } else {
            for r in clean {
                self.add_clean(r);
            }
            if self.clean_count == 0 {
                IndexMap::new()
            } else {
                let stats = self.clean.summarize();
                flags.extend(self.chunks.flag(self.clean_count));
                let has_decode =
                    stats.contains_key(servebench_model::catalog::Metric::Decode.name());
                flags.extend(self.chunks.held_back_flag(self.clean_count, has_decode));
                stats
            }
        }
    }

    /// Flags for client-side timing the numbers cannot be trusted under: sends stamped late
    /// (TTFT below the server's own), tokens read late, and a load the client could not offer.
    fn client_timing_flags(&self) -> Vec<Flag> {
        let mut flags = Vec::new();
        if let Some((index, ttft, server)) = self.worst_below_server {
            flags.push(Flag::new(
                FlagKind::TtftBelowServer,
                format!(
                    "{} of {} requests had a TTFT shorter than the server's own time to their first token (request {index}: {:.2} ms, the server's {:.2} ms): the client stamped their send late (descheduled), so those TTFTs are too short",
                    self.below_server,
                    self.server_timed,
                    ttft * 1e3,
                    server * 1e3
                ),
            ));
        }
        if let Some((index, wait, gap)) = self.worst_read_late {
            flags.push(Flag::new(
                FlagKind::ClientReadLate,
                format!(
                    "{} of {} requests waited for the client to read them longer than their shortest gap between tokens (request {index}: {:.2} ms against {:.2} ms): tokens that arrived within the wait were read together and carry the later one's arrival, so their TTFT and ITL are off by up to the wait; the client was short of CPU",
                    self.read_late,
                    self.read_timed,
                    wait * 1e3,
                    gap * 1e3
                ),
            ));
        }
        // The client could not offer the load asked: a closed loop's concurrency never held,
        // or agent turns sent late against their trace.
        flags.extend(self.in_flight.as_ref().and_then(|f| f.flag()));
        flags.extend(self.lateness.flag());
        flags
    }

    /// Flags for trace-block requests (when verifying): cache hits above what their leading
    /// blocks could hold, and counts the server did not report.
    fn trace_cache_flags(&self) -> Vec<Flag> {
        let mut flags = Vec::new();
        let Some(t) = &self.trace_cache else {
            return flags;
        };
        if t.above > 0 && self.verify {
            flags.push(Flag::new(
                FlagKind::UnexpectedCacheHit,
                format!(
                    "{} of {} requests made of trace blocks found more cached than their leading blocks already sent could hold \
                     (more than {} tokens, a block, over{}): prompts of another point or run were in the cache{}",
                    t.above,
                    t.requests,
                    self.cache_tolerance(),
                    match (t.length_error_min, t.length_error_max) {
                        (Some(lo), Some(hi)) => format!(
                            ", plus each request's length error in the server's tokens ({lo:+} to {hi:+} here)"
                        ),
                        _ => String::new(),
                    },
                    if self.as_is { "" } else { "; they are excluded from this point's numbers" }
                ),
            ));
        }
        if t.unreported > 0 && self.verify {
            flags.push(Flag::new(
                FlagKind::CacheUnverified,
                format!(
                    "{} of {} requests made of trace blocks carried no cached_tokens, so their theoretical hits could not be compared \
                     (OpenAI APIs report it only when the server is started to: SGLang --enable-cache-report, vLLM --enable-prompt-tokens-details)",
                    t.unreported,
                    t.unreported + t.requests
                ),
            ));
        }
        flags
    }
}

/// True when a point's prompt tokens / TTFT is its prefill speed: one request at a time
/// (a closed loop at concurrency 1, no sessions). Under concurrency or an arrival schedule a
/// request's TTFT holds its wait behind the others' prefill and decode steps, so the quotient
/// measures queueing (771 tok/s at 32 req/s where one stream prefills at 20,000): the point
/// then carries no `prefill_tok_s`, and the report says why.
pub(crate) fn prefill_is_speed(exp: &Experiment) -> bool {
    exp.concurrency <= 1 && exp.load.is_none() && exp.sessions().is_none()
}

/// A closed loop: `concurrency` workers, each sending its next request when its last ends
/// (no arrival schedule, sessions or pairs), so the concurrency is what it holds in flight.
fn closed_loop(exp: &Experiment) -> bool {
    exp.load.is_none()
        && exp.sessions().is_none()
        && exp.agentic().is_none()
        && !matches!(exp.method.resolve(), Measure::TwoPoint { .. })
}

/// Clean requests whose chunks had no token counts of their own (each taken as one token):
/// how many, their tokens (the server's totals) and their token chunks; and how many clean
/// requests had their tokens held back on the way (no decode speed of their own).
#[derive(Debug, Clone, Copy, Default)]
struct ChunkTally {
    requests: usize,
    tokens: u64,
    chunks: usize,
    held_back: usize,
}

impl ChunkTally {
    fn add(&mut self, r: &RequestRecord) {
        self.held_back += usize::from(metrics::decode_held_back(r));
        if r.chunk_tokens() != ChunkTokens::AssumedOne {
            return;
        }
        let (counted, n) = r.token_chunks();
        self.requests += 1;
        self.tokens += r.completion_tokens.unwrap_or(counted);
        self.chunks += n;
    }

    /// The `itl-per-chunk` flag, when some clean request's chunks had no token counts of their
    /// own (each was taken as one token) and the server's totals show they carried more than
    /// one: its ITL is then the gap per chunk, not per token. `clean` is the clean requests'
    /// count.
    fn flag(&self, clean: usize) -> Option<Flag> {
        let (tokens, chunks) = (self.tokens, self.chunks);
        if chunks == 0 || tokens <= chunks as u64 {
            return None;
        }
        Some(Flag::new(
            FlagKind::ItlPerChunk,
            format!(
                "ITL is per chunk here, not per token: the server gave no token count per chunk \
                 ({} of {} requests; it sent no usage on every chunk, e.g. no support for \
                 `stream_options.continuous_usage_stats`) and its chunks carried several tokens \
                 ({tokens} tokens in {chunks} chunks, {:.2} per chunk, as with speculative \
                 decoding), so each ITL value is the gap between chunks. TPOT and decode tok/s use \
                 the server's totals and stay per token.",
                self.requests,
                clean,
                tokens as f64 / chunks as f64
            ),
        ))
    }
}

impl ChunkTally {
    /// The `decode-held-back` flag, when some clean request's tokens after the first mostly
    /// came in one read of several chunks: a router or proxy held them back (or a client short
    /// of CPU read them together, which `client-read-late` sizes), so that request
    /// gives no decode speed. Without it, a point whose every request was held back would show
    /// no decode speed and nothing saying why. `has_decode`: the point still has one (from the
    /// other requests).
    fn held_back_flag(&self, clean: usize, has_decode: bool) -> Option<Flag> {
        let n = self.held_back;
        (n > 0).then(|| {
            Flag::new(
                FlagKind::DecodeHeldBack,
                format!(
                    "{n} of {clean} requests had most of their tokens after the first held back \
                     and let go in one read (a router or proxy buffered the stream, or the client \
                     read it late), so the gap between reads is no decode time: {}",
                    if has_decode {
                        "their decode speed is left out; the point's is the other requests'"
                    } else {
                        "the point has no decode speed"
                    }
                ),
            )
        })
    }
}

/// Pairs each clean first request with its second request (same round and index), when that
/// one succeeded too.
fn pairs_of<'a>(
    clean_a: &[&'a RequestRecord],
    all: &'a [RequestRecord],
) -> Vec<(&'a RequestRecord, &'a RequestRecord)> {
    clean_a
        .iter()
        .filter_map(|a| {
            all.iter()
                .find(|b| {
                    b.role == RequestRole::TwoPointB
                        && b.round == a.round
                        && b.index == a.index
                        && b.error.is_none()
                })
                .map(|b| (*a, b))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::system::{self, Observed};
    use servebench_model::results::records::{
        Chunk, ErrorKind, Estimate, LoadSummary, RequestError, Stat,
    };

    /// A cold `load:` point with an SLO and extra percentiles.
    fn exp() -> Experiment {
        serde_json::from_value(serde_json::json!({
            "name": "t",
            "server": {"engine": "sim"},
            "workload": {"prompt": {"kind": "repeat", "tokens": 100}, "output_tokens": 8},
            "load": {"kind": "rate", "rate": 100},
            "stop": {"requests": 400},
            "cache": {"policy": "cold"},
            "percentiles": [50, 99, 99.9],
            "slo": {"ttft": "0.05s", "tpot": "0.01s", "targets": {"ttft_p99": "0.1s", "attainment": "90%"}},
        }))
        .unwrap()
    }

    /// Request `i` of 400 sent every 10 ms: varied latencies and lags, 8 tokens in 4 chunks,
    /// some failed (two kinds), some retried, some served from the cache under the cold policy.
    fn record(i: u32) -> RequestRecord {
        // A deterministic spread in [0, 1).
        let u = |k: u32| {
            f64::from((i.wrapping_mul(2_654_435_761) ^ k.wrapping_mul(40_503)) % 1000) / 1000.0
        };
        let sched = 1000.0 + f64::from(i) * 0.01;
        let lag = 0.002 * u(1);
        let ttft = 0.01 + 0.05 * u(2);
        let gap = 0.002 + 0.01 * u(3);
        let chunks: Vec<Chunk> = (0..4)
            .map(|c| Chunk::new(ttft + gap * f64::from(c), 2))
            .collect();
        let error = i.is_multiple_of(37).then(|| RequestError {
            kind: if i.is_multiple_of(74) {
                ErrorKind::Http
            } else {
                ErrorKind::Timeout
            },
            message: format!("failure {i}"),
            status: None,
            body_head: None,
        });
        RequestRecord {
            index: i,
            sent_at: sched + lag,
            scheduled_at: Some(sched),
            retried: i % 50 == 3,
            requested_prompt_tokens: Some(100),
            max_tokens: 8,
            end_s: Some(ttft + gap * 3.0 + 0.001),
            chunks,
            prompt_tokens: Some(100),
            completion_tokens: Some(8),
            cached_tokens: Some(if i % 41 == 5 { 96 } else { 0 }),
            error,
            phase: Some(servebench_model::results::records::Phase::Measure),
            lag_s: Some(lag),
            ..RequestRecord::fixture()
        }
    }

    /// The summary, metrics and load summary of `fold` after `records`.
    fn folded(
        exp: &Experiment,
        mut fold: PointFold,
        records: impl Iterator<Item = RequestRecord>,
    ) -> (PointSummary, Option<LoadSummary>) {
        records.for_each(|r| fold.add(&r));
        let mut s = fold.finish(exp, Vec::new(), false);
        let load = fold
            .system
            .finish(exp, &Observed::default(), &mut s.metrics, &mut s.flags);
        (s, load)
    }

    #[test]
    fn a_ttft_below_the_servers_own_is_flagged_as_a_late_stamp() {
        let exp: Experiment = serde_json::from_value(serde_json::json!({
            "name": "t",
            "server": {"engine": "sim"},
            "workload": {"prompt": {"kind": "repeat", "tokens": 8}, "output_tokens": 2},
        }))
        .unwrap();
        let rec = |index: u32, ttft: f64, server: Option<f64>| RequestRecord {
            index,
            end_s: Some(ttft + 0.01),
            chunks: vec![
                servebench_model::results::records::Chunk::new(ttft, 1),
                servebench_model::results::records::Chunk::new(ttft + 0.01, 1),
            ],
            prompt_tokens: Some(8),
            completion_tokens: Some(2),
            server_ttft_s: server,
            ..RequestRecord::fixture()
        };
        let mut fold = PointFold::new(&exp);
        // The request: 0.39 ms where the server took 3.08 ms to process the prompt.
        fold.add(&rec(0, 0.00039, Some(0.00308)));
        fold.add(&rec(1, 0.005, Some(0.00308)));
        fold.add(&rec(2, 0.004, None));
        let s = fold.finish(&exp, Vec::new(), false);
        let flag = s
            .flags
            .iter()
            .find(|f| f.kind == FlagKind::TtftBelowServer)
            .unwrap_or_else(|| panic!("{:?}", s.flags));
        assert!(
            flag.message
                .starts_with("1 of 2 requests had a TTFT shorter")
                && flag
                    .message
                    .contains("request 0: 0.39 ms, the server's 3.08 ms"),
            "{}",
            flag.message
        );
        // Every TTFT at or above the server's: no flag.
        let mut fold = PointFold::new(&exp);
        fold.add(&rec(0, 0.0031, Some(0.00308)));
        let s = fold.finish(&exp, Vec::new(), false);
        assert!(!s.flags.iter().any(|f| f.kind == FlagKind::TtftBelowServer));
    }

    #[test]
    fn a_read_wait_past_the_token_gap_is_flagged() {
        let exp = exp();
        let rec = |index: u32, wait: Option<f64>| RequestRecord {
            index,
            end_s: Some(0.05),
            chunks: [0.02, 0.03, 0.04]
                .iter()
                .map(|&t_s| servebench_model::results::records::Chunk::new(t_s, 1))
                .collect(),
            prompt_tokens: Some(8),
            completion_tokens: Some(3),
            read_wait_s: wait,
            ..RequestRecord::fixture()
        };
        let mut fold = PointFold::new(&exp);
        // Gaps of 10 ms: a 12 ms wait merged two tokens, a 4 ms one did not.
        fold.add(&rec(0, Some(0.004)));
        fold.add(&rec(1, Some(0.012)));
        fold.add(&rec(2, None));
        let s = fold.finish(&exp, Vec::new(), false);
        let flag = s
            .flags
            .iter()
            .find(|f| f.kind == FlagKind::ClientReadLate)
            .unwrap_or_else(|| panic!("{:?}", s.flags));
        assert!(
            flag.message.starts_with("1 of 2 requests waited")
                && flag
                    .message
                    .contains("request 1: 12.00 ms against 10.00 ms"),
            "{}",
            flag.message
        );
        let mut fold = PointFold::new(&exp);
        fold.add(&rec(0, Some(0.009)));
        let s = fold.finish(&exp, Vec::new(), false);
        assert!(!s.flags.iter().any(|f| f.kind == FlagKind::ClientReadLate));
    }

    /// Through a router that buffered the stream, a request's 7 tokens after the first came
    /// in one read: it gives no decode speed, and the point says why instead of showing none
    /// (or the others' alone) silently.
    #[test]
    fn requests_whose_tokens_were_held_back_are_named_by_a_flag() {
        let exp: Experiment = serde_json::from_value(serde_json::json!({
            "name": "t",
            "server": {"engine": "sim"},
            "workload": {"prompt": {"kind": "repeat", "tokens": 8}, "output_tokens": 8},
        }))
        .unwrap();
        let rec = |index: u32, held: bool| {
            let chunks = (0..8)
                .map(|k| {
                    let t = if held && k > 0 {
                        0.3
                    } else {
                        0.1 + 0.01 * f64::from(k)
                    };
                    Chunk::new(t, 1)
                })
                .collect();
            RequestRecord {
                index,
                end_s: Some(0.31),
                chunks,
                prompt_tokens: Some(8),
                completion_tokens: Some(8),
                // As asked: 8 tokens of a fixture's 4 would be impossible usage.
                max_tokens: 8,
                ..RequestRecord::fixture()
            }
        };
        let flag_of = |s: &PointSummary| {
            s.flags
                .iter()
                .find(|f| f.kind == FlagKind::DecodeHeldBack)
                .map(|f| f.message.clone())
        };
        // Every request held back: no decode speed, and the flag says so.
        let mut fold = PointFold::new(&exp);
        (0..3).for_each(|i| fold.add(&rec(i, true)));
        let s = fold.finish(&exp, Vec::new(), false);
        assert!(!s.metrics.contains_key("decode_tok_s"), "{:?}", s.metrics);
        let message = flag_of(&s).unwrap_or_else(|| panic!("{:?}", s.flags));
        assert!(
            message
                .starts_with("3 of 3 requests had most of their tokens after the first held back")
                && message.ends_with("the point has no decode speed"),
            "{message}"
        );
        assert_eq!(s.status, PointStatus::Ok, "informational");
        // One of three: the point's decode speed is the other two's (7 tokens in 70 ms).
        let mut fold = PointFold::new(&exp);
        fold.add(&rec(0, true));
        fold.add(&rec(1, false));
        fold.add(&rec(2, false));
        let s = fold.finish(&exp, Vec::new(), false);
        assert!((s.metrics["decode_tok_s"].mean - 100.0).abs() < 1e-6);
        let message = flag_of(&s).unwrap();
        assert!(message.starts_with("1 of 3 requests"), "{message}");
        assert!(
            message.ends_with("the point's is the other requests'"),
            "{message}"
        );
        // None held back: no flag.
        let mut fold = PointFold::new(&exp);
        fold.add(&rec(0, false));
        assert_eq!(flag_of(&fold.finish(&exp, Vec::new(), false)), None);
    }

    #[test]
    fn records_folded_as_they_finish_give_the_summary_of_the_sorted_slice() {
        let exp = exp();
        let sorted: Vec<RequestRecord> = (0..400).map(record).collect();
        let mut want = summarize(&exp, &sorted, Vec::new(), false);
        let want_load = system::add(
            &exp,
            &sorted,
            &Observed::default(),
            &mut want.metrics,
            &mut want.flags,
        );
        // Finished out of order: odd indexes first, each half backwards.
        let order = (0..400)
            .rev()
            .filter(|i| i % 2 == 1)
            .chain((0..400).rev().filter(|i| i % 2 == 0));
        let (got, load) = folded(&exp, PointFold::new(&exp), order.map(record));
        assert_eq!(got, want);
        assert_eq!(load, want_load);
        // What the records hold, by hand: 11 failed (every 37th), 6 of them http (every 74th).
        assert_eq!((got.ok, got.errors), (389, 11));
        assert_eq!(
            got.error_kinds.get_index(0),
            Some((&"http".to_string(), &6))
        );
        assert!(got.flags[0].message.ends_with("first: failure 0"));
        // Cold hits (i % 41 == 5: ten, but 333 failed) are out of the numbers.
        assert_eq!(got.metrics["ttft_s"].count, 389 - 9);
        assert!(got.metrics.values().all(|s| s.estimate.is_none()));
        assert!(
            got.flags
                .iter()
                .any(|f| f.kind == FlagKind::ColdCacheHit && f.message.starts_with("9 of 389"))
        );
    }

    #[test]
    fn past_the_caps_the_fold_estimates_within_the_stated_error() {
        let exp = exp();
        let records = || (0..400).map(record);
        let (exact, exact_load) = folded(&exp, PointFold::new(&exp), records());
        // 100 values per metric (ITL: 3 per request) and 200 timeline events.
        let (est, est_load) = folded(&exp, PointFold::with_caps(&exp, 100, 200), records());
        let within = |got: f64, want: f64, what: &str| {
            assert!(
                (got - want).abs()
                    <= super::super::samples::RELATIVE_ERROR * want.abs() * (1.0 + 1e-9),
                "{what}: {got} vs {want}"
            );
        };
        let mut histograms = 0;
        for (name, want) in &exact.metrics {
            let got: &Stat = &est.metrics[name];
            assert_eq!(
                (got.count, got.min, got.max),
                (want.count, want.min, want.max),
                "{name}"
            );
            within(got.mean, want.mean, name);
            match got.estimate {
                Some(Estimate::Histogram) => {
                    histograms += 1;
                    within(got.p50, want.p50, name);
                    within(got.p90, want.p90, name);
                    within(got.p99, want.p99, name);
                    assert!(
                        (got.std.unwrap() - want.std.unwrap()).abs()
                            <= 1e-9 * want.std.unwrap() + 1e-12,
                        "{name}"
                    );
                }
                Some(Estimate::Slots) => {
                    assert!(
                        name == "peak_output_tok_s" || name == "concurrency_max",
                        "{name}"
                    );
                }
                None => assert_eq!(got, want, "{name}"),
            }
        }
        assert!(histograms >= 8, "{histograms} metrics past the cap");
        assert_eq!(
            est.metrics["concurrency_max"].estimate,
            Some(Estimate::Slots)
        );
        // Slots count requests starting together as overlapping: never fewer.
        assert!(est.metrics["concurrency_max"].mean >= exact.metrics["concurrency_max"].mean);
        let (exact_load, est_load) = (exact_load.unwrap(), est_load.unwrap());
        for (metric, row) in &exact_load.percentiles {
            for (q, want) in row {
                within(
                    est_load.percentiles[metric][q],
                    *want,
                    &format!("{metric} {q}"),
                );
            }
        }
        assert_eq!(
            est_load.slo.as_ref().unwrap().good,
            exact_load.slo.unwrap().good
        );
    }

    /// A theoretical hit is in the trace's tokens and the server's in its own: where block
    /// text came out 1.4% long in the server's tokens (no `/tokenize` to build it with), a
    /// request's hit is judged within a block plus its own length error, and the point says
    /// how far its prompts drifted.
    #[test]
    fn hits_are_judged_within_a_block_plus_the_requests_own_length_error() {
        let e = exp();
        let block = |i: u32, theoretical: u64, cached: u64| RequestRecord {
            index: i,
            sent_at: 1000.0 + f64::from(i),
            chunks: vec![Chunk::new(0.02, 1)],
            end_s: Some(0.05),
            requested_prompt_tokens: Some(50_000),
            prompt_tokens: Some(50_700),
            completion_tokens: Some(1),
            cached_tokens: Some(cached),
            finish_reason: Some("length".into()),
            theoretical_cached_tokens: Some(theoretical),
            ..RequestRecord::fixture()
        };
        let drifted = [
            block(0, 40_000, 40_560), // the drift's share of its prefix over: a real hit
            block(1, 40_000, 39_400), // short by less than a block and the drift: not below
        ];
        let t = summarize(&e, &drifted, Vec::new(), false)
            .trace_cache
            .unwrap();
        assert_eq!((t.below, t.above), (0, 0), "{t:?}");
        assert_eq!(
            (t.length_error_min, t.length_error_max),
            (Some(700), Some(700))
        );
        assert!((t.length_error_share_max.unwrap() - 0.014).abs() < 1e-12);
        // Past a block (64) and the drift (700): contamination above, eviction below.
        let past = [block(0, 40_000, 40_765), block(1, 40_000, 39_235)];
        let t = summarize(&e, &past, Vec::new(), false).trace_cache.unwrap();
        assert_eq!((t.below, t.above), (1, 1), "{t:?}");
        // Without the trace's length, only the block: 560 over is above.
        let mut unknown = drifted.clone();
        unknown[0].requested_prompt_tokens = None;
        let t = summarize(&e, &unknown, Vec::new(), false)
            .trace_cache
            .unwrap();
        assert_eq!(t.above, 1, "{t:?}");
    }

    /// A captured request's literal prompt finds what the replay's earlier ones left, as the
    /// recorded traffic did: under the cold policy its hit is neither contamination nor
    /// judged against a theoretical hit (none is worked out), and no cache flag is raised.
    #[test]
    fn captured_requests_hits_are_the_workloads_not_contamination() {
        let e = exp();
        let request = |i: u32, captured: bool| RequestRecord {
            index: i,
            sent_at: 1000.0 + f64::from(i),
            chunks: vec![Chunk::new(0.02, 1)],
            end_s: Some(0.05),
            prompt_tokens: Some(2000),
            completion_tokens: Some(1),
            cached_tokens: Some(if i == 0 { 0 } else { 1900 }),
            finish_reason: Some("length".into()),
            captured: captured.then_some(servebench_model::results::records::Captured {
                prompt_tokens: Some(1500),
            }),
            ..RequestRecord::fixture()
        };
        let captured: Vec<_> = (0..3).map(|i| request(i, true)).collect();
        let s = summarize(&e, &captured, Vec::new(), false);
        assert_eq!(s.metrics["ttft_s"].count, 3, "every hit kept");
        assert!(s.trace_cache.is_none(), "no theoretical hit worked out");
        assert!(s.flags.is_empty(), "{:?}", s.flags);
        // The same hits on generated prompts are another point's text: out, flagged.
        let generated: Vec<_> = (0..3).map(|i| request(i, false)).collect();
        let s = summarize(&e, &generated, Vec::new(), false);
        assert_eq!(s.metrics["ttft_s"].count, 1);
        assert!(s.flags.iter().any(|f| f.kind == FlagKind::ColdCacheHit));
    }

    /// Requests made of trace blocks are judged against what their blocks promised: a real
    /// hit under the cold policy is kept, finding less is counted and kept, finding more than
    /// the blocks could hold is contamination (excluded, flagged).
    #[test]
    fn block_requests_are_judged_against_their_theoretical_hit() {
        let e = exp();
        let block = |i: u32, theoretical: u64, cached: u64| RequestRecord {
            index: i,
            sent_at: 1000.0 + f64::from(i),
            chunks: vec![Chunk::new(0.02, 1)],
            end_s: Some(0.05),
            prompt_tokens: Some(2000),
            completion_tokens: Some(1),
            cached_tokens: Some(cached),
            finish_reason: Some("length".into()),
            theoretical_cached_tokens: Some(theoretical),
            ..RequestRecord::fixture()
        };
        let records = [
            block(0, 0, 0),
            block(1, 1536, 1530),      // the hit its blocks promised: kept
            block(2, 1536, 200),       // evicted: found less, kept
            block(3, 512, 1900),       // more than its blocks: contamination
            block(4, 1024, 1024 + 60), // a template head's worth over: within the tolerance
        ];
        let s = summarize(&e, &records, Vec::new(), false);
        let t = s.trace_cache.as_ref().unwrap();
        assert_eq!((t.requests, t.below, t.above), (5, 1, 1));
        assert_eq!(t.theoretical_cached_tokens, 1536 * 2 + 512 + 1024);
        assert_eq!(t.cached_tokens, 1530 + 200 + 1900 + 1084);
        assert_eq!(s.metrics["ttft_s"].count, 4, "the contaminated one is out");
        let kinds: Vec<_> = s.flags.iter().map(|f| f.kind.clone()).collect();
        assert!(kinds.contains(&FlagKind::UnexpectedCacheHit), "{kinds:?}");
        assert!(!kinds.contains(&FlagKind::ColdCacheHit), "{kinds:?}");
        // The contaminated one again, but a sibling made after it and sent before its first
        // token could have left 1920 tokens: served in the other order, a real hit, kept.
        let mut records = records;
        records[3].reachable_cached_tokens = Some(1920);
        let s = summarize(&e, &records, Vec::new(), false);
        let t = s.trace_cache.as_ref().unwrap();
        assert_eq!((t.below, t.above, t.reordered), (1, 0, 1));
        assert_eq!(s.metrics["ttft_s"].count, 5);
        assert!(
            !s.flags
                .iter()
                .any(|f| f.kind == FlagKind::UnexpectedCacheHit)
        );
        // A reachable hit short of what it found: still contamination.
        records[3].reachable_cached_tokens = Some(1024);
        let t = summarize(&e, &records, Vec::new(), false)
            .trace_cache
            .unwrap();
        assert_eq!((t.above, t.reordered), (1, 0));
    }
}
