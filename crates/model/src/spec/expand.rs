//! Sweep dimensions, template sites and the cartesian product of points.
//!
//! Works on the raw JSON value of the spec: each point is the raw value with its templates
//! substituted and its field dimensions set, ready to be validated and deserialized.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value};

use super::diagnostics::{did_you_mean, quoted};
use super::template::{self, Piece};
use super::validate::{Problem, Target, Validator};
use super::yaml::push_pointer;

/// Most points one spec may expand to. A run measures every point, each with at least one
/// request and usually a cache flush: 10,000 points is days of measuring on a real server,
/// and the plan, the report's tables and `resolved.yaml` stay readable (and small) below it.
pub(crate) const MAX_POINTS: usize = 10_000;

/// Most bytes all expanded points may take together, as [`size_bytes`] counts them. Every
/// point holds a full copy of the spec with its values in place, so a 1 MB description and
/// 10,000 points would take 10 GB. A typical spec is a few kilobytes per point (20 MB at
/// 10,000 points); 256 MiB still allows a 25 KB spec at 10,000 points or a 2.5 MB one at 100,
/// and keeps `validate` and `plan` far below a gigabyte on any input.
pub(crate) const MAX_POINTS_BYTES: usize = 256 * 1024 * 1024;

/// What [`size_bytes`] counts for each value besides its text: about what a parsed value and
/// its place in a mapping or list take.
const VALUE_BYTES: usize = 16;

/// The memory a value takes, roughly: the text of its keys and strings, and
/// [`VALUE_BYTES`] per value.
pub(crate) fn size_bytes(value: &Value) -> usize {
    VALUE_BYTES
        + match value {
            Value::String(s) => s.len(),
            Value::Array(items) => items.iter().map(size_bytes).sum(),
            Value::Object(map) => map.iter().map(|(k, v)| k.len() + size_bytes(v)).sum(),
            _ => 0,
        }
}

/// Top-level fields a dimension may not set: they name or shape the experiment as a whole.
const FIXED_FIELDS: [&str; 6] = ["name", "sweep", "host", "client", "report", "expect"];

/// What a sweep dimension does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DimKind {
    /// A variable used as `{{ name }}` in strings.
    Variable,
    /// Sets the field at this path (`["server", "args", "tp"]`).
    Field(Vec<String>),
}

/// One sweep dimension.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Dimension {
    /// As written under `sweep:`.
    pub name: String,
    /// What it does.
    pub kind: DimKind,
    /// Its values, in order.
    pub values: Vec<Value>,
}

/// A string in the spec that contains templates.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    /// JSON pointer of the string.
    pub pointer: String,
    /// The parsed template.
    pub pieces: Vec<Piece>,
}

/// The sweep of a spec, checked.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sweep {
    /// Dimensions in the order written.
    pub dimensions: Vec<Dimension>,
    /// Templated strings outside `sweep`.
    pub sites: Vec<Site>,
}

/// One expanded point before typing.
#[derive(Debug, Clone)]
pub(crate) struct RawPoint {
    /// Dimension name to value.
    pub values: Vec<(String, Value)>,
    /// The spec with this point's values in place.
    pub value: Value,
    /// Pointers set or substituted from the sweep, with the sweep value's pointer (for field
    /// dimensions) or a note naming the variables (for templates), so errors point where the
    /// value came from.
    pub origins: HashMap<String, Origin>,
}

/// Where a value in a point came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Origin {
    /// Pointer into the raw spec to report at.
    pub pointer: String,
    /// Which part of that node.
    pub target: Target,
    /// e.g. `with ctx = 1024`.
    pub note: String,
}

