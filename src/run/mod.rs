//! Executes a plan: per server group, launch (or reach) the server, measure its points, stop
//! it; write every record as it arrives; render the report at the end, even after a failure.

pub mod point;
pub mod progress;
pub mod provenance;
pub mod server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::plan::Plan;
use crate::results::meta::{RunMeta, RunStatus};
use crate::results::records::{Flag, PointRecord};
use crate::results::rundir::RunDir;
use crate::spec::LoadedSpec;

use point::PointRunner;
use progress::Progress;
use server::ServerHandle;

/// A stop request (Ctrl-C or SIGTERM), observable from every task.
#[derive(Clone)]
pub struct Interrupt {
    rx: tokio::sync::watch::Receiver<bool>,
    tx: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for Interrupt {
    fn default() -> Self {
        Self::new()
    }
}

impl Interrupt {
    pub fn new() -> Interrupt {
        let (tx, rx) = tokio::sync::watch::channel(false);
        Interrupt {
            rx,
            tx: Arc::new(tx),
        }
    }

    /// Sets the flag; every waiter wakes.
    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }

    pub fn is_set(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves once the flag is set.
    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|v| *v).await;
    }

    /// Triggers on Ctrl-C (SIGINT) and SIGTERM.
    pub fn on_signals(&self) {
        let me = self.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            let term_recv = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term_recv => {}
            }
            eprintln!(
                "\ninterrupted: finishing up (recording what was measured, stopping the server)..."
            );
            me.trigger();
        });
    }
}

/// Options of `servebench run`.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Root of run directories (`runs/`).
    pub out: PathBuf,
    /// No progress bar, only plain lines.
    pub quiet: bool,
}

/// What a run produced.
#[derive(Debug)]
pub struct RunOutcome {
    pub dir: PathBuf,
    pub status: RunStatus,
    pub reason: Option<String>,
    /// The report's path, or why it could not be rendered.
    pub report: Result<PathBuf, String>,
}

/// Failures before anything could be recorded.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot create the run directory under {out}: {source}")]
    CreateDir { out: String, source: std::io::Error },
    #[error("cannot write {what}: {source}")]
    Write {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Preflight(String),
}

