//! A scripted user: after the task's opening it says the task row's `follow_ups` (NeMo Gym's
//! field) one per turn, then stops with `###STOP###`.
//!
//! Invariant: it never calls a model; what it says depends only on the task row and on how many
//! user messages the conversation already holds, so a resumed session goes on where it stopped.

use async_trait::async_trait;
use parley_core::{Message, Role, UserFailure, UserSimulator, UserStop, UserTurn, UserView};
use serde_json::Value;

#[derive(Debug, Default)]
pub struct Scripted;

/// The follow-ups of a task row: a list of strings under `follow_ups`.
pub fn follow_ups(row: &Value) -> Vec<&str> {
    row.get("follow_ups")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

#[async_trait]
impl UserSimulator for Scripted {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        let script = follow_ups(&view.task.row);
        // The opening's user messages are the task's; the script starts after them.
        let opening = view.task.messages.iter().filter(|m| m.role == Role::User).count();
        let said = view.messages.iter().filter(|m| m.role == Role::User && m.tool_calls.is_empty()).count();
        let next = said.saturating_sub(opening);
        Ok(match script.get(next) {
            Some(text) => UserTurn { message: Message::user(*text), stop: None, call: None },
            None => {
                UserTurn { message: Message::user(UserStop::Stop.marker()), stop: Some(UserStop::Stop), call: None }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::Task;
    use serde_json::json;

    fn task() -> Task {
        Task {
            index: 0,
            id: "0".into(),
            messages: vec![Message::user("What is the capital of France?")],
            tools: vec![],
            row: json!({"follow_ups": ["What is its population?", "Name a landmark."]}),
        }
    }

    async fn say(task: &Task, messages: &[Message]) -> UserTurn {
        Scripted.respond(UserView { task, trial: 0, messages, tools: &[], seed: 0 }).await.unwrap()
    }

    #[tokio::test]
    async fn says_each_follow_up_then_stops() {
        let task = task();
        let mut conversation = task.messages.clone();
        conversation.push(Message::assistant("Paris."));
        let first = say(&task, &conversation).await;
        assert_eq!(first.message, Message::user("What is its population?"));
        conversation.extend([first.message, Message::assistant("About 2 million.")]);
        let second = say(&task, &conversation).await;
        assert_eq!(second.message, Message::user("Name a landmark."));
        conversation.extend([second.message, Message::assistant("The Eiffel Tower.")]);
        let last = say(&task, &conversation).await;
        assert_eq!(last.stop, Some(UserStop::Stop));
    }
}
