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
//! runs: a few words per session, never the transcript.
//!
//! A request stored whole (a session's first, most often) whose tool list is long keeps the list
//! once in `texts`, under the id a long system prompt would have (see `shared`), and names it:
//!
//! ```json
//! {"messages": [...], "model": "m", ..., "parley_delta": {"texts": {"tools": 7203185745163201330}}}
//! ```
//!
//! Every session of a run sends its first request with the same tools, a kilobyte or more, and
//! the store writes them once. Reconstruction puts each field the marker's `texts` names back,
//! parsed from the text stored under its id. A list whose id holds another text is stored in its
//! request, which is then stored whole ([`Apart::whole`]).
//!
//! Turn after turn, a body is most often the previous one with items added to its list and
//! nothing else changed: its text before the list and after it hash as the previous body's did.
//! Such a body is not read again, only its new items are scanned, to see that they stay in the
//! list; its delta is the previous turn's other fields (kept with the text of their values, less
//! the tools: a few dozen bytes, and never more than [`TEMPLATE_MAX`]) around them. Any other
//! body is read into its fields.
//!
//! A body is a [`RawJson`], one JSON document, so reading it needs no parse: its fields are
//! found by its brackets and strings alone (`scan`), and a delta is written from the texts of
//! the body's own values, as serde_json writes a map of them.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};

use parley_core::{RawJson, Role, SessionId, TurnRecord};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::shared::TextIds;

mod scan;

/// The key that marks a delta. No OpenAI request has it.
pub const DELTA_KEY: &str = "parley_delta";

/// The shortest tool list kept apart in `texts`, in bytes: as for a system prompt, below this the
/// id and the look-up cost about what they save.
const APART_MIN: usize = crate::shared::SHARED_TEXT;

/// A request's tool list kept apart from its stored text: the writer stores `text` in `texts`
/// under `id` and the request as [`Deltas::encode`] left it, or, when the id holds another
/// text, the request as it was sent (`whole`).
pub(crate) struct Apart {
    /// The seq of the message the call produced.
    pub seq: u32,
    pub id: i64,
    pub text: Arc<str>,
    pub whole: RawJson,
}

/// How a request is stored.
enum Stored {
    /// As it was sent.
    Whole,
    /// As a delta against an earlier call.
    Delta(RawJson),
    /// As it was sent less its tool list, which `texts` keeps under `id`.
    Apart { body: RawJson, id: i64, text: Arc<str> },
}

/// The id of the tool list last kept apart, and its text: most runs offer every session the same
/// list, whose id is then computed once.
struct ToolIds(Mutex<TextIds>);

impl Default for ToolIds {
    fn default() -> ToolIds {
        ToolIds(Mutex::new(TextIds::new(1)))
    }
}

impl ToolIds {
    fn of(&self, text: &str) -> (i64, Arc<str>) {
        let mut last = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (id, text) = last.of(text);
        (id, Arc::clone(text))
    }
}

