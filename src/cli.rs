//! Command-line definitions and dispatch. Each command is a thin call into the library.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::exit;

const AFTER_HELP: &str = "\
Exit codes: 0 success; 1 the run failed, was interrupted or a check failed (what was measured \
is kept on disk); 2 invalid spec or command line.

Start with `servebench run experiments/quickstart.yaml`: it runs on the built-in simulator, no GPU needed.";

/// servebench runs declarative experiments against LLM inference servers (SGLang first) and
/// turns them into reviewable reports.
///
/// An experiment spec (YAML) names the server and its launch flags, the prompts, the cache
/// policy, the measurement method and a sweep. `run` launches the server, measures every point
/// with streaming requests, keeps the raw per-request data, and renders a Markdown report.
#[derive(Debug, Parser)]
#[command(name = "servebench", version, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check specs without running anything: syntax, unknown keys, types, ranges, sweeps and
    /// templates. Every error is reported with file:line:column and a hint.
    Validate {
        /// Spec files (YAML).
        #[arg(required = true, value_name = "SPEC")]
        specs: Vec<PathBuf>,
    },
    /// Show what `run` would do: the expanded points, the server groups (one launch each), the
    /// number of requests, and how long it should take.
    ///
    /// The estimate comes from the simulator's timing model for `engine: sim` (its profile and
    /// flags: chunk size, running requests, speculative decoding, time scale), from a profile
    /// you name for a real engine (`--profile kimi-k2.6-8x-rtxpro6000`), or from the point
    /// times an earlier run measured (`--from RUN_DIR`, matching points by sweep values).
    Plan {
        /// Spec file (YAML).
        #[arg(value_name = "SPEC")]
        spec: PathBuf,
        /// Estimate from this earlier run's measured point and launch times.
        #[arg(long, value_name = "RUN_DIR", conflicts_with = "profile")]
        from: Option<PathBuf>,
        /// Estimate with this sim profile's timing model (a built-in name or a YAML file),
        /// with each group's flags applied.
        #[arg(long, value_name = "PROFILE")]
        profile: Option<String>,
        /// Where earlier runs are: without --from or --profile, a real engine's estimate
        /// comes from the newest run of this experiment there.
        #[arg(long, value_name = "DIR", default_value = "runs")]
        out: PathBuf,
    },
    /// Run an experiment: launch the server per group (on this machine or an SSH host), measure
    /// every point, write `<out>/<name>/<UTC timestamp>/` (spec, resolved points, meta.json,
    /// requests.jsonl, points.jsonl, server logs, report.md).
    ///
    /// Ctrl-C stops new requests, keeps what finished, stops the server, renders a partial
    /// report and exits 1.
    Run {
        /// Spec file (YAML).
        #[arg(value_name = "SPEC", required_unless_present = "resume")]
        spec: Option<PathBuf>,
        /// Continue an interrupted run in its own directory: finished points are kept, the
        /// others are measured (their partial records are dropped first, so nothing counts
        /// twice). The spec is the run's own.
        #[arg(long, value_name = "RUN_DIR", conflicts_with = "spec")]
        resume: Option<PathBuf>,
        /// Root directory for run directories.
        #[arg(long, default_value = "runs", value_name = "DIR")]
        out: PathBuf,
        /// No progress bar; plain progress lines only (the default when stderr is not a terminal).
        #[arg(long)]
        quiet: bool,
        /// After the run, check the spec's `expect:` list like `servebench check`, and exit 1
        /// when a published number is not reproduced.
        #[arg(long)]
        check: bool,
    },
    /// Re-render `report.md` and its charts (`charts/*.svg`) of a run directory from its stored
    /// files only (meta.json, points.jsonl, requests.jsonl).
    Report {
        /// A run directory, e.g. runs/quickstart/2026-11-29T10-04-12Z.
        #[arg(value_name = "RUN_DIR")]
        run_dir: PathBuf,
        /// Render with this template instead of the one the spec named: a built-in name
        /// (`default`, `long-context`) or a minijinja template file.
        #[arg(long, value_name = "NAME|FILE")]
        template: Option<PathBuf>,
        /// Print the report to stdout instead of writing report.md (charts are not written).
        #[arg(long)]
        stdout: bool,
    },
    /// Check a run against the published numbers in its spec's `expect:` list: one verdict per
    /// expectation (reproduced, off by X%, point failed). Exits 1 when any does not hold.
    Check {
        /// A run directory, e.g. runs/long-context/2026-11-29T10-04-12Z.
        #[arg(value_name = "RUN_DIR")]
        run_dir: PathBuf,
    },
    /// Compare runs side by side: the first run is the baseline, points are matched by their
    /// sweep values, and each metric shows the relative change. A change is marked as a
    /// regression or an improvement only when it exceeds the noise: the 95% confidence intervals
    /// do not overlap (and, with `--threshold`, it is also larger than that), or, for runs
    /// without intervals, it is larger than `--threshold`. Server flags and other settings that
    /// differ between the runs are listed first; points missing from some runs are listed at the
    /// end. Failed or flagged points are shown, never judged.
    ///
    /// Example: `servebench compare runs/chunk-8192/<ts> runs/chunk-4096/<ts> --threshold 5%`
    Compare {
        /// Run directories (two or more), e.g. runs/quickstart/2026-11-29T10-04-12Z.
        #[arg(required = true, num_args = 2.., value_name = "RUN_DIR")]
        runs: Vec<PathBuf>,
        /// Smallest change worth marking, in percent (`5` or `5%`). With confidence intervals a
        /// change must also clear them; without (one request per point) the threshold decides.
        #[arg(long, value_name = "PCT", value_parser = parse_percent)]
        threshold: Option<f64>,
        /// Exit 1 when any metric regressed (for CI).
        #[arg(long)]
        fail_on_regression: bool,
        /// Write the comparison to this file instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Render with this minijinja template instead of the built-in one; it sees the
        /// comparison model (src/report/compare.rs) and the report filters.
        #[arg(long, value_name = "FILE")]
        template: Option<PathBuf>,
    },
    /// Stop whatever a crashed or killed `servebench run` left running: every server process
    /// group recorded in RUN_DIR/meta.json (on this machine or over SSH) that is still alive
    /// gets SIGTERM, then SIGKILL after a grace period, and is confirmed gone.
    Down {
        /// A run directory, e.g. runs/long-context/2026-11-29T10-04-12Z.
        #[arg(value_name = "RUN_DIR")]
        run_dir: PathBuf,
    },
    /// Internal: the measuring client servebench runs on a GPU host (`client: host`). Reads
    /// points as JSON lines on stdin, writes request records as JSON lines on stdout.
    #[command(hide = true)]
    Agent {
        /// Milliseconds between heartbeat lines (the runner picks it from its silence limit).
        #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(10..))]
        heartbeat_ms: u64,
    },
    /// Print a JSON Schema: of experiment specs (the default; for editors:
    /// `# yaml-language-server: $schema=...`), or of the data report and compare templates see.
    ///
    /// The checked-in copies: `servebench schema > schemas/experiment.schema.json`,
    /// `servebench schema report-model > schemas/report-model.schema.json`,
    /// `servebench schema compare-model > schemas/compare-model.schema.json`.
    Schema {
        /// Which schema.
        #[arg(value_enum, default_value_t = SchemaKind::Experiment)]
        kind: SchemaKind,
    },
    /// Run the built-in SGLang-compatible simulator. Accepts `python -m sglang.launch_server`
    /// flags (unknown flags warn) plus `--profile NAME|FILE`; `servebench sim --help` lists them.
    #[command(disable_help_flag = true)]
    Sim {
        /// SGLang launch flags plus `--profile`.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "FLAGS"
        )]
        args: Vec<String>,
    },
}

