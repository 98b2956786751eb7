//! Where a group's profiler traces are written on the server's host (`profiler:`), what the
//! engine needs at launch to write them (vLLM's `--profiler-config`), and bringing a point's
//! traces into the run directory (`profiler/<group>/`), bounded by `profiler.max_mib`.

use std::borrow::Cow;
use std::path::Path;

use crate::engine::ProfilerApi;
use crate::host::small_file::FileRefused;
use crate::host::{Host, HostError};
use crate::plan::ServerGroup;
use servebench_model::results::records::{ProfilerCapture, TraceFile};
use servebench_model::results::rundir::RunDir;
use servebench_model::spec::Point;
use servebench_model::spec::types::{ArgValue, Server};

/// Most files looked at in a capture's directory.
const MAX_LISTED: usize = 1000;

/// The directory on the server's host where group `g`'s traces go: `profile.dir`, else the
/// run's directory there (this machine's run directory, an SSH host's run directory, a
/// per-run directory under /tmp on a Slurm node); None for a server servebench did not
/// start (it writes to its own default) or when no point is profiled.
pub(crate) fn group_dir(
    g: &ServerGroup,
    points: &[&Point],
    host: &dyn Host,
    on_slurm: bool,
    run_dir: &RunDir,
) -> Option<String> {
    let spec = points.iter().find_map(|p| p.experiment.profiler.as_ref())?;
    if let Some(d) = &spec.dir {
        return Some(d.clone());
    }
    if g.server.url.is_some() {
        return None;
    }
    if let Some(d) = host.run_dir_on_host() {
        return Some(format!("{}/profiler/{}", d.trim_end_matches('/'), g.id));
    }
    if on_slurm {
        let run = run_dir
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Some(format!("/tmp/servebench-profiler/{run}/{}", g.id));
    }
    let dir = run_dir.path.join("profiler").join(&g.id);
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    Some(dir.to_string_lossy().into_owned())
}

/// The server as launched for a profiled group: vLLM serves `/start_profile` only when
/// started with a profiler configured, so it gets `--profiler-config` naming the group's
/// directory, unless the spec gives its own.
pub(crate) fn with_profiler<'s>(
    server: &'s Server,
    points: &[&Point],
    dir: Option<&str>,
) -> Cow<'s, Server> {
    let spec = points.iter().find_map(|p| p.experiment.profiler.as_ref());
    let api = crate::engine::adapter(server.engine).profiler.ok();
    let Some((flag, value)) = api
        .zip(dir)
        .zip(spec)
        .and_then(|((api, d), spec)| api.launch_flag(spec, d))
    else {
        return Cow::Borrowed(server);
    };
    let given = server.args.contains_key(flag)
        || server
            .engine_args
            .get(&server.engine)
            .is_some_and(|a| a.contains_key(flag));
    if given || server.url.is_some() {
        return Cow::Borrowed(server);
    }
    let mut s = server.clone();
    s.args.insert(flag.into(), ArgValue::Str(value));
    Cow::Owned(s)
}

/// The files in `dir` on the host before a capture (vLLM names its traces by worker and
/// time: what is new after the capture is the capture's).
pub(crate) async fn before(host: &dyn Host, dir: Option<&str>) -> Vec<String> {
    match dir {
        Some(d) => host
            .list_files(d, MAX_LISTED)
            .await
            .map(|l| l.into_iter().map(|(n, _)| n).collect())
            .unwrap_or_default(),
        None => Vec::new(),
    }
}

/// Finds the capture's trace files on the host and brings them into the run directory
/// (`profiler/<group>/<name>`): in place when the host is this machine and the directory is
/// the run's, else copied, each at most what is left of `max_bytes`.
pub(crate) async fn collect(
    capture: &mut ProfilerCapture,
    host: &dyn Host,
    run_dir: &RunDir,
    group: &str,
    before: &[String],
    max_bytes: u64,
) {
    let Some(dir) = capture.dir.clone() else {
        return;
    };
    // A stop that never answered (refused, timed out, cut short by an interrupt) may have
    // left half-written files: they are no capture to bring back.
    if capture.started_at.is_none() || capture.stopped_at.is_none() {
        return;
    }
    let listed = match host.list_files(&dir, MAX_LISTED).await {
        Ok(l) => l,
        Err(why) => {
            capture
                .error
                .get_or_insert(format!("could not list {dir} on the server's host: {why}"));
            return;
        }
    };
    // Which files are the capture's is the engine's naming.
    let Some(api) = ProfilerApi::of_capture(capture) else {
        return;
    };
    let mine: Vec<(String, u64)> = listed
        .into_iter()
        .filter(|(name, _)| api.wrote(name, capture, before))
        .collect();
    let local_dir = run_dir.path.join("profiler").join(group);
    let in_place = same_dir(Path::new(&dir), &local_dir);
    let mut left = max_bytes;
    for (name, bytes) in mine {
        let rel = format!("profiler/{group}/{name}");
        let mut file = TraceFile {
            name: name.clone(),
            bytes,
            ..TraceFile::default()
        };
        if in_place {
            file.path = Some(rel);
        } else if bytes > left {
            file.left = Some(format!(
                "{bytes} bytes, over what `profiler.max_mib` leaves ({left}): on the host at {dir}/{name}"
            ));
        } else {
            let source = format!("{}/{name}", dir.trim_end_matches('/'));
            let copied = match std::fs::create_dir_all(&local_dir) {
                Ok(()) => host.copy_file(&source, &local_dir.join(&name), left).await,
                Err(e) => Err(FileRefused::NotWritten(e).into()),
            };
            match copied {
                Ok(n) => {
                    left -= n.min(left);
                    file.path = Some(rel);
                }
                Err(why @ HostError::File(FileRefused::NotWritten(_))) => {
                    file.left = Some(why.to_string())
                }
                Err(why) => file.left = Some(format!("could not be read on the host: {why}")),
            }
        }
        capture.files.push(file);
    }
}

/// Whether two paths name one directory (the run directory's own profiles folder).
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}
