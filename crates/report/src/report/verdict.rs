//! What a change against the baseline means: a regression, an improvement, noise, or not
//! judged. Shared by `compare` (points' metrics) and `compare_capacity` (searches' answers).

use schemars::JsonSchema;
use serde::Serialize;

/// What a change means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Worse than the baseline, beyond the noise.
    Regression,
    /// Better than the baseline, beyond the noise.
    Improvement,
    /// The difference may be noise.
    WithinNoise,
    /// A real difference (the 95% confidence intervals, from evidence that stands, do not
    /// overlap) smaller than `--threshold`: not noise, and not big enough to call a
    /// regression or an improvement.
    BelowThreshold,
    /// The runs do not say how large their noise is (one request, one round of queued
    /// requests, identical samples), so no change can be called real.
    NotEnoughEvidence,
    /// Not compared: a value is missing, or a run flagged the point.
    NotCompared,
}