/// The schemas `servebench schema` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemaKind {
    /// Experiment spec files.
    Experiment,
    /// What report templates see (`ReportModel`).
    ReportModel,
    /// What compare templates see (`CompareModel`).
    CompareModel,
}

/// Parses `args` and runs the command; returns the exit code.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::BAD_INPUT
            } else {
                exit::OK
            };
        }
    };
    match cli.command {
        Command::Validate { specs } => validate(&specs),
        Command::Plan {
            spec,
            from,
            profile,
            out,
        } => plan(&spec, from.as_deref(), profile.as_deref(), &out),
        Command::Run {
            spec,
            resume,
            out,
            quiet,
            check,
        } => run_experiment(spec.as_deref(), resume.as_deref(), out, quiet, check),
        Command::Down { run_dir } => down(&run_dir),
        Command::Report {
            run_dir,
            template,
            stdout,
        } => report(&run_dir, template, stdout),
        Command::Check { run_dir } => check(&run_dir),
        Command::Agent { heartbeat_ms } => {
            crate::run::agent::main(std::time::Duration::from_millis(heartbeat_ms))
        }
        Command::Compare {
            runs,
            threshold,
            fail_on_regression,
            out,
            template,
        } => compare(&runs, threshold, fail_on_regression, out, template),
        Command::Schema { kind } => {
            use crate::report::schema;
            let text = match kind {
                SchemaKind::Experiment => crate::spec::schema_json(),
                SchemaKind::ReportModel => schema::to_json(&schema::report_model_schema()),
                SchemaKind::CompareModel => schema::to_json(&schema::compare_model_schema()),
            };
            print!("{text}");
            exit::OK
        }
        Command::Sim { args } => crate::sim::main(args),
    }
}

