//! Checks a spec value against the generated JSON Schema, collecting every problem with a
//! precise location and a hint.
//!
//! A small walker over the schema rather than a general validator: it knows the shapes
//! schemars produces (`$ref`, `anyOf`/`oneOf` for enums and options, internally tagged enums),
//! so it can say "unknown field, did you mean ..." or "expected an integer" instead of "not
//! valid under any of the given schemas".

use std::collections::HashMap;
use std::sync::Mutex;

use regex::Regex;
use serde_json::Value;

use super::diagnostics::{did_you_mean, quoted};
use super::patterns::{DURATION_PATTERN, HOST_PATTERN};
use super::template;
use super::yaml::push_pointer;

/// Which part of a node a problem is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The node's key (unknown fields).
    Key,
    /// The node's value.
    Value,
    /// The mapping that should contain something (missing fields).
    Parent,
}

/// One schema violation, located by JSON pointer.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// JSON pointer of the node.
    pub pointer: String,
    /// Which part of the node to point at.
    pub target: Target,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

/// Validates values against one schema; compiled patterns are cached across calls.
pub(crate) struct Validator {
    root: Value,
    patterns: Mutex<HashMap<String, Option<Regex>>>,
}

impl Validator {
    /// A validator for `root`, a schema as produced by [`super::schema::raw_schema`].
    pub(crate) fn new(root: Value) -> Validator {
        Validator {
            root,
            patterns: Mutex::new(HashMap::new()),
        }
    }

    /// The schema this validator checks against.
    pub(crate) fn schema(&self) -> &Value {
        &self.root
    }

    /// Every problem in `value`.
    pub(crate) fn validate(&self, value: &Value) -> Vec<Problem> {
        let mut out = Vec::new();
        self.check(value, &self.root, "", &mut out);
        out
    }

    /// Every problem in `value`, the value of the top-level field `field`.
    pub(crate) fn validate_field(&self, field: &str, value: &Value) -> Vec<Problem> {
        let mut out = Vec::new();
        if let Some(schema) = self.root.get("properties").and_then(|p| p.get(field)) {
            self.check(value, schema, &push_pointer("", field), &mut out);
        }
        out
    }

