//! Why a chart could not be drawn: the one error every chart module returns, below them all.

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("chart {file}: {message}")]
pub struct ChartError {
    /// The chart's file name.
    pub file: String,
    /// The drawing library's description of the problem.
    pub message: String,
}
