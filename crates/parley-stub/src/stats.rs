//! Request counters: totals, answers by status, and requests per conversation and per turn.
//!
//! Benchmarks push thousands of requests a second through the stub, so a request costs one
//! atomic add and two short critical sections over maps keyed by integers; strings are only
//! built when someone reads the stats.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};

use crate::hash::{Fnv, hex};

/// A cheap, cloneable handle on the stub's counters. Every clone sees the same counts.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    requests: AtomicU64,
    tables: Mutex<Tables>,
}

#[derive(Debug, Default)]
struct Tables {
    by_status: HashMap<u16, u64>,
    conversations: HashMap<u64, u64>,
    turns: HashMap<(u64, usize), u64>,
}

impl Stats {
    /// Requests received on the two model endpoints, counted on arrival (so a request still
    /// hanging is counted), malformed ones included.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// Answers sent, by HTTP status, sorted by status.
    pub fn by_status(&self) -> Vec<(u16, u64)> {
        sorted(self.tables().by_status.iter().map(|(&s, &n)| (s, n)))
    }

    /// Well-formed requests per conversation key, sorted by key.
    pub fn conversation_requests(&self) -> Vec<(String, u64)> {
        sorted(self.tables().conversations.iter().map(|(&key, &n)| (hex(key), n)))
    }

    /// Well-formed requests per conversation key and number of messages (one turn of one
    /// conversation), sorted.
    pub fn turn_requests(&self) -> Vec<(String, usize, u64)> {
        sorted(self.tables().turns.iter().map(|(&(key, messages), &n)| (hex(key), messages, n)))
    }

    /// The turns requested more than once: empty after a run with no retries and a resume
    /// that redid no work.
    pub fn repeated_turns(&self) -> Vec<(String, usize, u64)> {
        let mut turns = self.turn_requests();
        turns.retain(|&(_, _, n)| n > 1);
        turns
    }

    /// The document `GET /stub/stats` serves.
    pub fn to_json(&self) -> Value {
        let tables = self.tables();
        let by_status: BTreeMap<String, u64> = tables.by_status.iter().map(|(s, &n)| (s.to_string(), n)).collect();
        let conversations: BTreeMap<String, u64> =
            tables.conversations.iter().map(|(&key, &n)| (hex(key), n)).collect();
        let turns: BTreeMap<String, u64> =
            tables.turns.iter().map(|(&(key, messages), &n)| (format!("{}/{messages}", hex(key)), n)).collect();
        drop(tables);
        json!({
            "requests": self.requests(),
            "by_status": by_status,
            "conversations": conversations,
            "turns": turns,
        })
    }

    /// Counts a request; answers how many came before it.
    pub(crate) fn record_request(&self) -> u64 {
        self.inner.requests.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn record_turn(&self, conversation: u64, messages: usize) {
        let mut tables = self.tables();
        *tables.conversations.entry(conversation).or_default() += 1;
        *tables.turns.entry((conversation, messages)).or_default() += 1;
    }

    pub(crate) fn record_status(&self, status: u16) {
        *self.tables().by_status.entry(status).or_default() += 1;
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // Counting never panics while holding the lock, but a poisoned counter table is still
        // better read than turned into a panic in a test double.
        self.inner.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The conversation key the stub uses in its stats: 16 hex digits of FNV-1a over the system
/// text, a `0xff` separator byte (never part of UTF-8), and the first user message's text.
/// Either text is empty when the conversation has none.
pub fn conversation_key(system: &str, first_user: &str) -> String {
    hex(conversation_hash(system, first_user))
}

pub(crate) fn conversation_hash(system: &str, first_user: &str) -> u64 {
    Fnv::new().bytes(system.as_bytes()).bytes(&[0xff]).bytes(first_user.as_bytes()).finish()
}

fn sorted<T: Ord>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut items: Vec<T> = items.collect();
    items.sort_unstable();
    items
}
