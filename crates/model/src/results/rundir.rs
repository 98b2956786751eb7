//! `RunDir`: one run's directory on disk, `<out>/<name>/<UTC timestamp>/`.
//!
//! ```text
//! spec.yaml          the spec as given, secrets redacted
//! resolved.yaml      the expanded points
//! meta.json          RunMeta (rewritten atomically)
//! requests.jsonl     one RequestRecord per line, appended as each request completes
//! points.jsonl       one PointRecord per line
//! server-<group>.log server logs (written by the runner)
//! report.md          the rendered report
//! .lock              locked by the process working on the run (its pid inside)
//! ```
//!
//! Every file is written through the process's current redactor ([`crate::redact`]): a
//! secret of the spec never lands here, whichever writer it reaches.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::meta::RunMeta;
use super::records::{PointRecord, RequestRecord};

/// The spec as given, secrets redacted.
pub(crate) const SPEC_FILE: &str = "spec.yaml";
/// The expanded points.
pub(crate) const RESOLVED_FILE: &str = "resolved.yaml";
/// `RunMeta`, pretty JSON.
pub const META_FILE: &str = "meta.json";
/// Where `meta.json` is written before it is renamed into place.
const META_TMP_FILE: &str = "meta.json.tmp";
/// One `RequestRecord` per line.
pub const REQUESTS_FILE: &str = "requests.jsonl";
/// One `PointRecord` per line.
pub const POINTS_FILE: &str = "points.jsonl";
/// The server's `/metrics`, scraped while points run (one line per scrape).
pub(crate) const METRICS_FILE: &str = "metrics.jsonl";
/// The GPU telemetry, one [`super::gpu::GpuSample`] a line, taken while points run.
pub(crate) const GPU_FILE: &str = "gpu.jsonl";
/// Bytes of `gpu.jsonl` past which no reading is written (8 GPUs every 200 ms for a day are
/// about 400 MiB: a long run keeps its first hours, and says where it stopped).
pub(crate) const GPU_BUDGET: u64 = 128 << 20;
/// The Slurm jobs the run submitted, one [`super::meta::SubmittedJob`] a line, each written
/// as `sbatch` answered.
pub const SLURM_JOBS_FILE: &str = "slurm-jobs.jsonl";
/// Bytes of `metrics.jsonl` past which the scrapes taken while requests run (`tick`) are no
/// longer written; each round's `start` and `end` scrapes (what the server view is computed
/// from) still are.
pub(crate) const METRICS_TICK_BUDGET: u64 = 64 << 20;
/// Bytes of `metrics.jsonl` past which no scrape is written.
pub(crate) const METRICS_BUDGET: u64 = 128 << 20;
/// The `at` of the line that says where `metrics.jsonl` reached a budget (its `cut` says
/// which).
pub const METRICS_BUDGET_AT: &str = "budget";
/// The rendered report.
pub const REPORT_FILE: &str = "report.md";
/// Folder of the SVG charts the report links to.
pub const CHARTS_DIR: &str = "charts";
/// Locked by the runner (or `down`) that works on the run directory, for its whole life;
/// holds that process's pid. The lock goes with the process, even a killed one.
pub const LOCK_FILE: &str = ".lock";

/// Why a run directory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// The folder has no `meta.json`.
    #[error(
        "{path}: not a run directory (no meta.json); pass a folder created by `servebench run`, \
         like runs/<name>/<timestamp>"
    )]
    NotARunDir { path: PathBuf },
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Another process (a runner, `down`) works on the run directory now.
    #[error(
        "{}: another servebench process ({}) is working on this run directory; wait for it to end, or stop it{}",
        .path.display(),
        .pid.map_or("pid unknown".to_string(), |p| format!("pid {p}")),
        .pid.map_or(String::new(), |p| format!(" (Ctrl-C in its terminal, or `kill {p}`)"))
    )]
    Locked {
        path: PathBuf,
        /// The other process, as it wrote itself into the lock file.
        pid: Option<u32>,
    },
    /// A file holds something other than the expected JSON.
    #[error("{path}:{line}: invalid record: {source}")]
    Parse {
        path: PathBuf,
        /// 1-based line in the file.
        line: usize,
        #[source]
        source: serde_json::Error,
    },
}

