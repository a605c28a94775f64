//! One module per command.

pub mod durable;
pub mod envs;
pub mod init;
pub mod inspect;
pub mod rewards;
pub mod run;
pub mod scores;
pub mod serve;
pub mod stub;
pub mod tasks;
pub mod view;
