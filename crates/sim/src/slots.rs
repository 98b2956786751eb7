//! llama.cpp's slots, as the prefix cache of `--api llama.cpp`.
//!
//! llama-server runs each task in a slot (`-np` of them). A slot keeps the tokens of its last
//! task (prompt and output) in its part of the KV cache, and a new task reuses the prefix it
//! shares with them (`cache_prompt`, on by default); at least one prompt token is always
//! evaluated, so an identical prompt reports `prompt - 1` cached tokens. A task asking for
//! `id_slot` waits for that slot; otherwise it goes to the idle slot whose cache shares the
//! largest fraction of its prompt (above `--slot-prompt-similarity`, 0.1), else to the least
//! recently used idle slot (tools/server/server-context.cpp `get_available_slot`).
//!
//! KV cells: without `--kv-unified` each slot owns `n_ctx / n_slots` cells and a task always
//! fits (the HTTP layer refuses prompts over the slot's context and caps the output at it).
//! With a unified buffer all slots share `n_ctx` cells: a task that does not fit beside the
//! running ones and the idle slots' caches first drops idle caches (least recently used
//! first), then waits. That eviction rule is the simulator's guess; llama.cpp's own behaviour
//! when the unified buffer fills is to retry with smaller batches and finally fail the slot.

use super::request::Req;

/// The similarity (shared prefix / prompt length) above which an idle slot is preferred.
const SLOT_PROMPT_SIMILARITY: f64 = 0.1;

#[derive(Debug, Clone, Default)]
struct Slot {
    /// Tokens in the slot's cache (its last task's prompt and output, or the running task's).
    tokens: Vec<u32>,
    /// The task running in it.
    task: Option<u64>,
    /// Cells the running task reserved (prompt + output budget).
    reserved: u64,
    /// Logical time of its last release (least recently used = smallest).
    last_used: u64,
}

/// What `GET /slots` shows of one slot.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SlotView {
    /// Slot id.
    pub id: usize,
    /// The slot's context in tokens.
    pub n_ctx: u64,
    /// The task running in it, if any.
    pub task: Option<u64>,
    /// Tokens in its cache.
    pub n_cached: u64,
}

/// All slots and their caches.
#[derive(Debug)]
pub(crate) struct SlotPool {
    slots: Vec<Slot>,
    n_ctx_slot: u64,
    n_ctx: u64,
    unified: bool,
    clock: u64,
}

impl SlotPool {
    /// `n_slots` slots over `n_ctx` cells; each slot's context is `n_ctx_slot`.
    pub(crate) fn new(n_slots: usize, n_ctx: u64, n_ctx_slot: u64, unified: bool) -> Self {
        SlotPool {
            slots: vec![Slot::default(); n_slots.max(1)],
            n_ctx_slot,
            n_ctx,
            unified,
            clock: 0,
        }
    }

    /// KV cells in all.
    pub(crate) fn capacity(&self) -> u64 {
        self.n_ctx
    }

    /// Picks a slot for the request and matches its prompt against that slot's cache.
    /// False = no slot is free (or the unified buffer has no room): the request waits.
    pub(crate) fn admit(&mut self, req: &mut Req) -> bool {
        let plen = req.input_ids.len();
        let n = self.slots.len();
        let chosen = match req.opts.id_slot {
            Some(id) => {
                let id = id % n;
                if self.slots[id].task.is_some() {
                    return false;
                }
                id
            }
            None => {
                let idle = || (0..n).filter(|&i| self.slots[i].task.is_none());
                let best = idle()
                    .map(|i| (i, common_prefix(&self.slots[i].tokens, &req.input_ids)))
                    .max_by_key(|&(i, lcp)| (lcp, std::cmp::Reverse(i)));
                match best {
                    None => return false,
                    Some((i, lcp))
                        if plen > 0 && lcp as f64 / plen as f64 > SLOT_PROMPT_SIMILARITY =>
                    {
                        i
                    }
                    Some(_) => match idle().min_by_key(|&i| (self.slots[i].last_used, i)) {
                        Some(i) => i,
                        None => return false,
                    },
                }
            }
        };
        let need = (plen as u64 + req.max_new).min(self.n_ctx_slot.max(plen as u64));
        if self.unified && !self.make_room(chosen, need) {
            return false;
        }
        let lcp = common_prefix(&self.slots[chosen].tokens, &req.input_ids);
        let cached = if req.opts.cache_prompt {
            lcp.min(plen.saturating_sub(1))
        } else {
            0
        };
        let slot = &mut self.slots[chosen];
        slot.tokens.truncate(cached);
        slot.task = Some(req.task);
        slot.reserved = need;
        req.slot = Some(chosen);
        req.cached = cached as u64;
        req.prefilled = cached as u64;
        req.in_tree = 0;
        req.reserved = 0;
        true
    }

