//! A [`ModelClient`](parley_core::ModelClient) for OpenAI-compatible Chat Completions endpoints
//! (OpenAI, vLLM, SGLang, llama.cpp, `parley stub`).
//!
//! Invariants: an API key is read from the environment variable the config names and lives only
//! in the HTTP client's headers; it never reaches a [`ModelCall`](parley_core::ModelCall) record,
//! a log line or an error message. Retries are bounded, honour `Retry-After`, and every call
//! records its attempts, usage and latency. Timeouts, retries and concurrency limits are tower
//! layers around the HTTP service, not inline code.

mod body;
mod chat;
mod retry;
mod wire;

pub use chat::{ChatClient, ClientConfigError, EndpointConfig};
pub use retry::RetryLayer;
