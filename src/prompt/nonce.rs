//! Unique prefixes that defeat the server's prefix cache.

use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique prefix for a prompt: it goes at the very start, so no two requests share even a
/// one-token prefix in the radix cache. A random part makes nonces unique across runs (a
/// server that outlives one run still has the previous run's prompts cached); a counter makes
/// them unique within a run.
pub(crate) fn nonce() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Random letters first: a fixed opening character (or a digit, which tokenizers keep as a
    // token of its own) would be a token shared with other requests, a cache hit on each.
    let letters: String = uuid::Uuid::new_v4().as_bytes()[..12]
        .iter()
        .map(|b| (b'a' + b % 26) as char)
        .collect();
    format!("{letters}-{n}: ")
}

#[cfg(test)]
mod tests {
    use super::*;

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