    /// Unified buffer: frees idle caches (least recently used first) until `need` cells fit
    /// beside what the other slots hold; false when they cannot.
    fn make_room(&mut self, chosen: usize, need: u64) -> bool {
        let held = |slots: &[Slot]| -> u64 {
            slots
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != chosen)
                .map(|(_, s)| {
                    if s.task.is_some() {
                        s.reserved
                    } else {
                        s.tokens.len() as u64
                    }
                })
                .sum()
        };
        while held(&self.slots) + need > self.n_ctx {
            let victim = (0..self.slots.len())
                .filter(|&i| i != chosen && self.slots[i].task.is_none())
                .filter(|&i| !self.slots[i].tokens.is_empty())
                .min_by_key(|&i| self.slots[i].last_used);
            match victim {
                Some(i) => self.slots[i].tokens.clear(),
                None => return false,
            }
        }
        true
    }

    /// A finished or aborted request leaves its prompt (and output, when its prefill was
    /// complete) in its slot's cache.
    pub(crate) fn release(&mut self, req: &mut Req) {
        let Some(id) = req.slot.take() else {
            return;
        };
        self.clock += 1;
        let slot = &mut self.slots[id];
        slot.tokens.clear();
        slot.tokens
            .extend_from_slice(&req.input_ids[..req.prefilled as usize]);
        if req.prefilled == req.input_ids.len() as u64 {
            slot.tokens.extend_from_slice(&req.output);
        }
        slot.task = None;
        slot.reserved = 0;
        slot.last_used = self.clock;
    }

    /// Empties an idle slot's cache: the tokens erased, or None while a task runs in it.
    pub(crate) fn erase(&mut self, id: usize) -> Option<u64> {
        let n = self.slots.len();
        let slot = &mut self.slots[id % n];
        if slot.task.is_some() {
            return None;
        }
        let n = slot.tokens.len() as u64;
        slot.tokens.clear();
        Some(n)
    }

    /// Empties every idle slot.
    pub(crate) fn flush(&mut self) {
        for slot in self.slots.iter_mut().filter(|s| s.task.is_none()) {
            slot.tokens.clear();
        }
    }

    /// What `/slots` shows.
    pub(crate) fn views(&self) -> Vec<SlotView> {
        self.slots
            .iter()
            .enumerate()
            .map(|(id, s)| SlotView {
                id,
                n_ctx: self.n_ctx_slot,
                task: s.task,
                n_cached: s.tokens.len() as u64,
            })
            .collect()
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{GenRequest, ReqOptions};
    use std::time::Instant;

    fn req(ids: Vec<u32>, max_new: u64, opts: ReqOptions) -> Req {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        Req::new(
            GenRequest {
                rid: "r".into(),
                input_ids: ids,
                max_new_tokens: max_new,
                received: Instant::now(),
                events: tx,
                opts,
                disagg: None,
            },
            0,
        )
    }

    fn run(pool: &mut SlotPool, r: &mut Req) {
        assert!(pool.admit(r));
        r.prefilled = r.input_ids.len() as u64;
        r.generate(r.max_new, false);
        pool.release(r);
    }

    #[test]
    fn repeated_prompt_reuses_its_slot_and_erase_empties_it() {
        let mut pool = SlotPool::new(2, 1000, 500, false);
        let mut a = req((0..40).collect(), 5, ReqOptions::default());
        run(&mut pool, &mut a);
        assert_eq!(a.cached, 0);
        let mut b = req((0..40).collect(), 5, ReqOptions::default());
        assert!(pool.admit(&mut b));
        assert_eq!((b.cached, b.slot), (39, Some(0)));
        b.prefilled = 40;
        pool.release(&mut b);
        assert_eq!(pool.erase(0), Some(40));
        let mut c = req((0..40).collect(), 5, ReqOptions::default());
        assert!(pool.admit(&mut c));
        assert_eq!(c.cached, 0, "erased");
        assert_eq!(pool.erase(c.slot.unwrap()), None, "busy");
    }

    #[test]
    fn slots_limit_admission_and_id_slot_waits() {
        let mut pool = SlotPool::new(2, 1000, 500, false);
        let mut a = req(vec![1, 2, 3], 5, ReqOptions::default());
        let mut b = req(vec![7, 8, 9], 5, ReqOptions::default());
        let mut c = req(vec![4, 5, 6], 5, ReqOptions::default());
        assert!(pool.admit(&mut a) && pool.admit(&mut b));
        assert!(!pool.admit(&mut c), "both slots busy");
        pool.release(&mut a);
        let pinned = ReqOptions {
            id_slot: Some(1),
            ..Default::default()
        };
        let mut d = req(vec![4, 5, 6], 5, pinned);
        assert!(!pool.admit(&mut d), "slot 1 is busy");
        assert!(pool.admit(&mut c));
    }

    #[test]
    fn cache_prompt_false_reuses_nothing() {
        let mut pool = SlotPool::new(1, 1000, 1000, true);
        let mut a = req((0..40).collect(), 5, ReqOptions::default());
        run(&mut pool, &mut a);
        let no_cache = ReqOptions {
            cache_prompt: false,
            ..Default::default()
        };
        let mut b = req((0..40).collect(), 5, no_cache);
        assert!(pool.admit(&mut b));
        assert_eq!(b.cached, 0);
    }

    #[test]
    fn unified_buffer_evicts_idle_caches_then_waits() {
        let mut pool = SlotPool::new(2, 100, 100, true);
        let mut a = req((0..60).collect(), 10, ReqOptions::default());
        run(&mut pool, &mut a);
        // 70 cells cached in slot 0; a different 60 + 10 needs slot 1 and slot 0's cells.
        let mut b = req((100..160).collect(), 10, ReqOptions::default());
        assert!(pool.admit(&mut b));
        assert_eq!(pool.views()[0].n_cached, 0, "evicted");
        let mut c = req((200..260).collect(), 10, ReqOptions::default());
        assert!(!pool.admit(&mut c), "b holds 70 of 100 cells");
    }
}
