//! Spec errors as the user sees them: file, line, column, the offending text and a hint.

use std::fmt;

use super::span::Span;

/// Most diagnostics reported for one file; past this the rest are noise (and a generated file
/// with a mistake on each of 200,000 lines would otherwise build 200,000 of them).
pub const MAX_DIAGNOSTICS: usize = 100;

/// Most characters of a source line shown under a message. A longer line (a generated spec,
/// a 5 MB value on one line) is cut around the offending column, and a note says how many
/// bytes were left out, so an error never echoes a whole huge line. 200 is two lines of a
/// wide terminal: hand-written lines are shorter.
pub(crate) const MAX_SHOWN_LINE_CHARS: usize = 200;

/// Characters kept before the offending column when a line is cut: enough to show its key.
const SHOWN_BEFORE_COLUMN: usize = 40;

/// Most bytes of a value quoted inside a message or hint (`` `xxx…` is not a duration ``):
/// enough to recognise it, never the whole of a huge value.
pub(crate) const MAX_QUOTED_BYTES: usize = 60;

/// Most bytes of a message or a hint, after values are quoted (a message lists at most a few
/// names); a longer one is cut and says so.
pub(crate) const MAX_MESSAGE_BYTES: usize = 1024;

/// One problem in a spec file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file name as given.
    pub file: String,
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
    /// What is wrong, e.g. ``unknown field `concurency` ``.
    pub message: String,
    /// The offending text (first line of it).
    pub snippet: String,
    /// How to fix it, e.g. ``did you mean `concurrency`?``.
    pub hint: Option<String>,
    /// The source line, for rendering: all of it, or at most [`MAX_SHOWN_LINE_CHARS`]
    /// characters around the column when it is longer.
    pub source_line: String,
    /// Bytes of the line left out before `source_line` (0 when it starts the line).
    pub cut_before: usize,
    /// Bytes of the line left out after `source_line`.
    pub cut_after: usize,
}

impl Diagnostic {
    /// A diagnostic at `span` in `source`.
    pub(crate) fn at(
        file: &str,
        source: &str,
        span: Span,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Diagnostic {
        let line = nth_line(source, span.start.line.saturating_sub(1));
        let (cut_before, source_line, cut_after) = window(line, span.start.column);
        // The offending text on its line (a span over several lines shows its first), taken
        // from the line rather than by walking the whole source for each error.
        let len = span.end.index.saturating_sub(span.start.index);
        let snippet: String = line
            .chars()
            .skip(span.start.column.saturating_sub(1))
            .take(len.min(MAX_SHOWN_LINE_CHARS))
            .collect();
        Diagnostic {
            file: file.to_string(),
            line: span.start.line,
            column: span.start.column,
            message: cut_message(message.into()),
            snippet: snippet.trim_end().to_string(),
            hint: hint.map(cut_message),
            source_line: source_line.to_string(),
            cut_before,
            cut_after,
        }
    }
}

/// Line `n` (from 0) of `source`, as YAML counts lines: ended by `\n`, `\r\n` or a lone `\r`.
fn nth_line(source: &str, n: usize) -> &str {
    let bytes = source.as_bytes();
    let mut start = 0;
    let mut line = 0;
    for i in memchr::memchr2_iter(b'\n', b'\r', bytes) {
        if i < start {
            continue; // the `\n` of a `\r\n` already counted
        }
        if line == n {
            return &source[start..i];
        }
        line += 1;
        start = if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') {
            i + 2
        } else {
            i + 1
        };
    }
    if line == n { &source[start..] } else { "" }
}

/// The part of `line` shown for an error at `column` (from 1, in characters): the whole line
/// when it is short, else [`MAX_SHOWN_LINE_CHARS`] characters starting a little before the
/// column. Returns the bytes left out before, the part shown and the bytes left out after.
fn window(line: &str, column: usize) -> (usize, &str, usize) {
    // Only the characters up to the end of the window are counted: a long line is not walked.
    let mut chars = line.char_indices().map(|(i, _)| i).chain([line.len()]);
    if line.len() <= MAX_SHOWN_LINE_CHARS || chars.clone().nth(MAX_SHOWN_LINE_CHARS + 1).is_none() {
        return (0, line, 0);
    }
    let first = column.saturating_sub(1).saturating_sub(SHOWN_BEFORE_COLUMN);
    let start = chars.nth(first).unwrap_or(line.len());
    let rest = &line[start..];
    let end = rest
        .char_indices()
        .nth(MAX_SHOWN_LINE_CHARS)
        .map_or(rest.len(), |(i, _)| i);
    (start, &rest[..end], rest.len() - end)
}

