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
//! as a prefix cache matches), each up to the tokens of it that were sent. It also says what
//! a request could have found once it is answered ([`BlockLedger::reachable`]): requests that
//! run at once (a session's subagents) may reach the server in the other order than they were
//! made, and a block a sibling sent after it, but before its first token, is this round's own
//! text, not another run's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use super::TextGenerator;
use super::pieces::{BlockStore, Prompt};

/// The text of blocks for one round.
#[derive(Debug, Clone)]
pub struct BlockText {
    /// Characters of one whole block (from calibration of `block_size` tokens).
    pub chars_per_block: usize,
    /// Tokens a whole block stands for.
    pub block_size: u32,
    /// Mixed into every block's seed: a new salt, new texts.
    pub salt: u64,
    /// Words the server counts as one token each (with their leading space), found with its
    /// tokenize endpoint (the block text's calibration in the runner): a block of `t` tokens is then a line break
    /// and `t - 1` of them, `t` tokens in the server's own count. None (a server that cannot
    /// tokenize): a block is `chars_per_block` characters in proportion, as many tokens as
    /// the one calibration says, within [`CHAR_SIZED_DRIFT`].
    pub words: Option<Arc<[String]>>,
}

/// How far a block sized in characters may come out in the server's tokens: random words cut
/// to a length vary with the words drawn (measured 0.7 to 1.4% long on the simulator's
/// tokenizer, 2026-12-06), so a long prompt's hit can differ from its blocks' promise by that
/// share of it.
pub const CHAR_SIZED_DRIFT: f64 = 0.02;

impl BlockText {
    /// Tokens of each of `ids`' blocks for a line of `input_tokens` (None: every block
    /// whole). The caller checked the last block's share is in 1..=block_size.
    pub fn block_tokens(&self, ids: &[u64], input_tokens: Option<u64>) -> Vec<u32> {
        let bs = u64::from(self.block_size.max(1));
        let n = ids.len() as u64;
        let mut tokens = vec![bs as u32; ids.len()];
        if let (Some(last), Some(t)) = (tokens.last_mut(), input_tokens) {
            *last = t.saturating_sub((n - 1) * bs).clamp(1, bs) as u32;
        }
        tokens
    }

