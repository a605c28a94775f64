//! The store against real SQLite files: the writer, re-scores and judge verdicts, and the errors
//! a user sees for unusable or damaged files; and the cases every store must pass (claims and
//! fencing among them), on SQLite and PostgreSQL (`backends`).

mod backends;
mod damage;
mod pages;
mod scores;
mod wal;
mod writer;
