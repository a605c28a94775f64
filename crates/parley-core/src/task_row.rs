//! A task row as it was read, with the parts a task also holds parsed elsewhere kept lean.
//!
//! Parsed, a NeMo Gym row is several times its text: every small JSON object is a `Value` map
//! of its own. A run holds every task in flight, so a [`TaskRow`] keeps two parts of its
//! `responses_create_params` apart:
//!
//! - **`tools`**, which the rows of a file repeat: behind an `Arc` that the run's rows with the
//!   same list share ([`TaskRow::share_tools`]), with its JSON text, written the first time a
//!   row is ([`SharedTools`]). The task's `tools` are the list parsed.
//! - **`input`**, as its JSON text ([`TaskRow::hold_input`]): the task's `messages` are what was
//!   read from it.
//!
//! Both are put back wherever the row goes out whole: serialized ([`Serialize`]), or as a value
//! ([`TaskRow::to_value`]). Read a field with [`TaskRow::get`] or [`TaskRow::pointer`], the tool
//! list with [`TaskRow::tools`].

use std::sync::{Arc, OnceLock};

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The object a row's tool list and input sit in, and their keys there (in key order).
const PARAMS: &str = "responses_create_params";
const INPUT: &str = "input";
const TOOLS: &str = "tools";

/// One task row: the JSON value read, with every ground-truth field a scorer needs.
#[derive(Debug, Clone, Default)]
pub struct TaskRow {
    /// The row, less `responses_create_params.tools` and `.input` while they are held apart.
    fields: Value,
    /// The row's tool list, held apart and shared; `None` when the row holds its own (or none).
    tools: Option<Arc<SharedTools>>,
    /// The row's input as JSON text, as serde_json writes it; `None` when the row holds its own.
    input: Option<Box<RawValue>>,
}

impl TaskRow {
    /// A row whose tool list (if it has one) is `tools`: `fields` is the row without it, as the
    /// store keeps it. A row with nowhere to put a list keeps none, as it was recorded.
    pub fn with_tools(fields: Value, tools: Arc<SharedTools>) -> TaskRow {
        match fields.get(PARAMS) {
            Some(Value::Object(params)) if !params.contains_key(TOOLS) => {
                TaskRow { fields, tools: Some(tools), input: None }
            }
            _ => TaskRow::from(fields),
        }
    }

    /// The row's tool list (`responses_create_params.tools`), wherever it is held.
    pub fn tools(&self) -> Option<&Value> {
        match &self.tools {
            Some(tools) => Some(&tools.list),
            None => self.fields.get(PARAMS)?.get(TOOLS),
        }
    }

    /// Holds the row's tool list in `list` when the two are equal, the row's own copy let go.
    /// Says whether the row now shares `list`.
    pub fn share_tools(&mut self, list: &Arc<SharedTools>) -> bool {
        if let Some(held) = &self.tools {
            if !Arc::ptr_eq(held, list) && held.list == list.list {
                self.tools = Some(Arc::clone(list));
            }
            return Arc::ptr_eq(self.tools.as_ref().expect("held"), list);
        }
        let Some(Value::Object(params)) = self.fields.get_mut(PARAMS) else { return false };
        if params.get(TOOLS) != Some(&list.list) {
            return false;
        }
        params.remove(TOOLS);
        self.tools = Some(Arc::clone(list));
        true
    }

    /// The row's own tool list, put apart to be shared: `None` when it has none to share.
    pub fn own_tools(&self) -> Option<Arc<SharedTools>> {
        match &self.tools {
            Some(tools) => Some(Arc::clone(tools)),
            None => self.tools().filter(|t| t.is_array()).map(|t| Arc::new(SharedTools::new(t.clone()))),
        }
    }

    /// Keeps `responses_create_params.input` as its JSON text from now on, once the task's
    /// messages have been read from it.
    pub fn hold_input(&mut self) {
        let Some(Value::Object(params)) = self.fields.get_mut(PARAMS) else { return };
        let Some(input) = params.remove(INPUT) else { return };
        match serde_json::value::to_raw_value(&input) {
            Ok(text) => self.input = Some(text),
            // A value always serializes; keep it in place should it not.
            Err(_) => {
                params.insert(INPUT.to_owned(), input);
            }
        }
    }

