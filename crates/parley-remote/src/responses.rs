//! A [`ModelClient`] for endpoints that serve the OpenAI Responses API (`POST {base}/responses`),
//! which is what NeMo Gym rows (`responses_create_params`) and NeMo Gym's own model servers
//! speak. For Chat Completions endpoints (vLLM, llama.cpp) use `parley-llm`'s `ChatClient`.
//!
//! Owns: the translation of Parley messages and tools to Responses input items and back
//! ([`wire`]), and the HTTP calls, through the one client stack of every remote call (timeout
//! per attempt, bounded retries of transport errors, 408, 429 and 5xx honouring `Retry-After`, a
//! concurrency limit per endpoint). Invariant: the API key lives only in the header it is sent
//! in; it never reaches a [`ModelCall`], a log line or an error.

pub mod wire;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use parley_core::{
    ChatReply, ChatRequest, ModelCall, ModelClient, ModelFailure, ModelFailureKind, RawJson, ReasoningReplay,
};
use serde_json::Value;

use crate::error::RemoteError;
use crate::http::{HttpServer, Retry, ServerOptions};
use parley_http::excerpt;

/// How to reach one Responses endpoint.
#[derive(Debug, Clone)]
pub struct ResponsesConfig {
    /// Base URL up to and including `/v1`, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// The environment variable that holds the API key, if the endpoint needs one.
    pub api_key_env: Option<String>,
    pub timeout: Duration,
    pub max_retries: u32,
    pub max_concurrency: usize,
    /// Whether earlier turns' reasoning items go back to the endpoint.
    pub reasoning: ReasoningReplay,
}

impl Default for ResponsesConfig {
    fn default() -> ResponsesConfig {
        ResponsesConfig {
            base_url: "http://127.0.0.1:8000/v1".into(),
            api_key_env: None,
            timeout: Duration::from_secs(120),
            max_retries: 3,
            max_concurrency: 256,
            reasoning: ReasoningReplay::default(),
        }
    }
}

/// A [`ModelClient`] for one Responses endpoint.
#[derive(Debug, Clone)]
pub struct ResponsesClient {
    server: HttpServer,
    reasoning: ReasoningReplay,
}

impl ResponsesClient {
    pub fn new(config: &ResponsesConfig) -> Result<ResponsesClient, RemoteError> {
        let key = match &config.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                RemoteError::Config(format!(
                    "the API key variable `{var}` is not set; export it, or leave `api_key_env` unset"
                ))
            })?),
            None => None,
        };
        let options = ServerOptions {
            timeout: config.timeout,
            max_retries: config.max_retries,
            max_concurrency: config.max_concurrency,
            ..ServerOptions::default()
        };
        let server = HttpServer::with_bearer("responses endpoint", &config.base_url, &options, key.as_deref())?;
        Ok(ResponsesClient { server, reasoning: config.reasoning })
    }
}

#[async_trait]
impl ModelClient for ResponsesClient {
    fn endpoint(&self) -> &str {
        self.server.base_url()
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
        let body = wire::request_json(&request, self.reasoning);
        let started = Instant::now();
        let mut call = ModelCall {
            endpoint: self.endpoint().to_owned(),
            request: RawJson::from(&body),
            sampling: Some(request.sampling.clone()),
            ..ModelCall::default()
        };
        // A 200 whose body is not a Responses object is retried by the one policy, within the
        // same budget as every other failed attempt.
        let (result, attempts) =
            self.server.post_accepting("/responses", &body, None, Retry::Transient, Some(accept_response)).await;
        call.latency = started.elapsed();
        call.attempts = attempts;
        let (kind, message) = match result {
            Err(error) => {
                if let RemoteError::Malformed { body, .. } = &error {
                    call.response = RawJson::from_string(body.clone()).ok();
                }
                (kind_of(&error), error.to_string())
            }
            Ok(exchange) if !exchange.is_success() => {
                let text = exchange.body.to_lowercase();
                let kind = if text.contains("context_length_exceeded") || text.contains("context length") {
                    ModelFailureKind::ContextWindowExceeded
                } else {
                    ModelFailureKind::Status(exchange.status)
                };
                let message = format!("HTTP {}: {}", exchange.status, excerpt(&exchange.body));
                call.response = RawJson::from_string(exchange.body).ok();
                (kind, message)
            }
            Ok(exchange) => match serde_json::from_str::<Value>(&exchange.body)
                .map_err(|e| e.to_string())
                .and_then(|response| wire::parse_reply(&response).map(|reply| (reply, response)))
            {
                Ok(((message, finish_reason, usage), response)) => {
                    call.usage = usage;
                    call.finish_reason = finish_reason;
                    call.response = Some(RawJson::from(&response));
                    return Ok(ChatReply { message, call });
                }
                // The policy accepted it, so this does not happen; should it, it is malformed.
                Err(why) => (ModelFailureKind::MalformedResponse, format!("not a Responses object: {why}")),
            },
        };
        call.error = Some(message.clone());
        Err(ModelFailure { kind, message: format!("{message} ({attempts} attempt(s) to {})", self.endpoint()), call })
    }
}

/// Whether a 2xx body is a Responses object.
fn accept_response(body: &[u8]) -> Result<(), String> {
    let response: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    wire::parse_reply(&response).map(drop).map_err(|why| format!("not a Responses object: {why}"))
}

fn kind_of(error: &RemoteError) -> ModelFailureKind {
    match error {
        RemoteError::Timeout { .. } => ModelFailureKind::Timeout,
        RemoteError::Status { status, .. } => ModelFailureKind::Status(*status),
        RemoteError::Malformed { .. } => ModelFailureKind::MalformedResponse,
        _ => ModelFailureKind::Transport,
    }
}
