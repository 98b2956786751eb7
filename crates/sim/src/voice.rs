//! Each engine's log lines, for the events the simulator's scheduler and server go through.
//!
//! SGLang's lines are the ones the simulator always printed (unchanged). vLLM's follow its
//! logger format, `(APIServer pid=N) INFO MM-DD hh:mm:ss [file.py:line] message`
//! (vllm/logger.py; the process prefix comes from vLLM's log decoration), on stdout as vLLM's
//! logging config writes them. llama.cpp's follow `srv  %12.*s: ` and
//! `slot %12.*s: id %2d | task %d | ` (tools/server/server-common.h `SRV_INF`, `SLT_INF`), on
//! stderr. The `file.py:line` locations of vLLM's lines are plausible, not taken from a
//! particular release.

use super::api::Api;
use super::log::SimLog;
use super::types::Timings;

/// vLLM's version the simulator's vLLM surface follows (docs/reference/vllm-facts.md).
pub(crate) const VLLM_VERSION: &str = "0.34.0";

/// Which vLLM process a line comes from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Proc {
    /// The HTTP front end.
    Api,
    /// The engine core (data-parallel rank 0).
    Engine,
}

/// Writes an engine's log lines.
#[derive(Debug, Clone)]
pub(crate) struct Voice {
    api: Api,
    log: SimLog,
    pid: u32,
}

impl Voice {
    /// A voice for `api` writing to `log`.
    pub(crate) fn new(api: Api, log: SimLog) -> Self {
        Voice {
            api,
            log,
            pid: std::process::id(),
        }
    }

    /// A vLLM logger line.
    pub(crate) fn vllm(&self, proc: Proc, level: &str, at: &str, msg: &str) {
        let stamp = chrono::Local::now().format("%m-%d %H:%M:%S");
        self.log.raw(&format!(
            "{} {level} {stamp} [{at}] {msg}",
            self.vllm_prefix(proc)
        ));
    }

    /// Lines vLLM's decoration prefixes with the process (uvicorn's, tracebacks).
    pub(crate) fn vllm_raw(&self, proc: Proc, text: &str) {
        let prefix = self.vllm_prefix(proc);
        for line in text.lines() {
            self.log.raw(&format!("{prefix} {line}"));
        }
    }

    fn vllm_prefix(&self, proc: Proc) -> String {
        let name = match proc {
            Proc::Api => "APIServer",
            Proc::Engine => "EngineCore_DP0",
        };
        format!("({name} pid={})", self.pid)
    }

    /// A llama.cpp server line: `srv  <func>: <msg>`.
    pub(crate) fn srv(&self, func: &str, msg: &str) {
        self.log.raw(&format!("srv  {func:>12.12}: {msg}"));
    }

    /// A llama.cpp slot line: `slot <func>: id  N | task T | <msg>`.
    pub(crate) fn slot(&self, func: &str, id: usize, task: i64, msg: &str) {
        self.log.raw(&format!(
            "slot {func:>12.12}: id {id:2} | task {task} | {msg}"
        ));
    }

    /// The engine is warmed up and about to serve.
    pub(crate) fn engine_ready(&self, warmup_s: f64) {
        match self.api {
            Api::Sglang => self.log.info("The server is fired up and ready to roll!"),
            Api::Vllm => {
                self.vllm(
                    Proc::Engine,
                    "INFO",
                    "gpu_model_runner.py:4640",
                    "Graph capturing finished in 0 secs, took 0.00 GiB",
                );
                self.vllm(
                    Proc::Engine,
                    "INFO",
                    "core.py:262",
                    &format!(
                        "init engine (profile, create kv cache, warmup model) took {warmup_s:.2} seconds"
                    ),
                );
            }
            Api::LlamaCpp => {}
        }
    }

    /// SGLang's Prefill batch line.
    pub(crate) fn prefill_batch(&self, line: &str) {
        if self.api == Api::Sglang {
            self.log.batch(line);
        }
    }

    /// SGLang's Decode batch line.
    pub(crate) fn decode_batch(&self, line: &str) {
        if self.api == Api::Sglang {
            self.log.batch(line);
        }
    }

    /// SGLang's `/flush_cache` outcome.
    pub(crate) fn flush(&self, ok: bool) {
        if ok {
            self.log.info("Cache flushed successfully!");
        } else {
            self.log
                .info("Cache not flushed because there are pending requests.");
        }
    }

    /// vLLM's `/reset_prefix_cache` outcome (v1/core/block_pool.py `reset_prefix_cache`).
    pub(crate) fn reset_prefix_cache(&self, ok: bool, blocks_held: u64) {
        if ok {
            self.vllm(
                Proc::Engine,
                "INFO",
                "block_pool.py:411",
                "Successfully reset prefix cache",
            );
        } else {
            self.vllm(
                Proc::Engine,
                "WARNING",
                "block_pool.py:404",
                &format!(
                    "Failed to reset prefix cache because some blocks ({blocks_held}) are not freed yet"
                ),
            );
        }
    }

    /// llama.cpp: a slot starts a task.
    pub(crate) fn task_started(
        &self,
        slot: usize,
        task: u64,
        n_ctx_slot: u64,
        prompt: u64,
        cached: u64,
    ) {
        if self.api != Api::LlamaCpp {
            return;
        }
        let task = task as i64;
        self.slot("launch_slot_", slot, task, "processing task");
        self.slot(
            "update_slots",
            slot,
            task,
            &format!("new prompt, n_ctx_slot = {n_ctx_slot}, n_keep = 0, task.n_tokens = {prompt}"),
        );
        if cached > 0 {
            self.slot(
                "update_slots",
                slot,
                task,
                &format!("n_tokens = {cached}, memory_seq_rm [{cached}, end)"),
            );
        }
    }

