//! Reading a spec file: YAML, schema checks, sweep expansion, typing. Every problem is
//! collected and returned together.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use indexmap::IndexMap;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::check::Check;
use super::diagnostics::{Diagnostic, MAX_DIAGNOSTICS, SpecErrors, quoted};
use super::expand::{self, Origin, RawPoint};
use super::schema;
use super::span::Span;
use super::types::{Experiment, SweepValue};
use super::validate::{Problem, Target, Validator};
use super::yaml::{self, Document, push_pointer};

/// A spec that loaded cleanly: its source and its expanded, typed points.
#[derive(Debug, Clone)]
pub struct LoadedSpec {
    /// The path as given.
    pub path: PathBuf,
    /// The file's text.
    pub source: String,
    /// SHA-256 of the source bytes, lowercase hex.
    pub sha256: String,
    /// The experiment's `name`.
    pub name: String,
    /// The experiment's `description`.
    pub description: String,
    /// Sweep dimension names, in the order written.
    pub dimensions: Vec<String>,
    /// The cartesian product of the sweep, first dimension varying slowest.
    pub points: Vec<Point>,
    /// What loaded but should change (a key under its old name), at its place.
    pub warnings: Vec<Diagnostic>,
}

impl LoadedSpec {
    /// A diagnostic at the first of `pointers` (JSON pointers into the spec as written) that
    /// the file has, on its key or its value: for checks that run after loading (an engine's
    /// flag names).
    pub fn diagnostic(
        &self,
        pointers: &[String],
        on_key: bool,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Diagnostic {
        let file = self.path.display().to_string();
        let span = match yaml::parse(&self.source) {
            Ok(doc) => {
                let pointer = pointers
                    .iter()
                    .find(|p| doc.locs.contains_key(p.as_str()))
                    .or(pointers.first())
                    .map_or("", String::as_str);
                let loc = doc.locate(pointer);
                if on_key {
                    loc.key.unwrap_or(loc.value)
                } else {
                    loc.value
                }
            }
            Err(_) => Span::origin(),
        };
        Diagnostic::at(&file, &self.source, span, message, hint)
    }
}

/// One point of the sweep.
#[derive(Debug, Clone)]
pub struct Point {
    /// `p001`, `p002`, ... in expansion order; at least three digits, more when needed.
    pub id: String,
    /// Dimension name to this point's value.
    pub values: IndexMap<String, Value>,
    /// The experiment with this point's values in place.
    pub experiment: Experiment,
}

impl Point {
    /// `p003 ctx=8192 chunked-prefill-size=4096`: the id and each sweep value, dotted
    /// dimensions by their last part.
    pub fn label(&self) -> String {
        let mut s = self.id.clone();
        for (k, v) in &self.values {
            let k = k.rsplit('.').next().unwrap_or(k);
            s.push_str(&format!(" {k}={}", v.to_string().trim_matches('"')));
        }
        s
    }
}

/// Reads, parses, validates and expands a spec file, reporting all errors at once.
pub fn load(path: &Path) -> Result<LoadedSpec, SpecErrors> {
    load_checked(path, &[])
}

/// [`load`], then `checks` on every point (files beside the spec, the environment), their
/// problems reported with the spec's own.
pub fn load_checked(path: &Path, checks: &[&dyn Check]) -> Result<LoadedSpec, SpecErrors> {
    let file = path.display().to_string();
    // Check the size before reading, so a huge file is never pulled into memory.
    if let Ok(meta) = std::fs::metadata(path)
        && meta.len() > yaml::MAX_BYTES as u64
    {
        return Err(SpecErrors::file_error(
            &file,
            format!(
                "the file is {} bytes; specs are limited to {} bytes (8 MiB)",
                meta.len(),
                yaml::MAX_BYTES
            ),
            None,
        ));
    }
    // At most one byte past the budget, whatever the size said: a pipe (`<(cat spec)`) has
    // none, and `/dev/zero` never ends.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| {
            use std::io::Read;
            f.take(yaml::MAX_BYTES as u64 + 1).read_to_end(&mut bytes)
        })
        .map_err(|e| {
            SpecErrors::file_error(&file, format!("cannot read the spec file: {e}"), None)
        })?;
    if bytes.len() > yaml::MAX_BYTES {
        return Err(SpecErrors::file_error(
            &file,
            format!(
                "the file is more than {} bytes; specs are limited to {} bytes (8 MiB)",
                yaml::MAX_BYTES,
                yaml::MAX_BYTES
            ),
            None,
        ));
    }
    let source = String::from_utf8(bytes).map_err(|e| {
        SpecErrors::file_error(
            &file,
            format!(
                "the file is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            None,
        )
    })?;
    load_source(path.to_path_buf(), &file, source, checks)
}

