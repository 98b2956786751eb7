//! Positions in a spec's source text: where the YAML parser found each node, and where a
//! diagnostic points.

/// A position in the source: character index, 1-based line and 1-based column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// Index in characters from the start of the source.
    pub index: usize,
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub column: usize,
}

/// A range of source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// First character.
    pub start: Pos,
    /// One past the last character.
    pub end: Pos,
}

impl Span {
    /// An empty span at the start of the source.
    pub(crate) fn origin() -> Span {
        let start = Pos {
            index: 0,
            line: 1,
            column: 1,
        };
        Span { start, end: start }
    }
}
