//! Python's `==` on values that came out of `json.loads`: `1 == 1.0 == True`, dicts equal
//! regardless of key order. Replay compares tool outputs this way, and the action check
//! compares arguments this way.

use serde_json::Value;

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

pub fn py_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Bool(_), Value::Number(_)) | (Value::Number(_), Value::Bool(_)) => number(a) == number(b),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Null, Value::Null) => true,
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| py_eq(v, w)))
        }
        _ => false,
    }
}

/// tau2's comparison of a replayed tool output with the recorded one: both sides parsed as
/// JSON when they parse, compared as text otherwise.
pub fn same_output(replayed: &str, recorded: &str) -> bool {
    match (serde_json::from_str::<Value>(replayed), serde_json::from_str::<Value>(recorded)) {
        (Ok(a), Ok(b)) => py_eq(&a, &b),
        (Err(_), Err(_)) => replayed == recorded,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equality_is_pythons() {
        assert!(py_eq(&json!({"a": 1, "b": [true]}), &json!({"b": [1.0], "a": 1.0})));
        assert!(!py_eq(&json!({"a": 1}), &json!({"a": 1, "b": null})));
        assert!(same_output("{\"task_id\": \"t\", \"n\": 2.0}", "{\"n\":2,\"task_id\":\"t\"}"));
        assert!(same_output("Transfer successful", "Transfer successful"));
        assert!(!same_output("Error: x", "{}"));
    }
}
