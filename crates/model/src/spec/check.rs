//! Checks that need more than the spec's text: files beside the spec, the environment, another
//! module's parser. `spec` cannot know them (it is the lowest layer), so each is written by
//! the module that owns the knowledge (prompt files by `prompt`, templates by `report`,
//! `${NAME}` references by `secrets`) and handed to [`super::load_checked`], which runs it on
//! every point and reports its problems like its own: file, line, column, text and hint.

use std::path::Path;

use super::types::Experiment;
use super::validate::Problem;

/// A check of one expanded point.
pub trait Check {
    /// Problems with `experiment`, one point of the spec; `spec_dir` is the folder relative
    /// paths in the spec are read from. Pointers are into the point (`/workload/prompt/path`)
    /// and are reported where that value was written, or at the sweep value it came from.
    /// Called once per point: a check that reads files remembers what it found.
    fn check(&self, experiment: &Experiment, spec_dir: &Path) -> Vec<Problem>;
}
