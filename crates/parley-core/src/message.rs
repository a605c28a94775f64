//! Messages, tool calls and tool specs, in the shape of OpenAI Chat Completions.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// One tool call as the model wrote it. `arguments` is the raw text the model produced, which
/// may not be valid JSON: malformed output is data, and the engine answers it with a tool error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One message of a transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn text(role: Role, content: impl Into<String>) -> Message {
        Message { role, content: Some(content.into()), tool_calls: Vec::new(), tool_call_id: None }
    }

    pub fn system(content: impl Into<String>) -> Message {
        Message::text(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Message {
        Message::text(Role::User, content)
    }

    pub fn assistant(content: impl Into<String>) -> Message {
        Message::text(Role::Assistant, content)
    }

    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: Role::Tool,
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }

    pub fn assistant_calls(content: Option<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message { role: Role::Assistant, content, tool_calls, tool_call_id: None }
    }

    pub fn content_str(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }
}

/// A tool the model may call: an OpenAI function with a JSON schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

impl ToolSpec {
    /// The Chat Completions form: `{"type": "function", "function": {...}}`.
    pub fn to_chat_json(&self) -> Value {
        let mut function = serde_json::json!({
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        });
        if self.strict {
            function["strict"] = Value::Bool(true);
        }
        serde_json::json!({"type": "function", "function": function})
    }

    /// Reads either the Chat Completions form or the flat Responses form
    /// (`{"type": "function", "name": ..., "parameters": ...}`).
    pub fn from_openai_json(value: &Value) -> Option<ToolSpec> {
        let function = value.get("function").unwrap_or(value);
        let name = function.get("name")?.as_str()?.to_owned();
        Some(ToolSpec {
            name,
            description: function.get("description").and_then(Value::as_str).unwrap_or_default().to_owned(),
            parameters: function.get("parameters").cloned().unwrap_or_else(empty_object_schema),
            strict: function.get("strict").and_then(Value::as_bool).unwrap_or(false),
        })
    }
}
