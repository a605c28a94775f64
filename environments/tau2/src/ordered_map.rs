//! A string-keyed map that keeps insertion order, like a Python dict. tau2's tool outputs list
//! a dictionary's entries in the order they were loaded or added, so the databases cannot use
//! `BTreeMap` (sorted) or `HashMap` (random). It never reorders entries.
//!
//! Copy on write: every session starts from a copy of its domain's database, and a session
//! changes a few entries at most, so a clone shares the entries (and each value) with the map it
//! was cloned from; a map copies its entry list on its first change, and a value on its own
//! first change. Thousands of sessions over one airline database (7 MB of JSON) then cost their
//! changes, not a database each. The scorer relies on that sharing: two maps that hold a record
//! at one address hold the same value ([`Table`], see [`crate::view`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::view::{Record, Table};

#[derive(Debug)]
pub struct OrderedMap<V> {
    entries: Arc<Vec<(String, Arc<V>)>>,
    index: Arc<HashMap<String, usize>>,
}

impl<V> Clone for OrderedMap<V> {
    fn clone(&self) -> Self {
        OrderedMap { entries: Arc::clone(&self.entries), index: Arc::clone(&self.index) }
    }
}

/// Equality as a sorted-keys dump sees it: the same keys with equal values, in any order.
impl<V: PartialEq> PartialEq for OrderedMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.entries.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap { entries: Arc::default(), index: Arc::default() }
    }
}

impl<V> OrderedMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        self.index.get(key).map(|&i| &*self.entries[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Inserts or replaces; a replaced entry keeps its position, as in a Python dict.
    pub fn insert(&mut self, key: String, value: V) {
        match self.index.get(&key) {
            Some(&i) => Arc::make_mut(&mut self.entries)[i].1 = Arc::new(value),
            None => {
                Arc::make_mut(&mut self.index).insert(key.clone(), self.entries.len());
                Arc::make_mut(&mut self.entries).push((key, Arc::new(value)));
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.entries.iter().map(|(k, v)| (k, &**v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| &**v)
    }
}

impl<V: Clone> OrderedMap<V> {
    /// The value to change: copied first if another map still shares it.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let &i = self.index.get(key)?;
        Some(Arc::make_mut(&mut Arc::make_mut(&mut self.entries)[i].1))
    }

    /// Removes an entry, keeping the order of the rest (`dict.pop`).
    pub fn remove(&mut self, key: &str) -> Option<V> {
        let i = Arc::make_mut(&mut self.index).remove(key)?;
        let (_, value) = Arc::make_mut(&mut self.entries).remove(i);
        for (_, slot) in Arc::make_mut(&mut self.index).iter_mut() {
            if *slot > i {
                *slot -= 1;
            }
        }
        Some(Arc::unwrap_or_clone(value))
    }
}

impl<V> OrderedMap<V> {
    /// Moves the named keys to the front, in the given order (for maps read from TOML, whose
    /// parser sorts keys: see [`toml_table_keys`]).
    pub fn reorder(&mut self, order: &[String]) {
        let mut entries = std::mem::take(Arc::make_mut(&mut self.entries));
        let mut ordered = Vec::with_capacity(entries.len());
        for key in order {
            if let Some(i) = entries.iter().position(|(k, _)| k == key) {
                ordered.push(entries.remove(i));
            }
        }
        ordered.extend(entries);
        self.index = Arc::new(ordered.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect());
        self.entries = Arc::new(ordered);
    }
}

/// The keys of the TOML table `path` in document order, from its sub-table headers
/// (`[path.key]`, `[path.key.more]`) and its `key = value` lines. The `toml` crate hands tables
/// over sorted, but tau2 (Python's `toml`) keeps the file's order, which shows in tool output.
pub fn toml_table_keys(text: &str, path: &str) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    let mut in_table = false;
    for line in text.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[').map(|h| h.trim_start_matches('[').trim_end_matches(']')) {
            in_table = header == path;
            if let Some(rest) = header.strip_prefix(path).and_then(|r| r.strip_prefix('.')) {
                let key = rest.split('.').next().unwrap_or_default().trim_matches('"').to_owned();
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        } else if in_table && let Some((key, _)) = line.split_once('=') {
            let key = key.trim().trim_matches('"').to_owned();
            if !key.is_empty() && !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys
}

impl<V> FromIterator<(String, V)> for OrderedMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(iter: I) -> Self {
        let mut map = OrderedMap::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

impl<V: Serialize> Serialize for OrderedMap<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.entries.len()))?;
        for (k, v) in self.entries.iter() {
            map.serialize_entry(k, &**v)?;
        }
        map.end()
    }
}

/// The scorer's view: the entry list and each value are addressed by their `Arc`s, which a
/// clone shares until it changes them.
impl<V: Serialize> Table for OrderedMap<V> {
    fn identity(&self) -> usize {
        Arc::as_ptr(&self.entries).addr()
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn entry(&self, position: usize) -> (&str, Record<'_>) {
        let (key, value) = &self.entries[position];
        (key, Record { identity: Arc::as_ptr(value).addr(), value: &**value })
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.index.get(key).copied()
    }
}

struct MapVisitor<V>(std::marker::PhantomData<V>);

impl<'de, V: Deserialize<'de>> Visitor<'de> for MapVisitor<V> {
    type Value = OrderedMap<V>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<OrderedMap<V>, A::Error> {
        let mut map = OrderedMap::new();
        while let Some((k, v)) = access.next_entry::<String, V>()? {
            map.insert(k, v);
        }
        Ok(map)
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MapVisitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_document_order_through_json() {
        let m: OrderedMap<i64> = serde_json::from_str(r#"{"z": 1, "a": 2, "m": 3}"#).unwrap();
        assert_eq!(m.keys().collect::<Vec<_>>(), ["z", "a", "m"]);
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"z":1,"a":2,"m":3}"#);
    }

    #[test]
    fn reorders_by_a_toml_documents_order() {
        let mut m: OrderedMap<i64> = [("a".into(), 1), ("m".into(), 2), ("z".into(), 3)].into_iter().collect();
        let text = "[t.z]\nx = 1\n[t.z.inner]\n[t.a]\n[u]\n[t.m]\n";
        m.reorder(&toml_table_keys(text, "t"));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["z", "a", "m"]);
    }

    #[test]
    fn a_clone_shares_its_entries_until_either_changes() {
        let mut a: OrderedMap<Vec<i64>> = [("x".into(), vec![1]), ("y".into(), vec![2])].into_iter().collect();
        let mut b = a.clone();
        assert!(Arc::ptr_eq(&a.entries, &b.entries));
        b.get_mut("x").unwrap().push(9);
        assert_eq!((a.get("x"), b.get("x")), (Some(&vec![1]), Some(&vec![1, 9])));
        // The value left alone is still shared; the changed one is not.
        assert!(Arc::ptr_eq(&a.entries[1].1, &b.entries[1].1));
        assert!(!Arc::ptr_eq(&a.entries[0].1, &b.entries[0].1));
        a.insert("z".into(), vec![3]);
        assert_eq!((a.len(), b.len()), (3, 2));
        assert_eq!(b.remove("y"), Some(vec![2]));
        assert_eq!(a.get("y"), Some(&vec![2]));
    }

    #[test]
    fn remove_keeps_the_rest_in_order() {
        let mut m: OrderedMap<i64> = [("a".into(), 1), ("b".into(), 2), ("c".into(), 3)].into_iter().collect();
        assert_eq!(m.remove("b"), Some(2));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(m.get("c"), Some(&3));
    }
}
