//! What a server offers, found by asking it once it is ready: identity (`/server_info`,
//! `/v1/models`, `/props`, `/version`), how its prefix cache is emptied (SGLang `/flush_cache`,
//! vLLM `/reset_prefix_cache`, llama.cpp per-slot erase), a tokenize endpoint, and `/metrics`.
//! Every engine differs (docs/reference/*-facts.md); nothing here is assumed from a name.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Client, ClientError};
use servebench_model::results::meta::{CacheReset, ServerSurface, Tokenize};

/// How long one probe may take: identity endpoints answer at once on every engine.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a cache reset keeps retrying while the server says requests are pending.
pub(crate) const RESET_RETRY_FOR: Duration = Duration::from_secs(60);

/// Asks the server what it offers. Probing the cache reset empties the cache once, which is
/// harmless before anything was measured.
pub(crate) async fn probe(client: &Client) -> ServerSurface {
    let mut s = ServerSurface::default();
    let get = |path: &'static str| async move {
        client
            .call("GET", path, None, PROBE_TIMEOUT)
            .await
            .ok()
            .filter(|(status, _)| *status == 200)
            .and_then(|(_, body)| serde_json::from_slice::<Value>(&body).ok())
    };
    if let Some(info) = get("/server_info").await {
        s.identity.push("/server_info".into());
        s.version = info["version"].as_str().map(str::to_string);
        // SGLang's real prompt limit is max_req_input_len (KV pool and context both bound it:
        // min(context - 1, pool - 1) - 5), at the top level or in the scheduler's
        // internal_states; the smallest said.
        s.context_length = [
            &info["max_req_input_len"],
            &info["internal_states"][0]["max_req_input_len"],
            &info["context_length"],
        ]
        .into_iter()
        .filter_map(Value::as_u64)
        .min();
        if let Some(name) = info["served_model_name"].as_str() {
            s.models.push(name.to_string());
        }
        s.cached_tokens_omitted_when_zero = info["enable_cache_report"].as_bool() == Some(true);
        s.reasoning_parser = info["reasoning_parser"].as_str().map(str::to_string);
    }
    if let Some(models) = get("/v1/models").await {
        s.identity.push("/v1/models".into());
        for m in models["data"].as_array().into_iter().flatten() {
            // llama.cpp lists its `-a` names beside the id.
            let aliases = m["aliases"].as_array().into_iter().flatten();
            for id in std::iter::once(&m["id"])
                .chain(aliases)
                .filter_map(Value::as_str)
            {
                if !s.models.iter().any(|x| x == id) {
                    s.models.push(id.to_string());
                }
            }
            if s.context_length.is_none() {
                s.context_length = m["max_model_len"].as_u64();
            }
        }
    }
    let llama = get("/props").await;
    if let Some(props) = &llama {
        s.identity.push("/props".into());
        // The context a single request can use (llama.cpp splits it over slots unless
        // --kv-unified).
        let n_ctx = props["default_generation_settings"]["n_ctx"].as_u64();
        s.context_length = s.context_length.min(n_ctx).or(n_ctx).or(s.context_length);
        if s.version.is_none() {
            s.version = props["build_info"].as_str().map(str::to_string);
        }
        // The file an alias stands for: the same model under its own name.
        for name in [&props["model_alias"], &props["model_path"]]
            .into_iter()
            .filter_map(Value::as_str)
        {
            if !s.models.iter().any(|x| x == name) {
                s.models.push(name.to_string());
            }
        }
    }
    if let Some(v) = get("/version").await {
        s.identity.push("/version".into());
        if s.version.is_none() {
            s.version = v["version"].as_str().map(str::to_string);
        }
    }
    let total_slots = llama
        .as_ref()
        .and_then(|p| p["total_slots"].as_u64())
        .map(|n| n.min(4096) as u32);
    s.cache_reset = find_cache_reset(client, total_slots, &mut s.notes).await;
    s.tokenize = find_tokenize(client, llama.is_some()).await;
    s.metrics = matches!(
        client.call("GET", "/metrics", None, PROBE_TIMEOUT).await,
        Ok((200, body)) if String::from_utf8_lossy(&body).contains("# TYPE")
    );
    s
}