/// A message or hint of at most [`MAX_MESSAGE_BYTES`], saying how much was cut.
fn cut_message(text: String) -> String {
    if text.len() <= MAX_MESSAGE_BYTES {
        return text;
    }
    let kept = crate::text::floor_char_boundary(&text, MAX_MESSAGE_BYTES);
    format!(
        "{}… ({} more bytes not shown)",
        &text[..kept],
        text.len() - kept
    )
}

/// A value as quoted inside a message: at most [`MAX_QUOTED_BYTES`], `…` when cut.
pub(crate) fn quoted(value: &str) -> String {
    crate::text::truncate(value, MAX_QUOTED_BYTES)
}

impl Diagnostic {
    /// The diagnostic rendered as a warning's body: like [`fmt::Display`] without its
    /// `error: ` (the logger writes `warning: ` in front).
    pub fn as_warning(&self) -> String {
        let text = self.to_string();
        text.strip_prefix("error: ").unwrap_or(&text).to_string()
    }
}

impl fmt::Display for Diagnostic {
    /// Renders like rustc: message, location, the source line with the text underlined, hint.
    /// No colour, so output is stable in tests and logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let num = self.line.to_string();
        let pad = " ".repeat(num.len());
        writeln!(f, "error: {}", self.message)?;
        writeln!(f, "{pad}--> {}:{}:{}", self.file, self.line, self.column)?;
        writeln!(f, "{pad} |")?;
        let line = self.source_line.replace('\t', " ");
        let before = if self.cut_before > 0 { "…" } else { "" };
        let after = if self.cut_after > 0 { "…" } else { "" };
        writeln!(f, "{}", format!("{num} | {before}{line}{after}").trim_end())?;
        // The column counts characters of the whole line; the shown part may start later.
        let skipped = if self.cut_before > 0 {
            self.column
                .saturating_sub(1)
                .saturating_sub(SHOWN_BEFORE_COLUMN)
        } else {
            0
        };
        // At most just past the shown text (a column the line lookup disagrees with, as with
        // lone `\r` line ends, must not indent without bound).
        let shown = line.chars().count();
        let offset = (self.column.saturating_sub(1) - skipped).min(shown);
        let room = shown.saturating_sub(offset);
        let width = self.snippet.chars().count().min(room).max(1);
        let indent = " ".repeat(offset + before.chars().count());
        writeln!(f, "{pad} | {indent}{}", "^".repeat(width))?;
        if self.cut_before + self.cut_after > 0 {
            writeln!(
                f,
                "{pad} = note: line {} is {} bytes long; {} of them are not shown",
                self.line,
                self.cut_before + self.source_line.len() + self.cut_after,
                self.cut_before + self.cut_after
            )?;
        }
        if let Some(hint) = &self.hint {
            writeln!(f, "{pad} = hint: {hint}")?;
        }
        Ok(())
    }
}

/// Every problem found in a spec file, in source order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecErrors {
    /// The problems, sorted by line and column.
    pub diagnostics: Vec<Diagnostic>,
}

impl SpecErrors {
    /// Sorts by position and drops exact duplicates (the same error found at several points).
    pub fn new(mut diagnostics: Vec<Diagnostic>) -> SpecErrors {
        diagnostics
            .sort_by(|a, b| (a.line, a.column, &a.message).cmp(&(b.line, b.column, &b.message)));
        diagnostics
            .dedup_by(|a, b| a.line == b.line && a.column == b.column && a.message == b.message);
        SpecErrors { diagnostics }
    }

