//! A deterministic stand-in for a BPE tokenizer.
//!
//! Text splits into pieces roughly like GPT-style BPE: a word keeps its leading space
//! (" quick"), long words break into pieces of at most [`MAX_PIECE`] characters, and every
//! punctuation mark or digit is its own token. Ids come from a stable hash of the piece, so the
//! same text always gives the same ids, and a text prefix gives a token prefix (except possibly
//! the last token), which is what makes shared prompt prefixes hit the radix cache.

/// Vocabulary size (Llama 3's), so ids look plausible.
pub(crate) const VOCAB_SIZE: u32 = 128_256;
/// Longest piece, in characters, a word is split into.
const MAX_PIECE: usize = 8;
/// Ids below this are reserved for special tokens.
const FIRST_ID: u32 = 256;

/// Words the simulated model generates, each with a leading space.
const OUTPUT_WORDS: &[&str] = &[
    " the", " model", " server", " token", " cache", " is", " fast", " and", " of", " a", " batch",
    " request", " prefill", " decode", " stream", " to", " in", " with", " for", " latency",
    " GPU", " memory", " that", " it", " on", " we", " kernel", " graph", ".", ",",
];

/// Splits `text` into token pieces (borrowed slices of `text`).
pub(crate) fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::with_capacity(text.len() / 4 + 1);
    let mut chars = text.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_alphabetic() || (c == ' ' && next_is_alpha(text, start)) {
            // Optional leading space, then letters, cut every MAX_PIECE chars.
            let mut piece_start = start;
            let mut end = start;
            let mut count = 0;
            if c == ' ' {
                chars.next();
                end = start + 1;
                count = 1;
            }
            while let Some(&(i, ch)) = chars.peek() {
                if !ch.is_alphabetic() {
                    break;
                }
                if count == MAX_PIECE {
                    out.push(&text[piece_start..i]);
                    piece_start = i;
                    count = 0;
                }
                chars.next();
                end = i + ch.len_utf8();
                count += 1;
            }
            out.push(&text[piece_start..end]);
        } else if c.is_whitespace() {
            // A run of whitespace is one token (like BPE's newline / indent tokens).
            let mut end = start;
            while let Some(&(i, ch)) = chars.peek() {
                if !ch.is_whitespace() || (ch == ' ' && i > start && next_is_alpha(text, i)) {
                    break;
                }
                chars.next();
                end = i + ch.len_utf8();
            }
            out.push(&text[start..end]);
        } else {
            chars.next();
            out.push(&text[start..start + c.len_utf8()]);
        }
    }
    out
}

fn next_is_alpha(text: &str, space_at: usize) -> bool {
    text[space_at + 1..]
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic())
}

/// Stable id of one piece (FNV-1a).
pub(crate) fn piece_id(piece: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in piece.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    FIRST_ID + (h % (VOCAB_SIZE - FIRST_ID) as u64) as u32
}

/// Tokenizes text into ids.
pub fn encode(text: &str) -> Vec<u32> {
    pieces(text).into_iter().map(piece_id).collect()
}

/// The `i`-th generated token for a request whose generation seed is `seed`.
pub(crate) fn output_token(seed: u64, i: u64) -> u32 {
    let w = OUTPUT_WORDS
        [(splitmix(seed ^ i.wrapping_mul(0x9e37_79b9)) % OUTPUT_WORDS.len() as u64) as usize];
    piece_id(w)
}

/// Pieces generated besides the words: a canary's digits and a fault's garbage
/// (`sim::canary`).
const OUTPUT_EXTRA: &[&str] = &["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "!"];

/// Text of a generated token id (produced by [`output_token`], a canary's answer or a
/// fault); None for any other.
fn generated_text(id: u32) -> Option<&'static str> {
    OUTPUT_WORDS
        .iter()
        .chain(OUTPUT_EXTRA)
        .find(|w| piece_id(w) == id)
        .copied()
}