/// A body written without its tools and with a marker naming them in `texts`: the body's other
/// fields in key order, each as it was written, then the marker.
fn without_tools(fields: &BTreeMap<&str, &str>, id: i64) -> RawJson {
    let mut out = Object::with_capacity(fields.values().map(|v| v.len() + 16).sum());
    for (key, value) in fields.iter().filter(|(key, _)| **key != "tools") {
        out.entry(key, value);
    }
    out.entry(DELTA_KEY, &format!(r#"{{"texts":{{"tools":{id}}}}}"#));
    out.end()
}

/// An object written as serde_json writes a map, from its keys (plain text: a body's keys are
/// read only when they hold no escapes) and the texts of its values.
struct Object(String);

impl Object {
    fn with_capacity(len: usize) -> Object {
        let mut text = String::with_capacity(len + 2);
        text.push('{');
        Object(text)
    }

    fn entry(&mut self, key: &str, value: &str) {
        self.key(key).push_str(value);
    }

    /// Writes `key` and its colon, for its value's text to follow.
    fn key(&mut self, key: &str) -> &mut String {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push('"');
        self.0.push_str(key);
        self.0.push_str("\":");
        &mut self.0
    }

    /// The object: one JSON document, as its keys and values are.
    fn end(mut self) -> RawJson {
        self.0.push('}');
        RawJson::known(self.0)
    }
}

/// What is remembered of the previous request of one session and party.
struct Last {
    seq: u32,
    /// Where its list's text (`messages` or `input`) starts in the body, and the hash of the
    /// body's text before it.
    list_at: usize,
    head_hash: u64,
    /// Byte length of the list's text without the closing `]`, and the hash of that text.
    open_len: usize,
    open_hash: u64,
    /// Byte length of the body's text from the list's closing `]` to its end, and its hash.
    tail_len: usize,
    tail_hash: u64,
    tools_hash: Option<u64>,
    /// The delta of a body whose fields but the list are this one's, when they are short
    /// enough to keep (a few dozen bytes, most often: see [`TEMPLATE_MAX`]).
    template: Option<Template>,
}

/// The longest template kept for a session's next turn, in bytes. A body whose other fields
/// are longer (long `instructions`, a large `response_format`) is parsed each turn instead, so
/// that what is kept of a session stays small at 100,000 sessions.
const TEMPLATE_MAX: usize = 1024;

/// A delta less its list's new items and its marker: each field but the tools (left out as the
/// same), in key order, with its value as the body has it; the list's value is its new items,
/// `None` here. A delta is written from it by copying each value's text: the new items are the
/// only text of a delta scanned (see `scan::stays_in_list`).
#[derive(Clone)]
struct Template {
    fields: Arc<[Field]>,
    /// The length of the fields' text, as a delta writes them.
    len: usize,
    list: &'static str,
    same_tools: bool,
}

/// A field of a [`Template`]: its key, and its value's text (`None` for the list).
type Field = (Box<str>, Option<Box<str>>);

/// The marker's fields, in the order a `serde_json::Value` writes them.
#[derive(Serialize)]
struct Marker<'a> {
    base: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    list: Option<&'static str>,
    same: &'a [&'a str],
}

/// The new items of a list, `a,b` of `[...,a,b]`, when they stay in it (see
/// `scan::stays_in_list`). Text that closed the list and opened other fields is refused: it
/// would have made a delta with fields the body has not.
fn new_items(text: &str) -> Option<&str> {
    scan::stays_in_list(text).then_some(text)
}

#[derive(Default)]
pub(crate) struct Deltas {
    last: Mutex<HashMap<(SessionId, Role), Last>>,
    tools: ToolIds,
}

/// The hash of a text. 64 bits of a hash of good quality, where SipHash (the standard
/// library's) was 1% of a rollout's CPU: a turn hashes its body's text before the list, the
/// list and the text after it (the tools, most of it).
fn hash(text: &str) -> u64 {
    let mut h = foldhash::quality::FixedState::with_seed(0x7061_726c_6579).build_hasher();
    h.write(text.as_bytes());
    h.finish()
}

/// The hash of `open`, and whether its first `prev_len` bytes hash to `prev_hash`.
fn extends(open: &str, prev_len: usize, prev_hash: u64) -> (bool, u64) {
    let same = open.get(..prev_len).is_some_and(|prefix| hash(prefix) == prev_hash);
    (same, hash(open))
}

impl Deltas {
    /// Rewrites the turn's requests as deltas where it can, and remembers them for the next
    /// turn. `finished` forgets the session.
    ///
    /// The map is locked only to take a session's entry out and put the next one in: sessions
    /// on other threads encode their own turns meanwhile.
    ///
    /// Returns the tool lists it kept apart from the requests it stored whole, for the writer to
    /// store in `texts`.
    pub(crate) fn encode(&self, session: SessionId, turn: &mut TurnRecord, finished: bool) -> Vec<Apart> {
        let mut apart = Vec::new();
        for record in &mut turn.messages {
            let Some(call) = &mut record.call else { continue };
            let key = (session, record.message.role);
            let prev = self.lock().remove(&key);
            let body = call.request.get();
            let Some((next, stored)) = prev
                .as_ref()
                .and_then(|prev| extended(prev, record.seq, body))
                .or_else(|| parsed(prev.as_ref(), record.seq, body, &self.tools))
            else {
                continue;
            };
            if !finished {
                self.lock().insert(key, next);
            }
            match stored {
                Stored::Delta(delta) => call.request = delta,
                Stored::Apart { body, id, text } => {
                    let whole = std::mem::replace(&mut call.request, body);
                    apart.push(Apart { seq: record.seq, id, text, whole });
                }
                Stored::Whole => {}
            }
        }
        if finished {
            self.forget(session);
        }
        apart
    }

