//! The environment seam: tools, state, and the scorer of finished trajectories.

use async_trait::async_trait;
use serde_json::Value;

use crate::message::{Message, ToolList};
use crate::reward::Reward;
use crate::session::Termination;
use crate::task::Task;
use crate::view::Party;

/// What a tool call returned. `is_error` marks an output the model should read as a failure;
/// it is still data for the transcript, not an `Err`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
    /// Whether the tool changed the environment's state (resume replays these).
    pub write: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> ToolOutput {
        ToolOutput { content: content.into(), is_error: false, write: false }
    }

    pub fn error(content: impl Into<String>) -> ToolOutput {
        ToolOutput { content: content.into(), is_error: true, write: false }
    }
}

/// An environment failure: the environment itself broke (a crashed server, a bug), as opposed
/// to a tool that answered with an error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct EnvError {
    pub message: String,
    /// The verifier ran but reports that its own verdict failed (NeMo Gym's judge failsafe: a
    /// judge that could not answer): the trajectory is sound, the sample is to be left out of
    /// training, and the session is recorded as `verifier_failed`.
    pub verifier_failed: bool,
}

impl EnvError {
    pub fn new(message: impl Into<String>) -> EnvError {
        EnvError { message: message.into(), verifier_failed: false }
    }

    /// The verifier's report of its own failure.
    pub fn verifier_failed(message: impl Into<String>) -> EnvError {
        EnvError { message: message.into(), verifier_failed: true }
    }
}

/// A kind of environment. It opens one [`EnvSession`] per session.
#[async_trait]
pub trait Environment: Send + Sync {
    fn name(&self) -> &str;

    /// Whether a task row holds what this environment needs to run and score it, checked
    /// before any model call: `Err` names the missing or malformed field. (A row that fails
    /// here would otherwise run whole and then fail at its score, a bad row reported as a
    /// failure of the environment.)
    fn check(&self, _task: &Task) -> Result<(), String> {
        Ok(())
    }

    async fn open(&self, task: &Task) -> Result<Box<dyn EnvSession>, EnvError>;

    /// Whether opening or scoring a session computes on this process's CPU for long: tau2
    /// builds a task's databases, and to score replays the trajectory against them and hashes
    /// them (milliseconds to seconds). A service runs such calls off the workers that answer its
    /// connections, one per core at a time. The default, `false`, is for an environment that
    /// does little or awaits another process (a resources server, an MCP server): its calls
    /// run in place, as any other await does, however many at once.
    fn computes(&self) -> bool {
        false
    }
}

/// The environment's side of one session: its state, its tools and its scorer.
#[async_trait]
pub trait EnvSession: Send {
    /// The tools the agent may call in this session.
    fn tools(&self) -> &ToolList;

    /// The tools the user may call (dual control). Most environments have none.
    fn user_tools(&self) -> &ToolList {
        ToolList::none()
    }

    /// Whether this environment answers calls to unknown tools and arguments that break a tool's
    /// schema itself, as the benchmark it reproduces does (tau2 passes them to its tools, which
    /// raise). The engine then checks only that the arguments are JSON. Default: the engine
    /// answers such calls and they never reach [`EnvSession::call`].
    fn answers_malformed_calls(&self) -> bool {
        false
    }

    /// Calls one tool for `party` with arguments that already parsed as JSON and (unless
    /// [`EnvSession::answers_malformed_calls`]) name a known tool and matched its schema.
    async fn call(&mut self, party: Party, name: &str, arguments: &Value) -> Result<ToolOutput, EnvError>;

    /// Scores the finished transcript; `termination` says how the session ended.
    async fn score(&mut self, transcript: &[Message], termination: Termination) -> Result<Reward, EnvError>;

    /// Releases what the session holds. Called once, whatever the outcome.
    async fn close(&mut self) {}
}
