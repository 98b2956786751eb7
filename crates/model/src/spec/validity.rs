//! What a spec asks of the server's output at each point (`validity:`): known-answer
//! canaries and a consistency check under load. Off unless asked for.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::validate::{Problem, Target};

/// Checks of what the server answers at each point, beside its speed. A point that fails
/// one is flagged `invalid-output`, degraded, and kept out of capacity answers, Pareto
/// frontiers and `compare` verdicts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValiditySpec {
    /// Known-answer canaries: before the point's first round (outside its measured window),
    /// one greedy request per position whose prompt is filler text at the point's prompt
    /// length with a secret number placed at that position and a question asking for it;
    /// the answer must contain the number. `true` for the start, the middle and the end;
    /// `{ positions, max_tokens }` to choose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canaries: Option<Toggle<CanarySpec>>,
    /// Consistency: one greedy prompt answered alone twice before the first round, then
    /// `requests` times during the first round's measured window, beside the point's own
    /// load (those requests are recorded with role `consistency`, not measured). Answers under
    /// load must equal the answer alone; when the two solo answers already differ, the engine
    /// is not deterministic enough and consistency is not judged. `true` for the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Toggle<ConsistencySpec>>,
}

impl ValiditySpec {
    /// The canaries to send, when asked for.
    pub fn canaries(&self) -> Option<CanarySpec> {
        self.canaries.as_ref().and_then(Toggle::resolve)
    }

    /// The consistency check to run, when asked for.
    pub fn consistency(&self) -> Option<ConsistencySpec> {
        self.consistency.as_ref().and_then(Toggle::resolve)
    }

    /// Whether any check is on.
    pub fn any(&self) -> bool {
        self.canaries().is_some() || self.consistency().is_some()
    }
}

/// A check switched on with its defaults (`true`), off (`false`), or with options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Toggle<T> {
    /// `true`: on, with the defaults; `false`: off.
    On(bool),
    /// On, with these options.
    With(T),
}

impl<T: Clone + Default> Toggle<T> {
    fn resolve(&self) -> Option<T> {
        match self {
            Toggle::On(true) => Some(T::default()),
            Toggle::On(false) => None,
            Toggle::With(t) => Some(t.clone()),
        }
    }
}

/// Where in the prompt a canary's fact is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, strum::Display)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum CanaryPosition {
    /// Right after the prompt's opening.
    Start,
    /// Halfway through the filler.
    Middle,
    /// Just before the question.
    End,
}

/// Known-answer canaries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CanarySpec {
    /// Where the fact goes, one canary request each (default: start, middle, end).
    #[serde(default = "all_positions")]
    #[schemars(length(min = 1, max = 3))]
    pub positions: Vec<CanaryPosition>,
    /// Output tokens each canary may generate; the answer is looked for in them (4 to 256).
    #[serde(default = "default_canary_tokens")]
    #[schemars(range(min = 4, max = 256))]
    pub max_tokens: u32,
}

impl Default for CanarySpec {
    fn default() -> Self {
        CanarySpec {
            positions: all_positions(),
            max_tokens: default_canary_tokens(),
        }
    }
}

/// The consistency check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsistencySpec {
    /// Requests of the prompt sent under the point's load, all at the start of the first
    /// round's measured window (1 to 16). They add to the load the point offers.
    #[serde(default = "default_consistency_requests")]
    #[schemars(range(min = 1, max = 16))]
    pub requests: u32,
    /// Output tokens each answer has; answers are compared token for token (4 to 256).
    #[serde(default = "default_consistency_tokens")]
    #[schemars(range(min = 4, max = 256))]
    pub max_tokens: u32,
    /// Prompt tokens of the consistency prompt; absent: the point's prompt length, at most
    /// 4096 (a long prompt alone and under load costs two prefills of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16, max = 1000000))]
    pub prompt_tokens: Option<u64>,
}

impl Default for ConsistencySpec {
    fn default() -> Self {
        ConsistencySpec {
            requests: default_consistency_requests(),
            max_tokens: default_consistency_tokens(),
            prompt_tokens: None,
        }
    }
}

fn all_positions() -> Vec<CanaryPosition> {
    vec![
        CanaryPosition::Start,
        CanaryPosition::Middle,
        CanaryPosition::End,
    ]
}

fn default_canary_tokens() -> u32 {
    16
}

fn default_consistency_requests() -> u32 {
    2
}

fn default_consistency_tokens() -> u32 {
    32
}

/// What the schema cannot say: a canary position named twice.
pub(crate) fn checks(raw: &serde_json::Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    let positions = raw
        .get("validity")
        .and_then(|v| v.get("canaries"))
        .and_then(|c| c.get("positions"))
        .and_then(|p| p.as_array());
    if let Some(list) = positions {
        for (i, p) in list.iter().enumerate() {
            if list[..i].contains(p) {
                problems.push(Problem {
                    pointer: format!("/validity/canaries/positions/{i}"),
                    target: Target::Value,
                    message: format!("canary position {p} is named twice"),
                    hint: Some("name each of start, middle and end at most once".into()),
                });
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_means_the_defaults_and_false_or_absent_means_off() {
        let on: ValiditySpec =
            serde_json::from_value(serde_json::json!({"canaries": true, "consistency": true}))
                .unwrap();
        assert_eq!(on.canaries(), Some(CanarySpec::default()));
        assert_eq!(on.consistency(), Some(ConsistencySpec::default()));
        let off: ValiditySpec =
            serde_json::from_value(serde_json::json!({"canaries": false})).unwrap();
        assert!(!off.any());
        assert!(!ValiditySpec::default().any());
        let some: ValiditySpec = serde_json::from_value(
            serde_json::json!({"canaries": {"positions": ["end"], "max_tokens": 8}}),
        )
        .unwrap();
        assert_eq!(
            some.canaries().unwrap().positions,
            [CanaryPosition::End],
            "{some:?}"
        );
    }

    #[test]
    fn a_position_named_twice_is_a_problem_at_its_second_mention() {
        let raw =
            serde_json::json!({"validity": {"canaries": {"positions": ["start", "end", "start"]}}});
        let problems = checks(&raw);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].pointer, "/validity/canaries/positions/2");
    }
}
