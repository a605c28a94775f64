//! The user seam: who talks to the agent.

use async_trait::async_trait;

use crate::message::{Message, Role, ToolList, ToolSpec};
use crate::model::{ModelCall, ModelFailure};
use crate::task::Task;

/// How a simulated user ends a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserStop {
    /// `###STOP###`: the user is done.
    Stop,
    /// `###TRANSFER###`: the user was transferred to a human agent.
    Transfer,
    /// `###OUT-OF-SCOPE###`: the scenario does not cover what the agent asked.
    OutOfScope,
}

impl UserStop {
    pub const ALL: [UserStop; 3] = [UserStop::Stop, UserStop::Transfer, UserStop::OutOfScope];

    pub fn marker(self) -> &'static str {
        match self {
            UserStop::Stop => "###STOP###",
            UserStop::Transfer => "###TRANSFER###",
            UserStop::OutOfScope => "###OUT-OF-SCOPE###",
        }
    }

    /// Finds a stop marker anywhere in a user message.
    pub fn find(text: &str) -> Option<UserStop> {
        UserStop::ALL.into_iter().find(|s| text.contains(s.marker()))
    }
}

/// What the user sees when asked for its next turn.
#[derive(Debug, Clone, Copy)]
pub struct UserView<'a> {
    pub task: &'a Task,
    /// Which trial of the task this session is.
    pub trial: u32,
    /// The conversation as the user sees it (see [`crate::view::user_view`]): agent text, the
    /// user's own messages, and the user's own tool calls and their results. Never the agent's
    /// tool calls, never the agent's system prompt.
    pub messages: &'a [Message],
    /// Tools the user may call (dual control); empty for most environments.
    pub tools: &'a ToolList,
    /// Derived per task and trial, so that a rerun asks the same questions.
    pub seed: u64,
}

/// The user's next turn: a message (text, or tool calls in dual control), whether it ends the
/// conversation, and the model call that produced it.
#[derive(Debug, Clone)]
pub struct UserTurn {
    pub message: Message,
    pub stop: Option<UserStop>,
    pub call: Option<ModelCall>,
}

/// A user that could not produce a turn.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UserFailure {
    /// The user's model endpoint failed after its retries.
    #[error(transparent)]
    Model(#[from] ModelFailure),
    /// The simulator itself failed (no script left, unusable output, a closed terminal).
    #[error("{message}")]
    User { message: String, call: Option<ModelCall> },
}

/// A simulated (or real) user.
#[async_trait]
pub trait UserSimulator: Send + Sync {
    async fn respond(&self, view: UserView<'_>) -> Result<UserTurn, UserFailure>;

    /// Whether the user's stop, the last of `messages`, came too early (`--stop-grace` then
    /// gives the agent another turn): by default, when it or the user message just before it
    /// answers an agent's request for the go-ahead with a confirmation, and the agent has made
    /// no write call since. `writes` are the seqs of the results of the agent's write calls.
    fn stopped_too_early(&self, messages: &[Message], writes: &[u32]) -> bool {
        confirmed_before_the_action(messages, writes)
    }

    /// What the simulator was told for `task` (its system prompt, or the scenario and persona
    /// a remote user was sent), which the review of its turns reads; `tools` are the user's
    /// own. `None` by default: a script or a person is taken at its word and not reviewed.
    fn instructions(&self, _task: &Task, _tools: &[ToolSpec]) -> Option<String> {
        None
    }

    /// The simulator's own faults in a finished session's `transcript`, which a trainer should
    /// not punish the policy for: by default the rules of [`crate::review`] over what it was
    /// told ([`UserSimulator::instructions`]), none for a user not reviewed.
    async fn review(&self, task: &Task, transcript: &[Message], tools: &[ToolSpec]) -> Vec<crate::review::UserFault> {
        match self.instructions(task, tools) {
            Some(told) => crate::review::review(
                transcript,
                crate::review::Brief { system_prompt: &told, has_tools: !tools.is_empty() },
            ),
            None => Vec::new(),
        }
    }
}

/// The default premature-stop rule (see [`UserSimulator::stopped_too_early`]), in English.
pub fn confirmed_before_the_action(messages: &[Message], writes: &[u32]) -> bool {
    let user_texts =
        messages.iter().enumerate().rev().filter(|(_, m)| m.role == Role::User && !m.content_str().is_empty());
    user_texts.take(2).any(|(seq, m)| {
        let asked = messages[..seq]
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant && !m.content_str().is_empty())
            .is_some_and(|m| asks_to_act(m.content_str()));
        asked && confirms(m.content_str()) && !writes.iter().any(|&w| w as usize > seq)
    })
}

/// Whether an agent message asks for the go-ahead to do something ("Shall I cancel it?").
fn asks_to_act(text: &str) -> bool {
    let text = text.to_lowercase();
    text.contains('?')
        && [
            "shall i",
            "should i",
            "do you want me to",
            "would you like me to",
            "confirm",
            "proceed",
            "go ahead",
            "may i",
        ]
        .iter()
        .any(|p| text.contains(p))
}

/// Whether a message agrees to have something done ("yes, please go ahead").
fn confirms(text: &str) -> bool {
    let text = text.to_lowercase();
    let words: Vec<&str> = text.split(|c: char| !c.is_alphanumeric() && c != '\'').filter(|w| !w.is_empty()).collect();
    let has = |w: &str| words.contains(&w);
    let phrase = |p: &str| text.contains(p);
    has("yes")
        || has("confirm")
        || has("confirmed")
        || has("proceed")
        || has("sure")
        || has("yeah")
        || phrase("go ahead")
        || phrase("please do")
        || phrase("do it")
        || phrase("sounds good")
        || phrase("that's correct")
        || phrase("that is correct")
}
