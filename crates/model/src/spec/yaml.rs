//! YAML text to a JSON value plus a map from JSON pointer to source position.
//!
//! Built directly on `saphyr-parser` events so that input budgets (document size, nesting depth,
//! alias expansion) are enforced while building, before any large structure exists, and so that
//! every node keeps its position for diagnostics.

use std::borrow::Cow;
use std::collections::HashMap;

use saphyr::Scalar;
use saphyr_parser::{Event, Parser, ScalarStyle, Span as RawSpan, Tag};
use serde_json::{Map, Number, Value};

pub(crate) use super::span::{Pos, Span};

/// Largest accepted document, in bytes.
pub(crate) const MAX_BYTES: usize = 8 * 1024 * 1024;
/// Deepest accepted nesting of mappings and sequences.
pub(crate) const MAX_DEPTH: usize = 64;
/// Most nodes in the document once aliases are expanded (guards against alias bombs).
pub(crate) const MAX_NODES: usize = 200_000;
/// Most aliases (`*name`) in one document.
pub(crate) const MAX_ALIASES: usize = 1_000;
/// Most bytes of text the parsed document may hold once aliases are expanded: its keys, its
/// values and the paths that locate each written node for diagnostics. Four times
/// [`MAX_BYTES`], so any spec without aliases fits (its text is at most `MAX_BYTES`, and its
/// paths are short); the node budget alone let a 100 KB file of string aliases expand to
/// gigabytes (every node a 90 KB string), and a 4 MB key repeated in the path of every node
/// below it do the same.
pub(crate) const MAX_EXPANDED_BYTES: usize = 4 * MAX_BYTES;

/// A saphyr span as a [`Span`]: columns from 1, as diagnostics count them.
fn span_of(span: RawSpan) -> Span {
    let pos = |m: saphyr_parser::Marker| Pos {
        index: m.index(),
        line: m.line(),
        column: m.col() + 1,
    };
    Span {
        start: pos(span.start),
        end: pos(span.end),
    }
}

/// Where a node was written: its value and, for mapping entries, its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// The value's text.
    pub value: Span,
    /// The key's text, when the node is a mapping entry.
    pub key: Option<Span>,
}

/// A parsed document.
#[derive(Debug, Clone)]
pub struct Document {
    /// The document as JSON.
    pub value: Value,
    /// JSON pointer (`/server/args/tp`) to source position. Nodes reached through an alias are
    /// not listed: look them up with [`Document::locate`], which falls back to the nearest
    /// listed ancestor.
    pub locs: HashMap<String, Loc>,
}

impl Document {
    /// The position of the node at `pointer`, or of its nearest written ancestor.
    pub(crate) fn locate(&self, pointer: &str) -> Loc {
        let mut p = pointer;
        loop {
            if let Some(loc) = self.locs.get(p) {
                return *loc;
            }
            match p.rfind('/') {
                Some(i) => p = &p[..i],
                None => {
                    return Loc {
                        value: Span::origin(),
                        key: None,
                    };
                }
            }
        }
    }
}

/// A YAML-level problem: syntax, budgets, duplicate keys, unsupported features.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlError {
    /// Where.
    pub span: Span,
    /// What went wrong.
    pub message: String,
    /// How to fix it, when known.
    pub hint: Option<String>,
}

impl YamlError {
    fn new(span: Span, message: impl Into<String>, hint: Option<&str>) -> YamlError {
        YamlError {
            span,
            message: message.into(),
            hint: hint.map(str::to_owned),
        }
    }
}

/// Appends one reference token to a JSON pointer, escaping `~` and `/`.
pub(crate) fn push_pointer(base: &str, token: &str) -> String {
    format!("{base}/{}", token.replace('~', "~0").replace('/', "~1"))
}

/// Parses a single YAML document. Errors that stop parsing return at once; duplicate keys are
/// collected and returned together.
pub fn parse(source: &str) -> Result<Document, Vec<YamlError>> {
    if source.len() > MAX_BYTES {
        return Err(vec![YamlError::new(
            Span::origin(),
            format!(
                "the file is {} bytes; specs are limited to {MAX_BYTES} bytes ({})",
                source.len(),
                mib(MAX_BYTES)
            ),
            Some(
                "a spec should be a few kilobytes; put prompts in a separate file (`prompt: { kind: file }`)",
            ),
        )]);
    }
    let mut builder = Builder::default();
    for event in Parser::new_from_str(source) {
        let result = match event {
            Ok((event, span)) => builder.on_event(event, span_of(span)),
            Err(e) => {
                let m = e.marker();
                let at = Pos {
                    index: m.index(),
                    line: m.line(),
                    column: m.col() + 1,
                };
                Err(syntax_error(source, at, e.info(), &builder.stack))
            }
        };
        if let Err(e) = result {
            builder.errors.push(e);
            return Err(builder.errors);
        }
    }
    if !builder.errors.is_empty() {
        return Err(builder.errors);
    }
    match builder.root {
        Some(value) => Ok(Document {
            value,
            locs: builder.locs,
        }),
        None => Err(vec![YamlError::new(
            Span::origin(),
            "the file is empty",
            Some("a spec is a mapping with at least `name`, `server` and `workload`"),
        )]),
    }
}

