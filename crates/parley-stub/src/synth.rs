//! Synthesizes a JSON value from a JSON Schema, deterministically, for tool-call arguments and
//! structured outputs.
//!
//! The rules are deliberately plain (the crate documentation lists them) so that a test can
//! write the expected arguments by hand. The synthesizer never resolves `$ref` and never fails:
//! whatever it does not understand becomes `null`.

use serde_json::{Map, Number, Value};

/// The name a string gets when it has no property name of its own (a top-level schema).
const TOP_LEVEL_NAME: &str = "value";

/// Synthesizes a value for `schema`.
pub(crate) fn synthesize(schema: &Value) -> Value {
    value(schema, TOP_LEVEL_NAME)
}

/// Synthesizes a value for `schema`, found under the property `name` (array items inherit
/// their array's name, so a list of strings called `tags` becomes `["Tags"]`).
fn value(schema: &Value, name: &str) -> Value {
    // Boolean schemas (`true`, `false`) and anything else that is not an object say nothing
    // about the shape.
    let Some(schema) = schema.as_object() else {
        return Value::Null;
    };
    if let Some(constant) = schema.get("const") {
        return constant.clone();
    }
    if let Some(first) = first_of(schema, "enum") {
        return first.clone();
    }
    // Optional fields from pydantic and zod come out as `anyOf: [{...}, {"type": "null"}]`;
    // taking the first branch gives the non-null shape, which is what a test wants to see.
    for combinator in ["anyOf", "oneOf"] {
        if let Some(first) = first_of(schema, combinator) {
            return value(first, name);
        }
    }
    match schema_type(schema) {
        Some("object") => object(schema),
        Some("string") => Value::String(capitalise(name)),
        Some("integer") => integer(schema.get("minimum")),
        Some("number") => number(schema.get("minimum")),
        Some("boolean") => Value::Bool(true),
        Some("array") => match schema.get("items") {
            Some(items) => Value::Array(vec![value(items, name)]),
            None => Value::Array(Vec::new()),
        },
        _ => Value::Null,
    }
}

fn first_of<'a>(schema: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    schema.get(key)?.as_array()?.first()
}

/// The schema's type: a string as is, the first non-`null` entry of a type list, and
/// `object` for an untyped schema that has `properties`.
fn schema_type(schema: &Map<String, Value>) -> Option<&str> {
    match schema.get("type") {
        Some(Value::String(ty)) => Some(ty),
        Some(Value::Array(types)) => types.iter().filter_map(Value::as_str).find(|ty| *ty != "null").or(Some("null")),
        _ if schema.contains_key("properties") => Some("object"),
        _ => None,
    }
}

/// Every property named in `required` (every property when `required` is absent). A required
/// name with no schema under `properties` gets `null`.
fn object(schema: &Map<String, Value>) -> Value {
    let properties = schema.get("properties").and_then(Value::as_object);
    let mut out = Map::new();
    match schema.get("required").and_then(Value::as_array) {
        Some(required) => {
            for name in required.iter().filter_map(Value::as_str) {
                let synthesized = properties
                    .and_then(|properties| properties.get(name))
                    .map_or(Value::Null, |property| value(property, name));
                out.insert(name.to_owned(), synthesized);
            }
        }
        None => {
            for (name, property) in properties.into_iter().flatten() {
                out.insert(name.clone(), value(property, name));
            }
        }
    }
    Value::Object(out)
}

/// `minimum` (rounded up when it is fractional), else 0.
fn integer(minimum: Option<&Value>) -> Value {
    match minimum {
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n.clone()),
        // `as` saturates, which is the right answer for an absurd minimum.
        Some(Value::Number(n)) => Value::from(n.as_f64().unwrap_or(0.0).ceil() as i64),
        _ => Value::from(0),
    }
}