/// Same as [`load`], from a string; `file_name` is used in messages.
pub fn load_str(file_name: &str, source: &str) -> Result<LoadedSpec, SpecErrors> {
    load_str_checked(file_name, source, &[])
}

/// Same as [`load_checked`], from a string; relative paths are read from `file_name`'s folder.
pub(crate) fn load_str_checked(
    file_name: &str,
    source: &str,
    checks: &[&dyn Check],
) -> Result<LoadedSpec, SpecErrors> {
    load_source(
        PathBuf::from(file_name),
        file_name,
        source.to_string(),
        checks,
    )
}

fn validator() -> &'static Validator {
    // Generating the schema takes a moment; every load shares one.
    static VALIDATOR: OnceLock<Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| Validator::new(schema::raw_schema()))
}

fn load_source(
    path: PathBuf,
    file: &str,
    source: String,
    checks: &[&dyn Check],
) -> Result<LoadedSpec, SpecErrors> {
    let spec_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let (doc, warnings) = parse_mapping(file, &source)?;
    let report = Reporter {
        file,
        source: &source,
        doc: &doc,
    };
    let validator = validator();
    let (sweep, mut diags) = checked_sweep(&doc, validator, &report)?;

    // The sweep is checked and typed once, not once per point: it can be long.
    let mut base = doc.value.clone();
    let sweep_value = base.as_object_mut().and_then(|m| m.remove("sweep"));
    let typed_sweep = typed_sweep(sweep_value.as_ref(), validator, &report)?;
    let typed_sweep = Arc::new(typed_sweep);
    let count = expand::point_count(&sweep);
    // Each point copies the spec: refuse before copying when the copies cannot fit, and stop
    // when substituted values make them larger than the spec itself.
    let one = expand::size_bytes(&base);
    if one.saturating_mul(count) > expand::MAX_POINTS_BYTES {
        return Err(SpecErrors::new(vec![report.problem(
            &points_too_large(count, count, one.saturating_mul(count)),
            None,
        )]));
    }
    diags.extend(
        super::profiler::plan_checks(&doc.value, count, point_id_width(count))
            .iter()
            .map(|p| report.problem(p, None)),
    );
    let points = expand_points(
        &base,
        &sweep,
        &typed_sweep,
        (checks, &spec_dir),
        &report,
        &mut diags,
    );
    if !diags.is_empty() {
        let mut errors = SpecErrors::new(diags);
        errors.diagnostics.truncate(MAX_DIAGNOSTICS);
        return Err(errors);
    }
    let first = &points[0].experiment;
    Ok(LoadedSpec {
        name: first.name.clone(),
        description: first.description.clone(),
        sha256: hex::encode(Sha256::digest(source.as_bytes())),
        dimensions: sweep.dimensions.iter().map(|d| d.name.clone()).collect(),
        path,
        source,
        points,
        warnings,
    })
}

