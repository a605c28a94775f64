//! What differs between two database states, field by field: the leaves (by JSON path) whose
//! values differ, with both values, at most [`LIMIT`] of them. A score keeps it so that a
//! reader sees how a session changed the database and how it missed the gold one, without
//! storing the databases.
//!
//! The diff is that of the two canonical dumps (tau2's hash input), and the same walk decides
//! whether the dumps are equal (tau2's DB check), but neither dump is written: [`compare`] gets
//! from [`view::parts`] the texts of the few records two states do not share (a session changes
//! a few records of a database of megabytes), compares those, and walks them as raw sub-texts,
//! going down only where they differ and parsing values only at the leaves that changed.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::view::{self, View};

/// The most differences kept; a diff cut there says how many there were.
pub const LIMIT: usize = 50;

/// Two states of one database side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Whether the two dumps are equal (so hash equal): both states missing counts as equal.
    pub same: bool,
    /// The differences (`{changes, total, cut}`), or `Null` when either state is missing.
    pub diff: Value,
}

/// Compares two states of one database (a world's [`View`], `None` without that database), as
/// comparing and diffing their canonical dumps would.
///
/// Parts left out by the walk are shared, so equal; each part handed over is compared by text,
/// and walked when it differs. A part whose text is not JSON (a NaN, which the writer prints as
/// Python does and no tool produces) leaves the diff `Null`, as an unparsable dump would.
pub fn compare(before: Option<&View<'_>>, after: Option<&View<'_>>) -> Comparison {
    let (Some(before), Some(after)) = (before, after) else {
        return Comparison { same: before.is_none() && after.is_none(), diff: Value::Null };
    };
    let mut changes = Changes::default();
    let (mut same, mut parsable) = (true, true);
    view::parts("", before, after, &mut |path, a, b| {
        if a == b {
            return;
        }
        same = false;
        match (raw(a), raw(b)) {
            (Ok(a), Ok(b)) => walk(path, a, b, &mut changes),
            _ => parsable = false,
        }
    });
    Comparison { same, diff: if parsable { changes.into_value() } else { Value::Null } }
}

/// A text as a raw JSON value, keeping `None` (the side that lacks it).
fn raw(text: Option<&str>) -> Result<Option<&RawValue>, serde_json::Error> {
    text.map(serde_json::from_str::<&RawValue>).transpose()
}

/// The differences between two canonical database texts, or `Null` when either is missing or
/// does not parse: what [`compare`] must agree with, written the plain way.
#[cfg(test)]
pub fn between(before: Option<&str>, after: Option<&str>) -> Value {
    let (Some(before), Some(after)) = (before, after) else { return Value::Null };
    let (Ok(before), Ok(after)) = (serde_json::from_str::<&RawValue>(before), serde_json::from_str::<&RawValue>(after))
    else {
        return Value::Null;
    };
    let mut changes = Changes::default();
    walk("", Some(before), Some(after), &mut changes);
    changes.into_value()
}

/// The differences found so far: the first [`LIMIT`] kept, all counted.
#[derive(Default)]
struct Changes {
    kept: Vec<Value>,
    total: usize,
}

impl Changes {
    fn into_value(self) -> Value {
        json!({"changes": self.kept, "total": self.total, "cut": self.total > self.kept.len()})
    }
}

