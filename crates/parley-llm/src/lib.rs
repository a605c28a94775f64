//! A [`ModelClient`](parley_core::ModelClient) for OpenAI-compatible Chat Completions endpoints
//! (OpenAI, vLLM, SGLang, llama.cpp, `parley stub`).
//!
//! Invariants: an API key is read from the environment variable the config names and lives only
//! in the HTTP client's headers; its value is registered with `parley_http::secrets`, so that an
//! endpoint that echoes it never gets it into a [`ModelCall`](parley_core::ModelCall) record, a
//! log line or an error message. Retries are bounded (`parley_http::RetryPolicy`, one budget for
//! every kind of failed attempt), honour `Retry-After` and the session's deadline, and every call
//! records its attempts, usage and latency. Timeouts, retries, body limits and concurrency limits
//! are tower layers around the HTTP service, not inline code. Answers never reach async-openai
//! unless they are a 2xx completion, since it logs the bodies it cannot read.

mod chat;
mod wire;

pub use chat::{ChatClient, ClientConfigError, EndpointConfig};
