//! The scheduler loop, modelled on SGLang's: one thread, a waiting queue, continuous batching,
//! chunked prefill with priority over decode, and a KV pool shared with the radix cache.
//!
//! Timing is honest: each iteration has an absolute deadline (previous deadline + modelled
//! duration); the thread sleeps until shortly before it, spins the rest, then sends every
//! output of that iteration at once. Deadlines chain, so sleep jitter never accumulates.

use super::config::SimConfig;
use super::kv::KvPool;
use super::memory::{ActivationMemory, OutOfMemory};
use super::request::Req;
use super::state::Shared;
use super::trace::TraceEntry;
use super::types::{Command, Finish, Output};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// Sleep until this long before a deadline, then spin: OS sleeps overshoot by ~50-100 us.
const SPIN: Duration = Duration::from_micros(200);
/// If the loop falls this far behind its model clock, it restarts the clock from now
/// (the simulated GPU got slower) instead of bursting to catch up.
const SLIP: Duration = Duration::from_millis(2);

/// Starts the scheduler thread.
pub fn spawn(
    config: &SimConfig,
    shared: Arc<Shared>,
    rx: Receiver<Command>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let s = Scheduler::new(config.clone(), shared, rx);
    std::thread::Builder::new()
        .name("sim-scheduler".into())
        .spawn(move || s.run())
}

struct Scheduler {
    cfg: SimConfig,
    shared: Arc<Shared>,
    rx: Receiver<Command>,
    kv: KvPool,
    /// Activation memory outside the static pool; None = the profile does not model it.
    memory: Option<ActivationMemory>,
    waiting: VecDeque<Req>,
    running: Vec<Req>,
    /// The one request whose prefill is split over iterations.
    chunked: Option<Req>,
    pending_aborts: Vec<Option<String>>,
    /// Model time at which the previous iteration ended.
    clock: Instant,
    decode_steps: u64,
    interval: LogInterval,
    trace_buf: Vec<TraceEntry>,
    prompt_total: u64,
    cached_total: u64,
}

/// Counters between two Decode log lines.
struct LogInterval {
    since: Instant,
    tokens: u64,
    spec_steps: u64,
    spec_correct: u64,
    spec_proposed: u64,
}

struct PrefillItem {
    req: Req,
    new_tokens: u64,
}

impl Scheduler {
    fn new(cfg: SimConfig, shared: Arc<Shared>, rx: Receiver<Command>) -> Self {
        let kv = KvPool::new(cfg.pool_tokens(), !cfg.disable_radix_cache);
        let memory = ActivationMemory::new(
            &cfg.profile.memory,
            cfg.mem_fraction_static,
            cfg.expandable_segments,
        );
        Scheduler {
            memory,
            cfg,
            shared,
            rx,
            kv,
            waiting: VecDeque::new(),
            running: Vec::new(),
            chunked: None,
            pending_aborts: Vec::new(),
            clock: Instant::now(),
            decode_steps: 0,
            interval: LogInterval {
                since: Instant::now(),
                tokens: 0,
                spec_steps: 0,
                spec_correct: 0,
                spec_proposed: 0,
            },
            trace_buf: Vec::new(),
            prompt_total: 0,
            cached_total: 0,
        }
    }

