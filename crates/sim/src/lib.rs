//! The built-in simulator: `servebench sim [--api sglang|vllm|llama.cpp] FLAGS...`.
//!
//! It accepts the engine's own launch command line and serves that engine's HTTP surface from
//! one deterministic model underneath: a BPE-like tokenizer, a prefix cache bounded by a KV
//! pool (SGLang's radix tree; vLLM's, counted in whole blocks; llama.cpp's per-slot caches),
//! an SGLang-like scheduler (continuous batching, chunked prefill, speculative decoding) and a
//! timing profile. The engine changes the surface (flags, endpoints, shapes, logs, errors,
//! connection handling), never the modelled speed. See `--help` and `profiles/*.yaml`.
//!
//! # What each surface implements, and where each fact comes from
//!
//! | behaviour | `--api sglang` (default) | `--api vllm` | `--api llama.cpp` |
//! |---|---|---|---|
//! | command line | sglang 0.5.23's `launch_server` parser, every action of it generated from the parser itself (`sglang_options.txt`, `sglang_flags.txt`): prefix matching, types (SGLang's `human_readable_int`: `64k`), choices, nargs, its `--no-X`; an ambiguous prefix (`--pp`), a flag 0.5.23 lacks (`--stream-output`), a bad value or choice exits 2 with argparse's usage + `error:` lines and words; its flags not modelled are checked alike, then warn (`flags.rs`, `args.rs`) | `vllm serve MODEL`: positional model, `_` = `-`, prefixes, `--no-X`, `--enable-X`/`--disable-X`, JSON and dotted JSON flags; unmodelled vLLM flags warn, others exit 2 with a did-you-mean (vllm-facts §1, `vllm_flags.rs` = its appendix) | `llama-server`: every spelling of llama-cpp-python 0.3.36's build (`llamacpp_flags.txt`, from its common/arg.cpp), separate `--x`/`--no-x`; unmodelled ones warn, others (`--mlock`, `--no-mmap`) `error: invalid argument`, exit 1 (llama-cpp-facts §1) |
//! | readiness (every ready line is written only once the port listens and `/health` answers) | listens at once, `/health` 503 until warm (sglang-facts §3) | bound at once (port in use fails fast), listens only when ready: connections refused while loading (vllm-facts §2) | listens at once, every path 503 `Loading model` until loaded (llama-cpp-facts §2) |
//! | ready line | `The server is fired up and ready to roll!` | `Starting vLLM server on http://H:P`, routes, uvicorn's `Application startup complete.` | `srv  llama_server: server is listening on http://H:P` (2026 form) |
//! | health | `/health`, `/health_generate`: a one-token generation through the scheduler, not counted in `/metrics`, looked at every `health_poll_s` (1 s in SGLang), 200 empty or 503 after 20 s; `/ready` (sglang-facts §9) | `/health`, `/ping`: 200 empty (503 once dead) | `/health`, `/v1/health`: `{"status":"ok"}` |
//! | identity | `/server_info`, `/model_info`, `/v1/models` (owned_by sglang) | `/version`, `/v1/models` (owned_by vllm, root, max_model_len), `/server_info` only with `VLLM_SERVER_DEV_MODE=1` (vllm-facts §3) | `/props`, `/v1/models` (meta.n_ctx_train, n_ctx) (llama-cpp-facts §3) |
//! | generation | `/generate`, `/v1/completions`, `/v1/chat/completions` | `/v1/completions`, `/v1/chat/completions` (vllm-facts §6) | `/completion` (no `[DONE]`), `/v1/completions`, `/v1/chat/completions`, one event per token, usage + `timings` on the finish chunk (llama-cpp-facts §6, llama-cpp-observed) |
//! | usage in streams | `include_usage` chunk; `continuous_usage_stats` alone | `include_usage` chunk; continuous only with include_usage; `--enable-force-include-usage` both | always on the final chunk |
//! | cached tokens | `meta_info.cached_tokens` and `cached_tokens_details`; OpenAI only with `--enable-cache-report` (0 too) | only with `--enable-prompt-tokens-details`, whole 16-token blocks | always, `prompt - 1` on a repeat; per slot |
//! | cache reset | `/flush_cache[?timeout=S]` (400 `Flush cache failed.` while busy) | `POST /reset_prefix_cache` (dev mode): 200 `{"success": false}` while requests hold blocks; `?reset_running_requests=true` preempts them (vllm-facts §4) | `POST /slots/N?action=erase` (needs `--slot-save-path`, else 501; waits for a busy slot) (llama-cpp-facts §4) |
//! | tokenize | `/v1/tokenize`, `/tokenize` | `/tokenize`, `/detokenize` (vllm-facts §5) | `/tokenize` (`add_special` false: no BOS), `/detokenize` (llama-cpp-facts §5) |
//! | metrics | `/metrics` with `--enable-metrics`, `sglang:` | `/metrics` always, `vllm:` (vllm-facts §8) | `/metrics` with `--metrics`, `llamacpp:` (llama-cpp-facts §8) |
//! | errors | SGLang's messages (sglang-facts §5, §9): prompt + `max_new_tokens` at or over the context 400, the scheduler's `min(ctx-1, pool-1) - 5` limit, `/generate` bodies through 0.5.23's JSON contract gate (400 `{"error": "..."}` in serde's words, `http/contract.rs`), FastAPI's validation errors and 404/405 (`http/fastapi.rs`); compared against the real server (`docs/reference/sim-vs-real.md`) | `{"error":{message,type,param,code}}`; prompt over max_model_len 400, max_tokens over it 400, their sum clamped (vllm-facts §7) | `{"error":{code,message,type}}`; `exceed_context_size_error` 400 with n_prompt_tokens, n_ctx (llama-cpp-facts §7) |
//! | periodic log | Prefill/Decode batch lines | `Engine 000: Avg prompt throughput: ...` every `VLLM_LOG_STATS_INTERVAL` s (vllm-facts §11) | per task: `launch_slot_`, `print_timing` block, `release` (llama-cpp-facts §10) |
//! | crash lines | `torch.OutOfMemoryError`, `Not enough memory`, `[Errno 98]` | `torch.OutOfMemoryError` + `EngineDeadError`; KV too small `ValueError: To serve at least one request ...`; `OSError: [Errno 98] Address already in use`; `Invalid repository ID or local directory` (vllm-facts §9) | `cudaMalloc failed: out of memory`; `failed to allocate buffer for kv cache`; `couldn't bind HTTP server socket`; `failed to open GGUF file` (llama-cpp-facts §9) |
//! | connections | keep-alive | keep-alive | closed after every streamed response while `Keep-Alive: timeout=5, max=100` is advertised (`http/keepalive.rs`) |
//! | prefill-decode disaggregation | `--disaggregation-mode prefill\|decode`: a prefill worker's bootstrap server, rooms matched by `bootstrap_room`, one prefill token, the modelled KV transfer, the decode side continuing from it; SGLang's refusals, PD metrics (`disagg`, docs/reference/sglang-extra.md) | - | - |
//!
//! Tests (`cargo test -p servebench-sim`; `tests/behaviour/engines.rs` drives the crate's
//! `servebench-sim --api ...` binary as a child process, `tests/behaviour/in_process.rs` covers
//! SGLang in process): command line and identity
//! `sim_vllm_takes_vllm_serve_flags_and_serves_its_identity`,
//! `sim_llamacpp_health_is_503_while_loading_then_props_and_models`; readiness
//! `sim_vllm_refuses_connections_until_ready`, `sim_ready_lines_come_only_once_the_port_listens`;
//! flags `sim_refuses_flags_as_each_engine_build_does`; SGLang 0.5.23
//! `sglang_refuses_what_does_not_fit_the_context_in_0_5_23s_words`, `sglang_0_5_23_routes_and_bodies`; streaming and usage
//! `sim_vllm_streams_usage_only_when_asked`,
//! `sim_llamacpp_streams_one_event_per_token_with_timings_at_the_end`; cached tokens
//! `sim_vllm_reports_cached_tokens_in_whole_blocks_only_with_the_flag`,
//! `sim_llamacpp_slots_cache_prompts_and_erase_needs_a_save_path`; cache reset
//! `sim_vllm_reset_prefix_cache_needs_dev_mode_and_idle_blocks`; tokenize
//! `sim_llamacpp_tokenize_has_no_bos_unless_asked_but_completions_do`; metrics
//! `sim_vllm_metrics_have_vllm_names_and_true_values`, `sim_llamacpp_np_limits_concurrent_decoding`;
//! errors `sim_vllm_refuses_and_clamps_lengths_like_0_33`,
//! `sim_llamacpp_refuses_prompts_over_the_slot_context`, `sim_api_keys_guard_what_each_engine_guards`;
//! logs `sim_vllm_logs_stats_and_access_lines`; failures
//! `sim_vllm_out_of_memory_crash_is_logged_as_vllm_does`, `sim_vllm_start_up_failures_and_bad_flags`,
//! `sim_llamacpp_failure_lines`; connections
//! `sim_llamacpp_closes_the_connection_after_each_streamed_response`; the default
//! `sim_api_sglang_is_the_default_surface`; prefill-decode disaggregation (`tests/behaviour/pd.rs`)
//! `sim_pd_prefill_and_decode_meet_by_room_as_the_router_sends_them`,
//! `sim_pd_transfer_time_and_refusals`, and behind the real router
//! `router_pd_one_prefill_two_decode_serves_every_request`.
//!
//! Guessed, not read from a source: the `file.py:line` locations in vLLM's log lines, vLLM's
//! histogram buckets, the `/version` string (`0.34.0+servebench.sim`), which idle slots a
//! unified llama.cpp KV buffer drops when full, the llama.cpp runtime out-of-memory lines
//! after `cudaMalloc failed` (and that it exits 1, not by abort), the prefix of llama.cpp's
//! `couldn't bind` line. Left out: vLLM's preemption under KV pressure (the simulator reserves
//! a request's whole output at admission, so only a reset with `reset_running_requests`
//! preempts), llama.cpp's RAM prompt cache (`--cache-ram`), slot save/restore, the 5-second
//! keep-alive idle timeout, vLLM's refusal of a `--max-model-len` above the model's, LoRA,
//! multimodal, and `LLAMA_ARG_*` environment variables.
//! Facts files: docs/reference/vllm-facts.md, docs/reference/llama-cpp-facts.md,
//! docs/reference/sglang-extra.md, docs/reference/sglang-facts.md and
//! docs/reference/llama-cpp-observed.md.
//!
//! Library use (tests, the drift bench, the rest of servebench):
//! ```no_run
//! # async fn f() -> anyhow::Result<()> {
//! use sim::{SimConfig, serve};
//! let config = SimConfig::from_args(&["--profile".into(), "fast".into()])?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! serve(config, listener, std::future::pending()).await
//! # }
//! ```

