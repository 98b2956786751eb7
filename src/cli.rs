//! Command-line definitions and dispatch. Each command is a thin call into the library that
//! returns a [`Status`] or an [`Error`]; [`run`] alone prints errors and picks the exit code.

mod logging;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand};

use crate::error::{Error, Status};
use crate::exit;
use servebench_model::console;
use servebench_model::spec::types::ExportFormat;
use servebench_model::text::count_s;

const AFTER_HELP: &str = "\
Exit codes: 0 success (every point ok); 1 the run failed, was interrupted, a point failed or a \
check did not hold (what was measured is kept on disk); 2 invalid spec, command line or host; \
3 every point was measured but some are degraded (failed requests beyond `error_budget`).

Start with `servebench run experiments/quickstart.yaml`: it runs on the built-in simulator, no GPU needed.";

/// servebench runs declarative experiments against LLM inference servers (SGLang first) and
/// turns them into reviewable reports.
///
/// An experiment spec (YAML) names the server and its launch flags, the prompts, the cache
/// policy, the measurement method and a sweep. `run` launches the server, measures every point
/// with streaming requests, keeps the raw per-request data, and renders a Markdown report.
#[derive(Debug, Parser)]
#[command(name = "servebench", version, after_help = AFTER_HELP, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Say more on stderr: -v adds servebench's progress notes (info), -vv its debugging
    /// detail. Warnings and errors are always shown. `RUST_LOG` (e.g. `RUST_LOG=debug`, which
    /// includes the libraries) replaces this when set.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
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
    /// Write a run's points in a format another tool reads: `llm-d` (llm-d's Benchmark Report
    /// v0.2, one JSON file per point) or `aiperf` (AIPerf 0.13's `profile_export.jsonl` and
    /// `profile_export_aiperf.json`, one folder per point). A spec's `report.export` writes
    /// the same files with every run.
    ///
    /// Example: `servebench export runs/quickstart/<ts> --format llm-d`
    Export {
        /// A run directory, e.g. runs/quickstart/2026-11-29T10-04-12Z.
        #[arg(value_name = "RUN_DIR")]
        run_dir: PathBuf,
        /// The format: `llm-d` or `aiperf`.
        #[arg(long, value_name = "FORMAT", value_parser = parse_export_format)]
        format: ExportFormat,
        /// Folder to write into (default: RUN_DIR/export/FORMAT).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Log a run to an MLflow tracking server: the run as a parent MLflow run (the experiment,
    /// spec and versions as params; the report, its page, the spec and the records as
    /// artifacts), each point a child run with its swept values and flags as params and its
    /// figures as metrics. Logging the same run again updates those runs. A token comes from
    /// `MLFLOW_TRACKING_TOKEN` (or `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`)
    /// in the environment. A spec's `report.mlflow` logs every run the same way.
    ///
    /// Example: `servebench mlflow runs/quickstart/<ts> --tracking-uri http://mlflow:5000`
    Mlflow {
        /// A run directory, e.g. runs/quickstart/2026-11-29T10-04-12Z.
        #[arg(value_name = "RUN_DIR")]
        run_dir: PathBuf,
        /// The tracking server, http://host:port.
        #[arg(long, value_name = "URL")]
        tracking_uri: String,
        /// The MLflow experiment, created when missing (default: the spec's name).
        #[arg(long, value_name = "NAME")]
        experiment: Option<String>,
    },
    /// Make another tool's result files a servebench run directory, so `compare` and `history`
    /// set them beside servebench's runs: AIPerf 0.13's artifact folder (`aiperf`), a
    /// `vllm bench serve --save-result` file (`vllm-bench`), GuideLLM 0.8's `benchmarks.json`
    /// (`guidellm`) or inference-perf 0.7's report folder (`inference-perf`). `meta.json` names the tool, what
    /// it recorded of its command, and how its method differs; `points.jsonl` holds the
    /// metrics the files hold, in servebench's units.
    ///
    /// Example: `servebench import artifacts/my-run --from aiperf --out runs/imported/aiperf-c2`
    Import {
        /// The tool's result file, or its folder (AIPerf's artifacts, GuideLLM's output, inference-perf's reports).
        #[arg(value_name = "FILE_OR_DIR")]
        path: PathBuf,
        /// The tool that wrote it: `aiperf`, `vllm-bench`, `guidellm` or `inference-perf` (default: told from the files;
        /// refused when they do not say).
        #[arg(long, value_name = "TOOL", value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<servebench_report::report::import::From>()))]
        from: Option<servebench_report::report::import::From>,
        /// The run directory to write (default: runs/imported/<file name>).
        #[arg(long, value_name = "RUN_DIR")]
        out: Option<PathBuf>,
        /// The experiment the run joins in `history` (default: `<tool>-import`), e.g. the
        /// name of the servebench experiment run against the same server.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
    /// Check a run against the published numbers in its spec's `expect:` list: one verdict per
    /// expectation (reproduced, off by X%, point failed). Exits 1 when any does not hold.
    Check {
        /// A run directory, e.g. runs/long-context/2026-11-29T10-04-12Z.
        #[arg(value_name = "RUN_DIR")]
        run_dir: PathBuf,
    },
    /// Compare runs side by side: the first run is the baseline, points are matched by their
    /// sweep values (open-loop load points by their measured offered rate, within 5%), and each
    /// metric shows the relative change. A change is marked as a
    /// regression or an improvement only when it exceeds the noise: the 95% confidence intervals
    /// do not overlap (and, with `--threshold`, it is also larger than that), or, for runs
    /// without intervals, it is larger than `--threshold`. Server flags and other settings that
    /// differ between the runs are listed first; points missing from some runs are listed at the
    /// end. Failed or flagged points are shown, never judged.
    ///
    /// Example: `servebench compare runs/chunk-8192/<ts> runs/chunk-4096/<ts> --threshold 5%`
    Compare(CompareArgs),
    /// Every run in one history: runs grouped by experiment in start order, what changed in
    /// each (engine and version, server flags, model, hardware and host, servebench version,
    /// spec edits), and a series per point (matched as `compare` matches them) for the
    /// headline metrics. A step beyond the noise, judged as `compare` judges two runs, is a
    /// change point, attributed to its run's changes; a failed or flagged point is shown, never
    /// judged; runs that differ by construction (prompts, cache policy, method, client
    /// placement) are not judged against each other.
    ///
    /// Writes OUT/history.md with trend charts in OUT/charts/. Example: `servebench history
    /// runs/ --out history --fail-on-regression`
    History(HistoryArgs),
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
    /// Internal: leads a local server's process group (the runner starts every local server
    /// under it) and stops the whole group when the runner dies or asks, so a wrapper script's
    /// children never outlive a killed runner.
    #[command(hide = true)]
    Supervise {
        /// The runner's pid (the supervisor does not start the command if it is already gone).
        #[arg(long)]
        parent: Option<i32>,
        /// Milliseconds between SIGTERM and SIGKILL when stopping the group.
        #[arg(long, default_value_t = 10_000)]
        grace_ms: u64,
        /// The command, after `--`.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Grade a run's decode steps against the hardware: per point, the bytes a step must read
    /// per GPU (weights and KV cache, from the model's `config.json` at the point's context and
    /// batch), the time that takes at the GPU's peak bandwidth, and the bandwidth the step
    /// reached; over a context sweep, what the context-dependent and fixed parts cost.
    ///
    /// Example: `servebench bound runs/kimi-3-streaming/<ts> --model-config config.json --gpu
    /// rtx-pro-6000 --tp 8 --tokens-per-step 3`
    Bound(BoundArgs),
    /// Internal: prints a port free on this machine (`--wanted P`: P, if it is free here).
    /// servebench runs it on a Slurm node to pick a server's port where the server listens.
    #[command(hide = true)]
    Port {
        /// The port the spec asks for (`server.port`).
        #[arg(long)]
        wanted: Option<u16>,
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
    /// Run the built-in simulated server. Speaks SGLang's surface by default
    /// (`python -m sglang.launch_server` flags), vLLM's with `--api vllm` (`vllm serve MODEL`
    /// flags) or llama.cpp's with `--api llama.cpp` (`llama-server` flags), plus
    /// `--profile NAME|FILE`; `servebench sim [--api NAME] --help` lists them.
    #[command(disable_help_flag = true)]
    Sim {
        /// `--api NAME`, then that engine's launch flags plus `--profile`.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "FLAGS"
        )]
        args: Vec<String>,
    },
}

// `servebench compare`'s arguments (the command's help is on [`Command::Compare`]).
#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {
    /// Run directories (two or more; one is enough with --by), e.g.
    /// runs/quickstart/2026-11-29T10-04-12Z.
    #[arg(required = true, num_args = 1.., value_name = "RUN_DIR")]
    runs: Vec<PathBuf>,
    /// Split each run by this sweep dimension and compare the parts, e.g. `--by
    /// server.engine` for a run that swept the engine: its first value is the baseline.
    #[arg(long, value_name = "DIM")]
    by: Option<String>,
    /// Smallest change worth marking, in percent (`5` or `5%`). With confidence intervals a
    /// change must also clear them; without (one request per point) the threshold decides.
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    threshold: Option<f64>,
    /// Exit 1 when any metric regressed, or when nothing could be judged (no shared point,
    /// or no change with enough evidence either way): a gate must not pass by default.
    #[arg(long)]
    fail_on_regression: bool,
    /// Write the comparison to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Render with this minijinja template instead of the built-in one; it sees the
    /// comparison model (crates/report/src/report/compare.rs) and the report filters.
    #[arg(long, value_name = "FILE")]
    template: Option<PathBuf>,
}