    /// The prompt of `ids` whose blocks hold `tokens` each (from [`Self::block_tokens`]).
    pub fn prompt(&self, ids: &[u64], tokens: &[u32]) -> String {
        let mut out = String::with_capacity(ids.len() * (self.chars_per_block + 1));
        if let Some(words) = self.words.as_deref().filter(|w| !w.is_empty()) {
            use rand::{RngExt, SeedableRng};
            for (id, t) in ids.iter().zip(tokens) {
                // A line break, then the block's words in the order its seed draws them: a
                // block in part is the whole one's first words.
                out.push('\n');
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(mix(self.salt, *id));
                for _ in 1..*t {
                    out.push_str(&words[rng.random_range(0..words.len())]);
                }
            }
            return out;
        }
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
/// including one) to the most tokens of its last block that were sent, and when requests made
/// after its first sender, which found it, went out.
#[derive(Debug)]
pub struct BlockLedger {
    sent: HashMap<u64, Sent>,
    /// What [`Sent::marks`] count from: Unix seconds, the clock of the records' `sent_at`.
    born: f64,
}

impl Default for BlockLedger {
    fn default() -> BlockLedger {
        BlockLedger {
            sent: HashMap::new(),
            born: unix_now(),
        }
    }
}

/// Now, in Unix seconds.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One chain in the ledger: 16 bytes, as a trace's ledger may hold millions.
#[derive(Debug, Clone, Copy, Default)]
struct Sent {
    /// The most tokens of its last block sent.
    tokens: u32,
    /// When the first two requests that found it (made after the one that sent it first)
    /// went out: milliseconds from the ledger's birth, plus one (0: none yet). The first
    /// sender could have found it cached from then on; two, so that a request that found it
    /// in part can tell another's mark from its own.
    marks: [u32; 2],
    /// The most tokens of it those requests carried.
    mark_tokens: u32,
}

impl BlockLedger {
    /// Tokens a request of `ids` (their blocks holding `tokens`) could find cached from the
    /// requests recorded before it, then records it as sent. `scope` keeps chains of
    /// different sessions apart (a trace whose ids are local to a session).
    pub fn send(&mut self, scope: u64, ids: &[u64], tokens: &[u32]) -> u64 {
        self.extend(root(scope), ids, tokens, None).0
    }

    /// [`send`](Self::send) of blocks that follow a chain whose hash is `chain` and whose every
    /// block was found: the tokens found of these blocks, whether the match runs to their end,
    /// and each one's chain hash pushed to `chains`.
    fn extend(
        &mut self,
        mut chain: u64,
        ids: &[u64],
        tokens: &[u32],
        mut chains: Option<&mut Vec<u64>>,
    ) -> (u64, bool) {
        let mut cached = 0u64;
        let mut matching = true;
        for (id, t) in ids.iter().zip(tokens) {
            chain = mix(chain, *id);
            if let Some(c) = chains.as_deref_mut() {
                c.push(chain);
            }
            let before = self.sent.get(&chain).map(|s| s.tokens);
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
            let e = self.sent.entry(chain).or_default();
            e.tokens = e.tokens.max(*t);
        }
        (cached, matching)
    }

    /// [`send`](Self::send), with the chain hash of each block.
    pub fn send_chains(&mut self, scope: u64, ids: &[u64], tokens: &[u32]) -> (u64, Vec<u64>) {
        let mut chains = Vec::with_capacity(ids.len());
        let (found, _) = self.extend(root(scope), ids, tokens, Some(&mut chains));
        (found, chains)
    }

    /// Marks, when a request goes out, the blocks it found sent before it was made (its
    /// leading `found` tokens of blocks with chain hashes `chains`, holding `tokens`): from
    /// now on the request that sent them first may find them cached, if this one is served
    /// first. Returns the mark's stamp.
    pub fn mark_sent(&mut self, chains: &[u64], tokens: &[u32], found: u64) -> u32 {
        let now = self.ms_since_born(unix_now()).saturating_add(1);
        let mut start = 0u64;
        for (chain, &t) in chains.iter().zip(tokens) {
            if start >= found {
                break;
            }
            start += u64::from(t);
            if let Some(e) = self.sent.get_mut(chain) {
                if let Some(free) = e.marks.iter_mut().find(|m| **m == 0) {
                    *free = now;
                }
                e.mark_tokens = e.mark_tokens.max(t);
            }
        }
        now
    }

    /// Milliseconds from the ledger's birth to `at` (Unix seconds), rounded up.
    fn ms_since_born(&self, at: f64) -> u32 {
        let ms = ((at - self.born) * 1e3).ceil();
        if ms.is_nan() || ms <= 0.0 {
            0
        } else {
            ms.min(f64::from(u32::MAX - 1)) as u32
        }
    }

    /// The most a request could have found cached from this round's own prompts: its leading
    /// blocks (chain hashes `chains`, holding `tokens`) that were sent before it (`found`, as
    /// [`send`](Self::send) counted them), then those that requests made after it sent
    /// before `first_token` (when its prefill may not have ended: the two may reach the
    /// server in either order). More than this is text this round never sent in time: another
    /// run's or point's. To the millisecond; `first_token` in Unix seconds (the record's
    /// `sent_at` plus its first token's offset); `own_mark`, this request's own
    /// [`mark_sent`](Self::mark_sent) stamp, if it was marked.
    pub fn reachable(
        &self,
        chains: &[u64],
        tokens: &[u32],
        found: u64,
        first_token: f64,
        own_mark: Option<u32>,
    ) -> u64 {
        let cutoff = self.ms_since_born(first_token + 1e-3);
        let mut sum = 0u64;
        for (chain, &t) in chains.iter().zip(tokens) {
            let t = u64::from(t);
            if sum + t <= found {
                sum += t;
                continue;
            }
            // A block found in part when made: this request marked it itself.
            let found_here = found.saturating_sub(sum);
            let marked = self.sent.get(chain).and_then(|s| {
                let mark = match s.marks {
                    [first, second] if found_here > 0 && Some(first) == own_mark => second,
                    [first, _] => first,
                };
                (mark != 0 && mark <= cutoff).then(|| u64::from(s.mark_tokens).min(t))
            });
            let have = found_here.max(marked.unwrap_or(0));
            sum += have;
            if have < t {
                break;
            }
        }
        sum.max(found)
    }

    /// Chains recorded (what the ledger holds in memory).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.sent.len()
    }
}

/// A request's blocks in its round's shared ledger: marked when it goes out, and asked once
/// it is answered what it could have found.
#[derive(Debug, Clone)]
pub struct LedgerEntry {
    ledger: Arc<Mutex<BlockLedger>>,
    chains: Vec<u64>,
    tokens: Vec<u32>,
    found: u64,
    /// Its own mark's stamp, once it went out.
    marked: Option<u32>,
}

impl LedgerEntry {
    /// Records a request of `ids` (their blocks holding `tokens`) in `ledger`, as
    /// [`BlockLedger::send`] does.
    pub fn new(ledger: Arc<Mutex<BlockLedger>>, ids: &[u64], tokens: Vec<u32>) -> LedgerEntry {
        let (found, chains) = match ledger.lock() {
            Ok(mut l) => l.send_chains(0, ids, &tokens),
            Err(_) => (0, Vec::new()),
        };
        LedgerEntry {
            ledger,
            chains,
            tokens,
            found,
            marked: None,
        }
    }

