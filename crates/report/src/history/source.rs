//! Where a history's runs come from: run directories found under the paths given (a run
//! directory is a folder with a `meta.json`), each read as `compare` reads it, within a
//! budget; a directory that cannot be read is named with why and left out, never guessed at.

use std::path::{Path, PathBuf};

use super::model::SkippedRun;
use crate::report::compare::LoadedRun;
use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::PointRecord;
use servebench_model::results::rundir::{self, JsonlRead, META_FILE, POINTS_FILE, RunDirError};
use std::io::Read;

/// What a history reads at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Bytes of one run's `meta.json` (larger: left out, named).
    pub meta_bytes: u64,
    /// Bytes of one run's `points.jsonl`.
    pub points_bytes: u64,
    /// Bytes of every run's files together.
    pub total_bytes: u64,
    /// Run directories at most.
    pub runs: usize,
    /// Folders visited while looking for run directories.
    pub folders: usize,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            meta_bytes: rundir::META_BUDGET,
            points_bytes: rundir::POINTS_BUDGET,
            total_bytes: 4 << 30,
            runs: 100_000,
            folders: 1_000_000,
        }
    }
}

/// How deep below a given path a run directory is looked for (`runs/<name>/<timestamp>` is 2).
const MAX_DEPTH: usize = 6;

/// Run directories under `paths` (a path that is a run directory is itself one), in path
/// order, within `budget.folders` and `budget.runs`. Folders that are not run directories
/// and cannot be listed are skipped with why.
pub(crate) fn find_run_dirs(paths: &[PathBuf], budget: &Budget) -> (Vec<PathBuf>, Vec<SkippedRun>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    let mut visited = 0usize;
    for path in paths {
        if !path.exists() {
            skipped.push(SkippedRun {
                path: path.display().to_string(),
                why: "no such file or directory".to_string(),
            });
            continue;
        }
        walk(path, 0, budget, &mut visited, &mut found, &mut skipped);
    }
    // One identity per run directory, whatever path reached it (`runs` and the same folder
    // by its absolute path, or through a link): its canonical path.
    for dir in &mut found {
        if let Ok(canonical) = std::fs::canonicalize(&*dir) {
            *dir = canonical;
        }
    }
    found.sort();
    found.dedup();
    (found, skipped)
}

fn walk(
    dir: &Path,
    depth: usize,
    budget: &Budget,
    visited: &mut usize,
    found: &mut Vec<PathBuf>,
    skipped: &mut Vec<SkippedRun>,
) {
    *visited += 1;
    if *visited > budget.folders || found.len() >= budget.runs {
        if *visited == budget.folders + 1 || found.len() == budget.runs {
            skipped.push(SkippedRun {
                path: dir.display().to_string(),
                why: format!(
                    "the search stopped here: it reached its budget of {} folders or {} runs",
                    budget.folders, budget.runs
                ),
            });
        }
        return;
    }
    // A meta.json that is a link, a FIFO or a device is found (and named when read), never
    // followed: symlink_metadata looks at the entry itself.
    if std::fs::symlink_metadata(dir.join(META_FILE)).is_ok_and(|m| !m.is_dir()) {
        found.push(dir.to_path_buf());
        return;
    }
    if depth >= MAX_DEPTH {
        return;
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            if depth == 0 {
                skipped.push(SkippedRun {
                    path: dir.display().to_string(),
                    why: e.to_string(),
                });
            }
            return;
        }
    };
    let mut subdirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    subdirs.sort();
    for sub in subdirs {
        walk(&sub, depth + 1, budget, visited, found, skipped);
    }
}

/// Reads one run directory within `budget`'s per-file limits; its bytes read are added to
/// `spent`. Err: why it is left out. `points.jsonl` is read line by line, within its record
/// and value budgets, so its memory stays bounded whatever its size.
pub(crate) fn load_dir(
    dir: &Path,
    budget: &Budget,
    spent: &mut u64,
) -> Result<LoadedRun, LoadError> {
    let meta_path = dir.join(META_FILE);
    let points_path = dir.join(POINTS_FILE);
    let meta_text = read_within(&meta_path, budget.meta_bytes, META_FILE)?;
    let meta = meta_of(&meta_text)?;
    let points = match rundir::open_regular(&points_path, budget.points_bytes) {
        Ok(file) => {
            let len = file.metadata().map_or(0, |m| m.len());
            *spent += meta_text.len() as u64 + len;
            if *spent > budget.total_bytes {
                return Err(LoadError::Budget {
                    mib: budget.total_bytes >> 20,
                });
            }
            points_of(std::io::BufReader::new(file.take(budget.points_bytes)))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            *spent += meta_text.len() as u64;
            JsonlRead {
                records: Vec::new(),
                truncated_lines: Vec::new(),
            }
        }
        Err(source) => {
            return Err(LoadError::Unreadable {
                file: POINTS_FILE,
                source,
            });
        }
    };
    Ok(loaded(dir.to_path_buf(), meta, points))
}

