//! Executes a plan: per server group, launch (or reach) the server, measure its points, stop
//! it; write every record as it arrives; render the report at the end, even after a failure.

pub(crate) mod agent;
pub(crate) mod down;
mod errors;
mod interrupt;
pub(crate) mod launch;
pub(crate) mod measurer;
mod on_server;
pub(crate) mod outcome;
pub(crate) mod point;
pub(crate) mod pool;
pub(crate) mod probe;
pub(crate) mod progress;
pub(crate) mod provenance;
mod records;
pub(crate) mod request;
pub(crate) mod search;
pub(crate) mod server;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::plan::Plan;
use servebench_model::catalog::FlagKind;
use servebench_model::results::meta::{RunMeta, RunStatus};
use servebench_model::results::records::PointRecord;
use servebench_model::results::rundir::RunDir;
use servebench_model::spec::LoadedSpec;
use servebench_model::text::count_s;

use launch::Tally;
use pool::Pool;
use progress::Progress;

pub(crate) use errors::{Preflight, ResumeError, RunError};
pub(crate) use interrupt::Interrupt;
use records::write_meta;

/// Options of `servebench run`.
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    /// Root of run directories (`runs/`).
    pub out: PathBuf,
    /// No progress bar, only plain lines.
    pub quiet: bool,
}

/// What a run produced.
#[derive(Debug)]
pub(crate) struct RunOutcome {
    pub dir: PathBuf,
    pub status: RunStatus,
    pub reason: Option<String>,
    /// The report's path, or why it could not be rendered.
    pub report: Result<PathBuf, servebench_report::report::ReportError>,
    /// The spec's `report.mlflow`: what was logged, or why not (the run is kept either way).
    pub mlflow: Option<Result<crate::mlflow::Logged, crate::mlflow::MlflowError>>,
}