/// The spec's YAML parsed, keys under old names renamed (a warning each): refused unless it is
/// a mapping of fields.
fn parse_mapping(file: &str, source: &str) -> Result<(Document, Vec<Diagnostic>), SpecErrors> {
    let mut doc = match yaml::parse(source) {
        Ok(doc) => doc,
        Err(errors) => {
            let diags = errors
                .into_iter()
                .map(|e| Diagnostic::at(file, source, e.span, e.message, e.hint))
                .collect();
            return Err(SpecErrors::new(diags));
        }
    };
    let warnings: Vec<Diagnostic> = renamed_keys(&mut doc)
        .into_iter()
        .map(|(span, message, hint)| Diagnostic::at(file, source, span, message, Some(hint)))
        .collect();
    if !doc.value.is_object() {
        let found = super::validate::describe_value(&doc.value);
        let span = doc.locate("").value;
        return Err(SpecErrors::new(vec![Diagnostic::at(
            file,
            source,
            span,
            format!("a spec must be a mapping of fields, found {found}"),
            Some("start with `name: my-experiment`".into()),
        )]));
    }
    Ok((doc, warnings))
}

/// The sweep's dimensions in the file's order, with the names the launch would refuse (to
/// report, never blocking); refused with everything found when the sweep or the spec's
/// cross-field rules are wrong.
fn checked_sweep(
    doc: &Document,
    validator: &Validator,
    report: &Reporter<'_>,
) -> Result<(expand::Sweep, Vec<Diagnostic>), SpecErrors> {
    let (mut sweep, sweep_problems) = expand::analyze(&doc.value, validator);
    // JSON objects here do not keep insertion order; the file does.
    sweep.dimensions.sort_by_key(|d| {
        doc.locate(&push_pointer("/sweep", &d.name))
            .key
            .map(|k| k.start.index)
    });
    let mut diags: Vec<Diagnostic> = sweep_problems
        .iter()
        .map(|p| report.problem(p, None))
        .collect();
    diags.extend(
        semantic_checks(&doc.value)
            .iter()
            .map(|p| report.problem(p, None)),
    );

    // Names the launch would refuse: reported with everything else, never blocking it.
    let names: Vec<Diagnostic> = name_checks(&doc.value)
        .into_iter()
        .chain(launch_name_checks(&doc.value))
        .map(|p| report.problem(&p, None))
        .collect();
    if !diags.is_empty() {
        // The sweep cannot be trusted: check the structure once, templates left in place.
        diags.extend(
            validator
                .validate(&doc.value)
                .iter()
                .map(|p| report.problem(p, None)),
        );
        diags.extend(names);
        return Err(SpecErrors::new(diags));
    }
    Ok((sweep, names))
}

/// Digits in a point's id (`p001`): at least three, more for longer sweeps.
fn point_id_width(count: usize) -> usize {
    count.to_string().len().max(3)
}

/// Each point of the sweep substituted into `base`, checked and typed; problems go to `diags`
/// (each once, however many points share it). Stops when the copies outgrow their budget or
/// the diagnostics theirs.
fn expand_points(
    base: &Value,
    sweep: &expand::Sweep,
    typed_sweep: &Arc<IndexMap<String, Vec<SweepValue>>>,
    context: (&[&dyn Check], &Path),
    report: &Reporter<'_>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<Point> {
    let count = expand::point_count(sweep);
    let width = point_id_width(count);
    let mut expanded_bytes = 0usize;
    let mut seen = std::collections::HashSet::new();
    let mut points = Vec::with_capacity(count);
    for index in 0..count {
        let (raw, problems) = expand::point(base, sweep, index);
        expanded_bytes = expanded_bytes.saturating_add(expand::size_bytes(&raw.value));
        if expanded_bytes > expand::MAX_POINTS_BYTES {
            diags.push(report.problem(&points_too_large(count, index + 1, expanded_bytes), None));
            break;
        }
        let id = format!("p{:0width$}", index + 1);
        let (point, mut found) = checked_point(raw, problems, id, typed_sweep, context, report);
        points.extend(point);
        // The same mistake in every point is one mistake: keep room for the others.
        found.retain(|d| seen.insert((d.line, d.column, d.message.clone())));
        diags.extend(found);
        if diags.len() > MAX_DIAGNOSTICS {
            break;
        }
    }
    points
}

