//! A generation request's way through a prefill or decode worker (`sim::disagg`): after
//! SGLang's checks, the prefill side waits in its bootstrap queue for the decode side's
//! handshake, prefills one token and moves the KV; the decode side fetches the prefill's
//! layout, waits for the room's KV and continues. Every handler (`/generate`, the OpenAI
//! endpoints) reads the same stream of outputs; a failure is its final output, aborted with
//! SGLang's words and status.

use super::{AppState, Rejected};
use crate::disagg::peer::Fetched;
use crate::disagg::{self, BootstrapFields, Handoff, Mode};
use crate::types::{Disagg, Finish, GenRequest, Output, ReqOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Validates a tokenized request as SGLang's tokenizer manager does and starts it: on a
/// prefill or decode worker through its PD queues, otherwise straight to the scheduler.
pub(crate) fn submit(
    st: &AppState,
    rid: Option<String>,
    input_ids: Vec<u32>,
    max_new_tokens: Option<i64>,
    received: Instant,
    bootstrap: BootstrapFields,
) -> Result<(Arc<str>, mpsc::UnboundedReceiver<Output>), Rejected> {
    let max_new = st.validate(&input_ids, max_new_tokens)?;
    if st.cfg.disagg.mode == Mode::Null {
        return st.enqueue(rid, input_ids, max_new, received, ReqOptions::default());
    }
    let rid: Arc<str> = rid
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
        .into();
    let rx = start(st, rid.clone(), input_ids, max_new, received, bootstrap);
    Ok((rid, rx))
}

/// Resolves once the server is closing.
async fn closing(st: &AppState) {
    let mut rx = st.pd.closing.subscribe();
    let _ = rx.wait_for(|c| *c).await;
}

/// An output that ends the request with SGLang's abort (`FINISH_ABORT`).
fn abort(prompt_tokens: u64, message: String, status: u16) -> Output {
    Output {
        new_ids: Vec::new(),
        completion_tokens: 0,
        prompt_tokens,
        cached_tokens: 0,
        finish: Some(Finish::Abort(message, status)),
        spec: None,
        slot: None,
        timings: None,
    }
}

/// Starts a validated request on a prefill or decode worker; the receiver gets its outputs.
fn start(
    st: &AppState,
    rid: Arc<str>,
    input_ids: Vec<u32>,
    max_new_tokens: u64,
    received: Instant,
    fields: BootstrapFields,
) -> mpsc::UnboundedReceiver<Output> {
    let (events, rx) = mpsc::unbounded_channel();
    let pd = &st.cfg.disagg;
    let prompt = input_ids.len() as u64;
    let mut g = GenRequest {
        rid: rid.clone(),
        input_ids,
        max_new_tokens,
        received,
        events,
        opts: ReqOptions::default(),
        disagg: None,
    };
    // scheduler.py: a PD request needs a room unless the backend moves nothing anyway.
    if fields.room.is_none() && pd.backend != "fake" {
        let _ = g
            .events
            .send(abort(prompt, disagg::no_room_message(&rid), 400));
        st.cfg.log.info(&disagg::no_room_message(&rid));
        return rx;
    }
    // The prefill side computes one token (prefill.py `_process_req`).
    if pd.mode == Mode::Prefill {
        g.max_new_tokens = 1;
    }
    // Under the fake backend every receiver is SGLang's FakeKVReceiver (only a decode worker
    // may run it); otherwise a fake host or no host under it moves nothing.
    let fake = pd.backend == "fake" || pd.is_fake(fields.host.as_deref());
    let room = match fields.room {
        Some(r) if !fake => r,
        _ => {
            if pd.mode == Mode::Decode {
                g.disagg = Some(Disagg::Decode(Handoff::fake()));
            }
            let _ = st.send(g);
            return rx;
        }
    };
    match pd.mode {
        Mode::Prefill => {
            tokio::spawn(prefill(st.clone(), g, room));
        }
        Mode::Decode => {
            tokio::spawn(decode(st.clone(), g, room, fields));
        }
        Mode::Null => {
            let _ = st.send(g);
        }
    }
    rx
}

/// Adds `delta` to one of the PD queue gauges.
fn gauge(st: &AppState, pick: fn(&mut crate::metrics::PdStats) -> &mut u64, delta: i64) {
    if let Ok(mut s) = st.shared.stats.lock() {
        let v = pick(&mut s.pd);
        *v = v.saturating_add_signed(delta);
    }
}

fn observe(st: &AppState, f: impl FnOnce(&mut crate::metrics::PdStats)) {
    if let Ok(mut s) = st.shared.stats.lock() {
        f(&mut s.pd);
    }
}

/// A prefill request with a room: the bootstrap queue, then the scheduler (prefill and
/// transfer), then the handoff to the decode side.
async fn prefill(st: AppState, mut g: GenRequest, room: u64) {
    let entered = Instant::now();
    let prompt = g.input_ids.len() as u64;
    let rid = g.rid.clone();
    let fail = |g: &GenRequest, message: String| {
        st.cfg.log.info(&message);
        let _ = g.events.send(abort(prompt, message, 500));
    };
    let handshake = match st.pd.rooms.prefill(room) {
        Ok(rx) => rx,
        Err(_) => {
            let m = disagg::bootstrap_failed_message(
                &rid,
                room,
                "Duplicate or cancelled bootstrap room",
            );
            fail(&g, m);
            return;
        }
    };
    gauge(&st, |p| &mut p.bootstrap_queue, 1);
    let timeout = st.cfg.disagg.bootstrap_timeout;
    let outcome = tokio::select! {
        r = tokio::time::timeout(timeout, handshake) => Some(r),
        _ = g.events.closed() => None,
        _ = closing(&st) => None,
    };
    gauge(&st, |p| &mut p.bootstrap_queue, -1);
    match outcome {
        Some(Ok(Ok(()))) => {}
        Some(Err(_)) => {
            st.pd.rooms.abandon_prefill(room);
            observe(&st, |p| p.bootstrap_failed += 1);
            fail(
                &g,
                disagg::bootstrap_timeout_message(&rid, room, entered.elapsed()),
            );
            return;
        }
        // The client went away (or the room closed): nothing to prefill.
        _ => {
            st.pd.rooms.abandon_prefill(room);
            return;
        }
    }
    let waited = entered.elapsed().as_secs_f64();
    observe(&st, |p| {
        p.stage("prefill_bootstrap", waited);
        p.bootstrap_ms.observe(waited * 1e3);
        p.alloc_ms.observe(0.0);
    });
    let (tx, done) = oneshot::channel();
    g.disagg = Some(Disagg::Prefill(tx));
    if st.send(g).is_err() {
        st.pd.rooms.abandon_prefill(room);
        return;
    }
    match done.await {
        Ok(h) => {
            st.pd.rooms.complete(room, h);
        }
        Err(_) => st.pd.rooms.abandon_prefill(room),
    }
}

/// Attempts at the prefill's layout, one a second (decode.py `_max_ensure_retries`,
/// `_ensure_retry_interval`).
const HANDSHAKE_ATTEMPTS: u32 = 15;
const HANDSHAKE_RETRY: Duration = Duration::from_secs(1);

/// A decode request with a room: the prealloc queue (the prefill's layout), the transfer
/// queue (the room's KV), then the scheduler.
async fn decode(st: AppState, mut g: GenRequest, room: u64, fields: BootstrapFields) {
    let entered = Instant::now();
    let prompt = g.input_ids.len() as u64;
    let rid = g.rid.clone();
    let host = fields.host.unwrap_or_default();
    let port = fields.port.unwrap_or(st.cfg.disagg.bootstrap_port);
    let addr = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let fail = |g: &GenRequest, message: String| {
        st.cfg.log.info(&message);
        let _ = g.events.send(abort(prompt, message, 500));
    };
    observe(&st, |p| {
        p.stage("decode_prepare", entered.elapsed().as_secs_f64())
    });
    gauge(&st, |p| &mut p.prealloc_queue, 1);
    let mut info = None;
    for attempt in 1..=HANDSHAKE_ATTEMPTS {
        match st.pd.peers.info(&addr).await {
            Ok(i) => {
                info = Some(i);
                break;
            }
            Err(e) => {
                st.cfg.log.info(&format!(
                    "Error fetching prefill server info from bootstrap: {e}"
                ));
            }
        }
        if attempt == HANDSHAKE_ATTEMPTS {
            st.cfg.log.info(&format!(
                "Could not fetch prefill parallel info from {addr} after {attempt} attempts"
            ));
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(HANDSHAKE_RETRY) => {}
            _ = g.events.closed() => break,
            _ = closing(&st) => return,
        }
    }
    gauge(&st, |p| &mut p.prealloc_queue, -1);
    if g.events.is_closed() {
        return;
    }
    let Some(info) = info else {
        observe(&st, |p| p.bootstrap_failed += 1);
        fail(&g, disagg::handshake_failed_message(&rid, room));
        return;
    };
    // try_ensure_parallel_info's sanity checks raise inside the decode scheduler: it dies.
    if let Some(m) = mismatch(&st, &info) {
        st.cfg
            .log
            .info("Scheduler hit an exception: Traceback (most recent call last):");
        st.cfg.log.raw(&format!("RuntimeError: {m}"));
        st.cfg
            .log
            .info("Received sigquit from a child process. It usually means the child failed.");
        st.shared.crash(format!("decode scheduler: {m}"));
        return;
    }
    let shook = entered.elapsed().as_secs_f64();
    observe(&st, |p| {
        p.stage("decode_bootstrap", shook);
        p.bootstrap_ms.observe(shook * 1e3);
        p.alloc_ms.observe(0.0);
    });
    gauge(&st, |p| &mut p.transfer_queue, 1);
    let waiting = Instant::now();
    let outcome = tokio::select! {
        r = tokio::time::timeout(st.cfg.disagg.waiting_timeout, disagg::peer::fetch_kv(&info.rank, room)) => Some(r),
        _ = g.events.closed() => None,
        _ = closing(&st) => None,
    };
    gauge(&st, |p| &mut p.transfer_queue, -1);
    let failed = |st: &AppState| observe(st, |p| p.transfer_failed += 1);
    match outcome {
        Some(Ok(Fetched::Kv(h))) => {
            observe(&st, |p| {
                p.stage("decode_transferred", waiting.elapsed().as_secs_f64())
            });
            g.disagg = Some(Disagg::Decode(h));
            let _ = st.send(g);
        }
        Some(Ok(Fetched::Failed(reason))) => {
            failed(&st);
            fail(
                &g,
                disagg::transfer_failed_message(&rid, Some(room), &reason),
            );
        }
        Some(Ok(Fetched::Lost(_))) => {
            failed(&st);
            let reason = disagg::prefill_down_reason(&addr, room);
            fail(
                &g,
                disagg::transfer_failed_message(&rid, Some(room), &reason),
            );
        }
        Some(Err(_)) => {
            failed(&st);
            fail(
                &g,
                disagg::waiting_timeout_message(&rid, room, waiting.elapsed()),
            );
        }
        None => {}
    }
}

/// The layout differences SGLang's decode side refuses (common/conn.py
/// `try_ensure_parallel_info`), in its words.
fn mismatch(st: &AppState, info: &disagg::peer::PrefillInfo) -> Option<String> {
    let mine = &st.cfg.disagg;
    if let Some(p) = info.page_size
        && p != mine.page_size
    {
        return Some(format!(
            "Page size mismatch: prefill server has page_size={p}, but decode server has page_size={}. Both servers must use the same --page-size value.",
            mine.page_size
        ));
    }
    if let Some(d) = &info.kv_cache_dtype
        && *d != mine.kv_cache_dtype
    {
        return Some(format!(
            "KV cache dtype mismatch: prefill server has kv_cache_dtype={d}, but decode server has kv_cache_dtype={}. Both servers must use the same --kv-cache-dtype value.",
            mine.kv_cache_dtype
        ));
    }
    None
}