/// Records read from a `.jsonl` file, with the lines that were skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonlRead<T> {
    /// The records that parsed, in file order.
    pub records: Vec<T>,
    /// Lines that ended mid-record (a crash while writing) and were skipped, 1-based.
    pub truncated_lines: Vec<usize>,
}

/// A run directory. Appends are serialised by a mutex per file, so one `RunDir` can be shared
/// (`Arc<RunDir>`) by concurrent request tasks.
#[derive(Debug)]
pub struct RunDir {
    /// The run's folder, `<out>/<name>/<timestamp>`.
    pub path: PathBuf,
    requests: Mutex<Option<File>>,
    points: Mutex<Option<File>>,
    metrics: Mutex<Option<File>>,
    /// `gpu.jsonl`, its bytes so far (None until opened) and whether its budget was said.
    gpu: Mutex<Option<(File, u64, bool)>>,
    /// [`GPU_BUDGET`] (smaller in tests).
    gpu_budget: u64,
    slurm_jobs: Mutex<Option<File>>,
    /// Which budgets of `metrics.jsonl` were reached and said (bit 1: ticks, bit 2: all).
    metrics_cut: std::sync::atomic::AtomicU8,
    /// [`METRICS_TICK_BUDGET`] and [`METRICS_BUDGET`] (smaller in tests).
    metrics_budgets: [u64; 2],
    /// The locked `.lock` file while this process works on the directory.
    lock: Mutex<Option<File>>,
    /// The host measuring each server group now (host pools): stamped on the group's points
    /// as they are appended.
    group_hosts: Mutex<std::collections::HashMap<String, String>>,
}

impl RunDir {
    fn at(path: PathBuf) -> RunDir {
        RunDir {
            path,
            requests: Mutex::new(None),
            points: Mutex::new(None),
            metrics: Mutex::new(None),
            gpu: Mutex::new(None),
            gpu_budget: GPU_BUDGET,
            slurm_jobs: Mutex::new(None),
            metrics_cut: Default::default(),
            metrics_budgets: [METRICS_TICK_BUDGET, METRICS_BUDGET],
            lock: Mutex::new(None),
            group_hosts: Mutex::default(),
        }
    }

