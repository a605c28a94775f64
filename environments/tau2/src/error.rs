//! The crate's one error type, for failures of loading and of the environment itself. A tool
//! that raises is never an `Err` here: it is data (`Error: ...` in the transcript).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Tau2Error {
    #[error("tau2 data directory {0} does not exist")]
    MissingDataDir(PathBuf),
    #[error(
        "no tau2 user guidelines at {0} (nor in the data folder's parent): the data folder needs tau2's \
         data/tau2/user_simulator beside its domains, or give the user guidelines of your own (--user-guidelines)"
    )]
    NoUserGuidelines(PathBuf),
    #[error("unknown tau2 domain `{0}`: expected one of mock, airline, retail, telecom")]
    UnknownDomain(String),
    #[error("reading {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("parsing {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}