// `servebench history`'s arguments (the command's help is on [`Command::History`]).
#[derive(Debug, clap::Args)]
pub(crate) struct HistoryArgs {
    /// Run directories, or folders holding them (searched a few levels deep for
    /// meta.json). With --git: paths inside the repository.
    #[arg(value_name = "PATH", default_value = "runs")]
    paths: Vec<PathBuf>,
    /// Read the runs committed in this git repository's history instead of the files on
    /// disk (nothing is checked out): every run directory under PATH whose files a commit
    /// of --rev added or changed, each as the newest of them holds it (a run changed by
    /// several commits is said).
    #[arg(long, value_name = "REPO")]
    git: Option<PathBuf>,
    /// The commits to read with --git: a revision (`main`: its whole history) or a range
    /// (`v1.2..main`: the runs committed after v1.2).
    #[arg(long, value_name = "REV", default_value = "HEAD", requires = "git")]
    rev: String,
    /// Smallest change worth marking, in percent (`5` or `5%`), as for `compare`.
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    threshold: Option<f64>,
    /// A metric to follow (repeatable; default: the headline metrics TTFT, prefill and
    /// decode speed, and request throughput), by its name in points.jsonl (`ttft_s`, `decode_tok_s`, `e2e_s`).
    #[arg(long = "metric", value_name = "NAME")]
    metrics: Vec<String>,
    /// Exit 1 when the newest run of any series regressed against any of the series' good
    /// levels (the newest three earlier comparable runs whose point had no problem, no
    /// client flag and no unresolved step, and was not itself a regression), or when no
    /// newest run could be judged: a gate must not pass by default.
    #[arg(long)]
    fail_on_regression: bool,
    /// With --fail-on-regression, let through a newest run whose step the wrong way is
    /// larger than the threshold but not settled by its evidence (the intervals overlap:
    /// rounds of 816, 929 and 465 ms). Without it such a run fails the gate, saying
    /// "unresolved": rerun it with more rounds, or accept it knowingly.
    #[arg(long, requires = "fail_on_regression")]
    accept_unresolved: bool,
    /// The index that keeps the history fast (default: .servebench-history-index.jsonl
    /// in the first PATH, when it is a folder). The run directories stay the truth: a
    /// run whose files changed is read again, and an index that is missing, damaged or
    /// from another servebench is rebuilt.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["no_index", "git"])]
    index: Option<PathBuf>,
    /// Read every run directory, with no index.
    #[arg(long)]
    no_index: bool,
    /// A shared history in PostgreSQL (`postgres://USER:PASSWORD@HOST:PORT/DATABASE`):
    /// the run directories under PATH are brought into it (a run whose files changed is
    /// written again), then the history covers every run the database holds, other
    /// machines' included. Tables: docs/guide/history.md. A database that is down or
    /// refuses the login fails the command (exit 1); nothing is built from part of it.
    #[arg(long, value_name = "URL", conflicts_with_all = ["index", "no_index", "git"])]
    db: Option<String>,
    /// Folder to write history.md and its charts into.
    #[arg(long, value_name = "DIR", default_value = "history")]
    out: PathBuf,
    /// Print the Markdown to stdout instead (no charts are written).
    #[arg(long)]
    stdout: bool,
}

