//! Parley's domain types and the seams between its parts.
//!
//! Everything the engine, the store, the model client, the agents, the environments and the
//! simulators exchange is defined here: messages, tool calls, tool specs, tasks, termination
//! reasons, rewards, and the object-safe traits [`Agent`], [`UserSimulator`], [`Environment`],
//! [`ModelClient`] and [`SessionStore`]. Beside them, plain data and rules that need no I/O:
//! NeMo Gym's formats (`nemo_gym`), a session's [`Deadline`] (`deadline`), token ids and their
//! contiguity check (`tokens`), compact JSON as serde_json writes it, its strings scanned a word
//! at a time (`json`), a URL's user part and host (`url`), who sees what (`view`), a rule-based
//! review of a simulated user's turns (`review`) and a seeded generator (`rng`).
//!
//! Invariant: this crate depends on nothing heavy. No HTTP client, no database driver, no async
//! runtime: `.ci/core-deps` fails CI if sqlx, axum, reqwest, hyper, async-openai or tokio enter
//! its dependency tree.

pub mod agent;
pub mod content;
pub mod deadline;
pub mod environment;
pub mod json;
pub mod message;
pub mod model;
pub mod nemo_gym;
pub mod review;
pub mod reward;
pub mod rng;
pub mod session;
pub mod store;
pub mod task;
pub mod task_row;
pub mod tokens;
pub mod url;
pub mod user;
pub mod view;

pub use agent::{Agent, AgentFailure, AgentTurn, AgentView};
pub use content::{Part, Reasoning, ReasoningReplay, ReasoningSpelling};
pub use deadline::Deadline;
pub use environment::{EnvError, EnvSession, Environment, ToolOutput};
pub use message::{ChatForm, Message, ReasoningField, Role, ToolCall, ToolList, ToolSpec};
pub use model::{
    ChatReply, ChatRequest, ModelCall, ModelClient, ModelFailure, ModelFailureKind, RawJson, Ready, Sampling, Usage,
};
pub use reward::Reward;
pub use session::{FailureClass, Limits, Termination};
pub use store::{
    Claim, Fence, MessageRecord, Owner, Player, RunId, RunSpec, RunStatus, SessionId, SessionOutcome, SessionSpec,
    SessionStatus, SessionStore, StoreError, ToolCallRecord, TurnRecord, Unusable,
};
pub use task::{Task, ToolLists, stable_seed};
pub use task_row::TaskRow;
pub use tokens::TokenIds;
pub use user::{UserFailure, UserSimulator, UserStop, UserTurn, UserView};
pub use view::{Party, agent_view, user_view};
