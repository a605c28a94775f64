//! The session state machine against scripted parties: one test per transition and per
//! termination reason this engine can reach without a user simulator.

mod parties;
mod session;
mod users;
