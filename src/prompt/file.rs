//! Prompts read from files: the budgets every prompt input is held to (bytes per file, prompts
//! per file, bytes per prompt), the errors of every prompt source, and the bounded read the
//! other inputs (length files, datasets) share: only a regular file, never more than the limit.

use std::path::{Path, PathBuf};

/// Largest prompt file read, in bytes. Prompt files hold datasets of real prompts
/// (ShareGPT's 90,000 conversations are about 40 MB as a JSON list of first turns); past this
/// the file is not read at all, so a 2 GB file or `/dev/zero` cannot exhaust memory.
pub const MAX_PROMPT_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Most prompts one file may hold. Every prompt is kept in memory for the whole run and a
/// point sends at most `requests` x `repeat` of them, so more is never used; 64 MiB of
/// one-character lines would otherwise be 32 million strings (about 2 GB).
pub const MAX_PROMPTS: usize = 100_000;

/// Longest single prompt, in bytes: about two million tokens, far past any model's context
/// (the longest servebench has run is 200k tokens). Each request in flight holds a copy of
/// its prompt, so one huge line times the concurrency would be a huge amount of memory.
pub const MAX_PROMPT_BYTES: usize = 8 * 1024 * 1024;

/// Why a spec's prompts cannot be had. The texts name the file or field to fix; `run` checks
/// every point's prompts before anything starts, and a point that fails here is abandoned.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// A `repeat` prompt with nothing to repeat.
    #[error("workload.prompt.text is empty: give a sentence to repeat")]
    EmptyText,
    /// A `file` prompt whose file is missing or cannot be read.
    #[error("cannot read prompt file {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `file` prompt that names a directory, a FIFO, a device or a socket: reading one could
    /// block forever or never end.
    #[error(
        "prompt file {} is {kind}, not a regular file: give a file of prompts (one per line, or a JSON list of strings)",
        .path.display()
    )]
    NotAFile { path: PathBuf, kind: &'static str },
    /// A prompt file larger than [`MAX_PROMPT_FILE_BYTES`].
    #[error(
        "prompt file {} is {bytes} bytes; prompt files are limited to {MAX_PROMPT_FILE_BYTES} bytes (64 MiB): use a sample of the prompts",
        .path.display()
    )]
    TooLarge { path: PathBuf, bytes: u64 },
    /// A prompt file with more than [`MAX_PROMPTS`] prompts.
    #[error(
        "prompt file {} has more than {MAX_PROMPTS} prompts, the limit: a run uses at most requests x repeat of them per point",
        .path.display()
    )]
    TooMany { path: PathBuf },
    /// One prompt longer than [`MAX_PROMPT_BYTES`].
    #[error(
        "prompt {number} of {} is {bytes} bytes; one prompt is limited to {MAX_PROMPT_BYTES} bytes (8 MiB, about two million tokens)",
        .path.display()
    )]
    PromptTooLong {
        path: PathBuf,
        /// From 1, in file order.
        number: usize,
        bytes: usize,
    },
    /// A `.json` prompt file that is not a list of strings.
    #[error("prompt file {} is not a JSON list of strings: {source}", .path.display())]
    NotAList {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A prompt file with no prompt in it (empty, or blank lines only).
    #[error("prompt file {} has no prompts", .path.display())]
    Empty { path: PathBuf },
    /// A length distribution that cannot be drawn from.
    #[error("bad length distribution: {0}")]
    BadDistribution(String),
    /// A line of a lengths file that is not a whole number of tokens.
    #[error(
        "{}:{line}:{column}: `{text}` is not a length: write one whole number of tokens (1 to 10000000) per line",
        .path.display()
    )]
    BadLength {
        path: PathBuf,
        line: usize,
        column: usize,
        text: String,
    },
    /// A dataset entry that cannot be read.
    #[error("{}:{line}:{column}: {message}", .path.display())]
    DatasetLine {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A mix whose weights do not add up to a positive number.
    #[error("workload.mix weights must be positive numbers with a positive sum")]
    BadWeights,
}

/// Reads prompts from a file: a JSON list of strings (`.json`) or one prompt per line.
/// Only a regular file is read, at most [`MAX_PROMPT_FILE_BYTES`] of it, holding at most
/// [`MAX_PROMPTS`] prompts of at most [`MAX_PROMPT_BYTES`] each; a FIFO or a device is refused
/// before it is opened, and opening never blocks.
pub fn load_prompt_file(path: &Path) -> Result<Vec<String>, PromptError> {
    let text = read_bounded(path)?;
    let mut prompts: Vec<String> = if path.extension().is_some_and(|e| e == "json") {
        json_prompts(path, &text)?
    } else {
        let mut prompts = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            if prompts.len() == MAX_PROMPTS {
                return Err(PromptError::TooMany {
                    path: path.to_path_buf(),
                });
            }
            prompts.push(line.to_string());
        }
        prompts
    };
    if let Some(i) = prompts.iter().position(|p| p.len() > MAX_PROMPT_BYTES) {
        return Err(PromptError::PromptTooLong {
            path: path.to_path_buf(),
            number: i + 1,
            bytes: prompts[i].len(),
        });
    }
    if prompts.is_empty() {
        return Err(PromptError::Empty {
            path: path.to_path_buf(),
        });
    }
    prompts.shrink_to_fit();
    Ok(prompts)
}

