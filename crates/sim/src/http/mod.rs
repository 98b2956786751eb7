//! The simulator's HTTP surfaces on axum: SGLang's (this module and `admin`, `generate`,
//! `openai`), vLLM's (`vllm`) and llama.cpp's (`llamacpp`, served through `keepalive`, which
//! closes the connection after each streamed response as llama-server does).

mod admin;
mod contract;
pub(crate) mod disagg;
mod fastapi;
mod generate;
pub(crate) mod keepalive;
pub(crate) mod llamacpp;
mod openai;
mod shared;
pub(crate) mod vllm;

use axum::Router;
use axum::routing::{get, post};

pub(crate) use shared::{
    AppState, DONE, Rejected, json_response, opt_i64, output_stream, sglang_sse_response,
    sglang_stream_error, sse, sse_response, unix_now,
};

/// Builds the router; `/metrics` exists only with `--enable-metrics`.
pub(crate) fn router(state: AppState) -> Router {
    let mut r = Router::new()
        .route(
            "/generate",
            post(generate::generate).put(generate::generate),
        )
        .route("/v1/completions", post(openai::completions))
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/models", get(admin::models))
        .route("/v1/tokenize", post(admin::tokenize))
        .route("/tokenize", post(admin::tokenize))
        .route("/flush_cache", get(admin::flush).post(admin::flush))
        .route("/health", get(admin::health))
        .route("/health_generate", get(admin::health))
        .route("/server_info", get(admin::server_info))
        .route("/get_server_info", get(admin::server_info))
        .route("/model_info", get(admin::model_info))
        .route("/get_model_info", get(admin::model_info))
        // 0.5.23 has /ready and no /get_load.
        .route("/ready", get(admin::ready))
        .route("/abort_request", post(admin::abort))
        .route(
            "/start_profile",
            get(admin::start_profile).post(admin::start_profile),
        )
        .route(
            "/stop_profile",
            get(admin::stop_profile).post(admin::stop_profile),
        );
    if state.cfg.enable_metrics {
        r = r.route("/metrics", get(admin::metrics));
    }
    let inner = r
        .fallback(fastapi::not_found)
        .method_not_allowed_fallback(fastapi::method_not_allowed)
        .with_state(state);
    // Around the whole router: axum writes a 405's `allow` header last, inside its routes.
    Router::new()
        .fallback_service(inner)
        .layer(axum::middleware::map_response(
            fastapi::allow_as_starlette_writes_it,
        ))
}
