//! Telling thinking from answer in a stream: what each chunk carried, and where the stream is.
//!
//! Chat streams say it in their fields (`delta.reasoning` on vLLM, `delta.reasoning_content`
//! on SGLang and llama.cpp, `delta.content` and `delta.tool_calls` for the answer). Text
//! streams (`/generate`, `/v1/completions`) carry the model's raw text, so where the server was
//! launched with a reasoning parser, its markers ([`ThinkMarkers`]) are looked for in the text
//! as SGLang's own parser does: thinking opens at the start marker (or at the first token,
//! for parsers that force it) and closes at the end marker or a tool call's start; the markers
//! count as thinking (SGLang's `reasoning_tokens` counts them too).

use servebench_model::spec::reasoning::ThinkMarkers;

/// What one chunk's text carried.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// Some thinking text (or a marker).
    pub reasoning: bool,
    /// Some answer or tool-call text.
    pub answer: bool,
}

impl Seen {
    pub(crate) fn merge(self, other: Seen) -> Seen {
        Seen {
            reasoning: self.reasoning || other.reasoning,
            answer: self.answer || other.answer,
        }
    }
}

/// Where a stream is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No output text yet.
    #[default]
    Start,
    Thinking,
    Answering,
}

/// The phase of a stream and what its chunks carried.
#[derive(Debug, Clone, Default)]
pub(crate) struct Thinking {
    pub phase: Phase,
    /// The launched parser's markers (text APIs only).
    markers: Option<ThinkMarkers>,
    /// Text not yet judged: the end of the last text, which may be the start of a marker
    /// split across chunks (at most a marker's length).
    pending: String,
}

impl Thinking {
    pub(crate) fn new(markers: Option<ThinkMarkers>) -> Thinking {
        Thinking {
            phase: Phase::Start,
            markers,
            pending: String::new(),
        }
    }

    /// A chat chunk: thinking and answer come in fields of their own.
    pub(crate) fn fields(&mut self, seen: Seen) -> Seen {
        if seen.answer {
            self.phase = Phase::Answering;
        } else if seen.reasoning && self.phase != Phase::Answering {
            self.phase = Phase::Thinking;
        }
        seen
    }

    /// Whether this stream's text is scanned for markers.
    pub(crate) fn scans_text(&self) -> bool {
        self.markers.is_some()
    }

    /// A text chunk's new text. Without markers every text is answer.
    pub(crate) fn text(&mut self, new: &str) -> Seen {
        let Some(m) = self.markers else {
            return self.fields(Seen {
                reasoning: false,
                answer: !new.is_empty(),
            });
        };
        if new.is_empty() {
            return Seen::default();
        }
        let mut seen = Seen::default();
        let mut text = std::mem::take(&mut self.pending);
        text.push_str(new);
        let mut rest: &str = &text;
        loop {
            match self.phase {
                Phase::Start if m.starts_thinking => self.phase = Phase::Thinking,
                Phase::Start => {
                    let trimmed = rest.trim_start();
                    if trimmed.is_empty() {
                        self.pending = rest.to_string();
                        return seen;
                    }
                    if let Some(after) = trimmed.strip_prefix(m.start) {
                        seen.reasoning = true;
                        self.phase = Phase::Thinking;
                        rest = after;
                    } else if m.start.starts_with(trimmed) {
                        // Maybe the start marker, cut: it counts as thinking if it is one.
                        seen.reasoning = true;
                        self.pending = rest.to_string();
                        return seen;
                    } else {
                        self.phase = Phase::Answering;
                    }
                }
                Phase::Thinking => {
                    let end = rest.find(m.end).map(|i| (i, m.end.len()));
                    let tool = m.tool_start.and_then(|t| rest.find(t)).map(|i| (i, 0));
                    let first = match (end, tool) {
                        (Some(e), Some(t)) => Some(if t.0 < e.0 { t } else { e }),
                        (e, t) => e.or(t),
                    };
                    match first {
                        Some((at, skip)) => {
                            // The end marker is thinking; a tool call's start is answer.
                            seen.reasoning |= at > 0 || skip > 0;
                            self.phase = Phase::Answering;
                            rest = &rest[at + skip..];
                        }
                        None => {
                            seen.reasoning |= !rest.is_empty();
                            self.pending = marker_start_tail(rest, &m);
                            return seen;
                        }
                    }
                }
                Phase::Answering => {
                    seen.answer |= !rest.is_empty();
                    return seen;
                }
            }
        }
    }
}

