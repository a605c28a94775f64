//! A policy served on several data-parallel ranks (one base URL each, as a trainer exposes
//! them): every session stays on one rank, so that the server's prefix cache and its on-policy
//! token splicing see the whole conversation.

use std::sync::Arc;

use async_trait::async_trait;
use parley_core::{ChatReply, ChatRequest, ModelClient, ModelFailure};

/// Chooses a rank per session and sends each call of the session to it.
pub struct Ranked {
    ranks: Vec<Arc<dyn ModelClient>>,
}

impl Ranked {
    /// At least one rank.
    pub fn new(ranks: Vec<Arc<dyn ModelClient>>) -> Ranked {
        assert!(!ranks.is_empty(), "a policy has at least one rank");
        Ranked { ranks }
    }

    /// The rank of the session a request belongs to: a stable hash (FNV-1a) of the messages
    /// every call of a session starts with (the system prompt and the task's first message),
    /// which do not change as the conversation grows.
    pub fn rank_of(&self, request: &ChatRequest<'_>) -> usize {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for message in request.messages.iter().take(2) {
            let text = message.content.as_deref().unwrap_or_default();
            for byte in message.role.as_str().bytes().chain([0xff]).chain(text.bytes()).chain([0xfe]) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        (hash % self.ranks.len() as u64) as usize
    }
}

#[async_trait]
impl ModelClient for Ranked {
    fn endpoint(&self) -> &str {
        self.ranks[0].endpoint()
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
        self.ranks[self.rank_of(&request)].chat(request).await
    }
}