/// Text of a generated token id; any other decodes to a placeholder (the generated text's
/// own ids are always the simulator's).
pub(crate) fn decode_token(id: u32) -> &'static str {
    generated_text(id).unwrap_or(" <unk>")
}

/// Appends the text of `ids` to `out`. A generated token is its word. Any other id of the
/// vocabulary is a word of its own: a space and four letters spelling the id (one piece,
/// so one token again), since the ids are hashes of text and cannot be turned back into it;
/// a client that detokenizes ids to make a prompt of a length (vLLM's `bench serve` random
/// dataset aligns its prompts so) gets text of as many tokens. A special id (below the
/// first text id) or one past the vocabulary is ` <unk>`.
pub(crate) fn decode_into(ids: &[u32], out: &mut String) {
    for &id in ids {
        match generated_text(id) {
            Some(w) => out.push_str(w),
            None if (FIRST_ID..VOCAB_SIZE).contains(&id) => {
                out.push(' ');
                let mut n = id;
                for _ in 0..4 {
                    out.push(char::from(b'a' + (n % 26) as u8));
                    n /= 26;
                }
            }
            None => out.push_str(" <unk>"),
        }
    }
}

/// A seed for a request's generated tokens from its prompt, so outputs are reproducible.
pub(crate) fn seed_of(ids: &[u32], base: u64) -> u64 {
    let mut h = base ^ 0x51ed_270b;
    for &id in ids.iter().take(64) {
        h = splitmix(h ^ id as u64);
    }
    h ^ ids.len() as u64
}

/// SplitMix64: a small, fast, well-mixed deterministic hash / generator step.
pub(crate) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fox_sentence_is_about_eleven_tokens() {
        let p = pieces("The quick brown fox jumps over the lazy dog. ");
        assert_eq!(
            p,
            [
                "The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".",
                " "
            ]
        );
    }

    #[test]
    fn long_words_split_and_rejoin() {
        let text = "An extraordinarily long word, 42!";
        let p = pieces(text);
        assert_eq!(p.concat(), text);
        assert!(p.iter().all(|s| s.chars().count() <= MAX_PIECE + 1));
        assert!(p.contains(&"4") && p.contains(&"2") && p.contains(&"!"));
    }

    #[test]
    fn deterministic_and_prefix_stable() {
        let unit = "The quick brown fox jumps over the lazy dog. ";
        let long = unit.repeat(20);
        let short = unit.repeat(10);
        let a = encode(&long);
        let b = encode(&short);
        assert_eq!(a, encode(&long));
        assert_eq!((a.len(), b.len()), (201, 101));
        // All but the trailing space token are shared.
        assert_eq!(&a[..b.len() - 1], &b[..b.len() - 1]);
    }

    #[test]
    fn every_text_round_trips_through_pieces() {
        for t in [
            "",
            " ",
            "  a\n\n b",
            "héllo wörld",
            "x..y",
            "\t\tfoo  bar ",
            "日本語のテキスト",
        ] {
            assert_eq!(pieces(t).concat(), t, "{t:?}");
        }
    }

    /// Ids the simulator did not generate detokenize to one-token words, so text made of N
    /// ids tokenizes to N tokens again.
    #[test]
    fn any_vocabulary_id_detokenizes_to_one_token() {
        let ids: Vec<u32> = vec![256, 1000, 5021, 77_777, VOCAB_SIZE - 1];
        let mut s = String::new();
        decode_into(&ids, &mut s);
        assert!(!s.contains("<unk>"), "{s}");
        assert_eq!(encode(&s).len(), ids.len(), "{s}");
        let mut special = String::new();
        decode_into(&[1, VOCAB_SIZE], &mut special);
        assert_eq!(special, " <unk> <unk>");
    }

    #[test]
    fn output_tokens_decode() {
        let mut s = String::new();
        let ids: Vec<u32> = (0..5).map(|i| output_token(7, i)).collect();
        decode_into(&ids, &mut s);
        assert!(!s.contains("<unk>") && !s.is_empty());
    }
}