/// Reads `sweep` and the templates of `raw`, reporting every problem.
pub(crate) fn analyze(raw: &Value, validator: &Validator) -> (Sweep, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut sweep = Sweep::default();
    if let Some(Value::Object(dims)) = raw.get("sweep") {
        for (name, values) in dims {
            if let Some(dim) = dimension(name, values, validator, &mut problems) {
                sweep.dimensions.push(dim);
            }
        }
    }
    let variables: Vec<&str> = sweep
        .dimensions
        .iter()
        .filter(|d| d.kind == DimKind::Variable || template::is_identifier(&d.name))
        .map(|d| d.name.as_str())
        .collect();
    // Dimensions written under `sweep:` but rejected (e.g. no values) are reported there;
    // their uses are not also "undefined".
    let declared: BTreeSet<&str> = match raw.get("sweep") {
        Some(Value::Object(dims)) => dims.keys().map(String::as_str).collect(),
        _ => BTreeSet::new(),
    };
    let mut used = BTreeSet::new();
    let mut broken = Vec::new();
    collect_sites(raw, "", &mut sweep.sites, &mut broken);
    for (text, problem) in broken {
        // A variable inside an unsupported template (`{{ ctx | int }}`) is used, just wrongly:
        // that template's error says so, "never used" would mislead.
        used.extend(identifiers(&text));
        problems.push(problem);
    }
    for site in &sweep.sites {
        for piece in &site.pieces {
            let Piece::Var { name, .. } = piece else {
                continue;
            };
            if variables.contains(&name.as_str()) {
                used.insert(name.clone());
                continue;
            }
            if declared.contains(name.as_str()) {
                continue;
            }
            let hint = did_you_mean(name, variables.iter().copied()).or_else(|| {
                Some(format!(
                    "define it under `sweep:`, e.g. `sweep: {{ {name}: [1, 2] }}`"
                ))
            });
            problems.push(Problem {
                pointer: site.pointer.clone(),
                target: Target::Value,
                message: format!("undefined variable `{name}`"),
                hint,
            });
        }
    }
    for dim in &sweep.dimensions {
        if dim.kind == DimKind::Variable && !used.contains(&dim.name) {
            problems.push(Problem {
                pointer: push_pointer("/sweep", &dim.name),
                target: Target::Key,
                message: format!("sweep variable `{}` is never used", dim.name),
                hint: Some(format!(
                    "write \"{{{{ {} }}}}\" where its value should go, or address a field with a dotted path like `workload.output_tokens`",
                    dim.name
                )),
            });
        }
    }
    let total = sweep
        .dimensions
        .iter()
        .try_fold(1usize, |acc, d| acc.checked_mul(d.values.len()));
    if total.is_none_or(|t| t > MAX_POINTS) {
        problems.push(Problem {
            pointer: "/sweep".into(),
            target: Target::Key,
            message: format!(
                "the sweep expands to {} points; at most {MAX_POINTS} are allowed",
                total
                    .map(|t| t.to_string())
                    .unwrap_or_else(|| "too many".into())
            ),
            hint: Some("split the experiment or sweep fewer values".into()),
        });
    }
    (sweep, problems)
}

fn dimension(
    name: &str,
    values: &Value,
    validator: &Validator,
    problems: &mut Vec<Problem>,
) -> Option<Dimension> {
    let pointer = push_pointer("/sweep", name);
    let mut fail = |message: String, hint: Option<String>| {
        problems.push(Problem {
            pointer: pointer.clone(),
            target: Target::Key,
            message,
            hint,
        });
        None
    };
    let segments: Vec<String> = name.split('.').map(str::to_owned).collect();
    let first = segments[0].as_str();
    if FIXED_FIELDS.contains(&first) {
        return fail(
            format!("`{name}` cannot be swept"),
            Some(format!(
                "`{first}` is fixed for the whole experiment; make one spec per value instead"
            )),
        );
    }
    let top = validator
        .schema()
        .get("properties")
        .and_then(Value::as_object);
    let kind = if segments.len() > 1 {
        if let Err((message, hint)) = check_path(validator, &segments) {
            return fail(message, hint);
        }
        DimKind::Field(segments)
    } else if let Some(field) = top.and_then(|t| t.get(first)) {
        if validator.resolve(field).get("type").and_then(Value::as_str) == Some("object") {
            return fail(
                format!("`{name}` is a whole section and cannot be swept"),
                Some(format!(
                    "sweep one of its fields with a dotted path, e.g. `{name}.<field>`"
                )),
            );
        }
        DimKind::Field(segments)
    } else if template::is_identifier(name) {
        DimKind::Variable
    } else {
        let fields: Vec<&str> = top
            .map(|t| t.keys().map(String::as_str).collect())
            .unwrap_or_default();
        return fail(
            format!("`{name}` is neither a field nor a valid variable name"),
            did_you_mean(name, fields)
                .or_else(|| Some("variable names use letters, digits and `_`".into())),
        );
    };
    let Value::Array(items) = values else {
        return None;
    }; // the schema check reports the type
    if items.is_empty() {
        problems.push(Problem {
            pointer,
            target: Target::Value,
            message: format!("sweep dimension `{name}` has no values"),
            hint: Some(format!(
                "give at least one value, e.g. `{name}: [1024]`, or remove it"
            )),
        });
        return None;
    }
    Some(Dimension {
        name: name.to_string(),
        kind,
        values: items.clone(),
    })
}

