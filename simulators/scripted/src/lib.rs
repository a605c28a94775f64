//! A scripted user: after the task's opening it says the task row's `follow_ups` (NeMo Gym's
//! field) one per turn, then stops with `###STOP###`. For a tau2 task (a row with
//! `user_scenario`) it opens with the scenario's reason for the call, then carries out the
//! task's gold user actions (`evaluation_criteria.actions` whose requestor is `user`), one tool
//! call per turn, then stops: with the oracle agent this plays a task's whole reference solution.
//!
//! Invariant: it never calls a model; what it says depends only on the task row and on how many
//! user messages the conversation already holds, so a resumed session goes on where it stopped.

use async_trait::async_trait;
use parley_core::{Message, Role, ToolCall, UserFailure, UserSimulator, UserStop, UserTurn, UserView};
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

/// What a tau2 user says first: the scenario's reason for the call.
fn tau2_opening(row: &Value) -> Option<String> {
    let instructions = row.pointer("/user_scenario/instructions")?;
    let text = match instructions {
        Value::Object(parts) => parts.get("reason_for_call").and_then(Value::as_str),
        Value::String(text) => Some(text.as_str()),
        _ => None,
    };
    Some(text.filter(|t| !t.is_empty()).unwrap_or("Hello.").to_owned())
}

/// A tau2 task's gold user actions, as tool calls.
pub fn user_actions(row: &Value) -> Vec<ToolCall> {
    let actions = row.pointer("/evaluation_criteria/actions").and_then(Value::as_array);
    actions
        .into_iter()
        .flatten()
        .filter(|a| a.get("requestor").and_then(Value::as_str) == Some("user"))
        .enumerate()
        .map(|(i, a)| ToolCall {
            id: format!("scripted-user-{i}"),
            name: a.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
            arguments: a.get("arguments").cloned().unwrap_or(Value::Object(Default::default())).to_string(),
        })
        .collect()
}

fn stop() -> UserTurn {
    UserTurn { message: Message::user(UserStop::Stop.marker()), stop: Some(UserStop::Stop), call: None }
}

#[async_trait]
impl UserSimulator for Scripted {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        let row = view.task.row.fields();
        if row.get("follow_ups").is_none()
            && let Some(opening) = tau2_opening(row)
        {
            let spoke = view.messages.iter().skip(view.task.messages.len()).any(|m| m.role == Role::User);
            if !spoke {
                return Ok(UserTurn { message: Message::user(opening), stop: None, call: None });
            }
            let made = view.messages.iter().filter(|m| m.role == Role::User).map(|m| m.tool_calls.len()).sum::<usize>();
            return Ok(match user_actions(row).into_iter().nth(made) {
                Some(call) => UserTurn { message: Message::user_calls(vec![call]), stop: None, call: None },
                None => stop(),
            });
        }
        let script = follow_ups(row);
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
    use parley_core::{Task, ToolList};
    use serde_json::json;

    fn task() -> Task {
        Task {
            index: 0,
            id: "0".into(),
            messages: vec![Message::user("What is the capital of France?")],
            tools: Default::default(),
            row: json!({"follow_ups": ["What is its population?", "Name a landmark."]}).into(),
        }
    }

    async fn say(task: &Task, messages: &[Message]) -> UserTurn {
        Scripted.respond(UserView { task, trial: 0, messages, tools: ToolList::none(), seed: 0 }).await.unwrap()
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
