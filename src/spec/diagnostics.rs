//! Spec errors as the user sees them: file, line, column, the offending text and a hint.

use std::fmt;

use super::yaml::Span;

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
    /// The full text of the source line, for rendering.
    pub source_line: String,
}

impl Diagnostic {
    /// A diagnostic at `span` in `source`.
    pub fn at(
        file: &str,
        source: &str,
        span: Span,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Diagnostic {
        let source_line = source
            .lines()
            .nth(span.start.line.saturating_sub(1))
            .unwrap_or("")
            .to_string();
        let len = span.end.index.saturating_sub(span.start.index);
        let snippet: String = source
            .chars()
            .skip(span.start.index)
            .take(len)
            .take_while(|c| *c != '\n' && *c != '\r')
            .collect();
        Diagnostic {
            file: file.to_string(),
            line: span.start.line,
            column: span.start.column,
            message: message.into(),
            snippet: snippet.trim_end().to_string(),
            hint,
            source_line,
        }
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
        writeln!(f, "{}", format!("{num} | {line}").trim_end())?;
        let width = self.snippet.chars().count().max(1);
        let indent = " ".repeat(self.column.saturating_sub(1));
        writeln!(f, "{pad} | {indent}{}", "^".repeat(width))?;
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
                message: message.into(),
                snippet: String::new(),
                hint,
                source_line: String::new(),
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

/// The closest candidate to `word` when it is plausibly a typo, for "did you mean" hints.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| format!("did you mean `{c}`?"))
}
