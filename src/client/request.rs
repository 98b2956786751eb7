//! Request bodies, one shape per API.

use serde_json::{Value, json};

use servebench_model::spec::types::Api;

/// `model` sent in OpenAI bodies when the spec names none; SGLang accepts any name.
pub const DEFAULT_MODEL: &str = "default";

/// What to send.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationRequest {
    /// The HTTP API (decides path, body and stream format).
    pub api: Api,
    /// The prompt text (sent as the single user message for chat).
    pub prompt: String,
    /// Output tokens to generate (`max_new_tokens` / `max_tokens`).
    pub max_tokens: u32,
    /// Keep generating past end-of-sequence.
    pub ignore_eos: bool,
    /// Sampling temperature; 0 is greedy.
    pub temperature: f64,
    /// `model` of OpenAI bodies; [`DEFAULT_MODEL`] when None. Not sent on the native API.
    pub model: Option<String>,
    /// Earlier turns of a conversation, sent as chat messages before `prompt` (the chat API
    /// only; the other APIs get the conversation already written into `prompt`).
    pub history: Vec<ChatMessage>,
    /// The role of the chat message that carries `prompt`: `user`, but for a replayed round
    /// that ends with another (an SGLang agentic-trace round of tool results).
    pub prompt_role: &'static str,
    /// A captured request's literal chat messages (`load.trace.format: sagemaker-capture`),
    /// sent as they are in place of `history` and `prompt` (chat only; the spec refuses the
    /// format on other APIs).
    pub messages: Option<std::sync::Arc<Vec<Value>>>,
    /// Ask for the server's per-request speculative counts on the OpenAI APIs: SGLang's
    /// `return_spec_tokens_details` (protocol.py `CompletionRequest`/`ChatCompletionRequest`),
    /// answered by a `choices: []` chunk whose `sglext.spec_tokens_details` carries
    /// `spec_verify_ct`. Set only for servers that speak SGLang's API (vLLM's request models
    /// allow and ignore extra fields, llama.cpp ignores them too, but nothing is sent that
    /// an engine does not define). Native `/generate` gives the counts unasked.
    pub spec_tokens_details: bool,
    /// The thinking markers of the reasoning parser the server was launched with, for the
    /// text APIs (`/generate`, `/v1/completions`), where the server does not split thinking
    /// from the answer; None for chat (thinking has fields of its own) and without a parser.
    pub reasoning_markers: Option<servebench_model::spec::reasoning::ThinkMarkers>,
    /// The chat request's `chat_template_kwargs` (empty: not sent; chat only).
    pub chat_template_kwargs: serde_json::Map<String, Value>,
    /// The chat request's `tools` (OpenAI function tools; None: not sent; chat only), shared
    /// by every request of a point; the parser checks streamed calls against them.
    pub tools: Option<std::sync::Arc<Vec<Value>>>,
    /// The chat request's `tool_choice` (None: the server's default).
    pub tool_choice: Option<Value>,
    /// Headers sent beside servebench's own (a session's affinity headers,
    /// `load.session_headers`): names and values are checked as they are made, so nothing
    /// here can fail on the wire.
    pub headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ChatMessage {
    /// `user`, `assistant`, or a role a replayed file gives (`system`, `tool`, ...).
    pub role: &'static str,
    pub content: String,
}

/// `stream_options` of OpenAI bodies: a final usage chunk, and usage on every chunk.
const STREAM_OPTIONS: StreamOptions = StreamOptions {
    include_usage: true,
    continuous_usage_stats: true,
};

#[derive(serde::Serialize)]
struct StreamOptions {
    include_usage: bool,
    continuous_usage_stats: bool,
}

/// The path an API posts to.
pub(crate) fn path(api: Api) -> &'static str {
    match api {
        Api::SglangGenerate => "/generate",
        Api::OpenaiCompletions => "/v1/completions",
        Api::OpenaiChat => "/v1/chat/completions",
    }
}

/// The streaming request body for `req`.
pub(crate) fn body(req: &GenerationRequest) -> Value {
    let mut body = plain_body(req);
    if req.spec_tokens_details && req.api != Api::SglangGenerate {
        body["return_spec_tokens_details"] = true.into();
    }
    if req.api == Api::OpenaiChat && !req.chat_template_kwargs.is_empty() {
        body["chat_template_kwargs"] = Value::Object(req.chat_template_kwargs.clone());
    }
    if req.api == Api::OpenaiChat {
        if let Some(tools) = &req.tools {
            body["tools"] = Value::Array(tools.as_ref().clone());
        }
        if let Some(choice) = &req.tool_choice {
            body["tool_choice"] = choice.clone();
        }
    }
    body
}

