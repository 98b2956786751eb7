//! Session affinity (`load.session_headers`): every turn of a session carries its session's id
//! in the headers a router hashes (AIPerf's `X-Correlation-ID`, `X-SMG-Routing-Key`,
//! `X-Dynamo-Session-ID` by default), each subagent its own id and its parent's, and each
//! record keeps the ids it carried. Checked on the wire by a proxy in front of the simulator
//! that keeps every request head servebench wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use crate::common::*;

/// Each request head the client wrote through the proxy: its request line and its headers
/// (names lowercased).
type Heads = Arc<Mutex<Vec<(String, BTreeMap<String, String>)>>>;

/// A proxy on a free port that forwards every connection to `upstream` and keeps the head
/// of each request written on it.
fn head_proxy(upstream: u16) -> (u16, Heads) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads: Heads = Arc::default();
    let kept = heads.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut client) = conn else { break };
            let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (mut back_to, mut back_from) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut back_from, &mut back_to);
                let _ = back_to.shutdown(Shutdown::Both);
            });
            let kept = kept.clone();
            std::thread::spawn(move || {
                let (mut buf, mut chunk) = (Vec::new(), vec![0u8; 1 << 16]);
                loop {
                    let n = match client.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    if server.write_all(&chunk[..n]).is_err() {
                        break;
                    }
                    // Whole requests off the front: a head, then its body.
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let text = String::from_utf8_lossy(&buf[..end]).to_string();
                        let mut lines = text.split("\r\n");
                        let line = lines.next().unwrap_or_default().to_string();
                        let headers: BTreeMap<String, String> = lines
                            .filter_map(|l| l.split_once(':'))
                            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                            .collect();
                        let len: usize = headers
                            .get("content-length")
                            .and_then(|l| l.parse().ok())
                            .unwrap_or(0);
                        if buf.len() < end + 4 + len {
                            break;
                        }
                        buf.drain(..end + 4 + len);
                        kept.lock().unwrap().push((line, headers));
                    }
                }
                let _ = server.shutdown(Shutdown::Write);
            });
        }
    });
    (port, heads)
}

/// Runs `load` (a `load:` block's body) against the simulator through the proxy: the
/// generation requests' heads and the run's records.
fn run_through_proxy(load: &str) -> (Vec<BTreeMap<String, String>>, Vec<serde_json::Value>) {
    let ws = Workspace::new();
    let sim = ExternalSim::start("m", &[], &[]);
    let (port, heads) = head_proxy(sim.port);
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/data");
    let spec = ws.write(
        "affinity.yaml",
        &format!(
            "name: affinity\nserver:\n  url: http://127.0.0.1:{port}\n  ready_timeout: 10s\nworkload:\n  api: sglang-generate\n  prompt: {{ kind: random, tokens: 64 }}\n  output_tokens: 4\nload:\n{}\n",
            load.replace("DATA", &data.display().to_string())
        ),
    );
    let out = ws.run(&spec);
    assert!(out.status.success(), "{}", show(&out));
    let records = read_jsonl(&run_dir(&out).join("requests.jsonl"));
    let heads = heads
        .lock()
        .unwrap()
        .iter()
        .filter(|(line, _)| line.starts_with("POST /generate"))
        .map(|(_, h)| h.clone())
        .collect();
    (heads, records)
}

/// The ids a head carried in `names`, which must all agree (None: none of them there).
fn carried(h: &BTreeMap<String, String>, names: &[&str]) -> Option<String> {
    let values: BTreeSet<Option<&String>> = names.iter().map(|n| h.get(*n)).collect();
    assert_eq!(values.len(), 1, "the headers disagree: {h:?}");
    values.into_iter().next().unwrap().cloned()
}

const AIPERF: [&str; 3] = [
    "x-correlation-id",
    "x-smg-routing-key",
    "x-dynamo-session-id",
];
const PARENT: &str = "x-dynamo-parent-session-id";

