//! Who sees what. The transcript holds every message of a session; the agent and the user each
//! see part of it. User tool calls (dual control) are user messages with `tool_calls`, and
//! their results are tool messages answering those calls' ids.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::message::{Message, Role};

/// Who made a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Party {
    #[default]
    Agent,
    User,
}

impl Party {
    pub fn as_str(self) -> &'static str {
        match self {
            Party::Agent => "agent",
            Party::User => "user",
        }
    }

    pub fn parse(s: &str) -> Option<Party> {
        match s {
            "agent" => Some(Party::Agent),
            "user" => Some(Party::User),
            _ => None,
        }
    }
}

fn user_call_ids(messages: &[Message]) -> HashSet<&str> {
    messages.iter().filter(|m| m.role == Role::User).flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str())).collect()
}

/// Whether a tool message answers a call the user made.
fn answers_user(message: &Message, user_calls: &HashSet<&str>) -> bool {
    message.role == Role::Tool && message.tool_call_id.as_deref().is_some_and(|id| user_calls.contains(id))
}

/// The transcript as the agent sees it: everything but the user's tool calls and their results.
/// Borrowed when the user made no calls, which is the common case.
pub fn agent_view(messages: &[Message]) -> Cow<'_, [Message]> {
    let user_calls = user_call_ids(messages);
    if user_calls.is_empty() {
        return Cow::Borrowed(messages);
    }
    messages
        .iter()
        .filter(|m| !answers_user(m, &user_calls))
        .filter_map(|m| {
            if m.role == Role::User && !m.tool_calls.is_empty() {
                // Text the user wrote beside its calls still reaches the agent.
                Some(m.text_content()).filter(|t| !t.is_empty()).map(|t| Message::user(t.into_owned()))
            } else {
                Some(m.clone())
            }
        })
        .collect::<Vec<_>>()
        .into()
}

/// The transcript as the user sees it: the agent's text and the user's own messages, calls and
/// results; never system prompts, the agent's reasoning, its tool calls or their results.
pub fn user_view(messages: &[Message]) -> Vec<Message> {
    let user_calls = user_call_ids(messages);
    messages
        .iter()
        .filter_map(|m| match m.role {
            Role::System => None,
            Role::User => Some(m.clone()),
            Role::Tool => answers_user(m, &user_calls).then(|| m.clone()),
            // A new message with the text alone: the reasoning and any parts stay with the agent.
            Role::Assistant => {
                Some(m.text_content()).filter(|t| !t.is_empty()).map(|t| Message::assistant(t.into_owned()))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "toggle".into(), arguments: "{}".into() }
    }

    fn transcript() -> Vec<Message> {
        vec![
            Message::system("policy"),
            Message::user("my phone is off"),
            Message::assistant_calls(Some("Let me look.".into()), vec![call("a1")]),
            Message::tool_result("a1", "line active"),
            Message::assistant("Please turn airplane mode off."),
            Message::user_calls(vec![call("u1")]),
            Message::tool_result("u1", "airplane mode off"),
            Message::user("Done, it works."),
        ]
    }

    #[test]
    fn the_agent_never_sees_the_users_tool_calls() {
        let transcript = transcript();
        let view = agent_view(&transcript);
        assert_eq!(view.len(), 6);
        assert!(view.iter().all(|m| m.tool_call_id.as_deref() != Some("u1")));
        assert!(view.iter().filter(|m| m.role == Role::User).all(|m| m.tool_calls.is_empty()));
    }

    #[test]
    fn without_user_calls_the_agent_view_borrows() {
        let transcript = vec![Message::user("hi"), Message::assistant("hello")];
        assert!(matches!(agent_view(&transcript), Cow::Borrowed(_)));
    }

    #[test]
    fn the_user_sees_agent_text_and_its_own_calls_only() {
        let view = user_view(&transcript());
        let roles: Vec<Role> = view.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Assistant, Role::User, Role::Tool, Role::User]);
        assert_eq!(view[1], Message::assistant("Let me look."));
        assert!(view.iter().all(|m| m.tool_call_id.as_deref() != Some("a1")));
    }

    #[test]
    fn the_user_never_sees_the_agents_reasoning() {
        let mut thinking = Message::assistant("The answer is 4.");
        thinking.reasoning = Some(Box::new(crate::Reasoning { text: "2 + 2 is 4".into(), ..Default::default() }));
        let view = user_view(&[Message::user("2 + 2?"), thinking.clone()]);
        assert_eq!(view[1], Message::assistant("The answer is 4."));
        assert!(view.iter().all(|m| m.reasoning.is_none()));
        assert_eq!(agent_view(&[thinking.clone()])[0], thinking);
    }
}
