//! Integration tests of parley-remote against real peers: NeMo Gym 0.7.0 resources and
//! Gymnasium servers, and the MCP reference server, all installed by `.ci/setup-peers` and
//! started locally by the tests. The policy is `parley-stub` on loopback or a scripted oracle.

mod agents;
mod driver;
mod faults;
mod gym_eval;
mod gymnasium;
mod mcp;
mod mcp_limits;
mod nemo_gym;
mod parsers;
mod peers;
mod responses;