/// A collection being built.
enum Frame {
    Seq {
        pointer: String,
        anchor: usize,
        start: Span,
        items: Vec<Value>,
    },
    Map {
        pointer: String,
        anchor: usize,
        start: Span,
        entries: Map<String, Value>,
        key: Option<(String, Span)>,
    },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    root: Option<Value>,
    locs: HashMap<String, Loc>,
    /// Anchor id to the finished value, its node count and its bytes.
    anchors: HashMap<usize, Anchored>,
    nodes: usize,
    /// Bytes of text so far, aliases expanded (see [`MAX_EXPANDED_BYTES`]).
    bytes: usize,
    aliases: usize,
    documents: usize,
    errors: Vec<YamlError>,
    /// Node count and bytes at the start of each open collection, to size anchored subtrees.
    counts_at_start: Vec<(usize, usize)>,
}

/// An anchored value and what repeating it costs.
#[derive(Clone)]
struct Anchored {
    value: Value,
    nodes: usize,
    bytes: usize,
}

impl Builder {
    fn on_event(&mut self, event: Event<'_>, span: Span) -> Result<(), YamlError> {
        match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => Ok(()),
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(YamlError::new(
                        span,
                        "more than one YAML document in the file",
                        Some(
                            "a spec file holds one document; remove the `---` separator or split the file",
                        ),
                    ));
                }
                Ok(())
            }
            Event::Scalar(text, style, anchor, tag) => {
                self.on_scalar(text, style, anchor, tag, span)
            }
            Event::Alias(id) => self.on_alias(id, span),
            Event::SequenceStart(..) | Event::MappingStart(..) if self.expecting_key() => {
                Err(YamlError::new(
                    span,
                    "mapping keys must be plain strings",
                    Some("write the key as text, e.g. `name:`"),
                ))
            }
            Event::SequenceStart(anchor, tag) => {
                if let Some(tag) = &tag {
                    check_tag(tag, span)?;
                }
                let pointer = self.child_pointer();
                self.open(
                    Frame::Seq {
                        pointer,
                        anchor,
                        start: span,
                        items: Vec::new(),
                    },
                    span,
                )
            }
            Event::MappingStart(anchor, tag) => {
                if let Some(tag) = &tag {
                    check_tag(tag, span)?;
                }
                let pointer = self.child_pointer();
                self.open(
                    Frame::Map {
                        pointer,
                        anchor,
                        start: span,
                        entries: Map::new(),
                        key: None,
                    },
                    span,
                )
            }
            Event::SequenceEnd | Event::MappingEnd => self.close(span),
        }
    }

    /// A scalar: the key of the open mapping's next entry, or a value.
    fn on_scalar(
        &mut self,
        text: Cow<'_, str>,
        style: ScalarStyle,
        anchor: usize,
        tag: Option<Cow<'_, Tag>>,
        span: Span,
    ) -> Result<(), YamlError> {
        if self.expecting_key() {
            if let Some(tag) = &tag {
                check_tag(tag, span)?;
            }
            self.count_bytes(text.len(), span)?;
            return self.push_key(text.into_owned(), span);
        }
        let bytes = text.len();
        self.count_bytes(bytes, span)?;
        let value = scalar_value(text, style, tag, span)?;
        self.count_nodes(1, span)?;
        self.finish_node(value, span, anchor, 1, bytes)
    }

    /// An alias: its anchor's value copied, once the copy fits the budgets.
    fn on_alias(&mut self, id: usize, span: Span) -> Result<(), YamlError> {
        if self.expecting_key() {
            return Err(YamlError::new(
                span,
                "an alias cannot be a mapping key",
                None,
            ));
        }
        self.aliases += 1;
        if self.aliases > MAX_ALIASES {
            return Err(budget(span, format!("more than {MAX_ALIASES} aliases")));
        }
        let Some(anchored) = self.anchors.get(&id) else {
            return Err(YamlError::new(span, "alias to an unknown anchor", None));
        };
        let (nodes, bytes) = (anchored.nodes, anchored.bytes);
        // Both budgets are checked before the value is copied.
        self.count_nodes(nodes, span)?;
        self.count_bytes(bytes, span)?;
        let value = self.anchors[&id].value.clone();
        self.finish_node(value, span, 0, nodes, bytes)
    }

    /// The end of a sequence or mapping (at `span`): the collection becomes a node of its
    /// parent, spanning from its start.
    fn close(&mut self, span: Span) -> Result<(), YamlError> {
        let (start_count, start_bytes) = self.counts_at_start.pop().unwrap_or((0, 0));
        let Some(frame) = self.stack.pop() else {
            return Ok(());
        };
        let (value, start, anchor) = match frame {
            Frame::Seq {
                items,
                start,
                anchor,
                ..
            } => (Value::Array(items), start, anchor),
            Frame::Map {
                entries,
                start,
                anchor,
                ..
            } => (Value::Object(entries), start, anchor),
        };
        let whole = Span {
            start: start.start,
            end: span.end.max_by_index(start.end),
        };
        self.count_nodes(1, span)?;
        let count = self.nodes - start_count;
        let bytes = self.bytes - start_bytes;
        self.finish_node(value, whole, anchor, count, bytes)
    }

    fn expecting_key(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Map { key: None, .. }))
    }

    fn push_key(&mut self, key: String, span: Span) -> Result<(), YamlError> {
        if let Some(Frame::Map { key: slot, .. }) = self.stack.last_mut() {
            *slot = Some((key, span));
        }
        Ok(())
    }

    /// The pointer of the node about to start.
    fn child_pointer(&self) -> String {
        match self.stack.last() {
            None => String::new(),
            Some(Frame::Seq { pointer, items, .. }) => {
                push_pointer(pointer, &items.len().to_string())
            }
            Some(Frame::Map { pointer, key, .. }) => {
                push_pointer(pointer, key.as_ref().map(|(k, _)| k.as_str()).unwrap_or(""))
            }
        }
    }

    fn open(&mut self, frame: Frame, span: Span) -> Result<(), YamlError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(budget(
                span,
                format!("nesting deeper than {MAX_DEPTH} levels"),
            ));
        }
        self.stack.push(frame);
        self.counts_at_start.push((self.nodes, self.bytes));
        Ok(())
    }

    fn count_nodes(&mut self, n: usize, span: Span) -> Result<(), YamlError> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes > MAX_NODES {
            return Err(budget(
                span,
                format!("more than {MAX_NODES} values once aliases are expanded"),
            ));
        }
        Ok(())
    }

    fn count_bytes(&mut self, n: usize, span: Span) -> Result<(), YamlError> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > MAX_EXPANDED_BYTES {
            return Err(budget(
                span,
                format!(
                    "more than {MAX_EXPANDED_BYTES} bytes ({}) of keys and values once aliases are expanded",
                    mib(MAX_EXPANDED_BYTES)
                ),
            ));
        }
        Ok(())
    }

    /// Places a finished node into its parent (or as the root) and records where it was written.
    fn finish_node(
        &mut self,
        value: Value,
        span: Span,
        anchor: usize,
        count: usize,
        bytes: usize,
    ) -> Result<(), YamlError> {
        if anchor != 0 {
            self.anchors.insert(
                anchor,
                Anchored {
                    value: value.clone(),
                    nodes: count,
                    bytes,
                },
            );
        }
        let pointer = self.child_pointer();
        // The path is kept for every written node: it counts against the same budget.
        self.count_bytes(pointer.len(), span)?;
        match self.stack.last_mut() {
            None => {
                self.locs.insert(
                    pointer,
                    Loc {
                        value: span,
                        key: None,
                    },
                );
                self.root = Some(value);
            }
            Some(Frame::Seq { items, .. }) => {
                self.locs.insert(
                    pointer,
                    Loc {
                        value: span,
                        key: None,
                    },
                );
                items.push(value);
            }
            Some(Frame::Map { entries, key, .. }) => {
                let Some((k, key_span)) = key.take() else {
                    return Ok(());
                };
                if entries.contains_key(&k) {
                    let first = self
                        .locs
                        .get(&pointer)
                        .and_then(|l| l.key)
                        .map(|s| s.start.line);
                    let k = crate::text::truncate(&k, super::diagnostics::MAX_QUOTED_BYTES);
                    let hint =
                        first.map(|line| format!("`{k}` is first set on line {line}; keep one"));
                    let error = YamlError {
                        span: key_span,
                        message: format!("duplicate key `{k}`"),
                        hint,
                    };
                    // Past the report's limit more errors are noise: stop here.
                    if self.errors.len() + 1 >= super::diagnostics::MAX_DIAGNOSTICS {
                        return Err(error);
                    }
                    self.errors.push(error);
                    return Ok(());
                }
                self.locs.insert(
                    pointer,
                    Loc {
                        value: span,
                        key: Some(key_span),
                    },
                );
                entries.insert(k, value);
            }
        }
        Ok(())
    }
}

