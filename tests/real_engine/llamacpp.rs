//! servebench against the real `llama-server` (llama.cpp, built from the llama-cpp-python
//! 0.3.36 sdist), and the simulator's llama.cpp mode held to it.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use super::differential::{Check, Verdict, assert_documented, compare, refusal, start_sim};
use super::http;
use super::*;
use crate::common::*;

const FOX: &str = "The quick brown fox jumps over the lazy dog. ";

fn keys(v: &Value) -> Value {
    match v.as_object() {
        Some(o) => {
            let mut k: Vec<&String> = o.keys().collect();
            k.sort();
            json!(k)
        }
        None => Value::Null,
    }
}

fn erase(base: &str) {
    for slot in 0..2 {
        let _ = http::post(base, &format!("/slots/{slot}?action=erase"), &json!({}));
    }
}

fn lc_endpoints(base: &str) -> Value {
    let mut m = serde_json::Map::new();
    for p in [
        "/health",
        "/v1/health",
        "/props",
        "/models",
        "/v1/models",
        "/slots",
        "/metrics",
        "/server_info",
        "/get_server_info",
        "/version",
        "/flush_cache",
    ] {
        m.insert(
            p.into(),
            http::get(base, p).map_or(json!("error"), |r| json!(r.status)),
        );
    }
    Value::Object(m)
}

fn lc_health(base: &str) -> Value {
    let r = http::get(base, "/health").unwrap();
    json!({"body": r.json(), "content-type": r.header("content-type")})
}

fn lc_not_found(base: &str) -> Value {
    let r = http::get(base, "/server_info").unwrap();
    json!({"status": r.status, "body": r.json()})
}

fn lc_models(base: &str) -> Value {
    let v = http::get(base, "/v1/models").unwrap().json();
    json!({
        "keys": keys(&v),
        "data_keys": keys(&v["data"][0]),
        "id_is_alias": v["data"][0]["id"] == "tiny",
        "meta_has_n_ctx_train": v["data"][0]["meta"]["n_ctx_train"].is_u64(),
    })
}

fn lc_props(base: &str) -> Value {
    let v = http::get(base, "/props").unwrap().json();
    json!({
        "total_slots": v["total_slots"],
        "has_default_generation_settings": v["default_generation_settings"].is_object(),
        "has_chat_template": v["chat_template"].is_string(),
    })
}

fn lc_slots(base: &str) -> Value {
    let v = http::get(base, "/slots").unwrap().json();
    json!({"count": v.as_array().map(Vec::len), "ids": v.as_array().map(|a| a.iter().map(|s| s["id"].clone()).collect::<Vec<_>>()), "n_ctx": v[0]["n_ctx"]})
}

fn lc_erase(base: &str) -> Value {
    let r = http::post(base, "/slots/0?action=erase", &json!({})).unwrap();
    json!({"status": r.status, "keys": keys(&r.json()), "id_slot": r.json()["id_slot"]})
}

fn lc_stream(base: &str) -> Value {
    erase(base);
    let r = http::post(
        base,
        "/v1/completions",
        &json!({"model": "whatever", "prompt": FOX, "max_tokens": 8, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}}),
    )
    .unwrap();
    let chunks = r.chunks();
    let last = chunks.last().cloned().unwrap_or_default();
    json!({
        "status": r.status,
        "content-type": r.header("content-type"),
        "keep-alive": r.header("keep-alive"),
        "connection": r.header("connection"),
        "done": r.done(),
        "chunks_at_most_tokens_plus_one": chunks.len() <= 9,
        "model_is_alias": chunks.iter().all(|c| c["model"] == "tiny"),
        "usage_only_last": chunks[..chunks.len().saturating_sub(1)].iter().all(|c| c.get("usage").is_none()),
        "last_has_finish_reason": last["choices"][0]["finish_reason"],
        "last_keys": keys(&last),
        "usage_keys": keys(&last["usage"]),
        "timings_keys": keys(&last["timings"]),
        "completion_tokens": last["usage"]["completion_tokens"],
        "predicted_n": last["timings"]["predicted_n"],
        "cached_tokens_cold": last["usage"]["prompt_tokens_details"]["cached_tokens"],
    })
}

fn lc_chat_stream(base: &str) -> Value {
    erase(base);
    let r = http::post(
        base,
        "/v1/chat/completions",
        &json!({"model": "x", "messages": [{"role": "user", "content": FOX}], "max_tokens": 4, "ignore_eos": true, "stream": true}),
    )
    .unwrap();
    let chunks = r.chunks();
    let last = chunks.last().cloned().unwrap_or_default();
    json!({
        "status": r.status,
        "done": r.done(),
        "object": chunks.first().map(|c| c["object"].clone()),
        "first_choice_keys": chunks.first().map(|c| keys(&c["choices"][0])),
        "last_finish_reason": last["choices"][0]["finish_reason"],
        "last_has_timings": last["timings"].is_object(),
        "usage_without_include_usage": last.get("usage").is_some(),
    })
}