/// Checks that a dotted path names a field of the spec type.
fn check_path(validator: &Validator, segments: &[String]) -> Result<(), (String, Option<String>)> {
    let mut schemas: Vec<Value> = vec![validator.schema().clone()];
    for (i, seg) in segments.iter().enumerate() {
        let mut next = Vec::new();
        let mut known: BTreeSet<String> = BTreeSet::new();
        for s in object_branches(validator, &schemas) {
            if let Some(p) = s.get("properties").and_then(|p| p.get(seg)) {
                next.push(p.clone());
            } else if let Some(extra @ Value::Object(_)) = s.get("additionalProperties") {
                next.push(extra.clone());
            }
            if let Some(Value::Object(props)) = s.get("properties") {
                known.extend(props.keys().cloned());
            }
        }
        if next.is_empty() {
            let at = segments[..i].join(".");
            let message = if at.is_empty() {
                format!("`{seg}` is not a field of the spec")
            } else {
                format!("`{at}` has no field `{seg}`")
            };
            let hint = did_you_mean(seg, known.iter().map(String::as_str)).or_else(|| {
                (!known.is_empty()).then(|| {
                    format!(
                        "fields of `{at}`: {}",
                        known
                            .iter()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            });
            return Err((message, hint));
        }
        schemas = next;
    }
    Ok(())
}

/// The object schemas among `schemas`, looking through `$ref`, `anyOf` and `oneOf`.
fn object_branches(validator: &Validator, schemas: &[Value]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut todo: Vec<Value> = schemas.to_vec();
    let mut guard = 0;
    while let Some(s) = todo.pop() {
        guard += 1;
        if guard > 256 {
            break;
        }
        let s = validator.resolve(&s).clone();
        if let Some(Value::Array(branches)) = s.get("anyOf").or_else(|| s.get("oneOf")) {
            todo.extend(branches.iter().cloned());
        } else if s.get("properties").is_some() || s.get("additionalProperties").is_some() {
            out.push(s);
        }
    }
    out
}

/// The identifier-like words of `text`, e.g. `ctx` and `int` in `{{ ctx | int }}`.
fn identifiers(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| template::is_identifier(w))
        .map(str::to_owned)
}

/// Collects templated strings; one that does not parse is returned with its problem.
fn collect_sites(
    value: &Value,
    pointer: &str,
    sites: &mut Vec<Site>,
    problems: &mut Vec<(String, Problem)>,
) {
    match value {
        Value::String(s) if template::has_template(s) => match template::parse(s) {
            Ok(pieces) => sites.push(Site {
                pointer: pointer.to_string(),
                pieces,
            }),
            Err(e) => problems.push((
                s.clone(),
                Problem {
                    pointer: pointer.into(),
                    target: Target::Value,
                    message: e.message,
                    hint: e.hint,
                },
            )),
        },
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_sites(
                    item,
                    &push_pointer(pointer, &i.to_string()),
                    sites,
                    problems,
                );
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                if pointer.is_empty() && k == "sweep" {
                    continue; // sweep values are literal
                }
                collect_sites(v, &push_pointer(pointer, k), sites, problems);
            }
        }
        _ => {}
    }
}