/// Runs every point of `spec` and writes the run directory.
pub async fn execute(
    spec: &LoadedSpec,
    opts: &RunOptions,
    interrupt: Interrupt,
) -> Result<RunOutcome, RunError> {
    let plan = Plan::new(&spec.points);
    let spec_dir = spec
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    preflight(spec, &spec_dir)?;
    let first = &spec.points[0].experiment;

    let started = chrono::Utc::now();
    let run_dir =
        RunDir::create(&opts.out, &spec.name, &spec.source, started).map_err(|source| {
            RunError::CreateDir {
                out: opts.out.display().to_string(),
                source,
            }
        })?;
    let run_dir = Arc::new(run_dir);
    run_dir
        .write_resolved(&resolved(&plan))
        .map_err(|source| RunError::Write {
            what: "resolved.yaml".into(),
            source,
        })?;
    let mut meta = RunMeta {
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        git: provenance::git_state(if spec_dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &spec_dir
        }),
        spec_file: spec.path.display().to_string(),
        spec_sha256: spec.sha256.clone(),
        experiment: redacted_experiment(first),
        dimensions: spec.dimensions.clone(),
        started_at: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        ended_at: None,
        status: RunStatus::Running,
        status_reason: None,
        client_host: provenance::host_facts(),
        servers: Vec::new(),
    };
    write_meta(&run_dir, &meta)?;

    let progress = Progress::new(plan.point_count(), plan.request_count(), opts.quiet);
    progress.line(&format!(
        "servebench: {} points in {} server group(s); run directory {}",
        plan.point_count(),
        plan.groups.len(),
        run_dir.path.display()
    ));
    let mut runner = PointRunner::new(
        run_dir.clone(),
        progress.clone(),
        interrupt.clone(),
        spec_dir.clone(),
    );
    let mut problems: Vec<String> = Vec::new();
    let mut measured_points = 0usize;

    'groups: for group in &plan.groups {
        let mut pending = group.points.iter().peekable();
        while pending.peek().is_some() {
            if interrupt.is_set() {
                break 'groups;
            }
            let log = run_dir.server_log_path(&group.id);
            progress.line(&format!(
                "{}: starting the server ({})",
                group.id,
                server_label(&group.server)
            ));
            let mut handle =
                match ServerHandle::start(&group.id, &group.server, &log, &interrupt).await {
                    Ok(h) => h,
                    Err(server::ServerError::Interrupted) => break 'groups,
                    Err(e) => {
                        // The group's remaining points cannot run; record them as failed and go on.
                        let msg = e.to_string();
                        progress.line(&format!("{}: {msg}", group.id));
                        problems.push(format!("{}: {}", group.id, first_line(&msg)));
                        for p in pending.by_ref() {
                            let mut record = failed_point(p, &group.id, "server-failed", &msg);
                            record.failure = e.cause_label();
                            append_point(&run_dir, &record)?;
                        }
                        continue;
                    }
                };
            if let Some(s) = handle.record.ready_after_s {
                progress.line(&format!(
                    "{}: ready after {s:.1} s at {}",
                    group.id, handle.url
                ));
            }
            meta.servers.push(handle.record.clone());
            let launch_index = meta.servers.len() - 1;
            write_meta(&run_dir, &meta)?;
            let client = match Client::new(&handle.url, server::api_key(&group.server)) {
                Ok(c) => c,
                Err(e) => return Err(RunError::Preflight(e.to_string())),
            };
            let mut relaunch = false;
            for point in pending.by_ref() {
                let outcome = runner.measure(&client, point, &group.id).await;
                let mut record = outcome.record;
                // Broken connections (or a failed calibration) may mean the server is dying.
                let suspicious = !outcome.interrupted
                    && (["connect", "reset", "incomplete"]
                        .iter()
                        .any(|k| record.error_kinds.contains_key(*k))
                        || record.flags.iter().any(|f| f.kind == "calibration-failed"));
                let grace = if suspicious {
                    Duration::from_secs(3)
                } else {
                    Duration::ZERO
                };
                if let Some(cause) = handle.crashed_within(grace).await {
                    let tail = handle.log_tail(2000);
                    let msg = format!(
                        "the server died during this point: {} ({})",
                        cause.label(),
                        cause.explain()
                    );
                    record.flags.push(Flag {
                        kind: "server-crashed".into(),
                        message: format!("{msg}\nlog tail:\n{}", last_lines(&tail, 8)),
                    });
                    record.incomplete = true;
                    record.failure = Some(cause.label().to_string());
                    problems.push(format!("{}: {msg}", record.id));
                    handle.record.outcome = Some(format!("crashed: {}", cause.label()));
                    relaunch = true;
                }
                if record.ok > 0 {
                    measured_points += 1;
                }
                if record.incomplete && !outcome.interrupted && !relaunch {
                    problems.push(format!("{}: incomplete", record.id));
                }
                append_point(&run_dir, &record)?;
                if outcome.interrupted || interrupt.is_set() {
                    handle.stop("interrupted");
                    meta.servers[launch_index] = handle.record.clone();
                    break 'groups;
                }
                if relaunch {
                    break;
                }
            }
            handle.stop(if relaunch {
                "relaunching after a crash"
            } else {
                "group finished"
            });
            meta.servers[launch_index] = handle.record.clone();
            write_meta(&run_dir, &meta)?;
        }
    }
    progress.finish();

    let ended = chrono::Utc::now();
    meta.ended_at = Some(ended.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let (status, reason) = if interrupt.is_set() {
        (
            RunStatus::Incomplete,
            Some("interrupted (Ctrl-C or SIGTERM); measured data kept".to_string()),
        )
    } else if measured_points == 0 && !problems.is_empty() {
        (RunStatus::Failed, Some(problems.join("; ")))
    } else if !problems.is_empty() {
        (RunStatus::Incomplete, Some(problems.join("; ")))
    } else {
        (RunStatus::Complete, None)
    };
    meta.status = status;
    meta.status_reason = reason.clone();
    write_meta(&run_dir, &meta)?;

    let template = user_template(first, &spec_dir);
    let report = crate::report::write_report(&run_dir, Some(&template)).map_err(|e| e.to_string());
    Ok(RunOutcome {
        dir: run_dir.path.clone(),
        status,
        reason,
        report,
    })
}

