//! Per-request metrics (defined in docs/guide/report.md, "Metrics") and their aggregation over a point.
//!
//! Only chunks that carried at least one output token ("token chunks") count for timing: role-only
//! chat chunks, empty deltas and the OpenAI usage-only chunk are kept in records but skipped here.
//!
//! ITL is token-normalised only where the stream gave every chunk's token count
//! ([`ChunkTokens::Exact`]: SGLang's `meta_info`, OpenAI usage on every chunk). Where it did not
//! (a server without continuous usage stats, where a non-empty chunk is taken as one token but
//! may carry several), ITL is the gap per chunk, one value per gap, the same as ICL; the point's
//! summary says so with an `itl-per-chunk` flag when the server's total shows chunks held
//! several tokens. TPOT and decode tok/s use the server's `completion_tokens` and stay per token
//! either way.

use indexmap::IndexMap;

use servebench_model::catalog::{Method, Metric};
use servebench_model::results::records::{ChunkTokens, RequestRecord, RequestRole, Stat};

use super::samples::Samples;
use super::stats::seed_for;

/// The metrics of one request. Times in seconds, rates in tokens per second.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestMetrics {
    /// Seconds from send to the first chunk carrying at least one output token.
    pub ttft_s: Option<f64>,
    /// Prompt tokens per second of TTFT: prompt_tokens / TTFT, for a request that found
    /// nothing cached (unknown `cached_tokens` taken as 0). None for a request that hit the
    /// cache: its TTFT is mostly the server's per-request overhead plus the uncached tail's
    /// prefill over the cached context, so the quotient is no prefill speed (a radix cache
    /// "halved" it). A point keeps it only where one request runs at a time (see
    /// `summary::prefill_is_speed`).
    pub prefill_tok_s: Option<f64>,
    /// Output tokens after the first token chunk per second between the first and last token
    /// chunks. None with fewer than two token chunks or a zero span.
    pub decode_tok_s: Option<f64>,
    /// Seconds per output token after the first: (E2E - TTFT) / (completion_tokens - 1). None
    /// when completion_tokens <= 1.
    pub tpot_s: Option<f64>,
    /// Seconds from send to the end of the stream.
    pub e2e_s: Option<f64>,
    /// Inter-token latencies, seconds. With exact per-chunk counts, token-normalised: each token
    /// chunk's gap to the previous token chunk divided by its token count, repeated once per
    /// token. With assumed counts, each gap once (per chunk).
    pub itl_s: Vec<f64>,
    /// Inter-chunk latencies, seconds: raw gaps between consecutive token chunks.
    pub icl_s: Vec<f64>,
    /// Output tokens per speculative verify step after the first token (the record's
    /// `accept_length`). None where the verify steps are not known.
    pub accept_length: Option<f64>,
    /// Seconds of decode per verify step: (last token time - first token time) / verify steps.
    /// None where the verify steps are not known or the span is zero.
    pub verify_step_s: Option<f64>,
    /// Seconds from send to the first chunk carrying an answer (or tool-call) token: TTFT for
    /// a request that did not think. None when no answer came (`no_answer` says why).
    pub ttfa_s: Option<f64>,
    /// Thinking tokens (0 for a request that did not think) and the rest of its output.
    pub reasoning_tokens: Option<f64>,
    pub answer_tokens: Option<f64>,
    /// Thinking tokens after the first token chunk per second, from the first token to the
    /// last thinking chunk; None with fewer than two thinking chunks or a zero span.
    pub reasoning_tok_s: Option<f64>,
    /// Answer tokens after the first answer chunk per second, from the first answer chunk to
    /// the last one; None with fewer than two answer chunks or a zero span.
    pub answer_tok_s: Option<f64>,
}

