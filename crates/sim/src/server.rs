//! Running the simulator: scheduler thread + HTTP server until shutdown or a simulated crash,
//! with each engine's start-up (checks, log lines, when the socket listens).

use super::api::Api;
use super::config::SimConfig;
use super::http::{AppState, router};
use super::llamacpp_options::LlamaOptions;
use super::scheduler::{self, OnReady};
use super::state::Shared;
use super::types::Command;
use super::vllm_options::VllmOptions;
use super::voice::{Proc, VLLM_VERSION, Voice, thousands};
use axum::serve::ListenerExt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};

/// Serves the simulator on `listener` until `shutdown` resolves (Ok) or the simulated engine
/// crashes (Err with the reason). Warmup runs in the background: `/health` is 503 until done
/// (SGLang, llama.cpp); a vLLM surface accepts connections only once ready.
pub async fn serve(
    config: SimConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_on(config, Listen::Now(listener), Bootstrap::Later, shutdown).await
}

/// Like [`serve`] for a prefill worker whose bootstrap port was bound before the HTTP port
/// (None: the bind failed and was logged), as SGLang binds them.
pub(crate) async fn serve_prefill(
    config: SimConfig,
    listener: TcpListener,
    bootstrap: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_on(
        config,
        Listen::Now(listener),
        Bootstrap::Bound(bootstrap),
        shutdown,
    )
    .await
}

/// A prefill worker's bootstrap listener: bound already, or to bind when serving starts.
enum Bootstrap {
    Later,
    Bound(Option<TcpListener>),
}

/// Binds a prefill worker's bootstrap server on `--host`:`--disaggregation-bootstrap-port`
/// (None for other roles). A failed bind is logged as SGLang's bootstrap thread logs it and
/// the worker serves on without one (common/conn.py `_run_server` catches and logs).
pub(crate) async fn bind_bootstrap(config: &SimConfig) -> Option<TcpListener> {
    if config.disagg.mode != super::disagg::Mode::Prefill {
        return None;
    }
    let port = config.disagg.bootstrap_port;
    match TcpListener::bind((config.host.as_str(), port)).await {
        Ok(l) => Some(l),
        Err(e) => {
            let why = if e.kind() == std::io::ErrorKind::AddrInUse {
                "address already in use".to_string()
            } else {
                e.to_string().to_lowercase()
            };
            config.log.info(&format!(
                "Server error: [Errno {}] error while attempting to bind on address ('{}', {port}): {why}",
                e.raw_os_error().unwrap_or(98),
                config.host
            ));
            None
        }
    }
}

/// Like [`serve`] on a socket that is bound but not listening: it listens when the engine's
/// surface would (vLLM: once the engine is ready, so connections are refused while it loads;
/// SGLang and llama.cpp: at once).
pub(crate) async fn serve_socket(
    config: SimConfig,
    socket: TcpSocket,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_on(config, Listen::Later(socket), Bootstrap::Later, shutdown).await
}

enum Listen {
    Now(TcpListener),
    Later(TcpSocket),
}

impl Listen {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Listen::Now(l) => l.local_addr(),
            Listen::Later(s) => s.local_addr(),
        }
    }

    fn listen(self) -> std::io::Result<TcpListener> {
        match self {
            Listen::Now(l) => Ok(l),
            Listen::Later(s) => s.listen(2048),
        }
    }
}

async fn serve_on(
    config: SimConfig,
    listen: Listen,
    bootstrap: Bootstrap,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    match config.api {
        Api::Sglang => {
            let bootstrap = match bootstrap {
                Bootstrap::Bound(b) => b,
                Bootstrap::Later => bind_bootstrap(&config).await,
            };
            serve_sglang(config, listen.listen()?, bootstrap, shutdown).await
        }
        Api::Vllm => serve_vllm(config, listen, shutdown).await,
        Api::LlamaCpp => serve_llamacpp(config, listen.listen()?, shutdown).await,
    }
}

/// The scheduler thread and what the HTTP side needs of it.
struct Engine {
    state: AppState,
    shared: Arc<Shared>,
    tx: Sender<Command>,
    thread: std::thread::JoinHandle<()>,
}

