//! The Chat Completions client: one async-openai client per endpoint behind a tower stack of
//! retry, concurrency limit and per-attempt timeout.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use async_trait::async_trait;
use parley_core::{
    ChatReply, ChatRequest, ModelCall, ModelClient, ModelFailure, ModelFailureKind, RawJson, ReasoningReplay,
};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::Semaphore;
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;

use crate::body::{TooLarge, WholeBodyLayer};
use crate::retry::{ATTEMPTS, RetryLayer};
use crate::wire;

/// How to reach one endpoint.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Base URL up to and including `/v1`, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// The name of the environment variable that holds the API key, if the endpoint needs one.
    pub api_key_env: Option<String>,
    /// Limit for each attempt.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Calls in flight to this endpoint at once.
    pub max_concurrency: usize,
    /// Bytes of one response body read at most; a larger answer fails the attempt.
    pub max_response_bytes: usize,
    /// Whether earlier turns' reasoning goes back to the endpoint.
    pub reasoning: ReasoningReplay,
}

impl Default for EndpointConfig {
    fn default() -> EndpointConfig {
        EndpointConfig {
            base_url: "http://127.0.0.1:8000/v1".into(),
            api_key_env: None,
            timeout: Duration::from_secs(120),
            max_retries: 3,
            max_concurrency: 256,
            max_response_bytes: 16 << 20,
            reasoning: ReasoningReplay::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientConfigError {
    #[error(
        "the API key variable `{0}` is not set; export it, or leave `api_key_env` unset for endpoints without keys"
    )]
    MissingKey(String),
    #[error("`{0}` is not a base URL: use http://host:port/v1")]
    BadUrl(String),
    #[error("could not build the HTTP client: {0}")]
    Http(String),
}

/// A [`ModelClient`] for one OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct ChatClient {
    client: Client<OpenAIConfig>,
    endpoint: Arc<str>,
    max_retries: u32,
    reasoning: ReasoningReplay,
}

impl std::fmt::Debug for ChatClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The async-openai client holds the key; never print it.
        f.debug_struct("ChatClient").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl ChatClient {
    pub fn new(config: &EndpointConfig) -> Result<ChatClient, ClientConfigError> {
        let base = config.base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientConfigError::BadUrl(config.base_url.clone()));
        }
        let mut openai = OpenAIConfig::new().with_api_base(base);
        openai = match &config.api_key_env {
            Some(var) => {
                let key = std::env::var(var).map_err(|_| ClientConfigError::MissingKey(var.clone()))?;
                openai.with_api_key(key)
            }
            None => openai.with_api_key(""),
        };
        let http = shared_http(base, config.max_concurrency)?;
        let service = ServiceBuilder::new()
            .layer(RetryLayer {
                max_retries: config.max_retries,
                base_backoff: Duration::from_millis(200),
                max_backoff: Duration::from_secs(10),
            })
            .layer(GlobalConcurrencyLimitLayer::with_semaphore(Arc::new(Semaphore::new(config.max_concurrency.max(1)))))
            .timeout(config.timeout)
            .layer(WholeBodyLayer { limit: config.max_response_bytes })
            .service(ReqwestService::new(http.clone()));
        let client = Client::build(http, openai).with_http_service(service);
        Ok(ChatClient { client, endpoint: base.into(), max_retries: config.max_retries, reasoning: config.reasoning })
    }

    /// Sends the body's bytes as they are and takes the answer as text: it is parsed once to read
    /// the reply and stored as it came.
    async fn post(&self, body: &RawJson) -> Result<Box<RawValue>, OpenAIError> {
        self.client.chat().create_byot(body).await
    }
}

