//! The report's "Output validity" section: what `validity:` checked at each point (canaries,
//! consistency under load) and what it found.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::records::PointRecord;
use servebench_model::results::validity::Verdict;

/// The section; None in a run without `validity:` checks.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ValiditySection {
    /// One row per point that was checked, in run order.
    pub rows: Vec<ValidityRow>,
    /// Points whose output was found wrong (`invalid-output`), by label.
    pub invalid: Vec<String>,
}

/// One point's checks.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ValidityRow {
    /// `p003 (ctx=8192)`.
    pub point: String,
    /// Each canary, `start passed`, `end failed`: in the spec's order.
    pub canaries: Vec<String>,
    /// The consistency verdict and what it rests on, in words (None when not checked).
    pub consistency: Option<String>,
    /// The output was found wrong at this point.
    pub invalid: bool,
    /// What the server answered where a check failed (redacted excerpts), in words.
    pub answers: Vec<String>,
}

pub(crate) fn section(
    points: &[PointRecord],
    labels: &indexmap::IndexMap<String, String>,
) -> Option<ValiditySection> {
    let mut rows = Vec::new();
    for p in points {
        let Some(v) = &p.validity else { continue };
        let point = labels.get(&p.id).cloned().unwrap_or_else(|| p.id.clone());
        let mut answers = Vec::new();
        let canaries = v
            .canaries
            .iter()
            .map(|c| {
                if c.verdict == Verdict::Failed {
                    answers.push(format!(
                        "canary at {}: asked for {}, answered \"{}\"",
                        c.position, c.expected, c.answer
                    ));
                }
                format!("{} {}", c.position, c.verdict)
            })
            .collect();
        let consistency = v.consistency.as_ref().map(|c| {
            if c.verdict == Verdict::Failed {
                answers.push(format!(
                    "alone \"{}\", under load \"{}\"",
                    c.solo,
                    c.differing.as_deref().unwrap_or("")
                ));
            }
            format!("{}: {}", c.verdict, c.note)
        });
        rows.push(ValidityRow {
            point,
            canaries,
            consistency,
            invalid: v.failed(),
            answers,
        });
    }
    if rows.is_empty() {
        return None;
    }
    let invalid = rows
        .iter()
        .filter(|r| r.invalid)
        .map(|r| r.point.clone())
        .collect();
    Some(ValiditySection { rows, invalid })
}
