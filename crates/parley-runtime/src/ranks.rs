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

    /// The rank of the session a request belongs to: its id modulo the ranks, so that a
    /// run's sessions (numbered in a row by the store) take the ranks in turn, and every call of
    /// a session, resumed ones included, goes to the same rank. A call of no session (none is
    /// made by the policy today) goes to the first rank.
    ///
    /// Not a hash of the conversation: every session of a tau2 domain opens with the same
    /// policy and greeting, so such a hash sends them all to one rank.
    pub fn rank_of(&self, request: &ChatRequest<'_>) -> usize {
        let session = request.session.unwrap_or(0);
        session.rem_euclid(self.ranks.len() as i64) as usize
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

#[cfg(test)]
mod tests {
    use super::*;
    use parley_core::{Message, Sampling, ToolList};

    /// A rank that is only chosen, never called.
    struct Unused;

    #[async_trait]
    impl ModelClient for Unused {
        fn endpoint(&self) -> &str {
            "unused"
        }

        async fn chat(&self, _: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
            unreachable!("the test only chooses ranks")
        }
    }

    #[test]
    fn sessions_with_one_opening_spread_evenly_and_each_keeps_its_rank() {
        let ranked = Ranked::new((0..8).map(|_| Arc::new(Unused) as Arc<dyn ModelClient>).collect());
        // Every session opens alike, as a tau2 domain's do: the policy, then the greeting.
        let opening = [Message::system("the airline's policy"), Message::assistant("Hi! How can I help you today?")];
        let sampling = Sampling::default();
        let request = |session| ChatRequest {
            model: "m",
            messages: &opening,
            tools: ToolList::none(),
            sampling: &sampling,
            response_format: None,
            session: Some(session),
            ready: None,
        };
        let mut sessions = [0usize; 8];
        for session in 1..=1_000 {
            let rank = ranked.rank_of(&request(session));
            assert!((0..3).all(|_| ranked.rank_of(&request(session)) == rank), "session {session} moved");
            sessions[rank] += 1;
        }
        let (most, least) = (sessions.iter().max().unwrap(), sessions.iter().min().unwrap());
        assert!(*least > 0 && *most as f64 <= *least as f64 * 1.15, "sessions per rank: {sessions:?}");
    }
}
