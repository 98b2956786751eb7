//! Why a report could not be produced (a file of its own: the report's writers and the
//! module that drives them both name it).

use std::path::PathBuf;

use servebench_model::results::RunDirError;

use super::chart_error;

/// Why a report could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The template failed to parse or render.
    #[error("{}: {message}", location(name, *line))]
    Template {
        /// Template name (`default.md.j2` or the user template's path).
        name: String,
        /// 1-based line in the template, when known.
        line: Option<usize>,
        /// minijinja's description of the problem.
        message: String,
    },
    /// The user template file could not be read.
    #[error("{path}: cannot read the report template: {source}")]
    ReadTemplate {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The run directory's records could not be read.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// A chart could not be drawn.
    #[error(transparent)]
    Chart(#[from] chart_error::ChartError),
    #[error("cannot write the CSV exports: {0}")]
    Csv(#[from] csv::Error),
    /// A chart could not be drawn or written into `charts/`.
    #[error(transparent)]
    Charts(#[from] super::charts_dir::ChartsDirError),
    /// The report or a chart could not be written into the run directory.
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where in a template an error is: its name, and its line when known.
fn location(name: &str, line: Option<usize>) -> String {
    match line {
        Some(line) => format!("template {name}, line {line}"),
        None => format!("template {name}"),
    }
}
