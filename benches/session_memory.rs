//! What live agent sessions hold in memory between turns: `SESSIONS` sessions (1,000), each a
//! main agent whose context has grown to `CONTEXT` tokens (128k) and two subagents that began
//! from its first 2k tokens (the system prompt) and added 8k of their own, in 64-token blocks,
//! each agent's prompt made as the `agentic` load makes it (`PromptBuilder`, salted per
//! session: a trace's ids are local to its session, so sessions share no text; a session's
//! agents share its blocks' texts, `BlockStore`) and its last prompt as sent kept as the
//! load's history check keeps it (references to those texts). Two turns per main agent, so
//! that what a session keeps from one turn to the next is in the count.
//!
//! Printed: the resident bytes (`/proc/self/statm`) before and after the sessions are made, per
//! session, and beside them the prompt bytes the sessions' agents send per turn (their
//! contexts' text): memory that grows with sessions x context shows as a ratio near or above
//! one, memory that grows with unique blocks as the unique blocks' share.
//!
//! Run: `cargo bench --bench session_memory` (`SESSION_MEMORY_BENCH="100 32768"` for other
//! sessions and context tokens). The load average is printed beside it.

use std::time::Instant;

use std::sync::{Arc, Mutex};

use servebench::prompt::blocks::{BlockLedger, BlockText, PromptBuilder, mix};
use servebench::prompt::pieces::{BlockStore, Prompt};

const BLOCK: u32 = 64;
/// Blocks every agent of a session begins with (2k tokens).
const SYSTEM: usize = 32;
const SUBAGENTS: u64 = 2;
/// Blocks a subagent adds after the system prompt (8k tokens).
const SUB_BLOCKS: u64 = 128;

/// One session: each agent's prompt builder and its last prompt as sent.
struct Session {
    agents: Vec<PromptBuilder>,
    sent: Vec<Prompt>,
    ledger: BlockLedger,
}

/// Resident bytes of this process.
fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn session(s: u64, blocks: usize) -> (Session, u64) {
    let text = BlockText {
        chars_per_block: 256,
        block_size: BLOCK,
        salt: mix(36, s),
        words: None,
    };
    let mut out = Session {
        agents: Vec::new(),
        sent: Vec::new(),
        ledger: BlockLedger::default(),
    };
    let main: Vec<u64> = (0..blocks as u64).collect();
    let mut chains: Vec<Vec<u64>> = vec![main.clone()];
    for k in 0..SUBAGENTS {
        let mut ids = main[..SYSTEM.min(blocks)].to_vec();
        ids.extend((0..SUB_BLOCKS).map(|b| 1 << 40 | k << 20 | b));
        chains.push(ids);
    }
    let mut bytes = 0u64;
    // The session's agents share its blocks' texts.
    let store: Arc<Mutex<BlockStore>> = Arc::default();
    for (a, ids) in chains.iter().enumerate() {
        let mut builder = PromptBuilder::sharing(store.clone());
        // The main agent's turn before its last: its history without the last 8 blocks.
        let turns: &[usize] = if a == 0 {
            &[ids.len().saturating_sub(8), ids.len()]
        } else {
            &[ids.len()]
        };
        let mut shared = 0;
        for &n in turns {
            builder.turn_after(&text, &ids[..n], shared, None, &mut out.ledger, 0);
            shared = n;
        }
        // The load keeps the last prompt as sent, for the next turn's history check: its
        // blocks' shared texts.
        let made = builder.prompt().clone();
        bytes += made.len() as u64;
        out.sent.push(made);
        out.agents.push(builder);
    }
    (out, bytes)
}

fn main() {
    let arg = std::env::var("SESSION_MEMORY_BENCH").unwrap_or_default();
    let mut parts = arg.split_whitespace().map(|s| s.parse::<usize>().ok());
    let sessions = parts.next().flatten().unwrap_or(1_000);
    let context = parts.next().flatten().unwrap_or(131_072);
    let blocks = context / BLOCK as usize;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let before = resident();
    let started = Instant::now();
    let mut live = Vec::with_capacity(sessions);
    let mut sent = 0u64;
    for s in 0..sessions {
        let (session, bytes) = session(s as u64, blocks);
        sent += bytes;
        live.push(session);
    }
    let held = resident().saturating_sub(before);
    std::hint::black_box(&live);
    println!(
        "{sessions} sessions at {context} tokens ({BLOCK}-token blocks, {SUBAGENTS} subagents each), made in {:.1} s; load average {}",
        started.elapsed().as_secs_f64(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "resident: {:.0} MiB held by the sessions ({:.0} MiB before them), {:.0} KiB per session",
        mb(held),
        mb(before),
        held as f64 / 1024.0 / sessions.max(1) as f64
    );
    println!(
        "prompt text the agents send per turn: {:.0} MiB; held / sent = {:.2}",
        mb(sent),
        held as f64 / sent.max(1) as f64
    );
}
