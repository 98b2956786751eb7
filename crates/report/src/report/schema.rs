//! JSON Schemas of what report templates see: [`ReportModel`] for report templates and
//! [`CompareModel`] for compare templates. Generated from the Rust types (doc comments become
//! descriptions) and checked in under `schemas/` for template authors.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Value, json};

use super::ReportModel;
use super::compare::CompareModel;

/// Where the report model's schema is checked in, relative to the repository root.
pub const REPORT_MODEL_SCHEMA_PATH: &str = "schemas/report-model.schema.json";

/// Where the compare model's schema is checked in, relative to the repository root.
pub const COMPARE_MODEL_SCHEMA_PATH: &str = "schemas/compare-model.schema.json";

/// The report model's schema as a JSON value.
pub fn report_model_schema() -> Value {
    schema_for::<ReportModel>(
        "report-model.schema.json",
        "servebench report model (what report templates see)",
    )
}

/// The compare model's schema as a JSON value.
pub fn compare_model_schema() -> Value {
    schema_for::<CompareModel>(
        "compare-model.schema.json",
        "servebench compare model (what compare templates see)",
    )
}

/// Pretty JSON with a trailing newline, as checked in.
pub fn to_json(schema: &Value) -> String {
    let mut text = serde_json::to_string_pretty(schema).unwrap_or_default();
    text.push('\n');
    text
}

fn schema_for<T: JsonSchema>(file: &str, title: &str) -> Value {
    // Templates see the serialized form, so describe what serializing produces.
    let generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    close_objects(&mut value);
    if let Some(obj) = value.as_object_mut() {
        obj.insert(
            "$id".into(),
            json!(format!(
                "https://github.com/servebench/servebench/schemas/{file}"
            )),
        );
        obj.insert("title".into(), json!(title));
    }
    value
}

/// Marks every struct's schema `additionalProperties: false`: the model has exactly these
/// fields, so a misspelt one in a template author's tooling is caught, and a model that grew a
/// field without regenerating the schema fails validation.
fn close_objects(schema: &mut Value) {
    servebench_model::spec::each_subschema_mut(schema, &mut |obj| {
        if obj.contains_key("properties") && !obj.contains_key("additionalProperties") {
            obj.insert("additionalProperties".into(), Value::Bool(false));
        }
    });
}
