//! The KV pool: a fixed number of token slots shared by running requests (private tokens)
//! and the radix cache (shared prefixes). A request reserves room for its uncached prompt at
//! admission, plus either its whole output (vLLM's surface, llama.cpp: it can never run out
//! mid-generation) or nothing more, growing a token at a time as it decodes while SGLang's
//! admission estimate (`new_token_ratio`) keeps room for the running requests' outputs; when
//! that estimate was too low the scheduler retracts requests (`sim::scheduler`). Without room
//! a request waits in the queue.

use super::radix::RadixCache;
use super::request::Req;

/// Pool accounting plus the radix tree.
#[derive(Debug)]
pub(crate) struct KvPool {
    tree: RadixCache,
    capacity: u64,
    /// Private tokens reserved by live requests.
    reserved: u64,
    radix: bool,
    /// Cache hits count whole blocks of this many tokens (vLLM's `--block-size`; 1 = any token).
    block: u64,
}

impl KvPool {
    /// A pool of `capacity` tokens; `radix` = prefix caching on.
    pub(crate) fn new(capacity: u64, radix: bool) -> Self {
        KvPool {
            tree: RadixCache::new(),
            capacity,
            reserved: 0,
            radix,
            block: 1,
        }
    }

    /// Cache hits are rounded down to whole blocks of `block` tokens, as vLLM's block-hash
    /// prefix cache reports them.
    pub(crate) fn with_block(mut self, block: u64) -> Self {
        self.block = block.max(1);
        self
    }

    /// Pool capacity in tokens.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Cached tokens a live request protects.
    pub(crate) fn locked_tokens(&self) -> u64 {
        self.tree.locked_tokens()
    }

    /// Empties the cache (the caller checked nothing is running).
    pub(crate) fn flush(&mut self) {
        self.tree.reset();
    }

    /// Matches the request's prompt in the cache and reserves pool room for the rest of it
    /// plus its output, evicting cold prefixes as needed. False = no room; nothing changed.
    pub(crate) fn admit(&mut self, req: &mut Req) -> bool {
        let rest = req.max_new - req.output.len() as u64;
        self.admit_estimated(req, rest, 0)
    }

    /// Admits like SGLang's PrefillAdder: reserves the uncached prompt, the output generated
    /// before a retraction (recomputed) and `output_reserve` more tokens, and only when
    /// `keep_free` more tokens (the estimated growth of the running requests and this one)
    /// would still fit. False = no room; nothing changed.
    pub(crate) fn admit_estimated(
        &mut self,
        req: &mut Req,
        output_reserve: u64,
        keep_free: u64,
    ) -> bool {
        let plen = req.input_ids.len();
        // At least one prompt token is always computed: it produces the first output token.
        let (matched, node) = if self.radix && plen > 1 {
            let (m, node) = self.tree.match_prefix(&req.input_ids[..plen - 1]);
            let whole = m - m % self.block as usize;
            if whole == m {
                (m, node)
            } else {
                self.tree.match_prefix(&req.input_ids[..whole])
            }
        } else {
            (0, RadixCache::ROOT)
        };
        self.tree.lock(node);
        let need = (plen - matched) as u64 + req.output.len() as u64 + output_reserve;
        let over = (self.reserved + self.tree.total_tokens() + need + keep_free)
            .saturating_sub(self.capacity);
        if over > 0 {
            self.tree.evict(over);
        }
        if self.reserved + self.tree.total_tokens() + need + keep_free > self.capacity {
            self.tree.unlock(node);
            return false;
        }
        self.reserved += need;
        req.reserved = need;
        req.node = node;
        req.cached = matched as u64;
        req.prefilled = matched as u64;
        req.in_tree = matched as u64;
        true
    }

    /// Tokens free now or after evicting every unlocked cached prefix.
    pub(crate) fn available(&self) -> u64 {
        self.capacity
            .saturating_sub(self.reserved + self.tree.total_tokens() - self.tree.evictable_tokens())
    }

