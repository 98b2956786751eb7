//! Known-answer prompts for `validity:`: a secret number placed at the start, the middle or
//! the end of filler text, and a question asking for it; and the checker of an answer.
//!
//! The phrasing is fixed: the simulator recognises it (`sim::canary`) to imitate a correct
//! model, so a change here is a change there.

use servebench_model::spec::validity::CanaryPosition;

/// The filler the fact hides in (no digits, so the only number is the fact).
pub(crate) const FILLER: &str = "The quick brown fox jumps over the lazy dog. ";

/// Prompt tokens the fact, the question and a nonce add to the filler, about: the filler is
/// calibrated to the point's length less this.
pub(crate) const OVERHEAD_TOKENS: u64 = 40;

/// The question every canary ends with.
const QUESTION: &str = "\n\nWhat is the secret number? Answer with the number only.";

/// The question the consistency prompt ends with (any greedy continuation will do).
const CONTINUE: &str = "\n\nWrite the next sentence.";

/// A fresh fact: a five-digit number (no leading zero).
pub(crate) fn fact() -> String {
    let b = uuid::Uuid::new_v4().as_u128();
    (10_000 + (b % 90_000) as u32).to_string()
}

/// The sentence that states `fact`.
fn statement(fact: &str) -> String {
    format!("The secret number is {fact}. ")
}

/// A canary prompt: `prefix` (the nonce), then `filler` with the fact at `position`, then the
/// question. The middle is the sentence boundary nearest the filler's half.
pub(crate) fn prompt(prefix: &str, filler: &str, fact: &str, position: CanaryPosition) -> String {
    let fact = statement(fact);
    let (head, tail) = match position {
        CanaryPosition::Start => ("", filler),
        CanaryPosition::End => (filler, ""),
        CanaryPosition::Middle => filler.split_at(middle(filler)),
    };
    format!("{prefix}{head}{fact}{tail}{QUESTION}")
}

/// The consistency prompt: `prefix`, `filler` and a request to go on.
pub(crate) fn continuation(prefix: &str, filler: &str) -> String {
    format!("{prefix}{filler}{CONTINUE}")
}

/// Where the middle of `filler` is: just after the sentence end nearest its half.
fn middle(filler: &str) -> usize {
    let half = servebench_model::text::floor_char_boundary(filler, filler.len() / 2);
    let before = filler[..half].rfind(". ").map(|i| i + 2);
    let after = filler[half..].find(". ").map(|i| half + i + 2);
    match (before, after) {
        (Some(b), Some(a)) if half - b <= a - half => b,
        (_, Some(a)) => a,
        (Some(b), None) => b,
        (None, None) => half,
    }
}

/// Whether `answer` gives `fact`: some number in it equals the fact, its digits written
/// together or in thousands groups (`48213`, `48,213`, `48 213`); one digit more or less
/// (`482130`) is another number. An answer that names more than [`MAX_GUESSES`] different
/// numbers gives none: listing every five-digit number contains every fact, and knows none.
pub(crate) fn answers(answer: &str, fact: &str) -> bool {
    let mut named: Vec<String> = Vec::new();
    for n in numbers(answer) {
        if !named.contains(&n) {
            if named.len() == MAX_GUESSES {
                return false;
            }
            named.push(n);
        }
    }
    named.iter().any(|n| n == fact)
}

/// The most different numbers an answer may name and still give the fact (a correction, `It
/// is 7, no: 48213`; the number and its digit count).
const MAX_GUESSES: usize = 3;

/// The numbers in `text`, digits only: thousands separators are dropped.
fn numbers(text: &str) -> impl Iterator<Item = String> + '_ {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut current = String::new();
    for (i, &c) in chars.iter().enumerate() {
        // A thousands separator: exactly three digits follow it.
        let group = |k: usize| chars.get(i + k).is_some_and(char::is_ascii_digit);
        let joins = matches!(c, ',' | ' ' | '_')
            && !current.is_empty()
            && group(1)
            && group(2)
            && group(3)
            && !group(4);
        if c.is_ascii_digit() {
            current.push(c);
        } else if !joins && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_number_must_be_there_whole() {
        assert!(answers("48213", "48213"));
        assert!(answers(" The secret number is 48213.", "48213"));
        assert!(answers("48,213", "48213"));
        assert!(answers("48 213", "48213"));
        assert!(answers("It is 7, no: 48213", "48213"));
        assert!(!answers("482130", "48213"));
        assert!(!answers("148213", "48213"));
        assert!(!answers("4821", "48213"));
        assert!(!answers("!!!!!!!!", "48213"));
        assert!(!answers("", "48213"));
        assert!(!answers("the model server token", "48213"));
        assert!(!answers("1 48213", "148213"), "two numbers are not one");
    }

    /// Naming every five-digit number names every fact: no answer (it passed every canary).
    #[test]
    fn an_answer_that_lists_every_number_gives_none() {
        let all: String = (10_000..100_000).map(|n| format!("{n} ")).collect();
        assert!(!answers(&all, "48213"));
        assert!(!answers("10000 20000 30000 48213", "48213"));
        assert!(answers("48213 48213 48213 48213", "48213"));
    }

    #[test]
    fn the_fact_sits_where_it_is_asked_for() {
        let filler = FILLER.repeat(10);
        let start = prompt("n: ", &filler, "12345", CanaryPosition::Start);
        let end = prompt("n: ", &filler, "12345", CanaryPosition::End);
        let mid = prompt("n: ", &filler, "12345", CanaryPosition::Middle);
        let at = |p: &str| p.find("The secret number is 12345. ").unwrap();
        assert_eq!(at(&start), 3);
        assert_eq!(at(&end), 3 + filler.len());
        assert_eq!(
            at(&mid),
            3 + FILLER.len() * 5,
            "a sentence boundary at the half"
        );
        for p in [&start, &mid, &end] {
            assert!(p.starts_with("n: ") && p.ends_with(QUESTION), "{p}");
            assert_eq!(
                p.len(),
                3 + filler.len() + statement("12345").len() + QUESTION.len()
            );
        }
    }

    #[test]
    fn facts_are_five_digits() {
        for _ in 0..100 {
            let f = fact();
            assert_eq!(f.len(), 5, "{f}");
            assert!(f.chars().all(|c| c.is_ascii_digit()) && !f.starts_with('0'));
        }
    }

    #[test]
    fn the_filler_has_no_digit() {
        assert!(!FILLER.chars().any(|c| c.is_ascii_digit()));
    }
}