    /// The tokens its leading blocks already sent could find cached.
    pub fn found(&self) -> u64 {
        self.found
    }

    /// [`BlockLedger::mark_sent`], when the request goes out.
    pub fn mark_sent(&mut self) {
        if let Ok(mut l) = self.ledger.lock() {
            self.marked = Some(l.mark_sent(&self.chains, &self.tokens, self.found));
        }
    }

    /// [`BlockLedger::reachable`] for a request whose first token came at `first_token`.
    pub fn reachable(&self, first_token: f64) -> Option<u64> {
        let l = self.ledger.lock().ok()?;
        Some(l.reachable(
            &self.chains,
            &self.tokens,
            self.found,
            first_token,
            self.marked,
        ))
    }
}

/// The chain hash before a scope's first block.
fn root(scope: u64) -> u64 {
    mix(scope, 0x6368_6169_6e00)
}

/// One agent's turns, each made from the last: a turn's blocks are the previous turn's plus
/// new ones, so each turn makes the text of its new blocks only and looks only them up in
/// the ledger (the blocks it keeps were sent whole by the turn before): the client's work per
/// turn does not grow with the context. (Sending the prompt does: every turn sends all of it.)
/// Its prompt holds each block's text as one shared piece, from its session's
/// [`BlockStore`] where it has one ([`PromptBuilder::sharing`]).
#[derive(Debug, Default)]
pub struct PromptBuilder {
    ids: Vec<u64>,
    tokens: Vec<u32>,
    /// Where each block's text ends in `prompt`.
    ends: Vec<usize>,
    /// Each block's chain hash, and the tokens up to and including it.
    chains: Vec<u64>,
    sums: Vec<u64>,
    /// One piece per block.
    prompt: Prompt,
    /// Whole blocks' texts shared with the session's other agents.
    store: Option<Arc<Mutex<BlockStore>>>,
    /// The tokens of each block of the last prompt [`PromptBuilder::turn`] made.
    scratch: Vec<u32>,
    /// Leading ids the next turn is known to share with the last ([`PromptBuilder::turn_after`]).
    known_shared: Option<usize>,
    /// The last prompt's mark when it went out ([`BlockLedger::mark_sent`]).
    marked: Option<u32>,
}

impl PromptBuilder {
    /// A builder whose whole blocks' texts come from (and go to) `store`, shared by a
    /// session's agents.
    pub fn sharing(store: Arc<Mutex<BlockStore>>) -> PromptBuilder {
        PromptBuilder {
            store: Some(store),
            ..PromptBuilder::default()
        }
    }

    /// [`turn`](Self::turn) of a turn whose first `shared` ids are the last turn's (as the
    /// trace was read, [`crate::load::agentic`]): what it keeps is known without comparing
    /// its whole history, so making it costs its new blocks alone.
    pub fn turn_after(
        &mut self,
        text: &BlockText,
        ids: &[u64],
        shared: usize,
        input_tokens: Option<u64>,
        ledger: &mut BlockLedger,
        scope: u64,
    ) -> (&Prompt, u64) {
        self.known_shared = Some(shared);
        self.turn(text, ids, input_tokens, ledger, scope)
    }