/// Keys under their old names, taken under their new ones: (old, new, why it was renamed).
const RENAMED_KEYS: &[(&str, &str, &str)] = &[(
    "profile",
    "profiler",
    "the engine's profiler capture; `profile` alone is the simulator's timing model",
)];

/// Renames the top-level keys of [`RENAMED_KEYS`] written under their old names (when the new
/// one is not written too), their positions following them; returns a warning for each.
fn renamed_keys(doc: &mut yaml::Document) -> Vec<(super::span::Span, String, String)> {
    let mut out = Vec::new();
    for (old, new, why) in RENAMED_KEYS {
        let Some(map) = doc.value.as_object_mut() else {
            break;
        };
        if !map.contains_key(*old) || map.contains_key(*new) {
            continue;
        }
        let value = map.remove(*old).expect("checked above");
        map.insert((*new).to_string(), value);
        let (from, to) = (format!("/{old}"), format!("/{new}"));
        let moved: Vec<(String, yaml::Loc)> = doc
            .locs
            .iter()
            .filter(|(p, _)| *p == &from || p.starts_with(&format!("{from}/")))
            .map(|(p, l)| (format!("{to}{}", &p[from.len()..]), *l))
            .collect();
        let at = doc.locate(&from);
        doc.locs.extend(moved);
        out.push((
            at.key.unwrap_or(at.value),
            format!("`{old}:` is now `{new}:` ({why})"),
            format!("rename `{old}:` to `{new}:`; the old name still works for now"),
        ));
    }
    out
}

/// The sweep's values, checked against the schema and typed once (not once per point: it can
/// be long); empty without a sweep.
fn typed_sweep(
    sweep: Option<&serde_json::Value>,
    validator: &Validator,
    report: &Reporter<'_>,
) -> Result<IndexMap<String, Vec<SweepValue>>, SpecErrors> {
    let Some(v) = sweep else {
        return Ok(IndexMap::new());
    };
    let problems = validator.validate_field("sweep", v);
    if !problems.is_empty() {
        return Err(SpecErrors::new(
            problems.iter().map(|p| report.problem(p, None)).collect(),
        ));
    }
    serde_path_to_error::deserialize(v).map_err(|e| {
        let p = Problem {
            pointer: "/sweep".into(),
            target: Target::Value,
            message: e.to_string(),
            hint: None,
        };
        SpecErrors::new(vec![report.problem(&p, None)])
    })
}

/// One point of the sweep, expanded (`raw`, with the `problems` its expansion found): checked
/// against the schema, typed, and run through `checks` (with the spec's directory). Returns
/// the point when it is clean, and every diagnostic found.
fn checked_point(
    raw: RawPoint,
    problems: Vec<Problem>,
    id: String,
    sweep: &Arc<IndexMap<String, Vec<SweepValue>>>,
    (checks, spec_dir): (&[&dyn Check], &Path),
    report: &Reporter<'_>,
) -> (Option<Point>, Vec<Diagnostic>) {
    let mut found: Vec<Diagnostic> = problems
        .iter()
        .map(|p| report.problem(p, Some(&raw.origins)))
        .collect();
    found.extend(
        validator()
            .validate(&raw.value)
            .iter()
            .map(|p| report.problem(p, Some(&raw.origins))),
    );
    if !found.is_empty() {
        return (None, found);
    }
    match typed(&raw) {
        Ok(mut experiment) => {
            super::agentx::apply(&mut experiment);
            found.extend(
                super::tools::inline_file(
                    &mut experiment.workload.tools,
                    experiment.workload.tool_choice.as_ref(),
                    spec_dir,
                )
                .iter()
                .map(|p| report.problem(p, Some(&raw.origins))),
            );
            for check in checks {
                found.extend(
                    check
                        .check(&experiment, spec_dir)
                        .iter()
                        .map(|p| report.problem(p, Some(&raw.origins))),
                );
            }
            experiment.sweep = Arc::clone(sweep);
            let point = Point {
                id,
                values: raw.values.into_iter().collect(),
                experiment,
            };
            (Some(point), found)
        }
        Err(p) => {
            found.push(report.problem(&p, Some(&raw.origins)));
            (None, found)
        }
    }
}