// `servebench bound`'s arguments (the command's help is on [`Command::Bound`]).
#[derive(Debug, clap::Args)]
pub(crate) struct BoundArgs {
    /// A run directory.
    #[arg(value_name = "RUN_DIR")]
    run_dir: PathBuf,
    /// The model's Hugging Face `config.json`. Default: the one the run kept in meta.json
    /// (`server.model_facts`, or `<model>/config.json` read on the host).
    #[arg(long, value_name = "FILE")]
    model_config: Option<PathBuf>,
    /// The GPU: a catalogue id (`h100-sxm`, `rtx-pro-6000`, ...) or its name as nvidia-smi
    /// prints it. Default: the spec's `server.gpu` id, else the host's facts.
    #[arg(long, value_name = "GPU")]
    gpu: Option<String>,
    /// Tensor-parallel ranks. Default: the server's flags or /server_info.
    #[arg(long, value_name = "N")]
    tp: Option<u32>,
    /// Pipeline stages. Default: the server's flags, else 1.
    #[arg(long, value_name = "N")]
    pp: Option<u32>,
    /// The KV cache's element type (`fp8_e4m3`, `bf16`). Default: the server's flag, else the model's dtype.
    #[arg(long, value_name = "DTYPE")]
    kv_cache_dtype: Option<String>,
    /// Tokens a decode step gives each sequence: the mean accept length under speculative
    /// decoding. Default 1.
    #[arg(long, value_name = "X")]
    tokens_per_step: Option<f64>,
}

/// The schemas `servebench schema` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SchemaKind {
    /// Experiment spec files.
    Experiment,
    /// What report templates see (`ReportModel`).
    ReportModel,
    /// What compare templates see (`CompareModel`).
    CompareModel,
}

/// Parses `args` and runs the command; returns the exit code. The one place where an error
/// is printed and turned into an exit code ([`Error::print`], [`Error::exit_code`]).
pub(crate) fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // `--help` and `--version` end parsing too, with an answer on stdout.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return exit::OK;
        }
        Err(e) => return finish(Err(Error::CommandLine(e))),
    };
    if let Command::Agent { .. } = cli.command {
        logging::install_quiet();
    } else {
        logging::install(cli.verbose);
    }
    let result = match cli.command {
        // The agent and the simulator are processes of their own (a line protocol on stdout;
        // an SGLang stand-in with SGLang's messages): each prints its own errors and picks its
        // exit code from the same documented set.
        Command::Agent { heartbeat_ms } => {
            return crate::run::agent::main(Duration::from_millis(heartbeat_ms));
        }
        Command::Sim { args } => return sim::main(args),
        Command::Port { wanted } => return crate::host::port_main(wanted),
        Command::Supervise {
            parent,
            grace_ms,
            command,
        } => {
            return crate::host::supervise::main(crate::host::supervise::Supervise {
                parent,
                grace: Duration::from_millis(grace_ms),
                command,
            });
        }
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
        Command::Export {
            run_dir,
            format,
            out,
        } => export(&run_dir, format, out),
        Command::Mlflow {
            run_dir,
            tracking_uri,
            experiment,
        } => mlflow(
            &run_dir,
            &crate::mlflow::Target {
                tracking_uri,
                experiment,
            },
        ),
        Command::Import {
            path,
            from,
            out,
            name,
        } => import(&path, from, out, name.as_deref()),
        Command::Bound(args) => bound(args),
        Command::Compare(args) => compare(args),
        Command::History(args) => history(HistoryOptions::of(&args)),
        Command::Schema { kind } => schema(kind),
    };
    finish(result)
}