    /// Locks the run directory for as long as this `RunDir` lives (the process's life, for a
    /// runner): a second runner (`run --resume`) or `down` on it fails at once with
    /// [`RunDirError::Locked`], naming this process. The lock is the OS's (flock), so it goes
    /// with the process, even one killed with SIGKILL.
    pub fn lock(&self) -> Result<(), RunDirError> {
        let path = self.file(LOCK_FILE);
        let io_err = |source| RunDirError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(RunDirError::Locked {
                    path: self.path.clone(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io_err(e)),
        }
        file.set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
            .map_err(io_err)?;
        *self.lock.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
        Ok(())
    }

    /// Creates `<out>/<name>/<timestamp>/` (adds a -2, -3 suffix if it exists), writes spec.yaml
    /// (secrets redacted).
    pub fn create(
        out: &Path,
        name: &str,
        spec_source: &str,
        started: DateTime<Utc>,
    ) -> io::Result<RunDir> {
        // One plain folder name, so the run is always under `out`: `..`, `.`, `a/b` or an
        // absolute path would put it elsewhere (specs refuse them; this is the last guard).
        let mut parts = Path::new(name).components();
        if !matches!(
            (parts.next(), parts.next()),
            (Some(std::path::Component::Normal(_)), None)
        ) || name.contains('/')
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "run name {name:?} is not a plain folder name: the run would not be under {}",
                    out.display()
                ),
            ));
        }
        let parent = out.join(name);
        fs::create_dir_all(&parent)?;
        let stamp = started.format("%Y-%m-%dT%H-%M-%SZ").to_string();
        // `create_dir` (not `_all`) fails on an existing folder, so two runs started in the same
        // second never share a directory.
        let mut n = 1;
        let path = loop {
            let candidate = if n == 1 {
                parent.join(&stamp)
            } else {
                parent.join(format!("{stamp}-{n}"))
            };
            match fs::create_dir(&candidate) {
                Ok(()) => break candidate,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(e),
            }
        };
        fs::write(
            path.join(SPEC_FILE),
            crate::redact::text(spec_source).as_bytes(),
        )?;
        Ok(RunDir::at(path))
    }

    /// Opens an existing run directory (it must hold `meta.json`).
    pub fn open(path: &Path) -> Result<RunDir, RunDirError> {
        if !path.join(META_FILE).is_file() {
            return Err(RunDirError::NotARunDir {
                path: path.to_path_buf(),
            });
        }
        Ok(RunDir::at(path.to_path_buf()))
    }

    /// Path of a file inside the run directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `resolved.yaml`.
    pub fn write_resolved(&self, resolved: &impl Serialize) -> io::Result<()> {
        let yaml = serde_saphyr::to_string(&redacted(resolved)?).map_err(io::Error::other)?;
        fs::write(self.file(RESOLVED_FILE), yaml)
    }

    /// Writes `meta.json` atomically (temporary file, then rename), so a crash leaves either the
    /// old or the new meta, never half of one. A write that fails (a full disk) leaves no
    /// temporary file behind.
    pub fn write_meta(&self, meta: &RunMeta) -> io::Result<()> {
        let mut json = serde_json::to_string_pretty(&redacted(meta)?).map_err(io::Error::other)?;
        json.push('\n');
        let tmp = self.file(META_TMP_FILE);
        let written = fs::write(&tmp, json).and_then(|()| fs::rename(&tmp, self.file(META_FILE)));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    /// Appends one request to `requests.jsonl`. Safe to call from several threads.
    pub fn append_request(&self, r: &RequestRecord) -> io::Result<()> {
        append_line(&self.requests, &self.file(REQUESTS_FILE), r)
    }

    /// Appends one scrape to `metrics.jsonl`, within its budget ([`METRICS_TICK_BUDGET`],
    /// [`METRICS_BUDGET`]): a scrape past it is left out, and the first one left out at each
    /// budget is replaced by a line saying so (`at: "budget"`, `cut` in words).
    pub fn append_metrics(&self, m: &super::server_view::MetricsScrape) -> io::Result<()> {
        let line = serialized(m)?;
        let mut guard = self.metrics.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(open_for_append(&self.file(METRICS_FILE))?);
        }
        let file = guard.as_mut().expect("opened above");
        let len = file.metadata()?.len();
        let (budget, what) = if m.at == "tick" {
            (
                self.metrics_budgets[0],
                "scrapes taken while requests run are no longer written (each round's start and end still are)",
            )
        } else {
            (self.metrics_budgets[1], "no scrape is written any more")
        };
        if len + line.len() as u64 <= budget {
            file.write_all(&line)?;
            return file.flush();
        }
        let bit = if m.at == "tick" { 1 } else { 2 };
        let said = self
            .metrics_cut
            .fetch_or(bit, std::sync::atomic::Ordering::Relaxed);
        if said & bit == 0 {
            let note = super::server_view::MetricsScrape {
                point: m.point.clone(),
                round: m.round,
                t: m.t,
                at: METRICS_BUDGET_AT.into(),
                values: Default::default(),
                error: None,
                cut: Some(format!(
                    "{METRICS_FILE} reached its budget of {} at this point: {what}",
                    if budget >= 1 << 20 {
                        format!("{} MiB", budget >> 20)
                    } else {
                        format!("{budget} bytes")
                    }
                )),
                worker: m.worker.clone(),
            };
            file.write_all(&serialized(&note)?)?;
            file.flush()?;
        }
        Ok(())
    }

    /// Appends one GPU reading to `gpu.jsonl`, within [`GPU_BUDGET`]: past it readings are
    /// left out, and the first one left out is replaced by a line saying so (`cut`).
    pub fn append_gpu(&self, g: &super::gpu::GpuSample) -> io::Result<()> {
        let line = serialized(g)?;
        let mut guard = self.gpu.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let file = open_for_append(&self.file(GPU_FILE))?;
            let len = file.metadata()?.len();
            *guard = Some((file, len, false));
        }
        let Some((file, len, said)) = guard.as_mut() else {
            return Ok(());
        };
        if *len + line.len() as u64 <= self.gpu_budget {
            file.write_all(&line)?;
            *len += line.len() as u64;
            return file.flush();
        }
        if !*said {
            *said = true;
            let note = super::gpu::GpuSample {
                point: g.point.clone(),
                round: g.round,
                t: g.t,
                gpus: Vec::new(),
                cut: Some(format!(
                    "{GPU_FILE} reached its budget of {} here: no reading is written any more",
                    if self.gpu_budget >= 1 << 20 {
                        format!("{} MiB", self.gpu_budget >> 20)
                    } else {
                        format!("{} bytes", self.gpu_budget)
                    }
                )),
            };
            file.write_all(&serialized(&note)?)?;
            file.flush()?;
        }
        Ok(())
    }

    /// The GPU readings of the run (empty when none were taken), truncated lines skipped.
    pub fn read_gpu(&self) -> Result<Vec<super::gpu::GpuSample>, RunDirError> {
        Ok(read_jsonl(&self.file(GPU_FILE))?.records)
    }

    /// Records a Slurm job the run submitted (before it runs).
    pub fn append_slurm_job(&self, job: &super::meta::SubmittedJob) -> io::Result<()> {
        append_line(&self.slurm_jobs, &self.file(SLURM_JOBS_FILE), job)
    }

    /// The Slurm jobs the run submitted (empty when it submitted none), truncated lines
    /// skipped.
    pub fn read_slurm_jobs(&self) -> Result<Vec<super::meta::SubmittedJob>, RunDirError> {
        Ok(read_jsonl(&self.file(SLURM_JOBS_FILE))?.records)
    }

    /// Records that `host` measures `group` from now on (a host pool): its points appended
    /// later carry the host's name. Every append goes through one lock per file, so groups
    /// measured in parallel write whole lines.
    pub fn set_group_host(&self, group: &str, host: &str) {
        self.group_hosts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(group.to_string(), host.to_string());
    }

    /// Appends one point to `points.jsonl`.
    pub fn append_point(&self, p: &PointRecord) -> io::Result<()> {
        let host = match &p.host {
            Some(_) => None,
            None => self
                .group_hosts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&p.group)
                .cloned(),
        };
        if let Some(host) = host {
            let mut stamped = p.clone();
            stamped.host = Some(host);
            return append_line(&self.points, &self.file(POINTS_FILE), &stamped);
        }
        append_line(&self.points, &self.file(POINTS_FILE), p)
    }

    /// Writes `search.json` atomically (temporary file, then rename), like `meta.json`.
    pub fn write_search(&self, file: &super::search::SearchFile) -> io::Result<()> {
        let mut json = serde_json::to_string_pretty(&redacted(file)?).map_err(io::Error::other)?;
        json.push('\n');
        let path = self.file(super::search::SEARCH_FILE);
        let tmp = path.with_extension("json.tmp");
        let written = fs::write(&tmp, json).and_then(|()| fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }

    /// Reads `search.json` (None when the run has no search).
    pub fn read_search(&self) -> Result<Option<super::search::SearchFile>, RunDirError> {
        let path = self.file(super::search::SEARCH_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let text = read_file(&path).map_err(|source| RunDirError::Io {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| RunDirError::Parse {
                line: source.line(),
                path,
                source,
            })
    }

    /// Where the runner writes the log of server group `group`.
    pub fn server_log_path(&self, group: &str) -> PathBuf {
        self.file(&format!("server-{group}.log"))
    }

    /// Reads `meta.json`.
    pub fn read_meta(&self) -> Result<RunMeta, RunDirError> {
        let path = self.file(META_FILE);
        let text = read_file_within(&path, META_BUDGET).map_err(|source| RunDirError::Io {
            path: path.clone(),
            source,
        })?;
        parse_meta(&path, &text)
    }

    /// Reads `requests.jsonl` (empty when absent). A line cut off mid-record is skipped with a
    /// warning; use [`RunDir::read_requests_detailed`] to learn which.
    pub fn read_requests(&self) -> Result<Vec<RequestRecord>, RunDirError> {
        Ok(self.read_requests_detailed()?.records)
    }

    /// Reads `requests.jsonl`, reporting skipped truncated lines.
    pub fn read_requests_detailed(&self) -> Result<JsonlRead<RequestRecord>, RunDirError> {
        read_jsonl(&self.file(REQUESTS_FILE))
    }

    /// Reads `requests.jsonl` like [`RunDir::read_requests_detailed`], each record without
    /// what no aggregate reads ([`RequestRecord::drop_detail`]). Every request in memory: the
    /// report folds them line by line instead ([`RunDir::visit_requests`]); the
    /// `report_memory` bench reads this for the memory that takes.
    pub fn read_requests_lean(&self) -> Result<JsonlRead<RequestRecord>, RunDirError> {
        read_jsonl_with(&self.file(REQUESTS_FILE), RequestRecord::drop_detail)
    }

    /// Reads `requests.jsonl` one line at a time, handing each record to `visit` before the
    /// next line is read, so memory does not grow with the run's requests (a report of a
    /// million requests folds them into per-point digests). `T` is [`RequestRecord`] or any
    /// type that reads the fields it needs from a request's line. Returns the lines cut off
    /// mid-record (a crash while writing) that were skipped, 1-based; an absent file has no
    /// records.
    pub fn visit_requests<T: DeserializeOwned>(
        &self,
        visit: impl FnMut(T),
    ) -> Result<Vec<usize>, RunDirError> {
        visit_jsonl(&self.file(REQUESTS_FILE), visit)
    }

    /// Reads `metrics.jsonl` (empty when absent), skipping truncated lines.
    pub fn read_metrics(&self) -> Result<Vec<super::server_view::MetricsScrape>, RunDirError> {
        Ok(read_jsonl(&self.file(METRICS_FILE))?.records)
    }

    /// Reads `points.jsonl` (empty when absent), tolerating truncated lines like `read_requests`.
    pub fn read_points(&self) -> Result<Vec<PointRecord>, RunDirError> {
        Ok(self.read_points_detailed()?.records)
    }

    /// Reads `points.jsonl`, reporting skipped truncated lines.
    pub fn read_points_detailed(&self) -> Result<JsonlRead<PointRecord>, RunDirError> {
        let path = self.file(POINTS_FILE);
        match open_regular(&path, POINTS_BUDGET) {
            Ok(file) => read_points_from(&path, io::BufReader::new(file.take(POINTS_BUDGET))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(JsonlRead {
                records: Vec::new(),
                truncated_lines: Vec::new(),
            }),
            Err(source) => Err(RunDirError::Io { path, source }),
        }
    }

    /// For `run --resume`: keeps only the records of the points in `keep` (finished points) in
    /// `points.jsonl` and `requests.jsonl`, so the points measured again do not count twice.
    /// Each file is rewritten to a temporary file and renamed over the old one; lines are kept
    /// byte for byte, truncated lines dropped.
    pub fn retain_points(&self, keep: &std::collections::HashSet<String>) -> io::Result<()> {
        #[derive(serde::Deserialize)]
        struct Head {
            #[serde(default)]
            id: Option<String>,
            #[serde(default)]
            point: Option<String>,
        }
        for name in [POINTS_FILE, REQUESTS_FILE] {
            let path = self.file(name);
            // Kept as before: the runner's own files, whatever their size.
            let text = match read_file_within(&path, u64::MAX) {
                Ok(t) => t,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let mut out = String::with_capacity(text.len());
            for line in text.lines() {
                let Ok(head) = serde_json::from_str::<Head>(line) else {
                    continue;
                };
                let id = if name == POINTS_FILE {
                    head.id
                } else {
                    head.point
                };
                if id.is_some_and(|id| keep.contains(&id)) {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            let tmp = self.file(&format!("{name}.tmp"));
            fs::write(&tmp, out)?;
            fs::rename(&tmp, &path)?;
        }
        // Appends reopen the rewritten files.
        *self.requests.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self.points.lock().unwrap_or_else(|e| e.into_inner()) = None;
        Ok(())
    }

    /// Writes `report.md`.
    pub fn write_report(&self, markdown: &str) -> io::Result<()> {
        fs::write(
            self.file(REPORT_FILE),
            crate::redact::text(markdown).as_bytes(),
        )
    }
}

/// `value` as JSON with secrets hidden by the current redactor.
fn redacted(value: &impl Serialize) -> io::Result<serde_json::Value> {
    crate::redact::current()
        .to_json_value(value)
        .map_err(io::Error::other)
}

/// `value` as one redacted JSON line, newline included.
fn serialized(value: &impl Serialize) -> io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(&redacted(value)?).map_err(io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

/// Serialises `value` as one line and writes it with a single `write_all` on an unbuffered file,
/// so the line reaches the OS before this returns (a crash of servebench loses nothing).
fn append_line(slot: &Mutex<Option<File>>, path: &Path, value: &impl Serialize) -> io::Result<()> {
    let line = serialized(value)?;
    // A poisoned lock only means another append panicked; the file handle is still sound.
    let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        *guard = Some(open_for_append(path)?);
    }
    let file = guard.as_mut().expect("opened above");
    file.write_all(&line)?;
    file.flush()
}

/// Opens a `.jsonl` file for appending. If an earlier process died mid-line, ends that line
/// first, so the next record starts on a line of its own and the cut one stays detectable.
fn open_for_append(path: &Path) -> io::Result<File> {
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1))?;
        file.read_exact(&mut last)?;
        if last[0] != b'\n' {
            file.write_all(b"\n")?;
        }
    }
    Ok(file)
}

/// Reads a file of the run directory whole, within `limit` bytes (see [`open_regular`]).
fn read_file_within(path: &Path, limit: u64) -> io::Result<String> {
    let mut text = String::new();
    open_regular(path, limit)?
        .take(limit)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// Reads a small file of the run directory whole ([`SMALL_FILE_BUDGET`]).
fn read_file(path: &Path) -> io::Result<String> {
    read_file_within(path, SMALL_FILE_BUDGET)
}

/// Opens a file of a run directory for reading, only when it is a regular file of at most
/// `limit` bytes, never through a symbolic link: a record file that is a device (a link to
/// /dev/zero) would never end, a FIFO would block the reader forever, and a link may point
/// anywhere. Looked at before opening, opened without following a link and without blocking
/// (in case it was replaced since), and looked at again.
pub fn open_regular(path: &Path, limit: u64) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let check = |meta: &fs::Metadata| -> io::Result<()> {
        if meta.file_type().is_symlink() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a symbolic link: run files are read only as regular files, never through a link",
            ));
        }
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}, not a regular file", crate::input_file::file_kind(meta)),
            ));
        }
        if meta.len() > limit {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} bytes, over its budget of {} MiB",
                    meta.len(),
                    limit >> 20
                ),
            ));
        }
        Ok(())
    };
    check(&fs::symlink_metadata(path)?)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOFOLLOW)
        .open(path)?;
    check(&file.metadata()?)?;
    Ok(file)
}