/// The sweep's points would take more than [`expand::MAX_POINTS_BYTES`]: `bytes` for the
/// first `reached` of `count`.
fn points_too_large(count: usize, reached: usize, bytes: usize) -> Problem {
    let mib = |b: usize| b / (1024 * 1024);
    let so_far = if reached < count {
        format!("the first {reached} take {} MiB", mib(bytes))
    } else {
        format!("they would take {} MiB", mib(bytes))
    };
    Problem {
        pointer: "/sweep".into(),
        target: Target::Key,
        message: format!(
            "the sweep's {count} points are too large: each is a copy of the spec with its values in place, and {so_far}; the limit is {} MiB",
            mib(expand::MAX_POINTS_BYTES)
        ),
        hint: Some(
            "sweep fewer values, or make the spec smaller: a long `description` or prompt `text` is copied into every point".into(),
        ),
    }
}

/// Deserializes one point, mapping a serde error back to the field it is about.
fn typed(raw: &RawPoint) -> Result<Experiment, Problem> {
    serde_path_to_error::deserialize(&raw.value).map_err(|e| {
        let mut pointer = String::new();
        for seg in e.path().iter() {
            use serde_path_to_error::Segment;
            match seg {
                Segment::Seq { index } => pointer = push_pointer(&pointer, &index.to_string()),
                Segment::Map { key } => pointer = push_pointer(&pointer, key),
                Segment::Enum { .. } | Segment::Unknown => {}
            }
        }
        Problem {
            pointer,
            target: Target::Value,
            message: e.into_inner().to_string(),
            hint: None,
        }
    })
}

/// Checks the schema cannot express.
fn semantic_checks(raw: &Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    if let Some(server) = raw.get("server").and_then(Value::as_object)
        && server.get("url").is_some_and(|u| !u.is_null())
    {
        // An error rather than a warning: silently ignoring launch flags would measure a
        // server configured differently from what the spec says.
        let ignored: Vec<&str> = ["args", "env", "launcher", "port"]
            .into_iter()
            .filter(|k| {
                server
                    .get(*k)
                    .is_some_and(|v| !v.is_null() && v != &Value::Object(Default::default()))
            })
            .collect();
        if !ignored.is_empty() {
            problems.push(Problem {
                    pointer: "/server/url".into(),
                    target: Target::Key,
                    message: format!(
                        "`server.url` points at a running server, so {} would be ignored",
                        ignored.iter().map(|k| format!("`server.{k}`")).collect::<Vec<_>>().join(", ")
                    ),
                    hint: Some("remove `url` to let servebench launch the server, or remove the launch settings".into()),
                });
        }
    }
    problems.extend(method_checks(raw));
    problems.extend(expectation_checks(raw));
    problems.extend(super::load_model::checks(raw));
    problems.extend(super::agentx::checks(raw));
    problems.extend(super::search::checks(raw));
    problems.extend(super::telemetry::checks(raw));
    problems.extend(super::profiler::checks(raw));
    problems.extend(super::validity::checks(raw));
    problems.extend(super::deployment::checks(raw));
    problems.extend(super::reasoning::checks(raw));
    problems.extend(super::tools::checks(raw));
    problems
}

/// A run goes to `<out>/<name>/<timestamp>/`: a name of only dots is a path step (`.` this
/// folder, `..` the one above), and `name: ..` wrote the run outside `--out`.
fn name_checks(raw: &Value) -> Option<Problem> {
    let name = raw.get("name")?.as_str()?;
    (!name.is_empty() && name.chars().all(|c| c == '.')).then(|| Problem {
        pointer: "/name".into(),
        target: Target::Value,
        message: format!(
            "`{}` cannot name a run: runs go to <out>/<name>/, and `{}` there is a path step, not a folder",
            quoted(name),
            quoted(name)
        ),
        hint: Some("use letters or digits too, e.g. `name: long-context`".into()),
    })
}

