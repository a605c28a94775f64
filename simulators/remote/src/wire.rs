//! The contract's two bodies: what Parley sends a remote user (`POST {url}/turn`) and what it
//! reads back. `docs/remote-user.md` describes them for people writing a user; the types here
//! are the contract's one definition in code.

use parley_core::message::{ChatForm, ChatMessage, ChatTool, ReasoningField};
use parley_core::{Message, ToolCall, ToolSpec, UserStop};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The contract's version, sent with every request: a user that does not know it may refuse.
pub const VERSION: u32 = 1;

/// The path of a turn under the user's URL.
pub const TURN: &str = "/turn";

/// How the user's view is written: what a chat template reads. The view holds no reasoning (the
/// agent's stays with the agent), so the form only fixes the keys.
const FORM: ChatForm = ChatForm { reasoning: ReasoningField::Omit, tokens: false };

/// One request for the user's next turn.
#[derive(Debug, Serialize)]
pub struct Request<'a> {
    pub version: u32,
    pub session: Session<'a>,
    /// The task row as it was read (tau2's task, a NeMo Gym row, ...).
    pub task: &'a parley_core::TaskRow,
    /// The row's scenario as text, written as Parley's own user would be told it.
    pub scenario: &'a str,
    pub persona: Option<&'a str>,
    /// The user's view, with the conversation's roles: `assistant` is the agent, `user` is
    /// this user (its text and tool calls), `tool` a result of the user's own calls.
    pub messages: Vec<ChatMessage<'a>>,
    /// The user's own tools (dual control), in the Chat Completions form; empty for most
    /// environments.
    pub tools: Vec<ChatTool<'a>>,
}

/// Which session asks: a run's session is named by its task and trial, and the seed follows
/// from them, so a resumed or repeated session asks with the same seed.
#[derive(Debug, Serialize)]
pub struct Session<'a> {
    pub task_id: &'a str,
    pub task_index: usize,
    pub trial: u32,
    pub seed: u64,
}

impl<'a> Request<'a> {
    pub fn messages(view: &'a [Message]) -> Vec<ChatMessage<'a>> {
        view.iter().map(|m| m.chat(FORM)).collect()
    }

    pub fn tools(tools: &'a [ToolSpec]) -> Vec<ChatTool<'a>> {
        tools.iter().map(ToolSpec::chat).collect()
    }
}

/// The user's answer: text, tool calls, or a stop. Fields it does not name are ignored, so a
/// user may add its own (usage, its model's raw answer) for its own logs.
#[derive(Debug, Default, Deserialize)]
pub struct Answer {
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<WireCall>,
    #[serde(default)]
    pub stop: Option<Stop>,
}

/// `"stop": true` (the user is done), or which of tau2's three endings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    Done(bool),
    Kind(StopKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopKind {
    Stop,
    Transfer,
    OutOfScope,
}

impl Stop {
    fn user_stop(self) -> Option<UserStop> {
        match self {
            Stop::Done(false) => None,
            Stop::Done(true) | Stop::Kind(StopKind::Stop) => Some(UserStop::Stop),
            Stop::Kind(StopKind::Transfer) => Some(UserStop::Transfer),
            Stop::Kind(StopKind::OutOfScope) => Some(UserStop::OutOfScope),
        }
    }
}

/// A tool call in the Chat Completions form; the id may be left out (Parley then names it).
#[derive(Debug, Deserialize)]
pub struct WireCall {
    #[serde(default)]
    pub id: Option<String>,
    pub function: Function,
}

#[derive(Debug, Deserialize)]
pub struct Function {
    pub name: String,
    /// JSON text, as Chat Completions writes it, or a JSON object.
    #[serde(default)]
    pub arguments: Option<Value>,
}

impl Function {
    fn arguments(&self) -> String {
        match &self.arguments {
            None => "{}".to_owned(),
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
        }
    }
}

/// What an answer says, once read against the contract: the user's message and its stop.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub message: Message,
    pub stop: Option<UserStop>,
}

/// Why an answer is not a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No text, no tool call and no stop.
    Empty,
    /// A stop beside tool calls: the calls' results would reach a user that has left.
    StopWithCalls,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::Empty => "an empty turn: no content, no tool_calls and no stop",
            Refusal::StopWithCalls => "a stop beside tool calls: stop in a turn of its own",
        })
    }
}

