//! Prompts made of a trace's prefix blocks (Mooncake's `hash_ids`, a session trace's blocks).
//!
//! Each block id stands for the same text of `block_size` tokens wherever it appears: random
//! words seeded by the id and the run's salt, so two requests that name the same leading
//! blocks send the same leading text, and the server's prefix cache can serve it; a new salt
//! (one per round, fresh unless `cache.nonce: false`) makes another run's blocks another text.
//! A request's prompt is its blocks' texts in order, the last one cut to what the line's
//! input length leaves for it (AIPerf's convention: `input_length - (n - 1) * block_size`
//! tokens, between 1 and `block_size`; without an input length every block is whole).
//!
//! The text of a block is sized in characters from one calibration of `block_size` tokens of
//! random words; a partial block is the same text's first characters in proportion, so it is
//! a prefix of the whole block and shares what it holds.
//!
//! [`BlockLedger`] counts what a request could find cached: its leading blocks already sent
//! earlier in the round, as a chain (a block counts only behind the same blocks before it,
//! as a prefix cache matches), each up to the tokens of it that were sent.

use std::collections::HashMap;

use super::TextGenerator;

/// The text of blocks for one round.
#[derive(Debug, Clone)]
pub struct BlockText {
    /// Characters of one whole block (from calibration of `block_size` tokens).
    pub chars_per_block: usize,
    /// Tokens a whole block stands for.
    pub block_size: u32,
    /// Mixed into every block's seed: a new salt, new texts.
    pub salt: u64,
}

impl BlockText {
    /// Tokens of each of `ids`' blocks for a line of `input_tokens` (None: every block
    /// whole). The caller checked the last block's share is in 1..=block_size.
    pub fn block_tokens(&self, ids: &[u64], input_tokens: Option<u64>) -> Vec<u32> {
        let bs = u64::from(self.block_size.max(1));
        let n = ids.len() as u64;
        ids.iter()
            .enumerate()
            .map(|(k, _)| {
                if k as u64 + 1 < n {
                    bs as u32
                } else {
                    let last = input_tokens.map_or(bs, |t| t.saturating_sub((n - 1) * bs));
                    last.clamp(1, bs) as u32
                }
            })
            .collect()
    }

    /// The prompt of `ids` whose blocks hold `tokens` each (from [`Self::block_tokens`]).
    pub fn prompt(&self, ids: &[u64], tokens: &[u32]) -> String {
        let mut out = String::with_capacity(ids.len() * (self.chars_per_block + 1));
        for (id, t) in ids.iter().zip(tokens) {
            let chars = (self.chars_per_block as u64 * u64::from(*t)
                / u64::from(self.block_size.max(1))) as usize;
            // A line break opens each block, so its first word does not merge into a token
            // with the previous block's last one.
            out.push('\n');
            out.push_str(&self.generator(*id).text(chars.saturating_sub(1)));
        }
        out
    }

    fn generator(&self, id: u64) -> TextGenerator {
        TextGenerator::Random {
            seed: mix(self.salt, id),
        }
    }
}

/// The leading blocks sent so far in a round, as chains: a chain's hash (the blocks up to and
/// including one) to the most tokens of its last block that were sent.
#[derive(Debug, Default)]
pub struct BlockLedger {
    sent: HashMap<u64, u32>,
}

impl BlockLedger {
    /// Tokens a request of `ids` (their blocks holding `tokens`) could find cached from the
    /// requests recorded before it, then records it as sent. `scope` keeps chains of
    /// different sessions apart (a trace whose ids are local to a session).
    pub fn send(&mut self, scope: u64, ids: &[u64], tokens: &[u32]) -> u64 {
        let mut chain = mix(scope, 0x6368_6169_6e00);
        let mut cached = 0u64;
        let mut matching = true;
        for (id, t) in ids.iter().zip(tokens) {
            chain = mix(chain, *id);
            let before = self.sent.get(&chain).copied();
            if matching {
                match before {
                    Some(b) => {
                        cached += u64::from(b.min(*t));
                        // A block sent only in part ends the match where it ended.
                        matching = b >= *t;
                    }
                    None => matching = false,
                }
            }
            let e = self.sent.entry(chain).or_insert(0);
            *e = (*e).max(*t);
        }
        cached
    }

    /// Chains recorded (what the ledger holds in memory).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.sent.len()
    }
}

