//! The scheduler loop, modelled on SGLang's: one thread, a waiting queue, continuous batching,
//! chunked prefill with priority over decode (or mixed into the decode step with
//! `--enable-mixed-chunk`, as vLLM's V1 scheduler always does), and a KV pool shared with the
//! radix cache. On SGLang's surface admission estimates the output still to come with
//! `new_token_ratio` and retracts requests when the pool runs out mid-decode (see
//! [`TokenRatio`]); the other surfaces reserve each request's whole output at admission.
//!
//! Timing is honest: each iteration has an absolute deadline (previous deadline + modelled
//! duration); the thread sleeps until shortly before it, spins the rest, then sends every
//! output of that iteration at once. Deadlines chain, so sleep jitter never accumulates.

use super::api::Api;
use super::config::SimConfig;
use super::kv::KvPool;
use super::memory::{ActivationMemory, OutOfMemory};
use super::radix::RadixCache;
use super::request::Req;
use super::slots::SlotPool;
use super::state::Shared;
use super::trace::TraceEntry;
use super::types::{Command, Disagg, Finish, Output, Timings};
use super::voice::Voice;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// Sleep until this long before a deadline, then spin. The scheduler thread's timer slack is
/// 1 ns (see [`spawn`]), so a sleep overshoots only by the wake-up itself; with the default
/// 50 µs slack sleeps overshot by 50-100 µs and this was 200 µs, a sixth of a core at one
/// decode step per 1.2 ms taken from a client measuring on the same machine.
const SPIN: Duration = Duration::from_micros(60);
/// If the loop falls this far behind its model clock, it restarts the clock from now
/// (the simulated GPU got slower) instead of bursting to catch up.
const SLIP: Duration = Duration::from_millis(2);

/// SGLang's defaults (`SGLANG_INIT_NEW_TOKEN_RATIO`, `..._MIN_NEW_TOKEN_RATIO_FACTOR`,
/// `..._NEW_TOKEN_RATIO_DECAY_STEPS`, `..._CLIP_MAX_NEW_TOKENS_ESTIMATION`,
/// `..._RETRACT_DECODE_STEPS`; scheduler.py `init_new_token_ratio`, schedule_batch.py
/// `retract_decode`).
const INIT_NEW_TOKEN_RATIO: f64 = 0.7;
const MIN_NEW_TOKEN_RATIO_FACTOR: f64 = 0.14;
const NEW_TOKEN_RATIO_DECAY_STEPS: f64 = 600.0;
const CLIP_MAX_NEW_TOKENS: u64 = 4096;
const RETRACT_DECODE_STEPS: u64 = 20;

/// SGLang's estimate of the share of `max_new_tokens` a running request will still generate:
/// it starts at `0.7 x --schedule-conservativeness`, decays linearly to 14% of that over 600
/// decode steps, returns to the start when the server is idle, and is raised by a retraction
/// to what the remaining requests have actually needed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenRatio {
    init: f64,
    min: f64,
    decay: f64,
    now: f64,
}

impl TokenRatio {
    /// The ratio for `--schedule-conservativeness`.
    pub(crate) fn new(conservativeness: f64) -> Self {
        let init = (INIT_NEW_TOKEN_RATIO * conservativeness).min(1.0);
        let min = (init * MIN_NEW_TOKEN_RATIO_FACTOR).min(1.0);
        TokenRatio {
            init,
            min,
            decay: (init - min) / NEW_TOKEN_RATIO_DECAY_STEPS,
            now: init,
        }
    }

    /// Tokens admission keeps for a request that may still generate `remaining` tokens.
    pub(crate) fn estimate(&self, remaining: u64) -> u64 {
        (remaining.min(CLIP_MAX_NEW_TOKENS) as f64 * self.now).ceil() as u64
    }

    fn decay(&mut self) {
        self.now = (self.now - self.decay).max(self.min);
    }

    fn reset(&mut self) {
        self.now = self.init;
    }
}

/// What the server logs once the engine is warmed up, before `/health` turns 200.
pub(crate) type OnReady = Box<dyn FnOnce() + Send>;

/// Starts the scheduler thread; `on_ready` runs when warmup is done, just before the engine is
/// marked ready.
pub(crate) fn spawn(
    config: &SimConfig,
    shared: Arc<Shared>,
    rx: Receiver<Command>,
    on_ready: OnReady,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let s = Scheduler::new(config.clone(), shared, rx, on_ready);
    std::thread::Builder::new()
        .name("sim-scheduler".into())
        .spawn(move || {
            // Sleeps end when asked, not up to 50 µs later (the kernel's default slack).
            #[cfg(target_os = "linux")]
            let _ = nix::sys::prctl::set_timerslack(1);
            s.run()
        })
}

/// The prefix cache: SGLang's and vLLM's radix tree in a KV pool, or llama.cpp's slots.
#[derive(Debug)]
enum Cache {
    Radix(KvPool),
    Slots(SlotPool),
}

impl Cache {
    fn admit(&mut self, req: &mut Req) -> bool {
        match self {
            Cache::Radix(kv) => kv.admit(req),
            Cache::Slots(s) => s.admit(req),
        }
    }

