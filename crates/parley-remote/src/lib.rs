//! Environments over the wire.
//!
//! - [`NemoGymEnvironment`]: a NeMo Gym resources server (`/seed_session`, `/{tool}`,
//!   `/verify`, `/close_session`), one cookie jar per session; [`aggregate_metrics`] for
//!   NeMo Gym's own summary.
//! - [`GymnasiumEnvironment`] and [`GymnasiumUser`]: a NeMo Gym Gymnasium server (`/reset`,
//!   `/step`), whose follow-up user messages reach the agent through the user seam.
//! - [`NemoGymServers`]: starts the resources servers a NeMo Gym config names, as NeMo Gym
//!   does, and stops them (the whole process group) on shutdown or drop.
//! - [`McpEnvironment`]: tools from MCP servers over stdio or streamable HTTP, scored by one of
//!   `parley-rewards`' scorers (the same `Scorer` every reward uses), since MCP has no verify.
//! - [`ResponsesClient`]: a [`ModelClient`](parley_core::ModelClient) for OpenAI Responses
//!   endpoints (`POST {base}/responses`).
//!
//! Invariants: every remote call has a timeout, bounded retries and a per-server concurrency
//! limit; a server that dies or hangs fails its sessions with an [`EnvError`](parley_core::EnvError)
//! that names the server and the call, never a panic. This crate knows the seams of
//! `parley-core` and the scorers of `parley-rewards` only: it never depends on the engine, the
//! store or the CLI.

pub mod error;
pub mod gymnasium;
pub mod http;
pub mod launcher;
pub mod mcp;
pub mod nemo_gym;
pub mod responses;

pub use error::RemoteError;
pub use gymnasium::{GymnasiumEnvironment, GymnasiumUser};
pub use http::{CookieJar, HttpServer, Retry, ServerOptions};
pub use launcher::{LaunchOptions, NemoGymServers, ResourcesServer, RunningServer};
pub use mcp::{McpEnvironment, McpServerSpec, McpTransport};
pub use nemo_gym::{NemoGymEnvironment, aggregate_metrics, reward_from_verify};
pub use responses::{ResponsesClient, ResponsesConfig};