/// Computes [`RequestMetrics`] from a record. Works on failed records too, but callers exclude
/// them from aggregates.
pub fn request_metrics(r: &RequestRecord) -> RequestMetrics {
    let token_chunks: Vec<_> = r.chunks.iter().filter(|c| c.tokens > 0).collect();
    let mut m = RequestMetrics {
        e2e_s: r.end_s,
        ..RequestMetrics::default()
    };
    let Some(first) = token_chunks.first() else {
        return m;
    };
    let last = token_chunks[token_chunks.len() - 1];
    let ttft = first.t_s;
    m.ttft_s = Some(ttft);

    if let Some(prompt) = r.prompt_tokens
        && ttft > 0.0
    {
        // A request that found part of its prompt cached prefills the rest over a cached
        // context with the same per-request overhead: a "rate" from it (161 tok/s for one
        // token; half the cold rate for a half-cached prompt) says nothing about prefill speed.
        if r.cached_tokens.unwrap_or(0) == 0 {
            m.prefill_tok_s = Some(prompt as f64 / ttft);
        }
    }

    let completion = r
        .completion_tokens
        .unwrap_or_else(|| token_chunks.iter().map(|c| u64::from(c.tokens)).sum());
    let span = last.t_s - first.t_s;
    let after_first = completion.saturating_sub(u64::from(first.tokens));
    if token_chunks.len() >= 2 && span > 0.0 && !held_back(&token_chunks) {
        m.decode_tok_s = Some(after_first as f64 / span);
    }
    m.accept_length = r.accept_length.filter(|a| a.is_finite());
    if let Some(steps) = r.verify_steps.filter(|n| *n > 0)
        && span > 0.0
    {
        m.verify_step_s = Some(span / steps as f64);
    }

    if let Some(e2e) = r.end_s
        && completion > 1
    {
        m.tpot_s = Some((e2e - ttft) / (completion - 1) as f64);
    }

    phases(r, &token_chunks, completion, &mut m);

    let exact = r.chunk_tokens() == ChunkTokens::Exact;
    for pair in token_chunks.windows(2) {
        let gap = pair[1].t_s - pair[0].t_s;
        m.icl_s.push(gap);
        if exact {
            let per_token = gap / f64::from(pair[1].tokens);
            m.itl_s
                .extend(std::iter::repeat_n(per_token, pair[1].tokens as usize));
        } else {
            m.itl_s.push(gap);
        }
    }
    m
}

/// Whether a request's decode speed is left out because its tokens were held back on the way
/// (see [`held_back`]).
pub(crate) fn decode_held_back(r: &RequestRecord) -> bool {
    let token_chunks: Vec<_> = r.chunks.iter().filter(|c| c.tokens > 0).collect();
    token_chunks.len() >= 2 && held_back(&token_chunks)
}

/// Whether most of a request's tokens after the first came in one read that held several of
/// the server's chunks: something between the server and the client (a router, a proxy)
/// held them back and let them go together, so the reads' times say when they were let go,
/// not when they were made. A decode rate from such a request (its span a gap between two
/// reads: 51,000 tok/s through a router) measures nothing. Chunks of one read share its
/// stamp; a speculative step's tokens in one chunk are the server's own chunk, not held back.
fn held_back(token_chunks: &[&servebench_model::results::records::Chunk]) -> bool {
    let after_first: u64 = token_chunks
        .iter()
        .skip(1)
        .map(|c| u64::from(c.tokens))
        .sum();
    let mut i = 0;
    while i < token_chunks.len() {
        let t = token_chunks[i].t_s;
        let read = token_chunks[i..].iter().take_while(|c| c.t_s == t).count();
        let tokens: u64 = (i..i + read)
            .filter(|&k| k > 0)
            .map(|k| u64::from(token_chunks[k].tokens))
            .sum();
        if read >= 2 && 2 * tokens > after_first {
            return true;
        }
        i += read;
    }
    false
}

