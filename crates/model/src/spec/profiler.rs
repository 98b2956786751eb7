//! What a spec asks of the engine's own profiler (`profiler:`): which points are captured,
//! what the profiler records, where the server writes its traces and how much of them comes
//! back into the run directory.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::patterns::DURATION_PATTERN;
use super::validate::{Problem, Target};

/// The engine's profiler around chosen points' measured windows: SGLang's and vLLM's
/// `/start_profile` and `/stop_profile`, started when the measured window opens (after the
/// warm-up) and stopped when its last request ended (before the cool-down's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfilerSpec {
    /// The points to capture: `all`, or point ids (`[p001, p003]`, as `servebench plan`
    /// lists them); `answer` in the list measures a capacity search's answer once more, with
    /// the profiler, after the search. A capture slows the server: profile a few points, not
    /// a whole sweep.
    pub points: ProfilePoints,
    /// SGLang: forward steps to record (its `num_steps`); the profiler stops itself after
    /// them. Absent: the whole measured window. vLLM records the whole window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub steps: Option<u32>,
    /// SGLang's activities: `CPU`, `GPU`, `MEM` (a CUDA memory snapshot). vLLM's are fixed
    /// when it starts.
    #[serde(default = "default_activities")]
    pub activities: Vec<ProfileActivity>,
    /// Record each operator's input shapes (bigger traces).
    #[serde(default)]
    pub record_shapes: bool,
    /// Record each operator's Python stack (much bigger traces; SGLang's default is on,
    /// servebench's off).
    #[serde(default)]
    pub with_stack: bool,
    /// Where the server writes its traces, a directory on the server's host. Absent: the
    /// run's directory there (`profiler/<group>/`) for a server servebench launches; the
    /// server's own default (SGLang: `SGLANG_TORCH_PROFILER_DIR` or /tmp) for one it attaches
    /// to, whose traces are named, not copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// Most MiB of traces copied back per point; larger files stay on the host, named in the
    /// report with their size.
    #[serde(default = "default_max_mib")]
    #[schemars(range(min = 1, max = 65536))]
    pub max_mib: u64,
    /// How long `/stop_profile` may take (it writes the trace before it answers: minutes on
    /// a busy GPU), e.g. `10m`.
    #[serde(default = "default_stop_timeout", with = "humantime_serde")]
    #[schemars(with = "String", regex(pattern = DURATION_PATTERN))]
    pub stop_timeout: std::time::Duration,
}

/// Which points a capture covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ProfilePoints {
    /// `all`.
    All(AllPoints),
    /// Point ids, and `answer` for a capacity search's answer.
    Ids(Vec<String>),
}

/// The word `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AllPoints {
    All,
}

/// One of SGLang's profiler activities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ProfileActivity {
    #[serde(rename = "CPU")]
    Cpu,
    #[serde(rename = "GPU")]
    Gpu,
    #[serde(rename = "MEM")]
    Mem,
}

impl ProfileActivity {
    /// The name SGLang's `ProfileReq.activities` takes.
    pub fn sglang_name(self) -> &'static str {
        match self {
            ProfileActivity::Cpu => "CPU",
            ProfileActivity::Gpu => "GPU",
            ProfileActivity::Mem => "MEM",
        }
    }
}

impl ProfilerSpec {
    /// Whether point `id` is captured (a search's answer, measured again, is
    /// `<seed>-answer`).
    pub fn covers(&self, id: &str) -> bool {
        match &self.points {
            ProfilePoints::All(_) => true,
            ProfilePoints::Ids(ids) => ids
                .iter()
                .any(|i| i == id || (i == ANSWER && id.ends_with(ANSWER_SUFFIX))),
        }
    }

    /// Whether a capacity search's answer is measured once more, with the profiler.
    pub fn answer(&self) -> bool {
        matches!(&self.points, ProfilePoints::Ids(ids) if ids.iter().any(|i| i == ANSWER))
    }

    /// The byte budget of one point's copied traces.
    pub fn max_bytes(&self) -> u64 {
        self.max_mib.saturating_mul(1 << 20)
    }
}