    /// [`build`](Self::build) of a trace line's `ids` for a prompt of `input_tokens` (the
    /// last block holding what it leaves): each block's tokens kept from the last turn, so
    /// working them out costs only the new blocks.
    pub fn turn(
        &mut self,
        text: &BlockText,
        ids: &[u64],
        input_tokens: Option<u64>,
        ledger: &mut BlockLedger,
        scope: u64,
    ) -> (&Prompt, u64) {
        let bs = text.block_size.max(1);
        let mut tokens = std::mem::take(&mut self.scratch);
        if let Some(last) = tokens.last_mut() {
            *last = bs;
        }
        tokens.resize(ids.len(), bs);
        if let (Some(last), Some(t)) = (tokens.last_mut(), input_tokens) {
            let full = (ids.len() as u64 - 1) * u64::from(bs);
            *last = t.saturating_sub(full).clamp(1, u64::from(bs)) as u32;
        }
        self.scratch = tokens;
        let tokens = std::mem::take(&mut self.scratch);
        let found = {
            let (_, found) = self.build(text, ids, &tokens, ledger, scope);
            found
        };
        self.scratch = tokens;
        (&self.prompt, found)
    }

    /// The prompt of `ids` (their blocks holding `tokens`), and the tokens its leading blocks
    /// already sent could find cached (as [`BlockLedger::send`] counts them in `scope`, which
    /// it records this prompt in).
    pub fn build(
        &mut self,
        text: &BlockText,
        ids: &[u64],
        tokens: &[u32],
        ledger: &mut BlockLedger,
        scope: u64,
    ) -> (&Prompt, u64) {
        self.marked = None;
        let keep = self.kept(ids, tokens);
        self.ids.truncate(keep);
        self.tokens.truncate(keep);
        self.ends.truncate(keep);
        self.chains.truncate(keep);
        self.sums.truncate(keep);
        self.prompt.truncate_pieces(keep);
        let chain = self.chains.last().copied().unwrap_or_else(|| root(scope));
        let before = self.sums.last().copied().unwrap_or(0);
        let (found, _) =
            ledger.extend(chain, &ids[keep..], &tokens[keep..], Some(&mut self.chains));
        let mut sum = before;
        for j in keep..ids.len() {
            let piece = self.block(text, ids[j], tokens[j]);
            self.prompt.push(piece);
            self.ids.push(ids[j]);
            self.tokens.push(tokens[j]);
            self.ends.push(self.prompt.len());
            sum += u64::from(tokens[j]);
            self.sums.push(sum);
        }
        (&self.prompt, before + found)
    }

    /// The text of block `id` holding `tokens`: a whole block's from the store (made there
    /// once), a partial last block's made for this prompt alone.
    fn block(&self, text: &BlockText, id: u64, tokens: u32) -> Arc<str> {
        let make = || text.prompt(&[id], &[tokens]);
        match &self.store {
            Some(store) if tokens == text.block_size => match store.lock() {
                Ok(mut s) => s.get_or_make(mix(text.salt, id), make),
                Err(_) => Arc::from(make()),
            },
            _ => Arc::from(make()),
        }
    }

    /// The last prompt made.
    pub fn prompt(&self) -> &Prompt {
        &self.prompt
    }

    /// The last prompt's blocks: where each one's text ends in it (bytes) and its tokens.
    pub fn blocks(&self) -> (&[usize], &[u32]) {
        (&self.ends, &self.tokens)
    }

    /// [`BlockLedger::reachable`] for the last prompt made, which found `found` when made.
    pub fn reachable(&self, ledger: &BlockLedger, found: u64, first_token: f64) -> u64 {
        ledger.reachable(&self.chains, &self.tokens, found, first_token, self.marked)
    }

    /// [`BlockLedger::mark_sent`] for the last prompt made, which found `found` when made.
    pub fn mark_sent(&mut self, ledger: &mut BlockLedger, found: u64) {
        self.marked = Some(ledger.mark_sent(&self.chains, &self.tokens, found));
    }