    /// Follows a `$ref` into `$defs`.
    pub(crate) fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        let mut s = schema;
        for _ in 0..16 {
            match s.get("$ref").and_then(Value::as_str) {
                Some(r) => match r
                    .strip_prefix("#/$defs/")
                    .and_then(|n| self.root.get("$defs")?.get(n))
                {
                    Some(target) => s = target,
                    None => return s,
                },
                None => return s,
            }
        }
        s
    }

    fn check<'s>(
        &'s self,
        value: &Value,
        schema: &'s Value,
        pointer: &str,
        out: &mut Vec<Problem>,
    ) {
        // A template whose variable is undefined is reported on its own; do not pile on.
        if let Value::String(s) = value
            && template::has_template(s)
        {
            return;
        }
        let Some(obj) = self.resolve(schema).as_object() else {
            return;
        };
        if let Some(branches) = obj
            .get("anyOf")
            .or_else(|| obj.get("oneOf"))
            .and_then(Value::as_array)
        {
            self.check_branches(value, branches, pointer, out);
            return;
        }
        if let Some(types) = obj.get("type")
            && !type_matches(value, types)
        {
            out.push(Problem {
                pointer: pointer.into(),
                target: Target::Value,
                message: format!(
                    "expected {}, found {}",
                    describe_types(types),
                    describe_value(value)
                ),
                hint: type_hint(value, types),
            });
            return;
        }
        if let Some(c) = obj.get("const")
            && c != value
        {
            out.push(self.bad_choice(value, std::slice::from_ref(c), pointer));
            return;
        }
        if let Some(Value::Array(choices)) = obj.get("enum")
            && !choices.contains(value)
        {
            out.push(self.bad_choice(value, choices, pointer));
            return;
        }
        match value {
            Value::Number(n) => check_range(n.as_f64().unwrap_or(0.0), obj, pointer, out),
            Value::String(s) => self.check_string(s, obj, pointer, out),
            Value::Array(items) => {
                if let Some(min) = obj.get("minItems").and_then(Value::as_u64)
                    && (items.len() as u64) < min
                {
                    out.push(Problem {
                        pointer: pointer.into(),
                        target: Target::Value,
                        message: format!("expected at least {min} item(s), found {}", items.len()),
                        hint: None,
                    });
                }
                if let Some(item_schema) = obj.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.check(
                            item,
                            item_schema,
                            &push_pointer(pointer, &i.to_string()),
                            out,
                        );
                    }
                }
            }
            Value::Object(map) => self.check_object(map, obj, pointer, out),
            _ => {}
        }
    }

    fn check_object<'s>(
        &'s self,
        map: &serde_json::Map<String, Value>,
        obj: &'s serde_json::Map<String, Value>,
        pointer: &str,
        out: &mut Vec<Problem>,
    ) {
        let props = obj.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = obj.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(name) {
                    let what = props
                        .and_then(|p| p.get(name))
                        .map(|s| self.resolve(s))
                        .and_then(|s| s.get("description"))
                        .and_then(Value::as_str)
                        .and_then(|d| d.split(['.', '\n']).next())
                        .map(|d| format!("add `{name}:` ({})", lowercase_first(d.trim())));
                    out.push(Problem {
                        pointer: pointer.into(),
                        target: Target::Parent,
                        message: format!("missing required field `{name}`"),
                        hint: what.or_else(|| Some(format!("add `{name}:`"))),
                    });
                }
            }
        }
        for (key, child) in map {
            let child_pointer = push_pointer(pointer, key);
            if let Some(s) = props.and_then(|p| p.get(key)) {
                self.check(child, s, &child_pointer, out);
                continue;
            }
            match obj.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    let allowed: Vec<&str> = props
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    let hint = did_you_mean(key, allowed.iter().copied()).or_else(|| {
                        Some(format!(
                            "allowed here: {}",
                            allowed
                                .iter()
                                .map(|a| format!("`{a}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    });
                    out.push(Problem {
                        pointer: child_pointer,
                        target: Target::Key,
                        message: format!("unknown field `{}`", quoted(key)),
                        hint,
                    });
                }
                Some(s @ Value::Object(_)) => {
                    self.check(child, s, &child_pointer, out);
                }
                _ => {}
            }
        }
    }

    fn check_string(
        &self,
        s: &str,
        obj: &serde_json::Map<String, Value>,
        pointer: &str,
        out: &mut Vec<Problem>,
    ) {
        let len = s.chars().count() as u64;
        if let Some(min) = obj.get("minLength").and_then(Value::as_u64)
            && len < min
        {
            out.push(value_problem(
                pointer,
                format!("must not be shorter than {min} character(s)"),
                None,
            ));
        }
        if let Some(max) = obj.get("maxLength").and_then(Value::as_u64)
            && len > max
        {
            out.push(value_problem(
                pointer,
                format!("must not be longer than {max} characters, found {len}"),
                None,
            ));
        }
        if let Some(pattern) = obj.get("pattern").and_then(Value::as_str) {
            let re = self
                .patterns
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(pattern.to_string())
                .or_insert_with(|| Regex::new(pattern).ok())
                .clone();
            if let Some(re) = re
                && !re.is_match(s)
            {
                out.push(pattern_problem(s, pattern, pointer));
            }
        }
    }

    /// Checks `value` against alternatives and reports the errors of the one the user most
    /// plausibly meant.
    /// Whether a branch's type admits `value`: its `type`, or for a choice of its own (an
    /// untagged enum inside an option, `gpu: name | { figures }`) any of its branches'.
    fn fits(&self, value: &Value, schema: &Value, depth: usize) -> bool {
        let schema = self.resolve(schema);
        if let Some(t) = schema.get("type") {
            return type_matches(value, t);
        }
        depth < 8
            && schema
                .get("anyOf")
                .or_else(|| schema.get("oneOf"))
                .and_then(Value::as_array)
                .is_some_and(|bs| bs.iter().any(|b| self.fits(value, b, depth + 1)))
    }

    fn check_branches<'s>(
        &'s self,
        value: &Value,
        branches: &'s [Value],
        pointer: &str,
        out: &mut Vec<Problem>,
    ) {
        let resolved: Vec<&Value> = branches.iter().map(|b| self.resolve(b)).collect();
        let mut per_branch = Vec::new();
        for b in &resolved {
            let mut errs = Vec::new();
            self.check(value, b, pointer, &mut errs);
            if errs.is_empty() {
                return;
            }
            per_branch.push(errs);
        }
        // A choice between constants: a plain enum.
        let consts: Vec<Value> = resolved
            .iter()
            .filter_map(|b| b.get("const").cloned())
            .collect();
        if !consts.is_empty() && consts.len() == resolved.len() {
            out.push(self.bad_choice(value, &consts, pointer));
            return;
        }
        // An internally tagged enum: pick the variant by its `kind`.
        if let Some((tag, kinds)) = tag_of(&resolved) {
            let Some(map) = value.as_object() else {
                out.push(value_problem(
                    pointer,
                    format!("expected a mapping, found {}", describe_value(value)),
                    None,
                ));
                return;
            };
            let Some(given) = map.get(&tag) else {
                out.push(Problem {
                    pointer: pointer.into(),
                    target: Target::Parent,
                    message: format!("missing required field `{tag}`"),
                    hint: Some(format!("one of {}", list(&kinds))),
                });
                return;
            };
            if let Some(i) = kinds.iter().position(|k| k == given) {
                out.append(&mut per_branch[i]);
            } else {
                out.push(self.bad_choice(given, &kinds, &push_pointer(pointer, &tag)));
            }
            return;
        }
        // Otherwise: the branches whose type fits; if exactly one, its errors say the most.
        let fitting: Vec<usize> = (0..resolved.len())
            .filter(|&i| self.fits(value, resolved[i], 0))
            .collect();
        if let [i] = fitting.as_slice() {
            out.append(&mut per_branch[*i]);
            return;
        }
        // Several mappings fit (`host: { ssh: .. }` or `{ slurm: .. }`): the one whose required
        // keys the value has is the one meant; else the fitting one with the fewest errors.
        if fitting.len() > 1 {
            let has_required = |i: &usize| {
                let (Some(map), Some(Value::Array(req))) =
                    (value.as_object(), resolved[*i].get("required"))
                else {
                    return false;
                };
                !req.is_empty()
                    && req
                        .iter()
                        .filter_map(Value::as_str)
                        .all(|k| map.contains_key(k))
            };
            let meant: Vec<usize> = fitting.iter().copied().filter(has_required).collect();
            let pick = match meant.as_slice() {
                [i] => Some(*i),
                _ => fitting.iter().copied().min_by_key(|i| per_branch[*i].len()),
            };
            if let Some(i) = pick {
                out.append(&mut per_branch[i]);
                return;
            }
        }
        let types: Vec<Value> = resolved
            .iter()
            .filter_map(|b| b.get("type").cloned())
            .collect();
        let all = Value::Array(
            types
                .iter()
                .flat_map(|t| match t {
                    Value::Array(a) => a.clone(),
                    t => vec![t.clone()],
                })
                .collect(),
        );
        if fitting.is_empty() && !types.is_empty() {
            out.push(value_problem(
                pointer,
                format!(
                    "expected {}, found {}",
                    describe_types(&all),
                    describe_value(value)
                ),
                type_hint(value, &all),
            ));
        } else if let Some(first) = per_branch.into_iter().min_by_key(Vec::len) {
            out.extend(first);
        }
    }

    fn bad_choice(&self, value: &Value, choices: &[Value], pointer: &str) -> Problem {
        let names: Vec<String> = choices
            .iter()
            .map(|c| {
                c.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| c.to_string())
            })
            .collect();
        let hint = value
            .as_str()
            .and_then(|v| did_you_mean(v, names.iter().map(String::as_str)))
            .map(|d| format!("{d} (one of {})", list(choices)))
            .or_else(|| Some(format!("one of {}", list(choices))));
        let message = if choices.len() == 1 {
            format!(
                "expected {}, found {}",
                list(choices),
                describe_value(value)
            )
        } else {
            match field_path(pointer) {
                Some(field) => format!("unknown value {} for `{field}`", describe_value(value)),
                None => format!("unknown value {}", describe_value(value)),
            }
        };
        value_problem(pointer, message, hint)
    }
}

