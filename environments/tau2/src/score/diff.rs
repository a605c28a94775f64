//! What differs between two database states, field by field: the leaves (by JSON path) whose
//! values differ, with both values, at most [`LIMIT`] of them. A score keeps it so that a
//! reader sees how a session changed the database and how it missed the gold one, without
//! storing the databases.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Value, json};

/// The most differences kept; a diff cut there says how many there were.
pub const LIMIT: usize = 50;

/// The differences between two canonical database texts (tau2's hash input), or `Null` when
/// either is missing or does not parse.
///
/// The texts come from one canonical writer, so equal text is an equal value: the walk reads
/// each level as raw sub-texts, goes down only where they differ, and parses values only at the
/// leaves that changed. A session changes a few records of a database of megabytes; the rest is
/// compared as text, never built as a tree.
pub fn between(before: Option<&str>, after: Option<&str>) -> Value {
    let (Some(before), Some(after)) = (before, after) else { return Value::Null };
    let (Ok(before), Ok(after)) = (serde_json::from_str::<&RawValue>(before), serde_json::from_str::<&RawValue>(after))
    else {
        return Value::Null;
    };
    let mut changes = Vec::new();
    let mut total = 0;
    walk("", Some(before), Some(after), &mut changes, &mut total);
    json!({"changes": changes, "total": total, "cut": total > changes.len()})
}

/// One level of the walk; a side that lacks the value (a key added or removed) is `None`.
fn walk(path: &str, before: Option<&RawValue>, after: Option<&RawValue>, out: &mut Vec<Value>, total: &mut usize) {
    if let (Some(a), Some(b)) = (before, after)
        && a.get() == b.get()
    {
        return;
    }
    if let (Some(a), Some(b)) = (object(before), object(after)) {
        for (key, value) in &a {
            walk(&at(path, key), Some(value), b.get(key).copied(), out, total);
        }
        for (key, value) in b.iter().filter(|(k, _)| !a.contains_key(*k)) {
            walk(&at(path, key), None, Some(value), out, total);
        }
        return;
    }
    if let (Some(a), Some(b)) = (array(before), array(after))
        && a.len() == b.len()
    {
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            walk(&format!("{path}/{i}"), Some(x), Some(y), out, total);
        }
        return;
    }
    let value =
        |r: Option<&RawValue>| r.and_then(|r| serde_json::from_str::<Value>(r.get()).ok()).unwrap_or(Value::Null);
    let (a, b) = (value(before), value(after));
    if a != b {
        *total += 1;
        if out.len() < LIMIT {
            out.push(json!({"path": path, "before": a, "after": b}));
        }
    }
}

/// A raw value's members, when it is an object.
fn object(raw: Option<&RawValue>) -> Option<BTreeMap<String, &RawValue>> {
    serde_json::from_str(raw?.get()).ok()
}

/// A raw value's items, when it is an array.
fn array(raw: Option<&RawValue>) -> Option<Vec<&RawValue>> {
    serde_json::from_str(raw?.get()).ok()
}

/// A JSON pointer one key further down.
fn at(path: &str, key: &str) -> String {
    format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_added_and_removed_leaves_are_named_by_path() {
        let before = r#"{"users": {"u1": {"name": "A", "tags": ["x", "y"]}, "u/2": {"n": 1}}}"#;
        let after = r#"{"users": {"u1": {"name": "B", "tags": ["x", "y"], "new": true}}}"#;
        let diff = between(Some(before), Some(after));
        let changes = diff["changes"].as_array().unwrap();
        let mut paths: Vec<&str> = changes.iter().map(|c| c["path"].as_str().unwrap()).collect();
        paths.sort_unstable();
        assert_eq!(paths, ["/users/u1/name", "/users/u1/new", "/users/u~12"]);
        let name = changes.iter().find(|c| c["path"] == "/users/u1/name").unwrap();
        assert_eq!((&name["before"], &name["after"]), (&json!("A"), &json!("B")));
        let removed = changes.iter().find(|c| c["path"] == "/users/u~12").unwrap();
        assert_eq!((&removed["before"], &removed["after"]), (&json!({"n": 1}), &Value::Null));
        assert_eq!(diff["total"], 3);
        assert_eq!(between(Some(before), Some(before))["total"], 0);
        assert!(between(None, Some(after)).is_null());
    }

    #[test]
    fn a_long_diff_is_cut_and_says_so() {
        let before: Value = (0..100).map(|i| (format!("k{i}"), json!(i))).collect::<serde_json::Map<_, _>>().into();
        let after: Value = (0..100).map(|i| (format!("k{i}"), json!(i + 1))).collect::<serde_json::Map<_, _>>().into();
        let diff = between(Some(&before.to_string()), Some(&after.to_string()));
        assert_eq!(diff["changes"].as_array().unwrap().len(), LIMIT);
        assert_eq!((diff["total"].as_u64(), diff["cut"].as_bool()), (Some(100), Some(true)));
    }
}
