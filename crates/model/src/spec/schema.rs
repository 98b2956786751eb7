//! The JSON Schema of a spec file, generated from [`super::types::Experiment`].
//!
//! Editors (yaml-language-server) validate spec files against it, so every numeric or boolean
//! field also accepts a `{{ var }}` template string: the real type is checked after expansion.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::types::Experiment;

/// The `$id` of the schema.
pub(crate) const SCHEMA_ID: &str =
    "https://github.com/servebench/servebench/schemas/experiment.schema.json";

/// A string that is exactly one `{{ name }}` template.
pub(crate) const TEMPLATE_PATTERN: &str = r"^\s*\{\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\}\s*$";

/// The raw schema (templates not yet allowed) as a JSON value; the validator walks it.
pub(crate) fn raw_schema() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator();
    let root = generator.into_root_schema_for::<Experiment>();
    let mut value = root.to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.insert("$id".into(), json!(SCHEMA_ID));
        obj.insert("title".into(), json!("servebench experiment"));
    }
    value
}

/// The published schema: [`raw_schema`] where scalar fields also accept a template string.
pub(crate) fn schema_value() -> Value {
    let mut value = raw_schema();
    allow_templates(&mut value);
    value
}

/// The JSON Schema of a spec file, pretty JSON with a trailing newline, as checked in at
/// `schemas/experiment.schema.json`.
pub fn schema_json() -> String {
    let mut text = serde_json::to_string_pretty(&schema_value()).unwrap_or_default();
    text.push('\n');
    text
}

/// Calls `f` on every schema object in `schema`, children first, then the schema itself: the
/// schemas that draft 2020-12's subschema keywords hold (`properties`, `$defs`, `items`,
/// `anyOf`, ...), never a value that only looks like one (a `default`, an `enum` entry). The
/// one walk over a generated schema; each pass that edits one (templates allowed here, the
/// report model's objects closed) is its `f`.
pub fn each_subschema_mut(schema: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>)) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    for (key, child) in obj.iter_mut() {
        match key.as_str() {
            "properties" | "$defs" | "definitions" | "patternProperties" | "dependentSchemas" => {
                if let Some(map) = child.as_object_mut() {
                    map.values_mut().for_each(|c| each_subschema_mut(c, f));
                }
            }
            "items"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "propertyNames"
            | "unevaluatedItems"
            | "unevaluatedProperties" => each_subschema_mut(child, f),
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let Some(list) = child.as_array_mut() {
                    list.iter_mut().for_each(|c| each_subschema_mut(c, f));
                }
            }
            _ => {}
        }
    }
    f(obj);
}

/// Wraps every integer/number/boolean schema in `anyOf: [original, template]`, keeping the
/// description and default outside so editors still show them on hover.
fn allow_templates(schema: &mut Value) {
    each_subschema_mut(schema, &mut |obj| {
        if !is_templatable(obj) {
            return;
        }
        let mut outer = Map::new();
        for key in ["description", "default", "title"] {
            if let Some(v) = obj.remove(key) {
                outer.insert(key.into(), v);
            }
        }
        let inner = Value::Object(std::mem::take(obj));
        let template = json!({
            "type": "string",
            "pattern": TEMPLATE_PATTERN,
            "description": "A sweep variable, e.g. \"{{ ctx }}\"; replaced by its typed value."
        });
        outer.insert("anyOf".into(), json!([inner, template]));
        *obj = outer;
    });
}

/// Whether a schema is a plain scalar type that a template could stand in for.
fn is_templatable(obj: &Map<String, Value>) -> bool {
    let scalar = |t: &Value| matches!(t.as_str(), Some("integer" | "number" | "boolean"));
    match obj.get("type") {
        Some(Value::String(_)) => scalar(&obj["type"]),
        Some(Value::Array(types)) => {
            types.iter().any(scalar) && !types.iter().any(|t| t == "string" || t == "object")
        }
        _ => false,
    }
}
