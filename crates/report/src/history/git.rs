//! Run directories committed in a git repository's history, read without checking anything
//! out: `git log --name-only` names the commits in a range and the run files each changed,
//! `git ls-tree` finds those files' objects in the commit, and `git cat-file --batch` reads
//! their `meta.json` and `points.jsonl` by object id. Every git command runs with an
//! argument vector (no shell), and a revision that looks like an option is refused.
//!
//! Only runs a commit of the range added or changed are read (`--rev A..B`: the runs
//! committed after A). A run directory committed several times (a run committed while it
//! ran, then finished) is read as the newest commit of the range holds it, and said; the
//! same files under another path are one run, read once.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::model::SkippedRun;
use super::source::{Budget, LoadError, parse_run};
use crate::report::compare::LoadedRun;

/// Why a repository's history could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `git` could not be started.
    #[error("cannot run git: {0}; install git, or pass run directories instead of --git")]
    Spawn(#[source] std::io::Error),
    /// A git command failed (not a repository, an unknown revision, ...).
    #[error("{repo}: `git {command}` failed: {message}")]
    Failed {
        repo: PathBuf,
        command: String,
        message: String,
    },
    /// A revision that git would read as an option.
    #[error("--rev {0}: a revision may not start with `-`")]
    OptionLike(String),
    /// More commits than the budget allows.
    #[error(
        "{repo}: the range {rev} has more than {limit} commits that touch the runs; narrow it (--rev A..B)"
    )]
    TooManyCommits {
        repo: PathBuf,
        rev: String,
        limit: usize,
    },
}

/// The runs read, those left out with why, and notes on the runs read.
pub type Loaded = (Vec<LoadedRun>, Vec<SkippedRun>, Vec<String>);

/// Commits of a range the history reads at most.
pub(crate) const MAX_COMMITS: usize = 10_000;

/// One run directory found in a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    commit: String,
    dir: String,
    meta: String,
    points: Option<String>,
}

/// Runs committed in `repo` over `rev` (`main`, `v1..v2`; default `HEAD`) under `paths`
/// (relative to the repository's root; empty: everywhere): the run directories whose
/// `meta.json` or `points.jsonl` a commit of the range added or changed, each as the newest
/// such commit holds it. Also returns a note for each run changed by more than one commit
/// of the range.
pub fn load(
    repo: &Path,
    rev: &str,
    paths: &[PathBuf],
    budget: &Budget,
) -> Result<Loaded, GitError> {
    if rev.starts_with('-') {
        return Err(GitError::OptionLike(rev.to_string()));
    }
    let commits = commits_in(repo, rev, paths)?;
    // The run directories each commit changed: a folder whose meta.json or points.jsonl it
    // added, changed or removed.
    let run_dir_of = |file: &str| -> Option<String> {
        let dir = file
            .strip_suffix("meta.json")
            .or_else(|| file.strip_suffix("points.jsonl"))?;
        (dir.is_empty() || dir.ends_with('/')).then(|| dir.trim_end_matches('/').to_string())
    };
    // Newest first: each run directory as the newest commit that changed it and holds it.
    let mut found: Vec<Found> = Vec::new();
    let mut dirs_seen: HashSet<String> = HashSet::new();
    let mut files_seen: HashSet<(String, Option<String>)> = HashSet::new();
    let mut changed_in: HashMap<String, Vec<String>> = HashMap::new();
    for (commit, files) in &commits {
        let mut dirs: Vec<String> = files.iter().filter_map(|f| run_dir_of(f)).collect();
        dirs.sort();
        dirs.dedup();
        for d in &dirs {
            changed_in
                .entry(d.clone())
                .or_default()
                .push(commit.clone());
        }
        let pending: Vec<&String> = dirs.iter().filter(|d| !dirs_seen.contains(*d)).collect();
        if pending.is_empty() || found.len() >= budget.runs {
            continue;
        }
        let file_of = |dir: &str, name: &str| {
            if dir.is_empty() {
                name.to_string()
            } else {
                format!("{dir}/{name}")
            }
        };
        let mut args = vec![
            "ls-tree".to_string(),
            "-z".to_string(),
            "--full-tree".to_string(),
            commit.clone(),
            "--".to_string(),
        ];
        for d in &pending {
            args.push(file_of(d, "meta.json"));
            args.push(file_of(d, "points.jsonl"));
        }
        let listing = git(repo, &args)?;
        let mut blobs: HashMap<&str, &str> = HashMap::new();
        for entry in listing.split('\0').filter(|e| !e.is_empty()) {
            // `<mode> <type> <object>\t<path>`
            let Some((head, path)) = entry.split_once('\t') else {
                continue;
            };
            let mut parts = head.split(' ');
            let (_, kind, object) = (parts.next(), parts.next(), parts.next());
            if kind == Some("blob")
                && let Some(object) = object
            {
                blobs.insert(path, object);
            }
        }
        for dir in pending {
            // Removed by this commit: an older one holds it.
            let Some(meta) = blobs.get(file_of(dir, "meta.json").as_str()) else {
                continue;
            };
            dirs_seen.insert(dir.clone());
            let points = blobs
                .get(file_of(dir, "points.jsonl").as_str())
                .map(|s| s.to_string());
            if !files_seen.insert((meta.to_string(), points.clone())) {
                continue;
            }
            found.push(Found {
                commit: commit.clone(),
                dir: dir.clone(),
                meta: meta.to_string(),
                points,
            });
        }
    }
    let notes = changed_twice(&found, &changed_in);
    let (runs, skipped) = read_found(repo, found, budget)?;
    Ok((runs, skipped, notes))
}