/// Flag names become `--name` on the server's command line, and variable names its
/// environment: what the launch would refuse (or pass on mangled) is refused here, with its
/// position. Flags set by a sweep dimension (`server.args.X`) are checked at the dimension.
fn launch_name_checks(raw: &Value) -> Vec<Problem> {
    let mut problems = Vec::new();
    let server = raw.get("server").and_then(Value::as_object);
    let args = server
        .and_then(|s| s.get("args"))
        .and_then(Value::as_object);
    let swept = raw
        .get("sweep")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|dims| dims.keys())
        .filter_map(|d| Some((d.strip_prefix("server.args.")?, push_pointer("/sweep", d))));
    let written = args
        .into_iter()
        .flat_map(|a| a.keys())
        .map(|k| (k.as_str(), push_pointer("/server/args", k)));
    for (name, pointer) in written.chain(swept) {
        if let Some((message, hint)) = bad_flag_name(name) {
            problems.push(Problem {
                pointer,
                target: Target::Key,
                message,
                hint: Some(hint),
            });
        }
    }
    // A deployment's workers' flags: each worker's own command line, its port picked by
    // servebench like a single server's.
    let dep = server
        .and_then(|s| s.get("deployment"))
        .and_then(Value::as_object);
    let mut role_args: Vec<(String, &serde_json::Map<String, Value>)> = Vec::new();
    if let Some(d) = dep {
        for (i, a) in d
            .get("worker_args")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(a) = a.as_object() {
                role_args.push((format!("/server/deployment/worker_args/{i}"), a));
            }
        }
        for k in ["prefill_args", "decode_args"] {
            if let Some(a) = d.get(k).and_then(Value::as_object) {
                role_args.push((format!("/server/deployment/{k}"), a));
            }
        }
    }
    for (at, a) in role_args {
        for name in a.keys() {
            if let Some((message, hint)) = bad_flag_name(name) {
                let hint = match name.trim_start_matches('-') {
                    "port" => "remove it: servebench picks each worker's port (`deployment.router.port` sets the router's)".into(),
                    "model-path" | "model" => "remove it: every worker serves `server.model`".into(),
                    _ => hint,
                };
                problems.push(Problem {
                    pointer: push_pointer(&at, name),
                    target: Target::Key,
                    message,
                    hint: Some(hint),
                });
            }
        }
    }
    let env = server.and_then(|s| s.get("env")).and_then(Value::as_object);
    for name in env.into_iter().flat_map(|e| e.keys()) {
        if name.is_empty() || name.contains(['=', '\0']) {
            problems.push(Problem {
                pointer: push_pointer("/server/env", name),
                target: Target::Key,
                message: format!(
                    "`{}` cannot be an environment variable's name",
                    quoted(name)
                ),
                hint: Some("names are letters, digits and `_`, without `=`".into()),
            });
        }
    }
    problems
}

/// Why `name` (a key of `server.args`) cannot be a flag, and how to fix it: what the engine's
/// command line refuses at launch (`engine::flag_args`).
fn bad_flag_name(key: &str) -> Option<(String, String)> {
    let name = key.trim_start_matches('-');
    let shown = quoted(key);
    if name.is_empty() {
        return Some((
            format!("`{shown}` is not a flag name"),
            "write the flag without its dashes, e.g. `chunked-prefill-size: 4096`".into(),
        ));
    }
    if name.contains(char::is_whitespace) {
        let trimmed = quoted(name.trim());
        return Some((
            format!("flag name {:?} contains whitespace", shown),
            if trimmed.contains(char::is_whitespace) || trimmed.is_empty() {
                "flag names are words joined by `-`, e.g. `chunked-prefill-size`".into()
            } else {
                format!("write `{trimmed}`")
            },
        ));
    }
    let instead = match name {
        "model-path" | "model" => "use `server.model`",
        "port" => "use `server.port`",
        "host" => "servebench sets the address the server listens on; remove this flag",
        _ => return None,
    };
    Some((
        format!("`--{name}` is set by servebench"),
        instead.to_string(),
    ))
}