/// The thinking and answer phases of a request whose first token chunk is `token_chunks[0]`.
fn phases(
    r: &RequestRecord,
    token_chunks: &[&servebench_model::results::records::Chunk],
    completion: u64,
    m: &mut RequestMetrics,
) {
    let first = token_chunks[0];
    let answer_chunks: Vec<_> = token_chunks.iter().filter(|c| c.answer() > 0).collect();
    // The record's own rule (its `ttfa_s` and `answer_tokens`), for records of every age.
    let Some(split) = r.split() else {
        return;
    };
    m.ttfa_s = split.ttfa_s;
    let (counted, thinking) = (split.counted_reasoning, split.reasoning_tokens);
    m.reasoning_tokens = Some(thinking as f64);
    m.answer_tokens = Some(split.answer_tokens as f64);
    // Thinking: from the first token (thinking starts it) to the last chunk with thinking.
    let thinking_chunks: Vec<_> = token_chunks.iter().filter(|c| c.reasoning > 0).collect();
    if let (Some(first_thinking), Some(last)) = (thinking_chunks.first(), thinking_chunks.last())
        && thinking_chunks.len() >= 2
        && last.t_s > first.t_s
        && first_thinking.t_s == first.t_s
    {
        let after_first = counted.saturating_sub(u64::from(first.reasoning));
        m.reasoning_tok_s = Some(after_first as f64 / (last.t_s - first.t_s));
    }
    if let (Some(a), Some(b)) = (answer_chunks.first(), answer_chunks.last())
        && answer_chunks.len() >= 2
        && b.t_s > a.t_s
    {
        let after = completion
            .saturating_sub(thinking)
            .saturating_sub(u64::from(a.answer()));
        m.answer_tok_s = Some(after as f64 / (b.t_s - a.t_s));
    }
}

/// Aggregates over the measured (role `measure`), successful records: `ttft_s`,
/// `prefill_tok_s`, `decode_tok_s`, `tpot_s`, `itl_s` and `icl_s` (pooled over every gap of
/// every request), `e2e_s`, `prompt_tokens`, `cached_tokens`, `completion_tokens`. A metric with
/// no value (e.g. `cached_tokens` from an OpenAI server without cache reports) is left out.
///
/// Each metric carries a 95% confidence interval of its mean: across round means when the
/// records span three rounds or more, else a bootstrap over requests seeded by the metric's name
/// (see [`summarize_requests`](super::stats::summarize_requests)).
#[cfg(test)]
pub(crate) fn aggregate(records: &[&RequestRecord]) -> IndexMap<String, Stat> {
    let mut columns = Columns::new(Method::Streaming);
    for r in records {
        columns.push_request(r);
    }
    columns.summarize()
}

/// A record's place among a point's records: its round, then its index (the order the runner
/// hands records to the summary in, whatever order they finished in).
pub(crate) fn order_key(r: &RequestRecord) -> u64 {
    (u64::from(r.round) << 32) | u64::from(r.index)
}

/// Per-request samples of a point's metrics, summarised the same way for every method: numpy
/// percentiles and a 95% confidence interval (see [`summarize_requests`](super::stats::summarize_requests)), exact up to
/// [`EXACT_CAP`](super::samples::EXACT_CAP) values of a metric (see [`Samples`]).
#[derive(Debug, Clone)]
pub(crate) struct Columns {
    columns: IndexMap<Metric, Samples>,
    /// The order key of the request being pushed (see [`order_key`]); 0 keeps push order.
    order: u64,
    /// Some request pushed thought: the thinking metrics are the point's (else TTFA is TTFT
    /// and the rest say nothing, so they are left out).
    thought: bool,
}

impl Columns {
    /// Empty columns for the metrics of `method`, in catalogue order; samples of other metrics
    /// are ignored.
    pub(crate) fn new(method: Method) -> Columns {
        Columns::with_cap(method, super::samples::EXACT_CAP)
    }

    /// Like [`new`](Self::new), keeping `cap` values of each metric exactly.
    pub(crate) fn with_cap(method: Method, cap: usize) -> Columns {
        Columns {
            columns: Metric::of_method(method)
                .chain(Metric::of_speculative().filter(|_| method == Method::Streaming))
                .chain(Metric::of_reasoning().filter(|_| method == Method::Streaming))
                .map(|m| (m, Samples::with_cap(cap)))
                .collect(),
            order: 0,
            thought: false,
        }
    }

