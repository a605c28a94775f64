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

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Serialize;

use crate::pyjson::Py;
use crate::toolkit::{DomainState, Requestor};

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
        let mut out = String::new();
        self.write(None, &mut |piece| out.push_str(piece));
        out
    }

    /// The canonical text in pieces, in order; a record `known` has a text for is not written
    /// again. What the pieces make up is [`View::canonical`], byte for byte.
    pub fn write(&self, known: Option<&Known>, out: &mut Out<'_>) {
        match self {
            View::Value(value) => out(&value.canonical()),
            View::Table(table) => {
                let mut entries: Vec<(&str, Record<'_>)> = (0..table.len()).map(|i| table.entry(i)).collect();
                entries.sort_unstable_by_key(|(key, _)| *key);
                object(entries, out, |record, out| match known.and_then(|k| k.texts.get(&record.identity)) {
                    Some(text) => out(text),
                    None => out(&record.value.canonical()),
                });
            }
            View::Object(members) => {
                let mut members: Vec<(&str, &View<'_>)> = members.iter().map(|(name, view)| (*name, view)).collect();
                members.sort_unstable_by_key(|(name, _)| *name);
                object(members, out, |view, out| view.write(known, out));
            }
        }
    }
}

/// Where a text written in pieces goes, piece by piece.
pub type Out<'o> = dyn FnMut(&str) + 'o;

/// A JSON object as the canonical writer writes one, from its members in sorted order.
fn object<T>(members: Vec<(&str, T)>, out: &mut Out<'_>, mut value: impl FnMut(T, &mut Out<'_>)) {
    out("{");
    let mut key = String::new();
    for (i, (name, member)) in members.into_iter().enumerate() {
        key.clear();
        if i > 0 {
            key.push_str(", ");
        }
        crate::pyjson::write_key(name, &mut key);
        key.push_str(": ");
        out(&key);
        value(member, out);
    }
    out("}");
}

/// What is known of one state (a domain's base) for hashing the states derived from it: its
/// records' canonical texts, so that writing a derived state (which shares most of them) costs
/// only the records it changed, and the hashes of derived states already hashed.
///
/// The texts are keyed by the records' addresses, which stay theirs because `Known` keeps the
/// state it was built from: nothing else can live at those addresses while it exists.
pub struct Known {
    state: Box<dyn DomainState>,
    texts: HashMap<usize, Box<str>>,
    /// Digests by database and by what the derived state changed (see [`Known::hash`]).
    hashes: Mutex<HashMap<(Requestor, String), String>>,
}

/// The most digests kept, and the longest change list worth a digest kept: sessions of a task
/// mostly end in a few states (untouched, the gold one), each a few records away from the base.
const HASHES_KEPT: usize = 4096;
const CHANGES_KEPT: usize = 64 * 1024;

impl Known {
    /// The texts of every record of `state`'s tables (both databases).
    pub fn of(state: &dyn DomainState) -> Known {
        // A clone shares every record with `state`, at the same addresses, and keeps them.
        let state = state.clone_box();
        let mut texts = HashMap::new();
        for toolkit in [Requestor::Assistant, Requestor::User] {
            if let Some(view) = state.view(toolkit) {
                collect(&view, &mut texts);
            }
        }
        Known { state, texts, hashes: Mutex::default() }
    }

    /// The sha256 of the canonical text of `view`, one of the databases of a state derived from
    /// this one (`database` says which).
    ///
    /// Its parts that differ from this state's, each with its path and text (`None` where
    /// removed), determine the whole text given this state's: two derived states with the same
    /// list have the same text, so the same digest, and a list seen before costs a lookup.
    pub fn hash(&self, database: Requestor, view: &View<'_>) -> String {
        let digest = || crate::hash::sha256_hex_of(|out| view.write(Some(self), out));
        let Some(base) = self.state.view(database) else { return digest() };
        let mut changes = String::new();
        parts("", &base, view, &mut |path, before, after| {
            if before != after {
                // Lengths first, so that no two lists run together into one string.
                let after = after.map_or_else(|| "-".to_owned(), |text| format!("{}:{text}", text.len()));
                changes.push_str(&format!("{}:{path}{after};", path.len()));
            }
        });
        if changes.len() > CHANGES_KEPT {
            return digest();
        }
        let key = (database, changes);
        if let Some(hash) = self.hashes.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return hash.clone();
        }
        let hash = digest();
        let mut hashes = self.hashes.lock().unwrap_or_else(|e| e.into_inner());
        if hashes.len() >= HASHES_KEPT {
            hashes.clear();
        }
        hashes.insert(key, hash.clone());
        hash
    }
}

fn collect(view: &View<'_>, texts: &mut HashMap<usize, Box<str>>) {
    match view {
        View::Value(_) => {}
        View::Table(table) => {
            for i in 0..table.len() {
                let record = table.entry(i).1;
                texts.entry(record.identity).or_insert_with(|| record.value.canonical().into());
            }
        }
        View::Object(members) => members.iter().for_each(|(_, view)| collect(view, texts)),
    }
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
