//! Tool calls on vLLM's and llama.cpp's surfaces: each engine's flags, refusals and the
//! shape of its streamed `delta.tool_calls` (SGLang's are covered by `tests/tools.rs` at the
//! root, end to end).

use serde_json::{Value, json};

use crate::engines::{jsons, llamacpp, post, sglang, spawn, stream, vllm};

/// Two tools; `g`'s schema asks for a city and a unit.
fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "g", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"]}}}
    ])
}

fn chat(choice: Value, max_tokens: u64) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "weather?"}],
           "max_tokens": max_tokens, "stream": true, "tools": tools(), "tool_choice": choice})
}

/// The streamed chunks' first choice deltas, and the last chunk with a finish reason.
fn deltas(chunks: &[Value]) -> (Vec<Value>, Value) {
    let choices: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].as_array()?.first())
        .collect();
    let finish = choices
        .iter()
        .rev()
        .find(|c| !c["finish_reason"].is_null())
        .map(|c| c["finish_reason"].clone())
        .unwrap_or_default();
    (choices.iter().map(|c| c["delta"].clone()).collect(), finish)
}

/// The `tool_calls` entries of the deltas, in order.
fn calls(deltas: &[Value]) -> Vec<Value> {
    deltas
        .iter()
        .filter_map(|d| d["tool_calls"].as_array())
        .map(|c| c[0].clone())
        .collect()
}

