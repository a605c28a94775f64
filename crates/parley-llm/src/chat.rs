//! The Chat Completions client: each call one POST of its body, serialized once, through the one
//! client stack of every remote call (`parley_http::client::stack`: retries, per-attempt
//! timeout and bounded body read) on its endpoint's pool, holding one of the endpoint's slots
//! (`parley_http::client::Endpoint`) from before its body is built.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::Uri;
use http::header::{AUTHORIZATION, HeaderMap};
use parley_core::deadline::{Deadline, OpenCall};
use parley_core::{
    ChatForm, ChatReply, ChatRequest, ModelCall, ModelClient, ModelFailure, ModelFailureKind, RawJson, Ready,
    ReasoningField, ReasoningReplay,
};
use parley_http::client::{ClientError, Endpoint, Limits, Slot, Stack, base, bearer, endpoint, stack, uri};
use parley_http::{Answer, Attempt, Failure, Request, excerpt, json_headers};
use serde_json::Value;
use tower::ServiceExt;

use crate::wire;

/// A completion as [`wire::parse_reply`] reads it.
type Parsed = (parley_core::Message, Option<String>, parley_core::Usage);

tokio::task_local! {
    /// The reply the stack's policy read when it accepted the answer, handed to [`ChatClient::chat`]
    /// (the stack runs in the caller's task) so that the body is parsed once, not twice. Boxed:
    /// a task-local's value moves in and out of its thread's slot at every poll of the call.
    static ACCEPTED: RefCell<Option<Box<Parsed>>>;
}

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
    /// Whether calls ask for token ids and log-probs (a policy serving an RL trainer) and send
    /// earlier turns back with theirs.
    pub token_ids: bool,
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
            token_ids: false,
        }
    }
}

impl EndpointConfig {
    /// The limits of the one client stack for this endpoint (the first backoff is the stack's).
    pub fn limits(&self) -> Limits {
        Limits {
            timeout: self.timeout,
            max_retries: self.max_retries,
            max_concurrency: self.max_concurrency,
            max_response_bytes: self.max_response_bytes,
            ..Limits::default()
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
    /// The base URL, named without its user part.
    #[error("{}", parley_core::url::credentials_refused("the base URL", .0))]
    Credentials(String),
    #[error("could not build the HTTP client: {0}")]
    Http(String),
}

/// A [`ModelClient`] for one OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct ChatClient {
    /// `<base>/chat/completions`, parsed once.
    completions: Uri,
    /// The headers of every call: the JSON content type, and the key's when the endpoint has one.
    headers: Arc<HeaderMap>,
    service: Stack<Completion>,
    endpoint: Arc<str>,
    slots: Endpoint,
    form: ChatForm,
}

impl std::fmt::Debug for ChatClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The headers hold the key; never print them.
        f.debug_struct("ChatClient").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl ChatClient {
    pub fn new(config: &EndpointConfig) -> Result<ChatClient, ClientConfigError> {
        let base = match base(&config.base_url) {
            Ok(base) => base,
            Err(ClientError::Credentials(without)) => return Err(ClientConfigError::Credentials(without)),
            Err(_) => return Err(ClientConfigError::BadUrl(config.base_url.clone())),
        };
        let completions =
            uri(base, "/chat/completions").map_err(|_| ClientConfigError::BadUrl(config.base_url.clone()))?;
        let mut headers = HeaderMap::new();
        if let Some(var) = &config.api_key_env {
            let key = std::env::var(var).map_err(|_| ClientConfigError::MissingKey(var.clone()))?;
            if !key.is_empty() {
                headers.insert(AUTHORIZATION, bearer(&key).map_err(|e| ClientConfigError::Http(e.to_string()))?);
            }
        }
        let headers = json_headers(headers);
        let slots = endpoint(base, config.max_concurrency).map_err(|e| ClientConfigError::Http(e.to_string()))?;
        let service = stack(&config.limits(), &slots);
        let form = ChatForm { reasoning: ReasoningField::replayed(config.reasoning), tokens: config.token_ids };
        Ok(ChatClient { completions, headers, service, endpoint: base.into(), slots, form })
    }

    /// Sends the body's bytes as they are and takes the answer whole: the stack checks that it
    /// is a completion (so that one that is not is retried) and keeps what it read of it, and
    /// the body is stored as it came.
    async fn post(&self, body: &RawJson) -> Result<Answer, Failure> {
        let request = Request::post(
            self.completions.clone(),
            self.headers.clone(),
            Bytes::copy_from_slice(body.get().as_bytes()),
        );
        self.service.clone().oneshot(Completion(request, self.form.tokens)).await.map_err(Failure::of)
    }
}

/// A slot of this client's endpoint, taken by [`ModelClient::ready`] before the request exists.
struct Held {
    endpoint: Endpoint,
    _slot: Slot,
    _open: Option<OpenCall>,
}

#[async_trait]
impl ModelClient for ChatClient {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn ready(&self) -> Ready {
        // Waiting for the slot is waiting on the endpoint, as the call's own wait would be: a
        // session whose time runs out meanwhile is the endpoint's failure.
        let open = Deadline::current().map(|d| d.begin_call());
        Ready::new(Held { endpoint: self.slots.clone(), _slot: self.slots.slot().await, _open: open })
    }

