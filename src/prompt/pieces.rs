//! A prompt held as its blocks' texts, each made once and shared by every prompt that holds
//! it: a session's turns, its subagents (which begin from its history) and the history check's
//! copy of what was sent hold references, so a session's memory grows with its unique blocks,
//! not with its agents x turns x context. The text is written out whole only into a request
//! as it is sent ([`Prompt::render`]).

use std::collections::HashMap;
use std::sync::Arc;

/// Part of a shared text: `text[start..end]` (24 bytes: a prompt holds one per block).
#[derive(Debug, Clone)]
struct Piece {
    text: Arc<str>,
    start: u32,
    end: u32,
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        &self.text.as_bytes()[self.start as usize..self.end as usize]
    }

    fn len(&self) -> usize {
        (self.end - self.start) as usize
    }
}

/// A prompt: its pieces' texts in order. A copy shares the list of pieces until one of them
/// changes it (a builder's next turn), so the history check's copy of the prompt sent costs
/// nothing while the turn is answered.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    pieces: Arc<Vec<Piece>>,
    len: usize,
}

impl Prompt {
    /// Appends the whole of `text`.
    pub fn push(&mut self, text: Arc<str>) {
        let end = text.len();
        self.push_part(text, 0, end);
    }

    /// A block's text is far below 4 GiB; a longer one is cut there (never made).
    fn push_part(&mut self, text: Arc<str>, start: usize, end: usize) {
        let at = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let (start, end) = (at(start), at(end));
        if start < end {
            self.len += (end - start) as usize;
            Arc::make_mut(&mut self.pieces).push(Piece { text, start, end });
        }
    }

    /// Keeps its first `n` pieces (a builder's blocks: one piece each).
    pub fn truncate_pieces(&mut self, n: usize) {
        if n < self.pieces.len() {
            Arc::make_mut(&mut self.pieces).truncate(n);
        }
        self.len = self.pieces.iter().map(Piece::len).sum();
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The text, written out (what a request sends).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(self.len);
        for p in self.pieces.iter() {
            out.push_str(&p.text[p.start as usize..p.end as usize]);
        }
        out
    }

    /// The piece that holds byte `at` and where that piece starts (None past the end).
    fn locate(&self, at: usize) -> Option<(usize, usize)> {
        let mut start = 0;
        for (i, p) in self.pieces.iter().enumerate() {
            let len = p.len();
            if at < start + len {
                return Some((i, start));
            }
            start += len;
        }
        None
    }

    /// Whether byte `at` starts a character (or is the end), as `str::is_char_boundary`.
    pub fn is_char_boundary(&self, at: usize) -> bool {
        match self.locate(at) {
            Some((i, start)) => {
                let p = &self.pieces[i];
                p.text.is_char_boundary(p.start as usize + at - start)
            }
            None => at == self.len,
        }
    }

    /// Its bytes `from..to` (on character boundaries) as another prompt sharing the text.
    pub fn slice(&self, from: usize, to: usize) -> Prompt {
        let mut out = Prompt::default();
        let mut start = 0;
        for p in self.pieces.iter() {
            let (len, base) = (p.len(), p.start as usize);
            let (a, b) = (from.max(start), to.min(start + len));
            if a < b {
                out.push_part(p.text.clone(), base + a - start, base + b - start);
            }
            start += len;
        }
        out
    }

    /// `self` followed by `other`.
    pub fn append(&mut self, other: &Prompt) {
        for p in other.pieces.iter() {
            self.push_part(p.text.clone(), p.start as usize, p.end as usize);
        }
    }

    /// Bytes both begin with alike: pieces that are the same part of the same text are
    /// equal without reading them; others are compared a page at a time.
    pub fn common_prefix(&self, other: &Prompt) -> usize {
        let (mut a, mut b) = (Cursor::new(self), Cursor::new(other));
        let mut same = 0;
        loop {
            let (Some(x), Some(y)) = (a.rest(), b.rest()) else {
                return same;
            };
            let n = x.len().min(y.len());
            let shared = a.same_text(&b);
            let k = if shared {
                n
            } else {
                bytes_prefix(&x[..n], &y[..n])
            };
            same += k;
            if k < n {
                return same;
            }
            a.advance(n);
            b.advance(n);
        }
    }
}

impl PartialEq<str> for Prompt {
    fn eq(&self, other: &str) -> bool {
        self.len == other.len() && {
            let mut at = 0;
            self.pieces.iter().all(|p| {
                let b = p.bytes();
                let ok = &other.as_bytes()[at..at + b.len()] == b;
                at += b.len();
                ok
            })
        }
    }
}

/// A place in a prompt's pieces.
struct Cursor<'a> {
    prompt: &'a Prompt,
    piece: usize,
    offset: usize,
}