mod api;
mod args;
mod canary;
mod config;
mod disagg;
mod exit;
mod flags;
mod http;
mod kv;
mod llamacpp_args;
mod llamacpp_options;
mod log;
mod memory;
mod metrics;
mod profile;
mod profiler;
mod python;
mod radix;
mod ranks;
mod request;
mod scheduler;
mod server;
mod sglang_spec;
mod slots;
mod state;
mod surface_args;
mod thinking;
mod tokenizer;
mod tools;
mod trace;
mod types;
mod vllm_args;
mod vllm_flags;
mod vllm_options;
mod voice;

// What the rest of servebench (the CLI, the plan's estimates), the tests and the drift bench use.
pub use api::Api;
pub use args::SimArgError;
pub use config::SimConfig;
pub use log::SimLog;
pub use profile::{Profile, ProfileFacts};
pub use server::serve;
pub use surface_args::EngineArgsError;
pub use tokenizer::encode as tokenize;
pub use trace::{ChunkTrace, TraceEntry};

/// SGLang 0.5.23's `launch_server` option strings (without `--`), one a line, `#` comments:
/// the simulator's parser table names the same ones, and servebench's engine adapter checks
/// spec flags against them (generated by `scripts/real-engines/sglang_flags.py`).
pub const SGLANG_FLAGS: &str = include_str!("sglang_flags.txt");

