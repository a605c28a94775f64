//! Scoring a trajectory where the environment has no verifier of its own (MCP servers).
//!
//! Owns: the [`Scorer`] seam of [`McpEnvironment`](crate::McpEnvironment) and the simplest
//! scorer, [`ExactMatch`]. Never calls a model: judges belong elsewhere.

use async_trait::async_trait;
use parley_core::{EnvError, Message, Reward, Role, Task, Termination};
use serde_json::Value;

/// Scores a finished trajectory.
#[async_trait]
pub trait Scorer: Send + Sync {
    async fn score(&self, task: &Task, transcript: &[Message], termination: Termination) -> Result<Reward, EnvError>;
}

/// How the final answer must relate to the expected one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MatchMode {
    /// The whole answer (trimmed) equals the expected text.
    Equals,
    /// The answer contains the expected text.
    #[default]
    Contains,
}

/// Reward 1 when the agent's final text matches the task row's expected answer, else 0. The
/// row's field may hold a string, a number, or a list of acceptable answers.
#[derive(Debug, Clone)]
pub struct ExactMatch {
    /// The row field with the expected answer (default `expected_answer`).
    pub field: String,
    pub mode: MatchMode,
    pub case_sensitive: bool,
}

impl Default for ExactMatch {
    fn default() -> ExactMatch {
        ExactMatch { field: "expected_answer".into(), mode: MatchMode::Contains, case_sensitive: false }
    }
}

impl ExactMatch {
    fn matches(&self, answer: &str, expected: &str) -> bool {
        let (answer, expected) = if self.case_sensitive {
            (answer.trim().to_owned(), expected.trim().to_owned())
        } else {
            (answer.trim().to_lowercase(), expected.trim().to_lowercase())
        };
        match self.mode {
            MatchMode::Equals => answer == expected,
            MatchMode::Contains => !expected.is_empty() && answer.contains(&expected),
        }
    }
}

/// The text of the agent's last message that has any.
pub fn final_answer(transcript: &[Message]) -> Option<&str> {
    transcript
        .iter()
        .rev()
        .filter(|m| m.role == Role::Assistant)
        .find_map(|m| m.content.as_deref().filter(|t| !t.trim().is_empty()))
}

#[async_trait]
impl Scorer for ExactMatch {
    async fn score(&self, task: &Task, transcript: &[Message], termination: Termination) -> Result<Reward, EnvError> {
        let expected = task.row.get(&self.field).ok_or_else(|| {
            EnvError::new(format!("task `{}` has no `{}` field for the exact-match scorer", task.id, self.field))
        })?;
        let candidates: Vec<String> = match expected {
            Value::Array(items) => items.iter().map(text_of).collect(),
            other => vec![text_of(other)],
        };
        let answer = final_answer(transcript).unwrap_or_default();
        let hit = termination == Termination::AgentStop || termination == Termination::UserStop;
        let matched = candidates.iter().any(|c| self.matches(answer, c));
        Ok(Reward::new(if matched { 1.0 } else { 0.0 })
            .with("answer", answer)
            .with("expected", expected.clone())
            .with("matched", matched)
            .with("completed", hit))
    }
}

fn text_of(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task(expected: Value) -> Task {
        Task {
            index: 0,
            id: "t".into(),
            messages: vec![],
            tools: Default::default(),
            row: json!({"expected_answer": expected}),
        }
    }

    #[tokio::test]
    async fn contains_and_equals() {
        let transcript = [Message::user("q"), Message::assistant("The answer is Paris.")];
        let contains = ExactMatch::default();
        let r = contains.score(&task(json!("paris")), &transcript, Termination::AgentStop).await.unwrap();
        assert_eq!(r.value, 1.0);
        let equals = ExactMatch { mode: MatchMode::Equals, ..ExactMatch::default() };
        let r = equals.score(&task(json!("paris")), &transcript, Termination::AgentStop).await.unwrap();
        assert_eq!(r.value, 0.0);
        let r = contains.score(&task(json!(["Lyon", "Paris"])), &transcript, Termination::AgentStop).await.unwrap();
        assert_eq!(r.value, 1.0);
    }

    #[tokio::test]
    async fn a_row_without_the_field_is_an_error() {
        let t = Task { row: json!({}), ..task(json!(1)) };
        assert!(ExactMatch::default().score(&t, &[], Termination::AgentStop).await.is_err());
    }
}