trait MaxByIndex {
    fn max_by_index(self, other: Pos) -> Pos;
}
impl MaxByIndex for Pos {
    fn max_by_index(self, other: Pos) -> Pos {
        if self.index >= other.index {
            self
        } else {
            other
        }
    }
}

/// A parser error, moved to where the mistake most likely is and given a hint: the parser
/// reports where it gave up, which for an unclosed bracket or a tab is not where to look.
fn syntax_error(source: &str, at: Pos, info: &str, stack: &[Frame]) -> YamlError {
    let here = Span { start: at, end: at };
    let message = format!("YAML syntax error: {info}");
    // An open `{` or `[` from an earlier line: the parser ran on looking for its end.
    let open_flow = stack.iter().rev().find_map(|frame| {
        let (Frame::Seq { start, .. } | Frame::Map { start, .. }) = frame;
        let c = source.chars().nth(start.start.index)?;
        matches!(c, '[' | '{').then_some((c, start.start))
    });
    if let Some((open, pos)) = open_flow {
        let close = if open == '[' { ']' } else { '}' };
        let what = if open == '[' { "list" } else { "mapping" };
        if pos.line < at.line {
            return YamlError::new(
                Span {
                    start: pos,
                    end: pos,
                },
                format!("YAML syntax error: `{open}` is never closed"),
                Some(&format!(
                    "add `{close}` after the last entry of this {what} (the parser reached line {}, column {} without finding it: {info})",
                    at.line, at.column
                )),
            );
        }
        return YamlError::new(
            here,
            message,
            Some(&format!(
                "separate the entries of `{open} ... {close}` with `,` and close it with `{close}`; quote values that contain `,`, `:`, `{{` or `[`"
            )),
        );
    }
    let line = source.lines().nth(at.line.saturating_sub(1)).unwrap_or("");
    if info.contains("tab") {
        return tab_error(line, at);
    }
    if info.contains("quoted scalar") {
        return quote_error(line, at, info);
    }
    if info.contains("mapping values are not allowed") {
        return mapping_error(source, line, at, info);
    }
    if info.contains("did not find expected key") {
        return YamlError::new(
            here,
            message,
            Some(
                "this line's indentation matches no mapping above it; keys of one mapping start in the same column",
            ),
        );
    }
    YamlError::new(here, message, None)
}

