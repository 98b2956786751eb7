//! STUB until the report branch lands.
use crate::results::{meta::RunMeta, records::*};
use std::path::{Path, PathBuf};
pub struct RunDir {
    pub path: PathBuf,
}
#[derive(Debug, thiserror::Error)]
#[error("rundir")]
pub struct RunDirError;
impl RunDir {
    pub fn create(
        _out: &Path,
        _name: &str,
        _spec_source: &str,
        _started: chrono::DateTime<chrono::Utc>,
    ) -> std::io::Result<RunDir> {
        todo!()
    }
    pub fn open(_path: &Path) -> Result<RunDir, RunDirError> {
        todo!()
    }
    pub fn write_resolved(&self, _resolved: &impl serde::Serialize) -> std::io::Result<()> {
        todo!()
    }
    pub fn write_meta(&self, _meta: &RunMeta) -> std::io::Result<()> {
        todo!()
    }
    pub fn append_request(&self, _r: &RequestRecord) -> std::io::Result<()> {
        todo!()
    }
    pub fn append_point(&self, _p: &PointRecord) -> std::io::Result<()> {
        todo!()
    }
    pub fn server_log_path(&self, _group: &str) -> PathBuf {
        todo!()
    }
    pub fn write_report(&self, _markdown: &str) -> std::io::Result<()> {
        todo!()
    }
}