/// Prints the error, if any; the exit code either way.
fn finish(result: Result<Status, Error>) -> i32 {
    match result {
        Ok(status) => status.exit_code(),
        Err(e) => {
            e.print();
            e.exit_code()
        }
    }
}

fn schema(kind: SchemaKind) -> Result<Status, Error> {
    use servebench_report::report::schema;
    let text = match kind {
        SchemaKind::Experiment => servebench_model::spec::schema_json(),
        SchemaKind::ReportModel => schema::to_json(&schema::report_model_schema()),
        SchemaKind::CompareModel => schema::to_json(&schema::compare_model_schema()),
    };
    console::out(&text);
    Ok(Status::Success)
}

/// Loads a spec as `validate` and `run` see it: the spec itself, then what the run would
/// refuse when it starts (prompt files, trace files, the report template, the model config and
/// GPU to grade against, `${NAME}` references to unset
/// variables), every problem with its file, line and column, before a run directory exists;
/// then its flags against each engine's: a typo is an error (with the engine's flag), a flag
/// the list lacks is a warning.
pub fn load_spec(
    path: &Path,
) -> Result<servebench_model::spec::LoadedSpec, servebench_model::spec::SpecErrors> {
    let prompts = crate::prompt::PromptCheck::default();
    let template = servebench_report::report::TemplateCheck::default();
    let schedules = crate::load::ScheduleCheck::default();
    let bound_inputs = servebench_report::report::BoundInputsCheck::default();
    let spec = servebench_model::spec::load_checked(
        path,
        &[
            &prompts,
            &template,
            &schedules,
            &bound_inputs,
            &crate::client::UrlCheck,
            &servebench_model::secrets::EnvRefCheck,
        ],
    )?;
    // From here on, nothing printed shows the spec's secrets.
    servebench_model::redact::install(servebench_model::secrets::redactor(
        spec.points.iter().map(|p| &p.experiment),
    ));
    for w in &spec.warnings {
        tracing::warn!("{}", w.as_warning());
    }
    let flags = crate::engine::check_spec(&spec);
    for w in &flags.warnings {
        tracing::warn!("{w}");
    }
    if flags.errors.is_empty() {
        Ok(spec)
    } else {
        Err(servebench_model::spec::SpecErrors::new(flags.errors))
    }
}

fn validate(specs: &[PathBuf]) -> Result<Status, Error> {
    let mut invalid = Vec::new();
    for path in specs {
        match load_spec(path) {
            Ok(s) => console::outln(&format!(
                "{}: ok ({})",
                path.display(),
                count_s(s.points.len(), "point")
            )),
            Err(e) => invalid.push(e),
        }
    }
    if invalid.is_empty() {
        Ok(Status::Success)
    } else {
        Err(Error::Spec(invalid))
    }
}

fn plan(
    path: &Path,
    from: Option<&Path>,
    profile: Option<&str>,
    runs: &Path,
) -> Result<Status, Error> {
    use crate::plan::estimate;
    let spec = load_spec(path)?;
    let plan = crate::plan::Plan::new(&spec.points);
    let spec_dir = path.parent().unwrap_or(Path::new("."));
    let estimate = match (from, profile) {
        (Some(dir), _) => estimate::from_run(&plan, dir),
        (None, Some(_)) => estimate::from_model(&plan, profile, spec_dir),
        (None, None) => estimate::best(&plan, spec_dir, runs, &spec.name, None),
    };
    // A source asked for by name that cannot give an estimate is bad input, not "no estimate".
    let estimate = match estimate {
        Err(e) if from.is_some() || profile.is_some() => return Err(e.into()),
        estimate => estimate,
    };
    let text = crate::plan::render::render(&spec, &plan, &estimate);
    console::out(&text);
    Ok(Status::Success)
}

/// What `run` starts from: a spec, or an interrupted run's directory.
enum RunFrom<'a> {
    Spec(servebench_model::spec::LoadedSpec),
    Resume(&'a Path),
}