#[test]
fn agent_sessions_and_their_subagents_carry_their_ids_on_every_turn() {
    // s00 spawns two subagents; s01 has none.
    let (heads, records) = run_through_proxy(
        "  kind: agentic\n  agentic: { file: DATA/agentic-sessions.jsonl, live: 2, sessions: 2, think_scale: 0 }",
    );
    let turns: Vec<&serde_json::Value> = records.iter().filter(|r| r["job"].is_object()).collect();
    assert!(turns.len() > 10, "{}", turns.len());
    // On the wire: each turn's head carries its id in all three headers; a subagent's also
    // its parent's.
    let wire: BTreeMap<(String, Option<String>), usize> = heads
        .iter()
        .filter_map(|h| Some((carried(h, &AIPERF)?, h.get(PARENT).cloned())))
        .fold(BTreeMap::new(), |mut m, k| {
            *m.entry(k).or_default() += 1;
            m
        });
    // In the records: the same ids, as many times.
    let mut recorded: BTreeMap<(String, Option<String>), usize> = BTreeMap::new();
    let mut by_session: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for r in &turns {
        let id = r["session_id"]
            .as_str()
            .expect("every turn records its id")
            .to_string();
        let parent = r["parent_session_id"].as_str().map(str::to_string);
        match r["job"]["agent"].as_str() {
            None => {
                assert!(parent.is_none(), "{r}");
                by_session
                    .entry(r["job"]["session"].as_u64().unwrap())
                    .or_default()
                    .insert(id.clone());
            }
            Some(agent) => {
                let p = parent.clone().expect("a subagent records its parent");
                assert_eq!(id, format!("{p}.{agent}"), "{r}");
            }
        }
        *recorded.entry((id, parent)).or_default() += 1;
    }
    assert_eq!(wire, recorded);
    // One id a session, on every main-agent turn; two sessions, two ids; each subagent's
    // parent is its session's id; s00's two subagents have ids of their own.
    assert_eq!(by_session.len(), 2, "{by_session:?}");
    assert!(
        by_session.values().all(|ids| ids.len() == 1),
        "{by_session:?}"
    );
    let mains: BTreeSet<&String> = by_session.values().flatten().collect();
    assert_eq!(mains.len(), 2);
    let agents: BTreeSet<&(String, Option<String>)> =
        recorded.keys().filter(|(_, p)| p.is_some()).collect();
    assert_eq!(agents.len(), 2, "{agents:?}");
    assert!(
        agents
            .iter()
            .all(|(_, p)| mains.contains(p.as_ref().unwrap()))
    );
}

#[test]
fn a_sessions_load_names_its_own_header_or_none() {
    let load = "  kind: sessions\n  sessions: { users: 3, turns: 2, think: 0s }";
    let custom = format!("{load}\n  session_headers: {{ session: [X-Conversation] }}");
    let (heads, records) = run_through_proxy(&custom);
    assert_eq!(records.len(), 6);
    let mut ids: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for r in &records {
        ids.entry(r["share"]["group"].as_u64().unwrap())
            .or_default()
            .insert(r["session_id"].as_str().unwrap().to_string());
        assert!(r.get("parent_session_id").is_none(), "{r}");
    }
    assert_eq!(ids.len(), 3);
    assert!(ids.values().all(|s| s.len() == 1), "{ids:?}");
    let on_wire: BTreeSet<String> = heads
        .iter()
        .filter_map(|h| h.get("x-conversation").cloned())
        .collect();
    let recorded: BTreeSet<String> = ids.into_values().flatten().collect();
    assert_eq!(on_wire, recorded);
    assert_eq!(
        heads
            .iter()
            .filter(|h| h.contains_key("x-conversation"))
            .count(),
        6
    );
    assert!(
        heads.iter().all(|h| !h.contains_key("x-correlation-id")),
        "{heads:?}"
    );

    let (heads, records) = run_through_proxy(&format!("{load}\n  session_headers: off"));
    assert_eq!(heads.len(), 6);
    assert!(
        heads
            .iter()
            .all(|h| !h.keys().any(|k| k.starts_with("x-") && k != "x-request-id")),
        "{heads:?}"
    );
    assert!(records.iter().all(|r| r.get("session_id").is_none()));
}
