//! A point's summary from its request records: success and error counts, cache verification,
//! aggregates and validity flags. Pure: the runner hands in what it recorded, this decides what
//! the numbers are and what doubts them.

use indexmap::IndexMap;

use crate::catalog::FlagKind;
use crate::results::records::{
    ChunkTokens, Flag, PointStatus, PrefixCacheRow, RequestRecord, RequestRole, Stat,
};
use crate::spec::types::{Experiment, Measure};

use super::{metrics, shared, spread, twopoint, verify};

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
}

/// Summarises the measured records of a point of `exp`. `flags` are what the runner already
/// noticed (flush failures, calibration misses); `interrupted` says the run stopped during it.
pub fn summarize(
    exp: &Experiment,
    measured: &[RequestRecord],
    mut flags: Vec<Flag>,
    interrupted: bool,
) -> PointSummary {
    let two_point = matches!(exp.method.resolve(), Measure::TwoPoint { .. });
    // Two-point: the cache policy is verified on the first requests; the second ones are
    // judged by the pair (a cached second request is the failure the method must show).
    let refs: Vec<&RequestRecord> = measured
        .iter()
        .filter(|r| !two_point || r.role == RequestRole::TwoPointA)
        .collect();
    // Requests that share prefixes by design are judged by what their group sent before
    // them; the others by the cache policy.
    type Indexed<'a> = Vec<(usize, &'a RequestRecord)>;
    let (shared_refs, policy_refs): (Indexed, Indexed) = refs
        .iter()
        .copied()
        .enumerate()
        .partition(|(_, r)| r.share.is_some());
    let mut verdict = verify::Verdict::default();
    let mut prefix_cache = Vec::new();
    if exp.cache.verify {
        let policy: Vec<&RequestRecord> = policy_refs.iter().map(|(_, r)| *r).collect();
        let v = verify::verify(exp.cache.policy, &policy);
        verdict.flags = v.flags;
        verdict.contaminated = v.contaminated.iter().map(|&i| policy_refs[i].0).collect();
        let shared: Vec<&RequestRecord> = shared_refs.iter().map(|(_, r)| *r).collect();
        let s = shared::verify_shares(&shared);
        verdict.flags.extend(s.flags);
        verdict
            .contaminated
            .extend(s.contaminated.iter().map(|&i| shared_refs[i].0));
        prefix_cache = s.rows;
    }
    let clean: Vec<&RequestRecord> = refs
        .iter()
        .enumerate()
        .filter(|(i, r)| r.error.is_none() && !verdict.contaminated.contains(i))
        .map(|(_, r)| *r)
        .collect();
    // Every measured request counts here, both of a two-point pair.
    let ok = measured.iter().filter(|r| r.error.is_none()).count();
    let errors = measured.len() - ok;
    let mut error_kinds: IndexMap<String, usize> = IndexMap::new();
    for e in measured.iter().filter_map(|r| r.error.as_ref()) {
        *error_kinds.entry(e.kind.to_string()).or_default() += 1;
    }
    if errors > 0 {
        let first = measured
            .iter()
            .find_map(|r| r.error.as_ref())
            .map(|e| e.message.clone())
            .unwrap_or_default();
        let kinds: Vec<String> = error_kinds
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        flags.push(Flag::new(
            FlagKind::Errors,
            format!(
                "{errors} of {} requests failed ({}); first: {}",
                measured.len(),
                kinds.join(", "),
                crate::text::truncate(&first, 300)
            ),
        ));
    }
    let retried: Vec<&RequestRecord> = measured.iter().filter(|r| r.retried).collect();
    if !retried.is_empty() {
        let failed_again = retried.iter().filter(|r| r.error.is_some()).count();
        let mut message = format!(
            "{} of {} requests met a stale connection (the server had closed an idle connection \
             before the request reached it) and were sent again on a fresh one; not server \
             errors, measured from the second attempt",
            retried.len(),
            measured.len()
        );
        if failed_again > 0 {
            message.push_str(&format!(" ({failed_again} failed again, counted above)"));
        }
        flags.push(Flag::new(FlagKind::StaleConnections, message));
    }
    flags.extend(verdict.flags);
    let metrics = if clean.is_empty() {
        IndexMap::new()
    } else if two_point {
        let pairs = pairs_of(&clean, measured);
        let (stats, pair_flags) = twopoint::aggregate_pairs(&pairs);
        flags.extend(pair_flags);
        stats
    } else {
        flags.extend(itl_per_chunk(&clean));
        metrics::aggregate(&clean)
    };
    // At concurrency > 1 per-request spread is queueing by design (the first request waits
    // for nobody, the last for everyone): only a single stream's spread is noise.
    if exp.concurrency == 1 && exp.load.is_none() {
        flags.extend(spread::spread_flags(&metrics));
    }
    let per_round = match exp.sessions() {
        Some(s) => s.users as usize * s.turns as usize,
        None => exp.requests as usize,
    };
    let expected = exp.repeat as usize * per_round;
    let incomplete = interrupted || refs.len() < expected;
    if interrupted {
        flags.push(Flag::new(
            FlagKind::Interrupted,
            // The flag's kind already says `interrupted`: the message says how far it got.
            format!(
                "{} of {expected} requests finished before the run stopped",
                refs.len()
            ),
        ));
    }
    let status = if ok == 0 {
        PointStatus::Failed
    } else if incomplete || !exp.error_budget.allows(errors, measured.len()) {
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
    }
}

/// The `itl-per-chunk` flag, when some clean request's chunks had no token counts of their own
/// (each was taken as one token) and the server's totals show they carried more than one: its
/// ITL is then the gap per chunk, not per token.
fn itl_per_chunk(clean: &[&RequestRecord]) -> Option<Flag> {
    let assumed: Vec<&&RequestRecord> = clean
        .iter()
        .filter(|r| r.chunk_tokens() == ChunkTokens::AssumedOne)
        .collect();
    let (mut tokens, mut chunks) = (0u64, 0usize);
    for r in &assumed {
        let (counted, n) = r.token_chunks();
        tokens += r.completion_tokens.unwrap_or(counted);
        chunks += n;
    }
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
            assumed.len(),
            clean.len(),
            tokens as f64 / chunks as f64
        ),
    ))
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