fn load(path: &std::path::Path) -> Result<crate::spec::LoadedSpec, i32> {
    crate::spec::load(path).map_err(|e| {
        eprintln!("{e}");
        exit::BAD_INPUT
    })
}

fn validate(specs: &[PathBuf]) -> i32 {
    let mut code = exit::OK;
    for path in specs {
        match load(path) {
            Ok(s) => println!("{}: ok ({} points)", path.display(), s.points.len()),
            Err(c) => code = c,
        }
    }
    code
}

fn plan(
    path: &std::path::Path,
    from: Option<&std::path::Path>,
    profile: Option<&str>,
    runs: &std::path::Path,
) -> i32 {
    let spec = match load(path) {
        Ok(s) => s,
        Err(c) => return c,
    };
    let plan = crate::plan::Plan::new(&spec.points);
    let spec_dir = path.parent().unwrap_or(std::path::Path::new("."));
    let estimate = match (from, profile) {
        (Some(dir), _) => crate::plan::estimate::from_run(&plan, dir),
        (None, Some(_)) => crate::plan::estimate::from_model(&plan, profile, spec_dir),
        (None, None) => crate::plan::estimate::best(&plan, spec_dir, runs, &spec.name, None),
    };
    // A source asked for by name that cannot give an estimate is bad input, not "no estimate".
    if let (Err(e), true) = (&estimate, from.is_some() || profile.is_some()) {
        eprintln!("servebench plan: error: {e}");
        return exit::BAD_INPUT;
    }
    let about = |s: Option<f64>| {
        s.map_or("~?".to_string(), |s| {
            format!("~{}", crate::text::duration(s))
        })
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}: {} points, {} server group(s), {} launch(es), {} measured requests",
        spec.name,
        plan.point_count(),
        plan.groups.len(),
        plan.launches(),
        plan.request_count()
    );
    let first = &spec.points[0].experiment;
    if !first.host.is_local() {
        let _ = writeln!(
            out,
            "host {} (client on the {}; on_failure: {})",
            first.host.label(),
            match first.placement() {
                crate::spec::types::ClientPlacement::Host => "host, against localhost",
                crate::spec::types::ClientPlacement::Local =>
                    "local machine, through a port forward",
            },
            serde_json::to_value(first.on_failure)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        );
    }
    for (i, g) in plan.groups.iter().enumerate() {
        if i > 0 {
            let _ = writeln!(
                out,
                "
(restart: the server configuration changes)"
            );
        }
        let s = &g.server;
        let what = match &s.url {
            Some(u) => format!("external server {u} (not started or stopped)"),
            None => {
                let flags = crate::engine::flag_args(&s.args)
                    .unwrap_or_default()
                    .join(" ");
                format!(
                    "launch {} {} {flags}",
                    s.engine,
                    s.model.as_deref().unwrap_or("")
                )
            }
        };
        let ready = match &estimate {
            Ok(est) if s.url.is_none() => {
                let launch = est.groups.get(i).and_then(|e| e.launch_s);
                format!(" (ready {})", about(launch))
            }
            _ => String::new(),
        };
        let _ = writeln!(out, "\n{}: {what}{ready}", g.id);
        for p in &g.points {
            let e = &p.experiment;
            let time = match &estimate {
                Ok(est) => format!("  {}", about(est.point(&p.id))),
                Err(_) => String::new(),
            };
            let _ = writeln!(
                out,
                "  {}  {} req x {} round(s), concurrency {}, cache {}{time}",
                p.label(),
                e.requests,
                e.repeat,
                e.concurrency,
                serde_json::to_value(e.cache.policy)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            );
        }
    }
    match &estimate {
        Ok(est) => {
            let unknown = est.unknown_points();
            let missing = if unknown.is_empty() {
                String::new()
            } else {
                format!("; not counted, no estimate for: {}", unknown.join(", "))
            };
            let _ = writeln!(
                out,
                "\nestimate: {} from {}{missing}",
                about(Some(est.total_s())),
                est.source
            );
        }
        Err(e) => {
            let _ = writeln!(out, "\nestimate: none: {e}");
        }
    }
    exit::OK
}