fn start_engine(config: SimConfig, on_ready: OnReady) -> anyhow::Result<Engine> {
    let shared = Arc::new(Shared::new(config.api));
    if config.disagg.mode != super::disagg::Mode::Null
        && let Ok(mut st) = shared.stats.lock()
    {
        st.pd = super::metrics::PdStats::new(config.disagg.mode.engine_type());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = scheduler::spawn(&config, shared.clone(), rx, on_ready)?;
    let state = AppState {
        cfg: Arc::new(config),
        shared: shared.clone(),
        tx: tx.clone(),
        created: super::http::unix_now() as u64,
        pd: Arc::default(),
    };
    Ok(Engine {
        state,
        shared,
        tx,
        thread,
    })
}

impl Engine {
    /// A future that resolves on `shutdown` or a crash, and ends every open stream.
    fn stop_signal(
        &self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let mut crash = self.shared.crash_watch();
        let stop_tx = self.tx.clone();
        let pd = self.state.pd.clone();
        async move {
            tokio::select! {
                _ = shutdown => {}
                _ = crash.wait_for(Option::is_some) => {}
            }
            // Ends every open stream so graceful shutdown does not wait on them (requests
            // still in a PD bootstrap or transfer queue too).
            let _ = stop_tx.send(Command::Shutdown);
            pd.closing.send_replace(true);
        }
    }

    /// Stops the scheduler and reports a crash, else the server's own result.
    async fn finish(self, result: std::io::Result<()>) -> anyhow::Result<()> {
        let Engine {
            tx, thread, shared, ..
        } = self;
        let _ = tx.send(Command::Shutdown);
        drop(tx);
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        if let Some(msg) = shared.crash_watch().borrow().clone() {
            anyhow::bail!(msg);
        }
        result?;
        Ok(())
    }
}

async fn serve_sglang(
    config: SimConfig,
    listener: TcpListener,
    bootstrap: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let log = config.log.clone();
    // SGLang's first line (`logger.info(f"{server_args=}")` in its engine launch): every
    // server argument, the API key included, as Python's dataclass repr writes them.
    log.info(&format!(
        "server_args=ServerArgs({})",
        config
            .args
            .values
            .iter()
            .map(|(k, v)| format!("{k}={}", super::vllm_args::py_repr(v)))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if config.max_total_tokens <= 0 {
        log.info("Scheduler hit an exception: Traceback (most recent call last):");
        log.raw("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.");
        log.info("Received sigquit from a child process. It usually means the child failed.");
        anyhow::bail!(
            "not enough memory for the KV pool: increase --mem-fraction-static or set --max-total-tokens"
        );
    }
    let http_port = listener.local_addr()?.port();
    let pd = config.disagg.clone();
    let host = config.host.clone();
    let engine = start_engine(config, Box::new(|| {}))?;
    let bootstrap_server = bootstrap.map(|l| {
        let port = l.local_addr().map_or(pd.bootstrap_port, |a| a.port());
        log.info(&format!(
            "CommonKVBootstrapServer started successfully on {host}:{port}"
        ));
        // register_to_bootstrap: a wildcard host is reached on the loopback.
        let rank_ip = match host.as_str() {
            "0.0.0.0" => "127.0.0.1".to_string(),
            "::" => "::1".to_string(),
            h => h.to_string(),
        };
        let layout = super::disagg::bootstrap::PrefillLayout {
            tp: pd.tp,
            page_size: pd.page_size,
            kv_cache_dtype: pd.kv_cache_dtype.clone(),
            http_port,
            rank_ip,
            rank_port: port,
        };
        let app = super::disagg::bootstrap::router(engine.state.pd.rooms.clone(), layout);
        tokio::spawn(async move {
            let _ = axum::serve(l, app).await;
        })
    });
    let addr = listener.local_addr()?;
    log.info(&format!(
        "Uvicorn running on http://{addr} (Press CTRL+C to quit)"
    ));
    let stop = engine.stop_signal(shutdown);
    // Small SSE writes must leave at once: Nagle + delayed ACK would add ~40 ms per chunk.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let result = axum::serve(listener, router(engine.state.clone()))
        .with_graceful_shutdown(stop)
        .await;
    if let Some(b) = bootstrap_server {
        b.abort();
    }
    engine.finish(result).await
}

/// A model named by a filesystem path (absolute, `./`, `../` or `~`) that does not exist.
/// Any other name stands for a model the simulator pretends to have.
pub(crate) fn missing_model_path(model: &str) -> bool {
    let path = if let Some(rest) = model.strip_prefix("~/") {
        match std::env::var_os("HOME") {
            Some(home) => std::path::Path::new(&home).join(rest),
            None => return false,
        }
    } else {
        std::path::PathBuf::from(model)
    };
    let path_like = model.starts_with('/')
        || model.starts_with("./")
        || model.starts_with("../")
        || model.starts_with('~');
    path_like && !path.exists()
}

/// GiB with two decimals, as vLLM's `format_gib` prints them.
fn gib(bytes: f64) -> String {
    format!("{:.2}", bytes / (1u64 << 30) as f64)
}

async fn serve_vllm(
    config: SimConfig,
    listen: Listen,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let voice = Voice::new(Api::Vllm, config.log.clone());
    let Some(v) = config.vllm.clone() else {
        anyhow::bail!("vLLM settings missing");
    };
    vllm_announce_args(&voice, &v)?;
    vllm_check_kv_cache(&voice, &config, &v)?;
    let addr = listen.local_addr()?;
    let ready_voice = voice.clone();
    let dev_mode = v.dev_mode;
    let host = v.host_display.clone();
    // Said once the socket listens (below), never before: a client that trusts the line must
    // find the port accepting.
    let announce = move || vllm_announce_ready(&ready_voice, dev_mode, &host, addr.port());
    // Set once the engine's own ready lines are written (they come first, as in vLLM).
    let engine_up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let up = engine_up.clone();
    let on_ready: OnReady = Box::new(move || up.store(true, std::sync::atomic::Ordering::Release));
    let engine = start_engine(config, on_ready)?;
    // vLLM's socket is bound early but listens only once the engine is up.
    while !engine_up.load(std::sync::atomic::Ordering::Acquire) {
        if engine.shared.crashed() {
            return engine.finish(Ok(())).await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let listener = listen.listen()?;
    announce();
    let stats = tokio::spawn(super::http::vllm::log_stats(
        engine.state.clone(),
        voice.clone(),
    ));
    let stop = engine.stop_signal(shutdown);
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let app = super::http::vllm::router(engine.state.clone(), v);
    let result = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await;
    stats.abort();
    engine.finish(result).await
}

/// vLLM's first lines (version, non-default args), then its refusal of a model path that
/// does not exist.
fn vllm_announce_args(voice: &Voice, v: &VllmOptions) -> anyhow::Result<()> {
    let api = |level: &str, at: &str, msg: &str| voice.vllm(Proc::Api, level, at, msg);
    api(
        "INFO",
        "api_server.py:1863",
        &format!(
            "vLLM server version {VLLM_VERSION}+servebench.sim, serving model {}",
            v.model
        ),
    );
    let args: Vec<String> = v
        .non_default
        .iter()
        .map(|(k, val)| format!("'{k}': {}", super::vllm_args::py_repr(val)))
        .collect();
    api(
        "INFO",
        "utils.py:253",
        &format!("non-default args: {{{}}}", args.join(", ")),
    );
    if missing_model_path(&v.model) {
        voice.vllm_raw(
            Proc::Api,
            &format!(
                "Traceback (most recent call last):\n  File \"/usr/local/bin/vllm\", line 10, in <module>\n    sys.exit(main())\n  \
                 File \"/usr/local/lib/python3.12/dist-packages/vllm/transformers_utils/config.py\", line 612, in get_config\n    \
                 raise ValueError(\nValueError: Invalid repository ID or local directory specified: '{}'.\n\
                 Please verify the following requirements:\n1. Provide a valid Hugging Face repository ID.\n\
                 2. Specify a local directory that contains a recognized configuration file.\n   \
                 - For Hugging Face models: ensure the presence of a 'config.json'.\n   \
                 - For Mistral models: ensure the presence of a 'params.json'.",
                v.model
            ),
        );
        anyhow::bail!("model not found: {}", v.model);
    }
    Ok(())
}

/// The engine's configuration and KV cache lines, and vLLM's refusal when the cache is
/// empty or cannot hold one request of `--max-model-len`.
fn vllm_check_kv_cache(voice: &Voice, config: &SimConfig, v: &VllmOptions) -> anyhow::Result<()> {
    let eng = |level: &str, at: &str, msg: &str| voice.vllm(Proc::Engine, level, at, msg);
    let kv_bytes_per_token =
        config.profile.memory.kv_bytes_per_token / v.tensor_parallel_size.max(1) as f64;
    eng(
        "INFO",
        "core.py:93",
        &format!(
            "Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: model='{}', served_model_name={}, max_seq_len={}, tensor_parallel_size={}, enable_prefix_caching={}, seed={}",
            v.model,
            v.served_names[0],
            config.context_length,
            v.tensor_parallel_size,
            if config.disable_radix_cache {
                "False"
            } else {
                "True"
            },
            config.seed,
        ),
    );
    let available = config.max_total_tokens.max(0) as f64 * kv_bytes_per_token;
    if config.max_total_tokens <= 0 {
        eng(
            "INFO",
            "gpu_worker.py:298",
            "Available KV cache memory: 0.00 GiB",
        );
        vllm_engine_failed(
            voice,
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        );
        anyhow::bail!("not enough memory for the KV cache: increase --gpu-memory-utilization");
    }
    eng(
        "INFO",
        "gpu_worker.py:298",
        &format!("Available KV cache memory: {} GiB", gib(available)),
    );
    if config.pool_tokens() < config.context_length {
        let needed = config.context_length as f64 * kv_bytes_per_token;
        let estimate = config.pool_tokens() - config.pool_tokens() % v.block_size.max(1);
        vllm_engine_failed(
            voice,
            &format!(
                "To serve at least one request with the model's max seq len ({}), ({} GiB KV cache is needed, which is larger than the available KV cache memory ({} GiB). Based on the available memory, the estimated maximum model length is {estimate}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
                config.context_length,
                gib(needed),
                gib(available),
            ),
        );
        anyhow::bail!(
            "the KV cache holds {} tokens, fewer than --max-model-len {}",
            config.pool_tokens(),
            config.context_length
        );
    }
    eng(
        "INFO",
        "kv_cache_utils.py:1087",
        &format!(
            "GPU KV cache size: {} tokens",
            thousands(config.pool_tokens())
        ),
    );
    eng(
        "INFO",
        "kv_cache_utils.py:1091",
        &format!(
            "Maximum concurrency for {} tokens per request: {:.2}x",
            thousands(config.context_length),
            config.pool_tokens() as f64 / config.context_length as f64
        ),
    );
    Ok(())
}

/// vLLM's engine-core failure traceback for a KV cache check, ending in `message`.
fn vllm_engine_failed(voice: &Voice, message: &str) {
    let eng = |level: &str, at: &str, msg: &str| voice.vllm(Proc::Engine, level, at, msg);
    eng("ERROR", "core.py:812", "EngineCore failed to start.");
    eng("ERROR", "core.py:812", "Traceback (most recent call last):");
    eng(
        "ERROR",
        "core.py:812",
        "  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py\", line 686, in check_enough_kv_cache_memory",
    );
    eng("ERROR", "core.py:812", &format!("ValueError: {message}"));
    voice.vllm_raw(
        Proc::Api,
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    );
}

/// The API server's ready lines: dev-mode warning, tasks, address, routes, uvicorn start-up.
fn vllm_announce_ready(voice: &Voice, dev_mode: bool, host: &str, port: u16) {
    let api = |level: &str, at: &str, msg: &str| voice.vllm(Proc::Api, level, at, msg);
    if dev_mode {
        api(
            "WARNING",
            "api_server.py:1634",
            "SECURITY WARNING: Development endpoints are enabled! This should NOT be used in production!",
        );
    }
    api(
        "INFO",
        "api_server.py:1605",
        "Supported tasks: ['generate']",
    );
    // The port actually bound (vLLM logs the --port it was given; they differ only for 0).
    api(
        "INFO",
        "api_server.py:1906",
        &format!("Starting vLLM server on http://{host}:{port}"),
    );
    api("INFO", "launcher.py:46", "Available routes are:");
    for (route, methods) in super::http::vllm::ROUTES {
        if !dev_mode && super::http::vllm::DEV_ROUTES.contains(route) {
            continue;
        }
        api(
            "INFO",
            "launcher.py:54",
            &format!("Route: {route}, Methods: {methods}"),
        );
    }
    let pid = std::process::id();
    voice.vllm_raw(
        Proc::Api,
        &format!(
            "INFO:     Started server process [{pid}]\nINFO:     Waiting for application startup.\nINFO:     Application startup complete."
        ),
    );
}

async fn serve_llamacpp(
    config: SimConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let voice = Voice::new(Api::LlamaCpp, config.log.clone());
    let Some(l) = config.llama.clone() else {
        anyhow::bail!("llama.cpp settings missing");
    };
    let log = config.log.clone();
    log.raw(&format!(
        "build: 0 (servebench-sim-{}) with rustc for {}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH
    ));
    if l.auto_parallel {
        log.raw("main: n_parallel is set to auto, using n_parallel = 4 and kv_unified = true");
    }
    // The HTTP listener is up before the model loads: every path answers 503 meanwhile.
    let addr = listener.local_addr()?;
    llamacpp_load_model(&voice, &config, &l)?;
    let ready_voice = voice.clone();
    let host = config.host.clone();
    let on_ready: OnReady = Box::new(move || {
        ready_voice.srv("llama_server", "model loaded");
        ready_voice.srv(
            "llama_server",
            &format!("server is listening on http://{host}:{}", addr.port()),
        );
        ready_voice.srv("update_slots", "all slots are idle");
    });
    let engine = start_engine(config, on_ready)?;
    let stop = engine.stop_signal(shutdown);
    let app = super::http::llamacpp::router(engine.state.clone(), l);
    let result = super::http::keepalive::serve(listener, app, stop).await;
    engine.finish(result).await
}

/// llama.cpp's model load: its lines, or its failure when the model file is missing or the
/// context's KV cache does not fit beside the weights.
fn llamacpp_load_model(voice: &Voice, config: &SimConfig, l: &LlamaOptions) -> anyhow::Result<()> {
    let log = &config.log;
    voice.srv("load_model", &format!("loading model '{}'", l.model_path));
    let fail_load = |lines: &[String]| {
        for line in lines {
            log.raw(line);
        }
        voice.srv(
            "load_model",
            &format!("failed to load model, '{}'", l.model_path),
        );
        voice.srv("llama_server", "exiting due to model loading error");
    };
    if missing_model_path(&l.model_path) {
        fail_load(&[
            format!(
                "gguf_init_from_file: failed to open GGUF file '{}' (No such file or directory)",
                l.model_path
            ),
            format!(
                "llama_model_load: error loading model: llama_model_loader: failed to load model from {}",
                l.model_path
            ),
            "llama_model_load_from_file_impl: failed to load model".into(),
            format!(
                "common_init_from_params: failed to load model '{}'",
                l.model_path
            ),
        ]);
        anyhow::bail!("failed to load model '{}'", l.model_path);
    }
    let m = &config.profile.memory;
    let kv_mib = l.n_ctx as f64 * m.kv_bytes_per_token / (1u64 << 20) as f64;
    let free_mib = (m.gpu_gb - m.weight_gb) * 1e9 / (1u64 << 20) as f64;
    if kv_mib > free_mib {
        fail_load(&[
            format!(
                "llama_context: n_ctx = {}, n_ctx_per_seq = {}, n_batch = {}, n_ubatch = {}",
                l.n_ctx, l.n_ctx_slot, l.n_batch, l.n_ubatch
            ),
            format!(
                "ggml_backend_cuda_buffer_type_alloc_buffer: allocating {kv_mib:.2} MiB on device 0: cudaMalloc failed: out of memory"
            ),
            format!(
                "alloc_tensor_range: failed to allocate CUDA0 buffer of size {}",
                (kv_mib * (1u64 << 20) as f64) as u64
            ),
            "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache".into(),
            format!(
                "common_init_from_params: failed to create context with model '{}'",
                l.model_path
            ),
        ]);
        anyhow::bail!("the KV cache for -c {} does not fit in GPU memory", l.n_ctx);
    }
    log.raw(&format!(
        "llama_context: n_ctx = {}, n_ctx_per_seq = {}, n_batch = {}, n_ubatch = {}",
        l.n_ctx, l.n_ctx_slot, l.n_batch, l.n_ubatch
    ));
    log.raw(&format!(
        "llama_kv_cache:      CUDA0 KV buffer size = {kv_mib:8.2} MiB"
    ));
    voice.srv(
        "load_model",
        &format!("initializing slots, n_slots = {}", l.n_slots),
    );
    for id in 0..l.n_slots {
        voice.slot(
            "load_model",
            id,
            -1,
            &format!("new slot, n_ctx = {}", l.n_ctx_slot),
        );
    }
    Ok(())
}
