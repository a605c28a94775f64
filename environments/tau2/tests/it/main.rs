//! Integration tests of the tau2 domains against the data in `../shared/data/tau2` (or
//! `PARLEY_TAU2_DATA`); without the data they fail.
//!
//! `reference` compares tool outputs and database hashes byte for byte with a reference file
//! produced by tau2's own Python code (`tests/data/tau2_reference.json`, see the README);
//! `tools` pins representative outputs and errors by hand; `scoring` crafts trajectories that
//! pass and fail each reward component; `loading` covers data discovery, tasks and prompts.

mod common;
mod loading;
mod reference;
mod scoring;
mod tools;