/// The report template `report.template` names: a built-in, or a file relative to the spec.
pub fn user_template(
    exp: &crate::spec::types::Experiment,
    spec_dir: &Path,
) -> crate::report::Template {
    crate::report::Template::resolve(&exp.report.template, spec_dir)
}

/// Checks that need the file system before anything starts: prompt files, templates.
fn preflight(spec: &LoadedSpec, spec_dir: &Path) -> Result<(), RunError> {
    if spec.points.is_empty() {
        return Err(RunError::Preflight("the spec expands to no points".into()));
    }
    let mut errors = Vec::new();
    if !spec.points[0].experiment.host.is_local() {
        errors.push("SSH hosts are not wired into the runner in this build yet".to_string());
    }
    for p in &spec.points {
        if let Err(e) =
            crate::prompt::PromptSource::from_spec(&p.experiment.workload.prompt, spec_dir)
            && !errors.contains(&e)
        {
            errors.push(e);
        }
        if let crate::report::Template::File(t) = user_template(&p.experiment, spec_dir)
            && !t.is_file()
        {
            let e = format!(
                "report.template {} does not exist (use a built-in template: {}; or a path \
                 relative to the spec)",
                t.display(),
                crate::report::builtin_names()
            );
            if !errors.contains(&e) {
                errors.push(e);
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(RunError::Preflight(errors.join("\n")))
    }
}

fn resolved(plan: &Plan) -> serde_json::Value {
    let points: Vec<serde_json::Value> = plan
        .groups
        .iter()
        .flat_map(|g| {
            g.points.iter().map(move |p| {
                serde_json::json!({ "id": p.id, "group": g.id, "values": p.values, "experiment": redacted_experiment(&p.experiment) })
            })
        })
        .collect();
    serde_json::json!({ "points": points })
}

fn redacted_experiment(e: &crate::spec::types::Experiment) -> crate::spec::types::Experiment {
    let mut e = e.clone();
    e.server = server::redacted_server(&e.server);
    e
}

fn failed_point(p: &crate::spec::Point, group: &str, kind: &str, msg: &str) -> PointRecord {
    PointRecord {
        id: p.id.clone(),
        values: p.values.clone(),
        group: group.to_string(),
        requested_prompt_tokens: None,
        ok: 0,
        errors: 0,
        error_kinds: Default::default(),
        metrics: Default::default(),
        flags: vec![Flag {
            kind: kind.into(),
            message: msg.to_string(),
        }],
        incomplete: true,
        failure: None,
    }
}

fn append_point(dir: &RunDir, p: &PointRecord) -> Result<(), RunError> {
    dir.append_point(p).map_err(|source| RunError::Write {
        what: "points.jsonl".into(),
        source,
    })
}

fn write_meta(dir: &RunDir, meta: &RunMeta) -> Result<(), RunError> {
    dir.write_meta(meta).map_err(|source| RunError::Write {
        what: "meta.json".into(),
        source,
    })
}

fn server_label(s: &crate::spec::types::Server) -> String {
    match &s.url {
        Some(u) => format!("external {u}"),
        None => format!("{:?} {}", s.engine, s.model.as_deref().unwrap_or(""))
            .to_lowercase()
            .trim()
            .to_string(),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
