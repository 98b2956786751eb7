//! STUB until the report branch lands.
use crate::results::rundir::RunDir;
use std::path::Path;
#[derive(Debug, thiserror::Error)]
#[error("report")]
pub struct ReportError;
pub fn render_run_dir(
    _dir: &RunDir,
    _template_override: Option<&Path>,
) -> Result<String, ReportError> {
    todo!()
}