fn arguments(calls: &[Value]) -> Value {
    let joined: String = calls
        .iter()
        .filter_map(|c| c["function"]["arguments"].as_str())
        .collect();
    serde_json::from_str(&joined).unwrap_or_else(|e| panic!("{joined:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_vllm_streams_tool_calls_in_vllms_shape_after_its_thinking() {
    let _turn = crate::common::exclusive();
    let s = vllm(
        &[
            "m",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "hermes",
            "--reasoning-parser",
            "qwen3",
            "--sim-thinking-tokens",
            "3",
        ],
        &[],
    );
    let (status, ev) = stream(
        &s.base,
        "/v1/chat/completions",
        &chat(json!("required"), 20),
    )
    .await;
    assert_eq!(status, 200, "{ev:?}");
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let (d, finish) = deltas(&jsons(&ev));
    assert_eq!(d[0], json!({"role": "assistant", "content": ""}));
    // The parser's thinking first, in its own field; then the call.
    assert!(d[1]["reasoning"].is_string(), "{d:?}");
    let c = calls(&d);
    let first = serde_json::to_string(&c[0]).unwrap();
    assert!(
        first.starts_with(r#"{"id":"chatcmpl-tool-"#)
            && first.ends_with(r#""type":"function","index":0,"function":{"name":"f"}}"#),
        "{first}"
    );
    assert_eq!(c[1], json!({"index": 0, "function": {"arguments": "{}"}}));
    assert_eq!(arguments(&c), json!({}));
    // The model never stops (servebench's requests ignore EOS): `tool_calls` is vLLM's
    // finish reason only for a call that ended with a stop.
    assert_eq!(finish, "length");
    // A named choice calls that function, its arguments from its schema.
    let named = json!({"type": "function", "function": {"name": "g"}});
    let (_, ev) = stream(&s.base, "/v1/chat/completions", &chat(named, 20)).await;
    let c = calls(&deltas(&jsons(&ev)).0);
    assert_eq!(c[0]["function"], json!({"name": "g"}));
    assert_eq!(arguments(&c), json!({"city": "sim", "unit": "c"}));
    assert!(c[1..].iter().all(|p| p.get("id").is_none()), "{c:?}");
    // `none`: the model answers in text.
    let (_, ev) = stream(&s.base, "/v1/chat/completions", &chat(json!("none"), 8)).await;
    let (d, _) = deltas(&jsons(&ev));
    assert!(calls(&d).is_empty(), "{d:?}");
    assert!(
        d.iter()
            .any(|x| x["content"].as_str().is_some_and(|t| !t.is_empty()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_vllm_refuses_tool_choices_without_a_tool_parser() {
    let _turn = crate::common::exclusive();
    // `--tool-call-parser` alone loads no parser: it takes `--enable-auto-tool-choice` too.
    let s = vllm(&["m", "--tool-call-parser", "hermes"], &[]);
    let url = "/v1/chat/completions";
    for (choice, message) in [
        (
            Value::Null,
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
        ),
        (
            json!("required"),
            "tool_choice=\"required\" requires --tool-call-parser to be set",
        ),
        (
            json!({"type": "function", "function": {"name": "g"}}),
            "tool_choice=function \"g\" requires --tool-call-parser to be set",
        ),
    ] {
        let mut body = chat(choice, 4);
        if body["tool_choice"].is_null() {
            body.as_object_mut().unwrap().remove("tool_choice");
        }
        let (status, v) = post(&s.base, url, &body).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["message"], message);
        assert_eq!(v["error"]["type"], "BadRequestError");
    }
    let (status, ev) = stream(&s.base, url, &chat(json!("none"), 4)).await;
    assert_eq!(status, 200, "{ev:?}");
}

#[test]
fn sim_vllm_refuses_tool_parser_flags_before_loading() {
    let _turn = crate::common::exclusive();
    let mut s = spawn(
        &[
            "--api",
            "vllm",
            "m",
            "--port",
            "0",
            "--enable-auto-tool-choice",
        ],
        &[],
    );
    assert_eq!(s.wait_exit(), Some(1));
    assert!(
        s.log()
            .contains("TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser"),
        "{}",
        s.log()
    );
    // SGLang's parser name is not vLLM's.
    let mut s = spawn(
        &[
            "--api",
            "vllm",
            "m",
            "--port",
            "0",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "qwen25",
        ],
        &[],
    );
    assert_eq!(s.wait_exit(), Some(1));
    let log = s.log();
    assert!(
        log.contains("KeyError: 'invalid tool call parser: qwen25 (chose from { deepseek_v3,")
            && log.contains(",hermes,"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_llamacpp_streams_tool_calls_with_jinja_and_refuses_them_without() {
    let _turn = crate::common::exclusive();
    let s = llamacpp(&[]);
    let url = "/v1/chat/completions";
    // llama-server reads `tool_choice` as a string: a named choice is `auto`, and the model
    // calls the first tool.
    let named = json!({"type": "function", "function": {"name": "g"}});
    let mut body = chat(named, 20);
    body["tools"] = json!([tools()[1], tools()[0]]);
    let (status, ev) = stream(&s.base, url, &body).await;
    assert_eq!(status, 200, "{ev:?}");
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let (d, finish) = deltas(&jsons(&ev));
    assert_eq!(d[0], json!({"role": "assistant", "content": null}));
    let c = calls(&d);
    let first = serde_json::to_string(&c[0]).unwrap();
    assert!(
        first.starts_with(r#"{"index":0,"id":""#)
            && first
                .contains(r#"","type":"function","function":{"name":"g","arguments":"{\"city\""#),
        "{first}"
    );
    assert_eq!(c[0]["id"].as_str().unwrap().len(), 32);
    assert_eq!(c[1]["index"], 0);
    assert!(c[1].get("id").is_none() && c[1]["function"].get("name").is_none());
    assert_eq!(arguments(&c), json!({"city": "sim", "unit": "c"}));
    assert_eq!(finish, "length");
    drop(s);

    let s = llamacpp(&["--no-jinja"]);
    let (status, v) = post(&s.base, url, &chat(json!("auto"), 4)).await;
    assert_eq!(status, 500, "{v}");
    assert_eq!(
        v,
        json!({"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}})
    );
    let mut body = chat(json!("required"), 4);
    body.as_object_mut().unwrap().remove("tools");
    let (status, v) = post(&s.base, url, &body).await;
    assert_eq!(status, 500, "{v}");
    assert_eq!(
        v["error"]["message"],
        "tool_choice param requires --jinja flag"
    );
}

/// Under `ignore_eos` the model writes on after its call, and the engines pass that text
/// through as content, a chunk a token: nothing goes silent after the call (a silent tail
/// read as one huge chunk, a decode speed of 17,000 tok/s on llama.cpp's surface).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_text_after_a_call_streams_as_content_on_every_surface() {
    let _turn = crate::common::exclusive();
    let servers = [
        (
            "vllm",
            vllm(
                &[
                    "m",
                    "--enable-auto-tool-choice",
                    "--tool-call-parser",
                    "hermes",
                ],
                &[],
            ),
        ),
        ("llama.cpp", llamacpp(&[])),
    ];
    for (engine, s) in servers {
        let mut body = chat(json!("auto"), 40);
        body["ignore_eos"] = json!(true);
        let (status, ev) = stream(&s.base, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{engine}: {ev:?}");
        let (d, _) = deltas(&jsons(&ev));
        let first_call = d.iter().position(|d| d["tool_calls"].is_array()).unwrap();
        let last_call = d.iter().rposition(|d| d["tool_calls"].is_array()).unwrap();
        let after: Vec<&Value> = d[last_call + 1..]
            .iter()
            .filter(|d| d["content"].as_str().is_some_and(|c| !c.is_empty()))
            .collect();
        let call_chunks = last_call + 1 - first_call;
        // 40 tokens: the call's pieces, then a content chunk for (nearly) each token left.
        assert!(
            call_chunks + after.len() >= 36,
            "{engine}: {call_chunks} call chunks and {} content chunks after: {d:?}",
            after.len()
        );
    }
}

/// What a stream carried, assembled: the thinking, the content, the call's name and its
/// arguments, in order.
fn assembled(d: &[Value]) -> (String, String, Option<String>, String) {
    let text = |field: &str| -> String { d.iter().filter_map(|d| d[field].as_str()).collect() };
    let c = calls(d);
    let name = c
        .iter()
        .find_map(|c| c["function"]["name"].as_str())
        .map(str::to_string);
    let args = c
        .iter()
        .filter_map(|c| c["function"]["arguments"].as_str())
        .collect();
    let thinking = text("reasoning_content") + &text("reasoning");
    (thinking, text("content"), name, args)
}

/// A non-streamed chat answers what its stream carries, on every surface, in each engine's
/// fields: the thinking (SGLang's and llama.cpp's `reasoning_content`, vLLM's `reasoning`),
/// the call (SGLang's with `index`; vLLM's `tool_calls` always a list, `content` null beside an
/// `auto` call, `finish_reason` `tool_calls`), and the text the model writes after the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sim_non_streamed_chat_answers_what_its_stream_carries_on_every_surface() {
    let _turn = crate::common::exclusive();
    let think = ["--sim-thinking-tokens", "3"];
    let servers = [
        (
            "sglang",
            sglang(
                &[
                    &[
                        "--tool-call-parser",
                        "qwen25",
                        "--reasoning-parser",
                        "qwen3",
                    ][..],
                    &think,
                ]
                .concat(),
            ),
        ),
        (
            "vllm",
            vllm(
                &[
                    &[
                        "m",
                        "--enable-auto-tool-choice",
                        "--tool-call-parser",
                        "hermes",
                    ][..],
                    &["--reasoning-parser", "qwen3"],
                    &think,
                ]
                .concat(),
                &[],
            ),
        ),
        (
            "llama.cpp",
            llamacpp(&[&["--reasoning-format", "deepseek"][..], &think].concat()),
        ),
    ];
    for (engine, s) in servers {
        let mut body = chat(json!("auto"), 30);
        body["ignore_eos"] = json!(true);
        let (status, ev) = stream(&s.base, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{engine}: {ev:?}");
        let (d, _) = deltas(&jsons(&ev));
        let (thinking, content, name, args) = assembled(&d);
        body["stream"] = json!(false);
        let (status, whole) = post(&s.base, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{engine}: {whole}");
        let choice = &whole["choices"][0];
        let m = &choice["message"];
        let call = &m["tool_calls"][0];
        assert_eq!(
            m["tool_calls"].as_array().map(Vec::len),
            Some(1),
            "{engine}: {m}"
        );
        assert_eq!(call["type"], "function", "{engine}: {m}");
        assert_eq!(
            call["function"]["name"].as_str(),
            name.as_deref(),
            "{engine}: {m}"
        );
        assert_eq!(
            call["function"]["arguments"],
            args.as_str(),
            "{engine}: {m}"
        );
        let parsed: Value = serde_json::from_str(&args).unwrap();
        assert_eq!(
            parsed,
            json!({}),
            "{engine}: the first tool takes nothing: {args}"
        );
        assert!(
            call["id"].as_str().is_some_and(|i| !i.is_empty()),
            "{engine}: {m}"
        );
        let field = if engine == "vllm" {
            "reasoning"
        } else {
            "reasoning_content"
        };
        assert_eq!(m[field].as_str(), Some(thinking.as_str()), "{engine}: {m}");
        assert!(
            !thinking.is_empty(),
            "{engine}: three thinking tokens streamed"
        );
        assert!(
            !content.is_empty(),
            "{engine}: the model wrote on after its call"
        );
        assert_eq!(
            m["content"].as_str(),
            Some(content.as_str()),
            "{engine}: {m}"
        );
        assert_eq!(whole["usage"]["completion_tokens"], 30, "{engine}: {whole}");
        match engine {
            "sglang" => assert_eq!(call["index"], 0, "{m}"),
            "vllm" => assert_eq!(choice["finish_reason"], "tool_calls", "{choice}"),
            _ => assert_eq!(choice["finish_reason"], "length", "{choice}"),
        }
    }
    // vLLM's message always lists its calls, none without tools.
    let s = vllm(&["m"], &[]);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                      "max_tokens": 4});
    let (status, whole) = post(&s.base, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200, "{whole}");
    assert_eq!(
        whole["choices"][0]["message"]["tool_calls"],
        json!([]),
        "{whole}"
    );
}
