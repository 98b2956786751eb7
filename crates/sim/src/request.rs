//! A request's life inside the scheduler: prefill progress, KV holdings, outputs.

use super::radix::{NodeId, RadixCache};
use super::tokenizer::{output_token, seed_of, splitmix};
use super::types::{GenRequest, ReqOptions, SpecStats};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// One request the scheduler holds (waiting, being prefilled, or decoding).
#[derive(Debug)]
pub(crate) struct Req {
    pub rid: Arc<str>,
    pub input_ids: Vec<u32>,
    pub max_new: u64,
    pub received: Instant,
    pub events: mpsc::UnboundedSender<super::types::Output>,
    /// Seed of the generated tokens.
    pub seed: u64,
    /// State of the accept-length generator.
    pub rng: u64,
    /// Prompt tokens matched in the radix cache at admission (`cached_tokens`).
    pub cached: u64,
    /// Prompt tokens whose KV exists (cached + computed).
    pub prefilled: u64,
    /// Node the request's cached prefix ends at; locked while the request lives.
    pub node: NodeId,
    /// Tokens of this request held by the tree (the locked prefix length).
    pub in_tree: u64,
    /// Private KV tokens reserved in the pool (not in the tree).
    pub reserved: u64,
    /// Generated token ids.
    pub output: Vec<u32>,
    /// Generated tokens already sent to the client.
    pub sent: usize,
    /// Outputs sent so far.
    pub chunk_index: u32,
    /// Speculative counters.
    pub spec: SpecStats,
    /// Accepted draft tokens by position in the draft (index 0: the first draft token).
    pub accepted_per_pos: Vec<u64>,
    /// Model time of the latest token.
    pub last_token_at: Option<Instant>,
    /// Per-request cache options.
    pub opts: ReqOptions,
    /// The llama.cpp slot it holds (slot mode only).
    pub slot: Option<usize>,
    /// The server's task id (llama.cpp logs and timings).
    pub task: u64,
    /// Model time its prompt evaluation began (first admission).
    pub started_at: Option<Instant>,
    /// Model time of its first token.
    pub first_token_at: Option<Instant>,
    /// Times it was preempted back to the queue (vLLM's reset with running requests).
    pub preemptions: u32,
    /// `cached` at its first admission, kept across preemptions (what vLLM reports).
    pub first_cached: Option<u64>,
    /// The tokens a correct model answers a known-answer canary with, generated first
    /// (`sim::canary`; empty for any other prompt).
    pub answer: Vec<u32>,
    /// Every token it generates is garbage (the profile's `faults.garbage_past_tokens`).
    pub garbled: bool,
    /// Its part in prefill-decode disaggregation (taken when it is played).
    pub disagg: Option<super::types::Disagg>,
    /// When the scheduler queued it.
    pub queued_at: Instant,
}

impl Req {
    /// A fresh request, not yet admitted.
    pub(crate) fn new(g: GenRequest, base_seed: u64) -> Req {
        let seed = seed_of(&g.input_ids, base_seed);
        Req {
            rid: g.rid,
            max_new: g.max_new_tokens,
            received: g.received,
            events: g.events,
            seed,
            rng: splitmix(seed ^ 0x00ac_ce97),
            cached: 0,
            prefilled: 0,
            node: RadixCache::ROOT,
            in_tree: 0,
            reserved: 0,
            output: Vec::new(),
            sent: 0,
            chunk_index: 0,
            spec: SpecStats::default(),
            accepted_per_pos: Vec::new(),
            last_token_at: None,
            opts: g.opts,
            slot: None,
            task: 0,
            started_at: None,
            first_token_at: None,
            preemptions: 0,
            first_cached: None,
            answer: super::canary::answer(&g.input_ids).unwrap_or_default(),
            garbled: false,
            disagg: g.disagg,
            queued_at: Instant::now(),
            input_ids: g.input_ids,
        }
    }

    /// Prompt length in tokens.
    pub(crate) fn prompt_len(&self) -> u64 {
        self.input_ids.len() as u64
    }

    /// Prompt tokens still to compute.
    pub(crate) fn remaining_prefill(&self) -> u64 {
        self.prompt_len() - self.prefilled
    }

    /// Tokens in context (prompt + generated).
    pub(crate) fn context_len(&self) -> u64 {
        self.prompt_len() + self.output.len() as u64
    }

    /// Whether the request has generated all it may.
    pub(crate) fn done(&self) -> bool {
        self.output.len() as u64 >= self.max_new
    }

    /// Appends `k` generated tokens (capped at max_new); returns how many were added.
    /// `garbage`: this step's tokens are garbage (a fault of the profile).
    pub(crate) fn generate(&mut self, k: u64, garbage: bool) -> u64 {
        let k = k.min(self.max_new - self.output.len() as u64);
        for _ in 0..k {
            let i = self.output.len() as u64;
            let id = if garbage || self.garbled {
                super::canary::garbage_id()
            } else {
                match self.answer.get(i as usize) {
                    Some(&a) => a,
                    None => output_token(self.seed, i),
                }
            };
            self.output.push(id);
        }
        k
    }

    /// Draws how many tokens one speculative verify step emits: 1 + Binomial(n-1, p) with
    /// p chosen so the mean is `mean`, so the count varies between 1 and n.
    pub(crate) fn draw_accept(&mut self, n: u32, mean: f64) -> u64 {
        if n <= 1 {
            return 1;
        }
        let p = ((mean - 1.0) / (n - 1) as f64).clamp(0.0, 1.0);
        let mut k = 1;
        for _ in 1..n {
            self.rng = splitmix(self.rng);
            let u = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
            if u < p {
                k += 1;
            }
        }
        k
    }

    /// Whether the client went away.
    pub(crate) fn disconnected(&self) -> bool {
        self.events.is_closed()
    }

    /// Prompt tokens it reports as cached (its first admission's match).
    pub(crate) fn reported_cached(&self) -> u64 {
        self.first_cached.unwrap_or(self.cached)
    }

    /// Tokens whose KV the request holds outside the tree.
    pub(crate) fn private_used(&self) -> u64 {
        self.prefilled - self.in_tree.min(self.prefilled) + self.output.len() as u64
    }
}