/// Number of points of a checked sweep.
pub(crate) fn point_count(sweep: &Sweep) -> usize {
    sweep.dimensions.iter().map(|d| d.values.len()).product()
}

/// The `index`-th point: the first dimension varies slowest.
pub(crate) fn point(raw: &Value, sweep: &Sweep, index: usize) -> (RawPoint, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut rest = index;
    let mut chosen = vec![0; sweep.dimensions.len()];
    for (i, dim) in sweep.dimensions.iter().enumerate().rev() {
        chosen[i] = rest % dim.values.len().max(1);
        rest /= dim.values.len().max(1);
    }
    let values: Vec<(String, Value)> = sweep
        .dimensions
        .iter()
        .zip(&chosen)
        .map(|(d, &i)| (d.name.clone(), d.values[i].clone()))
        .collect();
    let lookup = |name: &str| {
        sweep
            .dimensions
            .iter()
            .zip(&chosen)
            .find(|(d, _)| d.name == name && template::is_identifier(&d.name))
            .map(|(d, &i)| d.values[i].clone())
    };
    let mut value = raw.clone();
    let mut origins = HashMap::new();
    for site in &sweep.sites {
        let rendered = template::render(&site.pieces, &lookup);
        if let Some(slot) = value.pointer_mut(&site.pointer) {
            *slot = rendered;
        }
        // Each variable once, its value cut: the note is for reading, not a copy of the value.
        let mut note: Vec<String> = Vec::new();
        let mut named: Vec<&str> = Vec::new();
        for piece in &site.pieces {
            if let Piece::Var { name, .. } = piece
                && !named.contains(&name.as_str())
                && let Some(v) = lookup(name)
            {
                named.push(name);
                note.push(format!("{name} = {}", quoted(&v.to_string())));
            }
        }
        origins.insert(
            site.pointer.clone(),
            Origin {
                pointer: site.pointer.clone(),
                target: Target::Value,
                note: format!("with {}", note.join(", ")),
            },
        );
    }
    for (dim, &i) in sweep.dimensions.iter().zip(&chosen) {
        let DimKind::Field(path) = &dim.kind else {
            continue;
        };
        let from = push_pointer(&push_pointer("/sweep", &dim.name), &i.to_string());
        match set_path(&mut value, path, dim.values[i].clone()) {
            Ok(pointer) => {
                origins.insert(
                    pointer,
                    Origin {
                        pointer: from,
                        target: Target::Value,
                        note: format!("with {} = {}", dim.name, quoted(&dim.values[i].to_string())),
                    },
                );
            }
            Err(NotAMapping { pointer: at }) => problems.push(Problem {
                pointer: at,
                target: Target::Value,
                message: format!("sweep dimension `{}` needs a mapping here", dim.name),
                hint: Some("remove this value or the dimension".into()),
            }),
        }
    }
    (
        RawPoint {
            values,
            value,
            origins,
        },
        problems,
    )
}

/// A value in the way of a path, that is not a mapping: where it stands (a JSON pointer).
struct NotAMapping {
    pointer: String,
}

/// Sets `path` in `value`, creating mappings on the way. Returns the pointer that was set, or
/// the pointer of a non-mapping in the way.
fn set_path(value: &mut Value, path: &[String], new: Value) -> Result<String, NotAMapping> {
    let mut pointer = String::new();
    let mut node = value;
    for (i, seg) in path.iter().enumerate() {
        let Value::Object(map) = node else {
            return Err(NotAMapping { pointer });
        };
        pointer = push_pointer(&pointer, seg);
        if i + 1 == path.len() {
            map.insert(seg.clone(), new);
            return Ok(pointer);
        }
        node = map
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if node.is_null() {
            *node = Value::Object(Map::new());
        }
    }
    Ok(pointer)
}
