//! The agent seam: the policy that writes assistant turns.

use async_trait::async_trait;

use crate::message::{Message, ToolList};
use crate::model::{ModelCall, ModelFailure};

/// What the agent sees when it is asked for its next turn.
#[derive(Debug, Clone, Copy)]
pub struct AgentView<'a> {
    /// The task, for agents that know it (an oracle plays its gold actions).
    pub task: &'a crate::task::Task,
    /// The transcript as the agent sees it: system prompt, user turns, its own turns, tool results.
    pub messages: &'a [Message],
    pub tools: &'a ToolList,
    /// Derived per task and trial, so that a rerun asks the endpoint the same questions.
    pub seed: u64,
    /// The session being driven (its id in the store), the same for every turn of it.
    pub session: crate::SessionId,
}

/// The agent's next turn: text, tool calls, or both, and the model call that produced it.
#[derive(Debug, Clone)]
pub struct AgentTurn {
    pub message: Message,
    pub call: Option<ModelCall>,
}

/// An agent that could not produce a turn.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AgentFailure {
    /// The model endpoint failed after its retries.
    #[error(transparent)]
    Model(#[from] ModelFailure),
    /// The agent itself gave up (for example, output it cannot turn into a message).
    #[error("{message}")]
    Agent { message: String, call: Option<ModelCall> },
}

#[async_trait]
pub trait Agent: Send + Sync {
    /// The system prompt this agent puts before the task's messages, if any.
    fn system_prompt(&self) -> Option<&str> {
        None
    }

    /// The text this agent opens a conversation with when the task has no opening of its own
    /// and a user is present (tau2's agent answers with "Hi! How can I help you today?").
    fn greeting(&self) -> Option<&str> {
        None
    }

    async fn act(&self, view: AgentView<'_>) -> Result<AgentTurn, AgentFailure>;
}