/// A JSON pointer as the dotted field path a user writes (`workload.prompt.kind`); `None` for
/// the root.
fn field_path(pointer: &str) -> Option<String> {
    let path = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".");
    (!path.is_empty()).then_some(path)
}

fn value_problem(pointer: &str, message: String, hint: Option<String>) -> Problem {
    Problem {
        pointer: pointer.into(),
        target: Target::Value,
        message,
        hint,
    }
}

fn pattern_problem(s: &str, pattern: &str, pointer: &str) -> Problem {
    if pattern == DURATION_PATTERN {
        return value_problem(
            pointer,
            format!("`{}` is not a duration", quoted(s)),
            Some(duration_hint(s)),
        );
    }
    if pattern == HOST_PATTERN {
        return value_problem(
            pointer,
            format!("host `{}` is neither `local` nor an SSH URL", quoted(s)),
            Some("write `local`, `ssh://user@host[:port]`, or a mapping such as `{ ssh: user@gpu-box, identity: ~/.ssh/id_ed25519 }`".into()),
        );
    }
    value_problem(
        pointer,
        format!("`{}` does not match the pattern `{pattern}`", quoted(s)),
        None,
    )
}

/// Suggests a humantime spelling for a duration the user wrote in words.
fn duration_hint(s: &str) -> String {
    let words: Vec<&str> = s.split_whitespace().collect();
    let unit = |w: &str| -> Option<&str> {
        let w = w.to_ascii_lowercase();
        Some(match w.trim_end_matches('s') {
            "second" | "sec" | "" => "s",
            "minute" | "min" | "mn" | "minut" | "mintue" => "m",
            "hour" | "hr" | "h" => "h",
            "millisecond" | "msec" | "m" => "ms",
            "day" | "d" => "d",
            _ => return None,
        })
    };
    let mut fixed = String::new();
    let mut i = 0;
    while i + 1 < words.len() {
        match (words[i].parse::<u64>(), unit(words[i + 1])) {
            (Ok(n), Some(u)) => fixed.push_str(&format!("{n}{u}")),
            _ => break,
        }
        i += 2;
    }
    if i == words.len() && !fixed.is_empty() {
        format!("write `{fixed}`")
    } else {
        "write durations like `90s`, `20m` or `1h 30m`".into()
    }
}