    /// llama.cpp: a slot finished its task (`print_timing` and `release`).
    pub(crate) fn task_finished(&self, slot: usize, t: &Timings, n_tokens: u64) {
        if self.api != Api::LlamaCpp {
            return;
        }
        let task = t.task as i64;
        let per = |ms: f64, n: u64| {
            if n == 0 {
                (0.0, 0.0)
            } else {
                let per_tok = ms / n as f64;
                let per_s = if ms > 0.0 { 1e3 * n as f64 / ms } else { 0.0 };
                (per_tok, per_s)
            }
        };
        let (p_tok, p_s) = per(t.prompt_ms, t.prompt_n);
        let (g_tok, g_s) = per(t.predicted_ms, t.predicted_n);
        self.slot(
            "print_timing",
            slot,
            task,
            &format!(
                "\nprompt eval time = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)",
                t.prompt_ms, t.prompt_n, p_tok, p_s
            ),
        );
        self.log.raw(&format!(
            "       eval time = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)",
            t.predicted_ms, t.predicted_n, g_tok, g_s
        ));
        self.log.raw(&format!(
            "      total time = {:10.2} ms / {:5} tokens",
            t.prompt_ms + t.predicted_ms,
            t.prompt_n + t.predicted_n
        ));
        self.slot(
            "release",
            slot,
            task,
            &format!("stop processing: n_tokens = {n_tokens}, truncated = 0"),
        );
    }

    /// llama.cpp: nothing is running any more.
    pub(crate) fn all_idle(&self) {
        if self.api == Api::LlamaCpp {
            self.srv("update_slots", "all slots are idle");
        }
    }

    /// The engine runs out of GPU memory in a prefill (`torch_error` is PyTorch's error line;
    /// `tried_mib` what the failing allocation asked for).
    pub(crate) fn out_of_memory(&self, torch_error: &str, tried_mib: f64) {
        match self.api {
            Api::Sglang => {
                self.log
                    .info("Scheduler hit an exception: Traceback (most recent call last):");
                self.log.raw(&format!(
                    "  File \"/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py\", line 2912, in run_scheduler_process\n\
                     \x20   scheduler.event_loop_overlap()\n\
                     \x20 File \"/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py\", line 1004, in event_loop_overlap\n\
                     \x20   batch_result = self.run_batch(batch)\n\
                     \x20 File \"/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py\", line 1890, in forward_extend\n\
                     \x20   return self.model.forward(\n\
                     {torch_error}\n",
                ));
                self.log.info(
                    "Received sigquit from a child process. It usually means the child failed.",
                );
            }
            Api::Vllm => {
                let at = "core.py:866";
                self.vllm(
                    Proc::Engine,
                    "ERROR",
                    at,
                    "EngineCore encountered a fatal error.",
                );
                for line in [
                    "Traceback (most recent call last):",
                    "  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py\", line 857, in run_engine_core",
                    "    engine_core.run_busy_loop()",
                    "  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py\", line 884, in run_busy_loop",
                    "    self._process_engine_step()",
                    "  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py\", line 2580, in execute_model",
                    "    model_output = self.model(",
                    torch_error,
                ] {
                    self.vllm(Proc::Engine, "ERROR", at, line);
                }
                let at = "async_llm.py:525";
                self.vllm(Proc::Api, "ERROR", at, "AsyncLLM output_handler failed.");
                for line in [
                    "Traceback (most recent call last):",
                    "  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py\", line 480, in output_handler",
                    "    outputs = await engine_core.get_output_async()",
                    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
                ] {
                    self.vllm(Proc::Api, "ERROR", at, line);
                }
                self.vllm_raw(Proc::Api, "INFO:     Shutting down");
                self.vllm_raw(Proc::Api, "INFO:     Waiting for application shutdown.");
                self.vllm_raw(Proc::Api, "INFO:     Application shutdown complete.");
            }
            Api::LlamaCpp => {
                self.log.raw(&format!(
                    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating {tried_mib:.2} MiB on device 0: cudaMalloc failed: out of memory"
                ));
                self.log.raw(&format!(
                    "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size {}",
                    (tried_mib * 1048576.0) as u64
                ));
                self.log.raw("CUDA error: out of memory");
                self.log.raw(
                    "  current device: 0, in function ggml_backend_cuda_graph_compute at /app/ggml/src/ggml-cuda/ggml-cuda.cu:2964",
                );
                self.log.raw("  cudaStreamSynchronize(cuda_ctx->stream())");
                self.log
                    .raw("/app/ggml/src/ggml-cuda/ggml-cuda.cu:88: CUDA error");
            }
        }
    }
}

/// Groups digits by thousands, as Python's `{:,}` does.
pub(crate) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_prefixes_align_like_printf() {
        let log = SimLog::capture();
        let v = Voice::new(Api::LlamaCpp, log.clone());
        v.srv("load_model", "x");
        v.srv("llama_server", "y");
        v.slot("print_timings", 0, 12, "z");
        v.slot("release", 3, 1, "w");
        assert_eq!(
            log.lines(),
            [
                "srv    load_model: x",
                "srv  llama_server: y",
                "slot print_timing: id  0 | task 12 | z",
                "slot      release: id  3 | task 1 | w",
            ]
        );
    }

    #[test]
    fn thousands_groups() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
    }
}