fn lc_repeat_cached(base: &str) -> Value {
    erase(base);
    let body = json!({"model": "x", "prompt": FOX.repeat(4), "max_tokens": 2, "ignore_eos": true});
    let a = http::post(base, "/v1/completions", &body).unwrap().json();
    let b = http::post(base, "/v1/completions", &body).unwrap().json();
    let prompt = b["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
    json!({
        "first": a["usage"]["prompt_tokens_details"]["cached_tokens"],
        "second_is_prompt_minus_one": b["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() == Some(prompt.saturating_sub(1)),
        "cache_n_matches": b["timings"]["cache_n"] == b["usage"]["prompt_tokens_details"]["cached_tokens"],
    })
}

fn lc_too_long(base: &str) -> Value {
    let r = http::post(
        base,
        "/v1/completions",
        &json!({"model": "x", "prompt": FOX.repeat(600), "max_tokens": 4}),
    )
    .unwrap();
    let v = r.json();
    json!({
        "status": r.status,
        "error_keys": keys(&v["error"]),
        "type": v["error"]["type"],
        "message_words": v["error"]["message"].as_str().map(|m| m.split_whitespace().filter(|w| !w.chars().any(|c| c.is_ascii_digit())).collect::<Vec<_>>().join(" ")),
        "n_ctx": v["error"]["n_ctx"],
    })
}

fn lc_no_prompt(base: &str) -> Value {
    let r = http::post(
        base,
        "/v1/completions",
        &json!({"model": "x", "max_tokens": 2}),
    )
    .unwrap();
    json!({"status": r.status, "type": r.json()["error"]["type"]})
}

fn lc_bad_json(base: &str) -> Value {
    let r = http::request_raw(base, "/v1/completions", b"{bad").unwrap();
    json!({"status": r.status, "type": r.json()["error"]["type"]})
}

fn lc_metrics(base: &str) -> Value {
    let r = http::get(base, "/metrics").unwrap();
    let (mut types, mut helps) = (serde_json::Map::new(), serde_json::Map::new());
    for l in r.body.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            if let (Some(n), Some(t)) = (it.next(), it.next()) {
                types.insert(n.into(), json!(t));
            }
        }
        if let Some((n, h)) = l.strip_prefix("# HELP ").and_then(|r| r.split_once(' ')) {
            helps.insert(n.into(), json!(h));
        }
    }
    json!({"content-type": r.header("content-type"), "types": types, "help": helps})
}

fn lc_tokenize(base: &str) -> Value {
    let r = http::post(base, "/tokenize", &json!({"content": "hello world"})).unwrap();
    json!({"status": r.status, "keys": keys(&r.json())})
}

/// The llama.cpp table (see `SGLANG_CHECKS` for the rules).
pub const LLAMACPP_CHECKS: &[Check] = &[
    Check {
        name: "llamacpp.endpoints",
        verdict: Verdict::Same,
        observe: lc_endpoints,
    },
    Check {
        name: "llamacpp.health",
        verdict: Verdict::Same,
        observe: lc_health,
    },
    Check {
        name: "llamacpp.not_found",
        verdict: Verdict::Same,
        observe: lc_not_found,
    },
    Check {
        name: "llamacpp.models",
        verdict: Verdict::Same,
        observe: lc_models,
    },
    Check {
        name: "llamacpp.props",
        verdict: Verdict::Same,
        observe: lc_props,
    },
    Check {
        name: "llamacpp.slots",
        verdict: Verdict::Same,
        observe: lc_slots,
    },
    Check {
        name: "llamacpp.erase",
        verdict: Verdict::Same,
        observe: lc_erase,
    },
    Check {
        name: "llamacpp.stream",
        verdict: Verdict::Same,
        observe: lc_stream,
    },
    Check {
        name: "llamacpp.chat_stream",
        verdict: Verdict::Same,
        observe: lc_chat_stream,
    },
    Check {
        name: "llamacpp.repeat_cached",
        verdict: Verdict::Same,
        observe: lc_repeat_cached,
    },
    Check {
        name: "llamacpp.too_long",
        verdict: Verdict::Same,
        observe: lc_too_long,
    },
    Check {
        name: "llamacpp.no_prompt",
        verdict: Verdict::Same,
        observe: lc_no_prompt,
    },
    Check {
        name: "llamacpp.bad_json",
        verdict: Verdict::Same,
        observe: lc_bad_json,
    },
    Check {
        name: "llamacpp.metrics",
        verdict: Verdict::Same,
        observe: lc_metrics,
    },
    Check {
        name: "llamacpp.tokenize",
        verdict: Verdict::Same,
        observe: lc_tokenize,
    },
];

