//! Errors the binary reports, and their exit codes.

/// Bad usage or configuration: reported before any work starts, exit code 64 (EX_USAGE).
pub use parley_runtime::UsageError;

pub const EX_USAGE: i32 = 64;

pub fn usage(message: impl Into<String>) -> anyhow::Error {
    parley_runtime::usage(message).into()
}

/// The exit code of a database that cannot be used: 65 (EX_DATAERR) for a file that is not
/// Parley's, is from a newer Parley, is a directory or is damaged, 73 (EX_CANTCREAT) for one that
/// cannot be written, 74 (EX_IOERR) for one on a full disk, 75 (EX_TEMPFAIL) for one another
/// process keeps locked.
pub fn store_exit_code(error: &anyhow::Error) -> Option<(i32, String)> {
    use parley_core::{StoreError, Unusable};
    error.chain().find_map(|e| match e.downcast_ref::<StoreError>()? {
        StoreError::Unusable { problem, message } => {
            let code = match problem {
                Unusable::NotParley | Unusable::NewerSchema | Unusable::Directory | Unusable::Corrupt => 65,
                Unusable::ReadOnly => 73,
                Unusable::OutOfFiles => 71,
                Unusable::DiskFull => 74,
                Unusable::Locked => 75,
            };
            Some((code, message.clone()))
        }
        _ => None,
    })
}