fn run_experiment(
    path: Option<&std::path::Path>,
    resume: Option<&std::path::Path>,
    out: PathBuf,
    quiet: bool,
    check: bool,
) -> i32 {
    let spec = match path {
        Some(path) => match load(path) {
            Ok(s) => Some(s),
            Err(c) => return c,
        },
        None => None,
    };
    let Some(rt) = runtime() else {
        return exit::FAILED;
    };
    let opts = crate::run::RunOptions { out, quiet };
    let outcome = rt.block_on(async {
        let interrupt = crate::run::Interrupt::new();
        interrupt.on_signals();
        match (&spec, resume) {
            (Some(spec), _) => crate::run::execute(spec, &opts, interrupt).await,
            (None, Some(dir)) => crate::run::resume(dir, &opts, interrupt).await,
            (None, None) => Err(crate::run::RunError::Preflight(
                "give a spec file, or --resume RUN_DIR".into(),
            )),
        }
    });
    match outcome {
        Err(e @ crate::run::RunError::Preflight(_)) => {
            eprintln!("error: {e}");
            exit::BAD_INPUT
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::FAILED
        }
        Ok(o) => {
            println!("run directory: {}", o.dir.display());
            match &o.report {
                Ok(p) => println!("report: {}", p.display()),
                Err(e) => eprintln!(
                    "error: the report could not be rendered: {e}\n(the data is on disk; fix the template and run `servebench report {}`)",
                    o.dir.display()
                ),
            }
            use crate::results::meta::RunStatus;
            let code = match o.status {
                RunStatus::Complete if o.report.is_ok() => exit::OK,
                RunStatus::Complete => exit::FAILED,
                s => {
                    eprintln!("run {:?}: {}", s, o.reason.as_deref().unwrap_or(""));
                    exit::FAILED
                }
            };
            if !check {
                return code;
            }
            // A run that reproduces a published crash is "incomplete" yet may pass its check:
            // with --check, the expectations decide.
            match crate::results::rundir::RunDir::open(&o.dir)
                .and_then(|d| crate::report::reproduction::check_run_dir(&d))
            {
                Ok(r) => print_check(&r).max(if r.results.is_empty() { code } else { exit::OK }),
                Err(e) => {
                    eprintln!("error: cannot check the run: {e}");
                    exit::FAILED
                }
            }
        }
    }
}