/// The end of `text` that could begin the end marker (or a tool call's start): kept to be
/// judged with the next chunk's text.
fn marker_start_tail(text: &str, m: &ThinkMarkers) -> String {
    let longest = m.end.len().max(m.tool_start.map_or(0, str::len));
    let from = text.len().saturating_sub(longest.saturating_sub(1));
    (from..text.len())
        .filter(|i| text.is_char_boundary(*i))
        .map(|i| &text[i..])
        .find(|tail| m.end.starts_with(tail) || m.tool_start.is_some_and(|t| t.starts_with(tail)))
        .unwrap_or("")
        .to_string()
}

/// Thinking tokens among a chunk's `tokens`, from what its text carried and where the stream
/// is: all of them for thinking alone, none for answer alone; a chunk that carried both gives
/// its last token to the answer; a chunk with tokens but no text belongs to the phase the
/// stream is in.
pub(crate) fn reasoning_share(tokens: u32, seen: Seen, phase: Phase) -> u32 {
    match (seen.reasoning, seen.answer) {
        (true, false) => tokens,
        (false, true) => 0,
        (true, true) => tokens.saturating_sub(1),
        (false, false) if phase == Phase::Thinking => tokens,
        (false, false) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_model::spec::reasoning::{ParserKnowledge, sglang_parser};

    fn markers(name: &str) -> ThinkMarkers {
        match sglang_parser(name) {
            ParserKnowledge::Markers(m) => m,
            other => panic!("{other:?}"),
        }
    }

    fn scan(t: &mut Thinking, pieces: &[&str]) -> Vec<(bool, bool)> {
        pieces
            .iter()
            .map(|p| {
                let s = t.text(p);
                (s.reasoning, s.answer)
            })
            .collect()
    }

    #[test]
    fn qwen3_thinking_opens_at_its_marker_and_closes_at_the_end_marker_split_across_chunks() {
        let mut t = Thinking::new(Some(markers("qwen3")));
        let seen = scan(
            &mut t,
            &[
                "<thi", "nk>", "Let me", " see.", "</th", "ink>", "\n\n", "42",
            ],
        );
        assert_eq!(
            seen,
            [
                (true, false),
                (true, false),
                (true, false),
                (true, false),
                (true, false),
                (true, false),
                (false, true),
                (false, true)
            ]
        );
        assert_eq!(t.phase, Phase::Answering);
    }

    #[test]
    fn a_forced_parser_thinks_from_the_first_token_and_a_plain_answer_is_answer() {
        let mut t = Thinking::new(Some(markers("deepseek-r1")));
        assert_eq!(
            scan(&mut t, &["Hmm", "</think>The", " end"]),
            [(true, false), (true, true), (false, true)]
        );
        let mut t = Thinking::new(Some(markers("qwen3")));
        assert_eq!(
            scan(&mut t, &["Paris", "."]),
            [(false, true), (false, true)]
        );
        // A tool call opened inside the thinking ends it (SGLang's tool_start_token).
        let mut t = Thinking::new(Some(markers("qwen3")));
        assert_eq!(
            scan(&mut t, &["<think>plan", "<tool_call>{"]),
            [(true, false), (false, true)]
        );
    }

    #[test]
    fn the_share_of_a_chunk_follows_what_it_carried() {
        let both = Seen {
            reasoning: true,
            answer: true,
        };
        assert_eq!(reasoning_share(3, both, Phase::Answering), 2);
        assert_eq!(reasoning_share(2, Seen::default(), Phase::Thinking), 2);
        assert_eq!(reasoning_share(2, Seen::default(), Phase::Answering), 0);
    }
}