    /// The row's tool list when it is held apart (shared), `None` when the row holds its own.
    pub fn apart(&self) -> Option<&Arc<SharedTools>> {
        self.tools.as_ref()
    }

    /// The row to write without its tool list (as the store keeps a row whose list it keeps
    /// apart), the same bytes as the whole row less that one entry.
    pub fn without_tools(&self) -> impl Serialize + '_ {
        Whole { row: self, tools: false }
    }

    /// The row's fields, to read with what takes a `&Value`: `responses_create_params` without
    /// its `tools` and `input` when they are held apart (the task's `tools` and `messages` are
    /// what was read from them). Not the row to write: that is the [`TaskRow`].
    pub fn fields(&self) -> &Value {
        &self.fields
    }

    /// A top-level field of the row, as [`TaskRow::fields`] has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }

    /// The value at a JSON pointer ([`Value::pointer`]), the tool list included; the input,
    /// held as text, is not reached (the task's `messages` were read from it).
    pub fn pointer(&self, pointer: &str) -> Option<&Value> {
        if let Some(tools) = &self.tools
            && let Some(rest) = pointer.strip_prefix("/responses_create_params/tools")
            && (rest.is_empty() || rest.starts_with('/'))
        {
            return tools.pointer(rest);
        }
        self.fields.pointer(pointer)
    }

    pub fn is_object(&self) -> bool {
        self.fields.is_object()
    }

    /// The row's top-level fields in key order, each ready to be written whole.
    pub fn entries(&self) -> impl Iterator<Item = (&String, Field<'_>)> {
        self.entries_with(true)
    }

    fn entries_with(&self, tools: bool) -> impl Iterator<Item = (&String, Field<'_>)> {
        self.fields.as_object().into_iter().flatten().map(move |(key, value)| {
            let field = match value {
                Value::Object(params) if key == PARAMS && (self.held() || !tools) => Field::Params {
                    params,
                    input: self.input.as_deref(),
                    tools: self.tools.as_deref().filter(|_| tools),
                    skip_tools: !tools,
                },
                _ => Field::Plain(value),
            };
            (key, field)
        })
    }

    /// Whether a part of the row is held apart.
    fn held(&self) -> bool {
        self.tools.is_some() || self.input.is_some()
    }

    /// The row whole, as a value of its own.
    pub fn to_value(&self) -> Value {
        let mut whole = self.fields.clone();
        if let Some(Value::Object(params)) = whole.get_mut(PARAMS) {
            if let Some(tools) = &self.tools {
                params.insert(TOOLS.to_owned(), tools.list.clone());
            }
            if let Some(input) = &self.input {
                // Text serde_json wrote from a value reads back as that value.
                params.insert(INPUT.to_owned(), serde_json::from_str(input.get()).unwrap_or(Value::Null));
            }
        }
        whole
    }
}

impl From<Value> for TaskRow {
    fn from(fields: Value) -> TaskRow {
        TaskRow { fields, tools: None, input: None }
    }
}

/// `row["field"]`, as a `Value` reads: `Null` where the row has no such field.
impl std::ops::Index<&str> for TaskRow {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        &self.fields[key]
    }
}

/// Two rows are equal when their JSON is, wherever each holds its parts.
impl PartialEq for TaskRow {
    fn eq(&self, other: &TaskRow) -> bool {
        let same_input = self.input.as_ref().map(|i| i.get()) == other.input.as_ref().map(|i| i.get());
        if self.tools.is_some() == other.tools.is_some() && same_input {
            return self.fields == other.fields && self.tools == other.tools;
        }
        self.to_value() == other.to_value()
    }
}

impl PartialEq<Value> for TaskRow {
    fn eq(&self, other: &Value) -> bool {
        match self.held() {
            false => self.fields == *other,
            true => self.to_value() == *other,
        }
    }
}

/// The same bytes as [`TaskRow::to_value`] serialized, without building it.
impl Serialize for TaskRow {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Whole { row: self, tools: true }.serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for TaskRow {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<TaskRow, D::Error> {
        Value::deserialize(deserializer).map(TaskRow::from)
    }
}

/// A row written whole, or whole but for its tool list.
struct Whole<'a> {
    row: &'a TaskRow,
    tools: bool,
}