fn plain_body(req: &GenerationRequest) -> Value {
    let model = req.model.as_deref().unwrap_or(DEFAULT_MODEL);
    match req.api {
        Api::SglangGenerate => json!({
            "text": req.prompt,
            "sampling_params": {
                "max_new_tokens": req.max_tokens,
                "ignore_eos": req.ignore_eos,
                "temperature": req.temperature,
            },
            "stream": true,
        }),
        // `ignore_eos` is not OpenAI's, but SGLang accepts it as an extra field.
        // `continuous_usage_stats` puts usage (cumulative `completion_tokens`) on every chunk,
        // so each chunk's token count is the server's: SGLang honours it alone, vLLM only
        // with `include_usage`, llama.cpp ignores both extras (it counts one event per token).
        Api::OpenaiCompletions => json!({
            "model": model,
            "prompt": req.prompt,
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "stream": true,
            "stream_options": STREAM_OPTIONS,
            "ignore_eos": req.ignore_eos,
        }),
        Api::OpenaiChat => json!({
            "model": model,
            "messages": match &req.messages {
                Some(literal) => Value::Array(literal.as_ref().clone()),
                None => json!(req.history.iter().chain(std::iter::once(&ChatMessage {
                    role: req.prompt_role,
                    content: req.prompt.clone(),
                })).collect::<Vec<_>>()),
            },
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "stream": true,
            "stream_options": STREAM_OPTIONS,
            "ignore_eos": req.ignore_eos,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(api: Api) -> GenerationRequest {
        GenerationRequest {
            api,
            prompt: "hi".into(),
            max_tokens: 3,
            ignore_eos: true,
            temperature: 0.0,
            model: None,
            history: Vec::new(),
            prompt_role: "user",
            messages: None,
            spec_tokens_details: false,
            reasoning_markers: None,
            chat_template_kwargs: Default::default(),
            tools: None,
            tool_choice: None,
            headers: Vec::new(),
        }
    }

    #[test]
    fn spec_tokens_details_are_asked_for_on_openai_apis_only_when_set() {
        for api in [Api::OpenaiCompletions, Api::OpenaiChat] {
            assert!(body(&req(api)).get("return_spec_tokens_details").is_none());
            let asked = GenerationRequest {
                spec_tokens_details: true,
                ..req(api)
            };
            assert_eq!(body(&asked)["return_spec_tokens_details"], true);
        }
        // `/generate` gives `spec_verify_ct` in meta_info unasked; its body stays as it is.
        let native = GenerationRequest {
            spec_tokens_details: true,
            ..req(Api::SglangGenerate)
        };
        assert_eq!(body(&native), body(&req(Api::SglangGenerate)));
    }

    #[test]
    fn native_body() {
        assert_eq!(
            body(&req(Api::SglangGenerate)),
            json!({"text":"hi","sampling_params":{"max_new_tokens":3,"ignore_eos":true,"temperature":0.0},"stream":true})
        );
    }

    #[test]
    fn chat_body_has_messages_and_usage() {
        let b = body(&req(Api::OpenaiChat));
        assert_eq!(b["messages"], json!([{"role":"user","content":"hi"}]));
        assert_eq!(b["model"], "default");
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["stream_options"]["continuous_usage_stats"], true);
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(path(Api::OpenaiChat), "/v1/chat/completions");
    }

    #[test]
    fn a_replayed_round_ends_with_its_own_role() {
        let round = GenerationRequest {
            history: vec![ChatMessage {
                role: "system",
                content: "sys".into(),
            }],
            prompt_role: "tool",
            ..req(Api::OpenaiChat)
        };
        assert_eq!(
            body(&round)["messages"],
            json!([{"role":"system","content":"sys"},{"role":"tool","content":"hi"}])
        );
    }

    #[test]
    fn literal_messages_are_sent_as_they_are_in_place_of_the_prompt() {
        let captured = json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "42"}
        ]);
        let literal = GenerationRequest {
            messages: Some(std::sync::Arc::new(captured.as_array().unwrap().clone())),
            history: vec![ChatMessage {
                role: "user",
                content: "not sent".into(),
            }],
            ..req(Api::OpenaiChat)
        };
        let b = body(&literal);
        assert_eq!(b["messages"], captured);
        assert_eq!(b["max_tokens"], 3);
    }

    #[test]
    fn tools_and_tool_choice_go_in_chat_bodies_only() {
        let tools = std::sync::Arc::new(vec![json!({"type": "function",
            "function": {"name": "f", "parameters": {"type": "object"}}})]);
        let with = |api| GenerationRequest {
            tools: Some(tools.clone()),
            tool_choice: Some(json!("required")),
            ..req(api)
        };
        let b = body(&with(Api::OpenaiChat));
        assert_eq!(b["tools"][0]["function"]["name"], "f");
        assert_eq!(b["tool_choice"], "required");
        let b = body(&with(Api::OpenaiCompletions));
        assert!(b.get("tools").is_none() && b.get("tool_choice").is_none());
    }
}