fn check(run_dir: &std::path::Path) -> i32 {
    let dir = match crate::results::rundir::RunDir::open(run_dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    match crate::report::reproduction::check_run_dir(&dir) {
        Ok(r) => print_check(&r),
        Err(e) => {
            eprintln!("error: {e}");
            exit::FAILED
        }
    }
}

/// Prints the verdicts; exit 1 when any expectation does not hold.
fn print_check(r: &crate::report::reproduction::Reproduction) -> i32 {
    if r.results.is_empty() {
        println!("no expectations: the spec has no `expect:` list, so there is nothing to check");
        return exit::OK;
    }
    print!("{}", crate::report::reproduction::format_text(r));
    if r.failed > 0 { exit::FAILED } else { exit::OK }
}

/// The async runtime for a command, or None after saying why it could not start.
fn runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| eprintln!("error: cannot start the async runtime: {e}"))
        .ok()
}

fn down(run_dir: &std::path::Path) -> i32 {
    let Some(rt) = runtime() else {
        return exit::FAILED;
    };
    match rt.block_on(crate::run::down::down(run_dir)) {
        Ok(report) => {
            for l in &report.lines {
                println!("{}: {}", l.group, l.text);
            }
            if report.lines.is_empty() {
                println!("no launched server is recorded in this run");
            }
            if report.all_clear() {
                exit::OK
            } else {
                exit::FAILED
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::FAILED
        }
    }
}

fn report(run_dir: &std::path::Path, template: Option<PathBuf>, stdout: bool) -> i32 {
    let dir = match crate::results::rundir::RunDir::open(run_dir) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::BAD_INPUT;
        }
    };
    let template = template.as_deref().map(crate::report::Template::from_arg);
    if stdout {
        return match crate::report::render_run_dir(&dir, template.as_ref()) {
            Ok(md) => {
                print!("{md}");
                exit::OK
            }
            Err(e) => {
                eprintln!("error: {e}");
                exit::FAILED
            }
        };
    }
    match crate::report::write_report(&dir, template.as_ref()) {
        Ok(path) => {
            println!("report: {}", path.display());
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::FAILED
        }
    }
}

/// `5`, `5%` or `2.5 %`: a non-negative, finite percentage.
fn parse_percent(text: &str) -> Result<f64, String> {
    let number = text.trim().trim_end_matches('%').trim();
    match number.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!(
            "expected a percentage such as 5 or 5%, got `{text}`"
        )),
    }
}

fn compare(
    paths: &[PathBuf],
    threshold: Option<f64>,
    fail_on_regression: bool,
    out: Option<PathBuf>,
    template: Option<PathBuf>,
) -> i32 {
    use crate::report::compare;
    let mut runs = Vec::new();
    for path in paths {
        match compare::load(path) {
            Ok(run) => runs.push(run),
            Err(e) => {
                eprintln!("error: {e}");
                return exit::BAD_INPUT;
            }
        }
    }
    let source = match &template {
        None => None,
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => Some((path.display().to_string(), text)),
            Err(e) => {
                eprintln!(
                    "error: {}: cannot read the compare template: {e}",
                    path.display()
                );
                return exit::BAD_INPUT;
            }
        },
    };
    let model = compare::build(&runs, threshold);
    let markdown = match compare::render(
        &model,
        source.as_ref().map(|(n, s)| (n.as_str(), s.as_str())),
    ) {
        Ok(md) => md,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::FAILED;
        }
    };
    match &out {
        None => print!("{markdown}"),
        Some(path) => {
            if let Err(e) = std::fs::write(path, &markdown) {
                eprintln!("error: cannot write {}: {e}", path.display());
                return exit::FAILED;
            }
            println!("comparison: {}", path.display());
        }
    }
    let s = &model.summary;
    eprintln!(
        "{} regression(s), {} improvement(s) over {} shared point(s)",
        s.regressions, s.improvements, s.shared
    );
    if fail_on_regression && s.regressions > 0 {
        exit::FAILED
    } else {
        exit::OK
    }
}