    fn run(mut self) {
        if let Some(m) = &self.memory {
            self.cfg.log.info(&format!(
                "Memory pool end. avail mem={:.2} GB",
                m.free_mib() / 1024.0
            ));
        }
        if !self.cfg.skip_warmup {
            std::thread::sleep(self.cfg.profile.warmup());
        }
        self.cfg
            .log
            .info("The server is fired up and ready to roll!");
        self.shared.set_ready();
        self.clock = Instant::now();
        loop {
            loop {
                match self.rx.try_recv() {
                    Ok(c) => {
                        if self.handle(c) {
                            return;
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return,
                }
            }
            self.drop_aborted();
            if self.idle() {
                self.publish();
                match self.rx.recv() {
                    Ok(c) => {
                        if self.handle(c) {
                            return;
                        }
                    }
                    Err(_) => return,
                }
                self.clock = Instant::now();
                continue;
            }
            let now = Instant::now();
            let start = if now > self.clock + SLIP {
                now
            } else {
                self.clock
            };
            let deadline;
            if let Some(batch) = self.form_prefill() {
                let new_tokens: u64 = batch.iter().map(|b| b.new_tokens).sum();
                let segments: Vec<(u64, u64)> = batch
                    .iter()
                    .map(|b| (b.req.prefilled, b.new_tokens))
                    .collect();
                // SGLang logs the batch, then dies in its forward pass.
                self.log_prefill(&batch, new_tokens);
                if let Some(limit) = self.cfg.profile.oom_prefill_tokens
                    && new_tokens > limit
                {
                    self.crash_oom(&self.token_limit_oom(new_tokens), new_tokens);
                    return;
                }
                if let Some(Err(oom)) = self.memory.as_mut().map(|m| m.prefill(&segments)) {
                    self.crash_oom(&oom.torch_message(), new_tokens);
                    return;
                }
                deadline = start + self.cfg.profile.prefill_time(&segments);
                if self.wait_until(deadline) {
                    return;
                }
                self.finish_prefill(batch, deadline);
            } else if !self.running.is_empty() {
                let ctx: u64 = self.running.iter().map(Req::context_len).sum();
                let overhead = self
                    .cfg
                    .speculative
                    .as_ref()
                    .map_or(0.0, |s| s.step_overhead_ms);
                deadline = start
                    + self
                        .cfg
                        .profile
                        .decode_time(self.running.len() as u64, ctx, overhead);
                // SGLang logs the decode batch as it launches it.
                if (self.decode_steps + 1).is_multiple_of(self.cfg.decode_log_interval) {
                    self.log_decode(start);
                }
                if self.wait_until(deadline) {
                    return;
                }
                self.decode_step(deadline);
            } else {
                // Waiting requests that cannot be admitted while nothing runs: wait for news.
                match self.rx.recv_timeout(Duration::from_millis(5)) {
                    Ok(c) => {
                        if self.handle(c) {
                            return;
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                self.clock = Instant::now();
                continue;
            }
            self.clock = deadline;
            self.publish();
        }
    }

    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty() && self.chunked.is_none()
    }

    /// Handles a command; returns true to stop the loop.
    fn handle(&mut self, c: Command) -> bool {
        match c {
            Command::Generate(g) => self.waiting.push_back(Req::new(g, self.cfg.seed)),
            Command::Flush(reply) => {
                let ok = self.idle();
                if ok {
                    self.kv.flush();
                    self.cfg.log.info("Cache flushed successfully!");
                } else {
                    self.cfg
                        .log
                        .info("Cache not flushed because there are pending requests.");
                }
                let _ = reply.send(ok);
            }
            Command::Abort { rid } => self.pending_aborts.push(rid),
            Command::Shutdown => return true,
        }
        false
    }

    /// Sleeps until `deadline`, queueing commands that arrive meanwhile; true = stop.
    fn wait_until(&mut self, deadline: Instant) -> bool {
        loop {
            let now = Instant::now();
            if now + SPIN >= deadline {
                break;
            }
            match self.rx.recv_timeout(deadline - SPIN - now) {
                Ok(c) => {
                    if self.handle(c) {
                        return true;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return true,
            }
        }
        while Instant::now() < deadline {
            std::hint::spin_loop();
        }
        false
    }

    /// Frees requests whose client went away or that `/abort_request` named.
    fn drop_aborted(&mut self) {
        let aborts = std::mem::take(&mut self.pending_aborts);
        let named = |r: &Req| {
            aborts
                .iter()
                .any(|a| a.as_deref().is_none_or(|id| id == &*r.rid))
        };
        let abort_msg = Finish::Abort("Abort request".into(), 200);
        let mut gone = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].disconnected() || named(&self.waiting[i]) {
                gone.extend(self.waiting.remove(i));
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].disconnected() || named(&self.running[i]) {
                gone.push(self.running.swap_remove(i));
            } else {
                i += 1;
            }
        }
        if self
            .chunked
            .as_ref()
            .is_some_and(|r| r.disconnected() || named(r))
        {
            gone.extend(self.chunked.take());
        }
        let now = Instant::now();
        for mut r in gone {
            if !r.disconnected() {
                self.emit(&mut r, now, Some(abort_msg.clone()));
            }
            self.kv.release(&mut r);
        }
    }

    /// Picks the next prefill batch like SGLang's PrefillAdder: the chunked request first,
    /// then waiting requests in order while slots, the token budget and the pool allow.
    fn form_prefill(&mut self) -> Option<Vec<PrefillItem>> {
        let mut budget = self
            .cfg
            .chunked_prefill_size
            .unwrap_or(self.cfg.max_prefill_tokens);
        let chunking = self.cfg.chunked_prefill_size.is_some();
        let mut batch = Vec::new();
        if let Some(req) = self.chunked.take() {
            let n = req.remaining_prefill().min(budget);
            budget -= n;
            batch.push(PrefillItem { req, new_tokens: n });
        }
        let mut made_chunk = batch
            .first()
            .is_some_and(|b| b.new_tokens < b.req.remaining_prefill());
        while !made_chunk
            && budget > 0
            && self.running.len() + batch.len() < self.cfg.max_running_requests
        {
            let Some(mut req) = self.waiting.pop_front() else {
                break;
            };
            if !self.kv.admit(&mut req) {
                self.waiting.push_front(req);
                break;
            }
            let remaining = req.remaining_prefill();
            let n = if chunking || !batch.is_empty() {
                remaining.min(budget)
            } else {
                // Without chunking, a lone long prompt still runs whole.
                remaining
            };
            if n == 0 || (!chunking && n < remaining) {
                self.kv.release(&mut req);
                self.waiting.push_front(req);
                break;
            }
            budget = budget.saturating_sub(n);
            made_chunk = n < remaining;
            self.prompt_total += req.prompt_len();
            self.cached_total += req.cached;
            batch.push(PrefillItem { req, new_tokens: n });
        }
        (!batch.is_empty()).then_some(batch)
    }

    fn finish_prefill(&mut self, batch: Vec<PrefillItem>, at: Instant) {
        let mut first_tokens = 0;
        for PrefillItem {
            mut req,
            new_tokens,
        } in batch
        {
            req.prefilled += new_tokens;
            self.kv.cache_prefix(&mut req);
            if req.remaining_prefill() > 0 {
                self.chunked = Some(req);
                continue;
            }
            // The prefill forward pass produces the first token.
            first_tokens += req.generate(1);
            if let Ok(mut st) = self.shared.stats.lock() {
                st.ttft
                    .observe(at.duration_since(req.received).as_secs_f64());
            }
            req.last_token_at = Some(at);
            if req.done() {
                self.finish(req, at);
            } else {
                self.emit(&mut req, at, None);
                self.running.push(req);
            }
        }
        if let Ok(mut st) = self.shared.stats.lock() {
            st.generation_tokens_total += first_tokens;
        }
        self.flush_trace();
    }

    fn decode_step(&mut self, at: Instant) {
        self.decode_steps += 1;
        let spec = self.cfg.speculative.clone();
        let mut produced = 0;
        let mut running = std::mem::take(&mut self.running);
        let mut itl = Vec::with_capacity(running.len());
        for req in running.iter_mut() {
            let k = match &spec {
                Some(s) => {
                    let k = req.draw_accept(s.num_draft_tokens, s.accept_length_mean);
                    req.spec.verify_ct += 1;
                    req.spec.num_correct_drafts += k - 1;
                    req.spec.num_proposed_drafts += s.num_draft_tokens as u64 - 1;
                    self.interval.spec_steps += 1;
                    self.interval.spec_correct += k - 1;
                    self.interval.spec_proposed += s.num_draft_tokens as u64 - 1;
                    k
                }
                None => 1,
            };
            let k = req.generate(k);
            produced += k;
            if let Some(prev) = req.last_token_at {
                let gap = at.duration_since(prev).as_secs_f64() / k.max(1) as f64;
                itl.push((gap, k));
            }
            req.last_token_at = Some(at);
        }
        if let Ok(mut st) = self.shared.stats.lock() {
            st.generation_tokens_total += produced;
            for (gap, k) in itl {
                for _ in 0..k {
                    st.itl.observe(gap);
                }
            }
        }
        self.interval.tokens += produced;
        let interval = self.cfg.stream_interval as usize;
        for mut req in running {
            if req.done() {
                self.finish(req, at);
            } else {
                if req.output.len() - req.sent >= interval {
                    self.emit(&mut req, at, None);
                }
                self.running.push(req);
            }
        }
        self.flush_trace();
    }

    fn finish(&mut self, mut req: Req, at: Instant) {
        let n = req.output.len() as u64;
        self.emit(&mut req, at, Some(Finish::Length(n)));
        if let Ok(mut st) = self.shared.stats.lock() {
            st.e2e
                .observe(at.duration_since(req.received).as_secs_f64());
            st.prompt_tokens_total += req.prompt_len();
            st.cached_tokens_total += req.cached;
            st.num_requests_total += 1;
        }
        self.kv.release(&mut req);
    }

    /// Sends the tokens generated since the last output.
    fn emit(&mut self, req: &mut Req, at: Instant, finish: Option<Finish>) {
        let new_ids = req.output[req.sent..].to_vec();
        req.sent = req.output.len();
        if self.cfg.trace.is_some() {
            self.trace_buf.push(TraceEntry {
                rid: req.rid.clone(),
                chunk_index: req.chunk_index,
                model_time: at,
                tokens: new_ids.len() as u32,
            });
        }
        req.chunk_index += 1;
        let spec = (finish.is_some() && self.cfg.speculative.is_some()).then_some(req.spec);
        let _ = req.events.send(Output {
            new_ids,
            completion_tokens: req.output.len() as u64,
            prompt_tokens: req.prompt_len(),
            cached_tokens: req.cached,
            finish,
            spec,
        });
    }

    fn flush_trace(&mut self) {
        if let Some(t) = &self.cfg.trace
            && !self.trace_buf.is_empty()
        {
            t.extend(self.trace_buf.drain(..));
        }
    }

    fn used_tokens(&self) -> u64 {
        let private: u64 = self
            .running
            .iter()
            .chain(self.chunked.iter())
            .map(Req::private_used)
            .sum();
        self.kv.locked_tokens() + private
    }

    fn token_usage(&self) -> f64 {
        self.used_tokens() as f64 / self.kv.capacity().max(1) as f64
    }

    fn log_prefill(&self, batch: &[PrefillItem], new_tokens: u64) {
        let cached: u64 = batch
            .iter()
            .filter(|b| b.req.prefilled == b.req.cached)
            .map(|b| b.req.cached)
            .sum();
        let new_seq = batch
            .iter()
            .filter(|b| b.req.prefilled == b.req.cached)
            .count();
        self.cfg.log.batch(&format!(
            "Prefill batch, #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: {cached}, \
             token usage: {:.2}, #running-req: {}, #queue-req: {},",
            self.token_usage(),
            self.running.len(),
            self.waiting.len()
        ));
    }

    fn log_decode(&mut self, at: Instant) {
        let secs = at.duration_since(self.interval.since).as_secs_f64();
        let throughput = if secs > 0.0 {
            self.interval.tokens as f64 / secs
        } else {
            0.0
        };
        let spec = if self.cfg.speculative.is_some() && self.interval.spec_steps > 0 {
            let len = (self.interval.spec_steps + self.interval.spec_correct) as f64
                / self.interval.spec_steps as f64;
            let rate =
                self.interval.spec_correct as f64 / self.interval.spec_proposed.max(1) as f64;
            if let Ok(mut st) = self.shared.stats.lock() {
                st.spec_accept_length = len;
            }
            format!("accept len: {len:.2}, accept rate: {rate:.2}, ")
        } else {
            String::new()
        };
        let graph = self
            .cfg
            .cuda_graph_max_bs
            .is_some_and(|bs| self.running.len() as u64 <= bs);
        let graph = if graph { "True" } else { "False" };
        self.cfg.log.batch(&format!(
            "Decode batch, #running-req: {}, #token: {}, token usage: {:.2}, {spec}cuda graph: {graph}, \
             gen throughput (token/s): {throughput:.2}, #queue-req: {},",
            self.running.len(),
            self.used_tokens(),
            self.token_usage(),
            self.waiting.len()
        ));
        if let Ok(mut st) = self.shared.stats.lock() {
            st.gen_throughput = throughput;
        }
        self.interval = LogInterval {
            since: at,
            tokens: 0,
            spec_steps: 0,
            spec_correct: 0,
            spec_proposed: 0,
        };
    }

    fn publish(&self) {
        let used = self.used_tokens();
        let usage = self.token_usage();
        if let Ok(mut st) = self.shared.stats.lock() {
            st.num_running_reqs = (self.running.len() + self.chunked.iter().count()) as u64;
            st.num_queue_reqs = self.waiting.len() as u64;
            st.num_used_tokens = used;
            st.token_usage = usage;
            st.cache_hit_rate = if self.prompt_total > 0 {
                self.cached_total as f64 / self.prompt_total as f64
            } else {
                0.0
            };
        }
    }

    /// PyTorch's error line for a batch over the profile's `oom_prefill_tokens`.
    fn token_limit_oom(&self, new_tokens: u64) -> String {
        let m = &self.cfg.profile.memory;
        let total_gib = m.gpu_gb * 1e9 / (1u64 << 30) as f64;
        let oom = OutOfMemory {
            tried_mib: new_tokens as f64 * m.kv_bytes_per_token * 4.0 / (1u64 << 20) as f64,
            free_mib: 312.0,
            total_gib,
            in_use_gib: total_gib - 312.0 / 1024.0,
            allocated_gib: total_gib * self.cfg.mem_fraction_static,
            reserved_unallocated_mib: 0.0,
        };
        format!(
            "{} (simulated: prefill batch of {new_tokens} new tokens > oom_prefill_tokens)",
            oom.torch_message()
        )
    }

    /// Mimics SGLang dying of a CUDA out-of-memory error in the scheduler process.
    fn crash_oom(&self, torch_error: &str, new_tokens: u64) {
        self.cfg
            .log
            .info("Scheduler hit an exception: Traceback (most recent call last):");
        self.cfg.log.raw(&format!(
            "  File \"/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py\", line 2912, in run_scheduler_process\n\
             \x20   scheduler.event_loop_overlap()\n\
             \x20 File \"/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py\", line 1004, in event_loop_overlap\n\
             \x20   batch_result = self.run_batch(batch)\n\
             \x20 File \"/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py\", line 1890, in forward_extend\n\
             \x20   return self.model.forward(\n\
             {torch_error}\n",
        ));
        self.cfg
            .log
            .info("Received sigquit from a child process. It usually means the child failed.");
        self.shared.crash(format!(
            "simulated CUDA out of memory: prefill batch of {new_tokens} tokens"
        ));
    }
}