    /// A single error not tied to a position in the file (e.g. it cannot be read).
    pub fn file_error(file: &str, message: impl Into<String>, hint: Option<String>) -> SpecErrors {
        SpecErrors {
            diagnostics: vec![Diagnostic {
                file: file.to_string(),
                line: 1,
                column: 1,
                message: cut_message(message.into()),
                snippet: String::new(),
                hint: hint.map(cut_message),
                source_line: String::new(),
                cut_before: 0,
                cut_after: 0,
            }],
        }
    }
}

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        let n = self.diagnostics.len();
        if n > 1 {
            writeln!(f, "\n{n} errors")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecErrors {}

/// The closest candidate to `word` when it is plausibly a typo, for "did you mean" hints. A
/// word that is a candidate's initials (`oom` for `out-of-memory`) names that candidate first:
/// by spelling alone `oom` is nearer `oom-killed`, which means something else.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let candidates: Vec<&str> = candidates.into_iter().collect();
    if let Some(c) = candidates
        .iter()
        .find(|c| word.len() >= 2 && initials(c).eq_ignore_ascii_case(word))
    {
        return Some(format!("did you mean `{c}`?"));
    }
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!("did you mean `{c}`?"))
}

/// The first letter of each word of a `kebab-case` or `snake_case` name (`oom` for
/// `out-of-memory`); empty for a one-word name, whose initial is no abbreviation.
fn initials(name: &str) -> String {
    let words: Vec<&str> = name.split(['-', '_']).filter(|w| !w.is_empty()).collect();
    if words.len() < 2 {
        return String::new();
    }
    words.iter().filter_map(|w| w.chars().next()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initials_name_their_candidate_before_spelling_does() {
        let causes = ["out-of-memory", "oom-killed", "port-in-use"];
        assert_eq!(
            did_you_mean("oom", causes).as_deref(),
            Some("did you mean `out-of-memory`?")
        );
        assert_eq!(
            did_you_mean("OOM", causes).as_deref(),
            Some("did you mean `out-of-memory`?")
        );
        assert_eq!(
            did_you_mean("oom-kiled", causes).as_deref(),
            Some("did you mean `oom-killed`?")
        );
        assert_eq!(initials("concurrency"), "");
    }

    #[test]
    fn lines_end_as_yaml_ends_them() {
        let source = "a\nb\r\nc\rd";
        let lines: Vec<&str> = (0..5).map(|n| nth_line(source, n)).collect();
        assert_eq!(lines, ["a", "b", "c", "d", ""]);
        assert_eq!(nth_line("a\n", 1), "");
    }

    #[test]
    fn short_lines_are_shown_whole() {
        assert_eq!(window("a: 1", 4), (0, "a: 1", 0));
        let line = "é".repeat(MAX_SHOWN_LINE_CHARS);
        assert_eq!(window(&line, 3), (0, line.as_str(), 0));
    }

    #[test]
    fn long_lines_are_cut_around_the_column() {
        let line = format!("key: {}", "é".repeat(1000));
        let (before, shown, after) = window(&line, 500);
        assert_eq!(shown.chars().count(), MAX_SHOWN_LINE_CHARS);
        assert_eq!(before, 5 + 2 * (499 - SHOWN_BEFORE_COLUMN - 5));
        assert_eq!(before + shown.len() + after, line.len());
        // At the start: the key stays in view.
        let (before, shown, _) = window(&line, 1);
        assert_eq!(before, 0);
        assert!(shown.starts_with("key: "));
        // Past the end: nothing to show, nothing panics.
        let (before, shown, after) = window(&line, 5000);
        assert_eq!((before, shown, after), (line.len(), "", 0));
    }

    #[test]
    fn rendering_a_cut_line_points_at_the_column() {
        let source = format!(
            "a: {}
",
            "x".repeat(10_000)
        );
        let span = Span {
            start: crate::spec::yaml::Pos {
                index: 1003,
                line: 1,
                column: 1004,
            },
            end: crate::spec::yaml::Pos {
                index: 1010,
                line: 1,
                column: 1011,
            },
        };
        let d = Diagnostic::at("f.yaml", &source, span, "m".repeat(5000), None);
        assert!(
            d.message.len() < MAX_MESSAGE_BYTES + 50,
            "{}",
            d.message.len()
        );
        let text = d.to_string();
        let lines: Vec<&str> = text.lines().collect();
        let caret = lines[4].find('^').unwrap();
        // Under `1 | …`, past the 40 characters shown before the column.
        assert_eq!(caret, "  | ".len() + 1 + SHOWN_BEFORE_COLUMN, "{text}");
        assert_eq!(lines[4].matches('^').count(), 7);
        assert!(lines[5].contains("10003 bytes long"), "{text}");
    }
}