    /// How many leading blocks of the last prompt this one keeps (the same ids, as many
    /// tokens each): compared a slice at a time.
    fn kept(&mut self, ids: &[u64], tokens: &[u32]) -> usize {
        let n = self.ids.len().min(ids.len());
        if let Some(shared) = self.known_shared.take() {
            // Only the last block of a turn's prompt holds fewer tokens than a block: within
            // the shared ids, only the last can differ in its tokens.
            let n = n.min(shared);
            debug_assert_eq!(self.ids[..n], ids[..n]);
            return match n.checked_sub(1) {
                Some(last) if self.tokens[last] != tokens[last] => last,
                _ => n,
            };
        }
        if self.ids[..n] == ids[..n] && self.tokens[..n] == tokens[..n] {
            return n;
        }
        self.ids
            .iter()
            .zip(&self.tokens)
            .zip(ids.iter().zip(tokens))
            .take_while(|((a, x), (b, y))| a == b && x == y)
            .count()
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
    use std::time::Duration;

    fn text(salt: u64) -> BlockText {
        BlockText {
            chars_per_block: 400,
            block_size: 100,
            salt,
            words: None,
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
            words: None,
        };
        let mut b = PromptBuilder::sharing(Arc::default());
        let (mut ledger, mut whole) = (BlockLedger::default(), BlockLedger::default());
        let turns: [&[u64]; 5] = [&[1, 2], &[1, 2, 3], &[1, 2, 3, 4, 5], &[1, 9], &[1, 9, 7]];
        for ids in turns {
            let tokens = text.block_tokens(ids, Some(ids.len() as u64 * 16 - 5));
            let (prompt, found) = b.build(&text, ids, &tokens, &mut ledger, 4);
            assert_eq!(prompt.render(), text.prompt(ids, &tokens));
            // The hit counted from the last turn is the hit counted from scratch.
            assert_eq!(found, whole.send(4, ids, &tokens), "{ids:?}");
        }
        // A turn works out its blocks' tokens as `block_tokens` does.
        let (mut t, mut l) = (PromptBuilder::default(), BlockLedger::default());
        for ids in turns {
            let input = Some(ids.len() as u64 * 16 - 3);
            let tokens = text.block_tokens(ids, input);
            assert_eq!(
                t.turn(&text, ids, input, &mut l, 0).0.render(),
                text.prompt(ids, &tokens)
            );
        }
    }

    /// Two subagents made one after the other from the same history, each adding the same
    /// task block: the one made second counts the first's block as found; the one made first
    /// counts it only as reachable, and only when the second was sent before its first token
    /// (the server may then have served the second first).
    #[test]
    fn a_sibling_sent_before_the_first_token_is_reachable_one_sent_after_is_not() {
        let text = BlockText {
            chars_per_block: 64,
            block_size: 16,
            salt: 3,
            words: None,
        };
        let mut ledger = BlockLedger::default();
        let mut history = PromptBuilder::default();
        let (_, found) = history.build(&text, &[1, 2], &[16, 16], &mut ledger, 0);
        assert_eq!(found, 0);
        let (mut first, mut second) = (PromptBuilder::default(), PromptBuilder::default());
        let (_, found_first) = first.build(&text, &[1, 2, 7, 8], &[16, 16, 16, 16], &mut ledger, 0);
        assert_eq!(found_first, 32, "the history");
        let (_, found_second) =
            second.build(&text, &[1, 2, 7, 9], &[16, 16, 16, 16], &mut ledger, 0);
        assert_eq!(found_second, 48, "the history and the first's task block");
        // Made, not yet sent: nothing it could have left.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(first.reachable(&ledger, found_first, unix_now()), 32);
        let before_second = unix_now();
        std::thread::sleep(Duration::from_millis(5));
        second.mark_sent(&mut ledger, found_second);
        std::thread::sleep(Duration::from_millis(5));
        // The first's first token came after the second was sent: block 7 was reachable;
        // block 8, which nobody else sent, was not.
        assert_eq!(first.reachable(&ledger, found_first, unix_now()), 48);
        // Its first token came before the second was sent: only what it found.
        assert_eq!(first.reachable(&ledger, found_first, before_second), 32);
        // The second's own new block was sent by nobody else.
        assert_eq!(second.reachable(&ledger, found_second, unix_now()), 48);
    }

    /// A trace's requests made one after another: the ledger gives each its blocks' chains,
    /// and marks what one found when it goes out.
    #[test]
    fn a_trace_request_made_later_and_sent_first_is_reachable_for_the_earlier() {
        let mut ledger = BlockLedger::default();
        let (a, a_chains) = ledger.send_chains(0, &[1, 2], &[100, 100]);
        let (b, b_chains) = ledger.send_chains(0, &[1, 2, 3], &[100, 100, 100]);
        assert_eq!((a, b), (0, 200));
        assert_eq!(a_chains, b_chains[..2]);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            ledger.reachable(&a_chains, &[100, 100], a, unix_now(), None),
            0
        );
        ledger.mark_sent(&b_chains, &[100, 100, 100], b);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            ledger.reachable(&a_chains, &[100, 100], a, unix_now(), None),
            200
        );
    }