/// The first cache reset the server accepts, trying each engine's; notes what was refused.
/// `total_slots` is llama.cpp's `/props` count, for a server started with `--no-slots`
/// (no `GET /slots`, while `POST /slots/N?action=erase` still works).
async fn find_cache_reset(
    client: &Client,
    total_slots: Option<u32>,
    notes: &mut Vec<String>,
) -> Option<CacheReset> {
    // 400 from /flush_cache means "requests are pending": the endpoint exists.
    if let Ok((200 | 400, _)) = client
        .call("POST", "/flush_cache", None, PROBE_TIMEOUT)
        .await
    {
        return Some(CacheReset::FlushCache);
    }
    match client
        .call("POST", "/reset_prefix_cache", None, PROBE_TIMEOUT)
        .await
    {
        Ok((200, _)) => return Some(CacheReset::ResetPrefixCache),
        Ok((404 | 405, _)) => {}
        Ok((status, _)) => notes.push(format!("/reset_prefix_cache answered HTTP {status}")),
        Err(_) => {}
    }
    let listed = match client.call("GET", "/slots", None, PROBE_TIMEOUT).await {
        Ok((200, body)) => Some(
            serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|slot| slot["id"].as_u64().map(|id| id as u32))
                .collect::<Vec<u32>>(),
        ),
        _ => None,
    };
    let why_not = match (listed, total_slots) {
        (Some(slots), _) if !slots.is_empty() => erase_slots(client, slots).await.map_err(Some),
        (Some(_), _) => Err(Some(CacheResetError::NoSlots)),
        // `--no-slots`: /props still counts them, and erase needs no listing.
        (None, Some(n)) if n > 0 => erase_slots(client, (0..n).collect()).await.map_err(Some),
        (None, _) => Err(None),
    };
    match why_not {
        Ok(reset) => return Some(reset),
        Err(Some(why)) => notes.push(why.to_string()),
        Err(None) => {}
    }
    notes.push(
        "no cache reset endpoint answered (SGLang /flush_cache, vLLM /reset_prefix_cache, which \
         needs VLLM_SERVER_DEV_MODE=1, llama.cpp /slots/N?action=erase, which needs \
         --slot-save-path): cold points rely on a unique nonce per prompt, and the server's \
         cached_tokens verify it"
            .into(),
    );
    None
}

/// Why the server's prefix cache could not be emptied (or probed for a way to).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheResetError {
    /// llama.cpp's "This server does not support slots action. Start it with
    /// `--slot-save-path`" (server_context: slot_save_path empty).
    #[error(
        "llama.cpp erases a slot's cache only when started with --slot-save-path ({path} answered 501: {message})"
    )]
    NeedsSlotSavePath { path: String, message: String },
    /// `/slots` answered with no slot in it.
    #[error("/slots lists no slot to erase")]
    NoSlots,
    /// The endpoint answered, but not with success.
    #[error("{path} answered HTTP {status}: {message}")]
    Status {
        path: String,
        status: u16,
        message: String,
    },
    /// The request itself failed.
    #[error("{path} failed: {source}")]
    Request {
        path: String,
        #[source]
        source: ClientError,
    },
    /// The server kept saying requests hold its cache.
    #[error(
        "{how} kept reporting pending requests for {} s ({busy})",
        RESET_RETRY_FOR.as_secs()
    )]
    StillBusy { how: String, busy: String },
}

/// Erases the first of llama.cpp's `slots` to see whether erasing works; why not, if not.
async fn erase_slots(client: &Client, slots: Vec<u32>) -> Result<CacheReset, CacheResetError> {
    let path = format!("/slots/{}?action=erase", slots[0]);
    match client.call("POST", &path, None, PROBE_TIMEOUT).await {
        Ok((200, _)) => Ok(CacheReset::SlotErase { slots }),
        Ok((501, body)) => Err(CacheResetError::NeedsSlotSavePath {
            message: servebench_model::text::truncate(
                &super::parse::http_error_message(&body),
                120,
            ),
            path,
        }),
        Ok((status, body)) => Err(CacheResetError::Status {
            message: servebench_model::text::truncate(
                &super::parse::http_error_message(&body),
                120,
            ),
            path,
            status,
        }),
        Err(source) => Err(CacheResetError::Request { path, source }),
    }
}

