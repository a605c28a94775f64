//! A task row as it was read, its tool list shared with the rows that have the same one.
//!
//! A NeMo Gym row repeats its tools on every row (`responses_create_params.tools`), and parsed
//! they are most of the row in memory: a tool's JSON schema is many small objects, each a
//! `Value` map several times its text. A run holds every task in flight, so a [`TaskRow`] keeps
//! its list apart, behind an `Arc` that the run's rows with the same list share
//! ([`TaskRow::share_tools`]), and puts it back wherever the row goes out whole: serialized
//! ([`Serialize`]), or as a value ([`TaskRow::to_value`]). Read a field with [`TaskRow::get`]
//! or [`TaskRow::pointer`], the tool list with [`TaskRow::tools`].

use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// The object a row's tool list sits in, and the list's key there.
const PARAMS: &str = "responses_create_params";
const TOOLS: &str = "tools";

/// One task row: the JSON value read, with every ground-truth field a scorer needs.
#[derive(Debug, Clone, Default)]
pub struct TaskRow {
    /// The row, less `responses_create_params.tools` while `tools` holds them.
    fields: Value,
    /// The row's tool list, held apart and shared; `None` when the row holds its own (or none).
    tools: Option<Arc<Value>>,
}

impl TaskRow {
    /// A row whose tool list (if it has one) is `tools`: `fields` is the row without it, as the
    /// store keeps it. A row with nowhere to put a list keeps none, as it was recorded.
    pub fn with_tools(fields: Value, tools: Arc<Value>) -> TaskRow {
        match fields.get(PARAMS) {
            Some(Value::Object(params)) if !params.contains_key(TOOLS) => TaskRow { fields, tools: Some(tools) },
            _ => TaskRow { fields, tools: None },
        }
    }

    /// The row's tool list (`responses_create_params.tools`), wherever it is held.
    pub fn tools(&self) -> Option<&Value> {
        match &self.tools {
            Some(tools) => Some(tools),
            None => self.fields.get(PARAMS)?.get(TOOLS),
        }
    }

    /// Holds the row's tool list in `list` when the two are equal, the row's own copy let go.
    /// Says whether the row now shares `list`.
    pub fn share_tools(&mut self, list: &Arc<Value>) -> bool {
        if let Some(held) = &self.tools {
            if !Arc::ptr_eq(held, list) && **held == **list {
                self.tools = Some(Arc::clone(list));
            }
            return Arc::ptr_eq(self.tools.as_ref().expect("held"), list);
        }
        let Some(Value::Object(params)) = self.fields.get_mut(PARAMS) else { return false };
        if params.get(TOOLS) != Some(&**list) {
            return false;
        }
        params.remove(TOOLS);
        self.tools = Some(Arc::clone(list));
        true
    }

    /// The row's own tool list, put apart to be shared: `None` when it has none to share.
    pub fn own_tools(&self) -> Option<Arc<Value>> {
        match &self.tools {
            Some(tools) => Some(Arc::clone(tools)),
            None => self.tools().filter(|t| t.is_array()).map(|t| Arc::new(t.clone())),
        }
    }

    /// The row less its tool list, and the list, when the two are held apart.
    pub fn apart(&self) -> Option<(&Value, &Arc<Value>)> {
        Some((&self.fields, self.tools.as_ref()?))
    }

    /// The row as one value, when it holds its own tool list (or none).
    pub fn whole(&self) -> Option<&Value> {
        self.tools.is_none().then_some(&self.fields)
    }

    /// The row's fields, to read with what takes a `&Value`: `responses_create_params` without
    /// its `tools` when they are held apart. Not the row to write: that is the [`TaskRow`].
    pub fn fields(&self) -> &Value {
        &self.fields
    }

    /// A top-level field of the row. `responses_create_params` comes without its `tools`
    /// when they are held apart: [`TaskRow::tools`] has them.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }

    /// The value at a JSON pointer ([`Value::pointer`]), the tool list included.
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
        self.fields.as_object().into_iter().flatten().map(|(key, value)| {
            let field = match (&self.tools, value) {
                (Some(tools), Value::Object(params)) if key == PARAMS => Field::WithTools(params, tools),
                _ => Field::Plain(value),
            };
            (key, field)
        })
    }

    /// The row whole, as a value of its own.
    pub fn to_value(&self) -> Value {
        let mut whole = self.fields.clone();
        if let (Some(tools), Some(Value::Object(params))) = (&self.tools, whole.get_mut(PARAMS)) {
            params.insert(TOOLS.to_owned(), Value::clone(tools));
        }
        whole
    }
}

/// `row["field"]`, as a `Value` reads: `Null` where the row has no such field.
impl std::ops::Index<&str> for TaskRow {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        &self.fields[key]
    }
}