/// The file's text, if it is a regular file of at most [`MAX_PROMPT_FILE_BYTES`].
pub(super) fn read_bounded(path: &Path) -> Result<String, PromptError> {
    use servebench_model::input_file::{self, Refused};
    use std::io::Read;

    let read_err = |source| PromptError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file =
        input_file::open_regular(path, MAX_PROMPT_FILE_BYTES).map_err(|refused| match refused {
            Refused::Io(source) => read_err(source),
            Refused::NotAFile(kind) => PromptError::NotAFile {
                path: path.to_path_buf(),
                kind,
            },
            Refused::TooLarge(bytes) => PromptError::TooLarge {
                path: path.to_path_buf(),
                bytes,
            },
        })?;
    let mut bytes = Vec::new();
    file.take(MAX_PROMPT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_PROMPT_FILE_BYTES {
        // It grew while being read.
        return Err(PromptError::TooLarge {
            path: path.to_path_buf(),
            bytes: bytes.len() as u64,
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        read_err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        ))
    })
}

/// A JSON list of strings, refused as soon as it holds more than [`MAX_PROMPTS`], so a list
/// of millions of empty strings is never built.
fn json_prompts(path: &Path, text: &str) -> Result<Vec<String>, PromptError> {
    use serde::de::{DeserializeSeed, Error as _, SeqAccess, Visitor};

    struct Bounded<'a>(&'a std::cell::Cell<bool>);
    impl<'de> DeserializeSeed<'de> for Bounded<'_> {
        type Value = Vec<String>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
            d.deserialize_seq(self)
        }
    }
    impl<'de> Visitor<'de> for Bounded<'_> {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of strings")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(s) = seq.next_element::<String>()? {
                if out.len() == MAX_PROMPTS {
                    self.0.set(true);
                    return Err(A::Error::custom("too many prompts"));
                }
                out.push(s);
            }
            Ok(out)
        }
    }

    let too_many = std::cell::Cell::new(false);
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = Bounded(&too_many)
        .deserialize(&mut de)
        .and_then(|list| de.end().map(|()| list));
    parsed.map_err(|source| {
        if too_many.get() {
            PromptError::TooMany {
                path: path.to_path_buf(),
            }
        } else {
            PromptError::NotAList {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_file_forms() {
        let dir = tempfile::tempdir().unwrap();
        let txt = dir.path().join("p.txt");
        std::fs::write(&txt, "one\n\ntwo\n").unwrap();
        assert_eq!(load_prompt_file(&txt).unwrap(), vec!["one", "two"]);
        let json = dir.path().join("p.json");
        std::fs::write(&json, r#"["a b", "c"]"#).unwrap();
        assert_eq!(load_prompt_file(&json).unwrap(), vec!["a b", "c"]);
        std::fs::write(&json, r#"{"a": 1}"#).unwrap();
        let e = load_prompt_file(&json).unwrap_err();
        assert!(matches!(e, PromptError::NotAList { .. }), "{e:?}");
        assert!(e.to_string().contains("JSON list"), "{e}");
        let e = load_prompt_file(&dir.path().join("missing.txt")).unwrap_err();
        assert!(matches!(e, PromptError::Read { .. }), "{e:?}");
        assert!(e.to_string().starts_with("cannot read prompt file "), "{e}");
        std::fs::write(&txt, "\n  \n").unwrap();
        let e = load_prompt_file(&txt).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("prompt file {} has no prompts", txt.display())
        );
    }

    #[test]
    fn prompt_files_must_be_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        // A FIFO with no writer: opening it to read would block forever.
        let fifo = dir.path().join("p.fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let e = load_prompt_file(&fifo).unwrap_err();
        assert!(
            matches!(e, PromptError::NotAFile { kind, .. } if kind.contains("FIFO")),
            "{e:?}"
        );
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = load_prompt_file(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("is a character device"), "{e}");
        let e = load_prompt_file(dir.path()).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
    }

    #[test]
    fn prompt_files_are_read_within_their_budgets() {
        let dir = tempfile::tempdir().unwrap();
        // Sparse: the size is checked before anything is read.
        let big = dir.path().join("big.txt");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_PROMPT_FILE_BYTES + 1).unwrap();
        let e = load_prompt_file(&big).unwrap_err();
        assert!(matches!(e, PromptError::TooLarge { .. }), "{e:?}");
        assert!(
            e.to_string().contains("limited to 67108864 bytes (64 MiB)"),
            "{e}"
        );

        let many = dir.path().join("many.txt");
        std::fs::write(&many, "p\n".repeat(MAX_PROMPTS + 1)).unwrap();
        let e = load_prompt_file(&many).unwrap_err();
        assert!(matches!(e, PromptError::TooMany { .. }), "{e:?}");
        std::fs::write(&many, "p\n".repeat(MAX_PROMPTS)).unwrap();
        assert_eq!(load_prompt_file(&many).unwrap().len(), MAX_PROMPTS);

        let json = dir.path().join("many.json");
        let list = vec!["\"\""; MAX_PROMPTS + 1].join(",");
        std::fs::write(&json, format!("[{list}]")).unwrap();
        let e = load_prompt_file(&json).unwrap_err();
        assert!(matches!(e, PromptError::TooMany { .. }), "{e:?}");

        let long = dir.path().join("long.txt");
        std::fs::write(
            &long,
            format!("short\n{}\n", "x".repeat(MAX_PROMPT_BYTES + 1)),
        )
        .unwrap();
        let e = load_prompt_file(&long).unwrap_err();
        assert!(
            matches!(e, PromptError::PromptTooLong { number: 2, .. }),
            "{e:?}"
        );

        let binary = dir.path().join("bin.txt");
        std::fs::write(&binary, [b'a', 0xff]).unwrap();
        let e = load_prompt_file(&binary).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }
}