/// Flag spellings llama-server refuses (its own parser), refused alike by the simulator.
const LLAMACPP_REFUSED: &[&[&str]] = &[
    &["--model-path", "x"],
    &["--no-mmap"],
    &["--mlock"],
    &["-k", "4"],
    &["--draft-min", "2"],
    &["--no-such-flag"],
];

#[test]
fn llamacpp_sim_answers_as_the_real_server_does() {
    assert_documented(LLAMACPP_CHECKS);
    let problems = with_llama(|tier, real| {
        let sim = start_sim(&[
            "--api",
            "llama.cpp",
            "-m",
            &tier.gguf().display().to_string(),
            "--ctx-size",
            "4096",
            "-np",
            "2",
            "--kv-unified",
            "--metrics",
            "--slots",
            "--slot-save-path",
            &std::env::temp_dir().display().to_string(),
            "-t",
            "2",
            "-a",
            "tiny",
            "--profile",
            "fast",
        ]);
        let mut problems = compare("llama.cpp", LLAMACPP_CHECKS, &real.base, &sim.base);
        for flags in LLAMACPP_REFUSED {
            let mut real_cmd = Command::new(tier.llama_server());
            real_cmd
                .arg("-m")
                .arg(tier.gguf())
                .args(["--port", &free_port().to_string()])
                .args(*flags);
            let mut sim_cmd = Command::new(assert_cmd::cargo::cargo_bin("servebench"));
            sim_cmd
                .args([
                    "sim",
                    "--api",
                    "llama.cpp",
                    "-m",
                    "m.gguf",
                    "--port",
                    &free_port().to_string(),
                ])
                .args(*flags);
            let (r, s) = (
                refusal(real_cmd, Duration::from_secs(20))["code"].clone(),
                refusal(sim_cmd, Duration::from_secs(20))["code"].clone(),
            );
            if r != s {
                problems.push(format!(
                    "llamacpp.refuses {flags:?}: exit real {r}, sim {s}"
                ));
            }
        }
        problems
    });
    if let Some(problems) = problems {
        assert!(
            problems.is_empty(),
            "the simulator differs from llama.cpp:\n{}",
            problems.join("\n")
        );
    }
}

/// servebench launches the real llama-server (`engine: llama.cpp`, `launcher:` the tier's
/// binary): a context sweep with the cold cache through per-slot erase, verified from the
/// server's own `cached_tokens`, `/metrics` read, the server stopped and gone.
#[test]
fn launched_llama_server_is_measured_cold_and_torn_down() {
    let Some(tier) = tier(Part::LlamaCpp) else {
        return;
    };
    let _turn = exclusive();
    let ws = Workspace::new();
    let mark = marker("llama-launch");
    let slots = ws.path().join("slots");
    std::fs::create_dir_all(&slots).unwrap();
    let spec = ws.write(
        "llama.yaml",
        &format!(
            "name: llama\nserver:\n  engine: llama.cpp\n  launcher: [{}]\n  model: {}\n  env: {{ SERVEBENCH_REAL_ENGINE_MARKER: {mark} }}\n  args:\n    -c: 4096\n    -np: 2\n    kv-unified: true\n    metrics: true\n    slot-save-path: {}\n    -t: 2\n  ready_timeout: 60s\nworkload:\n  api: openai-completions\n  prompt: {{ kind: repeat, tokens: \"{{{{ ctx }}}}\" }}\n  output_tokens: 16\ncache: {{ policy: cold, verify: true }}\nsweep: {{ ctx: [128, 512] }}\nrequests: 4\n",
            tier.llama_server().display(),
            tier.gguf().display(),
            slots.display()
        ),
    );
    let out = servebench()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(ws.path().join("runs"))
        .arg("--quiet")
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let left = live_with_marker(&mark);
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(out.status.success(), "{}", show(&out));
    let dir = run_dir(&out);
    let meta = read_json(&dir.join("meta.json"));
    let server = &meta["servers"][0];
    assert_eq!(server["stopped"], true, "{server}");
    assert_eq!(server["surface"]["metrics"], true, "{server}");
    for p in read_jsonl(&dir.join("points.jsonl")) {
        assert_eq!(p["status"], "ok", "{p}");
        // itl-per-chunk is expected: llama-server holds back a token that ends inside a UTF-8
        // character (a random model makes many), so some chunks carry two.
        let doubts: Vec<_> = validity_flags(&p)
            .into_iter()
            .filter(|f| f["kind"] != "itl-per-chunk")
            .collect();
        assert!(doubts.is_empty(), "{p}");
        assert_eq!(
            p["metrics"]["cached_tokens"]["max"], 0.0,
            "erased before each: {p}"
        );
        assert_eq!(p["metrics"]["completion_tokens"]["mean"], 16.0, "{p}");
    }
    for r in read_jsonl(&dir.join("requests.jsonl")) {
        assert_eq!(r["completion_tokens"], 16, "{r}");
    }
}
