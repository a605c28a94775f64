//! The oracle: an agent that plays a tau2 task's gold actions, one tool call per turn, then
//! says every `communicate_info` string in one text message, which ends a session without a
//! simulated user (`agent_stop`). It shows what a perfect agent scores, so a task the oracle
//! cannot pass is a task (or an environment) to look at.
//!
//! The oracle is stateless: each turn it counts the calls it already made in the transcript
//! (its call ids start with [`CALL_PREFIX`]) and plays the next one, so it works with any loop
//! that shows it the transcript, resumed sessions included. Gold actions the *user* must take
//! (telecom and mock are dual-control) are not the agent's to play: [`user_gold_actions`] gives
//! them to a scripted user, and [`gold_script`] gives the whole reference trajectory in order,
//! each step with the party that plays it, for drivers that play both sides.
//!
//! Invariant: it reads only the task row; it never calls a model, a tool or the environment.

use async_trait::async_trait;
use parley_core::{Agent, AgentFailure, AgentTurn, AgentView, Message, Party, Role, Task, ToolCall};
use serde_json::Value;

/// The id prefix of every call the oracle makes (`oracle-0`, `oracle-1`, ...).
pub const CALL_PREFIX: &str = "oracle-";
/// The id prefix of the user's gold calls (`oracle-user-0`, ...).
pub const USER_CALL_PREFIX: &str = "oracle-user-";

#[derive(Debug, Default, Clone, Copy)]
pub struct Oracle;

/// The gold actions of a task (`evaluation_criteria.actions`), as `(requestor, call)` in order.
/// Call ids are numbered per party: `oracle-<n>` for the agent, `oracle-user-<n>` for the user.
pub fn gold_script(task: &Task) -> Vec<(Party, ToolCall)> {
    let actions =
        task.row.pointer("/evaluation_criteria/actions").and_then(Value::as_array).cloned().unwrap_or_default();
    let (mut agent, mut user) = (0, 0);
    actions
        .iter()
        .map(|action| {
            let party = match action.get("requestor").and_then(Value::as_str) {
                Some("user") => Party::User,
                _ => Party::Agent,
            };
            let id = match party {
                Party::Agent => {
                    agent += 1;
                    format!("{CALL_PREFIX}{}", agent - 1)
                }
                Party::User => {
                    user += 1;
                    format!("{USER_CALL_PREFIX}{}", user - 1)
                }
            };
            let call = ToolCall {
                id,
                name: action.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                arguments: action.get("arguments").map(Value::to_string).unwrap_or_else(|| "{}".into()),
            };
            (party, call)
        })
        .collect()
}

/// The gold calls the agent plays, in order.
pub fn agent_gold_actions(task: &Task) -> Vec<ToolCall> {
    gold_script(task).into_iter().filter(|(p, _)| *p == Party::Agent).map(|(_, c)| c).collect()
}

/// The gold calls a scripted user plays (requestor `user`), in order. A simulator plays the
/// next one whose id is not yet in the transcript; their results are tool messages answering
/// those ids, as for any user tool call.
pub fn user_gold_actions(task: &Task) -> Vec<ToolCall> {
    gold_script(task).into_iter().filter(|(p, _)| *p == Party::User).map(|(_, c)| c).collect()
}

/// The oracle's closing message: every `communicate_info` string, one per line.
pub fn closing_message(task: &Task) -> String {
    let infos: Vec<&str> = task
        .row
        .pointer("/evaluation_criteria/communicate_info")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if infos.is_empty() { "Done.".to_owned() } else { infos.join("\n") }
}

/// How many of its own calls the oracle has made in `messages`.
pub fn calls_made(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| &m.tool_calls)
        .filter(|c| c.id.starts_with(CALL_PREFIX) && !c.id.starts_with(USER_CALL_PREFIX))
        .count()
}

#[async_trait]
impl Agent for Oracle {
    async fn act(&self, view: AgentView<'_>) -> Result<AgentTurn, AgentFailure> {
        let gold = agent_gold_actions(view.task);
        let made = calls_made(view.messages);
        let message = match gold.get(made) {
            Some(call) => Message::assistant_calls(None, vec![call.clone()]),
            None => Message::assistant(closing_message(view.task)),
        };
        Ok(AgentTurn { message, call: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::ToolList;
    use serde_json::json;

    fn task() -> Task {
        Task {
            index: 0,
            id: "t".into(),
            messages: vec![],
            tools: Default::default(),
            row: json!({"evaluation_criteria": {
                "actions": [
                    {"action_id": "a", "name": "enable_roaming", "arguments": {"line_id": "L1"}},
                    {"action_id": "b", "requestor": "user", "name": "toggle_roaming", "arguments": {}},
                    {"action_id": "c", "requestor": "assistant", "name": "refuel", "arguments": {"gb": 2.0}}
                ],
                "communicate_info": ["one", "two"]
            }})
            .into(),
        }
    }

    #[test]
    fn script_keeps_order_and_parties() {
        let script = gold_script(&task());
        let parties: Vec<Party> = script.iter().map(|(p, _)| *p).collect();
        assert_eq!(parties, [Party::Agent, Party::User, Party::Agent]);
        assert_eq!(script[1].1.id, "oracle-user-0");
        assert_eq!(script[2].1.id, "oracle-1");
        assert_eq!(script[2].1.arguments, r#"{"gb":2.0}"#);
        assert_eq!(user_gold_actions(&task()).len(), 1);
    }

    #[tokio::test]
    async fn plays_the_next_call_then_speaks() {
        let task = task();
        let mut messages = vec![Message::user("hi")];
        for expected in ["enable_roaming", "refuel"] {
            let view = AgentView { task: &task, messages: &messages, tools: ToolList::none(), seed: 0, session: 0 };
            let turn = Oracle.act(view).await.unwrap();
            assert_eq!(turn.message.tool_calls[0].name, expected);
            let id = turn.message.tool_calls[0].id.clone();
            messages.push(turn.message);
            messages.push(Message::tool_result(id, "ok"));
        }
        let view = AgentView { task: &task, messages: &messages, tools: ToolList::none(), seed: 0, session: 0 };
        let turn = Oracle.act(view).await.unwrap();
        assert!(turn.message.tool_calls.is_empty());
        assert_eq!(turn.message.content.as_deref(), Some("one\ntwo"));
    }
}
