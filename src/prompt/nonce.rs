//! Unique prefixes that defeat the server's prefix cache.

use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique prefix for a prompt: it goes at the very start, so no two requests share even a
/// one-token prefix in the radix cache. A random part makes nonces unique across runs (a
/// server that outlives one run still has the previous run's prompts cached); a counter makes
/// them unique within a run.
///
/// Its first character comes from the counter, in turn through [`OPENINGS`]: two prompts that
/// differ in their first character differ in their first token (a token starting either holds
/// it), so no two of any 52 nonces in a row share a token after the BOS (random letters did:
/// SGLang found a cold request's BOS and first nonce token cached). Past 52 requests in a
/// point, two nonces 52 apart may open with one token; cache verification tolerates that (a
/// cold request may find its BOS and that token, 2 of the 64 tolerated).
pub(crate) fn nonce() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let opening = OPENINGS[(n % OPENINGS.len() as u64) as usize] as char;
    // Random letters next: a fixed opening (or a digit, which tokenizers keep as a token of
    // its own) would be a token shared with other runs' requests, a cache hit on each.
    let letters: String = uuid::Uuid::new_v4().as_bytes()[..11]
        .iter()
        .map(|b| (b'a' + b % 26) as char)
        .collect();
    format!("{opening}{letters}-{n}: ")
}

/// The characters a nonce opens with, one per nonce in turn.
const OPENINGS: &[u8; 52] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

#[cfg(test)]
mod tests {
    use super::*;

    /// Any 52 nonces in a row open with 52 different characters, so with 52 different tokens.
    #[test]
    fn nonces_in_a_row_never_share_their_first_token() {
        let nonces: Vec<String> = (0..104).map(|_| nonce()).collect();
        // Other tests take nonces too: count from where this run of them is in turn.
        for w in nonces.windows(52) {
            let firsts: std::collections::HashSet<char> =
                w.iter().filter_map(|n| n.chars().next()).collect();
            assert!(firsts.len() >= 52 - 8, "{w:?}");
        }
    }

    #[test]
    fn nonces_are_unique_and_short() {
        let a = nonce();
        let b = nonce();
        assert_ne!(a, b);
        assert_ne!(
            a[..8],
            b[..8],
            "the very first characters must already differ"
        );
        assert!(a.len() < 24, "{a}");
    }
}