fn run_experiment(
    path: Option<&Path>,
    resume: Option<&Path>,
    out: PathBuf,
    quiet: bool,
    check: bool,
) -> Result<Status, Error> {
    let from = match (path, resume) {
        (Some(path), _) => RunFrom::Spec(load_spec(path)?),
        (None, Some(dir)) => RunFrom::Resume(dir),
        (None, None) => return Err(Error::Usage("give a spec file, or --resume RUN_DIR".into())),
    };
    let rt = runtime()?;
    let opts = crate::run::RunOptions { out, quiet };
    let outcome = rt.block_on(async {
        let interrupt = crate::run::Interrupt::new();
        interrupt.on_signals();
        match &from {
            RunFrom::Spec(spec) => crate::run::execute(spec, &opts, interrupt).await,
            RunFrom::Resume(dir) => crate::run::resume(dir, &opts, interrupt).await,
        }
    })?;
    console::outln(&format!("run directory: {}", outcome.dir.display()));
    let reported = match outcome.report {
        Ok(p) => {
            console::outln(&format!("report: {}", p.display()));
            true
        }
        // Said, and the run's outcome and check still follow: the data is on disk.
        Err(source) => {
            Error::RunReport {
                dir: outcome.dir.clone(),
                source,
            }
            .print();
            false
        }
    };
    // Said, and the run is kept: `servebench mlflow RUN_DIR` logs it again.
    let logged = match &outcome.mlflow {
        None => true,
        Some(Ok(l)) => {
            print_logged(l);
            true
        }
        Some(Err(e)) => {
            console::errln(&format!(
                "error: the run was not logged to MLflow: {e}\n(the run is kept; log it again with `servebench mlflow {} --tracking-uri URL`)",
                outcome.dir.display()
            ));
            false
        }
    };
    let reported = reported && logged;
    use servebench_model::results::meta::RunStatus;
    let status = match outcome.status {
        RunStatus::Complete => Status::failed_if(!reported),
        s => {
            let reason = outcome
                .reason
                .as_deref()
                .unwrap_or("no reason was recorded");
            console::errln(&match s {
                RunStatus::Failed => format!("error: the run failed: {reason}"),
                s => format!("run {s}: {reason}"),
            });
            match s {
                RunStatus::Degraded if reported => Status::Degraded,
                _ => Status::Failed,
            }
        }
    };
    if !check {
        return Ok(status);
    }
    // A run that reproduces a published crash is "incomplete" yet may pass its check:
    // with --check, the expectations decide.
    let r = servebench_model::results::rundir::RunDir::open(&outcome.dir)
        .and_then(|d| servebench_report::report::reproduction::check_run_dir(&d))
        .map_err(Error::CheckRun)?;
    let status = if r.results.is_empty() {
        status
    } else {
        Status::Success
    };
    Ok(print_check(&r).max(status))
}

fn check(run_dir: &Path) -> Result<Status, Error> {
    let dir = servebench_model::results::rundir::RunDir::open(run_dir).map_err(Error::OpenRun)?;
    let r = servebench_report::report::reproduction::check_run_dir(&dir).map_err(Error::ReadRun)?;
    Ok(print_check(&r))
}

/// Grades a run's decode steps against the GPU's bandwidth and prints the table.
fn bound(args: BoundArgs) -> Result<Status, Error> {
    let BoundArgs {
        run_dir,
        model_config,
        gpu,
        tp,
        pp,
        kv_cache_dtype,
        tokens_per_step,
    } = args;
    let run_dir = run_dir.as_path();
    let most = servebench_report::report::bound::MAX_TOKENS_PER_STEP;
    if let Some(x) = tokens_per_step.filter(|x| !(x.is_finite() && (1.0..=most).contains(x))) {
        return Err(Error::Usage(format!(
            "--tokens-per-step {x}: a decode step gives each sequence from 1 to {most} tokens (the mean accept length under speculative decoding)"
        )));
    }
    if tp == Some(0) || pp == Some(0) {
        return Err(Error::Usage("--tp and --pp count GPUs: at least 1".into()));
    }
    let (json, from) = match model_config.as_deref() {
        Some(path) => {
            let bad = |why: String| Error::Usage(format!("{}: {why}", path.display()));
            let text = read_model_config(path).map_err(|e| bad(e.to_string()))?;
            let json: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
            (json, path.display().to_string())
        }
        None => kept_model_config(run_dir)?,
    };
    let model = roofline::ModelFacts::from_hf_config(&json)
        .map_err(|e| Error::Usage(format!("{from}: {e}")))?;
    let dir = servebench_model::results::rundir::RunDir::open(run_dir).map_err(Error::OpenRun)?;
    let meta = dir.read_meta().map_err(Error::ReadRun)?;
    let points = dir.read_points().map_err(Error::ReadRun)?;
    let gpu = gpu
        .or_else(|| match &meta.experiment.server.gpu {
            Some(servebench_model::spec::types::GpuChoice::Catalogue(id)) => Some(id.clone()),
            _ => None,
        })
        .or_else(|| {
            // A simulator profile's facts name the GPU they model.
            meta.servers
                .iter()
                .find_map(|s| s.model_config.as_ref()?.gpu.clone())
        });
    let opts = servebench_report::report::bound::BoundOptions {
        model,
        gpu,
        tp,
        pp,
        kv_cache_dtype,
        tokens_per_step,
    };
    let graded = servebench_report::report::bound::grade(&meta, &points, &opts)
        .map_err(|e| Error::Usage(e.to_string()))?;
    let text = servebench_report::report::bound_text::render(&graded).map_err(Error::Report)?;
    console::out(&text);
    Ok(Status::Success)
}