/// A tab in the indentation: pointed at the first tab (the parser stops after it).
fn tab_error(line: &str, at: Pos) -> YamlError {
    let here = Span { start: at, end: at };
    // The parser stops after the tab; point at the first tab in the indentation.
    let tab = line
        .chars()
        .take_while(|c| c.is_whitespace())
        .position(|c| c == '\t');
    let span = match tab {
        Some(col) => {
            let line_start = at.index - (at.column - 1);
            let pos = Pos {
                index: line_start + col,
                line: at.line,
                column: col + 1,
            };
            Span {
                start: pos,
                end: Pos {
                    index: pos.index + 1,
                    column: pos.column + 1,
                    ..pos
                },
            }
        }
        None => here,
    };
    YamlError::new(
        span,
        "YAML syntax error: tab used for indentation",
        Some("indent with spaces; YAML does not allow tabs in indentation"),
    )
}

/// An error in a quoted scalar: usually a quote left open, the value running on into the
/// next line.
fn quote_error(line: &str, at: Pos, info: &str) -> YamlError {
    let here = Span { start: at, end: at };
    let message = format!("YAML syntax error: {info}");
    // Usually a quote left open: the value ran on into the next line.
    let rest: Vec<char> = line.chars().skip(at.column.saturating_sub(1)).collect();
    if let [q @ ('"' | '\''), tail @ ..] = rest.as_slice()
        && !tail.contains(q)
    {
        return YamlError::new(
            Span {
                start: at,
                end: Pos {
                    index: at.index + 1,
                    column: at.column + 1,
                    ..at
                },
            },
            format!("YAML syntax error: the `{q}` opened here is never closed"),
            Some(&format!(
                "end the value with `{q}` on this line, e.g. `name: {q}my run{q}` (the parser says: {info})"
            )),
        );
    }
    YamlError::new(
        here,
        message,
        Some("a quoted value continued on the next line must be indented further than its key"),
    )
}

