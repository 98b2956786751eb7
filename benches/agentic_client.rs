//! What an agent session's turn costs the client as its context grows: `SESSIONS` live
//! sessions (256) each growing turn by turn to `CONTEXT` tokens (128k), in blocks of 64 tokens,
//! each turn making its prompt the way the `agentic` load does (`PromptBuilder`: only the
//! new blocks' text is made; the ledger of blocks sent, for the theoretical cache hit) and
//! encoding the request body as the client sends it. The sessions' turns interleave (one
//! turn of each session, then the next), as live sessions do.
//!
//! Printed per eighth of the run (by context): the median and mean nanoseconds per turn of making the
//! prompt (new blocks, ledger), of copying it into the request and encoding the body (which
//! grows with the context: every turn sends its whole history), and the latter per KB. The client's
//! own work per turn, what it could make grow (a rebuilt history, a ledger lookup that grows),
//! is the first column: it should stay flat from the first eighth to the last.
//!
//! Run small first: `AGENTIC_BENCH="16 16384" cargo bench --bench agentic_client` (sessions,
//! context tokens; a third word, `make-only`, leaves the body's copy and encoding out); the
//! defaults are 256 sessions to 131,072 tokens (about 2 GB of prompts made, about a minute).

use std::time::Instant;

use servebench::prompt::blocks::{BlockLedger, BlockText, PromptBuilder};

const BLOCK: u32 = 64;
/// New blocks a turn adds (a reply and a tool result): 1 to 8, cycling.
const GROWTH: [usize; 4] = [2, 5, 8, 1];

fn main() {
    let arg = std::env::var("AGENTIC_BENCH").unwrap_or_default();
    let mut parts = arg.split_whitespace().map(|s| s.parse::<usize>().ok());
    let sessions = parts.next().flatten().unwrap_or(256);
    let context = parts.next().flatten().unwrap_or(131_072);
    // A third word, `make-only`, leaves the copy and the encoding out: what is left is the
    // client's own work per turn, without the caches the growing bodies churn.
    let encode = arg.split_whitespace().nth(2) != Some("make-only");
    let text = BlockText {
        chars_per_block: 256,
        block_size: BLOCK,
        salt: 36,
        words: None,
    };
    let max_blocks = context / BLOCK as usize;
    let mut state: Vec<(Vec<u64>, PromptBuilder, BlockLedger, usize)> = (0..sessions)
        .map(|s| {
            let first: Vec<u64> = (0..8).map(|b| (s as u64) << 32 | b).collect();
            (
                first,
                PromptBuilder::default(),
                BlockLedger::default(),
                0usize,
            )
        })
        .collect();
    // Per eighth of the context: (turns, ns making, ns encoding, prompt bytes), and each
    // turn's ns making (for the median: the machine's noise is in the mean).
    let mut eighths = [(0u64, 0u128, 0u128, 0u64); 8];
    let mut makes: Vec<Vec<u128>> = vec![Vec::new(); 8];
    let mut turn = 0usize;
    let started = Instant::now();
    loop {
        let mut grew = false;
        for (s, (ids, builder, ledger, shared)) in state.iter_mut().enumerate() {
            if ids.len() >= max_blocks {
                continue;
            }
            grew = true;
            let t0 = Instant::now();
            // As a turn of the `agentic` load makes it: each block's tokens, then the prompt.
            // The ids before this turn's new ones are the last turn's, as the trace reader
            // finds them (`TurnTrace::shared`).
            let (made, hit) = builder.turn_after(&text, ids, *shared, None, ledger, 0);
            *shared = ids.len();
            let t1 = Instant::now();
            // The request owns its prompt: a copy, then the body, as the client sends it.
            let (prompt, body) = if encode {
                let prompt = made.render();
                let body = serde_json::to_vec(&serde_json::json!({
                    "text": prompt,
                    "sampling_params": {"max_new_tokens": 64},
                    "stream": true,
                }))
                .expect("json");
                (prompt, body)
            } else {
                (String::new(), Vec::new())
            };
            let t2 = Instant::now();
            std::hint::black_box((hit, &body));
            let k = (ids.len() * 8 / max_blocks).min(7);
            let e = &mut eighths[k];
            e.0 += 1;
            e.1 += (t1 - t0).as_nanos();
            e.2 += (t2 - t1).as_nanos();
            e.3 += prompt.len() as u64;
            makes[k].push((t1 - t0).as_nanos());
            let add = GROWTH[(turn + s) % GROWTH.len()];
            let next = ids.len() as u64;
            ids.extend((0..add as u64).map(|b| (s as u64) << 32 | (next + b)));
            ids.truncate(max_blocks);
        }
        turn += 1;
        if !grew {
            break;
        }
    }
    println!(
        "{sessions} sessions to {context} tokens ({BLOCK}-token blocks), {turn} turns each, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    println!(
        "{:<14} {:>8} {:>14} {:>14} {:>18} {:>14}",
        "context", "turns", "make ns p50", "make ns mean", "encode ns/turn", "encode ns/KB"
    );
    for (k, (n, make, encode, bytes)) in eighths.iter().enumerate() {
        if *n == 0 {
            continue;
        }
        makes[k].sort_unstable();
        let per_kb = if *bytes == 0 {
            "-".to_string()
        } else {
            format!("{:.0}", *encode as f64 / (*bytes as f64 / 1024.0))
        };
        println!(
            "{:<14} {:>8} {:>14} {:>14.0} {:>18.0} {:>14}",
            format!(
                "{}-{}k",
                context * k / 8 / 1024,
                context * (k + 1) / 8 / 1024
            ),
            n,
            makes[k][makes[k].len() / 2],
            *make as f64 / *n as f64,
            *encode as f64 / *n as f64,
            per_kb,
        );
    }
}
