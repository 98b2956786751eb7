//! Reports: a run directory's records rendered through a minijinja Markdown template.
//!
//! [`build_model`] turns the stored records into a [`ReportModel`]; [`render`] is a pure function
//! from that model and a template to Markdown, and [`charts`] draws its SVG charts. Only
//! [`render_run_dir`] (reads) and [`write_report`] (reads, then writes `report.md` and
//! `charts/*.svg`) touch the disk.
//!
//! Files point one way. `model` holds the model's types, made of the section types in `load`,
//! `capacity`, `server_view`, `hardware` and `reproduction`; `build` fills them from the
//! records, calling the sections' builders (`read_run` adds the capacity section and the
//! timelines); `charts`, `load_charts` and `capacity_chart` draw from the finished model. What
//! several share sits below them all: `chart_link`, `chart_error`, `metric_def`, `format` and,
//! for `compare` and `compare_capacity`, `verdict`.

pub(crate) mod agentic;
pub mod bound;
pub(crate) mod bound_chart;
pub(crate) mod bound_check;
pub(crate) mod bound_section;
pub mod bound_text;
pub use bound_section::point_bounds;
pub(crate) mod build;
pub mod capacity;
pub mod capacity_chart;
pub(crate) mod chart_error;
mod error;
pub use error::ReportError;
pub(crate) mod chart_link;
pub(crate) mod chart_style;
pub mod charts;
pub(crate) mod charts_dir;
pub(crate) mod comparable;
pub mod compare;
pub(crate) mod compare_bound;
pub(crate) mod compare_capacity;
pub(crate) mod digest;
pub(crate) mod export;
pub(crate) mod export_aiperf;
pub(crate) mod export_llmd;
pub mod exports;
pub(crate) mod format;
pub mod gpu;
pub(crate) mod hardware;
pub(crate) mod html;
pub mod import;
pub(crate) mod import_aiperf;
pub(crate) mod import_common;
pub(crate) mod import_guidellm;
pub(crate) mod import_inference_perf;
pub(crate) mod import_vllm;
pub(crate) mod load;
pub mod load_charts;
pub(crate) mod metric_def;
pub(crate) mod model;
pub(crate) mod offered;
pub mod pareto;
pub(crate) mod profiles;
pub mod reproduction;
pub mod schema;
pub(crate) mod server_view;
pub(crate) mod speculative;
pub(crate) mod templates;
pub(crate) mod timeline;
pub(crate) mod tool_calls;
pub mod validity;
pub(crate) mod verdict;
pub(crate) mod workers;

use std::path::{Path, PathBuf};

use servebench_model::results::meta::RunMeta;
use servebench_model::results::rundir::{CHARTS_DIR, REPORT_FILE, RunDir};

pub use bound_check::BoundInputsCheck;
pub use build::build_model;
use build::build_model_from;
pub use model::ReportModel;
pub(crate) use templates::render_named;
use templates::{MAX_TEMPLATE_BYTES, check_template};

/// The default template, compiled into the binary so reports render from any directory.
pub(crate) const DEFAULT_TEMPLATE: &str = include_str!("../../templates/default.md.j2");

/// Name the default template has in error messages.
pub(crate) const DEFAULT_TEMPLATE_NAME: &str = "default.md.j2";

/// The long-context study layout: one compact table per server group.
pub(crate) const LONG_CONTEXT_TEMPLATE: &str = include_str!("../../templates/long-context.md.j2");

/// A template compiled into the binary.
#[derive(Debug, PartialEq, Eq)]
pub struct BuiltinTemplate {
    /// The name `report.template` and `--template` use.
    pub name: &'static str,
    /// Its file under the report crate's `templates/`, as error messages name it.
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

/// Reads a user template file: a regular file (a FIFO would block) of at most
/// [`MAX_TEMPLATE_BYTES`]. Errors say which budget was passed.
pub fn read_template_file(path: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a template is a text file)",
        ));
    }
    let too_large = |bytes: u64| {
        Error::new(
            ErrorKind::InvalidInput,
            format!(
                "the file is {bytes} bytes; templates are limited to {MAX_TEMPLATE_BYTES} bytes (1 MiB)"
            ),
        )
    };
    if meta.len() > MAX_TEMPLATE_BYTES {
        return Err(too_large(meta.len()));
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_TEMPLATE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_TEMPLATE_BYTES {
        return Err(too_large(text.len() as u64));
    }
    Ok(text)
}