/// The model config a run kept in `meta.json`, and where it came from; a usage error naming
/// `--model-config` when it kept none.
fn kept_model_config(run_dir: &Path) -> Result<(serde_json::Value, String), Error> {
    let dir = servebench_model::results::rundir::RunDir::open(run_dir).map_err(Error::OpenRun)?;
    let meta = dir.read_meta().map_err(Error::ReadRun)?;
    let kept = meta.servers.iter().find_map(|s| s.model_config.as_ref());
    match kept {
        Some(k) if k.config.is_some() => {
            Ok((k.config.clone().unwrap_or_default(), k.origin.clone()))
        }
        Some(k) => Err(Error::Usage(format!(
            "the run could not read its model config ({}: {}): give --model-config FILE",
            k.origin,
            k.missing.as_deref().unwrap_or("not read")
        ))),
        None => Err(Error::Usage(
            "the run kept no model config: give --model-config FILE (the model's config.json)"
                .into(),
        )),
    }
}

/// A regular file (a FIFO would block) of at most [`MODEL_CONFIG_BYTES`], as text.
fn read_model_config(path: &Path) -> Result<String, ModelConfigError> {
    use servebench_model::input_file::{self, Refused};
    use std::io::Read as _;
    let file = input_file::open_regular(path, MODEL_CONFIG_BYTES).map_err(|r| match r {
        Refused::Io(e) => ModelConfigError::Read(e),
        Refused::NotAFile(kind) => ModelConfigError::NotAFile(kind),
        Refused::TooLarge(bytes) => ModelConfigError::TooLarge(bytes),
    })?;
    let mut text = String::new();
    file.take(MODEL_CONFIG_BYTES)
        .read_to_string(&mut text)
        .map_err(ModelConfigError::Read)?;
    Ok(text)
}

/// Why `bound --model-config FILE` cannot read its file (the caller names the file).
#[derive(Debug, thiserror::Error)]
enum ModelConfigError {
    #[error("cannot read it: {0}")]
    Read(std::io::Error),
    #[error("{0}, not a regular file: give the model's config.json")]
    NotAFile(&'static str),
    #[error("{0} bytes; a config.json is read up to {MODEL_CONFIG_BYTES} bytes")]
    TooLarge(u64),
}

/// Largest `config.json` read (real ones are a few kB; a multimodal one with its processor
/// settings under 100 kB).
const MODEL_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// Prints the verdicts; failed when any expectation does not hold.
fn print_check(r: &servebench_report::report::reproduction::Reproduction) -> Status {
    if r.results.is_empty() {
        console::outln(
            "no expectations: the spec has no `expect:` list, so there is nothing to check",
        );
        return Status::Success;
    }
    console::out(&servebench_report::report::reproduction::format_text(r));
    Status::failed_if(r.failed > 0)
}

/// The async runtime for a command. The open-file limit is raised to its hard limit first:
/// an open-loop point holds a connection per request in flight.
fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    crate::client::raise_open_file_limit();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)
}

fn down(run_dir: &Path) -> Result<Status, Error> {
    let report = runtime()?.block_on(crate::run::down::down(run_dir))?;
    for l in &report.lines {
        console::outln(&format!("{}: {}", l.group, l.text));
    }
    if report.lines.is_empty() {
        console::outln("no launched server is recorded in this run");
    }
    Ok(Status::failed_if(!report.all_clear()))
}

fn report(run_dir: &Path, template: Option<PathBuf>, stdout: bool) -> Result<Status, Error> {
    let dir = servebench_model::results::rundir::RunDir::open(run_dir).map_err(Error::OpenRun)?;
    let template = template
        .as_deref()
        .map(servebench_report::report::Template::from_arg);
    if stdout {
        console::out(&servebench_report::report::render_run_dir(
            &dir,
            template.as_ref(),
        )?);
    } else {
        let path = servebench_report::report::write_report(&dir, template.as_ref())?;
        console::outln(&format!("report: {}", path.display()));
    }
    Ok(Status::Success)
}

fn export(run_dir: &Path, format: ExportFormat, out: Option<PathBuf>) -> Result<Status, Error> {
    use servebench_report::report::exports;
    let dir = servebench_model::results::rundir::RunDir::open(run_dir).map_err(Error::OpenRun)?;
    let out = out.unwrap_or_else(|| exports::default_dir(run_dir, format));
    let written = exports::write(&dir, format, &out)?;
    let name: &'static str = format.into();
    console::outln(&format!(
        "{name}: {} in {}",
        count_s(written.len(), "file"),
        out.display()
    ));
    Ok(Status::Success)
}

fn mlflow(run_dir: &Path, target: &crate::mlflow::Target) -> Result<Status, Error> {
    let logged = runtime()?.block_on(crate::mlflow::log_run(run_dir, target))?;
    print_logged(&logged);
    Ok(Status::Success)
}

/// What a log to MLflow did, on stdout (what it left out on stderr).
fn print_logged(l: &crate::mlflow::Logged) {
    console::outln(&format!(
        "mlflow: {} run {} in experiment `{}` with {} and {}: {}",
        if l.updated { "updated" } else { "logged" },
        l.run_id,
        l.experiment,
        count_s(l.points, "point run"),
        count_s(l.artifacts, "artifact"),
        l.url()
    ));
    for n in &l.notes {
        console::errln(&format!("mlflow: {n}"));
    }
}

fn import(
    path: &Path,
    from: Option<servebench_report::report::import::From>,
    out: Option<PathBuf>,
    name: Option<&str>,
) -> Result<Status, Error> {
    use servebench_report::report::import;
    let out = out.unwrap_or_else(|| {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        PathBuf::from("runs/imported").join(stem.unwrap_or_else(|| "import".into()))
    });
    let dir = import::import(path, from, &out, name)?;
    console::outln(&format!("imported: {}", dir.display()));
    Ok(Status::Success)
}

