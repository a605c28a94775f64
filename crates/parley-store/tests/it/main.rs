//! The store against real SQLite files: the writer, claims and fencing, re-scores and judge
//! verdicts, and the errors a user sees for unusable or damaged files.

mod backends;
mod claims;
mod damage;
mod scores;
mod writer;
