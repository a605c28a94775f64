//! The tau2-bench domains (mock, airline, retail, telecom) in-process, agreeing with tau2:
//! the same tools with the same names, schemas and byte-identical outputs and error messages,
//! the same initial states, and tau2's scoring (DB hashes, env assertions, actions,
//! communicated information, and NL assertions through an LLM judge).
//!
//! [`Data`] says where the data is (tau2's MIT-licensed `data/tau2/domains/`, plus
//! `derived/tools.openai.json` with every tool's schema): a folder, or the copy built into the
//! crate (`data/tau2-data.tar.zst`, with tau2's NOTICE). [`load`] reads a domain into a
//! [`Domain`] with Parley [`Task`](parley_core::Task)s and an
//! [`Environment`](parley_core::Environment). [`user_guidelines`] reads tau2's guidelines for
//! its simulated user from the same data.
//!
//! Invariants: the data is read only at load time, through [`Data`], the same way from a folder
//! and from the built-in copy (which equals `../shared/data/tau2` file for file, as a test checks);
//! a tool that raises is data (`Error: ...`), never an `Err`; every session owns its own world
//! and the scorer rebuilds its own, so sessions never share state; nothing here depends on the
//! engine or the CLI.

mod args;
mod calc;
mod catalog;
mod compare;
mod data;
mod domain;
mod domains;
mod embedded;
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

pub use data::Data;
pub use domain::{DEFAULT_JUDGE_MODEL, DOMAINS, Domain, DomainCounts, DomainOptions, load};
pub use error::Tau2Error;
pub use prompt::GREETING;
pub use session::{Tau2Environment, Tau2Session};
pub use user::{UserGuidelines, user_guidelines};
