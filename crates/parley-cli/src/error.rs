//! Errors the binary reports, and their exit codes.

/// Bad usage or configuration: reported before any work starts, exit code 64 (EX_USAGE).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

pub const EX_USAGE: i32 = 64;

pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}
