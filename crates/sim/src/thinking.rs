//! The simulated model thinks: a request's first output tokens are thinking tokens (the
//! profile's `thinking`), which the model writes between `<think>` and `</think>` as Qwen3
//! and DeepSeek-R1 do. Where the engine was launched to split them (SGLang's and vLLM's
//! `--reasoning-parser`, llama.cpp's `--reasoning-format` with `--jinja`), chat streams carry
//! them in the engine's own field (`reasoning_content` on SGLang and llama.cpp, `reasoning`
//! on vLLM); elsewhere (`/generate`, completions, chat without a parser) the raw text with its
//! markers is the content. A chat request's `chat_template_kwargs` turning thinking off
//! (`enable_thinking: false`, Qwen3's; `thinking: false`, DeepSeek's) is obeyed: the template
//! closes the thinking block in the prompt and the model answers at once.

use serde_json::Value;

use crate::profile::Thinking;
use crate::tokenizer;
use crate::types::Output;

/// Where the model's thinking opens and closes in its raw text.
pub(crate) const START: &str = "<think>";
pub(crate) const END: &str = "</think>";

/// The thinking tokens of one request: the profile's count, give or take its spread (drawn
/// from the request's id), none when the chat request's template arguments turn thinking off.
pub(crate) fn tokens_for(model: &Thinking, body: &Value, chat: bool, rid: &str) -> u64 {
    if model.tokens == 0 && model.spread == 0 {
        return 0;
    }
    if chat {
        let kwargs = &body["chat_template_kwargs"];
        if kwargs["enable_thinking"] == Value::Bool(false)
            || kwargs["thinking"] == Value::Bool(false)
        {
            return 0;
        }
    }
    if model.spread == 0 {
        return model.tokens;
    }
    let hash = rid.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let draw = hash % (2 * model.spread + 1);
    (model.tokens + draw).saturating_sub(model.spread)
}

/// One output's text, split at the end of the thinking.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Split {
    /// The thinking text (with the markers when `raw`).
    pub thinking: String,
    /// The answer text.
    pub answer: String,
    /// Thinking tokens generated so far, this output's included.
    pub thinking_so_far: u64,
}

/// The text of the token at output position `pos` of a request that thinks for `think`
/// tokens. The markers are tokens of the thinking, as in Qwen3's and DeepSeek-R1's
/// vocabularies: the first thinking token is `<think>`, the last `</think>`. In the raw text
/// (`raw`) they are written out; where the engine splits the thinking into its own field they
/// are consumed by its parser and stream no text (the real SGLang and llama.cpp stream 24
/// thinking chunks for 26 thinking tokens; `real_engine::thinking`).
pub(crate) fn token_text(pos: u64, think: u64, id: u32, raw: bool) -> &'static str {
    if pos >= think {
        return tokenizer::decode_token(id);
    }
    match (pos == 0, pos + 1 == think, raw) {
        (_, _, false) if pos == 0 || pos + 1 == think => "",
        (true, true, true) => "<think></think>",
        (true, false, true) => START,
        (false, true, true) => END,
        _ => tokenizer::decode_token(id),
    }
}

/// Splits `o`'s new tokens: those before position `think` are thinking. `raw` writes the
/// markers into the thinking text (the model's raw text), where the engine does not split.
pub(crate) fn split(o: &Output, think: u64, raw: bool) -> Split {
    let n = o.new_ids.len() as u64;
    let start = o.completion_tokens.saturating_sub(n);
    let mut s = Split {
        thinking_so_far: o.completion_tokens.min(think),
        ..Split::default()
    };
    for (pos, &id) in (start..).zip(&o.new_ids) {
        let text = token_text(pos, think, id, raw);
        if pos < think {
            s.thinking.push_str(text);
        } else {
            s.answer.push_str(text);
        }
    }
    s
}

/// `o`'s new tokens as an API shows them: where the engine's reasoning parser splits the
/// thinking out (`parsed`), the thinking (its markers consumed) and the answer apart; where it
/// does not, no thinking and the raw text (markers written) as the answer.
pub(crate) fn shown(o: &Output, think: u64, parsed: bool) -> (String, String) {
    let parts = split(o, think, !parsed);
    if parsed {
        (parts.thinking, parts.answer)
    } else {
        (String::new(), parts.joined())
    }
}

impl Split {
    /// The raw text: thinking (with its markers) then answer.
    pub(crate) fn joined(self) -> String {
        let mut t = self.thinking;
        t.push_str(&self.answer);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn out(ids: &[u32], completion: u64) -> Output {
        Output {
            new_ids: ids.to_vec(),
            completion_tokens: completion,
            prompt_tokens: 5,
            cached_tokens: 0,
            finish: None,
            spec: None,
            slot: None,
            timings: None,
        }
    }

    #[test]
    fn thinking_comes_first_with_its_markers_in_raw_text_and_a_template_can_turn_it_off() {
        let model = Thinking {
            tokens: 3,
            spread: 0,
        };
        assert_eq!(tokens_for(&model, &json!({}), true, "r"), 3);
        let off = json!({"chat_template_kwargs": {"enable_thinking": false}});
        assert_eq!(tokens_for(&model, &off, true, "r"), 0);
        // The text APIs have no template to turn it off.
        assert_eq!(tokens_for(&model, &off, false, "r"), 3);
        // Three thinking tokens: `<think>`, a word, `</think>`; the raw text writes them out,
        // the split stream keeps the word alone.
        let a = split(&out(&[1, 2], 2), 3, true);
        assert_eq!(a.thinking, format!("{START}{}", tokenizer::decode_token(2)));
        assert_eq!((a.answer.as_str(), a.thinking_so_far), ("", 2));
        let b = split(&out(&[3, 4], 4), 3, true);
        assert_eq!(b.thinking, END);
        assert_eq!(b.answer, tokenizer::decode_token(4));
        assert_eq!(b.thinking_so_far, 3);
        let c = split(&out(&[3, 4], 4), 3, false);
        assert_eq!(
            (c.thinking.as_str(), c.answer.as_str()),
            ("", tokenizer::decode_token(4))
        );
        let d = split(&out(&[1, 2, 3, 4], 4), 3, false);
        assert_eq!(d.thinking, tokenizer::decode_token(2));
        assert_eq!(token_text(0, 1, 7, true), "<think></think>");
        let spread = Thinking {
            tokens: 10,
            spread: 4,
        };
        let n: Vec<u64> = (0..50)
            .map(|i| tokens_for(&spread, &json!({}), false, &format!("r{i}")))
            .collect();
        assert!(n.iter().all(|t| (6..=14).contains(t)), "{n:?}");
        assert!(n.iter().any(|t| *t != 10));
    }
}
