//! The one client stack of Parley's remote calls, and a client for one HTTP server built on it.
//!
//! [`stack`] puts the service that sends one attempt behind, outside in: the one retry policy
//! ([`RetryPolicy`], which honours the session's deadline), a concurrency limit shared by every
//! caller of the endpoint, a timeout on each attempt, and the bounded whole-body read
//! ([`WholeBodyLayer`], which redacts every registered key). The model client (`parley-llm`)
//! puts async-openai's transport in it; [`Client`] puts reqwest's, for every other call: NeMo
//! Gym and Gymnasium servers and the Responses client (`parley-remote`), and the reward model
//! (`parley-rewards`). [`Failure`] says what a failed call's error was, for each caller to report
//! in its own error type.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use tokio::sync::Semaphore;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use crate::body::{Answer, TooLarge, WholeBodyLayer};
use crate::retry::{Attempt, GaveUp, Retry, RetryPolicy, Unaccepted, backoff};
use crate::{error_chain, secrets};

/// The longest wait between two attempts, whatever the backoff has grown to.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The limits of every call to one endpoint or server.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Limit for each attempt, the body's read included.
    pub timeout: Duration,
    /// Retries after the first attempt (see [`Retry`] for which failures are retried).
    pub max_retries: u32,
    /// The first backoff; it doubles on each retry, up to [`MAX_BACKOFF`].
    pub backoff: Duration,
    /// Calls in flight to the endpoint at once, over every caller that shares the stack.
    pub max_concurrency: usize,
    /// Bytes of one answer's body read at most; a larger answer fails the attempt.
    pub max_response_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            timeout: Duration::from_secs(120),
            max_retries: 3,
            backoff: Duration::from_millis(200),
            max_concurrency: 64,
            max_response_bytes: 16 << 20,
        }
    }
}

impl Limits {
    /// The one retry policy under these limits.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(self.max_retries, self.backoff, MAX_BACKOFF)
    }

    /// The wait after failed attempt `attempt` (from 1), for a caller that retries outside the
    /// stack (connecting to an MCP server).
    pub fn backoff_after(&self, attempt: u32) -> Duration {
        backoff(self.backoff, MAX_BACKOFF, attempt)
    }
}

/// A stack of [`stack`]: attempts of type `A` in, whole answers out.
pub type Stack<A> = BoxCloneSyncService<A, Answer, BoxError>;

/// The one stack (see the module's docs) around `send`, which sends one attempt.
pub fn stack<A, S>(limits: &Limits, send: S) -> Stack<A>
where
    A: Attempt + Send + 'static,
    S: Service<A::Request, Response = reqwest::Response> + Clone + Send + Sync + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    let service = ServiceBuilder::new()
        .retry(limits.retry_policy())
        .map_request(A::into_request)
        .layer(GlobalConcurrencyLimitLayer::with_semaphore(Arc::new(Semaphore::new(limits.max_concurrency.max(1)))))
        .timeout(limits.timeout)
        .layer(WholeBodyLayer { limit: limits.max_response_bytes })
        .service(send);
    BoxCloneSyncService::new(service)
}

