//! The report's "Profiler captures" section: which points ran with the engine's profiler
//! (`profiler:`), over what window, and where each trace file is (in the run directory, or
//! left on the host and why), or why a point was not profiled.

use schemars::JsonSchema;
use serde::Serialize;

use servebench_model::results::records::PointRecord;

/// One point's capture.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ProfileRow {
    /// `p003 (concurrency=8)`.
    pub point: String,
    /// `sglang` or `vllm` (or the engine that has no profiler).
    pub engine: String,
    /// Seconds from the start's answer to the stop's; None when it did not run.
    pub window_s: Option<f64>,
    /// SGLang's `num_steps`, when the capture was limited to them.
    pub steps: Option<u32>,
    /// Where the server wrote, on its host (None: its own default directory).
    pub dir: Option<String>,
    /// Each trace file: `profiler/<group>/<file> (2.1 KB)`, or left on the host
    /// with the reason.
    pub files: Vec<String>,
    /// Why the capture failed, when it did.
    pub error: Option<String>,
}

/// The rows of every point with a capture; empty without `profiler:`.
pub(crate) fn rows(
    points: &[PointRecord],
    labels: &indexmap::IndexMap<String, String>,
) -> Vec<ProfileRow> {
    points
        .iter()
        .filter_map(|p| {
            let c = p.profiler.as_ref()?;
            Some(ProfileRow {
                point: match labels.get(&p.id) {
                    Some(l) if l.starts_with(p.id.as_str()) => l.clone(),
                    Some(l) if !l.is_empty() => format!("{} ({l})", p.id),
                    _ => p.id.clone(),
                },
                engine: c.engine.clone(),
                window_s: c
                    .started_at
                    .zip(c.stopped_at)
                    .map(|(a, b)| (b - a).max(0.0)),
                steps: c.steps,
                dir: c.dir.clone(),
                files: c
                    .files
                    .iter()
                    .map(|f| match (&f.path, &f.left) {
                        (Some(path), _) => format!("{path} ({})", size(f.bytes)),
                        (None, Some(why)) => format!("{} ({}): {why}", f.name, size(f.bytes)),
                        (None, None) => format!("{} ({})", f.name, size(f.bytes)),
                    })
                    .collect(),
                error: c.error.clone(),
            })
        })
        .collect()
}

/// Bytes in the unit a reader scans: `812 B`, `2.1 KB`, `37.4 MB`.
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if b < 1e3 {
        format!("{bytes} B")
    } else if b < 1e6 {
        format!("{:.1} KB", b / 1e3)
    } else if b < 1e9 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.2} GB", b / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_at_a_glance() {
        assert_eq!(size(812), "812 B");
        assert_eq!(size(2_100), "2.1 KB");
        assert_eq!(size(37_400_000), "37.4 MB");
    }
}