/// A `--format` servebench can export to.
fn parse_export_format(text: &str) -> Result<ExportFormat, NotAFormat> {
    text.parse().map_err(|_| NotAFormat(text.to_string()))
}

/// A `--format` servebench does not export to (clap prints it after the flag's name).
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a format servebench exports: use one of {choices}", choices = ExportFormat::names().join(", "))]
struct NotAFormat(String);

/// A `--threshold` that is not a percentage (clap prints it after the flag's name).
#[derive(Debug, thiserror::Error)]
#[error("expected a percentage such as 5 or 5%, got `{0}`")]
struct NotAPercentage(String);

/// `5`, `5%` or `2.5 %`: a non-negative, finite percentage.
fn parse_percent(text: &str) -> Result<f64, NotAPercentage> {
    let number = text.trim().trim_end_matches('%').trim();
    match number.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(NotAPercentage(text.to_string())),
    }
}

fn compare(args: CompareArgs) -> Result<Status, Error> {
    let CompareArgs {
        runs: paths,
        by,
        threshold,
        fail_on_regression,
        out,
        template,
    } = args;
    let by = by.as_deref();
    use servebench_report::report::compare;
    let mut runs = paths
        .iter()
        .map(|path| compare::load(path))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::OpenRun)?;
    if let Some(dim) = by {
        let mut parts = Vec::new();
        for run in runs {
            parts.extend(compare::split_by(run, dim).map_err(|e| Error::Usage(e.to_string()))?);
        }
        runs = parts;
    }
    if runs.len() < 2 {
        return Err(Error::Usage(
            "compare needs two runs, or one run and --by DIM to compare its parts".into(),
        ));
    }
    let source = match &template {
        None => None,
        Some(path) => {
            let text = servebench_report::report::read_template_file(path).map_err(|source| {
                Error::CompareTemplate {
                    path: path.clone(),
                    source,
                }
            })?;
            Some((path.display().to_string(), text))
        }
    };
    let model = compare::build(&runs, threshold);
    let markdown = compare::render(
        &model,
        source.as_ref().map(|(n, s)| (n.as_str(), s.as_str())),
    )?;
    match &out {
        None => console::out(&markdown),
        Some(path) => {
            std::fs::write(path, servebench_model::redact::text(&markdown).as_bytes()).map_err(
                |source| Error::Write {
                    path: path.clone(),
                    source,
                },
            )?;
            console::outln(&format!("comparison: {}", path.display()));
        }
    }
    let s = &model.summary;
    console::errln(&format!(
        "{}, {} over {}",
        count_s(s.regressions, "regression"),
        count_s(s.improvements, "improvement"),
        count_s(s.shared, "shared point")
    ));
    if fail_on_regression && s.judged() == 0 {
        console::errln(
            "error: nothing was judged (no shared point, or no change with enough evidence): the gate fails rather than pass unseen",
        );
        return Ok(Status::Failed);
    }
    Ok(Status::failed_if(fail_on_regression && s.regressions > 0))
}

/// What `servebench history` was asked.
struct HistoryOptions<'a> {
    paths: &'a [PathBuf],
    /// `--git REPO --rev REV`.
    git: Option<(&'a Path, &'a str)>,
    index: Option<PathBuf>,
    /// `--db URL`.
    db: Option<&'a str>,
    threshold: Option<f64>,
    metric_names: &'a [String],
    fail_on_regression: bool,
    accept_unresolved: bool,
    out: &'a Path,
    stdout: bool,
}

impl<'a> HistoryOptions<'a> {
    fn of(args: &'a HistoryArgs) -> Self {
        HistoryOptions {
            git: args.git.as_deref().map(|repo| (repo, args.rev.as_str())),
            index: index_path(
                &args.paths,
                args.index.clone(),
                args.no_index || args.db.is_some(),
            ),
            db: args.db.as_deref(),
            paths: &args.paths,
            threshold: args.threshold,
            metric_names: &args.metrics,
            fail_on_regression: args.fail_on_regression,
            accept_unresolved: args.accept_unresolved,
            out: &args.out,
            stdout: args.stdout,
        }
    }
}