/// A new file at `path` for writing, never through a link: a link planted at `path` is
/// removed (not its target), and the file is created only where nothing is.
pub fn create_fresh(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "a directory is in the way",
            ));
        }
        Ok(_) => std::fs::remove_file(path)?,
        Err(_) => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
}

/// Bytes of `meta.json` read at most (a run's is a few KiB; a spec with long inline prompts
/// more).
pub const META_BUDGET: u64 = 16 << 20;
/// Bytes of `points.jsonl` read at most.
pub const POINTS_BUDGET: u64 = 256 << 20;
/// Bytes of another small file of the run directory (`search.json`, `slurm-jobs.jsonl`).
const SMALL_FILE_BUDGET: u64 = 64 << 20;
/// Point records kept from one `points.jsonl`: a sweep of this many points is far past any
/// spec's, and each record costs memory (a file of small records could otherwise cost
/// gigabytes within its byte budget).
pub const MAX_POINTS: usize = 20_000;
/// JSON values (objects, arrays and each element or member) read at most from one
/// `points.jsonl`: about 100 bytes of memory each at worst, so a file within its byte budget
/// never costs more than about a GiB, while a real point (about 400 values) fits 10,000 times.
pub const POINTS_MAX_VALUES: usize = 8_000_000;
/// JSON values read at most from one `meta.json` (a real one has a few thousand).
pub const META_MAX_VALUES: usize = 1_000_000;

