//! The token ids and log-probs a policy generated, as RL trainers train on them.
//!
//! A policy server that captures tokens (NeMo RL's vLLM server, asked with `logprobs`,
//! `top_logprobs: 0` and `return_tokens_as_token_ids`) answers each assistant message with the
//! ids of the whole prompt it saw, the ids it generated and one log-prob per generated id. An
//! assistant message keeps them, goes back to the policy with them unchanged (the server splices
//! those exact tokens in rather than re-rendering the history), and carries them into the
//! rollouts a trainer reads.
//!
//! A trainer concatenates a trajectory's trainable messages into one sequence, so each message's
//! prompt must begin with every token of the messages before it: [`contiguity`] checks that.

use serde::{Deserialize, Serialize};

/// One generation's tokens, under the field names trainers read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenIds {
    /// Every token of the prompt the policy generated from, earlier turns included.
    #[serde(rename = "prompt_token_ids")]
    pub prompt: Vec<u32>,
    /// The tokens it generated.
    #[serde(rename = "generation_token_ids")]
    pub generation: Vec<u32>,
    /// One log-prob per generated token.
    #[serde(rename = "generation_log_probs")]
    pub log_probs: Vec<f64>,
}

impl TokenIds {
    /// Whether a trainer trains on this generation: it generated at least one token.
    pub fn trainable(&self) -> bool {
        !self.generation.is_empty()
    }

    /// Checks that there is one log-prob per generated token.
    pub fn check(&self) -> Result<(), String> {
        if self.generation.len() == self.log_probs.len() {
            return Ok(());
        }
        Err(format!(
            "{} generated token ids but {} log-probs; there must be one log-prob per token",
            self.generation.len(),
            self.log_probs.len()
        ))
    }
}

/// Where a sequence of generations stops being one contiguous token sequence: the first
/// trainable generation (by its index in `generations`) whose prompt does not begin with every
/// token of the trainable generations before it, and why. `None` when they are contiguous.
pub fn contiguity<'a>(generations: impl IntoIterator<Item = &'a TokenIds>) -> Option<(usize, String)> {
    let mut seen: Vec<u32> = Vec::new();
    for (i, tokens) in generations.into_iter().enumerate().filter(|(_, t)| t.trainable()) {
        let prefix = tokens.prompt.get(..seen.len());
        if prefix != Some(seen.as_slice()) {
            let at = match prefix {
                Some(prefix) => prefix.iter().zip(&seen).position(|(a, b)| a != b).unwrap_or(0),
                None => tokens.prompt.len(),
            };
            return Some((
                i,
                format!(
                    "its prompt_token_ids ({} tokens) do not begin with the {} tokens of the generations \
                     before it (they differ at token {at})",
                    tokens.prompt.len(),
                    seen.len()
                ),
            ));
        }
        seen.clear();
        seen.extend_from_slice(&tokens.prompt);
        seen.extend_from_slice(&tokens.generation);
    }
    None
}

/// The first message of `messages` (by position) whose token ids a trainer would refuse, and
/// why: its prompt does not begin with every token of the generations before it. `None` when
/// they are contiguous or there are none.
pub fn first_discontiguous(messages: &[crate::Message]) -> Option<(usize, String)> {
    let generations: Vec<(usize, &TokenIds)> =
        messages.iter().enumerate().filter_map(|(i, m)| m.tokens.as_deref().map(|t| (i, t))).collect();
    let (at, why) = contiguity(generations.iter().map(|(_, t)| *t))?;
    let position = generations[at].0;
    Some((position, format!("the assistant message at position {position} of the trajectory: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(prompt: &[u32], generation: &[u32]) -> TokenIds {
        TokenIds { prompt: prompt.to_vec(), generation: generation.to_vec(), log_probs: vec![-0.5; generation.len()] }
    }

    #[test]
    fn each_prompt_extending_the_last_generation_is_contiguous() {
        let turns = [ids(&[1, 2], &[3, 4]), ids(&[1, 2, 3, 4, 5], &[6]), ids(&[1, 2, 3, 4, 5, 6, 7, 8], &[9])];
        assert_eq!(contiguity(&turns), None);
    }

    #[test]
    fn a_prompt_that_rewrites_an_earlier_generation_is_caught_where_it_differs() {
        let turns = [ids(&[1, 2], &[3, 4]), ids(&[1, 2, 3, 40, 5], &[6])];
        let (at, why) = contiguity(&turns).unwrap();
        assert_eq!(at, 1);
        assert!(why.contains("differ at token 3"), "{why}");
    }

    #[test]
    fn a_prompt_shorter_than_what_came_before_is_caught() {
        let turns = [ids(&[1, 2], &[3, 4]), ids(&[1, 2], &[5])];
        assert_eq!(contiguity(&turns).map(|(at, _)| at), Some(1));
    }

    #[test]
    fn untrainable_generations_are_skipped() {
        let turns = [ids(&[1], &[2]), ids(&[7, 7], &[]), ids(&[1, 2, 3], &[4])];
        assert_eq!(contiguity(&turns), None);
    }

    #[test]
    fn log_probs_must_match_the_tokens() {
        let mut t = ids(&[1], &[2, 3]);
        assert!(t.check().is_ok());
        t.log_probs.pop();
        assert!(t.check().unwrap_err().contains("2 generated token ids but 1 log-probs"));
    }
}
