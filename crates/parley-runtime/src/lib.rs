//! Parley's run machinery as a library: a run's typed settings, the environment they name, the
//! assembly of its parties, its tasks read lazily, and its sessions driven through the
//! scheduler with every turn in the store. `parley run`, `parley resume` and every other front
//! end start sessions here and only here.
//!
//! Invariant: no command line and no terminal. Front ends parse flags, show progress and print;
//! this crate reports bad settings as [`UsageError`] and everything else as errors with context.

pub mod catalogue;
pub mod curriculum;
pub mod datacheck;
pub mod durable;
pub mod environment;
pub mod error;
pub mod generate;
pub mod probe;
pub mod ranks;
pub mod rehearsal;
pub mod review;
pub mod rows;
pub mod runtime;
pub mod scores;
pub mod settings;
pub mod tasks;
pub mod worker;

pub use environment::{EnvKind, Environments, GymResource, GymServed, Judged, Tau2Domain};
pub use error::{UsageError, usage};
pub use parley_engine::{Job, SessionResult, Stop};
pub use rows::{Failure, Rollout};
pub use runtime::{Created, Pending, Runtime, prior, set_lease};
pub use settings::{Front, RunSettings};
pub use tasks::{StoredTasks, TaskSource};
pub use worker::{WORKER_RETRIES, Worked};