    /// Reserves `n` more private tokens for a decoding request, evicting cold prefixes as
    /// needed. False = the pool is full (the caller retracts); nothing changed.
    pub(crate) fn grow(&mut self, req: &mut Req, n: u64) -> bool {
        if n == 0 {
            return true;
        }
        if self.available() < n {
            return false;
        }
        let over = (self.reserved + self.tree.total_tokens() + n).saturating_sub(self.capacity);
        if over > 0 {
            self.tree.evict(over);
        }
        self.reserved += n;
        req.reserved += n;
        true
    }

    /// Moves the prompt tokens computed so far into the cache (SGLang caches unfinished
    /// requests' prefixes, so concurrent requests can share them).
    pub(crate) fn cache_prefix(&mut self, req: &mut Req) {
        if !self.radix {
            return;
        }
        let tokens = &req.input_ids[..req.prefilled as usize];
        let added = self.tree.insert(tokens);
        let (_, node) = self.tree.match_prefix(tokens);
        self.tree.lock(node);
        self.tree.unlock(req.node);
        req.node = node;
        req.in_tree = req.prefilled;
        let moved = added.min(req.reserved);
        req.reserved -= moved;
        self.reserved -= moved;
        self.evict_overflow();
    }

    /// Frees a finished or aborted request's reservation and caches what it computed.
    pub(crate) fn release(&mut self, req: &mut Req) {
        self.reserved -= req.reserved;
        req.reserved = 0;
        if self.radix {
            let mut tokens = req.input_ids[..req.prefilled as usize].to_vec();
            if req.prefilled == req.input_ids.len() as u64 {
                tokens.extend_from_slice(&req.output);
            }
            self.tree.insert(&tokens);
        }
        self.tree.unlock(req.node);
        req.node = RadixCache::ROOT;
        req.in_tree = 0;
        self.evict_overflow();
    }

    fn evict_overflow(&mut self) {
        let over = (self.reserved + self.tree.total_tokens()).saturating_sub(self.capacity);
        if over > 0 {
            self.tree.evict(over);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GenRequest;
    use std::time::Instant;

    fn req(ids: Vec<u32>, max_new: u64) -> Req {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        Req::new(
            GenRequest {
                rid: "r".into(),
                input_ids: ids,
                max_new_tokens: max_new,
                received: Instant::now(),
                events: tx,
                opts: Default::default(),
                disagg: None,
            },
            0,
        )
    }

    #[test]
    fn repeated_prompt_hits_cache_and_pool_bounds_admission() {
        let mut kv = KvPool::new(100, true);
        let mut a = req((0..40).collect(), 10);
        assert!(kv.admit(&mut a));
        a.prefilled = 40;
        kv.cache_prefix(&mut a);
        a.generate(10, false);
        kv.release(&mut a);
        let mut b = req((0..40).collect(), 10);
        assert!(kv.admit(&mut b));
        assert_eq!(b.cached, 39);
        // 50 cached + 11 reserved; a 60-token newcomer needs to evict b's unlocked suffix only.
        let mut c = req((100..150).collect(), 10);
        assert!(!kv.admit(&mut c), "b's prefix is locked; no room");
        kv.release(&mut b);
        assert!(kv.admit(&mut c));
        assert_eq!(c.cached, 0);
    }

    #[test]
    fn block_granularity_rounds_hits_down() {
        let mut kv = KvPool::new(1000, true).with_block(16);
        let mut a = req((0..40).collect(), 5);
        assert!(kv.admit(&mut a));
        a.prefilled = 40;
        kv.cache_prefix(&mut a);
        kv.release(&mut a);
        let mut b = req((0..40).collect(), 5);
        assert!(kv.admit(&mut b));
        assert_eq!(b.cached, 32, "39 matched, two whole blocks of 16");
        kv.release(&mut b);
        let mut c = req((0..16).collect(), 5);
        assert!(kv.admit(&mut c));
        assert_eq!(c.cached, 0, "15 matched: no whole block");
    }

    #[test]
    fn disabled_radix_never_matches() {
        let mut kv = KvPool::new(1000, false);
        for _ in 0..2 {
            let mut a = req((0..40).collect(), 5);
            assert!(kv.admit(&mut a));
            assert_eq!(a.cached, 0);
            a.prefilled = 40;
            kv.cache_prefix(&mut a);
            kv.release(&mut a);
        }
    }
}