/// The word that names a search's answer in `profiler.points`.
const ANSWER: &str = "answer";

/// The id suffix of a search's answer measured again: `p001-answer`.
pub const ANSWER_SUFFIX: &str = "-answer";

fn default_activities() -> Vec<ProfileActivity> {
    vec![ProfileActivity::Cpu, ProfileActivity::Gpu]
}

fn default_max_mib() -> u64 {
    512
}

/// The range `profile.stop_timeout` is held to: a stop answers within a second at best, and a
/// run waits no more than an hour on one.
const MIN_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);
const MAX_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

fn default_stop_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(600)
}

/// What the schema cannot say: point ids of servebench's shape, no empty lists.
pub(crate) fn checks(raw: &serde_json::Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    let Some(profile) = raw.get("profiler") else {
        return problems;
    };
    if let Some(ids) = profile.get("points").and_then(|p| p.as_array()) {
        if ids.is_empty() {
            problems.push(Problem {
                pointer: "/profiler/points".into(),
                target: Target::Value,
                message: "`profiler.points` names no point".into(),
                hint: Some(
                    "name point ids (`[p001]`) or write `all`; remove `profiler:` to capture none"
                        .into(),
                ),
            });
        }
        for (i, id) in ids.iter().enumerate() {
            let Some(text) = id.as_str() else { continue };
            let shaped = text == ANSWER
                || (text.len() >= 4
                    && text.starts_with('p')
                    && text[1..].bytes().all(|b| b.is_ascii_digit()));
            if !shaped {
                problems.push(Problem {
                    pointer: format!("/profiler/points/{i}"),
                    target: Target::Value,
                    message: format!("`{text}` is not a point id"),
                    hint: Some(
                        "point ids are `p001`, `p002`, ... as `servebench plan` lists them; `answer` names a search's answer".into(),
                    ),
                });
            }
        }
    }
    // Where the server writes, on its host: one absolute directory, whatever that host's
    // working directory is.
    if let Some(dir) = profile.get("dir").and_then(|d| d.as_str())
        && (dir.trim().is_empty() || !dir.starts_with('/') || dir.contains(['\n', '\0']))
    {
        problems.push(Problem {
            pointer: "/profile/dir".into(),
            target: Target::Value,
            message: format!(
                "`profile.dir: {}` is not an absolute directory on the server's host",
                crate::text::truncate(dir, 80)
            ),
            hint: Some("write an absolute path, e.g. `dir: /scratch/traces`, or leave it out for the run's directory".into()),
        });
    }
    if let Some(text) = profile.get("stop_timeout").and_then(|t| t.as_str())
        && let Ok(d) = humantime::parse_duration(text.trim())
        && !(MIN_STOP_TIMEOUT..=MAX_STOP_TIMEOUT).contains(&d)
    {
        problems.push(Problem {
            pointer: "/profile/stop_timeout".into(),
            target: Target::Value,
            message: format!("`profile.stop_timeout: {text}` is outside 1s to 1h"),
            hint: Some("the trace is written before `/stop_profile` answers: minutes on a busy GPU, e.g. `stop_timeout: 10m`".into()),
        });
    }
    if let Some(acts) = profile.get("activities").and_then(|a| a.as_array())
        && acts.is_empty()
    {
        problems.push(Problem {
            pointer: "/profiler/activities".into(),
            target: Target::Value,
            message: "`profiler.activities` records nothing".into(),
            hint: Some("e.g. `activities: [CPU, GPU]`".into()),
        });
    }
    problems
}

