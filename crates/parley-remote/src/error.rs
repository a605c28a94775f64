//! The errors of talking to a remote server. Each names the server and the call, and says what
//! to check; they become [`EnvError`]s at the environment seam.

use std::time::Duration;

use parley_core::EnvError;

/// A remote call that failed after its retries, or a server that could not be set up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    #[error(
        "{server}: {call} got no answer within {timeout:?} ({attempts} attempt(s)); the server hangs or is overloaded"
    )]
    Timeout { server: String, call: String, timeout: Duration, attempts: u32 },
    #[error("{server}: {call} could not connect after {attempts} attempt(s): {cause}; is the server running?")]
    Connect { server: String, call: String, attempts: u32, cause: String },
    #[error("{server}: {call} failed ({attempts} attempt(s)): {cause}; the server may have died")]
    Transport { server: String, call: String, attempts: u32, cause: String },
    #[error("{server}: {call} answered HTTP {status}: {body}")]
    Status { server: String, call: String, status: u16, body: String },
    #[error("{server}: {call} answered with an unexpected body ({cause}): {body}")]
    Malformed { server: String, call: String, cause: String, body: String },
    #[error("{server}: {call}: {cause}")]
    Protocol { server: String, call: String, cause: String },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("launching NeMo Gym servers: {0}")]
    Launch(String),
}

impl From<RemoteError> for EnvError {
    fn from(error: RemoteError) -> EnvError {
        EnvError::new(error.to_string())
    }
}
