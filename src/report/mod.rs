//! Reports: a run directory's records rendered through a minijinja Markdown template.
//!
//! [`build_model`] turns the stored records into a [`ReportModel`]; [`render`] is a pure function
//! from that model and a template to Markdown, and [`charts`] draws its SVG charts. Only
//! [`render_run_dir`] (reads) and [`write_report`] (reads, then writes `report.md` and
//! `charts/*.svg`) touch the disk.

pub mod charts;
pub mod compare;
pub mod format;
pub mod model;
pub mod reproduction;
pub mod schema;

use std::path::{Path, PathBuf};

use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};

use crate::results::meta::RunMeta;
use crate::results::rundir::{CHARTS_DIR, REPORT_FILE, RunDir, RunDirError};

pub use model::{ReportModel, build_model};

/// The default template, compiled into the binary so reports render from any directory.
pub const DEFAULT_TEMPLATE: &str = include_str!("../../reports/templates/default.md.j2");

/// Name the default template has in error messages.
pub const DEFAULT_TEMPLATE_NAME: &str = "default.md.j2";

/// The long-context study layout: one compact table per server group.
pub const LONG_CONTEXT_TEMPLATE: &str = include_str!("../../reports/templates/long-context.md.j2");

/// A template compiled into the binary.
#[derive(Debug, PartialEq, Eq)]
pub struct BuiltinTemplate {
    /// The name `report.template` and `--template` use.
    pub name: &'static str,
    /// Its file under `reports/templates/`, as error messages name it.
    pub file: &'static str,
    /// The template's text.
    pub source: &'static str,
}

/// Templates compiled into the binary.
pub const BUILTIN_TEMPLATES: &[BuiltinTemplate] = &[
    BuiltinTemplate {
        name: "default",
        file: DEFAULT_TEMPLATE_NAME,
        source: DEFAULT_TEMPLATE,
    },
    BuiltinTemplate {
        name: "long-context",
        file: "long-context.md.j2",
        source: LONG_CONTEXT_TEMPLATE,
    },
];

/// The template a report is rendered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Template {
    /// A built-in template.
    Builtin(&'static BuiltinTemplate),
    /// A template file.
    File(PathBuf),
}

impl Template {
    /// `report.template` as written in a spec: a built-in name, else a path relative to
    /// `base` (the spec's directory). A built-in name wins over a file of the same name.
    pub fn resolve(value: &str, base: &Path) -> Template {
        match builtin(value) {
            Some(t) => Template::Builtin(t),
            None => Template::File(base.join(value)),
        }
    }

    /// `--template` on the command line: a built-in name, else a path as given.
    pub fn from_arg(value: &Path) -> Template {
        match value.to_str().and_then(builtin) {
            Some(t) => Template::Builtin(t),
            None => Template::File(value.to_path_buf()),
        }
    }
}

/// The built-in template of this name.
pub fn builtin(name: &str) -> Option<&'static BuiltinTemplate> {
    BUILTIN_TEMPLATES.iter().find(|t| t.name == name)
}