#[async_trait]
impl ModelClient for ChatClient {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
        let body = wire::request_body(&request, self.reasoning);
        let started = Instant::now();
        ATTEMPTS
            .scope(Cell::new(0), async {
                // Transport errors, timeouts, 429 and 5xx are retried by the tower layer. A 200
                // whose body is not a completion is retried here, within the same budget.
                let mut malformed_rounds = 0;
                loop {
                    let result = self.post(&body).await;
                    let mut retried = false;
                    let attempts = ATTEMPTS.with(Cell::get);
                    let mut call = ModelCall {
                        endpoint: self.endpoint.to_string(),
                        request: RawJson::default(),
                        response: None,
                        usage: Default::default(),
                        latency: started.elapsed(),
                        attempts,
                        error: None,
                    };
                    let failure = match result {
                        Ok(raw) => {
                            // It arrived as valid JSON, so it parses again.
                            let parsed: Value = serde_json::from_str(raw.get()).unwrap_or_default();
                            let response = RawJson::from_raw(raw);
                            match wire::parse_reply(&parsed) {
                                Ok((message, finish_reason, usage)) => {
                                    call.usage = usage;
                                    call.response = Some(response);
                                    call.request = body;
                                    return Ok(ChatReply { message, finish_reason, call });
                                }
                                Err(why) => {
                                    call.response = Some(response);
                                    (ModelFailureKind::MalformedResponse, format!("not a chat completion: {why}"))
                                }
                            }
                        }
                        Err(error) => {
                            // Errors from inside the stack (an oversized body, a timeout) were
                            // retried there already; a body that arrived whole but did not parse
                            // was not, so it is retried here.
                            retried = matches!(error, OpenAIError::Boxed(_));
                            classify(&error)
                        }
                    };
                    if failure.0 == ModelFailureKind::MalformedResponse
                        && !retried
                        && malformed_rounds < self.max_retries
                    {
                        malformed_rounds += 1;
                        continue;
                    }
                    call.request = body;
                    call.error = Some(failure.1.clone());
                    return Err(ModelFailure {
                        kind: failure.0,
                        message: format!("{} after {attempts} attempt(s) to {}", failure.1, self.endpoint),
                        call,
                    });
                }
            })
            .await
    }
}

/// One connection pool per endpoint for the whole process. The agent and a simulated user served
/// by the same endpoint then share connections: a session uses one at a time, so separate pools
/// would hold twice the sockets and buffers (about half the memory of a run at 10,000 sessions).
/// Keys travel in request headers, never in the pool, so sharing it shares no credentials.
fn shared_http(base: &str, max_concurrency: usize) -> Result<reqwest::Client, ClientConfigError> {
    static POOLS: OnceLock<Mutex<HashMap<String, reqwest::Client>>> = OnceLock::new();
    let mut pools = POOLS.get_or_init(Mutex::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(http) = pools.get(base) {
        return Ok(http.clone());
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(max_concurrency.max(1))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| ClientConfigError::Http(e.to_string()))?;
    pools.insert(base.to_owned(), http.clone());
    Ok(http)
}

fn classify(error: &OpenAIError) -> (ModelFailureKind, String) {
    match error {
        OpenAIError::ApiError(api) => {
            let text = api.api_error.message.to_lowercase();
            let code = api.api_error.code.as_deref().unwrap_or_default();
            if code == "context_length_exceeded" || text.contains("context length") || text.contains("context window") {
                (ModelFailureKind::ContextWindowExceeded, api.to_string())
            } else {
                (ModelFailureKind::Status(api.status_code.as_u16()), api.to_string())
            }
        }
        OpenAIError::JSONDeserialize(e, body) => {
            let head: String = body.chars().take(120).collect();
            (ModelFailureKind::MalformedResponse, format!("the body is not JSON ({e}): {head}"))
        }
        OpenAIError::Boxed(e) if e.is::<tower::timeout::error::Elapsed>() => {
            (ModelFailureKind::Timeout, "no answer within the per-call timeout".into())
        }
        OpenAIError::Boxed(e) if e.is::<TooLarge>() => (ModelFailureKind::MalformedResponse, e.to_string()),
        other => (ModelFailureKind::Transport, other.to_string()),
    }
}
