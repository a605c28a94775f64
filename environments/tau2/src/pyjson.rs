//! Python's JSON, byte for byte: the value tree tau2's tools hand to `json.dumps`, and the
//! writer that turns it into the exact strings tau2 returns to the model and hashes.
//!
//! tau2 serializes a tool result with `json.dumps(model_dump(), default=str)`: dictionaries keep
//! insertion order (pydantic field order), separators are `", "` and `": "`, non-ASCII is
//! escaped, and floats print as Python's `repr` (`128.0`, `1e+16`). serde_json's `Value` sorts
//! keys and prints floats its own way, so this module owns an ordered tree ([`Py`]) and its
//! writer. It must never lose the difference between an int and a float: `1` and `1.0` are
//! different strings in tau2's output.

mod de;
mod write;

pub use write::{float_repr, round2, str_repr};

/// A Python value as `json.dumps` sees it. `Dict` keeps insertion order.
#[derive(Debug, Clone, PartialEq)]
pub enum Py {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Py>),
    Dict(Vec<(String, Py)>),
}

impl Py {
    /// `json.dumps(value)`: insertion order, default separators, ASCII only.
    pub fn dumps(&self) -> String {
        let mut out = String::new();
        write::write(self, false, &mut out);
        out
    }

    /// `json.dumps(value, sort_keys=True)`, the string tau2 hashes.
    pub fn dumps_sorted(&self) -> String {
        let mut out = String::new();
        write::write(self, true, &mut out);
        out
    }

    /// `json.dumps(model_dump(), sort_keys=True, default=str)` of a typed model, straight from
    /// serde (whose `Value` already sorts keys): the canonical text tau2 hashes.
    pub fn canonical<T: serde::Serialize + ?Sized>(value: &T) -> String {
        let value = serde_json::to_value(value).expect("models serialize to JSON");
        canonical_value(&value)
    }

    /// Any serde value (a typed model) as a [`Py`] tree in field order. The detour through text
    /// keeps struct field order and the int/float distinction, which `serde_json::Value` loses.
    pub fn from_serialize<T: serde::Serialize + ?Sized>(value: &T) -> Py {
        let text = serde_json::to_string(value).expect("models serialize to JSON");
        serde_json::from_str(&text).expect("JSON text parses back")
    }

    /// Parses JSON text keeping key order and number kinds.
    pub fn parse(text: &str) -> Result<Py, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Deserializes a typed model from this tree (key order is kept for ordered maps).
    pub fn to_model<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.dumps())
    }

    pub fn get(&self, key: &str) -> Option<&Py> {
        match self {
            Py::Dict(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// addict's `Dict.update`, which tau2 uses to patch a database with `initialization_data`:
    /// nested dictionaries merge key by key, anything else is replaced, new keys go last.
    pub fn merge(&mut self, patch: &Py) {
        match (self, patch) {
            (Py::Dict(entries), Py::Dict(patch_entries)) => {
                for (key, value) in patch_entries {
                    match entries.iter_mut().find(|(k, _)| k == key) {
                        Some((_, existing)) if matches!(existing, Py::Dict(_)) && matches!(value, Py::Dict(_)) => {
                            existing.merge(value)
                        }
                        Some((_, existing)) => *existing = value.clone(),
                        None => entries.push((key.clone(), value.clone())),
                    }
                }
            }
            (this, patch) => *this = patch.clone(),
        }
    }
}

/// A JSON string as the writer writes it: for an object's key, where the writer's caller puts
/// the members together itself.
pub(crate) fn write_key(key: &str, out: &mut String) {
    write::write_str(key, out);
}

/// A sorted `serde_json::Value` written as `json.dumps(..., sort_keys=True)` writes it.
pub fn canonical_value(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write::write_value(value, &mut out);
    out
}

impl From<&serde_json::Value> for Py {
    fn from(value: &serde_json::Value) -> Py {
        use serde_json::Value;
        match value {
            Value::Null => Py::None,
            Value::Bool(b) => Py::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Py::Int(i),
                None => Py::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => Py::Str(s.clone()),
            Value::Array(items) => Py::List(items.iter().map(Py::from).collect()),
            Value::Object(map) => Py::Dict(map.iter().map(|(k, v)| (k.clone(), Py::from(v))).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumps_matches_python() {
        let v = Py::parse(r#"{"b": 1, "a": [1.0, 2.5, null, true], "c": "é\n\"x\"", "d": {}}"#).unwrap();
        assert_eq!(v.dumps(), r#"{"b": 1, "a": [1.0, 2.5, null, true], "c": "\u00e9\n\"x\"", "d": {}}"#);
        assert_eq!(v.dumps_sorted(), r#"{"a": [1.0, 2.5, null, true], "b": 1, "c": "\u00e9\n\"x\"", "d": {}}"#);
    }

    #[test]
    fn merge_is_addict_update() {
        let mut db = Py::parse(r#"{"users": {"u1": {"name": "A", "tasks": ["t1"]}}, "x": 1}"#).unwrap();
        let patch = Py::parse(r#"{"users": {"u1": {"tasks": ["t1", "t2"]}, "u2": {}}, "y": 2}"#).unwrap();
        db.merge(&patch);
        assert_eq!(db.dumps(), r#"{"users": {"u1": {"name": "A", "tasks": ["t1", "t2"]}, "u2": {}}, "x": 1, "y": 2}"#);
    }
}
