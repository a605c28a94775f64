//! What every HTTP client of Parley shares: the Chat Completions client of `parley-llm`, the
//! remote servers and Responses client of `parley-remote` and the reward model of
//! `parley-rewards`; and what its servers (`parley serve`, `parley view`) check of a request,
//! [`guard`], and how they hold connections, [`server`].
//!
//! - [`client`]: the one stack every remote call goes through ([`client::stack`], under
//!   [`client::Limits`]), the endpoints (a connection pool and a bound on calls in flight for
//!   each, shared by the whole process), and [`Client`], a server behind it.
//! - [`RetryPolicy`]: the one retry policy, a [`tower::retry::Policy`] over [`Answer`]s, with
//!   the one backoff; it gives up at once when its next wait would outlast the session's
//!   [`Deadline`](parley_core::Deadline), and it retries a 2xx that the request does not
//!   [`accept`](Attempt::accept) within the same budget.
//! - [`WholeBodyLayer`]: reads each answer's body whole inside the stack, up to a size limit.
//! - [`secrets`]: the keys Parley holds, redacted from every body read here.
//! - [`excerpt`]: the bounded prefix of a body that errors and log lines quote.
//! - [`track`]: runs one logical call, counting its attempts and registering it with the
//!   session's deadline.
//!
//! Invariant: nothing leaves this crate's body reader with a registered key in it, and no error
//! or log line here quotes more than a bounded prefix of a body.

mod body;
pub mod client;
mod excerpt;
pub mod guard;
pub mod plain;
mod retry;
pub mod secrets;
pub mod server;
#[cfg(test)]
mod testing;

pub use body::{Answer, TooLarge, WholeBody, WholeBodyLayer};
pub use client::{Accept, Client, ClientError, Failure, Request, json_headers};
pub use excerpt::{error_chain, excerpt, excerpt_bytes};
pub use retry::{Attempt, GaveUp, Retry, RetryPolicy, Unaccepted, backoff, class_of_error, track};
