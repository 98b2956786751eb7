//! The two-point method: per sample, the same prompt twice with `max_tokens` a then b;
//! decode = (b - a) / (t_b - t_a), where t is each request's end-to-end time.
//!
//! It needs the second request to pay the same prefill as the first. When the server's radix
//! cache serves the second prompt, t_b drops below t_a and the formula gives a negative or
//! infinite speed: that pair is flagged "cache reuse suspected", with the server's
//! `cached_tokens` as evidence, and its decode numbers are left out, never shown as NaN.

use indexmap::IndexMap;

use servebench_model::catalog::{FlagKind, Method, Metric};
use servebench_model::results::records::{Flag, RequestRecord, Stat};

use super::metrics::{Columns, request_metrics};
use super::verify::COLD_TOLERATED_CACHED_TOKENS;

/// The numbers of one (a, b) pair.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct PairMetrics {
    /// End-to-end seconds of the first request (`max_tokens` a).
    pub t_a_s: Option<f64>,
    /// End-to-end seconds of the second request (`max_tokens` b).
    pub t_b_s: Option<f64>,
    /// TTFT of the first request.
    pub ttft_s: Option<f64>,
    /// Uncached prompt tokens of the first request per second of its TTFT.
    pub prefill_tok_s: Option<f64>,
    /// (completion_b - completion_a) / (t_b - t_a); None when t_b <= t_a or the second
    /// request reused the cache.
    pub decode_tok_s: Option<f64>,
    /// Seconds per output token: (t_b - t_a) / (completion_b - completion_a).
    pub tpot_s: Option<f64>,
    /// Why the decode numbers were left out.
    pub reuse: Option<String>,
}

/// Computes a pair's numbers. `a` and `b` are the requests as recorded (both successful).
pub(crate) fn pair_metrics(a: &RequestRecord, b: &RequestRecord) -> PairMetrics {
    let ma = request_metrics(a);
    let mut m = PairMetrics {
        t_a_s: a.end_s,
        t_b_s: b.end_s,
        ttft_s: ma.ttft_s,
        prefill_tok_s: ma.prefill_tok_s,
        ..PairMetrics::default()
    };
    let (Some(ta), Some(tb)) = (a.end_s, b.end_s) else {
        return m;
    };
    // The server's counts when it sent them; the requested lengths otherwise.
    let na = a.completion_tokens.unwrap_or(u64::from(a.max_tokens));
    let nb = b.completion_tokens.unwrap_or(u64::from(b.max_tokens));
    let cached_b = b.cached_tokens.unwrap_or(0);
    if tb <= ta {
        m.reuse = Some(format!(
            "t_b {tb:.3} s <= t_a {ta:.3} s (server reported {} cached tokens of {} on the second request)",
            b.cached_tokens.map_or("no".to_string(), |c| c.to_string()),
            b.prompt_tokens.map_or("?".to_string(), |p| p.to_string()),
        ));
    } else if cached_b > COLD_TOLERATED_CACHED_TOKENS {
        m.reuse = Some(format!(
            "the second request reused {cached_b} cached prompt tokens of {}",
            b.prompt_tokens.map_or("?".to_string(), |p| p.to_string()),
        ));
    } else if nb > na {
        m.decode_tok_s = Some((nb - na) as f64 / (tb - ta));
        m.tpot_s = Some((tb - ta) / (nb - na) as f64);
    }
    m
}

