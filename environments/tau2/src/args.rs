//! Keyword arguments as a Python tool function receives them: tau2 passes the model's JSON
//! arguments straight through as `**kwargs`, without validation. This module reads them with
//! Python's types in mind (an `int` stays distinct from a `float`, since tools echo numbers
//! back) and writes Python's `TypeError` messages for a call that does not fit a signature.
//! It never coerces a value into a type the Python function would not have received.

use serde_json::{Map, Value};

use crate::pyjson::{Py, float_repr};
use crate::toolkit::ToolError;

/// A number as Python holds it after `json.loads`: `int` or `float`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    /// `str(x)` / an f-string `{x}`.
    pub fn py_str(self) -> String {
        match self {
            Num::Int(i) => i.to_string(),
            Num::Float(f) => float_repr(f),
        }
    }

    pub fn to_py(self) -> Py {
        match self {
            Num::Int(i) => Py::Int(i),
            Num::Float(f) => Py::Float(f),
        }
    }
}

impl serde::Serialize for Num {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Num::Int(i) => s.serialize_i64(*i),
            Num::Float(f) => s.serialize_f64(*f),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Num {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        match Py::deserialize(d)? {
            Py::Int(i) => Ok(Num::Int(i)),
            Py::Float(f) => Ok(Num::Float(f)),
            other => Err(serde::de::Error::custom(format!("expected a number, got {}", other.dumps()))),
        }
    }
}

/// The `**kwargs` of one call.
#[derive(Debug, Clone, Default)]
pub struct Args(pub Map<String, Value>);

impl Args {
    pub fn from_value(value: &Value) -> Result<Args, ToolError> {
        match value {
            Value::Object(map) => Ok(Args(map.clone())),
            Value::Null => Ok(Args::default()),
            other => Err(ToolError::new(format!("argument after ** must be a mapping, not {}", py_type(other)))),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    pub fn str(&self, name: &str) -> Result<String, ToolError> {
        match self.0.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(wrong_type(name, "str", other)),
            None => Err(ToolError::new(format!("missing required argument: '{name}'"))),
        }
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<String>, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(wrong_type(name, "str", other)),
        }
    }

    pub fn num(&self, name: &str) -> Result<Num, ToolError> {
        match self.0.get(name) {
            Some(Value::Number(n)) => Ok(match n.as_i64() {
                Some(i) => Num::Int(i),
                None => Num::Float(n.as_f64().unwrap_or(f64::NAN)),
            }),
            Some(Value::Bool(b)) => Ok(Num::Int(i64::from(*b))),
            Some(other) => Err(wrong_type(name, "number", other)),
            None => Err(ToolError::new(format!("missing required argument: '{name}'"))),
        }
    }

    /// An `int` field: pydantic accepts a whole float (`2.0`) and stores `2`.
    pub fn int(&self, name: &str) -> Result<i64, ToolError> {
        match self.num(name)? {
            Num::Int(i) => Ok(i),
            Num::Float(f) if f.fract() == 0.0 && f.is_finite() => Ok(f as i64),
            Num::Float(_) => Err(ToolError::new(format!("{name}: Input should be a valid integer"))),
        }
    }

    pub fn bool(&self, name: &str) -> Result<bool, ToolError> {
        match self.0.get(name) {
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(wrong_type(name, "bool", other)),
            None => Err(ToolError::new(format!("missing required argument: '{name}'"))),
        }
    }

    pub fn str_list(&self, name: &str) -> Result<Vec<String>, ToolError> {
        match self.0.get(name) {
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(wrong_type(name, "str", other)),
                })
                .collect(),
            Some(other) => Err(wrong_type(name, "list", other)),
            None => Err(ToolError::new(format!("missing required argument: '{name}'"))),
        }
    }

    pub fn list(&self, name: &str) -> Result<Vec<Value>, ToolError> {
        match self.0.get(name) {
            Some(Value::Array(items)) => Ok(items.clone()),
            Some(other) => Err(wrong_type(name, "list", other)),
            None => Err(ToolError::new(format!("missing required argument: '{name}'"))),
        }
    }
}

/// Python's name for the type of a JSON value.
pub fn py_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

fn wrong_type(name: &str, want: &str, got: &Value) -> ToolError {
    ToolError::new(format!("argument '{name}' must be {want}, not {}", py_type(got)))
}

/// The `TypeError` CPython raises when keyword arguments do not fit a method's signature:
/// an unexpected keyword first, then the missing required ones, named in signature order.
pub fn check_signature(qualname: &str, params: &[String], required: &[String], args: &Args) -> Result<(), ToolError> {
    if let Some(extra) = args.0.keys().find(|k| !params.contains(k)) {
        return Err(ToolError::new(format!("{qualname}() got an unexpected keyword argument '{extra}'")));
    }
    let missing: Vec<&String> = required.iter().filter(|r| !args.0.contains_key(r.as_str())).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let quoted: Vec<String> = missing.iter().map(|m| format!("'{m}'")).collect();
    let names = match quoted.len() {
        1 => quoted[0].clone(),
        2 => format!("{} and {}", quoted[0], quoted[1]),
        n => format!("{}, and {}", quoted[..n - 1].join(", "), quoted[n - 1]),
    };
    let plural = if missing.len() == 1 { "argument" } else { "arguments" };
    Err(ToolError::new(format!("{qualname}() missing {} required positional {plural}: {names}", missing.len())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Args {
        Args::from_value(&v).unwrap()
    }

    #[test]
    fn type_errors_read_like_cpython() {
        let params: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let e = check_signature("T.f", &params, &params, &args(json!({"a": 1}))).unwrap_err();
        assert_eq!(e.0, "T.f() missing 2 required positional arguments: 'b' and 'c'");
        let e = check_signature("T.f", &params, &params, &args(json!({}))).unwrap_err();
        assert_eq!(e.0, "T.f() missing 3 required positional arguments: 'a', 'b', and 'c'");
        let e = check_signature("T.f", &params, &params, &args(json!({"a": 1, "z": 2}))).unwrap_err();
        assert_eq!(e.0, "T.f() got an unexpected keyword argument 'z'");
    }

    #[test]
    fn numbers_keep_their_python_type() {
        let a = args(json!({"i": 2, "f": 2.0}));
        assert_eq!(a.num("i").unwrap().py_str(), "2");
        assert_eq!(a.num("f").unwrap().py_str(), "2.0");
        assert_eq!(a.int("f").unwrap(), 2);
    }
}
