//! Checks tool-call arguments against a tool's JSON schema: the subset of JSON Schema that
//! OpenAI function definitions use (type, properties, required, additionalProperties, items,
//! enum). Keywords outside that subset are accepted unchecked.

use serde_json::Value;

/// Returns the first violation, as a sentence naming where it is.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    check(schema, value, "arguments")
}

fn check(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return Ok(());
    };
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!("{path} must be one of {}", Value::Array(allowed.clone())));
    }
    match schema.get("type") {
        Some(Value::String(t)) => type_matches(t, value, path)?,
        Some(Value::Array(types))
            if !types.iter().filter_map(Value::as_str).any(|t| type_matches(t, value, path).is_ok()) =>
        {
            return Err(format!("{path} must be of type {}", Value::Array(types.clone())));
        }
        _ => {}
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for key in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(key) {
                        return Err(format!("{path} is missing the required property `{key}`"));
                    }
                }
            }
            for (key, item) in map {
                match properties.and_then(|p| p.get(key)) {
                    Some(sub) => check(sub, item, &format!("{path}.{key}"))?,
                    None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        return Err(format!("{path} has an unknown property `{key}`"));
                    }
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"))?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn type_matches(expected: &str, value: &Value, path: &str) -> Result<(), String> {
    let ok = match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.as_i64().is_some() || value.as_u64().is_some() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    };
    if ok { Ok(()) } else { Err(format!("{path} must be of type {expected}, not {}", kind(value))) }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "synonym_values": {"type": "array", "items": {"type": "integer"}},
            "mode": {"type": "string", "enum": ["a", "b"]}},
            "required": ["synonym_values"], "additionalProperties": false})
    }

    #[test]
    fn accepts_valid_arguments() {
        assert_eq!(validate(&schema(), &json!({"synonym_values": [1, 2], "mode": "a"})), Ok(()));
    }

    #[test]
    fn names_each_violation() {
        let cases = [
            (json!({}), "missing the required property `synonym_values`"),
            (json!({"synonym_values": ["x"]}), "arguments.synonym_values[0] must be of type integer, not string"),
            (json!({"synonym_values": [], "extra": 1}), "unknown property `extra`"),
            (json!({"synonym_values": [], "mode": "c"}), "arguments.mode must be one of"),
            (json!([1]), "arguments must be of type object, not array"),
        ];
        for (value, expected) in cases {
            let err = validate(&schema(), &value).unwrap_err();
            assert!(err.contains(expected), "{err} should contain {expected}");
        }
    }
}