/// If every branch is an object with a `const` property of the same name, that name and the
/// constants in branch order.
fn tag_of(branches: &[&Value]) -> Option<(String, Vec<Value>)> {
    let mut tag: Option<String> = None;
    let mut kinds = Vec::new();
    for b in branches {
        let props = b.get("properties")?.as_object()?;
        let (name, c) = props
            .iter()
            .find_map(|(k, v)| v.get("const").map(|c| (k.clone(), c.clone())))?;
        if tag.as_ref().is_some_and(|t| *t != name) {
            return None;
        }
        tag = Some(name);
        kinds.push(c);
    }
    tag.map(|t| (t, kinds))
}

fn list(values: &[Value]) -> String {
    values
        .iter()
        .map(|v| {
            format!(
                "`{}`",
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_range(
    n: f64,
    obj: &serde_json::Map<String, Value>,
    pointer: &str,
    out: &mut Vec<Problem>,
) {
    let bound = |k: &str| obj.get(k).and_then(Value::as_f64);
    let shown = |b: f64| {
        if b.fract() == 0.0 && b.abs() < 1e15 {
            format!("{}", b as i64)
        } else {
            b.to_string()
        }
    };
    let value = if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    };
    let (min, max) = (bound("minimum"), bound("maximum"));
    let range = match (min, max) {
        (Some(a), Some(b)) => Some(format!("between {} and {}", shown(a), shown(b))),
        _ => None,
    };
    if let Some(m) = min.filter(|m| n < *m) {
        out.push(value_problem(
            pointer,
            format!("{value} is out of range: must be at least {}", shown(m)),
            range.clone().map(|r| format!("use a value {r}")),
        ));
    } else if let Some(m) = max.filter(|m| n > *m) {
        out.push(value_problem(
            pointer,
            format!("{value} is out of range: must be at most {}", shown(m)),
            range.map(|r| format!("use a value {r}")),
        ));
    } else if let Some(m) = bound("exclusiveMinimum").filter(|m| n <= *m) {
        out.push(value_problem(
            pointer,
            format!("{value} is out of range: must be greater than {}", shown(m)),
            None,
        ));
    } else if let Some(m) = bound("exclusiveMaximum").filter(|m| n >= *m) {
        out.push(value_problem(
            pointer,
            format!("{value} is out of range: must be less than {}", shown(m)),
            None,
        ));
    }
}

fn type_matches(value: &Value, types: &Value) -> bool {
    let one = |t: &str| match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    };
    match types {
        Value::String(t) => one(t),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(one),
        _ => true,
    }
}

fn describe_type(t: &str) -> &'static str {
    match t {
        "null" => "nothing",
        "boolean" => "true or false",
        "integer" => "an integer",
        "number" => "a number",
        "string" => "a string",
        "array" => "a list",
        "object" => "a mapping",
        _ => "a value",
    }
}

fn describe_types(types: &Value) -> String {
    let mut names: Vec<&str> = match types {
        Value::String(t) => vec![describe_type(t)],
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .map(describe_type)
            .collect(),
        _ => vec![],
    };
    // "a number" already covers "an integer".
    if names.contains(&"a number") {
        names.retain(|n| *n != "an integer");
    }
    names.dedup();
    match names.as_slice() {
        [] => "nothing".into(),
        [one] => (*one).into(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// How a value reads in a message: strings quoted, collections by kind.
pub(crate) fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "nothing (null)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{:?}", quoted(s)),
        Value::Array(_) => "a list".into(),
        Value::Object(_) => "a mapping".into(),
    }
}

fn type_hint(value: &Value, types: &Value) -> Option<String> {
    let wants = |t: &str| {
        type_matches(
            &match t {
                "integer" => Value::from(1),
                "boolean" => Value::Bool(true),
                _ => Value::Null,
            },
            types,
        )
    };
    match value {
        Value::String(s) if s.trim().parse::<f64>().is_ok() && wants("integer") => {
            Some(format!("remove the quotes: {}", s.trim()))
        }
        Value::String(s) if wants("integer") && template::is_identifier(s.trim()) => Some(format!(
            "write a whole number, e.g. `8`; if `{0}` is a sweep variable, write \"{{{{ {0} }}}}\"",
            s.trim()
        )),
        Value::String(s)
            if wants("boolean")
                && matches!(s.as_str(), "yes" | "no" | "on" | "off" | "True" | "False") =>
        {
            Some("write `true` or `false`".into())
        }
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() != 0.0) && wants("integer") => {
            Some("use a whole number".into())
        }
        Value::Null => Some("give it a value, or remove the key to use the default".into()),
        _ => None,
    }
}

/// `What each request sends` -> `what each request sends`, for text inside a sentence.
fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