impl Answer {
    /// The user's turn. A stop is `"stop"` or one of tau2's markers in the text; it is kept in
    /// the text as the marker (added when the answer said `"stop"` without it), so a stored transcript reads the same whichever user wrote it,
    /// and a resumed session or the review finds the stop where it finds an LLM user's.
    /// Calls without an id are named `user_call_<n>_<i>`, `n` the view's length.
    pub fn into_turn(self, view_len: usize) -> Result<Turn, Refusal> {
        let text = self.content.filter(|t| !t.trim().is_empty());
        let said = self.stop.and_then(Stop::user_stop);
        if said.is_some() && !self.tool_calls.is_empty() {
            return Err(Refusal::StopWithCalls);
        }
        // A turn with tool calls is no stop, whatever its text holds, as in tau2 (`is_stop`):
        // its calls run and the user is asked again.
        let found = text.as_deref().and_then(UserStop::find).filter(|_| self.tool_calls.is_empty());
        let stop = said.or(found);
        let content = match (text, stop) {
            (Some(text), Some(stop)) if !text.contains(stop.marker()) => Some(format!("{text} {}", stop.marker())),
            (None, Some(stop)) => Some(stop.marker().to_owned()),
            (text, _) => text,
        };
        if content.is_none() && self.tool_calls.is_empty() {
            return Err(Refusal::Empty);
        }
        let tool_calls = self
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| ToolCall {
                id: call.id.clone().filter(|id| !id.is_empty()).unwrap_or_else(|| format!("user_call_{view_len}_{i}")),
                name: call.function.name.clone(),
                arguments: call.function.arguments(),
            })
            .collect();
        let message = Message { content, tool_calls, ..Message::empty(parley_core::Role::User) };
        Ok(Turn { message, stop })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn turn(answer: Value) -> Result<Turn, Refusal> {
        serde_json::from_value::<Answer>(answer).unwrap().into_turn(3)
    }

    #[test]
    fn text_is_a_turn_and_a_marker_in_it_a_stop() {
        let t = turn(json!({"content": "My phone is off."})).unwrap();
        assert_eq!((t.message.content_str(), t.stop), ("My phone is off.", None));
        let t = turn(json!({"content": "Thanks! ###TRANSFER###"})).unwrap();
        assert_eq!(t.stop, Some(UserStop::Transfer));
    }

    #[test]
    fn a_stop_field_is_written_as_the_marker() {
        let t = turn(json!({"stop": true})).unwrap();
        assert_eq!((t.message.content_str(), t.stop), ("###STOP###", Some(UserStop::Stop)));
        let t = turn(json!({"content": "Bye.", "stop": "out_of_scope"})).unwrap();
        assert_eq!((t.message.content_str(), t.stop), ("Bye. ###OUT-OF-SCOPE###", Some(UserStop::OutOfScope)));
        let t = turn(json!({"content": "Done ###STOP###", "stop": "stop"})).unwrap();
        assert_eq!(t.message.content_str(), "Done ###STOP###", "the marker once");
        assert_eq!(turn(json!({"content": "go on", "stop": false})).unwrap().stop, None);
    }

    #[test]
    fn calls_take_text_or_object_arguments_and_get_an_id() {
        let t = turn(json!({"tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "toggle", "arguments": "{\"on\":true}"}},
            {"function": {"name": "check", "arguments": {"x": 1}}},
            {"function": {"name": "noop"}}
        ]}))
        .unwrap();
        let calls: Vec<(&str, &str, &str)> =
            t.message.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(
            calls,
            [
                ("c1", "toggle", "{\"on\":true}"),
                ("user_call_3_1", "check", "{\"x\":1}"),
                ("user_call_3_2", "noop", "{}")
            ]
        );
        assert_eq!(t.message.content, None);
    }

    #[test]
    fn empty_turns_and_stops_beside_calls_are_refused() {
        assert_eq!(turn(json!({})).unwrap_err(), Refusal::Empty);
        assert_eq!(turn(json!({"content": "  "})).unwrap_err(), Refusal::Empty);
        let calls = json!([{"function": {"name": "f"}}]);
        assert_eq!(turn(json!({"stop": true, "tool_calls": calls})).unwrap_err(), Refusal::StopWithCalls);
        let t = turn(json!({"content": "###STOP###", "tool_calls": calls})).unwrap();
        assert_eq!((t.stop, t.message.tool_calls.len()), (None, 1), "calls first, as tau2's is_stop has it");
    }
}