/// Aggregates successful pairs (one sample per pair, in its round, with the same statistics
/// and confidence intervals as streaming points): `ttft_s`, `prefill_tok_s`, `t_a_s`, `t_b_s`,
/// `decode_tok_s`, `tpot_s`, and the first requests' `prompt_tokens`, `cached_tokens`,
/// `completion_tokens`. Returns the aggregates and the flag when some pairs reused the cache.
pub(crate) fn aggregate_pairs(
    pairs: &[(&RequestRecord, &RequestRecord)],
) -> (IndexMap<String, Stat>, Vec<Flag>) {
    let mut columns = Columns::new(Method::TwoPoint);
    let mut reused = Vec::new();
    for (a, b) in pairs {
        let m = pair_metrics(a, b);
        let round = a.round;
        columns.push_one(Metric::Ttft, round, m.ttft_s);
        columns.push_one(Metric::Prefill, round, m.prefill_tok_s);
        columns.push_one(Metric::Decode, round, m.decode_tok_s);
        columns.push_one(Metric::Tpot, round, m.tpot_s);
        columns.push_one(Metric::TA, round, m.t_a_s);
        columns.push_one(Metric::TB, round, m.t_b_s);
        columns.push_counts(a);
        if let Some(why) = m.reuse {
            reused.push(why);
        }
    }
    let mut flags = Vec::new();
    if !reused.is_empty() {
        flags.push(Flag {
            kind: FlagKind::CacheReuseSuspected,
            message: format!(
                "cache reuse suspected: the second request skipped prefill in {} of {} pairs, so decode = (b - a) / (t_b - t_a) \
                 is meaningless and left out (first: {}). Flush the cache between the two requests (cache policy `cold`) \
                 or use the streaming method",
                reused.len(),
                pairs.len(),
                reused[0]
            ),
        });
    }
    (columns.summarize(), flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::{Chunk, RequestRole};

    fn req(max: u32, end: f64, ttft: f64, prompt: u64, cached: u64) -> RequestRecord {
        RequestRecord {
            point: "p001".into(),
            role: RequestRole::TwoPointA,
            requested_prompt_tokens: Some(1024),
            max_tokens: max,
            chunks: vec![Chunk::new(ttft, 1)],
            end_s: Some(end),
            prompt_tokens: Some(prompt),
            completion_tokens: Some(u64::from(max)),
            cached_tokens: Some(cached),
            finish_reason: Some("length".into()),
            ..RequestRecord::fixture()
        }
    }

    #[test]
    fn flushed_pair_gives_the_published_formula() {
        // The published 8k row: t_a 3.96, t_b 5.11, a = 1, b = 17 -> 16 / 1.15 = 13.9 tok/s.
        let a = req(1, 3.96, 3.96, 11405, 0);
        let b = req(17, 5.11, 3.98, 11405, 0);
        let m = pair_metrics(&a, &b);
        assert!((m.decode_tok_s.unwrap() - 16.0 / 1.15).abs() < 1e-9);
        assert!((m.tpot_s.unwrap() - 1.15 / 16.0).abs() < 1e-12);
        assert!((m.prefill_tok_s.unwrap() - 11405.0 / 3.96).abs() < 1e-9);
        assert_eq!(m.reuse, None);
    }

    #[test]
    fn a_cached_second_request_is_flagged_not_nan() {
        // The published naive 8k row: t_a 3.86, t_b 1.57.
        let a = req(1, 3.86, 3.86, 11382, 0);
        let b = req(17, 1.57, 0.2, 11382, 11381);
        let m = pair_metrics(&a, &b);
        assert_eq!(m.decode_tok_s, None);
        assert_eq!(m.tpot_s, None);
        let why = m.reuse.unwrap();
        assert!(why.contains("11381 cached tokens of 11382"), "{why}");
        let (stats, flags) = aggregate_pairs(&[(&a, &b)]);
        assert!(!stats.contains_key("decode_tok_s"));
        assert_eq!(stats["t_b_s"].mean, 1.57);
        assert_eq!(flags.len(), 1);
        assert_eq!(flags[0].kind, FlagKind::CacheReuseSuspected);
        assert!(
            flags[0]
                .message
                .starts_with("cache reuse suspected: the second request skipped prefill")
        );
    }

    #[test]
    fn pairs_get_the_same_statistics_as_streaming_points() {
        // Three flushed pairs at 11.4k: decode 16 / (t_b - t_a) = 16, 14 and 12 tok/s.
        let pairs: Vec<(RequestRecord, RequestRecord)> = [1.0, 16.0 / 14.0, 16.0 / 12.0]
            .iter()
            .map(|gap| {
                (
                    req(1, 3.9, 3.9, 11405, 0),
                    req(17, 3.9 + gap, 3.92, 11405, 0),
                )
            })
            .collect();
        let refs: Vec<(&RequestRecord, &RequestRecord)> =
            pairs.iter().map(|(a, b)| (a, b)).collect();
        let (stats, flags) = aggregate_pairs(&refs);
        assert!(flags.is_empty());
        let d = &stats["decode_tok_s"];
        assert_eq!(d.count, 3);
        assert!((d.mean - 14.0).abs() < 1e-9, "{d:?}");
        // Sample std of [16, 14, 12] is 2: CV 2 / 14.
        assert!((d.cv.unwrap() - 2.0 / 14.0).abs() < 1e-9, "{d:?}");
        let (lo, hi) = (d.ci95_low.unwrap(), d.ci95_high.unwrap());
        // The bootstrap interval lies within the samples (up to rounding in t_b - t_a).
        assert!(lo <= 14.0 && 14.0 <= hi, "{d:?}");
        assert!(lo >= 12.0 - 1e-9 && hi <= 16.0 + 1e-9, "{d:?}");
        assert_eq!(stats["t_a_s"].count, 3);
    }

    #[test]
    fn cache_hits_flag_even_when_t_b_is_larger() {
        // A tiny prompt: prefill is so fast that t_b > t_a despite the hit.
        let a = req(1, 0.010, 0.010, 100, 0);
        let b = req(17, 0.150, 0.002, 100, 99);
        let m = pair_metrics(&a, &b);
        assert_eq!(m.decode_tok_s, None);
        assert!(m.reuse.unwrap().contains("reused 99 cached prompt tokens"));
    }
}