/// A chain's prompt, made again only from the first block that changed: a turn's blocks are
/// the previous turn's plus new ones, so each turn costs the client its new blocks and one
/// copy of the prompt, not a rebuild of its whole context.
#[derive(Debug, Default)]
pub struct PromptBuilder {
    ids: Vec<u64>,
    tokens: Vec<u32>,
    /// Where each block's text ends in `text`.
    ends: Vec<usize>,
    text: String,
}

impl PromptBuilder {
    /// The prompt of `ids` (their blocks holding `tokens`).
    pub fn build(&mut self, text: &BlockText, ids: &[u64], tokens: &[u32]) -> String {
        let keep = self
            .ids
            .iter()
            .zip(&self.tokens)
            .zip(ids.iter().zip(tokens))
            .take_while(|((a, x), (b, y))| a == b && x == y)
            .count();
        self.ids.truncate(keep);
        self.tokens.truncate(keep);
        self.ends.truncate(keep);
        self.text.truncate(self.ends.last().copied().unwrap_or(0));
        for j in keep..ids.len() {
            self.text
                .push_str(&text.prompt(&ids[j..j + 1], &tokens[j..j + 1]));
            self.ids.push(ids[j]);
            self.tokens.push(tokens[j]);
            self.ends.push(self.text.len());
        }
        self.text.clone()
    }
}

/// A seed from two numbers (splitmix64's finaliser over both).
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(salt: u64) -> BlockText {
        BlockText {
            chars_per_block: 400,
            block_size: 100,
            salt,
        }
    }

    #[test]
    fn the_same_block_is_the_same_text_wherever_it_appears() {
        let t = text(7);
        let a = t.prompt(&[1, 2, 3], &[100, 100, 100]);
        let b = t.prompt(&[1, 2, 9], &[100, 100, 40]);
        // The first two blocks (400 characters each, a line break first) are shared.
        assert_eq!(a[..800], b[..800]);
        assert_ne!(a[800..960], b[800..960]);
        assert_eq!(a.len(), 3 * 400);
        // The partial block is 40% of a whole one.
        assert_eq!(b.len(), 2 * 400 + 160);
        // A partial block is a prefix of the whole one.
        let whole = t.prompt(&[9], &[100]);
        let part = t.prompt(&[9], &[40]);
        assert!(whole.starts_with(&part));
    }

    #[test]
    fn another_salt_shares_nothing() {
        let a = text(1).prompt(&[1, 2], &[100, 100]);
        let b = text(2).prompt(&[1, 2], &[100, 100]);
        assert_ne!(a[..40], b[..40]);
    }

    #[test]
    fn the_last_block_holds_what_the_input_length_leaves() {
        let t = text(0);
        assert_eq!(t.block_tokens(&[1, 2, 3], Some(250)), [100, 100, 50]);
        assert_eq!(t.block_tokens(&[1, 2, 3], None), [100, 100, 100]);
        assert_eq!(t.block_tokens(&[1], Some(100)), [100]);
    }

    #[test]
    fn a_prompt_built_turn_by_turn_is_the_prompt_built_whole() {
        let text = BlockText {
            chars_per_block: 64,
            block_size: 16,
            salt: 3,
        };
        let mut b = PromptBuilder::default();
        let turns: [&[u64]; 4] = [&[1, 2], &[1, 2, 3], &[1, 2, 3, 4, 5], &[1, 9]];
        for ids in turns {
            let tokens = text.block_tokens(ids, Some(ids.len() as u64 * 16 - 5));
            assert_eq!(b.build(&text, ids, &tokens), text.prompt(ids, &tokens));
        }
    }

    #[test]
    fn theoretical_hits_are_leading_blocks_already_sent() {
        let mut l = BlockLedger::default();
        assert_eq!(l.send(0, &[1, 2, 3], &[100, 100, 50]), 0, "nothing sent yet");
        // Two whole blocks, then the third was sent with 50 tokens only.
        assert_eq!(l.send(0, &[1, 2, 3, 4], &[100, 100, 100, 100]), 250);
        // Now block 3 was sent whole: a later request finds all of 1, 2, 3.
        assert_eq!(l.send(0, &[1, 2, 3, 5], &[100, 100, 100, 10]), 300);
        // A block behind another prefix is another chain: nothing.
        assert_eq!(l.send(0, &[2, 3], &[100, 100]), 0);
        // A match stops at the first block not sent: block 1 only.
        assert_eq!(l.send(0, &[1, 7, 3], &[100, 100, 100]), 100);
        // Another scope (session) shares nothing.
        assert_eq!(l.send(1, &[1, 2], &[100, 100]), 0);
        assert_eq!(l.len(), 5 + 2 + 2 + 2);
    }
}
