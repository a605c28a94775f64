//! How a session ends, and the limits that can end it.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a session ended. Every session ends with exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Termination {
    UserStop,
    AgentStop,
    MaxTurns,
    MaxSteps,
    Timeout,
    TooManyErrors,
    AgentError,
    UserError,
    EnvironmentError,
    InfrastructureError,
    ContextWindowExceeded,
    Cancelled,
}

impl Termination {
    pub const ALL: [Termination; 12] = [
        Termination::UserStop,
        Termination::AgentStop,
        Termination::MaxTurns,
        Termination::MaxSteps,
        Termination::Timeout,
        Termination::TooManyErrors,
        Termination::AgentError,
        Termination::UserError,
        Termination::EnvironmentError,
        Termination::InfrastructureError,
        Termination::ContextWindowExceeded,
        Termination::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Termination::UserStop => "user_stop",
            Termination::AgentStop => "agent_stop",
            Termination::MaxTurns => "max_turns",
            Termination::MaxSteps => "max_steps",
            Termination::Timeout => "timeout",
            Termination::TooManyErrors => "too_many_errors",
            Termination::AgentError => "agent_error",
            Termination::UserError => "user_error",
            Termination::EnvironmentError => "environment_error",
            Termination::InfrastructureError => "infrastructure_error",
            Termination::ContextWindowExceeded => "context_window_exceeded",
            Termination::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Termination> {
        Termination::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// A failure of the machinery rather than of the agent. Such sessions are excluded from
    /// reward means and pass^k, and written to the failures file.
    pub fn is_infrastructure(self) -> bool {
        matches!(self, Termination::InfrastructureError | Termination::EnvironmentError | Termination::Cancelled)
    }

    /// Whether the trajectory is complete enough to be scored.
    pub fn is_scored(self) -> bool {
        !self.is_infrastructure()
    }
}

/// What kind of failure ended a session that failed for a reason outside the agent: the class
/// is recorded with the session, counted in the run's summary, and chosen for
/// `parley resume --retry-failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The endpoint kept answering 429.
    RateLimited,
    /// The endpoint kept answering 5xx (or another status retries did not fix).
    ServerError,
    /// The endpoint refused the request itself (4xx other than 429): a bad key, model or body.
    Rejected,
    /// No answer within the per-call timeout.
    Timeout,
    /// The connection was refused, reset or closed before the answer was whole.
    Connection,
    /// The answer was not what the protocol promises (not JSON, not a completion, too large).
    MalformedResponse,
    /// The prompt no longer fits the model's context window.
    ContextWindowExceeded,
    /// A tool or resources server failed: it could not be reached or answered with an error.
    EnvironmentError,
    /// The verifier ran but reports its own verdict failed (a judge that could not answer):
    /// the trajectory is sound and goes to a trainer masked (`instance_config.mask_sample`).
    VerifierFailed,
    /// The store could not commit a turn.
    Store,
    /// A bug in Parley: the session's task panicked.
    Panic,
}

impl FailureClass {
    pub const ALL: [FailureClass; 11] = [
        FailureClass::RateLimited,
        FailureClass::ServerError,
        FailureClass::Rejected,
        FailureClass::Timeout,
        FailureClass::Connection,
        FailureClass::MalformedResponse,
        FailureClass::ContextWindowExceeded,
        FailureClass::EnvironmentError,
        FailureClass::VerifierFailed,
        FailureClass::Store,
        FailureClass::Panic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::RateLimited => "rate_limited",
            FailureClass::ServerError => "server_error",
            FailureClass::Rejected => "rejected",
            FailureClass::Timeout => "timeout",
            FailureClass::Connection => "connection",
            FailureClass::MalformedResponse => "malformed_response",
            FailureClass::ContextWindowExceeded => "context_window_exceeded",
            FailureClass::EnvironmentError => "environment_error",
            FailureClass::VerifierFailed => "verifier_failed",
            FailureClass::Store => "store",
            FailureClass::Panic => "panic",
        }
    }

    pub fn parse(s: &str) -> Option<FailureClass> {
        FailureClass::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for FailureClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Termination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The limits one session runs under.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Agent model calls in the whole session.
    pub max_steps: u32,
    /// User turns in the whole session (a user opening counts as one).
    pub max_turns: u32,
    /// Malformed tool calls (arguments that are not JSON, an unknown tool, a schema violation)
    /// the session may make, by either party, before it ends as `too_many_errors`. A tool that
    /// runs and answers with an error does not count: that is the environment's answer.
    pub max_errors: u32,
    /// Wall time for the whole session.
    pub timeout: Duration,
    /// Agent turns granted when the user stops right after confirming an action the agent has
    /// not carried out yet (a premature stop); 0 ends such sessions at once.
    pub stop_grace: u32,
    /// Bytes of one tool output the transcript keeps; the rest is cut off and the cut recorded.
    pub max_tool_output: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_steps: 30,
            max_turns: 30,
            max_errors: 5,
            timeout: Duration::from_secs(600),
            stop_grace: 1,
            max_tool_output: 1 << 20,
        }
    }
}