/// The commits of `rev` in `repo` that touched `paths`, newest first, each with the files it
/// changed (a merge against its first parent); at most [`MAX_COMMITS`].
fn commits_in(
    repo: &Path,
    rev: &str,
    paths: &[PathBuf],
) -> Result<Vec<(String, Vec<String>)>, GitError> {
    let pathspecs: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    // Each commit (newest first) with the files it changed; a merge against its first parent.
    let mut args = vec![
        "-c".to_string(),
        "core.quotePath=false".to_string(),
        "log".to_string(),
        "--format=%x00%H".to_string(),
        "--name-only".to_string(),
        "--no-renames".to_string(),
        "--diff-merges=first-parent".to_string(),
        format!("--max-count={}", MAX_COMMITS + 1),
        rev.to_string(),
        "--".to_string(),
    ];
    args.extend(pathspecs.iter().cloned());
    let mut commits: Vec<(String, Vec<String>)> = Vec::new();
    for line in git(repo, &args)?.lines() {
        if let Some(hash) = line.strip_prefix('\0') {
            commits.push((hash.to_string(), Vec::new()));
        } else if !line.is_empty()
            && let Some((_, files)) = commits.last_mut()
        {
            files.push(line.to_string());
        }
    }
    if commits.len() > MAX_COMMITS {
        return Err(GitError::TooManyCommits {
            repo: repo.to_path_buf(),
            rev: rev.to_string(),
            limit: MAX_COMMITS,
        });
    }
    Ok(commits)
}

/// A note for each run the range changed more than once: which commits, and which one is read.
fn changed_twice(found: &[Found], changed_in: &HashMap<String, Vec<String>>) -> Vec<String> {
    let mut notes = Vec::new();
    for f in found {
        let commits = &changed_in[&f.dir];
        if commits.len() > 1 {
            let short = |c: &str| c[..c.len().min(12)].to_string();
            notes.push(format!(
                "{}: changed by {} commits of the range (first {}, last {}): read as {} holds it",
                if f.dir.is_empty() { "." } else { &f.dir },
                commits.len(),
                short(commits.last().expect("two or more")),
                short(&commits[0]),
                short(&f.commit)
            ));
        }
    }
    notes
}

/// Reads the found runs' files in one `git cat-file --batch`, within the budget.
fn read_found(
    repo: &Path,
    found: Vec<Found>,
    budget: &Budget,
) -> Result<(Vec<LoadedRun>, Vec<SkippedRun>), GitError> {
    // Each object with its own file's budget: meta.json's is not points.jsonl's.
    let mut wanted: Vec<(&str, u64)> = Vec::new();
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for f in &found {
        if seen.insert(f.meta.as_str()) {
            wanted.push((&f.meta, budget.meta_bytes));
        }
        if let Some(p) = &f.points
            && seen.insert(p.as_str())
        {
            wanted.push((p, budget.points_bytes));
        }
    }
    let blobs = cat_file(repo, &wanted, budget)?;
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for f in found {
        let name = format!(
            "{}:{}",
            &f.commit[..f.commit.len().min(12)],
            if f.dir.is_empty() { "." } else { &f.dir }
        );
        let text = |object: &str, file: &'static str| -> Result<String, LoadError> {
            match blobs.get(object) {
                Some(Ok(t)) => Ok(t.clone()),
                Some(Err(why)) => Err(LoadError::NotInGit {
                    file,
                    why: why.clone(),
                }),
                None => Err(LoadError::NotInGit {
                    file,
                    why: "not read".into(),
                }),
            }
        };
        let loaded = text(&f.meta, "meta.json").and_then(|meta| {
            let points = match &f.points {
                Some(p) => text(p, "points.jsonl")?,
                None => String::new(),
            };
            parse_run(PathBuf::from(&name), &meta, &points)
        });
        match loaded {
            Ok(run) => runs.push(run),
            Err(why) => skipped.push(SkippedRun {
                path: name,
                why: why.to_string(),
            }),
        }
    }
    Ok((runs, skipped))
}