fn history(options: HistoryOptions<'_>) -> Result<Status, Error> {
    let HistoryOptions {
        paths,
        git,
        index,
        db,
        threshold,
        metric_names,
        fail_on_regression,
        accept_unresolved,
        out,
        stdout,
    } = options;
    let index = index.as_deref();
    use servebench_report::history;
    let mut metrics: Vec<&str> = Vec::new();
    for name in metric_names {
        match (
            servebench_model::catalog::Metric::from_name(name),
            servebench_model::catalog::Graded::from_name(name),
        ) {
            (Some(m), _) => metrics.push(m.name()),
            (None, Some(g)) => metrics.push(g.name),
            (None, None) => {
                return Err(Error::Usage(format!(
                    "--metric {name}: not a metric servebench measures; use a name from points.jsonl such as ttft_s, prefill_tok_s, decode_tok_s, e2e_s, or a figure the bound grades with such as decode_bw_fraction"
                )));
            }
        }
    }
    if metrics.is_empty() {
        metrics = history::default_metrics()
            .iter()
            .map(|m| m.name())
            .collect();
    }
    let (runs, skipped, notes) = history_runs(paths, git, index, db)?;
    for n in &notes {
        console::errln(&format!("note: {n}"));
    }
    for s in &skipped {
        console::errln(&format!("warning: {}: left out: {}", s.path, s.why));
    }
    let sources = match git {
        None => paths.iter().map(|p| p.display().to_string()).collect(),
        Some((repo, rev)) => paths
            .iter()
            .map(|p| format!("git {} {rev} -- {}", repo.display(), p.display()))
            .collect(),
    };
    let mut model = history::build_names(runs, skipped, sources, threshold, &metrics);
    model.notes = notes;
    if stdout {
        console::out(&history::markdown::render(&model, None)?);
    } else {
        let path = history::write(&model, out)?;
        console::outln(&format!("history: {}", path.display()));
    }
    let runs: usize = model.experiments.iter().map(|e| e.runs.len()).sum();
    let changes: usize = model
        .experiments
        .iter()
        .map(|e| e.change_points().len())
        .sum();
    console::errln(&format!(
        "{} of {}, {}",
        count_s(runs, "run"),
        count_s(model.experiments.len(), "experiment"),
        count_s(changes, "change point")
    ));
    if !fail_on_regression {
        return Ok(Status::Success);
    }
    Ok(history_gate(&model, accept_unresolved))
}

/// `--fail-on-regression`: fails on a regression of a newest run against its good levels, on
/// a step the wrong way that its evidence cannot settle (unless `accept_unresolved`), and
/// when no newest run could be judged.
fn history_gate(
    model: &servebench_report::history::HistoryModel,
    accept_unresolved: bool,
) -> Status {
    use servebench_report::history;
    let regressions = history::regressions(model);
    for r in &regressions {
        console::errln(&format!("regression: {r}"));
    }
    let (worse, better) = history::unresolved(model);
    for u in &worse {
        match accept_unresolved {
            true => console::errln(&format!("warning: accepted (--accept-unresolved): {u}")),
            false => console::errln(&format!("unresolved: {u}")),
        }
    }
    for u in &better {
        console::errln(&format!("warning: {u}"));
    }
    if history::judged_latest(model) == 0 {
        console::errln(
            "error: no newest run could be judged against a good level (one run, or only failed, flagged or incomparable points): the gate fails rather than pass unseen",
        );
        return Status::Failed;
    }
    let unresolved = !worse.is_empty() && !accept_unresolved;
    if unresolved {
        console::errln(&format!(
            "error: {} series of the newest run moved the wrong way by more than the threshold, with evidence too wide to settle it (unresolved): the gate fails rather than pass it unjudged; rerun it with more rounds, or pass --accept-unresolved to let it through",
            worse.len()
        ));
    }
    Status::failed_if(!regressions.is_empty() || unresolved)
}

/// A history's runs, the run directories left out (with why), and notes on them.
type HistoryRuns = (
    Vec<servebench_report::report::compare::LoadedRun>,
    Vec<servebench_report::history::model::SkippedRun>,
    Vec<String>,
);

/// The runs a history is built from: from the database, the index, the run directories or a
/// git history, with what was left out and the notes a git range gives.
fn history_runs(
    paths: &[std::path::PathBuf],
    git: Option<(&std::path::Path, &str)>,
    index: Option<&std::path::Path>,
    db: Option<&str>,
) -> Result<HistoryRuns, Error> {
    use servebench_report::history;
    let budget = history::source::Budget::default();
    let mut notes: Vec<String> = Vec::new();
    let (runs, skipped) = match (git, index) {
        (None, _) if db.is_some() => {
            let url = db.unwrap_or_default();
            let (runs, skipped, usage) = history::db::load_dirs(paths, &budget, url)?;
            if let Some(why) = &usage.rebuilt {
                console::errln(&format!(
                    "{}: history tables rebuilt ({why})",
                    history::db::shown(url)
                ));
            }
            (runs, skipped)
        }
        (None, None) => history::source::load_dirs(paths, &budget),
        (None, Some(index)) => {
            let (runs, skipped, usage) = history::index::load_dirs(paths, &budget, index);
            if let Some(why) = &usage.rebuilt {
                tracing::info!("{}: index rebuilt ({why})", index.display());
            }
            if let Some(why) = &usage.not_written {
                console::errln(&format!("warning: the index was not written: {why}"));
            }
            tracing::info!(
                "{}: {} from the index, {} read",
                index.display(),
                count_s(usage.reused, "run"),
                usage.read
            );
            (runs, skipped)
        }
        (Some((repo, rev)), _) => {
            let (runs, skipped, said) = history::git::load(repo, rev, paths, &budget)
                .map_err(|e| Error::Usage(e.to_string()))?;
            notes = said;
            (runs, skipped)
        }
    };
    Ok((runs, skipped, notes))
}

/// The history's index: `--index`, else the default file in the first path when that is a
/// folder of runs (not a run directory itself); None with `--no-index`.
fn index_path(paths: &[PathBuf], index: Option<PathBuf>, no_index: bool) -> Option<PathBuf> {
    if no_index {
        return None;
    }
    if index.is_some() {
        return index;
    }
    let first = paths.first()?;
    (first.is_dir()
        && !first
            .join(servebench_model::results::rundir::META_FILE)
            .is_file())
    .then(|| first.join(servebench_report::history::index::INDEX_FILE))
}