/// One level of the walk; a side that lacks the value (a key added or removed) is `None`.
///
/// The texts come from one canonical writer, so equal text is an equal value: the walk reads
/// each level as raw sub-texts, goes down only where they differ, and parses values only at the
/// leaves that changed.
fn walk(path: &str, before: Option<&RawValue>, after: Option<&RawValue>, out: &mut Changes) {
    if let (Some(a), Some(b)) = (before, after)
        && a.get() == b.get()
    {
        return;
    }
    if let (Some(a), Some(b)) = (object(before), object(after)) {
        for (key, value) in &a {
            walk(&view::at(path, key), Some(value), b.get(key).copied(), out);
        }
        for (key, value) in b.iter().filter(|(k, _)| !a.contains_key(*k)) {
            walk(&view::at(path, key), None, Some(value), out);
        }
        return;
    }
    if let (Some(a), Some(b)) = (array(before), array(after))
        && a.len() == b.len()
    {
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            walk(&format!("{path}/{i}"), Some(x), Some(y), out);
        }
        return;
    }
    let value =
        |r: Option<&RawValue>| r.and_then(|r| serde_json::from_str::<Value>(r.get()).ok()).unwrap_or(Value::Null);
    let (a, b) = (value(before), value(after));
    if a != b {
        out.total += 1;
        if out.kept.len() < LIMIT {
            out.kept.push(json!({"path": path, "before": a, "after": b}));
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

    /// Two small databases as views, against their dumps: a record changed, one removed (which
    /// moves the ones after it), one added, one copied on write and left equal, a table
    /// replaced whole, and a diff long enough to be cut.
    #[test]
    fn compare_agrees_with_the_dumps_on_crafted_tables() {
        use crate::ordered_map::OrderedMap;

        let table = |n: i64| -> OrderedMap<Value> { (0..n).map(|i| (format!("k{i:03}"), json!({"v": i}))).collect() };
        let view = |a: &OrderedMap<Value>, b: &OrderedMap<Value>| -> String {
            View::Object(vec![("b", View::Table(b)), ("a", View::Table(a))]).canonical()
        };
        let check = |a: (&OrderedMap<Value>, &OrderedMap<Value>), b: (&OrderedMap<Value>, &OrderedMap<Value>)| {
            let (x, y) = (
                View::Object(vec![("b", View::Table(a.1)), ("a", View::Table(a.0))]),
                View::Object(vec![("a", View::Table(b.0)), ("b", View::Table(b.1))]),
            );
            let (tx, ty) = (view(a.0, a.1), view(b.0, b.1));
            assert_eq!(tx, x.canonical());
            let want = Comparison { same: tx == ty, diff: between(Some(&tx), Some(&ty)) };
            assert_eq!(compare(Some(&x), Some(&y)), want);
            want
        };
        let (a, b) = (table(10), table(3));
        assert!(check((&a, &b), (&a, &b)).same);
        let mut changed = a.clone();
        changed.get_mut("k004").unwrap()["v"] = json!("four");
        changed.remove("k002");
        changed.insert("k100".into(), json!({"v": 100}));
        changed.insert("a/b~c".into(), json!(null));
        let mut untouched = b.clone();
        let _ = untouched.get_mut("k001");
        for (x, y) in [((&a, &b), (&changed, &untouched)), ((&changed, &untouched), (&a, &b))] {
            let result = check(x, y);
            // A key added with `null` differs in the dumps but not in the diff, which reads a
            // missing side as `null`: the match is the texts', never the diff's.
            assert!(!result.same);
            assert_eq!(result.diff["total"], 3, "{}", result.diff);
        }
        // Equal records that share nothing: the same value loaded twice.
        assert!(check((&a, &b), (&table(10), &table(3))).same);
        let (wide, shifted) = (table(120), table(121));
        let mut bumped = wide.clone();
        for i in 0..120 {
            bumped.get_mut(&format!("k{i:03}")).unwrap()["v"] = json!(-i);
        }
        let result = check((&wide, &b), (&bumped, &shifted));
        // 119 values changed (`-0` is `0`) and 118 records added.
        assert_eq!((result.diff["total"].as_u64(), result.diff["cut"].as_bool()), (Some(237), Some(true)));
        assert!(compare(None, None).same && compare(None, Some(&View::Table(&b))).diff.is_null());
    }

    /// Worlds built by random mutating calls from a domain's gold actions (each a few changed,
    /// added or removed records, or none), compared pairwise both ways: [`compare`] must say
    /// what comparing and diffing the two whole dumps says, and a view's parts must make up the
    /// dump exactly.
    #[test]
    fn compare_agrees_with_the_dumps_on_random_worlds() {
        use std::sync::Arc;

        use crate::catalog::Catalog;
        use crate::toolkit::Requestor;
        use crate::world::World;

        let data = std::env::var_os("PARLEY_TAU2_DATA")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/tau2"));
        assert!(data.join("derived").is_dir(), "no tau2 data at {} (set PARLEY_TAU2_DATA)", data.display());
        // xorshift64*: a fixed sequence, so a failure is reproducible.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: usize| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
        };
        for (domain, worlds) in [("airline", 10), ("retail", 10), ("mock", 30), ("telecom", 20)] {
            let data = crate::data::Data::Folder(data.clone());
            let base = crate::domains::load_state(domain, &data).unwrap();
            let catalog = Arc::new(Catalog::load(&data, domain).unwrap());
            let tasks = if domain == "telecom" { "tasks_small.json" } else { "tasks.json" };
            let tasks: Vec<Value> = data.read_json(&format!("{domain}/{tasks}")).unwrap();
            let calls: Vec<(Requestor, String, Value)> = tasks
                .iter()
                .filter_map(|t| t.pointer("/evaluation_criteria/actions")?.as_array())
                .flatten()
                .filter(|a| catalog.is_mutating(a["name"].as_str().unwrap_or_default()))
                .map(|a| {
                    let requestor = Requestor::parse(a["requestor"].as_str().unwrap_or("assistant")).unwrap();
                    (requestor, a["name"].as_str().unwrap().to_owned(), a["arguments"].clone())
                })
                .collect();
            assert!(!calls.is_empty(), "{domain}: no mutating gold action");
            let play = |world: &mut World, picks: &[usize]| {
                for &i in picks {
                    let (requestor, name, arguments) = &calls[i];
                    let _ = world.get_response(*requestor, name, arguments);
                }
            };
            // Some worlds grow from earlier ones (sharing their changes), some replay another's
            // calls from scratch (equal, sharing nothing changed), the rest are fresh.
            let mut built: Vec<(World, Vec<usize>)> =
                vec![(World::new(base.clone_box(), catalog.clone(), false), vec![])];
            for _ in 0..worlds {
                let (mut world, mut picks) = match next(3) {
                    0 => built[next(built.len())].clone(),
                    1 => {
                        let picks = built[next(built.len())].1.clone();
                        let mut world = World::new(base.clone_box(), catalog.clone(), false);
                        play(&mut world, &picks);
                        (world, picks)
                    }
                    _ => (World::new(base.clone_box(), catalog.clone(), false), vec![]),
                };
                let more: Vec<usize> = (0..next(4)).map(|_| next(calls.len())).collect();
                play(&mut world, &more);
                picks.extend(more);
                built.push((world, picks));
            }
            let toolkits = [Requestor::Assistant, Requestor::User];
            let dumps: Vec<[Option<String>; 2]> = built.iter().map(|(w, _)| toolkits.map(|t| w.canonical(t))).collect();
            // Hashes from what is known of the base, and of a world that changed some records.
            let known = [
                crate::view::Known::of(base.as_ref()),
                crate::view::Known::of(built[built.len() / 2].0.state.as_ref()),
            ];
            for ((world, _), dump) in built.iter().zip(&dumps) {
                for (toolkit, dump) in toolkits.iter().zip(dump) {
                    let want = dump.as_deref().map(crate::hash::sha256_hex);
                    assert_eq!(world.hash(*toolkit), want);
                    // Twice: the second answer is the memo's (so is the first, for a world equal to
                    // one hashed before).
                    for known in known.iter().chain(&known) {
                        assert_eq!(world.hash_with(*toolkit, known), want, "{domain}: a hash from known texts");
                    }
                }
            }
            let (mut same, mut differ) = (0, 0);
            for (i, (a, _)) in built.iter().enumerate() {
                for (toolkit, dump) in toolkits.iter().zip(&dumps[i]) {
                    assert_eq!(a.view(*toolkit).map(|v| v.canonical()), *dump, "{domain}: the parts make up the dump");
                }
                for (j, (b, _)) in built.iter().enumerate().filter(|(j, _)| *j != i) {
                    for (t, toolkit) in toolkits.iter().enumerate() {
                        let got = compare(a.view(*toolkit).as_ref(), b.view(*toolkit).as_ref());
                        let (x, y) = (dumps[i][t].as_deref(), dumps[j][t].as_deref());
                        let want = Comparison { same: x == y, diff: between(x, y) };
                        assert_eq!(got, want, "{domain}: worlds {i} and {j}, {toolkit:?}");
                        if x.is_some() {
                            if got.same { same += 1 } else { differ += 1 }
                        }
                    }
                }
            }
            assert!(same > 0 && differ > 0, "{domain}: {same} equal pairs, {differ} unequal: the worlds check little");
        }
    }
}