    async fn chat(&self, request: ChatRequest<'_>) -> Result<ChatReply, ModelFailure> {
        let started = Instant::now();
        let held = request.ready.and_then(Ready::held::<Held>).is_some_and(|h| h.endpoint.is(&self.slots));
        // Every kind of failed attempt, a 200 that is not a completion included, is retried by
        // the one policy inside the stack, within one budget. Past the endpoint's bound, the
        // call waits for a slot before its body exists, and the sending (the stack's futures,
        // some kilobytes) is boxed only then: a session queued for a connection holds its
        // transcript and a small future, not a serialized copy of the transcript too. The policy
        // that accepts the answer keeps what it read of it, for the reply below.
        let (((result, body), attempts), accepted) = ACCEPTED
            .scope(RefCell::new(None), async {
                let tracked = parley_http::track(async {
                    let _slot = if held { None } else { Some(self.slots.slot().await) };
                    let body = wire::request_body(&request, self.form);
                    (Box::pin(self.post(&body)).await, body)
                })
                .await;
                (tracked, ACCEPTED.with(RefCell::take))
            })
            .await;
        let mut call = ModelCall {
            endpoint: self.endpoint.to_string(),
            latency: started.elapsed(),
            attempts,
            sampling: Some(request.sampling.clone()),
            ..ModelCall::default()
        };
        let failure = match result {
            // A 2xx is one the policy accepted as a completion, keeping what it read of it; a
            // body it did not read is read here, and one that is no completion is a malformed
            // answer. The body is stored as it came either way.
            Ok(answer) if answer.is_success() => {
                let reply =
                    accepted.map_or_else(|| wire::read_reply(&answer.body, self.form.tokens), |parsed| Ok(*parsed));
                let text = String::from_utf8(answer.body).ok();
                match reply {
                    Ok((message, finish_reason, usage)) => {
                        // Read whole as the reply just now: kept without a second parse.
                        call.response = text.map(RawJson::known);
                        call.usage = usage;
                        call.finish_reason = finish_reason;
                        call.request = body;
                        return Ok(ChatReply { message, call });
                    }
                    Err(why) => {
                        call.response = text.and_then(|text| RawJson::from_string(text).ok());
                        (ModelFailureKind::MalformedResponse, why)
                    }
                }
            }
            Ok(refused) => {
                let (kind, message, response) = refused_answer(refused);
                call.response = response;
                (kind, message)
            }
            Err(failure) => {
                let (kind, message, response) = classify(failure);
                call.response = response;
                (kind, message)
            }
        };
        call.request = body;
        call.error = Some(failure.1.clone());
        Err(ModelFailure {
            kind: failure.0,
            message: format!("{} after {attempts} attempt(s) to {}", failure.1, self.endpoint),
            call,
        })
    }
}

/// A request of this client: every call posts a chat completion, so a 2xx is accepted only when
/// its body is one (with readable token ids, when the client asks for them).
#[derive(Clone)]
struct Completion(Request, bool);

impl Attempt for Completion {
    type Request = Request;

    fn into_request(self) -> Request {
        self.0
    }

    fn resend(&self) -> Option<Completion> {
        Some(self.clone())
    }

    fn accept(&self, answer: &Answer) -> Result<(), String> {
        let parsed = wire::read_reply(&answer.body, self.1)?;
        // For the chat call this attempt is part of (the stack runs in its task); the last
        // attempt accepted is the answer it gets.
        let _ = ACCEPTED.try_with(|slot| *slot.borrow_mut() = Some(Box::new(parsed)));
        Ok(())
    }
}

/// The kind of a call that failed inside the stack, its message (quoting at most a bounded
/// prefix of any body), and the body to record when it is JSON.
fn classify(failure: Failure) -> (ModelFailureKind, String, Option<RawJson>) {
    match failure {
        Failure::Unaccepted(unaccepted) => {
            let response = RawJson::from_string(String::from_utf8_lossy(&unaccepted.body).into_owned()).ok();
            (ModelFailureKind::MalformedResponse, unaccepted.why, response)
        }
        Failure::Timeout => (ModelFailureKind::Timeout, Failure::Timeout.to_string(), None),
        too_large @ Failure::TooLarge(_) => (ModelFailureKind::MalformedResponse, too_large.to_string(), None),
        other @ (Failure::Unsendable(_) | Failure::Connect(_) | Failure::Transport(_)) => {
            (ModelFailureKind::Transport, other.to_string(), None)
        }
    }
}

/// A non-2xx answer: the endpoint's own report of an exceeded context window, or its status.
fn refused_answer(answer: Answer) -> (ModelFailureKind, String, Option<RawJson>) {
    let text = answer.text();
    let response = RawJson::from_string(text.clone()).ok();
    let reported: Option<Value> = serde_json::from_str(&text).ok();
    let api = reported.as_ref().and_then(|v| v.get("error"));
    let message = api.and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or_default().to_lowercase();
    let code = api.and_then(|e| e.get("code")).and_then(Value::as_str).unwrap_or_default();
    let kind = if code == "context_length_exceeded"
        || message.contains("context length")
        || message.contains("context window")
    {
        ModelFailureKind::ContextWindowExceeded
    } else {
        ModelFailureKind::Status(answer.status)
    };
    (kind, format!("HTTP {}: {}", answer.status, excerpt(&text)), response)
}
