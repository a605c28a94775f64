//! Messages, tool calls and tool specs, in the shape of OpenAI Chat Completions, with the two
//! things models and datasets write beside plain text: content parts (images, audio, and parts
//! of types Parley does not know) and the model's reasoning. `chat` writes them in the Chat
//! Completions form, the one writer of that form.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

mod chat;

use self::chat::ChatTools;
pub use self::chat::{ChatForm, ChatMessage, ChatTool, ReasoningField};
pub use crate::content::{Part, Reasoning, ReasoningSpelling};

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
    /// Every role, for code that must visit each one.
    pub const ALL: [Role; 4] = [Role::System, Role::User, Role::Assistant, Role::Tool];

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
///
/// Its content is either plain text (`content`, the usual case, and `parts` empty) or a list of
/// parts (`parts`, and `content` `None`) when it holds anything but text: an image, audio, or a
/// part of a type Parley does not know. A list of text parts only is read as its joined text,
/// so text-only code never meets parts; [`Message::text_content`] gives the text of either.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The content as parts, in order, text parts included; empty for a text message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Part>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// What a reasoning model thought before it answered; assistant messages only. Boxed: few
    /// messages have it, and a session in flight holds every message of its transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Box<Reasoning>>,
    /// The tokens a token-capturing policy generated this message with; assistant messages
    /// only. Shared, since transcripts are cloned and a prompt's ids grow with the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<std::sync::Arc<crate::TokenIds>>,
}

impl Message {
    /// A message of `role` with no content yet: the base the constructors fill in.
    pub fn empty(role: Role) -> Message {
        Message {
            role,
            content: None,
            parts: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning: None,
            tokens: None,
        }
    }

    pub fn text(role: Role, content: impl Into<String>) -> Message {
        Message { content: Some(content.into()), ..Message::empty(role) }
    }

    /// A message written as content parts. Parts that are all text become a text message (their
    /// text joined), so a dataset that wraps every text in a part reads like one that does not.
    pub fn with_parts(role: Role, parts: Vec<Part>) -> Message {
        if parts.iter().all(|p| matches!(p, Part::Text { .. })) {
            let text: String = parts.iter().filter_map(Part::as_text).collect();
            return Message::text(role, text);
        }
        Message { parts, ..Message::empty(role) }
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
        Message { tool_call_id: Some(call_id.into()), ..Message::text(Role::Tool, content) }
    }

    pub fn assistant_calls(content: Option<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message { content, tool_calls, ..Message::empty(Role::Assistant) }
    }

    /// A user message that made tool calls (dual control).
    pub fn user_calls(tool_calls: Vec<ToolCall>) -> Message {
        Message { tool_calls, ..Message::empty(Role::User) }
    }

    /// The text of a text message (empty for one written as parts: see [`Message::text_content`]).
    pub fn content_str(&self) -> &str {
        self.content.as_deref().unwrap_or("")
    }

    /// The message's text, whichever way it was written: `content`, or its text parts joined.
    pub fn text_content(&self) -> Cow<'_, str> {
        if self.parts.is_empty() {
            return Cow::Borrowed(self.content_str());
        }
        Cow::Owned(self.parts.iter().filter_map(Part::as_text).collect())
    }

    /// What is wrong with the message's parts (unknown types, broken data URLs), one line per
    /// part, for a warning. The parts are kept as given either way.
    pub fn part_problems(&self) -> Vec<String> {
        self.parts.iter().enumerate().filter_map(|(i, p)| p.problem().map(|why| format!("part {i}: {why}"))).collect()
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

/// The tools offered in a session: a list shared by every session of the tasks that have it
/// (a clone is a reference), never changed once made, that writes its Chat Completions form
/// once. Every request of every such session sends the same text, which a request used to
/// serialize from the schemas again (2.4% of a multi-step rollout's CPU).
#[derive(Clone, Default)]
pub struct ToolList(Arc<Listed>);

#[derive(Default)]
struct Listed {
    specs: Box<[ToolSpec]>,
    /// The list in its Chat Completions form, written by the first request that sends it.
    chat: OnceLock<Box<RawValue>>,
}

impl ToolList {
    /// The list of no tools, the same one wherever it is asked for.
    pub fn none() -> &'static ToolList {
        static NONE: OnceLock<ToolList> = OnceLock::new();
        NONE.get_or_init(ToolList::default)
    }

    /// Whether the two are one list, shared.
    pub fn ptr_eq(a: &ToolList, b: &ToolList) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// The list in its Chat Completions form (`[{"function": {...}, "type": "function"}, ...]`),
    /// written the first time it is asked for.
    pub fn chat_json(&self) -> &RawValue {
        self.0.chat.get_or_init(|| {
            // Strings, booleans and borrowed values: this cannot fail.
            serde_json::value::to_raw_value(&ChatTools(&self.0.specs)).expect("a tool list serializes")
        })
    }
}

impl std::ops::Deref for ToolList {
    type Target = [ToolSpec];

    fn deref(&self) -> &[ToolSpec] {
        &self.0.specs
    }
}

impl From<Vec<ToolSpec>> for ToolList {
    fn from(specs: Vec<ToolSpec>) -> ToolList {
        ToolList(Arc::new(Listed { specs: specs.into(), chat: OnceLock::new() }))
    }
}

impl FromIterator<ToolSpec> for ToolList {
    fn from_iter<I: IntoIterator<Item = ToolSpec>>(specs: I) -> ToolList {
        specs.into_iter().collect::<Vec<_>>().into()
    }
}

impl PartialEq for ToolList {
    fn eq(&self, other: &ToolList) -> bool {
        ToolList::ptr_eq(self, other) || self.0.specs == other.0.specs
    }
}

impl std::fmt::Debug for ToolList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.specs.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_lists_chat_json_is_its_tools_chat_forms() {
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: format!("Look up \"{name}\"\n"),
            parameters: serde_json::json!({"type": "object", "properties": {"id": {"type": "string"}}}),
            strict: name == "b",
        };
        let list: ToolList = vec![spec("a"), spec("b")].into();
        let each: Vec<Value> = list.iter().map(ToolSpec::to_chat_json).collect();
        let written: Value = serde_json::from_str(list.chat_json().get()).unwrap();
        assert_eq!(written, Value::Array(each));
        // Written once: the second ask gives the same text.
        assert!(std::ptr::eq(list.chat_json(), list.clone().chat_json()));
        assert_eq!(ToolList::none().chat_json().get(), "[]");
    }

    #[test]
    fn all_lists_every_role_once() {
        for role in Role::ALL {
            // No wildcard: a new role stops this from compiling until it is listed in `Role::ALL`.
            match role {
                Role::System | Role::User | Role::Assistant | Role::Tool => {}
            }
        }
        let names: std::collections::HashSet<_> = Role::ALL.map(Role::as_str).into_iter().collect();
        assert_eq!(names.len(), Role::ALL.len());
    }
}