/// `minimum` as a float, else 0.0.
fn number(minimum: Option<&Value>) -> Value {
    let minimum = minimum.and_then(Value::as_f64).unwrap_or(0.0);
    Number::from_f64(minimum).map_or(Value::Null, Value::Number)
}

/// The name with its first character uppercased: `synonym` becomes `Synonym`.
fn capitalise(name: &str) -> String {
    let mut chars = name.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn example_multi_step_tools() {
        let get = json!({
            "type": "object",
            "properties": {"synonym": {"type": "string"}},
            "required": ["synonym"],
            "additionalProperties": false
        });
        assert_eq!(synthesize(&get), json!({"synonym": "Synonym"}));
        let extract = json!({
            "type": "object",
            "properties": {"synonym_values": {"type": "array", "items": {"type": "integer"}}},
            "required": ["synonym_values"],
            "additionalProperties": false
        });
        assert_eq!(synthesize(&extract), json!({"synonym_values": [0]}));
    }

    #[test]
    fn scalars() {
        assert_eq!(synthesize(&json!({"type": "string"})), json!("Value"));
        assert_eq!(synthesize(&json!({"type": "integer"})), json!(0));
        assert_eq!(synthesize(&json!({"type": "integer", "minimum": 3})), json!(3));
        assert_eq!(synthesize(&json!({"type": "integer", "minimum": 2.5})), json!(3));
        assert_eq!(synthesize(&json!({"type": "number"})), json!(0.0));
        assert_eq!(synthesize(&json!({"type": "number", "minimum": -1.5})), json!(-1.5));
        assert_eq!(synthesize(&json!({"type": "boolean"})), json!(true));
        assert_eq!(synthesize(&json!({"type": "null"})), json!(null));
    }

    #[test]
    fn enum_and_const_win_over_type() {
        let unit = json!({"type": "string", "enum": ["celsius", "fahrenheit"]});
        assert_eq!(synthesize(&unit), json!("celsius"));
        assert_eq!(synthesize(&json!({"type": "integer", "enum": [7, 9]})), json!(7));
        assert_eq!(synthesize(&json!({"const": {"a": 1}})), json!({"a": 1}));
    }

    #[test]
    fn optional_shapes_take_the_non_null_branch() {
        let any_of = json!({"anyOf": [{"type": "string"}, {"type": "null"}]});
        assert_eq!(value(&any_of, "city"), json!("City"));
        assert_eq!(value(&json!({"type": ["null", "integer"]}), "n"), json!(0));
        assert_eq!(value(&json!({"type": ["null"]}), "n"), json!(null));
    }

    #[test]
    fn required_selects_properties() {
        let schema = json!({
            "type": "object",
            "properties": {"b": {"type": "string"}, "a": {"type": "boolean"}, "c": {"type": "integer"}},
            "required": ["b", "missing"]
        });
        assert_eq!(synthesize(&schema), json!({"b": "B", "missing": null}));
    }

    #[test]
    fn without_required_every_property_is_synthesized() {
        // No `type` either: `properties` alone makes it an object.
        let schema = json!({
            "properties": {
                "tags": {"type": "array", "items": {"type": "string"}},
                "where": {"type": "object", "properties": {"city": {"type": "string"}}}
            }
        });
        assert_eq!(synthesize(&schema), json!({"tags": ["Tags"], "where": {"city": "City"}}));
    }

    #[test]
    fn unknown_shapes_become_null() {
        assert_eq!(synthesize(&json!({})), json!(null));
        assert_eq!(synthesize(&json!(true)), json!(null));
        assert_eq!(synthesize(&json!({"$ref": "#/defs/x"})), json!(null));
        assert_eq!(synthesize(&json!({"type": "array"})), json!([]));
        assert_eq!(synthesize(&json!({"type": "object"})), json!({}));
    }

    #[test]
    fn capitalise_handles_unicode_and_empty() {
        assert_eq!(capitalise("ßx"), "SSx");
        assert_eq!(capitalise(""), "");
    }
}