/// Metrics an expectation may name: a point's aggregates under either method, each once.
pub(crate) fn expectable_metrics() -> Vec<&'static str> {
    use crate::catalog::{Method, Metric};
    let mut names: Vec<&'static str> = Metric::of_method(Method::Streaming)
        .map(Metric::name)
        .collect();
    for m in Metric::of_method(Method::TwoPoint)
        .chain(Metric::of_reasoning())
        .chain(Metric::of_tools())
        .chain(Metric::of_interactivity())
        .chain(Metric::of_load())
        .map(Metric::name)
    {
        if !names.contains(&m) {
            names.push(m);
        }
    }
    names.extend(crate::catalog::GRADED.iter().map(|g| g.name));
    names.extend(crate::catalog::AGENTS_FIGURES);
    // Only agentic points with `slo.agent` carry it: not in every load point's definitions.
    names.push(crate::catalog::Metric::AgentsSloShare.name());
    names
}

fn method_checks(raw: &Value) -> Vec<Problem> {
    let Some(m) = raw.get("method").and_then(Value::as_object) else {
        return Vec::new();
    };
    // Absent: the defaults; a template or a wrong type is checked elsewhere.
    let param = |k: &str, default: u64| match m.get(k) {
        None => Some(default),
        Some(v) => v.as_u64(),
    };
    let (Some(a), Some(b)) = (param("a", 1), param("b", 17)) else {
        return Vec::new();
    };
    if m.get("kind").and_then(Value::as_str) == Some("two-point") && b <= a {
        return vec![Problem {
            pointer: if m.contains_key("b") {
                "/method/b".into()
            } else {
                "/method/a".into()
            },
            target: Target::Value,
            message: format!(
                "`b` ({b}) must be larger than `a` ({a}): decode speed is (b - a) / (t_b - t_a)"
            ),
            hint: Some("the published method used a: 1, b: 17".into()),
        }];
    }
    Vec::new()
}

