//! The simulated model answering servebench's known-answer canaries, and the profile's
//! output faults.
//!
//! The simulator generates pseudo-random words, so on its own it could answer no question.
//! A correct model asked "What is the secret number?" about a prompt that says "The secret
//! number is 48213." answers 48213; the simulator imitates that one behaviour and nothing
//! else: a prompt that holds both the fact (` secret number is ` then digits) and the
//! question (` secret number?`) is answered with the fact's digits, then the usual words.
//! Matching is on token ids (the tokenizer is deterministic), so every API and the chat
//! template see the same rule. The phrasing is servebench's (`prompt::canary`); a test on
//! each side holds them together.
//!
//! The faults make the simulator a broken engine on purpose: garbage (`!` tokens, what vLLM
//! #42426 printed past a context length) for prompts longer than a limit, or for tokens
//! decoded while the running batch is larger than a limit.

use super::tokenizer::{encode, piece_id};

/// The piece a garbled token decodes to.
pub(crate) const GARBAGE: &str = "!";

/// Most digits of a fact the simulator repeats.
const MAX_DIGITS: usize = 32;

/// The id of a garbled token.
pub(crate) fn garbage_id() -> u32 {
    piece_id(GARBAGE)
}

/// The ids of the digits `0`-`9`, in order.
fn digit_ids() -> [u32; 10] {
    std::array::from_fn(|d| piece_id(&d.to_string()))
}

/// The answer a correct model gives to a canary prompt: the fact's digit tokens; None when
/// `ids` is not one.
pub(crate) fn answer(ids: &[u32]) -> Option<Vec<u32>> {
    let fact = encode(" secret number is 0");
    // ` secret`, ` number`, ` is`, ` ` and then the digits.
    let fact = &fact[..fact.len() - 1];
    let question = encode(" secret number?");
    find(ids, &question)?;
    let at = find(ids, fact)? + fact.len();
    let digits = digit_ids();
    let answer: Vec<u32> = ids[at..]
        .iter()
        .take_while(|id| digits.contains(id))
        .take(MAX_DIGITS)
        .copied()
        .collect();
    (!answer.is_empty()).then_some(answer)
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u32], needle: &[u32]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::decode_into;

    fn answered(prompt: &str) -> Option<String> {
        let ids = answer(&encode(prompt))?;
        let mut out = String::new();
        decode_into(&ids, &mut out);
        Some(out)
    }

    #[test]
    fn the_fact_is_answered_wherever_it_sits_and_only_when_asked() {
        let filler = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let fact = "The secret number is 48213. ";
        let question = "\n\nWhat is the secret number? Answer with the number only.";
        for prompt in [
            format!("{fact}{filler}{question}"),
            format!("{filler}{fact}{filler}{question}"),
            format!("{filler}{fact}{question}"),
        ] {
            assert_eq!(answered(&prompt).as_deref(), Some("48213"), "{prompt}");
        }
        assert_eq!(
            answered(&format!("{filler}{fact}")),
            None,
            "no question asked"
        );
        assert_eq!(
            answered(&format!("{filler}{question}")),
            None,
            "no fact given"
        );
    }

    #[test]
    fn garbage_decodes_to_bangs() {
        let mut out = String::new();
        decode_into(&[garbage_id(), garbage_id()], &mut out);
        assert_eq!(out, "!!");
    }
}