/// Renders the report. `template` is a user template's source; `None` renders the default.
pub fn render(model: &ReportModel, template: Option<&str>) -> Result<String, ReportError> {
    match template {
        None => render_named(model, DEFAULT_TEMPLATE_NAME, DEFAULT_TEMPLATE),
        Some(source) => render_named(model, USER_TEMPLATE_NAME, source),
    }
}

/// [`servebench_model::spec::Check`] of `report.template`: a file that is missing, not a regular file,
/// over [`MAX_TEMPLATE_BYTES`] or that does not parse is an error at `validate`, not at the
/// end of a run. Each file is read once, however many points name it.
#[derive(Debug, Default)]
pub struct TemplateCheck {
    files: std::cell::RefCell<std::collections::HashMap<PathBuf, Option<(String, String)>>>,
}

impl servebench_model::spec::Check for TemplateCheck {
    fn check(
        &self,
        experiment: &servebench_model::spec::types::Experiment,
        spec_dir: &Path,
    ) -> Vec<servebench_model::spec::validate::Problem> {
        let Template::File(path) = Template::resolve(&experiment.report.template, spec_dir) else {
            return Vec::new();
        };
        let found = self
            .files
            .borrow_mut()
            .entry(path.clone())
            .or_insert_with(|| template_file_problem(&path))
            .clone();
        found
            .map(
                |(message, hint)| servebench_model::spec::validate::Problem {
                    pointer: "/report/template".into(),
                    target: servebench_model::spec::validate::Target::Value,
                    message,
                    hint: Some(hint),
                },
            )
            .into_iter()
            .collect()
    }
}

/// What is wrong with a template file, with a hint; `None` when it parses.
fn template_file_problem(path: &Path) -> Option<(String, String)> {
    let shown = path.display().to_string();
    let source = match read_template_file(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let hint = format!(
                "a built-in name ({}) or a path relative to the spec's folder",
                builtin_names()
            );
            let builtins = BUILTIN_TEMPLATES.iter().map(|t| t.name);
            let hint = match servebench_model::spec::diagnostics::did_you_mean(name, builtins) {
                Some(d) => format!("{d} ({hint})"),
                None => hint,
            };
            return Some((format!("the report template {shown} does not exist"), hint));
        }
        Err(e) => {
            return Some((
                format!("cannot read the report template {shown}: {e}"),
                "a template is a text file of at most 1 MiB".into(),
            ));
        }
    };
    let e = check_template(&shown, &source).err()?;
    Some((
        e.to_string(),
        "fix the template's syntax (minijinja, like Jinja2); `servebench report RUN_DIR --template FILE` renders it again".into(),
    ))
}

/// Reads a run directory and renders its report. `template_override` replaces the template
/// named in the spec (the runner resolves that relative to the spec file and passes it here).
pub fn render_run_dir(
    dir: &RunDir,
    template_override: Option<&Template>,
) -> Result<String, ReportError> {
    let run = read_run(dir)?;
    render_for_run(&run.meta, &run.model, template_override)
}

/// Renders a run directory's report and writes it as `report.md`, with its charts in
/// `charts/*.svg` (a chart that no longer applies is removed). Returns the report's path.
/// Nothing is written when the template fails.
pub fn write_report(
    dir: &RunDir,
    template_override: Option<&Template>,
) -> Result<PathBuf, ReportError> {
    let run = read_run(dir)?;
    let model = &run.model;
    let markdown = render_for_run(&run.meta, model, template_override)?;
    let folder = charts_dir::ChartsDir::of(dir);
    folder.write_charts(&charts::charts(model), model.load.as_ref())?;
    folder.write_timelines(&run.timelines, timeline::FILE_PREFIX)?;
    folder.write_timelines(&run.gpu_charts, timeline::GPU_FILE_PREFIX)?;
    folder.write_capacity_charts(model.capacity.as_ref())?;
    folder.write_bound_chart(model.bound.as_ref())?;
    // Points of runs that predate `bound` in points.jsonl are graded here as the report is.
    let bounds = bound_section::point_bounds(&run.meta, &run.points);
    export::write_csvs(&dir.path, &run.points, &bounds)?;
    exports::write_spec_exports(dir, &run.meta.experiment.report.export)?;
    let path = dir.file(REPORT_FILE);
    dir.write_report(&markdown)
        .map_err(|source| ReportError::Write {
            path: path.clone(),
            source,
        })?;
    // The page beside it: the same content, interactive.
    let page = html::report_page(dir, &run.meta.experiment.name, &markdown, &run.points)?;
    let page_path = dir.file(html::REPORT_HTML);
    std::fs::write(&page_path, servebench_model::redact::text(&page).as_bytes()).map_err(
        |source| ReportError::Write {
            path: page_path.clone(),
            source,
        },
    )?;
    Ok(path)
}