impl Serialize for Whole<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if !self.row.fields.is_object() || (self.tools && !self.row.held()) {
            return self.row.fields.serialize(serializer);
        }
        let mut map = serializer.serialize_map(None)?;
        for (key, field) in self.row.entries_with(self.tools) {
            map.serialize_entry(key, &field)?;
        }
        map.end()
    }
}

/// A tool list held apart from the rows that share it, with its JSON text, written once: a run
/// writes each rollout row with its task's list, and a list is most of a row's task fields
/// (a tree of small maps, each walked to write it).
#[derive(Debug, Default)]
pub struct SharedTools {
    list: Value,
    /// The list as serde_json writes it; `None` should it not write (a `Value` always does).
    text: OnceLock<Option<Box<RawValue>>>,
}

impl SharedTools {
    pub fn new(list: Value) -> SharedTools {
        SharedTools { list, text: OnceLock::new() }
    }

    /// The list's JSON text, written the first time it is asked for.
    pub fn text(&self) -> Option<&RawValue> {
        self.text.get_or_init(|| serde_json::value::to_raw_value(&self.list).ok()).as_deref()
    }
}

impl std::ops::Deref for SharedTools {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.list
    }
}

impl PartialEq for SharedTools {
    fn eq(&self, other: &SharedTools) -> bool {
        self.list == other.list
    }
}

/// The list's text, the same bytes as the list written.
impl Serialize for SharedTools {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.text() {
            Some(text) => text.serialize(serializer),
            None => self.list.serialize(serializer),
        }
    }
}

/// A top-level field of a [`TaskRow`], written as the whole row has it.
#[derive(Debug, Clone, Copy)]
pub enum Field<'a> {
    Plain(&'a Value),
    /// `responses_create_params`, its parts held apart put back in key order.
    Params {
        params: &'a Map<String, Value>,
        input: Option<&'a RawValue>,
        tools: Option<&'a SharedTools>,
        /// Leaves out a tool list the map holds itself.
        skip_tools: bool,
    },
}

