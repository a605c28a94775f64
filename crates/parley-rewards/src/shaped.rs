//! Shaped terms: what a session used against a budget, and a format check. A budget term's
//! value is the fraction of the budget used (0 for nothing, 1 at the budget, more beyond it), so
//! a negative weight makes it a penalty and the component's cap bounds it.

use async_trait::async_trait;
use parley_core::Role;
use regex::Regex;

use crate::{Context, Score, ScoreError, Scorer};

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// The agent's turns (each model reply).
    Steps,
    /// The agent's output tokens, estimated as a quarter of the characters of its texts and tool
    /// arguments: the transcript keeps no per-message token counts, and an estimate that is the
    /// same on every rescore is what a shaping term needs.
    Tokens,
}

/// The fraction of a budget the session used.
#[derive(Debug, Clone)]
pub struct Budget {
    pub counted: Counted,
    pub budget: f64,
}

#[async_trait]
impl Scorer for Budget {
    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError> {
        let used = match self.counted {
            Counted::Steps => cx.steps(),
            Counted::Tokens => {
                let opening = cx.task.messages.len().min(cx.transcript.len());
                let chars: usize = cx.transcript[opening..]
                    .iter()
                    .filter(|m| m.role == Role::Assistant)
                    .map(|m| {
                        m.content.as_deref().map_or(0, |t| t.chars().count())
                            + m.tool_calls.iter().map(|c| c.arguments.chars().count()).sum::<usize>()
                    })
                    .sum();
                chars.div_ceil(4)
            }
        };
        Ok(Score::new(used as f64 / self.budget).with("used", used).with("budget", self.budget))
    }
}

/// 1 when the final answer matches the pattern anywhere, else 0.
#[derive(Debug, Clone)]
pub struct Format {
    pub pattern: Regex,
}

#[async_trait]
impl Scorer for Format {
    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError> {
        Ok(Score::hit(cx.final_answer().is_some_and(|a| self.pattern.is_match(a))))
    }
}

/// The environment's own reward (its verifier's), as one component among others.
#[derive(Debug, Clone, Copy)]
pub struct EnvironmentReward;

#[async_trait]
impl Scorer for EnvironmentReward {
    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError> {
        let reward = cx
            .env_reward
            .ok_or_else(|| ScoreError::Invalid("the environment gave no reward of its own to weigh".into()))?;
        Ok(Score::new(reward.value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::cx;
    use parley_core::{Message, ToolCall};
    use serde_json::json;

    #[tokio::test]
    async fn budgets_count_steps_and_tokens() {
        let mut owned = cx(&json!({}), "done");
        let call = ToolCall { id: "c".into(), name: "f".into(), arguments: "{\"a\":1}".into() };
        owned.transcript.insert(1, Message::assistant_calls(None, vec![call]));
        owned.transcript.insert(2, Message::tool_result("c", "ok"));
        let steps = Budget { counted: Counted::Steps, budget: 4.0 }.score(&owned.as_cx()).await.unwrap();
        assert_eq!((steps.value, &steps.details["used"]), (0.5, &json!(2)));
        // "done" (4 characters) and `{"a":1}` (7): 11 characters, 3 tokens.
        let tokens = Budget { counted: Counted::Tokens, budget: 3.0 }.score(&owned.as_cx()).await.unwrap();
        assert_eq!(tokens.value, 1.0);
    }

    #[tokio::test]
    async fn format_checks_the_final_answer() {
        let format = Format { pattern: crate::text::compile(r"\\boxed\{.+\}").unwrap() };
        assert_eq!(format.score(&cx(&json!({}), r"so \boxed{4}").as_cx()).await.unwrap().value, 1.0);
        assert_eq!(format.score(&cx(&json!({}), "4").as_cx()).await.unwrap().value, 0.0);
    }
}
