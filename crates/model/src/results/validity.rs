//! A point's output validity as `points.jsonl` keeps it: what each canary answered, and
//! whether the consistency prompt's answers under load agreed with its answer alone.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most bytes of a server's answer a record keeps (cut on a character boundary).
pub const EXCERPT_BYTES: usize = 160;

/// What `validity:` found at one point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ValidityView {
    /// One per canary position asked for, in the spec's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<CanaryResult>,
    /// The consistency check (None when not asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<ConsistencyResult>,
}

impl ValidityView {
    /// The canary positions whose answer lacked the fact.
    pub fn failed_canaries(&self) -> impl Iterator<Item = &CanaryResult> {
        self.canaries
            .iter()
            .filter(|c| c.verdict == Verdict::Failed)
    }

    /// What was checked and how it came out, in a few words: `canaries 3/3 passed, consistent
    /// under load (2)`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if !self.canaries.is_empty() {
            let passed = self
                .canaries
                .iter()
                .filter(|c| c.verdict == Verdict::Passed)
                .count();
            let failed: Vec<&str> = self
                .failed_canaries()
                .map(|c| c.position.as_str())
                .collect();
            let mut s = format!("canaries {passed}/{} passed", self.canaries.len());
            if !failed.is_empty() {
                s.push_str(&format!(" (failed at {})", failed.join(", ")));
            }
            parts.push(s);
        }
        if let Some(c) = &self.consistency {
            parts.push(match c.verdict {
                Verdict::Passed => format!("consistent under load ({})", c.under_load),
                Verdict::Failed => format!(
                    "inconsistent under load ({} of {} differed)",
                    c.differed, c.under_load
                ),
                Verdict::Unjudged => "consistency not judged".to_string(),
            });
        }
        parts.join(", ")
    }

    /// Whether any check found the output wrong.
    pub fn failed(&self) -> bool {
        self.failed_canaries().next().is_some()
            || self
                .consistency
                .as_ref()
                .is_some_and(|c| c.verdict == Verdict::Failed)
    }
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Verdict {
    /// The answer was right (the fact found; the answers agreed).
    Passed,
    /// The answer was wrong.
    Failed,
    /// Not judged: the request failed, or the engine is not deterministic enough.
    Unjudged,
}

/// One known-answer canary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CanaryResult {
    /// Where the fact was placed: `start`, `middle` or `end`.
    pub position: String,
    /// The fact the answer had to contain (the secret number).
    pub expected: String,
    /// Prompt tokens the server counted for the canary (None when it did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    pub verdict: Verdict,
    /// The start of what the server answered, redacted, at most [`EXCERPT_BYTES`] bytes.
    #[serde(default)]
    pub answer: String,
    /// Why it was not judged (the request's error), when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The consistency check of one point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConsistencyResult {
    pub verdict: Verdict,
    /// Prompt tokens the server counted for the prompt (None when it did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Answers under load that were compared (finished while the point's load still ran).
    pub under_load: u32,
    /// Of those, how many differed from the answer alone.
    pub differed: u32,
    /// The answer alone (its start, redacted, at most [`EXCERPT_BYTES`] bytes).
    #[serde(default)]
    pub solo: String,
    /// The first differing answer (its start, redacted, bounded likewise), when one differed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub differing: Option<String>,
    /// What the verdict rests on, in words (why it was not judged, when it was not).
    pub note: String,
}