/// `expect:` entries must name sweep dimensions and values that exist, a known metric with a
/// value, or a flag or failure.
fn expectation_checks(raw: &Value) -> Vec<Problem> {
    let Some(list) = raw.get("expect").and_then(Value::as_array) else {
        return Vec::new();
    };
    let sweep = raw.get("sweep").and_then(Value::as_object);
    let dims: Vec<&str> = sweep
        .map(|s| s.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let mut problems = Vec::new();
    for (i, e) in list.iter().enumerate() {
        if problems.len() >= MAX_DIAGNOSTICS {
            break;
        }
        let Some(e) = e.as_object() else { continue };
        let at = format!("/expect/{i}");
        if let Some(w) = e.get("where").and_then(Value::as_object) {
            for (k, v) in w {
                let pointer = push_pointer(&push_pointer(&at, "where"), k);
                match sweep.and_then(|s| s.get(k)).and_then(Value::as_array) {
                    None => problems.push(Problem {
                        pointer,
                        target: Target::Key,
                        message: format!("`where` names `{k}`, which is not a sweep dimension"),
                        hint: Some(match super::diagnostics::did_you_mean(k, dims.iter().copied()) {
                            Some(d) => d,
                            None if dims.is_empty() => "the spec has no `sweep`; remove `where` to match the only point".into(),
                            None => format!("sweep dimensions: {}", dims.join(", ")),
                        }),
                    }),
                    Some(values) if !values.iter().any(|x| same_value(x, v)) => {
                        problems.push(Problem {
                            pointer,
                            target: Target::Value,
                            message: format!(
                                "no point has {k} = {}",
                                super::diagnostics::quoted(&v.to_string())
                            ),
                            hint: Some(format!(
                                "the sweep gives {k} one of {}",
                                listed(values)
                            )),
                        })
                    }
                    Some(_) => {}
                }
            }
        }
        let has = |k: &str| e.get(k).is_some_and(|v| !v.is_null());
        let kinds = ["metric", "flag", "failure"]
            .iter()
            .filter(|k| has(k))
            .count();
        if kinds != 1 {
            problems.push(Problem {
                pointer: at.clone(),
                target: Target::Value,
                message: "an expectation needs exactly one of `metric` (with `value`), `flag` or `failure`".into(),
                hint: Some("e.g. `{ where: { ctx: 1024 }, metric: ttft_s, value: 0.46, tolerance: 10% }`".into()),
            });
        }
        if let Some(m) = e.get("metric").and_then(Value::as_str) {
            problems.extend(unknown_name(&at, "metric", m, &expectable_metrics()));
            if !has("value") {
                problems.push(Problem {
                    pointer: push_pointer(&at, "metric"),
                    target: Target::Key,
                    message: "`metric` needs a `value` (the published number)".into(),
                    hint: Some("add e.g. `value: 0.46`".into()),
                });
            }
        }
        if let Some(f) = e.get("failure").and_then(Value::as_str) {
            let names: Vec<&str> = crate::catalog::Failure::names().collect();
            problems.extend(unknown_name(&at, "failure", f, &names));
        }
        if let Some(f) = e.get("flag").and_then(Value::as_str) {
            let names: Vec<&str> = crate::catalog::FlagKind::names().collect();
            problems.extend(unknown_name(&at, "flag", f, &names));
        }
    }
    problems
}

/// Sweep values for a hint: the first few, and how many more.
fn listed(values: &[Value]) -> String {
    const SHOWN: usize = 12;
    let mut text = values
        .iter()
        .take(SHOWN)
        .map(|v| super::diagnostics::quoted(&v.to_string()))
        .collect::<Vec<_>>()
        .join(", ");
    if values.len() > SHOWN {
        text.push_str(&format!(" (and {} more)", values.len() - SHOWN));
    }
    text
}

/// A problem when `value` (an expectation's `key`) is none of the catalogue's `names` (a
/// template is checked once it is filled in).
fn unknown_name(at: &str, key: &str, value: &str, names: &[&str]) -> Option<Problem> {
    if names.contains(&value) || value.contains("{{") {
        return None;
    }
    let what = match key {
        "failure" => "failure cause",
        other => other,
    };
    Some(Problem {
        pointer: push_pointer(at, key),
        target: Target::Value,
        message: format!("unknown {what} `{}`", super::diagnostics::quoted(value)),
        hint: Some(
            match super::diagnostics::did_you_mean(value, names.iter().copied()) {
                Some(d) => d,
                None => format!("one of {}", names.join(", ")),
            },
        ),
    })
}

/// Sweep values compare as numbers when both are numbers (`1024` matches `1024.0`).
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Turns problems (by JSON pointer) into diagnostics (by line and column).
struct Reporter<'a> {
    file: &'a str,
    source: &'a str,
    doc: &'a Document,
}

impl Reporter<'_> {
    fn problem(&self, p: &Problem, origins: Option<&HashMap<String, Origin>>) -> Diagnostic {
        let (pointer, target, note) = match origins.and_then(|o| origin_of(o, &p.pointer)) {
            Some(o) => (o.pointer.as_str(), o.target, Some(o.note.as_str())),
            None => (p.pointer.as_str(), p.target, None),
        };
        let loc = self.doc.locate(pointer);
        let span = match target {
            // The whole file is missing something: point at its start, not at its first line.
            Target::Parent if loc.key.is_none() && pointer.is_empty() => Span {
                start: loc.value.start,
                end: loc.value.start,
            },
            Target::Key | Target::Parent => loc.key.unwrap_or(loc.value),
            Target::Value => loc.value,
        };
        let message = match note {
            Some(n) => format!("{} ({n})", p.message),
            None => p.message.clone(),
        };
        Diagnostic::at(self.file, self.source, span, message, p.hint.clone())
    }
}

/// The origin of `pointer` or of its nearest ancestor that came from the sweep.
fn origin_of<'a>(origins: &'a HashMap<String, Origin>, pointer: &str) -> Option<&'a Origin> {
    let mut p = pointer;
    loop {
        if let Some(o) = origins.get(p) {
            return Some(o);
        }
        p = &p[..p.rfind('/')?];
    }
}