// Names the simulator's own modules reach through the crate root.
use args::help_text;
use server::serve_socket;

/// Entry point of `servebench sim [--api NAME] ARGS...`; returns the process exit code
/// (0 clean shutdown, 1 simulated crash or start-up failure, 2 bad arguments; llama.cpp's
/// surface exits 1 on a bad argument, as llama-server does).
pub fn main(args: Vec<String>) -> i32 {
    let (api, args) = match api::split(&args) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("servebench sim: error: {e}\nTry `servebench sim --help`.");
            return crate::exit::BAD_INPUT;
        }
    };
    match api {
        Api::Sglang => main_sglang(args),
        Api::Vllm => main_vllm(args),
        Api::LlamaCpp => main_llamacpp(args),
    }
}

/// The server's runtime, the open-file limit raised first; None when it cannot start (said
/// on stderr).
fn runtime() -> Option<tokio::runtime::Runtime> {
    raise_open_file_limit();
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("sim-http")
        .enable_all()
        .build()
        .inspect_err(|e| eprintln!("servebench sim: cannot start the runtime: {e}"))
        .ok()
}

/// Raises the soft limit on open files to the hard limit: a client at `rate: inf` opens a
/// connection per request in flight, and the server holds each one (10,000 streams are 10,000
/// descriptors; many systems start at 1,024). The client side does the same
/// (`client::raise_open_file_limit`; the sim sits below the client's layer, hence its own).
fn raise_open_file_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

