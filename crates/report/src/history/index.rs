//! The embedded index that keeps a history fast: one JSON line per run directory (its `runs`
//! row with its points nested, the schema documented in docs/guide/history.md and shared with
//! the PostgreSQL store), behind a header line naming the index's format version. The run
//! directories stay the truth: an entry is used only while its directory's `meta.json` and
//! `points.jsonl` have the size and modification time it was read at; anything else is read
//! again, and the whole index is rebuilt when it is missing, damaged or from another version.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::model::SkippedRun;
use super::source::{Budget, find_run_dirs, load_dir};
use crate::report::compare::LoadedRun;
use servebench_model::results::meta::RunMeta;
use servebench_model::results::records::PointRecord;
use servebench_model::results::rundir::{META_FILE, POINTS_FILE};

/// The index's format version: bumped whenever a row's fields change meaning, so an index
/// an older servebench wrote is rebuilt, never misread.
pub(crate) const INDEX_VERSION: u32 = 1;

/// The default index file, in the folder of run directories it indexes.
pub const INDEX_FILE: &str = ".servebench-history-index.jsonl";

/// What the header line says.
const FORMAT: &str = "servebench-history-index";

/// Bytes of an index read at most (past it the index is rebuilt from the run directories).
const INDEX_BUDGET: u64 = 4 << 30;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    servebench: String,
}

/// One run: the `runs` table's row, with its `points` rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// The run directory (or `commit:path` from git): the key.
    pub run_dir: String,
    /// What the row was read from: `meta.json` and `points.jsonl`'s size and modification time
    /// (`dir:<bytes>:<ns>;<bytes>:<ns>`), or their git object ids (`git:<oid>;<oid>`).
    pub stamp: String,
    /// The experiment's name.
    pub experiment: String,
    /// RFC 3339 UTC start time.
    pub started_at: String,
    /// The run's status.
    pub status: String,
    /// servebench's version that ran it.
    pub tool_version: String,
    /// Lines of `points.jsonl` skipped as cut off mid-record.
    #[serde(default)]
    pub truncated_lines: Vec<usize>,
    /// `meta.json` as read.
    pub meta: RunMeta,
    /// `points.jsonl`'s records, in file order (the `points` table's rows).
    pub points: Vec<PointRecord>,
}

impl RunRow {
    /// The row of a loaded run.
    pub fn of(run: &LoadedRun, stamp: String) -> RunRow {
        RunRow {
            run_dir: run.path.display().to_string(),
            stamp,
            experiment: run.meta.experiment.name.clone(),
            started_at: run.meta.started_at.clone(),
            status: run.meta.status.to_string(),
            tool_version: run.meta.tool_version.clone(),
            truncated_lines: run.truncated_lines.clone(),
            meta: run.meta.clone(),
            points: run.points.clone(),
        }
    }

    /// The run again.
    pub(crate) fn into_run(self) -> LoadedRun {
        LoadedRun {
            path: PathBuf::from(self.run_dir),
            meta: self.meta,
            points: self.points,
            truncated_lines: self.truncated_lines,
            part: None,
            searches: None,
        }
    }
}

/// How the index was used, for the console and the tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexUse {
    /// Runs taken from the index.
    pub reused: usize,
    /// Runs read from their directories (new or changed).
    pub read: usize,
    /// Why the index was rebuilt from scratch, when it was (`missing`, `version 0`, ...).
    pub rebuilt: Option<String>,
    /// Why the index could not be written, when it could not (the history is still right).
    pub not_written: Option<String>,
}

