//! The engine: the session state machine and the scheduler that runs many sessions at once.
//!
//! Invariants: a session commits each turn to the [`SessionStore`](parley_core::SessionStore)
//! before it acts on the next model reply (the commit runs beside the next model call, or before
//! it when the session's claim may have run out: see [`Leases`]), and before it ends; malformed
//! model output (bad JSON arguments, an unknown tool, a schema violation) is answered with a tool
//! error and recorded, never raised; a session that fails, panics, times out or is cancelled ends
//! with a termination reason and never stops the others. A session is driven under its claim: a
//! commit the store refuses as fenced (another owner claimed the session) stops the session
//! quietly, recording nothing. The engine knows the seams only: no HTTP, no SQL.

mod claims;
pub mod replay;
mod scheduler;
pub mod schema;
mod session;

pub use claims::{Leases, Renewal};
pub use scheduler::{Scheduler, spawn_session};
pub use session::{Job, Parties, Prior, SessionResult, Stop, opening, opening_len, run_session};
