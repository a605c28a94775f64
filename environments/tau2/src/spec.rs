//! One tau2 task as the environment and the scorer need it: the initial state (database
//! patches, set-up calls, a recorded message history) and the evaluation criteria, read from
//! the task's JSON row. Also the conversion of tau2 messages into Parley messages. It never
//! runs anything.

use parley_core::{Message, Role, ToolCall};
use serde::Deserialize;
use serde_json::Value;

use crate::pyjson::Py;

/// A call of a toolkit function: an initialization action, or the call inside an assertion.
#[derive(Debug, Clone, Deserialize)]
pub struct EnvCall {
    pub env_type: String,
    pub func_name: String,
    #[serde(default)]
    pub arguments: Value,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EnvAssertion {
    #[serde(flatten)]
    pub call: EnvCall,
    #[serde(default = "yes")]
    pub assert_value: bool,
    #[serde(default)]
    pub message: Option<String>,
}

fn yes() -> bool {
    true
}

fn assistant() -> String {
    "assistant".into()
}

/// A gold action: one step of the reference trajectory.
#[derive(Debug, Clone, Deserialize)]
pub struct GoldAction {
    #[serde(default)]
    pub action_id: String,
    #[serde(default = "assistant")]
    pub requestor: String,
    pub name: String,
    #[serde(default)]
    pub arguments: Value,
    #[serde(default)]
    pub info: Option<String>,
    #[serde(default)]
    pub compare_args: Option<Vec<String>>,
}

fn default_basis() -> Vec<String> {
    vec!["DB".into(), "COMMUNICATE".into()]
}

#[derive(Debug, Clone, Deserialize)]
pub struct Criteria {
    #[serde(default)]
    pub actions: Option<Vec<GoldAction>>,
    #[serde(default)]
    pub env_assertions: Option<Vec<EnvAssertion>>,
    #[serde(default)]
    pub communicate_info: Option<Vec<String>>,
    #[serde(default)]
    pub nl_assertions: Option<Vec<String>>,
    #[serde(default = "default_basis")]
    pub reward_basis: Vec<String>,
}

/// What a session needs from a task row.
#[derive(Debug, Clone, Default)]
pub struct TaskSpec {
    pub id: String,
    pub agent_data: Option<Py>,
    pub user_data: Option<Py>,
    pub init_actions: Vec<EnvCall>,
    /// `initial_state.message_history`, as Parley messages.
    pub history: Vec<Message>,
    pub criteria: Option<Criteria>,
    pub ticket: Option<String>,
    /// The DB check's gold worlds, built at the first score of a session of this task.
    pub(crate) gold: crate::score::Gold,
}

impl TaskSpec {
    /// Reads a task row. `ordered` is the same row parsed with key order kept, so that database
    /// patches add new entries in the file's order (a `Value` row has its keys sorted).
    pub fn parse(row: &Value, ordered: Option<&Py>) -> Result<TaskSpec, String> {
        let id = match row.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => return Err("a task without an id".into()),
        };
        let state = row.get("initial_state").filter(|v| !v.is_null());
        let data = state.and_then(|s| s.get("initialization_data")).filter(|v| !v.is_null());
        let ordered_data = ordered.and_then(|o| o.get("initial_state")).and_then(|s| s.get("initialization_data"));
        let patch = |key: &str| -> Option<Py> {
            let value = data?.get(key).filter(|v| !v.is_null())?;
            Some(ordered_data.and_then(|d| d.get(key)).cloned().unwrap_or_else(|| Py::from(value)))
        };
        let init_actions = match state.and_then(|s| s.get("initialization_actions")).filter(|v| !v.is_null()) {
            Some(v) => {
                serde_json::from_value(v.clone()).map_err(|e| format!("task {id}: initialization_actions: {e}"))?
            }
            None => Vec::new(),
        };
        let history = match state.and_then(|s| s.get("message_history")).and_then(Value::as_array) {
            Some(messages) => messages.iter().map(convert_message).collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let criteria = match row.get("evaluation_criteria").filter(|v| !v.is_null()) {
            Some(v) => {
                Some(serde_json::from_value(v.clone()).map_err(|e| format!("task {id}: evaluation_criteria: {e}"))?)
            }
            None => None,
        };
        Ok(TaskSpec {
            agent_data: patch("agent_data"),
            user_data: patch("user_data"),
            init_actions,
            history,
            criteria,
            ticket: row.get("ticket").and_then(Value::as_str).map(String::from),
            id,
            gold: Default::default(),
        })
    }
}

/// A tau2 message as a Parley message. User tool calls stay on the user message (dual control);
/// a tool message's `id` becomes `tool_call_id`.
pub fn convert_message(m: &Value) -> Result<Message, String> {
    let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
    let content = m.get("content").and_then(Value::as_str).map(String::from);
    let calls = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: c.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    name: c.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    arguments: c.get("arguments").map(Value::to_string).unwrap_or_else(|| "{}".into()),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(match role {
        "user" => Message { content, tool_calls: calls, ..Message::empty(Role::User) },
        "assistant" => Message { content, tool_calls: calls, ..Message::empty(Role::Assistant) },
        "tool" => {
            Message::tool_result(m.get("id").and_then(Value::as_str).unwrap_or_default(), content.unwrap_or_default())
        }
        "system" => Message::system(content.unwrap_or_default()),
        other => return Err(format!("a message with unknown role `{other}`")),
    })
}