/// A run directory's stamp: its files' sizes and modification times.
pub(crate) fn dir_stamp(dir: &Path) -> Option<String> {
    let one = |name: &str| -> Option<String> {
        match std::fs::symlink_metadata(dir.join(name)) {
            Ok(m) => {
                let ns = m
                    .modified()
                    .ok()?
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()?
                    .as_nanos();
                Some(format!("{}:{ns}", m.len()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("-".to_string()),
            Err(_) => None,
        }
    };
    Some(format!("dir:{};{}", one(META_FILE)?, one(POINTS_FILE)?))
}

// A String error on purpose: why an index is stale is only said (the index is then rebuilt
// from the run directories, which stay the truth), never matched.
/// Reads an index: its rows by key, or why it must be rebuilt.
pub fn read(path: &Path) -> Result<HashMap<String, RunRow>, String> {
    use servebench_model::results::rundir;
    use std::io::{BufRead, Read};
    // Only a regular file, never through a link, a FIFO or a device (a link to /dev/zero
    // would be read until memory ran out), and line by line: no copy of the whole text.
    let file = rundir::open_regular(path, INDEX_BUDGET).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "missing".to_string()
        } else {
            e.to_string()
        }
    })?;
    let mut lines = std::io::BufReader::new(file.take(INDEX_BUDGET)).lines();
    let header: Header = lines
        .next()
        .and_then(Result::ok)
        .and_then(|l| serde_json::from_str(&l).ok())
        .ok_or_else(|| "no header line: not an index servebench wrote".to_string())?;
    if header.format != FORMAT {
        return Err(format!("format {:?}, not {FORMAT:?}", header.format));
    }
    if header.version != INDEX_VERSION {
        return Err(format!(
            "written by servebench {} in index version {} (this one reads version {INDEX_VERSION})",
            header.servebench, header.version
        ));
    }
    let mut rows = HashMap::new();
    for (i, line) in lines.enumerate() {
        let line = line.map_err(|e| format!("line {}: {e}", i + 2))?;
        // A row holds one run's meta.json and points.jsonl: their value budgets together.
        if rundir::json_values(line.as_bytes())
            > rundir::META_MAX_VALUES + rundir::POINTS_MAX_VALUES
        {
            return Err(format!(
                "line {}: over the budget of one run (damaged)",
                i + 2
            ));
        }
        let row: RunRow =
            serde_json::from_str(&line).map_err(|e| format!("line {}: {e} (damaged)", i + 2))?;
        rows.insert(row.run_dir.clone(), row);
    }
    Ok(rows)
}

/// Writes the index atomically (a temporary file renamed over it).
pub fn write(path: &Path, rows: &[&RunRow]) -> std::io::Result<()> {
    let tmp = path.with_extension("jsonl.tmp");
    let result = (|| {
        let mut out =
            std::io::BufWriter::new(servebench_model::results::rundir::create_fresh(&tmp)?);
        let header = Header {
            format: FORMAT.to_string(),
            version: INDEX_VERSION,
            servebench: env!("CARGO_PKG_VERSION").to_string(),
        };
        writeln!(out, "{}", serde_json::to_string(&header)?)?;
        for row in rows {
            // Byte for byte what the run directories hold (written through the redactor when
            // they were): redacting again could change a value and so the history.
            writeln!(out, "{}", serde_json::to_string(row)?)?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Every run directory under `paths` through the index at `index`: an entry whose stamp
/// still matches is used, any other directory is read (and its row written back). A damaged
/// run directory is named and left out, as without an index.
pub fn load_dirs(
    paths: &[PathBuf],
    budget: &Budget,
    index: &Path,
) -> (Vec<LoadedRun>, Vec<SkippedRun>, IndexUse) {
    let (dirs, mut skipped) = find_run_dirs(paths, budget);
    let mut usage = IndexUse::default();
    let mut old = match read(index) {
        Ok(rows) => rows,
        Err(why) => {
            usage.rebuilt = Some(why);
            HashMap::new()
        }
    };
    let mut rows: Vec<RunRow> = Vec::new();
    let mut unstamped: Vec<LoadedRun> = Vec::new();
    let mut changed = usage.rebuilt.is_some();
    let mut spent = 0u64;
    for dir in dirs {
        let key = dir.display().to_string();
        let stamp = dir_stamp(&dir);
        if let (Some(stamp), Some(row)) = (&stamp, old.remove(&key))
            && &row.stamp == stamp
        {
            usage.reused += 1;
            rows.push(row);
            continue;
        }
        changed = true;
        match load_dir(&dir, budget, &mut spent) {
            Ok(run) => {
                usage.read += 1;
                // A stamp taken after the read could hide a write between them: the one
                // taken before is kept, so such a run is read again next time.
                match stamp {
                    Some(stamp) => rows.push(RunRow::of(&run, stamp)),
                    None => unstamped.push(run),
                }
            }
            Err(why) => skipped.push(SkippedRun {
                path: key,
                why: why.to_string(),
            }),
        }
    }
    // Rows of directories that are gone.
    changed |= !old.is_empty();
    if changed {
        let refs: Vec<&RunRow> = rows.iter().collect();
        if let Err(e) = write(index, &refs) {
            usage.not_written = Some(format!("{}: {e}", index.display()));
        }
    }
    let mut runs: Vec<LoadedRun> = rows.into_iter().map(RunRow::into_run).collect();
    runs.extend(unstamped);
    (runs, skipped, usage)
}