// The inner String error is on purpose: why one object was not read is only ever shown, in
// the run's "left out" line (`LoadError::NotInGit`), never matched.
/// Each object's text, or why not (over the budget, not UTF-8), from one `git cat-file
/// --batch`: the sizes are asked first (`--batch-check`), so an object over the budget is
/// never read.
fn cat_file(
    repo: &Path,
    objects: &[(&str, u64)],
    budget: &Budget,
) -> Result<HashMap<String, Result<String, String>>, GitError> {
    let mut out = HashMap::new();
    if objects.is_empty() {
        return Ok(out);
    }
    let limits: HashMap<&str, u64> = objects.iter().copied().collect();
    let input: String = objects.iter().map(|(o, _)| format!("{o}\n")).collect();
    let sizes = git_with_input(repo, &["cat-file", "--batch-check"], input.as_bytes())?;
    let mut spent = 0u64;
    let mut within: Vec<String> = Vec::new();
    for line in String::from_utf8_lossy(&sizes).lines() {
        let mut parts = line.split(' ');
        let (Some(oid), Some(_), Some(size)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let size: u64 = size.parse().unwrap_or(u64::MAX);
        let limit = limits.get(oid).copied().unwrap_or(0);
        if size > limit {
            out.insert(
                oid.to_string(),
                Err(format!(
                    "{} MiB, over the budget of {} MiB for one file",
                    size >> 20,
                    limit >> 20
                )),
            );
        } else if spent + size > budget.total_bytes {
            out.insert(
                oid.to_string(),
                Err(format!(
                    "the history reached its budget of {} MiB of run files",
                    budget.total_bytes >> 20
                )),
            );
        } else {
            spent += size;
            within.push(oid.to_string());
        }
    }
    if within.is_empty() {
        return Ok(out);
    }
    let mut child = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["cat-file", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(GitError::Spawn)?;
    let input: String = within.iter().map(|o| format!("{o}\n")).collect();
    let mut stdin = child.stdin.take().expect("piped");
    // Written from a thread: git answers while it reads, and a full pipe would stall both.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    let mut reader = BufReader::new(child.stdout.take().expect("piped"));
    let failed = |message: String| GitError::Failed {
        repo: repo.to_path_buf(),
        command: "cat-file --batch".to_string(),
        message,
    };
    for _ in 0..within.len() {
        let mut header = String::new();
        reader
            .read_line(&mut header)
            .map_err(|e| failed(e.to_string()))?;
        let mut parts = header.trim_end().split(' ');
        let (Some(oid), Some(kind), Some(size)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(failed(format!("unexpected answer {header:?}")));
        };
        if kind != "blob" {
            out.insert(oid.to_string(), Err(format!("a {kind}, not a file")));
            continue;
        }
        let size: usize = size.parse().map_err(|_| failed(header.clone()))?;
        // git said the size before; an object that grew since is not read past its budget.
        if size as u64 > limits.get(oid).copied().unwrap_or(0) {
            return Err(failed(format!("{oid} is {size} bytes, over its budget")));
        }
        let mut bytes = vec![0u8; size + 1]; // the content and its newline
        reader
            .read_exact(&mut bytes)
            .map_err(|e| failed(e.to_string()))?;
        bytes.truncate(size);
        out.insert(
            oid.to_string(),
            String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string()),
        );
    }
    let _ = writer.join();
    let _ = child.wait();
    Ok(out)
}

fn git(repo: &Path, args: &[String]) -> Result<String, GitError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(GitError::Spawn)?;
    if !out.status.success() {
        return Err(GitError::Failed {
            repo: repo.to_path_buf(),
            command: args.first().cloned().unwrap_or_default(),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn git_with_input(repo: &Path, args: &[&str], input: &[u8]) -> Result<Vec<u8>, GitError> {
    let mut child = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(GitError::Spawn)?;
    let mut stdin = child.stdin.take().expect("piped");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().map_err(GitError::Spawn)?;
    let _ = writer.join();
    if !out.status.success() {
        return Err(GitError::Failed {
            repo: repo.to_path_buf(),
            command: args.join(" "),
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out.stdout)
}
