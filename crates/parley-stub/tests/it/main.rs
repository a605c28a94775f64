//! Integration tests for parley-stub: the router driven with `oneshot`, and one real socket.

mod conversation;
mod faults;
mod probe;
mod requests;
mod serve;
mod stats;
mod support;
mod user;
