//! Chores on the repository rather than on Parley. One so far: `tidy`, the rules of the code
//! base that no compiler checks, run as ordinary tests (`cargo nextest run -p xtask`), as
//! rust-analyzer's `xtask/src/tidy.rs` runs its own.

#[cfg(test)]
mod tidy;
