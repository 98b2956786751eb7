//! Prefill-decode disaggregation in the simulator without a router (`sim::disagg`): one
//! `servebench sim --disaggregation-mode prefill` and one `--disaggregation-mode decode`
//! process, each request sent to both with the same `bootstrap_host`, `bootstrap_port` and
//! `bootstrap_room`, as sglang-router does; the two processes meet over real HTTP at the
//! prefill's bootstrap server. The same with the real router is
//! `real_engine::router::router_pd_one_prefill_two_decode_serves_every_request`.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;
use crate::http;

/// A simulated worker in its own process group, killed when dropped.
struct Worker {
    child: Child,
    base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Worker {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Worker {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = dir.path().join("sim.log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_servebench-sim"));
        cmd.args(["--profile", "fast", "--enable-metrics", "--port"])
            .arg(port.to_string())
            .args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = spawn_kept(cmd, &log);
        let base = format!("http://127.0.0.1:{port}");
        wait_healthy(&mut child, &base, "/health", &log, Duration::from_secs(30));
        Worker {
            child,
            base,
            log,
            _dir: dir,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The sum of a family's samples on `/metrics` (absent: 0).
    fn metric(&self, name: &str) -> f64 {
        let r = http::get(&self.base, "/metrics").expect("/metrics");
        r.body
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let pg = nix::unistd::Pid::from_raw(-(self.child.id() as i32));
        let _ = nix::sys::signal::kill(pg, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A prefill worker on a free bootstrap port, and a decode worker.
fn pair(prefill_extra: &[&str], decode_env: &[(&str, &str)]) -> (Worker, u16, Worker) {
    let bootstrap = free_port();
    let bp = bootstrap.to_string();
    let mut args = vec![
        "--disaggregation-mode",
        "prefill",
        "--disaggregation-bootstrap-port",
        &bp,
    ];
    args.extend(prefill_extra);
    let prefill = Worker::start(&args, &[]);
    let decode = Worker::start(&["--disaggregation-mode", "decode"], decode_env);
    (prefill, bootstrap, decode)
}

/// `body` with a room on the prefill's bootstrap server, as the router adds it.
fn with_room(mut body: Value, bootstrap: u16, room: u64) -> Value {
    body["bootstrap_host"] = json!("127.0.0.1");
    body["bootstrap_port"] = json!(bootstrap);
    body["bootstrap_room"] = json!(room);
    body
}

/// Sends `body` to `path` on both workers at once; (prefill's, decode's) responses.
fn both(
    prefill: &Worker,
    decode: &Worker,
    path: &str,
    body: &Value,
) -> (http::Response, http::Response) {
    std::thread::scope(|s| {
        let p = s.spawn(|| http::post(&prefill.base, path, body).expect("prefill"));
        let d = s.spawn(|| http::post(&decode.base, path, body).expect("decode"));
        (p.join().unwrap(), d.join().unwrap())
    })
}

const PROMPT: &str =
    "The quick brown fox jumps over the lazy dog, again and again, until the dog wakes up.";

/// A request sent to both workers with one room: the prefill answers one token, the decode
/// worker the whole output, starting from the prefill's token and reporting the prefill's
/// cached tokens; a repeat finds the prompt in the prefill's radix cache; streaming, the
/// OpenAI endpoints and SGLang's fake host work too; both workers' metrics say where the work
/// went and what moved; the bootstrap server answers SGLang's routes.
#[test]
fn sim_pd_prefill_and_decode_meet_by_room_as_the_router_sends_them() {
    let _turn = exclusive();
    let (prefill, bootstrap, decode) = pair(&[], &[]);
    let bs = format!("http://127.0.0.1:{bootstrap}");
    let health = http::get(&bs, "/health").unwrap();
    assert_eq!((health.status, health.body.as_str()), (200, "OK"));
    let info = http::get(
        &bs,
        "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1",
    )
    .unwrap()
    .json();
    assert_eq!(info["attn_tp_size"], 1, "{info}");
    assert_eq!(info["page_size"], 1, "{info}");
    assert_eq!(
        info["prefill_http_port"].as_u64(),
        prefill.base.rsplit(':').next().unwrap().parse::<u64>().ok()
    );
    let rank = http::get(
        &bs,
        "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0",
    )
    .unwrap()
    .json();
    assert_eq!(rank["rank_port"], bootstrap, "{rank}");
    assert_eq!(http::get(&bs, "/route").unwrap().status, 400);
    let model = http::get(&decode.base, "/model_info").unwrap().json();
    assert_eq!(model["disaggregation_mode"], "decode", "{model}");

    let body =
        json!({"text": PROMPT, "sampling_params": {"max_new_tokens": 12, "ignore_eos": true}});
    let (p, d) = both(
        &prefill,
        &decode,
        "/generate",
        &with_room(body.clone(), bootstrap, 101),
    );
    assert_eq!((p.status, d.status), (200, 200), "{}\n{}", p.body, d.body);
    let (p, d) = (p.json(), d.json());
    assert_eq!(
        p["meta_info"]["completion_tokens"], 1,
        "the prefill computes one token: {p}"
    );
    assert_eq!(d["meta_info"]["completion_tokens"], 12, "{d}");
    assert_eq!(
        d["meta_info"]["prompt_tokens"],
        p["meta_info"]["prompt_tokens"]
    );
    assert_eq!(
        d["output_ids"][0], p["output_ids"][0],
        "the decode side continues from the prefill's token: {p}\n{d}"
    );
    assert_eq!(d["meta_info"]["cached_tokens"], 0, "{d}");
    let prompt = d["meta_info"]["prompt_tokens"].as_f64().unwrap();

    // The same prompt again, streamed: the prefill's radix cache has it, the decode worker
    // reports the prefill's count, and its first chunk carries the prefill's token.
    let mut streamed = with_room(body.clone(), bootstrap, 102);
    streamed["stream"] = json!(true);
    let (p, d) = both(&prefill, &decode, "/generate", &streamed);
    assert!(p.done() && d.done(), "{}\n{}", p.body, d.body);
    let (pc, dc) = (p.chunks(), d.chunks());
    assert_eq!(
        pc.len(),
        1,
        "the prefill streams its one token at the end: {pc:?}"
    );
    let cached = pc[0]["meta_info"]["cached_tokens"].as_f64().unwrap();
    assert!(cached >= prompt - 1.0, "{pc:?}");
    assert_eq!(dc[0]["output_ids"][0], pc[0]["output_ids"][0], "{dc:?}");
    let last = dc.last().unwrap();
    assert_eq!(last["meta_info"]["completion_tokens"], 12, "{last}");
    assert_eq!(
        last["meta_info"]["cached_tokens"].as_f64(),
        Some(cached),
        "{last}"
    );

    // OpenAI's endpoints carry the fields at the top level too.
    let chat =
        json!({"model": "m", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 5});
    let (p, d) = both(
        &prefill,
        &decode,
        "/v1/chat/completions",
        &with_room(chat, bootstrap, 103),
    );
    assert_eq!(p.json()["usage"]["completion_tokens"], 1, "{}", p.body);
    assert_eq!(d.json()["usage"]["completion_tokens"], 5, "{}", d.body);

    // SGLang's fake host: the decode worker starts at once, nothing moves.
    let fake = json!({"text": "fake", "sampling_params": {"max_new_tokens": 3},
                      "bootstrap_host": "2.2.2.2", "bootstrap_room": 0});
    let r = http::post(&decode.base, "/generate", &fake).unwrap();
    assert_eq!(r.json()["meta_info"]["completion_tokens"], 3, "{}", r.body);

    // Where the work went: three prefills and three transfers of the prompt's KV on the
    // prefill worker (131072 bytes a token in the fast profile), four decodes and no
    // prefill on the decode worker.
    assert_eq!(prefill.metric("sglang:num_requests_total"), 3.0);
    assert_eq!(prefill.metric("sglang:generation_tokens_total"), 3.0);
    assert_eq!(prefill.metric("sglang:kv_transfer_latency_ms_count"), 3.0);
    assert!(prefill.metric("sglang:cached_tokens_total") >= 2.0 * (prompt - 1.0));
    let mb = prefill.metric("sglang:kv_transfer_total_mb_sum");
    let chat_prompt = mb * 8.0 - 2.0 * prompt;
    assert!(chat_prompt > 0.0 && chat_prompt.fract() == 0.0, "{mb} MB");
    assert_eq!(
        prefill.metric("sglang:per_stage_req_latency_seconds_count"),
        9.0,
        "prefill_bootstrap, prefill_forward and prefill_transfer_kv_cache for each"
    );
    assert_eq!(decode.metric("sglang:num_requests_total"), 4.0);
    assert_eq!(
        decode.metric("sglang:generation_tokens_total"),
        12.0 * 2.0 + 5.0 + 3.0
    );
    assert!(decode.metric("sglang:kv_transfer_bootstrap_ms_count") >= 3.0);
    assert_eq!(decode.metric("sglang:num_decode_transfer_queue_reqs"), 0.0);
    let metrics = http::get(&decode.base, "/metrics").unwrap().body;
    assert!(
        metrics.contains("stage=\"decode_transferred\"")
            && metrics.contains("engine_type=\"decode\""),
        "{metrics}"
    );
    assert!(
        !decode.log_text().contains("Prefill batch"),
        "{}",
        tail(&decode.log_text(), 20)
    );
    assert!(
        prefill.log_text().contains("#bootstrap-req: "),
        "{}",
        tail(&prefill.log_text(), 20)
    );
}

/// The modelled transfer: latency + prompt x 128 KiB / bandwidth, visible in the decode
/// worker's answer time and in the prefill's own figures; SGLang's refusals: a request
/// without a room (400, both roles), a room the prefill never sees (the decode side gives up
/// after `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`, 500), a bootstrap port in use (logged) or
/// equal to `--port` (exit 1), a prefill under the fake backend (exit 1); a decode worker
/// under it decodes alone.
#[test]
fn sim_pd_transfer_time_and_refusals() {
    let _turn = exclusive();
    // 250 ms latency, 1 GB/s: a 40-token prompt moves 5,242,880 bytes in 5.2 ms more.
    let (prefill, bootstrap, decode) = pair(
        &[
            "--sim-kv-transfer-latency-ms",
            "250",
            "--sim-kv-transfer-gbps",
            "1",
        ],
        &[("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "1")],
    );
    let ids: Vec<u32> = (1000..1040).collect();
    let body =
        json!({"input_ids": ids, "sampling_params": {"max_new_tokens": 2, "ignore_eos": true}});
    let t0 = Instant::now();
    let (p, d) = both(
        &prefill,
        &decode,
        "/generate",
        &with_room(body.clone(), bootstrap, 7),
    );
    let took = t0.elapsed();
    assert_eq!((p.status, d.status), (200, 200), "{}\n{}", p.body, d.body);
    let e2e = d.json()["meta_info"]["e2e_latency"].as_f64().unwrap();
    assert!(
        (0.255..0.5).contains(&e2e) && took >= Duration::from_millis(255),
        "the decode side waited for the transfer: {e2e} s ({took:?})"
    );
    let ms = prefill.metric("sglang:kv_transfer_latency_ms_sum");
    assert!(
        (255.2..256.5).contains(&ms),
        "latency 250 ms + 5242880 B / 1e9 B/s = 255.24 ms, measured {ms}"
    );
    assert_eq!(prefill.metric("sglang:kv_transfer_total_mb_sum"), 5.0);

    // No room: SGLang's scheduler refuses it on either role.
    for w in [&prefill, &decode] {
        let r = http::post(&w.base, "/generate", &body).unwrap();
        assert_eq!(r.status, 400, "{}", r.body);
        let m = r.json()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            m.starts_with("Invalid request: Disaggregated request received without bootstrap room id. req.rid='"),
            "{m}"
        );
    }

    // A room the prefill never gets: the decode side's wait ends after 1 s.
    let t0 = Instant::now();
    let r = http::post(
        &decode.base,
        "/generate",
        &with_room(body.clone(), bootstrap, 8),
    )
    .unwrap();
    assert_eq!(r.status, 500, "{}", r.body);
    let detail = r.json()["detail"].as_str().unwrap_or("").to_string();
    assert!(
        detail.starts_with("Decode transfer failed for request rank=0 decode_req.req.rid='")
            && detail.ends_with(
                "decode_req.req.bootstrap_room=8 with exception KVTransferError(bootstrap_room=8): Request 8 timed out after 1.0s in KVPoll.WaitingForInput"
            ),
        "{detail}"
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(decode.metric("sglang:num_transfer_failed_reqs_total"), 1.0);
    // Streaming, the failure is the last chunk's abort.
    let mut streamed = with_room(body.clone(), bootstrap, 9);
    streamed["stream"] = json!(true);
    let r = http::post(&decode.base, "/generate", &streamed).unwrap();
    let chunks = r.chunks();
    assert!(r.done(), "{}", r.body);
    let finish = &chunks.last().unwrap()["meta_info"]["finish_reason"];
    assert_eq!(finish["type"], "abort", "{finish}");
    assert_eq!(finish["status_code"], 500, "{finish}");

    // A decode worker under the fake backend decodes alone (SGLang's synthetic decode
    // benchmark): no room needed, nothing cached, no prefill.
    let alone = Worker::start(
        &[
            "--disaggregation-mode",
            "decode",
            "--disaggregation-transfer-backend",
            "fake",
        ],
        &[],
    );
    let r = http::post(&alone.base, "/generate", &body).unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["meta_info"]["completion_tokens"], 2, "{}", r.body);
    assert!(!alone.log_text().contains("Prefill batch"));

    // A bootstrap port in use: SGLang's bootstrap thread logs it and the worker serves on
    // without one; the HTTP port as the bootstrap port: the bootstrap server binds first and
    // uvicorn's bind fails.
    let bp = bootstrap.to_string();
    let second = Worker::start(
        &[
            "--disaggregation-mode",
            "prefill",
            "--disaggregation-bootstrap-port",
            &bp,
        ],
        &[],
    );
    let clash = format!(
        "Server error: [Errno 98] error while attempting to bind on address ('127.0.0.1', {bootstrap}): address already in use"
    );
    assert!(second.log_text().contains(&clash), "{}", second.log_text());
    let port = free_port().to_string();
    let out = servebench_sim()
        .args(["--profile", "fast", "--disaggregation-mode", "prefill"])
        .args(["--port", &port, "--disaggregation-bootstrap-port", &port])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("[Errno 98] error while attempting to bind"),
        "{}",
        show(&out)
    );

    // sglang 0.5.23 asserts a prefill does not use the fake backend (a traceback, exit 1).
    let out = servebench_sim()
        .args(["--profile", "fast", "--disaggregation-mode", "prefill"])
        .args(["--disaggregation-transfer-backend", "fake", "--port"])
        .arg(free_port().to_string())
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.trim_end().ends_with(
            "AssertionError: Prefill server does not support 'fake' as the transfer backend"
        ),
        "{stderr}"
    );
}