    /// Forgets the session's entries: one for each role that makes calls, found by key.
    pub(crate) fn forget(&self, session: SessionId) {
        let mut last = self.lock();
        for role in Role::ALL {
            last.remove(&(session, role));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(SessionId, Role), Last>> {
        self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The quick way, taken turn after turn: a body whose text is the previous one's with items added
/// to its list, and nothing else changed, becomes its delta without being parsed again (only the
/// new items are). `None` when the body is not such an extension, or when the quick way cannot
/// tell.
fn extended(prev: &Last, seq: u32, body: &str) -> Option<(Last, Stored)> {
    let tail_at = body.len().checked_sub(prev.tail_len)?;
    let template = prev.template.as_ref()?;
    let (head, list, tail) = (body.get(..prev.list_at)?, body.get(prev.list_at..tail_at)?, body.get(tail_at..)?);
    if hash(head) != prev.head_hash || hash(tail) != prev.tail_hash {
        return None;
    }
    let (same, open_hash) = extends(list, prev.open_len, prev.open_hash);
    let added = list.get(prev.open_len..).filter(|_| same)?;
    let items = new_items(if prev.open_len > 1 { added.strip_prefix(',')? } else { added })?;
    let delta = template.delta(items, prev.seq);
    let next = Last { seq, open_len: list.len(), open_hash, template: Some(template.clone()), ..*prev };
    Some((next, Stored::Delta(delta)))
}

/// The slow way: the body read into its fields, as on a session's first turn or when a turn
/// changes more than its list. `None` when the body has no list.
fn parsed(prev: Option<&Last>, seq: u32, body: &str, tools: &ToolIds) -> Option<(Last, Stored)> {
    let fields = scan::fields(body)?;
    let list = if fields.contains_key("messages") { "messages" } else { "input" };
    let messages = fields.get(list).copied().filter(|m| m.ends_with(']'))?;
    // The list's text is a slice of the body's.
    let list_at = messages.as_ptr() as usize - body.as_ptr() as usize;
    let open = &messages[..messages.len() - 1];
    let tail = &body[list_at + open.len()..];
    let tools_hash = fields.get("tools").map(|t| hash(t));
    // The next turn's fields are most likely this one's, its tools among them.
    let template = Template::of(&fields, list, tools_hash.is_some());
    let (delta, open_hash) = match prev {
        Some(prev) if open.is_char_boundary(prev.open_len) => {
            let (same, whole) = extends(open, prev.open_len, prev.open_hash);
            let same_tools = tools_hash.is_some() && tools_hash == prev.tools_hash;
            let rest = &open[prev.open_len..];
            let items = same.then(|| new_items(rest.strip_prefix(',').unwrap_or(rest))).flatten();
            // The template above, unless the tools changed since the previous turn.
            let delta = items.map(|items| match template.same_tools == same_tools {
                true => template.delta(items, prev.seq),
                false => Template::of(&fields, list, same_tools).delta(items, prev.seq),
            });
            (delta, whole)
        }
        _ => (None, hash(open)),
    };
    let template = Some(template).filter(|t| t.len <= TEMPLATE_MAX);
    let next = Last {
        seq,
        list_at,
        head_hash: hash(&body[..list_at]),
        open_len: open.len(),
        open_hash,
        tail_len: tail.len(),
        tail_hash: hash(tail),
        tools_hash,
        template,
    };
    let stored = match delta {
        Some(delta) => Stored::Delta(delta),
        // Stored whole: its tool list apart, when it is long (and whole as sent, should the rest
        // fail to be written).
        None => match fields.get("tools").filter(|t| t.len() >= APART_MIN) {
            Some(list) => {
                let (id, text) = tools.of(list);
                Stored::Apart { body: without_tools(&fields, id), id, text }
            }
            None => Stored::Whole,
        },
    };
    Some((next, stored))
}

impl Template {
    fn of(fields: &BTreeMap<&str, &str>, list: &'static str, same_tools: bool) -> Template {
        // The keys are plain text: a key written with escapes is not read (see `scan::fields`).
        let fields: Arc<[Field]> = fields
            .iter()
            .filter(|(key, _)| !(**key == "tools" && same_tools))
            .map(|(key, value)| (Box::from(*key), (*key != list).then(|| Box::from(*value))))
            .collect();
        let len = fields.iter().map(|(k, v)| k.len() + 4 + v.as_ref().map_or(2, |v| v.len())).sum();
        Template { fields, len, list, same_tools }
    }

    /// The delta of a body whose list's new `items` follow the items of the call at `base`: the
    /// template's fields with the new items in the list's place, then the marker.
    fn delta(&self, items: &str, base: u32) -> RawJson {
        let mut out = Object::with_capacity(self.len + items.len() + 48);
        for (key, value) in self.fields.iter() {
            match value {
                Some(value) => out.entry(key, value),
                None => {
                    let list = out.key(key);
                    list.push('[');
                    list.push_str(items);
                    list.push(']');
                }
            }
        }
        let same: &[&str] = if self.same_tools { &["tools"] } else { &[] };
        let list = (self.list != "messages").then_some(self.list);
        // A struct of a number, a name and names: it serializes.
        let marker = serde_json::to_string(&Marker { base, list, same }).expect("a marker serializes");
        out.entry(DELTA_KEY, &marker);
        out.end()
    }
}

/// The whole request from a stored one, given the stored requests of the same session by seq
/// and the store's `texts` by id. Returns `None` when a base or a text it names is missing.
pub fn reconstruct(
    stored: &Value,
    by_seq: &impl Fn(u32) -> Option<Value>,
    text: &impl Fn(i64) -> Option<String>,
) -> Option<Value> {
    let Some(marker) = stored.get(DELTA_KEY) else { return Some(stored.clone()) };
    if let Some(texts) = marker.get("texts") {
        let mut out: Map<String, Value> = stored.as_object()?.clone();
        out.remove(DELTA_KEY);
        for (key, id) in texts.as_object()? {
            out.insert(key.clone(), serde_json::from_str(&text(id.as_i64()?)?).ok()?);
        }
        return Some(Value::Object(out));
    }
    let base_seq = u32::try_from(marker.get("base")?.as_u64()?).ok()?;
    let base = reconstruct(&by_seq(base_seq)?, by_seq, text)?;
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

    fn delta_of(stored: Stored) -> RawJson {
        match stored {
            Stored::Delta(delta) => delta,
            _ => panic!("not stored as a delta"),
        }
    }

    /// A store holding no text.
    fn no_text(_: i64) -> Option<String> {
        None
    }

    fn call_of(turn: &TurnRecord) -> &str {
        turn.messages[0].call.as_ref().unwrap().request.get()
    }

    #[test]
    fn the_quick_way_writes_the_delta_the_parse_writes() {
        let tools = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
        let m = |i: u32| json!({"role": "user", "content": format!("message {i} \"quoted\" é")});
        let body = |n: u32| {
            let messages: Vec<Value> = (0..n).map(m).collect();
            json!({"logprobs": true, "messages": messages, "model": "a", "seed": 3, "tools": tools}).to_string()
        };
        let mut prev = parsed(None, 2, &body(2), &ToolIds::default()).unwrap().0;
        let mut prev_n = 2;
        for (seq, n) in [(4, 3), (6, 5), (8, 6)] {
            let text = body(n);
            let (quick, quick_delta) = extended(&prev, seq, &text).expect("an extension is taken the quick way");
            let (slow, slow_delta) = parsed(Some(&prev), seq, &text, &ToolIds::default()).unwrap();
            let (quick_delta, slow_delta) = (delta_of(quick_delta), delta_of(slow_delta));
            assert_eq!(quick_delta.get(), slow_delta.get(), "seq {seq}");
            assert_eq!(quick_delta.to_value()["messages"], json!((prev_n..n).map(m).collect::<Vec<_>>()));
            let fields = |l: &Last| {
                (l.seq, l.list_at, l.head_hash, l.open_len, l.open_hash, l.tail_len, l.tail_hash, l.tools_hash)
            };
            assert_eq!(fields(&quick), fields(&slow));
            let template = |l: &Last| {
                let t = l.template.as_ref()?;
                Some(t.fields.iter().map(|(k, v)| (k.to_string(), v.as_deref().map(str::to_owned))).collect::<Vec<_>>())
            };
            assert_eq!(template(&quick), template(&slow));
            assert!(quick.template.is_some());
            (prev, prev_n) = (quick, n);
        }
        // Another model, or other tools: the body is parsed.
        let other = body(7).replace("\"model\":\"a\"", "\"model\":\"b\"");
        assert!(extended(&prev, 10, &other).is_none());
    }

    #[test]
    fn long_other_fields_are_not_kept_and_the_body_is_parsed_each_turn() {
        let instructions = "Answer in French. ".repeat(200);
        let item = |i: u32| json!({"type": "message", "role": "user", "content": format!("question {i}")});
        let requests: Vec<(u32, Value)> = (1..=3)
            .map(|n| {
                (
                    2 * n,
                    json!({"model": "r", "instructions": instructions, "input": (0..n).map(item).collect::<Vec<_>>()}),
                )
            })
            .collect();
        let deltas = Deltas::default();
        let mut stored = BTreeMap::new();
        for (seq, request) in &requests {
            let mut t = turn(*seq, Role::Assistant, request.clone());
            deltas.encode(3, &mut t, false);
            assert!(
                deltas.lock()[&(3, Role::Assistant)].template.is_none(),
                "{} bytes of other fields kept",
                instructions.len()
            );
            stored.insert(*seq, serde_json::from_str::<Value>(call_of(&t)).unwrap());
        }
        assert_eq!(stored[&6][DELTA_KEY], json!({"base": 4, "same": [], "list": "input"}));
        let by_seq = |seq: u32| stored.get(&seq).cloned();
        for (seq, request) in &requests {
            assert_eq!(reconstruct(&stored[seq], &by_seq, &no_text).as_ref(), Some(request), "seq {seq}");
        }
    }

    /// The stored text of a delta, byte for byte, as stores written by earlier versions hold it:
    /// the fields but the list and the tools as the body wrote them, in key order, then the
    /// marker; both ways to it write the same.
    #[test]
    fn a_delta_is_written_as_the_stores_hold_them() {
        let chat = |n: usize| {
            let messages = (0..n).map(|i| format!(r#"{{"content":"m{i} \"q\" é","role":"user"}}"#)).collect::<Vec<_>>();
            format!(r#"{{"messages":[{}],"model":"a","seed":3,"tools":[{{"type":"function"}}]}}"#, messages.join(","))
        };
        let prev = parsed(None, 2, &chat(1), &ToolIds::default()).unwrap().0;
        let quick = delta_of(extended(&prev, 4, &chat(3)).unwrap().1);
        let slow = delta_of(parsed(Some(&prev), 4, &chat(3), &ToolIds::default()).unwrap().1);
        let expected = r#"{"messages":[{"content":"m1 \"q\" é","role":"user"},{"content":"m2 \"q\" é","role":"user"}],"model":"a","seed":3,"parley_delta":{"base":2,"same":["tools"]}}"#;
        assert_eq!((quick.get(), slow.get()), (expected, expected));

        let responses = |n: usize| {
            let input = (0..n).map(|i| format!(r#"{{"content":"i{i}","role":"user"}}"#)).collect::<Vec<_>>();
            format!(r#"{{"input":[{}],"model":"r"}}"#, input.join(","))
        };
        let prev = parsed(None, 1, &responses(0), &ToolIds::default()).unwrap().0;
        let delta = delta_of(extended(&prev, 3, &responses(2)).unwrap().1);
        let expected = r#"{"input":[{"content":"i0","role":"user"},{"content":"i1","role":"user"}],"model":"r","parley_delta":{"base":1,"list":"input","same":[]}}"#;
        assert_eq!(delta.get(), expected);
    }

    #[test]
    fn new_text_that_closes_the_list_and_adds_a_field_is_parsed() {
        let first = r#"{"messages":[{"role":"user","content":"a"}],"model":"a"}"#;
        // The same text before the list and after it, and a field added after the new item.
        let second =
            r#"{"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"x":[1],"model":"a"}"#;
        let prev = parsed(None, 2, first, &ToolIds::default()).unwrap().0;
        assert!(extended(&prev, 4, second).is_none(), "the quick way took a body with a new field");
        let deltas = Deltas::default();
        let mut stored = BTreeMap::new();
        for (seq, body) in [(2, first), (4, second)] {
            let mut t = turn(seq, Role::Assistant, serde_json::from_str(body).unwrap());
            deltas.encode(1, &mut t, false);
            stored.insert(seq, serde_json::from_str::<Value>(call_of(&t)).unwrap());
        }
        assert_eq!(stored[&4][DELTA_KEY]["base"], 2);
        let by_seq = |seq: u32| stored.get(&seq).cloned();
        assert_eq!(reconstruct(&stored[&4], &by_seq, &no_text), Some(serde_json::from_str(second).unwrap()));
    }

    #[test]
    fn a_finished_session_is_forgotten_and_others_kept() {
        let request = |n: usize| json!({"model": "a", "messages": vec![json!({"role": "user", "content": "q"}); n]});
        let deltas = Deltas::default();
        for session in [1, 2] {
            deltas.encode(session, &mut turn(2, Role::Assistant, request(1)), false);
            deltas.encode(session, &mut turn(3, Role::User, request(1)), false);
        }
        assert_eq!(deltas.lock().len(), 4);
        // The last turn is still written as a delta, and leaves nothing of its session behind,
        // the user's entry included.
        let mut last = turn(4, Role::Assistant, request(2));
        deltas.encode(1, &mut last, true);
        assert!(call_of(&last).contains(DELTA_KEY), "{}", call_of(&last));
        let left: Vec<_> = deltas.lock().keys().copied().collect();
        assert!(left.iter().all(|(s, _)| *s == 2) && left.len() == 2, "{left:?}");
        deltas.forget(2);
        assert!(deltas.lock().is_empty());
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
            if *seq == 4 {
                // The marker's keys as a `serde_json::Value` writes them, as stored before.
                assert!(call_of(&t).ends_with(r#","parley_delta":{"base":2,"same":["tools"]}}"#), "{}", call_of(&t));
            }
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
            assert_eq!(reconstruct(&stored[seq], &by_seq, &no_text).as_ref(), Some(request), "seq {seq}");
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
        assert_eq!(reconstruct(&stored[&22], &by_seq, &no_text).as_ref(), Some(&responses[1].1));
        deltas.forget(2);
        // A finished session is forgotten.
        deltas.encode(1, &mut TurnRecord::default(), true);
        assert!(deltas.last.lock().unwrap().is_empty());
    }

    /// A first request's long tool list is kept apart, named by its id, and put back on reading;
    /// the next call's delta takes the tools from it as before. A short list stays in its request.
    #[test]
    fn a_long_tool_list_is_kept_apart_and_put_back() {
        let function = |i: usize| {
            json!({"type": "function", "function": {"name": format!("tool_{i}"),
            "description": "looks a thing up ☃", "parameters": {"type": "object"}}})
        };
        let tools = Value::Array((0..4).map(function).collect());
        let m = |i: u32| json!({"role": "user", "content": format!("message {i}")});
        let request = |n: u32, tools: &Value| json!({"messages": (0..n).map(m).collect::<Vec<_>>(), "model": "a", "seed": 3, "tools": tools});
        let deltas = Deltas::default();
        let mut texts = BTreeMap::new();
        let mut stored = BTreeMap::new();
        for (seq, n) in [(2, 1), (4, 2)] {
            let mut t = turn(seq, Role::Assistant, request(n, &tools));
            let sent = t.messages[0].call.as_ref().unwrap().request.clone();
            for apart in deltas.encode(1, &mut t, false) {
                assert_eq!((apart.seq, apart.whole.get()), (seq, sent.get()), "the request as sent, for a taken id");
                assert_eq!(serde_json::from_str::<Value>(&apart.text).unwrap(), tools);
                texts.insert(apart.id, apart.text.to_string());
            }
            stored.insert(seq, t.messages[0].call.as_ref().unwrap().request.to_value());
        }
        assert_eq!(texts.len(), 1, "the first request keeps its list apart, the next names its base's");
        let id = *texts.keys().next().unwrap();
        assert_eq!(stored[&2][DELTA_KEY], json!({"texts": {"tools": id}}));
        assert!(stored[&2].get("tools").is_none());
        assert_eq!(stored[&4][DELTA_KEY], json!({"base": 2, "same": ["tools"]}));
        let by_seq = |seq: u32| stored.get(&seq).cloned();
        let text = |id: i64| texts.get(&id).cloned();
        for (seq, n) in [(2, 1), (4, 2)] {
            assert_eq!(reconstruct(&stored[&seq], &by_seq, &text), Some(request(n, &tools)), "seq {seq}");
        }
        assert_eq!(reconstruct(&stored[&4], &by_seq, &no_text), None, "a text it names is missing");
        // Another session with the same list names the same id, computed once.
        let mut t = turn(2, Role::Assistant, request(1, &tools));
        let again = deltas.encode(2, &mut t, false);
        assert_eq!(again.iter().map(|a| a.id).collect::<Vec<_>>(), [id]);
        // A short list stays in its request, which is stored as it was sent.
        let short = json!([function(0)]);
        let mut t = turn(2, Role::Assistant, request(1, &short));
        assert!(deltas.encode(3, &mut t, false).is_empty());
        assert_eq!(t.messages[0].call.as_ref().unwrap().request.to_value(), request(1, &short));
    }
}
