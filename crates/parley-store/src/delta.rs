//! Raw requests stored as deltas. A Chat Completions request carries the whole transcript, so
//! storing every request whole stores the transcript again at every turn: quadratic in the
//! session's length, and most of what the store writes. Instead, a request whose `messages`
//! begin with every message of the previous request of the same session and party is stored as
//! the messages after them, with a marker naming that previous call:
//!
//! ```json
//! {"messages": [<the new messages>], "model": "m", ..., "parley_delta": {"base": 4, "same": ["tools"]}}
//! ```
//!
//! A Responses request carries its transcript in `input` instead; its marker then names the list,
//! `"parley_delta": {"base": 4, "same": [], "list": "input"}`, and `input` is read wherever
//! `messages` is said below.
//!
//! Reconstruction (see [`reconstruct`]): take the request stored at seq `base` of the same session
//! (reconstructed the same way first), append this row's `messages` to its `messages`, take the
//! keys listed in `same` from it, and every other key from this row; drop `parley_delta`. The
//! first call of a session, a call whose transcript is not an extension of the previous one,
//! and every call after a resume are stored whole. Prefixes are recognised by length and a
//! 64-bit hash of the previous `messages` text, kept per session and party while the session
//! runs: a few words per session, never the text.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hasher};
use std::sync::Mutex;

use parley_core::{RawJson, Role, SessionId, TurnRecord};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The key that marks a delta. No OpenAI request has it.
pub const DELTA_KEY: &str = "parley_delta";

/// What is remembered of the previous request of one session and party.
struct Last {
    seq: u32,
    /// Byte length of its `messages` text without the closing `]`, and the hash of that text.
    open_len: usize,
    open_hash: u64,
    tools_hash: Option<u64>,
}

#[derive(Default)]
pub(crate) struct Deltas {
    last: Mutex<HashMap<(SessionId, Role), Last>>,
}

fn hash(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(text.as_bytes());
    h.finish()
}

/// The hash of `open`, and whether its first `prev_len` bytes hash to `prev_hash`: one pass
/// over the text, the prefix's state carried on into the whole's.
fn extends(open: &str, prev_len: usize, prev_hash: u64) -> (bool, u64) {
    let Some(prefix) = open.as_bytes().get(..prev_len) else { return (false, hash(open)) };
    let mut h = DefaultHasher::new();
    h.write(prefix);
    let same = h.finish() == prev_hash;
    h.write(&open.as_bytes()[prev_len..]);
    (same, h.finish())
}

impl Deltas {
    /// Rewrites the turn's requests as deltas where it can, and remembers them for the next
    /// turn. `finished` forgets the session.
    pub(crate) fn encode(&self, session: SessionId, turn: &mut TurnRecord, finished: bool) {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for record in &mut turn.messages {
            let Some(call) = &mut record.call else { continue };
            let key = (session, record.message.role);
            let Ok(fields) = serde_json::from_str::<BTreeMap<&str, &RawValue>>(call.request.get()) else {
                last.remove(&key);
                continue;
            };
            let list = if fields.contains_key("messages") { "messages" } else { "input" };
            let Some(messages) = fields.get(list).map(|m| m.get()).filter(|m| m.ends_with(']')) else {
                last.remove(&key);
                continue;
            };
            let open = &messages[..messages.len() - 1];
            let tools_hash = fields.get("tools").map(|t| hash(t.get()));
            let (delta, open_hash) = match last.get(&key) {
                Some(prev) if open.is_char_boundary(prev.open_len) => {
                    let (same, whole) = extends(open, prev.open_len, prev.open_hash);
                    (same.then(|| delta(&fields, list, &open[prev.open_len..], prev, tools_hash)), whole)
                }
                _ => (None, hash(open)),
            };
            last.insert(key, Last { seq: record.seq, open_len: open.len(), open_hash, tools_hash });
            if let Some(Ok(delta)) = delta {
                call.request = delta;
            }
        }
        if finished {
            last.retain(|(s, _), _| *s != session);
        }
    }

    pub(crate) fn forget(&self, session: SessionId) {
        self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(s, _), _| *s != session);
    }
}

/// The delta body: `rest` is what follows the previous messages in the text of this request's
/// `messages` (empty, or `,` and the new messages).
fn delta(
    fields: &BTreeMap<&str, &RawValue>,
    list: &str,
    rest: &str,
    prev: &Last,
    tools_hash: Option<u64>,
) -> Result<RawJson, serde_json::Error> {
    let same_tools = tools_hash.is_some() && tools_hash == prev.tools_hash;
    let mut out = String::with_capacity(rest.len() + 256);
    out.push('{');
    for (key, value) in fields {
        if *key == "tools" && same_tools {
            continue;
        }
        // Keys come out of a JSON object as they were written there: plain, or escaped.
        out.push_str(&serde_json::to_string(key)?);
        out.push(':');
        if *key == list {
            out.push('[');
            out.push_str(rest.strip_prefix(',').unwrap_or(rest));
            out.push(']');
        } else {
            out.push_str(value.get());
        }
        out.push(',');
    }
    let same: &[&str] = if same_tools { &["tools"] } else { &[] };
    out.push_str(&format!("\"{DELTA_KEY}\":"));
    let mut marker = serde_json::json!({"base": prev.seq, "same": same});
    if list != "messages" {
        marker["list"] = serde_json::json!(list);
    }
    out.push_str(&serde_json::to_string(&marker)?);
    out.push('}');
    RawJson::from_string(out)
}