/// The names of the built-in templates, for messages: `default, long-context`.
pub fn builtin_names() -> String {
    BUILTIN_TEMPLATES
        .iter()
        .map(|t| t.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Name a user template has in error messages when [`render`] is not told its path.
pub const USER_TEMPLATE_NAME: &str = "user template";

/// Why a report could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The template failed to parse or render.
    #[error("{}: {message}", location(name, *line))]
    Template {
        /// Template name (`default.md.j2` or the user template's path).
        name: String,
        /// 1-based line in the template, when known.
        line: Option<usize>,
        /// minijinja's description of the problem.
        message: String,
    },
    /// The user template file could not be read.
    #[error("{path}: cannot read the report template: {source}")]
    ReadTemplate {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The run directory's records could not be read.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    /// A chart could not be drawn.
    #[error(transparent)]
    Chart(#[from] charts::ChartError),
    /// The report or a chart could not be written into the run directory.
    #[error("{path}: cannot write: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn location(name: &str, line: Option<usize>) -> String {
    match line {
        Some(line) => format!("template {name}, line {line}"),
        None => format!("template {name}"),
    }
}

/// Renders the report. `template` is a user template's source; `None` renders the default.
pub fn render(model: &ReportModel, template: Option<&str>) -> Result<String, ReportError> {
    match template {
        None => render_named(model, DEFAULT_TEMPLATE_NAME, DEFAULT_TEMPLATE),
        Some(source) => render_named(model, USER_TEMPLATE_NAME, source),
    }
}

/// Renders a model (the report's, or another such as the comparison's) with a template given by
/// name (used in error messages) and source.
pub fn render_named<M: serde::Serialize>(
    model: &M,
    name: &str,
    source: &str,
) -> Result<String, ReportError> {
    let mut env = Environment::new();
    // Strict: a misspelt field is an error with a line number, not a silently empty cell.
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    // Block tags on lines of their own leave no blank lines behind; the file's last newline stays.
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build()
        .map_err(|e| template_error(name, e))?;
    env.set_syntax(syntax);
    format::register(&mut env);
    let err = |e: minijinja::Error| template_error(name, e);
    env.add_template(name, source).map_err(err)?;
    let template = env.get_template(name).map_err(err)?;
    template
        .render(minijinja::Value::from(minijinja::value::Serde(model)))
        .map_err(err)
}

fn template_error(name: &str, e: minijinja::Error) -> ReportError {
    let message = match e.detail() {
        Some(detail) => format!("{}: {}", e.kind(), detail),
        None => e.kind().to_string(),
    };
    ReportError::Template {
        name: name.to_string(),
        line: e.line(),
        message,
    }
}

/// Reads a run directory and renders its report. `template_override` replaces the template
/// named in the spec (the runner resolves that relative to the spec file and passes it here).
pub fn render_run_dir(
    dir: &RunDir,
    template_override: Option<&Template>,
) -> Result<String, ReportError> {
    let (meta, model) = read_model(dir)?;
    render_for_run(&meta, &model, template_override)
}

/// Renders a run directory's report and writes it as `report.md`, with its charts in
/// `charts/*.svg` (a chart that no longer applies is removed). Returns the report's path.
/// Nothing is written when the template fails.
pub fn write_report(
    dir: &RunDir,
    template_override: Option<&Template>,
) -> Result<PathBuf, ReportError> {
    let (meta, model) = read_model(dir)?;
    let markdown = render_for_run(&meta, &model, template_override)?;
    write_charts(dir, &charts::charts(&model))?;
    let path = dir.file(REPORT_FILE);
    dir.write_report(&markdown)
        .map_err(|source| ReportError::Write {
            path: path.clone(),
            source,
        })?;
    Ok(path)
}

/// Writes each chart's SVG into `charts/` and removes chart files the data no longer supports,
/// so the folder always matches the report's links.
fn write_charts(dir: &RunDir, drawn: &[charts::Chart]) -> Result<(), ReportError> {
    let folder = dir.file(CHARTS_DIR);
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReportError::Write { path, source }
    };
    if !drawn.is_empty() {
        std::fs::create_dir_all(&folder).map_err(write_err(&folder))?;
    }
    for chart in drawn {
        let svg = charts::render_svg(chart)?;
        let path = folder.join(chart.file);
        std::fs::write(&path, svg).map_err(write_err(&path))?;
    }
    for file in charts::chart_files() {
        let path = folder.join(file);
        if !drawn.iter().any(|c| c.file == file) && path.exists() {
            std::fs::remove_file(&path).map_err(write_err(&path))?;
        }
    }
    Ok(())
}

/// The run's meta and its report model, with notes on lines skipped while reading.
fn read_model(dir: &RunDir) -> Result<(RunMeta, ReportModel), ReportError> {
    let meta = dir.read_meta()?;
    let points = dir.read_points_detailed()?;
    let requests = dir.read_requests_detailed()?;
    let mut model = build_model(&meta, &points.records, &requests.records);
    for (file, lines) in [
        (crate::results::rundir::POINTS_FILE, &points.truncated_lines),
        (
            crate::results::rundir::REQUESTS_FILE,
            &requests.truncated_lines,
        ),
    ] {
        for line in lines {
            model.data_notes.push(format!(
                "{file} line {line} was cut off mid-record (a crash while writing) and was skipped."
            ));
        }
    }
    Ok((meta, model))
}

/// Renders with the override, else the template the spec named.
fn render_for_run(
    meta: &RunMeta,
    model: &ReportModel,
    template_override: Option<&Template>,
) -> Result<String, ReportError> {
    let template = match template_override {
        Some(t) => t.clone(),
        // A relative path is relative to the spec file: its recorded absolute path (older
        // runs: the path as given, relative to the working directory).
        None => Template::resolve(
            &meta.experiment.report.template,
            Path::new(meta.spec_location())
                .parent()
                .unwrap_or(Path::new(".")),
        ),
    };
    match template {
        Template::Builtin(t) => render_named(model, t.file, t.source),
        Template::File(path) => {
            let source =
                std::fs::read_to_string(&path).map_err(|source| ReportError::ReadTemplate {
                    path: path.clone(),
                    source,
                })?;
            render_named(model, &path.display().to_string(), &source)
        }
    }
}
