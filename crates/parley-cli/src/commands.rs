//! One module per command.

pub mod run;
pub mod stub;
pub mod tasks;
