//! What a sender sends: a planned request, who it is for, the request made of it, and the
//! small steps every sender shares (connections opened ahead, a cache reset, a task that
//! died). A leaf: the point's driver and its senders use it; it uses neither.

use servebench_model::catalog::FlagKind;
use servebench_model::results::meta::CacheReset;
use servebench_model::results::records::{CacheShare, Flag, RequestRecord};
use servebench_model::spec::types::{ArgValue, Experiment};

use crate::client::{Client, GenerationRequest};
use crate::run::interrupt::Interrupt;

/// One request, ready but for the cache policy's nonce.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    pub(super) text: String,
    pub(super) max_tokens: u32,
    /// The prompt length asked for (None for given texts).
    pub(super) requested: Option<u64>,
    pub(super) share: Option<CacheShare>,
    pub(super) mix: Option<String>,
    /// Whether the policy's nonce goes in front (not for texts that carry their own, which
    /// decide what they share).
    pub(super) nonce: bool,
    /// A prompt of a trace's blocks: the tokens its leading blocks already sent could find
    /// cached (None for other prompts).
    pub(super) theoretical_cached: Option<u64>,
    /// A prompt of a trace's blocks: its place in the round's ledger, marked when it goes
    /// out and asked what it could have found once answered.
    pub(super) ledger: Option<crate::prompt::blocks::LedgerEntry>,
}

/// The `model` field for OpenAI requests: the served model name if set, else the model, else
/// the name the server said it serves (`/v1/models`, `/server_info`): a `url:` server the
/// spec names no model for (vLLM answers 404 to any other name).
pub(super) fn request_model(
    exp: &Experiment,
    surface: Option<&servebench_model::results::meta::ServerSurface>,
) -> Option<String> {
    match exp.server.args.get("served-model-name") {
        Some(ArgValue::Str(s)) => Some(s.clone()),
        _ => exp
            .server
            .model
            .clone()
            .or_else(|| surface.and_then(|s| s.models.first().cloned())),
    }
}

/// Who a point's requests are for: the model name they carry, and the thinking markers of
/// the server's reasoning parser where the workload's API needs them.
#[derive(Debug, Clone, Default)]
pub(super) struct RequestTarget {
    pub(super) model: Option<String>,
    pub(super) markers: Option<servebench_model::spec::reasoning::ThinkMarkers>,
}

pub(super) fn generation_request(
    exp: &Experiment,
    prompt: String,
    target: &RequestTarget,
) -> GenerationRequest {
    GenerationRequest {
        api: exp.workload.api,
        prompt,
        max_tokens: exp.workload.output_tokens.fixed().unwrap_or(1) as u32,
        ignore_eos: exp.workload.ignore_eos,
        temperature: exp.workload.temperature,
        model: target.model.clone(),
        history: Vec::new(),
        prompt_role: "user",
        messages: None,
        spec_tokens_details: exp.server.speaks_sglang(),
        reasoning_markers: target.markers,
        chat_template_kwargs: exp
            .workload
            .chat_template_kwargs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        tools: match &exp.workload.tools {
            // Load inlined a tools file; a point never reaches here with one unread.
            Some(servebench_model::spec::tools::ToolsSpec::Inline(list)) => {
                Some(std::sync::Arc::new(list.clone()))
            }
            _ => None,
        },
        tool_choice: exp.workload.tool_choice.as_ref().map(|c| c.to_json()),
        headers: Vec::new(),
    }
}

/// The thinking markers of the server's reasoning parser, where the workload's API needs them
/// (text APIs of an SGLang-speaking server launched with `--reasoning-parser`): the spec's
/// flag for a server servebench launches, else the parser the server says it runs
/// (`/server_info`'s `reasoning_parser`: a `url:` server).
pub(super) fn reasoning_markers(
    exp: &Experiment,
    surface: Option<&servebench_model::results::meta::ServerSurface>,
) -> Option<servebench_model::spec::reasoning::ThinkMarkers> {
    use servebench_model::spec::reasoning::{ParserKnowledge, sglang_parser};
    if exp.workload.api == servebench_model::spec::types::Api::OpenaiChat
        || !exp.server.speaks_sglang()
    {
        return None;
    }
    let parser = ["reasoning-parser", "reasoning_parser"]
        .iter()
        .find_map(|k| match exp.server.args.get(*k) {
            Some(ArgValue::Str(s)) => Some(s.as_str()),
            _ => None,
        })
        .or_else(|| surface.and_then(|s| s.reasoning_parser.as_deref()))?;
    match sglang_parser(parser) {
        ParserKnowledge::Markers(m) => Some(m),
        ParserKnowledge::NoMarkers | ParserKnowledge::Unknown => None,
    }
}

/// Empties the server's prefix cache `how` it offers; an interrupt stops the wait.
pub(super) async fn reset_cache_with(
    client: &Client,
    how: &CacheReset,
    interrupt: &Interrupt,
) -> Result<(), crate::client::surface::CacheResetError> {
    let interrupt = interrupt.clone();
    crate::client::surface::reset_cache(client, how, move || interrupt.is_set()).await
}

/// The flag for a request task that ended without its record: None when an interrupt
/// aborted it (it never finished, so it is no measurement), the `client-failed` flag when it
/// panicked (the point failed: a request it sent is not recorded).
pub(super) fn task_died(e: tokio::task::JoinError) -> Option<Flag> {
    if !e.is_panic() {
        return None;
    }
    let panic = e.into_panic();
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    Some(Flag::new(
        FlagKind::ClientFailed,
        format!("a request's task died ({message}); its request is not recorded"),
    ))
}

/// Opens `n` connections before requests are released. A server that cannot be reached is
/// left for the requests to record (each one says why it failed).
pub(super) async fn prepare(client: &Client, n: usize) {
    if let Err(e) = client.prepare(n).await {
        tracing::debug!("could not open connections ahead: {e}");
    }
}

/// When a record's stream ended, as an `Instant`: its last byte, not when the request path
/// handed it back (the connection pool holds the first two responses' connections 50 ms after
/// their end, to learn whether the server closes them: a think time counted from the
/// hand-back sent the next turn that much late).
pub(super) fn response_ended(r: &RequestRecord) -> std::time::Instant {
    let now = std::time::Instant::now();
    let end = r.sent_at + r.end_s.unwrap_or(0.0);
    let ago = (crate::client::unix_now() - end).clamp(0.0, 60.0);
    now.checked_sub(std::time::Duration::from_secs_f64(ago))
        .unwrap_or(now)
}
