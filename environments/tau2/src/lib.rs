//! The tau2-bench domains (mock, airline, retail, telecom) in-process, agreeing with tau2:
//! the same tools with the same names, schemas and byte-identical outputs and error messages,
//! the same initial states, and tau2's scoring (DB hashes, env assertions, actions,
//! communicated information, and NL assertions through an LLM judge).
//!
//! [`data_dir`] finds the data (tau2's MIT-licensed `data/tau2/domains/`, plus
//! `derived/tools.openai.json` with every tool's schema); [`load`] reads a domain into a
//! [`Domain`] with Parley [`Task`](parley_core::Task)s and an
//! [`Environment`](parley_core::Environment). [`user_guidelines`] reads tau2's guidelines for
//! its simulated user from the same folder.
//!
//! Invariants: no data is embedded (everything is read from the data folder at load time);
//! a tool that raises is data (`Error: ...`), never an `Err`; every session owns its own world
//! and the scorer rebuilds its own, so sessions never share state; nothing here depends on the
//! engine or the CLI.

mod args;
mod calc;
mod catalog;
mod compare;
mod domain;
mod domains;
mod error;
mod fold;
mod hash;
mod ordered_map;
mod prompt;
pub mod pyjson;
mod score;
mod session;
mod spec;
mod toolkit;
mod user;
mod view;
mod world;

pub use domain::{DEFAULT_JUDGE_MODEL, DOMAINS, Domain, DomainCounts, DomainOptions, data_dir, load};
pub use error::Tau2Error;
pub use prompt::GREETING;
pub use session::{Tau2Environment, Tau2Session};
pub use user::{UserGuidelines, user_guidelines};
