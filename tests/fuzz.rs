//! A bounded, deterministic fuzz run in the normal test suite: every file of the checked-in
//! corpus (`fuzz/corpus/<target>/`) through its target, then a fixed number of seeded
//! mutations of them (byte flips, inserted tokens, splices, truncations, repeats). The targets
//! are cargo-fuzz's own (`fuzz/src/lib.rs`, included here), so a longer libFuzzer run
//! (docs/guide/limits.md, "Fuzzing") checks the same invariants.
//!
//! A failing input is written to `target/fuzz-failures/<target>-<n>`; copy it into the corpus
//! once fixed.

#[path = "../fuzz/src/lib.rs"]
mod harness;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use harness::{Rng, TARGETS};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus");

/// Mutated inputs per target; with the corpus replay, a few seconds in a debug build.
fn mutations(target: &str) -> usize {
    match target {
        // Each load checks a schema.
        "spec_load" => 300,
        // Each input is ten bodies (every format), some of them cumulative.
        "stream_differential" => 300,
        "sse_framer" => 20_000,
        _ => 1500,
    }
}

/// Inputs stay small: long inputs are the budgets' tests, not the fuzzer's.
const MAX_INPUT: usize = 16 * 1024;

/// Bytes that mean something to one of the parsers.
const TOKENS: &[&[u8]] = &[
    b"\n",
    b"\r\n",
    b"\n\n",
    b"data: ",
    b"data:",
    b": ",
    b"[DONE]",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\u00e9",
    b"\\ud800",
    b"&a ",
    b"*a",
    b"{{ ctx }}",
    b"{%",
    b"!!str ",
    b"---\n",
    b"? ",
    b"- ",
    b"  ",
    b"\t",
    b"\"meta_info\":",
    b"\"error\"",
    b"\"usage\":",
    b"null",
    b"-1",
    b"18446744073709551616",
    b"1e999",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
];

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(CORPUS).join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: empty corpus", dir.display());
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).expect("corpus file");
            (p, bytes)
        })
        .collect()
}

/// One to four mutations of `input`, drawing splices from `others`.
fn mutate(input: &[u8], others: &[(PathBuf, Vec<u8>)], rng: &mut Rng) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(out.len() + 1);
        match rng.below(7) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = rng.next_u64() as u8;
            }
            2 => {
                let token = TOKENS[rng.below(TOKENS.len())];
                out.splice(at..at, token.iter().copied());
            }
            3 => {
                let other = &others[rng.below(others.len())].1;
                let from = rng.below(other.len() + 1);
                let len = rng.below(other.len() - from + 1).min(256);
                out.splice(at..at, other[from..from + len].iter().copied());
            }
            4 => out.truncate(at),
            5 if !out.is_empty() => {
                let from = rng.below(out.len());
                let len = rng.below(out.len() - from + 1).min(64);
                let piece = out[from..from + len].repeat(rng.below(8) + 1);
                out.splice(at..at, piece);
            }
            _ => {
                let end = (at + rng.below(32)).min(out.len());
                out.drain(at..end);
            }
        }
    }
    out.truncate(MAX_INPUT);
    out
}

/// Runs `input` through `target`; on a panic, saves the input and fails with its path.
fn check(name: &str, target: fn(&[u8]), input: &[u8], what: &str) {
    if catch_unwind(AssertUnwindSafe(|| target(input))).is_ok() {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!(
        "{name}-{}",
        harness::Rng::from_bytes(input).next_u64()
    ));
    let _ = std::fs::write(&path, input);
    panic!(
        "{name}: {what} broke an invariant (the panic is above); input saved to {}",
        path.display()
    );
}

fn run_target(name: &str) {
    let target = TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .expect("a target");
    let files = corpus(name);
    for (path, bytes) in &files {
        check(name, target, bytes, &path.display().to_string());
    }
    // A fixed seed per target: the same inputs on every run, on every machine.
    let mut rng = Rng::from_bytes(name.as_bytes());
    for i in 0..mutations(name) {
        let (_, base) = &files[rng.below(files.len())];
        let input = mutate(base, &files, &mut rng);
        check(name, target, &input, &format!("mutation {i}"));
    }
}

#[test]
fn spec_loader_survives_its_corpus_and_mutations() {
    run_target("spec_load");
}

#[test]
fn sse_framer_is_independent_of_read_boundaries() {
    run_target("sse_framer");
}

#[test]
fn stream_parsers_survive_any_body_for_every_api() {
    run_target("stream_parse");
}

#[test]
fn every_api_and_parse_path_agrees_on_one_stream() {
    run_target("stream_differential");
}

#[test]
fn every_target_has_a_corpus_and_a_test() {
    for (name, _) in TARGETS {
        assert!(!corpus(name).is_empty());
    }
    let folders: Vec<String> = std::fs::read_dir(CORPUS)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for f in &folders {
        assert!(
            TARGETS.iter().any(|(n, _)| n == f),
            "fuzz/corpus/{f} has no target"
        );
    }
}

/// The differential target's renderings, checked once by hand: each API's body parses to the
/// stream it was rendered from (so a disagreement is the parser's, not the renderer's).
#[test]
fn rendered_streams_look_like_each_api() {
    use harness::{Encoding, Format, Logical, render};
    use servebench_model::spec::types::Api;
    let s = Logical {
        chunks: vec![(" a".into(), 2), ("é".into(), 1)],
        prompt_tokens: 9,
        finish: "length",
    };
    let native = render(
        &s,
        Format {
            api: Api::SglangGenerate,
            cumulative: true,
            encoding: Encoding::Plain,
        },
    );
    let text = String::from_utf8(native).unwrap();
    assert!(
        text.starts_with("data: {\"text\":\" a\",\"output_ids\":[1002,1003],\"meta_info\":{"),
        "{text}"
    );
    assert!(
        text.contains("\"finish_reason\":{\"type\":\"length\"}"),
        "{text}"
    );
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let chat = render(
        &s,
        Format {
            api: Api::OpenaiChat,
            cumulative: false,
            encoding: Encoding::Escaped,
        },
    );
    let text = String::from_utf8(chat).unwrap();
    assert!(text.contains("\"delta\":{\"content\":\"é\"}"), "{text}");
    assert!(text.contains("\"x\":\"\\u0041\"}"), "{text}");
}
