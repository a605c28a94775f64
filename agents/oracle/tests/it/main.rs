//! The oracle against the real tau2 domains: it drives every task of every domain through
//! `EnvSession::call` (agent turns from `Oracle::act`, user turns from the user's gold
//! actions), scores, and checks that every task scores 1.0 except the documented exceptions.
//! Needs the tau2 data (`PARLEY_TAU2_DATA` or `../shared/data/tau2`); skipped without it.

mod drive;