    /// The case a loaded run showed (a Mooncake trace, requests 44, 45 and 46): 44 sent part
    /// of block 35; 45, made next, found that part and sent all of it and its partial block
    /// 36; 46, made 0.7 ms later, found all of 45 and went out before 45's first token, and
    /// the server served it first. 45 really found 46's text: the rest of block 35 and its
    /// own 36. Its own mark on block 35 (which it found in part) does not count for it.
    #[test]
    fn a_block_found_in_part_counts_another_requests_mark_not_its_own() {
        let mut ledger = BlockLedger::default();
        let (f44, _) = ledger.send_chains(0, &[1, 35], &[512, 284]);
        let (f45, c45) = ledger.send_chains(0, &[1, 35, 36], &[512, 512, 471]);
        let (f46, c46) = ledger.send_chains(0, &[1, 35, 36, 40], &[512, 512, 512, 512]);
        assert_eq!((f44, f45, f46), (0, 512 + 284, 512 + 512 + 471));
        let t45 = [512, 512, 471];
        let own = ledger.mark_sent(&c45, &t45, f45);
        std::thread::sleep(Duration::from_millis(5));
        // Only its own mark so far: what it found.
        let early = unix_now();
        assert_eq!(ledger.reachable(&c45, &t45, f45, early, Some(own)), f45);
        std::thread::sleep(Duration::from_millis(5));
        let _ = ledger.mark_sent(&c46, &[512, 512, 512, 512], f46);
        std::thread::sleep(Duration::from_millis(5));
        // 46 went out after 45's first token: nothing more.
        assert_eq!(ledger.reachable(&c45, &t45, f45, early, Some(own)), f45);
        // Before it: all of 45's blocks were reachable.
        let late = unix_now();
        assert_eq!(
            ledger.reachable(&c45, &t45, f45, late, Some(own)),
            512 + 512 + 471
        );
        // Taken for another's, its own mark would have counted it whole at once.
        assert_eq!(ledger.reachable(&c45, &t45, f45, early, None), 512 + 512);
    }

