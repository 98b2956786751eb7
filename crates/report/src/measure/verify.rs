//! Cache-policy verification: the server's own `cached_tokens` decides whether a measured
//! request really was cold (or warm). Contaminated requests are flagged and kept out of the
//! point's numbers; they stay in `requests.jsonl`.

use servebench_model::catalog::FlagKind;
use servebench_model::results::records::{Flag, RequestRecord};
use servebench_model::spec::types::CachePolicy;

/// Share of the prompt a warm request must find cached. SGLang always recomputes at least the
/// last token (and a partial page), so "all of it" would be too strict.
pub(crate) const WARM_MIN_CACHED_FRACTION: f64 = 0.9;

/// Cached tokens a cold request may still report: every prompt shares its BOS token and the
/// opening of the chat template with every other request, whatever the nonce. Beyond this the
/// request really reused someone's prefix.
pub(crate) const COLD_TOLERATED_CACHED_TOKENS: u64 = 64;

/// The verdict for one point.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Verdict {
    /// Indexes (into the slice given) of requests whose numbers must not be averaged in.
    pub contaminated: Vec<usize>,
    pub flags: Vec<Flag>,
}

/// Checks successful measured requests against the cache policy.
#[cfg(test)]
pub(crate) fn verify(policy: CachePolicy, requests: &[&RequestRecord]) -> Verdict {
    let mut tally = Tally::new(policy);
    let contaminated = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| tally.add(r))
        .map(|(i, _)| i)
        .collect();
    Verdict {
        contaminated,
        flags: tally.flags(),
    }
}

/// The cache-policy verdict built one request at a time: whether each one is contaminated is
/// decided from its own counts, the flags from the totals.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    policy: CachePolicy,
    /// Successful requests judged.
    ok: usize,
    /// Of them, those without a cached count.
    unreported: usize,
    /// Those that reused more than a shared BOS or template explains (as-is, cold), and the
    /// most cached tokens among them.
    hits: usize,
    most_cached: u64,
    /// Those that found less than [`WARM_MIN_CACHED_FRACTION`] cached (warm).
    misses: usize,
}

impl Tally {
    pub(crate) fn new(policy: CachePolicy) -> Tally {
        Tally {
            policy,
            ok: 0,
            unreported: 0,
            hits: 0,
            most_cached: 0,
            misses: 0,
        }
    }

    /// Judges `r`; true when its numbers must not be averaged in. Failed requests are not
    /// judged.
    pub(crate) fn add(&mut self, r: &RequestRecord) -> bool {
        if r.error.is_some() {
            return false;
        }
        self.ok += 1;
        if self.policy != CachePolicy::AsIs && r.cached_tokens.is_none() {
            self.unreported += 1;
        }
        match self.policy {
            CachePolicy::AsIs | CachePolicy::Cold => {
                let Some(c) = r
                    .cached_tokens
                    .filter(|&c| c > COLD_TOLERATED_CACHED_TOKENS)
                else {
                    return false;
                };
                self.hits += 1;
                self.most_cached = self.most_cached.max(c);
                // As-is hits are reported, not excluded.
                self.policy == CachePolicy::Cold
            }
            CachePolicy::Warm => {
                let missed = match (r.cached_tokens, r.prompt_tokens) {
                    (Some(c), Some(p)) if p > 0 => (c as f64) < WARM_MIN_CACHED_FRACTION * p as f64,
                    _ => false,
                };
                self.misses += usize::from(missed);
                missed
            }
        }
    }