async fn shutdown_signal() {
    let _ = tokio::signal::ctrl_c().await;
}

fn main_sglang(args: Vec<String>) -> i32 {
    let parsed = match args::parse(&args) {
        Ok(p) => p,
        Err(e) => {
            match args::argparse_message(&e) {
                Some(m) => eprintln!("{m}"),
                None => eprintln!("servebench sim: error: {e}\nTry `servebench sim --help`."),
            }
            return crate::exit::BAD_INPUT;
        }
    };
    if parsed.help {
        print!("{}", help_text());
        return crate::exit::OK;
    }
    for w in &parsed.warnings {
        eprintln!("{w}");
    }
    let config = match SimConfig::from_parsed(parsed) {
        Ok(c) => c,
        Err(SimArgError::Raised(traceback)) => {
            eprintln!("{traceback}");
            return crate::exit::FAILED;
        }
        Err(e) => {
            eprintln!("servebench sim: error: {e}");
            return crate::exit::BAD_INPUT;
        }
    };
    let Some(runtime) = runtime() else {
        return crate::exit::FAILED;
    };
    let ranks = match ranks::RankArgs::from_sglang(
        config.args.int("nnodes"),
        config.args.int("node-rank"),
        config.args.str("dist-init-addr"),
        config.args.int("dist-timeout"),
    ) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("servebench sim: error: {e}");
            return crate::exit::BAD_INPUT;
        }
    };
    runtime.block_on(async move {
        // A multi-node rank meets the others first: rank 0 serves only once all joined.
        let role = match ranks::start(
            ranks.as_ref(),
            &config.log,
            &config.host,
            config.port,
            shutdown_signal(),
        )
        .await
        {
            Ok(role) => role,
            Err(code) => return code,
        };
        // A prefill worker's bootstrap server binds first (SGLang's tokenizer manager starts
        // it before uvicorn binds the HTTP port).
        let bootstrap = server::bind_bootstrap(&config).await;
        let addr = format!("{}:{}", config.host, config.port);
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                // Uvicorn's wording, which log classifiers recognise as "port in use".
                config.log.info(&format!(
                    "ERROR:    [Errno 98] error while attempting to bind on address ('{}', {}): {e}",
                    config.host, config.port
                ));
                return crate::exit::FAILED;
            }
        };
        let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let shutdown =
            ranks::until_shutdown(role, config.log.clone(), lost.clone(), shutdown_signal());
        let served = if config.disagg.mode == disagg::Mode::Prefill {
            server::serve_prefill(config, listener, bootstrap, shutdown).await
        } else {
            serve(config, listener, shutdown).await
        };
        serve_exit(served, &lost)
    })
}

/// The exit code after serving: 1 when serving failed or another rank was lost.
fn serve_exit(served: anyhow::Result<()>, lost: &std::sync::atomic::AtomicBool) -> i32 {
    match served {
        Ok(()) if lost.load(std::sync::atomic::Ordering::SeqCst) => crate::exit::FAILED,
        Ok(()) => crate::exit::OK,
        Err(e) => {
            eprintln!("servebench sim: {e}");
            crate::exit::FAILED
        }
    }
}

