//! The runtime's one error of its own: bad settings or input, which a front end reports before
//! any work starts (the command line exits with 64). Everything else is an `anyhow::Error` with
//! its context.

/// Bad usage or configuration, named with what would fix it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

pub fn usage(message: impl Into<String>) -> UsageError {
    UsageError(message.into())
}