    /// The flags the requests judged so far imply.
    pub(crate) fn flags(&self) -> Vec<Flag> {
        let mut flags = Vec::new();
        if self.ok == 0 {
            return flags;
        }
        if self.policy == CachePolicy::AsIs {
            // No expectation to violate, but hits change what prefill numbers mean: say so.
            if self.hits > 0 {
                flags.push(Flag {
                    kind: FlagKind::CacheHits,
                    message: format!(
                        "{} of {} requests reused up to {} cached prompt tokens (as-is policy): their TTFT and prefill tok/s \
                         cover only the uncached part of the prompt",
                        self.hits, self.ok, self.most_cached
                    ),
                });
            }
            return flags;
        }
        if self.unreported > 0 {
            flags.push(Flag {
                kind: FlagKind::CacheUnverified,
                message: format!(
                    "{} of {} requests carried no cached_tokens, so the cache policy could not be verified \
                     (OpenAI APIs report it only when the server is started to: SGLang --enable-cache-report, vLLM --enable-prompt-tokens-details)",
                    self.unreported, self.ok
                ),
            });
        }
        match self.policy {
            CachePolicy::Cold if self.hits > 0 => flags.push(Flag {
                kind: FlagKind::ColdCacheHit,
                message: format!(
                    "{} of {} requests reported up to {} cached prompt tokens under the cold policy \
                     (more than the {} a shared BOS or chat template explains): they skipped part of prefill \
                     and are excluded from this point's numbers",
                    self.hits, self.ok, self.most_cached, COLD_TOLERATED_CACHED_TOKENS
                ),
            }),
            CachePolicy::Warm if self.misses > 0 => flags.push(Flag {
                kind: FlagKind::WarmCacheMiss,
                message: format!(
                    "{} of {} requests found less than {:.0}% of their prompt cached under the warm policy \
                     (evicted, or the cache is disabled): they are excluded from this point's numbers",
                    self.misses,
                    self.ok,
                    WARM_MIN_CACHED_FRACTION * 100.0
                ),
            }),
            _ => {}
        }
        flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::*;

    fn rec(prompt: u64, cached: Option<u64>, failed: bool) -> RequestRecord {
        RequestRecord {
            point: "p1".into(),
            requested_prompt_tokens: Some(prompt),
            end_s: Some(1.0),
            prompt_tokens: Some(prompt),
            completion_tokens: Some(4),
            cached_tokens: cached,
            finish_reason: Some("length".into()),
            error: failed.then(|| RequestError {
                kind: ErrorKind::Http,
                message: "x".into(),
                status: Some(400),
                body_head: None,
            }),
            ..RequestRecord::fixture()
        }
    }

    #[test]
    fn cold_hits_are_flagged_and_excluded() {
        let rs = [
            rec(1000, Some(0), false),
            rec(1000, Some(998), false),
            rec(1000, Some(5), true),
        ];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let v = verify(CachePolicy::Cold, &refs);
        assert_eq!(v.contaminated, vec![1], "the failed request is not judged");
        assert_eq!(v.flags.len(), 1);
        assert_eq!(v.flags[0].kind, FlagKind::ColdCacheHit);
        assert!(
            v.flags[0].message.contains("1 of 2"),
            "{}",
            v.flags[0].message
        );
        assert!(v.flags[0].message.contains("998"));
    }

    #[test]
    fn clean_cold_point_has_no_flags() {
        let rs = [
            rec(1000, Some(0), false),
            rec(1000, Some(COLD_TOLERATED_CACHED_TOKENS), false),
        ];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        assert_eq!(
            verify(CachePolicy::Cold, &refs),
            Verdict::default(),
            "a shared BOS/template is not a hit"
        );
    }

    #[test]
    fn warm_misses_are_flagged() {
        let rs = [rec(1000, Some(999), false), rec(1000, Some(100), false)];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let v = verify(CachePolicy::Warm, &refs);
        assert_eq!(v.contaminated, vec![1]);
        assert_eq!(v.flags[0].kind, FlagKind::WarmCacheMiss);
    }

    #[test]
    fn missing_counts_say_unverified_and_as_is_says_nothing() {
        let rs = [rec(1000, None, false)];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let v = verify(CachePolicy::Cold, &refs);
        assert_eq!(v.flags[0].kind, FlagKind::CacheUnverified);
        assert!(v.contaminated.is_empty());
        let rs = [rec(1000, Some(0), false)];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        assert_eq!(verify(CachePolicy::AsIs, &refs), Verdict::default());
        let rs = [rec(1000, Some(0), false), rec(1000, Some(999), false)];
        let refs: Vec<&RequestRecord> = rs.iter().collect();
        let v = verify(CachePolicy::AsIs, &refs);
        assert!(
            v.contaminated.is_empty(),
            "as-is hits are reported, not excluded"
        );
        assert_eq!(v.flags[0].kind, FlagKind::CacheHits);
        assert!(v.flags[0].message.contains("1 of 2"));
    }
}