/// A file's text, within `limit` bytes; never through a link, a FIFO or a device.
fn read_within(path: &Path, limit: u64, file: &'static str) -> Result<String, LoadError> {
    let unreadable = |source| LoadError::Unreadable { file, source };
    let mut bytes = Vec::new();
    rundir::open_regular(path, limit)
        .map_err(unreadable)?
        .take(limit)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    String::from_utf8(bytes).map_err(|_| LoadError::NotText { file })
}

/// Why a run directory is left out of the history.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    #[error("the history reached its budget of {mib} MiB of run files here")]
    Budget { mib: u64 },
    #[error("{file}: {source}")]
    Unreadable {
        file: &'static str,
        source: std::io::Error,
    },
    #[error("{file} is not UTF-8 text")]
    NotText { file: &'static str },
    #[error(
        "{}:{line}:{column}: {source} (a damaged or half-written run directory)",
        META_FILE
    )]
    Meta {
        line: usize,
        column: usize,
        source: serde_json::Error,
    },
    #[error("{}:{line}:{column}: {source} (a damaged run directory)", POINTS_FILE)]
    Points {
        line: usize,
        column: usize,
        source: serde_json::Error,
    },
    /// A file of a run committed in git could not be read from the repository.
    #[error("{file}: {why}")]
    NotInGit { file: &'static str, why: String },
}

/// A run from the text of its `meta.json` and `points.jsonl` (`""` when it has none): a
/// record cut off at the end of a line (a crash mid-write) is skipped and its line kept in
/// `truncated_lines`, as `compare` does; any other bad line leaves the whole run out.
pub(crate) fn parse_run(path: PathBuf, meta: &str, points: &str) -> Result<LoadedRun, LoadError> {
    let meta = meta_of(meta)?;
    let points = points_of(std::io::Cursor::new(points.as_bytes()))?;
    Ok(loaded(path, meta, points))
}

fn meta_of(text: &str) -> Result<RunMeta, LoadError> {
    match rundir::parse_meta(Path::new(META_FILE), text) {
        Ok(meta) => Ok(meta),
        Err(RunDirError::Parse { source, .. }) => Err(LoadError::Meta {
            line: source.line(),
            column: source.column(),
            source,
        }),
        Err(RunDirError::Io { source, .. }) => Err(LoadError::Unreadable {
            file: META_FILE,
            source,
        }),
        Err(other) => Err(LoadError::Unreadable {
            file: META_FILE,
            source: std::io::Error::other(other.to_string()),
        }),
    }
}

fn points_of(reader: impl std::io::BufRead) -> Result<JsonlRead<PointRecord>, LoadError> {
    match rundir::read_points_from(Path::new(POINTS_FILE), reader) {
        Ok(read) => Ok(read),
        Err(RunDirError::Parse { line, source, .. }) => Err(LoadError::Points {
            line,
            column: source.column(),
            source,
        }),
        Err(RunDirError::Io { source, .. }) => Err(LoadError::Unreadable {
            file: POINTS_FILE,
            source,
        }),
        Err(other) => Err(LoadError::Unreadable {
            file: POINTS_FILE,
            source: std::io::Error::other(other.to_string()),
        }),
    }
}

fn loaded(path: PathBuf, meta: RunMeta, points: JsonlRead<PointRecord>) -> LoadedRun {
    LoadedRun {
        path,
        meta,
        points: points.records,
        truncated_lines: points.truncated_lines,
        part: None,
        searches: None,
    }
}

/// Every run directory under `paths`, read; those that cannot be read are named with why.
pub fn load_dirs(paths: &[PathBuf], budget: &Budget) -> (Vec<LoadedRun>, Vec<SkippedRun>) {
    let (dirs, mut skipped) = find_run_dirs(paths, budget);
    let mut runs = Vec::new();
    let mut spent = 0u64;
    for dir in dirs {
        match load_dir(&dir, budget, &mut spent) {
            Ok(run) => runs.push(run),
            Err(why) => skipped.push(SkippedRun {
                path: dir.display().to_string(),
                why: why.to_string(),
            }),
        }
    }
    (runs, skipped)
}