/// The connection pool of `base` for the whole process. Every client of an endpoint (the agent
/// and a simulated user served by the same one, every session's calls to one server) shares
/// its connections: a session uses one at a time, so separate pools would hold twice the sockets
/// and buffers (about half the memory of a run at 10,000 sessions). Keys travel in request
/// headers, never in the pool, so sharing it shares no credentials.
pub fn pool(base: &str, max_concurrency: usize) -> Result<reqwest::Client, ClientError> {
    static POOLS: OnceLock<Mutex<HashMap<String, reqwest::Client>>> = OnceLock::new();
    let mut pools = POOLS.get_or_init(Mutex::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(http) = pools.get(base) {
        return Ok(http.clone());
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(max_concurrency.max(1))
        .tcp_nodelay(true)
        .build()
        .map_err(|e| ClientError::Http(e.to_string()))?;
    pools.insert(base.to_owned(), http.clone());
    Ok(http)
}

/// Why a client could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("`{0}` is not an http(s) URL")]
    BadUrl(String),
    #[error("the API key is not a valid header value")]
    BadKey,
    #[error("could not build the HTTP client: {0}")]
    Http(String),
}

/// Which 2xx bodies a call accepts; see [`Attempt::accept`].
pub type Accept = fn(&[u8]) -> Result<(), String>;

/// One request of a [`Client`], which failures it may be retried after, and which 2xx bodies it
/// accepts.
#[derive(Debug)]
pub struct Post {
    request: reqwest::Request,
    retry: Retry,
    accept: Option<Accept>,
}

impl Attempt for Post {
    type Request = reqwest::Request;

    fn into_request(self) -> reqwest::Request {
        self.request
    }

    fn resend(&self) -> Option<Post> {
        Some(Post { request: self.request.try_clone()?, retry: self.retry, accept: self.accept })
    }

    fn retry(&self) -> Retry {
        self.retry
    }

    fn accept(&self, answer: &Answer) -> Result<(), String> {
        self.accept.map_or(Ok(()), |accept| accept(&answer.body))
    }
}

/// A server reached over HTTP through the one stack, shared by every caller that talks to it,
/// with `Authorization: Bearer <key>` on every request when it was given a key.
#[derive(Clone)]
pub struct Client {
    base: Arc<str>,
    http: reqwest::Client,
    bearer: Option<HeaderValue>,
    service: Stack<Post>,
    limits: Limits,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The bearer header holds the key; never print it.
        f.debug_struct("Client").field("base", &self.base).finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the server at `base_url` (`http://host:port`, any path prefix kept). A key is
    /// registered with [`secrets`], so no body read afterwards carries it, and lives only in
    /// the header it is sent in, marked sensitive.
    pub fn new(base_url: &str, limits: &Limits, key: Option<&str>) -> Result<Client, ClientError> {
        let base = base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError::BadUrl(base_url.to_owned()));
        }
        let bearer = match key.filter(|k| !k.is_empty()) {
            Some(key) => {
                secrets::register(key);
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| ClientError::BadKey)?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let http = pool(base, limits.max_concurrency)?;
        let sender = http.clone();
        let send = tower::service_fn(move |request: reqwest::Request| sender.execute(request));
        let service = stack(limits, send);
        Ok(Client { base: base.into(), http, bearer, service, limits: limits.clone() })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Posts the JSON text `body` to `path` with `headers` beside the key's, through the stack:
    /// retried as `retry` allows, a 2xx that `accept` refuses within the same budget. Any status
    /// the retries leave is an `Ok`: the caller decides what it means. Also returns the attempts
    /// made; the call is registered with the session's deadline while it runs.
    pub async fn post_json(
        &self,
        path: &str,
        body: Vec<u8>,
        headers: HeaderMap,
        retry: Retry,
        accept: Option<Accept>,
    ) -> (Result<Answer, Failure>, u32) {
        let mut request = self.http.post(format!("{}{path}", self.base)).header(CONTENT_TYPE, "application/json");
        request = request.headers(headers);
        if let Some(bearer) = &self.bearer {
            request = request.header(AUTHORIZATION, bearer.clone());
        }
        let request = match request.body(body).build() {
            Ok(request) => request,
            Err(e) => return (Err(Failure::Unsendable(format!("could not build the request: {e}"))), 0),
        };
        let call = self.service.clone().oneshot(Post { request, retry, accept });
        let (result, attempts) = crate::track(call).await;
        (result.map_err(Failure::of), attempts)
    }

    /// Whether the server answers `GET path` with a 2xx (one attempt, for readiness polls).
    pub async fn is_up(&self, path: &str) -> bool {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(bearer) = &self.bearer {
            request = request.header(AUTHORIZATION, bearer.clone());
        }
        matches!(
            tokio::time::timeout(Duration::from_secs(2), request.send()).await,
            Ok(Ok(response)) if response.status().is_success()
        )
    }
}

/// What a call through the stack failed with, once its retries are spent.
#[derive(Debug)]
pub enum Failure {
    /// The request could not be built, so it was never sent.
    Unsendable(String),
    /// No whole answer within the per-attempt timeout.
    Timeout,
    /// The answer's body passed the limit.
    TooLarge(TooLarge),
    /// A 2xx whose body the request did not accept, with that (bounded, redacted) body.
    Unaccepted(Unaccepted),
    /// The server could not be reached: the request never left. The error chain, redacted.
    Connect(String),
    /// Any other failure on the way. The error chain, redacted.
    Transport(String),
}

impl Failure {
    /// The failure an error from inside the stack stands for (a call given up for the session's
    /// deadline stands for its last error).
    pub fn of(error: BoxError) -> Failure {
        let error = match error.downcast::<GaveUp>() {
            Ok(gave_up) => gave_up.source,
            Err(error) => error,
        };
        if error.is::<tower::timeout::error::Elapsed>() {
            return Failure::Timeout;
        }
        let error = match error.downcast::<TooLarge>() {
            Ok(too_large) => return Failure::TooLarge(*too_large),
            Err(error) => error,
        };
        let error = match error.downcast::<Unaccepted>() {
            Ok(unaccepted) => return Failure::Unaccepted(*unaccepted),
            Err(error) => error,
        };
        let chain = error_chain(error.as_ref());
        match error.downcast_ref::<reqwest::Error>() {
            Some(e) if e.is_connect() => Failure::Connect(chain),
            _ => Failure::Transport(chain),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unsendable(why) | Failure::Connect(why) | Failure::Transport(why) => f.write_str(why),
            Failure::Timeout => f.write_str("no answer within the per-call timeout"),
            Failure::TooLarge(too_large) => std::fmt::Display::fmt(too_large, f),
            Failure::Unaccepted(unaccepted) => std::fmt::Display::fmt(unaccepted, f),
        }
    }
}
