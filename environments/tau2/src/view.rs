//! A database as its canonical dump sees it (`json.dumps(model_dump(), sort_keys=True)`, the text
//! tau2 hashes), in parts that two states of it can be compared by without writing either dump.
//!
//! Every world starts as a copy of its domain's database, and the tables of a database are
//! copy-on-write ([`OrderedMap`](crate::ordered_map::OrderedMap)): a world shares each record it
//! never changed with the base it came from, and with every other world from that base, by
//! pointer. A record held by both of two worlds is the same value, so it has the same text; only
//! records whose pointers differ need their text written (each a few hundred bytes, where the
//! airline database is 7 MB). [`parts`] walks two views of one database type and hands over the
//! texts of exactly the parts that may differ, in the order of the dump's sorted keys, so that
//! comparing those texts is comparing the dumps and diffing them is diffing the dumps.
//!
//! A domain says how its databases split into parts ([`crate::domains::Toolkits::view`]); one
//! that says nothing is one part, its whole dump.

use serde::Serialize;

use crate::pyjson::Py;

/// A value with a canonical text of its own: the dump of it alone, which is exactly its sub-text
/// in the dump of a database that holds it (the writer sorts every object's keys and never
/// looks at the surroundings).
pub trait Canonical {
    fn canonical(&self) -> String;
}

impl<T: Serialize + ?Sized> Canonical for T {
    fn canonical(&self) -> String {
        Py::canonical(self)
    }
}

/// One part of a database's dump.
pub enum View<'a> {
    /// A value compared by its canonical text.
    Value(&'a dyn Canonical),
    /// A table of records (a JSON object whose values a derived state shares by pointer).
    Table(&'a dyn Table),
    /// A JSON object with these members (a database's fields), in any order.
    Object(Vec<(&'static str, View<'a>)>),
}

/// A table's records, with the pointers that say which of them two tables share.
pub trait Table {
    /// Where the table's entry list lives: two tables at one address hold the same records.
    fn identity(&self) -> usize;
    fn len(&self) -> usize;
    /// The key and record at a position (`0..len()`).
    fn entry(&self, position: usize) -> (&str, Record<'_>);
    fn position(&self, key: &str) -> Option<usize>;
}

/// A record of a table: its value and where it lives (two records at one address are one value).
#[derive(Clone, Copy)]
pub struct Record<'a> {
    pub identity: usize,
    pub value: &'a dyn Canonical,
}

impl View<'_> {
    /// The canonical text of the whole part (what the dump holds for it).
    pub fn canonical(&self) -> String {
        match self {
            View::Value(value) => value.canonical(),
            View::Table(table) => {
                let mut entries: Vec<(&str, Record<'_>)> = (0..table.len()).map(|i| table.entry(i)).collect();
                entries.sort_unstable_by_key(|(key, _)| *key);
                object(entries.into_iter().map(|(key, record)| (key, record.value.canonical())))
            }
            View::Object(members) => {
                let mut members: Vec<&(&str, View<'_>)> = members.iter().collect();
                members.sort_unstable_by_key(|(name, _)| *name);
                object(members.into_iter().map(|(name, view)| (*name, view.canonical())))
            }
        }
    }
}

/// A JSON object as the canonical writer writes one, from its members in sorted order.
fn object<'k>(members: impl Iterator<Item = (&'k str, String)>) -> String {
    let mut out = String::from("{");
    for (i, (key, text)) in members.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        crate::pyjson::write_key(key, &mut out);
        out.push_str(": ");
        out.push_str(&text);
    }
    out.push('}');
    out
}

/// What [`parts`] hands each part to: its path, and its text on either side.
pub type Sink<'s> = dyn FnMut(&str, Option<&str>, Option<&str>) + 's;

/// Walks two views of one database, from `path` (a JSON pointer, `""` for the whole), and calls
/// `part(path, before, after)` with the canonical texts of every part that may differ, `None` on
/// the side that lacks it (a record added or removed). Parts come in the order a walk of the two
/// dumps meets them: an object's keys sorted, those of `before` first, then those only `after`
/// has. Whatever it leaves out is equal in both; what it hands over may still be equal (a record
/// copied on write and changed back), so the caller compares the texts.
pub fn parts(path: &str, before: &View<'_>, after: &View<'_>, part: &mut Sink<'_>) {
    match (before, after) {
        (View::Table(a), View::Table(b)) => tables(path, *a, *b, part),
        (View::Object(a), View::Object(b)) => {
            let (mut a, mut b): (Vec<_>, Vec<_>) = (a.iter().collect(), b.iter().collect());
            a.sort_unstable_by_key(|(name, _)| *name);
            b.sort_unstable_by_key(|(name, _)| *name);
            for (name, view) in &a {
                let here = at(path, name);
                match b.iter().find(|(other, _)| other == name) {
                    Some((_, other)) => parts(&here, view, other, part),
                    None => part(&here, Some(&view.canonical()), None),
                }
            }
            for (name, view) in b.iter().filter(|(name, _)| !a.iter().any(|(other, _)| other == name)) {
                part(&at(path, name), None, Some(&view.canonical()));
            }
        }
        (a, b) => part(path, Some(&a.canonical()), Some(&b.canonical())),
    }
}

/// Two tables: nothing when they share their entry list, else the records whose pointers
/// differ, those missing on one side, and nothing else.
fn tables(path: &str, a: &dyn Table, b: &dyn Table, part: &mut Sink<'_>) {
    if a.identity() == b.identity() {
        return;
    }
    let mut changed: Vec<(&str, Record<'_>, Option<Record<'_>>)> = Vec::new();
    let mut common = 0;
    for i in 0..a.len() {
        let (key, record) = a.entry(i);
        // Tables from one base keep their records' positions unless one was removed: the same
        // position first, the index only when it holds another key.
        let other = match (i < b.len()).then(|| b.entry(i)) {
            Some((other_key, other)) if other_key == key => Some(other),
            _ => b.position(key).map(|j| b.entry(j).1),
        };
        match other {
            Some(other) => {
                common += 1;
                if other.identity != record.identity {
                    changed.push((key, record, Some(other)));
                }
            }
            None => changed.push((key, record, None)),
        }
    }
    changed.sort_unstable_by_key(|(key, ..)| *key);
    for (key, record, other) in changed {
        let other = other.map(|o| o.value.canonical());
        part(&at(path, key), Some(&record.value.canonical()), other.as_deref());
    }
    if common < b.len() {
        let mut added: Vec<(&str, Record<'_>)> =
            (0..b.len()).map(|j| b.entry(j)).filter(|(key, _)| a.position(key).is_none()).collect();
        added.sort_unstable_by_key(|(key, _)| *key);
        for (key, record) in added {
            part(&at(path, key), None, Some(&record.value.canonical()));
        }
    }
}

/// A JSON pointer one key further down.
pub fn at(path: &str, key: &str) -> String {
    format!("{path}/{}", key.replace('~', "~0").replace('/', "~1"))
}
