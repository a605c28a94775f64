//! One remote HTTP server behind a tower stack: bounded retries (`parley_http::RetryPolicy`, the
//! policy every HTTP client of Parley shares), a concurrency limit shared by every session of the
//! server, a timeout on each attempt, and a bounded body read under it
//! (`parley_http::WholeBodyLayer`, which also redacts every key Parley holds).
//!
//! Owns: how bytes go to a server and come back. Never interprets a body: the callers
//! (NeMo Gym, Gymnasium, the Responses client) decide what a status or a body means, and may
//! say which 2xx bodies they accept, so that others are retried within the same budget.

pub mod cookies;

use std::sync::Arc;
use std::time::Duration;

use parley_http::{Answer, Attempt, GaveUp, RetryPolicy, TooLarge, Unaccepted, WholeBodyLayer, excerpt, secrets};
use reqwest::header::{CONTENT_TYPE, COOKIE, SET_COOKIE};
use serde_json::Value;
use tokio::sync::Semaphore;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

use crate::error::RemoteError;
pub use cookies::CookieJar;
pub use parley_http::Retry;

/// Limits for every call to one server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerOptions {
    /// Limit for each attempt, body included.
    pub timeout: Duration,
    /// Retries after the first attempt (see [`Retry`] for which failures are retried).
    pub max_retries: u32,
    /// The first backoff; it doubles on each retry.
    pub backoff: Duration,
    /// Calls in flight to this server at once, over all sessions.
    pub max_concurrency: usize,
    /// Bytes of one answer's body read at most; a larger answer fails the call.
    pub max_response_bytes: usize,
}

impl Default for ServerOptions {
    fn default() -> ServerOptions {
        ServerOptions {
            timeout: Duration::from_secs(120),
            max_retries: 3,
            backoff: Duration::from_millis(100),
            max_concurrency: 64,
            max_response_bytes: 16 << 20,
        }
    }
}

/// Which 2xx bodies a call accepts; see [`Attempt::accept`].
pub type Accept = fn(&str) -> Result<(), String>;

/// One request through the stack, which failures it may be retried after, and which 2xx bodies
/// it accepts.
#[derive(Debug)]
pub(crate) struct Call {
    pub request: reqwest::Request,
    pub retry: Retry,
    pub accept: Option<Accept>,
}

impl Attempt for Call {
    fn resend(&self) -> Option<Call> {
        Some(Call { request: self.request.try_clone()?, retry: self.retry, accept: self.accept })
    }

    fn retry(&self) -> Retry {
        self.retry
    }

    fn accept(&self, answer: &Answer) -> Result<(), String> {
        self.accept.map_or(Ok(()), |accept| accept(&answer.text()))
    }
}

/// A whole answer: status, `Set-Cookie` values and the body text.
#[derive(Debug, Clone, Default)]
pub struct Exchange {
    pub status: u16,
    /// The `Retry-After` the server asked for, in seconds.
    pub retry_after: Option<Duration>,
    pub set_cookies: Vec<String>,
    pub body: String,
}

impl Exchange {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as JSON, or a [`RemoteError::Malformed`] naming the call.
    pub fn json(&self, server: &HttpServer, call: &str) -> Result<Value, RemoteError> {
        serde_json::from_str(&self.body).map_err(|e| RemoteError::Malformed {
            server: server.label(),
            call: call.to_owned(),
            cause: e.to_string(),
            body: excerpt(&self.body),
        })
    }

    /// This exchange if its status is 2xx, else a [`RemoteError::Status`].
    pub fn success(self, server: &HttpServer, call: &str) -> Result<Exchange, RemoteError> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(RemoteError::Status {
                server: server.label(),
                call: call.to_owned(),
                status: self.status,
                body: excerpt(&self.body),
            })
        }
    }
}

/// A server reached over HTTP, shared by every session that talks to it.
#[derive(Clone)]
pub struct HttpServer {
    name: Arc<str>,
    base: Arc<str>,
    client: reqwest::Client,
    service: BoxCloneSyncService<Call, Exchange, BoxError>,
    timeout: Duration,
    limit: usize,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer").field("name", &self.name).field("base", &self.base).finish_non_exhaustive()
    }
}

impl HttpServer {
    /// A server at `base_url` (`http://host:port`, any path prefix kept), called `name` in errors.
    pub fn new(name: &str, base_url: &str, options: &ServerOptions) -> Result<HttpServer, RemoteError> {
        HttpServer::with_bearer(name, base_url, options, None)
    }

