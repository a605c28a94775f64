//! A [`ModelClient`](parley_core::ModelClient) for OpenAI-compatible Chat Completions endpoints
//! (OpenAI, vLLM, SGLang, llama.cpp, `parley stub`).
//!
//! Invariants: an API key is read from the environment variable the config names and lives only
//! in the HTTP client's headers; its value is registered with `parley_http::secrets`, so that an
//! endpoint that echoes it never gets it into a [`ModelCall`](parley_core::ModelCall) record, a
//! log line or an error message. Retries are bounded (`parley_http::RetryPolicy`, one budget for
//! every kind of failed attempt), honour `Retry-After` and the session's deadline, and every call
//! records its attempts, usage and latency. Timeouts, retries, body limits and concurrency limits
//! are tower layers around the HTTP service, not inline code. A request's body is serialized
//! once and sent and stored as those bytes; an answer is read once, by the policy that accepts
//! it as a completion, and stored as it came.

mod chat;
mod wire;

pub use chat::{ChatClient, ClientConfigError, EndpointConfig};
