//! One remote HTTP server behind a tower stack: bounded retries ([`retry`]), a concurrency
//! limit shared by every session of the server, and a timeout on each attempt that covers the
//! whole exchange, body included.
//!
//! Owns: how bytes go to a server and come back. Never interprets a body: the callers
//! (NeMo Gym, Gymnasium) decide what a status or a body means.

pub mod cookies;
pub mod retry;

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, COOKIE, SET_COOKIE};
use serde_json::Value;
use tokio::sync::Semaphore;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

use crate::error::{RemoteError, head};
pub use cookies::CookieJar;
pub use retry::Retry;
use retry::{GaveUp, RetryPolicy};

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

/// One request through the stack, and which failures it may be retried after.
#[derive(Debug)]
pub(crate) struct Call {
    pub request: reqwest::Request,
    pub retry: Retry,
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
            body: head(&self.body, 300),
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
                body: head(&self.body, 500),
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
        let exchange_client = client.clone();
        let limit = options.max_response_bytes;
        let exchange = tower::service_fn(move |call: Call| {
            let client = exchange_client.clone();
            async move { exchange(&client, call.request, limit).await }
        });
        let service = ServiceBuilder::new()
            .retry(RetryPolicy { max_retries: options.max_retries, base_backoff: options.backoff, attempts: 0 })
            .layer(GlobalConcurrencyLimitLayer::with_semaphore(Arc::new(Semaphore::new(
                options.max_concurrency.max(1),
            ))))
            .timeout(options.timeout)
            .service(exchange);
        Ok(HttpServer {
            name: name.into(),
            base: base.into(),
            client,
            service: BoxCloneSyncService::new(service),
            timeout: options.timeout,
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
        let call = format!("POST {path}");
        let bytes = serde_json::to_vec(body).map_err(|e| RemoteError::Protocol {
            server: self.label(),
            call: call.clone(),
            cause: format!("the body is not serializable: {e}"),
        })?;
        let mut builder = self.client.post(format!("{}{path}", self.base)).header(CONTENT_TYPE, "application/json");
        if let Some(cookie) = jar.as_deref().and_then(CookieJar::header) {
            builder = builder.header(COOKIE, cookie);
        }
        let request = builder.body(bytes).build().map_err(|e| RemoteError::Protocol {
            server: self.label(),
            call: call.clone(),
            cause: format!("could not build the request: {e}"),
        })?;
        let result = self.service.clone().oneshot(Call { request, retry }).await;
        let exchange = result.map_err(|e| self.classify(&call, e))?;
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

    fn classify(&self, call: &str, error: BoxError) -> RemoteError {
        let (attempts, error) = match error.downcast::<GaveUp>() {
            Ok(gave_up) => (gave_up.attempts, gave_up.source),
            Err(error) => (1, error),
        };
        let (server, call) = (self.label(), call.to_owned());
        if error.is::<tower::timeout::error::Elapsed>() {
            return RemoteError::Timeout { server, call, timeout: self.timeout, attempts };
        }
        if let Some(too_large) = error.downcast_ref::<TooLarge>() {
            return RemoteError::Malformed { server, call, cause: too_large.to_string(), body: String::new() };
        }
        match error.downcast_ref::<reqwest::Error>() {
            Some(e) if e.is_connect() => RemoteError::Connect { server, call, attempts, cause: chain(e) },
            Some(e) => RemoteError::Transport { server, call, attempts, cause: chain(e) },
            None => RemoteError::Transport { server, call, attempts, cause: error.to_string() },
        }
    }
}

/// An answer whose body passed [`ServerOptions::max_response_bytes`].
#[derive(Debug, thiserror::Error)]
#[error("the body is larger than the limit of {limit} bytes")]
struct TooLarge {
    limit: usize,
}

async fn exchange(client: &reqwest::Client, request: reqwest::Request, limit: usize) -> Result<Exchange, BoxError> {
    let mut response = client.execute(request).await?;
    let status = response.status().as_u16();
    let set_cookies =
        response.headers().get_all(SET_COOKIE).iter().filter_map(|v| v.to_str().ok()).map(str::to_owned).collect();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(TooLarge { limit }.into());
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if bytes.len() + chunk.len() > limit {
            return Err(TooLarge { limit }.into());
        }
        bytes.extend_from_slice(&chunk);
    }
    let body = String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    Ok(Exchange { status, retry_after, set_cookies, body })
}

/// An error and its causes in one line ("error sending request: connection refused").
fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
