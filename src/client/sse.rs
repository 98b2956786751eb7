//! A small hand-written Server-Sent Events framer.
//!
//! General SSE crates parse first and stamp later (or reconnect silently); this one is fed raw
//! network reads together with the instant each read arrived, so every event carries the arrival
//! time of its bytes.
//!
//! Accepted: lines ending in `\n` or `\r\n`; events ended by a blank line; `data:` with or without
//! one leading space; several `data` lines joined by `\n`; comments (`:` lines) and the standard
//! `event`, `id` and `retry` fields are ignored. Any other field name means the body is not an
//! event stream (e.g. a plain JSON body), which is reported as malformed rather than silently
//! skipped. A lone `\r` as a line ending (allowed by the SSE spec, never sent by SGLang) is not
//! supported.
//!
//! Input budget: one event (its data so far plus the line being read) may hold at most
//! [`EVENT_BYTES_LIMIT`] bytes. A line that never ends (a broken server, or a body that is not
//! an event stream) is refused at the budget instead of growing the client's memory without
//! bound; the request fails as malformed and names the budget.

use std::time::Instant;

/// Longest prefix of an offending body or event kept in errors, in bytes.
pub const HEAD_BYTES: usize = 200;

/// Most bytes one SSE event may hold (its `data` lines and the line being read), 1 MiB. A
/// streamed chunk is a few hundred bytes; SGLang's cumulative native stream repeats the whole
/// text so far, which stays far below this for any output length a benchmark asks for
/// (1 MiB is about 250k tokens of text).
pub const EVENT_BYTES_LIMIT: usize = 1 << 20;

/// One complete event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `data` lines joined by `\n`, as raw bytes (UTF-8 is checked by the JSON parser).
    pub data: Vec<u8>,
    /// Arrival of the network read that delivered the event's final byte (its terminating blank
    /// line). That is the first moment the client could have acted on the event, so it is the
    /// event's arrival time. The difference to the read holding its first byte is the time the
    /// rest of the event spent on the wire, which belongs to the event.
    pub arrived: Instant,
}

/// Why bytes are not an acceptable event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseMalformed {
    /// The first [`HEAD_BYTES`] bytes of the offending line.
    pub head: String,
    /// What is wrong with it.
    pub problem: SseProblem,
}

/// What is wrong with a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SseProblem {
    /// A line that is neither a known SSE field, a comment nor blank (e.g. a plain JSON body).
    NotAnEventStream,
    /// One event grew past the budget (a line that never ends).
    EventTooLong {
        /// The budget, in bytes ([`EVENT_BYTES_LIMIT`]).
        limit: usize,
    },
}

impl SseMalformed {
    /// The error message a request records.
    pub(crate) fn message(&self) -> String {
        match self.problem {
            SseProblem::NotAnEventStream => "response is not a server-sent event stream".into(),
            SseProblem::EventTooLong { limit } => format!(
                "an SSE event grew past the client's budget of {} bytes per event \
                 (EVENT_BYTES_LIMIT) without ending; the rest of the response was not read",
                limit
            ),
        }
    }
}

/// Incremental SSE parser: feed it reads as they arrive, collect complete events.
#[derive(Debug)]
pub struct SseFramer {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// Data of the current event so far.
    data: Vec<u8>,
    /// Whether the current event has at least one `data` line (an event of only comments or
    /// other fields is not dispatched, as the SSE spec says).
    has_data: bool,
    /// Arrival of the latest read, for events completed at end of stream.
    last_arrived: Option<Instant>,
    /// Most bytes one event may hold.
    limit: usize,
}

impl Default for SseFramer {
    fn default() -> Self {
        SseFramer::new()
    }
}

impl SseFramer {
    /// A framer with nothing buffered and the [`EVENT_BYTES_LIMIT`] budget.
    pub fn new() -> SseFramer {
        SseFramer::with_limit(EVENT_BYTES_LIMIT)
    }

    /// A framer whose events may hold at most `limit` bytes.
    pub(crate) fn with_limit(limit: usize) -> SseFramer {
        SseFramer {
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            last_arrived: None,
            limit,
        }
    }

    /// Refuses an event that would hold more than the budget with `line_bytes` more.
    fn check_budget(&self, line_bytes: usize, line_head: &[u8]) -> Result<(), SseMalformed> {
        if self.data.len() + line_bytes > self.limit {
            let head_of = if self.data.is_empty() {
                line_head
            } else {
                &self.data
            };
            return Err(SseMalformed {
                head: head(head_of),
                problem: SseProblem::EventTooLong { limit: self.limit },
            });
        }
        Ok(())
    }

    /// Feeds one network read that arrived at `arrived`; returns the events it completed, in order.
    pub fn feed(&mut self, bytes: &[u8], arrived: Instant) -> Result<Vec<SseEvent>, SseMalformed> {
        self.last_arrived = Some(arrived);
        let mut events = Vec::new();
        let mut rest = bytes;
        while let Some(pos) = memchr::memchr(b'\n', rest) {
            let piece = &rest[..pos];
            rest = &rest[pos + 1..];
            let line_head = if self.line.is_empty() {
                piece
            } else {
                &self.line
            };
            self.check_budget(self.line.len() + piece.len(), line_head)?;
            let event = if self.line.is_empty() {
                // The whole line is in this read: no copy.
                self.take_line(piece.strip_suffix(b"\r").unwrap_or(piece), arrived)?
            } else {
                self.line.extend_from_slice(piece);
                // Keep the line buffer's allocation for the next line.
                let mut line = std::mem::take(&mut self.line);
                let taken = self.take_line(line.strip_suffix(b"\r").unwrap_or(&line), arrived);
                line.clear();
                self.line = line;
                taken?
            };
            if let Some(event) = event {
                events.push(event);
            }
        }
        if !rest.is_empty() {
            let line_head = if self.line.is_empty() {
                rest
            } else {
                &self.line
            };
            self.check_budget(self.line.len() + rest.len(), line_head)?;
            self.line.extend_from_slice(rest);
        }
        Ok(events)
    }

