//! A replaying user: says, in order, the user turns of a recorded session (text and dual-control
//! tool calls alike), then stops with `###STOP###`.
//!
//! Invariant: it never calls a model; turn k of the replay is the recorded session's turn k.

use std::collections::HashMap;

use async_trait::async_trait;
use parley_core::{Message, Role, UserFailure, UserSimulator, UserStop, UserTurn, UserView};

/// Recorded user turns for each task and trial of a run.
#[derive(Debug, Default)]
pub struct Replay {
    turns: HashMap<(usize, u32), Vec<Message>>,
}

impl Replay {
    /// `sessions`: ((task index, trial), the recorded transcript) of the run to replay. The
    /// user's turns are taken after the task's opening.
    pub fn new(sessions: impl IntoIterator<Item = ((usize, u32), Vec<Message>, usize)>) -> Replay {
        let turns = sessions
            .into_iter()
            .map(|(key, transcript, opening)| {
                let turns = transcript.into_iter().skip(opening).filter(|m| m.role == Role::User).collect();
                (key, turns)
            })
            .collect();
        Replay { turns }
    }
}

#[async_trait]
impl UserSimulator for Replay {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure> {
        let opening = view.task.messages.iter().filter(|m| m.role == Role::User).count();
        let said = view.messages.iter().filter(|m| m.role == Role::User).count().saturating_sub(opening);
        let recorded = self.turns.get(&(view.task.index, view.trial)).ok_or_else(|| UserFailure::User {
            message: format!("no recorded session for task {} trial {}", view.task.id, view.trial),
            call: None,
        })?;
        Ok(match recorded.get(said) {
            Some(message) => {
                let stop = UserStop::find(&message.text_content());
                UserTurn { message: message.clone(), stop, call: None }
            }
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

    #[tokio::test]
    async fn replays_the_recorded_user_turns_in_order() {
        let task = Task {
            index: 3,
            id: "t".into(),
            messages: vec![Message::user("hi")],
            tools: Default::default(),
            row: Default::default(),
        };
        let recorded = vec![
            Message::user("hi"),
            Message::assistant("hello"),
            Message::user("cancel my order"),
            Message::assistant("done"),
            Message::user("thanks ###STOP###"),
        ];
        let replay = Replay::new([((3, 0), recorded, 1)]);
        let mut conversation = vec![Message::user("hi"), Message::assistant("hello (new agent)")];
        let turn = replay
            .respond(UserView { task: &task, trial: 0, messages: &conversation, tools: ToolList::none(), seed: 0 })
            .await
            .unwrap();
        assert_eq!(turn.message, Message::user("cancel my order"));
        conversation.extend([turn.message, Message::assistant("ok")]);
        let turn = replay
            .respond(UserView { task: &task, trial: 0, messages: &conversation, tools: ToolList::none(), seed: 0 })
            .await
            .unwrap();
        assert_eq!(turn.stop, Some(UserStop::Stop));
        let other = Task { index: 9, ..task.clone() };
        assert!(
            replay
                .respond(UserView { task: &other, trial: 0, messages: &conversation, tools: ToolList::none(), seed: 0 })
                .await
                .is_err()
        );
    }
}