fn main_vllm(mut args: Vec<String>) -> i32 {
    let ranks = match ranks::RankArgs::take_vllm(&mut args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vllm serve: error: {e}");
            return crate::exit::BAD_INPUT;
        }
    };
    let parsed = match vllm_args::parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return crate::exit::BAD_INPUT;
        }
    };
    if parsed.help {
        print!("{}", vllm_args::help_text());
        return crate::exit::OK;
    }
    if let Some(e) = vllm_args::refused_tool_parser(&parsed.config) {
        eprintln!("{e}");
        return crate::exit::FAILED;
    }
    if let Some(e) = vllm_args::unknown_reasoning_parser(&parsed.config) {
        eprintln!("{e}");
        return crate::exit::FAILED;
    }
    let config = parsed.config;
    let voice = voice::Voice::new(Api::Vllm, config.log.clone());
    for w in &parsed.warnings {
        voice.vllm(
            voice::Proc::Api,
            "WARNING",
            "argparse_utils.py:213",
            w.strip_prefix("WARNING: ").unwrap_or(w),
        );
    }
    let Some(runtime) = runtime() else {
        return crate::exit::FAILED;
    };
    runtime.block_on(async move {
        let role = match ranks::start(
            ranks.as_ref(),
            &config.log,
            &config.host,
            config.port,
            shutdown_signal(),
        )
        .await
        {
            Ok(role) => role,
            Err(code) => return code,
        };
        // vLLM binds its socket before loading the model, so a busy port fails at once
        // (entrypoints/launchers/launcher.py `create_server_socket`).
        let bound = bind_socket(&config.host, config.port).await;
        let socket = match bound {
            Ok(s) => s,
            Err(e) => {
                voice.vllm_raw(
                    voice::Proc::Api,
                    &format!(
                        "Traceback (most recent call last):\n  File \"/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/launchers/launcher.py\", line 68, in create_server_socket\n    sock.bind(addr)\nOSError: [Errno {}] {}",
                        e.raw_os_error().unwrap_or(98),
                        if e.kind() == std::io::ErrorKind::AddrInUse {
                            "Address already in use".to_string()
                        } else {
                            e.to_string()
                        }
                    ),
                );
                return crate::exit::FAILED;
            }
        };
        let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let shutdown =
            ranks::until_shutdown(role, config.log.clone(), lost.clone(), shutdown_signal());
        serve_exit(serve_socket(config, socket, shutdown).await, &lost)
    })
}

/// A socket bound to `host:port` (the first address it resolves to), not yet listening.
async fn bind_socket(host: &str, port: u16) -> std::io::Result<tokio::net::TcpSocket> {
    let addr = tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("cannot resolve {host}")))?;
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    Ok(socket)
}

fn main_llamacpp(args: Vec<String>) -> i32 {
    let parsed = match llamacpp_args::parse(&args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}\n\nusage: servebench sim --api llama.cpp [options]  (see --help)");
            return crate::exit::FAILED;
        }
    };
    if parsed.help {
        print!("{}", llamacpp_args::help_text());
        return crate::exit::OK;
    }
    for w in &parsed.warnings {
        eprintln!("{w}");
    }
    let config = parsed.config;
    let Some(runtime) = runtime() else {
        return crate::exit::FAILED;
    };
    runtime.block_on(async move {
        // llama-server binds before loading the model (server-http.cpp `start`).
        let listener = match bind_socket(&config.host, config.port).await {
            Ok(s) => s.listen(512),
            Err(e) => Err(e),
        };
        let listener = match listener {
            Ok(l) => l,
            Err(_) => {
                config.log.raw(&format!(
                    "start: couldn't bind HTTP server socket, hostname: {}, port: {}",
                    config.host, config.port
                ));
                config
                    .log
                    .raw("srv  llama_server: exiting due to HTTP server error");
                return crate::exit::FAILED;
            }
        };
        match serve(config, listener, shutdown_signal()).await {
            Ok(()) => crate::exit::OK,
            Err(e) => {
                eprintln!("servebench sim: {e}");
                crate::exit::FAILED
            }
        }
    })
}
