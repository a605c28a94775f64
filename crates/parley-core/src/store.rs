//! The store seam: every turn is committed before the next one starts.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::message::Message;
use crate::model::ModelCall;
use crate::reward::Reward;
use crate::session::{FailureClass, Termination};
use crate::task::Task;

pub type RunId = i64;
pub type SessionId = i64;

/// What a run was started with: its config as JSON (never with secrets) and its tasks.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub environment: String,
    pub config: Value,
}

/// One session to be created: a task and a trial of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSpec {
    pub task_index: usize,
    pub trial: u32,
    pub seed: u64,
}

/// One message with the model call that produced it, if any.
#[derive(Debug, Clone)]
pub struct MessageRecord {
    pub seq: u32,
    pub message: Message,
    pub call: Option<ModelCall>,
}

/// One tool call and its output, recorded beside the tool message that carries the output.
#[derive(Debug, Clone)]
pub struct ToolCallRecord {
    /// The seq of the tool-result message.
    pub seq: u32,
    /// Who made the call: the agent, or the user in dual control.
    pub party: crate::view::Party,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub output: String,
    pub is_error: bool,
    pub write: bool,
    /// The call never reached the environment (bad JSON, unknown tool, schema violation).
    pub malformed: bool,
    /// The output was longer than the session's limit and was cut off.
    pub truncated: bool,
    pub duration: Duration,
}

/// Everything one turn added to a session: committed atomically.
#[derive(Debug, Clone, Default)]
pub struct TurnRecord {
    pub messages: Vec<MessageRecord>,
    pub tool_calls: Vec<ToolCallRecord>,
}

impl TurnRecord {
    /// Adds a later turn's records after this one's, to be committed together.
    pub fn append(&mut self, later: TurnRecord) {
        self.messages.extend(later.messages);
        self.tool_calls.extend(later.tool_calls);
    }
}

/// How a session ended.
#[derive(Debug, Clone)]
pub struct SessionOutcome {
    pub termination: Termination,
    pub reward: Option<Reward>,
    pub error: Option<String>,
    /// Set when the session failed for a reason outside the agent (see [`FailureClass`]).
    pub failure: Option<FailureClass>,
    pub steps: u32,
    /// Model-call attempts beyond the first, over the whole session (the failed call's included).
    pub retries: u32,
    pub duration: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database: {0}")]
    Database(String),
    #[error("the store's writer has stopped: {0}")]
    WriterGone(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// The database file cannot serve as Parley's store; the message names the file and the fix.
    #[error("{message}")]
    Unusable { problem: Unusable, message: String },
}

/// Why a database file cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// Not a SQLite file, or a SQLite file of another program.
    NotParley,
    /// Written by a newer Parley, with a schema this build does not know.
    NewerSchema,
    /// The file or its folder cannot be written.
    ReadOnly,
    /// Another process holds the write lock for longer than the busy timeout.
    Locked,
}

#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Creates a run with its tasks and sessions; returns the run id and one id per session.
    async fn create_run(
        &self,
        spec: &RunSpec,
        tasks: &[Arc<Task>],
        sessions: &[SessionSpec],
    ) -> Result<(RunId, Vec<SessionId>), StoreError>;

    /// Makes one turn durable. Returns once it is committed.
    async fn commit_turn(&self, session: SessionId, turn: TurnRecord) -> Result<(), StoreError>;

    /// Records how a session ended, with its final turn, in one commit.
    async fn finish_session(
        &self,
        session: SessionId,
        last_turn: TurnRecord,
        outcome: &SessionOutcome,
    ) -> Result<(), StoreError>;

    /// Marks the run finished.
    async fn finish_run(&self, run: RunId, status: &str) -> Result<(), StoreError>;
}
