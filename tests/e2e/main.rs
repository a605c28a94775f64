//! End-to-end tests: the real `parley` binary against `parley stub` on a real loopback port,
//! with a real SQLite file (and, in `postgres`, a real PostgreSQL server).

mod aggregate;
mod agreement;
mod cluster;
mod crash;
mod deploy;
mod durable;
mod endpoint;
mod faults;
mod gym_agent;
mod harness;
mod hostile;
mod http;
mod llama;
mod messages;
mod nemo_rl;
mod net_faults;
mod openenv;
mod owners;
mod postgres;
mod probe;
mod reliability;
mod remote;
mod rewards;
mod run;
mod serve;
mod tau2;
mod tau2_export;
mod tau2_fidelity;
mod tau2_user;
mod tokens;
mod tutorial;
mod usage;
mod user_review;
mod users;
mod view;