/// Ids of the right shape that name nothing to profile: one past the plan's `points` (ids
/// `p` and `width` digits), or `answer` in a spec without a capacity search. A run would
/// measure the plan and profile none of them, saying nothing.
pub(crate) fn plan_checks(raw: &serde_json::Value, points: usize, width: usize) -> Vec<Problem> {
    let Some(ids) = raw.pointer("/profiler/points").and_then(|p| p.as_array()) else {
        return Vec::new();
    };
    let searched = raw.get("search").is_some_and(|s| !s.is_null());
    let named = |text: &str| {
        text.strip_prefix('p')
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| (1..=points).contains(&n) && text == format!("p{n:0width$}"))
    };
    let mut problems = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let Some(text) = id.as_str() else { continue };
        let pointer = format!("/profiler/points/{i}");
        if text == ANSWER {
            if !searched {
                problems.push(Problem {
                    pointer,
                    target: Target::Value,
                    message: "`answer` names a capacity search's answer, and this spec has no `search:`".into(),
                    hint: Some("add a `search:` to profile its answer, or name the points to profile (`[p001]`)".into()),
                });
            }
        } else if !named(text) {
            let id = |n: usize| format!("p{n:0width$}");
            let ids = if points <= 8 {
                format!(": {}", (1..=points).map(id).collect::<Vec<_>>().join(", "))
            } else {
                format!(", {} to {}", id(1), id(points))
            };
            let plural = if points == 1 { "" } else { "s" };
            problems.push(Problem {
                pointer,
                target: Target::Value,
                message: format!(
                    "`{text}` is not a point of this spec: nothing would be profiled for it"
                ),
                hint: Some(format!(
                    "the plan has {points} point{plural}{ids} (`servebench plan` lists them)"
                )),
            });
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_and_ids_pick_points() {
        let all: ProfilerSpec =
            serde_json::from_value(serde_json::json!({"points": "all"})).unwrap();
        assert!(all.covers("p007"));
        assert_eq!(all.activities, default_activities());
        assert_eq!(all.max_bytes(), 512 << 20);
        let some: ProfilerSpec =
            serde_json::from_value(serde_json::json!({"points": ["p002"], "steps": 5})).unwrap();
        assert!(some.covers("p002") && !some.covers("p001"));
        assert!(!some.answer() && !all.answer());
        let answer: ProfilerSpec =
            serde_json::from_value(serde_json::json!({"points": ["answer"]})).unwrap();
        assert!(answer.answer() && answer.covers("p001-answer") && !answer.covers("p001-s2"));
        assert!(checks(&serde_json::json!({"profiler": {"points": ["answer"]}})).is_empty());
        assert!(
            serde_json::from_value::<ProfilerSpec>(serde_json::json!({"points": "some"})).is_err()
        );
    }

    #[test]
    fn ids_past_the_plan_and_an_answer_without_a_search_are_problems() {
        let spec = |ids: serde_json::Value| serde_json::json!({"profiler": {"points": ids}});
        assert!(plan_checks(&spec(serde_json::json!(["p001", "p003"])), 3, 3).is_empty());
        assert!(plan_checks(&serde_json::json!({"profiler": {"points": "all"}}), 3, 3).is_empty());
        let p = plan_checks(
            &spec(serde_json::json!(["p003", "p009", "p0002", "answer"])),
            3,
            3,
        );
        let pointers: Vec<&str> = p.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/profiler/points/1",
                "/profiler/points/2",
                "/profiler/points/3"
            ]
        );
        assert_eq!(
            p[0].hint.as_deref(),
            Some("the plan has 3 points: p001, p002, p003 (`servebench plan` lists them)")
        );
        let many = plan_checks(&spec(serde_json::json!(["p1000"])), 120, 3);
        assert_eq!(
            many[0].hint.as_deref(),
            Some("the plan has 120 points, p001 to p120 (`servebench plan` lists them)")
        );
        let searched = serde_json::json!({"profiler": {"points": ["answer"]}, "search": {}});
        assert!(plan_checks(&searched, 1, 3).is_empty());
    }

    #[test]
    fn ids_of_another_shape_and_empty_lists_are_problems() {
        let p = checks(
            &serde_json::json!({"profiler": {"points": ["p001", "first"], "activities": []}}),
        );
        let pointers: Vec<&str> = p.iter().map(|p| p.pointer.as_str()).collect();
        assert_eq!(pointers, ["/profiler/points/1", "/profiler/activities"]);
        assert!(
            checks(&serde_json::json!({"profiler": {"points": []}}))[0]
                .message
                .contains("no point")
        );
    }
}
