//! Rewards the way training environments need them: scorers that each read a finished
//! trajectory and its task row, and a [`Composite`] that weighs, caps and clamps them into one
//! reward whose components are all kept.
//!
//! Scorers: [`text`] (exact match and regex extraction), [`choice`] (multiple-choice grading with
//! NeMo Gym `mcqa`'s modes), [`math`] (final-answer extraction and equivalence of numbers,
//! fractions, percentages, simple LaTeX and symbolic forms), [`judge`] (an LLM judge asked twice,
//! the second time with the answers swapped), [`reward_model`] (a reward model behind vLLM's
//! pooling API) and [`shaped`] (steps or tokens against a budget, a format check).
//!
//! Invariant: this crate knows the seams of `parley-core` and, for the reward model's calls, the
//! client stack of `parley-http` only. It never touches the engine, the store or the command
//! line; the judge is any [`parley_core::ModelClient`] its caller hands in (the runtime wraps it
//! in the store's verdict cache). Bad input (a row without the field, a
//! malformed answer, a regex that does not compile) is a score of 0 with a reason or a
//! [`ScoreError`], never a panic.

pub mod choice;
pub mod composite;
pub mod environment;
pub mod judge;
pub mod math;
pub mod reward_model;
pub mod shaped;
pub mod spec;
pub mod text;

use async_trait::async_trait;
use parley_core::{Message, Role, Task, Termination};
use serde_json::{Map, Value};

pub use composite::{Component, Composite};
pub use environment::{RewardedEnvironment, TasksOnly};
pub use spec::{Endpoints, RewardSpec, ScorerKind, ScorerOptions};

/// What a scorer reads: the task, the whole transcript (opening included) and how it ended.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub task: &'a Task,
    pub transcript: &'a [Message],
    pub termination: Termination,
    /// The environment's own reward (its verifier's), when the environment was asked for one.
    pub env_reward: Option<&'a parley_core::Reward>,
}

impl<'a> Context<'a> {
    /// The text of the agent's last message that has any: the answer most scorers grade.
    pub fn final_answer(&self) -> Option<&'a str> {
        final_answer(self.transcript)
    }

    /// Every assistant text after the opening, concatenated: NeMo Gym's `output_text`, which its
    /// single-step verifiers grade.
    pub fn output_text(&self) -> String {
        let opening = self.task.messages.len().min(self.transcript.len());
        self.transcript[opening..]
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .filter_map(|m| m.content.as_deref())
            .collect::<Vec<_>>()
            .concat()
    }

    /// The agent's turns after the opening (each model reply, tool calls included).
    pub fn steps(&self) -> usize {
        let opening = self.task.messages.len().min(self.transcript.len());
        self.transcript[opening..].iter().filter(|m| m.role == Role::Assistant).count()
    }

    /// A row field as text: a string as is, anything else as its JSON.
    pub fn row_text(&self, field: &str) -> Option<String> {
        self.task.row.get(field).filter(|v| !v.is_null()).map(text_of)
    }

    /// The row's `field` as text, which the `scorer` needs: a row without it cannot be scored.
    pub fn required_text(&self, field: &str, scorer: &'static str) -> Result<String, ScoreError> {
        self.row_text(field).ok_or_else(|| ScoreError::MissingField {
            task: self.task.id.clone(),
            field: field.to_owned(),
            scorer,
        })
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

/// A JSON value as text: strings without their quotes.
pub fn text_of(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

/// One scorer's verdict: a value (most scorers give 0 or 1) and what it found on the way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Score {
    pub value: f64,
    pub details: Map<String, Value>,
}

impl Score {
    pub fn new(value: f64) -> Score {
        Score { value, details: Map::new() }
    }

    pub fn hit(hit: bool) -> Score {
        Score::new(if hit { 1.0 } else { 0.0 })
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Score {
        self.details.insert(key.to_owned(), value.into());
        self
    }
}

/// Why a scorer could not score at all (as opposed to scoring 0): a judge or reward model that
/// did not answer, a task row without the field the scorer needs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScoreError {
    #[error("task `{task}` has no `{field}` field, which the {scorer} scorer reads")]
    MissingField { task: String, field: String, scorer: &'static str },
    #[error("the {scorer} scorer's endpoint failed: {message}")]
    Endpoint { scorer: &'static str, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// Scores one finished trajectory.
#[async_trait]
pub trait Scorer: Send + Sync {
    async fn score(&self, cx: &Context<'_>) -> Result<Score, ScoreError>;

    /// The task row's field the scorer compares against, when it reads one: a row without it
    /// is refused before it runs.
    fn field(&self) -> Option<&str> {
        None
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! A task and transcript to score, and a scripted judge.

    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use parley_core::{ChatReply, ChatRequest, Message, ModelCall, ModelClient, ModelFailure, ModelFailureKind, Task};
    use serde_json::Value;

    use crate::Context;

    pub struct Owned {
        pub task: Task,
        pub transcript: Vec<Message>,
    }

    impl Owned {
        pub fn as_cx(&self) -> Context<'_> {
            Context {
                task: &self.task,
                transcript: &self.transcript,
                termination: parley_core::Termination::AgentStop,
                env_reward: None,
            }
        }
    }

    /// A one-question task with `row`, answered by `answer`.
    pub fn cx(row: &Value, answer: &str) -> Owned {
        let task = Task {
            index: 0,
            id: "t".into(),
            messages: vec![Message::user("question?")],
            tools: parley_core::ToolList::default(),
            row: row.clone().into(),
        };
        Owned { transcript: vec![Message::user("question?"), Message::assistant(answer)], task }
    }

    /// A judge that answers with its texts in order and fails once they run out.
    pub struct Scripted {
        answers: Mutex<Vec<String>>,
        prompts: Mutex<Vec<String>>,
    }

    impl Scripted {
        pub fn new(answers: &[&str]) -> Arc<Scripted> {
            Arc::new(Scripted {
                answers: Mutex::new(answers.iter().rev().map(|s| s.to_string()).collect()),
                prompts: Mutex::new(Vec::new()),
            })
        }

        pub fn calls(&self) -> usize {
            self.prompts.lock().unwrap().len()
        }

        pub fn prompts(&self) -> Vec<String> {
            self.prompts.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl ModelClient for Scripted {
        fn endpoint(&self) -> &str {
            "scripted"
        }

        async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
            let prompt = request.messages.last().map(|m| m.content_str().to_owned()).unwrap_or_default();
            self.prompts.lock().unwrap().push(prompt);
            match self.answers.lock().unwrap().pop() {
                Some(text) => Ok(ChatReply { message: Message::assistant(text), call: ModelCall::default() }),
                None => Err(ModelFailure {
                    kind: ModelFailureKind::Status(500),
                    message: "the scripted judge has no more answers".into(),
                    call: ModelCall::default(),
                }),
            }
        }
    }
}
