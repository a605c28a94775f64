//! The user seam: who talks to the agent.

use async_trait::async_trait;

use crate::message::Message;
use crate::model::ModelCall;

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
    pub fn marker(self) -> &'static str {
        match self {
            UserStop::Stop => "###STOP###",
            UserStop::Transfer => "###TRANSFER###",
            UserStop::OutOfScope => "###OUT-OF-SCOPE###",
        }
    }

    /// Finds a stop marker anywhere in a user message.
    pub fn find(text: &str) -> Option<UserStop> {
        [UserStop::Stop, UserStop::Transfer, UserStop::OutOfScope].into_iter().find(|s| text.contains(s.marker()))
    }
}

/// The user's next turn.
#[derive(Debug, Clone)]
pub struct UserTurn {
    pub message: Message,
    pub stop: Option<UserStop>,
    pub call: Option<ModelCall>,
}

/// A simulated (or real) user. It sees the conversation with roles flipped: the agent's text
/// arrives as the other party, and the agent's tool calls are never shown to it.
#[async_trait]
pub trait UserSimulator: Send + Sync {
    async fn respond(&self, conversation: &[Message], seed: u64) -> Result<UserTurn, String>;
}