    fn cache_prefix(&mut self, req: &mut Req) {
        if let Cache::Radix(kv) = self {
            kv.cache_prefix(req);
        }
    }

    fn release(&mut self, req: &mut Req) {
        match self {
            Cache::Radix(kv) => kv.release(req),
            Cache::Slots(s) => s.release(req),
        }
    }

    fn flush(&mut self) {
        match self {
            Cache::Radix(kv) => kv.flush(),
            Cache::Slots(s) => s.flush(),
        }
    }

    fn capacity(&self) -> u64 {
        match self {
            Cache::Radix(kv) => kv.capacity(),
            Cache::Slots(s) => s.capacity(),
        }
    }

    fn locked_tokens(&self) -> u64 {
        match self {
            Cache::Radix(kv) => kv.locked_tokens(),
            Cache::Slots(_) => 0,
        }
    }
}

struct Scheduler {
    cfg: SimConfig,
    shared: Arc<Shared>,
    rx: Receiver<Command>,
    kv: Cache,
    voice: Voice,
    on_ready: Option<OnReady>,
    /// llama.cpp slot erases waiting for their slot to go idle.
    pending_erases: Vec<(usize, tokio::sync::oneshot::Sender<u64>)>,
    /// The next task id (llama.cpp's log lines and timings).
    next_task: u64,
    /// Something ran since the engine was last idle (llama.cpp's "all slots are idle").
    busy_since_idle: bool,
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
    /// SGLang's admission estimate; None = whole outputs are reserved (no retraction).
    ratio: Option<TokenRatio>,
    /// A prefill worker's outgoing KV link (`sim::disagg`).
    link: crate::disagg::Link,
    /// Prefilled requests whose KV is moving to their decode side, with when it is done.
    inflight: Vec<Inflight>,
    /// A decode worker's requests whose KV has arrived, waiting to join the running batch.
    prebuilt: VecDeque<Req>,
    /// Requests in the prefill pass now running (out of `waiting`, not yet `running`): the
    /// scheduler answers commands while the pass lasts, and a flush then must be refused, as
    /// SGLang's is while a batch runs (the pass holds its prefixes).
    prefilling: usize,
}

/// A prefilled request whose KV is on its way to the decode side.
struct Inflight {
    req: Req,
    /// When its prefill ended (it entered the inflight queue).
    ready: Instant,
    /// When the KV is on the decode side.
    done: Instant,
    /// Bytes moved.
    bytes: u64,
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
    fn new(cfg: SimConfig, shared: Arc<Shared>, rx: Receiver<Command>, on_ready: OnReady) -> Self {
        let kv = match &cfg.llama {
            Some(l) => Cache::Slots(SlotPool::new(
                l.n_slots,
                l.n_ctx,
                l.n_ctx_slot,
                l.kv_unified,
            )),
            None => Cache::Radix(
                KvPool::new(
                    cfg.pool_tokens(),
                    !cfg.disable_radix_cache && !cfg.no_prefix_hits,
                )
                .with_block(cfg.vllm.as_ref().map_or(1, |v| v.block_size)),
            ),
        };
        let voice = Voice::new(cfg.api, cfg.log.clone());
        let ratio = (cfg.api == Api::Sglang && matches!(kv, Cache::Radix(_)))
            .then(|| TokenRatio::new(cfg.schedule_conservativeness));
        let memory = ActivationMemory::new(
            &cfg.profile.memory,
            cfg.mem_fraction_static,
            cfg.expandable_segments,
        );
        let cfg_transfer = cfg.disagg.transfer;
        Scheduler {
            memory,
            cfg,
            shared,
            rx,
            kv,
            voice,
            on_ready: Some(on_ready),
            pending_erases: Vec::new(),
            next_task: 0,
            busy_since_idle: false,
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
            ratio,
            link: crate::disagg::Link::new(cfg_transfer),
            inflight: Vec::new(),
            prebuilt: VecDeque::new(),
            prefilling: 0,
        }
    }