/// "Mapping values are not allowed": a deeper-indented line after `key: value` reads as the
/// rest of that value, or a value holds `: ` unquoted.
fn mapping_error(source: &str, line: &str, at: Pos, info: &str) -> YamlError {
    let here = Span { start: at, end: at };
    let message = format!("YAML syntax error: {info}");
    let indent_of = |l: &str| l.chars().take_while(|c| *c == ' ' || *c == '\t').count();
    // A deeper-indented line after `key: value` reads as the rest of that value.
    let before: Vec<&str> = source.lines().take(at.line.saturating_sub(1)).collect();
    let previous = before
        .iter()
        .enumerate()
        .rev()
        .find(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    if let Some((prev_index, prev)) = previous
        && indent_of(line) > indent_of(prev)
        && prev
            .split_once(": ")
            .is_some_and(|(_, v)| !v.trim().is_empty())
    {
        let col = indent_of(line);
        let line_start = at.index - (at.column - 1);
        let key = line.trim_start().split(':').next().unwrap_or("").trim_end();
        let start = Pos {
            index: line_start + col,
            line: at.line,
            column: col + 1,
        };
        let end = Pos {
            index: start.index + key.chars().count(),
            column: start.column + key.chars().count(),
            ..start
        };
        return YamlError::new(
            Span { start, end },
            format!("YAML syntax error: `{key}` is indented deeper than the line above"),
            Some(&format!(
                "keys of one mapping start in the same column: indent `{key}` by {} spaces, like line {}",
                indent_of(prev),
                prev_index + 1
            )),
        );
    }
    YamlError::new(
        here,
        message,
        Some("quote a value that contains `: `, e.g. `description: \"a: b\"`"),
    )
}

/// `8 MiB`: a budget in bytes as people read it.
fn mib(bytes: usize) -> String {
    format!("{} MiB", bytes / (1024 * 1024))
}

fn budget(span: Span, what: String) -> YamlError {
    YamlError::new(
        span,
        format!("the document is too large: {what}"),
        Some(
            "specs are small, hand-written files; this limit guards against malicious or generated input",
        ),
    )
}

fn check_tag(tag: &Tag, span: Span) -> Result<(), YamlError> {
    if tag.is_yaml_core_schema() {
        return Ok(());
    }
    Err(YamlError::new(
        span,
        format!("YAML tag `{}{}` is not supported", tag.handle, tag.suffix),
        Some("remove the tag; values are typed by the spec's schema"),
    ))
}

fn scalar_value(
    text: Cow<'_, str>,
    style: ScalarStyle,
    tag: Option<Cow<'_, Tag>>,
    span: Span,
) -> Result<Value, YamlError> {
    if let Some(tag) = &tag {
        check_tag(tag, span)?;
    }
    let shown = crate::text::truncate(&text, super::diagnostics::MAX_QUOTED_BYTES);
    let scalar =
        Scalar::parse_from_cow_and_metadata(text, style, tag.as_ref()).ok_or_else(|| {
            YamlError::new(
                span,
                format!("`{shown}` does not match its tag"),
                Some("remove the tag or fix the value"),
            )
        })?;
    Ok(match scalar {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => Value::Bool(b),
        Scalar::Integer(i) => Value::Number(i.into()),
        Scalar::FloatingPoint(f) => match Number::from_f64(f.into_inner()) {
            Some(n) => Value::Number(n),
            None => {
                return Err(YamlError::new(
                    span,
                    format!("`{shown}` is not a finite number"),
                    Some("use a finite number"),
                ));
            }
        },
        Scalar::String(s) => Value::String(s.into_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_values() {
        let doc = parse("a: 1\nb:\n  c: [x, 2.5]\n").unwrap();
        assert_eq!(
            doc.value,
            serde_json::json!({"a": 1, "b": {"c": ["x", 2.5]}})
        );
        let loc = doc.locate("/b/c/1");
        assert_eq!((loc.value.start.line, loc.value.start.column), (3, 10));
        let key = doc.locate("/b").key.unwrap();
        assert_eq!((key.start.line, key.start.column), (2, 1));
    }

    #[test]
    fn duplicate_keys_are_all_reported() {
        let errs = parse("a: 1\na: 2\nb: 1\nb: 3\n").unwrap_err();
        assert_eq!(errs.len(), 2);
        assert_eq!(errs[0].span.start.line, 2);
    }
}
