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
    /// Malformed tool calls and tool errors the agent may make before the session ends.
    pub max_errors: u32,
    /// Wall time for the whole session.
    pub timeout: Duration,
    /// Agent turns granted when the user stops right after confirming an action the agent has
    /// not carried out yet (a premature stop); 0 ends such sessions at once.
    pub stop_grace: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_steps: 30, max_turns: 30, max_errors: 5, timeout: Duration::from_secs(600), stop_grace: 1 }
    }
}