    /// The streaming metrics of one measured (role `measure`), successful record; others are
    /// left out.
    pub(crate) fn push_request(&mut self, r: &RequestRecord) {
        if r.role != RequestRole::Measure || r.error.is_some() {
            return;
        }
        self.order = order_key(r);
        let m = request_metrics(r);
        self.push_one(Metric::Ttft, r.round, m.ttft_s);
        self.push_one(Metric::Prefill, r.round, m.prefill_tok_s);
        self.push_one(Metric::Decode, r.round, m.decode_tok_s);
        self.push_one(Metric::Tpot, r.round, m.tpot_s);
        self.push_one(Metric::E2e, r.round, m.e2e_s);
        self.push_counts(r);
        self.push(Metric::Itl, r.round, m.itl_s);
        self.push(Metric::Icl, r.round, m.icl_s);
        self.push_one(Metric::AcceptLength, r.round, m.accept_length);
        self.push_one(Metric::VerifyStep, r.round, m.verify_step_s);
        self.thought |= r.thought();
        self.push_one(Metric::Ttfa, r.round, m.ttfa_s);
        self.push_one(Metric::ReasoningTokens, r.round, m.reasoning_tokens);
        self.push_one(Metric::AnswerTokens, r.round, m.answer_tokens);
        self.push_one(Metric::ReasoningDecode, r.round, m.reasoning_tok_s);
        self.push_one(Metric::AnswerDecode, r.round, m.answer_tok_s);
    }

    /// One request's values of `metric` (several for per-gap metrics); none is no sample.
    pub(crate) fn push(&mut self, metric: Metric, round: u32, values: Vec<f64>) {
        if let Some(col) = self.columns.get_mut(&metric) {
            col.push(self.order, round, &values);
        }
    }

    /// One request's single value of `metric`, when it has one.
    pub(crate) fn push_one(&mut self, metric: Metric, round: u32, value: Option<f64>) {
        if let (Some(col), Some(v)) = (self.columns.get_mut(&metric), value) {
            col.push(self.order, round, &[v]);
        }
    }

    /// The server's token counts of `r`: `prompt_tokens`, `cached_tokens`, `completion_tokens`.
    pub(crate) fn push_counts(&mut self, r: &RequestRecord) {
        let count = |n: Option<u64>| n.map(|n| n as f64);
        self.push_one(Metric::PromptTokens, r.round, count(r.prompt_tokens));
        self.push_one(Metric::CachedTokens, r.round, count(r.cached_tokens));
        self.push_one(
            Metric::CompletionTokens,
            r.round,
            count(r.completion_tokens),
        );
    }