impl<'a> Cursor<'a> {
    fn new(prompt: &'a Prompt) -> Cursor<'a> {
        Cursor {
            prompt,
            piece: 0,
            offset: 0,
        }
    }

    /// The rest of the current piece (None at the end).
    fn rest(&self) -> Option<&'a [u8]> {
        let p = self.prompt.pieces.get(self.piece)?;
        Some(&p.bytes()[self.offset..])
    }

    /// Whether both are at the same byte of the same shared text.
    fn same_text(&self, o: &Cursor) -> bool {
        match (
            self.prompt.pieces.get(self.piece),
            o.prompt.pieces.get(o.piece),
        ) {
            (Some(x), Some(y)) => {
                Arc::ptr_eq(&x.text, &y.text)
                    && x.start as usize + self.offset == y.start as usize + o.offset
            }
            _ => false,
        }
    }

    fn advance(&mut self, n: usize) {
        self.offset += n;
        if let Some(p) = self.prompt.pieces.get(self.piece)
            && self.offset >= p.len()
        {
            self.piece += 1;
            self.offset = 0;
        }
    }
}

/// Bytes `a` and `b` (of one length) begin with alike: a page at a time, then byte by byte
/// in the page that differs.
pub(crate) fn bytes_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut at = 0;
    while at < n {
        let end = (at + 4096).min(n);
        if a[at..end] != b[at..end] {
            return at
                + a[at..end]
                    .iter()
                    .zip(&b[at..end])
                    .take_while(|(x, y)| x == y)
                    .count();
        }
        at = end;
    }
    n
}

/// The whole blocks' texts a session has made, by seed (its salt and the block's id): the
/// session's agents make each block once and share it.
#[derive(Debug, Default)]
pub struct BlockStore {
    texts: HashMap<u64, Arc<str>>,
}

impl BlockStore {
    /// The text of the block whose seed is `seed`, made by `make` the first time.
    pub fn get_or_make(&mut self, seed: u64, make: impl FnOnce() -> String) -> Arc<str> {
        self.texts
            .entry(seed)
            .or_insert_with(|| Arc::from(make()))
            .clone()
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(parts: &[&str]) -> Prompt {
        let mut p = Prompt::default();
        for s in parts {
            p.push(Arc::from(*s));
        }
        p
    }

    #[test]
    fn a_prompt_renders_its_pieces_and_slices_across_them() {
        let p = of(&["\naaaa", "\nbbbb", "\ncc"]);
        assert_eq!(p.render(), "\naaaa\nbbbb\ncc");
        assert_eq!(p.len(), 13);
        assert!(p == *"\naaaa\nbbbb\ncc");
        let mut cut = p.slice(0, 3);
        cut.append(&p.slice(7, 13));
        assert_eq!(cut.render(), "\naabbb\ncc");
        assert!(p.is_char_boundary(13) && !p.is_char_boundary(14));
        let e = of(&["é"]);
        assert!(!e.is_char_boundary(1));
    }

    #[test]
    fn common_prefix_reads_shared_pieces_free_and_others_byte_by_byte() {
        let block: Arc<str> = Arc::from("x".repeat(10_000));
        let mut a = Prompt::default();
        a.push(block.clone());
        a.push(Arc::from("\nab"));
        let mut b = Prompt::default();
        b.push(block);
        b.push(Arc::from("\nac"));
        assert_eq!(a.common_prefix(&b), 10_002);
        // The same text in other allocations, split elsewhere.
        let c = of(&[
            "x".repeat(9_000).as_str(),
            "x".repeat(1_000).as_str(),
            "\na",
        ]);
        assert_eq!(a.common_prefix(&c), 10_002);
        assert_eq!(c.common_prefix(&a), 10_002);
        assert_eq!(a.common_prefix(&Prompt::default()), 0);
    }

    #[test]
    fn a_store_makes_each_block_once() {
        let mut s = BlockStore::default();
        let x = s.get_or_make(1, || "one".into());
        let y = s.get_or_make(1, || unreachable!("made once"));
        assert!(Arc::ptr_eq(&x, &y));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_copy_is_unchanged_by_the_next_turn() {
        let mut p = of(&["\naaaa", "\nbbbb"]);
        let sent = p.clone();
        assert!(Arc::ptr_eq(&p.pieces, &sent.pieces), "shared until changed");
        p.truncate_pieces(1);
        p.push(Arc::from("\ncccc"));
        assert_eq!(
            (p.render(), sent.render()),
            ("\naaaa\ncccc".into(), "\naaaa\nbbbb".into())
        );
    }

    #[test]
    fn bytes_prefix_spans_pages() {
        let a = "x".repeat(10_000);
        let mut b = a.clone();
        b.replace_range(9_000..9_001, "y");
        assert_eq!(bytes_prefix(a.as_bytes(), b.as_bytes()), 9_000);
        assert_eq!(bytes_prefix(a.as_bytes(), &a.as_bytes()[..5_000]), 5_000);
    }
}