/// The tokenize endpoint that counts a two-word prompt, if any.
async fn find_tokenize(client: &Client, llama: bool) -> Option<Tokenize> {
    let candidates: &[Tokenize] = if llama {
        &[Tokenize::Content]
    } else {
        &[Tokenize::V1Prompt, Tokenize::Prompt]
    };
    for t in candidates {
        if count_with(client, t, "hello world", PROBE_TIMEOUT)
            .await
            .is_ok_and(|n| n > 0)
        {
            return Some(t.clone());
        }
    }
    None
}

/// Counts `text`'s tokens with the server's tokenize endpoint (no generation, no prefill).
pub(crate) async fn count_with(
    client: &Client,
    how: &Tokenize,
    text: &str,
    timeout: Duration,
) -> Result<u64, ClientError> {
    let (path, body) = match how {
        Tokenize::V1Prompt => ("/v1/tokenize", json!({ "prompt": text })),
        Tokenize::Prompt => ("/tokenize", json!({ "prompt": text })),
        // llama.cpp adds BOS to a completion's prompt but not to /tokenize unless asked.
        Tokenize::Content => ("/tokenize", json!({ "content": text, "add_special": true })),
    };
    let (status, bytes) = client.call("POST", path, Some(body), timeout).await?;
    if status != 200 {
        return Err(ClientError::Status {
            path: path.into(),
            status,
            message: super::parse::http_error_message(&bytes),
        });
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| ClientError::Json {
        path: path.into(),
        message: e.to_string(),
    })?;
    v["count"]
        .as_u64()
        .or_else(|| v["tokens"].as_array().map(|t| t.len() as u64))
        .ok_or(ClientError::NoPromptTokens { path: path.into() })
}

/// Empties the server's prefix cache the way it offers, retrying while it reports pending
/// requests (for up to [`RESET_RETRY_FOR`], or until `stop` says so).
pub(crate) async fn reset_cache(
    client: &Client,
    how: &CacheReset,
    stop: impl Fn() -> bool,
) -> Result<(), CacheResetError> {
    let start = Instant::now();
    loop {
        let busy = match how {
            CacheReset::FlushCache => match client.flush_cache().await {
                Ok(super::FlushOutcome::Flushed) => return Ok(()),
                Ok(super::FlushOutcome::Busy(text)) => text,
                Err(source) => {
                    return Err(CacheResetError::Request {
                        path: "/flush_cache".into(),
                        source,
                    });
                }
            },
            CacheReset::ResetPrefixCache => {
                match client
                    .call("POST", "/reset_prefix_cache", None, super::ADMIN_TIMEOUT)
                    .await
                {
                    // Older vLLM answers 200 with an empty body; newer `{"success": bool}`.
                    Ok((200, body)) => {
                        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        if v["success"].as_bool() == Some(false) {
                            "the server holds cache blocks for running requests".to_string()
                        } else {
                            return Ok(());
                        }
                    }
                    Ok((status, body)) => {
                        return Err(CacheResetError::Status {
                            path: "/reset_prefix_cache".into(),
                            status,
                            message: super::parse::http_error_message(&body),
                        });
                    }
                    Err(source) => {
                        return Err(CacheResetError::Request {
                            path: "/reset_prefix_cache".into(),
                            source,
                        });
                    }
                }
            }
            CacheReset::SlotErase { slots } => {
                for id in slots {
                    let path = format!("/slots/{id}?action=erase");
                    match client.call("POST", &path, None, super::ADMIN_TIMEOUT).await {
                        Ok((200, _)) => {}
                        Ok((status, body)) => {
                            return Err(CacheResetError::Status {
                                path,
                                status,
                                message: super::parse::http_error_message(&body),
                            });
                        }
                        Err(source) => return Err(CacheResetError::Request { path, source }),
                    }
                }
                return Ok(());
            }
        };
        if start.elapsed() > RESET_RETRY_FOR || stop() {
            return Err(CacheResetError::StillBusy {
                how: how.to_string(),
                busy: servebench_model::text::truncate(&busy, 100),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