    /// A Stat per metric with samples, keyed by the metric's name; metrics without any are left
    /// out.
    pub(crate) fn summarize(&self) -> IndexMap<String, Stat> {
        let thinking: Vec<Metric> = Metric::of_reasoning().collect();
        self.columns
            .iter()
            .filter(|(m, _)| self.thought || !thinking.contains(m))
            .filter_map(|(m, samples)| {
                samples
                    .stat(seed_for(m.name()))
                    .map(|s| (m.name().to_string(), s))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::results::records::{Chunk, TokenSource};

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    fn record(chunks: &[(f64, u32)], end_s: f64, completion: u64) -> RequestRecord {
        RequestRecord {
            max_tokens: 8,
            chunks: chunks
                .iter()
                .map(|&(t_s, tokens)| Chunk::new(t_s, tokens))
                .collect(),
            end_s: Some(end_s),
            prompt_tokens: Some(1000),
            completion_tokens: Some(completion),
            cached_tokens: Some(200),
            finish_reason: Some("length".into()),
            ..RequestRecord::fixture()
        }
    }

    #[test]
    fn hand_computed_speculative_request() {
        // A role chunk (0 tokens) at 0.1 s, then tokens 1@0.5, 3@0.8, 2@1.0; [DONE] at 1.1 s.
        let r = record(&[(0.1, 0), (0.5, 1), (0.8, 3), (1.0, 2)], 1.1, 6);
        let m = request_metrics(&r);
        close(m.ttft_s.unwrap(), 0.5);
        // 200 of its 1000 prompt tokens were cached: no prefill speed.
        assert_eq!(m.prefill_tok_s, None);
        close(m.decode_tok_s.unwrap(), 5.0 / 0.5); // (6 - 1) / (1.0 - 0.5)
        close(m.tpot_s.unwrap(), 0.6 / 5.0); // (1.1 - 0.5) / (6 - 1)
        close(m.e2e_s.unwrap(), 1.1);
        let itl = [0.1, 0.1, 0.1, 0.1, 0.1]; // 0.3 s / 3 tokens x3, 0.2 s / 2 tokens x2
        assert_eq!(m.itl_s.len(), itl.len());
        m.itl_s.iter().zip(itl).for_each(|(a, b)| close(*a, b));
        assert_eq!(m.icl_s.len(), 2);
        close(m.icl_s[0], 0.3);
        close(m.icl_s[1], 0.2);
        // Not a record of verify steps: no speculative metrics.
        assert_eq!((m.accept_length, m.verify_step_s), (None, None));
        // The server says 2 verify steps: 5 tokens over 0.5 s in 2 steps.
        let mut r = r;
        r.set_verify_steps(Some(2));
        let m = request_metrics(&r);
        close(m.accept_length.unwrap(), 2.5);
        close(m.verify_step_s.unwrap(), 0.25);
        // Decode speed is what the two buy: 2.5 tokens per 0.25 s step.
        close(m.decode_tok_s.unwrap(), 2.5 / 0.25);
    }

    /// Through a router that holds a stream back, 31 of 32 tokens came in one read after the
    /// first: the gap between the two reads is no decode time, so no decode rate (it was
    /// 31 / 0.0005 s = 62,000 tok/s). Tokens that came one read each still give one.
    #[test]
    fn tokens_held_back_and_let_go_together_give_no_decode_rate_held_back() {
        let mut chunks = vec![(0.2, 1)];
        chunks.extend(std::iter::repeat_n((0.2005, 1), 31));
        let r = record(&chunks, 0.201, 32);
        let m = request_metrics(&r);
        assert_eq!(m.decode_tok_s, None);
        close(m.ttft_s.unwrap(), 0.2);
        // The first read held them all: the same.
        let mut chunks = vec![(0.2, 1)];
        chunks.extend(std::iter::repeat_n((0.2, 1), 30));
        chunks.push((0.2001, 1));
        assert_eq!(
            request_metrics(&record(&chunks, 0.201, 32)).decode_tok_s,
            None
        );
        // One token per read: a rate.
        let chunks: Vec<(f64, u32)> = (0..32).map(|i| (0.2 + 0.01 * f64::from(i), 1)).collect();
        close(
            request_metrics(&record(&chunks, 0.6, 32))
                .decode_tok_s
                .unwrap(),
            31.0 / 0.31,
        );
    }

    #[test]
    fn assumed_chunk_counts_give_itl_per_chunk() {
        // OpenAI without continuous usage: each chunk taken as one token, the last chunk's count
        // made up from the final usage (6 tokens in 3 chunks).
        let mut r = record(&[(0.5, 1), (0.8, 1), (1.0, 4)], 1.1, 6);
        r.token_source = TokenSource::Usage;
        r.chunk_tokens = Some(ChunkTokens::AssumedOne);
        let m = request_metrics(&r);
        assert_eq!(m.itl_s.len(), 2);
        close(m.itl_s[0], 0.3);
        close(m.itl_s[1], 0.2);
        assert_eq!(m.itl_s, m.icl_s);
        // TPOT and decode still use the server's total.
        close(m.tpot_s.unwrap(), 0.6 / 5.0);
        close(m.decode_tok_s.unwrap(), 5.0 / 0.5);
        // Older OpenAI records (no field) were assumed too; native ones exact.
        r.chunk_tokens = None;
        assert_eq!(r.chunk_tokens(), ChunkTokens::AssumedOne);
        r.token_source = TokenSource::MetaInfo;
        assert_eq!(r.chunk_tokens(), ChunkTokens::Exact);
        assert_eq!(request_metrics(&r).itl_s.len(), 5); // 1 + 4 tokens after the first chunk
    }

    #[test]
    fn single_token_request_has_no_decode_or_tpot() {
        let mut r = record(&[(0.25, 1)], 0.3, 1);
        r.cached_tokens = None;
        let m = request_metrics(&r);
        close(m.ttft_s.unwrap(), 0.25);
        close(m.prefill_tok_s.unwrap(), 4000.0); // cached unknown counts as 0
        assert_eq!((m.decode_tok_s, m.tpot_s), (None, None));
        assert!(m.itl_s.is_empty() && m.icl_s.is_empty());
    }

    #[test]
    fn no_token_chunks() {
        let m = request_metrics(&record(&[(0.1, 0)], 0.2, 0));
        assert_eq!(m.ttft_s, None);
        assert_eq!(m.e2e_s, Some(0.2));
    }

    #[test]
    fn aggregate_pools_gaps_and_skips_failures_and_primes() {
        let a = record(&[(0.5, 1), (0.8, 3)], 0.9, 4); // itl 0.1 x3
        let b = record(&[(1.0, 1), (1.4, 1)], 1.5, 2); // itl 0.4
        let mut failed = record(&[(0.1, 1)], 0.2, 1);
        failed.error = Some(servebench_model::results::records::RequestError {
            kind: servebench_model::results::records::ErrorKind::Timeout,
            message: "t".into(),
            status: None,
            body_head: None,
        });
        let mut prime = record(&[(0.1, 1)], 0.2, 1);
        prime.role = RequestRole::Prime;
        let mut a = a;
        let mut b = b;
        // Nothing cached: prefill speeds (a cache hit has none).
        a.cached_tokens = Some(0);
        b.cached_tokens = Some(0);
        let agg = aggregate(&[&a, &b, &failed, &prime]);
        // Exactly the declared list, in its order (expectations and reports rely on it).
        let keys: Vec<_> = agg.keys().map(String::as_str).collect();
        let declared: Vec<_> = Metric::of_method(Method::Streaming)
            .map(Metric::name)
            .collect();
        assert_eq!(keys, declared);
        assert_eq!(agg["ttft_s"].count, 2);
        close(agg["ttft_s"].mean, 0.75);
        assert_eq!(agg["itl_s"].count, 4);
        close(agg["itl_s"].mean, 0.175); // (0.1 * 3 + 0.4) / 4
        close(agg["itl_s"].p50, 0.1); // np.percentile([0.1,0.1,0.1,0.4], 50) = 0.1
        close(agg["itl_s"].p90, 0.31); // np.percentile([0.1,0.1,0.1,0.4], 90) = 0.31
        assert_eq!(agg["icl_s"].count, 2);
        close(agg["completion_tokens"].mean, 3.0);
    }

    #[test]
    fn aggregate_takes_the_interval_across_three_rounds() {
        // TTFT round means 0.5, 0.6, 0.7 (one request each): mean 0.6, s = 0.1,
        // half = 4.3027 * 0.1 / sqrt(3).
        let records: Vec<RequestRecord> = [0.5, 0.6, 0.7]
            .into_iter()
            .enumerate()
            .map(|(round, ttft)| {
                let mut r = record(&[(ttft, 1), (ttft + 0.1, 1)], ttft + 0.2, 2);
                r.round = round as u32;
                r
            })
            .collect();
        let refs: Vec<&RequestRecord> = records.iter().collect();
        let agg = aggregate(&refs);
        let ttft = &agg["ttft_s"];
        assert_eq!(
            ttft.ci_method,
            Some(servebench_model::results::records::CiMethod::Repeats)
        );
        let half = 4.3027 * 0.1 / 3f64.sqrt();
        close(ttft.ci95_low.unwrap(), 0.6 - half);
        close(ttft.ci95_high.unwrap(), 0.6 + half);
        close(ttft.cv.unwrap(), 0.1 / 0.6);

        // The same requests in one round: a bootstrap over the three requests instead.
        let one_round: Vec<RequestRecord> = records
            .iter()
            .cloned()
            .map(|mut r| {
                r.round = 0;
                r
            })
            .collect();
        let refs: Vec<&RequestRecord> = one_round.iter().collect();
        let agg = aggregate(&refs);
        assert_eq!(
            agg["ttft_s"].ci_method,
            Some(servebench_model::results::records::CiMethod::BootstrapRequests)
        );
        assert_eq!(agg, aggregate(&refs), "deterministic");
    }
}