impl From<Value> for TaskRow {
    fn from(fields: Value) -> TaskRow {
        TaskRow { fields, tools: None }
    }
}

/// Two rows are equal when their JSON is, wherever each holds its tool list.
impl PartialEq for TaskRow {
    fn eq(&self, other: &TaskRow) -> bool {
        match (&self.tools, &other.tools) {
            (None, None) => self.fields == other.fields,
            (Some(a), Some(b)) => self.fields == other.fields && a == b,
            _ => self.to_value() == other.to_value(),
        }
    }
}

impl PartialEq<Value> for TaskRow {
    fn eq(&self, other: &Value) -> bool {
        match &self.tools {
            None => self.fields == *other,
            Some(_) => self.to_value() == *other,
        }
    }
}

/// The same bytes as [`TaskRow::to_value`] serialized, without building it.
impl Serialize for TaskRow {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.tools.is_none() || !self.fields.is_object() {
            return self.fields.serialize(serializer);
        }
        let mut map = serializer.serialize_map(None)?;
        for (key, field) in self.entries() {
            map.serialize_entry(key, &field)?;
        }
        map.end()
    }
}

impl<'de> serde::Deserialize<'de> for TaskRow {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<TaskRow, D::Error> {
        Value::deserialize(deserializer).map(TaskRow::from)
    }
}

/// A top-level field of a [`TaskRow`], written as the whole row has it.
#[derive(Debug, Clone, Copy)]
pub enum Field<'a> {
    Plain(&'a Value),
    /// `responses_create_params`, its held-apart tool list put back in key order.
    WithTools(&'a Map<String, Value>, &'a Value),
}

impl Serialize for Field<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (params, tools) = match *self {
            Field::Plain(value) => return value.serialize(serializer),
            Field::WithTools(params, tools) => (params, tools),
        };
        // `Map` iterates in key order: the list goes in before the first key after its own.
        let mut map = serializer.serialize_map(Some(params.len() + 1))?;
        let mut pending = Some(tools);
        for (key, value) in params {
            if key.as_str() > TOOLS
                && let Some(tools) = pending.take()
            {
                map.serialize_entry(TOOLS, tools)?;
            }
            map.serialize_entry(key, value)?;
        }
        if let Some(tools) = pending {
            map.serialize_entry(TOOLS, tools)?;
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
                "input": [{"role": "user", "content": "q"}],
                "parallel_tool_calls": false,
                "tools": [{"type": "function", "name": "get", "parameters": {"type": "object"}}],
                "temperature": 0.5,
            },
        })
    }

    #[test]
    fn a_row_sharing_its_tools_reads_and_writes_as_the_row_read() {
        let list = Arc::new(row()["responses_create_params"]["tools"].clone());
        let mut shared = TaskRow::from(row());
        assert!(shared.share_tools(&list));
        assert!(Arc::ptr_eq(shared.tools.as_ref().unwrap(), &list));
        assert!(shared.fields["responses_create_params"].get("tools").is_none(), "the row's own copy is let go");

        assert_eq!(serde_json::to_string(&shared).unwrap(), row().to_string(), "the same bytes, in key order");
        assert_eq!(shared.to_value(), row());
        assert_eq!(shared, TaskRow::from(row()));
        assert_eq!(shared, row());
        assert_eq!(shared.tools(), Some(&*list));
        assert_eq!(shared.pointer("/responses_create_params/tools/0/name"), Some(&json!("get")));
        assert_eq!(shared.pointer("/responses_create_params/temperature"), Some(&json!(0.5)));
        assert_eq!(shared.pointer("/responses_create_params/toolsx"), None);
        assert_eq!(shared.get("expected"), Some(&json!("x")));
        let back: TaskRow = serde_json::from_str(&serde_json::to_string(&shared).unwrap()).unwrap();
        assert_eq!(back, shared);
    }

    #[test]
    fn a_row_shares_only_a_list_equal_to_its_own() {
        let other = Arc::new(json!([{"type": "function", "name": "put"}]));
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
        let list = Arc::new(json!([{"name": "get"}]));
        let mut less = row();
        less["responses_create_params"].as_object_mut().unwrap().remove("tools");
        let back = TaskRow::with_tools(less, Arc::clone(&list));
        assert_eq!(back.pointer("/responses_create_params/tools/0/name"), Some(&json!("get")));
        assert_eq!(serde_json::to_value(&back).unwrap()["responses_create_params"]["tools"], *list);

        let nowhere = TaskRow::with_tools(json!({"id": 1}), list);
        assert_eq!(nowhere.tools(), None);
        assert_eq!(serde_json::to_value(&nowhere).unwrap(), json!({"id": 1}));
    }
}