    fn run(mut self) {
        self.start_up();
        self.clock = Instant::now();
        loop {
            if self.drain_commands() {
                return;
            }
            self.drop_aborted();
            self.run_erases();
            self.complete_transfers(Instant::now());
            if self.idle() {
                if self.wait_while_idle() {
                    return;
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
            self.admit_prebuilt(start);
            let deadline = if let Some(batch) = self.form_prefill(start) {
                let Some(deadline) = self.prefill_iteration(batch, start) else {
                    return;
                };
                deadline
            } else if self.ready_to_decode() {
                let Some(deadline) = self.decode_iteration(start) else {
                    return;
                };
                deadline
            } else {
                if self.wait_for_news() {
                    return;
                }
                self.clock = Instant::now();
                continue;
            };
            self.clock = deadline;
            self.shared.profiler.forward_step(&self.cfg.log);
            self.publish();
        }
    }

    /// Start-up: the memory line, warm-up, readiness, and the engine's ready lines.
    fn start_up(&mut self) {
        if let Some(m) = &self.memory
            && self.cfg.api == Api::Sglang
        {
            self.cfg.log.info(&format!(
                "Memory pool end. avail mem={:.2} GB",
                m.free_mib() / 1024.0
            ));
        }
        let warmup_started = Instant::now();
        if !self.cfg.skip_warmup {
            std::thread::sleep(self.cfg.profile.warmup());
        }
        // Ready (`/health` 200) before any line says so: a runner may take the line as a hint.
        self.shared.set_ready();
        if self.cfg.disagg.mode != crate::disagg::Mode::Null && self.cfg.api == Api::Sglang {
            // http_server.py `_execute_server_warmup`: a PD worker's warm-up is a fake
            // transfer per DP rank.
            self.cfg.log.info("Start of pd disaggregation warmup ...");
            self.cfg
                .log
                .info("Disaggregation warmup requests completed for all 1 DP ranks");
            self.cfg.log.info("End of disaggregation warmup");
        }
        self.voice
            .engine_ready(warmup_started.elapsed().as_secs_f64());
        if let Some(f) = self.on_ready.take() {
            f();
        }
    }

    /// Handles every command already queued; true when the scheduler must stop.
    fn drain_commands(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(c) => {
                    if self.handle(c) {
                        return true;
                    }
                }
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Disconnected) => return true,
            }
        }
    }

    /// Nothing to do: says so once, publishes, and blocks for the next command; true when the
    /// scheduler must stop.
    fn wait_while_idle(&mut self) -> bool {
        if std::mem::take(&mut self.busy_since_idle) {
            self.voice.all_idle();
        }
        if let Some(r) = &mut self.ratio {
            r.reset();
        }
        self.publish();
        match self.rx.recv() {
            Ok(c) => self.handle(c),
            Err(_) => true,
        }
    }

    /// One prefill iteration (mixed with a decode step when enabled) from `start`: its end,
    /// or None when the scheduler must stop (a simulated OOM, or shutdown while it ran).
    fn prefill_iteration(
        &mut self,
        mut batch: Vec<PrefillItem>,
        start: Instant,
    ) -> Option<Instant> {
        self.busy_since_idle = true;
        // A mixed iteration also steps the running requests (which may retract some).
        let mixed = self.cfg.mixed_chunk && self.ready_to_decode();
        self.started(&mut batch, start);
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
            let (message, tried_mib) = self.token_limit_oom(new_tokens);
            self.crash_oom(&message, tried_mib, new_tokens);
            return None;
        }
        if let Some(Err(oom)) = self.memory.as_mut().map(|m| m.prefill(&segments)) {
            self.crash_oom(&oom.torch_message(), oom.tried_mib, new_tokens);
            return None;
        }
        if let Ok(mut st) = self.shared.stats.lock() {
            st.engine.n_decode += 1;
            st.engine.n_busy_slots += (batch.len() + self.running.len()) as u64;
        }
        let deadline =
            start + self.cfg.profile.prefill_time(&segments) + self.mixed_decode_time(mixed);
        self.prefilling = batch.len();
        let stop = self.wait_until(deadline);
        self.prefilling = 0;
        if stop {
            return None;
        }
        if mixed {
            self.decode_step(deadline);
        }
        self.finish_prefill(batch, deadline);
        Some(deadline)
    }

    /// One decode step of the running requests from `start`: its end, or None when the
    /// scheduler must stop.
    fn decode_iteration(&mut self, start: Instant) -> Option<Instant> {
        let ctx: u64 = self.running.iter().map(Req::context_len).sum();
        let batch = self.running.len() as u64;
        let overhead = self
            .cfg
            .speculative
            .as_ref()
            .map_or(0.0, |s| s.verify_overhead_ms(batch));
        let deadline = start
            + self
                .cfg
                .profile
                .decode_time(self.running.len() as u64, ctx, overhead);
        // SGLang logs the decode batch as it launches it.
        if (self.decode_steps + 1).is_multiple_of(self.cfg.decode_log_interval) {
            self.log_decode(start);
        }
        if self.wait_until(deadline) {
            return None;
        }
        self.decode_step(deadline);
        Some(deadline)
    }

    /// Waiting requests that cannot be admitted while nothing runs: waits for news, until the
    /// first one is through the front end, or until a transfer is done; true when the
    /// scheduler must stop.
    fn wait_for_news(&mut self) -> bool {
        let mut wait = self.waiting.front().map_or(Duration::from_millis(5), |r| {
            (r.received + self.cfg.profile.frontend())
                .saturating_duration_since(Instant::now())
                .clamp(Duration::from_micros(50), Duration::from_millis(5))
        });
        if let Some(done) = self.inflight.iter().map(|t| t.done).min() {
            wait = wait.min(done.saturating_duration_since(Instant::now()));
        }
        match self.rx.recv_timeout(wait) {
            Ok(c) => self.handle(c),
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        }
    }

    /// Whether requests are running, after making room for their next tokens (retracting
    /// some when the pool is full).
    fn ready_to_decode(&mut self) -> bool {
        if self.running.is_empty() {
            return false;
        }
        self.grow_for_decode();
        !self.running.is_empty()
    }

    /// Grows every running request's KV by the tokens its next step may write. Only SGLang's
    /// estimated admission can run out here: then it retracts requests, as SGLang's
    /// `update_running_batch` does, and otherwise lets its estimate decay.
    fn grow_for_decode(&mut self) {
        if self.ratio.is_none() {
            return;
        }
        let step = self
            .cfg
            .speculative
            .as_ref()
            .map_or(1, |s| s.num_draft_tokens.max(1) as u64);
        let deficit = |r: &Req| (r.private_used() + step).saturating_sub(r.reserved);
        let need: u64 = self.running.iter().map(deficit).sum();
        let available = match &self.kv {
            Cache::Radix(kv) => kv.available(),
            Cache::Slots(_) => return,
        };
        if available < need {
            self.retract(step);
        } else if let Some(r) = &mut self.ratio {
            r.decay();
        }
        let Cache::Radix(kv) = &mut self.kv else {
            return;
        };
        let mut i = 0;
        while i < self.running.len() {
            let d = deficit(&self.running[i]);
            if kv.grow(&mut self.running[i], d) {
                i += 1;
                continue;
            }
            // Only one request left and still no room: SGLang gives up on it.
            let mut r = self.running.swap_remove(i);
            let msg = "Out of memory: the KV cache cannot hold this one request. Lower its max_new_tokens or raise --max-total-tokens.";
            self.emit(
                &mut r,
                self.clock,
                Some(Finish::Abort(msg.into(), 500)),
                None,
            );
            if let Ok(mut st) = self.shared.stats.lock() {
                st.engine.finished_abort += 1;
            }
            self.kv.release(&mut r);
            return;
        }
    }

    /// SGLang's `retract_decode`: sends running requests back to the queue, fewest generated
    /// tokens first (the longer prompt first among equals), until the rest have room for
    /// `RETRACT_DECODE_STEPS` more tokens each or one is left; then raises the estimate to
    /// what the remaining requests need and logs it.
    fn retract(&mut self, step: u64) {
        let Cache::Radix(kv) = &mut self.kv else {
            return;
        };
        let before = kv.available();
        self.running
            .sort_by_key(|r| (std::cmp::Reverse(r.output.len()), r.prompt_len()));
        let mut retracted = Vec::new();
        loop {
            let Cache::Radix(kv) = &mut self.kv else {
                return;
            };
            let enough =
                kv.available() >= self.running.len() as u64 * RETRACT_DECODE_STEPS.max(step);
            if self.running.len() <= 1 || (!retracted.is_empty() && enough) {
                break;
            }
            let Some(mut r) = self.running.pop() else {
                break;
            };
            kv.release(&mut r);
            r.first_cached.get_or_insert(r.cached);
            r.preemptions += 1;
            r.prefilled = 0;
            r.cached = 0;
            r.in_tree = 0;
            r.node = RadixCache::ROOT;
            retracted.push(r);
        }
        let Cache::Radix(kv) = &self.kv else {
            return;
        };
        let gained = kv.available().saturating_sub(before);
        let decoded: u64 = self.running.iter().map(|r| r.output.len() as u64).sum();
        let max_new: u64 = self.running.iter().map(|r| r.max_new).sum();
        let estimate = (decoded + RETRACT_DECODE_STEPS * self.running.len() as u64) as f64
            / (max_new + 1) as f64;
        let Some(ratio) = &mut self.ratio else {
            return;
        };
        let old = ratio.now;
        ratio.now = estimate.min(1.0);
        self.cfg.log.info(&format!(
            "KV cache pool is full. Retract requests. #retracted_reqs: {}, #new_tokens_gained: {gained}, #new_token_ratio: {old:.4} -> {:.4}",
            retracted.len(),
            ratio.now
        ));
        if let Ok(mut st) = self.shared.stats.lock() {
            st.num_retracted_reqs = retracted.len() as u64;
            st.num_retracted_requests_total += retracted.len() as u64;
            st.engine.preemptions += retracted.len() as u64;
        }
        // SGLang appends retracted requests to the waiting queue.
        self.waiting.extend(retracted);
    }

    /// What a mixed iteration adds for the running requests' decode step: the decode step
    /// less the prefill's fixed cost (one forward pass pays it once).
    fn mixed_decode_time(&self, mixed: bool) -> Duration {
        if !mixed {
            return Duration::ZERO;
        }
        let ctx: u64 = self.running.iter().map(Req::context_len).sum();
        let whole = self
            .cfg
            .profile
            .decode_time(self.running.len() as u64, ctx, 0.0);
        whole.saturating_sub(self.cfg.profile.prefill_time(&[]))
    }

    fn idle(&self) -> bool {
        self.waiting.is_empty()
            && self.running.is_empty()
            && self.chunked.is_none()
            && self.inflight.is_empty()
            && self.prebuilt.is_empty()
            && self.prefilling == 0
    }

    /// Handles a command; returns true to stop the loop.
    fn handle(&mut self, c: Command) -> bool {
        match c {
            Command::Generate(g) => {
                let mut req = Req::new(g, self.cfg.seed);
                req.garbled = self.cfg.profile.faults.garbled_prompt(req.prompt_len());
                req.task = self.next_task;
                self.next_task += 1;
                req.queued_at = Instant::now();
                if matches!(req.disagg, Some(Disagg::Decode(_))) {
                    self.prebuilt.push_back(req);
                } else {
                    self.waiting.push_back(req);
                }
            }
            Command::Flush(reply) => {
                let ok = self.idle();
                if ok {
                    self.kv.flush();
                }
                self.voice.flush(ok);
                let _ = reply.send(ok);
            }
            Command::ResetPrefixCache {
                reset_running,
                reply,
            } => {
                let _ = reply.send(self.reset_prefix_cache(reset_running));
            }
            Command::EraseSlot { id, reply } => self.pending_erases.push((id, reply)),
            Command::Abort { rid } => self.pending_aborts.push(rid),
            Command::Shutdown => return true,
        }
        false
    }

    /// vLLM's reset: refused while a request holds KV blocks, unless those requests are
    /// preempted first (they go back to the front of the queue and recompute).
    fn reset_prefix_cache(&mut self, reset_running: bool) -> bool {
        self.voice.vllm(
            super::voice::Proc::Engine,
            "INFO",
            "block_pool.py:397",
            "Resetting prefix cache...",
        );
        if reset_running {
            self.preempt_all();
        }
        let held: u64 = self
            .running
            .iter()
            .chain(self.chunked.iter())
            .map(|r| r.context_len().div_ceil(self.block_size()))
            .sum();
        let ok = held == 0;
        if ok {
            self.kv.flush();
            if let Ok(mut st) = self.shared.stats.lock() {
                st.engine.prefix_queries_since_reset = 0;
                st.engine.prefix_hits_since_reset = 0;
            }
        }
        self.voice.reset_prefix_cache(ok, held);
        self.publish();
        ok
    }

    fn block_size(&self) -> u64 {
        self.cfg.vllm.as_ref().map_or(1, |v| v.block_size).max(1)
    }

    /// Sends every running request back to the front of the queue, freeing its KV.
    fn preempt_all(&mut self) {
        let mut back: Vec<Req> = self.running.drain(..).collect();
        back.extend(self.chunked.take());
        let n = back.len() as u64;
        for mut r in back.into_iter().rev() {
            self.kv.release(&mut r);
            r.first_cached.get_or_insert(r.cached);
            r.preemptions += 1;
            r.prefilled = 0;
            r.cached = 0;
            r.in_tree = 0;
            r.node = RadixCache::ROOT;
            self.waiting.push_front(r);
        }
        if let Ok(mut st) = self.shared.stats.lock() {
            st.engine.preemptions += n;
        }
    }

    /// Erases idle slots whose erase was asked for (llama.cpp defers erasing a busy slot).
    fn run_erases(&mut self) {
        if self.pending_erases.is_empty() {
            return;
        }
        let Cache::Slots(slots) = &mut self.kv else {
            for (_, reply) in self.pending_erases.drain(..) {
                let _ = reply.send(0);
            }
            return;
        };
        let mut still = Vec::new();
        for (id, reply) in self.pending_erases.drain(..) {
            match slots.erase(id) {
                Some(n) => {
                    let _ = reply.send(n);
                }
                None => still.push((id, reply)),
            }
        }
        self.pending_erases = still;
    }

    /// Bookkeeping for requests a prefill batch admitted for the first time.
    fn started(&mut self, batch: &mut [PrefillItem], at: Instant) {
        let n_ctx_slot = self.cfg.llama.as_ref().map_or(0, |l| l.n_ctx_slot);
        let mut st = self.shared.stats.lock().ok();
        for b in batch.iter_mut() {
            let r = &mut b.req;
            if r.started_at.is_some() {
                continue;
            }
            r.started_at = Some(at);
            if let Some(st) = st.as_mut() {
                let e = &mut st.engine;
                e.queue_time
                    .observe(at.saturating_duration_since(r.received).as_secs_f64());
                e.prefix_queries += r.prompt_len();
                e.prefix_hits += r.cached;
                e.prefix_queries_since_reset += r.prompt_len();
                e.prefix_hits_since_reset += r.cached;
            }
            if let Some(slot) = r.slot {
                self.voice
                    .task_started(slot, r.task, n_ctx_slot, r.prompt_len(), r.cached);
            }
        }
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
        let leaves = |r: &Req| r.disconnected() || named(r);
        let mut gone = Vec::new();
        take_leaving(&mut self.waiting, &leaves, &mut gone);
        take_leaving(&mut self.prebuilt, &leaves, &mut gone);
        let mut i = 0;
        while i < self.running.len() {
            if leaves(&self.running[i]) {
                gone.push(self.running.swap_remove(i));
            } else {
                i += 1;
            }
        }
        if self.chunked.as_ref().is_some_and(leaves) {
            gone.extend(self.chunked.take());
        }
        let now = Instant::now();
        if !gone.is_empty()
            && let Ok(mut st) = self.shared.stats.lock()
        {
            st.engine.finished_abort += gone.len() as u64;
        }
        for mut r in gone {
            if !r.disconnected() {
                self.emit(&mut r, now, Some(abort_msg.clone()), None);
            }
            self.kv.release(&mut r);
        }
    }

    /// Picks the next prefill batch like SGLang's PrefillAdder: the chunked request first,
    /// then waiting requests in order while slots, the token budget and the pool allow.
    fn form_prefill(&mut self, now: Instant) -> Option<Vec<PrefillItem>> {
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
            let frontend = self.cfg.profile.frontend();
            if self
                .waiting
                .front()
                .is_none_or(|r| !frontend.is_zero() && r.received + frontend > now)
            {
                break;
            }
            let Some(mut req) = self.waiting.pop_front() else {
                break;
            };
            let admitted = match (&mut self.kv, &self.ratio) {
                (Cache::Radix(kv), Some(ratio)) => {
                    // SGLang's PrefillAdder keeps room for the running requests' estimated
                    // outputs and this one's.
                    let running: u64 = self
                        .running
                        .iter()
                        .chain(batch.iter().map(|b| &b.req))
                        .map(|r| ratio.estimate(r.max_new - r.output.len() as u64))
                        .sum();
                    let own = ratio.estimate(req.max_new - req.output.len() as u64);
                    kv.admit_estimated(&mut req, 0, running + own)
                }
                (kv, _) => kv.admit(&mut req),
            };
            if !admitted {
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
            // The prefill forward pass produces the first token (after a preemption, the next
            // one: the recomputation ends with a sampling step too).
            let garbage = self.garbage_batch(self.running.len() + 1);
            let generated = req.generate(1, garbage);
            if req.opts.log_metrics {
                first_tokens += generated;
            }
            let moving = matches!(req.disagg, Some(Disagg::Prefill(_)));
            if req.first_token_at.is_none() {
                req.first_token_at = Some(at);
                if req.opts.log_metrics
                    && let Ok(mut st) = self.shared.stats.lock()
                {
                    // A prefill worker's first (and only) output leaves after the transfer.
                    if !moving {
                        st.ttft
                            .observe(at.duration_since(req.received).as_secs_f64());
                    }
                    st.engine.prompt_tokens += req.prompt_len();
                    st.engine.prompt_tokens_cached += req.reported_cached();
                    if self.cfg.disagg.mode != crate::disagg::Mode::Null {
                        let forward = req
                            .started_at
                            .map_or(0.0, |s| at.saturating_duration_since(s).as_secs_f64());
                        st.pd.stage("prefill_forward", forward);
                    }
                }
            }
            req.last_token_at = Some(at);
            if moving {
                self.start_transfer(req, at);
            } else if req.done() {
                self.finish(req, at);
            } else {
                self.emit(&mut req, at, None, None);
                self.running.push(req);
            }
        }
        if let Ok(mut st) = self.shared.stats.lock() {
            st.generation_tokens_total += first_tokens;
        }
        self.flush_trace();
    }

    /// A prefill worker's request is prefilled: its KV goes on the link to the decode side
    /// (SGLang's inflight queue); it answers its client once the transfer is done.
    fn start_transfer(&mut self, req: Req, at: Instant) {
        let bytes = crate::disagg::transfer::kv_bytes(
            req.prompt_len(),
            self.cfg.profile.memory.kv_bytes_per_token,
            self.cfg.disagg.tp,
        );
        let done = self.link.schedule(at, bytes).done;
        self.inflight.push(Inflight {
            req,
            ready: at,
            done,
            bytes,
        });
    }

    /// Finishes the transfers done by `now`: the decode side gets the handoff, the prefill's
    /// client its answer, and SGLang's transfer metrics their observation (prefill.py
    /// `process_disagg_prefill_inflight_queue`).
    fn complete_transfers(&mut self, now: Instant) {
        if self.inflight.is_empty() {
            return;
        }
        let (done, moving): (Vec<Inflight>, Vec<Inflight>) = std::mem::take(&mut self.inflight)
            .into_iter()
            .partition(|t| t.done <= now);
        self.inflight = moving;
        for Inflight {
            mut req,
            ready,
            done,
            bytes,
        } in done
        {
            let latency = done.saturating_duration_since(ready);
            let (ms, mb, speed) = crate::disagg::transfer::reported(bytes, latency);
            if let Ok(mut st) = self.shared.stats.lock() {
                st.pd.transfer(ms, mb, speed);
                st.pd
                    .stage("prefill_transfer_kv_cache", latency.as_secs_f64());
                if req.opts.log_metrics {
                    st.ttft
                        .observe(done.duration_since(req.received).as_secs_f64());
                }
            }
            if let Some(Disagg::Prefill(tx)) = req.disagg.take() {
                let _ = tx.send(crate::disagg::Handoff {
                    first_token: req.output.first().copied(),
                    cached_tokens: req.reported_cached(),
                    prompt_tokens: req.prompt_len(),
                    bytes,
                    transfer_ms: ms,
                });
            }
            self.finish(req, done);
        }
        self.flush_trace();
    }

    /// A decode worker's requests whose KV arrived join the running batch without a prefill
    /// (decode.py's prebuilt batch): the prompt's KV is reserved in this pool, the first token
    /// is the prefill's, the cached-token count the prefill's.
    fn admit_prebuilt(&mut self, now: Instant) {
        let mut admitted = 0;
        while self.running.len() + self.chunked.iter().count() < self.cfg.max_running_requests {
            let Some(mut req) = self.prebuilt.pop_front() else {
                break;
            };
            let ok = match (&mut self.kv, &self.ratio) {
                (Cache::Radix(kv), Some(ratio)) => {
                    let running: u64 = self
                        .running
                        .iter()
                        .map(|r| ratio.estimate(r.max_new - r.output.len() as u64))
                        .sum();
                    let own = ratio.estimate(req.max_new);
                    kv.admit_estimated(&mut req, 0, running + own)
                }
                (kv, _) => kv.admit(&mut req),
            };
            if !ok {
                self.prebuilt.push_front(req);
                break;
            }
            let handoff = match req.disagg.take() {
                Some(Disagg::Decode(h)) => h,
                _ => crate::disagg::Handoff::fake(),
            };
            req.prefilled = req.prompt_len();
            self.kv.cache_prefix(&mut req);
            req.first_cached = Some(handoff.cached_tokens);
            req.started_at = Some(now);
            let first = match handoff.first_token {
                Some(t) if req.max_new > 0 => {
                    req.output.push(t);
                    1
                }
                Some(_) => 0,
                // A fake transfer: the decode side makes its first token up.
                None => req.generate(1, false),
            };
            req.first_token_at = Some(now);
            req.last_token_at = Some(now);
            if req.opts.log_metrics
                && let Ok(mut st) = self.shared.stats.lock()
            {
                st.ttft
                    .observe(now.duration_since(req.received).as_secs_f64());
                st.generation_tokens_total += first;
                st.pd.stage(
                    "decode_waiting",
                    now.saturating_duration_since(req.queued_at).as_secs_f64(),
                );
                st.pd.stage("fake_output", 0.0);
            }
            admitted += 1;
            if req.done() {
                self.finish(req, now);
            } else {
                self.emit(&mut req, now, None, None);
                self.running.push(req);
            }
        }
        if admitted > 0 {
            self.busy_since_idle = true;
            self.flush_trace();
        }
    }

    /// Whether tokens decoded in a batch of `running` requests are garbage (the profile's
    /// `faults.garbage_above_batch`).
    fn garbage_batch(&self, running: usize) -> bool {
        self.cfg
            .profile
            .faults
            .garbage_above_batch
            .is_some_and(|b| running as u64 > b)
    }

    fn decode_step(&mut self, at: Instant) {
        self.decode_steps += 1;
        let spec = self.cfg.speculative.clone();
        let mut produced = 0;
        let mut running = std::mem::take(&mut self.running);
        let garbage = self.garbage_batch(running.len());
        let mut itl = Vec::with_capacity(running.len());
        for req in running.iter_mut() {
            let k = match &spec {
                Some(s) => {
                    let mean = s.accept_mean_at(req.context_len());
                    let k = req.draw_accept(s.max_tokens(), mean);
                    req.spec.verify_ct += 1;
                    req.spec.num_correct_drafts += k - 1;
                    req.spec.num_proposed_drafts += s.num_draft_tokens as u64 - 1;
                    let drafted = s.max_tokens().saturating_sub(1) as usize;
                    if req.accepted_per_pos.len() < drafted {
                        req.accepted_per_pos.resize(drafted, 0);
                    }
                    for n in req.accepted_per_pos.iter_mut().take((k - 1) as usize) {
                        *n += 1;
                    }
                    self.interval.spec_steps += 1;
                    self.interval.spec_correct += k - 1;
                    self.interval.spec_proposed += s.num_draft_tokens as u64 - 1;
                    k
                }
                None => 1,
            };
            let k = req.generate(k, garbage);
            produced += k;
            if let Some(prev) = req.last_token_at {
                let gap = at.duration_since(prev).as_secs_f64() / k.max(1) as f64;
                itl.push((gap, k));
            }
            req.last_token_at = Some(at);
        }
        if let Ok(mut st) = self.shared.stats.lock() {
            st.generation_tokens_total += produced;
            st.engine.n_decode += 1;
            st.engine.n_busy_slots += running.len() as u64;
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
                    self.emit(&mut req, at, None, None);
                }
                self.running.push(req);
            }
        }
        self.flush_trace();
    }

    fn finish(&mut self, mut req: Req, at: Instant) {
        let n = req.output.len() as u64;
        let ms = |from: Option<Instant>, to: Instant| {
            from.map_or(0.0, |f| to.saturating_duration_since(f).as_secs_f64() * 1e3)
        };
        let first = req.first_token_at.unwrap_or(at);
        let timings = Timings {
            cache_n: req.reported_cached(),
            prompt_n: req.prompt_len() - req.reported_cached(),
            prompt_ms: ms(req.started_at, first),
            predicted_n: n,
            predicted_ms: ms(Some(first), at),
            task: req.task,
        };
        // Counted before the final output goes out: a client that scrapes /metrics after its
        // last byte sees the request counted (true values, no race). SGLang's /health
        // generation is not counted (log_metrics=False).
        if req.opts.log_metrics
            && let Ok(mut st) = self.shared.stats.lock()
        {
            st.e2e
                .observe(at.duration_since(req.received).as_secs_f64());
            st.prompt_tokens_total += req.prompt_len();
            st.cached_tokens_total += req.reported_cached();
            st.num_requests_total += 1;
            st.finished_generation_tokens += n;
            let e = &mut st.engine;
            e.finished_length += 1;
            e.prompt_tokens_computed += timings.prompt_n;
            e.prompt_tokens_cache_n += timings.cache_n;
            e.prompt_seconds += timings.prompt_ms / 1e3;
            e.predicted_seconds += timings.predicted_ms / 1e3;
            e.n_tokens_max = e.n_tokens_max.max(req.context_len());
            if timings.prompt_ms > 0.0 {
                e.last_prompt_tok_s = timings.prompt_n as f64 * 1e3 / timings.prompt_ms;
            }
            if timings.predicted_ms > 0.0 {
                e.last_predicted_tok_s = n as f64 * 1e3 / timings.predicted_ms;
            }
            // llama.cpp adds a slot's speculative counts when its task finishes
            // (server-context.cpp `metrics_on_prediction`).
            e.spec_draft_tokens += req.spec.num_proposed_drafts;
            e.spec_accepted_tokens += req.spec.num_correct_drafts;
            e.spec_verify_steps += req.spec.verify_ct;
            if e.spec_accepted_per_pos.len() < req.accepted_per_pos.len() {
                e.spec_accepted_per_pos
                    .resize(req.accepted_per_pos.len(), 0);
            }
            for (total, n) in e
                .spec_accepted_per_pos
                .iter_mut()
                .zip(&req.accepted_per_pos)
            {
                *total += n;
            }
        }
        self.emit(&mut req, at, Some(Finish::Length(n)), Some(timings));
        if let Some(slot) = req.slot {
            self.voice.task_finished(slot, &timings, req.context_len());
        }
        self.kv.release(&mut req);
    }

    /// Sends the tokens generated since the last output.
    fn emit(
        &mut self,
        req: &mut Req,
        at: Instant,
        finish: Option<Finish>,
        timings: Option<Timings>,
    ) {
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
            cached_tokens: req.reported_cached(),
            finish,
            spec,
            slot: req.slot,
            timings,
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
        // A prefill worker adds its bootstrap and inflight queues (metrics_reporter.py).
        let pd = if self.cfg.disagg.mode == crate::disagg::Mode::Prefill {
            let bootstrap = self.shared.stats.lock().map_or(0, |s| s.pd.bootstrap_queue);
            format!(
                " #bootstrap-req: {bootstrap}, #inflight-req: {}, #optimistic-req: 0,",
                self.inflight.len()
            )
        } else {
            String::new()
        };
        self.voice.prefill_batch(&format!(
            "Prefill batch, #new-seq: {new_seq}, #new-token: {new_tokens}, #cached-token: {cached}, \
             token usage: {:.2}, #running-req: {}, #queue-req: {},{pd}",
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
        // A decode worker adds its prealloc and transfer queues (metrics_reporter.py).
        let pd = if self.cfg.disagg.mode == crate::disagg::Mode::Decode {
            let (prealloc, transfer) = self
                .shared
                .stats
                .lock()
                .map_or((0, 0), |s| (s.pd.prealloc_queue, s.pd.transfer_queue));
            format!(
                "pre-allocated usage: 0.00, #prealloc-req: {prealloc}, #transfer-req: {transfer}, #retracted-req: 0, "
            )
        } else {
            String::new()
        };
        self.voice.decode_batch(&format!(
            "Decode batch, #running-req: {}, #token: {}, token usage: {:.2}, {spec}{pd}cuda graph: {graph}, \
             gen throughput (token/s): {throughput:.2}, #queue-req: {},",
            self.running.len(),
            self.used_tokens(),
            self.token_usage(),
            self.waiting.len() + self.prebuilt.len()
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
        if let Cache::Slots(slots) = &self.kv
            && let Ok(mut v) = self.shared.slots.lock()
        {
            *v = slots.views();
        }
        if let Ok(mut st) = self.shared.stats.lock() {
            st.engine.deferred = self.waiting.len() as u64;
            st.num_running_reqs = (self.running.len() + self.chunked.iter().count()) as u64;
            st.num_queue_reqs = (self.waiting.len() + self.prebuilt.len()) as u64;
            st.pd.inflight_queue = self.inflight.len() as u64;
            st.num_used_tokens = used;
            st.token_usage = usage;
            st.cache_hit_rate = if self.prompt_total > 0 {
                self.cached_total as f64 / self.prompt_total as f64
            } else {
                0.0
            };
        }
    }

    /// PyTorch's error line for a batch over the profile's `oom_prefill_tokens`, and the MiB
    /// the failing allocation asked for.
    fn token_limit_oom(&self, new_tokens: u64) -> (String, f64) {
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
        let message = format!(
            "{} (simulated: prefill batch of {new_tokens} new tokens > oom_prefill_tokens)",
            oom.torch_message()
        );
        (message, oom.tried_mib)
    }

    /// Mimics the engine dying of a CUDA out-of-memory error in a prefill.
    fn crash_oom(&self, torch_error: &str, tried_mib: f64, new_tokens: u64) {
        self.voice.out_of_memory(torch_error, tried_mib);
        self.shared.crash(format!(
            "simulated CUDA out of memory: prefill batch of {new_tokens} tokens"
        ));
    }
}

/// Moves the requests of `queue` that `leaves` picks to `gone`, in queue order; the others
/// keep theirs.
fn take_leaving(queue: &mut VecDeque<Req>, leaves: &impl Fn(&Req) -> bool, gone: &mut Vec<Req>) {
    let mut i = 0;
    while i < queue.len() {
        if leaves(&queue[i]) {
            gone.extend(queue.remove(i));
        } else {
            i += 1;
        }
    }
}