/// About how many JSON values `text` holds: every `{`, `[`, `,` and `:` outside strings (an
/// upper bound within one per container), counted in one pass before anything is parsed.
pub fn json_values(text: &[u8]) -> usize {
    let (mut n, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'{' | b'[' | b',' | b':' => n += 1,
                _ => {}
            }
        }
    }
    n
}

/// Why a file over one of its budgets is not read further, as an I/O error naming the budget.
fn over_budget(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// `meta.json`'s text parsed, within [`META_MAX_VALUES`]; `path` names it in errors.
pub fn parse_meta(path: &Path, text: &str) -> Result<RunMeta, RunDirError> {
    let values = json_values(text.as_bytes());
    if values > META_MAX_VALUES {
        return Err(RunDirError::Io {
            path: path.to_path_buf(),
            source: over_budget(format!(
                "about {values} JSON values, over its budget of {META_MAX_VALUES} (a run's meta.json holds a few thousand): not read"
            )),
        });
    }
    serde_json::from_str(text).map_err(|source| RunDirError::Parse {
        line: source.line(),
        path: path.to_path_buf(),
        source,
    })
}

/// `points.jsonl` read line by line from `reader`, within [`MAX_POINTS`] records and
/// [`POINTS_MAX_VALUES`] values; `path` names it in errors. A line cut off mid-record is
/// skipped and its number kept.
pub fn read_points_from(
    path: &Path,
    reader: impl BufRead,
) -> Result<JsonlRead<PointRecord>, RunDirError> {
    let mut records = Vec::new();
    let (mut values, mut lines) = (0usize, 0usize);
    let truncated_lines = visit_lines(
        path,
        reader,
        |line| {
            lines += 1;
            values += json_values(line.as_bytes());
            if values > POINTS_MAX_VALUES {
                return Err(over_budget(format!(
                    "over its budget of {POINTS_MAX_VALUES} JSON values (about 1 GiB of memory): not read"
                )));
            }
            if lines > MAX_POINTS {
                return Err(over_budget(format!(
                    "more than {MAX_POINTS} point records, over the budget of one run: not read"
                )));
            }
            Ok(true)
        },
        |record| records.push(record),
    )?;
    Ok(JsonlRead {
        records,
        truncated_lines,
    })
}

/// Reads one record per line. Blank lines are ignored; a line that ends before its JSON does
/// (a crash mid-write) is skipped and reported; any other bad line is an error naming the line.
fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<JsonlRead<T>, RunDirError> {
    read_jsonl_with(path, |_| ())
}

/// [`read_jsonl`], with `trim` applied to each record as it is read (before the next one).
fn read_jsonl_with<T: DeserializeOwned>(
    path: &Path,
    trim: impl Fn(&mut T),
) -> Result<JsonlRead<T>, RunDirError> {
    let mut records = Vec::new();
    let truncated_lines = visit_jsonl(path, |mut record| {
        trim(&mut record);
        records.push(record);
    })?;
    Ok(JsonlRead {
        records,
        truncated_lines,
    })
}

/// Reads one record per line, handing each to `visit` as it is parsed. Blank lines are
/// ignored; a line that ends before its JSON does (a crash mid-write) is skipped and its
/// number returned; any other bad line is an error naming the line. An absent file holds no
/// records.
fn visit_jsonl<T: DeserializeOwned>(
    path: &Path,
    visit: impl FnMut(T),
) -> Result<Vec<usize>, RunDirError> {
    // Line by line, not the file whole: a run's requests.jsonl grows with its requests (about
    // 700 bytes each). Any size: each record is handed on, not kept.
    let reader = match open_regular(path, u64::MAX) {
        Ok(file) => io::BufReader::new(file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(RunDirError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    visit_lines(path, reader, |_| Ok(true), visit)
}

/// [`visit_jsonl`] over `reader`: `admit` sees each line's text before it is parsed and may
/// refuse the file (an error) or skip the line (false).
fn visit_lines<T: DeserializeOwned>(
    path: &Path,
    mut reader: impl BufRead,
    mut admit: impl FnMut(&str) -> io::Result<bool>,
    mut visit: impl FnMut(T),
) -> Result<Vec<usize>, RunDirError> {
    let io_err = |source| RunDirError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut truncated = Vec::new();
    // One line's buffer is reused for the next.
    let mut line = String::new();
    let mut number = 0;
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(io_err)? == 0 {
            break;
        }
        number += 1;
        // Without its line ending, as `lines()` gives it: a record cut inside a string must
        // end there (a truncated record), not at a newline inside the string (bad JSON).
        let text = line.strip_suffix('\n').unwrap_or(&line);
        let text = text.strip_suffix('\r').unwrap_or(text);
        if text.trim().is_empty() {
            continue;
        }
        if !admit(text).map_err(|e| io_err(over_budget(format!("line {number}: {e}"))))? {
            continue;
        }
        match serde_json::from_str(text) {
            Ok(record) => visit(record),
            Err(e) if e.is_eof() => {
                tracing::warn!("{}:{number}: skipped a truncated record", path.display());
                truncated.push(number);
            }
            Err(source) => {
                return Err(RunDirError::Parse {
                    path: path.to_path_buf(),
                    line: number,
                    source,
                });
            }
        }
    }
    Ok(truncated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::server_view::MetricsScrape;

    fn scrape(at: &str, names: usize) -> MetricsScrape {
        MetricsScrape {
            point: "p001".into(),
            round: 0,
            t: 1.0,
            at: at.into(),
            values: (0..names).map(|i| (format!("m{i:04}"), 1.0)).collect(),
            error: None,
            cut: None,
            worker: None,
        }
    }

    #[test]
    fn metrics_jsonl_keeps_to_its_budget_and_says_where_it_was_reached() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = RunDir::at(tmp.path().to_path_buf());
        dir.metrics_budgets = [4_000, 8_000];
        // About 1 KB a scrape.
        for _ in 0..20 {
            dir.append_metrics(&scrape("tick", 80)).unwrap();
            dir.append_metrics(&scrape("end", 80)).unwrap();
        }
        let len = std::fs::metadata(dir.file(METRICS_FILE)).unwrap().len();
        assert!(len <= 8_000 + 400, "{len} bytes");
        let lines = dir.read_metrics().unwrap();
        let said: Vec<&str> = lines
            .iter()
            .filter(|s| s.at == METRICS_BUDGET_AT)
            .filter_map(|s| s.cut.as_deref())
            .collect();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].contains("no longer written"), "{said:?}");
        assert!(said[1].contains("no scrape is written"), "{said:?}");
        let ticks = lines.iter().filter(|s| s.at == "tick").count();
        let ends = lines.iter().filter(|s| s.at == "end").count();
        assert!(ticks < ends, "ticks stop first: {ticks} ticks, {ends} ends");
    }

    #[test]
    fn gpu_jsonl_keeps_to_its_budget_and_says_where_it_was_reached() {
        use super::super::gpu::{GpuReading, GpuSample};
        let tmp = tempfile::tempdir().unwrap();
        let mut dir = RunDir::at(tmp.path().to_path_buf());
        dir.gpu_budget = 2_000;
        let reading = GpuSample {
            point: "p001".into(),
            round: 0,
            t: 1.0,
            gpus: (0..2)
                .map(|i| GpuReading {
                    index: i,
                    name: Some("NVIDIA H200".into()),
                    power_w: Some(300.0),
                    ..GpuReading::default()
                })
                .collect(),
            cut: None,
        };
        for _ in 0..50 {
            dir.append_gpu(&reading).unwrap();
        }
        let len = std::fs::metadata(dir.file(GPU_FILE)).unwrap().len();
        assert!(len <= 2_000 + 300, "{len} bytes");
        let lines = dir.read_gpu().unwrap();
        let cuts: Vec<&str> = lines.iter().filter_map(|g| g.cut.as_deref()).collect();
        assert_eq!(
            cuts,
            ["gpu.jsonl reached its budget of 2000 bytes here: no reading is written any more"]
        );
        assert!(
            lines
                .iter()
                .filter(|g| g.cut.is_none())
                .all(|g| g == &reading)
        );
        assert!(lines.len() > 5 && lines.len() < 50, "{} lines", lines.len());
    }
}