    /// Ends the stream: returns the event left unterminated, if any (a last line without its
    /// newline counts as a line). The caller decides whether a truncated event is acceptable.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseMalformed> {
        let arrived = self.last_arrived.unwrap_or_else(Instant::now);
        if !self.line.is_empty() {
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(event) = self.take_line(&line, arrived)? {
                return Ok(Some(event));
            }
        }
        self.take_line(b"", arrived)
    }

    #[cfg(test)]
    /// Whether bytes of an unfinished event are buffered.
    pub(crate) fn has_pending(&self) -> bool {
        self.has_data || !self.line.is_empty()
    }

    /// Handles one complete line (without its line ending).
    fn take_line(
        &mut self,
        line: &[u8],
        arrived: Instant,
    ) -> Result<Option<SseEvent>, SseMalformed> {
        if line.is_empty() {
            if !self.has_data {
                return Ok(None);
            }
            self.has_data = false;
            // The next event is likely as long as this one: one allocation, no regrowth.
            let next = Vec::with_capacity(self.data.len());
            return Ok(Some(SseEvent {
                data: std::mem::replace(&mut self.data, next),
                arrived,
            }));
        }
        if line[0] == b':' {
            return Ok(None);
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
                Ok(None)
            }
            b"event" | b"id" | b"retry" => Ok(None),
            _ => Err(SseMalformed {
                head: head(line),
                problem: SseProblem::NotAnEventStream,
            }),
        }
    }
}

/// The first [`HEAD_BYTES`] bytes of `bytes` as text (invalid UTF-8 replaced), never longer than
/// [`HEAD_BYTES`] bytes.
pub(crate) fn head(bytes: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(HEAD_BYTES)]).into_owned();
    // Replacement characters are 3 bytes, so lossy text can outgrow the byte budget.
    if text.len() > HEAD_BYTES {
        text.truncate(servebench_model::text::floor_char_boundary(
            &text, HEAD_BYTES,
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| String::from_utf8(e.data.clone()).unwrap())
            .collect()
    }

    #[test]
    fn splits_events_and_joins_data_lines() {
        let mut f = SseFramer::new();
        let t = Instant::now();
        let ev = f
            .feed(
                b": comment\ndata: a\ndata:b\nid: 1\n\ndata: [DONE]\r\n\r\n",
                t,
            )
            .unwrap();
        assert_eq!(data(&ev), ["a\nb", "[DONE]"]);
        assert!(!f.has_pending());
    }

    #[test]
    fn one_byte_at_a_time_stamps_final_byte() {
        let mut f = SseFramer::new();
        let start = Instant::now();
        let bytes = b"data: {\"x\":1}\r\n\r\n";
        let mut got = Vec::new();
        for (i, b) in bytes.iter().enumerate() {
            let t = start + std::time::Duration::from_millis(i as u64);
            got.extend(f.feed(&[*b], t).unwrap());
        }
        assert_eq!(data(&got), ["{\"x\":1}"]);
        assert_eq!(
            got[0].arrived,
            start + std::time::Duration::from_millis(bytes.len() as u64 - 1)
        );
    }

    #[test]
    fn unknown_field_is_malformed() {
        let mut f = SseFramer::new();
        let err = f.feed(b"{\"text\":\"hi\"}\n", Instant::now()).unwrap_err();
        assert_eq!(err.head, "{\"text\":\"hi\"}");
    }

    #[test]
    fn a_line_that_never_ends_is_refused_at_the_budget() {
        let mut f = SseFramer::with_limit(1000);
        let t = Instant::now();
        assert!(f.feed(b"data: aaaa", t).unwrap().is_empty());
        let mut refused = None;
        for _ in 0..100 {
            if let Err(e) = f.feed(&[b'a'; 64], t) {
                refused = Some(e);
                break;
            }
        }
        let e = refused.expect("refused");
        assert_eq!(e.problem, SseProblem::EventTooLong { limit: 1000 });
        assert!(e.head.starts_with("data: aaaa") && e.head.len() <= HEAD_BYTES);
        assert!(e.message().contains("1000 bytes"), "{}", e.message());
        // Never more than the budget buffered.
        assert!(f.line.len() <= 1000);

        // Many short data lines of one event count together; a complete line in one read too.
        let mut f = SseFramer::with_limit(100);
        let lines = "data: 0123456789\n".repeat(20);
        assert!(f.feed(lines.as_bytes(), t).is_err());
        let mut f = SseFramer::with_limit(100);
        assert!(
            f.feed(format!("data: {}\n\n", "x".repeat(200)).as_bytes(), t)
                .is_err()
        );
        // Events under the budget pass, however many.
        let mut f = SseFramer::with_limit(100);
        let events = "data: 0123456789\n\n".repeat(50);
        assert_eq!(f.feed(events.as_bytes(), t).unwrap().len(), 50);
    }

    #[test]
    fn finish_returns_unterminated_event() {
        let mut f = SseFramer::new();
        assert!(f.feed(b"data: [DONE]", Instant::now()).unwrap().is_empty());
        assert!(f.has_pending());
        assert_eq!(f.finish().unwrap().unwrap().data, b"[DONE]");
        assert_eq!(f.finish().unwrap(), None);
    }

    #[test]
    fn head_is_at_most_200_bytes() {
        assert_eq!(head(&[b'a'; 500]).len(), 200);
        assert!(head(&[0xff; 500]).len() <= 200);
        assert_eq!(head("é".repeat(150).as_bytes()).len(), 200);
    }
}