/// Runs every point of `spec` and writes the run directory.
pub(crate) async fn execute(
    spec: &LoadedSpec,
    opts: &RunOptions,
    interrupt: Interrupt,
) -> Result<RunOutcome, RunError> {
    install_redactor(spec);
    let spec_dir = spec_dir(spec);
    preflight(spec, &spec_dir)?;
    let first = &spec.points[0].experiment;
    let started = chrono::Utc::now();
    // An SSH host that cannot be reached (or whose key does not match) fails the run before
    // anything is created or launched.
    let host = Pool::connect(
        first,
        &format!("{}-{}", spec.name, started.format("%Y-%m-%dT%H-%M-%SZ")),
        &interrupt,
    )
    .await?;

    let run_dir =
        RunDir::create(&opts.out, &spec.name, &spec.source, started).map_err(|source| {
            RunError::CreateDir {
                out: opts.out.display().to_string(),
                source,
            }
        })?;
    // Nobody else knows the directory yet; the lock makes a `run --resume` or `down` on it
    // wait for this runner's end.
    run_dir.lock().map_err(|e| RunError::Write {
        what: run_dir
            .file(servebench_model::results::rundir::LOCK_FILE)
            .display()
            .to_string(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let run_dir = Arc::new(run_dir);
    let plan = Plan::new(&spec.points);
    run_dir
        .write_resolved(&resolved(&plan))
        .map_err(|source| RunError::Write {
            what: "resolved.yaml".into(),
            source,
        })?;
    let meta = RunMeta {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        git: provenance::git_state(if spec_dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &spec_dir
        }),
        spec_file: spec.path.display().to_string(),
        spec_path: std::fs::canonicalize(&spec.path)
            .ok()
            .map(|p| p.display().to_string()),
        spec_sha256: spec.sha256.clone(),
        experiment: redacted_experiment(first),
        dimensions: spec.dimensions.clone(),
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ended_at: None,
        status: RunStatus::Running,
        status_reason: None,
        client_host: provenance::host_facts(),
        servers: Vec::new(),
        server_host: None,
        client_placement: Some(first.placement().to_string()),
        resumed_at: Vec::new(),
        hosts: Vec::new(),
        imported: None,
    };
    write_meta(&run_dir, &meta)?;
    run_plan(spec, run_dir, meta, host, &HashSet::new(), opts, interrupt).await
}

/// `run --resume RUN_DIR`: measures the points an interrupted run did not finish, in the same
/// run directory. Finished points are kept; records of unfinished ones are dropped first, so
/// nothing counts twice.
pub(crate) async fn resume(
    dir: &Path,
    opts: &RunOptions,
    interrupt: Interrupt,
) -> Result<RunOutcome, RunError> {
    let run_dir = RunDir::open(dir).map_err(ResumeError::from)?;
    // One runner per run directory: a second resume (or one while the first runner lives)
    // would measure the same points again and drop the first one's records.
    run_dir.lock().map_err(ResumeError::from)?;
    let mut meta = run_dir.read_meta().map_err(ResumeError::from)?;
    let spec = resume_spec(&run_dir, &meta)?;
    install_redactor(&spec);
    let spec_dir = spec_dir(&spec);
    preflight(&spec, &spec_dir)?;
    let done: HashSet<String> = run_dir
        .read_points()
        .map_err(ResumeError::from)?
        .into_iter()
        // A search's probe is kept whatever its verdict (the search replays it); only one an
        // interrupt cut short is measured again.
        .filter(|p| {
            p.status() == servebench_model::results::records::PointStatus::Ok
                || (p.search.is_some() && !p.has_flag(&FlagKind::Interrupted))
        })
        .map(|p| p.id)
        .collect();
    run_dir
        .retain_points(&done)
        .map_err(|source| RunError::Write {
            what: "points.jsonl and requests.jsonl".into(),
            source,
        })?;
    let first = &spec.points[0].experiment;
    let id = run_dir
        .path
        .file_name()
        .map(|n| format!("{}-{}", spec.name, n.to_string_lossy()))
        .unwrap_or_else(|| spec.name.clone());
    let host = Pool::connect(first, &id, &interrupt).await?;
    meta.resumed_at
        .push(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    meta.status = RunStatus::Running;
    meta.status_reason = None;
    meta.ended_at = None;
    write_meta(&run_dir, &meta)?;
    run_plan(&spec, Arc::new(run_dir), meta, host, &done, opts, interrupt).await
}

/// The spec of a run to resume: the original file when it is unchanged (secrets stay out of
/// the run directory's copy), else that copy.
fn resume_spec(run_dir: &RunDir, meta: &RunMeta) -> Result<LoadedSpec, RunError> {
    // The absolute path when recorded: a spec given relative to another working directory
    // is still found (and the prompt files and templates it names, relative to it).
    let original = Path::new(meta.spec_location());
    if let Ok(loaded) = servebench_model::spec::load(original)
        && loaded.sha256 == meta.spec_sha256
    {
        return Ok(loaded);
    }
    let copy = std::fs::read_to_string(run_dir.file("spec.yaml")).map_err(ResumeError::SpecCopy)?;
    if copy.contains(servebench_model::secrets::REDACTED) {
        return Err(ResumeError::Redacted {
            spec: meta.spec_file.clone(),
        }
        .into());
    }
    // Named after the original, so relative paths (prompt files, templates) resolve as before.
    servebench_model::spec::load_str(meta.spec_location(), &copy)
        .map_err(|e| ResumeError::Invalid(e).into())
}

/// Every secret of the spec (every point's: a sweep can hold them) is hidden from here on, in
/// each file the run writes and each line it prints (`servebench_model::redact`).
fn install_redactor(spec: &LoadedSpec) {
    servebench_model::redact::install(servebench_model::secrets::redactor(
        spec.points.iter().map(|p| &p.experiment),
    ));
}

fn spec_dir(spec: &LoadedSpec) -> PathBuf {
    spec.path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Measures the plan's points not in `done`, group by group; always stops what it launched.
/// A record that cannot be written stops the run at once: it is recorded as failed (when
/// meta.json can still be written) and its report rendered from what is on disk.
async fn run_plan(
    spec: &LoadedSpec,
    run_dir: Arc<RunDir>,
    meta: RunMeta,
    host: Pool,
    done: &HashSet<String>,
    opts: &RunOptions,
    interrupt: Interrupt,
) -> Result<RunOutcome, RunError> {
    let spec_dir = spec_dir(spec);
    let first = &spec.points[0].experiment;
    let mut plan = Plan::new(&spec.points);
    for g in &mut plan.groups {
        g.points.retain(|p| !done.contains(&p.id));
    }
    plan.groups.retain(|g| !g.points.is_empty());
    let progress = start_console(spec, &plan, &spec_dir, &run_dir, &host, opts);
    let meta_shared = std::sync::Mutex::new(meta);
    let tally_shared = std::sync::Mutex::new(Tally::default());
    let aborted_shared = std::sync::Mutex::new(None::<String>);
    let measured = pool::run_pool(
        &plan,
        &pool::PoolRun {
            spec,
            run_dir: &run_dir,
            meta: &meta_shared,
            progress: &progress,
            interrupt: &interrupt,
            spec_dir: spec_dir.clone(),
            tally: &tally_shared,
            aborted: &aborted_shared,
        },
        &host,
    )
    .await;
    progress.finish();
    let mut meta = meta_shared.into_inner().unwrap_or_else(|e| e.into_inner());
    let tally = tally_shared.into_inner().unwrap_or_else(|e| e.into_inner());
    let aborted = aborted_shared
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());

    let ended = chrono::Utc::now();
    meta.ended_at = Some(ended.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let (status, reason) = run_status(
        spec,
        &run_dir,
        (measured.as_ref().err(), aborted),
        &interrupt,
        &tally,
        &progress,
    );
    meta.status = status;
    meta.status_reason = reason.clone();
    write_meta(&run_dir, &meta)?;

    let template = user_template(first, &spec_dir);
    let report = servebench_report::report::write_report(&run_dir, Some(&template));
    let mlflow = match &first.report.mlflow {
        Some(m) => {
            let target = crate::mlflow::Target {
                tracking_uri: m.tracking_uri.clone(),
                experiment: m.experiment.clone(),
            };
            Some(crate::mlflow::log_run(&run_dir.path, &target).await)
        }
        None => None,
    };
    Ok(RunOutcome {
        dir: run_dir.path.clone(),
        status,
        reason,
        report,
        mlflow,
    })
}

/// The run's console, with the plan and its estimated time said (the time left follows it).
fn start_console(
    spec: &LoadedSpec,
    plan: &Plan,
    spec_dir: &Path,
    run_dir: &RunDir,
    host: &Pool,
    opts: &RunOptions,
) -> Progress {
    let progress = Progress::new(
        plan.point_count(),
        plan.request_count(spec_dir).sent,
        opts.quiet,
    );
    let _ = host.console.set(progress.clone());
    progress.line(&format!(
        "servebench: {} to measure in {}{}; run directory {}",
        count_s(plan.point_count(), "point"),
        count_s(plan.groups.len(), "server group"),
        host.describe(spec.points[0].experiment.placement()),
        run_dir.path.display()
    ));
    let Ok(est) =
        crate::plan::estimate::best(plan, spec_dir, &opts.out, &spec.name, Some(&run_dir.path))
    else {
        return progress;
    };
    progress.line(&format!(
        "estimate: ~{} from {}",
        servebench_model::text::duration(est.total_s()),
        est.source
    ));
    // On a pool, groups run side by side: the time left is the pool's wall time. A Slurm host
    // holds every rank of a group in its one allocation.
    let pool_hosts = host.hosts.len();
    let slurm = host.hosts.iter().any(|h| h.slurm.is_some());
    progress.set_eta(progress::Eta::on_pool(&est, pool_hosts, |g| {
        plan.groups.iter().find(|pg| pg.id == g).map_or(1, |pg| {
            if slurm {
                1
            } else {
                pg.server.node_count() as usize
            }
        })
    }));
    progress
}

/// The run's status and its reason, from what was recorded, how measuring ended (`failed`:
/// the error that stopped it; `aborted`: why the failure policy stopped it) and the
/// interrupt; the points' tally goes to the console.
fn run_status(
    spec: &LoadedSpec,
    run_dir: &RunDir,
    (failed, aborted): (Option<&RunError>, Option<String>),
    interrupt: &Interrupt,
    tally: &Tally,
    progress: &Progress,
) -> (RunStatus, Option<String>) {
    let cause = interrupt.cause();
    let failure = match (failed, &cause) {
        (Some(e), _) => Some(e.to_string()),
        (None, Some(c)) if c.is_failure() => Some(c.to_string()),
        _ => None,
    };
    let stopped = match &cause {
        Some(c) if !c.is_failure() => Some(format!("{c}; what was measured is kept")),
        _ => aborted,
    };
    let recorded = run_dir.read_points().unwrap_or_default();
    let settled = outcome::settle(
        &recorded,
        planned(spec, run_dir, &recorded),
        stopped.as_deref(),
    );
    if tally.measured_points == 0 && recorded.is_empty() && !tally.problems.is_empty() {
        tracing::debug!("nothing recorded: {}", tally.problems.join("; "));
    }
    progress.line(&points_line(&settled.points));
    match failure {
        // A record that could not be written: the run cannot vouch for what it has.
        Some(failure) => (
            RunStatus::Failed,
            Some(format!(
                "{failure}; measuring stopped there (what was recorded before is kept)"
            )),
        ),
        None => (settled.status, settled.reason),
    }
}

/// The points the run was to record: every ordinary point, and each search's probes (a search
/// without its answer counts one more, so the run is not complete).
fn planned(spec: &LoadedSpec, run_dir: &RunDir, recorded: &[PointRecord]) -> usize {
    let seeds: Vec<&str> = spec
        .points
        .iter()
        .filter(|p| p.experiment.search.is_some())
        .map(|p| p.id.as_str())
        .collect();
    if seeds.is_empty() {
        return spec.points.len();
    }
    let answers = run_dir.read_search().ok().flatten().unwrap_or_default();
    let unanswered = seeds
        .iter()
        .filter(|s| !answers.searches.iter().any(|a| a.seed == **s && a.complete))
        .count();
    spec.points.len() - seeds.len()
        + recorded.iter().filter(|p| p.search.is_some()).count()
        + unanswered
}

/// `points: 4 ok, 1 degraded, 1 failed` (the parts that are not zero).
fn points_line(c: &outcome::PointCounts) -> String {
    let parts: Vec<String> = [(c.ok, "ok"), (c.degraded, "degraded"), (c.failed, "failed")]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    format!(
        "servebench: {}: {}",
        servebench_model::text::count_s(c.total(), "point"),
        if parts.is_empty() {
            "none recorded".to_string()
        } else {
            parts.join(", ")
        }
    )
}

/// The report template `report.template` names: a built-in, or a file relative to the spec.
pub(crate) fn user_template(
    exp: &servebench_model::spec::types::Experiment,
    spec_dir: &Path,
) -> servebench_report::report::Template {
    servebench_report::report::Template::resolve(&exp.report.template, spec_dir)
}

/// Checks that need the file system before anything starts: prompt files, templates.
fn preflight(spec: &LoadedSpec, spec_dir: &Path) -> Result<(), RunError> {
    if spec.points.is_empty() {
        return Err(RunError::Preflight(vec![Preflight::NoPoints]));
    }
    let mut problems: Vec<Preflight> = Vec::new();
    let mut note = |p: Preflight| {
        if !problems.contains(&p) {
            problems.push(p);
        }
    };
    for p in &spec.points {
        let pool = p.experiment.pool();
        let server = &p.experiment.server;
        // A Slurm host runs every rank in its allocation; machines run one rank each.
        let slurm = pool
            .iter()
            .find_map(servebench_model::spec::types::HostSpec::slurm);
        let capacity: usize = pool.iter().map(|h| h.rank_capacity() as usize).sum();
        if server.node_count() > 1 && server.url.is_none() {
            // A deployment's workers are single-node servers: its nodes hold whole workers.
            if server.deployment.is_none()
                && let Err(e) = crate::engine::ranks::flavour(server)
            {
                note(Preflight::Nodes(e.to_string()));
            }
            match slurm {
                Some(s) if server.node_count() > s.rank_capacity() => {
                    note(Preflight::Nodes(format!(
                        "{} is {} but the Slurm allocation holds {} ({} x {} per node): set host.slurm.nodes to {}",
                        server.nodes_key(),
                        server.node_count(),
                        count_s(s.rank_capacity() as usize, "rank"),
                        count_s(s.nodes as usize, "node"),
                        s.ranks_per_node,
                        server.node_count().div_ceil(s.ranks_per_node.max(1))
                    )));
                }
                Some(_) => {}
                None if server.node_count() as usize > capacity => {
                    note(Preflight::Nodes(format!(
                        "{} is {} but the run has {}: list at least {} hosts in `hosts:`, or run in a Slurm allocation (`host.slurm`)",
                        server.nodes_key(),
                        server.node_count(),
                        count_s(pool.len(), "host"),
                        server.node_count()
                    )));
                }
                None => {}
            }
        }
        if let Err(e) = crate::prompt::WorkloadSource::load(&p.experiment.workload, spec_dir) {
            note(Preflight::Prompt(e.to_string()));
        }
        if let servebench_report::report::Template::File(t) = user_template(&p.experiment, spec_dir)
            && !t.is_file()
        {
            note(Preflight::MissingTemplate {
                path: t,
                builtins: servebench_report::report::builtin_names(),
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(RunError::Preflight(problems))
    }
}

fn resolved(plan: &Plan) -> serde_json::Value {
    // The sweep is the same for every point: written once, so the file grows with the number
    // of points, not with its square.
    let mut sweep = None;
    let points: Vec<serde_json::Value> = plan
        .groups
        .iter()
        .flat_map(|g| g.points.iter().map(move |p| (g, p)))
        .map(|(g, p)| {
            let mut e = redacted_experiment(&p.experiment);
            sweep.get_or_insert_with(|| std::mem::take(&mut e.sweep));
            e.sweep = Default::default();
            serde_json::json!({ "id": p.id, "group": g.id, "values": p.values, "experiment": e })
        })
        .collect();
    serde_json::json!({ "sweep": sweep, "points": points })
}

fn redacted_experiment(
    e: &servebench_model::spec::types::Experiment,
) -> servebench_model::spec::types::Experiment {
    let mut e = e.clone();
    e.server = servebench_model::secrets::redacted_server(&e.server);
    e
}