    #[test]
    fn theoretical_hits_are_leading_blocks_already_sent() {
        let mut l = BlockLedger::default();
        assert_eq!(
            l.send(0, &[1, 2, 3], &[100, 100, 50]),
            0,
            "nothing sent yet"
        );
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

    /// A turn told how many ids it shares with the last makes the same prompt and finds the
    /// same cached tokens as one that compares its whole history: growing, a partial last
    /// block made whole, a history that changed partway.
    #[test]
    fn a_turn_told_what_it_shares_makes_what_a_full_comparison_makes() {
        let t = text(3);
        let turns: [(&[u64], u64); 5] = [
            (&[1, 2], 150),
            (&[1, 2, 3], 260),
            (&[1, 2, 3, 4, 5], 420),
            (&[1, 2, 7, 8], 330),
            (&[1, 2, 7, 8], 400),
        ];
        let (mut told, mut compared) = (PromptBuilder::default(), PromptBuilder::default());
        let (mut l1, mut l2) = (BlockLedger::default(), BlockLedger::default());
        let mut last: &[u64] = &[];
        for (ids, input) in turns {
            let shared = last.iter().zip(ids).take_while(|(a, b)| a == b).count();
            let (a, fa) = told.turn_after(&t, ids, shared, Some(input), &mut l1, 0);
            let a = a.render();
            let (b, fb) = compared.turn(&t, ids, Some(input), &mut l2, 0);
            assert_eq!((a, fa), (b.render(), fb), "{ids:?} {input}");
            last = ids;
        }
    }

    /// The drift where the server cannot tokenize: block text sized in characters from one
    /// calibration (as the runner sizes it), counted by the simulator's tokenizer, on the
    /// published Mooncake lines (`tests/fixtures/mooncake`, 512-token blocks). A request's
    /// length error stays within [`CHAR_SIZED_DRIFT`], and the error of the prefix a hit
    /// would cover (its leading whole blocks) within the request's own error and that share of
    /// one block (its last block, in part, may err the other way): the hit tolerance (a block
    /// plus the request's measured error) holds it.
    #[test]
    fn char_sized_blocks_drift_within_their_bound_and_a_prefix_within_its_requests() {
        let calibrate = TextGenerator::Random { seed: 7 };
        // One calibration of a 512-token block, as the runner makes it.
        let mut chars = 512 * 4;
        for _ in 0..8 {
            let n = sim::tokenize(&calibrate.text(chars)).len().max(1);
            chars = chars * 512 / n;
        }
        let t = BlockText {
            chars_per_block: chars,
            block_size: 512,
            salt: 11,
            words: None,
        };
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/mooncake/conversation_trace.head300.jsonl"
        );
        let (mut worst, mut lines, mut excess) = (0f64, 0, i64::MIN);
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for line in std::fs::read_to_string(file).unwrap().lines().take(40) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let ids: Vec<u64> = v["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap())
                .collect();
            let input = v["input_length"].as_u64().unwrap();
            let tokens = t.block_tokens(&ids, Some(input));
            let whole = sim::tokenize(&t.prompt(&ids, &tokens)).len() as i64;
            let error = whole - input as i64;
            lo = lo.min(error);
            hi = hi.max(error);
            worst = worst.max(error.unsigned_abs() as f64 / input as f64);
            let k = ids.len() - 1;
            if k > 0 {
                let prefix = sim::tokenize(&t.prompt(&ids[..k], &tokens[..k])).len() as i64;
                let prefix_error = prefix - (k as i64 * 512);
                // The last block, in part, may err the other way: by its share of the drift.
                let last = (CHAR_SIZED_DRIFT * 512.0).ceil() as u64;
                excess = excess.max(prefix_error.abs() - error.abs());
                assert!(
                    prefix_error.unsigned_abs() <= error.unsigned_abs() + last,
                    "{k} blocks: {prefix_error:+} against the request's {error:+}"
                );
            }
            lines += 1;
        }
        eprintln!(
            "{lines} lines: length error {lo:+} to {hi:+} tokens, at most {:.2}%; a prefix's error past its request's: at most {excess:+}",
            worst * 100.0
        );
        assert!(worst <= CHAR_SIZED_DRIFT, "{worst}");
    }

    #[test]
    fn blocks_of_one_token_words_are_exact_in_the_servers_count() {
        // The words the simulator's tokenizer counts as one token after a line break, as
        // the runner finds them with the server's /tokenize.
        let words: Vec<String> = crate::prompt::generate::WORDS
            .iter()
            .map(|w| format!(" {w}"))
            .filter(|w| sim::tokenize(&format!("\n{w}")).len() == 2)
            .collect();
        assert!(words.len() >= 16, "{}", words.len());
        let t = BlockText {
            words: Some(words.into()),
            ..text(5)
        };
        let tokens = t.block_tokens(&[1, 2, 3, 4], Some(337));
        assert_eq!(tokens, [100, 100, 100, 37]);
        let prompt = t.prompt(&[1, 2, 3, 4], &tokens);
        assert_eq!(sim::tokenize(&prompt).len(), 337);
        // A block in part is the whole one's first words, and shares its tokens.
        let whole = t.prompt(&[4], &[100]);
        assert!(whole.starts_with(&t.prompt(&[4], &[37])));
        assert_eq!(sim::tokenize(&whole).len(), 100);
        // Another salt, another text.
        let other = BlockText {
            salt: 6,
            ..t.clone()
        };
        assert_ne!(other.prompt(&[4], &[100]), whole);
    }
}