/// The whole request from a stored one, given the stored requests of the same session by seq.
/// Returns `None` when a base it names is missing.
pub fn reconstruct(stored: &Value, by_seq: &impl Fn(u32) -> Option<Value>) -> Option<Value> {
    let Some(marker) = stored.get(DELTA_KEY) else { return Some(stored.clone()) };
    let base_seq = u32::try_from(marker.get("base")?.as_u64()?).ok()?;
    let base = reconstruct(&by_seq(base_seq)?, by_seq)?;
    let mut out: Map<String, Value> = stored.as_object()?.clone();
    out.remove(DELTA_KEY);
    for key in marker.get("same").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        out.insert(key.to_owned(), base.get(key)?.clone());
    }
    let list = marker.get("list").and_then(Value::as_str).unwrap_or("messages");
    let mut messages = base.get(list)?.as_array()?.clone();
    messages.extend(out.get(list).and_then(Value::as_array).cloned().unwrap_or_default());
    out.insert(list.into(), Value::Array(messages));
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::{Message, MessageRecord, ModelCall};
    use serde_json::json;

    fn turn(seq: u32, role: Role, request: Value) -> TurnRecord {
        TurnRecord {
            messages: vec![MessageRecord {
                seq,
                message: Message::text(role, "x"),
                call: Some(Box::new(ModelCall { request: RawJson::from(&request), ..ModelCall::default() })),
            }],
            tool_calls: Vec::new(),
        }
    }

    #[test]
    fn a_growing_conversation_is_stored_as_deltas_and_reconstructed_exactly() {
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]);
        let m = |i: u32| json!({"role": "user", "content": format!("message {i} \"quoted\"")});
        let requests = vec![
            (2, Role::Assistant, json!({"model": "a", "messages": [m(0), m(1)], "tools": tools, "seed": 1})),
            (3, Role::User, json!({"model": "u", "messages": [m(9)]})),
            (4, Role::Assistant, json!({"model": "a", "messages": [m(0), m(1), m(2), m(3)], "tools": tools})),
            // Not an extension of the previous request: stored whole.
            (6, Role::Assistant, json!({"model": "a", "messages": [m(7), m(1), m(2), m(3), m(4)], "tools": tools})),
            // The same messages again, and other tools.
            (8, Role::Assistant, json!({"model": "b", "messages": [m(7), m(1), m(2), m(3), m(4)], "tools": []})),
            (9, Role::User, json!({"model": "u", "messages": [m(9), m(10)]})),
        ];
        let deltas = Deltas::default();
        let mut stored = BTreeMap::new();
        for (seq, role, request) in &requests {
            let mut t = turn(*seq, *role, request.clone());
            deltas.encode(1, &mut t, false);
            stored.insert(*seq, t.messages[0].call.as_ref().unwrap().request.to_value());
        }
        assert!(stored[&2].get(DELTA_KEY).is_none() && stored[&6].get(DELTA_KEY).is_none());
        assert_eq!(stored[&4][DELTA_KEY], json!({"base": 2, "same": ["tools"]}));
        assert_eq!(stored[&4]["messages"], json!([m(2), m(3)]));
        assert!(stored[&4].get("tools").is_none() && stored[&4]["model"] == "a");
        assert_eq!(stored[&8][DELTA_KEY], json!({"base": 6, "same": []}));
        assert_eq!(stored[&9][DELTA_KEY]["base"], 3);
        let by_seq = |seq: u32| stored.get(&seq).cloned();
        for (seq, _, request) in &requests {
            assert_eq!(reconstruct(&stored[seq], &by_seq).as_ref(), Some(request), "seq {seq}");
        }
        // Responses requests grow their `input` list the same way.
        let item = |i: u32| {
            json!({"type": "message", "role": "user", "content": [{"type": "input_image",
            "image_url": format!("data:image/png;base64,{}", "A".repeat(4 * i as usize + 4))}]})
        };
        let responses = vec![
            (20, json!({"model": "r", "input": [item(0)], "store": false})),
            (22, json!({"model": "r", "input": [item(0), item(1)], "store": false})),
        ];
        for (seq, request) in &responses {
            let mut t = turn(*seq, Role::Assistant, request.clone());
            deltas.encode(2, &mut t, false);
            stored.insert(*seq, t.messages[0].call.as_ref().unwrap().request.to_value());
        }
        assert_eq!(stored[&22][DELTA_KEY], json!({"base": 20, "same": [], "list": "input"}));
        assert_eq!(stored[&22]["input"], json!([item(1)]), "the first item is not stored again");
        let by_seq = |seq: u32| stored.get(&seq).cloned();
        assert_eq!(reconstruct(&stored[&22], &by_seq).as_ref(), Some(&responses[1].1));
        deltas.forget(2);
        // A finished session is forgotten.
        deltas.encode(1, &mut TurnRecord::default(), true);
        assert!(deltas.last.lock().unwrap().is_empty());
    }
}