impl Serialize for Field<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (params, mut input, mut tools, skip_tools) = match *self {
            Field::Plain(value) => return value.serialize(serializer),
            Field::Params { params, input, tools, skip_tools } => (params, input, tools, skip_tools),
        };
        // `Map` iterates in key order: each part held apart goes in before the first key after
        // its own (`input` before `tools`).
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in params {
            if key.as_str() > INPUT
                && let Some(text) = input.take()
            {
                map.serialize_entry(INPUT, text)?;
            }
            if key.as_str() > TOOLS
                && let Some(list) = tools.take()
            {
                map.serialize_entry(TOOLS, list)?;
            }
            if skip_tools && key == TOOLS {
                continue;
            }
            map.serialize_entry(key, value)?;
        }
        if let Some(text) = input {
            map.serialize_entry(INPUT, text)?;
        }
        if let Some(list) = tools {
            map.serialize_entry(TOOLS, list)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn row() -> Value {
        json!({
            "id": 3,
            "expected": "x",
            "responses_create_params": {
                "input": [{"role": "user", "content": "q ☃"}],
                "instructions": "be brief",
                "parallel_tool_calls": false,
                "tools": [{"type": "function", "name": "get", "parameters": {"type": "object"}}],
                "temperature": 0.5,
            },
        })
    }

    fn lean(row: Value) -> (TaskRow, Arc<SharedTools>) {
        let list = Arc::new(SharedTools::new(row["responses_create_params"]["tools"].clone()));
        let mut lean = TaskRow::from(row);
        assert!(lean.share_tools(&list));
        lean.hold_input();
        (lean, list)
    }

    #[test]
    fn a_row_with_parts_held_apart_reads_and_writes_as_the_row_read() {
        let (lean, list) = lean(row());
        assert!(Arc::ptr_eq(lean.apart().unwrap(), &list));
        let params = &lean.fields["responses_create_params"];
        assert!(params.get("tools").is_none() && params.get("input").is_none(), "the row's own copies are let go");

        assert_eq!(serde_json::to_string(&lean).unwrap(), row().to_string(), "the same bytes, in key order");
        assert_eq!(lean.to_value(), row());
        assert_eq!(lean, TaskRow::from(row()));
        assert_eq!(lean, row());
        assert_eq!(lean.tools(), Some(&**list));
        assert_eq!(lean.pointer("/responses_create_params/tools/0/name"), Some(&json!("get")));
        assert_eq!(lean.pointer("/responses_create_params/temperature"), Some(&json!(0.5)));
        assert_eq!(lean.pointer("/responses_create_params/toolsx"), None);
        assert_eq!(lean.get("expected"), Some(&json!("x")));
        assert_eq!(lean["id"], json!(3));
        let back: TaskRow = serde_json::from_str(&serde_json::to_string(&lean).unwrap()).unwrap();
        assert_eq!(back, lean);

        let mut less = row();
        less["responses_create_params"].as_object_mut().unwrap().remove("tools");
        let without = |r: &TaskRow| serde_json::to_string(&r.without_tools()).unwrap();
        assert_eq!(without(&lean), less.to_string());
        assert_eq!(without(&TaskRow::from(row())), less.to_string(), "a row holding its own list");
    }

    #[test]
    fn rows_sharing_a_list_write_its_text_once_and_each_row_whole() {
        let (first, list) = lean(row());
        assert!(list.text.get().is_none(), "nothing written before a row is");
        let mut other = row();
        other["id"] = json!(4);
        let mut second = TaskRow::from(other.clone());
        assert!(second.share_tools(&list));

        assert_eq!(serde_json::to_string(&first).unwrap(), row().to_string());
        let text = list.text().expect("written with the first row");
        assert_eq!(text.get(), list.list.to_string(), "the text serde_json writes for the list");
        assert_eq!(serde_json::to_string(&second).unwrap(), other.to_string(), "the second row, with the same text");
        assert!(std::ptr::eq(list.text().unwrap(), text), "the text was written once");
        assert_eq!(serde_json::to_value(&second).unwrap(), other, "a value of the row has the list as a value");
    }

    #[test]
    fn parts_go_back_in_key_order_whatever_keys_are_around_them() {
        for params in [
            json!({"input": "q", "tools": [1]}),
            json!({"a": 1, "input": "q", "tools": [1], "z": 2}),
            json!({"input": [{"role": "user", "content": "q"}], "j": 1, "tools": [1]}),
            json!({"input": "q"}),
            json!({"tools": [1], "zz": null}),
        ] {
            let row = json!({"responses_create_params": params, "zz": 1});
            let mut lean = TaskRow::from(row.clone());
            if let Some(list) = lean.own_tools() {
                lean.share_tools(&list);
            }
            lean.hold_input();
            assert_eq!(serde_json::to_string(&lean).unwrap(), row.to_string());
            assert_eq!(lean.to_value(), row);
        }
    }

    #[test]
    fn a_row_shares_only_a_list_equal_to_its_own() {
        let other = Arc::new(SharedTools::new(json!([{"type": "function", "name": "put"}])));
        let mut own = TaskRow::from(row());
        assert!(!own.share_tools(&other));
        assert_eq!(own.fields, row(), "the row keeps its own list");

        let mut none = TaskRow::from(json!({"responses_create_params": {"input": "q"}}));
        assert!(!none.share_tools(&other));
        assert_eq!(none.tools(), None);
        assert_eq!(none.own_tools(), None);
    }

    #[test]
    fn a_stored_row_gets_its_list_back_where_it_has_a_place_for_it() {
        let list = Arc::new(SharedTools::new(json!([{"name": "get"}])));
        let mut less = row();
        less["responses_create_params"].as_object_mut().unwrap().remove("tools");
        let back = TaskRow::with_tools(less, Arc::clone(&list));
        assert_eq!(back.pointer("/responses_create_params/tools/0/name"), Some(&json!("get")));
        assert_eq!(serde_json::to_value(&back).unwrap()["responses_create_params"]["tools"], **list);

        let nowhere = TaskRow::with_tools(json!({"id": 1}), list);
        assert_eq!(nowhere.tools(), None);
        assert_eq!(serde_json::to_value(&nowhere).unwrap(), json!({"id": 1}));
    }
}