    /// Like [`new`](Self::new), with `Authorization: Bearer <key>` on every request. The key
    /// lives only in the client's default headers, marked sensitive.
    pub fn with_bearer(
        name: &str,
        base_url: &str,
        options: &ServerOptions,
        key: Option<&str>,
    ) -> Result<HttpServer, RemoteError> {
        let base = base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(RemoteError::Config(format!("`{base_url}` is not an http(s) URL for server `{name}`")));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(key) = key.filter(|k| !k.is_empty()) {
            secrets::register(key);
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| RemoteError::Config(format!("the API key for `{name}` is not a valid header value")))?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .tcp_nodelay(true)
            .pool_max_idle_per_host(options.max_concurrency.max(1))
            .build()
            .map_err(|e| RemoteError::Config(format!("could not build an HTTP client: {e}")))?;
        let execute_client = client.clone();
        let execute = tower::service_fn(move |request: reqwest::Request| execute_client.execute(request));
        let service = ServiceBuilder::new()
            .map_response(Exchange::from)
            .retry(RetryPolicy::new(options.max_retries, options.backoff, Duration::from_secs(5)))
            .map_request(|call: Call| call.request)
            .layer(GlobalConcurrencyLimitLayer::with_semaphore(Arc::new(Semaphore::new(
                options.max_concurrency.max(1),
            ))))
            .timeout(options.timeout)
            .layer(WholeBodyLayer { limit: options.max_response_bytes })
            .service(execute);
        Ok(HttpServer {
            name: name.into(),
            base: base.into(),
            client,
            service: BoxCloneSyncService::new(service),
            timeout: options.timeout,
            limit: options.max_response_bytes,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// How errors name this server: its name and URL.
    pub fn label(&self) -> String {
        format!("server `{}` at {}", self.name, self.base)
    }

    /// Posts `body` as JSON to `path`, sending the jar's cookies and merging the answer's
    /// `Set-Cookie` into it. Any status is an `Ok`: the caller decides what it means.
    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        jar: Option<&mut CookieJar>,
        retry: Retry,
    ) -> Result<Exchange, RemoteError> {
        self.post_accepting(path, body, jar, retry, None).await.0
    }

    /// Like [`post`](Self::post), retrying a 2xx whose body `accept` refuses within the same
    /// budget as any failed attempt; also returns the attempts made.
    pub async fn post_accepting(
        &self,
        path: &str,
        body: &Value,
        jar: Option<&mut CookieJar>,
        retry: Retry,
        accept: Option<Accept>,
    ) -> (Result<Exchange, RemoteError>, u32) {
        let (result, attempts) = parley_http::track(self.send(path, body, jar, retry, accept)).await;
        (result.map_err(|(call, error)| self.classify(&call, error, attempts)), attempts)
    }

    async fn send(
        &self,
        path: &str,
        body: &Value,
        jar: Option<&mut CookieJar>,
        retry: Retry,
        accept: Option<Accept>,
    ) -> Result<Exchange, (String, BoxError)> {
        let call = format!("POST {path}");
        let bytes = serde_json::to_vec(body)
            .map_err(|e| (call.clone(), Unsendable(format!("the body is not serializable: {e}")).into()))?;
        let mut builder = self.client.post(format!("{}{path}", self.base)).header(CONTENT_TYPE, "application/json");
        if let Some(cookie) = jar.as_deref().and_then(CookieJar::header) {
            builder = builder.header(COOKIE, cookie);
        }
        let request = builder
            .body(bytes)
            .build()
            .map_err(|e| (call.clone(), Unsendable(format!("could not build the request: {e}")).into()))?;
        let result = self.service.clone().oneshot(Call { request, retry, accept }).await;
        let exchange = result.map_err(|e| (call, e))?;
        if let Some(jar) = jar {
            jar.merge(exchange.set_cookies.iter().map(String::as_str));
        }
        Ok(exchange)
    }

    /// Whether the server answers `GET path` with a 2xx (one attempt, for readiness polls).
    pub async fn is_up(&self, path: &str) -> bool {
        let url = format!("{}{path}", self.base);
        matches!(
            tokio::time::timeout(Duration::from_secs(2), self.client.get(url).send()).await,
            Ok(Ok(response)) if response.status().is_success()
        )
    }

    fn classify(&self, call: &str, error: BoxError, attempts: u32) -> RemoteError {
        let error = match error.downcast::<GaveUp>() {
            Ok(gave_up) => gave_up.source,
            Err(error) => error,
        };
        let (server, call) = (self.label(), call.to_owned());
        if let Some(Unsendable(cause)) = error.downcast_ref::<Unsendable>() {
            return RemoteError::Protocol { server, call, cause: cause.clone() };
        }
        if error.is::<tower::timeout::error::Elapsed>() {
            return RemoteError::Timeout { server, call, timeout: self.timeout, attempts };
        }
        if error.is::<TooLarge>() {
            let cause = format!("the body is larger than the limit of {} bytes", self.limit);
            return RemoteError::Malformed { server, call, cause, body: String::new() };
        }
        if let Some(unaccepted) = error.downcast_ref::<Unaccepted>() {
            let body = excerpt(&String::from_utf8_lossy(&unaccepted.body));
            return RemoteError::Malformed { server, call, cause: unaccepted.why.clone(), body };
        }
        let cause = parley_http::error_chain(error.as_ref());
        match error.downcast_ref::<reqwest::Error>() {
            Some(e) if e.is_connect() => RemoteError::Connect { server, call, attempts, cause },
            Some(_) => RemoteError::Transport { server, call, attempts, cause },
            None => RemoteError::Transport { server, call, attempts, cause },
        }
    }
}

/// A request that could not be built, so was never sent.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Unsendable(String);

impl From<Answer> for Exchange {
    fn from(answer: Answer) -> Exchange {
        let set_cookies = answer
            .headers
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|v| secrets::redact(v).into_owned())
            .collect();
        let retry_after = answer.retry_after();
        let body =
            String::from_utf8(answer.body).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        Exchange { status: answer.status, retry_after, set_cookies, body }
    }
}
