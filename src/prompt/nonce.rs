//! Unique prefixes that defeat the server's prefix cache.

use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique prefix for a prompt: it goes at the very start, so no two requests share even a
/// one-token prefix in the radix cache. A random part makes nonces unique across runs (a
/// server that outlives one run still has the previous run's prompts cached); a counter makes
/// them unique within a run.
pub fn nonce() -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let r = uuid::Uuid::new_v4().simple().to_string();
    // Random characters first: a fixed opening character would be one token shared by every
    // request, a one-token cache hit on each.
    format!("{}-{n}: ", &r[..12])
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