/// What a report is made of, read from a run directory.
struct ReadRun {
    meta: RunMeta,
    /// `points.jsonl`'s records.
    points: Vec<servebench_model::results::records::PointRecord>,
    model: ReportModel,
    /// Each scraped point's time series.
    timelines: Vec<timeline::Timeline>,
    /// Each point's GPU power and free memory over time (`gpu.jsonl`).
    gpu_charts: Vec<timeline::Timeline>,
}

/// Reads a run directory into its report model and timelines, with notes on lines skipped
/// while reading. `requests.jsonl` is read once, line by line, each request folded into a
/// [`digest::RequestDigest`] and dropped: memory grows with the points and the scrapes, not
/// with the requests.
fn read_run(dir: &RunDir) -> Result<ReadRun, ReportError> {
    let meta = dir.read_meta()?;
    let points = dir.read_points_detailed()?;
    // Scrapes first: they give each timeline its origin, which the requests are binned from.
    let scrapes = dir.read_metrics()?;
    let mut digest =
        digest::RequestDigest::with_timelines(timeline::origins(&points.records, &scrapes));
    let truncated_requests =
        dir.visit_requests(|r: servebench_model::results::records::RequestRecord| digest.add(&r))?;
    let mut model = build_model_from(&meta, &points.records, &digest);
    let searches = dir.read_search()?;
    model.capacity = capacity::section(searches.as_ref(), &points.records);
    if let Some(f) = &searches
        && f.searches.iter().any(|s| s.agents.is_some())
    {
        // Agents at the SLO are the searches' answers: judged against search.json.
        model.reproduction = reproduction::evaluate(&meta, &points.records, &f.searches);
    }
    if let (Some(gpu), Some(capacity)) = (&mut model.gpu, &model.capacity) {
        gpu.at_capacity = gpu::at_capacity(capacity, &points.records);
    }
    let gpu_samples = dir.read_gpu()?;
    for g in gpu_samples.iter().filter(|g| g.cut.is_some()) {
        if let Some(cut) = &g.cut {
            model.data_notes.push(format!("{cut} ({}).", g.point));
        }
    }
    let gpu_charts = timeline::gpu_timelines(&gpu_samples);
    if let Some(gpu) = &mut model.gpu {
        gpu.charts = gpu_charts
            .iter()
            .map(|t| chart_link::ChartLink {
                path: format!("{CHARTS_DIR}/{}", t.file),
                title: t.title.clone(),
            })
            .collect();
    }
    let timelines = timeline::timelines(&points.records, &digest.in_flight, &scrapes);
    model.timelines = timelines
        .iter()
        .map(|t| chart_link::ChartLink {
            path: format!("{CHARTS_DIR}/{}", t.file),
            title: t.title.clone(),
        })
        .collect();
    for s in scrapes
        .iter()
        .filter(|s| s.at == servebench_model::results::rundir::METRICS_BUDGET_AT)
    {
        if let Some(cut) = &s.cut {
            model.data_notes.push(format!("{cut} ({}).", s.point));
        }
    }
    for (file, lines) in [
        (
            servebench_model::results::rundir::POINTS_FILE,
            &points.truncated_lines,
        ),
        (
            servebench_model::results::rundir::REQUESTS_FILE,
            &truncated_requests,
        ),
    ] {
        for line in lines {
            model.data_notes.push(format!(
                "{file} line {line} was cut off mid-record (a crash while writing) and was skipped."
            ));
        }
    }
    Ok(ReadRun {
        meta,
        points: points.records,
        model,
        timelines,
        gpu_charts,
    })
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
            let source = read_template_file(&path).map_err(|source| ReportError::ReadTemplate {
                path: path.clone(),
                source,
            })?;
            render_named(model, &path.display().to_string(), &source)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_bounded_files() {
        let big = "x".repeat(MAX_TEMPLATE_BYTES as usize + 1);
        let e = render_named(&(), "t", &big).unwrap_err();
        assert!(e.to_string().contains("limited to 1048576 bytes (1 MiB)"));

        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("t.fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let e = read_template_file(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let file = dir.path().join("big.md.j2");
        std::fs::File::create(&file)
            .unwrap()
            .set_len(MAX_TEMPLATE_BYTES + 1)
            .unwrap();
        let e = read_template_file(&file).unwrap_err();
        assert!(e.to_string().contains("limited to 1048576 bytes"), "{e}");
    }
}
